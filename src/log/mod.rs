//! The session log's file format (docs/spec.md §2): Pi's JSONL lines, read strictly
//! ([`reader`], [`header`]), written durably ([`writer`], [`io`]), migrated from older
//! versions ([`migrate`]). Bytes ↔ entries; it knows nothing of trees or state.

pub(crate) mod entry;
pub(crate) mod hash;
pub(crate) mod header;
pub(crate) mod io;
pub(crate) mod known;
pub(crate) mod migrate;
pub(crate) mod reader;
pub(crate) mod scan;
pub(crate) mod writer;

use entry::Role;
use serde_json::{Map, Value};

/// The current time as Pi writes entry timestamps (`2024-12-03T14:00:00.000Z`).
pub(crate) fn now_iso() -> String {
    with_iso_millis(std::time::SystemTime::now(), str::to_owned)
}

/// `t` as RFC 3339 in UTC with milliseconds, as JavaScript's `Date.toISOString()` prints
/// it, handed to `f`: printed on the stack, digit by digit, no formatting machinery (a
/// write prints one per entry). Outside years 1970–9999 (a clock set far off), humantime
/// prints it.
fn with_iso_millis<R>(t: std::time::SystemTime, f: impl FnOnce(&str) -> R) -> R {
    match iso_millis(t) {
        Ok(b) => match std::str::from_utf8(&b) {
            Ok(s) => f(s),
            Err(_) => f(&humantime_millis(t)),
        },
        Err(()) => f(&humantime_millis(t)),
    }
}

fn humantime_millis(t: std::time::SystemTime) -> String {
    // Writing into a `String` cannot fail; humantime's printing can (past 9999), and what
    // it printed stands (as it always did here).
    let mut s = String::with_capacity(24);
    let _ = std::fmt::Write::write_fmt(
        &mut s,
        format_args!("{}", humantime::format_rfc3339_millis(t)),
    );
    s
}

/// The digits of [`with_iso_millis`], or `Err` outside years 1970–9999.
fn iso_millis(t: std::time::SystemTime) -> Result<[u8; 24], ()> {
    const YEAR_10000: u64 = 253_402_300_800;
    let since = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) if d.as_secs() < YEAR_10000 => d,
        _ => return Err(()),
    };
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let mut b = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            b[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, rest / 3_600);
    put(14, 2, rest % 3_600 / 60);
    put(17, 2, rest % 60);
    put(20, 3, u64::from(since.subsec_millis()));
    Ok(b)
}

/// A new entry id (docs/spec.md §2: 8 hex characters, as Pi's `randomUUID().slice(0, 8)`) that
/// `taken` does not refuse: unique against every id in the file and the session id.
pub(crate) fn fresh_id<E>(
    mut taken: impl FnMut(&str) -> std::result::Result<bool, E>,
) -> std::result::Result<String, E> {
    loop {
        let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
        let u = uuid::Uuid::new_v4().simple().encode_lower(&mut buf);
        let id = &u[..8];
        if !taken(id)? {
            return Ok(id.to_owned());
        }
    }
}

/// A new entry to append; the log adds `id`, `parentId` and `timestamp`.
#[derive(Debug, Clone)]
pub struct NewEntry {
    body: Body,
}

#[derive(Debug, Clone)]
enum Body {
    /// An entry of type `ty` with these members.
    Fields {
        ty: String,
        fields: Map<String, Value>,
    },
    /// A `custom` entry whose `data` is printed already ([`NewEntry::custom_printed`]):
    /// every state event this crate appends.
    Printed {
        custom_type: std::sync::Arc<str>,
        data: String,
    },
}

impl NewEntry {
    /// An entry of any type with the given extra fields.
    pub fn new(ty: impl Into<String>, fields: Map<String, Value>) -> NewEntry {
        NewEntry {
            body: Body::Fields {
                ty: ty.into(),
                fields,
            },
        }
    }
    /// A `custom` entry whose `data` is JSON text printed in the crate's storage encoding
    /// ([`crate::json::to_string_exact`]): written as it is, not parsed and printed again.
    pub(crate) fn custom_printed(custom_type: std::sync::Arc<str>, data: String) -> NewEntry {
        NewEntry {
            body: Body::Printed { custom_type, data },
        }
    }
    /// A `custom` entry, laid out as Pi's `appendCustomEntry` writes it.
    pub fn custom(custom_type: impl Into<String>, data: Option<Value>) -> NewEntry {
        let mut fields = Map::new();
        fields.insert("customType".into(), Value::String(custom_type.into()));
        if let Some(d) = data {
            fields.insert("data".into(), d);
        }
        NewEntry::new("custom", fields)
    }
    /// A `message` entry holding `message` (an object with a `role`).
    pub fn message(message: Value) -> NewEntry {
        let mut fields = Map::new();
        fields.insert("message".into(), message);
        NewEntry::new("message", fields)
    }

