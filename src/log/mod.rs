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
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// A new entry id (docs/spec.md §2: 8 hex characters, as Pi's `randomUUID().slice(0, 8)`) that
/// `taken` does not refuse: unique against every id in the file and the session id.
pub(crate) fn fresh_id<E>(
    mut taken: impl FnMut(&str) -> std::result::Result<bool, E>,
) -> std::result::Result<String, E> {
    loop {
        let u = uuid::Uuid::new_v4().simple().to_string();
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
}

impl NewEntry {
    /// An entry of any type with the given extra fields.
    pub fn new(ty: impl Into<String>, fields: Map<String, Value>) -> NewEntry {
        NewEntry {
            ty: ty.into(),
            fields,
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
            m.insert("timestamp".into(), Value::String(now_iso()));
        } else {
            m.insert("id".into(), Value::String(id.into()));
            m.insert("parentId".into(), parent);
            m.insert("timestamp".into(), Value::String(now_iso()));
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
}
