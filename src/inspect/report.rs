//! The reports the inspection tools print: a file's integrity and its replay.
//! The values they hold are in the crate's JSON encoding (see `crate::json`).

use super::counts::EventCounts;
use super::walk::{Customs, Slot, Walk, slot_value, state_event};
use crate::error::{Error, Location, Result};
use crate::log::reader::{Finding, FindingKind, Severity};
use crate::tree::SessionLog;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

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
            IntegrityKind::Log(k) => k.as_str(),
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
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
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

/// A plugin's value in a [`Replay`]. Serialized as `{"value": …}`, `{"absent": true}` or
/// `{"error": "<message>"}`.
#[derive(Debug)]
pub enum ReplayValue {
    /// The folded value.
    Present(Value),
    /// No value (never set, or dropped).
    Absent,
    /// The fold fails on a bad event of the plugin
    /// ([`StateError::BadEvent`](crate::StateError::BadEvent)).
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
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
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
    /// The plugins whose readable branch value here was written under a state version
    /// other than 1, with that version (the version of the last event folded in).
    #[serde(skip)]
    pub versions: BTreeMap<String, u32>,
}

/// The state of every plugin at every branch tip of a file: what `session-state replay`
/// shows. See [`replay`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
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
    /// The plugins whose readable session-scope value was written under a state version
    /// other than 1, with that version.
    #[serde(skip)]
    pub session_versions: BTreeMap<String, u32>,
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
/// entries, in one walk. `on_tip` is called as each tip is done (for a
/// progress display). A bad event makes the values it poisons
/// [`ReplayValue::Unreadable`], never the whole replay.
///
/// The report holds every tip's values; [`replay_tips`] gives the same report without
/// them, and the tips one at a time.
#[cfg(any(test, feature = "__internal"))]
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
    let (session_slots, session_versions) = walk.session();
    let session_versions = versions_of(&plugins, &session_slots, &session_versions);
    let session = plugins
        .iter()
        .zip(session_slots)
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
            versions: t.versions.clone(),
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
        session_versions,
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
    versions: Arc<Vec<u32>>,
    custom: Arc<Customs<'a>>,
}

/// The plugins whose readable value was written under a version other than 1.
fn versions_of(plugins: &[&str], slots: &[Slot], versions: &[u32]) -> BTreeMap<String, u32> {
    plugins
        .iter()
        .zip(slots.iter().zip(versions))
        .filter(|(_, (slot, v))| slot.is_ok() && **v != 1)
        .map(|(p, (_, v))| ((*p).to_owned(), *v))
        .collect()
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
                    Some(raw) => crate::json::from_str(raw)
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
            versions: versions_of(&self.plugins, &k.values, &k.versions),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.kept.size_hint()
    }
}

impl ExactSizeIterator for TipReplays<'_> {}
