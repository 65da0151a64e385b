//! The write of a process that has not read the log (`SessionState::write` on a file,
//! `apply_at_tail`, the CLI's `write`/`patch`/`drop`): decided from the projection's rows
//! and the file's tail. Each result is checked against a full parse and fold of the file;
//! each case the rows cannot answer falls back to the log, and the guarantees of docs/spec.md §6
//! hold on this path too.

use crate::common::{self, holders::Proc};

use serde_json::{Value, json};
use session_state::On;
use session_state::{
    Error, InvalidLog, LogError, Op, OpenError, ProjectionError, Scope, SessionLog, SessionState,
    StateError, Store, TailWrite, UnknownEntry, lock::LockError,
};
use std::io::Write;
use std::path::{Path, PathBuf};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/example.jsonl");
const EDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/edge");

struct World {
    _dir: tempfile::TempDir,
    file: PathBuf,
    store: Store,
}

impl World {
    /// A copy of the example session (forks, branch and session events) and a store
    /// whose projection is warm (one read through it).
    fn warm() -> World {
        let w = World::cold(EXAMPLE);
        w.key("role", Scope::Branch).read(&w.file).expect("warm");
        w
    }

    fn cold(from: &str) -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("s.jsonl");
        std::fs::copy(from, &file).expect("copy the session");
        let store = common::open_store(&dir.path().join("states.sqlite")).expect("store");
        World {
            _dir: dir,
            file,
            store,
        }
    }

    fn key(&self, plugin: &str, scope: Scope) -> SessionState<Value> {
        self.store.state(plugin, scope).expect("key")
    }

    fn len(&self) -> u64 {
        std::fs::metadata(&self.file).expect("stat").len()
    }

    /// A foreign append, as Pi's `appendCustomEntry` writes one (no lock, no fsync).
    fn foreign_append(&self, id: &str) {
        let log = SessionLog::open(&self.file).expect("open");
        let parent = log.leaf_id().expect("leaf").to_owned();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.file)
            .expect("open for append");
        writeln!(
            f,
            r#"{{"type":"custom","customType":"other-ext","data":{{"n":1}},"id":"{id}","parentId":"{parent}","timestamp":"2026-12-01T00:00:00.000Z"}}"#
        )
        .expect("append");
    }
}

/// The value a full parse and fold gives at `at` (default: the leaf, the last entry).
fn folded(file: &Path, plugin: &str, scope: Scope, at: Option<&str>) -> Option<Value> {
    // A store of its own: nothing of the projection under test answers.
    let dir = tempfile::tempdir().expect("tempdir");
    let key = Store::at(dir.path().join("ref.sqlite"))
        .and_then(|s| s.state::<Value>(plugin, scope))
        .expect("key");
    let log = SessionLog::open(file).expect("open");
    match at {
        Some(at) => key.read_at(&log, at).expect("read_at"),
        None => key.read(&log).expect("read"),
    }
}

/// The tail path answered (`Some`) with a new entry, a child of `parent`, which is now
/// the last entry of the file.
fn appended_child(w: &World, got: TailWrite, parent: &str) -> String {
    let TailWrite::Appended(id) = got else {
        panic!("the rows did not append: {got:?}");
    };
    let log = SessionLog::open(&w.file).expect("open");
    assert_eq!(
        log.leaf_id(),
        Some(id.as_str()),
        "the new entry is the last one"
    );
    let entry = log.entry(&id).expect("the new entry");
    assert_eq!(
        entry.parent_id(),
        Some(parent),
        "a child of the leaf it was given"
    );
    id
}

