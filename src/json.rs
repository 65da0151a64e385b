//! A lossless JSON codec for state values (SPEC §2, §3).
//!
//! JSON text may hold what a Rust `String` cannot: a **lone surrogate escape** such as
//! `"\ud83d"`, which Pi's `JSON.stringify` writes for an emoji cut in half. serde_json
//! refuses such a string. This module reads it anyway, into an ordinary
//! [`serde_json::Value`], by a reserved encoding that is a bijection:
//!
//! - a lone surrogate escape `\uXXXX` (U+D800..U+DFFF not part of a pair) becomes the
//!   noncharacter U+10FFFF followed by its four hex digits in lowercase
//!   (`"\ud83d"` → `"\u{10FFFF}d83d"`);
//! - a genuine U+10FFFF (raw or escaped) becomes U+10FFFF twice;
//! - everything else is what serde_json reads.
//!
//! [`to_string`] prints the inverse, so `text → Value → text` keeps every lone surrogate,
//! in object keys too, and prints it as `JSON.stringify` does (`\ud83d`, lowercase). The
//! encoding is canonical (`\uD83D` and `\ud83d` read the same), so value equality of
//! encoded values is string equality as JavaScript sees it.
//!
//! **The convention.** Every `Value` this crate hands out or takes in (state values,
//! patches, [`crate::Loaded::event`], [`crate::NewEntry`] fields) is in this encoding.
//! A string without U+10FFFF (a noncharacter, reserved for internal use by Unicode) is
//! unaffected, which is every string in practice. To put a genuine U+10FFFF in a value,
//! write it twice; a U+10FFFF followed by neither another one nor four hex digits is
//! printed as itself.
//!
//! **Depth.** Values nested up to [`MAX_READ_DEPTH`] levels of arrays and objects are
//! read (serde_json alone stops at 128); deeper text is refused with
//! [`JsonError::TooDeep`] before any recursion, so no input can overflow the stack.
//!
//! ```
//! use session_state::json;
//! let v = json::from_str(r#"{"text":"cut \ud83d here"}"#)?;
//! assert_eq!(json::to_string(&v), r#"{"text":"cut \ud83d here"}"#);
//! # Ok::<(), json::JsonError>(())
//! ```

use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;

/// The reserved character of the encoding (a Unicode noncharacter).
pub const MARKER: char = '\u{10FFFF}';
const MARKER_UTF8: &[u8] = "\u{10FFFF}".as_bytes();

/// The deepest nesting of arrays and objects [`from_str`] reads. Deeper text is refused
/// with [`JsonError::TooDeep`]. (A state event's `data` object is one of these levels.)
pub const MAX_READ_DEPTH: usize = 256;

/// Why JSON text was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// Not JSON (serde_json's message, with line and column).
    #[error("{0}")]
    Syntax(#[from] serde_json::Error),
    /// Nested deeper than [`MAX_READ_DEPTH`].
    #[error(
        "nested deeper than {limit} levels of arrays and objects (at byte {offset}); \
         this crate reads at most {limit}"
    )]
    TooDeep {
        /// [`MAX_READ_DEPTH`].
        limit: usize,
        /// Byte offset of the bracket that goes one level too deep.
        offset: usize,
    },
    /// A number literal that JavaScript would not give back as written
    /// (see [`from_str_exact`]).
    #[error(
        "the number {literal} cannot be kept exactly: JavaScript (and so Pi) reads it as \
         {nearest}; write it as a string (\"{literal}\") to keep every digit"
    )]
    InexactNumber {
        /// The literal as written.
        literal: String,
        /// What JavaScript's `JSON.parse` then `JSON.stringify` gives back.
        nearest: String,
    },
}

/// Reads JSON text losslessly (lone surrogates encoded as the module describes), up to
/// [`MAX_READ_DEPTH`] levels deep. Numbers are read as serde_json reads them.
pub fn from_str(text: &str) -> Result<Value, JsonError> {
    let scanned = scan(text)?;
    let text: &str = &scanned.text;
    let mut de = serde_json::Deserializer::from_str(text);
    if scanned.depth >= 120 {
        // serde_json's own limit is 128; ours was checked above, without recursion.
        de.disable_recursion_limit();
    }
    let v = Value::deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// [`from_str`], also refusing a number literal whose value JavaScript would not give
/// back: one that is not exactly the shortest decimal form of its nearest double
/// (`123456789012345678901234567890`, `9007199254740993`, `0.10000000000000000555`).
/// `1.0`, `1e3` and `0.1` are kept (JavaScript gives back `1`, `1000` and `0.1`). For
/// values given by a user (the command line), where a silent change would be a surprise.
pub fn from_str_exact(text: &str) -> Result<Value, JsonError> {
    let v = from_str(text)?;
    for literal in number_literals(text) {
        check_literal(literal)?;
    }
    Ok(v)
}

/// Checks that every number in `v` survives JavaScript's `JSON.parse` unchanged (see
/// [`from_str_exact`]): integers beyond 2^53 that a double cannot hold exactly fail.
pub fn check_numbers(v: &Value) -> Result<(), JsonError> {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) if !n.is_f64() => check_literal(&n.to_string())?,
            Value::Array(a) => stack.extend(a.iter()),
            Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    Ok(())
}

