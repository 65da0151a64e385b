//! `prune` (CLI and `Store::prune`): the projection's rows of sessions whose file no
//! longer exists go (watermark, parent links, folded values, lock and presence rows); the
//! other sessions' rows stay and read without a rebuild; session files are never touched;
//! a file whose folder is missing (a disk that is not mounted) is kept.

use crate::common::{self, holders};

use serde_json::{Value, json};
use session_state::{LogOptions, Materialize, NewEntry, Scope, SessionLog, Store};
use std::path::{Path, PathBuf};

fn session(dir: &Path, n: u8) -> SessionLog {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .session_id(format!("0195f1d0-7c4e-7000-8000-0000000000{n:02}"))
        .create(dir, "/proj")
        .expect("create");
    log.append(NewEntry::message(json!({"role": "user", "content": "hi"})))
        .expect("append");
    log
}

/// A session file with branch and session state written through the projection `db`, and
/// its rows built.
fn projected(db: &Path, dir: &Path, n: u8, value: &str) -> (PathBuf, String) {
    let store = common::open_store(db).expect("store");
    let mut log = session(dir, n);
    let role = store.state::<Value>("role", Scope::Branch).expect("key");
    let seen = store.state::<Value>("seen", Scope::Session).expect("key");
    role.write(&mut log, &json!(value)).expect("write");
    seen.write(&mut log, &json!(1)).expect("write");
    role.patch(&mut log, &json!({"by": value})).expect("patch");
    // The writes leave the projection to the next reader: this one builds the rows.
    store.catch_up(log.path()).expect("catch up");
    let file = std::fs::canonicalize(log.path()).expect("canonical");
    (file, log.session_id().to_owned())
}

/// Rows of `file` per table, and the lock and presence rows of `sid`.
fn rows(db: &Path, file: &Path, sid: &str) -> [i64; 6] {
    let conn = common::raw_db(db);
    let key = file.to_string_lossy();
    let count =
        |sql: &str, arg: &str| -> i64 { conn.query_row(sql, [arg], |r| r.get(0)).expect(sql) };
    let presence: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'pi_presence')",
            [],
            |r| r.get(0),
        )
        .expect("tables");
    [
        count("SELECT count(*) FROM sessions WHERE file = ?1", &key),
        count("SELECT count(*) FROM nodes WHERE file = ?1", &key),
        count("SELECT count(*) FROM events WHERE file = ?1", &key),
        count("SELECT count(*) FROM session_values WHERE file = ?1", &key),
        count("SELECT count(*) FROM write_lock WHERE session_id = ?1", sid),
        if presence {
            count(
                "SELECT count(*) FROM pi_presence WHERE session_id = ?1",
                sid,
            )
        } else {
            0
        },
    ]
}

/// Plants a lock row and a presence row of `sid` held by `holder`.
fn hold(db: &Path, sid: &str, holder: &str) {
    let conn = common::raw_db(db);
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS pi_presence (session_id TEXT PRIMARY KEY, holder TEXT NOT NULL, \
         since INTEGER NOT NULL, session_file TEXT)",
    )
    .expect("presence table");
    let now = common::now_ms();
    conn.execute(
        "INSERT INTO write_lock (session_id, holder, acquired_at, action) VALUES (?1, ?2, ?3, 'write')",
        rusqlite::params![sid, holder, now],
    )
    .expect("lock row");
    conn.execute(
        "INSERT INTO pi_presence (session_id, holder, since, session_file) VALUES (?1, ?2, ?3, NULL)",
        rusqlite::params![sid, holder, now],
    )
    .expect("presence row");
}

