//! The walk engine: one depth-first traversal of the tree that folds every plugin's
//! branch value at every tip, and the single-position views ([`value_at`],
//! [`state_event`]) it agrees with.

// Without the command line (and its tests), the walk of every tip, which only the
// command line's `replay` report uses, has no caller.
#![cfg_attr(
    not(any(feature = "cli", feature = "__internal", test)),
    allow(dead_code)
)]

use super::counts::EventCounts;
use crate::error::{Error, Result, StateError};
use crate::state::envelope::{DecodeError, Envelope, STATE_PREFIX, Scope};
use crate::state::fold::{self, Folds};
use crate::state::index::{StateIndex, data_of};
use crate::state::step;
use crate::tree::SessionLog;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The value of `plugin` in `scope` as if the active leaf were `entry_id` (session scope
/// ignores the position). `None` when absent.
///
/// Unlike [`crate::SessionState::read_at`] this needs no database location, so it suits
/// tools that only look. Errors: an unknown entry id, or a bad event of this plugin
/// ([`crate::StateError::BadEvent`]).
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
#[cfg(any(test, feature = "__internal"))]
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
pub(super) type Slot = std::result::Result<Option<Arc<Value>>, (u32, Arc<str>)>;

/// What the walk carries down the tree. The two tables are shared between the branches
/// of a fork and copied only when a branch changes them (`Arc::make_mut`), so a fork
/// costs O(1) and a branch that changes nothing copies nothing.
#[derive(Clone)]
struct Carry<'a> {
    /// Per plugin slot (see [`Walk::plugins`]).
    values: Arc<Vec<Slot>>,
    /// Per plugin slot: the state version of the last branch event folded in (1: none).
    versions: Arc<Vec<u32>>,
    /// Per other `customType` on the path: how many, and the node of the last one.
    custom: Arc<Customs<'a>>,
    depth: usize,
    /// The node whose id is the branch key.
    key: u32,
}

/// Per other `customType` on a path: how many, and the node of the last one.
pub(super) type Customs<'a> = BTreeMap<&'a str, (u64, u32)>;

/// A tip as the walk reaches it: the carried state, borrowed (a tip that keeps it clones
/// the `Arc`s, which shares the tables).
pub(super) struct TipAt<'w, 'a> {
    pub(super) node: u32,
    pub(super) depth: usize,
    pub(super) key: u32,
    pub(super) values: &'w Arc<Vec<Slot>>,
    pub(super) versions: &'w Arc<Vec<u32>>,
    pub(super) custom: &'w Arc<Customs<'a>>,
}

/// The state events of a log, decoded once each, and the plugins they name.
pub(super) struct Walk<'a> {
    index: StateIndex,
    /// Every plugin with state events, in name order; a plugin's slot is its position.
    pub(super) plugins: Vec<&'a str>,
    /// Per event of `index` (file order): its plugin's slot.
    slot: Vec<usize>,
    /// Per event of `index`: its envelope, decoded, until a fold takes it.
    decoded: Vec<Option<std::result::Result<Envelope, DecodeError>>>,
    /// The per-plugin, per-scope counts of the events (undecodable ones as invalid).
    pub(super) counts: EventCounts,
}

impl<'a> Walk<'a> {
    pub(super) fn of(log: &'a SessionLog) -> Walk<'a> {
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
    /// session events' envelopes are taken. With each value, the state version of the last
    /// event folded in (1: none).
    pub(super) fn session(&mut self) -> (Vec<Slot>, Vec<u32>) {
        let mut values: Vec<Slot> = vec![Ok(None); self.plugins.len()];
        let mut versions = vec![1; self.plugins.len()];
        for (ev, d) in self.decoded.iter_mut().enumerate() {
            let v = &mut values[self.slot[ev]];
            let Ok(cur) = v else { continue };
            match d {
                Some(Ok(env)) if env.scope == Scope::Session => {
                    if let Some(Ok(env)) = d.take() {
                        versions[self.slot[ev]] = env.state_version;
                        step::apply_shared(env.op, cur);
                    }
                }
                Some(Err(e)) if e.scope.is_none() || e.scope == Some(Scope::Session) => {
                    *v = Err((self.index.events()[ev].node, e.detail.as_str().into()));
                }
                _ => {}
            }
        }
        (values, versions)
    }

    /// The depth-first walk of [`fold_tips`]: `each` gets every tip with the carried
    /// state. The branch events' envelopes are taken (each node is visited once).
    pub(super) fn tips(&mut self, log: &'a SessionLog, mut each: impl FnMut(TipAt<'_, 'a>)) {
        use crate::log::entry::EntryType;
        let tree = log.tree();
        let fresh = Arc::new(vec![Ok(None); self.plugins.len()]);
        let ones = Arc::new(vec![1; self.plugins.len()]);
        let mut stack: Vec<(u32, Carry<'a>)> = tree
            .roots()
            .into_iter()
            .rev()
            .map(|r| {
                let c = Carry {
                    values: fresh.clone(),
                    versions: ones.clone(),
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
                            if c.versions[p] != env.state_version {
                                Arc::make_mut(&mut c.versions)[p] = env.state_version;
                            }
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
                    versions: &c.versions,
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
/// [`StateError::BadEvent`].
pub(super) fn slot_value(log: &SessionLog, plugin: &str, slot: &Slot) -> Result<Option<Value>> {
    match slot {
        Ok(v) => Ok(v.as_deref().map(crate::json::clone_value)),
        Err((bad, detail)) => {
            let e = log.entry_at(*bad);
            Err(Error::State(StateError::BadEvent {
                path: log.path().to_path_buf(),
                plugin: plugin.to_owned(),
                entry_id: e.id().to_owned(),
                at: e.location(),
                detail: detail.to_string(),
            }))
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
#[cfg(any(test, feature = "__internal"))]
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

/// Counts the state events of every plugin, by scope, over every entry of the file (all
/// branches). Undecodable events count in the scope `invalid`.
pub fn event_counts(log: &SessionLog) -> EventCounts {
    Walk::of(log).counts
}
