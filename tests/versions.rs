//! Versioned state (docs/versions.md): the fold's version, forks and siblings under
//! different versions, `history`, the writers' rule that a patch never mixes versions,
//! migration in memory only, newer state refused on every call and path, and the serde
//! type as the schema.
//!
//! The property tests compare the crate with a naive model written here from the rules:
//! a list of entries with parents, folded from the root (branch scope) or over the whole
//! file (session scope) on every query, tracking the value and the version of the last
//! event folded in. The fixture tests use `fixtures/versioned/todo-v1-v2-v3.jsonl`, a
//! session whose `todo` state was written at version 1, then 2, then 3.

use crate::common::reference::merge_patch;
use session_state::On;
use session_state::StateError;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use session_state::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const PLUGINS: [&str; 2] = ["alpha", "beta"];
const SCOPES: [Scope; 2] = [Scope::Branch, Scope::Session];

// ---------------------------------------------------------------------------------------
// The naive model.

#[derive(Debug, Clone, PartialEq)]
enum MOp {
    Set(Value),
    Patch(Value),
    Drop,
}

impl MOp {
    fn name(&self) -> &'static str {
        match self {
            MOp::Set(_) => "set",
            MOp::Patch(_) => "patch",
            MOp::Drop => "drop",
        }
    }

    fn apply(&self, cur: Option<&Value>) -> Option<Value> {
        match self {
            MOp::Set(v) => Some(v.clone()),
            MOp::Drop => None,
            MOp::Patch(p) => Some(merge_patch(cur, p)),
        }
    }
}

/// A state event: whose, which scope, what, and the state version it was written under.
#[derive(Debug, Clone, PartialEq)]
struct Ev {
    plugin: usize,
    scope: Scope,
    op: MOp,
    version: u32,
}

#[derive(Debug, Clone, PartialEq)]
struct Node {
    parent: Option<usize>,
    event: Option<Ev>,
}

/// A fold's result: the value, the version of the last event folded in (1 when none),
/// and that event's node.
#[derive(Debug, Clone, PartialEq)]
struct Folded {
    value: Option<Value>,
    version: u32,
    last: Option<usize>,
}

/// One step of a fold, as `history` reports it: node, op, version, value after.
type Step = (usize, &'static str, u32, Option<Value>);

#[derive(Debug, Clone, Default, PartialEq)]
struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    fn path(&self, i: usize) -> Vec<usize> {
        let mut p = vec![i];
        let mut c = i;
        while let Some(x) = self.nodes[c].parent {
            p.push(x);
            c = x;
        }
        p.reverse();
        p
    }

    /// The nodes whose events the fold at `at` takes, in order: branch scope, the path
    /// root → `at`; session scope, the whole file (`None`: before any entry).
    fn scope_nodes(&self, scope: Scope, at: Option<usize>) -> Vec<usize> {
        match scope {
            Scope::Branch => at.map(|i| self.path(i)).unwrap_or_default(),
            Scope::Session => (0..self.nodes.len()).collect(),
        }
    }

    fn steps_over(&self, plugin: usize, scope: Scope, nodes: &[usize]) -> Vec<Step> {
        let mut v: Option<Value> = None;
        let mut out = Vec::new();
        for &n in nodes {
            if let Some(e) = &self.nodes[n].event
                && e.plugin == plugin
                && e.scope == scope
            {
                v = e.op.apply(v.as_ref());
                out.push((n, e.op.name(), e.version, v.clone()));
            }
        }
        out
    }

    fn fold_over(&self, plugin: usize, scope: Scope, nodes: &[usize]) -> Folded {
        match self.steps_over(plugin, scope, nodes).pop() {
            Some((n, _, version, value)) => Folded {
                value,
                version,
                last: Some(n),
            },
            None => Folded {
                value: None,
                version: 1,
                last: None,
            },
        }
    }

    fn fold(&self, plugin: usize, scope: Scope, at: Option<usize>) -> Folded {
        self.fold_over(plugin, scope, &self.scope_nodes(scope, at))
    }

    fn history(&self, plugin: usize, scope: Scope, at: Option<usize>) -> Vec<Step> {
        self.steps_over(plugin, scope, &self.scope_nodes(scope, at))
    }

    /// What the event `ev` of entry `i` (a child of `parent`) lands on: the fold at the
    /// parent (branch scope) or of the entries before it (session scope).
    fn landing(&self, i: usize, parent: Option<usize>, ev: &Ev) -> Folded {
        let nodes = match ev.scope {
            Scope::Branch => parent.map(|p| self.path(p)).unwrap_or_default(),
            Scope::Session => (0..i).collect(),
        };
        self.fold_over(ev.plugin, ev.scope, &nodes)
    }

    fn children(&self, i: usize) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&c| self.nodes[c].parent == Some(i))
            .collect()
    }
}

/// What a read with a key at `known` gives for `f`, the keys' `migrate` tagging the value
/// with the version it came from: refused when newer (stored version, entry node), the
/// value when the same, `{"from": from, "v": value}` when older (absent stays absent).
fn expected_read(known: u32, f: &Folded) -> Result<Option<Value>, (u32, Option<usize>)> {
    if f.version > known {
        Err((f.version, f.last))
    } else if f.version == known {
        Ok(f.value.clone())
    } else {
        Ok(f.value.clone().map(|v| tagged(f.version, v)))
    }
}

fn tagged(from: u32, v: Value) -> Value {
    json!({"from": from, "v": v})
}

/// A key of `plugin` in `scope` at `version`; above 1 its `migrate` tags the value with
/// the version it came from ([`tagged`]).
fn tagging_key(plugin: &str, scope: Scope, version: u32) -> StateKey<Value> {
    let key = StateKey::<Value>::new(plugin, scope).unwrap();
    if version == 1 {
        return key;
    }
    key.versioned(version, |v, from| Ok(tagged(from, v)))
        .unwrap()
}