fn prune(dir: &Path, db: &Path, args: &[&str]) -> (i32, String, String) {
    let out = common::cli()
        .arg("prune")
        .args(args)
        .arg("--db")
        .arg(db)
        .env("HOME", dir)
        .env("PI_CODING_AGENT_DIR", dir.join("agent"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn prune_removes_only_the_deleted_sessions_rows_and_the_other_reads_without_a_rebuild() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("states.sqlite");
    let (a, sid_a) = projected(&db, &dir.path().join("sessions"), 1, "a");
    let (b, sid_b) = projected(&db, &dir.path().join("sessions"), 2, "b");
    let dead = holders::dead_holder().to_string();
    let alive = holders::Proc::sleep();
    hold(&db, &sid_a, &dead);
    hold(&db, &sid_b, &alive.holder().to_string());
    let b_rows = rows(&db, &b, &sid_b);
    assert_eq!(
        b_rows,
        [1, 4, 3, 1, 1, 1],
        "b: watermark, header-less 4 entries, 3 events, 1 session value, lock, presence"
    );
    assert_eq!(rows(&db, &a, &sid_a), b_rows);
    let b_bytes = std::fs::read(&b).expect("read b");

    std::fs::remove_file(&a).expect("delete a");

    // --dry-run lists it and removes nothing.
    let (code, out, err) = prune(dir.path(), &db, &["--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "would remove {} (session {sid_a}: 4 entries, 3 state events; the lock row of {dead}; \
             the presence row of the Pi {dead})\n2 sessions in {}: 1 would remove, 0 kept, 1 in place\n",
            a.display(),
            db.display()
        )
    );
    assert_eq!(rows(&db, &a, &sid_a), b_rows, "a dry run removes nothing");

    // Without a terminal and without --yes: nothing removed, exit 1.
    let (code, _, err) = prune(dir.path(), &db, &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains("nothing was removed (there is no terminal to ask on); run again with --yes"),
        "{err}"
    );
    assert_eq!(rows(&db, &a, &sid_a), b_rows);

    let (code, out, err) = prune(dir.path(), &db, &["--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!(
            "removed {} (session {sid_a}: 4 entries",
            a.display()
        )),
        "{out}"
    );
    let tail = format!(
        "2 sessions in {}: 1 removed, 0 kept, 1 in place\n",
        db.display()
    );
    assert!(out.ends_with(&tail), "{out}");
    assert_eq!(
        rows(&db, &a, &sid_a),
        [0; 6],
        "every row of the deleted session is gone"
    );
    assert_eq!(
        rows(&db, &b, &sid_b),
        b_rows,
        "the other session's rows, its live lock and presence stay"
    );
    assert_eq!(
        std::fs::read(&b).expect("read b"),
        b_bytes,
        "session files are never touched"
    );

    // The remaining session reads from its rows as they were: no rebuild, nothing re-read.
    let store = Store::at(&db).expect("store");
    let c = store.catch_up(&b).expect("catch up");
    assert!(!c.rebuilt, "{c:?}");
    assert_eq!(
        (c.bytes_read, c.entries_added, c.verified_bytes),
        (0, 0, 0),
        "{c:?}"
    );
    let role = store.state::<Value>("role", Scope::Branch).expect("key");
    assert_eq!(role.read(&b).expect("read"), Some(json!({"by": "b"})));
    let seen = store.state::<Value>("seen", Scope::Session).expect("key");
    assert_eq!(seen.read(&b).expect("read"), Some(json!(1)));

    // Nothing left to prune.
    let (code, out, _) = prune(dir.path(), &db, &["--yes", "--json"]);
    assert_eq!(code, 0);
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["checked"], json!(1));
    assert_eq!(report["removed"], json!([]));
    alive.end();
}

#[test]
fn a_session_whose_folder_is_missing_is_kept_until_the_folder_is_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("states.sqlite");
    let disk = dir.path().join("disk");
    let (file, sid) = projected(&db, &disk.join("sessions"), 3, "x");
    let before = rows(&db, &file, &sid);
    // As an unmounted disk looks: the whole folder is missing.
    let away = dir.path().join("away");
    std::fs::rename(&disk, &away).expect("unmount");

    let store = Store::at(&db).expect("store");
    let report = store.prune().expect("prune");
    assert_eq!(report.checked, 1);
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(report.kept.len(), 1);
    assert_eq!(report.kept[0].file, file);
    assert!(
        report.kept[0]
            .reason
            .contains("is missing too (a disk that is not mounted?); kept"),
        "{}",
        report.kept[0].reason
    );
    assert_eq!(rows(&db, &file, &sid), before, "kept");

    // The CLI says the same, and what to do.
    let (code, out, err) = prune(dir.path(), &db, &["--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("kept {}: its folder", file.display())),
        "{out}"
    );
    assert!(
        out.contains("create it (mkdir -p) and prune again"),
        "{out}"
    );

    // The folder is there again (the disk is back, without the file): now it goes.
    std::fs::create_dir_all(file.parent().expect("folder")).expect("mkdir");
    let report = store.prune().expect("prune");
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert_eq!(report.removed[0].file, file);
    assert_eq!(rows(&db, &file, &sid)[..4], [0, 0, 0, 0]);
}

