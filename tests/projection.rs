//! The SQLite projection (docs/spec.md §4) against real session files and a real database in a
//! tempdir: reads equal the in-memory fold, catch-up reads only new bytes, a file changed
//! behind the projection's back is rebuilt, a corrupt database of ours is rebuilt, a file
//! that is not provably ours is refused and left byte-identical, and a database that cannot
//! be opened is an error.

use crate::common;

use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use common::pi;
use rusqlite::OptionalExtension;
use serde_json::{Value, json};
use session_state::{
    CatchUp, Error, LogOptions, Materialize, NewEntry, ProjectionError, Scope, SessionLog,
    SessionState, StateError, Store, maintenance::Peeked,
};
use tempfile::TempDir;

const PLUGINS: [&str; 3] = ["p", "q", "never-written"];

fn user(text: &str) -> NewEntry {
    NewEntry::message(json!({"role": "user", "content": text}))
}

fn assistant(text: &str) -> NewEntry {
    NewEntry::message(json!({
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stopReason": "stop"
    }))
}

/// A state event as another writer (or Pi's `appendCustomEntry`) lays it out.
fn set_event(plugin: &str, scope: &str, value: Value) -> NewEntry {
    NewEntry::custom(
        format!("session-state/{plugin}"),
        Some(json!({"v": 1, "scope": scope, "op": "set", "value": value})),
    )
}

fn state(db: &Path, plugin: &str, scope: Scope) -> SessionState<Value> {
    Store::at(db)
        .and_then(|store| store.state(plugin, scope))
        .expect("open SessionState")
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).expect("stat session file").len()
}

/// A materialized session and a database path, both in one tempdir.
struct Session {
    dir: TempDir,
    db: PathBuf,
    log: SessionLog,
}

impl Session {
    fn new() -> Session {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("agent").join("states.sqlite");
        let mut log = LogOptions::new()
            .materialize(Materialize::FirstAppend)
            .create(dir.path(), "/proj")
            .expect("create session");
        log.append(user("start")).expect("append");
        // Pi 0.73 writes nothing to a file without an assistant message.
        log.append(assistant("ready")).expect("append");
        Session { dir, db, log }
    }

    fn file(&self) -> PathBuf {
        self.log.path().to_path_buf()
    }

    /// Branch and session writes of two plugins, patches, a null, a drop and a fork,
    /// all through `SessionState` (lock → append → projection sync).
    fn populate(&mut self) {
        let p = state(&self.db, "p", Scope::Branch);
        let ps = state(&self.db, "p", Scope::Session);
        let q = state(&self.db, "q", Scope::Branch);
        let log = &mut self.log;
        let fork_point = p
            .write(&mut *log, &json!({"a": 1}))
            .expect("write")
            .expect("id");
        log.append(assistant("noted")).expect("append");
        ps.write(&mut *log, &json!("s1")).expect("write");
        q.write(&mut *log, &Value::Null).expect("write");
        p.patch(&mut *log, &json!({"b": 2})).expect("patch");
        p.write(&mut *log, &json!("aaa")).expect("write");
        log.append(user("go on")).expect("append");
        log.navigate(&fork_point).expect("navigate");
        log.append(user("on a fork")).expect("append");
        p.write(&mut *log, &json!("other")).expect("write");
        ps.patch(&mut *log, &json!({"x": 1})).expect("patch");
        q.write(&mut *log, &json!([1, 2])).expect("write");
        p.drop(&mut *log).expect("drop");
        log.append(user("tail")).expect("append");
    }
}

/// For every entry, every plugin and both scopes, and at the leaf: the projection's
/// read equals the in-memory fold of a fresh strict read of the file.
fn assert_matches_fold(proj: &Store, file: &Path, db: &Path) {
    let log = SessionLog::open(file).expect("strict read of the session file");
    for plugin in PLUGINS {
        for scope in [Scope::Branch, Scope::Session] {
            let fold = state(db, plugin, scope);
            assert_eq!(
                proj.read_value(file, plugin, scope, None)
                    .expect("projection read"),
                fold.read(&log).expect("fold read"),
                "{plugin} {scope:?} at the leaf"
            );
            for e in log.entries() {
                let id = e.id();
                assert_eq!(
                    proj.read_value(file, plugin, scope, Some(id))
                        .expect("projection read"),
                    fold.read_at(&log, id).expect("fold read"),
                    "{plugin} {scope:?} at {id} (line {})",
                    e.location().line
                );
            }
        }
    }
}

fn branch_value(proj: &Store, file: &Path, plugin: &str) -> Option<Value> {
    proj.read_value(file, plugin, Scope::Branch, None)
        .expect("projection read")
}

// ---------------------------------------------------------------------------------------
// Invariants
// ---------------------------------------------------------------------------------------

#[test]
fn projection_equals_the_fold_at_every_entry_in_both_scopes() {
    let mut s = Session::new();
    s.populate();
    let file = s.file();
    let proj = common::open_store(&s.db).expect("open projection");
    assert_matches_fold(&proj, &file, &s.db);

    // The fold is not trivially empty: the fork sees its own writes, not its sibling's.
    let leaf = s.log.leaf_id().expect("leaf").to_owned();
    assert_eq!(branch_value(&proj, &file, "p"), None, "dropped on the fork");
    assert_eq!(branch_value(&proj, &file, "q"), Some(json!([1, 2])));
    assert_eq!(
        proj.read_value(&file, "p", Scope::Session, Some(&leaf))
            .expect("read"),
        Some(json!({"x": 1})),
        "session scope folds across both branches in file order"
    );
    let aaa = s
        .log
        .entries()
        .filter(|e| e.state_plugin() == Some("p"))
        .nth(3)
        .map(|e| e.id().to_owned())
        .expect("the \"aaa\" event");
    assert_eq!(
        proj.read_value(&file, "p", Scope::Branch, Some(&aaa))
            .expect("read"),
        Some(json!("aaa"))
    );
    assert_eq!(
        proj.read_value(&file, "q", Scope::Branch, Some(&aaa))
            .expect("read"),
        Some(Value::Null),
        "a written null is not absent"
    );
}

