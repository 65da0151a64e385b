//! A folded value at a position, read from the rows: find the plugin's nearest branch
//! event above the position segment by segment (in each segment on the path to the root,
//! the greatest event of the plugin at or above the path's node there: one lookup in the
//! `events_by_plugin` index) and unfold its storage; or read the session value. No other
//! plugin's events are looked at.

use super::schema::from_columns;
use super::{Rows, db_err};
use crate::error::{Error, Location, Result, StateError, UnknownEntry};
use crate::state::envelope::Scope;
use crate::state::step::Stored;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::path::Path;

/// An `events` row as read back: scope, error, error_idx, state version.
type EventTuple = (Option<String>, Option<String>, Option<i64>, Option<u32>);

/// An event row found by a lookup: its index, scope and error, and its storage (`Err`: a
/// row that does not decode).
type FoundEvent = (i64, EventTuple, std::result::Result<Stored, String>);

/// A folded value read from the rows: the value, the state version of the event that
/// made it (1 without one) and that event's index (`None`: no event).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReadValue {
    pub value: Option<Value>,
    pub version: u32,
    pub event: Option<i64>,
}

impl ReadValue {
    const NONE: ReadValue = ReadValue {
        value: None,
        version: 1,
        event: None,
    };
}

/// The entry id of node `idx`, for a [`ReadValue::event`].
pub(crate) fn entry_id_at(
    conn: &Connection,
    key: &str,
    idx: i64,
) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT entry_id FROM nodes WHERE file = ?1 AND idx = ?2")?
        .query_row(params![key, idx], |r| r.get(0))
        .optional()
}

