//! The scanner's sink over SQL: each scanned entry becomes a `nodes` row (with its
//! segment), each state event an `events` row holding its fold step's storage (and its
//! session value) and a place in a `spans` group (its line's offset, length and digest),
//! with in-memory caches for what this pass added.
//!
//! A new event's fold continues its plugin's nearest branch event above its parent. That
//! event is found segment by segment (see `docs/projection.md`, "Segments"): in each
//! segment on the path, the plugin's greatest event at or above the path's node there,
//! from this pass's events in memory or the `events_by_plugin` index. No other plugin's
//! event is looked at, so a build is linear in the events whatever the number of plugins.

use super::schema::{columns, from_columns};
use super::watermark::{SpanGroup, read_span, span_digest};
use super::{Rows, db_err};
use crate::error::{Error, InvalidLog, IoContext, Result};
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

/// An event's row, as a later event's fold needs it.
#[derive(Clone)]
struct EventRow {
    scope: Option<Scope>,
    stored: Stored,
    error: Option<(String, i64)>,
}

/// A segment's fork: the node its first node is a child of, and that node's segment
/// (`None`: it starts at a root).
type Fork = Option<(i64, i64)>;

/// A folded event's line: its entry index, offset, length and digest.
type Span = (i64, i64, i64, i64);

/// The scanner's sink over SQL, with in-memory caches for what this pass added.
pub(super) struct SqlSink<'c> {
    tx: &'c Connection,
    db: PathBuf,
    file: PathBuf,
    key: String,
    session_id: String,
    pub(super) next_idx: i64,
    pub(super) last_id: Option<String>,
    /// The first entry index of this pass: a segment numbered from here on (a segment's
    /// number is its first node's index) has all its events in `branch_events`.
    pass_start: i64,
    /// Entry id → (index, segment), for this pass's entries.
    ids: HashMap<String, (i64, i64)>,
    events: HashMap<i64, EventRow>,
    /// The forks of the segments this pass looked at or made.
    forks: HashMap<i64, Fork>,
    /// The exact last node of segments this pass extended, made, or learnt it of. A stored
    /// `tail` is exact except in the segment of the watermark's last entry, whose last
    /// node is that entry (it has no child yet) and whose row is not rewritten at every
    /// append; see [`SqlSink::flush`].
    tails: HashMap<i64, i64>,
    /// Segments made by this pass and not yet written.
    created: Vec<i64>,
    /// Segments whose stored `tail` may be behind: written at the next flush unless they
    /// hold the last entry then.
    stale: std::collections::HashSet<i64>,
    /// The segment of the entry before this pass (`None`: not known yet; `Some(None)`:
    /// there is none).
    prev_last: Option<Option<i64>>,
    /// The segment of the last entry of this pass.
    current: Option<i64>,
    /// Per plugin and segment: this pass's events that a branch fold sees (branch scope,
    /// or unknown), ascending.
    branch_events: HashMap<String, HashMap<i64, Vec<i64>>>,
    /// Per plugin: the last branch event ingested and its folded value, so that a linear
    /// run of deltas is folded once, not rebuilt from its snapshot at every step.
    last_folded: HashMap<String, (i64, Option<Value>)>,
    session_values: HashMap<String, SessionVal>,
    /// Folded events after the last `spans` group, from earlier passes (their lines'
    /// spans are in their `events` rows).
    /// (`None`: not known yet, for a source that does not keep the count; counted from
    /// the rows when needed.)
    open_before: Option<i64>,
    /// This pass's folded events after the last `spans` group.
    open: Vec<Span>,
    pub(super) added: u64,
    /// An error met where the scanner's interface cannot return one (`assign_id`).
    pub(super) deferred: Option<Error>,
    /// Length and digest of the current line, when it may be a state event.
    pub(super) line_digest: Option<(i64, i64)>,
    /// Steps of the nearest-event searches (for [`super::ProjectionWork`]).
    lookups: u64,
    /// SQLite VM steps of the stored lookups (grows with the rows a lookup steps over).
    vm_steps: u64,
}

