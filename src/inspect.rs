//! Read-only views for inspection tools (the `session-state` CLI): state values and
//! decoded events straight from a [`SessionLog`], with no projection database, and the
//! typed reports the CLI prints ([`Replay`], [`EventCounts`], [`Integrity`],
//! [`LockReport`]). Every report derives `serde::Serialize`; a tool prints it with
//! [`crate::json::to_string_pretty`] of `serde_json::to_value(&report)`, which keeps the
//! lone surrogates and JavaScript number forms that `serde_json::to_string` would not.
//!
//! ```no_run
//! use session_state::{Scope, SessionLog, inspect};
//! let log = SessionLog::open("session.jsonl")?;
//! for tip in log.tips() {
//!     let role = inspect::value_at(&log, "role", Scope::Branch, tip)?;
//!     println!("{tip}: {role:?}");
//! }
//! # Ok::<(), session_state::Error>(())
//! ```

use crate::error::{Error, Location, Result};
use crate::lock::{Liveness, LockStatus};
use crate::log::reader::{Finding, FindingKind, Severity};
use crate::state::envelope::{DecodeError, Envelope, STATE_PREFIX, Scope};
use crate::state::fold::{self, Folds};
use crate::state::index::{StateIndex, data_of};
use crate::state::step;
use crate::tree::SessionLog;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The value of `plugin` in `scope` as if the active leaf were `entry_id` (session scope
/// ignores the position). `None` when absent.
///
/// Unlike [`crate::SessionState::read_at`] this needs no database location, so it suits
/// tools that only look. Errors: an unknown entry id, or a bad event of this plugin
/// ([`crate::Error::BadEvent`]).
pub fn value_at(
    log: &SessionLog,
    plugin: &str,
    scope: Scope,
    entry_id: &str,
) -> Result<Option<Value>> {
    let node = log.require(entry_id)?;
    let mut folds = Folds::of(log);
    Ok(fold::value_at(&mut folds, log, plugin, scope, Some(node))?
        .value
        .map(|v| crate::json::clone_value(&v)))
}

/// A state event as found in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct StateEvent<'a> {
    /// The plugin id (`session-state/<plugin>`).
    pub plugin: &'a str,
    /// The decoded envelope, or why it cannot be decoded (unknown `v`, op or scope...).
    pub envelope: std::result::Result<Envelope, String>,
}

/// The state event at `entry_id`, decoded; `None` when the entry is not a state event or
/// does not exist.
pub fn state_event<'a>(log: &'a SessionLog, entry_id: &str) -> Option<StateEvent<'a>> {
    let e = log.entry(entry_id)?;
    Some(StateEvent {
        plugin: e.state_plugin()?,
        envelope: Envelope::decode(e.custom_data()).map_err(|e| e.detail),
    })
}

/// What a [`fold_tips`] walk knows at one branch tip.
#[derive(Debug)]
pub struct TipFold<'a> {
    /// The tip's entry id.
    pub tip: &'a str,
    /// Its position in file order (0 = first entry after the header).
    pub index: usize,
    /// Entries on the path from the root to the tip, both included.
    pub depth: usize,
    /// The tip's branch key (see [`SessionLog::branch_key_of`]).
    pub branch_key: &'a str,
    /// Every plugin with state events in the file, in name order, with its branch-scope
    /// value at the tip: `Ok(None)` absent, or the error [`value_at`] gives (the bad event
    /// nearest to the tip).
    pub branch: Vec<(&'a str, Result<Option<Value>>)>,
    /// Every other extension's `custom` entries on the path, by `customType` in name
    /// order: how many, and the id of the last one.
    pub custom: Vec<(&'a str, u64, &'a str)>,
}

/// A plugin's carried branch value, or the bad event (node, detail) that poisons it.
type Slot = std::result::Result<Option<Arc<Value>>, (u32, Arc<str>)>;

/// What the walk carries down the tree. The two tables are shared between the branches
/// of a fork and copied only when a branch changes them (`Arc::make_mut`), so a fork
/// costs O(1) and a branch that changes nothing copies nothing.
#[derive(Clone)]
struct Carry<'a> {
    /// Per plugin slot (see [`Walk::plugins`]).
    values: Arc<Vec<Slot>>,
    /// Per other `customType` on the path: how many, and the node of the last one.
    custom: Arc<Customs<'a>>,
    depth: usize,
    /// The node whose id is the branch key.
    key: u32,
}

/// Per other `customType` on a path: how many, and the node of the last one.
type Customs<'a> = BTreeMap<&'a str, (u64, u32)>;

/// A tip as the walk reaches it: the carried state, borrowed (a tip that keeps it clones
/// the `Arc`s, which shares the tables).
struct TipAt<'w, 'a> {
    node: u32,
    depth: usize,
    key: u32,
    values: &'w Arc<Vec<Slot>>,
    custom: &'w Arc<Customs<'a>>,
}

/// The state events of a log, decoded once each, and the plugins they name.
struct Walk<'a> {
    index: StateIndex,
    /// Every plugin with state events, in name order; a plugin's slot is its position.
    plugins: Vec<&'a str>,
    /// Per event of `index` (file order): its plugin's slot.
    slot: Vec<usize>,
    /// Per event of `index`: its envelope, decoded, until a fold takes it.
    decoded: Vec<Option<std::result::Result<Envelope, DecodeError>>>,
    /// The per-plugin, per-scope counts of the events (undecodable ones as invalid).
    counts: EventCounts,
}