/// The error of a fold that met a bad event (stored as the event's index), naming the event's
/// entry and place from the rows. `Err`: the lookup failed (the database error), or the rows do
/// not hold the event the fold error names
/// ([`ProjectionError::CorruptProjection`](crate::ProjectionError::CorruptProjection): the
/// session is rebuilt and read again).
fn bad_event(
    conn: &Connection,
    rows: Rows<'_>,
    key: &str,
    plugin: &str,
    detail: String,
    idx: i64,
) -> Result<Error> {
    let found: Option<(String, i64, i64)> = conn
        .prepare_cached(
            "SELECT n.entry_id, e.line, e.offset FROM nodes n JOIN events e ON e.file = n.file \
             AND e.idx = n.idx WHERE n.file = ?1 AND n.idx = ?2",
        )
        .and_then(|mut q| {
            q.query_row(params![key, idx], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(db_err(rows.db, "reading the entry of a bad state event"))?;
    let Some((entry_id, line, offset)) = found else {
        return Err(rows.corrupt(format!(
            "event {idx}, named by the error of plugin {plugin:?}'s fold, is missing"
        )));
    };
    Ok(Error::State(StateError::BadEvent {
        path: rows.file.to_path_buf(),
        plugin: plugin.into(),
        entry_id,
        at: Location {
            line: line as u64,
            offset: offset as u64,
        },
        detail,
    }))
}

pub(super) fn read_value(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    plugin: &str,
    scope: Scope,
    at: Option<&str>,
) -> Result<ReadValue> {
    let q = |r| db_err(db, "reading the projection")(r);
    let rows = Rows { db, file };
    let parse = |v: Option<String>| -> Result<Option<Value>> {
        v.map(|s| rows.json("a stored value", &s)).transpose()
    };
    match scope {
        Scope::Session => {
            if let Some(at) = at {
                node_of(conn, key, at).map_err(q)?.ok_or_else(|| {
                    Error::from(UnknownEntry {
                        path: file.to_path_buf(),
                        id: at.into(),
                    })
                })?;
            }
            type SessionRow = (
                Option<String>,
                Option<String>,
                Option<i64>,
                Option<u32>,
                Option<i64>,
            );
            let row: Option<SessionRow> = conn
                .prepare_cached(
                    "SELECT value, error, error_idx, sv, last_idx FROM session_values \
                     WHERE file = ?1 AND plugin = ?2",
                )
                .and_then(|mut stmt| {
                    stmt.query_row(params![key, plugin], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })
                    .optional()
                })
                .map_err(q)?;
            match row {
                None => Ok(ReadValue::NONE),
                Some((_, Some(err), Some(idx), _, _)) => {
                    Err(bad_event(conn, rows, key, plugin, err, idx)?)
                }
                Some((v, _, _, sv, last)) => Ok(ReadValue {
                    value: parse(v)?,
                    version: sv.unwrap_or(1),
                    event: last,
                }),
            }
        }
        Scope::Branch => {
            let start = match at {
                Some(at) => Some(node_of(conn, key, at).map_err(q)?.ok_or_else(|| {
                    Error::from(UnknownEntry {
                        path: file.to_path_buf(),
                        id: at.into(),
                    })
                })?),
                None => conn
                    .prepare_cached(
                        "SELECT n.idx, n.seg FROM sessions s JOIN nodes n ON n.file = s.file \
                         AND n.idx = s.entry_count - 1 WHERE s.file = ?1",
                    )
                    .and_then(|mut stmt| {
                        stmt.query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
                            .optional()
                    })
                    .map_err(q)?,
            };
            let Some((bound, seg)) = start else {
                return Ok(ReadValue::NONE);
            };
            let Some((e, (s, error, error_idx, sv), at)) =
                nearest_branch_event(conn, rows, key, plugin, seg, bound)?
            else {
                return Ok(ReadValue::NONE);
            };
            if !matches!(s.as_deref(), None | Some("branch")) {
                return Err(rows.corrupt(format!("event {e}: unknown stored scope {s:?}")));
            }
            if let (Some(err), Some(idx)) = (error, error_idx) {
                return Err(bad_event(conn, rows, key, plugin, err, idx)?);
            }
            let decoded = |i: i64, s: std::result::Result<Stored, String>| {
                s.map_err(|d| rows.corrupt(format!("event {i}: {d}")))
            };
            let at = decoded(e, at)?;
            // The base events of a delta, by index (prepared only when there is one).
            let mut by_idx = None;
            let value = rows.unfold(at, |i| {
                let stmt = match &mut by_idx {
                    Some(stmt) => stmt,
                    None => by_idx.insert(
                        conn.prepare_cached(
                            "SELECT value, base, delta, chain FROM events \
                             WHERE file = ?1 AND idx = ?2",
                        )
                        .map_err(q)?,
                    ),
                };
                stmt.query_row(params![key, i], |r| {
                    Ok(from_columns(r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .optional()
                .map_err(q)?
                .map(|s| decoded(i, s))
                .transpose()
            })?;
            Ok(ReadValue {
                value,
                version: sv.unwrap_or(1),
                event: Some(e),
            })
        }
    }
}

/// The event `plugin`'s branch fold ends at, read at or above node `bound` of segment
/// `seg`: its index, scope, error and storage. Per segment on the path to the root, one
/// lookup of the plugin's greatest event at or above the path's node there among those a
/// branch fold sees (branch scope, or unknown), then the segment's fork.
fn nearest_branch_event(
    conn: &Connection,
    rows: Rows<'_>,
    key: &str,
    plugin: &str,
    mut seg: i64,
    mut bound: i64,
) -> Result<Option<FoundEvent>> {
    let q = |r| db_err(rows.db, "reading the projection")(r);
    let mut event = conn
        .prepare_cached(
            "SELECT idx, scope, error, error_idx, value, base, delta, chain, sv FROM events \
             INDEXED BY events_by_plugin WHERE file = ?1 AND plugin = ?2 AND seg = ?3 AND idx <= ?4 \
             AND scope IS NOT 'session' ORDER BY idx DESC LIMIT 1",
        )
        .map_err(q)?;
    // Prepared at the first segment without the event.
    let mut fork = None;
    let mut steps = 0;
    let found = loop {
        steps += 1;
        let hit = event
            .query_row(params![key, plugin, seg, bound], |r| {
                Ok((
                    r.get(0)?,
                    (r.get(1)?, r.get(2)?, r.get(3)?, r.get(8)?),
                    from_columns(r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?),
                ))
            })
            .optional()
            .map_err(q)?;
        if hit.is_some() {
            break hit;
        }
        let stmt = match &mut fork {
            Some(stmt) => stmt,
            None => fork.insert(
                conn.prepare_cached(
                    "SELECT fork, fork_seg FROM segments WHERE file = ?1 AND seg = ?2",
                )
                .map_err(q)?,
            ),
        };
        let up: Option<(Option<i64>, Option<i64>)> = stmt
            .query_row(params![key, seg], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(q)?;
        match up {
            Some((None, None)) => break None,
            // A fork is an earlier node, in an earlier segment: the walk ends.
            Some((Some(f), Some(s))) if f < seg && s <= f => (bound, seg) = (f, s),
            Some(_) => {
                return Err(rows.corrupt(format!("segment {seg}: a fork that is not above it")));
            }
            None => {
                return Err(rows.corrupt(format!("segment {seg}, named by a node, is missing")));
            }
        }
    };
    let rows_stepped = event.reset_status(rusqlite::StatementStatus::VmStep);
    super::count(|w| {
        w.lookups += steps;
        w.lookup_vm_steps += rows_stepped.max(0) as u64;
    });
    Ok(found)
}

/// The index and segment of the entry `id`.
fn node_of(conn: &Connection, key: &str, id: &str) -> rusqlite::Result<Option<(i64, i64)>> {
    conn.prepare_cached("SELECT idx, seg FROM nodes WHERE file = ?1 AND entry_id = ?2")?
        .query_row(params![key, id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProjectionError;
    use crate::projection::schema::SCHEMA;

    /// A fold error names its bad event by index; the entry behind it is looked up when
    /// the error is returned. A failed lookup is the database's error and a missing row a
    /// corrupt projection, never a `BadEvent` with an empty entry id.
    #[test]
    fn a_bad_event_is_named_from_the_rows_and_a_failed_lookup_is_not_swallowed() {
        let rows = Rows {
            db: Path::new("/db"),
            file: Path::new("/s.jsonl"),
        };
        let conn = Connection::open_in_memory().expect("open");
        // No tables: the lookup fails.
        let e = bad_event(&conn, rows, "/s.jsonl", "p", "bad".into(), 3);
        assert!(
            matches!(e, Err(Error::Projection(ProjectionError::Database { .. }))),
            "{e:?}"
        );
        conn.execute_batch(SCHEMA).expect("schema");
        let e = bad_event(&conn, rows, "/s.jsonl", "p", "bad".into(), 3);
        assert!(
            matches!(
                e,
                Err(Error::Projection(ProjectionError::CorruptProjection { .. }))
            ),
            "{e:?}"
        );
        conn.execute_batch(
            "INSERT INTO nodes(file, idx, entry_id, parent, seg) \
             VALUES ('/s.jsonl', 3, 'abc123', NULL, 3);
             INSERT INTO events(file, idx, plugin, scope, seg, line, offset, len, digest, \
             error, error_idx) VALUES ('/s.jsonl', 3, 'p', 'branch', 3, 5, 812, 40, 0, 'bad', 3);",
        )
        .expect("rows");
        match bad_event(&conn, rows, "/s.jsonl", "p", "unknown op".into(), 3) {
            Ok(Error::State(StateError::BadEvent {
                entry_id,
                at,
                plugin,
                detail,
                ..
            })) => {
                assert_eq!(entry_id, "abc123");
                assert_eq!((at.line, at.offset), (5, 812));
                assert_eq!((plugin.as_str(), detail.as_str()), ("p", "unknown op"));
            }
            other => panic!("{other:?}"),
        }
    }
}
