//! The scanner's sink over SQL: each scanned entry becomes a `nodes` row, each state
//! event an `events` row holding its fold step's storage (and its session value), with
//! in-memory caches for what this pass added.

use super::schema::{columns, from_columns};
use super::watermark::{fnv, read_span};
use super::{Rows, db_err};
use crate::error::{Error, Result};
use crate::log::entry::raw_str;
use crate::log::reader::{EntrySink, Finding, ScanState, ScannedEntry};
use crate::state::envelope::{Envelope, STATE_PREFIX, Scope};
use crate::state::step::{self, Prior, Stored};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A fold's error: the detail and the node index of the bad event.
type FoldErr = (String, i64);

/// A session-scope value (JSON text; `None` = absent) and its error, if any.
type SessionVal = (Option<String>, Option<FoldErr>);

#[derive(Clone)]
struct EventRow {
    plugin: String,
    scope: Option<Scope>,
    prev_anc: Option<i64>,
    stored: Stored,
    error: Option<(String, i64)>,
}

/// The scanner's sink over SQL, with in-memory caches for what this pass added.
pub(super) struct SqlSink<'c> {
    tx: &'c Connection,
    db: PathBuf,
    file: PathBuf,
    key: String,
    session_id: String,
    pub(super) next_idx: i64,
    pub(super) last_id: Option<String>,
    ids: HashMap<String, (i64, Option<i64>)>,
    events: HashMap<i64, EventRow>,
    /// Per plugin: the last branch event ingested and its folded value, so that a linear
    /// run of deltas is folded once, not rebuilt from its snapshot at every step.
    last_folded: HashMap<String, (i64, Option<Value>)>,
    session_values: HashMap<String, SessionVal>,
    pub(super) added: u64,
    /// An error met where the scanner's interface cannot return one (`assign_id`).
    pub(super) deferred: Option<Error>,
    /// Length and digest of the current line, when it may be a state event.
    pub(super) line_digest: Option<(i64, i64)>,
}

impl<'c> SqlSink<'c> {
    /// A sink that appends to the rows of session `key` (file `file` in database `db`)
    /// from entry index `next_idx` on, after the entry `last_id`.
    pub(super) fn new(
        tx: &'c Connection,
        db: &Path,
        file: &Path,
        key: &str,
        session_id: &str,
        next_idx: i64,
        last_id: Option<String>,
    ) -> SqlSink<'c> {
        SqlSink {
            tx,
            db: db.to_path_buf(),
            file: file.to_path_buf(),
            key: key.to_owned(),
            session_id: session_id.to_owned(),
            next_idx,
            last_id,
            ids: HashMap::new(),
            events: HashMap::new(),
            last_folded: HashMap::new(),
            session_values: HashMap::new(),
            added: 0,
            deferred: None,
            line_digest: None,
        }
    }

    fn sql<T>(&self, r: rusqlite::Result<T>) -> Result<T> {
        r.map_err(db_err(&self.db, "updating the projection"))
    }

    fn node_by_id(&self, id: &str) -> Result<Option<(i64, Option<i64>)>> {
        if let Some(n) = self.ids.get(id) {
            return Ok(Some(*n));
        }
        self.sql(
            self.tx
                .prepare_cached(
                    "SELECT idx, state_anc FROM nodes WHERE file = ?1 AND entry_id = ?2",
                )
                .and_then(|mut q| {
                    q.query_row(params![self.key, id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                }),
        )
    }

    fn event(&self, idx: i64) -> Result<Option<EventRow>> {
        if let Some(e) = self.events.get(&idx) {
            return Ok(Some(e.clone()));
        }
        self.sql(
            self.tx
                .prepare_cached(
                    "SELECT plugin, scope, prev_anc, value, error, error_idx, base, delta, chain \
                     FROM events WHERE file = ?1 AND idx = ?2",
                )
                .and_then(|mut q| {
                    q.query_row(params![self.key, idx], |r| {
                        let scope: Option<String> = r.get(1)?;
                        let error: Option<String> = r.get(4)?;
                        let error_idx: Option<i64> = r.get(5)?;
                        Ok((
                            r.get::<_, String>(0)?,
                            scope,
                            r.get::<_, Option<i64>>(2)?,
                            from_columns(r.get(3)?, r.get(6)?, r.get(7)?, r.get(8)?),
                            error.zip(error_idx),
                        ))
                    })
                    .optional()
                }),
        )?
        .map(|(plugin, scope, prev_anc, stored, error)| {
            let rows = self.rows();
            Ok(EventRow {
                plugin,
                scope: match scope {
                    None => None,
                    Some(s) => Some(s.parse().map_err(|_| {
                        rows.corrupt(format!("event {idx}: unknown stored scope {s:?}"))
                    })?),
                },
                prev_anc,
                stored: stored.map_err(|d| rows.corrupt(format!("event {idx}: {d}")))?,
                error,
            })
        })
        .transpose()
    }

    fn digest_line(&self, offset: u64, len: u64) -> Result<(i64, i64)> {
        let mut f = std::fs::File::open(&self.file).map_err(|source| Error::Io {
            action: "opening",
            path: self.file.clone(),
            source,
        })?;
        Ok((
            len as i64,
            fnv(&read_span(&mut f, &self.file, offset, len)?),
        ))
    }

    fn rows(&self) -> Rows<'_> {
        Rows {
            db: &self.db,
            file: &self.file,
        }
    }

    /// This plugin's branch fold just above a node whose parent's `state_anc` is `anc`:
    /// the event it continues (if any) with its delta chain, and the folded value there.
    fn branch_base(&self, plugin: &str, mut anc: Option<i64>) -> Result<BranchBase> {
        while let Some(e) = anc {
            let Some(row) = self.event(e)? else { break };
            if row.plugin == plugin && row.scope != Some(Scope::Session) {
                if let Some(err) = row.error {
                    return Ok(Err(err));
                }
                let prior = Prior {
                    event: e,
                    chain: row.stored.chain(),
                };
                let value = match self.last_folded.get(plugin) {
                    Some((idx, v)) if *idx == e => v.as_ref().map(crate::json::clone_value),
                    _ => self
                        .rows()
                        .unfold(row.stored, |i| Ok(self.event(i)?.map(|r| r.stored)))?,
                };
                return Ok(Ok(Some((prior, value))));
            }
            anc = row.prev_anc;
        }
        Ok(Ok(None))
    }

    fn session_value(&self, plugin: &str) -> Result<SessionVal> {
        if let Some(v) = self.session_values.get(plugin) {
            return Ok(v.clone());
        }
        let row = self.sql(
            self.tx
                .prepare_cached(
                    "SELECT value, error, error_idx FROM session_values WHERE file = ?1 AND plugin = ?2",
                )
                .and_then(|mut q| {
                    q.query_row(params![self.key, plugin], |r| {
                        let e: Option<String> = r.get(1)?;
                        let ei: Option<i64> = r.get(2)?;
                        Ok((r.get::<_, Option<String>>(0)?, e.zip(ei)))
                    })
                    .optional()
                }),
        )?;
        Ok(row.unwrap_or((None, None)))
    }
}