impl<'a> Walk<'a> {
    fn of(log: &'a SessionLog) -> Walk<'a> {
        let index = StateIndex::of(log);
        let named: Vec<&'a str> = index
            .events()
            .iter()
            .map(|e| log.entry_at(e.node).state_plugin().unwrap_or_default())
            .collect();
        let plugins: Vec<&'a str> = named
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let slot_of: HashMap<&str, usize> =
            plugins.iter().enumerate().map(|(i, p)| (*p, i)).collect();
        let slot = named.iter().map(|p| slot_of[p]).collect();
        let decoded: Vec<_> = index
            .events()
            .iter()
            .map(|e| Some(Envelope::decode(data_of(log, e.node))))
            .collect();
        let mut counts = EventCounts::default();
        for (p, d) in named.iter().zip(&decoded) {
            let c = counts.plugins.entry((*p).to_owned()).or_default();
            match d {
                Some(Ok(env)) if env.scope == Scope::Branch => c.branch += 1,
                Some(Ok(_)) => c.session += 1,
                Some(Err(_)) | None => c.invalid += 1,
            }
        }
        Walk {
            index,
            plugins,
            slot,
            decoded,
            counts,
        }
    }

    /// The event at `node`: its position in the index, if it is a state event.
    fn event_at(&self, node: u32) -> Option<usize> {
        self.index.event_index(node)
    }

    /// Every plugin's session-scope value: its session events folded in file order; the
    /// first event that cannot be decoded (and may be of session scope) poisons it. The
    /// session events' envelopes are taken.
    fn session(&mut self) -> Vec<Slot> {
        let mut values: Vec<Slot> = vec![Ok(None); self.plugins.len()];
        for (ev, d) in self.decoded.iter_mut().enumerate() {
            let v = &mut values[self.slot[ev]];
            let Ok(cur) = v else { continue };
            match d {
                Some(Ok(env)) if env.scope == Scope::Session => {
                    if let Some(Ok(env)) = d.take() {
                        step::apply_shared(env.op, cur);
                    }
                }
                Some(Err(e)) if e.scope.is_none() || e.scope == Some(Scope::Session) => {
                    *v = Err((self.index.events()[ev].node, e.detail.as_str().into()));
                }
                _ => {}
            }
        }
        values
    }

    /// The depth-first walk of [`fold_tips`]: `each` gets every tip with the carried
    /// state. The branch events' envelopes are taken (each node is visited once).
    fn tips(&mut self, log: &'a SessionLog, mut each: impl FnMut(TipAt<'_, 'a>)) {
        use crate::log::entry::EntryType;
        let tree = log.tree();
        let fresh = Arc::new(vec![Ok(None); self.plugins.len()]);
        let mut stack: Vec<(u32, Carry<'a>)> = tree
            .roots()
            .into_iter()
            .rev()
            .map(|r| {
                let c = Carry {
                    values: fresh.clone(),
                    custom: Arc::default(),
                    depth: 0,
                    key: r,
                };
                (r, c)
            })
            .collect();
        while let Some((node, mut c)) = stack.pop() {
            c.depth += 1;
            if let Some(ev) = self.event_at(node) {
                let p = self.slot[ev];
                match &self.decoded[ev] {
                    Some(Ok(env)) if env.scope == Scope::Branch => {
                        if c.values[p].is_ok()
                            && let Some(Ok(env)) = self.decoded[ev].take()
                            && let Ok(cur) = &mut Arc::make_mut(&mut c.values)[p]
                        {
                            step::apply_shared(env.op, cur);
                        }
                    }
                    Some(Err(e)) if e.scope.is_none() || e.scope == Some(Scope::Branch) => {
                        Arc::make_mut(&mut c.values)[p] = Err((node, e.detail.as_str().into()));
                    }
                    _ => {}
                }
            } else if tree.node(node).ty == EntryType::Custom
                && let Some(ct) = log
                    .entry_at(node)
                    .custom_type()
                    .filter(|ct| !ct.starts_with(STATE_PREFIX))
            {
                let slot = Arc::make_mut(&mut c.custom).entry(ct).or_insert((0, node));
                slot.0 += 1;
                slot.1 = node;
            }
            let children = tree.children_of(node);
            let Some((&last, others)) = children.split_last() else {
                each(TipAt {
                    node,
                    depth: c.depth,
                    key: c.key,
                    values: &c.values,
                    custom: &c.custom,
                });
                continue;
            };
            // A fork shares the carried state with all children but the last, which takes
            // it; the first child is popped first. A single child continues the branch key.
            let forks = !others.is_empty();
            let shared: Vec<(u32, Carry<'a>)> = others
                .iter()
                .rev()
                .map(|&child| {
                    let mut copy = c.clone();
                    copy.key = child;
                    (child, copy)
                })
                .collect();
            if forks {
                c.key = last;
            }
            stack.push((last, c));
            stack.extend(shared);
        }
    }
}

/// A carried slot as the reports give it: the value (a copy), or the bad event as
/// [`Error::BadEvent`].
fn slot_value(log: &SessionLog, plugin: &str, slot: &Slot) -> Result<Option<Value>> {
    match slot {
        Ok(v) => Ok(v.as_deref().map(crate::json::clone_value)),
        Err((bad, detail)) => {
            let e = log.entry_at(*bad);
            Err(Error::BadEvent {
                path: log.path().to_path_buf(),
                plugin: plugin.to_owned(),
                entry_id: e.id().to_owned(),
                at: e.location(),
                detail: detail.to_string(),
            })
        }
    }
}

/// The state at every branch tip in one walk: a depth-first traversal from the roots that
/// carries each plugin's folded branch value (and the count and last entry of every other
/// `customType`) down the tree. At a fork the branches share what is carried and copy it
/// only when one changes it, and a `patch` merges into a value no other branch holds in
/// place. Each entry is visited and each event decoded and applied once, so the cost is
/// linear in the file whatever the shape of the tree (plus, per fork, at most one copy of
/// the carried tables and of each value a branch patches); asking [`value_at`] at every
/// tip instead walks every tip's path.
///
/// `each` is called once per tip, in depth-first order (children in file order); the
/// values agree with [`value_at`] in branch scope, the depth with
/// [`SessionLog::path_to`] and the key with [`SessionLog::branch_key_of`].
pub fn fold_tips<'a>(log: &'a SessionLog, mut each: impl FnMut(TipFold<'a>)) {
    let mut walk = Walk::of(log);
    let plugins = walk.plugins.clone();
    let tree = log.tree();
    walk.tips(log, |t| {
        each(TipFold {
            tip: tree.id(t.node),
            index: t.node as usize,
            depth: t.depth,
            branch_key: tree.id(t.key),
            branch: plugins
                .iter()
                .zip(t.values.iter())
                .map(|(p, v)| (*p, slot_value(log, p, v)))
                .collect(),
            custom: t
                .custom
                .iter()
                .map(|(ct, (n, at))| (*ct, *n, tree.id(*at)))
                .collect(),
        });
    });
}

// ---------------------------------------------------------------------------------------
// Reports. The values they hold are in the crate's JSON encoding (see `crate::json`).

/// Where a state event applies, as [`event_counts`] counts it: the scope its envelope
/// declares, or `Invalid` when the envelope cannot be decoded (unknown `v`, op or
/// scope...). Serialized as `"branch"`, `"invalid"`, `"session"`; ordered by that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventScope {
    /// `scope: "branch"`.
    Branch,
    /// An envelope that cannot be decoded.
    Invalid,
    /// `scope: "session"`.
    Session,
}

impl EventScope {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventScope::Branch => "branch",
            EventScope::Invalid => "invalid",
            EventScope::Session => "session",
        }
    }
}