#[test]
fn a_catch_up_reads_only_what_follows_the_watermark_which_commits_with_the_rows() {
    let mut s = Session::new();
    s.populate();
    let file = s.file();
    // The writes leave the projection to the next reader: the first one builds it.
    let built = common::open_store(&s.db).expect("open projection");
    assert!(built.catch_up(&file).expect("build").rebuilt);
    drop(built);
    // One more plain message, outside SessionState: the projection lags by exactly it.
    s.log.append(user("one more")).expect("append");
    let tail_line = s
        .log
        .entries()
        .last()
        .map(|e| e.line_len())
        .expect("entries");

    let proj = common::open_store(&s.db).expect("open projection");
    assert_eq!(proj.last_catch_up(), None);
    let first = proj.catch_up(&file).expect("catch up");
    assert_eq!(
        first,
        CatchUp {
            rebuilt: false,
            bytes_read: tail_line,
            entries_added: 1,
            ..first
        }
    );
    assert_eq!(proj.last_catch_up(), Some(first));

    let second = proj.catch_up(&file).expect("catch up");
    assert_eq!(second, CatchUp::default(), "nothing new: no byte read");
    assert_eq!(proj.last_catch_up(), Some(second));
    drop(proj);

    // The watermark survived the connection: a new process would read nothing either.
    let proj = common::open_store(&s.db).expect("reopen projection");
    assert_eq!(proj.catch_up(&file).expect("catch up"), CatchUp::default());
    assert_matches_fold(&proj, &file, &s.db);
}

#[test]
fn the_database_uses_wal_normal_sync_and_a_busy_timeout() {
    let s = Session::new();
    let proj = common::open_store(&s.db).expect("open projection");
    let pragma = |name: &str| -> String { proj.pragma(name).expect("pragma") };
    assert_eq!(pragma("journal_mode"), "wal");
    assert_eq!(pragma("synchronous"), "1", "NORMAL");
    let busy: i64 = pragma("busy_timeout").parse().expect("a number");
    assert!(busy > 0, "busy_timeout = {busy} ms");
}

#[test]
fn a_new_database_is_built_from_the_whole_file() {
    let mut s = Session::new();
    s.populate();
    let file = s.file();
    let header_len = fs::read(&file)
        .expect("read")
        .iter()
        .position(|&b| b == b'\n')
        .expect("header line") as u64
        + 1;
    let other_db = s.dir.path().join("elsewhere").join("states.sqlite");
    let proj = common::open_store(&other_db).expect("open projection");
    let c = proj.catch_up(&file).expect("catch up");
    assert_eq!(
        c,
        CatchUp {
            rebuilt: true,
            bytes_read: file_len(&file) - header_len,
            entries_added: s.log.len() as u64,
            verified_bytes: 0
        }
    );
    assert_matches_fold(&proj, &file, &other_db);
}

// ---------------------------------------------------------------------------------------
// Incremental catch-up
// ---------------------------------------------------------------------------------------

#[test]
fn catch_up_reads_only_what_another_writer_appended() {
    let mut s = Session::new();
    s.populate();
    let file = s.file();
    let proj = common::open_store(&s.db).expect("open projection");
    proj.catch_up(&file).expect("catch up");

    // Another writer: a second handle on the same file, bypassing this database.
    let mut other = SessionLog::open(&file).expect("second handle");
    let mut value = 0;
    for k in [1_usize, 10, 100] {
        let before = file_len(&file);
        for i in 0..k {
            if i % 3 == 2 {
                other.append(user(&"words ".repeat(50))).expect("append");
            } else {
                value += 1;
                let scope = if i % 3 == 0 { "branch" } else { "session" };
                other
                    .append(set_event("p", scope, json!({ "k": value })))
                    .expect("append");
            }
        }
        let appended = file_len(&file) - before;
        let c = proj.catch_up(&file).expect("catch up");
        assert_eq!(
            c,
            CatchUp {
                rebuilt: false,
                bytes_read: appended,
                entries_added: k as u64,
                ..c
            },
            "after {k} appended entries"
        );
        assert_matches_fold(&proj, &file, &s.db);
    }
    assert!(branch_value(&proj, &file, "p").is_some());
}

#[test]
fn catch_up_after_pi_appends_reads_only_the_new_bytes() {
    for major in pi::MAJORS {
        let mut s = Session::new();
        s.populate();
        let file = s.file();
        let proj = common::open_store(&s.db).expect("open projection");
        proj.catch_up(&file).expect("catch up");

        let before = file_len(&file);
        let k = 6;
        let appended = pi::append(major, &file, k, Some("session-state/p"));
        assert_eq!(appended.ids.len(), k, "Pi {major} appended");
        let c = proj.catch_up(&file).expect("catch up");
        assert_eq!(
            c,
            CatchUp {
                rebuilt: false,
                bytes_read: file_len(&file) - before,
                entries_added: k as u64,
                ..c
            },
            "Pi {major}"
        );
        // Pi wrote values 1, 2, 3 as branch events of "p" at its leaf.
        assert_eq!(
            branch_value(&proj, &file, "p"),
            Some(json!(3)),
            "Pi {major}"
        );
        assert_matches_fold(&proj, &file, &s.db);
    }
}

#[test]
fn a_torn_tail_is_not_consumed_until_its_line_is_complete() {
    let mut s = Session::new();
    s.populate();
    let file = s.file();
    let proj = common::open_store(&s.db).expect("open projection");
    proj.catch_up(&file).expect("catch up");

    // Another writer's line, written in two pieces.
    let parent = s.log.leaf_id().expect("leaf").to_owned();
    let line = format!(
        "{}\n",
        json!({"type": "custom", "customType": "session-state/p",
               "data": {"v": 1, "scope": "branch", "op": "set", "value": "late"},
               "id": "0a0b0c0d", "parentId": parent, "timestamp": "2025-01-01T00:00:00.000Z"})
    );
    let (head, rest) = line.as_bytes().split_at(line.len() / 2);
    let mut f = OpenOptions::new().append(true).open(&file).expect("open");
    f.write_all(head).expect("write");
    let c = proj.catch_up(&file).expect("catch up");
    assert_eq!((c.rebuilt, c.entries_added), (false, 0));
    assert_eq!(branch_value(&proj, &file, "p"), None, "still dropped");

    f.write_all(rest).expect("write");
    let c = proj.catch_up(&file).expect("catch up");
    assert_eq!(
        c,
        CatchUp {
            rebuilt: false,
            bytes_read: line.len() as u64,
            entries_added: 1,
            ..c
        }
    );
    assert_eq!(branch_value(&proj, &file, "p"), Some(json!("late")));
    assert_matches_fold(&proj, &file, &s.db);
}