/// The base of a branch-fold step: the event it continues and the folded value there, or
/// nothing (the plugin has no branch event above), or the error of a bad event above.
type BranchBase = std::result::Result<Option<(Prior, Option<Value>)>, FoldErr>;

impl EntrySink for SqlSink<'_> {
    fn entry(&mut self, e: ScannedEntry<'_, '_>, _state: &ScanState) -> Result<()> {
        if let Some(err) = self.deferred.take() {
            return Err(err);
        }
        let id = &*e.id;
        if self.node_by_id(id)?.is_some() {
            return Err(Error::DuplicateId {
                path: self.file.clone(),
                at: e.at,
                id: id.into(),
                first_line: None,
            });
        }
        let parent = match e.parent.as_deref() {
            None => None,
            Some(p) => match self.node_by_id(p)? {
                Some(n) => Some(n),
                None if p == id => {
                    return Err(Error::Cycle {
                        path: self.file.clone(),
                        at: e.at,
                        id: id.into(),
                    });
                }
                None => {
                    return Err(Error::DanglingParent {
                        path: self.file.clone(),
                        at: e.at,
                        id: id.into(),
                        parent: p.into(),
                    });
                }
            },
        };
        let idx = self.next_idx;
        let prev_anc = parent.and_then(|(_, anc)| anc);
        let plugin = (e.raw.ty.0 == "custom")
            .then(|| e.raw.custom_type.and_then(raw_str))
            .flatten()
            .and_then(|ct| ct.strip_prefix(STATE_PREFIX).map(str::to_owned));
        let state_anc = if plugin.is_some() {
            Some(idx)
        } else {
            prev_anc
        };
        self.sql(
            self.tx
                .prepare_cached(
                    "INSERT INTO nodes(file, idx, entry_id, parent, state_anc) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut q| {
                    q.execute(params![self.key, idx, id, parent.map(|p| p.0), state_anc])
                }),
        )?;
        if let Some(plugin) = plugin {
            let decoded = Envelope::decode(e.raw.data);
            let scope = match &decoded {
                Ok(env) => Some(env.scope),
                Err(d) => d.scope,
            };
            let here = |detail: &str| (detail.to_owned(), idx);
            let (line_len, line_digest) = match self.line_digest.take() {
                Some(d) => d,
                // Written with escapes: read the line back.
                None => self.digest_line(e.at.offset, e.len - 1)?,
            };
            let mut row = EventRow {
                plugin: plugin.clone(),
                scope,
                prev_anc,
                stored: Stored::Absent,
                error: None,
            };
            // Branch fold (also for an event of unknown scope: it poisons both folds).
            if scope != Some(Scope::Session) {
                match (&decoded, self.branch_base(&plugin, prev_anc)?) {
                    (_, Err(err)) => row.error = Some(err),
                    (Err(d), _) => row.error = Some(here(&d.detail)),
                    (Ok(env), Ok(base)) => {
                        let (prior, current) = match base {
                            Some((prior, value)) => (Some(prior), value),
                            None => (None, None),
                        };
                        let folded = step::step(&env.op, current.as_ref(), prior);
                        row.stored = folded.stored;
                        self.last_folded.insert(plugin.clone(), (idx, folded.value));
                    }
                }
            }
            if scope != Some(Scope::Branch) {
                let (cur, err) = self.session_value(&plugin)?;
                let next = match (err, &decoded) {
                    (Some(err), _) => (cur, Some(err)),
                    (None, Err(d)) => (cur, Some(here(&d.detail))),
                    (None, Ok(env)) => {
                        let cur = match cur {
                            Some(c) => Some(self.rows().json("a stored value", &c)?),
                            None => None,
                        };
                        // Without a prior event the step stores the whole value: a
                        // session fold keeps only snapshots.
                        let folded = step::step(&env.op, cur.as_ref(), None);
                        (columns(&folded.stored).0.map(str::to_owned), None)
                    }
                };
                self.sql(
                    self.tx
                        .prepare_cached(
                            "INSERT OR REPLACE INTO session_values(file, plugin, value, last_idx, \
                             error, error_idx) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        )
                        .and_then(|mut q| {
                            q.execute(params![
                                self.key,
                                plugin,
                                next.0,
                                idx,
                                next.1.as_ref().map(|e| &e.0),
                                next.1.as_ref().map(|e| e.1)
                            ])
                        }),
                )?;
                self.session_values.insert(plugin.clone(), next);
            }
            self.sql(
                self.tx
                    .prepare_cached(
                        "INSERT INTO events(file, idx, plugin, scope, line, offset, len, digest, \
                         prev_anc, value, error, error_idx, base, delta, chain) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                    )
                    .and_then(|mut q| {
                        let (value, base, delta, chain) = columns(&row.stored);
                        q.execute(params![
                            self.key,
                            idx,
                            plugin,
                            scope.map(Scope::as_str),
                            e.at.line as i64,
                            e.at.offset as i64,
                            line_len,
                            line_digest,
                            prev_anc,
                            value,
                            row.error.as_ref().map(|e| &e.0),
                            row.error.as_ref().map(|e| e.1),
                            base,
                            delta,
                            chain
                        ])
                    }),
            )?;
            self.events.insert(idx, row);
        }
        self.ids.insert(id.to_owned(), (idx, state_anc));
        self.last_id = Some(id.to_owned());
        self.next_idx += 1;
        self.added += 1;
        Ok(())
    }

    fn finding(&mut self, _f: Finding) {}

    /// A v1 entry's id, collision-checked against the projection. The trait cannot fail
    /// here, so a database error is kept and returned by the next `entry` (and by the
    /// ingest), never taken for "the id is free".
    fn assign_id(&mut self, ordinal: u64) -> String {
        let mut attempt = 0;
        loop {
            let id = crate::log::migrate::v1_id(&self.session_id, ordinal, attempt);
            match self.node_by_id(&id) {
                Ok(Some(_)) => attempt += 1,
                Ok(None) => return id,
                Err(e) => {
                    self.deferred.get_or_insert(e);
                    return id;
                }
            }
        }
    }

    fn last_id(&self) -> Option<String> {
        self.last_id.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `assign_id` cannot return an error through the scanner's interface; a database
    /// error while checking an id for collisions is kept and returned by the next entry
    /// and the ingest, never read as "the id is free".
    #[test]
    fn assign_id_keeps_a_database_error_instead_of_calling_the_id_free() {
        let conn = Connection::open_in_memory().expect("open");
        // No `nodes` table: every lookup fails.
        let mut sink = SqlSink::new(
            &conn,
            Path::new("/db"),
            Path::new("/s.jsonl"),
            "/s.jsonl",
            "s",
            0,
            None,
        );
        let _ = sink.assign_id(0);
        assert!(
            matches!(sink.deferred, Some(Error::Database { .. })),
            "{:?}",
            sink.deferred
        );
    }
}
