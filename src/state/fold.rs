//! The fold: the value of a plugin's state at a position.
//!
//! Branch scope: the fold of the plugin's branch events on the path root → position.
//! The [`StateIndex`] finds this plugin's events above a node segment by segment, so a
//! read looks at neither the messages in between nor any other plugin's events; every
//! folded event value is memoized, so a read after one appended entry costs a constant
//! number of lookups, not a walk to the root. Session scope: the fold of the plugin's
//! session events in file order (its own events only), kept incrementally. Each event is applied by [`super::step::apply`], the step the
//! projection's catch-up takes too.
//!
//! The memo ([`Folds`]) belongs to whoever keeps a log open: the store keeps one per log
//! it has read; tools that only look build one for the call.

use super::decide::Decided;
use super::envelope::{DecodeError, Envelope, Op, Scope};
use super::index::{StateIndex, data_of};
use super::step;
use crate::error::{Error, Result, StateError};
use crate::sync::FastMap as HashMap;
use crate::tree::SessionLog;
use serde_json::Value;
use std::sync::Arc;

/// A folded value: absent, or present (possibly `null`), plus the entry that made it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Folded {
    pub value: Option<Arc<Value>>,
    /// Node index of the last event folded in (None: no event yet).
    pub last: Option<u32>,
    /// The state version of the last event folded in (1 when there is none): the
    /// version the value was written under.
    pub version: u32,
}

