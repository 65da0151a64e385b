//! A lossless JSON codec for state values (docs/spec.md §2, §3).
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
//! **Numbers are read as JavaScript's `JSON.parse` reads them** (what is in a session
//! file is read as Pi reads it, whoever wrote it):
//! - an integer literal that a double cannot hold is the nearest double, kept as the
//!   integer JavaScript prints for it: `123456789012345678` reads as `123456789012345680`
//!   (a `u64`/`i64` where it fits, so typed reads keep working), `9007199254740993` as
//!   `9007199254740992`;
//! - a literal beyond the double range (`1e400`, `-1E+999`, 400 digits) is ±Infinity,
//!   which a [`Value`] cannot hold as a number: it becomes the reserved string
//!   [`INFINITY`] or [`NEG_INFINITY`] (U+10FFFF then `Infinity`), so it is carried
//!   through a fold as Pi's JavaScript carries it (a merge patch `{"a":1e400}` sets `a`,
//!   it does not delete it) and equals only itself. [`to_string`] prints it `null`, as
//!   `JSON.stringify` does; [`to_string_exact`] prints `1e400`, which reads back as it;
//! - every other number is the correctly rounded double serde_json reads.
//!
//! **Depth.** Values nested up to [`MAX_READ_DEPTH`] levels of arrays and objects are
//! read: more than Pi can write (its `JSON.stringify` stops at about 4,170 levels on
//! Node 22's default stack, measured with Pi 1.6.0 and 0.73.1; see `docs/api.md`).
//! Deeper text is refused with [`JsonError::TooDeep`] before any recursion. Parsing,
//! printing, [`merge_patch`], [`clone_value`], [`deserialize`], [`js_eq`] and the
//! number checks never overflow the stack at any depth: they grow it on the heap
//! (the `stacker` crate) or do not recurse. (Dropping a [`Value`] recurses in
//! serde_json itself, about 70 bytes of stack a level, measured at opt-level 1: some
//! 350 KiB at the read limit, well under a thread's default 2 MiB.)
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
/// Pi writes at most about 4,170 (its `JSON.stringify` runs out of stack first).
pub const MAX_READ_DEPTH: usize = 5_000;

/// +Infinity in the encoding: what a number literal beyond the double range (`1e400`)
/// reads as. [`to_string`] prints it `null`, [`to_string_exact`] `1e400`.
pub const INFINITY: &str = "\u{10FFFF}Infinity";

/// -Infinity in the encoding (`-1e400`); see [`INFINITY`].
pub const NEG_INFINITY: &str = "\u{10FFFF}-Infinity";

/// Below this depth serde_json parses on the caller's stack; from it on, on a stack that
/// grows on the heap (serde_stacker).
const SHALLOW: usize = 64;

/// `stacker`'s parameters: grow when less than `RED_ZONE` bytes of stack are left, by
/// segments of `SEGMENT` bytes.
const RED_ZONE: usize = 64 * 1024;
const SEGMENT: usize = 2 * 1024 * 1024;

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
    /// A value holding ±Infinity ([`INFINITY`], read from a number beyond the double
    /// range), which JSON cannot carry (see [`check_numbers`]).
    #[error(
        "the value holds {}Infinity (read from a number beyond the double range), which \
         JSON cannot carry: Pi's JSON.stringify would write null; write null or a string \
         instead",
        if *negative { "-" } else { "" }
    )]
    NonFinite {
        /// -Infinity.
        negative: bool,
    },
}

/// Reads JSON text (lone surrogates encoded as the module describes, numbers as
/// JavaScript's `JSON.parse` reads them), up to [`MAX_READ_DEPTH`] levels deep.
pub fn from_str(text: &str) -> Result<Value, JsonError> {
    let scanned = scan(text)?;
    let text: &str = &scanned.text;
    let mut de = serde_json::Deserializer::from_str(text);
    let v = if scanned.depth < SHALLOW {
        Value::deserialize(&mut de)?
    } else {
        // Our own limit was checked above, without recursion; serde_json's (128) is
        // replaced by a stack that grows as deep as the text goes.
        de.disable_recursion_limit();
        let mut grown = serde_stacker::Deserializer::new(&mut de);
        grown.red_zone = RED_ZONE;
        grown.stack_size = SEGMENT;
        Value::deserialize(grown)?
    };
    de.end()?;
    Ok(v)
}