#[test]
fn a_torn_record_inside_the_file_is_skipped_as_the_log_skips_it() {
    let mut s = Session::new();
    s.populate();
    let file = s.file();
    let proj = common::open_store(&s.db).expect("open projection");
    proj.catch_up(&file).expect("catch up");

    // A writer died mid-line; Pi 1.x later terminated the line and appended after it.
    let mut f = OpenOptions::new().append(true).open(&file).expect("open");
    f.write_all(
        b"{\"type\":\"custom\",\"customType\":\"session-state/p\",\"data\":{\"v\":1,\"sc\n",
    )
    .expect("write");
    let mut other = SessionLog::open(&file).expect("strict read skips a torn record");
    other
        .append(set_event("p", "branch", json!("after the torn record")))
        .expect("append");

    let c = proj.catch_up(&file).expect("catch up");
    assert_eq!((c.rebuilt, c.entries_added), (false, 1));
    assert_eq!(
        branch_value(&proj, &file, "p"),
        Some(json!("after the torn record"))
    );
    assert_matches_fold(&proj, &file, &s.db);
}

// ---------------------------------------------------------------------------------------
// Rebuild when the consumed prefix changed
// ---------------------------------------------------------------------------------------

/// Byte offset of the only occurrence of `needle` in the file.
fn find_once(file: &Path, needle: &[u8]) -> u64 {
    let bytes = fs::read(file).expect("read");
    let hits: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{:?} occurs once",
        String::from_utf8_lossy(needle)
    );
    hits[0] as u64
}

fn overwrite_at(file: &Path, offset: u64, bytes: &[u8]) {
    let mut f = OpenOptions::new().write(true).open(file).expect("open");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    f.write_all(bytes).expect("write");
}

/// A session whose projection is warm and whose branch "p" at entry `aaa` is "aaa".
fn warm() -> (Session, PathBuf, Store, String) {
    let mut s = Session::new();
    s.populate();
    let file = s.file();
    let proj = common::open_store(&s.db).expect("open projection");
    proj.catch_up(&file).expect("catch up");
    let aaa = s
        .log
        .entries()
        .filter(|e| e.state_plugin() == Some("p"))
        .nth(3)
        .map(|e| e.id().to_owned())
        .expect("the \"aaa\" event");
    assert_eq!(
        proj.read_value(&file, "p", Scope::Branch, Some(&aaa))
            .expect("read"),
        Some(json!("aaa"))
    );
    (s, file, proj, aaa)
}

#[test]
fn a_truncated_file_is_rebuilt() {
    let (s, file, proj, aaa) = warm();
    // Keep the lines up to and including the "aaa" event.
    let e = s.log.entry(&aaa).expect("entry");
    let keep = e.location().offset + e.line_len();
    OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open")
        .set_len(keep)
        .expect("truncate");

    let c = proj.catch_up(&file).expect("catch up");
    assert!(c.rebuilt, "{c:?}");
    assert_eq!(branch_value(&proj, &file, "p"), Some(json!("aaa")));
    assert_matches_fold(&proj, &file, &s.db);
}

#[test]
fn a_truncated_file_that_regrew_past_the_watermark_is_rebuilt() {
    let (s, file, proj, aaa) = warm();
    let e = s.log.entry(&aaa).expect("entry");
    let keep = e.location().offset + e.line_len();
    let before = file_len(&file);
    OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open")
        .set_len(keep)
        .expect("truncate");
    // Same inode, and longer than what the projection consumed.
    let mut other = SessionLog::open(&file).expect("open");
    while file_len(&file) <= before {
        other
            .append(set_event("p", "branch", json!("regrown")))
            .expect("append");
        other.append(user("filler")).expect("append");
    }

    let c = proj.catch_up(&file).expect("catch up");
    assert!(c.rebuilt, "{c:?}");
    assert_eq!(branch_value(&proj, &file, "p"), Some(json!("regrown")));
    assert_matches_fold(&proj, &file, &s.db);
}