#[test]
fn a_tail_write_appends_the_child_a_full_parse_and_fold_expect() {
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    let todo = w.key("todo", Scope::Session);
    let leaf = SessionLog::open(&w.file)
        .expect("open")
        .leaf_id()
        .expect("leaf")
        .to_owned();

    // set at the leaf
    let got = role
        .apply_at_tail(&w.file, None, Op::Set(json!({"name": "tester"})))
        .expect("write");
    let first = appended_child(&w, got, &leaf);
    assert_eq!(
        folded(&w.file, "role", Scope::Branch, None),
        Some(json!({"name": "tester"}))
    );

    // patch the session-scope plugin: folded over the whole file
    let before = folded(&w.file, "todo", Scope::Session, None);
    let patch = json!({"last-error": "boom", "n": 2});
    let got = todo
        .apply_at_tail(&w.file, None, Op::Patch(patch.clone()))
        .expect("patch");
    let second = appended_child(&w, got, &first);
    let expected = Op::Patch(patch).apply(before.as_ref());
    assert_eq!(folded(&w.file, "todo", Scope::Session, None), expected);

    // --at an entry in the middle: a fork whose value is the fold at that entry
    let log = SessionLog::open(&w.file).expect("open");
    let mid = log.branch()[3].to_owned();
    let at_mid = folded(&w.file, "role", Scope::Branch, Some(&mid));
    let got = role
        .apply_at_tail(&w.file, Some(&mid), Op::Patch(json!({"model": "fast"})))
        .expect("patch at");
    let fork = appended_child(&w, got, &mid);
    assert_eq!(
        folded(&w.file, "role", Scope::Branch, None),
        Op::Patch(json!({"model": "fast"})).apply(at_mid.as_ref())
    );
    // The other branch still reads what it had.
    assert_eq!(
        folded(&w.file, "role", Scope::Branch, Some(&first)),
        Some(json!({"name": "tester"}))
    );

    // drop at the leaf (the fork just made)
    let got = role.apply_at_tail(&w.file, None, Op::Drop).expect("drop");
    appended_child(&w, got, &fork);
    assert_eq!(folded(&w.file, "role", Scope::Branch, None), None);

    // The projection agrees with the full fold everywhere it is asked.
    for at in [&first, &second, &fork, &mid] {
        assert_eq!(
            role.read_value(On::file(&w.file, Some(at))).expect("read"),
            folded(&w.file, "role", Scope::Branch, Some(at)),
            "at {at}"
        );
    }
    assert_eq!(
        todo.read_value(On::file(&w.file, None)).expect("read"),
        folded(&w.file, "todo", Scope::Session, None)
    );
    // The file reads strictly, with no findings.
    let log = SessionLog::open(&w.file).expect("open strictly");
    assert!(log.findings().is_empty(), "{:?}", log.findings());
}

#[test]
fn the_tail_catches_up_only_the_new_line() {
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    let len = w.len();
    role.write(On::file(&w.file, None), &json!(1))
        .expect("write");
    let c = w.store.last_catch_up().expect("a catch-up");
    assert!(!c.rebuilt);
    assert_eq!(c.entries_added, 1);
    assert_eq!(
        c.bytes_read,
        w.len() - len,
        "only the appended line was read"
    );
}

#[test]
fn an_unchanged_value_appends_nothing() {
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    let current = folded(&w.file, "role", Scope::Branch, None).expect("a value");
    let len = w.len();
    // Key order does not matter: the same value as Pi's JavaScript sees it.
    let got = role
        .apply_at_tail(&w.file, None, Op::Set(current))
        .expect("write");
    assert_eq!(
        got,
        TailWrite::Unchanged,
        "answered from the rows: nothing to append"
    );
    assert_eq!(
        w.key("nothing", Scope::Branch)
            .apply_at_tail(&w.file, None, Op::Drop)
            .expect("drop"),
        TailWrite::Unchanged
    );
    assert_eq!(w.len(), len);
}