impl Folded {
    const EMPTY: Folded = Folded {
        value: None,
        last: None,
        version: 1,
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
    /// For an event of this plugin: this plugin's nearest branch event at or above it
    /// (the event itself, or, for a session event, the branch event above it).
    nearest: HashMap<u32, std::result::Result<Option<u32>, BadEvent>>,
    /// Session scope: this plugin's events folded so far (a count of
    /// [`StateIndex::plugin_events`]) and the value.
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
    /// The memo of `plugin` (made on first use; its name is copied only then).
    fn plugin(&mut self, plugin: &str) -> &mut PluginCache {
        if !self.plugins.contains_key(plugin) {
            self.plugins.insert(plugin.into(), PluginCache::default());
        }
        self.plugins.get_mut(plugin).expect("inserted above")
    }

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

/// The branch event this process appended last, with the value after it: what the next
/// read or write of that plugin at the new leaf asks for, answered without a lookup. It
/// enters the memo's maps only when another takes its place or a fold needs them
/// ([`Folds::settle`]).
#[derive(Debug)]
struct LastAppended {
    plugin: Box<str>,
    node: u32,
    after: Folded,
    /// Already in the maps.
    settled: bool,
}

/// The fold layer's view of one log: its state index and the memo of folds.
#[derive(Debug, Default)]
pub(crate) struct Folds {
    index: StateIndex,
    cache: FoldCache,
    last: Option<LastAppended>,
    /// Events and segments looked at to find a plugin's events (unit tests count work).
    steps: u64,
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

    /// Puts the last appended event ([`LastAppended`]) into the maps, where every fold
    /// looks for the values at events.
    fn settle(&mut self) {
        if let Some(last) = self.last.as_mut().filter(|l| !l.settled) {
            last.settled = true;
            let pc = self.cache.plugin(&last.plugin);
            pc.nearest.insert(last.node, Ok(Some(last.node)));
            pc.at_event.insert(last.node, Ok(last.after.clone()));
        }
    }
}

/// Does this event belong to `(plugin, scope)`? `Err` if it is this plugin's and cannot
/// be decoded in a way that could concern this scope.
fn concerns(
    index: &StateIndex,
    cache: &mut FoldCache,
    log: &SessionLog,
    node: u32,
    plugin: &str,
    scope: Scope,
) -> std::result::Result<Option<Arc<Envelope>>, BadEvent> {
    match index.event_of(node) {
        Some(ev) if &*ev.plugin == plugin => {}
        _ => return Ok(None),
    }
    match cache.decode(log, node) {
        Ok(env) if env.scope == scope => Ok(Some(env)),
        Ok(_) => Ok(None),
        Err(e) if e.scope.is_none() || e.scope == Some(scope) => Err(BadEvent {
            node,
            detail: e.detail,
        }),
        Err(_) => Ok(None),
    }
}

/// This plugin's nearest branch event at or above `node`: its events above `node`,
/// nearest first, until one is of branch scope (or cannot be decoded). Only this
/// plugin's events are looked at; the answer is memoized at each of them.
fn nearest_branch_event(
    f: &mut Folds,
    log: &SessionLog,
    plugin: &str,
    node: u32,
) -> std::result::Result<Option<u32>, BadEvent> {
    let mut visited = Vec::new();
    let mut above = f.index.events_above(plugin, node);
    let result = loop {
        let Some(e) = above.next() else {
            break Ok(None);
        };
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
        match concerns(&f.index, &mut f.cache, log, e, plugin, Scope::Branch) {
            Ok(Some(_)) => break Ok(Some(e)),
            Err(bad) => break Err(bad),
            Ok(None) => {}
        }
    };
    f.steps += above.steps;
    let pc = f.cache.plugin(plugin);
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
        let env =
            concerns(&f.index, &mut f.cache, log, e, plugin, Scope::Branch)?.ok_or_else(|| {
                BadEvent {
                    node: e,
                    detail: "internal: not a branch event".into(),
                }
            })?;
        chain.push((e, env));
        cur = match log.tree().node(e).parent {
            Some(p) => nearest_branch_event(f, log, plugin, p)?,
            None => None,
        };
    }
    let pc = f.cache.plugin(plugin);
    let mut acc = base;
    for (e, env) in chain.into_iter().rev() {
        acc = Folded {
            value: step::apply(&env.op, acc.value.as_deref()).map(Arc::new),
            last: Some(e),
            version: env.state_version,
        };
        pc.at_event.insert(e, Ok(acc.clone()));
    }
    Ok(acc)
}

/// The session-scope value of `plugin` (the whole file, in append order): its own events
/// since the last call are folded on.
fn session_value(f: &mut Folds, log: &SessionLog, plugin: &str) -> FoldResult {
    let (next, mut acc) = {
        let pc = f.cache.plugin(plugin);
        (
            pc.session_next,
            pc.session.clone().unwrap_or(Ok(Folded::EMPTY)),
        )
    };
    let mine = f.index.plugin_events(plugin);
    for &ev in &mine[next.min(mine.len())..] {
        if acc.is_err() {
            break;
        }
        let node = f.index.events()[ev as usize].node;
        f.steps += 1;
        match concerns(&f.index, &mut f.cache, log, node, plugin, Scope::Session) {
            Ok(Some(env)) => {
                let prev = acc.as_ref().ok().and_then(|f| f.value.clone());
                acc = Ok(Folded {
                    value: step::apply(&env.op, prev.as_deref()).map(Arc::new),
                    last: Some(node),
                    version: env.state_version,
                });
            }
            Ok(None) => {}
            Err(bad) => acc = Err(bad),
        }
    }
    let total = mine.len();
    let pc = f.cache.plugin(plugin);
    pc.session_next = total;
    pc.session = Some(acc.clone());
    acc
}

/// Remembers the event of `plugin` that this process just appended at `node` (the log's
/// last entry), as [`super::decide::decide_versioned`] decided it from the value at the
/// entry's parent (or the session fold): the value after it, so that the next read or
/// write at the new leaf neither parses the line back nor applies the event again. What
/// it stores is what [`value_at`] would compute from the line.
///
/// `folds` must follow `log` (see [`Folds::follow`]).
pub(crate) fn remember_appended(folds: &mut Folds, plugin: &str, node: u32, decided: Decided) {
    let Decided { event, patched } = decided;
    let scope = event.scope;
    let version = event.state_version;
    let value = match event.op {
        Op::Set(v) => Some(v),
        Op::Drop => None,
        Op::Patch(_) => patched,
    };
    let after = Folded {
        value: value.map(Arc::new),
        last: Some(node),
        version,
    };
    match scope {
        Scope::Branch => {
            // The one before goes into the maps; this one waits for the next read.
            folds.settle();
            let plugin = match folds.last.take() {
                Some(last) if *last.plugin == *plugin => last.plugin,
                _ => plugin.into(),
            };
            folds.last = Some(LastAppended {
                plugin,
                node,
                after,
                settled: false,
            });
        }
        Scope::Session => {
            // Only when the memo had folded every earlier event of this plugin (the
            // value decided from) and this is its last.
            let mine = folds.index.plugin_events(plugin);
            let last = mine
                .last()
                .map(|&ev| folds.index.events()[ev as usize].node);
            let count = mine.len();
            let pc = folds.cache.plugin(plugin);
            if last == Some(node)
                && pc.session_next + 1 == count
                && matches!(pc.session, Some(Ok(_)))
            {
                pc.session_next = count;
                pc.session = Some(Ok(after));
            }
        }
    }
}

fn to_error(log: &SessionLog, plugin: &str, bad: BadEvent) -> Error {
    let e = log.entry_at(bad.node);
    Error::State(StateError::BadEvent {
        path: log.path().to_path_buf(),
        plugin: plugin.into(),
        entry_id: e.id().into(),
        at: e.location(),
        detail: bad.detail,
    })
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
            Some(n) => match &folds.last {
                // A write's next read or write, at the entry it appended.
                Some(last) if last.node == n && *last.plugin == *plugin => Ok(last.after.clone()),
                _ => {
                    folds.settle();
                    branch_at(folds, log, plugin, n)
                }
            },
            None => Ok(Folded::EMPTY),
        },
    };
    r.map_err(|b| to_error(log, plugin, b))
}

