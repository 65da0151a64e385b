//! The per-session write lock (SPEC §6) between real processes writing one real session
//! file through one real projection database: nothing acknowledged is lost, no two lines
//! fuse, a refusal names holder, action, session and reason, a dead holder's row never
//! blocks, and a live holder blocks until its lease ends.
//!
//! The other processes are `examples/writer.rs` (built once per test binary) and `sleep`.
//! Processes synchronize through their stdin and stdout, never through sleeps.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Barrier, OnceLock};

use serde_json::{Value, json};
use session_state::lock::{self, Holder, LEASE, Liveness, LockError};
use session_state::{
    Error, LogOptions, Materialize, NewEntry, Options, Projection, Scope, SessionLog, SessionState,
};
use tempfile::TempDir;

const PLUGIN: &str = "shared";

/// `examples/writer.rs`, built once with the cargo that runs the tests.
fn writer_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let out = Command::new(env!("CARGO"))
            .args(["build", "--example", "writer", "--message-format=json"])
            .arg("--manifest-path")
            .arg(&manifest)
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build --example writer");
        assert!(out.status.success(), "cargo build --example writer failed");
        let exe = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "writer")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported the writer executable");
        assert!(exe.exists(), "{}", exe.display());
        exe
    })
}

/// A session file with one user message, and a database path that does not exist yet.
struct Session {
    _dir: TempDir,
    file: PathBuf,
    db: PathBuf,
    id: String,
}

fn session() -> Session {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir.path(), "/proj")
        .expect("create session");
    log.append(NewEntry::message(
        json!({"role": "user", "content": "two writers"}),
    ))
    .expect("append");
    Session {
        file: log.path().to_path_buf(),
        db: dir.path().join("agent").join("states.sqlite"),
        id: log.session_id().to_owned(),
        _dir: dir,
    }
}

/// A writer process, killed and reaped however the test ends.
struct Writer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Writer {
    fn spawn(s: &Session, n: usize, flag: Option<&str>) -> Writer {
        let mut cmd = Command::new(writer_exe());
        cmd.arg(&s.file)
            .arg(&s.db)
            .arg(PLUGIN)
            .arg(n.to_string())
            .args(flag)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn writer");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Writer {
            child,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn holder(&self) -> String {
        Holder::for_pid(self.pid())
            .expect("the writer is running")
            .to_string()
    }

    /// Blocks until the writer prints `line` (READY, HOLDING).
    fn expect_line(&mut self, line: &str) {
        let mut got = String::new();
        self.stdout.read_line(&mut got).expect("read writer stdout");
        assert_eq!(
            got.trim_end(),
            line,
            "writer {}: {}",
            self.pid(),
            self.stderr()
        );
    }

    /// Lets the writer past its READY / HOLDING point.
    fn release(&mut self) {
        let mut stdin = self.stdin.take().expect("stdin not yet released");
        stdin.write_all(b"go\n").expect("write to writer stdin");
    }

    fn stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(e) = self.child.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    /// The remaining output lines, after the writer exited successfully.
    fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let lines: Vec<String> = (&mut self.stdout)
            .lines()
            .collect::<Result<_, _>>()
            .expect("read writer stdout");
        let stderr = self.stderr();
        let status = self.child.wait().expect("wait for writer");
        assert!(status.success(), "writer failed ({status}): {stderr}");
        lines
    }

