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
//!   `"\u{10FFFF}Infinity"` or `"\u{10FFFF}-Infinity"` ([`infinity`] tells), so it is carried
//!   through a fold as Pi's JavaScript carries it (a merge patch `{"a":1e400}` sets `a`,
//!   it does not delete it) and equals only itself. [`to_string`] prints it `null`, as
//!   `JSON.stringify` does; [`to_string_exact`] prints `1e400`, which reads back as it;
//! - every other number is the correctly rounded double serde_json reads.
//!
//! **Depth.** Values nested up to [`MAX_READ_DEPTH`] levels of arrays and objects are
//! read: more than Pi can write (its `JSON.stringify` stops at about 4,170 levels on
//! Node 22's default stack, measured with Pi 1.6.0 and 0.73.1; see `docs/api.md`).
//! Deeper text is refused with [`JsonError::TooDeep`] before any recursion. Parsing,
//! printing, [`merge_patch`], copying, typed reads, [`js_eq`] and the
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

mod number;
mod print;
mod scan;

use number::{check_literal, number_literals};
use print::{Mode, print};
use scan::scan;

/// The reserved character of the encoding (a Unicode noncharacter).
pub(crate) const MARKER: char = '\u{10FFFF}';
const MARKER_UTF8: &[u8] = "\u{10FFFF}".as_bytes();

/// The deepest nesting of arrays and objects [`from_str`] reads. Deeper text is refused
/// with [`JsonError::TooDeep`]. (A state event's `data` object is one of these levels.)
/// Pi writes at most about 4,170 (its `JSON.stringify` runs out of stack first).
pub const MAX_READ_DEPTH: usize = 5_000;

/// +Infinity in the encoding: what a number literal beyond the double range (`1e400`)
/// reads as. [`to_string`] prints it `null`, [`to_string_exact`] `1e400`.
pub(crate) const INFINITY: &str = "\u{10FFFF}Infinity";

/// -Infinity in the encoding (`-1e400`); see [`INFINITY`].
pub(crate) const NEG_INFINITY: &str = "\u{10FFFF}-Infinity";

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
    /// A value holding ±Infinity ([`infinity`], read from a number beyond the double
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
pub(crate) fn deserialize<'de, T: Deserialize<'de>>(v: &'de Value) -> Result<T, serde_json::Error> {
    let mut grown = serde_stacker::Deserializer::new(v);
    grown.red_zone = RED_ZONE;
    grown.stack_size = SEGMENT;
    T::deserialize(grown)
}

/// [`deserialize`], and on failure the first path in `v` that fails (`.` for `v`
/// itself), found by deserializing again with the path tracked: a value that
/// deserializes pays nothing for it.
pub(crate) fn deserialize_with_path<T: serde::de::DeserializeOwned>(
    v: &Value,
) -> Result<T, (String, serde_json::Error)> {
    deserialize::<T>(v).map_err(|e| {
        let mut grown = serde_stacker::Deserializer::new(v);
        grown.red_zone = RED_ZONE;
        grown.stack_size = SEGMENT;
        match serde_path_to_error::deserialize::<_, T>(grown) {
            Err(tracked) => (tracked.path().to_string(), e),
            Ok(_) => (".".to_owned(), e),
        }
    })
}

/// A copy of `v`, at any depth without overflowing the stack (`Value::clone` recurses).
pub(crate) fn clone_value(v: &Value) -> Value {
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

/// Serializes `v` as its own `Serialize` does, at any depth without overflowing the stack
/// (serde_json's recurses): for a record's `Value` field, `#[serde(serialize_with =
/// "crate::json::serialize_value")]`. Into serde_json's `to_value` the `Value` comes out
/// equal, still in this module's encoding, for [`to_string`] to print.
pub(crate) fn serialize_value<S: serde::Serializer>(v: &Value, s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    use serde::ser::{SerializeMap, SerializeSeq};
    /// A nested value, serialized by [`serialize_value`] again.
    struct Grown<'a>(&'a Value);
    impl Serialize for Grown<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            serialize_value(self.0, s)
        }
    }
    match v {
        Value::Array(a) => stacker::maybe_grow(RED_ZONE, SEGMENT, || {
            let mut seq = s.serialize_seq(Some(a.len()))?;
            for x in a {
                seq.serialize_element(&Grown(x))?;
            }
            seq.end()
        }),
        Value::Object(o) => stacker::maybe_grow(RED_ZONE, SEGMENT, || {
            let mut map = s.serialize_map(Some(o.len()))?;
            for (k, x) in o {
                map.serialize_entry(k, &Grown(x))?;
            }
            map.end()
        }),
        other => other.serialize(s),
    }
}