#[test]
fn a_cold_projection_falls_back_to_the_log_and_warms_it() {
    let w = World::cold(EXAMPLE);
    let role = w.key("role", Scope::Branch);
    let len = w.len();
    assert_eq!(
        role.apply_at_tail(&w.file, None, Op::Set(json!(1)))
            .expect("write"),
        TailWrite::NeedsLog,
        "no rows yet: the caller reads the log"
    );
    assert_eq!(w.len(), len, "nothing written");
    let id = role
        .write(On::file(&w.file, None), &json!(1))
        .expect("write");
    assert!(id.is_some());
    assert_eq!(folded(&w.file, "role", Scope::Branch, None), Some(json!(1)));
    // The write through the log built the rows: the next one is answered from them.
    assert!(
        role.apply_at_tail(&w.file, None, Op::Set(json!(2)))
            .expect("write")
            != TailWrite::NeedsLog
    );
    assert_eq!(folded(&w.file, "role", Scope::Branch, None), Some(json!(2)));
}

#[test]
fn a_foreign_append_is_caught_up_before_the_tail_write() {
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    w.foreign_append("f0f0f0f0");
    let got = role
        .apply_at_tail(&w.file, None, Op::Set(json!("after")))
        .expect("write");
    appended_child(&w, got, "f0f0f0f0");
    assert_eq!(
        role.read_value(On::file(&w.file, None)).expect("read"),
        Some(json!("after"))
    );
    // A new id never repeats one in the file (checked against the rows).
    let log = SessionLog::open(&w.file).expect("open");
    let mut ids: Vec<&str> = log.entries().map(|e| e.id()).collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n);
}