impl std::fmt::Display for EventScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many state events one plugin has in the file, by [`EventScope`]. Serialized as an
/// object of the non-zero counts, in name order (`{"branch":2,"invalid":1}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PluginEvents {
    /// Events declaring branch scope.
    #[serde(skip_serializing_if = "is_zero")]
    pub branch: u64,
    /// Events that cannot be decoded.
    #[serde(skip_serializing_if = "is_zero")]
    pub invalid: u64,
    /// Events declaring session scope.
    #[serde(skip_serializing_if = "is_zero")]
    pub session: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl PluginEvents {
    /// The count in one scope.
    pub fn get(&self, scope: EventScope) -> u64 {
        match scope {
            EventScope::Branch => self.branch,
            EventScope::Invalid => self.invalid,
            EventScope::Session => self.session,
        }
    }

    /// The scopes with events, in name order, with their counts.
    pub fn scopes(&self) -> impl Iterator<Item = (EventScope, u64)> + '_ {
        [EventScope::Branch, EventScope::Invalid, EventScope::Session]
            .into_iter()
            .map(|s| (s, self.get(s)))
            .filter(|&(_, n)| n > 0)
    }

    /// Whether some event may set the plugin's value in `scope`: one declaring it, or one
    /// that cannot be decoded (a read in either scope may fail on it). When not, the value
    /// there is trivially absent.
    pub fn may_set(&self, scope: Scope) -> bool {
        self.invalid > 0
            || match scope {
                Scope::Branch => self.branch > 0,
                Scope::Session => self.session > 0,
            }
    }
}

/// The state events in a file, per plugin (in name order) and scope: what
/// [`event_counts`] gives. Serialized as `{"<plugin>": {"branch": n, ...}, ...}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct EventCounts {
    /// Every plugin with at least one event.
    pub plugins: BTreeMap<String, PluginEvents>,
}

/// One (plugin, scope) row of [`EventCounts::rows`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventCount {
    /// The plugin id.
    pub plugin: String,
    /// The scope.
    pub scope: EventScope,
    /// How many events (at least one).
    pub events: u64,
}

impl EventCounts {
    /// Whether the file has no state events.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// One plugin's counts (all zero when it has no events).
    pub fn of(&self, plugin: &str) -> PluginEvents {
        self.plugins.get(plugin).copied().unwrap_or_default()
    }

    /// One row per (plugin, scope) with events, plugins in name order, then scopes.
    pub fn rows(&self) -> Vec<EventCount> {
        self.plugins
            .iter()
            .flat_map(|(p, c)| {
                c.scopes().map(move |(scope, events)| EventCount {
                    plugin: p.clone(),
                    scope,
                    events,
                })
            })
            .collect()
    }
}

/// Counts the state events of every plugin, by scope, over every entry of the file (all
/// branches). Undecodable events count as [`EventScope::Invalid`].
pub fn event_counts(log: &SessionLog) -> EventCounts {
    Walk::of(log).counts
}