/// [`serialize_value`] of an optional field (with `skip_serializing_if =
/// "Option::is_none"`, so `None` is left out and `Some(null)` is `null`).
pub(crate) fn serialize_some_value<S: serde::Serializer>(
    v: &Option<Value>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => serialize_value(v, s),
        None => s.serialize_none(),
    }
}

/// Is `v` ±Infinity (the reserved string `"\u{10FFFF}Infinity"` or
/// `"\u{10FFFF}-Infinity"` that a number beyond the double range reads as)?
/// `Some(negative)` if so.
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
    depth_and_numbers(v).1
}

/// The crate's one walk over a value's nesting: the depth of `v` (a scalar is 0, each
/// array or object one level) and the first number in it that [`check_numbers`] refuses
/// (`Ok` if none). Without recursion, so any depth is fine. Members are met last to
/// first: of several refused numbers, the one named is the last in the value's order
/// (each array's and object's members as they are held).
pub(crate) fn depth_and_numbers(v: &Value) -> (usize, Result<(), JsonError>) {
    let mut depth = 0;
    let mut numbers = Ok(());
    // Inline up to 16 pending members: a small value's walk allocates nothing.
    let mut stack: smallvec::SmallVec<[(&Value, usize); 16]> = smallvec::smallvec![(v, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            // An integer of at most 2^53 in magnitude is a double exactly, and JavaScript
            // prints it with the same digits: only larger ones need the literal's check.
            Value::Number(n) if numbers.is_ok() && !n.is_f64() && !exact_integer(n) => {
                numbers = check_literal(&n.to_string());
            }
            Value::String(_) if numbers.is_ok() => {
                if let Some(negative) = infinity(v) {
                    numbers = Err(JsonError::NonFinite { negative });
                }
            }
            Value::Array(a) => {
                stack.extend(a.iter().map(|c| (c, d + 1)));
                depth = depth.max(d + 1);
            }
            Value::Object(o) => {
                stack.extend(o.values().map(|c| (c, d + 1)));
                depth = depth.max(d + 1);
            }
            _ => {}
        }
    }
    (depth, numbers)
}

/// An integer a double holds exactly and JavaScript prints digit for digit: |n| ≤ 2^53.
fn exact_integer(n: &serde_json::Number) -> bool {
    const MAX: u64 = 1 << 53;
    n.as_u64()
        .map(|u| u <= MAX)
        .or_else(|| n.as_i64().map(|i| i.unsigned_abs() <= MAX))
        .unwrap_or(false)
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

/// [`to_string_exact`] of `v`, appended to `out`: the same text, without a string of its
/// own.
pub(crate) fn push_exact(out: &mut String, v: &Value) {
    push_in(out, v, Mode::Exact);
}

/// [`to_string`] of `v`, appended to `out`.
pub(crate) fn push_js(out: &mut String, v: &Value) {
    push_in(out, v, Mode::Js);
}

fn push_in(out: &mut String, v: &Value, mode: Mode) {
    let mut bytes = std::mem::take(out).into_bytes();
    let start = bytes.len();
    print::print_into(&mut bytes, v, mode, false);
    push_printed(out, bytes, start);
}

/// `s` as a JSON string literal (as [`to_string_exact`] prints a key: never read as a
/// number), appended to `out`. A string with nothing to escape (no `"`,
/// `\`, control character or lone-surrogate marker: every id, timestamp and usual
/// customType) is copied between its quotes as it is.
pub(crate) fn push_str_literal(out: &mut String, s: &str) {
    // One pass over the bytes: the marker (U+10FFFF) is the only character that starts
    // with 0xF4 and needs care; any other such character takes the careful path too.
    let plain = s
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b != MARKER_UTF8[0]);
    if plain {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut bytes = std::mem::take(out).into_bytes();
    let start = bytes.len();
    print::string_into(&mut bytes, s);
    push_printed(out, bytes, start);
}

/// `bytes` (what `out` held, then printed text from `start` on) back into `out`, the
/// printed part's lone-surrogate markers decoded as [`print::print`] decodes them.
fn push_printed(out: &mut String, bytes: Vec<u8>, start: usize) {
    // Only whole UTF-8 sequences were written (serde_json's escaping of `str`s).
    *out = String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    if out.get(start..).is_some_and(|p| p.contains(MARKER)) {
        let printed = out.split_off(start);
        out.push_str(&scan::decode_markers(printed));
    }
}

/// [`to_string`], indented by two spaces.
pub fn to_string_pretty(v: &Value) -> String {
    print(v, Mode::Js, true)
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
    let mut stack: smallvec::SmallVec<[(&Value, &Value); 16]> = smallvec::smallvec![(a, b)];
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
pub(crate) fn js_eq_opt(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => js_eq(a, b),
        _ => false,
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests;