    /// SIGKILL, then reap: afterwards its pid is gone.
    fn kill(mut self) {
        self.child.kill().expect("kill writer");
        self.child.wait().expect("reap writer");
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process that stays alive until dropped, to stand for a live lock holder.
struct Sleeper(Child);

impl Sleeper {
    fn spawn() -> Sleeper {
        Sleeper(
            Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("spawn sleep"),
        )
    }
    fn holder(&self) -> Holder {
        Holder::for_pid(self.0.id()).expect("sleep is visible in /proc")
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Leaves a lock row for `holder`, as a process that never released it would.
fn plant_lock(s: &Session, holder: &Holder, acquired_at_ms: i64) {
    let mut db = Projection::open(&s.db).expect("open projection");
    let guard = lock::acquire_at(db.connection(), &s.id, "write", acquired_at_ms, holder)
        .expect("plant the lock row");
    // Never released: the row stays behind.
    std::mem::forget(guard);
}

fn lock_row(s: &Session) -> Option<lock::LockStatus> {
    let mut db = Projection::open(&s.db).expect("open projection");
    lock::status(db.connection(), &s.id).expect("lock status")
}

fn shared(s: &Session) -> SessionState<Value> {
    Store::at(&s.db)
        .and_then(|store| store.state(PLUGIN, Scope::Branch))
        .expect("open SessionState")
}

/// A refusal printed by a writer names the holder, the action, the session and a reason.
fn assert_refusal(line: &str, s: &Session, holders: &[String]) {
    let msg = line
        .strip_prefix("REFUSED ")
        .unwrap_or_else(|| panic!("not a refusal: {line}"));
    assert!(
        holders.iter().any(|h| msg.contains(h.as_str())),
        "names the holder ({holders:?}): {msg}"
    );
    assert!(msg.contains("write refused"), "names the action: {msg}");
    assert!(msg.contains(&s.id), "names the session: {msg}");
    assert!(
        msg.contains("because") && msg.contains("lease expires in"),
        "gives the reason: {msg}"
    );
}

/// Checks the file after writers finished: it reads strictly without findings, every
/// acknowledged id is there with the value written, nothing else was written, every
/// write saw the ones before it, and the lock row is gone. `runs` pairs each writer's
/// pid with its output lines (line i = attempt i). Returns the number of acknowledged
/// writes.
fn assert_nothing_lost(s: &Session, runs: &[(u32, Vec<String>)], holders: &[String]) -> usize {
    let log = SessionLog::open(&s.file).expect("strict read: no fused or torn lines");
    assert!(log.findings().is_empty(), "{:?}", log.findings());
    let state = shared(s);
    let mut acked = 0;
    for (pid, lines) in runs {
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("REFUSED ") {
                assert_refusal(line, s, holders);
                continue;
            }
            let e = log
                .entry(line)
                .unwrap_or_else(|| panic!("acknowledged id {line} of writer {pid} is missing"));
            assert_eq!(e.state_plugin(), Some(PLUGIN));
            assert_eq!(
                state.read_at(&log, line).expect("read"),
                Some(json!({"writer": pid, "i": i})),
                "entry {line}"
            );
            acked += 1;
        }
    }
    let events = log
        .entries()
        .filter(|e| e.state_plugin() == Some(PLUGIN))
        .count();
    assert_eq!(events, acked, "every event in the file was acknowledged");
    assert!(
        log.forks().is_empty(),
        "a write was appended on a stale view: forks at {:?}",
        log.forks()
    );
    assert!(lock_row(s).is_none(), "the lock was released");

    let mut proj = Projection::open(&s.db).expect("open projection");
    assert_eq!(
        proj.read(&s.file, PLUGIN, Scope::Branch, None)
            .expect("projection read"),
        state.read(&log).expect("fold read")
    );
    acked
}

#[test]
fn two_writers_at_the_same_moment_lose_nothing_and_fuse_no_lines() {
    for round in 0..3 {
        let s = session();
        // The database exists, as after a first use: two openers racing to create it
        // are `a_new_database_opened_by_two_at_once_is_one_database`.
        drop(Projection::open(&s.db).expect("create the database"));
        let n = 40;
        let mut a = Writer::spawn(&s, n, Some("--go"));
        let mut b = Writer::spawn(&s, n, Some("--go"));
        a.expect_line("READY");
        b.expect_line("READY");
        let holders = [a.holder(), b.holder()];
        a.release();
        b.release();
        let (pa, pb) = (a.pid(), b.pid());
        let runs = [(pa, a.finish()), (pb, b.finish())];
        for (_, lines) in &runs {
            assert_eq!(lines.len(), n, "one line per attempt");
        }
        let acked = assert_nothing_lost(&s, &runs, &holders);
        let refused = runs
            .iter()
            .flat_map(|(_, l)| l)
            .filter(|l| l.starts_with("REFUSED "))
            .count();
        eprintln!("round {round}: {acked} acknowledged, {refused} refused");
        assert_eq!(acked + refused, 2 * n);
    }
}

#[test]
fn a_writer_holding_the_lock_refuses_the_other_with_the_four_elements() {
    let s = session();
    let mut a = Writer::spawn(&s, 3, Some("--hold"));
    a.expect_line("HOLDING");
    let holder = a.holder();

    let b = Writer::spawn(&s, 3, None);
    let pb = b.pid();
    let refused = b.finish();
    assert_eq!(refused.len(), 3);
    for line in &refused {
        assert_refusal(line, &s, std::slice::from_ref(&holder));
        assert!(line.contains("alive"), "{line}");
    }

    a.release();
    let pa = a.pid();
    let written = a.finish();
    let runs = [(pa, written), (pb, refused)];
    assert_eq!(assert_nothing_lost(&s, &runs, &[holder]), 3);
}

#[test]
fn a_lock_left_by_a_killed_writer_does_not_block_the_next() {
    let s = session();
    let mut a = Writer::spawn(&s, 3, Some("--hold"));
    a.expect_line("HOLDING");
    let holder = a.holder();
    a.kill();
    let row = lock_row(&s).expect("the killed writer's row is still there");
    assert_eq!(row.holder, holder);
    assert_eq!(row.liveness, Liveness::NotAlive);
    assert!(!row.lease_expired);

    let b = Writer::spawn(&s, 3, None);
    let pb = b.pid();
    let lines = b.finish();
    assert!(lines.iter().all(|l| !l.starts_with("REFUSED")), "{lines:?}");
    assert_eq!(assert_nothing_lost(&s, &[(pb, lines)], &[holder]), 3);
}

#[test]
fn a_lock_row_of_a_dead_process_does_not_block_the_next_writer() {
    let s = session();
    let sleeper = Sleeper::spawn();
    let holder = sleeper.holder();
    drop(sleeper); // killed and reaped
    plant_lock(&s, &holder, lock::now_ms());

    let mut log = SessionLog::open(&s.file).expect("open");
    let id = shared(&s)
        .write(&mut log, &json!("after a crash"))
        .expect("a dead holder does not block")
        .expect("appended");
    assert_eq!(
        SessionLog::open(&s.file).expect("open").leaf_id(),
        Some(&*id)
    );
    assert!(lock_row(&s).is_none(), "released after the write");
}

#[test]
fn a_live_holder_blocks_until_its_lease_ends() {
    let s = session();
    let state = shared(&s);
    let mut log = SessionLog::open(&s.file).expect("open");
    state.write(&mut log, &json!(0)).expect("write");
    let sleeper = Sleeper::spawn();
    let holder = sleeper.holder();
    plant_lock(&s, &holder, lock::now_ms());
    let before = std::fs::read(&s.file).expect("read");

    let attempts = [
        ("write", state.write(&mut log, &json!(1))),
        ("patch", state.patch(&mut log, &json!({"a": 1}))),
        ("drop", state.drop(&mut log)),
    ];
    for (action, result) in attempts {
        let err = result.expect_err(action);
        let Error::Lock(e) = &err else {
            panic!("{action}: not a lock error: {err:?}")
        };
        let LockError::Held {
            initiator,
            action: refused,
            object,
            reason,
            liveness,
            ..
        } = &**e
        else {
            panic!("{action}: {e:?}")
        };
        assert_eq!(initiator, &holder.to_string());
        assert_eq!(refused, action);
        assert_eq!(object, &s.id);
        assert!(reason.contains("alive"), "{reason}");
        assert_eq!(*liveness, Liveness::Alive);
        let shown = err.to_string();
        for part in [initiator.as_str(), action, object.as_str(), reason.as_str()] {
            assert!(shown.contains(part), "{shown:?} shows {part:?}");
        }
    }
    assert_eq!(
        std::fs::read(&s.file).expect("read"),
        before,
        "nothing appended"
    );
    assert_eq!(
        lock_row(&s).map(|r| r.holder),
        Some(holder.to_string()),
        "the holder's row was left alone"
    );

    // The same live holder, one lease (and a second) ago.
    let lease_ms = i64::try_from(LEASE.as_millis()).expect("lease fits");
    plant_lock(&s, &holder, lock::now_ms() - lease_ms - 1_000);
    let id = state
        .write(&mut log, &json!(1))
        .expect("an expired lease is taken over")
        .expect("appended");
    assert_eq!(state.read(&log).expect("read"), Some(json!(1)));
    assert!(
        SessionLog::open(&s.file)
            .expect("open")
            .entry(&id)
            .is_some()
    );
    assert!(lock_row(&s).is_none(), "released after the write");
    drop(sleeper);
}

/// Two processes that open a projection that does not exist yet must end up sharing
/// one database: the lock lives there.
#[test]
fn a_new_database_opened_by_two_at_once_is_one_database() {
    for round in 0..200 {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("states.sqlite");
        let barrier = Arc::new(Barrier::new(2));
        let open = |db: PathBuf, barrier: Arc<Barrier>| {
            std::thread::spawn(move || {
                barrier.wait();
                Projection::open(&db)
            })
        };
        let ta = open(db.clone(), barrier.clone());
        let tb = open(db.clone(), barrier);
        let mut a = ta
            .join()
            .expect("thread")
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let mut b = tb
            .join()
            .expect("thread")
            .unwrap_or_else(|e| panic!("round {round}: {e}"));

        let guard = lock::acquire(a.connection(), "s", "write").expect("acquire");
        let seen = lock::status(b.connection(), "s").expect("status");
        drop(guard);
        assert!(
            seen.is_some(),
            "round {round}: the two connections do not share one database file"
        );
    }
}