/// A session's write-lock row as tools show it: a [`LockStatus`] with the facts derived
/// from it, serializable (`liveness` as its text: `"alive"`, `"not alive"`, `"unknown"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockReport {
    /// The holder as stored.
    pub holder: String,
    /// What the holder said it was doing, when recorded.
    pub action: Option<String>,
    /// When the lock was taken, ms since the Unix epoch.
    pub acquired_at_ms: i64,
    /// How long ago that was, in ms.
    pub age_ms: u64,
    /// Whether the holder still runs.
    #[serde(serialize_with = "as_text")]
    pub liveness: Liveness,
    /// Why `liveness` is what it is.
    pub liveness_reason: String,
    /// Whether the lease has run out.
    pub lease_expired: bool,
    /// Whether a writer in another process would be refused now
    /// ([`LockStatus::blocks_writers`]).
    pub blocks_writers: bool,
}

fn as_text<S: serde::Serializer>(
    v: &impl std::fmt::Display,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(v)
}

impl From<&LockStatus> for LockReport {
    fn from(st: &LockStatus) -> LockReport {
        LockReport {
            holder: st.holder.clone(),
            action: st.action.clone(),
            acquired_at_ms: st.acquired_at_ms,
            age_ms: u64::try_from(st.age.as_millis()).unwrap_or(u64::MAX),
            liveness: st.liveness,
            liveness_reason: st.liveness_reason.clone(),
            lease_expired: st.lease_expired,
            blocks_writers: st.blocks_writers(),
        }
    }
}

/// What an [`IntegrityFinding`] is about: one of the reader's [`FindingKind`]s, or a
/// state event whose envelope cannot be decoded. Serialized as its kebab-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntegrityKind {
    /// A finding of the reader (torn tail, corrupt line...).
    Log(FindingKind),
    /// `bad-state-event`: reads of that plugin fail, the file is still readable.
    BadStateEvent,
}

impl IntegrityKind {
    /// The kebab-case name (`torn-tail`, `bad-state-event`...).
    pub fn as_str(self) -> &'static str {
        match self {
            IntegrityKind::BadStateEvent => "bad-state-event",
            IntegrityKind::Log(k) => match k {
                FindingKind::TornTail => "torn-tail",
                FindingKind::TornRecord => "torn-record",
                FindingKind::UnparsableFinalLine => "unparsable-final-line",
                FindingKind::BlankLine => "blank-line",
                FindingKind::ExtraHeader => "extra-header",
                FindingKind::ByteOrderMark => "byte-order-mark",
                FindingKind::Corrupt => "corrupt",
                FindingKind::InvalidEntry => "invalid-entry",
                FindingKind::DuplicateId => "duplicate-id",
                FindingKind::DanglingParent => "dangling-parent",
                FindingKind::Cycle => "cycle",
                FindingKind::InvalidHeader => "invalid-header",
            },
        }
    }
}

impl Serialize for IntegrityKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One line of an integrity report: a reader [`Finding`], or an undecodable state event
/// (a warning). Serialized like [`Finding`]; displayed as `session-state verify` lists
/// it: `warning torn-tail at line 9, byte 1234, entry 'a1': ...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IntegrityFinding {
    /// Warning or error.
    pub severity: Severity,
    /// What kind.
    pub kind: IntegrityKind,
    /// Where the line starts.
    pub at: Location,
    /// The entry id, when known.
    pub entry_id: Option<String>,
    /// A human-readable explanation.
    pub message: String,
}

impl From<Finding> for IntegrityFinding {
    fn from(f: Finding) -> IntegrityFinding {
        IntegrityFinding {
            severity: f.severity,
            kind: IntegrityKind::Log(f.kind),
            at: f.at,
            entry_id: f.entry_id,
            message: f.message,
        }
    }
}

impl std::fmt::Display for IntegrityFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let severity = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(
            f,
            "{severity} {} at line {}, byte {}",
            self.kind.as_str(),
            self.at.line,
            self.at.offset
        )?;
        if let Some(id) = &self.entry_id {
            write!(f, ", entry '{id}'")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// What a read of a session file accepted: the session, how many entries, and every
/// finding (the reader's and the undecodable state events), in file order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Integrity {
    /// The header's session id.
    pub session_id: String,
    /// Entries read.
    pub entries: usize,
    /// Every finding, by byte offset.
    pub findings: Vec<IntegrityFinding>,
}

/// The integrity report of a log as it was read (strictly or in salvage mode): its
/// [`SessionLog::findings`] and its undecodable state events, sorted by offset.
pub fn integrity(log: &SessionLog) -> Integrity {
    let mut findings: Vec<IntegrityFinding> = log
        .findings()
        .into_iter()
        .map(IntegrityFinding::from)
        .collect();
    findings.extend(log.entries().filter_map(|e| {
        let ev = state_event(log, e.id())?;
        let detail = ev.envelope.err()?;
        Some(IntegrityFinding {
            severity: Severity::Warning,
            kind: IntegrityKind::BadStateEvent,
            at: e.location(),
            entry_id: Some(e.id().to_owned()),
            message: format!(
                "plugin '{}': {detail}; reads of this plugin fail",
                ev.plugin
            ),
        })
    }));
    findings.sort_by_key(|f| f.at.offset);
    Integrity {
        session_id: log.session_id().to_owned(),
        entries: log.len(),
        findings,
    }
}

