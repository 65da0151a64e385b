//! The entry model: what we parse out of each line, and nothing more.
//!
//! A line is parsed once, borrowed from the read buffer. Only `type`, `id`, `parentId`,
//! `customType`, `data` and a message's `role` are kept; every other field (message bodies,
//! usage, unknown fields of unknown types) is skipped by the parser without being stored.
//! The line's bytes on disk are never rewritten, so unknown types and fields survive
//! untouched.

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// The entry types Pi 1.x and 0.x write (docs/spec.md §2). Anything else is [`EntryType::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryType {
    /// `message`
    Message,
    /// `thinking_level_change`
    ThinkingLevelChange,
    /// `model_change`
    ModelChange,
    /// `compaction`
    Compaction,
    /// `branch_summary`
    BranchSummary,
    /// `custom` (extension state; our events are of this type)
    Custom,
    /// `custom_message`
    CustomMessage,
    /// `label`
    Label,
    /// `session_info`
    SessionInfo,
    /// `usage` (Pi 1.x)
    Usage,
    /// `context_edit` (Pi 1.x)
    ContextEdit,
    /// Any other type: kept, never interpreted.
    Other,
}

impl EntryType {
    /// Maps the `type` field to the enum.
    pub fn from_name(name: &str) -> EntryType {
        match name {
            "message" => EntryType::Message,
            "thinking_level_change" => EntryType::ThinkingLevelChange,
            "model_change" => EntryType::ModelChange,
            "compaction" => EntryType::Compaction,
            "branch_summary" => EntryType::BranchSummary,
            "custom" => EntryType::Custom,
            "custom_message" => EntryType::CustomMessage,
            "label" => EntryType::Label,
            "session_info" => EntryType::SessionInfo,
            "usage" => EntryType::Usage,
            "context_edit" => EntryType::ContextEdit,
            _ => EntryType::Other,
        }
    }
}

/// The role of a `message` entry, as far as this crate cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// `user`
    User,
    /// `assistant`
    Assistant,
    /// `toolResult`
    ToolResult,
    /// Any other role (system, bashExecution, custom, summaries, ...).
    Other,
}

impl Role {
    pub(crate) fn from_name(name: &str) -> Role {
        match name {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "toolResult" => Role::ToolResult,
            _ => Role::Other,
        }
    }
}

