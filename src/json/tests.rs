use super::number::js_number;
use super::*;
use proptest::strategy::Strategy as _;

/// Numbers are read correctly rounded, as JavaScript's `JSON.parse` reads them, and
/// print back to the same double: the in-memory fold and the projection (which stores
/// text and reads it again) agree. Without serde_json's `float_roundtrip` the first
/// literal, found by `bad_input::arbitrary_state_event_data_never_panics_a_read`, was
/// read one ulp off and printed as another number.
#[test]
fn floats_are_read_correctly_rounded_and_print_back_to_the_same_double() {
    for lit in [
        "-1.9370190715706603e+113",
        "2.2250738585072011e-308",
        "1.7976931348623157e308",
        "0.1",
        "5e-324",
        "123456.789e-30",
    ] {
        let v = from_str(lit).unwrap();
        let want: f64 = lit.parse().unwrap();
        assert_eq!(v.as_f64(), Some(want), "{lit}");
        let again = from_str(&to_string_exact(&v)).unwrap();
        assert_eq!(again.as_f64(), Some(want), "{lit} printed and read again");
    }
}

#[test]
fn lone_surrogates_round_trip_in_strings_and_keys() {
    for text in [
        r#""\ud83d""#,
        r#""\udc00""#,
        r#"{"\ud83dk":["x\ud83d","\ude00y"]}"#,
        r#""\ud83d\ud83d""#,
        r#""\ud83dabcd""#,
        r#""\ude00\ud83d""#,
    ] {
        let v = from_str(text).unwrap();
        assert_eq!(to_string(&v), text, "{text}");
    }
    // Uppercase escapes read as the same JavaScript string, printed as JS prints it.
    assert_eq!(to_string(&from_str(r#""\uD83D""#).unwrap()), r#""\ud83d""#);
    // A pair is an ordinary character.
    assert_eq!(from_str(r#""\ud83d\ude00""#).unwrap(), Value::from("😀"));
}

/// Printing into a string that already holds text gives, after that text, exactly what
/// printing alone gives: values (infinity markers, lone surrogates, a genuine marker,
/// escapes, key order) and string literals (the plain ones copied, the others escaped).
#[test]
fn printing_after_existing_text_adds_the_same_text_as_printing_alone() {
    let texts = [
        r#"{"b":1,"a":[1.0,-0.0,"x"],"\ud83dk":["x\ud83d","\ude00y"]}"#,
        r#""\ud83d""#,
        "\"\u{10FFFF}d83d\"",
        // Plane 16 beside the marker: its first byte (0xF4) takes the careful path.
        "\"\u{100000}x\u{10FFFD}\"",
        r#""a\"b\\c\n\u0001\u2028é😀""#,
        r#""a\"b""#,
        r#""a\\b""#,
        r#""a\nb""#,
        r#""\u001f""#,
        r#""plain é 😀 \u007f""#,
        r#"{"inf":1e400,"n":null,"t":true}"#,
        r#""""#,
    ];
    for text in texts {
        let v = from_str(text).unwrap();
        let mut out = String::from("{\"pre\":");
        push_exact(&mut out, &v);
        assert_eq!(out, format!("{{\"pre\":{}", to_string_exact(&v)), "{text}");
        if let Value::String(s) = &v {
            let mut lit = String::from("[é,");
            push_str_literal(&mut lit, s);
            // A string literal is never an infinity: printed as a key would be.
            let mut key = serde_json::Map::new();
            key.insert(s.clone(), Value::Null);
            let as_key = to_string_exact(&Value::Object(key));
            let expected = &as_key[1..as_key.len() - ":null}".len()];
            assert_eq!(lit, format!("[é,{expected}"), "{text}");
        }
    }
    let mut lit = String::new();
    push_str_literal(&mut lit, "1e400");
    assert_eq!(lit, r#""1e400""#);
}

#[test]
fn a_genuine_marker_is_kept_and_not_confused_with_an_escape() {
    let raw = "\"\u{10FFFF}d83d\"";
    let v = from_str(raw).unwrap();
    assert_eq!(v, Value::from("\u{10FFFF}\u{10FFFF}d83d"));
    assert_eq!(to_string(&v), raw);
    let esc = from_str(r#""\udbff\udfff""#).unwrap();
    assert_eq!(to_string(&esc), "\"\u{10FFFF}\"");
    assert_ne!(from_str(r#""\ud83d""#).unwrap(), v);
}

#[test]
fn deep_nesting_reads_up_to_the_limit_and_is_refused_beyond() {
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let v = from_str(&nest(MAX_READ_DEPTH)).unwrap();
    assert_eq!(to_string(&v), nest(MAX_READ_DEPTH));
    let e = from_str(&nest(MAX_READ_DEPTH + 1)).unwrap_err();
    assert!(matches!(e, JsonError::TooDeep { offset, .. } if offset == MAX_READ_DEPTH));
    // Far deeper: refused without recursing.
    assert!(matches!(
        from_str(&nest(1_000_000)),
        Err(JsonError::TooDeep { .. })
    ));
    // Brackets inside strings do not count.
    let s = format!("\"{}\"", "[".repeat(10_000));
    assert!(from_str(&s).is_ok());
}

/// Parsing, patching, copying, comparing, printing, deserializing and dropping a
/// value at the limit fits in a thread with half of Rust's default 2 MiB stack: every
/// step but the drop grows its stack on the heap, and the drop (serde_json's own,
/// recursive) takes about 70 bytes a level in this profile (measured), 350 KiB here.
#[test]
fn a_value_at_the_depth_limit_fits_in_a_small_stack() {
    let text = format!(
        "{}0{}",
        "[{\"k\":".repeat(MAX_READ_DEPTH / 2),
        "}]".repeat(MAX_READ_DEPTH / 2)
    );
    let out = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(move || {
            let v = from_str(&text).unwrap();
            let mut doc = clone_value(&v);
            merge_patch(&mut doc, &v);
            assert!(js_eq(&doc, &v));
            let typed: Value = deserialize(&v).unwrap();
            assert!(js_eq(&typed, &v));
            assert!(check_numbers(&v).is_ok());
            let exact = from_str(&to_string_exact(&v)).unwrap();
            assert!(js_eq(&exact, &v));
            (
                to_string(&doc) == text,
                to_string_pretty(&v).len() > text.len(),
            )
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(out, (true, true));
}

/// A record's `Value` field ([`serialize_value`], as `StoredValue` and `HistoryEntry`
/// use it) comes out of `serde_json::to_value` equal, in the encoding (lone surrogates,
/// ±Infinity, `1.0` and `-0.0` as held), at the depth limit in a thread with half of
/// Rust's default stack: the CLI's `--json` and the Pi package's addon print records so.
#[test]
fn a_records_value_serializes_equal_at_any_depth() {
    #[derive(serde::Serialize)]
    struct Record {
        #[serde(serialize_with = "serialize_value")]
        value: Value,
        #[serde(
            skip_serializing_if = "Option::is_none",
            serialize_with = "serialize_some_value"
        )]
        absent: Option<Value>,
    }
    let text = format!(
        "{}{}{}",
        "[{\"k\":".repeat(MAX_READ_DEPTH / 2 - 1),
        r#"["cut \ud83d", 1e400, -1e400, 1.0, -0.0, 123456789012345678, {"10": 1, "9": 2}]"#,
        "}]".repeat(MAX_READ_DEPTH / 2 - 1)
    );
    let out = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(move || {
            let value = from_str(&text).unwrap();
            let record = Record {
                value: clone_value(&value),
                absent: None,
            };
            let v = serde_json::to_value(&record).unwrap();
            let keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            (
                keys,
                to_string_exact(&v["value"]) == to_string_exact(&value),
            )
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(out, (vec!["value".to_owned()], true));
}

/// What JavaScript's `JSON.parse` then `JSON.stringify` make of each literal
/// (Node 22, `JSON.stringify(JSON.parse("[" + literal + "]"))`), and what we print.
#[test]
fn numbers_are_read_as_javascript_reads_them() {
    let zeros = |n: usize| format!("1{}", "0".repeat(n));
    for (literal, js) in [
        ("123456789012345678", "123456789012345680"),
        ("9007199254740993", "9007199254740992"),
        ("-9007199254740993", "-9007199254740992"),
        ("18446744073709551615", "18446744073709552000"),
        ("-18446744073709551616", "-18446744073709552000"),
        ("1152921504606846976", "1152921504606847000"),
        ("12345678901234567890123", "1.2345678901234568e+22"),
        ("1e400", "null"),
        ("-1E+999", "null"),
        ("1e-400", "0"),
        ("-0", "0"),
        ("4.9e-325", "0"),
        ("123456789012345678.0", "123456789012345680"),
        ("1.5e-9223372036854775808", "0"),
        ("9007199254740992", "9007199254740992"),
        ("100000000000000000000", "100000000000000000000"),
        ("999999999999999999999", "1e+21"),
        (&zeros(308), "1e+308"),
        (&zeros(309), "null"),
        ("0.1e310", "null"),
    ] {
        let v = from_str(&format!("[{literal}]")).unwrap();
        assert_eq!(to_string(&v), format!("[{js}]"), "{literal}");
        // The stored form reads back as the same value.
        let again = from_str(&to_string_exact(&v)).unwrap();
        assert_eq!(again, v, "{literal}: {}", to_string_exact(&v));
    }
    // An integer beyond 2^53 is kept as the integer JavaScript prints: typed reads
    // of it still work.
    let v = from_str(r#"{"n":123456789012345678,"m":-123456789012345678}"#).unwrap();
    assert_eq!(v["n"].as_u64(), Some(123_456_789_012_345_680));
    assert_eq!(v["m"].as_i64(), Some(-123_456_789_012_345_680));
    assert!(
        check_numbers(&v).is_ok(),
        "JavaScript gives it back as it is now"
    );
    // Numbers inside strings and keys are text.
    let v = from_str(r#"{"123456789012345678":"1e400"}"#).unwrap();
    assert_eq!(to_string(&v), r#"{"123456789012345678":"1e400"}"#);
    // A number where a key must stand stays invalid JSON.
    for bad in [
        r#"{1e400:1}"#,
        r#"{"a":1,1e400:2}"#,
        "[1e400",
        "[01e400]",
        "[1e400e]",
    ] {
        assert!(from_str(bad).is_err(), "{bad}");
    }
}

/// ±Infinity is carried as Pi's JavaScript carries it: a patch sets it (it is not
/// `null`), it equals only itself, prints `null`, is stored as `1e400`, and a value
/// holding it is refused as a new value to write.
#[test]
fn infinity_is_carried_printed_null_and_refused_as_a_new_value() {
    let v = from_str("[1e400,-1e400]").unwrap();
    assert_eq!(v, serde_json::json!([INFINITY, NEG_INFINITY]));
    assert_eq!(
        (infinity(&v[0]), infinity(&v[1])),
        (Some(false), Some(true))
    );
    assert_eq!(to_string(&v), "[null,null]");
    assert_eq!(to_string_pretty(&v), "[\n  null,\n  null\n]");
    assert_eq!(to_string_exact(&v), "[1e400,-1e400]");
    let mut doc = from_str(r#"{"a":1}"#).unwrap();
    merge_patch(&mut doc, &from_str(r#"{"a":1e400,"b":1e999}"#).unwrap());
    assert_eq!(to_string(&doc), r#"{"a":null,"b":null}"#);
    assert!(!js_eq(&doc, &from_str(r#"{"a":null,"b":null}"#).unwrap()));
    assert!(js_eq(&doc, &from_str(r#"{"b":2e308,"a":1E400}"#).unwrap()));
    assert!(!js_eq(&v[0], &v[1]));
    assert!(matches!(
        check_numbers(&doc),
        Err(JsonError::NonFinite { negative: false })
    ));
    assert!(
        check_numbers(&v[1])
            .unwrap_err()
            .to_string()
            .contains("-Infinity")
    );
    // A genuine string that looks like the encoding is another value.
    let s = from_str("\"\u{10FFFF}Infinity\"").unwrap();
    assert_eq!(infinity(&s), None);
    assert_eq!(to_string(&s), "\"\u{10FFFF}Infinity\"");
    // Given on the command line, it is refused as inexact.
    match from_str_exact(r#"{"a":1e400}"#) {
        Err(JsonError::InexactNumber { nearest, .. }) => assert_eq!(nearest, "Infinity"),
        other => panic!("{other:?}"),
    }
}

/// The literal checks never overflow on an exponent at the ends of an `i64` (this
/// panicked with "attempt to subtract with overflow" in `decimal`), or beyond it.
#[test]
fn extreme_exponents_are_judged_without_overflow() {
    for (literal, nearest) in [
        ("1.5e-9223372036854775808", Some("0")),
        ("-1.5e-9223372036854775808", Some("0")),
        ("15e-9223372036854775808", Some("0")),
        ("1.5e9223372036854775807", Some("Infinity")),
        ("10e9223372036854775807", Some("Infinity")),
        ("1.5e-99999999999999999999999", Some("0")),
        ("0.0e-9223372036854775808", None),
        ("0e99999999999999999999999", None),
    ] {
        let r = from_str_exact(literal);
        match (r, nearest) {
            (Ok(_), None) => {}
            (Err(JsonError::InexactNumber { nearest: n, .. }), Some(want)) => {
                assert_eq!(n, want, "{literal}")
            }
            (other, _) => panic!("{literal}: {other:?}"),
        }
        assert!(from_str(literal).is_ok(), "{literal}");
    }
}

proptest::proptest! {
    /// Any mantissa with any `i64` exponent (or a longer one): reading and judging it
    /// never panics, and what it reads as prints back to the same value.
    #[test]
    fn any_exponent_reads_and_is_judged_without_panicking(
        int in "-?[1-9][0-9]{0,20}",
        frac in proptest::option::of("[0-9]{1,20}"),
        exp in proptest::prop_oneof![
            proptest::prelude::any::<i64>().prop_map(|e| e.to_string()),
            proptest::prelude::Just(i64::MIN.to_string()),
            proptest::prelude::Just(i64::MAX.to_string()),
            "-?[0-9]{19,40}",
        ],
    ) {
        let literal = match frac {
            Some(f) => format!("{int}.{f}e{exp}"),
            None => format!("{int}e{exp}"),
        };
        let v = from_str(&literal).unwrap();
        let _ = from_str_exact(&literal);
        let _ = check_numbers(&v);
        proptest::prop_assert_eq!(from_str(&to_string_exact(&v)).unwrap(), v);
    }
}

/// `JSON.stringify` of a JavaScript string given as UTF-16 code units: the reference.
fn js_stringify(units: &[u16]) -> String {
    let mut out = String::from("\"");
    for r in char::decode_utf16(units.iter().copied()) {
        match r {
            Ok('"') => out.push_str("\\\""),
            Ok('\\') => out.push_str("\\\\"),
            Ok('\n') => out.push_str("\\n"),
            Ok('\r') => out.push_str("\\r"),
            Ok('\t') => out.push_str("\\t"),
            Ok('\u{8}') => out.push_str("\\b"),
            Ok('\u{c}') => out.push_str("\\f"),
            Ok(c) if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            Ok(c) => out.push(c),
            Err(e) => out.push_str(&format!("\\u{:04x}", e.unpaired_surrogate())),
        }
    }
    out.push('"');
    out
}

proptest::proptest! {
    /// Any JavaScript string, written with every code unit escaped (as a hand-written
    /// file may) or as `JSON.stringify` writes it, reads and prints back exactly as
    /// `JSON.stringify` prints it, as a value and as a key, and equal strings are
    /// equal values.
    #[test]
    fn any_javascript_string_round_trips(units in proptest::collection::vec(
        proptest::prop_oneof![
            0xD800u16..0xE000,
            0u16..0x80,
            proptest::prelude::Just(0xDBFFu16),
            proptest::prelude::Just(0xDFFFu16),
            proptest::prelude::any::<u16>(),
        ],
        0..12,
    )) {
        let expect = js_stringify(&units);
        let escaped: String = std::iter::once("\"".to_owned())
            .chain(units.iter().map(|u| format!("\\u{u:04X}")))
            .chain(std::iter::once("\"".to_owned()))
            .collect();
        let a = from_str(&expect).unwrap();
        let b = from_str(&escaped).unwrap();
        proptest::prop_assert_eq!(to_string(&a), expect.clone());
        proptest::prop_assert_eq!(to_string(&b), expect.clone());
        proptest::prop_assert!(js_eq(&a, &b));
        let obj = format!("{{{expect}:{expect}}}");
        proptest::prop_assert_eq!(to_string(&from_str(&obj).unwrap()), obj);
    }
}

#[test]
fn syntax_errors_stay_errors() {
    for bad in [r#""\ud83"#, r#""\u12"#, "[1,", r#"{"a" 1}"#, "\"\\x\""] {
        assert!(from_str(bad).is_err(), "{bad}");
    }
}

#[test]
fn equality_is_javascript_equality() {
    let v = |s: &str| from_str(s).unwrap();
    assert!(js_eq(&v("1"), &v("1.0")));
    assert!(js_eq(
        &v(r#"{"a":1,"b":[2.0]}"#),
        &v(r#"{"b":[2],"a":1.0}"#)
    ));
    assert!(js_eq(&v("9007199254740993"), &v("9007199254740992")));
    assert!(!js_eq(&v("1"), &v("2")));
    assert!(!js_eq(&v(r#"{"a":1}"#), &v(r#"{"a":1,"b":1}"#)));
    assert!(!js_eq(&v("[1]"), &v("[1,1]")));
    assert!(!js_eq(&v("null"), &v("0")));
    assert!(!js_eq(&v(r#""\ud83d""#), &v(r#""\ud83e""#)));
    assert!(js_eq_opt(None, None));
    assert!(!js_eq_opt(None, Some(&Value::Null)));
}

#[test]
fn exact_numbers_are_kept_and_inexact_ones_refused() {
    for ok in [
        "0",
        "-0",
        "1",
        "1.0",
        "1e3",
        "0.1",
        "-2.5E-3",
        "9007199254740992",
        "0.30000000000000004",
        "1e21",
        "1.7976931348623157e308",
        "5e-324",
        "0e99999999999999999999",
        r#"{"a":[1,2.50,"123456789012345678901234567890"]}"#,
    ] {
        assert!(from_str_exact(ok).is_ok(), "{ok}");
    }
    for (bad, nearest) in [
        ("123456789012345678901234567890", "1.2345678901234568e+29"),
        ("9007199254740993", "9007199254740992"),
        ("0.1000000000000000055511151231257827", "0.1"),
        ("1152921504606846976", "1152921504606847000"),
        ("[1, -18446744073709551615]", "-18446744073709552000"),
        ("1e-400", "0"),
    ] {
        match from_str_exact(bad) {
            Err(JsonError::InexactNumber { nearest: n, .. }) => assert_eq!(n, nearest),
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(check_numbers(&Value::from(u64::MAX)).is_err());
    assert!(check_numbers(&Value::from(1u64 << 53)).is_ok());
    assert!(check_numbers(&from_str("[1.5, 2, {\"a\": -3}]").unwrap()).is_ok());
}

#[test]
fn javascript_number_printing() {
    for (f, js) in [
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (-123.456, "-123.456"),
        (1.2345678901234568e29, "1.2345678901234568e+29"),
    ] {
        assert_eq!(js_number(f), js);
    }
    // JavaScript's key order: array-index keys first, ascending.
    let v = from_str(r#"{"b":1,"10":2,"a":3,"2":4,"01":5,"-1":6}"#).unwrap();
    assert_eq!(to_string(&v), r#"{"2":4,"10":2,"b":1,"a":3,"01":5,"-1":6}"#);
    // A patch that removes a key keeps the others in place, as `delete` does.
    let mut doc = from_str(r#"{"a":1,"b":2,"c":3}"#).unwrap();
    merge_patch(
        &mut doc,
        &from_str(r#"{"a":null,"d":{"x":null,"y":1}}"#).unwrap(),
    );
    assert_eq!(to_string(&doc), r#"{"b":2,"c":3,"d":{"y":1}}"#);
    // For storage, numbers stay as serde_json holds them: the text reads back `==`.
    let v = from_str(r#"{"b":1.0,"2":-0.0,"c":"\ud83d"}"#).unwrap();
    assert_eq!(to_string_exact(&v), r#"{"b":1.0,"2":-0.0,"c":"\ud83d"}"#);
    assert_eq!(from_str(&to_string_exact(&v)).unwrap(), v);
    // Values print as JSON.stringify prints what JSON.parse reads from the same text.
    let v = from_str(r#"{"a":1.0,"b":[1e21,1e-6,-0.0,2.5,10],"c":"\ud83d"}"#).unwrap();
    assert_eq!(
        to_string(&v),
        r#"{"a":1,"b":[1e+21,0.000001,0,2.5,10],"c":"\ud83d"}"#
    );
    assert_eq!(
        to_string_pretty(&from_str(r#"{"a":[1.0]}"#).unwrap()),
        "{\n  \"a\": [\n    1\n  ]\n}"
    );
}

/// Integers up to 2^53 in magnitude pass without the literal's check; the next ones are
/// still refused, as integers JavaScript would not give back.
#[test]
fn integers_pass_up_to_two_to_the_53rd() {
    const MAX: u64 = 1 << 53;
    for ok in [
        serde_json::json!(MAX),
        serde_json::json!(-(MAX as i64)),
        serde_json::json!([0, 1, -1, u32::MAX]),
    ] {
        assert!(check_numbers(&ok).is_ok(), "{ok}");
    }
    for bad in [
        serde_json::json!(MAX + 1),
        serde_json::json!(-(MAX as i64) - 1),
        serde_json::json!({"n": u64::MAX}),
        serde_json::json!(i64::MIN),
    ] {
        assert!(check_numbers(&bad).is_err(), "{bad}");
    }
}

proptest::proptest! {
    /// The one walk answers as the naive models: the depth by recursion, and the number
    /// named as the recursive search names it.
    #[test]
    fn one_walk_finds_the_depth_and_the_number_the_naive_models_find(
        v in json_values(),
    ) {
        let (depth, numbers) = depth_and_numbers(&v);
        proptest::prop_assert_eq!(depth, naive_depth(&v));
        let expected = naive_bad_number(&v).map_or(Ok(()), Err);
        proptest::prop_assert_eq!(&numbers.map_err(|e| e.to_string()), &expected);
        proptest::prop_assert_eq!(&check_numbers(&v).map_err(|e| e.to_string()), &expected);
    }
}

/// The nesting depth by recursion: a scalar 0, a container one more than its deepest
/// member.
fn naive_depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(naive_depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(naive_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The message of the number JavaScript would not give back, by recursion over the
/// members last to first: ±Infinity, or an integer whose nearest double does not print
/// as its own digits (below 1e21, JavaScript prints an integral double in full, as
/// Rust's `Display` does). A float is a double already, and prints back to itself.
fn naive_bad_number(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) if !n.is_f64() => {
            let literal = n.to_string();
            let nearest = format!("{}", n.as_f64().unwrap());
            (nearest != literal).then(|| JsonError::InexactNumber { literal, nearest }.to_string())
        }
        Value::String(s) if s == INFINITY || s == NEG_INFINITY => Some(
            JsonError::NonFinite {
                negative: s == NEG_INFINITY,
            }
            .to_string(),
        ),
        Value::Array(a) => a.iter().rev().find_map(naive_bad_number),
        Value::Object(o) => o.values().rev().find_map(naive_bad_number),
        _ => None,
    }
}

/// Values with every kind of number the checks tell apart (integers around 2^53, floats,
/// strings standing for ±Infinity), nested up to a few levels, 0 to 20 members wide.
fn json_values() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        ((1u64 << 53) - 2..(1u64 << 53) + 3).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        Just(from_str("1e400").unwrap()),
        Just(from_str("-1e400").unwrap()),
        "[a-z]{0,3}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 20, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..20).prop_map(Value::Array),
            proptest::collection::vec(("[a-z]{1,2}", inner), 0..20)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The walks keep 16 pending members inline and the rest on the heap: a value wider than
/// that is walked whole, its last members and its deepest ones included.
#[test]
fn walks_over_a_value_wider_than_their_inline_stack_see_every_member() {
    let wide = |last: Value| {
        let mut members: Vec<Value> = (0..40).map(|i| serde_json::json!({ "k": i })).collect();
        members.push(serde_json::json!([[last]]));
        Value::Array(members)
    };
    let a = wide(Value::from(1));
    assert!(js_eq(&a, &wide(from_str("1.0").unwrap())));
    assert!(
        !js_eq(&a, &wide(Value::from(2))),
        "a difference in the last member"
    );
    assert!(check_numbers(&a).is_ok());
    let big = wide(Value::from(u64::MAX));
    assert!(
        check_numbers(&big).is_err(),
        "a bad number in the last member"
    );
    let (depth, numbers) = depth_and_numbers(&big);
    assert_eq!(depth, 3);
    assert!(numbers.is_err());
    assert_eq!(naive_depth(&big), 3);
    assert!(naive_bad_number(&big).is_some());
}
