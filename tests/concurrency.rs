//! Many processes at once (SPEC §2 writing rules, §4, §6), with `examples/crash_writer.rs`:
//!
//! - six processes write one session at once: every write is either refused with the
//!   four-element lock error (holder, action, session, reason) or durably present with
//!   its value; no two lines fuse; nothing acknowledged is lost;
//! - six processes write six sessions through one database: every write succeeds, so no
//!   `SQLITE_BUSY` reaches a caller;
//! - a lock row left by a killed process never blocks the writers that come after it,
//!   even when six of them start at once.
//!
//! Processes start together through a barrier on their stdin (each prints `READY` and
//! waits for a line); nothing synchronizes with sleeps. `tests/concurrent_writers.rs`
//! covers two writers and live holders; `tests/crash_loop.rs` kills writers mid-write.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};
use session_state::lock::{self, Holder};
use session_state::{
    LogOptions, Materialize, NewEntry, Options, Projection, Scope, SessionLog, SessionState,
};

const PLUGIN: &str = "crash";

fn crash_writer() -> std::path::PathBuf {
    common::examples::example("crash_writer")
}

fn new_session(dir: &Path) -> (PathBuf, String) {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, "/proj")
        .unwrap();
    log.append(NewEntry::message(
        json!({"role": "user", "content": "many writers"}),
    ))
    .unwrap();
    (log.path().to_path_buf(), log.session_id().to_owned())
}

struct Writer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    ack: PathBuf,
    holder: String,
}

