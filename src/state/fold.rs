//! The fold: the value of a plugin's state at a position.
//!
//! Branch scope: the fold of the plugin's branch events on the path root → position.
//! The [`StateIndex`] gives every node its nearest state-event ancestor, so a read skips
//! the messages in between; every folded event value is memoized, so a read after one
//! appended entry costs a constant number of map lookups, not a walk to the root.
//! Session scope: the fold of the plugin's session events in file order, kept
//! incrementally. Each event is applied by [`super::step::apply`], the step the
//! projection's catch-up takes too.
//!
//! The memo ([`Folds`]) belongs to whoever keeps a log open: the store keeps one per log
//! it has read; tools that only look build one for the call.

use super::envelope::{DecodeError, Envelope, Op, Scope};
use super::index::{StateIndex, data_of};
use super::step;
use crate::error::{Error, Result};
use crate::tree::SessionLog;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// A folded value: absent, or present (possibly `null`), plus the entry that made it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Folded {
    pub value: Option<Arc<Value>>,
    /// Node index of the last event folded in (None: no event yet).
    pub last: Option<u32>,
}

impl Folded {
    const EMPTY: Folded = Folded {
        value: None,
        last: None,
    };
}

/// A fold that met a bad event: node index and the problem.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BadEvent {
    pub node: u32,
    pub detail: String,
}

type FoldResult = std::result::Result<Folded, BadEvent>;

#[derive(Debug, Default)]
struct PluginCache {
    /// Folded branch value at each of this plugin's branch events.
    at_event: HashMap<u32, FoldResult>,
    /// For a state-event node: this plugin's nearest branch event at or above it.
    nearest: HashMap<u32, std::result::Result<Option<u32>, BadEvent>>,
    /// Session scope: events folded so far (index into the index's event list) and value.
    session_next: usize,
    session: Option<FoldResult>,
}

/// Memo of folds over one log, keyed by plugin, with the decoded events (by node).
#[derive(Debug, Default)]
struct FoldCache {
    plugins: HashMap<Box<str>, PluginCache>,
    decoded: HashMap<u32, std::result::Result<Arc<Envelope>, DecodeError>>,
}

impl FoldCache {
    fn decode(
        &mut self,
        log: &SessionLog,
        node: u32,
    ) -> std::result::Result<Arc<Envelope>, DecodeError> {
        self.decoded
            .entry(node)
            .or_insert_with(|| Envelope::decode(data_of(log, node)).map(Arc::new))
            .clone()
    }
}

/// The fold layer's view of one log: its state index and the memo of folds.
#[derive(Debug, Default)]
pub(crate) struct Folds {
    index: StateIndex,
    cache: FoldCache,
}

impl Folds {
    /// Folds over `log` as it is now.
    pub(crate) fn of(log: &SessionLog) -> Folds {
        let mut f = Folds::default();
        f.follow(log);
        f
    }

    /// Follows the entries `log` gained since the last call.
    pub(crate) fn follow(&mut self, log: &SessionLog) {
        if log.len() < self.index.len() {
            *self = Folds::default();
        }
        self.index.follow(log);
    }
}

/// Does this event belong to `(plugin, scope)`? `Err` if it is this plugin's and cannot
/// be decoded in a way that could concern this scope.
fn concerns(
    f: &mut Folds,
    log: &SessionLog,
    node: u32,
    plugin: &str,
    scope: Scope,
) -> std::result::Result<Option<Arc<Envelope>>, BadEvent> {
    match f.index.event_of(node) {
        Some(ev) if &*ev.plugin == plugin => {}
        _ => return Ok(None),
    }
    match f.cache.decode(log, node) {
        Ok(env) if env.scope == scope => Ok(Some(env)),
        Ok(_) => Ok(None),
        Err(e) if e.scope.is_none() || e.scope == Some(scope) => Err(BadEvent {
            node,
            detail: e.detail,
        }),
        Err(_) => Ok(None),
    }
}

/// This plugin's nearest branch event at or above `node`.
fn nearest_branch_event(
    f: &mut Folds,
    log: &SessionLog,
    plugin: &str,
    node: u32,
) -> std::result::Result<Option<u32>, BadEvent> {
    let tree = log.tree();
    let mut visited = Vec::new();
    let mut cur = f.index.state_anc(node);
    let result = loop {
        let Some(e) = cur else { break Ok(None) };
        if let Some(hit) = f
            .cache
            .plugins
            .get(plugin)
            .and_then(|p| p.nearest.get(&e))
            .cloned()
        {
            break hit;
        }
        visited.push(e);
        match concerns(f, log, e, plugin, Scope::Branch) {
            Ok(Some(_)) => break Ok(Some(e)),
            Err(bad) => break Err(bad),
            Ok(None) => cur = tree.node(e).parent.and_then(|p| f.index.state_anc(p)),
        }
    };
    let pc = f.cache.plugins.entry(plugin.into()).or_default();
    for v in visited {
        pc.nearest.insert(v, result.clone());
    }
    result
}

