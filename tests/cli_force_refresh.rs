//! `force-refresh`: a live holder's lock cleared only with `--yes` (or on a terminal's
//! confirmation), a dead holder's at once, and no database created.

use crate::common::cli::{World, example_log, kill, live_lock, lock_holder};
use session_state::{Store, lock::Liveness};

#[test]
fn force_refresh_without_terminal_or_yes_leaves_a_live_lock_alone() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    let holder = lock_holder(&db, &sid);
    // `output()` gives the child no terminal for stdin (null, not a tty).
    let out = w.run(&["force-refresh", "s.jsonl"]);
    let after = lock_holder(&db, &sid);
    kill(child);
    assert_eq!(out.code, 1, "{}", out.shown());
    assert_eq!(after, holder, "the lock was left alone");
    assert!(out.stderr.contains("--yes"), "{}", out.stderr);
    w.settings()
        .bind(|| insta::assert_snapshot!("force_refresh_refused", out.shown()));
}

#[test]
fn force_refresh_with_yes_clears_a_live_lock_and_rereads() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    // Cache the session first, so there are rows to drop.
    assert_eq!(w.run(&["read", "s.jsonl", "--plugin", "role"]).code, 0);
    let out = w.run(&["force-refresh", "s.jsonl", "--yes"]);
    let after = lock_holder(&db, &sid);
    let write = w.run(&["write", "s.jsonl", "--plugin", "role", "--value", "1"]);
    kill(child);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(after, None);
    w.settings()
        .bind(|| insta::assert_snapshot!("force_refresh_yes", out.shown()));
    assert_eq!(write.code, 0, "a writer gets in again: {}", write.shown());
}

#[test]
fn force_refresh_clears_a_dead_holders_lock_without_asking() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    kill(child);
    let store = Store::at(&db).unwrap();
    assert_eq!(
        store
            .peek_lock_status(&sid)
            .unwrap()
            .row()
            .expect("a lock row")
            .liveness,
        Liveness::NotAlive
    );
    let out = w.run(&["force-refresh", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(out.stdout.contains("not alive"), "{}", out.stdout);
    assert_eq!(lock_holder(&db, &sid), None);
}

#[test]
fn force_refresh_without_database_creates_none() {
    let w = World::example();
    let out = w.run(&["force-refresh", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(!w.default_db().exists());
    assert!(out.stdout.contains("no projection database"));
}