/// A string borrowed from the input when it has no escapes, owned otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CowStr<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for CowStr<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The part of a `message` we look at: its role. Any other shape is tolerated.
#[derive(Debug, Default)]
pub(crate) struct MessageHead<'a> {
    pub role: Option<CowStr<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for MessageHead<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MessageHead<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut head = MessageHead::default();
                while let Some(key) = map.next_key::<Key>()? {
                    if key.0 == Field::Role {
                        // The last occurrence, as `JSON.parse` keeps it. A non-string role
                        // is tolerated (Pi parses it too); it is just unknown.
                        head.role = match map.next_value::<&'de RawValue>() {
                            Ok(raw) => serde_json::from_str::<CowStr<'de>>(raw.get()).ok(),
                            Err(e) => return Err(e),
                        };
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(head)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MessageHead::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(MessageHead::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(MessageHead::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(MessageHead::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(MessageHead::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(MessageHead::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(MessageHead::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// One entry line, borrowed from the buffer. Fields other than these are skipped.
///
/// Keys are read as bytes, so a key holding a lone surrogate escape (valid JSON, which
/// serde_json's `str` keys refuse) is just an unknown field. A member given twice is read
/// as Pi's `JSON.parse` reads it: the last occurrence wins (a derived `Deserialize` would
/// refuse the line, and nothing Pi reads may seal a session); [`RawEntry::repeated`]
/// names the first of these members that repeats, for `verify`.
#[derive(Debug)]
pub(crate) struct RawEntry<'a> {
    pub ty: CowStr<'a>,
    pub id: Option<&'a RawValue>,
    /// The `parentId` key as written.
    pub parent_id: ParentKey<&'a RawValue>,
    pub custom_type: Option<&'a RawValue>,
    pub data: Option<&'a RawValue>,
    pub message: Option<MessageHead<'a>>,
    /// The first of the members above that the line gives more than once.
    pub repeated: Option<&'static str>,
}

/// An entry line's `parentId` key: a v2/v3 entry must have one (`null` for a root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParentKey<T> {
    /// No `parentId` key.
    Missing,
    /// `"parentId": null` (for [`super::migrate`]'s check: or a value that is not a string).
    Null,
    /// Any other value (the reader requires a string).
    Given(T),
}

impl<T> ParentKey<T> {
    /// Whether the line has the key.
    pub(crate) fn is_present(&self) -> bool {
        !matches!(self, ParentKey::Missing)
    }
}

/// The keys this crate reads; anything else is [`Field::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Type,
    Id,
    ParentId,
    CustomType,
    Data,
    Message,
    Role,
    Other,
}

/// An object key, read as bytes (lone surrogates allowed) and classified.
struct Key(Field);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Key, E> {
                Ok(Key(match v {
                    b"type" => Field::Type,
                    b"id" => Field::Id,
                    b"parentId" => Field::ParentId,
                    b"customType" => Field::CustomType,
                    b"data" => Field::Data,
                    b"message" => Field::Message,
                    b"role" => Field::Role,
                    _ => Field::Other,
                }))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                self.visit_bytes(v.as_bytes())
            }
        }
        d.deserialize_bytes(V)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawEntry<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEntry<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an entry object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut repeated = None;
                let mut seen = |given: bool, name: &'static str| {
                    if given && repeated.is_none() {
                        repeated = Some(name);
                    }
                };
                let mut ty: Option<&'de RawValue> = None;
                let mut id = None;
                let mut parent_id = None;
                let mut custom_type = None;
                let mut data = None;
                let mut message = None;
                // Each member is overwritten by a later occurrence: `JSON.parse` keeps the
                // last one.
                while let Some(Key(field)) = map.next_key::<Key>()? {
                    match field {
                        Field::Type => {
                            seen(ty.is_some(), "type");
                            ty = Some(map.next_value::<&'de RawValue>()?);
                        }
                        Field::Id => {
                            seen(id.is_some(), "id");
                            id = Some(map.next_value::<Option<&'de RawValue>>()?);
                        }
                        Field::ParentId => {
                            seen(parent_id.is_some(), "parentId");
                            parent_id = Some(map.next_value::<Option<&'de RawValue>>()?);
                        }
                        Field::CustomType => {
                            seen(custom_type.is_some(), "customType");
                            custom_type = Some(map.next_value::<Option<&'de RawValue>>()?);
                        }
                        Field::Data => {
                            seen(data.is_some(), "data");
                            data = Some(map.next_value::<Option<&'de RawValue>>()?);
                        }
                        Field::Message => {
                            seen(message.is_some(), "message");
                            message = Some(map.next_value::<Option<MessageHead<'de>>>()?);
                        }
                        Field::Role | Field::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                let raw = ty.ok_or_else(|| de::Error::missing_field("type"))?;
                // A lone surrogate in the type is just an unknown type.
                let ty = match serde_json::from_str::<CowStr<'de>>(raw.get()) {
                    Ok(s) => s,
                    Err(e) => match crate::json::from_str(raw.get()) {
                        Ok(serde_json::Value::String(s)) => CowStr(Cow::Owned(s)),
                        _ => return Err(de::Error::custom(e)),
                    },
                };
                Ok(RawEntry {
                    ty,
                    id: id.flatten(),
                    parent_id: match parent_id {
                        None => ParentKey::Missing,
                        Some(None) => ParentKey::Null,
                        Some(Some(p)) => ParentKey::Given(p),
                    },
                    custom_type: custom_type.flatten(),
                    data: data.flatten(),
                    message: message.flatten(),
                    repeated,
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// The raw values of the members `names` of the JSON object `text`, each the last
/// occurrence, as `JSON.parse` keeps it (a member given twice is no error). `None` for a
/// member the object does not have. Keys are compared as bytes, so a key holding a lone
/// surrogate escape is just another key.
pub(crate) fn last_members<'a, const N: usize>(
    text: &'a str,
    names: [&'static str; N],
) -> serde_json::Result<[Option<&'a RawValue>; N]> {
    struct Pick<const N: usize>([&'static str; N]);
    struct Which<'n, const N: usize>(&'n [&'static str; N]);
    impl<'de, const N: usize> de::DeserializeSeed<'de> for Which<'_, N> {
        type Value = Option<usize>;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
            struct V<'n, const N: usize>(&'n [&'static str; N]);
            impl<'de, const N: usize> Visitor<'de> for V<'_, N> {
                type Value = Option<usize>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an object key")
                }
                fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Option<usize>, E> {
                    Ok(self.0.iter().position(|n| n.as_bytes() == v))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
                    self.visit_bytes(v.as_bytes())
                }
            }
            d.deserialize_bytes(V(self.0))
        }
    }
    impl<'de, const N: usize> de::DeserializeSeed<'de> for Pick<N> {
        type Value = [Option<&'de RawValue>; N];
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de, const N: usize> Visitor<'de> for Pick<N> {
        type Value = [Option<&'de RawValue>; N];
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = [None; N];
            while let Some(which) = map.next_key_seed(Which(&self.0))? {
                match which {
                    Some(i) => out[i] = Some(map.next_value::<&'de RawValue>()?),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let out = de::DeserializeSeed::deserialize(Pick(names), &mut de)?;
    de.end()?;
    Ok(out)
}

/// The session header's fields we read (line 1).
#[derive(Debug, Deserialize)]
pub(crate) struct RawHeader<'a> {
    #[serde(rename = "type", borrow)]
    pub ty: &'a RawValue,
    #[serde(default, borrow)]
    pub id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub version: Option<&'a RawValue>,
    #[serde(default)]
    pub cwd: Option<serde_json::Value>,
    #[serde(default)]
    pub timestamp: Option<serde_json::Value>,
    #[serde(rename = "parentSession", default)]
    pub parent_session: Option<serde_json::Value>,
}

/// Parses a raw JSON value that must be a string.
pub(crate) fn raw_str<'a>(raw: &'a RawValue) -> Option<Cow<'a, str>> {
    serde_json::from_str::<CowStr<'a>>(raw.get())
        .ok()
        .map(|c| c.0)
}

/// The session header (line 1).
///
/// Read from a file by the one header reader ([`crate::format::read_header`], the log's reader),
/// or made for a new session with [`Header::new`]. Its fields are read through accessors.
///
/// ```
/// use session_state::Header;
/// let h = Header::new("0195f1d0", "/home/me/project").with_timestamp("2024-12-03T14:00:00.000Z");
/// assert_eq!((h.id(), h.version(), h.cwd()), ("0195f1d0", 3, Some("/home/me/project")));
/// assert_eq!(
///     h.to_line(),
///     concat!(
///         r#"{"type":"session","version":3,"id":"0195f1d0","#,
///         r#""timestamp":"2024-12-03T14:00:00.000Z","cwd":"/home/me/project"}"#,
///         "\n"
///     )
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    id: String,
    version: u32,
    cwd: Option<String>,
    timestamp: Option<String>,
    parent_session: Option<String>,
}

impl Header {
    /// A fresh version-3 header for a new session, stamped now.
    pub fn new(id: impl Into<String>, cwd: impl Into<String>) -> Header {
        Header {
            id: id.into(),
            version: 3,
            cwd: Some(cwd.into()),
            timestamp: Some(crate::log::now_iso()),
            parent_session: None,
        }
    }

    /// A header as read from line 1 (the header reader's constructor).
    pub(crate) fn from_parts(
        id: String,
        version: u32,
        cwd: Option<String>,
        timestamp: Option<String>,
        parent_session: Option<String>,
    ) -> Header {
        Header {
            id,
            version,
            cwd,
            timestamp,
            parent_session,
        }
    }

    /// This header with another creation time (ISO 8601), which also names the file
    /// ([`crate::PiJsonlStore::locate`]).
    pub fn with_timestamp(mut self, timestamp: impl Into<String>) -> Header {
        self.timestamp = Some(timestamp.into());
        self
    }

    /// This header naming the session it was forked from (`parentSession`).
    pub fn with_parent_session(mut self, parent: impl Into<String>) -> Header {
        self.parent_session = Some(parent.into());
        self
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Format version as written in the file (1 when absent). Files of version 1 and 2
    /// are migrated in memory; on disk before the first append.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The working directory the session belongs to.
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// When the session was created (ISO 8601).
    pub fn timestamp(&self) -> Option<&str> {
        self.timestamp.as_deref()
    }

    /// The session this one was forked from (`/fork`, `/clone`).
    pub fn parent_session(&self) -> Option<&str> {
        self.parent_session.as_deref()
    }

    /// The header as Pi writes it: `{"type":"session","version":3,"id",...}`.
    pub fn to_line(&self) -> String {
        let mut m = serde_json::Map::new();
        m.insert("type".into(), "session".into());
        m.insert("version".into(), self.version.into());
        m.insert("id".into(), self.id.clone().into());
        if let Some(t) = &self.timestamp {
            m.insert("timestamp".into(), t.clone().into());
        }
        if let Some(c) = &self.cwd {
            m.insert("cwd".into(), c.clone().into());
        }
        if let Some(p) = &self.parent_session {
            m.insert("parentSession".into(), p.clone().into());
        }
        let mut s = serde_json::Value::Object(m).to_string();
        s.push('\n');
        s
    }
}