/// Why a reader refused a file, and where when the error points at a line (the header's
/// errors point at line 1, byte 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The error's message.
    pub message: String,
    /// The line, 1-based.
    pub line: Option<u64>,
    /// The line's byte offset.
    pub offset: Option<u64>,
    /// The entry, when the error names one.
    pub entry_id: Option<String>,
}

impl From<&Error> for Refusal {
    fn from(e: &Error) -> Refusal {
        let (at, entry_id) = match e {
            Error::Corrupt { at, .. } | Error::TrailingGarbage { at, .. } => (Some(*at), None),
            Error::InvalidEntry { at, id, .. } => (Some(*at), id.clone()),
            Error::DuplicateId { at, id, .. }
            | Error::DanglingParent { at, id, .. }
            | Error::Cycle { at, id, .. } => (Some(*at), Some(id.clone())),
            Error::MissingHeader { .. }
            | Error::InvalidHeader { .. }
            | Error::UnsupportedVersion { .. } => (Some(Location { line: 1, offset: 0 }), None),
            _ => (None, None),
        };
        Refusal {
            message: e.to_string(),
            line: at.map(|a| a.line),
            offset: at.map(|a| a.offset),
            entry_id,
        }
    }
}

/// A plugin's value in a [`Replay`]. Serialized as `{"value": …}`, `{"absent": true}` or
/// `{"error": "<message>"}`.
#[derive(Debug)]
pub enum ReplayValue {
    /// The folded value.
    Present(Value),
    /// No value (never set, or dropped).
    Absent,
    /// The fold fails on a bad event of the plugin ([`Error::BadEvent`]).
    Unreadable(Error),
}

impl From<Result<Option<Value>>> for ReplayValue {
    fn from(r: Result<Option<Value>>) -> ReplayValue {
        match r {
            Ok(Some(v)) => ReplayValue::Present(v),
            Ok(None) => ReplayValue::Absent,
            Err(e) => ReplayValue::Unreadable(e),
        }
    }
}

impl Serialize for ReplayValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        match self {
            ReplayValue::Present(v) => m.serialize_entry("value", v)?,
            ReplayValue::Absent => m.serialize_entry("absent", &true)?,
            ReplayValue::Unreadable(e) => m.serialize_entry("error", &e.to_string())?,
        }
        m.end()
    }
}

/// Another extension's `custom` entries of one `customType` on a branch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CustomReplay {
    /// How many on the path from the root to the tip.
    pub entries: u64,
    /// The id of the last one.
    pub last_entry: String,
    /// The last one's `data` (`null` when it has none), or why it cannot be read.
    /// Serialized as the value itself, or `{"error": "<message>"}`.
    #[serde(serialize_with = "data_or_error")]
    pub last_data: std::result::Result<Value, String>,
}

fn data_or_error<S: serde::Serializer>(
    d: &std::result::Result<Value, String>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    match d {
        Ok(v) => v.serialize(s),
        Err(e) => {
            let mut m = s.serialize_map(Some(1))?;
            m.serialize_entry("error", e)?;
            m.end()
        }
    }
}

/// The state at one branch tip, in a [`Replay`].
#[derive(Debug, Serialize)]
pub struct TipReplay {
    /// The tip's entry id.
    pub tip: String,
    /// Whether it is the active leaf.
    pub leaf: bool,
    /// Its branch key.
    pub branch_key: String,
    /// Entries on the path from the root, both ends included.
    pub depth: usize,
    /// Every plugin with state events in the file: its branch-scope value here.
    pub branch: BTreeMap<String, ReplayValue>,
    /// Every other extension's `custom` entries on the path, by `customType`.
    pub custom: BTreeMap<String, CustomReplay>,
}

/// The state of every plugin at every branch tip of a file: what `session-state replay`
/// shows. See [`replay`].
#[derive(Debug, Serialize)]
pub struct Replay {
    /// The header's session id.
    pub session_id: String,
    /// Entries in the file.
    pub entries: usize,
    /// The active leaf (the last entry in file order), if any.
    pub leaf: Option<String>,
    /// The state events per plugin and scope.
    pub events: EventCounts,
    /// Every plugin's session-scope value (the same at every tip).
    pub session: BTreeMap<String, ReplayValue>,
    /// Every branch tip, in file order.
    pub tips: Vec<TipReplay>,
}

impl ReplayValue {
    /// Whether the value could be read (present or absent, not [`ReplayValue::Unreadable`]).
    pub fn is_readable(&self) -> bool {
        !matches!(self, ReplayValue::Unreadable(_))
    }
}

impl TipReplay {
    /// Whether every value and every custom entry's data at this tip could be read.
    pub fn is_complete(&self) -> bool {
        self.branch.values().all(ReplayValue::is_readable)
            && self.custom.values().all(|c| c.last_data.is_ok())
    }
}

impl Replay {
    /// Whether every value and every custom entry's data could be read.
    pub fn is_complete(&self) -> bool {
        self.session.values().all(ReplayValue::is_readable)
            && self.tips.iter().all(TipReplay::is_complete)
    }
}