/// Deserializes `T` from a value of any depth without overflowing the stack (serde's
/// derived code recurses once per level; this grows the stack on the heap instead).
pub fn deserialize<'de, T: Deserialize<'de>>(v: &'de Value) -> Result<T, serde_json::Error> {
    let mut grown = serde_stacker::Deserializer::new(v);
    grown.red_zone = RED_ZONE;
    grown.stack_size = SEGMENT;
    T::deserialize(grown)
}

/// A copy of `v`, at any depth without overflowing the stack (`Value::clone` recurses).
pub fn clone_value(v: &Value) -> Value {
    match v {
        Value::Array(a) => stacker::maybe_grow(RED_ZONE, SEGMENT, || {
            Value::Array(a.iter().map(clone_value).collect())
        }),
        Value::Object(o) => stacker::maybe_grow(RED_ZONE, SEGMENT, || {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), clone_value(v))).collect())
        }),
        other => other.clone(),
    }
}

/// Is `v` ±Infinity ([`INFINITY`], [`NEG_INFINITY`])? `Some(negative)` if so.
pub fn infinity(v: &Value) -> Option<bool> {
    match v.as_str() {
        Some(INFINITY) => Some(false),
        Some(NEG_INFINITY) => Some(true),
        _ => None,
    }
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
/// [`from_str_exact`]): integers beyond 2^53 that a double cannot hold exactly fail, and
/// so does ±Infinity ([`JsonError::NonFinite`]), which JSON cannot carry.
pub fn check_numbers(v: &Value) -> Result<(), JsonError> {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) if !n.is_f64() => check_literal(&n.to_string())?,
            Value::String(_) => {
                if let Some(negative) = infinity(v) {
                    return Err(JsonError::NonFinite { negative });
                }
            }
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
/// `1e21` → `1e+21`, `1e-6` → `0.000001`, ±Infinity → `null`), keys in JavaScript's
/// order (array-index keys first).
pub fn to_string(v: &Value) -> String {
    print(v, Mode::Js, false)
}

/// Prints `v` as compact JSON for storage: lone surrogates as `\uXXXX` escapes, like
/// [`to_string`], but numbers as serde_json holds them (`1.0` stays `1.0`, `-0.0` stays
/// `-0.0`, ±Infinity is `1e400` / `-1e400`) and keys in map order, so that [`from_str`]
/// gives back an equal `Value` (`==`, not only [`js_eq`]). The crate writes events and
/// projection rows this way; JavaScript reads them as the same values.
pub fn to_string_exact(v: &Value) -> String {
    print(v, Mode::Exact, false)
}

/// [`to_string`], indented by two spaces.
pub fn to_string_pretty(v: &Value) -> String {
    print(v, Mode::Js, true)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// As `JSON.stringify` prints what `JSON.parse` read.
    Js,
    /// As serde_json holds it, so that it reads back `==`.
    Exact,
}

/// One open array or object of [`print`]: the members still to print.
enum Open<'a> {
    Array(std::slice::Iter<'a, Value>),
    Object(std::vec::IntoIter<(&'a String, &'a Value)>),
}

/// The printer: iterative (an explicit stack of open containers), so any depth prints.
fn print(v: &Value, mode: Mode, pretty: bool) -> String {
    let mut out: Vec<u8> = Vec::new();
    let mut open: Vec<(Open<'_>, bool)> = Vec::new(); // (members left, none printed yet)
    let mut next = Some(v);
    loop {
        if let Some(v) = next.take() {
            match v {
                Value::Array(a) if !a.is_empty() => {
                    out.push(b'[');
                    open.push((Open::Array(a.iter()), true));
                }
                Value::Object(o) if !o.is_empty() => {
                    out.push(b'{');
                    open.push((Open::Object(members(o, mode).into_iter()), true));
                }
                Value::Array(_) => out.extend_from_slice(b"[]"),
                Value::Object(_) => out.extend_from_slice(b"{}"),
                scalar => scalar_into(&mut out, scalar, mode),
            }
        }
        let depth = open.len();
        let Some((members, first)) = open.last_mut() else {
            break;
        };
        let was_first = std::mem::replace(first, false);
        let member = match members {
            Open::Array(it) => it.next().map(|v| (None, v)),
            Open::Object(it) => it.next().map(|(k, v)| (Some(k), v)),
        };
        match member {
            Some((key, v)) => {
                if !was_first {
                    out.push(b',');
                }
                indent(&mut out, pretty, depth);
                if let Some(k) = key {
                    string_into(&mut out, k);
                    out.extend_from_slice(if pretty { b": " } else { b":" });
                }
                next = Some(v);
            }
            None => {
                let close = match members {
                    Open::Array(_) => b']',
                    Open::Object(_) => b'}',
                };
                open.pop();
                indent(&mut out, pretty, depth - 1);
                out.push(close);
            }
        }
    }
    // Only whole UTF-8 sequences were written (serde_json's escaping of `str`s).
    decode_markers(
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    )
}

fn indent(out: &mut Vec<u8>, pretty: bool, depth: usize) {
    if pretty {
        out.push(b'\n');
        out.resize(out.len() + 2 * depth, b' ');
    }
}

/// An object's members in print order: JavaScript's (keys that are array indexes, `"0"`,
/// `"7"`, … below 2^32 − 1, first in numeric order, then the others in their order, as
/// `JSON.stringify` walks an object that `JSON.parse` built), or map order.
fn members(o: &serde_json::Map<String, Value>, mode: Mode) -> Vec<(&String, &Value)> {
    if mode == Mode::Exact {
        return o.iter().collect();
    }
    let mut indexes: Vec<(u32, &String, &Value)> = o
        .iter()
        .filter_map(|(k, v)| array_index(k).map(|n| (n, k, v)))
        .collect();
    indexes.sort_by_key(|&(n, _, _)| n);
    let mut all: Vec<(&String, &Value)> = indexes.into_iter().map(|(_, k, v)| (k, v)).collect();
    all.extend(o.iter().filter(|(k, _)| array_index(k).is_none()));
    all
}

fn string_into(out: &mut Vec<u8>, s: &str) {
    // Writing a `str` into memory cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn scalar_into(out: &mut Vec<u8>, v: &Value, mode: Mode) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => match n.as_f64() {
            Some(f) if mode == Mode::Js && n.is_f64() => {
                out.extend_from_slice(js_number(f).as_bytes());
            }
            _ => out.extend_from_slice(n.to_string().as_bytes()),
        },
        Value::String(s) => match (infinity(v), mode) {
            (Some(_), Mode::Js) => out.extend_from_slice(b"null"),
            (Some(negative), Mode::Exact) => {
                out.extend_from_slice(if negative { b"-1e400" } else { b"1e400" });
            }
            (None, _) => string_into(out, s),
        },
        Value::Array(_) | Value::Object(_) => {}
    }
}