#[test]
fn what_the_rows_cannot_answer_goes_through_the_log() {
    // A torn tail: the log closes it before appending.
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&w.file)
        .and_then(|mut f| f.write_all(br#"{"type":"custom","id":"#))
        .expect("tear");
    let len = w.len();
    assert_eq!(
        role.apply_at_tail(&w.file, None, Op::Set(json!(1)))
            .expect("write"),
        TailWrite::NeedsLog
    );
    assert_eq!(w.len(), len, "nothing written by the tail path");
    role.write(On::file(&w.file, None), &json!(1))
        .expect("write");
    let log = SessionLog::open(&w.file).expect("the torn record is skipped");
    assert_eq!(log.findings().len(), 1, "{:?}", log.findings());
    assert_eq!(folded(&w.file, "role", Scope::Branch, None), Some(json!(1)));

    // An entry the rows do not know: the log's error names it.
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    assert_eq!(
        role.apply_at_tail(&w.file, Some("deadbeef"), Op::Set(json!(1)))
            .expect("write"),
        TailWrite::NeedsLog
    );
    match role.write(On::file(&w.file, Some("deadbeef")), &json!(1)) {
        Err(Error::Log(LogError::UnknownEntry(UnknownEntry { id, .. }))) => {
            assert_eq!(id, "deadbeef")
        }
        other => panic!("{other:?}"),
    }

    // Another file at the path (the same bytes): rows of the old one never answer.
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    let copy = w.file.with_extension("copy");
    std::fs::copy(&w.file, &copy).expect("copy");
    std::fs::rename(&copy, &w.file).expect("replace");
    assert_eq!(
        role.apply_at_tail(&w.file, None, Op::Set(json!(1)))
            .expect("write"),
        TailWrite::NeedsLog
    );

    // An older version: the log migrates it first.
    let w = World::cold(&format!("{EDGE}/v2.jsonl"));
    let role = w.key("role", Scope::Branch);
    role.read(&w.file).expect("warm");
    assert_eq!(
        role.apply_at_tail(&w.file, None, Op::Set(json!(1)))
            .expect("write"),
        TailWrite::NeedsLog
    );
    role.write(On::file(&w.file, None), &json!(1))
        .expect("write");
    assert_eq!(
        SessionLog::open(&w.file).expect("open").header().version(),
        3
    );
    assert_eq!(folded(&w.file, "role", Scope::Branch, None), Some(json!(1)));
}

#[test]
fn a_live_holder_refuses_the_tail_write_and_a_dead_ones_row_does_not_seal_it() {
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    let sid = SessionLog::open(&w.file)
        .expect("open")
        .session_id()
        .to_owned();
    let len = w.len();
    let holder = Proc::sleep();
    let guard = w
        .store
        .lock_as(&sid, "write", common::now_ms(), &holder.holder())
        .expect("lock for the other holder");
    std::mem::forget(guard);
    let refused = role.apply_at_tail(&w.file, None, Op::Set(json!(1)));
    match refused.map_err(|e| match e {
        Error::Lock(e) => Ok(*e),
        other => Err(other),
    }) {
        Err(Ok(LockError::Held {
            initiator,
            action,
            object,
            reason,
            ..
        })) => {
            assert_eq!(initiator, holder.holder().to_string());
            assert_eq!(action, "write");
            assert_eq!(object, sid);
            assert!(reason.contains("alive"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.len(), len, "refused before a byte was written");
    // The holder dies: its row no longer seals the session, and the write deletes it.
    holder.end();
    let got = role
        .apply_at_tail(&w.file, None, Op::Set(json!(1)))
        .expect("write after the holder died");
    assert!(matches!(got, TailWrite::Appended(_)), "{got:?}");
    assert!(w.store.lock_status(&sid).expect("status").is_none());
}

#[test]
fn cli_writes_around_a_foreign_append_match_a_full_fold() {
    let w = World::warm();
    let db = w.store.database_path().to_path_buf();
    let run = |args: &[&str]| {
        let out = common::cli()
            .args(args)
            .arg(&w.file)
            .args(["--plugin", "role", "--db"])
            .arg(&db)
            .output()
            .expect("run");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let one = run(&["write", "--value", "1"]).trim().to_owned();
    w.foreign_append("abcdef01");
    let two = run(&["patch", "--merge", r#"{"a":2}"#]).trim().to_owned();
    let log = SessionLog::open(&w.file).expect("open");
    assert_eq!(log.entry(&two).expect("two").parent_id(), Some("abcdef01"));
    assert_eq!(
        log.entry("abcdef01").expect("foreign").parent_id(),
        Some(one.as_str())
    );
    // `patch` of a number replaces it with the patch object (RFC 7396).
    assert_eq!(
        folded(&w.file, "role", Scope::Branch, None),
        Some(json!({"a": 2}))
    );
    assert_eq!(run(&["read"]), "{\"a\":2}\n");
    assert_eq!(run(&["drop", "--at", &one]).len(), 9, "an id and a newline");
    assert_eq!(folded(&w.file, "role", Scope::Branch, None), None);
}

/// The projection's WAL outlives its connections (no checkpoint on close). A WAL left
/// beside a file that is not ours (our database deleted by hand, another program's put at
/// its path) is never laid over that file: deciding ownership reads the file alone.
#[test]
fn a_wal_of_ours_left_beside_another_programs_database_never_makes_it_ours() {
    let w = World::warm();
    w.key("role", Scope::Branch)
        .write(On::file(&w.file, None), &json!("x"))
        .expect("write");
    let db = w.store.database_path().to_path_buf();
    drop(w.store);
    let mut wal = db.clone().into_os_string();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    assert!(
        std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0),
        "the WAL stays beside the database after the last connection closed"
    );
    // Another program's database, made elsewhere and moved into place; ours is gone.
    let elsewhere = db.with_extension("other");
    let other = rusqlite::Connection::open(&elsewhere).expect("create");
    other
        .execute_batch("CREATE TABLE users(id INTEGER PRIMARY KEY); INSERT INTO users VALUES (1);")
        .expect("foreign schema");
    drop(other);
    std::fs::rename(&elsewhere, &db).expect("move into place");
    let before = std::fs::read(&db).expect("read");
    match common::open_store(&db) {
        Err(Error::Projection(ProjectionError::NotOurDatabase { what, .. })) => {
            assert!(what.contains("users"), "{what}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read(&db).expect("read"),
        before,
        "left byte-identical"
    );
}

#[test]
fn a_tail_write_to_a_session_without_entries_starts_a_root() {
    let w = World::cold(&format!("{EDGE}/header-only.jsonl"));
    let role = w.key("role", Scope::Branch);
    assert_eq!(role.read(&w.file).expect("warm"), None);
    let got = role
        .apply_at_tail(&w.file, None, Op::Set(json!("first")))
        .expect("write");
    let TailWrite::Appended(id) = got else {
        panic!("the rows did not append: {got:?}");
    };
    let log = SessionLog::open(&w.file).expect("open");
    assert_eq!(log.len(), 1);
    assert_eq!(log.entry(&id).expect("entry").parent_id(), None, "a root");
    assert_eq!(
        folded(&w.file, "role", Scope::Branch, None),
        Some(json!("first"))
    );
}

/// Every target passes as one argument; a log borrowed shared reads, and a write through
/// it is refused with nothing written.
#[test]
fn one_argument_names_the_target_and_a_shared_log_is_not_written() {
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    let id = role
        .write(On::file(&w.file, None), &json!("file"))
        .expect("write")
        .expect("appended");
    let mut log = SessionLog::open(&w.file).expect("open");
    assert_eq!(role.read(&log).expect("read"), Some(json!("file")));
    assert_eq!(role.read(&w.file).expect("read"), Some(json!("file")));
    assert_eq!(
        role.read_value(On::file(&w.file, Some(&id))).expect("read"),
        Some(json!("file"))
    );
    let len = w.len();
    match role.write(On::Log(&log), &json!("shared")) {
        Err(Error::InvalidOption { detail, .. }) => {
            assert!(
                detail.contains("&mut log") && detail.contains("role"),
                "{detail}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.len(), len, "nothing appended");
    role.write(&mut log, &json!("log"))
        .expect("write")
        .expect("appended");
    assert_eq!(role.read(&w.file).expect("read"), Some(json!("log")));
    let history = role.history(&w.file).expect("history");
    assert_eq!(
        history.last().and_then(|h| h.value.clone()),
        Some(json!("log"))
    );
}

/// `apply` on a file is `write` for an `Op` the caller built: its value checked, an
/// unknown `at` and a file the reader refuses named by their own errors.
#[test]
fn apply_on_a_file_checks_the_op_and_names_each_refusal() {
    // Refused before anything is written: the op's value.
    let w = World::warm();
    let role = w.key("role", Scope::Branch);
    let len = w.len();
    match role.apply(&w.file, Op::Set(json!(9_007_199_254_740_993_u64))) {
        Err(Error::State(StateError::UnrepresentableValue { .. })) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(w.len(), len, "nothing appended");

    // An entry neither the rows nor the log know.
    match role.apply(On::file(&w.file, Some("deadbeef")), Op::Drop) {
        Err(Error::Log(LogError::UnknownEntry(UnknownEntry { id, .. }))) => {
            assert_eq!(id, "deadbeef")
        }
        other => panic!("{other:?}"),
    }

    // A file the reader refuses, the rows cold.
    let w = World::cold(EXAMPLE);
    std::fs::write(&w.file, "not a session\n").expect("overwrite");
    match w.key("role", Scope::Branch).apply(&w.file, Op::Drop) {
        Err(Error::Log(LogError::Open(OpenError::Invalid(
            InvalidLog::MissingHeader { .. } | InvalidLog::InvalidHeader { .. },
        )))) => {}
        other => panic!("{other:?}"),
    }

    // Done: the same as `write`.
    let w = World::warm();
    let id = w
        .key("role", Scope::Branch)
        .apply(&w.file, Op::Set(json!("x")))
        .expect("write")
        .expect("appended");
    assert_eq!(
        folded(&w.file, "role", Scope::Branch, None),
        Some(json!("x"))
    );
    assert_eq!(
        SessionLog::open(&w.file).expect("open").leaf_id(),
        Some(id.as_str())
    );
}
