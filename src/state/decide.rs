//! The one decision of a write (docs/spec.md §3): given the value a plugin has where the
//! write lands and the op it asks for, the event to append, or none.
//!
//! Every writer asks here: the write on an open log (`store/write.rs`), the write decided
//! from the projection's rows and the file's tail (`store/tail.rs`), the write to a
//! backend's session (`store/backend.rs`) and the Pi package, which appends the event
//! itself through `pi.appendEntry`. Pure: no database, no file.

use super::envelope::{Envelope, Op, Scope};
use serde_json::Value;

/// Why [`decide`] refuses a write: the value it would leave is nested `depth` levels
/// deep, and this crate reads a value at most [`crate::json::MAX_READ_DEPTH`] − 1 levels
/// deep inside its event's `data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooDeepResult {
    /// The nesting depth of the value the write would leave.
    pub depth: usize,
}

/// The event `op` appends in `scope` on top of `current` (the plugin's folded value where
/// the write lands, `None`: absent), or `Ok(None)` when it changes nothing: the value
/// after it equals `current` as Pi's JavaScript sees it (`1` is `1.0`, key order aside;
/// absent equals only absent).
///
/// Refused when the value it would leave could not be read back by this crate. The
/// caller's own value or patch is checked before (`StateKey::check_op`); what the value
/// inherits from the session passes, so that writes on top of it keep working.
#[cfg(test)]
pub(crate) fn decide(
    scope: Scope,
    current: Option<&Value>,
    op: Op,
) -> Result<Option<Envelope>, TooDeepResult> {
    decide_versioned(scope, current, op, 1, true).map(|d| d.map(|d| d.event))
}

/// A decided event and the value after it ([`crate::StateKey::decide`]): a `set`'s is
/// its own value, a `drop`'s none, a `patch`'s the merge the decision computed to compare.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// The event to append.
    pub event: Envelope,
    pub(crate) patched: Option<Value>,
}

impl Decided {
    /// The value after the event (`None`: absent).
    pub fn after(&self) -> Option<&Value> {
        match &self.event.op {
            Op::Set(v) => Some(v),
            Op::Drop => None,
            Op::Patch(_) => self.patched.as_ref(),
        }
    }

    /// The event and the value after it, owned.
    pub fn into_parts(self) -> (Envelope, Option<Value>) {
        let after = match &self.event.op {
            Op::Set(v) => Some(v.clone()),
            Op::Drop => None,
            Op::Patch(_) => self.patched,
        };
        (self.event, after)
    }
}

/// [`decide`] for a state of version `version`, keeping the value a `patch` leaves (a
/// `set` and a `drop` are compared without copying anything). `same_version`: `current` stands
/// at that version (or is absent); otherwise it is a value of an older version already
/// migrated to this one, and the event is a whole `set` of the value after `op` (or a
/// `drop`), never a `patch`: a chain of patches never mixes versions. A write that
/// leaves an older value as it is still appends its `set`, which records the version.
pub(crate) fn decide_versioned(
    scope: Scope,
    current: Option<&Value>,
    op: Op,
    version: u32,
    same_version: bool,
) -> Result<Option<Decided>, TooDeepResult> {
    let event = |op| Envelope {
        scope,
        op,
        state_version: version,
    };
    if !same_version && current.is_some() {
        let next = match op {
            Op::Set(v) => Some(v),
            Op::Drop => None,
            Op::Patch(p) => Op::Patch(p).apply(current),
        };
        let op = match next {
            Some(next) => {
                check_result(&next)?;
                Op::Set(next)
            }
            None => Op::Drop,
        };
        return Ok(Some(Decided {
            event: event(op),
            patched: None,
        }));
    }
    let patched = match &op {
        Op::Patch(_) => op.apply(current),
        Op::Set(_) | Op::Drop => None,
    };
    let next = match &op {
        Op::Set(v) => Some(v),
        Op::Drop => None,
        Op::Patch(_) => patched.as_ref(),
    };
    if crate::json::js_eq_opt(next, current) {
        return Ok(None);
    }
    if let Some(next) = next {
        check_result(next)?;
    }
    Ok(Some(Decided {
        event: event(op),
        patched,
    }))
}

