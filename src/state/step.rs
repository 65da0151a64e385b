//! The fold step (docs/spec.md §3): what one event does to the current value, and how the
//! projection stores the value after it.
//!
//! Every fold in the crate goes through [`apply`]: the memoized in-memory folds
//! ([`super::fold`]), the provenance walk, and the projection's catch-up, which also asks
//! [`step`] how to store the result and [`unfold`] to read it back. Pure: no database,
//! no I/O; the projection only moves the [`Stored`] form in and out of its rows.
//!
//! **Snapshots and deltas.** Storing the whole folded value after every event would make a
//! value grown by `patch` cost O(steps × size). So a `patch` event that continues an
//! earlier event of the same branch fold stores only its patch (a [`Stored::Delta`] on
//! that event) while the patches since the last snapshot, this one included, add up to no
//! more bytes than the value's own text; otherwise, and for every `set` and `drop`, it
//! stores the whole value ([`Stored::Snapshot`], or [`Stored::Absent`]). Storage is then
//! O(final size), and reading a value back applies patches totalling at most its size.
//! The texts are [`crate::json::to_string_exact`]: schema 3 databases hold exactly these
//! bytes, so this policy is part of the on-disk format.

use super::envelope::Op;
use serde_json::{Map, Value};

/// The value after applying `op` to `current`: a `set` replaces it, a `drop` makes it
/// absent, a `patch` merges into it by [`crate::json::merge_patch`] (which keeps the
/// order of the keys that stay; an absent value patches `{}`).
pub(crate) fn apply(op: &Op, current: Option<&Value>) -> Option<Value> {
    match op {
        Op::Set(v) => Some(crate::json::clone_value(v)),
        Op::Drop => None,
        Op::Patch(p) => {
            let mut doc = current
                .map(crate::json::clone_value)
                .unwrap_or_else(|| Value::Object(Map::new()));
            crate::json::merge_patch(&mut doc, p);
            Some(doc)
        }
    }
}

// Here, not in `envelope.rs`: the op is the envelope's, the step is this module's, and
// the envelope does not name the step.
impl Op {
    /// The value after applying this op to `current` (a patch by
    /// [`crate::json::merge_patch`], which keeps the order of the keys that stay). The
    /// fold step every fold of this crate takes.
    pub fn apply(&self, current: Option<&Value>) -> Option<Value> {
        apply(self, current)
    }
}

/// [`apply`] on a shared value, in place: the same result as
/// `*current = apply(op, current.as_deref()).map(Arc::new)`, but a `patch` merges into the
/// value itself when no one else holds it (it is copied only when shared), and a `set`
/// takes its value by move. For a fold that owns its envelopes and carries values down a
/// tree (the replay walk): a value grown by patches is then not copied at every step.
/// Values of any depth are copied and merged without overflowing the stack.
pub(crate) fn apply_shared(op: Op, current: &mut Option<std::sync::Arc<Value>>) {
    use std::sync::Arc;
    match op {
        Op::Set(v) => *current = Some(Arc::new(v)),
        Op::Drop => *current = None,
        Op::Patch(p) => {
            let doc = current.get_or_insert_with(|| Arc::new(Value::Object(Map::new())));
            // `Arc::make_mut` would copy with `Value::clone`, which recurses.
            if Arc::get_mut(doc).is_none() {
                *doc = Arc::new(crate::json::clone_value(doc));
            }
            if let Some(doc) = Arc::get_mut(doc) {
                crate::json::merge_patch(doc, &p);
            }
        }
    }
}

/// How the value after an event is stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum Stored {
    /// No value (after a `drop`, or before any event).
    #[default]
    Absent,
    /// The whole value, as JSON text.
    Snapshot(String),
    /// A merge patch (JSON text) on the value stored at event `base`; `chain` = the bytes
    /// of the patches since the last snapshot, this one included.
    Delta {
        /// The event whose value this patch applies to.
        base: i64,
        /// The patch.
        patch: String,
        /// Patch bytes since the last snapshot, this one included.
        chain: i64,
    },
}

impl Stored {
    /// The whole value (`None`: absent).
    pub(crate) fn snapshot(value: Option<&Value>) -> Stored {
        value.map_or(Stored::Absent, |v| {
            Stored::Snapshot(crate::json::to_string_exact(v))
        })
    }

    /// Patch bytes since the last snapshot (0 for a snapshot or an absence).
    pub(crate) fn chain(&self) -> i64 {
        match self {
            Stored::Delta { chain, .. } => *chain,
            Stored::Absent | Stored::Snapshot(_) => 0,
        }
    }
}