impl Writer {
    /// Spawns a writer of `count` attempts and waits until it is READY.
    fn spawn(file: &Path, db: &Path, ack: PathBuf, count: usize) -> Writer {
        let mut child = Command::new(crash_writer())
            .arg(file)
            .arg(db)
            .arg(&ack)
            .args(["--count", &count.to_string(), "--go"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn crash_writer");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), "READY");
        let holder = Holder::for_pid(child.id())
            .expect("the writer runs")
            .to_string();
        Writer {
            child,
            stdin,
            stdout,
            ack,
            holder,
        }
    }

    fn go(&mut self) {
        self.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }

    /// Its output lines, after it exited successfully.
    fn finish(mut self) -> Vec<String> {
        let lines: Vec<String> = (&mut self.stdout)
            .lines()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "writer failed ({status}): {stderr}");
        assert!(stderr.is_empty(), "{stderr}");
        lines
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Acknowledgements recorded by one writer: `(id, value)`.
fn acks(path: &Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (id, v) = l.split_once('\t').unwrap();
            (id.to_owned(), serde_json::from_str(v).unwrap())
        })
        .collect()
}

/// The file reads strictly without findings, has one entry per line after the header,
/// holds every acknowledged write with its value (and nothing unacknowledged), and its
/// projection after catch-up equals a full rebuild. Returns the number of acks.
fn assert_intact(file: &Path, db: &Path, ack_files: &[&Path], fresh: &Path) -> usize {
    let log = SessionLog::open(file).expect("strict read");
    assert!(log.findings().is_empty(), "{:?}", log.findings());
    let newlines = std::fs::read(file)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    assert_eq!(
        newlines,
        log.len() + 1,
        "one line per entry: no fused lines"
    );
    let state = Store::at(db)
        .and_then(|store| store.state::<Value>(PLUGIN, Scope::Branch))
        .unwrap();
    let mut total = 0;
    for ack in ack_files {
        for (id, value) in acks(ack) {
            assert!(log.entry(&id).is_some(), "acknowledged {id} is missing");
            assert_eq!(
                state.read_at(&log, &id).unwrap(),
                Some(value.clone()),
                "{id}"
            );
            total += 1;
        }
    }
    let events = log
        .entries()
        .filter(|e| e.state_plugin() == Some(PLUGIN))
        .count();
    assert_eq!(events, total, "every event in the file was acknowledged");
    assert!(
        log.forks().is_empty(),
        "a write appended on a stale view: {:?}",
        log.forks()
    );
    let mut shared = Projection::open(db).unwrap();
    let mut rebuilt = Projection::open(fresh).unwrap();
    let leaf = state.read(&log).unwrap();
    assert_eq!(
        shared.read(file, PLUGIN, Scope::Branch, None).unwrap(),
        leaf
    );
    assert_eq!(
        rebuilt.read(file, PLUGIN, Scope::Branch, None).unwrap(),
        leaf
    );
    assert!(
        lock::status(shared.connection(), log.session_id())
            .unwrap()
            .is_none()
    );
    total
}

/// A refusal names the holder (one of `holders`), the action, the session and a reason.
fn assert_refusal(line: &str, session_id: &str, holders: &[String]) {
    let msg = line
        .strip_prefix("REFUSED ")
        .unwrap_or_else(|| panic!("not a refusal: {line}"));
    assert!(
        holders.iter().any(|h| msg.contains(h.as_str())),
        "names a live writer as holder: {msg}"
    );
    assert!(
        msg.contains("write refused") || msg.contains("patch refused"),
        "names the action: {msg}"
    );
    assert!(
        msg.contains(&format!("session '{session_id}'")),
        "names the session: {msg}"
    );
    assert!(
        msg.contains("because") && msg.contains("lease expires in"),
        "gives the reason: {msg}"
    );
}

/// Runs `n` writers of `count` attempts on one session, released together.
fn run_on_one_session(
    n: usize,
    count: usize,
    before: impl FnOnce(&Path, &Path, &str),
) -> (usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let (file, session_id) = new_session(dir.path());
    let db = dir.path().join("agent").join("states.sqlite");
    before(&file, &db, &session_id);
    let mut writers: Vec<Writer> = (0..n)
        .map(|i| Writer::spawn(&file, &db, dir.path().join(format!("ack{i}.tsv")), count))
        .collect();
    let holders: Vec<String> = writers.iter().map(|w| w.holder.clone()).collect();
    for w in &mut writers {
        w.go();
    }
    let ack_files: Vec<PathBuf> = writers.iter().map(|w| w.ack.clone()).collect();
    let mut refused = 0;
    for w in writers {
        let lines = w.finish();
        assert_eq!(lines.len(), count, "one line per attempt");
        for l in lines.iter().filter(|l| !l.starts_with("ACK ")) {
            assert_refusal(l, &session_id, &holders);
            refused += 1;
        }
    }
    let refs: Vec<&Path> = ack_files.iter().map(PathBuf::as_path).collect();
    let acked = assert_intact(&file, &db, &refs, &dir.path().join("fresh.sqlite"));
    assert_eq!(
        acked + refused,
        n * count,
        "every attempt acknowledged or refused"
    );
    (acked, refused)
}

#[test]
fn six_processes_writing_one_session_lose_nothing_and_fuse_no_lines() {
    let started = Instant::now();
    let (acked, refused) = run_on_one_session(6, 20, |_, _, _| {});
    assert!(acked > 0);
    println!(
        "one session, 6 writers x 20 writes: {acked} acknowledged and present, {refused} \
         refused with the four-element error, {:.1?}",
        started.elapsed()
    );
}

#[test]
fn a_lock_row_of_a_killed_process_blocks_none_of_six_writers() {
    let (acked, refused) = run_on_one_session(6, 10, |file, db, session_id| {
        // A process takes the lock and is killed before releasing it.
        let mut sleeper = Command::new("sleep").arg("600").spawn().unwrap();
        let holder = Holder::for_pid(sleeper.id()).unwrap();
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        let mut p = Projection::open(db).unwrap();
        let guard =
            lock::acquire_at(p.connection(), session_id, "write", lock::now_ms(), &holder).unwrap();
        std::mem::forget(guard); // never released
        let row = lock::status(p.connection(), session_id).unwrap().unwrap();
        assert_eq!(row.holder, holder.to_string());
        assert_eq!(row.liveness, lock::Liveness::NotAlive);
        assert!(
            !row.lease_expired,
            "the row is fresh: only the dead holder can free it"
        );
        assert!(file.exists());
    });
    // `run_on_one_session` checked that every refusal names one of the six live writers,
    // never the dead holder, and that the lock row is gone at the end.
    assert!(acked > 0);
    println!("after a killed holder: {acked} acknowledged, {refused} refused by live writers");
}

/// Six writers on six sessions, one database; `fresh_db`: nobody opened it before.
fn six_sessions_one_database(fresh_db: bool) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent").join("states.sqlite");
    if !fresh_db {
        drop(Projection::open(&db).unwrap());
    }
    let count = 30;
    let sessions: Vec<(PathBuf, PathBuf)> = (0..6)
        .map(|i| {
            let sub = dir.path().join(format!("s{i}"));
            std::fs::create_dir_all(&sub).unwrap();
            (new_session(&sub).0, sub.join("ack.tsv"))
        })
        .collect();
    let mut writers: Vec<Writer> = sessions
        .iter()
        .map(|(file, ack)| Writer::spawn(file, &db, ack.clone(), count))
        .collect();
    for w in &mut writers {
        w.go();
    }
    for w in writers {
        // `finish` asserts exit 0 and an empty stderr: any error, SQLITE_BUSY included,
        // would have ended the writer with exit 2 and the message on stderr.
        let lines = w.finish();
        assert_eq!(lines.len(), count);
        assert!(lines.iter().all(|l| l.starts_with("ACK ")), "{lines:?}");
    }
    let mut acked = 0;
    for (i, (file, ack)) in sessions.iter().enumerate() {
        let fresh = dir.path().join(format!("fresh{i}.sqlite"));
        acked += assert_intact(file, &db, &[ack.as_path()], &fresh);
    }
    assert_eq!(acked, 6 * count);
    acked
}

