//! Property tests of the fold (docs/spec.md §3) against a naive reference model: a plain list of
//! entries with a parent map, folded from scratch on every query.
//!
//! A reference state machine generates appended messages, write/patch/drop for two
//! plugins in both scopes, navigation to any earlier entry followed by appends (forks),
//! new roots, and reopening from disk. After every step, every position's value is
//! compared with the model, in memory and through the SQLite projection.
#![expect(clippy::unwrap_used)]

use crate::common;

use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use serde_json::{Value, json};
use session_state::*;
use std::collections::HashMap;

pub(crate) const PLUGINS: [&str; 2] = ["alpha", "beta"];
pub(crate) const SCOPES: [Scope; 2] = [Scope::Branch, Scope::Session];

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MOp {
    Set(Value),
    Patch(Value),
    Drop,
}

#[derive(Debug, Clone)]
pub(crate) enum Transition {
    Message,
    State {
        plugin: usize,
        scope: Scope,
        op: MOp,
    },
    Navigate(usize),
    ResetLeaf,
    Reopen,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ModelEntry {
    pub(crate) parent: Option<usize>,
    pub(crate) event: Option<(usize, Scope, MOp)>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Model {
    pub(crate) entries: Vec<ModelEntry>,
    pub(crate) leaf: Option<usize>,
    /// Whether the last state transition appended an entry.
    pub(crate) last_appended: bool,
}

fn apply(op: &MOp, cur: Option<Value>) -> Option<Value> {
    match op {
        MOp::Set(v) => Some(v.clone()),
        MOp::Drop => None,
        MOp::Patch(p) => Some(common::reference::merge_patch(cur.as_ref(), p)),
    }
}

impl Model {
    fn path(&self, i: usize) -> Vec<usize> {
        let mut p = vec![i];
        let mut c = i;
        while let Some(x) = self.entries[c].parent {
            p.push(x);
            c = x;
        }
        p.reverse();
        p
    }

    /// The fold from scratch: branch along the path, session over the whole list.
    pub(crate) fn value(&self, plugin: usize, scope: Scope, at: Option<usize>) -> Option<Value> {
        let nodes: Vec<usize> = match scope {
            Scope::Branch => at.map(|i| self.path(i)).unwrap_or_default(),
            Scope::Session => (0..self.entries.len()).collect(),
        };
        let mut v = None;
        for n in nodes {
            if let Some((p, s, op)) = &self.entries[n].event
                && *p == plugin
                && *s == scope
            {
                v = apply(op, v);
            }
        }
        v
    }
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (0i64..5).prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(2, 12, 3, |inner| {
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

pub(crate) struct Reference;

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Transition> {
        let n = state.entries.len().max(1);
        let scope = prop_oneof![Just(Scope::Branch), Just(Scope::Session)];
        prop_oneof![
            3 => Just(Transition::Message),
            8 => (0..PLUGINS.len(), scope, op())
                .prop_map(|(plugin, scope, op)| Transition::State { plugin, scope, op }),
            2 => (0..n).prop_map(Transition::Navigate),
            1 => Just(Transition::ResetLeaf),
            1 => Just(Transition::Reopen),
        ]
        .boxed()
    }

    fn preconditions(state: &Model, t: &Transition) -> bool {
        match t {
            Transition::Navigate(i) => *i < state.entries.len(),
            Transition::Reopen => !state.entries.is_empty(),
            _ => true,
        }
    }

    fn apply(mut state: Model, t: &Transition) -> Model {
        match t {
            Transition::Message => {
                state.entries.push(ModelEntry {
                    parent: state.leaf,
                    event: None,
                });
                state.leaf = Some(state.entries.len() - 1);
            }
            Transition::State { plugin, scope, op } => {
                let cur = state.value(*plugin, *scope, state.leaf);
                let next = apply(op, cur.clone());
                state.last_appended = next != cur;
                if state.last_appended {
                    state.entries.push(ModelEntry {
                        parent: state.leaf,
                        event: Some((*plugin, *scope, op.clone())),
                    });
                    state.leaf = Some(state.entries.len() - 1);
                }
            }
            Transition::Navigate(i) => state.leaf = Some(*i),
            Transition::ResetLeaf => state.leaf = None,
            // On load, the active leaf is the last entry in file order.
            Transition::Reopen => state.leaf = state.entries.len().checked_sub(1),
        }
        state
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
    log: SessionLog,
    ids: Vec<String>,
    states: HashMap<(usize, Scope), SessionState<Value>>,
}

impl Harness {
    fn state(&self, plugin: usize, scope: Scope) -> &SessionState<Value> {
        &self.states[&(plugin, scope)]
    }
}

struct Sut;

impl StateMachineTest for Sut {
    type SystemUnderTest = Harness;
    type Reference = Reference;

    fn init_test(_: &Model) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("states.sqlite");
        let log = LogOptions::new()
            .materialize(Materialize::FirstAppend)
            .create(dir.path(), "/proj")
            .unwrap();
        let mut states = HashMap::new();
        for (i, p) in PLUGINS.iter().enumerate() {
            for s in SCOPES {
                let st = Store::at(&db).and_then(|store| store.state(*p, s)).unwrap();
                states.insert((i, s), st);
            }
        }
        Harness {
            _dir: dir,
            db,
            log,
            ids: Vec::new(),
            states,
        }
    }

    fn apply(mut h: Harness, model: &Model, t: Transition) -> Harness {
        match t {
            Transition::Message => {
                let id = h
                    .log
                    .append(NewEntry::message(json!({"role": "user", "content": "m"})))
                    .unwrap();
                h.ids.push(id);
            }
            Transition::State { plugin, scope, op } => {
                let st = &h.states[&(plugin, scope)];
                let r = match op {
                    MOp::Set(v) => st.write(&mut h.log, &v),
                    MOp::Patch(p) => st.patch(&mut h.log, &p),
                    MOp::Drop => st.drop(&mut h.log),
                }
                .unwrap();
                // A change appends exactly one entry; no change appends nothing.
                assert_eq!(r.is_some(), model.last_appended);
                if let Some(id) = r {
                    h.ids.push(id);
                }
            }
            Transition::Navigate(i) => h.log.navigate(&h.ids[i]).unwrap(),
            Transition::ResetLeaf => h.log.reset_leaf(),
            Transition::Reopen => {
                let before: Vec<Option<Value>> = (0..PLUGINS.len())
                    .flat_map(|p| SCOPES.map(|s| (p, s)))
                    .map(|(p, s)| {
                        h.state(p, s)
                            .read_at(&h.log, h.ids.last().unwrap())
                            .unwrap()
                    })
                    .collect();
                h.log = SessionLog::open(h.log.path()).unwrap();
                let after: Vec<Option<Value>> = (0..PLUGINS.len())
                    .flat_map(|p| SCOPES.map(|s| (p, s)))
                    .map(|(p, s)| h.state(p, s).read(&h.log).unwrap())
                    .collect();
                // A reopen reads the same values as before it.
                assert_eq!(before, after);
            }
        }
        assert_eq!(h.ids.len(), model.entries.len());
        h
    }

    fn check_invariants(h: &Harness, model: &Model) {
        assert_eq!(h.log.leaf_id(), model.leaf.map(|i| h.ids[i].as_str()));
        let mut projection = h
            .log
            .is_materialized()
            .then(|| common::open_store(&h.db).unwrap());
        for (plugin, name) in PLUGINS.iter().enumerate() {
            for scope in SCOPES {
                let st = h.state(plugin, scope);
                assert_eq!(
                    st.read(&h.log).unwrap(),
                    model.value(plugin, scope, model.leaf)
                );
                for (i, id) in h.ids.iter().enumerate() {
                    let expect = model.value(plugin, scope, Some(i));
                    assert_eq!(
                        st.read_at(&h.log, id).unwrap(),
                        expect,
                        "{} {scope} at #{i}",
                        name
                    );
                    if let Some(p) = projection.as_mut() {
                        let got = p.read_value(h.log.path(), name, scope, Some(id)).unwrap();
                        assert_eq!(got, expect, "projection: {} {scope} at #{i}", name);
                    }
                    match scope {
                        // A child starts with exactly its parent's value unless it is
                        // itself this plugin's branch event; so siblings never see
                        // each other's writes.
                        Scope::Branch => {
                            let own = matches!(&model.entries[i].event, Some((p, Scope::Branch, _)) if *p == plugin);
                            if !own {
                                let parent = model.entries[i]
                                    .parent
                                    .map(|p| st.read_at(&h.log, &h.ids[p]).unwrap())
                                    .unwrap_or(None);
                                assert_eq!(st.read_at(&h.log, id).unwrap(), parent);
                            }
                        }
                        // Session scope ignores position.
                        Scope::Session => {
                            assert_eq!(st.read_at(&h.log, id).unwrap(), st.read(&h.log).unwrap());
                        }
                    }
                }
            }
        }
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        max_shrink_iters: 2000,
        .. ProptestConfig::default()
    })]
    #[test]
    fn fold_matches_the_naive_model(sequential 1..40 => Sut);
}

/// docs/spec.md §3: "unchanged → append nothing" uses JSON value equality as Pi's JavaScript sees
/// it: `1` and `1.0` are one value and key order does not matter, for write, patch and
/// drop, in both scopes; on a fork the comparison is with the fork's own (inherited)
/// value.
#[test]
fn values_equal_as_javascript_sees_them_append_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir.path(), "/proj")
        .unwrap();
    let root = log
        .append(NewEntry::message(json!({"role": "user", "content": "m"})))
        .unwrap();
    let db = dir.path().join("states.sqlite");
    for scope in SCOPES {
        let st = Store::at(&db)
            .and_then(|store| store.state::<Value>("eq", scope))
            .unwrap();
        let num: Value = serde_json::from_str("1.0").unwrap();
        assert!(st.write(&mut log, &num).unwrap().is_some(), "{scope}");
        assert_eq!(
            st.write(&mut log, &json!(1)).unwrap(),
            None,
            "{scope}: 1 after 1.0"
        );
        let obj = json!({"a": 1, "b": [2.5, {"c": 3}]});
        assert!(st.write(&mut log, &obj).unwrap().is_some());
        let same: Value = serde_json::from_str(r#"{"b":[2.50,{"c":3.0}],"a":1.0}"#).unwrap();
        assert_eq!(
            st.write(&mut log, &same).unwrap(),
            None,
            "{scope}: reordered keys"
        );
        assert_eq!(
            st.patch(&mut log, &json!({"a": 1.0, "b": [2.5, {"c": 3}]}))
                .unwrap(),
            None,
            "{scope}: a patch that changes nothing"
        );
        assert!(st.patch(&mut log, &json!({"a": 2})).unwrap().is_some());
        assert!(st.drop(&mut log).unwrap().is_some());
        assert_eq!(st.drop(&mut log).unwrap(), None);
    }
    // On a fork: the fork inherits `{"a":1}` and `{"a":1.0}` is no change there; a
    // sibling forked before the write sees the value absent, so the same write appends.
    let st = Store::at(&db)
        .and_then(|store| store.state::<Value>("fork", Scope::Branch))
        .unwrap();
    st.write(&mut log, &json!({"a": 1})).unwrap().unwrap();
    let tip = log.leaf_id().unwrap().to_owned();
    log.append(NewEntry::message(json!({"role": "user", "content": "m"})))
        .unwrap();
    log.navigate(&tip).unwrap();
    let one: Value = serde_json::from_str(r#"{"a":1.0}"#).unwrap();
    assert_eq!(st.write(&mut log, &one).unwrap(), None, "inherited value");
    log.navigate(&root).unwrap();
    assert!(
        st.write(&mut log, &one).unwrap().is_some(),
        "absent on the sibling"
    );
    let reopened = SessionLog::open(log.path()).unwrap();
    assert!(json::js_eq(
        &st.read(&reopened).unwrap().unwrap(),
        &json!({"a": 1})
    ));
    assert_eq!(st.read_at(&reopened, &tip).unwrap(), Some(json!({"a": 1})));
}