/// The branch-scope value of `plugin` at node `node`.
fn branch_at(f: &mut Folds, log: &SessionLog, plugin: &str, node: u32) -> FoldResult {
    // Collect this plugin's branch events from `node` upward until a memo hit.
    let mut chain: Vec<(u32, Arc<Envelope>)> = Vec::new();
    let mut base = Folded::EMPTY;
    let mut cur = nearest_branch_event(f, log, plugin, node)?;
    while let Some(e) = cur {
        if let Some(hit) = f.cache.plugins.get(plugin).and_then(|p| p.at_event.get(&e)) {
            base = hit.clone()?;
            break;
        }
        let env = concerns(f, log, e, plugin, Scope::Branch)?.ok_or_else(|| BadEvent {
            node: e,
            detail: "internal: not a branch event".into(),
        })?;
        chain.push((e, env));
        cur = match log.tree().node(e).parent {
            Some(p) => nearest_branch_event(f, log, plugin, p)?,
            None => None,
        };
    }
    let pc = f.cache.plugins.entry(plugin.into()).or_default();
    let mut acc = base;
    for (e, env) in chain.into_iter().rev() {
        acc = Folded {
            value: step::apply(&env.op, acc.value.as_deref()).map(Arc::new),
            last: Some(e),
        };
        pc.at_event.insert(e, Ok(acc.clone()));
    }
    Ok(acc)
}

/// The session-scope value of `plugin` (the whole file, in append order).
fn session_value(f: &mut Folds, log: &SessionLog, plugin: &str) -> FoldResult {
    let (mut next, mut acc) = {
        let pc = f.cache.plugins.entry(plugin.into()).or_default();
        (
            pc.session_next,
            pc.session.clone().unwrap_or(Ok(Folded::EMPTY)),
        )
    };
    let total = f.index.events().len();
    for ev in next..total {
        if acc.is_err() {
            break;
        }
        let node = f.index.events()[ev].node;
        match concerns(f, log, node, plugin, Scope::Session) {
            Ok(Some(env)) => {
                let prev = acc.as_ref().ok().and_then(|f| f.value.clone());
                acc = Ok(Folded {
                    value: step::apply(&env.op, prev.as_deref()).map(Arc::new),
                    last: Some(node),
                });
            }
            Ok(None) => {}
            Err(bad) => acc = Err(bad),
        }
    }
    next = total;
    let pc = f.cache.plugins.entry(plugin.into()).or_default();
    pc.session_next = next;
    pc.session = Some(acc.clone());
    acc
}

fn to_error(log: &SessionLog, plugin: &str, bad: BadEvent) -> Error {
    let e = log.entry_at(bad.node);
    Error::BadEvent {
        path: log.path().to_path_buf(),
        plugin: plugin.into(),
        entry_id: e.id().into(),
        at: e.location(),
        detail: bad.detail,
    }
}

/// The folded value at `node` (`None`: before any entry, e.g. after `reset_leaf`).
///
/// `folds` must follow `log` (see [`Folds::follow`]).
pub(crate) fn value_at(
    folds: &mut Folds,
    log: &SessionLog,
    plugin: &str,
    scope: Scope,
    node: Option<u32>,
) -> Result<Folded> {
    folds.follow(log);
    let r = match scope {
        Scope::Session => session_value(folds, log, plugin),
        Scope::Branch => match node {
            Some(n) => branch_at(folds, log, plugin, n),
            None => Ok(Folded::EMPTY),
        },
    };
    r.map_err(|b| to_error(log, plugin, b))
}

/// One event in a value's provenance.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HistoryEntry {
    /// The event's entry id.
    pub entry_id: String,
    /// Its line in the file.
    pub line: u64,
    /// `set`, `patch` or `drop`.
    pub op: &'static str,
    /// The value written (`set`) or the patch (`patch`).
    pub argument: Option<Value>,
    /// The value after this event.
    pub value: Option<Value>,
}

/// The events that made the value at `node`, oldest first.
pub(crate) fn history(
    folds: &mut Folds,
    log: &SessionLog,
    plugin: &str,
    scope: Scope,
    node: Option<u32>,
) -> Result<Vec<HistoryEntry>> {
    let nodes: Vec<u32> = match scope {
        Scope::Branch => match node {
            Some(n) => log.tree().path_indexes(n),
            None => Vec::new(),
        },
        Scope::Session => (0..log.len() as u32).collect(),
    };
    folds.follow(log);
    let mut out = Vec::new();
    let mut acc: Option<Value> = None;
    for n in nodes {
        match concerns(folds, log, n, plugin, scope) {
            Ok(Some(env)) => {
                acc = step::apply(&env.op, acc.as_ref());
                let e = log.entry_at(n);
                out.push(HistoryEntry {
                    entry_id: e.id().into(),
                    line: e.location().line,
                    op: env.op.name(),
                    argument: match &env.op {
                        Op::Set(v) | Op::Patch(v) => Some(crate::json::clone_value(v)),
                        Op::Drop => None,
                    },
                    value: acc.as_ref().map(crate::json::clone_value),
                });
            }
            Ok(None) => {}
            Err(bad) => return Err(to_error(log, plugin, bad)),
        }
    }
    Ok(out)
}
