//! One conformance suite for every backend of the persistence seam: the seam's
//! rules, state on a stored session (write, patch, drop, `--at` forks, history, branch
//! key, the projection's cold read), the fork-inheritance property against the naive
//! model of `tests/fork_inheritance.rs`, the differential test against Pi's own folds on
//! imported Pi-made sessions, and — for backends with a URL — the CLI's `--store`,
//! `import` and `export`, with the exports opened by the real Pi.
//!
//! `conformance!(name, factory)` instantiates it for one backend (a
//! [`common::backend::TestBackend`] factory); `conformance!(name, factory, cli)` adds the
//! command-line tests.
#![expect(clippy::unwrap_used)]

use crate::common;
use common::backend::TestBackend;
use serde_json::{Value, json};
use session_state::On;
use session_state::format::{MAX_SESSION_ID_BYTES, read_header};
use session_state::*;
use session_state::{LogError, StateError};
use std::ops::ControlFlow;

macro_rules! conformance {
    ($name:ident, $factory:expr) => {
        conformance!(@mod $name, $factory, {});
    };
    ($name:ident, $factory:expr, cli) => {
        conformance!(@mod $name, $factory, { cli_tests!(); });
    };
    (@mod $name:ident, $factory:expr, { $($extra:tt)* }) => {
        mod $name {
            use super::suite;
            fn backend() -> crate::common::backend::TestBackend {
                $factory
            }
            #[test]
            fn create_is_lazy() {
                suite::create_is_lazy(backend())
            }
            #[test]
            fn sequences_are_contiguous_and_checked() {
                suite::sequences_are_contiguous_and_checked(backend())
            }
            #[test]
            fn refusals_name_the_event_and_write_nothing() {
                suite::refusals_name_the_event_and_write_nothing(backend())
            }
            #[test]
            fn unknown_sessions_are_not_found() {
                suite::unknown_sessions_are_not_found(backend())
            }
            #[test]
            fn list_reads_headers_only() {
                suite::list_reads_headers_only(backend())
            }
            #[test]
            fn load_closes_an_interrupted_turn_durably() {
                suite::load_closes_an_interrupted_turn_durably(backend())
            }
            #[test]
            fn load_refuses_corruption() {
                suite::load_refuses_corruption(backend())
            }
            #[test]
            fn appends_survive_a_new_handle() {
                suite::appends_survive_a_new_handle(backend())
            }
            #[test]
            fn complete_lines_fork_and_are_checked() {
                suite::complete_lines_fork_and_are_checked(backend())
            }
            #[test]
            fn appends_outside_the_turns_go_only_after_the_entry_named() {
                suite::appends_outside_the_turns_go_only_after_the_entry_named(backend())
            }
            #[test]
            fn a_write_on_rows_behind_the_store_decides_again() {
                suite::a_write_on_rows_behind_the_store_decides_again(backend())
            }
            #[test]
            fn state_reads_and_writes() {
                suite::state_reads_and_writes(backend())
            }
            #[test]
            fn state_forks_history_and_branch_key() {
                suite::state_forks_history_and_branch_key(backend())
            }
            #[test]
            fn the_cache_follows_other_writers_and_is_never_ahead() {
                suite::the_cache_follows_other_writers_and_is_never_ahead(backend())
            }
            #[test]
            fn import_is_idempotent_and_export_gives_the_lines_back() {
                suite::import_is_idempotent_and_export_gives_the_lines_back(backend())
            }
            #[test]
            fn a_state_write_on_a_mid_turn_session_adds_only_its_event() {
                suite::a_state_write_on_a_mid_turn_session_adds_only_its_event(backend())
            }
            #[test]
            fn a_header_only_import_is_stored_and_listed() {
                suite::a_header_only_import_is_stored_and_listed(backend())
            }
            #[test]
            fn an_import_keeps_the_header_line_byte_for_byte() {
                suite::an_import_keeps_the_header_line_byte_for_byte(backend())
            }
            #[test]
            fn a_crlf_file_imports_as_the_reader_reads_it() {
                suite::a_crlf_file_imports_as_the_reader_reads_it(backend())
            }
            #[test]
            fn an_id_too_long_for_a_file_name_is_refused_everywhere() {
                suite::an_id_too_long_for_a_file_name_is_refused_everywhere(backend())
            }
            #[test]
            fn create_refuses_headers_no_backend_stores() {
                suite::create_refuses_headers_no_backend_stores(backend())
            }
            #[test]
            fn concurrent_appends_at_one_seq_admit_exactly_one() {
                suite::concurrent_appends_at_one_seq_admit_exactly_one(backend())
            }
            #[test]
            fn lost_races_back_off_then_give_up_saying_a_rerun_is_safe() {
                suite::lost_races_back_off_then_give_up_saying_a_rerun_is_safe(backend())
            }
            #[test]
            fn an_append_of_unknown_outcome_is_resolved_by_reading_the_store_back() {
                suite::an_append_of_unknown_outcome_is_resolved_by_reading_the_store_back(backend())
            }
            #[test]
            fn an_unavailable_store_is_retried_within_its_window_then_refused_with_the_cause() {
                suite::an_unavailable_store_is_retried_within_its_window_then_refused_with_the_cause(backend())
            }
            #[test]
            fn a_line_that_repeats_a_member_imports_and_folds_as_its_last_occurrence() {
                suite::a_line_that_repeats_a_member_imports_and_folds_as_its_last_occurrence(backend())
            }
            #[test]
            fn folds_equal_pis_on_imported_pi_sessions() {
                suite::folds_equal_pis_on_imported_pi_sessions(backend())
            }
            mod fork_inheritance {
                use proptest::prelude::*;
                use proptest_state_machine::prop_state_machine;
                type Sut = super::super::model::Sut<Factory>;
                prop_state_machine! {
                    #![proptest_config(ProptestConfig {
                        cases: 12,
                        max_shrink_iters: 500,
                        .. ProptestConfig::default()
                    })]
                    #[test]
                    fn folds_match_the_naive_model(sequential 1..30 => Sut);
                }
                pub(crate) struct Factory;
                impl super::super::model::Factory for Factory {
                    fn make() -> crate::common::backend::TestBackend {
                        super::backend()
                    }
                }
            }
            $($extra)*
        }
    };
}

/// The command-line half, for backends with a URL (inside the backend's module).
macro_rules! cli_tests {
    () => {
        #[test]
        fn cli_import_export_round_trip() {
            super::cli::import_export_round_trip(backend())
        }
        #[test]
        fn cli_state_commands_with_a_store() {
            super::cli::state_commands_with_a_store(backend())
        }
        #[test]
        fn cli_file_commands_run_on_the_stored_session() {
            super::cli::file_commands_run_on_the_stored_session(backend())
        }
        #[test]
        fn cli_exports_open_in_the_real_pi_with_the_original_entries() {
            super::cli::exports_open_in_the_real_pi_with_the_original_entries(backend())
        }
        #[test]
        fn cli_concurrent_writer_processes_lose_nothing() {
            super::cli::concurrent_writer_processes_lose_nothing(backend())
        }
    };
}

// One line per backend.
conformance!(file, crate::common::backend::file());
conformance!(sqlite, crate::common::backend::sqlite(), cli);
#[cfg(feature = "postgres")]
conformance!(postgres, crate::common::backend::postgres(), cli);

fn user(text: &str) -> Value {
    json!({"type": "message", "message": {"role": "user", "content": text, "timestamp": 0}})
}

fn header(id: &str) -> Header {
    Header::new(id, "/home/me/project").with_timestamp("2026-01-05T10:00:00.000Z")
}

/// A session with `n` user messages; returns its id.
fn seeded(b: &TestBackend, id: &str, n: usize) -> String {
    b.store.create(header(id)).unwrap();
    let events: Vec<Value> = (0..n).map(|i| user(&format!("m{i}"))).collect();
    assert_eq!(b.store.append(id, 0, &events).unwrap(), n as u64);
    id.to_owned()
}

fn lines_of(b: &TestBackend, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    b.store
        .backend()
        .read_lines(id, 0, &mut |_, l| {
            out.push(l.to_owned());
            ControlFlow::Continue(())
        })
        .unwrap();
    out
}

pub(crate) mod suite {
    use super::*;

