//! The one pass over JSON text before serde_json reads it: the depth limit, and the
//! lone surrogates and numbers rewritten into the encoding.

use super::number::js_literal;
use super::{JsonError, MARKER, MARKER_UTF8, MAX_READ_DEPTH};
use std::borrow::Cow;

pub(super) struct Scanned<'a> {
    pub(super) text: Cow<'a, str>,
    pub(super) depth: usize,
}

pub(super) fn hex4(b: &[u8]) -> Option<u16> {
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
pub(super) fn scan(text: &str) -> Result<Scanned<'_>, JsonError> {
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
pub(super) fn decode_markers(s: String) -> String {
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