fn array_index(k: &str) -> Option<u32> {
    if k.is_empty() || (k.len() > 1 && k.starts_with('0')) || !k.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    k.parse::<u32>().ok().filter(|&n| n != u32::MAX)
}

/// RFC 7396 JSON Merge Patch of `patch` into `doc`, keeping the order of the keys that
/// stay (as JavaScript's `delete` does; serde_json's `remove` would move the last key
/// into the hole). Any depth: the stack grows on the heap as the patch goes deeper.
pub fn merge_patch(doc: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *doc = clone_value(patch);
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
            let slot = map.entry(key.as_str()).or_insert(Value::Null);
            stacker::maybe_grow(RED_ZONE, SEGMENT, || merge_patch(slot, value));
        }
    }
}

/// JSON value equality as Pi's JavaScript sees it (docs/spec.md §3): numbers compare as doubles
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
/// text holds a lone surrogate escape, U+10FFFF, or a number JavaScript reads as another
/// (see [`js_literal`]), the text with those encoded or rewritten. It does not validate:
/// serde_json does that next, on text whose strings end where these did and where a
/// rewrite only ever replaces one valid number by another value.
fn scan(text: &str) -> Result<Scanned<'_>, JsonError> {
    let b = text.as_bytes();
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0; // bytes of `b` already moved into `out`
    let mut opens: Vec<u8> = Vec::new(); // the open brackets
    let mut max = 0usize;
    let mut prev = 0u8; // the last byte outside strings that is not whitespace
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if !in_str {
            match c {
                b'"' => in_str = true,
                b'[' | b'{' => {
                    opens.push(c);
                    if opens.len() > MAX_READ_DEPTH {
                        return Err(JsonError::TooDeep {
                            limit: MAX_READ_DEPTH,
                            offset: i,
                        });
                    }
                    max = max.max(opens.len());
                }
                b']' | b'}' => {
                    opens.pop();
                }
                b'-' | b'0'..=b'9' => {
                    let end = i + b[i..]
                        .iter()
                        .position(|c| !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                        .unwrap_or(b.len() - i);
                    // A number where a key must stand is invalid JSON: left for serde_json
                    // to refuse, never rewritten into a string.
                    let key = opens.last() == Some(&b'{') && matches!(prev, b'{' | b',');
                    if !key && let Some(js) = text.get(i..end).and_then(js_literal) {
                        let o = out.get_or_insert_with(Vec::new);
                        o.extend_from_slice(&b[copied..i]);
                        o.extend_from_slice(js.as_bytes());
                        copied = end;
                    }
                    prev = b'0';
                    i = end;
                    continue;
                }
                b' ' | b'\t' | b'\n' | b'\r' => {
                    i += 1;
                    continue;
                }
                _ => {}
            }
            prev = c;
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_str = false;
                prev = b'"';
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
/// zeros, decimal exponent of the last digit); `None` digits for zero. The exponent is
/// an `i128`: a literal's own exponent is at most an `i64`'s (see [`split_exp`]) and the
/// digit counts a `usize`, so no sum here can overflow.
fn decimal(mantissa: &str, exp: i128) -> (bool, Option<(String, i128)>) {
    let (neg, m) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let (int, frac) = m.split_once('.').unwrap_or((m, ""));
    let digits = format!("{int}{frac}");
    let exp = exp - frac.len() as i128;
    let trimmed = digits.trim_start_matches('0');
    let kept = trimmed.trim_end_matches('0');
    if kept.is_empty() {
        return (neg, None);
    }
    let exp = exp + (trimmed.len() - kept.len()) as i128;
    (neg, Some((kept.to_owned(), exp)))
}

/// A literal's mantissa and exponent; `None` for an exponent beyond an `i64` (such a
/// number is 0 or ±Infinity in JavaScript, never exactly what was written).
fn split_exp(s: &str) -> (&str, Option<i128>) {
    match s.find(['e', 'E']) {
        Some(p) => (&s[..p], s[p + 1..].parse::<i64>().ok().map(i128::from)),
        None => (s, Some(0)),
    }
}

/// Is `s` a number as JSON writes it: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`?
fn valid_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// What to read in place of the number literal `lit` so that serde_json reads the value
/// JavaScript's `JSON.parse` reads; `None` when serde_json already does (every literal
/// with a fraction or an exponent that a double holds, and every integer of at most 15
/// digits: the fast path). Otherwise: a literal beyond the double range is
/// [`INFINITY`] or [`NEG_INFINITY`] (as a JSON string), and an integer literal that is
/// not how JavaScript prints its nearest double is that print (`123456789012345678` →
/// `123456789012345680`), which serde_json reads as an integer where it fits.
fn js_literal(lit: &str) -> Option<String> {
    let b = lit.as_bytes();
    let sign = usize::from(b.first() == Some(&b'-'));
    let int_len = b[sign..].iter().take_while(|c| c.is_ascii_digit()).count();
    let exp = lit.contains(['e', 'E']);
    let frac = lit.contains('.');
    // 309 digits reach 1e308, the top of the double range.
    if !exp && int_len < 309 && (frac || int_len < 16) {
        return None;
    }
    if !valid_number(lit) {
        return None; // serde_json will say what is wrong
    }
    let f: f64 = lit.parse().ok()?;
    if f.is_infinite() {
        let inf = if f < 0.0 { NEG_INFINITY } else { INFINITY };
        return Some(format!("\"{inf}\""));
    }
    if exp || frac {
        return None; // serde_json reads it as the nearest double too
    }
    let js = js_number(f);
    (js != lit).then_some(js)
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
    let k = digits.len() as i128;
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
}
