//! The lossless JSON codec (`session_state::json`): any text that reads must print back
//! to text that reads as the same value, by each printer, and printing is a fixed point:
//! - `to_string` (JavaScript's `JSON.stringify` form) reads back `js_eq` to the value and
//!   prints the same text again;
//! - `to_string_exact` (the storage form) reads back `==` to the value;
//! - `to_string_pretty` reads back `js_eq` and, compacted, is `to_string`'s text;
//! - `from_str_exact` accepts a subset of what `from_str` reads, with the same value, and
//!   accepts what `to_string` prints of a value `check_numbers` accepts;
//! - `js_eq` is reflexive, and a merge patch applied twice changes nothing more.
//!
//! Proptest relatives: `src/json/tests.rs`, `tests/bad_input.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_state::json;

/// `v` as JavaScript's `JSON.stringify` sees it: ±Infinity is null.
fn nulled(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    if json::infinity(v).is_some() {
        return Value::Null;
    }
    match v {
        Value::Array(a) => Value::Array(a.iter().map(nulled).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), nulled(x))).collect()),
        other => other.clone(),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let exact = json::from_str_exact(&text);
    let Ok(v) = json::from_str(&text) else {
        assert!(
            exact.is_err(),
            "from_str_exact reads what from_str refuses: {text:?}"
        );
        return;
    };
    if let Ok(w) = &exact {
        assert!(w == &v, "from_str_exact reads {w:?}, from_str {v:?}");
        assert!(
            json::check_numbers(&v).is_ok(),
            "an exact text with inexact numbers"
        );
    }
    assert!(json::js_eq(&v, &v), "js_eq is not reflexive on {v:?}");

    let js = json::to_string(&v);
    let back = json::from_str(&js).unwrap_or_else(|e| panic!("to_string printed {js:?}: {e}"));
    // JavaScript prints ±Infinity (a number beyond the doubles in the text) as null.
    let printed = nulled(&v);
    assert!(
        json::js_eq(&back, &printed),
        "{js:?} reads back as {back:?}, not {printed:?}"
    );
    assert_eq!(json::to_string(&back), js, "to_string is not a fixed point");
    if json::check_numbers(&v).is_ok()
        && let Err(e) = json::from_str_exact(&js)
    {
        panic!("from_str_exact refuses what to_string printed ({js:?}): {e}");
    }

    let stored = json::to_string_exact(&v);
    let back = json::from_str(&stored)
        .unwrap_or_else(|e| panic!("to_string_exact printed {stored:?}: {e}"));
    assert!(back == v, "{stored:?} reads back as {back:?}, not {v:?}");

    let pretty = json::to_string_pretty(&v);
    let back = json::from_str(&pretty)
        .unwrap_or_else(|e| panic!("to_string_pretty printed {pretty:?}: {e}"));
    assert!(
        json::js_eq(&back, &printed),
        "the pretty text reads back as {back:?}"
    );
    assert_eq!(json::to_string(&back), js, "pretty and compact disagree");

    let mut once = v.clone();
    json::merge_patch(&mut once, &v);
    let mut twice = once.clone();
    json::merge_patch(&mut twice, &v);
    assert!(
        once == twice,
        "a merge patch applied twice changed more: {once:?} -> {twice:?}"
    );
});
