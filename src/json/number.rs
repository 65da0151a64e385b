//! Number literals as JavaScript reads and prints them.

use super::{INFINITY, JsonError, NEG_INFINITY};

/// The number literals of JSON text (outside strings).
pub(super) fn number_literals(text: &str) -> impl Iterator<Item = &str> {
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
pub(super) fn decimal(mantissa: &str, exp: i128) -> (bool, Option<(String, i128)>) {
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
pub(super) fn split_exp(s: &str) -> (&str, Option<i128>) {
    match s.find(['e', 'E']) {
        Some(p) => (&s[..p], s[p + 1..].parse::<i64>().ok().map(i128::from)),
        None => (s, Some(0)),
    }
}

/// Is `s` a number as JSON writes it: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`?
pub(super) fn valid_number(s: &str) -> bool {
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
pub(super) fn js_literal(lit: &str) -> Option<String> {
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
pub(super) fn check_literal(literal: &str) -> Result<(), JsonError> {
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
pub(super) fn js_number(f: f64) -> String {
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