/// Replays a file from the log alone (no database): every plugin's session-scope value,
/// and at every branch tip its branch-scope values and the other extensions' `custom`
/// entries, in one [`fold_tips`] walk. `on_tip` is called as each tip is done (for a
/// progress display). A bad event makes the values it poisons
/// [`ReplayValue::Unreadable`], never the whole replay.
///
/// The report holds every tip's values; [`replay_tips`] gives the same report without
/// them, and the tips one at a time.
pub fn replay(log: &SessionLog, on_tip: impl FnMut(&str)) -> Replay {
    let (mut report, tips) = replay_tips(log, on_tip);
    report.tips = tips.collect();
    report
}

/// [`replay`] without holding every tip's report at once: the [`Replay`] with `tips` left
/// empty, and the tips in file order, each built when the iterator is asked for it (for a
/// tool that prints them as they come: a file with many tips then needs memory for what
/// the walk keeps per tip, its shared carried state, not for every tip's report). The
/// walk is done before this returns; `on_tip` is called as each tip is reached.
pub fn replay_tips<'a>(
    log: &'a SessionLog,
    mut on_tip: impl FnMut(&str),
) -> (Replay, TipReplays<'a>) {
    let mut walk = Walk::of(log);
    let events = std::mem::take(&mut walk.counts);
    let plugins = walk.plugins.clone();
    let session = plugins
        .iter()
        .zip(walk.session())
        .map(|(p, v)| ((*p).to_owned(), ReplayValue::from(slot_value(log, p, &v))))
        .collect();
    let leaf = log.leaf_id();
    let tree = log.tree();
    let mut kept: Vec<Kept<'a>> = Vec::new();
    walk.tips(log, |t| {
        on_tip(tree.id(t.node));
        kept.push(Kept {
            node: t.node,
            depth: t.depth,
            key: t.key,
            values: t.values.clone(),
            custom: t.custom.clone(),
        });
    });
    kept.sort_by_key(|k| k.node);
    let report = Replay {
        session_id: log.session_id().to_owned(),
        entries: log.len(),
        leaf: leaf.map(str::to_owned),
        events,
        session,
        tips: Vec::new(),
    };
    let tips = TipReplays {
        log,
        plugins,
        kept: kept.into_iter(),
    };
    (report, tips)
}

/// What the walk keeps of a tip until its report is built: the carried state, shared.
struct Kept<'a> {
    node: u32,
    depth: usize,
    key: u32,
    values: Arc<Vec<Slot>>,
    custom: Arc<Customs<'a>>,
}

/// The tips of a [`replay_tips`] in file order, each [`TipReplay`] built when asked for.
pub struct TipReplays<'a> {
    log: &'a SessionLog,
    plugins: Vec<&'a str>,
    kept: std::vec::IntoIter<Kept<'a>>,
}

impl std::fmt::Debug for TipReplays<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TipReplays")
            .field("remaining", &self.kept.len())
            .finish_non_exhaustive()
    }
}