/// Prints `v` as compact JSON, byte for byte as Pi's `JSON.stringify` prints the value
/// JavaScript reads from the same text: lone surrogates as lowercase `\uXXXX` escapes
/// (the inverse of [`from_str`]), numbers as JavaScript prints them (`1.0` → `1`,
/// `1e21` → `1e+21`, `1e-6` → `0.000001`), keys in their order.
pub fn to_string(v: &Value) -> String {
    print(v, JsFormatter(serde_json::ser::CompactFormatter))
}

/// Prints `v` as compact JSON for storage: lone surrogates as `\uXXXX` escapes, like
/// [`to_string`], but numbers as serde_json holds them (`1.0` stays `1.0`, `-0.0` stays
/// `-0.0`) and keys in map order, so that [`from_str`] gives back an equal `Value`
/// (`==`, not only [`js_eq`]). The crate writes events and projection rows this way;
/// JavaScript reads them as the same values.
pub fn to_string_exact(v: &Value) -> String {
    decode_markers(v.to_string())
}

/// [`to_string`], indented by two spaces.
pub fn to_string_pretty(v: &Value) -> String {
    print(v, JsFormatter(serde_json::ser::PrettyFormatter::new()))
}

fn print<F: serde_json::ser::Formatter>(v: &Value, f: F) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, f);
    // Serializing a `Value` into memory cannot fail (its keys are strings).
    if serde::Serialize::serialize(&JsOrder(v), &mut ser).is_err() {
        return decode_markers(v.to_string());
    }
    decode_markers(String::from_utf8(out).unwrap_or_else(|_| v.to_string()))
}

/// A value serialized with JavaScript's key order: keys that are array indexes
/// (`"0"`, `"7"`, … below 2^32 − 1) first, in numeric order, then the others in their
/// order (as `JSON.stringify` walks an object that `JSON.parse` built).
struct JsOrder<'a>(&'a Value);

fn array_index(k: &str) -> Option<u32> {
    if k.is_empty() || (k.len() > 1 && k.starts_with('0')) || !k.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    k.parse::<u32>().ok().filter(|&n| n != u32::MAX)
}

impl serde::Serialize for JsOrder<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(&JsOrder(v))?;
                }
                seq.end()
            }
            Value::Object(o) => {
                let mut map = s.serialize_map(Some(o.len()))?;
                let mut indexes: Vec<(u32, &String, &Value)> = o
                    .iter()
                    .filter_map(|(k, v)| array_index(k).map(|n| (n, k, v)))
                    .collect();
                indexes.sort_by_key(|&(n, _, _)| n);
                for (_, k, v) in indexes {
                    map.serialize_entry(k, &JsOrder(v))?;
                }
                for (k, v) in o.iter().filter(|(k, _)| array_index(k).is_none()) {
                    map.serialize_entry(k, &JsOrder(v))?;
                }
                map.end()
            }
            other => other.serialize(s),
        }
    }
}

/// RFC 7396 JSON Merge Patch of `patch` into `doc`, keeping the order of the keys that
/// stay (as JavaScript's `delete` does; serde_json's `remove` would move the last key
/// into the hole).
pub fn merge_patch(doc: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(serde_json::Map::new());
    }
    let Value::Object(map) = doc else { return };
    for (key, value) in p {
        if value.is_null() {
            map.shift_remove(key.as_str());
        } else {
            merge_patch(map.entry(key.as_str()).or_insert(Value::Null), value);
        }
    }
}

/// serde_json's formatter with JavaScript's number printing.
struct JsFormatter<F>(F);

macro_rules! delegate {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $name<W: ?Sized + std::io::Write>(&mut self, w: &mut W $(, $arg: $ty)*) -> std::io::Result<()> {
            self.0.$name(w $(, $arg)*)
        }
    )*};
}

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for JsFormatter<F> {
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, w: &mut W, v: f64) -> std::io::Result<()> {
        if v.is_finite() {
            w.write_all(js_number(v).as_bytes())
        } else {
            w.write_all(b"null")
        }
    }
    fn write_f32<W: ?Sized + std::io::Write>(&mut self, w: &mut W, v: f32) -> std::io::Result<()> {
        self.write_f64(w, f64::from(v))
    }
    delegate! {
        begin_array();
        end_array();
        begin_array_value(first: bool);
        end_array_value();
        begin_object();
        end_object();
        begin_object_key(first: bool);
        end_object_key();
        begin_object_value();
        end_object_value();
    }
}