/// A read's outcome in [`expected_read`]'s terms: a refusal must be
/// `NewerStateVersion` naming `plugin`, the key's version and an entry.
fn outcome(
    r: Result<Option<Value>>,
    plugin: &str,
    known: u32,
    node_of: &HashMap<String, usize>,
) -> std::result::Result<Option<Value>, (u32, Option<usize>)> {
    match r {
        Ok(v) => Ok(v),
        Err(Error::State(StateError::NewerStateVersion {
            plugin: p,
            stored,
            known: k,
            entry_id,
        })) => {
            assert_eq!((p.as_str(), k), (plugin, known));
            Err((stored, entry_id.map(|id| node_of[&id])))
        }
        Err(e) => panic!("{plugin} at version {known}: unexpected error {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// Session files written by hand from the envelope's rules (not by the crate).

const HEADER: &str = r#"{"type":"session","version":3,"id":"019df2a8-7c00-7a3e-9b41-5d2c8e6f1a99","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}"#;

/// An event's `data` as the envelope's rules say: `{"v":1,…}` at version 1,
/// `{"v":2,"stateVersion":N,…}` above.
fn data_of(ev: &Ev) -> Value {
    let mut d = serde_json::Map::new();
    if ev.version == 1 {
        d.insert("v".into(), json!(1));
    } else {
        d.insert("v".into(), json!(2));
        d.insert("stateVersion".into(), json!(ev.version));
    }
    d.insert("scope".into(), json!(ev.scope.as_str()));
    d.insert("op".into(), json!(ev.op.name()));
    match &ev.op {
        MOp::Set(v) => {
            d.insert("value".into(), v.clone());
        }
        MOp::Patch(p) => {
            d.insert("patch".into(), p.clone());
        }
        MOp::Drop => {}
    }
    Value::Object(d)
}

fn id_of(i: usize) -> String {
    format!("e{i}")
}

fn session_text(tree: &Tree) -> String {
    let mut text = format!("{HEADER}\n");
    for (i, n) in tree.nodes.iter().enumerate() {
        let mut line = match &n.event {
            Some(ev) => json!({
                "type": "custom",
                "customType": format!("session-state/{}", PLUGINS[ev.plugin]),
                "data": data_of(ev),
            }),
            None => json!({
                "type": "message",
                "message": {"role": "user", "content": "m", "timestamp": 0},
            }),
        };
        line["id"] = json!(id_of(i));
        line["parentId"] = n.parent.map_or(Value::Null, |p| json!(id_of(p)));
        line["timestamp"] = json!("2026-01-01T00:00:00.000Z");
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text
}

/// A session file read back without the crate: its entries' parents and state events,
/// and the ids in file order. Checks each event's envelope shape on the way: `"v":2`
/// exactly when it carries a `stateVersion`, which is then above 1.
fn parse_session(text: &str) -> (Tree, Vec<String>) {
    let mut ids: Vec<String> = Vec::new();
    let mut tree = Tree::default();
    for line in text.lines().skip(1) {
        let e: Value = serde_json::from_str(line).unwrap();
        let parent = e["parentId"]
            .as_str()
            .map(|p| ids.iter().position(|i| i == p).expect("a known parent"));
        let event = e["customType"]
            .as_str()
            .and_then(|t| t.strip_prefix("session-state/"))
            .map(|plugin| {
                let d = &e["data"];
                let version = match d.get("stateVersion") {
                    Some(sv) => {
                        assert_eq!(d["v"], 2, "{line}");
                        let sv = u32::try_from(sv.as_u64().unwrap()).unwrap();
                        assert!(sv > 1, "{line}");
                        sv
                    }
                    None => {
                        assert_eq!(d["v"], 1, "{line}");
                        1
                    }
                };
                let op = match d["op"].as_str().unwrap() {
                    "set" => MOp::Set(d["value"].clone()),
                    "patch" => MOp::Patch(d["patch"].clone()),
                    "drop" => MOp::Drop,
                    other => panic!("op {other}"),
                };
                Ev {
                    plugin: PLUGINS.iter().position(|p| *p == plugin).unwrap(),
                    scope: d["scope"].as_str().unwrap().parse().unwrap(),
                    op,
                    version,
                }
            });
        ids.push(e["id"].as_str().unwrap().to_owned());
        tree.nodes.push(Node { parent, event });
    }
    (tree, ids)
}

/// The writers' rule on a whole file: every patch lands on an absent value or on one of
/// its own version.
fn assert_patches_never_mix_versions(tree: &Tree, ids: &[String]) {
    for (i, n) in tree.nodes.iter().enumerate() {
        if let Some(
            ev @ Ev {
                op: MOp::Patch(_), ..
            },
        ) = &n.event
        {
            let under = tree.landing(i, n.parent, ev);
            assert!(
                under.value.is_none() || under.version == ev.version,
                "the patch {} at stateVersion {} lands on a value of version {}",
                ids[i],
                ev.version,
                under.version
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Generators.

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (0i64..4).prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(2, 10, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map("[a-c]", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn patch_value() -> impl Strategy<Value = Value> {
    prop::collection::btree_map("[a-c]", json_value(), 0..3)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn op() -> impl Strategy<Value = MOp> {
    prop_oneof![
        3 => json_value().prop_map(MOp::Set),
        3 => patch_value().prop_map(MOp::Patch),
        1 => Just(MOp::Drop),
    ]
}

fn scope() -> impl Strategy<Value = Scope> {
    prop_oneof![Just(Scope::Branch), Just(Scope::Session)]
}

/// The highest state version the generated files use.
const TOP: u32 = 3;

#[derive(Debug, Clone)]
enum ParentPick {
    Previous,
    Any(Index),
    Root,
}

/// A random tree (chains, forks off any earlier entry, a few extra roots) of messages and
/// events of two plugins in both scopes at versions 1 to [`TOP`], obeying the writers'
/// rule: a set or drop at any version; a patch at the version of the value it lands on,
/// or at any version on an absent value.
fn tree_strategy() -> impl Strategy<Value = Tree> {
    let pick = prop_oneof![
        6 => Just(ParentPick::Previous),
        4 => any::<Index>().prop_map(ParentPick::Any),
        1 => Just(ParentPick::Root),
    ];
    let event =
        (0..PLUGINS.len(), scope(), op(), 1..=TOP).prop_map(|(plugin, scope, op, version)| Ev {
            plugin,
            scope,
            op,
            version,
        });
    prop::collection::vec((pick, prop::option::weighted(0.8, event)), 1..24).prop_map(|raw| {
        let mut tree = Tree::default();
        for (i, (pick, event)) in raw.into_iter().enumerate() {
            let parent = match (i, pick) {
                (0, _) | (_, ParentPick::Root) => None,
                (_, ParentPick::Previous) => Some(i - 1),
                (_, ParentPick::Any(ix)) => Some(ix.index(i)),
            };
            let event = event.map(|mut ev| {
                if matches!(ev.op, MOp::Patch(_)) {
                    let under = tree.landing(i, parent, &ev);
                    if under.value.is_some() {
                        ev.version = under.version;
                    }
                }
                ev
            });
            tree.nodes.push(Node { parent, event });
        }
        tree
    })
}

/// A runner of `cases` cases whose failing cases are saved to `regressions`, a file in
/// `proptest-regressions/` (committed: replayed first on every run).
fn runner(cases: u32, regressions: &'static str) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..Config::default()
    })
}

// ---------------------------------------------------------------------------------------
// 1. The fold with versions, against the model.

/// Every read of every plugin and scope at every entry, on the open log (in memory) and
/// through the projection, with keys at every version from 1 to `TOP + 1`.
fn check_fold(tree: &Tree) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.jsonl");
    std::fs::write(&file, session_text(tree)).unwrap();
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let mut log = SessionLog::open(&file).unwrap();
    let ids: Vec<String> = (0..tree.nodes.len()).map(id_of).collect();
    let node_of: HashMap<String, usize> = ids.iter().cloned().zip(0..).collect();
    for (p, plugin) in PLUGINS.iter().enumerate() {
        for scope in SCOPES {
            let keys: Vec<(u32, SessionState<Value>)> = (1..=TOP + 1)
                .map(|k| (k, store.state_of(&tagging_key(plugin, scope, k))))
                .collect();
            for (i, id) in ids.iter().enumerate() {
                let want = tree.fold(p, scope, Some(i));
                let at = format!("{plugin} {scope} at {id}");
                // The projection: the stored value, its version and its event.
                let stored = store
                    .read_versioned(&file, plugin, scope, Some(id))
                    .unwrap();
                assert_eq!(
                    (
                        &stored.value,
                        stored.state_version,
                        stored.entry.as_deref().map(|e| node_of[e])
                    ),
                    (&want.value, want.version, want.last),
                    "projection: {at}"
                );
                // In memory, at the entry and as the leaf; through the projection.
                log.navigate(id).unwrap();
                for (k, st) in &keys {
                    let expect = expected_read(*k, &want);
                    let got = outcome(st.read_at(&log, id), plugin, *k, &node_of);
                    assert_eq!(got, expect, "read_at, key at {k}: {at}");
                    let got = outcome(st.read_value(&log), plugin, *k, &node_of);
                    assert_eq!(got, expect, "read_value, key at {k}: {at}");
                    let got = outcome(
                        st.read_value(On::file(&file, Some(id))),
                        plugin,
                        *k,
                        &node_of,
                    );
                    assert_eq!(got, expect, "read_file_value, key at {k}: {at}");
                }
                // `history` reports each event's version (and the fold's is the last's).
                let history: Vec<Step> = keys[0]
                    .1
                    .history(&log)
                    .unwrap()
                    .into_iter()
                    .map(|h| (node_of[&h.entry_id], h.op, h.state_version, h.value))
                    .collect();
                assert_eq!(history, tree.history(p, scope, Some(i)), "history: {at}");
                // A fork inherits the value and its version at the fork point: a child
                // that is not this plugin's branch event reads what its parent reads.
                if scope == Scope::Branch
                    && let Some(parent) = tree.nodes[i].parent
                    && tree.children(parent).len() > 1
                    && !matches!(&tree.nodes[i].event, Some(e) if e.plugin == p && e.scope == Scope::Branch)
                {
                    let at_fork = store
                        .read_versioned(&file, plugin, scope, Some(&ids[parent]))
                        .unwrap();
                    assert_eq!(
                        (&stored.value, stored.state_version, &stored.entry),
                        (&at_fork.value, at_fork.state_version, &at_fork.entry),
                        "fork {at} from {}",
                        ids[parent]
                    );
                }
            }
        }
    }
}

#[test]
fn the_fold_carries_the_version_of_its_last_event_at_every_entry() {
    runner(
        128,
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/versions-fold.txt"
        ),
    )
    .run(&tree_strategy(), |tree| {
        check_fold(&tree);
        Ok(())
    })
    .unwrap();
}

/// The generator makes what the property needs: forks whose sibling branches hold one
/// plugin's values under different versions, patches above version 1, and drops that
/// leave an absent value of a version above 1.
#[test]
fn the_fold_generator_makes_siblings_under_different_versions() {
    let mut runner = TestRunner::deterministic();
    let (mut siblings, mut patches, mut absent) = (0, 0, 0);
    for _ in 0..200 {
        let tree = tree_strategy().new_tree(&mut runner).unwrap().current();
        for (i, n) in tree.nodes.iter().enumerate() {
            if let Some(ev) = &n.event {
                patches += usize::from(matches!(ev.op, MOp::Patch(_)) && ev.version > 1);
                let f = tree.fold(ev.plugin, ev.scope, Some(i));
                absent += usize::from(f.value.is_none() && f.version > 1);
            }
            let versions: std::collections::BTreeSet<u32> = tree
                .children(i)
                .into_iter()
                .map(|c| tree.fold(0, Scope::Branch, Some(c)).version)
                .collect();
            siblings += usize::from(versions.len() > 1);
        }
    }
    assert!(
        siblings > 50,
        "{siblings} forks with siblings under different versions"
    );
    assert!(patches > 50, "{patches} patches above version 1");
    assert!(absent > 10, "{absent} absent values of a version above 1");
}

/// A fork inherits the value and the version at its fork point; siblings written under
/// versions 2 and 3 stay isolated from each other and from the fork point, in memory,
/// through the projection and after a reopen.
#[test]
fn siblings_written_under_different_versions_stay_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir.path(), "/proj")
        .unwrap();
    let msg = || NewEntry::message(json!({"role": "user", "content": "m", "timestamp": 0}));
    log.append(msg()).unwrap();
    let v1 = store.state::<Value>("plan", Scope::Branch).unwrap();
    let v2 = store.state_of(&tagging_key("plan", Scope::Branch, 2));
    let v3 = store.state_of(&tagging_key("plan", Scope::Branch, 3));
    let fork = v1.write(&mut log, &json!({"n": 1})).unwrap().unwrap();
    // Sibling A at version 2: a set (over the older value) then a patch at 2.
    let a1 = v2.patch(&mut log, &json!({"m": 2})).unwrap().unwrap();
    let a2 = v2.patch(&mut log, &json!({"k": 3})).unwrap().unwrap();
    // Sibling B at version 3, off the same fork point.
    log.navigate(&fork).unwrap();
    let b1 = v3.write(&mut log, &json!({"n": 30})).unwrap().unwrap();
    // Sibling C: a message, no write.
    log.navigate(&fork).unwrap();
    let c = log.append(msg()).unwrap();
    let file = log.path().to_path_buf();
    let raw = |at: &str| {
        let s = store
            .read_versioned(&file, "plan", Scope::Branch, Some(at))
            .unwrap();
        (s.value, s.state_version, s.entry)
    };
    let a_value = json!({"from": 1, "v": {"n": 1}, "m": 2, "k": 3});
    assert_eq!(raw(&fork), (Some(json!({"n": 1})), 1, Some(fork.clone())));
    assert_eq!(
        raw(&c),
        raw(&fork),
        "C inherits the fork point's value and version"
    );
    assert_eq!(raw(&a2), (Some(a_value.clone()), 2, Some(a2.clone())));
    assert_eq!(raw(&b1), (Some(json!({"n": 30})), 3, Some(b1.clone())));
    for log in [log, SessionLog::open(&file).unwrap()] {
        assert_eq!(v1.read_at(&log, &c).unwrap(), Some(json!({"n": 1})));
        assert_eq!(v2.read_at(&log, &a2).unwrap(), Some(a_value.clone()));
        assert_eq!(v3.read_at(&log, &b1).unwrap(), Some(json!({"n": 30})));
        // Each sibling's version is seen only on its own branch.
        let newer = |r: Result<Option<Value>>| match r {
            Err(Error::State(StateError::NewerStateVersion {
                stored,
                known,
                entry_id,
                ..
            })) => (stored, known, entry_id.unwrap()),
            other => panic!("{other:?}"),
        };
        assert_eq!(newer(v1.read_at(&log, &a1)), (2, 1, a1.clone()));
        assert_eq!(newer(v2.read_at(&log, &b1)), (3, 2, b1.clone()));
        assert_eq!(
            v3.read_at(&log, &a2).unwrap(),
            Some(json!({"from": 2, "v": a_value}))
        );
        assert_eq!(
            v3.read_at(&log, &c).unwrap(),
            Some(json!({"from": 1, "v": {"n": 1}}))
        );
        // History along A: each event with its version.
        let mut at_a = log;
        at_a.navigate(&a2).unwrap();
        let h: Vec<(String, &str, u32)> = v1
            .history(&at_a)
            .unwrap()
            .into_iter()
            .map(|h| (h.entry_id, h.op, h.state_version))
            .collect();
        assert_eq!(
            h,
            [
                (fork.clone(), "set", 1),
                (a1.clone(), "set", 2),
                (a2.clone(), "patch", 2)
            ]
        );
    }
}

// ---------------------------------------------------------------------------------------
// 2. The writers, against the model.

/// The highest version a writer's key reaches.
const WRITER_TOP: u32 = 4;

/// The migrate of the writers' keys: a known function of the value and both versions.
fn known_migrate(v: Value, from: u32, to: u32) -> Value {
    json!({"from": from, "to": to, "old": v})
}

fn writer_key(plugin: &str, scope: Scope, version: u32) -> StateKey<Value> {
    let key = StateKey::<Value>::new(plugin, scope).unwrap();
    if version == 1 {
        return key;
    }
    key.versioned(version, move |v, from| Ok(known_migrate(v, from, version)))
        .unwrap()
}

#[derive(Debug, Clone)]
enum Act {
    Message,
    /// A write with the current key, on the open log or on the file (at the leaf).
    Write {
        plugin: usize,
        scope: Scope,
        op: MOp,
        via_file: bool,
    },
    /// A write with the key at version 1: refused on a newer state.
    Old {
        plugin: usize,
        scope: Scope,
        op: MOp,
    },
    /// The current key's version goes up by one (up to [`WRITER_TOP`]).
    Bump,
    /// The leaf moves to an earlier entry: the next append forks there.
    Navigate(Index),
}

fn acts() -> impl Strategy<Value = Vec<Act>> {
    let act = prop_oneof![
        2 => Just(Act::Message),
        8 => (0..PLUGINS.len(), scope(), op(), any::<bool>()).prop_map(
            |(plugin, scope, op, via_file)| Act::Write { plugin, scope, op, via_file }
        ),
        1 => (0..PLUGINS.len(), scope(), op()).prop_map(|(plugin, scope, op)| Act::Old {
            plugin,
            scope,
            op
        }),
        2 => Just(Act::Bump),
        2 => any::<Index>().prop_map(Act::Navigate),
    ];
    prop::collection::vec(act, 1..24)
}

/// What a write of `op` with a key at `k` does where it lands (`under`): refused when
/// the value is newer; on a value of the key's version (or an absent one) the op itself
/// unless it changes nothing; on an older value a whole `set` of the migrated value
/// after the op (or a `drop`), even when it leaves the migrated value as it was.
fn expected_write(under: &Folded, k: u32, op: &MOp) -> std::result::Result<Option<(MOp, u32)>, ()> {
    if under.version > k {
        return Err(());
    }
    match &under.value {
        Some(v) if under.version < k => {
            let migrated = known_migrate(v.clone(), under.version, k);
            let op = match op.apply(Some(&migrated)) {
                Some(next) => MOp::Set(next),
                None => MOp::Drop,
            };
            Ok(Some((op, k)))
        }
        current => {
            let next = op.apply(current.as_ref());
            Ok((next != *current).then(|| (op.clone(), k)))
        }
    }
}

fn run_writes(acts: &[Act]) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir.path(), "/proj")
        .unwrap();
    let msg = || NewEntry::message(json!({"role": "user", "content": "m", "timestamp": 0}));
    let mut ids = vec![log.append(msg()).unwrap()];
    let mut model = Tree {
        nodes: vec![Node {
            parent: None,
            event: None,
        }],
    };
    let mut leaf = 0;
    let mut current = 1;
    let file = log.path().to_path_buf();
    let states: HashMap<(usize, Scope, u32), SessionState<Value>> = (0..PLUGINS.len())
        .flat_map(|p| SCOPES.map(|s| (p, s)))
        .flat_map(|(p, s)| (1..=WRITER_TOP).map(move |k| (p, s, k)))
        .map(|(p, s, k)| ((p, s, k), store.state_of(&writer_key(PLUGINS[p], s, k))))
        .collect();
    for act in acts {
        let (plugin, scope, op, via_file, k) = match act {
            Act::Message => {
                ids.push(log.append(msg()).unwrap());
                model.nodes.push(Node {
                    parent: Some(leaf),
                    event: None,
                });
                leaf = model.nodes.len() - 1;
                continue;
            }
            Act::Bump => {
                current = (current + 1).min(WRITER_TOP);
                continue;
            }
            Act::Navigate(ix) => {
                leaf = ix.index(ids.len());
                log.navigate(&ids[leaf]).unwrap();
                continue;
            }
            Act::Write {
                plugin,
                scope,
                op,
                via_file,
            } => (*plugin, *scope, op, *via_file, current),
            Act::Old { plugin, scope, op } => (*plugin, *scope, op, false, 1),
        };
        let st = &states[&(plugin, scope, k)];
        let under = model.fold(plugin, scope, Some(leaf));
        let expect = expected_write(&under, k, op);
        let before = std::fs::read(&file).unwrap();
        let r = if via_file {
            let at = Some(ids[leaf].as_str());
            match op {
                MOp::Set(v) => st.write(On::file(&file, at), v),
                MOp::Patch(p) => st.patch(On::file(&file, at), p),
                MOp::Drop => st.drop(On::file(&file, at)),
            }
        } else {
            match op {
                MOp::Set(v) => st.write(&mut log, v),
                MOp::Patch(p) => st.patch(&mut log, p),
                MOp::Drop => st.drop(&mut log),
            }
        };
        let what = format!("{act:?} at version {k} on {under:?}");
        match (r, expect) {
            (
                Err(Error::State(StateError::NewerStateVersion {
                    stored,
                    known,
                    entry_id,
                    ..
                })),
                Err(()),
            ) => {
                assert_eq!(
                    (stored, known, entry_id),
                    (under.version, k, under.last.map(|n| ids[n].clone())),
                    "{what}"
                );
                assert_eq!(
                    std::fs::read(&file).unwrap(),
                    before,
                    "refused, yet written: {what}"
                );
            }
            (Ok(None), Ok(None)) => {
                assert_eq!(std::fs::read(&file).unwrap(), before, "{what}");
            }
            (Ok(Some(id)), Ok(Some((op, version)))) => {
                if via_file {
                    log.refresh().unwrap();
                    log.navigate(&id).unwrap();
                }
                ids.push(id);
                model.nodes.push(Node {
                    parent: Some(leaf),
                    event: Some(Ev {
                        plugin,
                        scope,
                        op,
                        version,
                    }),
                });
                leaf = model.nodes.len() - 1;
            }
            (r, expect) => panic!("{what}: got {r:?}, expected {expect:?}"),
        }
        // The value read with the key at the current version is the model's.
        let f = model.fold(plugin, scope, Some(leaf));
        let reader = &states[&(plugin, scope, current)];
        if f.version <= current {
            let want = match (&f.value, f.version < current) {
                (Some(v), true) => Some(known_migrate(v.clone(), f.version, current)),
                (v, _) => v.clone(),
            };
            assert_eq!(reader.read_value(&log).unwrap(), want, "{what}");
        }
    }
    // The file, read without the crate, is the model: the same entries, events,
    // versions and values; and no patch in it mixes versions.
    let text = std::fs::read_to_string(&file).unwrap();
    let (parsed, parsed_ids) = parse_session(&text);
    assert_eq!(parsed_ids, ids);
    assert_eq!(parsed, model);
    assert_patches_never_mix_versions(&parsed, &parsed_ids);
    // The projection holds each value as stored, with its version.
    for (p, plugin) in PLUGINS.iter().enumerate() {
        for scope in SCOPES {
            for (i, id) in ids.iter().enumerate() {
                let want = model.fold(p, scope, Some(i));
                let s = store
                    .read_versioned(&file, plugin, scope, Some(id))
                    .unwrap();
                assert_eq!(
                    (s.value, s.state_version, s.entry),
                    (want.value, want.version, want.last.map(|n| ids[n].clone())),
                    "projection: {plugin} {scope} at {id}"
                );
            }
        }
    }
}

#[test]
fn writes_through_versioned_keys_never_append_a_patch_over_another_version() {
    runner(
        96,
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/versions-writes.txt"
        ),
    )
    .run(&acts(), |acts| {
        run_writes(&acts);
        Ok(())
    })
    .unwrap();
}

/// The check of the file itself can fail: a patch at version 2 on a value of version 1,
/// as no writer of the crate appends it, is found.
#[test]
fn a_patch_over_a_value_of_another_version_is_found_in_a_file() {
    let ev = |op, version| {
        Some(Ev {
            plugin: 0,
            scope: Scope::Branch,
            op,
            version,
        })
    };
    let tree = Tree {
        nodes: vec![
            Node {
                parent: None,
                event: ev(MOp::Set(json!({"a": 1})), 1),
            },
            Node {
                parent: Some(0),
                event: ev(MOp::Patch(json!({"b": 2})), 2),
            },
        ],
    };
    let (parsed, ids) = parse_session(&session_text(&tree));
    assert_eq!(parsed, tree);
    let r = std::panic::catch_unwind(|| assert_patches_never_mix_versions(&parsed, &ids));
    assert!(r.is_err(), "the mixed patch e1 was not found");
}

// ---------------------------------------------------------------------------------------
// 3. The fixture: `todo` at version 1, then 2, then 3.

const FIXTURE: &str = "versioned/todo-v1-v2-v3.jsonl";
const LAST: &str = "a0000009";

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(FIXTURE)
}

/// A copy of the fixture in `dir`.
fn fixture_copy(dir: &Path) -> PathBuf {
    let to = dir.join("todo.jsonl");
    std::fs::copy(fixture_path(), &to).unwrap();
    to
}

// The shapes of `todo`: version 1 is a list of names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ItemV2 {
    text: String,
    done: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TodoV2 {
    items: Vec<ItemV2>,
    #[serde(default)]
    owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Task {
    title: String,
    done: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TodoV3 {
    tasks: Vec<Task>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    due: Option<String>,
}

fn v1_to_v2(v: Value) -> std::result::Result<Value, String> {
    let names = v.as_array().ok_or("version 1 is a list")?;
    let items: Vec<Value> = names
        .iter()
        .map(|t| json!({"text": t, "done": false}))
        .collect();
    Ok(json!({ "items": items }))
}

fn v2_to_v3(v: Value) -> std::result::Result<Value, String> {
    let items = v["items"].as_array().ok_or("version 2 has items")?;
    let tasks: Vec<Value> = items
        .iter()
        .map(|i| json!({"title": i["text"], "done": i["done"]}))
        .collect();
    let mut out = json!({ "tasks": tasks });
    if let Some(owner) = v.get("owner") {
        out["owner"] = owner.clone();
    }
    Ok(out)
}

/// Version 4 keeps a list of owners.
fn v3_to_v4(mut v: Value) -> std::result::Result<Value, String> {
    let m = v.as_object_mut().ok_or("version 3 is an object")?;
    let owners = m.remove("owner").map(|o| vec![o]).unwrap_or_default();
    m.insert("owners".into(), Value::from(owners));
    Ok(v)
}

fn to_v2(v: Value, from: u32) -> std::result::Result<Value, String> {
    match from {
        1 => v1_to_v2(v),
        other => Err(format!("no migration from {other}")),
    }
}

fn to_v3(v: Value, from: u32) -> std::result::Result<Value, String> {
    match from {
        1 => v2_to_v3(v1_to_v2(v)?),
        2 => v2_to_v3(v),
        other => Err(format!("no migration from {other}")),
    }
}

fn to_v4(v: Value, from: u32) -> std::result::Result<Value, String> {
    match from {
        3 => v3_to_v4(v),
        other => v3_to_v4(to_v3(v, other)?),
    }
}

fn todo_key<T>(version: u32) -> StateKey<T> {
    let key = StateKey::<T>::new("todo", Scope::Branch).unwrap();
    match version {
        1 => key,
        2 => key.versioned(2, to_v2).unwrap(),
        3 => key.versioned(3, to_v3).unwrap(),
        4 => key.versioned(4, to_v4).unwrap(),
        other => panic!("no version {other}"),
    }
}

/// The value at the fixture's last entry, as version 3 stores it.
fn v3_value() -> Value {
    json!({
        "tasks": [
            {"title": "review", "done": true},
            {"title": "tests", "done": false},
            {"title": "docs", "done": false}
        ],
        "owner": "bo",
        "due": "2026-05-08"
    })
}

fn v4_value() -> Value {
    v3_to_v4(v3_value()).unwrap()
}

/// The fixture's lines, parsed.
fn lines_of(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The fixture is what the crate's writers write: the same scenario played through
/// keys at versions 1, 2 and 3 appends the same events, `data` for `data` (members in
/// the same order).
#[test]
fn the_fixture_is_what_the_writers_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir.path(), "/home/dev/acme-api")
        .unwrap();
    let user = |text: &str| {
        NewEntry::message(
            json!({"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 0}),
        )
    };
    let v1 = store.state_of(&todo_key::<Value>(1));
    let v2 = store.state_of(&todo_key::<Value>(2));
    let v3 = store.state_of(&todo_key::<Value>(3));
    let note = store.state::<String>("note", Scope::Session).unwrap();
    log.append(user("Track the review's tasks, please."))
        .unwrap();
    v1.write(&mut log, &json!(["review", "tests"])).unwrap();
    v1.write(&mut log, &json!(["review", "tests", "docs"]))
        .unwrap();
    note.write(&mut log, &"first pass".to_string()).unwrap();
    // Version 2's first write is a patch over a version-1 value: appended as a set.
    v2.patch(&mut log, &json!({"owner": "ana"})).unwrap();
    v2.patch(
        &mut log,
        &json!({"items": [
            {"text": "review", "done": true},
            {"text": "tests", "done": false},
            {"text": "docs", "done": false}
        ]}),
    )
    .unwrap();
    log.append(user("Hand the rest to Bo.")).unwrap();
    v3.patch(&mut log, &json!({"owner": "bo"})).unwrap();
    v3.patch(&mut log, &json!({"due": "2026-05-08"})).unwrap();
    let shape = |text: &str| -> Vec<(Value, Value, String)> {
        lines_of(text)
            .into_iter()
            .skip(1)
            .map(|e| {
                (
                    e["type"].clone(),
                    e["customType"].clone(),
                    serde_json::to_string(&e["data"]).unwrap(),
                )
            })
            .collect()
    };
    let written = std::fs::read_to_string(log.path()).unwrap();
    let fixture = std::fs::read_to_string(fixture_path()).unwrap();
    assert_eq!(shape(&written), shape(&fixture));
    assert_eq!(v3.read(&log).unwrap(), Some(v3_value()));
}

/// A reader that knows only envelope v=1, written from the rule "a reader refuses an
/// envelope whose `v` it does not know": the scope, op and value or patch of a v=1
/// event.
fn decode_v1_only(data: &Value) -> std::result::Result<(String, String, Option<Value>), String> {
    if data.get("v") != Some(&json!(1)) {
        return Err(format!("unknown envelope version {:?}", data.get("v")));
    }
    let scope = data["scope"].as_str().ok_or("no scope")?.to_owned();
    let op = data["op"].as_str().ok_or("no op")?.to_owned();
    let arg = data.get("value").or_else(|| data.get("patch")).cloned();
    Ok((scope, op, arg))
}

/// An old reader fails safe on the fixture: every event that carries a `stateVersion`
/// is a v=2 envelope, which a reader of v=1 refuses instead of misreading it; the
/// version-1 events stay v=1 and read as before.
#[test]
fn an_old_reader_refuses_every_versioned_event_of_the_fixture() {
    let text = std::fs::read_to_string(fixture_path()).unwrap();
    let (mut refused, mut read) = (Vec::new(), Vec::new());
    for e in lines_of(&text) {
        let Some(ct) = e["customType"].as_str() else {
            continue;
        };
        assert!(ct.starts_with("session-state/"), "{ct}");
        let data = &e["data"];
        let id = e["id"].as_str().unwrap().to_owned();
        match (data.get("stateVersion"), decode_v1_only(data)) {
            (Some(sv), Err(why)) => {
                assert_eq!(data["v"], 2, "{id}");
                assert!(sv.as_u64().unwrap() > 1, "{id}");
                assert!(why.contains("unknown envelope version"), "{why}");
                refused.push(id);
            }
            (None, Ok(_)) => {
                assert_eq!(data["v"], 1, "{id}");
                read.push(id);
            }
            (sv, r) => panic!("{id}: stateVersion {sv:?}, v1 reader {r:?}"),
        }
    }
    assert_eq!(refused, ["a0000005", "a0000006", "a0000008", "a0000009"]);
    assert_eq!(read, ["a0000002", "a0000003", "a0000004"]);
    // This crate reads both envelopes: version 3 at the leaf, version 1 above.
    let log = SessionLog::open(fixture_path()).unwrap();
    let store = Store::at(tempfile::tempdir().unwrap().path().join("s.sqlite")).unwrap();
    let v1 = store.state_of(&todo_key::<Vec<String>>(1));
    assert_eq!(
        v1.read_at(&log, "a0000003").unwrap(),
        Some(vec!["review".into(), "tests".into(), "docs".into()])
    );
    assert_eq!(
        store.state_of(&todo_key::<Value>(3)).read(&log).unwrap(),
        Some(v3_value())
    );
}

/// `NewerStateVersion` naming `todo`, stored 3, known `known` and the fixture's last
/// event.
fn assert_newer<T: std::fmt::Debug>(r: Result<T>, known: u32, what: &str) {
    match r {
        Err(Error::State(StateError::NewerStateVersion {
            plugin,
            stored,
            known: k,
            entry_id,
        })) => assert_eq!(
            (plugin.as_str(), stored, k, entry_id.as_deref()),
            ("todo", 3, known, Some(LAST)),
            "{what}"
        ),
        other => panic!("{what}: {other:?}"),
    }
}

/// A session in a SQLite session store, imported from `file`.
fn stored_copy(dir: &Path, file: &Path) -> (Sessions, String) {
    let backend = Sessions::new(SqliteStore::open(dir.join("sessions.sqlite")).unwrap());
    let id = backend.import_file(file).unwrap().session_id;
    (backend, id)
}

fn exported(backend: &Sessions, id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    backend.export(id, &mut out).unwrap();
    out
}

/// A key at version 1 (or 2) refuses every read, write, patch and drop of the version-3
/// state, on the open log, on the file (the projection and tail path) and on a stored
/// session, naming plugin, versions and entry; nothing is written by any of them.
#[test]
fn a_key_at_an_older_version_refuses_the_version_3_state_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture_copy(dir.path());
    let original = std::fs::read(&file).unwrap();
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let unchanged = |what: &str| {
        assert_eq!(
            std::fs::read(&file).unwrap(),
            original,
            "{what} changed the file"
        );
    };
    for known in [1, 2] {
        let st = store.state_of(&todo_key::<Value>(known));
        // The serde type is not reached: the version is refused first.
        let typed = store.state_of(&todo_key::<Vec<String>>(known));
        let mut log = SessionLog::open(&file).unwrap();
        let len = log.len();
        let checks: Vec<(&str, Result<Option<Value>>)> = vec![
            ("read", st.read(&log)),
            ("read_at", st.read_at(&log, LAST)),
            ("read_value", st.read_value(&log)),
            ("write", st.write(&mut log, &json!(["x"])).map(|_| None)),
            (
                "patch",
                st.patch(&mut log, &json!({"owner": "x"})).map(|_| None),
            ),
            ("drop", st.drop(&mut log).map(|_| None)),
            ("read_file", st.read(&file)),
            ("read_file_at", st.read_at(&file, LAST)),
            ("read_file_value", st.read_value(On::file(&file, None))),
            (
                "write_file",
                st.write(On::file(&file, None), &json!(["x"])).map(|_| None),
            ),
            (
                "patch_file at",
                st.patch(On::file(&file, Some(LAST)), &json!({"owner": "x"}))
                    .map(|_| None),
            ),
            ("drop_file", st.drop(On::file(&file, None)).map(|_| None)),
            (
                "apply_at_tail",
                st.apply_at_tail(&file, None, Op::Drop).map(|_| None),
            ),
        ];
        for (what, r) in checks {
            let what = format!("{what} at version {known}");
            assert_newer(r, known, &what);
            unchanged(&what);
        }
        assert_newer(typed.read(&log), known, "typed read");
        assert_newer(typed.read(&file), known, "typed read_file");
        assert_eq!(log.len(), len, "nothing appended in memory");
        unchanged("the typed reads");
    }
    // The version-1 values above stay readable by the old key.
    let log = SessionLog::open(&file).unwrap();
    assert_eq!(
        store
            .state_of(&todo_key::<Value>(1))
            .read_at(&log, "a0000003")
            .unwrap(),
        Some(json!(["review", "tests", "docs"]))
    );
    // A stored session: the same refusals, and the store's lines stay as they were.
    let (backend, id) = stored_copy(dir.path(), &file);
    let key = "sqlite:sessions";
    let session = StoredSession::new(backend.backend(), key, &id);
    let before = exported(&backend, &id);
    assert_eq!(before, original, "imported byte for byte");
    let st = store.state_of(&todo_key::<Value>(1));
    assert_newer(st.read(On::stored(&session, None)), 1, "read_stored");
    assert_newer(
        st.read_value(On::stored(&session, Some(LAST))),
        1,
        "read_stored_value",
    );
    assert_newer(
        st.write(On::stored(&session, None), &json!(["x"])),
        1,
        "write_stored",
    );
    assert_newer(
        st.patch(On::stored(&session, None), &json!({"owner": "x"})),
        1,
        "patch_stored",
    );
    assert_newer(st.drop(On::stored(&session, None)), 1, "drop_stored");
    assert_eq!(
        exported(&backend, &id),
        before,
        "the stored session changed"
    );
    unchanged("the stored session's calls");
}

/// A key at version 3 reads the fixture (and migrates the values above, written under 1
/// and 2); one at version 4 reads the migrated value, in memory only: the file and the
/// projection's stored value stay as they are.
#[test]
fn a_key_at_version_3_reads_the_fixture_and_one_at_4_migrates_in_memory_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture_copy(dir.path());
    let original = std::fs::read(&file).unwrap();
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let log = SessionLog::open(&file).unwrap();
    let v3 = store.state_of(&todo_key::<TodoV3>(3));
    let want: TodoV3 = serde_json::from_value(v3_value()).unwrap();
    assert_eq!(v3.read(&log).unwrap(), Some(want.clone()));
    assert_eq!(v3.read(&file).unwrap(), Some(want.clone()));
    let task = |title: &str, done| Task {
        title: title.into(),
        done,
    };
    // At a0000006 (version 2) and a0000003 (version 1): migrated.
    assert_eq!(
        v3.read_at(&log, "a0000006").unwrap(),
        Some(TodoV3 {
            tasks: vec![
                task("review", true),
                task("tests", false),
                task("docs", false)
            ],
            owner: Some("ana".into()),
            due: None,
        })
    );
    assert_eq!(
        v3.read_at(&file, "a0000003").unwrap(),
        Some(TodoV3 {
            tasks: vec![
                task("review", false),
                task("tests", false),
                task("docs", false)
            ],
            owner: None,
            due: None,
        })
    );
    // A key at version 2 reads its own value at a0000006, and migrates a0000003's.
    let v2 = store.state_of(&todo_key::<TodoV2>(2));
    let item = |text: &str, done| ItemV2 {
        text: text.into(),
        done,
    };
    assert_eq!(
        v2.read_at(&log, "a0000006").unwrap(),
        Some(TodoV2 {
            items: vec![
                item("review", true),
                item("tests", false),
                item("docs", false)
            ],
            owner: Some("ana".into()),
        })
    );
    assert_eq!(
        v2.read_at(&log, "a0000003").unwrap(),
        Some(TodoV2 {
            items: vec![
                item("review", false),
                item("tests", false),
                item("docs", false)
            ],
            owner: None,
        })
    );
    let (backend, id) = stored_copy(dir.path(), &file);
    let session = StoredSession::new(backend.backend(), "sqlite:sessions", &id);
    assert_eq!(v3.read(On::stored(&session, None)).unwrap(), Some(want));

    let v4 = store.state_of(&todo_key::<Value>(4));
    assert_eq!(v4.read(&log).unwrap(), Some(v4_value()));
    assert_eq!(v4.read_value(&log).unwrap(), Some(v4_value()));
    assert_eq!(v4.read(&file).unwrap(), Some(v4_value()));
    assert_eq!(
        v4.read(On::stored(&session, None)).unwrap(),
        Some(v4_value())
    );
    assert_eq!(std::fs::read(&file).unwrap(), original, "a read wrote");
    assert_eq!(exported(&backend, &id), original, "a read wrote");
    let stored = store
        .read_versioned(&file, "todo", Scope::Branch, None)
        .unwrap();
    assert_eq!(
        (stored.value, stored.state_version, stored.entry.as_deref()),
        (Some(v3_value()), 3, Some(LAST))
    );
    let stored = store
        .read_stored_versioned(&session, "todo", Scope::Branch, None)
        .unwrap();
    assert_eq!(
        (stored.value, stored.state_version, stored.entry.as_deref()),
        (Some(v3_value()), 3, Some(LAST))
    );
}

#[derive(Debug, Clone, Copy)]
enum Path4 {
    /// An open log.
    Log,
    /// The file, decided from the projection's rows and the file's tail.
    Tail,
    /// A stored session.
    Stored,
}

/// The next write, patch or drop of the key at version 4 appends a whole `set` (or a
/// `drop`) recorded at version 4, on every path; a write of the very value the migration
/// gives still appends (it records the version); then version 3 is refused.
#[test]
fn the_first_write_at_version_4_appends_a_set_recorded_at_4() {
    let v4_patched = {
        let mut v = v4_value();
        v["due"] = json!("2026-05-09");
        v
    };
    let cases: [(&str, Op, Option<Value>); 3] = [
        ("write", Op::Set(v4_value()), Some(v4_value())),
        (
            "patch",
            Op::Patch(json!({"due": "2026-05-09"})),
            Some(v4_patched),
        ),
        ("drop", Op::Drop, None),
    ];
    for path in [Path4::Log, Path4::Tail, Path4::Stored] {
        for (name, op, after) in &cases {
            let what = format!("{name} on {path:?}");
            let dir = tempfile::tempdir().unwrap();
            let file = fixture_copy(dir.path());
            let store = Store::at(dir.path().join("states.sqlite")).unwrap();
            let v4 = store.state_of(&todo_key::<Value>(4));
            let (backend, sid) = stored_copy(dir.path(), &file);
            let session = StoredSession::new(backend.backend(), "sqlite:sessions", &sid);
            // The rows follow the file, so that the tail path answers.
            store.catch_up(&file).unwrap();
            let apply = |op: Op| -> Option<String> {
                match (path, op) {
                    (Path4::Log, op) => {
                        let mut log = SessionLog::open(&file).unwrap();
                        match op {
                            Op::Set(v) => v4.write(&mut log, &v),
                            Op::Patch(p) => v4.patch(&mut log, &p),
                            Op::Drop => v4.drop(&mut log),
                        }
                    }
                    (Path4::Tail, op) => v4.apply_at_tail(&file, None, op).map(|w| match w {
                        TailWrite::Appended(id) => Some(id),
                        TailWrite::Unchanged => None,
                        TailWrite::NeedsLog => panic!("the rows were caught up"),
                    }),
                    (Path4::Stored, Op::Set(v)) => v4.write(On::stored(&session, None), &v),
                    (Path4::Stored, Op::Patch(p)) => v4.patch(On::stored(&session, None), &p),
                    (Path4::Stored, Op::Drop) => v4.drop(On::stored(&session, None)),
                }
                .unwrap()
            };
            let id = apply(op.clone()).unwrap_or_else(|| panic!("{what}: nothing appended"));
            let text = match path {
                Path4::Stored => String::from_utf8(exported(&backend, &sid)).unwrap(),
                _ => std::fs::read_to_string(&file).unwrap(),
            };
            let last = lines_of(&text).pop().unwrap();
            assert_eq!(
                (last["id"].as_str(), last["parentId"].as_str()),
                (Some(id.as_str()), Some(LAST)),
                "{what}"
            );
            let data = match after {
                Some(v) => {
                    json!({"v": 2, "stateVersion": 4, "scope": "branch", "op": "set", "value": v})
                }
                None => json!({"v": 2, "stateVersion": 4, "scope": "branch", "op": "drop"}),
            };
            assert_eq!(last["data"], data, "{what}");
            // The same op again, now on a value of version 4, changes nothing.
            assert_eq!(apply(op.clone()), None, "{what}: again");
            let v3 = store.state_of(&todo_key::<Value>(3));
            let refused = match path {
                Path4::Log => v3.read(&SessionLog::open(&file).unwrap()),
                Path4::Tail => v3.read(&file),
                Path4::Stored => v3.read(On::stored(&session, None)),
            };
            match refused {
                Err(Error::State(StateError::NewerStateVersion {
                    stored: 4,
                    known: 3,
                    entry_id,
                    ..
                })) => assert_eq!(entry_id, Some(id.clone()), "{what}"),
                other => panic!("{what}: version 3 reads {other:?}"),
            }
            // The projection now stores the set at version 4.
            let s = match path {
                Path4::Stored => store.read_stored_versioned(&session, "todo", Scope::Branch, None),
                _ => store.read_versioned(&file, "todo", Scope::Branch, None),
            }
            .unwrap();
            assert_eq!((s.value, s.state_version), (after.clone(), 4), "{what}");
        }
    }
}

/// A patch at version 4 on a value of version 4 stays a patch.
#[test]
fn a_patch_on_a_value_of_the_keys_version_is_a_patch() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture_copy(dir.path());
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let v4 = store.state_of(&todo_key::<Value>(4));
    v4.patch(On::file(&file, None), &json!({"due": "2026-05-09"}))
        .unwrap()
        .unwrap();
    v4.patch(On::file(&file, None), &json!({"owners": ["bo", "cy"]}))
        .unwrap()
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines = lines_of(&text);
    let ops: Vec<(&str, u64)> = lines[lines.len() - 2..]
        .iter()
        .map(|l| {
            (
                l["data"]["op"].as_str().unwrap(),
                l["data"]["stateVersion"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ops, [("set", 4), ("patch", 4)]);
}

// ---------------------------------------------------------------------------------------
// 4. The serde type is the schema.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    text: String,
    done: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Todo {
    items: Vec<Item>,
}

fn assert_deserialize<T: std::fmt::Debug>(r: Result<T>, entry: &str, at: &str, what: &str) {
    match r {
        Err(e @ Error::State(StateError::Deserialize { .. })) => {
            let text = e.to_string();
            let Error::State(StateError::Deserialize {
                plugin,
                entry_id,
                path,
                ..
            }) = e
            else {
                unreachable!()
            };
            assert_eq!(
                (plugin.as_str(), entry_id.as_deref(), path.as_str()),
                ("todo", Some(entry), at),
                "{what}"
            );
            assert!(
                text.contains(&format!("`{at}`")) && text.contains(entry),
                "{what}: {text}"
            );
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// A value that does not deserialize into the caller's type is an `StateError::Deserialize`
/// naming the plugin, the entry that set it and the first failing path, on the open log,
/// the file and a stored session; so is a migrated value that does not.
#[test]
fn a_value_that_does_not_fit_the_serde_type_names_entry_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir.path(), "/proj")
        .unwrap();
    let raw = store.state::<Value>("todo", Scope::Branch).unwrap();
    let bad = raw
        .write(
            &mut log,
            &json!({"items": [{"text": "a", "done": true}, {"text": "b", "done": "yes"}]}),
        )
        .unwrap()
        .unwrap();
    log.append(NewEntry::message(
        json!({"role": "user", "content": "m", "timestamp": 0}),
    ))
    .unwrap();
    let file = log.path().to_path_buf();
    let typed = store.state::<Todo>("todo", Scope::Branch).unwrap();
    let at = "items[1].done";
    assert_deserialize(typed.read(&log), &bad, at, "read");
    assert_deserialize(typed.read_at(&log, &bad), &bad, at, "read_at");
    assert_deserialize(typed.read(&file), &bad, at, "read_file");
    assert_deserialize(typed.read_at(&file, &bad), &bad, at, "read_file_at");
    let (backend, id) = stored_copy(dir.path(), &file);
    let session = StoredSession::new(backend.backend(), "sqlite:sessions", &id);
    assert_deserialize(
        typed.read(On::stored(&session, None)),
        &bad,
        at,
        "read_stored",
    );
    // A missing member is named by its object's path.
    let missing = raw
        .write(&mut log, &json!({"items": [{"text": "a"}]}))
        .unwrap()
        .unwrap();
    assert_deserialize(typed.read(&log), &missing, "items[0]", "a missing member");
    // A value that fits reads.
    raw.write(&mut log, &json!({"items": [{"text": "a", "done": false}]}))
        .unwrap();
    assert_eq!(
        typed.read(&file).unwrap(),
        Some(Todo {
            items: vec![Item {
                text: "a".into(),
                done: false
            }]
        })
    );
    // Migrated, then checked: the entry named is the older event's.
    let old = raw.write(&mut log, &json!(["a", "b"])).unwrap().unwrap();
    let v2 = store.state_of(
        &StateKey::<Todo>::new("todo", Scope::Branch)
            .unwrap()
            .versioned(2, |v, _| {
                let items: Vec<Value> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| json!({"text": t, "done": null}))
                    .collect();
                Ok(json!({ "items": items }))
            })
            .unwrap(),
    );
    assert_deserialize(v2.read(&log), &old, "items[0].done", "migrated, log");
    assert_deserialize(v2.read(&file), &old, "items[0].done", "migrated, file");
}

/// A `migrate` that fails is `StateError::Migrate` naming plugin, versions and entry, on the
/// log and the file; nothing is written by a write on top of it.
#[test]
fn a_failing_migrate_names_plugin_versions_and_entry() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture_copy(dir.path());
    let original = std::fs::read(&file).unwrap();
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let st = store.state_of(
        &StateKey::<Value>::new("todo", Scope::Branch)
            .unwrap()
            .versioned(5, |_, from| Err(format!("cannot read version {from}")))
            .unwrap(),
    );
    let mut log = SessionLog::open(&file).unwrap();
    let checks: Vec<(&str, Result<Option<Value>>)> = vec![
        ("read", st.read(&log)),
        ("read_file", st.read(&file)),
        ("write", st.write(&mut log, &json!(1)).map(|_| None)),
        (
            "patch_file",
            st.patch(On::file(&file, None), &json!({"a": 1}))
                .map(|_| None),
        ),
    ];
    for (what, r) in checks {
        match r {
            Err(Error::State(StateError::Migrate {
                plugin,
                from,
                to,
                entry_id,
                detail,
            })) => assert_eq!(
                (
                    plugin.as_str(),
                    from,
                    to,
                    entry_id.as_deref(),
                    detail.as_str()
                ),
                ("todo", 3, 5, Some(LAST), "cannot read version 3"),
                "{what}"
            ),
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(std::fs::read(&file).unwrap(), original, "{what}");
    }
}

/// `read_as_stored` answers what `read` migrates from: the value as stored, the version
/// it was written under and the entry that set it, the same on an open log and on the
/// file (the projection), for any key version; `read` of the same key migrates it.
#[test]
fn read_as_stored_gives_the_value_its_version_and_entry_as_read_gives_them_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture_copy(dir.path());
    let store = Store::at(dir.path().join("states.sqlite")).unwrap();
    let mut log = SessionLog::open(&file).unwrap();
    log.navigate("a0000003").unwrap();
    let v5 = tagging_key("todo", Scope::Branch, 5);
    let st = store.state_of(&v5);
    let want = StoredValue {
        value: Some(json!(["review", "tests", "docs"])),
        state_version: 1,
        entry: Some("a0000003".into()),
    };
    assert_eq!(st.read_as_stored(&log).unwrap(), want);
    assert_eq!(
        st.read_as_stored(On::file(&file, Some("a0000003")))
            .unwrap(),
        want
    );
    assert_eq!(
        st.read(&log).unwrap(),
        Some(tagged(1, json!(["review", "tests", "docs"]))),
        "read migrates what read_as_stored hands over"
    );
    // A key older than the stored version: read refuses, read_as_stored answers.
    let v1 = store.state::<Value>("todo", Scope::Branch).unwrap();
    log.navigate("a0000006").unwrap();
    let stored = v1.read_as_stored(&log).unwrap();
    assert_eq!(
        (stored.state_version, stored.entry.as_deref()),
        (2, Some("a0000006"))
    );
    assert!(matches!(
        v1.read(&log),
        Err(Error::State(StateError::NewerStateVersion { .. }))
    ));
    // Nothing written yet at the first entry: absent, version 1, no entry.
    log.navigate("a0000001").unwrap();
    assert_eq!(
        v1.read_as_stored(&log).unwrap(),
        StoredValue {
            value: None,
            state_version: 1,
            entry: None
        }
    );
}

/// A `migrate` that returns a value breaking a value rule is `StateError::Migrate` naming
/// the entry and both versions, on the read (`resolve`) and on every write (`decide`), the
/// drop included: the core keeps what a migration returns to the rules every write keeps.
#[test]
fn a_migration_that_breaks_a_value_rule_is_refused_on_read_and_write_naming_the_entry() {
    let mut deep = json!(1);
    for _ in 0..150 {
        deep = json!([deep]);
    }
    let key = StateKey::<Value>::new("todo", Scope::Branch)
        .unwrap()
        .versioned(3, move |_, _| Ok(deep.clone()))
        .unwrap();
    let refused = |r: session_state::Result<()>| match r {
        Err(Error::State(StateError::Migrate {
            from,
            to,
            entry_id,
            detail,
            ..
        })) => {
            assert_eq!((from, to, entry_id.as_deref()), (1, 3, Some("e1")));
            assert!(
                detail.ends_with(
                    "nested 150 levels deep, deeper than 100 levels of arrays and objects"
                ),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    };
    refused(
        key.resolve(Some(json!(["a"])), 1, || Some("e1".into()))
            .map(|_| ()),
    );
    for op in [Op::Set(json!(1)), Op::Patch(json!({"n": 1})), Op::Drop] {
        refused(
            key.decide(Some(&json!(["a"])), 1, || Some("e1".into()), op)
                .map(|_| ()),
        );
    }
}
