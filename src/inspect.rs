//! Read-only views for inspection tools (the `session-state` CLI): state values and
//! decoded events straight from a [`SessionLog`], with no projection database.
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

use crate::error::Result;
use crate::state::envelope::{Envelope, STATE_PREFIX, Scope};
use crate::state::fold::{self, Folds};
use crate::state::index::data_of;
use crate::tree::SessionLog;
use serde_json::Value;

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
        .map(|v| (*v).clone()))
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
type Slot = std::result::Result<Option<std::sync::Arc<Value>>, (u32, std::sync::Arc<str>)>;

/// What the walk carries down the tree.
#[derive(Clone)]
struct Carry<'a> {
    values: Vec<Slot>,
    custom: std::collections::BTreeMap<&'a str, (u64, u32)>,
    depth: usize,
    key: u32,
}

/// The state at every branch tip in one walk: a depth-first traversal from the roots that
/// carries each plugin's folded branch value (and the count and last entry of every other
/// `customType`) down the tree, copying the carried state only at fork points. Each entry
/// is visited and each event decoded once, so the cost is linear in the file (plus the
/// carried state copied at each fork), whatever the shape of the tree; asking
/// [`value_at`] at every tip instead walks every tip's path.
///
/// `each` is called once per tip, in depth-first order (children in file order); the
/// values agree with [`value_at`] in branch scope, the depth with
/// [`SessionLog::path_to`] and the key with [`SessionLog::branch_key_of`].
pub fn fold_tips<'a>(log: &'a SessionLog, mut each: impl FnMut(TipFold<'a>)) {
    use crate::log::entry::EntryType;
    use std::sync::Arc;
    let tree = log.tree();
    let index = crate::state::index::StateIndex::of(log);
    let plugins: std::collections::BTreeSet<&'a str> = index
        .events()
        .iter()
        .filter_map(|e| log.entry_at(e.node).state_plugin())
        .collect();
    let plugins: Vec<&str> = plugins.into_iter().collect();
    let slot_of: std::collections::HashMap<&str, usize> =
        plugins.iter().enumerate().map(|(i, p)| (*p, i)).collect();
    let fresh = |root: u32| Carry {
        values: vec![Ok(None); plugins.len()],
        custom: std::collections::BTreeMap::new(),
        depth: 0,
        key: root,
    };
    let mut stack: Vec<(u32, Carry<'a>)> = tree
        .roots()
        .into_iter()
        .rev()
        .map(|r| (r, fresh(r)))
        .collect();
    while let Some((node, mut c)) = stack.pop() {
        c.depth += 1;
        let data = tree.node(node);
        if let Some(ev) = index.event_of(node) {
            if let Some(&p) = slot_of.get(&*ev.plugin) {
                match Envelope::decode(data_of(log, node)) {
                    Ok(env) if env.scope == Scope::Branch => {
                        if let Ok(v) = &c.values[p] {
                            c.values[p] = Ok(env.op.apply(v.as_deref()).map(Arc::new));
                        }
                    }
                    Ok(_) => {}
                    Err(e) if e.scope.is_none() || e.scope == Some(Scope::Branch) => {
                        c.values[p] = Err((node, e.detail.into()));
                    }
                    Err(_) => {}
                }
            }
        } else if data.ty == EntryType::Custom
            && let Some(ct) = log
                .entry_at(node)
                .custom_type()
                .filter(|ct| !ct.starts_with(STATE_PREFIX))
        {
            let slot = c.custom.entry(ct).or_insert((0, node));
            slot.0 += 1;
            slot.1 = node;
        }
        let children = tree.children_of(node);
        let Some((&last, others)) = children.split_last() else {
            let branch = plugins
                .iter()
                .zip(&c.values)
                .map(|(p, v)| {
                    let v = match v {
                        Ok(v) => Ok(v.as_deref().cloned()),
                        Err((bad, detail)) => {
                            let e = log.entry_at(*bad);
                            Err(crate::Error::BadEvent {
                                path: log.path().to_path_buf(),
                                plugin: (*p).to_owned(),
                                entry_id: e.id().to_owned(),
                                at: e.location(),
                                detail: detail.to_string(),
                            })
                        }
                    };
                    (*p, v)
                })
                .collect();
            each(TipFold {
                tip: tree.id(node),
                index: node as usize,
                depth: c.depth,
                branch_key: tree.id(c.key),
                branch,
                custom: c
                    .custom
                    .iter()
                    .map(|(ct, (n, at))| (*ct, *n, tree.id(*at)))
                    .collect(),
            });
            continue;
        };
        // A fork copies the carried state for all children but the last, which takes it;
        // the first child is popped first. A single child continues the branch key.
        let copies: Vec<(u32, Carry<'a>)> = others
            .iter()
            .map(|&child| {
                let mut copy = c.clone();
                copy.key = child;
                (child, copy)
            })
            .collect();
        if !others.is_empty() {
            c.key = last;
        }
        stack.push((last, c));
        stack.extend(copies.into_iter().rev());
    }
}

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