/// Events per `spans` row: the check after a foreign append reads one row per this many
/// folded events.
const GROUP: i64 = 256;

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
            pass_start: next_idx,
            ids: HashMap::new(),
            events: HashMap::new(),
            forks: HashMap::new(),
            tails: HashMap::new(),
            created: Vec::new(),
            stale: std::collections::HashSet::new(),
            prev_last: (next_idx == 0).then_some(None),
            current: None,
            branch_events: HashMap::new(),
            last_folded: HashMap::new(),
            session_values: HashMap::new(),
            open_before: (next_idx == 0).then_some(0),
            open: Vec::new(),
            added: 0,
            deferred: None,
            line_digest: None,
            lookups: 0,
            vm_steps: 0,
        }
    }

    fn sql<T>(&self, r: rusqlite::Result<T>) -> Result<T> {
        r.map_err(db_err(&self.db, "updating the projection"))
    }

    /// The index and segment of the entry `id`.
    fn node_by_id(&self, id: &str) -> Result<Option<(i64, i64)>> {
        if let Some(n) = self.ids.get(id) {
            return Ok(Some(*n));
        }
        self.sql(
            self.tx
                .prepare_cached("SELECT idx, seg FROM nodes WHERE file = ?1 AND entry_id = ?2")
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
                    "SELECT scope, value, error, error_idx, base, delta, chain \
                     FROM events WHERE file = ?1 AND idx = ?2",
                )
                .and_then(|mut q| {
                    q.query_row(params![self.key, idx], |r| {
                        let scope: Option<String> = r.get(0)?;
                        let error: Option<String> = r.get(2)?;
                        let error_idx: Option<i64> = r.get(3)?;
                        Ok((
                            scope,
                            from_columns(r.get(1)?, r.get(4)?, r.get(5)?, r.get(6)?),
                            error.zip(error_idx),
                        ))
                    })
                    .optional()
                }),
        )?
        .map(|(scope, stored, error)| {
            let rows = self.rows();
            Ok(EventRow {
                scope: match scope {
                    None => None,
                    Some(s) => Some(s.parse().map_err(|_| {
                        rows.corrupt(format!("event {idx}: unknown stored scope {s:?}"))
                    })?),
                },
                stored: stored.map_err(|d| rows.corrupt(format!("event {idx}: {d}")))?,
                error,
            })
        })
        .transpose()
    }

    /// The number of folded events after the last `spans` group (the watermark keeps it).
    /// Known once this pass has flushed, or when the count was given.
    pub(super) fn open_events(&self) -> i64 {
        self.open_before.unwrap_or(0) + self.open.len() as i64
    }

    /// Resuming: `n` folded events before this pass follow the last `spans` group.
    pub(super) fn set_open_events(&mut self, n: i64) {
        self.open_before = Some(n.max(0));
    }

    /// The folded events before this pass that follow the last `spans` group: given by
    /// the watermark, or counted from the rows (fewer than a group).
    fn open_before(&mut self) -> Result<i64> {
        if let Some(n) = self.open_before {
            return Ok(n);
        }
        let n: i64 = self.sql(
            self.tx
                .prepare_cached(
                    "SELECT count(*) FROM events WHERE file = ?1 AND idx < ?2 AND idx > \
                     coalesce((SELECT max(last_idx) FROM spans WHERE file = ?1), -1)",
                )
                .and_then(|mut q| q.query_row(params![self.key, self.pass_start], |r| r.get(0))),
        )?;
        self.open_before = Some(n);
        Ok(n)
    }

    /// The fork and the stored tail of segment `seg` (its row); the fork is remembered.
    fn load_segment(&mut self, seg: i64) -> Result<(Fork, i64)> {
        let row: Option<(Option<i64>, Option<i64>, i64)> = self.sql(
            self.tx
                .prepare_cached(
                    "SELECT fork, fork_seg, tail FROM segments WHERE file = ?1 AND seg = ?2",
                )
                .and_then(|mut q| {
                    q.query_row(params![self.key, seg], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .optional()
                }),
        )?;
        let (fork, tail) = match row {
            Some((None, None, tail)) => (None, tail),
            Some((Some(fork), Some(fork_seg), tail)) if fork < seg && fork_seg <= fork => {
                (Some((fork, fork_seg)), tail)
            }
            Some(_) => {
                return Err(self
                    .rows()
                    .corrupt(format!("segment {seg}: a fork that is not above it")));
            }
            None => {
                return Err(self
                    .rows()
                    .corrupt(format!("segment {seg}, named by a node, is missing")));
            }
        };
        self.forks.insert(seg, fork);
        Ok((fork, tail))
    }

    fn fork_of(&mut self, seg: i64) -> Result<Fork> {
        match self.forks.get(&seg) {
            Some(f) => Ok(*f),
            None => Ok(self.load_segment(seg)?.0),
        }
    }

    /// The segment of the entry before this pass.
    fn prev_last(&mut self) -> Result<Option<i64>> {
        if let Some(known) = self.prev_last {
            return Ok(known);
        }
        let seg: Option<i64> = self.sql(
            self.tx
                .prepare_cached("SELECT seg FROM nodes WHERE file = ?1 AND idx = ?2")
                .and_then(|mut q| {
                    q.query_row(params![self.key, self.pass_start - 1], |r| r.get(0))
                        .optional()
                }),
        )?;
        self.prev_last = Some(seg);
        Ok(seg)
    }

    /// The last node of segment `seg` so far.
    fn tail_of(&mut self, seg: i64) -> Result<i64> {
        if let Some(t) = self.tails.get(&seg) {
            return Ok(*t);
        }
        if self.prev_last()? == Some(seg) {
            // The watermark's last entry has no child: it ends its segment.
            return Ok(self.pass_start - 1);
        }
        Ok(self.load_segment(seg)?.1)
    }

    /// The segment of a new node `idx` whose parent is `parent` (index, segment): the
    /// parent's when the parent is its segment's last node (this is its first child),
    /// else a new one, numbered `idx`, forking from the parent. Appending to the last
    /// entry, what a writer does, reads and writes no segment row.
    fn place(&mut self, idx: i64, parent: Fork) -> Result<i64> {
        let seg = match parent {
            Some((p, p_seg)) => {
                if p == self.pass_start - 1 && self.prev_last.is_none() {
                    self.prev_last = Some(Some(p_seg));
                }
                if self.tail_of(p_seg)? == p {
                    self.stale.insert(p_seg);
                    p_seg
                } else {
                    self.forks.insert(idx, parent);
                    self.created.push(idx);
                    idx
                }
            }
            None => {
                self.forks.insert(idx, None);
                self.created.push(idx);
                idx
            }
        };
        self.tails.insert(seg, idx);
        self.current = Some(seg);
        Ok(seg)
    }

    /// `plugin`'s nearest event that a branch fold sees, at or above node `bound` of
    /// segment `seg`: in each segment up to the root, the greatest such event at or above
    /// the path's node there.
    fn nearest_branch_event(
        &mut self,
        plugin: &str,
        mut seg: i64,
        mut bound: i64,
    ) -> Result<Option<i64>> {
        loop {
            self.lookups += 1;
            if let Some(nodes) = self.branch_events.get(plugin).and_then(|m| m.get(&seg)) {
                let k = nodes.partition_point(|&n| n <= bound);
                if k > 0 {
                    return Ok(Some(nodes[k - 1]));
                }
            }
            if seg < self.pass_start {
                // Rows of earlier passes (this pass's are in memory, and greater).
                let mut steps = 0;
                let res = self
                    .tx
                    .prepare_cached(
                        "SELECT idx FROM events INDEXED BY events_by_plugin \
                         WHERE file = ?1 AND plugin = ?2 AND seg = ?3 \
                         AND idx <= ?4 AND scope IS NOT 'session' ORDER BY idx DESC LIMIT 1",
                    )
                    .and_then(|mut q| {
                        let r = q
                            .query_row(params![self.key, plugin, seg, bound], |r| r.get(0))
                            .optional();
                        steps = q.reset_status(rusqlite::StatementStatus::VmStep);
                        r
                    });
                self.vm_steps += steps.max(0) as u64;
                let stored: Option<i64> = self.sql(res)?;
                if stored.is_some() {
                    return Ok(stored);
                }
            }
            match self.fork_of(seg)? {
                Some((fork, fork_seg)) => (bound, seg) = (fork, fork_seg),
                None => return Ok(None),
            }
        }
    }

    /// Writes the segments this pass made or extended (before every watermark: each
    /// commit holds a consistent prefix), and adds up this pass's work. The segment of the
    /// last entry is not rewritten when only its tail moved: its tail is that entry.
    pub(super) fn flush(&mut self) -> Result<()> {
        self.open_before()?;
        let Some(current) = self.current else {
            return Ok(());
        };
        if self.pass_start > 0
            && let Some(before) = self.prev_last()?
            && before != current
        {
            // The segment that held the last entry no longer does: its tail is written.
            let tail = self.tail_of(before)?;
            self.tails.insert(before, tail);
            self.stale.insert(before);
        }
        for seg in std::mem::take(&mut self.created) {
            let fork = self.forks.get(&seg).copied().flatten();
            self.tx
                .prepare_cached(
                    "INSERT INTO segments(file, seg, fork, fork_seg, tail) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut q| {
                    q.execute(params![
                        self.key,
                        seg,
                        fork.map(|f| f.0),
                        fork.map(|f| f.1),
                        self.tails.get(&seg).copied().unwrap_or(seg)
                    ])
                })
                .map_err(db_err(&self.db, "updating the projection"))?;
            self.stale.remove(&seg);
        }
        let written: Vec<i64> = self
            .stale
            .iter()
            .copied()
            .filter(|&s| s != current)
            .collect();
        for seg in written {
            self.tx
                .prepare_cached("UPDATE segments SET tail = ?3 WHERE file = ?1 AND seg = ?2")
                .and_then(|mut q| q.execute(params![self.key, seg, self.tails.get(&seg)]))
                .map_err(db_err(&self.db, "updating the projection"))?;
            self.stale.remove(&seg);
        }
        let lookups = std::mem::take(&mut self.lookups);
        let vm_steps = std::mem::take(&mut self.vm_steps);
        super::count(|w| {
            w.lookups += lookups;
            w.lookup_vm_steps += vm_steps;
        });
        Ok(())
    }

    /// Adds a folded event's line to the events after the last `spans` group; when they
    /// make a whole group, the group's row is written (the earlier passes' spans read back
    /// from their rows).
    fn add_span(&mut self, span: Span) -> Result<()> {
        self.open.push(span);
        let open_before = self.open_before()?;
        if open_before + (self.open.len() as i64) < GROUP {
            return Ok(());
        }
        let mut spans: Vec<Span> = Vec::with_capacity(GROUP as usize);
        if open_before > 0 {
            let before = self.sql(
                self.tx
                    .prepare_cached(
                        "SELECT idx, offset, len, digest FROM events WHERE file = ?1 \
                         AND idx < ?2 ORDER BY idx DESC LIMIT ?3",
                    )
                    .and_then(|mut q| {
                        q.query_map(params![self.key, self.pass_start, open_before], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                        })?
                        .collect::<rusqlite::Result<Vec<Span>>>()
                    }),
            )?;
            spans.extend(before.into_iter().rev());
        }
        spans.append(&mut self.open);
        self.open_before = Some(0);
        self.sql(SpanGroup::of(&spans).store(self.tx, &self.key))
    }

    fn digest_line(&self, offset: u64, len: u64) -> Result<(i64, i64)> {
        let mut f = std::fs::File::open(&self.file).ctx("opening", &self.file)?;
        Ok((
            len as i64,
            span_digest(&read_span(&mut f, &self.file, offset, len)?),
        ))
    }

    fn rows(&self) -> Rows<'_> {
        Rows {
            db: &self.db,
            file: &self.file,
        }
    }

    /// This plugin's branch fold just above a node whose parent is `parent` (index,
    /// segment): the event it continues (if any) with its delta chain, and the folded
    /// value there.
    fn branch_base(&mut self, plugin: &str, parent: Fork) -> Result<BranchBase> {
        let Some((p, p_seg)) = parent else {
            return Ok(Ok(None));
        };
        let Some(e) = self.nearest_branch_event(plugin, p_seg, p)? else {
            return Ok(Ok(None));
        };
        let Some(row) = self.event(e)? else {
            return Err(self
                .rows()
                .corrupt(format!("event {e}, named by the plugin index, is missing")));
        };
        if row.scope == Some(Scope::Session) {
            return Err(self.rows().corrupt(format!(
                "event {e}, found among the plugin's branch events, is of session scope"
            )));
        }
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
        Ok(Ok(Some((prior, value))))
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

impl EntrySink<Error> for SqlSink<'_> {
    fn entry(&mut self, e: ScannedEntry<'_, '_>, _state: &ScanState) -> Result<()> {
        if let Some(err) = self.deferred.take() {
            return Err(err);
        }
        let id = &*e.id;
        if self.node_by_id(id)?.is_some() {
            return Err(InvalidLog::DuplicateId {
                path: self.file.clone(),
                at: e.at,
                id: id.into(),
                first_line: None,
            }
            .into());
        }
        let parent = match e.parent.as_deref() {
            None => None,
            Some(p) => match self.node_by_id(p)? {
                Some(n) => Some(n),
                None if p == id => {
                    return Err(InvalidLog::Cycle {
                        path: self.file.clone(),
                        at: e.at,
                        id: id.into(),
                    }
                    .into());
                }
                None => {
                    return Err(InvalidLog::DanglingParent {
                        path: self.file.clone(),
                        at: e.at,
                        id: id.into(),
                        parent: p.into(),
                    }
                    .into());
                }
            },
        };
        let idx = self.next_idx;
        let seg = self.place(idx, parent)?;
        let plugin = (e.raw.ty.0 == "custom")
            .then(|| e.raw.custom_type.and_then(raw_str))
            .flatten()
            .and_then(|ct| ct.strip_prefix(STATE_PREFIX).map(str::to_owned));
        self.sql(
            self.tx
                .prepare_cached(
                    "INSERT INTO nodes(file, idx, entry_id, parent, seg) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut q| q.execute(params![self.key, idx, id, parent.map(|p| p.0), seg])),
        )?;
        if let Some(plugin) = plugin {
            let decoded = Envelope::decode(e.raw.data.map(|d| d.get()));
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
                scope,
                stored: Stored::Absent,
                error: None,
            };
            // Branch fold (also for an event of unknown scope: it poisons both folds).
            if scope != Some(Scope::Session) {
                match (&decoded, self.branch_base(&plugin, parent)?) {
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
                self.branch_events
                    .entry(plugin.clone())
                    .or_default()
                    .entry(seg)
                    .or_default()
                    .push(idx);
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
                let sv = match (&next.1, &decoded) {
                    (None, Ok(env)) if env.state_version > 1 => Some(env.state_version),
                    _ => None,
                };
                self.sql(
                    self.tx
                        .prepare_cached(
                            "INSERT OR REPLACE INTO session_values(file, plugin, value, last_idx, \
                             error, error_idx, sv) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        )
                        .and_then(|mut q| {
                            q.execute(params![
                                self.key,
                                plugin,
                                next.0,
                                idx,
                                next.1.as_ref().map(|e| &e.0),
                                next.1.as_ref().map(|e| e.1),
                                sv
                            ])
                        }),
                )?;
                self.session_values.insert(plugin.clone(), next);
            }
            self.sql(
                self.tx
                    .prepare_cached(
                        "INSERT INTO events(file, idx, plugin, scope, seg, line, offset, len, \
                         digest, value, error, error_idx, base, delta, chain, sv) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, \
                         ?16)",
                    )
                    .and_then(|mut q| {
                        let (value, base, delta, chain) = columns(&row.stored);
                        q.execute(params![
                            self.key,
                            idx,
                            plugin,
                            scope.map(Scope::as_str),
                            seg,
                            e.at.line as i64,
                            e.at.offset as i64,
                            line_len,
                            line_digest,
                            value,
                            row.error.as_ref().map(|e| &e.0),
                            row.error.as_ref().map(|e| e.1),
                            base,
                            delta,
                            chain,
                            decoded
                                .as_ref()
                                .ok()
                                .map(|env| env.state_version)
                                .filter(|&sv| sv > 1)
                        ])
                    }),
            )?;
            self.add_span((idx, e.at.offset as i64, line_len, line_digest))?;
            self.events.insert(idx, row);
        }
        self.ids.insert(id.to_owned(), (idx, seg));
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
    use crate::ProjectionError;

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
            matches!(
                sink.deferred,
                Some(Error::Projection(ProjectionError::Database { .. }))
            ),
            "{:?}",
            sink.deferred
        );
    }
}