    /// A [`NewEntry::custom_printed`] entry's customType and printed `data`, taken apart
    /// for the log's own index; any other entry is given back.
    pub(crate) fn into_printed_custom(
        self,
    ) -> std::result::Result<(std::sync::Arc<str>, String), NewEntry> {
        match self.body {
            Body::Printed { custom_type, data } => Ok((custom_type, data)),
            body @ Body::Fields { .. } => Err(NewEntry { body }),
        }
    }

    pub(crate) fn role(&self) -> Option<Role> {
        match &self.body {
            Body::Fields { ty, fields } if ty == "message" => fields
                .get("message")
                .and_then(|m| m.get("role"))
                .and_then(Value::as_str)
                .map(Role::from_name),
            _ => None,
        }
    }

    pub(crate) fn to_line(&self, id: &str, parent: Option<&str>) -> String {
        with_iso_millis(std::time::SystemTime::now(), |now| {
            self.line_at(id, parent, now)
        })
    }

    /// The line with the timestamp `timestamp`.
    fn line_at(&self, id: &str, parent: Option<&str>, timestamp: &str) -> String {
        const RESERVED: [&str; 4] = ["type", "id", "parentId", "timestamp"];
        match &self.body {
            Body::Printed { custom_type, data } => {
                custom_line(None, Some((custom_type, data)), id, parent, timestamp)
            }
            Body::Fields { ty, fields }
                if ty == "custom" && !fields.keys().any(|k| RESERVED.contains(&k.as_str())) =>
            {
                custom_line(Some(fields), None, id, parent, timestamp)
            }
            Body::Fields { ty, fields } => object_line(ty, fields, id, parent, timestamp),
        }
    }
}

