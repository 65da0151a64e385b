//! The guard example (examples/guard.rs) keeps its block list across reopen (every call is
//! a new process) and forks correctly: a fork inherits the list at its fork point, and
//! siblings never see each other's changes.
#![expect(clippy::unwrap_used)]

use serde_json::json;
use session_state::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn guard_bin() -> PathBuf {
    crate::common::examples::example("guard")
}

fn guard(file: &Path, db: &Path, at: Option<&str>, args: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(guard_bin());
    cmd.arg(file).arg("--db").arg(db);
    if let Some(at) = at {
        cmd.args(["--at", at]);
    }
    let out = cmd.args(args).output().unwrap();
    assert!(
        out.status.code() != Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap().trim().to_owned(),
    )
}

#[test]
fn block_list_survives_reopen_and_forks_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("states.sqlite");
    let mut log = LogOptions::new().create(dir.path(), "/proj").unwrap();
    log.append(NewEntry::message(
        json!({"role": "user", "content": "protect my secrets"}),
    ))
    .unwrap();
    let file = log.path().to_path_buf();
    drop(log);

    assert_eq!(guard(&file, &db, None, &["check", ".env"]).0, 0);
    let (_, b1) = guard(&file, &db, None, &["block", ".env"]);
    let (_, b2) = guard(&file, &db, None, &["block", ".git/"]);
    // Blocking again changes nothing and appends nothing.
    assert_eq!(guard(&file, &db, None, &["block", ".git/"]).1, "");
    // Every call is a new process: the list came back from the log.
    assert_eq!(guard(&file, &db, None, &["check", "app/.env"]).0, 3);
    assert_eq!(guard(&file, &db, None, &["check", ".git/config"]).0, 3);
    assert_eq!(guard(&file, &db, None, &["list"]).1, ".env\n.git/");

    // Fork from the point where only .env was blocked, and unblock it there.
    let (_, fork) = guard(&file, &db, Some(&b1), &["unblock", ".env"]);
    assert!(!fork.is_empty());
    // The fork is now the last entry, hence the active leaf: nothing is blocked there,
    // and .git/ (blocked on the sibling branch after the fork point) never was.
    assert_eq!(guard(&file, &db, None, &["list"]).1, "");
    assert_eq!(guard(&file, &db, None, &["check", ".env"]).0, 0);
    assert_eq!(guard(&file, &db, None, &["check", ".git/config"]).0, 0);
    // The other branch still has both.
    assert_eq!(guard(&file, &db, Some(&b2), &["list"]).1, ".env\n.git/");
    assert_eq!(guard(&file, &db, Some(&b2), &["check", ".env"]).0, 3);

    let log = SessionLog::open(&file).unwrap();
    assert_eq!(log.children(&b1).unwrap().len(), 2);
}