#[test]
fn a_copy_with_the_same_session_id_and_a_live_pi_keep_their_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("states.sqlite");
    let sessions = dir.path().join("sessions");
    let (a, sid) = projected(&db, &sessions, 4, "a");
    // A copy of the file (same session id), projected too.
    let copy = sessions.join("copy.jsonl");
    std::fs::copy(&a, &copy).expect("copy");
    let copy = std::fs::canonicalize(&copy).expect("canonical");
    Store::at(&db)
        .expect("store")
        .catch_up(&copy)
        .expect("project the copy");
    let pi = holders::Proc::sleep();
    hold(&db, &sid, &pi.holder().to_string());
    std::fs::remove_file(&a).expect("delete a");

    let report = Store::at(&db).expect("store").prune().expect("prune");
    assert_eq!(report.removed.len(), 1, "{report:?}");
    let r = &report.removed[0];
    assert_eq!((r.lock.as_deref(), r.presence.as_deref()), (None, None));
    assert_eq!(
        r.left,
        ["its lock and presence rows: another file has the same session id"]
    );
    assert_eq!(
        rows(&db, &copy, &sid),
        [1, 4, 3, 1, 1, 1],
        "the copy's rows and the holds stay"
    );

    // The copy goes too: its live holder's rows stay, and are named.
    std::fs::remove_file(&copy).expect("delete the copy");
    let report = Store::at(&db).expect("store").prune().expect("prune");
    let r = &report.removed[0];
    assert_eq!((r.lock.as_deref(), r.presence.as_deref()), (None, None));
    assert_eq!(r.left.len(), 2, "{:?}", r.left);
    assert!(
        r.left[0].starts_with(&format!("the lock row of {}", pi.holder())),
        "{:?}",
        r.left
    );
    assert!(
        r.left[1].starts_with(&format!("the presence row of the Pi {}", pi.holder())),
        "{:?}",
        r.left
    );
    assert_eq!(rows(&db, &copy, &sid), [0, 0, 0, 0, 1, 1]);
    pi.end();
}

#[test]
fn prune_never_creates_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("none").join("states.sqlite");
    let report = Store::at(&db).expect("store").prune().expect("prune");
    assert!(!report.database_exists && report.removed.is_empty());
    let (code, out, err) = prune(dir.path(), &db, &["--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "no projection database at {}: nothing to prune\n",
            db.display()
        )
    );
    assert!(
        !db.exists() && !db.parent().expect("parent").exists(),
        "nothing created"
    );
}

#[test]
fn prune_help_has_examples_and_exit_codes() {
    let out = common::cli()
        .args(["prune", "--help"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Examples:\n  session-state prune --dry-run"),
        "{text}"
    );
    assert!(text.contains("Exit codes: 0 pruned"), "{text}");
    assert!(
        text.contains("--dry-run") && text.contains("--yes") && text.contains("--json"),
        "{text}"
    );
}

/// A session file whose path is not UTF-8 (a folder named in Latin-1, say) is the session
/// its path names: `prune` keeps its rows while it exists and removes them once it is gone,
/// a file whose name differs only where the bytes are not UTF-8 has rows of its own, and
/// reads after a prune need no rebuild.
#[test]
#[cfg(unix)]
fn a_session_whose_path_is_not_utf8_keeps_its_rows_while_its_file_exists() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("states.sqlite");
    // "caf\xe9" and "caf\xe8": one lossy text ("caf\u{fffd}"), two folders.
    let latin1 = dir.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    let other = dir.path().join(std::ffi::OsStr::from_bytes(b"caf\xe8"));
    let (file, _) = projected(&db, &latin1, 1, "here");
    let (gone, _) = projected(&db, &other, 2, "gone");
    let count = || -> i64 {
        common::raw_db(&db)
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .expect("count")
    };
    assert_eq!(count(), 2, "two files, two sessions' rows");
    std::fs::remove_file(&gone).expect("remove");

    let report = Store::at(&db).expect("store").prune().expect("prune");
    let removed: Vec<&Path> = report.removed.iter().map(|s| s.file.as_path()).collect();
    assert_eq!(removed, [gone.as_path()], "{report:?}");
    assert_eq!(count(), 1, "the existing file's rows stay");
    let store = common::open_store(&db).expect("store");
    let c = store.catch_up(&file).expect("catch up");
    assert!(!c.rebuilt && c.bytes_read == 0, "{c:?}");
    assert_eq!(
        store
            .read_value(&file, "role", Scope::Branch, None)
            .expect("read"),
        Some(json!({"by": "here"}))
    );
    // And again: nothing more to remove.
    let report = Store::at(&db).expect("store").prune().expect("prune");
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(count(), 1);
}