    pub fn create_is_lazy(b: TestBackend) {
        b.store.create(header("lazy")).unwrap();
        assert!(
            b.store.list().unwrap().is_empty(),
            "created, never appended"
        );
        assert!(matches!(
            b.store.load("lazy"),
            Err(Error::Log(LogError::Rule(
                RuleError::NotMaterialized { .. }
            )))
        ));
        assert!(matches!(
            b.store.create(header("lazy")),
            Err(Error::Log(LogError::Rule(RuleError::AlreadyCreated { .. })))
        ));
        // An empty append stores nothing.
        assert_eq!(b.store.append("lazy", 0, &[]).unwrap(), 0);
        assert!(b.store.list().unwrap().is_empty());
        // Another handle never sees it.
        assert!((b.reopen)().list().unwrap().is_empty());
        assert!(matches!(
            (b.reopen)().load("lazy"),
            Err(Error::Store(StoreError::NotFound { .. }))
        ));
        assert_eq!(b.store.append("lazy", 0, &[user("hi")]).unwrap(), 1);
        let listed = b.store.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0], header("lazy"));
        assert!(matches!(
            (b.reopen)().create(header("lazy")),
            Err(Error::Store(StoreError::AlreadyExists { .. }))
        ));
        assert!(matches!(
            b.store.create(Header::new("a/b", "/p")),
            Err(Error::Log(LogError::Rule(RuleError::InvalidSessionId(_))))
        ));
    }

    pub fn sequences_are_contiguous_and_checked(b: TestBackend) {
        let id = seeded(&b, "seq", 1);
        for bad in [0u64, 2, 7] {
            match b.store.append(&id, bad, &[user("x")]) {
                Err(Error::Store(StoreError::SequenceMismatch {
                    expected: 1, got, ..
                })) => assert_eq!(got, bad),
                other => panic!("append at {bad}: {other:?}"),
            }
        }
        assert_eq!(
            b.store
                .append(&id, 1, &[user("a"), user("b"), user("c")])
                .unwrap(),
            4
        );
        let loaded = b.store.load(&id).unwrap();
        assert_eq!(loaded.next_seq(), 4);
        // Each event is a child of the one before: one chain.
        let log = loaded.log();
        let ids: Vec<&str> = log.entries().map(|e| e.id()).collect();
        for w in ids.windows(2) {
            assert_eq!(log.entry(w[1]).unwrap().parent_id(), Some(w[0]));
        }
        assert_eq!(loaded.event(3).unwrap()["message"]["content"], json!("c"));
        assert!(matches!(
            loaded.event(4),
            Err(LogError::Rule(RuleError::NoSuchEvent { next_seq: 4, .. }))
        ));
        let mut seqs = Vec::new();
        let next = b
            .store
            .backend()
            .read_lines(&id, 2, &mut |s, _| {
                seqs.push(s);
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!((seqs, next), (vec![2, 3], 4));
    }

    pub fn refusals_name_the_event_and_write_nothing(b: TestBackend) {
        let id = seeded(&b, "refuse", 1);
        let cases = [
            (json!(5), "is not a JSON object"),
            (json!({"no": "type"}), "has no string `type`"),
            (json!({"type": "session"}), "has type `session`"),
            (json!({"type": "custom", "id": "x"}), "has a `id` field"),
            (
                json!({"type": "custom", "parentId": "x"}),
                "has a `parentId` field",
            ),
            (json!({"type": "custom", "timestamp": "x"}), "`timestamp`"),
        ];
        for (bad, why) in cases {
            match b.store.append(&id, 1, &[user("ok"), bad.clone()]) {
                Err(
                    e @ Error::Log(LogError::Rule(RuleError::InvalidEvent {
                        index: 1, seq: 2, ..
                    })),
                ) => {
                    let shown = e.to_string();
                    assert!(
                        shown.contains("event 1 (seq 2)") && shown.contains(why),
                        "{bad}: {shown}"
                    );
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        let mut map = std::collections::HashMap::new();
        map.insert((1, 2), "non-string key");
        match b.store.append_serialized(&id, 1, &[map]) {
            Err(
                e @ Error::Log(LogError::Rule(RuleError::EventNotSerializable {
                    index: 0,
                    seq: 1,
                    ..
                })),
            ) => assert!(e.to_string().contains("event 0 (seq 1)"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.store.load(&id).unwrap().next_seq(), 1, "nothing written");
    }

    pub fn unknown_sessions_are_not_found(b: TestBackend) {
        seeded(&b, "known", 1);
        assert!(matches!(
            b.store.load("nope"),
            Err(Error::Store(StoreError::NotFound { .. }))
        ));
        assert!(matches!(
            b.store.append("nope", 0, &[user("x")]),
            Err(Error::Store(StoreError::NotFound { .. }))
        ));
        assert!(matches!(
            b.store
                .backend()
                .read_lines("nope", 0, &mut |_, _| ControlFlow::Continue(())),
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            b.store.backend().header_line("nope"),
            Err(StoreError::NotFound { .. })
        ));
    }

    pub fn list_reads_headers_only(b: TestBackend) {
        seeded(&b, "b-second", 2);
        b.store
            .create(
                Header::new("a-first", "/other")
                    .with_timestamp("2025-01-01T00:00:00.000Z")
                    .with_parent_session("b-second"),
            )
            .unwrap();
        b.store.append("a-first", 0, &[user("x")]).unwrap();
        // A damaged entry does not keep its session from the list: only headers are read.
        (b.corrupt)("b-second", 1, "{ damaged");
        let listed = b.store.list().unwrap();
        let ids: Vec<&str> = listed.iter().map(|h| h.id()).collect();
        assert_eq!(ids, ["a-first", "b-second"], "ordered by timestamp");
        assert_eq!(listed[0].parent_session(), Some("b-second"));
        assert_eq!(listed[0].cwd(), Some("/other"));
    }

    pub fn load_closes_an_interrupted_turn_durably(b: TestBackend) {
        let id = "turn";
        b.store.create(header(id)).unwrap();
        let calls = json!({"type": "message", "message": {"role": "assistant",
            "stopReason": "toolUse", "timestamp": 0, "content": [
            {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {}},
            {"type": "toolCall", "id": "call_2", "name": "grep", "arguments": {}}]}});
        let answered = json!({"type": "message", "message": {"role": "toolResult",
            "toolCallId": "call_1", "toolName": "read", "content": [], "isError": false,
            "timestamp": 0}});
        b.store
            .append(id, 0, &[user("go"), calls, answered])
            .unwrap();
        let loaded = b.store.load(id).unwrap();
        assert_eq!(loaded.closed_tool_calls(), ["call_2"]);
        assert_eq!(loaded.next_seq(), 4);
        let closing = loaded.event(3).unwrap();
        assert_eq!(closing["message"]["toolCallId"], json!("call_2"));
        assert_eq!(closing["message"]["isError"], json!(true));
        assert_eq!(
            closing["message"]["content"],
            json!([{"type": "text", "text": session_state::format::INTERRUPTED_TOOL_RESULT}])
        );
        // Durable, and closed once: another handle reads it and closes nothing, and
        // this one too.
        let again = (b.reopen)().load(id).unwrap();
        assert!(again.closed_tool_calls().is_empty());
        assert_eq!(again.next_seq(), 4);
        assert!(b.store.load(id).unwrap().closed_tool_calls().is_empty());
        assert_eq!(lines_of(&b, id).len(), 4, "one closing result, stored once");
        // The numbering goes on after it.
        assert_eq!(b.store.append(id, 4, &[user("go on")]).unwrap(), 5);
        // A finished turn is left alone.
        b.store.create(header("finished")).unwrap();
        let failed = json!({"type": "message", "message": {"role": "assistant",
            "stopReason": "error", "timestamp": 0, "content": [
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {}}]}});
        b.store
            .append("finished", 0, &[user("hi"), failed, user("again")])
            .unwrap();
        assert!(
            b.store
                .load("finished")
                .unwrap()
                .closed_tool_calls()
                .is_empty()
        );
        assert_eq!(lines_of(&b, "finished").len(), 3);
    }

    pub fn load_refuses_corruption(b: TestBackend) {
        let id = seeded(&b, "bad", 3);
        (b.corrupt)(&id, 1, "{\"type\":\"message\",\"id\":");
        let err = b.store.load(&id).unwrap_err();
        // The strict reader's refusal, named where it is (the damaged line 3, or the
        // entry after it whose parent it hid).
        assert!(
            matches!(
                err,
                Error::Log(LogError::Open(OpenError::Invalid(
                    InvalidLog::Corrupt { .. }
                ))) | Error::Log(LogError::Open(OpenError::Invalid(
                    InvalidLog::InvalidEntry { .. }
                ))) | Error::Log(LogError::Append(AppendError::TrailingGarbage { .. }))
                    | Error::Log(LogError::Open(OpenError::Invalid(
                        InvalidLog::DanglingParent { .. }
                    )))
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("line 3") || text.contains("line 4"), "{text}");
        assert!(b.store.list().unwrap().iter().any(|h| h.id() == id));
    }

    pub fn appends_survive_a_new_handle(b: TestBackend) {
        let id = seeded(&b, "durable", 2);
        let before = lines_of(&b, &id);
        drop(b.store);
        let store = (b.reopen)();
        let mut after = Vec::new();
        store
            .backend()
            .read_lines(&id, 0, &mut |_, l| {
                after.push(l.to_owned());
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(before, after);
        assert_eq!(store.load(&id).unwrap().next_seq(), 2);
    }

    pub fn complete_lines_fork_and_are_checked(b: TestBackend) {
        let id = seeded(&b, "lines", 2);
        let first = b
            .store
            .load(&id)
            .unwrap()
            .log()
            .entries()
            .next()
            .unwrap()
            .id()
            .to_owned();
        let fork = format!(
            r#"{{"type":"custom","customType":"x","data":{{"k":1.50}},"id":"f0000001","parentId":"{first}","timestamp":"2026-01-05T10:00:09.000Z"}}"#
        );
        assert_eq!(
            b.store
                .append_lines(&id, 2, std::slice::from_ref(&fork))
                .unwrap(),
            3
        );
        // Kept byte for byte (`1.50` is not reprinted).
        assert_eq!(lines_of(&b, &id)[2], fork);
        let log = b.store.load(&id).unwrap().into_log();
        assert_eq!(log.children(&first).unwrap().len(), 2, "a fork");
        let bad = [
            (fork.clone(), "the id is taken"),
            (
                fork.replace("f0000001", "f0000002")
                    .replace(&first, "nothere"),
                "no such parent",
            ),
            ("not json".to_owned(), "not an entry"),
            (
                r#"{"type":"session","id":"s","parentId":null,"timestamp":"t"}"#.to_owned(),
                "session",
            ),
        ];
        for (line, why) in bad {
            assert!(
                matches!(
                    b.store.append_lines(&id, 3, &[line]),
                    Err(Error::Log(LogError::Rule(RuleError::InvalidEvent {
                        index: 0,
                        seq: 3,
                        ..
                    })))
                ),
                "{why}"
            );
        }
        assert!(matches!(
            b.store
                .append_lines(&id, 2, &[fork.replace("f0000001", "f0000003")]),
            Err(Error::Store(StoreError::SequenceMismatch {
                expected: 3,
                ..
            }))
        ));
        assert_eq!(b.store.load(&id).unwrap().next_seq(), 3);
    }

    pub fn appends_outside_the_turns_go_only_after_the_entry_named(b: TestBackend) {
        let id = seeded(&b, "outside", 2);
        let last: Value = serde_json::from_str(&lines_of(&b, &id)[1]).unwrap();
        let last = last["id"].as_str().unwrap().to_owned();
        let line = format!(
            r#"{{"type":"custom","customType":"x","data":{{}},"id":"f0000009","parentId":"{last}","timestamp":"2026-01-05T10:00:09.000Z"}}"#
        );
        let store = b.store.backend();
        let lines = std::slice::from_ref(&line);
        for (seq, after) in [
            (2, Some("nothere")),
            (2, None),
            (1, Some(last.as_str())),
            (3, Some(last.as_str())),
        ] {
            assert_eq!(
                store
                    .append_lines_outside_turns(&id, seq, after, lines)
                    .unwrap(),
                None,
                "{seq} {after:?}"
            );
        }
        assert_eq!(
            lines_of(&b, &id).len(),
            2,
            "a refused append writes nothing"
        );
        assert_eq!(
            store
                .append_lines_outside_turns(&id, 2, Some(&last), lines)
                .unwrap(),
            Some(3)
        );
        assert_eq!(lines_of(&b, &id)[2], line);
    }

    /// A write's first attempt decides on its projection's rows as they stand. Another
    /// projection's writes put them behind the store: a value they already hold is
    /// written all the same, and another one goes in after what the other wrote, also at
    /// an entry only the other's rows hold.
    pub fn a_write_on_rows_behind_the_store_decides_again(b: TestBackend) {
        let id = seeded(&b, "behind", 1);
        let s = StoredSession::new(b.store.backend(), &b.key, &id);
        let here = projection(&b)
            .state::<String>("role", Scope::Branch)
            .unwrap();
        let there = Store::at(b.scratch.join("elsewhere.sqlite"))
            .unwrap()
            .state::<String>("role", Scope::Branch)
            .unwrap();
        let a = here.write(On::stored(&s, None), &"a".to_owned()).unwrap();
        assert!(a.is_some());
        assert!(
            there
                .write(On::stored(&s, None), &"b".to_owned())
                .unwrap()
                .is_some()
        );
        // The rows here still say "a"; the store says "b".
        let again = here.write(On::stored(&s, None), &"a".to_owned()).unwrap();
        assert!(
            again.is_some(),
            "the value at the leaf is b: a is written again"
        );
        assert_eq!(
            there.read(On::stored(&s, None)).unwrap(),
            Some("a".to_owned())
        );
        let c = there
            .write(On::stored(&s, None), &"c".to_owned())
            .unwrap()
            .unwrap();
        // At an entry the rows here do not hold yet: they catch up first.
        let d = here
            .write(On::stored(&s, Some(&c)), &"d".to_owned())
            .unwrap()
            .unwrap();
        assert_eq!(
            there.read(On::stored(&s, None)).unwrap(),
            Some("d".to_owned())
        );
        let stored = lines_of(&b, &id);
        assert_eq!(stored.len(), 1 + 5, "every write stored once");
        let last: Value = serde_json::from_str(stored.last().unwrap()).unwrap();
        let before: Value = serde_json::from_str(&stored[stored.len() - 2]).unwrap();
        assert_eq!(last["id"], d.as_str());
        assert_eq!(last["parentId"], before["id"], "d follows c");
    }

    fn projection(b: &TestBackend) -> Store {
        Store::at(b.scratch.join("states.sqlite")).unwrap()
    }

    pub fn state_reads_and_writes(b: TestBackend) {
        let id = seeded(&b, "state", 1);
        let store = projection(&b);
        let s = StoredSession::new(b.store.backend(), &b.key, &id);
        let role = store.state::<Value>("role", Scope::Branch).unwrap();
        assert_eq!(role.read(On::stored(&s, None)).unwrap(), None);
        let w = role
            .write(On::stored(&s, None), &json!({"name": "rev"}))
            .unwrap();
        assert!(w.is_some());
        assert_eq!(
            role.write(On::stored(&s, None), &json!({"name": "rev"}))
                .unwrap(),
            None,
            "unchanged"
        );
        assert_eq!(
            role.read(On::stored(&s, None)).unwrap(),
            Some(json!({"name": "rev"}))
        );
        role.patch(On::stored(&s, None), &json!({"model": "fast"}))
            .unwrap()
            .unwrap();
        assert_eq!(
            role.read(On::stored(&s, None)).unwrap(),
            Some(json!({"name": "rev", "model": "fast"}))
        );
        let counter = store.state::<i64>("counter", Scope::Session).unwrap();
        counter.write(On::stored(&s, None), &-1).unwrap().unwrap();
        assert_eq!(counter.read(On::stored(&s, None)).unwrap(), Some(-1));
        role.drop(On::stored(&s, None)).unwrap().unwrap();
        assert_eq!(role.drop(On::stored(&s, None)).unwrap(), None);
        assert_eq!(role.read(On::stored(&s, None)).unwrap(), None);
        // Every write is one stored entry, on the store: a new handle folds the same.
        let log = (b.reopen)().load(&id).unwrap().into_log();
        assert_eq!(log.len(), 5);
        assert_eq!(role.read(&log).unwrap(), None);
        assert_eq!(
            role.read_at(&log, w.as_deref().unwrap()).unwrap(),
            Some(json!({"name": "rev"}))
        );
        assert_eq!(counter.read(&log).unwrap(), Some(-1));
        // The projection answers from its rows: a second read reads nothing new.
        role.read(On::stored(&s, None)).unwrap();
        assert_eq!(store.last_catch_up().unwrap().entries_added, 0);
        // Refused before anything is stored: an integer Pi's JavaScript would not read back.
        assert!(matches!(
            role.write(On::stored(&s, None), &json!(9007199254740993u64)),
            Err(Error::State(StateError::UnrepresentableValue { .. }))
        ));
        assert_eq!((b.reopen)().load(&id).unwrap().next_seq(), 5);
    }

    pub fn state_forks_history_and_branch_key(b: TestBackend) {
        let id = seeded(&b, "forks", 2);
        let store = projection(&b);
        let s = StoredSession::new(b.store.backend(), &b.key, &id);
        let role = store.state::<String>("role", Scope::Branch).unwrap();
        let a = role
            .write(On::stored(&s, None), &"a".into())
            .unwrap()
            .unwrap();
        let tip = role
            .write(On::stored(&s, None), &"b".into())
            .unwrap()
            .unwrap();
        // A fork at `a`: its child sees `a`'s value, then its own.
        let fork = role
            .write(On::stored(&s, Some(&a)), &"c".into())
            .unwrap()
            .unwrap();
        let log = s.read_log(ReadMode::Strict).unwrap();
        assert_eq!(log.entry(&fork).unwrap().parent_id(), Some(a.as_str()));
        assert_eq!(
            role.read(On::stored(&s, Some(&fork))).unwrap().as_deref(),
            Some("c")
        );
        assert_eq!(
            role.read(On::stored(&s, Some(&tip))).unwrap().as_deref(),
            Some("b"),
            "siblings never see each other"
        );
        assert_eq!(
            role.read(On::stored(&s, Some(&a))).unwrap().as_deref(),
            Some("a")
        );
        // The leaf without --at is the last entry in storage order: the fork.
        assert_eq!(
            role.read(On::stored(&s, None)).unwrap().as_deref(),
            Some("c")
        );
        // An unchanged write at a fork point appends nothing.
        assert_eq!(
            role.write(On::stored(&s, Some(&a)), &"a".into()).unwrap(),
            None
        );
        assert!(matches!(
            role.write(On::stored(&s, Some("nothere")), &"z".into()),
            Err(Error::Log(LogError::UnknownEntry(UnknownEntry { .. })))
        ));
        // History and branch key on the loaded log.
        let mut log = s.read_log(ReadMode::Strict).unwrap();
        let history: Vec<String> = role
            .history(&log)
            .unwrap()
            .iter()
            .map(|h| h.entry_id.clone())
            .collect();
        assert_eq!(history, [a.clone(), fork.clone()]);
        assert_eq!(
            log.leaf_id().and_then(|l| log.branch_key_of(l).ok()),
            Some(fork.as_str())
        );
        log.navigate(&tip).unwrap();
        assert_eq!(
            log.leaf_id().and_then(|l| log.branch_key_of(l).ok()),
            Some(tip.as_str())
        );
        let history: Vec<String> = role
            .history(&log)
            .unwrap()
            .iter()
            .map(|h| h.entry_id.clone())
            .collect();
        assert_eq!(history, [a, tip]);
    }

    pub fn the_cache_follows_other_writers_and_is_never_ahead(b: TestBackend) {
        let id = seeded(&b, "cache", 1);
        let store = projection(&b);
        let s = StoredSession::new(b.store.backend(), &b.key, &id);
        let role = store.state::<i64>("role", Scope::Branch).unwrap();
        role.write(On::stored(&s, None), &1).unwrap().unwrap();
        assert_eq!(role.read(On::stored(&s, None)).unwrap(), Some(1));
        // Another machine writes through its own handle and its own cache.
        let other = (b.reopen)();
        let elsewhere = b.scratch.join("elsewhere");
        let theirs = Store::at(elsewhere.join("states.sqlite")).unwrap();
        let s2 = StoredSession::new(other.backend(), &b.key, &id);
        theirs
            .state::<i64>("role", Scope::Branch)
            .unwrap()
            .write(On::stored(&s2, None), &2)
            .unwrap()
            .unwrap();
        // Our cold read sees it, reading only the new entry.
        assert_eq!(role.read(On::stored(&s, None)).unwrap(), Some(2));
        assert_eq!(store.last_catch_up().unwrap().entries_added, 1);
        // No local copy of the session: the scratch directory holds the projection only.
        let mut files: Vec<String> = std::fs::read_dir(&b.scratch)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "elsewhere")
            .collect();
        files.sort();
        assert!(
            files.iter().all(|f| f.starts_with("states.sqlite")),
            "{files:?}"
        );
        // A store that no longer holds what the rows folded (its last line replaced behind
        // the projection's back) is read again from the store.
        let last = lines_of(&b, &id).len() as u64 - 1;
        let replaced = lines_of(&b, &id)[last as usize].replace(r#""value":2"#, r#""value":3"#);
        (b.corrupt)(&id, last, &replaced);
        assert_eq!(role.read(On::stored(&s, None)).unwrap(), Some(3));
        assert!(store.last_catch_up().unwrap().rebuilt);
    }

    pub fn import_is_idempotent_and_export_gives_the_lines_back(b: TestBackend) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pi.jsonl");
        common::pi::generate(1, &file, "state", Some(7));
        let original = std::fs::read(&file).unwrap();
        let r = b.store.import_file(&file).unwrap();
        assert_eq!(r.already_stored, 0);
        assert!(r.appended > 0);
        let again = (b.reopen)().import_file(&file).unwrap();
        assert_eq!(
            (again.already_stored, again.appended),
            (r.appended, 0),
            "changes nothing"
        );
        let mut out = Vec::new();
        b.store.export(&r.session_id, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            String::from_utf8(original.clone()).unwrap()
        );
        // Pi appends; the next import adds only that.
        common::pi::append(1, &file, 2, None);
        let grown = b.store.import_file(&file).unwrap();
        assert_eq!((grown.already_stored, grown.appended), (r.appended, 2));
        // A file that disagrees with the store is refused, nothing imported.
        let mut text = String::from_utf8(std::fs::read(&file).unwrap()).unwrap();
        text = text.replacen("\"content\":", "\"content\" :", 1);
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, text).unwrap();
        let err = b.store.import_file(&other).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, Error::ImportConflict { .. })
                && text.contains(&format!(
                    "already holds session {} with other content",
                    r.session_id
                ))
                && text.contains("entry with sequence number"),
            "{text}"
        );
        assert_eq!(
            b.store.load(&r.session_id).unwrap().next_seq(),
            r.appended + 2
        );
    }

    fn tool_call(id: &str) -> Value {
        json!({"type": "message", "message": {"role": "assistant", "stopReason": "toolUse",
            "timestamp": 0, "content": [{"type": "toolCall", "id": id, "name": "bash",
            "arguments": {"command": "sleep 600"}}]}})
    }

    /// A live agent in the middle of a tool call: its last assistant message called a
    /// tool that has not returned. A state read adds nothing; a state write adds its own
    /// event and nothing else (no invented tool result).
    pub fn a_state_write_on_a_mid_turn_session_adds_only_its_event(b: TestBackend) {
        let id = "midturn";
        b.store.create(header(id)).unwrap();
        b.store
            .append(id, 0, &[user("run it"), tool_call("call_1")])
            .unwrap();
        let before = lines_of(&b, id);
        let store = projection(&b);
        let s = StoredSession::new(b.store.backend(), &b.key, id);
        let role = store.state::<Value>("role", Scope::Branch).unwrap();
        assert_eq!(role.read(On::stored(&s, None)).unwrap(), None);
        assert_eq!(lines_of(&b, id), before, "a read adds nothing");
        let w = role
            .write(On::stored(&s, None), &json!("busy"))
            .unwrap()
            .unwrap();
        let after = lines_of(&b, id);
        assert_eq!(after.len(), before.len() + 1, "{after:#?}");
        assert_eq!(after[..before.len()], before[..]);
        let event: Value = serde_json::from_str(&after[before.len()]).unwrap();
        let call: Value = serde_json::from_str(&before[1]).unwrap();
        assert_eq!(event["id"], json!(w));
        assert_eq!(event["customType"], json!("session-state/role"));
        assert_eq!(event["parentId"], call["id"], "a child of the tool call");
        assert_eq!(
            role.read(On::stored(&s, None)).unwrap(),
            Some(json!("busy"))
        );
        assert_eq!(lines_of(&b, id).len(), before.len() + 1);
    }

    fn header_line(id: &str, extra: &str) -> String {
        format!(
            r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-05T10:00:00.000Z","cwd":"/home/me/project"{extra}}}"#
        )
    }

    fn exported(b: &TestBackend, id: &str) -> Vec<u8> {
        let mut out = Vec::new();
        b.store.export(id, &mut out).unwrap();
        out
    }

    pub fn a_header_only_import_is_stored_and_listed(b: TestBackend) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("empty-session.jsonl");
        let text = format!("{}\n", header_line("hdronly", ""));
        std::fs::write(&file, &text).unwrap();
        let r = b.store.import_file(&file).unwrap();
        assert_eq!((r.session_id.as_str(), r.appended), ("hdronly", 0));
        let ids: Vec<String> = b
            .store
            .list()
            .unwrap()
            .iter()
            .map(|h| h.id().to_owned())
            .collect();
        assert_eq!(ids, ["hdronly"], "stored and listed");
        assert_eq!(exported(&b, "hdronly"), text.as_bytes());
        assert_eq!(
            (b.reopen)().import_file(&file).unwrap().appended,
            0,
            "again: unchanged"
        );
    }

    pub fn an_import_keeps_the_header_line_byte_for_byte(b: TestBackend) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.jsonl");
        let head = header_line(
            "hdrbytes",
            r#","parentSession":"/x/y.jsonl","futureField":{"k":[1,2.50]}"#,
        );
        let entry = r#"{"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2026-01-05T10:00:01.000Z","message":{"role":"user","content":"hi","timestamp":0}}"#;
        let text = format!("{head}\n{entry}\n");
        std::fs::write(&file, &text).unwrap();
        b.store.import_file(&file).unwrap();
        assert_eq!(
            String::from_utf8(exported(&b, "hdrbytes")).unwrap(),
            text,
            "unknown fields and number text kept"
        );
        // The same file again changes nothing; a header that differs is refused.
        assert_eq!(b.store.import_file(&file).unwrap().appended, 0);
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, text.replace("2.50", "2.5")).unwrap();
        let err = b.store.import_file(&other).unwrap_err().to_string();
        assert!(
            err.contains("already holds session hdrbytes with other content"),
            "{err}"
        );
        assert!(err.contains("header"), "{err}");
    }

    pub fn a_crlf_file_imports_as_the_reader_reads_it(b: TestBackend) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("crlf.jsonl");
        let lines = [
            header_line("crlf", ""),
            r#"{"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2026-01-05T10:00:01.000Z","message":{"role":"user","content":"hi","timestamp":0}}"#.to_owned(),
            r#"{"type":"custom","customType":"session-state/role","data":{"v":1,"scope":"branch","op":"set","value":"r"},"id":"b1b2c3d4","parentId":"a1b2c3d4","timestamp":"2026-01-05T10:00:02.000Z"}"#.to_owned(),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\r\n")).collect();
        std::fs::write(&file, &text).unwrap();
        let file_log = SessionLog::open(&file).unwrap();
        assert_eq!(file_log.len(), 2, "the reader reads CRLF lines");
        let r = b.store.import_file(&file).unwrap();
        assert_eq!(r.appended, 2);
        let log = b.store.load("crlf").unwrap().into_log();
        let ids: Vec<&str> = log.entries().map(|e| e.id()).collect();
        assert_eq!(ids, ["a1b2c3d4", "b1b2c3d4"]);
        assert_eq!(exported(&b, "crlf"), text.as_bytes(), "byte for byte");
        let s = StoredSession::new(b.store.backend(), &b.key, "crlf");
        let role = projection(&b)
            .state::<String>("role", Scope::Branch)
            .unwrap();
        assert_eq!(
            role.read(On::stored(&s, None)).unwrap().as_deref(),
            Some("r")
        );
        assert_eq!(
            b.store.import_file(&file).unwrap().appended,
            0,
            "again: unchanged"
        );
    }

    /// A session id is part of Pi's file name `<timestamp>_<id>.jsonl` (created under a
    /// temporary name 43 bytes longer), which holds 255 bytes: an id of
    /// `MAX_SESSION_ID_BYTES` (128) bytes works on every backend, a longer one is
    /// refused when a session is created or imported, and nothing is stored.
    pub fn an_id_too_long_for_a_file_name_is_refused_everywhere(b: TestBackend) {
        let longest = "x".repeat(MAX_SESSION_ID_BYTES);
        let id = seeded(&b, &longest, 1);
        let store = projection(&b);
        let s = StoredSession::new(b.store.backend(), &b.key, &id);
        let role = store.state::<i64>("role", Scope::Branch).unwrap();
        role.write(On::stored(&s, None), &1).unwrap().unwrap();
        assert_eq!(role.read(On::stored(&s, None)).unwrap(), Some(1));
        assert_eq!(b.store.load(&id).unwrap().next_seq(), 2);
        let too_long = "y".repeat(300);
        let err = b.store.create(header(&too_long)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Log(LogError::Rule(RuleError::InvalidSessionId(_)))
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("128"), "{err}");
        let just_over = "z".repeat(MAX_SESSION_ID_BYTES + 1);
        assert!(matches!(
            b.store.create(header(&just_over)),
            Err(Error::Log(LogError::Rule(RuleError::InvalidSessionId(_))))
        ));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("long.jsonl");
        std::fs::write(&file, format!("{}\n", header_line(&too_long, ""))).unwrap();
        let err = b.store.import_file(&file).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Log(LogError::Rule(RuleError::InvalidSessionId(_)))
            ),
            "{err:?}"
        );
        let ids: Vec<String> = b
            .store
            .list()
            .unwrap()
            .iter()
            .map(|h| h.id().to_owned())
            .collect();
        assert_eq!(ids, [longest], "nothing else stored");
    }

    pub fn create_refuses_headers_no_backend_stores(b: TestBackend) {
        let with = |edit: &dyn Fn(&mut Value)| -> Header {
            let mut v = serde_json::to_value(header("h")).unwrap();
            edit(&mut v);
            serde_json::from_value(v).unwrap()
        };
        for bad in ["", ".", "..", "a/b", "a\\b", "a\nb", "a\0b"] {
            let err = b.store.create(header(bad)).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Log(LogError::Rule(RuleError::InvalidSessionId(_)))
                ),
                "{bad:?}: {err:?}"
            );
        }
        let cases: [(Header, &str); 3] = [
            (with(&|h| h["version"] = json!(2)), "version"),
            (with(&|h| h["cwd"] = Value::Null), "cwd"),
            (with(&|h| h["timestamp"] = Value::Null), "cwd"),
        ];
        for (h, why) in cases {
            let err = b.store.create(h).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Log(LogError::Rule(RuleError::UnsupportedNewVersion { .. }))
                        | Error::Log(LogError::Rule(RuleError::UnlocatableHeader { .. }))
                ) && err.to_string().contains(why),
                "{err}"
            );
        }
        assert!(b.store.list().unwrap().is_empty(), "nothing stored");
    }

    pub fn concurrent_appends_at_one_seq_admit_exactly_one(b: TestBackend) {
        let id = seeded(&b, "race1", 1);
        let handles: Vec<Sessions> = (0..4).map(|_| (b.reopen)()).collect();
        let won: Vec<bool> = std::thread::scope(|s| {
            let threads: Vec<_> = handles
                .iter()
                .enumerate()
                .map(|(n, h)| {
                    let id = &id;
                    s.spawn(move || h.append(id, 1, &[user(&format!("w{n}"))]).is_ok())
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
        assert_eq!(lines_of(&b, &id).len(), 2);
    }

    /// A backend wrapped at the seam, for the faults of a store under load: the real
    /// backend underneath, each fault a real event (another writer's append first, a
    /// connection lost after or before the commit, a store unavailable for a while).
    struct Faulty {
        inner: Box<dyn SessionStore>,
        fault: Fault,
        calls: std::sync::Mutex<u32>,
    }

    #[derive(Clone, Copy)]
    enum Fault {
        /// Before each append, another writer appends at the same sequence number.
        Racer,
        /// The append commits, then the connection breaks before the answer.
        LostAfterCommit,
        /// The connection breaks before the append reaches the store (the first time).
        LostBeforeCommit,
        /// Unavailable for the first `n` calls of any primitive.
        Unavailable(u32),
    }

    impl Faulty {
        /// What a broken socket gives.
        fn gone(&self) -> BackendError {
            BackendError::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset by peer",
            ))
        }
        fn unavailable(&self) -> Result<(), StoreError> {
            if let Fault::Unavailable(n) = self.fault {
                let mut calls = self.calls.lock().unwrap();
                *calls += 1;
                if *calls <= n {
                    return Err(StoreError::Unavailable {
                        store: self.inner.describe(),
                        action: "connecting".into(),
                        source: self.gone(),
                    });
                }
            }
            Ok(())
        }
    }

    impl SessionStore for Faulty {
        fn create(&self, h: &Header, l: &str, lines: &[String]) -> Result<u64, StoreError> {
            self.unavailable()?;
            self.inner.create(h, l, lines)
        }
        fn list(&self) -> Result<Vec<(String, String)>, StoreError> {
            self.unavailable()?;
            self.inner.list()
        }
        fn header_line(&self, id: &str) -> Result<String, StoreError> {
            self.unavailable()?;
            self.inner.header_line(id)
        }
        fn read_lines(
            &self,
            id: &str,
            from: u64,
            visit: &mut (dyn FnMut(u64, &str) -> std::ops::ControlFlow<()> + '_),
        ) -> Result<u64, StoreError> {
            self.unavailable()?;
            self.inner.read_lines(id, from, visit)
        }
        fn append_lines(&self, id: &str, first: u64, lines: &[String]) -> Result<u64, StoreError> {
            self.unavailable()?;
            let broken = |first_seq| StoreError::Indeterminate {
                store: self.inner.describe(),
                session_id: id.into(),
                first_seq,
                source: self.gone(),
            };
            match self.fault {
                Fault::Racer => {
                    let theirs = format!(
                        r#"{{"type":"custom","customType":"racer","data":{{"at":{first}}},"id":"race{first:04}","parentId":null,"timestamp":"2026-01-05T10:00:00.000Z"}}"#
                    );
                    self.inner.append_lines(id, first, &[theirs])?;
                    self.inner.append_lines(id, first, lines)
                }
                Fault::LostAfterCommit => {
                    self.inner.append_lines(id, first, lines)?;
                    Err(broken(first))
                }
                Fault::LostBeforeCommit => {
                    let mut calls = self.calls.lock().unwrap();
                    *calls += 1;
                    if *calls == 1 {
                        return Err(broken(first));
                    }
                    drop(calls);
                    self.inner.append_lines(id, first, lines)
                }
                Fault::Unavailable(_) => self.inner.append_lines(id, first, lines),
            }
        }
        fn describe(&self) -> String {
            self.inner.describe()
        }
        fn retry_window(&self) -> std::time::Duration {
            std::time::Duration::from_millis(300)
        }
    }

    /// A second handle on the backend's storage, wrapped.
    fn faulty(b: &TestBackend, fault: Fault) -> Faulty {
        Faulty {
            inner: (b.reopen)().into_backend(),
            fault,
            calls: std::sync::Mutex::new(0),
        }
    }

    pub fn lost_races_back_off_then_give_up_saying_a_rerun_is_safe(b: TestBackend) {
        let id = seeded(&b, "contended", 1);
        let store = projection(&b);
        let racer = faulty(&b, Fault::Racer);
        let s = StoredSession::new(&racer, &b.key, &id);
        let role = store.state::<i64>("role", Scope::Branch).unwrap();
        let started = std::time::Instant::now();
        let err = role.write(On::stored(&s, None), &1).unwrap_err();
        let took = started.elapsed();
        match &err {
            Error::Contended {
                session_id,
                attempts,
            } => {
                assert_eq!((session_id.as_str(), *attempts), (id.as_str(), 32));
            }
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("gave up after 32 attempts") && text.contains("running it again is safe"),
            "{text}"
        );
        // Each attempt lost to a real writer: 32 of theirs are stored, none of ours.
        let stored = lines_of(&b, &id);
        assert_eq!(stored.len(), 1 + 32);
        assert!(stored.iter().all(|l| !l.contains("session-state/role")));
        // It backed off: 30 pauses of up to 50 ms, random (the first attempt, outside the
        // turns, is tried again at once); not a hot loop, not minutes.
        assert!(took < std::time::Duration::from_secs(30), "{took:?}");
        // Without the racer the same write goes through on the first attempt.
        let plain = StoredSession::new(b.store.backend(), &b.key, &id);
        assert!(role.write(On::stored(&plain, None), &1).unwrap().is_some());
        assert_eq!(role.read(On::stored(&plain, None)).unwrap(), Some(1));
    }

    pub fn an_append_of_unknown_outcome_is_resolved_by_reading_the_store_back(b: TestBackend) {
        let store = projection(&b);
        let role = store.state::<i64>("role", Scope::Branch).unwrap();
        for (n, fault) in [Fault::LostAfterCommit, Fault::LostBeforeCommit]
            .into_iter()
            .enumerate()
        {
            let id = seeded(&b, &format!("unknown{n}"), 1);
            let f = faulty(&b, fault);
            let s = StoredSession::new(&f, &b.key, &id);
            // Acknowledged once, stored once: committed (read back) or sent again.
            let w = role.write(On::stored(&s, None), &7).unwrap().unwrap();
            let stored = lines_of(&b, &id);
            assert_eq!(stored.len(), 2, "{stored:#?}");
            assert!(
                stored[1].contains(&format!("\"id\":\"{w}\"")),
                "{}",
                stored[1]
            );
            assert_eq!(role.read(On::stored(&s, None)).unwrap(), Some(7));
        }
        // A host's append through the crate's rules is resolved the same way.
        let id = seeded(&b, "unknown-host", 1);
        let hosts = Sessions::new(faulty(&b, Fault::LostAfterCommit));
        assert_eq!(hosts.append(&id, 1, &[user("x")]).unwrap(), 2);
        assert_eq!(lines_of(&b, &id).len(), 2);
    }

    pub fn an_unavailable_store_is_retried_within_its_window_then_refused_with_the_cause(
        b: TestBackend,
    ) {
        let id = seeded(&b, "flaky", 1);
        let store = projection(&b);
        let role = store.state::<i64>("role", Scope::Branch).unwrap();
        // Back within the window: the write goes through, once.
        let f = faulty(&b, Fault::Unavailable(3));
        let s = StoredSession::new(&f, &b.key, &id);
        assert!(role.write(On::stored(&s, None), &1).unwrap().is_some());
        assert_eq!(lines_of(&b, &id).len(), 2);
        // Away for longer: refused with the cause, after retries, nothing written.
        let f = faulty(&b, Fault::Unavailable(u32::MAX));
        let s = StoredSession::new(&f, &b.key, &id);
        let err = role.write(On::stored(&s, None), &2).unwrap_err();
        match &err {
            Error::StoreUnavailable {
                attempts, source, ..
            } => {
                assert!(*attempts > 1, "{err}");
                assert!(
                    matches!(**source, StoreError::Unavailable { .. }),
                    "{err:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("trying again is safe"), "{err}");
        assert!(matches!(
            role.read(On::stored(&s, None)),
            Err(Error::StoreUnavailable { .. })
        ));
        assert_eq!(lines_of(&b, &id).len(), 2);
    }

    /// `fixtures/edge/repeated-members.jsonl` (every member the reader looks at given twice,
    /// the last occurrence right, as Pi's `JSON.parse` reads it; `tests/interop.rs` checks
    /// it against the real Pi): imported byte for byte, and every plugin folds the last
    /// occurrence, in memory and cold; a write goes on from its leaf.
    pub fn a_line_that_repeats_a_member_imports_and_folds_as_its_last_occurrence(b: TestBackend) {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/edge/repeated-members.jsonl");
        let r = b.store.import_file(&file).unwrap();
        assert_eq!((r.session_id.as_str(), r.appended), ("s-repeat", 7));
        assert_eq!(
            exported(&b, "s-repeat"),
            std::fs::read(&file).unwrap(),
            "kept byte for byte"
        );
        let store = projection(&b);
        let s = StoredSession::new(b.store.backend(), &b.key, "s-repeat");
        let log = s.read_log(ReadMode::Strict).unwrap();
        assert_eq!(log.leaf_id(), Some("a0000007"));
        for (plugin, value) in [
            ("role", json!("second")),
            ("todo", json!([1])),
            ("note", json!("m")),
        ] {
            let st = store.state::<Value>(plugin, Scope::Branch).unwrap();
            assert_eq!(
                st.read_value(&log).unwrap(),
                Some(value.clone()),
                "{plugin}"
            );
            assert_eq!(
                st.read(On::stored(&s, None)).unwrap(),
                Some(value),
                "{plugin} cold"
            );
        }
        let role = store.state::<Value>("role", Scope::Branch).unwrap();
        role.write(On::stored(&s, None), &json!("third"))
            .unwrap()
            .unwrap();
        assert_eq!(
            role.read(On::stored(&s, None)).unwrap(),
            Some(json!("third"))
        );
    }

    pub fn folds_equal_pis_on_imported_pi_sessions(b: TestBackend) {
        let store = projection(&b);
        let mut compared = 0;
        for major in common::pi::MAJORS {
            for seed in [1u64, 2] {
                let dir = tempfile::tempdir().unwrap();
                let file = dir.path().join("state.jsonl");
                common::pi::generate(major, &file, "state", Some(seed));
                let dump = common::pi::dump_copy(major, &file);
                let id = match b.store.import_file(&file) {
                    Ok(r) => r.session_id,
                    // Pi 0.x writes the same session ids per seed as 1.x.
                    Err(e) => panic!("pi{major} seed {seed}: {e}"),
                };
                let s = StoredSession::new(b.store.backend(), &b.key, &id);
                let log = s.read_log(ReadMode::Strict).unwrap();
                let by_id: std::collections::HashMap<&str, &Value> = dump
                    .entries
                    .iter()
                    .map(|e| (e["id"].as_str().unwrap(), e))
                    .collect();
                for plugin in ["alpha", "beta"] {
                    for scope in [Scope::Branch, Scope::Session] {
                        let st = store.state::<Value>(plugin, scope).unwrap();
                        for (entry, branch) in &dump.branches {
                            let branch = branch.as_ref().unwrap();
                            let expect = match scope {
                                Scope::Branch => common::reference::fold(
                                    branch.iter().map(|i| by_id[i.as_str()]),
                                    plugin,
                                    "branch",
                                ),
                                Scope::Session => {
                                    common::reference::fold(&dump.entries, plugin, "session")
                                }
                            };
                            assert_eq!(
                                st.read_at(&log, entry).unwrap(),
                                expect,
                                "pi{major} {seed} {plugin} {scope} {entry}"
                            );
                            assert_eq!(
                                st.read(On::stored(&s, Some(entry))).unwrap(),
                                expect,
                                "cold read"
                            );
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert!(compared > 100, "{compared}");
    }
}

/// The fork-inheritance property on a backend: the naive model of
/// `tests/fork_inheritance.rs` (new roots aside: a stored write is a child of an entry),
/// driven through the store (messages as complete lines at the leaf, state through
/// `write_stored` at the leaf), compared at every entry in a loaded log and, at the
/// leaf and the newest entry, through the projection's cold read.
pub(crate) mod model {
    use super::*;
    use crate::fork_inheritance::{MOp, Model, ModelEntry, PLUGINS, Reference, SCOPES, Transition};
    use proptest::prelude::*;
    use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};
    use std::marker::PhantomData;

    pub(crate) trait Factory {
        fn make() -> TestBackend;
    }

    pub(crate) struct Stored;

    impl ReferenceStateMachine for Stored {
        type State = Model;
        type Transition = Transition;
        fn init_state() -> BoxedStrategy<Model> {
            // One message first: a stored session exists once appended to.
            Just(Model {
                entries: vec![ModelEntry {
                    parent: None,
                    event: None,
                }],
                leaf: Some(0),
                last_appended: false,
            })
            .boxed()
        }
        fn transitions(state: &Model) -> BoxedStrategy<Transition> {
            Reference::transitions(state)
        }
        fn preconditions(state: &Model, t: &Transition) -> bool {
            !matches!(t, Transition::ResetLeaf) && Reference::preconditions(state, t)
        }
        fn apply(state: Model, t: &Transition) -> Model {
            Reference::apply(state, t)
        }
    }

    pub(crate) struct Harness {
        b: TestBackend,
        store: Store,
        ids: Vec<String>,
        leaf: usize,
    }

    pub(crate) struct Sut<F>(PhantomData<F>);

    const ID: &str = "prop";

    impl<F: Factory> StateMachineTest for Sut<F> {
        type SystemUnderTest = Harness;
        type Reference = Stored;

        fn init_test(_: &Model) -> Harness {
            let b = F::make();
            b.store.create(header(ID)).unwrap();
            b.store.append(ID, 0, &[user("first")]).unwrap();
            let first = b
                .store
                .load(ID)
                .unwrap()
                .log()
                .entries()
                .next()
                .unwrap()
                .id()
                .to_owned();
            let store = Store::at(b.scratch.join("states.sqlite")).unwrap();
            Harness {
                b,
                store,
                ids: vec![first],
                leaf: 0,
            }
        }

        fn apply(mut h: Harness, model: &Model, t: Transition) -> Harness {
            let s = StoredSession::new(h.b.store.backend(), &h.b.key, ID);
            let leaf = h.ids[h.leaf].clone();
            match t {
                Transition::Message => {
                    let seq = h.ids.len() as u64;
                    let id = format!("m{seq:07}");
                    let line = format!(
                        r#"{{"type":"message","id":"{id}","parentId":"{leaf}","timestamp":"2026-01-05T10:00:00.000Z","message":{{"role":"user","content":"m","timestamp":0}}}}"#
                    );
                    h.b.store.append_lines(ID, seq, &[line]).unwrap();
                    h.ids.push(id);
                    h.leaf = h.ids.len() - 1;
                }
                Transition::State { plugin, scope, op } => {
                    let st = h.store.state::<Value>(PLUGINS[plugin], scope).unwrap();
                    let r = match op {
                        MOp::Set(v) => st.write(On::stored(&s, Some(&leaf)), &v),
                        MOp::Patch(p) => st.patch(On::stored(&s, Some(&leaf)), &p),
                        MOp::Drop => st.drop(On::stored(&s, Some(&leaf))),
                    }
                    .unwrap();
                    assert_eq!(r.is_some(), model.last_appended);
                    if let Some(id) = r {
                        h.ids.push(id);
                        h.leaf = h.ids.len() - 1;
                    }
                }
                Transition::Navigate(i) => h.leaf = i,
                Transition::ResetLeaf => unreachable!("excluded by the preconditions"),
                Transition::Reopen => h.leaf = h.ids.len() - 1,
            }
            assert_eq!(h.ids.len(), model.entries.len());
            h
        }

        fn check_invariants(h: &Harness, model: &Model) {
            assert_eq!(Some(h.leaf), model.leaf);
            let log = (h.b.reopen)().load(ID).unwrap().into_log();
            let stored: Vec<&str> = log.entries().map(|e| e.id()).collect();
            assert_eq!(stored, h.ids.iter().map(String::as_str).collect::<Vec<_>>());
            let s = StoredSession::new(h.b.store.backend(), &h.b.key, ID);
            for (plugin, name) in PLUGINS.iter().enumerate() {
                for scope in SCOPES {
                    let st = h.store.state::<Value>(*name, scope).unwrap();
                    for (i, id) in h.ids.iter().enumerate() {
                        assert_eq!(
                            st.read_at(&log, id).unwrap(),
                            model.value(plugin, scope, Some(i)),
                            "{name} {scope} at #{i}"
                        );
                    }
                    for i in [h.leaf, h.ids.len() - 1] {
                        assert_eq!(
                            st.read(On::stored(&s, Some(&h.ids[i]))).unwrap(),
                            model.value(plugin, scope, Some(i)),
                            "cold read: {name} {scope} at #{i}"
                        );
                    }
                }
            }
        }
    }
}

/// The command line with a store.
pub(crate) mod cli {
    use super::*;
    use std::path::Path;
    use std::process::Output;

    fn run(b: &TestBackend, args: &[&str]) -> Output {
        common::cli()
            .args(args)
            .args(["--store", b.url.as_deref().unwrap()])
            .env("PI_CODING_AGENT_DIR", b.scratch.join("agent"))
            .output()
            .unwrap()
    }

    fn ok(out: &Output) -> String {
        assert!(
            out.status.success(),
            "exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout.clone()).unwrap()
    }

    fn pi_file(dir: &Path, major: u8) -> std::path::PathBuf {
        let file = dir.join(format!("pi{major}.jsonl"));
        common::pi::generate(major, &file, "state", Some(3 + u64::from(major)));
        file
    }

    pub fn import_export_round_trip(b: TestBackend) {
        let dir = tempfile::tempdir().unwrap();
        let file = pi_file(dir.path(), 1);
        let f = file.to_str().unwrap();
        let id = ok(&run(&b, &["import", f])).trim().to_owned();
        assert_eq!(id, read_header(&file, 1 << 16).unwrap().id());
        let db_before = lines_of(&b, &id);
        assert_eq!(
            ok(&run(&b, &["import", f])).trim(),
            id,
            "twice: the same id"
        );
        assert_eq!(lines_of(&b, &id), db_before, "and nothing changed");
        let out = dir.path().join("out.jsonl");
        ok(&run(
            &b,
            &["export", &id, "--output", out.to_str().unwrap()],
        ));
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&file).unwrap());
        // Without --output, on stdout; an existing --output is never replaced.
        assert_eq!(
            ok(&run(&b, &["export", &id])).as_bytes(),
            std::fs::read(&file).unwrap()
        );
        std::fs::write(&out, "mine").unwrap();
        let refused = run(&b, &["export", &id, "--output", out.to_str().unwrap()]);
        assert_eq!(refused.status.code(), Some(2));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
        // import and export need a store.
        let no_store = common::cli().args(["import", f]).output().unwrap();
        assert_eq!(no_store.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&no_store.stderr).contains("SESSION_STATE_STORE"));
        // An unknown session is an error naming it.
        let missing = run(&b, &["export", "nope"]);
        assert_eq!(missing.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&missing.stderr).contains("nope"));
    }

    pub fn state_commands_with_a_store(b: TestBackend) {
        let id = seeded(&b, "cli-state", 2);
        let db = b.scratch.join("states.sqlite");
        let db = db.to_str().unwrap();
        let w = ok(&run(
            &b,
            &[
                "write",
                &id,
                "--plugin",
                "role",
                "--value",
                r#"{"n":1}"#,
                "--db",
                db,
            ],
        ));
        let w = w.trim();
        assert_eq!(w.len(), 8);
        assert_eq!(
            ok(&run(&b, &["read", &id, "--plugin", "role", "--db", db])),
            "{\"n\":1}\n"
        );
        ok(&run(
            &b,
            &[
                "patch",
                &id,
                "--plugin",
                "role",
                "--merge",
                r#"{"m":2}"#,
                "--db",
                db,
            ],
        ));
        assert_eq!(
            ok(&run(&b, &["read", &id, "--plugin", "role", "--db", db])),
            "{\"n\":1,\"m\":2}\n"
        );
        // --at: reads fold up to it; a write there forks.
        assert_eq!(
            ok(&run(
                &b,
                &["read", &id, "--plugin", "role", "--at", w, "--db", db]
            )),
            "{\"n\":1}\n"
        );
        let fork = ok(&run(
            &b,
            &[
                "write", &id, "--plugin", "role", "--value", "-1", "--at", w, "--db", db,
            ],
        ));
        let log = b.store.load(&id).unwrap().into_log();
        assert_eq!(log.entry(fork.trim()).unwrap().parent_id(), Some(w));
        assert_eq!(log.children(w).unwrap().len(), 2);
        ok(&run(&b, &["drop", &id, "--plugin", "role", "--db", db]));
        let absent = run(&b, &["read", &id, "--plugin", "role", "--db", db]);
        assert_eq!((absent.status.code(), absent.stdout.len()), (Some(1), 0));
        // The environment variable names the store too.
        let via_env = common::cli()
            .args(["read", &id, "--plugin", "role", "--at", w, "--db", db])
            .env("SESSION_STATE_STORE", b.url.as_deref().unwrap())
            .output()
            .unwrap();
        assert_eq!(ok(&via_env), "{\"n\":1}\n");
        let listed = ok(&run(&b, &["list", "--json"]));
        let listed: Value = serde_json::from_str(&listed).unwrap();
        assert_eq!(listed["sessions"][0]["id"], json!(id));
        let bad = run(&b, &["read", "no-such", "--plugin", "role", "--db", db]);
        assert_eq!(bad.status.code(), Some(2));
        let unknown = common::cli()
            .args([
                "read",
                &id,
                "--plugin",
                "role",
                "--store",
                "postgres://me:s3cret@127.0.0.1:9/db",
            ])
            .output()
            .unwrap();
        assert_eq!(unknown.status.code(), Some(2));
        let text = String::from_utf8_lossy(&unknown.stderr);
        assert!(!text.contains("s3cret") && text.contains("***"), "{text}");
        // A --db that is another program's database: the projection opens beside the
        // store's connection, and its refusal is still the command's error; neither the
        // file nor the stored session is touched.
        let foreign = b.scratch.join("foreign.sqlite");
        let other = rusqlite::Connection::open(&foreign).unwrap();
        other
            .execute_batch(
                "CREATE TABLE users(id INTEGER PRIMARY KEY); INSERT INTO users VALUES (1);",
            )
            .unwrap();
        drop(other);
        let bytes = std::fs::read(&foreign).unwrap();
        let stored = lines_of(&b, &id).len();
        let args = ["write", &id, "--plugin", "role", "--value", "7", "--db"];
        let refused = run(&b, &[&args[..], &[foreign.to_str().unwrap()]].concat());
        assert_eq!(refused.status.code(), Some(2));
        let text = String::from_utf8_lossy(&refused.stderr);
        assert!(
            text.contains("users") && text.contains("foreign.sqlite"),
            "{text}"
        );
        assert_eq!(
            std::fs::read(&foreign).unwrap(),
            bytes,
            "left byte-identical"
        );
        assert_eq!(lines_of(&b, &id).len(), stored, "nothing appended");
    }

    pub fn file_commands_run_on_the_stored_session(b: TestBackend) {
        let dir = tempfile::tempdir().unwrap();
        let file = pi_file(dir.path(), 1);
        let id = ok(&run(&b, &["import", file.to_str().unwrap()]))
            .trim()
            .to_owned();
        let agent = b.scratch.join("agent");
        let on_file = |args: &[&str]| {
            ok(&common::cli()
                .args(args)
                .env("PI_CODING_AGENT_DIR", &agent)
                .output()
                .unwrap())
        };
        let f = file.to_str().unwrap();
        let replay = |text: String| {
            let mut v: Value = serde_json::from_str(&text).unwrap();
            strip_paths(&mut v);
            v
        };
        assert_eq!(
            replay(ok(&run(&b, &["replay", &id, "--json"]))),
            replay(on_file(&["replay", f, "--json"]))
        );
        let tree = ok(&run(&b, &["tree", &id]));
        let tree_file = on_file(&["tree", f]);
        assert_eq!(
            tree.lines().skip(1).collect::<Vec<_>>(),
            tree_file.lines().skip(1).collect::<Vec<_>>()
        );
        assert_eq!(run(&b, &["verify", &id]).status.code(), Some(0));
        let status = ok(&run(&b, &["status", &id, "--json"]));
        assert!(status.contains("alpha"), "{status}");
    }

    fn strip_paths(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in ["file", "path"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip_paths);
            }
            Value::Array(a) => a.iter_mut().for_each(strip_paths),
            _ => {}
        }
    }

    pub fn exports_open_in_the_real_pi_with_the_original_entries(b: TestBackend) {
        for major in common::pi::MAJORS {
            let dir = tempfile::tempdir().unwrap();
            let file = pi_file(dir.path(), major);
            let id = ok(&run(&b, &["import", file.to_str().unwrap()]))
                .trim()
                .to_owned();
            let out = dir.path().join("export.jsonl");
            ok(&run(
                &b,
                &["export", &id, "--output", out.to_str().unwrap()],
            ));
            for reader in common::pi::MAJORS {
                let original = common::pi::dump_copy(reader, &file);
                let exported = common::pi::dump_copy(reader, &out);
                assert_eq!(
                    exported.entries, original.entries,
                    "written by pi{major}, read by pi{reader}"
                );
                assert_eq!(exported.header, original.header);
                assert_eq!(exported.leaf_id, original.leaf_id);
                assert_eq!(exported.branches, original.branches);
            }
        }
    }

    pub fn concurrent_writer_processes_lose_nothing(b: TestBackend) {
        const WRITERS: usize = 4;
        const WRITES: usize = 8;
        let id = seeded(&b, "race", 1);
        let children: Vec<_> = (0..WRITERS)
            .map(|w| {
                let url = b.url.clone().unwrap();
                let id = id.clone();
                // Each process stands in for a machine: its own projection and cache.
                let db = b.scratch.join(format!("m{w}")).join("states.sqlite");
                std::thread::spawn(move || {
                    let mut acked = Vec::new();
                    let mut refused = 0;
                    for k in 0..WRITES {
                        let out = common::cli()
                            .args([
                                "write",
                                &id,
                                "--plugin",
                                &format!("w{w}"),
                                "--value",
                                &k.to_string(),
                            ])
                            .args(["--store", &url, "--db", db.to_str().unwrap()])
                            .output()
                            .unwrap();
                        if out.status.success() {
                            acked.push(String::from_utf8(out.stdout).unwrap().trim().to_owned());
                        } else {
                            let err = String::from_utf8_lossy(&out.stderr);
                            assert!(
                                err.contains("gave up after 32 attempts")
                                    && err.contains("running it again is safe"),
                                "not the contention refusal: {err}"
                            );
                            refused += 1;
                        }
                    }
                    (acked, refused)
                })
            })
            .collect();
        let mut acked = Vec::new();
        for c in children {
            let (a, _) = c.join().unwrap();
            acked.extend(a);
        }
        let mut out = Vec::new();
        (b.reopen)().export(&id, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let ids: Vec<String> = text
            .lines()
            .skip(1)
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        for a in &acked {
            assert_eq!(ids.iter().filter(|i| *i == a).count(), 1, "{a} stored once");
        }
        assert_eq!(
            ids.len(),
            1 + acked.len(),
            "nothing unacknowledged, nothing twice"
        );
        assert!(
            acked.len() >= WRITES,
            "most writes go through: {}",
            acked.len()
        );
        // One chain: each write extended the session's last entry.
        let log = b.store.load(&id).unwrap().into_log();
        assert_eq!(log.tips().len(), 1);
    }
}