#[test]
fn a_file_rewritten_in_place_with_the_same_length_is_rebuilt() {
    let (s, file, proj, aaa) = warm();
    let len = file_len(&file);
    let at = find_once(&file, br#""value":"aaa""#);
    overwrite_at(&file, at + br#""value":"aa"#.len() as u64, b"b");
    assert_eq!(file_len(&file), len);

    let c = proj.catch_up(&file).expect("catch up");
    assert!(c.rebuilt, "{c:?}");
    assert_eq!(
        proj.read_value(&file, "p", Scope::Branch, Some(&aaa))
            .expect("read"),
        Some(json!("aab"))
    );
    assert_matches_fold(&proj, &file, &s.db);
}

/// `cp -p`, `rsync -t` and `touch -r` restore the mtime after rewriting a file in place;
/// a kernel with coarse timestamps leaves it unchanged when the rewrite follows the last
/// catch-up within one tick. The change is in the last 4 KiB of the consumed prefix,
/// which the watermark's digest covers.
#[test]
fn a_same_length_rewrite_that_keeps_the_mtime_is_rebuilt() {
    let (s, file, proj, _) = warm();
    // The last state event ("q" on the fork: [1,2]) lies in the last 4 KiB.
    let at = find_once(&file, br#""value":[1,2]"#);
    assert!(file_len(&file) - at < 4096);
    let mtime = fs::metadata(&file)
        .expect("stat")
        .modified()
        .expect("mtime");
    overwrite_at(&file, at + br#""value":[1,"#.len() as u64, b"3");
    let f = OpenOptions::new().write(true).open(&file).expect("open");
    f.set_modified(mtime).expect("restore mtime");
    drop(f);

    let c = proj.catch_up(&file).expect("catch up");
    assert!(
        c.rebuilt,
        "a same-length rewrite with the mtime restored was not noticed: {c:?}"
    );
    assert_eq!(branch_value(&proj, &file, "q"), Some(json!([1, 3])));
    assert_matches_fold(&proj, &file, &s.db);
}

#[test]
fn a_file_replaced_by_another_at_the_same_path_is_rebuilt() {
    let (s, file, proj, aaa) = warm();
    let bytes = fs::read(&file).expect("read");
    let replaced = String::from_utf8(bytes)
        .expect("utf-8")
        .replace(r#""value":"aaa""#, r#""value":"aab""#)
        .into_bytes();
    // Temp file + rename, as an editor or a migration does: a new inode, same length.
    let tmp = s.dir.path().join("replacement.tmp");
    fs::write(&tmp, &replaced).expect("write");
    fs::rename(&tmp, &file).expect("rename");

    let c = proj.catch_up(&file).expect("catch up");
    assert!(c.rebuilt, "{c:?}");
    assert_eq!(
        proj.read_value(&file, "p", Scope::Branch, Some(&aaa))
            .expect("read"),
        Some(json!("aab"))
    );
    assert_matches_fold(&proj, &file, &s.db);
}

#[cfg(unix)] // symlinks, FIFOs or inode numbers
#[test]
fn a_file_migrated_by_the_writer_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("v2.jsonl");
    let ts = "2025-01-01T00:00:00.000Z";
    let lines = [
        json!({"type": "session", "version": 2, "id": "0194-v2-session", "timestamp": ts, "cwd": "/proj"}),
        json!({"type": "message", "id": "a0000001", "parentId": null, "timestamp": ts,
               "message": {"role": "user", "content": "hi"}}),
        json!({"type": "custom", "customType": "session-state/p",
               "data": {"v": 1, "scope": "branch", "op": "set", "value": "from v2"},
               "id": "a0000002", "parentId": "a0000001", "timestamp": ts}),
        json!({"type": "message", "id": "a0000003", "parentId": "a0000002", "timestamp": ts,
               "message": {"role": "hookMessage", "content": "hook"}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    fs::write(&file, text).expect("write v2 file");

    let db = dir.path().join("states.sqlite");
    let proj = common::open_store(&db).expect("open projection");
    assert_eq!(branch_value(&proj, &file, "p"), Some(json!("from v2")));
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).expect("stat"));
    let ino_before = ino(&file);

    // Another process (its own database) writes: the file is migrated to v3 first.
    let writer_db = dir.path().join("writer.sqlite");
    let mut log = SessionLog::open(&file).expect("open v2");
    state(&writer_db, "p", Scope::Branch)
        .patch(&mut log, &json!({"migrated": true}))
        .expect("patch");
    assert_ne!(ino(&file), ino_before, "migration replaced the file");

    let c = proj.catch_up(&file).expect("catch up");
    assert!(c.rebuilt, "{c:?}");
    assert_eq!(
        branch_value(&proj, &file, "p"),
        Some(json!({"migrated": true}))
    );
    assert_matches_fold(&proj, &file, &db);
}

// ---------------------------------------------------------------------------------------
// The database itself
// ---------------------------------------------------------------------------------------

/// A populated session whose database holds many pages and has no WAL left over, so
/// that damage to the main file hits real data.
fn closed_db() -> Session {
    let mut s = Session::new();
    s.populate();
    let mut other = SessionLog::open(s.file()).expect("open");
    for i in 0..300 {
        other
            .append(set_event(
                "p",
                "branch",
                json!({"i": i, "pad": "x".repeat(200)}),
            ))
            .expect("append");
        other
            .append(set_event("q", "session", json!(i)))
            .expect("append");
    }
    let proj = common::open_store(&s.db).expect("open projection");
    proj.catch_up(s.file()).expect("catch up");
    drop(proj);
    // Ours leaves its WAL in place (docs/durability.md, "The projection's syncs"); a
    // connection of SQLite's defaults checkpoints it into the file and deletes it on
    // close, so that the file alone is the database these tests damage.
    let raw = common::raw_db(&s.db);
    raw.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    drop(raw);
    let mut wal = s.db.clone().into_os_string();
    wal.push("-wal");
    assert!(
        !Path::new(&wal).exists(),
        "the last connection checkpointed the WAL"
    );
    assert!(file_len(&s.db) > 64 * 1024, "{} bytes", file_len(&s.db));
    s
}

fn assert_rebuilt_and_right(s: &Session, expect_rebuilt: bool) {
    let file = s.file();
    let proj = common::open_store(&s.db).expect("a damaged database is rebuilt on open");
    let c = proj.catch_up(&file).expect("catch up");
    if expect_rebuilt {
        assert!(c.rebuilt, "{c:?}");
    }
    assert_eq!(
        branch_value(&proj, &file, "p"),
        Some(json!({"i": 299, "pad": "x".repeat(200)}))
    );
    assert_matches_fold(&proj, &file, &s.db);

    // The write path opens the same database and keeps working.
    let mut log = SessionLog::open(&file).expect("open");
    state(&s.db, "p", Scope::Branch)
        .write(&mut log, &json!("after repair"))
        .expect("write");
    assert_eq!(branch_value(&proj, &file, "p"), Some(json!("after repair")));
}

/// Garbage over everything but the 100-byte header, which still carries our stamp: ours,
/// so rebuilt.
#[test]
fn a_database_overwritten_with_garbage_is_rebuilt() {
    let s = closed_db();
    let len = file_len(&s.db) as usize;
    let garbage: Vec<u8> = (100..len).map(|i| (i * 7919 % 251) as u8).collect();
    overwrite_at(&s.db, 100, &garbage);
    assert_rebuilt_and_right(&s, true);
}

/// Garbage over the whole file, header included: nothing proves it ours any more.
#[test]
fn a_database_overwritten_with_garbage_header_and_all_is_refused_and_left_alone() {
    let s = closed_db();
    let len = file_len(&s.db) as usize;
    let garbage: Vec<u8> = (0..len).map(|i| (i * 7919 % 251) as u8).collect();
    fs::write(&s.db, &garbage).expect("scribble");
    let err = common::open_store(&s.db).expect_err("not provably ours");
    assert!(
        matches!(&err, Error::Projection(ProjectionError::NotOurDatabase { path, what })
            if path == &s.db && what.starts_with("is not a SQLite database")),
        "{err:?}"
    );
    assert_eq!(
        fs::read(&s.db).expect("read"),
        garbage,
        "left byte-identical"
    );
}

#[test]
fn a_database_truncated_to_half_is_rebuilt() {
    let s = closed_db();
    let half = file_len(&s.db) / 2;
    OpenOptions::new()
        .write(true)
        .open(&s.db)
        .expect("open")
        .set_len(half)
        .expect("truncate");
    assert_rebuilt_and_right(&s, true);
}

#[test]
fn a_database_with_garbage_over_its_second_half_is_rebuilt() {
    let s = closed_db();
    let len = file_len(&s.db);
    let garbage: Vec<u8> = (0..len / 2).map(|i| (i * 31 % 253) as u8).collect();
    overwrite_at(&s.db, len / 2, &garbage);
    // The header and the watermark's page may be intact, so the catch-up need not notice;
    // the first read that meets a damaged page must rebuild, not fail or answer wrongly.
    assert_rebuilt_and_right(&s, false);
}

/// Another program's SQLite database with a table and rows.
fn foreign_db(path: &Path) -> Vec<u8> {
    let conn = rusqlite::Connection::open(path).expect("create foreign database");
    conn.execute_batch(
        "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT); \
         INSERT INTO users(name) VALUES ('ada'), ('brian'); \
         CREATE TABLE orders(id INTEGER, user INTEGER);",
    )
    .expect("foreign schema");
    drop(conn);
    fs::read(path).expect("read")
}

#[test]
fn a_foreign_database_is_refused_and_left_byte_identical() {
    let s = closed_db();
    fs::remove_file(&s.db).expect("remove");
    let before = foreign_db(&s.db);

    let err = common::open_store(&s.db).expect_err("not ours");
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Projection(ProjectionError::NotOurDatabase { path, .. }) if path == &s.db),
        "{err:?}"
    );
    assert!(
        msg.contains(&*s.db.to_string_lossy())
            && msg.contains("is a SQLite database of another program (tables: users, orders)"),
        "{msg}"
    );
    let err = Store::at(&s.db)
        .and_then(|store| store.peek_lock_status("s"))
        .expect_err("status refuses it too");
    assert!(
        matches!(
            err,
            Error::Projection(ProjectionError::NotOurDatabase { .. })
        ),
        "{err:?}"
    );
    // The write path refuses before it appends anything.
    let mut log = SessionLog::open(s.file()).expect("open");
    let log_before = fs::read(s.file()).expect("read");
    let err = state(&s.db, "p", Scope::Branch)
        .write(&mut log, &json!("x"))
        .expect_err("the lock lives in the database");
    assert!(
        matches!(
            err,
            Error::Projection(ProjectionError::NotOurDatabase { .. })
        ),
        "{err:?}"
    );
    assert_eq!(fs::read(s.file()).expect("read"), log_before);
    assert_eq!(fs::read(&s.db).expect("read"), before, "byte-identical");
}

#[test]
fn another_programs_stamped_or_empty_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stamped = dir.path().join("stamped.db");
    let conn = rusqlite::Connection::open(&stamped).expect("create");
    conn.execute_batch("PRAGMA application_id = 1234;")
        .expect("stamp");
    drop(conn);
    let empty = dir.path().join("empty.db");
    let conn = rusqlite::Connection::open(&empty).expect("create");
    // A valid SQLite file with no tables and no stamp (journal_mode writes the header).
    conn.execute_batch("PRAGMA user_version = 7;")
        .expect("header");
    drop(conn);
    for (db, expect) in [
        (&stamped, "of another program (application_id 0x000004d2)"),
        (
            &empty,
            "is an empty SQLite database without session-state's stamp",
        ),
    ] {
        let before = fs::read(db).expect("read");
        assert!(!before.is_empty());
        let err = common::open_store(db).expect_err("not provably ours");
        assert!(err.to_string().contains(expect), "{err}");
        assert_eq!(&fs::read(db).expect("read"), &before);
    }
}

/// A database of ours from before the `application_id` stamp (its `meta` says
/// app=session-state) is used, migrated in place if its schema is older (its `meta`
/// kept, the file never deleted), and stamped.
#[test]
fn an_unstamped_database_of_ours_is_accepted_and_stamped() {
    let mut s = Session::new();
    s.populate();
    // "6" is the current schema version: stamped in place, nothing rebuilt.
    for version in ["1", "2", "3", "4", "5", "6"] {
        let _ = fs::remove_file(&s.db);
        fs::create_dir_all(s.db.parent().expect("parent")).expect("mkdir");
        let conn = rusqlite::Connection::open(&s.db).expect("create");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        conn.execute_batch(&format!(
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL); \
             INSERT INTO meta VALUES ('app', 'session-state'), ('schema_version', '{version}'), \
             ('marker', 'kept');"
        ))
        .expect("wave-1 meta");
        drop(conn);
        let header = fs::read(&s.db).expect("read");
        assert_eq!(&header[68..72], &[0, 0, 0, 0], "not stamped yet");

        let proj = common::open_store(&s.db).expect("ours");
        assert_matches_fold(&proj, &s.file(), &s.db);
        drop(proj);
        let header = fs::read(&s.db).expect("read");
        assert_eq!(&header[68..72], b"SSt1", "stamped (version {version})");
        let marker: Option<String> = rusqlite::Connection::open(&s.db)
            .expect("open")
            .query_row("SELECT value FROM meta WHERE key = 'marker'", [], |r| {
                r.get(0)
            })
            .optional()
            .expect("query");
        assert_eq!(
            marker.as_deref(),
            Some("kept"),
            "migrated in place, not deleted (version {version})"
        );
        let now: String = rusqlite::Connection::open(&s.db)
            .expect("open")
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .expect("query");
        assert_eq!(now, "6", "version {version}");
    }
}

/// A missing or zero-byte file is ours to create; a new database is stamped before the
/// switch to WAL, so the stamp is in the file's own header at once.
#[test]
fn a_missing_or_empty_file_becomes_a_stamped_database() {
    let s = Session::new();
    fs::create_dir_all(s.db.parent().expect("parent")).expect("mkdir");
    fs::write(&s.db, b"").expect("empty file");
    let proj = common::open_store(&s.db).expect("an empty file is ours to create");
    proj.catch_up(s.file()).expect("catch up");
    let header = fs::read(&s.db).expect("read");
    assert_eq!(&header[68..72], b"SSt1");
    drop(proj);
    let missing = s.dir.path().join("new").join("db.sqlite");
    assert!(
        Store::at(&missing)
            .and_then(|store| store.peek_lock_status("s"))
            .expect("status")
            == Peeked::NoDatabase
    );
    assert!(!missing.exists(), "status never creates the database");
    common::open_store(&missing).expect("create");
    assert_eq!(&fs::read(&missing).expect("read")[68..72], b"SSt1");
}

fn bin(args: &[&std::ffi::OsStr], agent: &Path) -> std::process::Output {
    common::cli()
        .args(args)
        .env("PI_CODING_AGENT_DIR", agent)
        .env_remove("HOME")
        .output()
        .expect("run session-state")
}

/// The command line, with paths that name somebody else's file: the session log itself,
/// another program's SQLite database, and a project's notes chosen by its settings.
#[test]
fn the_cli_refuses_a_database_path_naming_somebody_elses_file() {
    use std::ffi::OsStr;
    let mut s = Session::new();
    s.populate();
    let file = s.file();
    let agent = s.dir.path().join("agent");
    let log_before = fs::read(&file).expect("read");
    let f = file.as_os_str();

    let cases: Vec<(PathBuf, Vec<u8>)> = {
        let app = s.dir.path().join("app.db");
        let app_bytes = foreign_db(&app);
        vec![(file.clone(), log_before.clone()), (app, app_bytes)]
    };
    for (db, before) in &cases {
        let d = db.as_os_str();
        for args in [
            vec![
                OsStr::new("read"),
                f,
                OsStr::new("--plugin"),
                OsStr::new("p"),
                OsStr::new("--db"),
                d,
            ],
            vec![
                OsStr::new("write"),
                f,
                OsStr::new("--plugin"),
                OsStr::new("p"),
                OsStr::new("--value"),
                OsStr::new("1"),
                OsStr::new("--db"),
                d,
            ],
            vec![OsStr::new("status"), f, OsStr::new("--db"), d],
            vec![
                OsStr::new("force-refresh"),
                f,
                OsStr::new("--yes"),
                OsStr::new("--db"),
                d,
            ],
        ] {
            let out = bin(&args, &agent);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(
                stderr.contains(&*db.to_string_lossy()) && stderr.contains("refusing"),
                "{args:?}: {stderr}"
            );
            assert_eq!(
                &fs::read(db).expect("read"),
                before,
                "{args:?} left it intact"
            );
        }
    }
    let stderr = String::from_utf8_lossy(
        &bin(
            &[
                OsStr::new("read"),
                f,
                OsStr::new("--plugin"),
                OsStr::new("p"),
                OsStr::new("--db"),
                f,
            ],
            &agent,
        )
        .stderr,
    )
    .into_owned();
    assert!(
        stderr.contains(r#"is not a SQLite database (starts with `{"type":"session","versi…`)"#),
        "{stderr}"
    );
    assert_eq!(
        fs::read(&file).expect("read"),
        log_before,
        "the log is intact"
    );

    // A trusted project's settings choosing ../notes.md (under its .pi: the project's notes).
    let project = s.dir.path().join("project");
    fs::create_dir_all(project.join(".pi")).expect("mkdir");
    fs::write(
        project.join(".pi").join("settings.json"),
        r#"{"sessionState":{"databasePath":"../notes.md"}}"#,
    )
    .expect("settings");
    let notes = project.join("notes.md");
    fs::write(&notes, "# Notes\n\nkeep me\n").expect("notes");
    let out = bin(
        &[
            OsStr::new("read"),
            f,
            OsStr::new("--plugin"),
            OsStr::new("p"),
            OsStr::new("--cwd"),
            project.as_os_str(),
            OsStr::new("--trust-project"),
        ],
        &agent,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("notes.md") && stderr.contains("is not a SQLite database"),
        "{stderr}"
    );
    assert_eq!(
        fs::read_to_string(&notes).expect("read"),
        "# Notes\n\nkeep me\n"
    );

    // And our own database at a normal path still works.
    let ours = s.dir.path().join("ours.sqlite");
    let out = bin(
        &[
            OsStr::new("read"),
            f,
            OsStr::new("--plugin"),
            OsStr::new("q"),
            OsStr::new("--db"),
            ours.as_os_str(),
        ],
        &agent,
    );
    assert_eq!(
        (out.status.code(), &*String::from_utf8_lossy(&out.stdout)),
        (Some(0), "[1,2]\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(&fs::read(&ours).expect("read")[68..72], b"SSt1");
}

#[test]
fn a_database_that_cannot_be_opened_is_an_error_not_an_empty_answer() {
    let mut s = Session::new();
    let file = s.file();
    // A directory where the database file should be.
    fs::create_dir_all(&s.db).expect("mkdir");

    let err = common::open_store(&s.db).expect_err("a directory is not a database");
    assert!(
        err.to_string().contains(&*s.db.to_string_lossy()),
        "the error names the database: {err}"
    );

    let before = fs::read(&file).expect("read");
    let err = state(&s.db, "p", Scope::Branch)
        .write(&mut s.log, &json!(1))
        .expect_err("a write needs its lock, which lives in the database");
    assert!(
        matches!(err, Error::Projection(ProjectionError::Database { .. })),
        "a database error: {err:?}"
    );
    assert_eq!(fs::read(&file).expect("read"), before, "nothing appended");
    assert!(s.db.is_dir(), "the directory was left alone");
}

// ---------------------------------------------------------------------------------------
// Folded state events are checked on resume; a touch only restamps
// ---------------------------------------------------------------------------------------

/// A session with the "AAAA" event of "p" past the first 4 KiB and before the last 4 KiB
/// of the file, caught up.
fn aaaa_session() -> (Session, PathBuf, Store) {
    let mut s = Session::new();
    s.log.append(user(&"x".repeat(5000))).expect("append");
    s.log
        .append(set_event("p", "branch", json!("AAAA")))
        .expect("append");
    s.log.append(user(&"y".repeat(5000))).expect("append");
    let file = s.file();
    let at = find_once(&file, b"AAAA");
    assert!(
        at > 4096 && file_len(&file) - at > 4096,
        "outside both spans"
    );
    let proj = common::open_store(&s.db).expect("open");
    assert_eq!(branch_value(&proj, &file, "p"), Some(json!("AAAA")));
    (s, file, proj)
}

#[cfg(unix)] // symlinks, FIFOs or inode numbers
#[test]
fn an_in_place_edit_of_a_state_event_is_caught_even_when_the_file_grew() {
    let (s, file, proj) = aaaa_session();
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).expect("stat"));
    let (len, inode) = (file_len(&file), ino(&file));
    // `sed … > t && cat t > s.jsonl`: same length, same inode.
    let edited = fs::read_to_string(&file)
        .expect("read")
        .replace("AAAA", "BBBB");
    fs::write(&file, edited).expect("rewrite in place");
    assert_eq!((file_len(&file), ino(&file)), (len, inode));
    // Then Pi appends one message.
    SessionLog::open(&file)
        .expect("open")
        .append(user("after the edit"))
        .expect("append");

    assert_eq!(branch_value(&proj, &file, "p"), Some(json!("BBBB")));
    let c = proj.last_catch_up().expect("caught up");
    assert!(c.rebuilt, "{c:?}");
    assert_matches_fold(&proj, &file, &s.db);
}

#[test]
fn a_touch_restamps_without_a_rebuild() {
    let (s, file, proj) = aaaa_session();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open")
        .set_modified(later)
        .expect("touch");

    let c = proj.catch_up(&file).expect("catch up");
    assert!(
        matches!(
            c,
            CatchUp {
                rebuilt: false,
                bytes_read: 0,
                entries_added: 0,
                verified_bytes
            } if verified_bytes > 0
        ),
        "a content check, no rebuild: {c:?}"
    );
    // The stamp was updated: the next catch-up checks nothing.
    assert_eq!(proj.catch_up(&file).expect("catch up"), CatchUp::default());
    assert_eq!(branch_value(&proj, &file, "p"), Some(json!("AAAA")));
    assert_matches_fold(&proj, &file, &s.db);
}

// ---------------------------------------------------------------------------------------
// Stored rows that do not decode trigger a rebuild, never an answer
// ---------------------------------------------------------------------------------------

fn damage(db: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(db).expect("open");
    let n = conn.execute(sql, []).expect("damage");
    assert!(n > 0, "{sql} changed no row");
}

#[test]
fn a_corrupt_stored_delta_or_value_is_rebuilt_not_answered() {
    let (s, file, mut proj, aaa) = warm();
    // The patch event {"b":2} on {"a":1} is stored as a delta.
    let patched = s
        .log
        .entries()
        .filter(|e| e.state_plugin() == Some("p"))
        .nth(2)
        .map(|e| e.id().to_owned())
        .expect("the patch event");
    let at = |proj: &Store, plugin: &str, scope: Scope, id: Option<&str>| {
        proj.read_value(&file, plugin, scope, id).expect("read")
    };
    assert_eq!(
        at(&mut proj, "p", Scope::Branch, Some(&patched)),
        Some(json!({"a": 1, "b": 2}))
    );

    for (sql, plugin, scope, id, expect) in [
        (
            "UPDATE events SET delta = '{\"b\":' WHERE delta IS NOT NULL",
            "p",
            Scope::Branch,
            Some(patched.as_str()),
            json!({"a": 1, "b": 2}),
        ),
        (
            "UPDATE events SET base = NULL WHERE delta IS NOT NULL",
            "p",
            Scope::Branch,
            Some(patched.as_str()),
            json!({"a": 1, "b": 2}),
        ),
        (
            "UPDATE events SET value = 'aaa' WHERE value = '\"aaa\"'",
            "p",
            Scope::Branch,
            Some(aaa.as_str()),
            json!("aaa"),
        ),
        (
            "UPDATE session_values SET value = '{\"x\"' WHERE plugin = 'p'",
            "p",
            Scope::Session,
            None,
            json!({"x": 1}),
        ),
        (
            "UPDATE events SET scope = 'bogus' WHERE scope = 'branch'",
            "q",
            Scope::Branch,
            None,
            json!([1, 2]),
        ),
    ] {
        damage(&s.db, sql);
        assert_eq!(at(&mut proj, plugin, scope, id), Some(expect), "{sql}");
        let c = proj.last_catch_up().expect("caught up");
        assert!(c.rebuilt, "{sql}: {c:?}");
        assert_matches_fold(&proj, &file, &s.db);
    }
}

/// A stored fold error that names an event the database does not hold is damage, not an
/// answer: the session is rebuilt, and the error names the real entry and line.
#[test]
fn a_stored_bad_event_naming_a_missing_event_is_rebuilt() {
    let mut s = Session::new();
    let bad = s
        .log
        .append(NewEntry::custom(
            "session-state/p".to_owned(),
            Some(json!({"v": 1, "scope": "branch", "op": "explode"})),
        ))
        .expect("append");
    let at = s.log.entry(&bad).expect("entry").location();
    let file = s.file();
    let proj = common::open_store(&s.db).expect("open");
    let named = |proj: &Store| match proj.read_value(&file, "p", Scope::Branch, None) {
        Err(Error::State(StateError::BadEvent {
            entry_id, at: got, ..
        })) => (entry_id, got),
        other => panic!("expected BadEvent, got {other:?}"),
    };
    assert_eq!(named(&proj), (bad.clone(), at));
    damage(
        &s.db,
        "UPDATE events SET error_idx = 999999 WHERE error_idx IS NOT NULL",
    );
    assert_eq!(named(&proj), (bad, at), "not entry '' at line 0");
    assert!(proj.last_catch_up().expect("caught up").rebuilt);
}

/// A catch-up that folds a new event onto a damaged stored value rebuilds the session
/// instead of folding onto "absent".
#[test]
fn a_catch_up_onto_a_corrupt_stored_value_rebuilds() {
    let (s, file, proj, _) = warm();
    // The last branch event of "q" on the leaf's branch holds [1,2].
    damage(
        &s.db,
        "UPDATE events SET value = '[1,' WHERE value = '[1,2]'",
    );
    let mut other = SessionLog::open(&file).expect("open");
    other
        .append(NewEntry::custom(
            "session-state/q".to_owned(),
            Some(json!({"v": 1, "scope": "branch", "op": "patch", "patch": {"k": 1}})),
        ))
        .expect("append");
    let c = proj.catch_up(&file).expect("catch up");
    assert!(c.rebuilt, "{c:?}");
    // A merge patch on an array replaces it with the patch applied to {}.
    assert_eq!(branch_value(&proj, &file, "q"), Some(json!({"k": 1})));
    assert_matches_fold(&proj, &file, &s.db);
}

// ---------------------------------------------------------------------------------------
// A cold build commits in bounded chunks
// ---------------------------------------------------------------------------------------

/// A session of `n` user messages and a state event every tenth entry.
fn big_session(n: usize) -> Session {
    let mut s = Session::new();
    for i in 0..n {
        if i % 10 == 0 {
            s.log
                .append(set_event("p", "branch", json!({"i": i})))
                .expect("append");
        } else {
            s.log.append(user(&format!("m{i}"))).expect("append");
        }
    }
    s
}

#[test]
fn a_cold_build_commits_in_chunks_and_lets_other_sessions_in_between() {
    use std::sync::{Arc, Mutex};
    let s = big_session(1000);
    let file = s.file();
    let small = Session::new();
    let small_file = small.file();
    let db = s.db.clone();
    let seen: Arc<Mutex<Vec<(u64, i64)>>> = Arc::default();
    let proj = common::open_store(&s.db).expect("open");
    let key = std::fs::canonicalize(&file)
        .expect("canon")
        .to_string_lossy()
        .into_owned();
    let log = Arc::clone(&seen);
    proj.set_chunk_hook(
        100,
        Some(Box::new(move |so_far: &CatchUp| {
            // Another connection that never waits: it reads the committed watermark and
            // builds an unrelated session (write transactions) between two chunks.
            let raw = common::raw_db(&db);
            raw.busy_timeout(std::time::Duration::ZERO)
                .expect("busy_timeout 0");
            let consumed: i64 = raw
                .query_row(
                    "SELECT consumed FROM sessions WHERE file = ?1",
                    [&key],
                    |r| r.get(0),
                )
                .expect("the chunk is committed");
            // A store that waits at most 10 s: were the chunk's transaction still open,
            // this same thread would time out here.
            let other = common::open_store(&db).expect("open");
            other.forget(&small_file).expect("a write");
            let c = other
                .catch_up(&small_file)
                .expect("another session's build");
            assert!(c.rebuilt);
            log.lock()
                .expect("lock")
                .push((so_far.entries_added, consumed));
            true
        })),
    )
    .expect("set the hook");
    let c = proj.catch_up(&file).expect("build");
    assert!(c.rebuilt && c.entries_added == s.log.len() as u64, "{c:?}");
    let seen = seen.lock().expect("lock").clone();
    assert!(seen.len() >= 9, "one commit per 100 entries: {seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1),
        "each chunk extends the committed prefix: {seen:?}"
    );
    assert_matches_fold(&proj, &file, &s.db);
}

#[test]
fn a_build_interrupted_between_chunks_is_finished_by_the_next_reader() {
    let s = big_session(600);
    let file = s.file();
    let proj = common::open_store(&s.db).expect("open");
    let mut chunks = 0;
    proj.set_chunk_hook(
        100,
        Some(Box::new(move |_: &CatchUp| {
            chunks += 1;
            chunks < 2
        })),
    )
    .expect("set the hook");
    let first = proj.catch_up(&file).expect("build, stopped");
    assert!(first.rebuilt && first.entries_added == 200, "{first:?}");
    drop(proj);

    let next = common::open_store(&s.db).expect("open");
    let c = next.catch_up(&file).expect("finish");
    assert!(!c.rebuilt, "goes on from the committed chunk: {c:?}");
    assert_eq!(first.entries_added + c.entries_added, s.log.len() as u64);
    assert_matches_fold(&next, &file, &s.db);
}

/// docs/spec.md §2 "decide before touching the file": the first write of a new session, which
/// creates its file, refuses a database path that is not ours before the file exists.
#[test]
fn a_first_write_refuses_a_database_that_is_not_ours_before_creating_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.md");
    std::fs::write(&notes, "# my notes\n").unwrap();
    let sessions = dir.path().join("sessions");
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(&sessions, "/p")
        .unwrap();
    let role = Store::at(&notes)
        .and_then(|store| store.state::<String>("role", Scope::Branch))
        .unwrap();
    let err = role.write(&mut log, &"x".to_string()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Projection(ProjectionError::NotOurDatabase { .. })
        ),
        "{err}"
    );
    assert!(!log.is_materialized(), "no session file was created");
    assert!(!log.path().exists(), "{}", log.path().display());
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "# my notes\n");
}
