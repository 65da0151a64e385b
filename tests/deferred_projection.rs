//! The in-process write leaves the projection to the next reader (`src/store/write.rs`,
//! `docs/projection.md` "The write path"): a write commits nothing to the database; the
//! next read through the projection, in this process or another, catches the rows up from
//! their watermark, reading only the appended bytes; a writer killed after its appends
//! leaves rows behind the file that every reader catches up the same way.
#![allow(clippy::unwrap_used)]

use crate::common;

use serde_json::{Value, json};
use session_state::{LogOptions, Materialize, NewEntry, Scope, SessionLog};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A materialized session in `dir` (one message), its path.
fn session(dir: &Path) -> PathBuf {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, "/proj")
        .unwrap();
    log.append(NewEntry::message(json!({"role": "user", "content": "hi"})))
        .unwrap();
    log.path().to_path_buf()
}

/// The watermark's consumed bytes of `file`, read by another connection (`None`: no rows).
fn consumed(db: &Path, file: &Path) -> Option<u64> {
    let key = std::fs::canonicalize(file).unwrap();
    common::raw_db(db)
        .query_row(
            "SELECT consumed FROM sessions WHERE file = ?1",
            [key.to_string_lossy()],
            |r| r.get::<_, i64>(0),
        )
        .ok()
        .map(|c| c as u64)
}

fn data_version(conn: &rusqlite::Connection) -> i64 {
    conn.query_row("PRAGMA data_version", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn an_in_process_write_commits_nothing_and_the_next_reader_reads_only_the_new_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let file = session(dir.path());
    let db = dir.path().join("states.sqlite");
    let store = common::open_store(&db).unwrap();
    let role = store.state::<Value>("role", Scope::Branch).unwrap();
    let mut log = SessionLog::open(&file).unwrap();
    role.write(&mut log, &json!(0)).unwrap().unwrap();
    // The rows as a reader leaves them.
    assert_eq!(role.read(&file).unwrap(), Some(json!(0)));
    let mark = consumed(&db, &file).expect("rows after a read");
    assert_eq!(mark, std::fs::metadata(&file).unwrap().len());

    // Another connection sees no commit of the writes: they change nothing in the database.
    let other = common::raw_db(&db);
    let before = data_version(&other);
    for i in 1..=5 {
        role.write(&mut log, &json!(i)).unwrap().unwrap();
    }
    assert_eq!(data_version(&other), before, "a write commits no change");
    assert_eq!(
        consumed(&db, &file),
        Some(mark),
        "the rows stay behind the log"
    );
    // This process reads back what it wrote from its log.
    assert_eq!(role.read(&log).unwrap(), Some(json!(5)));

    // The next reader through the projection catches up the five lines, and only them.
    let len = std::fs::metadata(&file).unwrap().len();
    let fresh = common::open_store(&db).unwrap();
    let key = fresh.state::<Value>("role", Scope::Branch).unwrap();
    assert_eq!(key.read(&file).unwrap(), Some(json!(5)));
    let c = fresh.last_catch_up().expect("a catch-up");
    assert!(!c.rebuilt, "{c:?}");
    assert_eq!((c.entries_added, c.bytes_read), (5, len - mark), "{c:?}");
    assert_eq!(consumed(&db, &file), Some(len));
}

#[test]
fn a_deferred_projection_is_caught_up_by_a_reader_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let file = session(&root);
    let db = root.join("states.sqlite");
    let store = common::open_store(&db).unwrap();
    let role = store.state::<Value>("role", Scope::Branch).unwrap();
    let mut log = SessionLog::open(&file).unwrap();
    for i in 0..3 {
        role.write(&mut log, &json!({"n": i})).unwrap().unwrap();
    }
    assert_eq!(
        consumed(&db, &file),
        None,
        "no rows: nothing has read the file"
    );
    let out = common::cli()
        .args(["read"])
        .arg(&file)
        .args(["--plugin", "role", "--db"])
        .arg(&db)
        .env("HOME", &root)
        .output()
        .unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), r#"{"n":2}"#),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // That process left the rows at the end of the file: this one reads nothing new.
    assert_eq!(
        consumed(&db, &file),
        Some(std::fs::metadata(&file).unwrap().len())
    );
    assert_eq!(role.read(&file).unwrap(), Some(json!({"n": 2})));
    assert_eq!(store.last_catch_up().unwrap().entries_added, 0);
    // The in-process writer goes on; the other process's catch-up changed nothing for it.
    role.write(&mut log, &json!({"n": 3})).unwrap().unwrap();
    assert_eq!(role.read(&file).unwrap(), Some(json!({"n": 3})));
    assert_eq!(store.last_catch_up().unwrap().entries_added, 1);
}

#[test]
fn a_writer_killed_after_its_appends_leaves_rows_every_reader_catches_up_alike() {
    let dir = tempfile::tempdir().unwrap();
    let file = session(dir.path());
    let db = dir.path().join("states.sqlite");
    // The rows exist and are up to date before the writer starts.
    let store = common::open_store(&db).unwrap();
    let state = store.state::<Value>("crash", Scope::Branch).unwrap();
    assert_eq!(state.read(&file).unwrap(), None);
    let mark = consumed(&db, &file).unwrap();
    let ack = dir.path().join("acks.tsv");
    let mut child = Command::new(common::examples::example("crash_writer"))
        .arg(&file)
        .arg(&db)
        .arg(&ack)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..4 {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the writer stopped");
        assert!(line.starts_with("ACK "), "{line}");
    }
    child.kill().unwrap(); // SIGKILL: between an append and nothing else
    child.wait().unwrap();

    // The killed writer's appends are in the file; the rows are where they were.
    let log = SessionLog::open(&file).unwrap();
    assert_eq!(consumed(&db, &file), Some(mark));
    let leaf = state.read(&log).unwrap();
    assert!(leaf.is_some());
    // The shared projection catches up, reading only what the writer appended after the
    // watermark; a fresh one rebuilds; both agree with the log, at the leaf and at every
    // acknowledged entry.
    let fresh = common::open_store(&dir.path().join("fresh.sqlite")).unwrap();
    let shared = common::open_store(&db).unwrap();
    assert_eq!(
        shared
            .read_value(&file, "crash", Scope::Branch, None)
            .unwrap(),
        leaf
    );
    let c = shared.last_catch_up().unwrap();
    assert!(!c.rebuilt, "{c:?}");
    assert_eq!(c.bytes_read, log.consumed_bytes() + log.tail_bytes() - mark);
    assert_eq!(
        fresh
            .read_value(&file, "crash", Scope::Branch, None)
            .unwrap(),
        leaf
    );
    let acks = std::fs::read_to_string(&ack).unwrap();
    let complete = &acks[..acks.rfind('\n').map_or(0, |i| i + 1)];
    assert!(complete.lines().count() >= 4);
    for l in complete.lines() {
        let (id, v) = l.split_once('\t').unwrap();
        let v: Value = serde_json::from_str(v).unwrap();
        for s in [&shared, &fresh] {
            assert_eq!(
                s.read_value(&file, "crash", Scope::Branch, Some(id))
                    .unwrap(),
                Some(v.clone()),
                "{id}"
            );
        }
    }
}