/// The event a branch step continues: the plugin's previous branch event on the path
/// (the only event a delta may be taken on) and its stored delta chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Prior {
    /// Its position (the projection's event index).
    pub event: i64,
    /// [`Stored::chain`] of its storage.
    pub chain: i64,
}

/// One event folded: the value after it and how to store that value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Step {
    /// The value after the event (`None`: absent).
    pub value: Option<Value>,
    /// Its storage.
    pub stored: Stored,
}

/// Folds `op` into `current` and decides the storage of the result. `prior` is the event
/// this step continues in a branch fold (`None`: the first event of this fold on the
/// path, or a session-scope fold, which always stores snapshots).
pub(crate) fn step(op: &Op, current: Option<&Value>, prior: Option<Prior>) -> Step {
    let value = apply(op, current);
    let stored = match (op, prior) {
        (Op::Patch(p), Some(prior)) => {
            let patch = crate::json::to_string_exact(p);
            let chain = prior.chain + patch.len() as i64;
            let text = value.as_ref().map(crate::json::to_string_exact);
            if chain <= text.as_ref().map_or(0, |t| t.len() as i64) {
                Stored::Delta {
                    base: prior.event,
                    patch,
                    chain,
                }
            } else {
                text.map_or(Stored::Absent, Stored::Snapshot)
            }
        }
        _ => Stored::snapshot(value.as_ref()),
    };
    Step { value, stored }
}

/// Why [`unfold`] could not give a value back.
#[derive(Debug)]
pub(crate) enum Unfold<E> {
    /// Reading another event's storage failed.
    Read(E),
    /// The stored form does not decode (what is wrong, for an error message).
    Corrupt(String),
}

