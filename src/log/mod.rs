//! The session log's file format (docs/spec.md §2): Pi's JSONL lines, read strictly
//! ([`reader`], [`header`]), written durably ([`writer`], [`io`]), migrated from older
//! versions ([`migrate`]). Bytes ↔ entries; it knows nothing of trees or state.

pub(crate) mod entry;
pub(crate) mod hash;
pub(crate) mod header;
pub(crate) mod io;
pub(crate) mod migrate;
pub(crate) mod reader;
pub(crate) mod scan;
pub(crate) mod writer;

use entry::Role;
use serde_json::{Map, Value};

/// The current time as Pi writes entry timestamps (`2024-12-03T14:00:00.000Z`).
pub(crate) fn now_iso() -> String {
    let mut s = String::with_capacity(24);
    // Writing into a `String` cannot fail.
    let _ = std::fmt::Write::write_fmt(
        &mut s,
        format_args!(
            "{}",
            humantime::format_rfc3339_millis(std::time::SystemTime::now())
        ),
    );
    s
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
    ty: String,
    fields: Map<String, Value>,
    /// A `custom` entry's `data`, already printed ([`NewEntry::custom_printed`]).
    printed_data: Option<String>,
}

impl NewEntry {
    /// An entry of any type with the given extra fields.
    pub fn new(ty: impl Into<String>, fields: Map<String, Value>) -> NewEntry {
        NewEntry {
            ty: ty.into(),
            fields,
            printed_data: None,
        }
    }
    /// [`NewEntry::custom`] with `data` already printed as [`crate::json::to_string_exact`]
    /// prints it: the line is the same, and the value is not copied to be printed.
    pub(crate) fn custom_printed(custom_type: String, data: String) -> NewEntry {
        let mut fields = Map::new();
        fields.insert("customType".into(), Value::String(custom_type));
        NewEntry {
            printed_data: Some(data),
            ..NewEntry::new("custom", fields)
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
    pub(crate) fn into_printed_custom(self) -> std::result::Result<(String, String), NewEntry> {
        let ct = match self.fields.get("customType") {
            Some(Value::String(ct)) if self.ty == "custom" && self.fields.len() == 1 => ct.clone(),
            _ => return Err(self),
        };
        match self.printed_data {
            Some(data) => Ok((ct, data)),
            None => Err(self),
        }
    }

    pub(crate) fn role(&self) -> Option<Role> {
        if self.ty != "message" {
            return None;
        }
        self.fields
            .get("message")
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            .map(Role::from_name)
    }

    pub(crate) fn to_line(&self, id: &str, parent: Option<&str>) -> String {
        self.line_at(id, parent, &now_iso())
    }

    /// The line with the timestamp `timestamp`.
    fn line_at(&self, id: &str, parent: Option<&str>, timestamp: &str) -> String {
        const RESERVED: [&str; 4] = ["type", "id", "parentId", "timestamp"];
        if self.printed_data.is_some()
            || (self.ty == "custom" && !self.fields.keys().any(|k| RESERVED.contains(&k.as_str())))
        {
            return self.custom_line(id, parent, timestamp);
        }
        self.object_line(id, parent, timestamp)
    }

    /// The line built as one object, then printed.
    fn object_line(&self, id: &str, parent: Option<&str>, timestamp: &str) -> String {
        let mut m = Map::new();
        m.insert("type".into(), Value::String(self.ty.clone()));
        let parent = parent.map_or(Value::Null, |p| Value::String(p.into()));
        if self.ty == "custom" {
            // Pi's order: type, customType, data, id, parentId, timestamp.
            for (k, v) in &self.fields {
                m.insert(k.clone(), v.clone());
            }
            m.insert("id".into(), Value::String(id.into()));
            m.insert("parentId".into(), parent);
            m.insert("timestamp".into(), Value::String(timestamp.into()));
        } else {
            m.insert("id".into(), Value::String(id.into()));
            m.insert("parentId".into(), parent);
            m.insert("timestamp".into(), Value::String(timestamp.into()));
            for (k, v) in &self.fields {
                if !matches!(k.as_str(), "type" | "id" | "parentId" | "timestamp") {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        let mut s = crate::json::to_string_exact(&Value::Object(m));
        s.push('\n');
        s
    }

    /// [`NewEntry::object_line`] of a `custom` entry whose fields name none of the four
    /// keys the log writes: printed member by member, in Pi's order, without copying the
    /// fields into a new object (the same text as through one).
    fn custom_line(&self, id: &str, parent: Option<&str>, timestamp: &str) -> String {
        use crate::json::push_str_literal;
        let data = self.printed_data.as_deref().unwrap_or("");
        let fields: usize = self.fields.keys().map(|k| k.len() + 16).sum();
        let mut line = String::with_capacity(
            96 + fields + data.len() + id.len() + parent.map_or(0, str::len) + timestamp.len(),
        );
        line.push_str("{\"type\":\"custom\"");
        for (k, v) in &self.fields {
            line.push(',');
            push_str_literal(&mut line, k);
            line.push(':');
            // A string may stand for ±Infinity ([`crate::json::infinity`]): printed as
            // a value, never as a literal.
            crate::json::push_exact(&mut line, v);
        }
        if self.printed_data.is_some() {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
