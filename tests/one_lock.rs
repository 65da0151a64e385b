//! The one lock (`docs/lock.md`): exclusion rests on the kernel's lock on the session file
//! itself, which a holder ([`Store::lock`], a running Pi's presence) keeps for as long as
//! it holds the session. Every way around the other mechanisms (the projection database
//! reached through a symlink, the session file through a symlink or a hard link, the
//! writers' queue file deleted or garbled, two projection databases, a row written by a
//! release that does not announce it) meets the same lock.
//!
//! The holders are real processes (`examples/writer.rs --hold` / `--presence`, which print
//! `HOLDING` and wait for stdin); the writer is this test process, on the fast path (two
//! writes made first, so that its connection has judged the rows), or the CLI. Nothing
//! synchronizes with sleeps.

use crate::common;
use serde_json::{Value, json};
use session_state::On;
use session_state::lock::{Holder, LockError};
use session_state::{Error, Scope, SessionLog, SessionState, Store};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/example.jsonl");

/// A holder process, killed and reaped however the test ends.
struct Holding {
    child: Child,
    _stdin: ChildStdin,
}

impl Holding {
    /// `examples/writer.rs <file> <db> p 0 <mode>`, once it printed `HOLDING`.
    fn start(file: &Path, db: &Path, mode: &str) -> Holding {
        let mut child = Command::new(common::examples::example("writer"))
            .arg(file)
            .arg(db)
            .args(["p", "0", mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the holder");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the holder's stdout");
        assert_eq!(line.trim_end(), "HOLDING", "the holder did not hold");
        let stdin = child.stdin.take().expect("stdin");
        Holding {
            child,
            _stdin: stdin,
        }
    }

    /// SIGKILL, and reaped: the kernel has dropped its locks when this returns.
    fn kill(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("reap");
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A copy of the example session in `dir`.
fn session(dir: &Path) -> PathBuf {
    let file = dir.join("s.jsonl");
    std::fs::copy(EXAMPLE, &file).expect("copy the example session");
    file
}

/// A writer in this process: its store, its log and its state, after two writes (so that
/// the next one takes the fast path).
struct FastWriter {
    store: Store,
    log: SessionLog,
    state: SessionState<Value>,
    n: u64,
    /// Tells this writer's values from another's.
    tag: usize,
}

impl FastWriter {
    fn new(file: &Path, db: &Path) -> FastWriter {
        let store = Store::at(db).expect("store");
        let log = SessionLog::open(file).expect("open the log");
        let state = store.state("p", Scope::Branch).expect("state");
        let mut w = FastWriter {
            store,
            log,
            state,
            n: 0,
            tag: {
                static TAGS: std::sync::atomic::AtomicUsize =
                    std::sync::atomic::AtomicUsize::new(0);
                TAGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
        };
        for _ in 0..2 {
            w.write().expect("a write with nobody holding the session");
        }
        w
    }

    fn write(&mut self) -> session_state::Result<Option<String>> {
        self.n += 1;
        self.state
            .write(&mut self.log, &json!({"n": self.n, "w": self.tag}))
    }

    /// Every one of `count` writes is refused by a holder, and the file does not change.
    fn refused(&mut self, file: &Path, count: usize) {
        let before = std::fs::read(file).expect("read");
        for i in 0..count {
            match self.write() {
                Err(Error::Lock(e))
                    if matches!(*e, LockError::Held { .. } | LockError::FileHeld { .. }) => {}
                other => panic!("write {i} while the session is held: {other:?}"),
            }
        }
        assert_eq!(
            std::fs::read(file).expect("read"),
            before,
            "nothing appended"
        );
    }
}

/// The holder names the database through a symlink (of the file, or of its directory);
/// the writer names the real file, so the two open two queue files. The holder's lock on
/// the session file keeps the writer out all the same, on the fast path too.
#[test]
fn a_holder_through_a_symlinked_database_keeps_a_writer_out() {
    for (mode, through) in [
        ("--hold", "file"),
        ("--hold", "dir"),
        ("--presence", "file"),
        ("--presence", "dir"),
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let real = root.join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let file = session(root);
        let db = real.join("db.sqlite");
        let mut writer = FastWriter::new(&file, &db);
        let alias = match through {
            "file" => {
                let alias = real.join("alias.sqlite");
                std::os::unix::fs::symlink(&db, &alias).expect("symlink");
                alias
            }
            _ => {
                std::os::unix::fs::symlink(&real, root.join("alias")).expect("symlink");
                root.join("alias").join("db.sqlite")
            }
        };
        let holder = Holding::start(&file, &alias, mode);
        writer.refused(&file, 20);
        drop(holder);
    }
}

/// Two projection databases share nothing but the session file: a holder through one
/// (a `Store::lock`, a running Pi's presence) keeps out the writers of the other, the
/// library's on the fast path and the command line's, whether the two name the file
/// through a symlink, a hard link or its own name.
#[test]
fn a_holder_keeps_out_writers_of_another_database_however_they_name_the_file() {
    for mode in ["--hold", "--presence"] {
        for naming in ["same", "symlink", "hardlink"] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let root = tmp.path();
            let file = session(root);
            let held_as = match naming {
                "symlink" => {
                    let link = root.join("link.jsonl");
                    std::os::unix::fs::symlink(&file, &link).expect("symlink");
                    link
                }
                "hardlink" => {
                    let link = root.join("hard.jsonl");
                    std::fs::hard_link(&file, &link).expect("hard link");
                    link
                }
                _ => file.clone(),
            };
            let mut writer = FastWriter::new(&file, &root.join("b.sqlite"));
            let holder = Holding::start(&held_as, &root.join("a.sqlite"), mode);
            writer.refused(&file, 5);
            let before = std::fs::read(&file).expect("read");
            let out = common::cli()
                .args(["write"])
                .arg(&file)
                .args(["--plugin", "p", "--value", "7", "--db"])
                .arg(root.join("c.sqlite"))
                .output()
                .expect("run the CLI");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{mode} {naming}: {stderr}");
            assert!(stderr.contains("holds the session"), "{stderr}");
            assert_eq!(
                std::fs::read(&file).expect("read"),
                before,
                "{mode} {naming}"
            );
            drop(holder);
        }
    }
}

/// A holder killed with SIGKILL leaves its row behind, but the kernel dropped its lock:
/// the next writer proceeds at once, through the holder's database (the row's holder is
/// judged gone) and through another one.
#[test]
fn a_killed_holder_lets_the_next_writer_proceed_at_once() {
    for mode in ["--hold", "--presence"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let file = session(root);
        let mut other = FastWriter::new(&file, &root.join("b.sqlite"));
        let mut same = FastWriter::new(&file, &root.join("a.sqlite"));
        let holder = Holding::start(&file, &root.join("a.sqlite"), mode);
        other.refused(&file, 1);
        same.refused(&file, 1);
        holder.kill();
        other
            .write()
            .expect("through another database")
            .expect("an entry");
        same.write()
            .expect("through the holder's database")
            .expect("an entry");
    }
}

/// What stands beside the database that is not this crate's queue file (a symlink, dangling
/// or to a file elsewhere, a FIFO, a garbled file) is never followed, opened for a write,
/// or written; and a queue file deleted, renamed over or truncated behind a writer on the
/// fast path costs it nothing but fairness: the holder's lock keeps it out.
#[test]
fn the_queue_file_cannot_open_a_way_around_the_lock_and_is_never_followed() {
    for case in [
        "deleted",
        "renamed-over",
        "truncated",
        "garbled",
        "symlink",
        "dangling",
        "fifo",
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let file = session(root);
        let db = root.join("db.sqlite");
        let queue = root.join("db.sqlite-queue");
        let precious = root.join("precious.txt");
        std::fs::write(&precious, "not session-state's\n").expect("write");
        let placed_before = matches!(case, "symlink" | "dangling" | "fifo");
        let place = |queue: &Path| match case {
            "deleted" => std::fs::remove_file(queue).expect("rm"),
            "renamed-over" => {
                let other = root.join("other");
                std::fs::write(&other, b"").expect("write");
                std::fs::rename(&other, queue).expect("rename");
            }
            "truncated" => std::fs::write(queue, b"").expect("truncate"),
            "garbled" => std::fs::write(queue, b"garbage that is not a queue").expect("write"),
            "symlink" => std::os::unix::fs::symlink(&precious, queue).expect("symlink"),
            "dangling" => {
                std::os::unix::fs::symlink(root.join("made-by-nobody"), queue).expect("symlink")
            }
            _ => {
                let made = Command::new("mkfifo").arg(queue).status().expect("mkfifo");
                assert!(made.success());
            }
        };
        if placed_before {
            place(&queue);
        }
        let mut writer = FastWriter::new(&file, &db);
        if !placed_before {
            place(&queue);
        }
        let holder = Holding::start(&file, &db, "--hold");
        writer.refused(&file, 10);
        drop(holder);
        writer.write().expect("free again").expect("an entry");
        assert_eq!(
            std::fs::read_to_string(&precious).expect("read"),
            "not session-state's\n",
            "{case}"
        );
        assert!(!root.join("made-by-nobody").exists(), "{case}");
        let meta = std::fs::symlink_metadata(&queue);
        match case {
            "symlink" | "dangling" => assert!(meta.expect("meta").file_type().is_symlink()),
            "fifo" => {
                use std::os::unix::fs::FileTypeExt;
                assert!(meta.expect("meta").file_type().is_fifo());
            }
            "garbled" => assert_eq!(
                std::fs::read(&queue).expect("read"),
                b"garbage that is not a queue"
            ),
            _ => {}
        }
    }
}

/// `session-state write FILE --plugin p --value VALUE --db DB`, run to its end.
fn cli_write(file: &Path, value: &str, db: &Path) -> std::process::Output {
    common::cli()
        .args(["write"])
        .arg(file)
        .args(["--plugin", "p", "--value", value, "--db"])
        .arg(db)
        .output()
        .expect("run the CLI")
}

/// The rows of the two earlier releases, as they take them: schema 5 with a plain `INSERT`
/// in its own transaction (no announcement, no file lock: a process that connected before
/// the database was upgraded), schema 6 with the row and its announcement through the
/// queue file (`Store::lock_as`: the row and the announcement, no file lock). Each row
/// refuses this release's writers on every path: an open log on the fast path, a write
/// without a log (`write_file`), the CLI through the same database; and once the row is
/// gone, each of them writes again.
#[test]
fn an_earlier_releases_row_refuses_this_releases_writers_on_every_path() {
    let parent = Holder::for_pid(std::os::unix::process::parent_id()).expect("the parent runs");
    for release in [
        "schema 5: write_lock",
        "schema 5: pi_presence",
        "schema 6: write_lock",
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = session(tmp.path());
        let db = tmp.path().join("db.sqlite");
        let mut writer = FastWriter::new(&file, &db);
        let session_id = writer.log.session_id().to_owned();
        let raw = common::raw_db(&db);
        let table = if release.ends_with("pi_presence") {
            "pi_presence"
        } else {
            "write_lock"
        };
        let holder_store = Store::at(&db).expect("store");
        let mut row = None;
        if release.starts_with("schema 5") {
            // The presence table as schema 5 made it, if this release has not yet.
            raw.execute_batch(
                "CREATE TABLE IF NOT EXISTS pi_presence (session_id TEXT PRIMARY KEY, \
                 holder TEXT NOT NULL, since INTEGER NOT NULL, session_file TEXT);",
            )
            .expect("the presence table");
            let sql = match table {
                "write_lock" => {
                    "INSERT INTO write_lock (session_id, holder, acquired_at, action) \
                     VALUES (?1, ?2, ?3, 'write')"
                }
                _ => {
                    "INSERT INTO pi_presence (session_id, holder, since, session_file) \
                     VALUES (?1, ?2, ?3, NULL)"
                }
            };
            raw.execute(
                sql,
                rusqlite::params![session_id, parent.to_string(), common::now_ms()],
            )
            .expect("plant the row");
        } else {
            row = Some(
                holder_store
                    .lock_as(&session_id, "write", common::now_ms(), &parent)
                    .expect("the row, announced"),
            );
        }
        let before = std::fs::read(&file).expect("read");
        // An open log on the fast path.
        writer.refused(&file, 3);
        // No log in memory.
        let state = Store::at(&db)
            .expect("store")
            .state::<Value>("p", Scope::Branch)
            .expect("state");
        match state.write(On::file(&file, None), &json!({"file": 1})) {
            Err(Error::Lock(e)) if matches!(*e, LockError::Held { .. }) => {}
            other => panic!("{release}: write_file while the row stands: {other:?}"),
        }
        // The CLI, through the same database.
        let out = cli_write(&file, "7", &db);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{release}: {stderr}");
        assert!(
            stderr.contains(&parent.pid().to_string()),
            "{release}: names the holder: {stderr}"
        );
        assert_eq!(
            std::fs::read(&file).expect("read"),
            before,
            "{release}: nothing appended"
        );

        match row {
            Some(row) => {
                row.release().expect("release the row");
            }
            None => {
                raw.execute(&format!("DELETE FROM {table}"), [])
                    .expect("delete");
            }
        }
        writer.write().expect("free again").expect("an entry");
        state
            .write(On::file(&file, None), &json!({"file": 2}))
            .expect("free again");
        let out = cli_write(&file, "8", &db);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{release}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The session file held by this process: its own writes go through (one at a time),
/// and a holder of another process is refused at once.
#[test]
fn the_holders_own_writes_go_through_and_a_second_holder_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let file = session(root);
    let db = root.join("db.sqlite");
    let mut writer = FastWriter::new(&file, &db);
    let store = writer.store.clone();
    let id = writer.log.session_id().to_owned();
    let lock = store.lock(&id, "work").expect("lock");
    for _ in 0..3 {
        writer.write().expect("our own lock").expect("an entry");
    }
    // A second holder, through another database: refused (it prints the error, exit 2).
    let out = Command::new(common::examples::example("writer"))
        .arg(&file)
        .arg(root.join("other.sqlite"))
        .args(["p", "0", "--presence"])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds the session"), "{stderr}");
    lock.release().expect("release");
    let holder = Holding::start(&file, &root.join("other.sqlite"), "--presence");
    writer.refused(&file, 2);
    drop(holder);
}

/// A presence row of this release says that its holder holds the session file's lock
/// (`holds_file`): it is judged by that lock, not by `/proc`. With the lock gone (the
/// holder killed, in another pid namespace, on a system without `/proc`) the next writer
/// deletes the row and proceeds at once, however `/proc` judges the pid; a row of an
/// earlier release, which holds no file, is still judged as before and refuses while its
/// holder may be alive. `status` reports the holder as the lock says.
#[test]
fn a_presence_row_is_judged_by_the_session_files_lock_not_by_proc() {
    for holds_file in [true, false] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = session(tmp.path());
        let db = tmp.path().join("db.sqlite");
        let mut writer = FastWriter::new(&file, &db);
        // The table as this release makes it.
        writer.store.enter_presence("another", None).expect("enter");
        writer.store.leave_presence("another").expect("leave");
        let session_id = writer.log.session_id().to_owned();
        // pid 1 runs, with no start time recorded: /proc cannot tell ("unknown").
        common::raw_db(&db)
            .execute(
                "INSERT INTO pi_presence (session_id, holder, since, session_file, holds_file) \
                 VALUES (?1, 'pid:1', ?2, ?3, ?4)",
                rusqlite::params![
                    session_id,
                    common::now_ms(),
                    file.to_str().expect("utf-8"),
                    holds_file.then_some(1)
                ],
            )
            .expect("plant the row");
        let status = common::cli()
            .arg("status")
            .arg(&file)
            .args(["--json", "--db"])
            .arg(&db)
            .output()
            .expect("status");
        let report: Value = serde_json::from_slice(&status.stdout).expect("status --json");
        if holds_file {
            assert_eq!(report["pi"]["liveness"], "not alive", "{report}");
            writer
                .write()
                .expect("the holder is gone")
                .expect("an entry");
            assert_eq!(
                writer
                    .store
                    .peek_presence(&session_id)
                    .map(|p| matches!(p, session_state::maintenance::Peeked::NoRow))
                    .ok(),
                Some(true),
                "the row was deleted"
            );
        } else {
            assert_eq!(report["pi"]["liveness"], "unknown", "{report}");
            writer.refused(&file, 2);
        }
    }
}