#[test]
fn six_processes_writing_six_sessions_through_one_database_never_see_busy() {
    let started = Instant::now();
    let rounds = 3;
    let acked: usize = (0..rounds).map(|_| six_sessions_one_database(false)).sum();
    println!(
        "6 sessions, one database, 6 writers x 30 writes, {rounds} rounds: {acked} \
         acknowledged, 0 busy, {:.1?}",
        started.elapsed()
    );
}

/// The same, on a database that does not exist yet: six processes create it at once, as
/// on the first day. Every one of them must end up writing to the same database.
#[test]
fn six_processes_creating_one_database_at_once_all_write() {
    let started = Instant::now();
    let rounds = 10;
    let acked: usize = (0..rounds).map(|_| six_sessions_one_database(true)).sum();
    println!(
        "6 writers creating one database at once, {rounds} rounds: {acked} acknowledged, \
         {:.1?}",
        started.elapsed()
    );
}

/// Another process appended (Pi, or a writer of another host): the writer sees that the
/// file is longer than it last saw, ingests the foreign entries first, and appends its own
/// as a child of the last of them, so the leaf follows file order and nothing forks.
#[test]
fn a_foreign_append_is_ingested_before_ours() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = new_session(dir.path());
    let mut ours = SessionLog::open(&file).unwrap();
    let mut theirs = SessionLog::open(&file).unwrap();
    let foreign = theirs
        .append(NewEntry::message(
            json!({"role": "assistant", "content": "theirs"}),
        ))
        .unwrap();
    let state = Store::at(dir.path().join("states.sqlite"))
        .and_then(|store| store.state::<Value>(PLUGIN, Scope::Branch))
        .unwrap();
    let id = state.write(&mut ours, &json!("ours")).unwrap().unwrap();
    let log = SessionLog::open(&file).unwrap();
    assert_eq!(log.entry(&id).unwrap().parent_id(), Some(foreign.as_str()));
    assert!(log.forks().is_empty());
    assert_eq!(
        ours.len(),
        log.len(),
        "the writer's view includes the foreign entry"
    );
}

/// A file shrunk or replaced behind an open log is never appended to: the writer refuses
/// with `ChangedOnDisk` (reopen the session), and refresh says the same.
#[test]
fn a_file_shrunk_or_replaced_behind_the_writer_is_refused() {
    let entry = || NewEntry::message(json!({"role": "user", "content": "x"}));
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = new_session(dir.path());
    let original = std::fs::read(&file).unwrap();

    // Shrunk (another tool truncated it): refused, and the file is left as it is.
    let mut log = SessionLog::open(&file).unwrap();
    log.append(entry()).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(original.len() as u64)
        .unwrap();
    let err = log.append(entry()).unwrap_err();
    assert!(
        matches!(err, session_state::Error::ChangedOnDisk { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("shrank") && err.to_string().contains("reopen"),
        "{err}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), original, "nothing appended");
    let err = log.refresh().unwrap_err();
    assert!(
        matches!(err, session_state::Error::ChangedOnDisk { .. }),
        "{err}"
    );

    // Replaced (a new file renamed over the path): refused, the new file untouched.
    let mut log = SessionLog::open(&file).unwrap();
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, &original).unwrap();
    std::fs::rename(&other, &file).unwrap();
    let err = log.append(entry()).unwrap_err();
    assert!(
        matches!(err, session_state::Error::ChangedOnDisk { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("another file"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), original, "nothing appended");
    // Reopening reads the file now at the path, and appends go on.
    SessionLog::open(&file).unwrap().append(entry()).unwrap();
}