/// JSON value equality as Pi's JavaScript sees it (SPEC §3): numbers compare as doubles
/// (`1` equals `1.0`), object key order does not matter, strings compare exactly (the
/// encoding is canonical). Iterative, so any depth is fine.
pub fn js_eq(a: &Value, b: &Value) -> bool {
    let mut stack = vec![(a, b)];
    while let Some((a, b)) = stack.pop() {
        match (a, b) {
            (Value::Null, Value::Null) => {}
            (Value::Bool(x), Value::Bool(y)) if x == y => {}
            (Value::String(x), Value::String(y)) if x == y => {}
            (Value::Number(x), Value::Number(y)) => {
                if x != y && x.as_f64() != y.as_f64() {
                    return false;
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                stack.extend(x.iter().zip(y.iter()));
            }
            (Value::Object(x), Value::Object(y)) if x.len() == y.len() => {
                for (k, xv) in x {
                    match y.get(k) {
                        Some(yv) => stack.push((xv, yv)),
                        None => return false,
                    }
                }
            }
            _ => return false,
        }
    }
    true
}

/// [`js_eq`] for optional values (absent equals only absent).
pub fn js_eq_opt(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => js_eq(a, b),
        _ => false,
    }
}

struct Scanned<'a> {
    text: Cow<'a, str>,
    depth: usize,
}

fn hex4(b: &[u8]) -> Option<u16> {
    let s = b.get(..4)?;
    let mut n: u16 = 0;
    for &c in s {
        n = n * 16 + (c as char).to_digit(16)? as u16;
    }
    Some(n)
}

/// One pass over the text: the nesting depth (refused past the limit) and, when the
/// text holds a lone surrogate escape or U+10FFFF, the text with those encoded. It does
/// not validate: serde_json does that next, on text whose strings end where these did.
fn scan(text: &str) -> Result<Scanned<'_>, JsonError> {
    let b = text.as_bytes();
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0; // bytes of `b` already moved into `out`
    let mut depth = 0usize;
    let mut max = 0usize;
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if !in_str {
            match c {
                b'"' => in_str = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_READ_DEPTH {
                        return Err(JsonError::TooDeep {
                            limit: MAX_READ_DEPTH,
                            offset: i,
                        });
                    }
                    max = max.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_str = false;
                i += 1;
            }
            b'\\' if b.get(i + 1) == Some(&b'u') => {
                let Some(n) = hex4(&b[i + 2..]) else {
                    i += 2; // not an escape serde_json accepts: it will say so
                    continue;
                };
                if (0xD800..0xDC00).contains(&n)
                    && b.get(i + 6) == Some(&b'\\')
                    && b.get(i + 7) == Some(&b'u')
                    && hex4(&b[i + 8..]).is_some_and(|m| (0xDC00..0xE000).contains(&m))
                {
                    // A pair: a character serde_json reads, unless it is U+10FFFF.
                    if n == 0xDBFF && hex4(&b[i + 8..]) == Some(0xDFFF) {
                        let o = out.get_or_insert_with(Vec::new);
                        o.extend_from_slice(&b[copied..i]);
                        o.extend_from_slice(MARKER_UTF8);
                        o.extend_from_slice(MARKER_UTF8);
                        copied = i + 12;
                    }
                    i += 12;
                } else if (0xD800..0xE000).contains(&n) {
                    let o = out.get_or_insert_with(Vec::new);
                    o.extend_from_slice(&b[copied..i]);
                    o.extend_from_slice(MARKER_UTF8);
                    o.extend_from_slice(format!("{n:04x}").as_bytes());
                    copied = i + 6;
                    i += 6;
                } else {
                    i += 6;
                }
            }
            b'\\' => i += 2,
            0xF4 if b[i..].starts_with(MARKER_UTF8) => {
                let o = out.get_or_insert_with(Vec::new);
                o.extend_from_slice(&b[copied..i]);
                o.extend_from_slice(MARKER_UTF8);
                o.extend_from_slice(MARKER_UTF8);
                i += MARKER_UTF8.len();
                copied = i;
            }
            _ => i += 1,
        }
    }
    let text = match out {
        None => Cow::Borrowed(text),
        Some(mut o) => {
            o.extend_from_slice(&b[copied.min(b.len())..]);
            // Only whole UTF-8 sequences were copied or inserted.
            match String::from_utf8(o) {
                Ok(s) => Cow::Owned(s),
                Err(_) => Cow::Borrowed(text),
            }
        }
    };
    Ok(Scanned { text, depth: max })
}

