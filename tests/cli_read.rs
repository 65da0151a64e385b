//! `read`: the value, absent or present, at the leaf or `--at` an entry; a bad event of
//! the plugin; the projection database it uses (`--db`, the settings).

use crate::common::cli::{EDGE, World, example_log};
use serde_json::json;

#[test]
fn read_prints_the_value_or_exits_1_when_absent() {
    let w = World::example();
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "{\"name\":\"writer\"}\n")
    );
    assert_eq!(out.stderr, "");

    let out = w.run(&["read", "s.jsonl", "--plugin", "todo", "--scope", "session"]);
    assert_eq!(out.code, 0);
    assert_eq!(out.json(), json!({"backoff": "done", "last-error": "open"}));

    // Absent: no output at all, exit 1. Branch scope of a session-scope plugin is absent.
    let out = w.run(&["read", "s.jsonl", "--plugin", "todo"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (1, "", "")
    );
    let out = w.run(&["read", "s.jsonl", "--plugin", "nobody"]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));

    // The read used (and created) the default projection database.
    assert!(w.default_db().exists());
}

#[test]
fn read_at_an_entry_folds_up_to_it() {
    let w = World::example();
    let log = example_log(&w);
    let fork = log.forks()[0].to_owned();
    let first_tip = log.tips()[0].to_owned();
    // At the fork point the role is the reviewer; on the first branch too.
    for at in [&fork, &first_tip] {
        let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--at", at]);
        assert_eq!(out.line(), r#"{"name":"reviewer"}"#, "at {at}");
    }
    // Before the first role event: absent.
    let root = log.roots()[0].to_owned();
    let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--at", &root]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
}

#[test]
fn written_null_is_present_not_absent() {
    let w = World::example();
    let out = w.run(&["write", "s.jsonl", "--plugin", "role", "--value", "null"]);
    assert_eq!(out.code, 0);
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.stdout.as_str()), (0, "null\n"));
}

#[test]
fn read_of_a_plugin_with_a_bad_event_exits_2_naming_the_entry() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.file()).unwrap();
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.stdout.as_str()), (2, ""), "{}", out.shown());
    assert!(out.stderr.contains("a0000003"), "{}", out.stderr);
    assert!(out.stderr.contains("line 4"), "{}", out.stderr);
    // Other plugins are unaffected.
    let out = w.run(&["read", "s.jsonl", "--plugin", "todo", "--scope", "session"]);
    assert_eq!(out.json(), json!({"backoff": "done", "tests": "open"}));
}

#[test]
fn explicit_db_is_used_and_settings_problems_are_reported_once() {
    let w = World::example();
    let db = w.root.join("elsewhere/my.sqlite");
    let out = w.run(&[
        "read",
        "s.jsonl",
        "--plugin",
        "role",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0);
    assert!(db.exists());
    assert!(!w.default_db().exists());

    // A broken user settings file: the default location is used, and said so once.
    std::fs::create_dir_all(&w.agent).unwrap();
    std::fs::write(w.agent.join("settings.json"), "{ not json").unwrap();
    let out = w.run(&["write", "s.jsonl", "--plugin", "role", "--value", "1"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.stderr.matches("warning:").count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("settings.json"));
    assert!(w.default_db().exists());
}