/// One event in a value's provenance.
///
/// Serialized as `{"entryId", "line", "op", "stateVersion", "argument", "value"}`:
/// `argument` left out for a `drop`, `value` when the value after it is absent (a
/// `null` is `"value": null`). The command line's `history --json` events and the Pi
/// package's history rows print this.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The event's entry id.
    pub entry_id: String,
    /// Its line in the file.
    pub line: u64,
    /// `set`, `patch` or `drop`.
    pub op: &'static str,
    /// The state version the event was written under (1: an event without one).
    pub state_version: u32,
    /// The value written (`set`) or the patch (`patch`).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json::serialize_some_value"
    )]
    pub argument: Option<Value>,
    /// The value after this event.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json::serialize_some_value"
    )]
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
    folds.follow(log);
    folds.settle();
    // This plugin's events only, oldest first: on the path to `node`, or in the file.
    let nodes: Vec<u32> = match scope {
        Scope::Branch => match node {
            Some(n) => {
                let mut above: Vec<u32> = folds.index.events_above(plugin, n).collect();
                above.reverse();
                above
            }
            None => Vec::new(),
        },
        Scope::Session => folds
            .index
            .plugin_events(plugin)
            .iter()
            .map(|&ev| folds.index.events()[ev as usize].node)
            .collect(),
    };
    let mut out = Vec::new();
    let mut acc: Option<Value> = None;
    for n in nodes {
        match concerns(&folds.index, &mut folds.cache, log, n, plugin, scope) {
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
                    state_version: env.state_version,
                });
            }
            Ok(None) => {}
            Err(bad) => return Err(to_error(log, plugin, bad)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fmt::Write as _;

    /// A session file of raw lines: `(plugin, scope)` events with the values `0, 1, …`,
    /// each a child of `parent(i)` (`None`: the previous line).
    fn session(
        dir: &std::path::Path,
        events: &[(&str, &str)],
        parent: impl Fn(usize) -> Option<usize>,
    ) -> SessionLog {
        let mut text = String::from(
            "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n",
        );
        for (i, (plugin, scope)) in events.iter().enumerate() {
            let parent = match i.checked_sub(1) {
                None => "null".to_string(),
                Some(previous) => format!("\"e{}\"", parent(i).unwrap_or(previous)),
            };
            let _ = writeln!(
                text,
                "{{\"type\":\"custom\",\"customType\":\"session-state/{plugin}\",\"data\":{{\"v\":1,\"scope\":\"{scope}\",\"op\":\"set\",\"value\":{i}}},\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\"}}"
            );
        }
        let path = dir.join("s.jsonl");
        std::fs::write(&path, text).expect("write the session");
        SessionLog::open(&path).expect("open the session")
    }

    /// A session file of raw events `(plugin, data)` on one line of descent.
    fn raw_session(dir: &std::path::Path, events: &[(&str, &str)]) -> SessionLog {
        let mut text = String::from(
            "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n",
        );
        for (i, (plugin, data)) in events.iter().enumerate() {
            let parent = match i {
                0 => "null".to_string(),
                _ => format!("\"e{}\"", i - 1),
            };
            let _ = writeln!(
                text,
                "{{\"type\":\"custom\",\"customType\":\"session-state/{plugin}\",\"data\":{data},\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\"}}"
            );
        }
        let path = dir.join("s.jsonl");
        std::fs::write(&path, text).expect("write the session");
        SessionLog::open(&path).expect("open the session")
    }

    /// The fold's version is the version of the last event folded in (1 when none), in
    /// both scopes: a drop leaves an absent value of its own version; `history` reports
    /// each event's; the memo remembers a write's.
    #[test]
    fn the_folds_version_is_the_last_events_in_both_scopes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = raw_session(
            dir.path(),
            &[
                ("a", r#"{"v":1,"scope":"branch","op":"set","value":1}"#),
                (
                    "a",
                    r#"{"v":2,"stateVersion":2,"scope":"branch","op":"set","value":{"n":2}}"#,
                ),
                (
                    "a",
                    r#"{"v":2,"stateVersion":3,"scope":"session","op":"set","value":3}"#,
                ),
                (
                    "a",
                    r#"{"v":2,"stateVersion":2,"scope":"branch","op":"patch","patch":{"x":1}}"#,
                ),
                (
                    "a",
                    r#"{"v":2,"stateVersion":3,"scope":"branch","op":"drop"}"#,
                ),
                ("a", r#"{"v":1,"scope":"session","op":"drop"}"#),
            ],
        );
        let at = |f: &mut Folds, scope, node| {
            let got = value_at(f, &log, "a", scope, node).expect("fold");
            (got.value.map(|v| (*v).clone()), got.version, got.last)
        };
        let branch = [
            (Some(json!(1)), 1, Some(0)),
            (Some(json!({"n": 2})), 2, Some(1)),
            (Some(json!({"n": 2})), 2, Some(1)),
            (Some(json!({"n": 2, "x": 1})), 2, Some(3)),
            (None, 3, Some(4)),
            (None, 3, Some(4)),
        ];
        let mut memo = Folds::of(&log);
        for (node, want) in branch.iter().enumerate() {
            let node = Some(node as u32);
            assert_eq!(
                &at(&mut memo, Scope::Branch, node),
                want,
                "memo at {node:?}"
            );
            assert_eq!(
                &at(&mut Folds::of(&log), Scope::Branch, node),
                want,
                "fresh at {node:?}"
            );
        }
        assert_eq!(at(&mut memo, Scope::Branch, None), (None, 1, None));
        assert_eq!(at(&mut memo, Scope::Session, Some(2)), (None, 1, Some(5)));
        let quiet = value_at(&mut memo, &log, "b", Scope::Branch, Some(5)).expect("fold");
        assert_eq!((quiet.value, quiet.version, quiet.last), (None, 1, None));
        let versions = |scope| -> Vec<(String, u32)> {
            history(&mut Folds::of(&log), &log, "a", scope, Some(5))
                .expect("history")
                .into_iter()
                .map(|h| (h.entry_id, h.state_version))
                .collect()
        };
        let named = |v: &[(usize, u32)]| -> Vec<(String, u32)> {
            v.iter().map(|&(i, sv)| (format!("e{i}"), sv)).collect()
        };
        assert_eq!(
            versions(Scope::Branch),
            named(&[(0, 1), (1, 2), (3, 2), (4, 3)])
        );
        assert_eq!(versions(Scope::Session), named(&[(2, 3), (5, 1)]));
        // A write this process appended is remembered with its version.
        remember_appended(
            &mut memo,
            "a",
            5,
            Decided {
                event: Envelope {
                    scope: Scope::Branch,
                    op: Op::Set(json!(9)),
                    state_version: 4,
                },
                patched: None,
            },
        );
        assert_eq!(
            at(&mut memo, Scope::Branch, Some(5)),
            (Some(json!(9)), 4, Some(5))
        );
    }

    fn read(f: &mut Folds, log: &SessionLog, plugin: &str, scope: Scope) -> Option<Value> {
        let leaf = log.tree().leaf_index();
        value_at(f, log, plugin, scope, leaf)
            .expect("fold")
            .value
            .map(|v| (*v).clone())
    }

    /// The work of one read of each `(plugin, scope)` at the leaf, on a fresh memo.
    fn steps_of_reads(log: &SessionLog, reads: &[(&str, Scope)]) -> Vec<u64> {
        reads
            .iter()
            .map(|(plugin, scope)| {
                let mut f = Folds::of(log);
                read(&mut f, log, plugin, *scope);
                f.steps
            })
            .collect()
    }

    /// The value a write leaves is answered at its entry only, for its plugin only, and
    /// stays in the memo once another write takes its place.
    #[test]
    fn the_last_appended_value_answers_its_entry_and_plugin_only_and_stays_memoized() {
        let dir = tempfile::tempdir().expect("tempdir");
        // a:0, b:1, a:2, a:3, a:4 on one line; the memo is told other values (99, 98) for
        // the last two, so an answer from the memo shows apart from one folded from the file.
        let events = [
            ("a", "branch"),
            ("b", "branch"),
            ("a", "branch"),
            ("a", "branch"),
            ("a", "branch"),
        ];
        let log = session(dir.path(), &events, |_| None);
        let mut f = Folds::of(&log);
        let set = |v: i32| Decided {
            event: Envelope::new(Scope::Branch, Op::Set(v.into())),
            patched: None,
        };
        let at = |f: &mut Folds, plugin: &str, node: u32| {
            value_at(f, &log, plugin, Scope::Branch, Some(node))
                .expect("fold")
                .value
                .map(|v| (*v).clone())
        };
        remember_appended(&mut f, "a", 3, set(99));
        assert_eq!(
            at(&mut f, "a", 3),
            Some(99.into()),
            "the entry's own plugin"
        );
        assert_eq!(at(&mut f, "b", 3), Some(1.into()), "another plugin there");
        assert_eq!(at(&mut f, "a", 2), Some(2.into()), "the entry above");
        remember_appended(&mut f, "a", 4, set(98));
        assert_eq!(at(&mut f, "a", 4), Some(98.into()));
        let before = f.steps;
        assert_eq!(
            at(&mut f, "a", 3),
            Some(99.into()),
            "kept after the next write"
        );
        assert!(f.steps - before <= 2, "found in the memo, not folded again");
    }

    #[test]
    fn a_quiet_plugins_read_does_not_grow_with_another_plugins_events() {
        let reads = [
            ("a", Scope::Branch),
            ("absent", Scope::Branch),
            ("a", Scope::Session),
            ("absent", Scope::Session),
        ];
        let mut steps = Vec::new();
        for k in [100, 2000] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut events = vec![("a", "branch"), ("a", "session")];
            events.extend(std::iter::repeat_n(("b", "branch"), k / 2));
            events.extend(std::iter::repeat_n(("b", "session"), k / 2));
            let log = session(dir.path(), &events, |_| None);
            let mut f = Folds::of(&log);
            assert_eq!(read(&mut f, &log, "a", Scope::Branch), Some(0.into()));
            assert_eq!(read(&mut f, &log, "a", Scope::Session), Some(1.into()));
            assert_eq!(read(&mut f, &log, "absent", Scope::Branch), None);
            assert_eq!(
                read(&mut f, &log, "b", Scope::Branch),
                Some((k / 2 + 1).into())
            );
            steps.push(steps_of_reads(&log, &reads));
        }
        assert_eq!(steps[0], steps[1], "100 and 2000 events of `b`");
        assert!(steps[1].iter().all(|&s| s <= 4), "{steps:?}");
    }

    #[test]
    fn reading_every_one_of_n_plugins_is_linear_in_n() {
        let mut total = Vec::new();
        for n in [200usize, 800] {
            let dir = tempfile::tempdir().expect("tempdir");
            let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
            let events: Vec<(&str, &str)> = names.iter().map(|p| (p.as_str(), "branch")).collect();
            let log = session(dir.path(), &events, |_| None);
            let mut f = Folds::of(&log);
            for (i, p) in names.iter().enumerate() {
                assert_eq!(read(&mut f, &log, p, Scope::Branch), Some(i.into()), "{p}");
            }
            total.push(f.steps);
        }
        assert!(total[1] <= 4 * 800 + 8, "{total:?}");
    }

    #[test]
    fn a_read_on_a_fork_finds_the_plugins_event_above_the_fork_point() {
        // `a` at the root, then `b` down a main line, and a side branch off every fifth
        // entry: a read of `a` at a side tip crosses two segments, not `b`'s events.
        let dir = tempfile::tempdir().expect("tempdir");
        let mut events = vec![("a", "branch")];
        events.extend(std::iter::repeat_n(("b", "branch"), 400));
        let is_tip = |i: usize| i > 0 && i.is_multiple_of(5);
        // A side tip hangs off the entry two before it; the main line skips the tips.
        let log = session(dir.path(), &events, move |i| {
            (is_tip(i) || is_tip(i - 1)).then(|| i - 2)
        });
        let side_tips: Vec<usize> = (5..400).filter(|&i| is_tip(i)).collect();
        let mut f = Folds::of(&log);
        for &tip in &side_tips {
            let before = f.steps;
            let v = value_at(&mut f, &log, "a", Scope::Branch, Some(tip as u32)).expect("fold");
            assert_eq!(v.value.as_deref(), Some(&Value::from(0)), "at e{tip}");
            assert!(
                f.steps - before <= 4,
                "{} steps at e{tip}",
                f.steps - before
            );
        }
    }
}
