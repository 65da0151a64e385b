//! `status`: the session file, the projection database (never created by it), the lock
//! and its holder, and the library's event counts.

use crate::common::cli::{EDGE, World, example_log, kill, live_lock};
use serde_json::{Value, json};
use session_state::SessionLog;

#[test]
fn status_never_creates_the_database() {
    let w = World::example();
    let out = w.run(&["status", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(!w.default_db().exists(), "status created the database");
    assert!(!w.agent.join("sessions").exists());
    w.settings()
        .bind(|| insta::assert_snapshot!("status_no_db", out.shown()));
    let v = w.run(&["status", "s.jsonl", "--json"]).json();
    assert_eq!(v["database"]["exists"], json!(false));
    assert_eq!(v["lock"], Value::Null);
    assert_eq!(
        v["events"],
        json!([
            {"plugin": "role", "scope": "branch", "events": 2},
            {"plugin": "todo", "scope": "session", "events": 2},
        ])
    );
}

#[test]
fn status_shows_a_live_lock_holder() {
    let w = World::example();
    let db = w.root.join("db/states.sqlite");
    let db_arg = db.to_str().unwrap();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    let out = w.run(&["status", "s.jsonl", "--db", db_arg]);
    let json_out = w.run(&["status", "s.jsonl", "--db", db_arg, "--json"]);
    kill(child);
    assert_eq!(out.code, 0, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("status_locked", out.shown()));
    let v = json_out.json();
    assert_eq!(v["database"], json!({"path": db, "exists": true}));
    assert_eq!(v["lock"]["liveness"], json!("alive"));
    assert_eq!(v["lock"]["blocksWriters"], json!(true));
    assert_eq!(v["lock"]["action"], json!("write"));
    assert_eq!(v["lock"]["mayBeAlive"], json!(true));
    // The file's facts around the library's report of the rows; no Pi holds the session.
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "file",
            "sessionId",
            "entries",
            "readable",
            "database",
            "lock",
            "events"
        ]
    );
}

#[test]
fn status_relative_db_and_missing_file_exit_2() {
    let w = World::example();
    let out = w.run(&["status", "s.jsonl", "--db", "x.sqlite"]);
    assert_eq!(out.code, 2);
    let out = w.run(&["status", "missing.jsonl"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("missing.jsonl"));
}

#[test]
fn status_of_a_corrupt_file_uses_a_salvage_read() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/corrupt-middle.jsonl"), w.file()).unwrap();
    let out = w.run(&["status", "s.jsonl", "--json"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(out.stderr.contains("salvage"), "{}", out.stderr);
    let v = out.json();
    assert_eq!(v["readable"], json!(false));
    assert_eq!(v["entries"], json!(3));
}

/// `status` says what each path is: the session file (or the session in a store), and the
/// projection database, a local cache.
#[test]
fn status_says_what_each_path_is() {
    let w = World::example();
    let out = w.run(&["status", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stdout.contains(
            "(s.jsonl)\n          the session file: its lines are the session and its state\n"
        ) && out.stdout.contains(
            "states.sqlite\n          the projection cache (SQLite): folds cached from the file, and the write lock\n"
        ),
        "{}",
        out.shown()
    );
}

#[test]
fn status_and_replay_print_the_library_event_counts() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.file()).unwrap();
    let counts = session_state::inspect::event_counts(&SessionLog::open(w.file()).unwrap());
    assert_eq!(
        serde_json::to_value(&counts).unwrap()["role"]["invalid"],
        2,
        "{counts:?}"
    );
    let replay = w.run(&["replay", "s.jsonl", "--json"]).json();
    assert_eq!(
        replay["sessions"][0]["events"],
        serde_json::to_value(&counts).unwrap()
    );
    let status = w.run(&["status", "s.jsonl", "--json"]).json();
    assert_eq!(
        status["events"],
        json!([
            {"plugin": "role", "scope": "invalid", "events": 2},
            {"plugin": "todo", "scope": "session", "events": 2},
        ])
    );
    assert_eq!(
        status["events"],
        serde_json::to_value(counts.rows()).unwrap()
    );
}

#[test]
fn trusted_project_settings_choose_the_database() {
    let w = World::example();
    let project = w.root.join("project");
    std::fs::create_dir_all(project.join(".pi")).unwrap();
    std::fs::write(
        project.join(".pi/settings.json"),
        r#"{"sessionState":{"databasePath":"cache/p.sqlite"}}"#,
    )
    .unwrap();
    let cwd = project.to_str().unwrap();
    let base = ["status", "s.jsonl", "--json", "--cwd", cwd];
    // Untrusted (no --trust-project, no saved Pi decision): the default location.
    let out = w.run(&base);
    assert_eq!(out.json()["database"]["path"], json!(w.default_db()));
    let mut trusted = base.to_vec();
    trusted.push("--trust-project");
    let out = w.run(&trusted);
    assert_eq!(
        out.json()["database"]["path"],
        json!(project.join(".pi/cache/p.sqlite"))
    );
}