/// Refuses a value this crate could not read back inside an event's `data`.
pub(crate) fn check_result(next: &Value) -> Result<(), TooDeepResult> {
    // Only the depth: the numbers a value inherits from the session pass (see `decide`).
    let (depth, _) = crate::json::depth_and_numbers(next);
    if depth >= crate::json::MAX_READ_DEPTH {
        return Err(TooDeepResult { depth });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, json};

    // A naive model of the rule, written from docs/spec.md §3 without the crate's
    // helpers: RFC 7396 by recursion, equality as JavaScript's `===` on parsed JSON
    // (numbers as doubles, objects as key sets).

    fn naive_merge(target: Option<&Value>, patch: &Value) -> Value {
        let Value::Object(p) = patch else {
            return patch.clone();
        };
        let mut out = match target {
            Some(Value::Object(t)) => t.clone(),
            _ => Map::new(),
        };
        for (k, v) in p {
            if v.is_null() {
                out.remove(k);
            } else {
                let merged = naive_merge(out.get(k), v);
                out.insert(k.clone(), merged);
            }
        }
        Value::Object(out)
    }

    fn naive_eq(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(a, b)| naive_eq(a, b))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .all(|(k, v)| y.get(k).is_some_and(|w| naive_eq(v, w)))
            }
            _ => a == b,
        }
    }

    fn naive_next(current: Option<&Value>, op: &Op) -> Option<Value> {
        match op {
            Op::Set(v) => Some(v.clone()),
            Op::Drop => None,
            Op::Patch(p) => Some(naive_merge(current.or(Some(&json!({}))), p)),
        }
    }

    fn naive_changes(current: Option<&Value>, op: &Op) -> bool {
        match (naive_next(current, op), current) {
            (None, None) => false,
            (Some(a), Some(b)) => !naive_eq(&a, b),
            _ => true,
        }
    }

    /// Small JSON values over few keys and numbers that are equal as doubles but not as
    /// text (`1`, `1.0`), so that equal and unequal values both come up often.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop_oneof![
                Just(json!(1)),
                Just(json!(1.0)),
                Just(json!(2)),
                Just(json!(-0.5))
            ],
            prop_oneof![Just(json!("a")), Just(json!(""))],
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![Just("x"), Just("y"), Just("z")],
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            value().prop_map(Op::Set),
            value().prop_map(Op::Patch),
            Just(Op::Drop),
        ]
    }

    fn scope() -> impl Strategy<Value = Scope> {
        prop_oneof![Just(Scope::Branch), Just(Scope::Session)]
    }

    proptest! {
        /// The event is appended exactly when the naive model says the value changes, and
        /// it is the op asked for, in the scope asked for.
        #[test]
        fn decide_appends_exactly_when_the_value_changes(
            current in prop::option::of(value()),
            op in op(),
            scope in scope(),
        ) {
            let changes = naive_changes(current.as_ref(), &op);
            let decided = decide(scope, current.as_ref(), op.clone());
            match decided {
                Ok(Some(env)) => {
                    prop_assert!(changes, "an event for a write that changes nothing");
                    prop_assert_eq!(env, Envelope::new(scope, op));
                }
                Ok(None) => prop_assert!(!changes, "no event for a write that changes the value"),
                Err(e) => prop_assert!(false, "a small value refused: {e:?}"),
            }
        }

        /// With versions: on a present value of an older version (already migrated to
        /// this one) the event is always appended, a whole `set` of the value after the
        /// op or a `drop`, never a `patch`; otherwise it is what [`decide`] decides. The
        /// event records the version either way.
        #[test]
        fn decide_versioned_never_patches_across_versions(
            current in prop::option::of(value()),
            op in op(),
            scope in scope(),
            version in 1u32..5,
            same_version in any::<bool>(),
        ) {
            let decided = decide_versioned(scope, current.as_ref(), op.clone(), version, same_version)
                .expect("a small value");
            if !same_version && current.is_some() {
                let event = decided.expect("always appended").event;
                prop_assert_eq!((event.scope, event.state_version), (scope, version));
                match (event.op, naive_next(current.as_ref(), &op)) {
                    (Op::Set(v), Some(want)) => prop_assert!(naive_eq(&v, &want), "{v:?} != {want:?}"),
                    (Op::Drop, None) => {}
                    (got, want) => prop_assert!(false, "{got:?} for the value {want:?}"),
                }
            } else {
                let plain = decide(scope, current.as_ref(), op.clone()).expect("a small value");
                let decided = decided.map(|d| {
                    // A patch keeps the value it leaves.
                    if let Op::Patch(_) = d.event.op {
                        assert_eq!(d.patched.as_ref(), d.event.op.apply(current.as_ref()).as_ref());
                    }
                    d.event
                });
                prop_assert_eq!(decided, plain.map(|e| Envelope { state_version: version, ..e }));
            }
        }

        /// Applying the decided event gives what the naive model gives.
        #[test]
        fn the_decided_event_leaves_the_naive_value(
            current in prop::option::of(value()),
            op in op(),
        ) {
            if let Ok(Some(env)) = decide(Scope::Branch, current.as_ref(), op.clone()) {
                let next = env.op.apply(current.as_ref());
                let want = naive_next(current.as_ref(), &op);
                prop_assert!(match (&next, &want) {
                    (Some(a), Some(b)) => naive_eq(a, b),
                    (None, None) => true,
                    _ => false,
                }, "{next:?} != {want:?}");
            }
        }
    }

    fn nested(n: usize) -> Value {
        let mut v = json!(0);
        for _ in 0..n {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn a_result_too_deep_to_read_back_is_refused_and_one_just_inside_is_not() {
        let limit = crate::json::MAX_READ_DEPTH;
        assert_eq!(
            decide(Scope::Session, None, Op::Set(nested(limit))),
            Err(TooDeepResult { depth: limit })
        );
        assert!(matches!(
            decide(Scope::Session, None, Op::Set(nested(limit - 1))),
            Ok(Some(_))
        ));
        // A patch on an inherited deep value that leaves it as deep as it was: unchanged.
        // (Built by hand: `json!` would serialize the nested value recursively.)
        let under_a = |v: Value| Value::Object(Map::from_iter([("a".to_owned(), v)]));
        let deep = under_a(nested(limit));
        assert_eq!(
            decide(
                Scope::Branch,
                Some(&deep),
                Op::Patch(under_a(nested(limit)))
            ),
            Ok(None)
        );
        // Dropping it is always possible.
        assert!(matches!(
            decide(Scope::Branch, Some(&deep), Op::Drop),
            Ok(Some(_))
        ));
    }

    #[test]
    fn null_is_a_value_and_absent_equals_only_absent() {
        assert!(matches!(
            decide(Scope::Branch, None, Op::Set(Value::Null)),
            Ok(Some(_))
        ));
        assert_eq!(decide(Scope::Branch, None, Op::Drop), Ok(None));
        assert_eq!(
            decide(Scope::Branch, Some(&Value::Null), Op::Set(Value::Null)),
            Ok(None)
        );
        // A patch of `{}` on an absent value leaves `{}`: a change.
        assert!(matches!(
            decide(Scope::Branch, None, Op::Patch(json!({}))),
            Ok(Some(_))
        ));
    }
}