/// The value stored as `at`: its snapshot, or the snapshot below it with the deltas
/// since applied in order (as [`apply`] applies a patch). `stored_at(event)` gives the
/// storage of another event (`None`: no such event, which makes the chain corrupt).
pub(crate) fn unfold<E>(
    at: Stored,
    mut stored_at: impl FnMut(i64) -> Result<Option<Stored>, E>,
) -> Result<Option<Value>, Unfold<E>> {
    let parse = |what: &str, text: &str| {
        crate::json::from_str(text).map_err(|e| Unfold::Corrupt(format!("{what}: {e}")))
    };
    let mut patches = Vec::new();
    let mut cur = at;
    let base = loop {
        match cur {
            Stored::Absent => break None,
            Stored::Snapshot(v) => break Some(v),
            Stored::Delta { base, patch, .. } => {
                patches.push(patch);
                cur = stored_at(base).map_err(Unfold::Read)?.ok_or_else(|| {
                    Unfold::Corrupt(format!("the base event {base} of a delta is missing"))
                })?;
            }
        }
    };
    let mut value = match base {
        Some(b) => parse("a stored value", &b)?,
        None if patches.is_empty() => return Ok(None),
        None => Value::Object(Map::new()),
    };
    // In place, without copying the value at every step.
    for p in patches.iter().rev() {
        crate::json::merge_patch(&mut value, &parse("a stored patch", p)?);
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn patch(v: Value) -> Op {
        Op::Patch(v)
    }

    /// Folds `ops` as one branch fold, event `i` continuing event `i - 1`, and returns
    /// each event's storage.
    fn fold_stored(ops: &[Op]) -> Vec<Stored> {
        let mut value = None;
        let mut prior = None;
        let mut out = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let s = step(op, value.as_ref(), prior);
            prior = Some(Prior {
                event: i as i64,
                chain: s.stored.chain(),
            });
            value = s.value;
            out.push(s.stored);
        }
        out
    }

    fn unfold_all(stored: &[Stored]) -> Vec<Option<Value>> {
        let by_event: HashMap<i64, Stored> = stored
            .iter()
            .enumerate()
            .map(|(i, s)| (i as i64, s.clone()))
            .collect();
        stored
            .iter()
            .map(|s| {
                unfold::<()>(s.clone(), |i| Ok(by_event.get(&i).cloned()))
                    .expect("the chain decodes")
            })
            .collect()
    }

    /// The in-place step gives what [`apply`] gives, on a value held elsewhere too (which
    /// it must leave alone) and on one it holds alone.
    #[test]
    fn apply_shared_is_apply_and_leaves_a_shared_value_alone() {
        use std::sync::Arc;
        let ops = [
            patch(json!({"a": 1, "b": {"c": [1, 2]}})),
            patch(json!({"b": {"c": null, "d": 1.0}, "e": "x"})),
            Op::Set(json!([1, {"k": null}])),
            patch(json!({"k": 1})),
            Op::Drop,
            patch(json!({"z": null})),
            Op::Set(json!(null)),
            patch(json!("not an object")),
        ];
        let mut expected: Option<Value> = None;
        let mut shared: Option<Arc<Value>> = None;
        for op in ops {
            let before = shared.clone();
            let before_text = before.as_deref().map(crate::json::to_string_exact);
            expected = apply(&op, expected.as_ref());
            apply_shared(op, &mut shared);
            assert_eq!(
                shared.as_deref().map(crate::json::to_string_exact),
                expected.as_ref().map(crate::json::to_string_exact)
            );
            // The copy held by `before` is unchanged.
            assert_eq!(
                before.as_deref().map(crate::json::to_string_exact),
                before_text
            );
        }
        let mut alone = Some(Arc::new(json!({"a": 1})));
        let at = alone.as_deref().map(std::ptr::from_ref);
        apply_shared(patch(json!({"b": 2})), &mut alone);
        // Held alone: merged in place, not copied.
        assert_eq!(alone.as_deref().map(std::ptr::from_ref), at);
        assert_eq!(alone.as_deref(), Some(&json!({"a": 1, "b": 2})));
    }

    #[test]
    fn apply_sets_drops_and_merges_into_an_absent_value_as_into_an_empty_object() {
        let cur = json!({"a": 1, "b": 2, "c": 3});
        assert_eq!(apply(&Op::Set(json!(null)), Some(&cur)), Some(json!(null)));
        assert_eq!(apply(&Op::Drop, Some(&cur)), None);
        assert_eq!(apply(&patch(json!({"x": 1})), None), Some(json!({"x": 1})));
        let patched = apply(&patch(json!({"a": null, "d": 4})), Some(&cur)).expect("a value");
        // Keys that stay keep their order; a removed key leaves no hole.
        assert_eq!(
            crate::json::to_string_exact(&patched),
            r#"{"b":2,"c":3,"d":4}"#
        );
    }

    #[test]
    fn a_set_a_drop_and_a_first_patch_store_the_whole_value() {
        let prior = Some(Prior { event: 7, chain: 0 });
        let big = json!({"items": [1, 2, 3, 4, 5, 6, 7, 8]});
        assert_eq!(
            step(&Op::Set(json!({"a": 1.0})), Some(&big), prior).stored,
            // The exact text: `1.0` stays `1.0`.
            Stored::Snapshot(r#"{"a":1.0}"#.into())
        );
        assert_eq!(step(&Op::Drop, Some(&big), prior).stored, Stored::Absent);
        assert_eq!(
            step(&patch(json!({"n": 1})), Some(&big), None).stored,
            Stored::Snapshot(r#"{"items":[1,2,3,4,5,6,7,8],"n":1}"#.into())
        );
    }

    /// The threshold: a delta while the chain of patch bytes is at most the value's own
    /// length, a snapshot once it would exceed it.
    #[test]
    fn a_patch_is_a_delta_while_the_chain_is_at_most_the_value_length() {
        let cur = json!({"a": "0123456789"});
        let p = json!({"b": 1}); // `{"b":1}`: 7 bytes
        let value_len = r#"{"a":"0123456789","b":1}"#.len() as i64; // 24
        let at = |chain| {
            step(
                &patch(p.clone()),
                Some(&cur),
                Some(Prior { event: 3, chain }),
            )
            .stored
        };
        assert_eq!(
            at(value_len - 7),
            Stored::Delta {
                base: 3,
                patch: r#"{"b":1}"#.into(),
                chain: value_len,
            }
        );
        assert_eq!(
            at(value_len - 6),
            Stored::Snapshot(r#"{"a":"0123456789","b":1}"#.into())
        );
        // A patch whose text is longer than the value it makes is never a delta.
        assert_eq!(
            step(
                &patch(json!({"gone": null, "x": 1})),
                None,
                Some(Prior { event: 0, chain: 0 })
            )
            .stored,
            Stored::Snapshot(r#"{"x":1}"#.into())
        );
    }

    #[test]
    fn a_value_patched_in_place_takes_a_snapshot_once_the_deltas_outgrow_it() {
        let mut ops = vec![Op::Set(json!({"log": "x".repeat(20)}))];
        for i in 0..8 {
            ops.push(patch(json!({ "n": i })));
        }
        let stored = fold_stored(&ops);
        let kinds: Vec<&str> = stored
            .iter()
            .map(|s| match s {
                Stored::Absent => "absent",
                Stored::Snapshot(_) => "snapshot",
                Stored::Delta { .. } => "delta",
            })
            .collect();
        // Each patch (`{"n":0}`) is 7 bytes, every value after one 36: five deltas fit.
        assert_eq!(
            kinds,
            [
                "snapshot", "delta", "delta", "delta", "delta", "delta", "snapshot", "delta",
                "delta"
            ]
        );
        let chains: Vec<i64> = stored.iter().map(Stored::chain).collect();
        assert_eq!(chains, [0, 7, 14, 21, 28, 35, 0, 7, 14]);
        // Each delta is on the event before it.
        for (i, s) in stored.iter().enumerate() {
            if let Stored::Delta { base, .. } = s {
                assert_eq!(*base, i as i64 - 1);
            }
        }
    }

    /// What the policy is for: a value grown by patches stores O(its final size) bytes,
    /// not a full copy per step.
    #[test]
    fn a_value_grown_by_patches_stores_a_small_multiple_of_its_final_size() {
        let steps = 500;
        let ops: Vec<Op> = (0..steps)
            .map(|i| patch(json!({ format!("k{i}"): i })))
            .collect();
        let stored = fold_stored(&ops);
        let bytes: usize = stored
            .iter()
            .map(|s| match s {
                Stored::Absent => 0,
                Stored::Snapshot(v) => v.len(),
                Stored::Delta { patch, .. } => patch.len(),
            })
            .sum();
        let last = unfold_all(&stored).pop().flatten().expect("a value");
        let final_len = crate::json::to_string_exact(&last).len();
        // A snapshot per step would be about `steps / 2` times the final size.
        assert!(
            bytes <= 2 * final_len,
            "{bytes} bytes stored for a {final_len}-byte value"
        );
        let snapshots = stored
            .iter()
            .filter(|s| matches!(s, Stored::Snapshot(_)))
            .count();
        // The first patch (nothing to take a delta on), then each time the deltas since
        // the last snapshot outgrow the value.
        assert_eq!(snapshots, 3);
    }

    #[test]
    fn unfold_gives_back_the_folded_value_at_every_event() {
        let ops = vec![
            patch(json!({"a": 1})),
            patch(json!({"b": [1, 2]})),
            Op::Drop,
            patch(json!({"c": "long enough to be a delta on an absent value"})),
            patch(json!({"a": 2})),
            Op::Set(json!(null)),
            patch(json!({"d": 1})),
        ];
        let stored = fold_stored(&ops);
        // A delta on the absence a drop left (a patch of `{}`) is possible.
        assert!(matches!(stored[3], Stored::Delta { base: 2, .. }));
        let mut value = None;
        let expected: Vec<Option<Value>> = ops
            .iter()
            .map(|op| {
                value = apply(op, value.as_ref());
                value.clone()
            })
            .collect();
        assert_eq!(unfold_all(&stored), expected);
    }

    #[test]
    fn stored_forms_that_do_not_decode_are_corrupt_and_read_errors_pass_through() {
        let delta = |base, p: &str| Stored::Delta {
            base,
            patch: p.into(),
            chain: p.len() as i64,
        };
        let snap = |_| Ok::<_, ()>(Some(Stored::Snapshot(r#"{"a":1}"#.into())));
        assert!(matches!(
            unfold(delta(1, r#"{"b":"#), snap),
            Err(Unfold::Corrupt(d)) if d.starts_with("a stored patch")
        ));
        assert!(matches!(
            unfold(delta(1, "{}"), |_| Ok::<_, ()>(None)),
            Err(Unfold::Corrupt(d)) if d == "the base event 1 of a delta is missing"
        ));
        assert!(matches!(
            unfold(delta(1, "{}"), |_| Ok::<_, ()>(Some(Stored::Snapshot("{".into())))),
            Err(Unfold::Corrupt(d)) if d.starts_with("a stored value")
        ));
        assert!(matches!(
            unfold(delta(1, "{}"), |_| Err::<Option<Stored>, _>("no database")),
            Err(Unfold::Read("no database"))
        ));
        assert_eq!(unfold::<()>(Stored::Absent, |_| Ok(None)).ok(), Some(None));
    }
}