/// Undoes the encoding in serde_json's output (where U+10FFFF only appears, unescaped,
/// inside strings).
fn decode_markers(s: String) -> String {
    if !s.contains(MARKER) {
        return s;
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(p) = rest.find(MARKER) {
        out.push_str(&rest[..p]);
        let after = &rest[p + MARKER.len_utf8()..];
        if let Some(a) = after.strip_prefix(MARKER) {
            out.push(MARKER);
            rest = a;
        } else if after.len() >= 4
            && after.is_char_boundary(4)
            && hex4(after.as_bytes()).is_some_and(|n| (0xD800..0xE000).contains(&n))
        {
            out.push_str("\\u");
            out.push_str(&after[..4].to_ascii_lowercase());
            rest = &after[4..];
        } else {
            out.push(MARKER);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The number literals of JSON text (outside strings).
fn number_literals(text: &str) -> impl Iterator<Item = &str> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    std::iter::from_fn(move || {
        while i < b.len() {
            let c = b[i];
            if in_str {
                match c {
                    b'"' => in_str = false,
                    b'\\' => i += 1,
                    _ => {}
                }
                i += 1;
            } else if c == b'"' {
                in_str = true;
                i += 1;
            } else if c == b'-' || c.is_ascii_digit() {
                let start = i;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                return text.get(start..i);
            } else {
                i += 1;
            }
        }
        None
    })
}

/// A decimal number as (negative, significant digits without leading or trailing
/// zeros, decimal exponent of the last digit); `None` digits for zero.
fn decimal(mantissa: &str, exp: i64) -> (bool, Option<(String, i64)>) {
    let (neg, m) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let (int, frac) = m.split_once('.').unwrap_or((m, ""));
    let digits = format!("{int}{frac}");
    let exp = exp - frac.len() as i64;
    let trimmed = digits.trim_start_matches('0');
    let kept = trimmed.trim_end_matches('0');
    if kept.is_empty() {
        return (neg, None);
    }
    let exp = exp + (trimmed.len() - kept.len()) as i64;
    (neg, Some((kept.to_owned(), exp)))
}

fn split_exp(s: &str) -> (&str, Option<i64>) {
    match s.find(['e', 'E']) {
        Some(p) => (&s[..p], s[p + 1..].parse::<i64>().ok()),
        None => (s, Some(0)),
    }
}

/// Is `literal` exactly the shortest decimal form of its nearest double (as a value)?
fn check_literal(literal: &str) -> Result<(), JsonError> {
    let inexact = |nearest: String| JsonError::InexactNumber {
        literal: literal.to_owned(),
        nearest,
    };
    let Ok(f) = literal.parse::<f64>() else {
        return Ok(()); // not a number serde_json accepted; nothing to compare
    };
    if !f.is_finite() {
        return Err(inexact(
            if f > 0.0 { "Infinity" } else { "-Infinity" }.into(),
        ));
    }
    let (lm, le) = split_exp(literal);
    if lm.bytes().all(|c| matches!(c, b'0' | b'-' | b'.')) {
        return Ok(()); // zero, whatever its exponent (JavaScript prints -0 as 0)
    }
    let shortest = format!("{f:e}");
    let (sm, se) = split_exp(&shortest);
    let lit = le.map(|e| decimal(lm, e));
    let near = decimal(sm, se.unwrap_or(0));
    let same = match (&lit, &near) {
        (Some(l), n) => l == n,
        (None, _) => false,
    };
    if same {
        Ok(())
    } else {
        Err(inexact(js_number(f)))
    }
}

/// How JavaScript prints a finite double (`Number.prototype.toString`).
fn js_number(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    let s = format!("{f:e}");
    let (m, e) = split_exp(&s);
    let (_, Some((digits, _))) = decimal(m, e.unwrap_or(0)) else {
        return s;
    };
    let k = digits.len() as i64;
    let n = e.unwrap_or(0) + 1; // position of the decimal point after the first digit
    let sign = if f < 0.0 { "-" } else { "" };
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let es = if e >= 0 {
            format!("+{e}")
        } else {
            e.to_string()
        };
        if k == 1 {
            format!("{digits}e{es}")
        } else {
            format!("{}.{}e{es}", &digits[..1], &digits[1..])
        }
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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

    /// Parsing, patching, comparing, printing and dropping a value at the limit fits in a
    /// thread with a quarter of Rust's default 2 MiB stack (this profile; unoptimized, it
    /// needs under 1 MiB, measured: that is what bounds the limit).
    #[test]
    fn a_value_at_the_depth_limit_fits_in_a_small_stack() {
        let text = format!(
            "{}0{}",
            "[{\"k\":".repeat(MAX_READ_DEPTH / 2),
            "}]".repeat(MAX_READ_DEPTH / 2)
        );
        let out = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || {
                let v = from_str(&text).unwrap();
                let mut doc = v.clone();
                merge_patch(&mut doc, &v);
                assert!(js_eq(&doc, &v));
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
}