/// The line of an entry of type `ty` with `fields`, built as one object, then printed.
fn object_line(
    ty: &str,
    fields: &Map<String, Value>,
    id: &str,
    parent: Option<&str>,
    timestamp: &str,
) -> String {
    let mut m = Map::new();
    m.insert("type".into(), Value::String(ty.to_owned()));
    let parent = parent.map_or(Value::Null, |p| Value::String(p.into()));
    if ty == "custom" {
        // Pi's order: type, customType, data, id, parentId, timestamp.
        for (k, v) in fields {
            m.insert(k.clone(), v.clone());
        }
        m.insert("id".into(), Value::String(id.into()));
        m.insert("parentId".into(), parent);
        m.insert("timestamp".into(), Value::String(timestamp.into()));
    } else {
        m.insert("id".into(), Value::String(id.into()));
        m.insert("parentId".into(), parent);
        m.insert("timestamp".into(), Value::String(timestamp.into()));
        for (k, v) in fields {
            if !matches!(k.as_str(), "type" | "id" | "parentId" | "timestamp") {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    let mut s = crate::json::to_string_exact(&Value::Object(m));
    s.push('\n');
    s
}

/// [`object_line`] of a `custom` entry whose fields name none of the four keys the log
/// writes (`fields`), or of one whose `data` is printed already (`printed`: customType and
/// data): printed member by member, in Pi's order, without copying anything into a new
/// object (the same text as through one).
fn custom_line(
    fields: Option<&Map<String, Value>>,
    printed: Option<(&str, &str)>,
    id: &str,
    parent: Option<&str>,
    timestamp: &str,
) -> String {
    use crate::json::push_str_literal;
    let members: usize = fields.map_or(0, |f| f.keys().map(|k| k.len() + 16).sum());
    let printed_len = printed.map_or(0, |(ct, data)| ct.len() + data.len());
    let mut line = String::with_capacity(
        96 + members + printed_len + id.len() + parent.map_or(0, str::len) + timestamp.len(),
    );
    line.push_str("{\"type\":\"custom\"");
    for (k, v) in fields.into_iter().flatten() {
        line.push(',');
        push_str_literal(&mut line, k);
        line.push(':');
        // A string may stand for ±Infinity ([`crate::json::infinity`]): printed as
        // a value, never as a literal.
        crate::json::push_exact(&mut line, v);
    }
    if let Some((custom_type, data)) = printed {
        line.push_str(",\"customType\":");
        push_str_literal(&mut line, custom_type);
        line.push_str(",\"data\":");
        line.push_str(data);
    }
    line.push_str(",\"id\":");
    push_str_literal(&mut line, id);
    line.push_str(",\"parentId\":");
    match parent {
        Some(p) => push_str_literal(&mut line, p),
        None => line.push_str("null"),
    }
    line.push_str(",\"timestamp\":");
    push_str_literal(&mut line, timestamp);
    line.push_str("}\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_timestamp_is_printed_as_humantime_prints_it() {
        use std::time::{Duration, UNIX_EPOCH};
        // Every day for 1,000 years from 1970 at a moving time of day, leap days and
        // the turns of centuries included, and the edges of the range printed here.
        let mut secs: Vec<u64> = (0..365_250u64)
            .map(|d| d * 86_400 + (d * 7_919) % 86_400)
            .collect();
        secs.extend([0, 951_782_400, 4_107_542_399, 253_402_300_799]);
        for s in secs {
            for ms in [0, 7, 999] {
                let t = UNIX_EPOCH + Duration::from_secs(s) + Duration::from_millis(ms);
                let expected = humantime::format_rfc3339_millis(t).to_string();
                assert_eq!(with_iso_millis(t, str::to_owned), expected, "{s} s {ms} ms");
            }
        }
        assert_eq!(now_iso().len(), "2026-12-04T09:00:00.000Z".len());
        // Past the range: whatever humantime prints, without a panic.
        let far = UNIX_EPOCH + Duration::from_secs(253_402_300_800);
        assert!(iso_millis(far).is_err());
        assert!(!with_iso_millis(far, str::to_owned).starts_with("9999"));
    }

    impl NewEntry {
        /// The line as one object printed whole: what every line must equal.
        fn object_line(&self, id: &str, parent: Option<&str>, timestamp: &str) -> String {
            match &self.body {
                Body::Fields { ty, fields } => object_line(ty, fields, id, parent, timestamp),
                Body::Printed { custom_type, data } => {
                    let mut fields = Map::new();
                    fields.insert("customType".into(), json!(&**custom_type));
                    let data = crate::json::from_str(data).expect("printed data parses");
                    fields.insert("data".into(), data);
                    object_line("custom", &fields, id, parent, timestamp)
                }
            }
        }
    }

    /// The line printed member by member is the line printed as one object.
    #[test]
    fn a_custom_line_is_the_object_printed_whole() {
        let data = [
            json!({"v": 1, "op": "set", "value": {"z": 1, "a": [1.0, -0.0, "\u{1F600}"]}}),
            json!({"value": crate::json::from_str(r#"{"s":"\ud800 lone","n":1e400,"k\"":"\u0000"}"#).expect("parses")}),
            json!(null),
            json!("a string"),
        ];
        for (i, d) in data.into_iter().enumerate() {
            for parent in [None, Some("ab12cd34")] {
                let e = NewEntry::custom("session-state/p\u{e9}", Some(d.clone()));
                let t = "2026-12-03T23:00:00.000Z";
                let fast = e.line_at("0123abcd", parent, t);
                assert_eq!(fast, e.object_line("0123abcd", parent, t), "case {i}");
                assert!(fast.ends_with('\n'));
            }
        }
        // Fields naming a key the log writes take the object's path.
        let mut fields = Map::new();
        fields.insert("id".into(), json!("mine"));
        let e = NewEntry::new("custom", fields);
        let line = e.line_at("0123abcd", None, "t");
        assert_eq!(
            line,
            "{\"type\":\"custom\",\"id\":\"0123abcd\",\"parentId\":null,\"timestamp\":\"t\"}\n"
        );
        // Data printed before: the same line as the value printed with the entry.
        let v = json!({"v": 1, "scope": "branch", "op": "set", "value": [1.5, {"b": null}]});
        let printed =
            NewEntry::custom_printed("ct\u{e9}\"".into(), crate::json::to_string_exact(&v));
        assert_eq!(
            printed.line_at("i", None, "t"),
            printed.object_line("i", None, "t")
        );
        let whole = NewEntry::custom("ct\u{e9}\"", Some(v.clone()));
        assert_eq!(
            printed.line_at("i", Some("p"), "t"),
            whole.object_line("i", Some("p"), "t")
        );
        let printed = NewEntry::custom_printed("ct".into(), crate::json::to_string_exact(&v));
        let whole = NewEntry::custom("ct", Some(v));
        assert_eq!(
            printed.line_at("i", Some("p"), "t"),
            whole.object_line("i", Some("p"), "t")
        );
        let none = NewEntry::custom("x", None);
        assert_eq!(
            none.line_at("i", None, "t"),
            none.object_line("i", None, "t")
        );
    }
}
