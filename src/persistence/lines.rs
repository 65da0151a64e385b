//! What every backend checks before it stores anything: a new session's header, the
//! events of an `append` (turned into entries), and the complete entry lines of an
//! `append_lines` (import, forks).

use crate::error::{Error, Result};
use crate::log::NewEntry;
use crate::log::entry::Header;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Refuses a header no backend writes: a version other than 3, an id that is empty or
/// holds a path separator, a newline or a NUL.
pub(crate) fn check_new_header(header: &Header) -> Result<()> {
    if header.version() != 3 {
        return Err(Error::UnsupportedNewVersion {
            session_id: header.id().to_owned(),
            version: header.version(),
        });
    }
    check_session_id(header.id())
}

/// A session id usable in every backend (and in a cache file's name).
pub(crate) fn check_session_id(id: &str) -> Result<()> {
    if id.is_empty() || id.contains(['/', '\\', '\n', '\0']) || id == "." || id == ".." {
        return Err(Error::InvalidSessionId {
            session_id: id.to_owned(),
        });
    }
    Ok(())
}

/// Checks one event of an `append` and turns it into an entry; `index` is its place in
/// the batch.
pub(crate) fn to_new_entry(
    session_id: &str,
    seq: u64,
    index: usize,
    event: &Value,
) -> Result<NewEntry> {
    let refuse = |detail: String| Error::InvalidEvent {
        session_id: session_id.into(),
        index,
        seq,
        detail,
    };
    let Value::Object(map) = event else {
        return Err(refuse("is not a JSON object".into()));
    };
    let ty = match map.get("type") {
        Some(Value::String(t)) if !t.is_empty() => t,
        _ => return Err(refuse("has no string `type`".into())),
    };
    if ty == "session" {
        return Err(refuse(
            "has type `session`, which only the header may have".into(),
        ));
    }
    for key in ["id", "parentId", "timestamp"] {
        if map.contains_key(key) {
            return Err(refuse(format!(
                "has a `{key}` field; the store assigns id, parentId and timestamp"
            )));
        }
    }
    let fields: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| k.as_str() != "type")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(NewEntry::new(ty.clone(), fields))
}

/// The id and parent of a checked entry line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineFacts {
    pub id: String,
    pub parent: Option<String>,
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    ty: Cow<'a, str>,
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(rename = "parentId", borrow, default)]
    parent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    timestamp: Option<&'a serde_json::value::RawValue>,
}

/// Checks a complete entry line of `append_lines`: one line of JSON (no newline), an
/// object with a string `type` other than `session`, a non-empty string `id`, a string or
/// null `parentId` and a `timestamp`. Whether the id is new and the parent exists is the
/// backend's check (it knows the stored ids).
pub(crate) fn check_line(
    session_id: &str,
    seq: u64,
    index: usize,
    line: &str,
) -> Result<LineFacts> {
    let refuse = |detail: String| Error::InvalidEvent {
        session_id: session_id.into(),
        index,
        seq,
        detail,
    };
    if line.contains(['\n', '\r']) {
        return Err(refuse("is not one line (it holds a line break)".into()));
    }
    let head: Head<'_> = serde_json::from_str(line).map_err(|e| {
        refuse(format!(
            "is not an entry line (an object with `type`, `id`, `parentId`, `timestamp`): {e}"
        ))
    })?;
    if head.ty == "session" {
        return Err(refuse(
            "has type `session`, which only the header may have".into(),
        ));
    }
    if head.ty.is_empty() || head.id.is_empty() {
        return Err(refuse("has an empty `type` or `id`".into()));
    }
    if head.timestamp.is_none() {
        return Err(refuse("has no `timestamp`".into()));
    }
    Ok(LineFacts {
        id: head.id.into_owned(),
        parent: head.parent.map(Cow::into_owned),
    })
}

/// The entry lines of an `append`'s events: each a child of the one before, the first a
/// child of `parent` (the session's last entry), with fresh ids that `taken` does not
/// know.
pub(crate) fn event_lines(
    session_id: &str,
    first_seq: u64,
    mut parent: Option<String>,
    events: &[Value],
    mut taken: impl FnMut(&str) -> bool,
) -> Result<Vec<(String, LineFacts)>> {
    let entries = events
        .iter()
        .enumerate()
        .map(|(i, e)| to_new_entry(session_id, first_seq + i as u64, i, e))
        .collect::<Result<Vec<_>>>()?;
    let mut out: Vec<(String, LineFacts)> = Vec::with_capacity(entries.len());
    for entry in entries {
        let id = loop {
            let u = uuid::Uuid::new_v4().simple().to_string();
            let id = u[..8].to_owned();
            if !taken(&id) && out.iter().all(|(_, f)| f.id != id) {
                break id;
            }
        };
        let mut line = entry.to_line(&id, parent.as_deref());
        line.pop();
        out.push((
            line,
            LineFacts {
                id: id.clone(),
                parent: parent.clone(),
            },
        ));
        parent = Some(id);
    }
    Ok(out)
}

/// Refuses a batch whose ids are not new or whose parents are unknown.
pub(crate) fn check_ids(
    session_id: &str,
    first_seq: u64,
    facts: &[LineFacts],
    known: impl Fn(&str) -> bool,
) -> Result<()> {
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (i, f) in facts.iter().enumerate() {
        let refuse = |detail: String| Error::InvalidEvent {
            session_id: session_id.into(),
            index: i,
            seq: first_seq + i as u64,
            detail,
        };
        if f.id == session_id || known(&f.id) || seen.contains(f.id.as_str()) {
            return Err(refuse(format!(
                "has id {:?}, which the session already uses",
                f.id
            )));
        }
        if let Some(p) = &f.parent
            && !known(p)
            && !seen.contains(p.as_str())
        {
            return Err(refuse(format!(
                "has parentId {p:?}, which is no entry of the session"
            )));
        }
        seen.insert(&f.id);
    }
    Ok(())
}
