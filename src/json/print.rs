//! The printer: iterative, so any depth prints, in JavaScript's form or exactly.

use super::infinity;
use super::number::js_number;
use super::scan::decode_markers;
use serde_json::Value;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Mode {
    /// As `JSON.stringify` prints what `JSON.parse` read.
    Js,
    /// As serde_json holds it, so that it reads back `==`.
    Exact,
}

/// One open array or object of [`print`]: the members still to print.
pub(super) enum Open<'a> {
    Array(std::slice::Iter<'a, Value>),
    Object(std::vec::IntoIter<(&'a String, &'a Value)>),
    /// An object printed in map order ([`Mode::Exact`]): no list of its members is built.
    Map(serde_json::map::Iter<'a>),
}

/// The printer: iterative (an explicit stack of open containers), so any depth prints.
pub(super) fn print(v: &Value, mode: Mode, pretty: bool) -> String {
    let mut out: Vec<u8> = Vec::new();
    print_into(&mut out, v, mode, pretty);
    // Only whole UTF-8 sequences were written (serde_json's escaping of `str`s).
    decode_markers(
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    )
}

/// [`print`]'s bytes appended to `out`, lone surrogates still as markers (the caller
/// decodes them: [`decode_markers`]).
pub(super) fn print_into(out: &mut Vec<u8>, v: &Value, mode: Mode, pretty: bool) {
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
                    let members = match mode {
                        Mode::Exact => Open::Map(o.iter()),
                        Mode::Js => Open::Object(members(o, mode).into_iter()),
                    };
                    open.push((members, true));
                }
                Value::Array(_) => out.extend_from_slice(b"[]"),
                Value::Object(_) => out.extend_from_slice(b"{}"),
                scalar => scalar_into(out, scalar, mode),
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
            Open::Map(it) => it.next().map(|(k, v)| (Some(k), v)),
        };
        match member {
            Some((key, v)) => {
                if !was_first {
                    out.push(b',');
                }
                indent(out, pretty, depth);
                if let Some(k) = key {
                    string_into(out, k);
                    out.extend_from_slice(if pretty { b": " } else { b":" });
                }
                next = Some(v);
            }
            None => {
                let close = match members {
                    Open::Array(_) => b']',
                    Open::Object(_) | Open::Map(_) => b'}',
                };
                open.pop();
                indent(out, pretty, depth - 1);
                out.push(close);
            }
        }
    }
}

pub(super) fn indent(out: &mut Vec<u8>, pretty: bool, depth: usize) {
    if pretty {
        out.push(b'\n');
        out.resize(out.len() + 2 * depth, b' ');
    }
}

/// An object's members in print order: JavaScript's (keys that are array indexes, `"0"`,
/// `"7"`, … below 2^32 − 1, first in numeric order, then the others in their order, as
/// `JSON.stringify` walks an object that `JSON.parse` built), or map order.
pub(super) fn members(o: &serde_json::Map<String, Value>, mode: Mode) -> Vec<(&String, &Value)> {
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

pub(super) fn string_into(out: &mut Vec<u8>, s: &str) {
    // Writing a `str` into memory cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

pub(super) fn scalar_into(out: &mut Vec<u8>, v: &Value, mode: Mode) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => match n.as_f64() {
            Some(f) if mode == Mode::Js && n.is_f64() => {
                out.extend_from_slice(js_number(f).as_bytes());
            }
            _ => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes()),
                (None, Some(i)) => out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
                (None, None) => out.extend_from_slice(n.to_string().as_bytes()),
            },
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

pub(super) fn array_index(k: &str) -> Option<u32> {
    if k.is_empty() || (k.len() > 1 && k.starts_with('0')) || !k.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    k.parse::<u32>().ok().filter(|&n| n != u32::MAX)
}