impl Iterator for TipReplays<'_> {
    type Item = TipReplay;

    fn next(&mut self) -> Option<TipReplay> {
        let k = self.kept.next()?;
        let (log, tree) = (self.log, self.log.tree());
        let custom = k
            .custom
            .iter()
            .map(|(&ct, &(entries, last))| {
                let last_data = match log.entry_at(last).custom_data() {
                    None => Ok(Value::Null),
                    Some(raw) => crate::json::from_str(raw.get())
                        .map_err(|e| format!("entry '{}' does not parse: {e}", tree.id(last))),
                };
                let c = CustomReplay {
                    entries,
                    last_entry: tree.id(last).to_owned(),
                    last_data,
                };
                (ct.to_owned(), c)
            })
            .collect();
        let tip = tree.id(k.node);
        Some(TipReplay {
            tip: tip.to_owned(),
            leaf: log.leaf_id() == Some(tip),
            branch_key: tree.id(k.key).to_owned(),
            depth: k.depth,
            branch: self
                .plugins
                .iter()
                .zip(k.values.iter())
                .map(|(p, v)| ((*p).to_owned(), ReplayValue::from(slot_value(log, p, v))))
                .collect(),
            custom,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.kept.size_hint()
    }
}

impl ExactSizeIterator for TipReplays<'_> {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    use std::path::Path;

    /// The per-tip answers: [`value_at`] per plugin, `path_to`, `branch_key_of`, and the
    /// custom entries counted along the path.
    fn per_tip(log: &SessionLog) -> Vec<String> {
        let plugins: std::collections::BTreeSet<&str> =
            log.entries().filter_map(|e| e.state_plugin()).collect();
        log.tips()
            .into_iter()
            .map(|tip| {
                let path = log.path_to(tip).unwrap();
                let mut custom: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
                for id in &path {
                    let e = log.entry(id).unwrap();
                    if e.entry_type() == crate::EntryType::Custom
                        && let Some(ct) = e.custom_type().filter(|c| !c.starts_with(STATE_PREFIX))
                    {
                        let slot = custom.entry(ct).or_insert((0, id));
                        slot.0 += 1;
                        slot.1 = id;
                    }
                }
                let branch: Vec<(&str, String)> = plugins
                    .iter()
                    .map(|p| (*p, show(value_at(log, p, Scope::Branch, tip))))
                    .collect();
                let custom: Vec<(&str, u64, &str)> =
                    custom.into_iter().map(|(c, (n, l))| (c, n, l)).collect();
                format!(
                    "{tip} {} {} {branch:?} {custom:?}",
                    path.len(),
                    log.branch_key_of(tip).unwrap()
                )
            })
            .collect()
    }

    fn show(r: Result<Option<Value>>) -> String {
        match r {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error {e}"),
        }
    }

    /// The one walk's answers, in file order of the tips.
    fn walked(log: &SessionLog) -> Vec<String> {
        let mut rows = Vec::new();
        fold_tips(log, |t| {
            let branch: Vec<(&str, String)> =
                t.branch.into_iter().map(|(p, v)| (p, show(v))).collect();
            assert_eq!(log.entries().nth(t.index).unwrap().id(), t.tip);
            rows.push((
                t.index,
                format!(
                    "{} {} {} {branch:?} {:?}",
                    t.tip, t.depth, t.branch_key, t.custom
                ),
            ));
        });
        rows.sort_by_key(|r| r.0);
        rows.into_iter().map(|r| r.1).collect()
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(name)
    }

    /// A report as the CLI prints it.
    fn printed(report: &impl Serialize) -> String {
        crate::json::to_string(&serde_json::to_value(report).unwrap())
    }

    #[test]
    fn event_counts_count_every_event_by_plugin_and_scope() {
        let log = SessionLog::open(fixture("edge/bad-envelope.jsonl")).unwrap();
        let counts = event_counts(&log);
        assert_eq!(
            printed(&counts),
            r#"{"role":{"invalid":2},"todo":{"session":2}}"#
        );
        assert_eq!(
            printed(&counts.rows()),
            r#"[{"plugin":"role","scope":"invalid","events":2},{"plugin":"todo","scope":"session","events":2}]"#
        );
        assert!(counts.of("role").may_set(Scope::Branch));
        assert!(counts.of("todo").may_set(Scope::Session));
        assert!(!counts.of("todo").may_set(Scope::Branch));
        assert_eq!(counts.of("nobody"), PluginEvents::default());
        // Every branch counts, not only the active one.
        let example = SessionLog::open(fixture("example.jsonl")).unwrap();
        assert_eq!(
            printed(&event_counts(&example)),
            r#"{"role":{"branch":2},"todo":{"session":2}}"#
        );
    }

    #[test]
    fn integrity_kind_names_are_the_serialized_finding_kinds() {
        use FindingKind::*;
        for k in [
            TornTail,
            TornRecord,
            UnparsableFinalLine,
            BlankLine,
            ExtraHeader,
            ByteOrderMark,
            Corrupt,
            InvalidEntry,
            DuplicateId,
            DanglingParent,
            Cycle,
            InvalidHeader,
        ] {
            assert_eq!(
                serde_json::to_value(IntegrityKind::Log(k)).unwrap(),
                serde_json::to_value(k).unwrap()
            );
        }
        assert_eq!(IntegrityKind::BadStateEvent.as_str(), "bad-state-event");
    }

    #[test]
    fn integrity_lists_undecodable_events_among_the_findings_in_file_order() {
        let log = SessionLog::open(fixture("edge/bad-envelope.jsonl")).unwrap();
        let report = integrity(&log);
        assert_eq!(report.entries, 7);
        let kinds: Vec<(&str, u64)> = report
            .findings
            .iter()
            .map(|f| (f.kind.as_str(), f.at.line))
            .collect();
        assert_eq!(kinds, [("bad-state-event", 4), ("bad-state-event", 5)]);
        assert_eq!(
            report.findings[0].to_string(),
            "warning bad-state-event at line 4, byte 823, entry 'a0000003': plugin 'role': \
             unknown envelope version v=9 (this crate reads v=1); reads of this plugin fail"
        );
        let salvaged = crate::LogOptions::new()
            .mode(crate::ReadMode::Salvage)
            .open(fixture("edge/torn-tail.jsonl"))
            .unwrap();
        let report = integrity(&salvaged);
        assert_eq!(
            report.findings[0].kind,
            IntegrityKind::Log(FindingKind::TornTail)
        );
    }

    #[test]
    fn a_refusal_points_at_the_line_and_entry() {
        let e = SessionLog::open(fixture("edge/dangling-parent.jsonl")).unwrap_err();
        let r = Refusal::from(&e);
        assert_eq!(r.entry_id.as_deref(), Some("a0000003"));
        assert!(r.line.is_some() && r.offset.is_some());
        assert_eq!(r.message, e.to_string());
        let e = SessionLog::open(fixture("edge/bad-header.jsonl")).unwrap_err();
        let r = Refusal::from(&e);
        assert_eq!((r.line, r.offset, r.entry_id), (Some(1), Some(0), None));
    }

    #[test]
    fn a_lock_report_shows_liveness_as_text() {
        let st = LockStatus {
            holder: "pid:1".into(),
            action: None,
            acquired_at_ms: 5,
            age: std::time::Duration::from_millis(2_500),
            liveness: Liveness::NotAlive,
            liveness_reason: "gone".into(),
            lease_expired: false,
        };
        assert_eq!(
            printed(&LockReport::from(&st)),
            r#"{"holder":"pid:1","action":null,"acquired_at_ms":5,"age_ms":2500,"liveness":"not alive","liveness_reason":"gone","lease_expired":false,"blocks_writers":false}"#
        );
    }

    #[test]
    fn a_replay_prints_its_values_losslessly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let lines = [
            r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}"#,
            r#"{"type":"custom","customType":"session-state/p","data":{"v":1,"scope":"branch","op":"set","value":{"t":"cut \ud83d","n":1.0,"1":0}},"id":"e1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z"}"#,
            r#"{"type":"custom","customType":"x","data":{"error":"\udc00"},"id":"e2","parentId":"e1","timestamp":"2026-01-01T00:00:00.000Z"}"#,
        ];
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let log = SessionLog::open(&path).unwrap();
        let mut ticks = Vec::new();
        let r = replay(&log, |tip| ticks.push(tip.to_owned()));
        assert_eq!(ticks, ["e2"]);
        assert!(r.is_complete());
        let tip = &r.tips[0];
        assert!(tip.leaf);
        assert_eq!(
            printed(&tip.branch),
            r#"{"p":{"value":{"1":0,"t":"cut \ud83d","n":1}}}"#
        );
        // Another extension's data is its own, even when it looks like an error report.
        assert_eq!(
            printed(&tip.custom),
            r#"{"x":{"entries":1,"last_entry":"e2","last_data":{"error":"\udc00"}}}"#
        );
        assert_eq!(printed(&r.session), r#"{"p":{"absent":true}}"#);
    }

    #[test]
    fn a_replay_is_incomplete_when_a_value_cannot_be_read() {
        let log = SessionLog::open(fixture("edge/bad-envelope.jsonl")).unwrap();
        let r = replay(&log, |_| {});
        assert!(!r.is_complete());
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["tips"][0]["branch"]["role"]["error"].is_string(), "{v}");
        let log = SessionLog::open(fixture("example.jsonl")).unwrap();
        let r = replay(&log, |_| {});
        assert!(r.is_complete());
        assert_eq!(r.tips.len(), 2);
        assert_eq!(r.tips.iter().filter(|t| t.leaf).count(), 1);
        assert_eq!(r.leaf.as_deref(), log.leaf_id());
    }

    #[test]
    fn one_walk_agrees_with_per_tip_folds_on_the_fixtures() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut compared = 0;
        for sub in [dir.clone(), dir.join("edge")] {
            for f in std::fs::read_dir(sub).unwrap() {
                let path = f.unwrap().path();
                if path.extension().is_none_or(|x| x != "jsonl") {
                    continue;
                }
                // Files the strict reader refuses have no tree to walk.
                let Ok(log) = SessionLog::open(&path) else {
                    continue;
                };
                assert_eq!(walked(&log), per_tip(&log), "{}", path.display());
                compared += 1;
            }
        }
        assert!(compared >= 12, "only {compared} fixtures compared");
    }

    #[test]
    fn one_walk_agrees_with_per_tip_folds_on_random_trees() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut saw_error, mut saw_fork) = (false, false);
        for round in 0..60 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("r.jsonl");
            let mut s = String::from(
                "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\
                 \"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n",
            );
            let n = 1 + next(80) as usize;
            for i in 0..n {
                let parent = if i == 0 || next(15) == 0 {
                    "null".to_owned()
                } else {
                    // Mostly recent entries, so deep chains and forks both occur.
                    let window = if next(2) == 0 { 3 } else { 40 };
                    let back = 1 + next((i as u64).min(window));
                    format!("\"e{}\"", i as u64 - back)
                };
                let head = format!(
                    "\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\""
                );
                let plugin = ["a", "b", "c"][next(3) as usize];
                let scope = if next(4) == 0 { "session" } else { "branch" };
                let body = match next(9) {
                    0 | 1 => format!(
                        "{{\"type\":\"message\",{head},\"message\":{{\"role\":\"user\",\
                         \"content\":\"hi\",\"timestamp\":1}}}}"
                    ),
                    2 => format!(
                        "{{\"type\":\"custom\",\"customType\":\"x{}\",\"data\":{i},{head}}}",
                        next(3)
                    ),
                    3 => format!(
                        "{{\"type\":\"custom\",\"customType\":\"{STATE_PREFIX}{plugin}\",\
                         \"data\":{{\"v\":1,\"scope\":\"{scope}\",\"op\":\"drop\"}},{head}}}"
                    ),
                    4 => format!(
                        "{{\"type\":\"custom\",\"customType\":\"{STATE_PREFIX}{plugin}\",\
                         \"data\":{{\"v\":{},\"scope\":\"{scope}\",\"op\":\"set\",\"value\":1}},{head}}}",
                        if next(6) == 0 { 9 } else { 1 }
                    ),
                    5 | 6 => format!(
                        "{{\"type\":\"custom\",\"customType\":\"{STATE_PREFIX}{plugin}\",\
                         \"data\":{{\"v\":1,\"scope\":\"{scope}\",\"op\":\"patch\",\
                         \"value\":{{\"k{}\":{i}}}}},{head}}}",
                        next(3)
                    ),
                    _ => format!(
                        "{{\"type\":\"custom\",\"customType\":\"{STATE_PREFIX}{plugin}\",\
                         \"data\":{{\"v\":1,\"scope\":\"{scope}\",\"op\":\"set\",\
                         \"value\":{{\"n\":{i}}}}},{head}}}"
                    ),
                };
                let _ = writeln!(s, "{body}");
            }
            std::fs::write(&path, &s).unwrap();
            let log = SessionLog::open(&path).unwrap();
            let rows = walked(&log);
            assert_eq!(rows, per_tip(&log), "round {round}:\n{s}");
            saw_error |= rows.iter().any(|r| r.contains("error"));
            saw_fork |= !log.forks().is_empty();
        }
        assert!(saw_error && saw_fork, "the trees lack bad events or forks");
    }
}
