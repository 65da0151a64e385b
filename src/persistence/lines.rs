//! The crate's rules for what goes into a store, once for every backend: a new session's
//! header, the events of an append (turned into entry lines with fresh ids), the
//! complete entry lines a host appends, and a batch's ids and parents.

use super::pi_names::pi_session_file_name;
use crate::error::{Error, Result, RuleError};
use crate::log::NewEntry;
use crate::log::entry::Header;
use crate::log::entry::{last_members, raw_str};
use crate::log::header::check_session_id;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashSet;

/// Refuses a header no backend stores for a new session (created or imported): a version
/// other than 3, an id that breaks the session-id rule, and a header that cannot name a
/// Pi session file (no `cwd` or `timestamp`, or a name a file system cannot hold), so
/// that every stored session can be exported as one.
pub(crate) fn check_new_header(header: &Header) -> Result<()> {
    if header.version() != 3 {
        return Err(RuleError::UnsupportedNewVersion {
            session_id: header.id().to_owned(),
            version: header.version(),
        }
        .into());
    }
    check_session_id(header.id())?;
    if header.cwd().is_none() || pi_session_file_name(header).is_none() {
        return Err(RuleError::UnlocatableHeader {
            session_id: header.id().to_owned(),
        }
        .into());
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
    let refuse = |detail: String| {
        Error::from(RuleError::InvalidEvent {
            session_id: session_id.into(),
            index,
            seq,
            detail,
        })
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

/// The `type`, `id`, `parentId` and `timestamp` of an entry line, each the last
/// occurrence (as Pi's `JSON.parse` reads a member given twice); `null` counts as absent.
fn head(line: &str) -> serde_json::Result<[Option<&RawValue>; 4]> {
    let mut members = last_members(line, ["type", "id", "parentId", "timestamp"])?;
    for m in &mut members {
        if m.is_some_and(|v| v.get() == "null") {
            *m = None;
        }
    }
    Ok(members)
}

/// The `id` and `parentId` of a checked entry line (for a store's columns).
pub(crate) fn line_ids(line: &str) -> (Option<String>, Option<String>) {
    match head(line) {
        Ok([_, id, parent, _]) => (
            id.and_then(raw_str).map(Cow::into_owned),
            parent.and_then(raw_str).map(Cow::into_owned),
        ),
        Err(_) => (None, None),
    }
}

/// The `id` of a stored entry line (`None`: the line has no string id, as in a version 1
/// file).
pub(crate) fn line_id(line: &str) -> Option<String> {
    line_ids(line).0
}

/// Checks a complete entry line a host appends: one line of JSON (no line break), an
/// object with a string `type` other than `session`, a non-empty string `id`, a string or
/// null `parentId` and a `timestamp`. Whether the id is new and the parent exists is
/// [`check_ids`]'s.
pub(crate) fn check_line(
    session_id: &str,
    seq: u64,
    index: usize,
    line: &str,
) -> Result<LineFacts> {
    let refuse = |detail: String| {
        Error::from(RuleError::InvalidEvent {
            session_id: session_id.into(),
            index,
            seq,
            detail,
        })
    };
    if line.contains(['\n', '\r']) {
        return Err(refuse("is not one line (it holds a line break)".into()));
    }
    let not_entry = |e: String| {
        refuse(format!(
            "is not an entry line (an object with `type`, `id`, `parentId`, `timestamp`): {e}"
        ))
    };
    let [ty, id, parent, timestamp] = head(line).map_err(|e| not_entry(e.to_string()))?;
    fn string<'a>(
        name: &str,
        v: Option<&'a RawValue>,
        not_entry: impl Fn(String) -> Error,
    ) -> Result<Cow<'a, str>> {
        match v {
            None => Err(not_entry(format!("missing field `{name}`"))),
            Some(v) => raw_str(v).ok_or_else(|| not_entry(format!("`{name}` is not a string"))),
        }
    }
    let (ty, id) = (string("type", ty, not_entry)?, string("id", id, not_entry)?);
    let parent = match parent {
        None => None,
        Some(p) => Some(raw_str(p).ok_or_else(|| not_entry("`parentId` is not a string".into()))?),
    };
    if ty == "session" {
        return Err(refuse(
            "has type `session`, which only the header may have".into(),
        ));
    }
    if ty.is_empty() || id.is_empty() {
        return Err(refuse("has an empty `type` or `id`".into()));
    }
    if timestamp.is_none() {
        return Err(refuse("has no `timestamp`".into()));
    }
    Ok(LineFacts {
        id: id.into_owned(),
        parent: parent.map(Cow::into_owned),
    })
}

/// The entry lines of checked entries: each a child of the one before, the first a
/// child of `parent` (which ends as the last one), with fresh ids that `taken` does not
/// know (and that are not the session id or another id of the batch).
pub(crate) fn entry_lines(
    session_id: &str,
    parent: &mut Option<String>,
    entries: &[NewEntry],
    taken: impl Fn(&str) -> bool,
) -> Vec<(String, LineFacts)> {
    let mut out: Vec<(String, LineFacts)> = Vec::with_capacity(entries.len());
    for entry in entries {
        let fresh = crate::log::fresh_id(|id| {
            Ok::<_, std::convert::Infallible>(
                id == session_id || taken(id) || out.iter().any(|(_, f)| f.id == id),
            )
        });
        let id = match fresh {
            Ok(id) => id,
            Err(never) => match never {},
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
        *parent = Some(id);
    }
    out
}

/// Refuses a batch whose ids are not new or whose parents are unknown: `known` tells the
/// session's stored ids.
pub(crate) fn check_ids(
    session_id: &str,
    first_seq: u64,
    facts: &[LineFacts],
    known: impl Fn(&str) -> bool,
) -> Result<()> {
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, f) in facts.iter().enumerate() {
        let refuse = |detail: String| {
            Error::from(RuleError::InvalidEvent {
                session_id: session_id.into(),
                index: i,
                seq: first_seq + i as u64,
                detail,
            })
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
