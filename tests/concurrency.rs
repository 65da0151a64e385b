//! Many processes at once (docs/spec.md §2 writing rules, §4, §6): real processes writing real
//! session files through one real projection database.
//!
//! - Writers of one session at once (six, or two released at the same moment): every
//!   write is either refused with the four-element lock error (holder, action, session,
//!   reason) or durably present with its value; no two lines fuse; nothing acknowledged
//!   is lost and nothing unacknowledged is written.
//! - A writer holding the lock refuses the others; a lock row left by a killed process
//!   never blocks the writers after it, even six starting at once; a live holder's row
//!   blocks until its lease ends.
//! - Six processes write six sessions through one database, also one that none of them
//!   finds on disk: every write succeeds, so no `SQLITE_BUSY` reaches a caller.
//! - An append by another program is ingested first; a file shrunk, replaced or rewritten
//!   in place (at the same length, or longer and valid) behind the writer is refused, never
//!   decided on memory nor called corrupt.
//!
//! The writers are two example programs, built once per test binary and launched one way
//! ([`Writer::spawn`]): `examples/crash_writer.rs` alternates `write` and `patch` and
//! records every acknowledged write and its value in an ack file (`tests/crash_loop.rs`
//! kills it mid-write); `examples/writer.rs` writes values the test knows beforehand and
//! can hold the lock on request. Processes start together through a barrier on their
//! stdin (each prints `READY` or `HOLDING` and waits for a line); nothing synchronizes
//! with sleeps. Other lock holders are `sleep` processes.

use crate::common;
use crate::common::holders::{Proc, dead_holder};
use crate::common::now_ms;
use crate::common::seams::Hooked;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use session_state::On;
use session_state::{
    AppendError, Error, Header, LogError, LogOptions, Materialize, NewEntry, Scope, SessionLog,
    SessionState, Sessions, SqliteStore, Store, StoreOptions, StoredSession,
    io::FileSystem,
    lock::{Holder, LEASE, Liveness, LockError, LockStatus},
};
use tempfile::TempDir;

const PLUGIN: &str = "shared";

/// A session file with one user message, in `dir`: its path and session id.
fn new_session(dir: &Path) -> (PathBuf, String) {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, "/proj")
        .expect("create session");
    log.append(NewEntry::message(
        json!({"role": "user", "content": "many writers"}),
    ))
    .expect("append");
    (log.path().to_path_buf(), log.session_id().to_owned())
}

/// A session in a temporary directory, and the database its writers share (which does
/// not exist yet).
struct Session {
    dir: TempDir,
    file: PathBuf,
    id: String,
    db: PathBuf,
}

fn session() -> Session {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, id) = new_session(dir.path());
    let db = dir.path().join("agent").join("states.sqlite");
    Session { dir, file, id, db }
}

fn store(db: &Path) -> Store {
    Store::at(db).expect("store")
}

fn shared(db: &Path) -> SessionState<Value> {
    store(db).state(PLUGIN, Scope::Branch).expect("state")
}

fn lock_row(db: &Path, session_id: &str) -> Option<LockStatus> {
    store(db).lock_status(session_id).expect("lock status")
}

/// Leaves a lock row for `holder`, as a process that never released it would.
fn plant_lock(s: &Session, holder: &Holder, acquired_at_ms: i64) {
    let store = store(&s.db);
    let guard = store
        .lock_as(&s.id, "write", acquired_at_ms, holder)
        .expect("plant the lock row");
    // Never released: the row stays behind.
    std::mem::forget(guard);
}

/// The example program a writer process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    /// `examples/crash_writer.rs`: attempt i is a `write` (i even) or a `patch` (i odd);
    /// each acknowledged one is recorded with its value in an ack file (fdatasync'ed)
    /// before the program prints `ACK <id>`.
    Crash,
    /// `examples/writer.rs`: attempt i writes `{"writer": <pid>, "i": i}` and prints the
    /// new entry's id.
    Values,
    /// `examples/writer.rs --file`: the same values, each written without a log in
    /// memory, as the command line writes.
    FileValues,
    /// `examples/writer.rs --patch`: attempt i patches `{"<pid>-<i>": i}` in, with the
    /// log in memory or without it (`--file`).
    Patches(Via),
}

/// What a writer does once started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Writes at once.
    Now,
    /// Prints `READY` and waits for [`Writer::go`].
    Go,
    /// Takes the session's lock, prints `HOLDING`, waits for [`Writer::go`], releases
    /// it, then writes (`examples/writer.rs` only).
    Hold,
}

/// One attempt of a writer, as its output line tells it.
#[derive(Debug)]
enum Attempt {
    /// Acknowledged: the new entry and the plugin's value there.
    Acked { id: String, value: Value },
    /// Refused: what the attempt was ("write", "patch") and the message printed.
    Refused {
        action: &'static str,
        message: String,
    },
}

/// A writer process, killed and reaped however the test ends.
struct Writer {
    program: Program,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Where a crash writer records its acknowledgements.
    ack: Option<PathBuf>,
}

/// When an attempt began and returned, in nanoseconds since the Unix epoch
/// (`examples/writer.rs --times`).
type Span = (u128, u128);

impl Writer {
    /// Starts `program` making `count` attempts on the session `file` through the
    /// database `db`. Returns at once; wait for its `READY`/`HOLDING` with
    /// [`Writer::expect_line`].
    fn spawn(program: Program, file: &Path, db: &Path, count: usize, start: Start) -> Writer {
        let flag = match start {
            Start::Now => None,
            Start::Go => Some("--go"),
            Start::Hold => Some("--hold"),
        };
        let (mut cmd, ack) = match program {
            Program::Crash => {
                assert_ne!(start, Start::Hold, "crash_writer cannot hold the lock");
                static ACKS: AtomicUsize = AtomicUsize::new(0);
                let ack = file
                    .parent()
                    .expect("the session file has a directory")
                    .join(format!("ack{}.tsv", ACKS.fetch_add(1, Ordering::Relaxed)));
                let mut cmd = Command::new(common::examples::example("crash_writer"));
                cmd.arg(file).arg(db).arg(&ack).args([
                    "--count",
                    &count.to_string(),
                    "--plugin",
                    PLUGIN,
                ]);
                (cmd, Some(ack))
            }
            Program::Values | Program::FileValues => {
                let mut cmd = Command::new(common::examples::example("writer"));
                cmd.arg(file).arg(db).arg(PLUGIN).arg(count.to_string());
                cmd.arg("--times");
                if program == Program::FileValues {
                    cmd.arg("--file");
                }
                (cmd, None)
            }
            Program::Patches(via) => {
                let mut cmd = Command::new(common::examples::example("writer"));
                cmd.arg(file).arg(db).arg(PLUGIN).arg(count.to_string());
                cmd.args(["--times", "--patch"]);
                if via == Via::File {
                    cmd.arg("--file");
                }
                (cmd, None)
            }
        };
        let mut child = cmd
            .args(flag)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program:?} writer: {e}"));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Writer {
            program,
            child,
            stdin,
            stdout,
            ack,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its identity, as its lock row records it.
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
    fn go(&mut self) {
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

    /// Its attempts, one per output line, after it exited successfully and silently:
    /// any error, `SQLITE_BUSY` included, would have ended it with exit code 2 and the
    /// message on stderr. A crash writer's `ACK` lines must match its ack file.
    fn finish(self) -> Vec<Attempt> {
        self.finish_timed().0
    }

    /// [`Writer::finish`], with each attempt's [`Span`] (none for a crash writer).
    fn finish_timed(mut self) -> (Vec<Attempt>, Vec<Span>) {
        drop(self.stdin.take());
        let mut lines: Vec<String> = (&mut self.stdout)
            .lines()
            .collect::<Result<_, _>>()
            .expect("read writer stdout");
        let mut spans = Vec::new();
        if self.program != Program::Crash {
            for line in &mut lines {
                let (rest, span) = line
                    .rsplit_once(" @")
                    .unwrap_or_else(|| panic!("no span: {line}"));
                let (start, end) = span.split_once('-').expect("start-end");
                spans.push((start.parse().expect("start"), end.parse().expect("end")));
                *line = rest.to_owned();
            }
        }
        let stderr = self.stderr();
        let status = self.child.wait().expect("wait for writer");
        assert!(status.success(), "writer failed ({status}): {stderr}");
        assert!(stderr.is_empty(), "{stderr}");
        let pid = self.pid();
        let mut recorded = self.ack.as_deref().map(recorded_acks).into_iter().flatten();
        let attempts = lines
            .into_iter()
            .enumerate()
            .map(|(i, line)| {
                let action = match self.program {
                    Program::Crash if i % 2 == 1 => "patch",
                    Program::Patches(_) => "patch",
                    _ => "write",
                };
                if let Some(message) = line.strip_prefix("REFUSED ") {
                    return Attempt::Refused {
                        action,
                        message: message.to_owned(),
                    };
                }
                match self.program {
                    Program::Crash => {
                        let id = line
                            .strip_prefix("ACK ")
                            .unwrap_or_else(|| panic!("neither ACK nor REFUSED: {line}"));
                        let (rid, value) = recorded
                            .next()
                            .unwrap_or_else(|| panic!("{id} acknowledged but not recorded"));
                        assert_eq!(rid, id, "the ack file follows the ACK lines");
                        Attempt::Acked { id: rid, value }
                    }
                    Program::Values | Program::FileValues => Attempt::Acked {
                        id: line,
                        value: json!({"writer": pid, "i": i}),
                    },
                    Program::Patches(_) => Attempt::Acked {
                        id: line,
                        value: json!({format!("{pid}-{i}"): i}),
                    },
                }
            })
            .collect();
        assert!(recorded.next().is_none(), "recorded but never acknowledged");
        (attempts, spans)
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

/// Acknowledgements recorded by a crash writer: `(id, value)`.
fn recorded_acks(path: &Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (id, v) = l.split_once('\t').expect("id TAB value");
            (
                id.to_owned(),
                serde_json::from_str(v).expect("a JSON value"),
            )
        })
        .collect()
}

/// A refusal names the holder (one of `holders`), the action, the session and a reason.
fn assert_refusal(message: &str, action: &str, session_id: &str, holders: &[String]) {
    assert!(
        holders.iter().any(|h| message.contains(h.as_str())),
        "names a live writer as holder ({holders:?}): {message}"
    );
    assert!(
        message.contains(&format!("{action} refused")),
        "names the action ({action}): {message}"
    );
    assert!(
        message.contains(&format!("session '{session_id}'")),
        "names the session: {message}"
    );
    assert!(
        message.contains("because") && message.contains("lease expires in"),
        "gives the reason: {message}"
    );
}

/// Checks every refusal among `attempts` (see [`assert_refusal`]); returns how many.
fn assert_refusals(attempts: &[Attempt], session_id: &str, holders: &[String]) -> usize {
    let mut refused = 0;
    for a in attempts {
        if let Attempt::Refused { action, message } = a {
            assert_refusal(message, action, session_id, holders);
            refused += 1;
        }
    }
    refused
}

/// The session file after its writers finished: it reads strictly without findings, has
/// one entry per line after the header, holds every acknowledged write of `attempts` with
/// its value and nothing unacknowledged, saw no write on a stale view (no forks), and its
/// lock row is gone; its projection after catch-up equals the fold and a rebuild in the
/// new database `fresh`. Returns the number of acknowledged writes.
fn assert_intact(file: &Path, db: &Path, attempts: &[Attempt], fresh: &Path) -> usize {
    let log = SessionLog::open(file).expect("strict read");
    assert!(log.findings().is_empty(), "{:?}", log.findings());
    let newlines = std::fs::read(file)
        .expect("read")
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    assert_eq!(
        newlines,
        log.len() + 1,
        "one line per entry: no fused lines"
    );
    let state = shared(db);
    let mut acked = 0;
    for a in attempts {
        if let Attempt::Acked { id, value } = a {
            let e = log
                .entry(id)
                .unwrap_or_else(|| panic!("acknowledged {id} is missing"));
            assert_eq!(e.state_plugin(), Some(PLUGIN));
            assert_eq!(
                state.read_at(&log, id).expect("read"),
                Some(value.clone()),
                "{id}"
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
    assert!(
        lock_row(db, log.session_id()).is_none(),
        "the lock was released"
    );
    let leaf = state.read(&log).expect("fold read");
    for db in [db, fresh] {
        assert_eq!(
            store(db)
                .read_value(file, PLUGIN, Scope::Branch, None)
                .expect("projection read"),
            leaf,
            "{}",
            db.display()
        );
    }
    acked
}

/// Runs `n` writers of `count` attempts on one session, released together, after
/// `before` prepared it; checks every attempt. Returns (acknowledged, refused).
/// What [`run_on_one_session`] saw: acknowledged and refused attempts, how often the
/// state events in the file pass from one writer's to another's, and each writer's
/// attempts' [`Span`]s (none for crash writers).
struct Run {
    acked: usize,
    refused: usize,
    changes: usize,
    spans: Vec<Vec<Span>>,
    /// The writer (its index) of each acknowledged state event, in the file's order.
    order: Vec<usize>,
}

impl Run {
    /// Pairs of attempts of two different writers that were in flight at the same
    /// moment (each began before the other returned).
    fn overlapping(&self) -> usize {
        let mut n = 0;
        for (i, a) in self.spans.iter().enumerate() {
            for b in &self.spans[i + 1..] {
                n += a
                    .iter()
                    .map(|x| b.iter().filter(|y| x.0 < y.1 && y.0 < x.1).count())
                    .sum::<usize>();
            }
        }
        n
    }
}

fn run_on_one_session(
    program: Program,
    n: usize,
    count: usize,
    before: impl FnOnce(&Session),
) -> (usize, usize) {
    let run = run_writers(program, n, count, before);
    (run.acked, run.refused)
}

fn run_writers(program: Program, n: usize, count: usize, before: impl FnOnce(&Session)) -> Run {
    let s = session();
    before(&s);
    let mut writers: Vec<Writer> = (0..n)
        .map(|_| Writer::spawn(program, &s.file, &s.db, count, Start::Go))
        .collect();
    for w in &mut writers {
        w.expect_line("READY");
    }
    let holders: Vec<String> = writers.iter().map(Writer::holder).collect();
    for w in &mut writers {
        w.go();
    }
    let mut attempts = Vec::new();
    let mut writer_of = std::collections::HashMap::new();
    let mut spans = Vec::new();
    for (i, w) in writers.into_iter().enumerate() {
        let (a, s) = w.finish_timed();
        assert_eq!(a.len(), count, "one line per attempt");
        spans.push(s);
        for at in &a {
            if let Attempt::Acked { id, .. } = at {
                writer_of.insert(id.clone(), i);
            }
        }
        attempts.extend(a);
    }
    let refused = assert_refusals(&attempts, &s.id, &holders);
    let fresh = s.dir.path().join("fresh.sqlite");
    let acked = assert_intact(&s.file, &s.db, &attempts, &fresh);
    assert_eq!(
        acked + refused,
        n * count,
        "every attempt acknowledged or refused"
    );
    let order: Vec<usize> = SessionLog::open(&s.file)
        .expect("open")
        .entries()
        .filter_map(|e| writer_of.get(e.id()).copied())
        .collect();
    assert_eq!(order.len(), acked);
    let changes = order.windows(2).filter(|w| w[0] != w[1]).count();
    Run {
        acked,
        refused,
        changes,
        spans,
        order,
    }
}

/// How far writers overtook each other in `order` (each state event's writer, in the
/// file's order): for each writer, the most events of any single other writer between
/// two consecutive events of its own, over the waits that overlap the time when all were
/// writing; the largest of these. Waiting its turn behind every other writer once counts
/// one. With [`Begin::Together`] (threads released by one barrier) the wait before a
/// writer's first event counts too, and a writer that never wrote waited behind
/// everything; with [`Begin::Staggered`] (processes, each released in turn and scheduled
/// when the machine lets it) the count starts at the last writer's first event.
fn most_overtaken(order: &[usize], n: usize, start: Begin) -> usize {
    let last = (0..n)
        .filter_map(|w| order.iter().rposition(|&x| x == w))
        .min();
    let first = match start {
        Begin::Together => Some(0),
        Begin::Staggered => (0..n)
            .map(|w| order.iter().position(|&x| x == w))
            .collect::<Option<Vec<usize>>>()
            .and_then(|firsts| firsts.into_iter().max()),
    };
    let (Some(first), Some(last)) = (first, last) else {
        return 0;
    };
    let mut worst = 0;
    for w in 0..n {
        let mut mine: Vec<isize> = match start {
            Begin::Together => vec![-1],
            Begin::Staggered => vec![],
        };
        mine.extend(
            (0..order.len())
                .filter(|&i| order[i] == w)
                .map(|i| i as isize),
        );
        if mine == [-1] {
            // It never wrote: it waited behind everything.
            mine.push(order.len() as isize);
        }
        let overlaps = |p: &&[isize]| p[1] >= first as isize && p[0] <= last as isize;
        for pair in mine.windows(2).filter(overlaps) {
            let mut count = vec![0usize; n];
            for &x in &order[(pair[0] + 1) as usize..pair[1] as usize] {
                count[x] += 1;
            }
            worst = worst.max(count.into_iter().max().unwrap_or(0));
        }
    }
    worst
}

/// How the writers of a count were released ([`most_overtaken`]).
#[derive(Debug, Clone, Copy)]
enum Begin {
    Together,
    Staggered,
}

#[test]
fn most_overtaken_counts_the_longest_wait_behind_one_writer() {
    use Begin::{Staggered, Together};
    for start in [Together, Staggered] {
        assert_eq!(most_overtaken(&[0, 1, 2, 0, 1, 2, 0, 1, 2], 3, start), 1);
        assert_eq!(most_overtaken(&[0, 1, 1, 1, 0, 1], 2, start), 3);
        // After writer 0's last: it no longer competed.
        assert_eq!(most_overtaken(&[0, 1, 0, 1, 1, 1, 1], 2, start), 1);
    }
    // Writer 1 waited behind all of writer 0's writes before its first, if it was
    // released with writer 0.
    assert_eq!(most_overtaken(&[0, 0, 0, 0, 1, 1, 1, 1], 2, Together), 4);
    assert_eq!(most_overtaken(&[0, 0, 0, 1, 0, 1, 1, 1], 2, Staggered), 1);
    // Writer 1 never wrote.
    assert_eq!(most_overtaken(&[0, 0, 0], 2, Together), 3);
}

/// Writers in a tight loop, each in its own process, sharing one projection database and
/// one session, take turns: none writes more than a few times while another waits
/// (docs/lock.md, "Taking turns"). Counted in the file, not timed. Both write paths: the
/// log kept in memory (an agent's) and the file read at each write (the command line's).
#[test]
fn writers_in_a_tight_loop_take_turns() {
    const ROUNDS: [(usize, usize); 2] = [(4, 60), (16, 15)];
    // In line, a writer writes once after every other waiting writer's write. A write
    // through the file takes two turns (the rows catch up with the others' appends, then
    // the append), so another writer can write twice meanwhile. A writer that has just
    // written needs the CPU to get back in line, and 2 cores serve up to 16 writers (and
    // the other tests): two turns more are tolerated. SQLite's busy handler alone lets
    // one writer write all its values while another waits.
    let most = |p: Program| if p == Program::FileValues { 4 } else { 3 };
    for (program, (writers, writes)) in [Program::Values, Program::FileValues]
        .into_iter()
        .flat_map(|p| ROUNDS.map(|r| (p, r)))
    {
        let run = run_writers(program, writers, writes, |s| {
            store(&s.db).connect().expect("create the database");
        });
        assert_eq!(
            run.refused, 0,
            "{program:?}: no refusals among this crate's writers"
        );
        assert!(run.changes > 0, "{program:?}: more than one writer wrote");
        let worst = most_overtaken(&run.order, writers, Begin::Staggered);
        // Reported, never asserted (timings are the benchmarks' business).
        let mut took: Vec<u128> = run.spans.iter().flatten().map(|(a, b)| b - a).collect();
        took.sort_unstable();
        let ms = |q: f64| took[((took.len() - 1) as f64 * q) as usize] as f64 / 1e6;
        let all = run.spans.iter().flatten();
        let wall =
            all.clone().map(|s| s.1).max().unwrap_or(0) - all.map(|s| s.0).min().unwrap_or(0);
        eprintln!(
            "{program:?}: {writers} writers x {writes} writes: the writer changed {} times \
             in {} events; a writer waited behind at most {worst} of another's writes; one \
             write took p50 {:.1} ms, p99 {:.1} ms, at most {:.1} ms; all in {:.0} ms",
            run.changes,
            run.acked,
            ms(0.5),
            ms(0.99),
            ms(1.0),
            wall as f64 / 1e6
        );
        assert!(
            worst <= most(program),
            "{program:?}: a writer waited behind {worst} writes of another (at most {}): {:?}",
            most(program),
            run.order
        );
    }
}

#[test]
fn six_processes_writing_one_session_lose_nothing_and_fuse_no_lines() {
    let started = Instant::now();
    let (acked, refused) = run_on_one_session(Program::Crash, 6, 20, |_| {});
    assert!(acked > 0);
    println!(
        "one session, 6 writers x 20 writes: {acked} acknowledged and present, {refused} \
         refused with the four-element error, {:.1?}",
        started.elapsed()
    );
}

#[test]
fn two_writers_at_the_same_moment_lose_nothing_and_fuse_no_lines() {
    for round in 0..3 {
        // The database exists, as after a first use: openers racing to create it are
        // `six_processes_creating_one_database_at_once_all_write` and
        // `a_new_database_opened_by_two_at_once_is_one_database`.
        let run = run_writers(Program::Values, 2, 40, |s| {
            store(&s.db).connect().expect("create the database");
        });
        eprintln!(
            "round {round}: {} acknowledged, {} refused, the writer changed {} times in \
             the file, {} pairs of attempts in flight at once",
            run.acked,
            run.refused,
            run.changes,
            run.overlapping()
        );
        // Released together through the stdin barrier: the attempts' own clocks show
        // that the two were writing at the same moment (one waiting for the other's
        // write transaction, or refused by its lock), not one after the other.
        assert_eq!(run.spans.iter().map(Vec::len).sum::<usize>(), 80);
        assert!(
            run.overlapping() > 0,
            "round {round}: the two writers ran one after the other"
        );
    }
}

#[test]
fn a_writer_holding_the_lock_refuses_the_other_with_the_four_elements() {
    let s = session();
    let mut a = Writer::spawn(Program::Values, &s.file, &s.db, 3, Start::Hold);
    a.expect_line("HOLDING");
    let holder = a.holder();

    let b = Writer::spawn(Program::Values, &s.file, &s.db, 3, Start::Now);
    let mut attempts = b.finish();
    assert_eq!(attempts.len(), 3);
    for at in &attempts {
        let Attempt::Refused { action, message } = at else {
            panic!("not refused: {at:?}");
        };
        assert_refusal(message, action, &s.id, std::slice::from_ref(&holder));
        assert!(message.contains("alive"), "{message}");
    }

    a.go();
    attempts.extend(a.finish());
    let fresh = s.dir.path().join("fresh.sqlite");
    assert_eq!(assert_intact(&s.file, &s.db, &attempts, &fresh), 3);
}

#[test]
fn a_lock_left_by_a_killed_writer_does_not_block_the_next() {
    let s = session();
    let mut a = Writer::spawn(Program::Values, &s.file, &s.db, 3, Start::Hold);
    a.expect_line("HOLDING");
    let holder = a.holder();
    a.kill();
    let row = lock_row(&s.db, &s.id).expect("the killed writer's row is still there");
    assert_eq!(row.holder, holder);
    assert_eq!(row.liveness, Liveness::NotAlive);
    assert!(!row.lease_expired);

    let b = Writer::spawn(Program::Values, &s.file, &s.db, 3, Start::Now);
    let attempts = b.finish();
    assert!(
        attempts.iter().all(|a| matches!(a, Attempt::Acked { .. })),
        "{attempts:?}"
    );
    let fresh = s.dir.path().join("fresh.sqlite");
    assert_eq!(assert_intact(&s.file, &s.db, &attempts, &fresh), 3);
}

#[test]
fn a_lock_row_of_a_killed_process_blocks_none_of_six_writers() {
    let (acked, refused) = run_on_one_session(Program::Crash, 6, 10, |s| {
        // A process takes the lock and is killed before releasing it.
        let holder = dead_holder();
        plant_lock(s, &holder, now_ms());
        let row = lock_row(&s.db, &s.id).expect("the row");
        assert_eq!(row.holder, holder.to_string());
        assert_eq!(row.liveness, Liveness::NotAlive);
        assert!(
            !row.lease_expired,
            "the row is fresh: only the dead holder can free it"
        );
        assert!(s.file.exists());
    });
    // `run_on_one_session` checked that every refusal names one of the six live writers,
    // never the dead holder, and that the lock row is gone at the end.
    assert!(acked > 0);
    println!("after a killed holder: {acked} acknowledged, {refused} refused by live writers");
}

#[test]
fn a_lock_row_of_a_dead_process_does_not_block_the_next_writer() {
    let s = session();
    plant_lock(&s, &dead_holder(), now_ms());

    let mut log = SessionLog::open(&s.file).expect("open");
    let id = shared(&s.db)
        .write(&mut log, &json!("after a crash"))
        .expect("a dead holder does not block")
        .expect("appended");
    assert_eq!(
        SessionLog::open(&s.file).expect("open").leaf_id(),
        Some(&*id)
    );
    assert!(lock_row(&s.db, &s.id).is_none(), "released after the write");
}

#[test]
fn a_live_holder_blocks_until_its_lease_ends() {
    let s = session();
    let state = shared(&s.db);
    let mut log = SessionLog::open(&s.file).expect("open");
    state.write(&mut log, &json!(0)).expect("write");
    let sleeper = Proc::sleep();
    let holder = sleeper.holder();
    plant_lock(&s, &holder, now_ms());
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
        lock_row(&s.db, &s.id).map(|r| r.holder),
        Some(holder.to_string()),
        "the holder's row was left alone"
    );

    // The same live holder, one lease (and a second) ago.
    let lease_ms = i64::try_from(LEASE.as_millis()).expect("lease fits");
    plant_lock(&s, &holder, now_ms() - lease_ms - 1_000);
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
    assert!(lock_row(&s.db, &s.id).is_none(), "released after the write");
    sleeper.end();
}

/// Six writers on six sessions, one database; `fresh_db`: nobody opened it before.
fn six_sessions_one_database(fresh_db: bool) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("agent").join("states.sqlite");
    if !fresh_db {
        store(&db).connect().expect("create the database");
    }
    let count = 30;
    let files: Vec<PathBuf> = (0..6)
        .map(|i| {
            let sub = dir.path().join(format!("s{i}"));
            std::fs::create_dir_all(&sub).expect("mkdir");
            new_session(&sub).0
        })
        .collect();
    let mut writers: Vec<Writer> = files
        .iter()
        .map(|file| Writer::spawn(Program::Crash, file, &db, count, Start::Go))
        .collect();
    for w in &mut writers {
        w.expect_line("READY");
    }
    for w in &mut writers {
        w.go();
    }
    let mut acked = 0;
    for (i, (w, file)) in writers.into_iter().zip(&files).enumerate() {
        // `finish` asserts exit 0 and an empty stderr: no error, SQLITE_BUSY included.
        let attempts = w.finish();
        assert_eq!(attempts.len(), count);
        assert!(
            attempts.iter().all(|a| matches!(a, Attempt::Acked { .. })),
            "{attempts:?}"
        );
        let fresh = dir.path().join(format!("fresh{i}.sqlite"));
        acked += assert_intact(file, &db, &attempts, &fresh);
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

/// Two stores that open a projection that does not exist yet must end up sharing one
/// database: the lock lives there.
#[test]
fn a_new_database_opened_by_two_at_once_is_one_database() {
    for round in 0..200 {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("states.sqlite");
        let barrier = Arc::new(Barrier::new(2));
        let open = |db: PathBuf, barrier: Arc<Barrier>| {
            std::thread::spawn(move || {
                barrier.wait();
                let store = Store::at(&db)?;
                store.connect().map(|()| store)
            })
        };
        let ta = open(db.clone(), barrier.clone());
        let tb = open(db.clone(), barrier);
        let a = ta
            .join()
            .expect("thread")
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let b = tb
            .join()
            .expect("thread")
            .unwrap_or_else(|e| panic!("round {round}: {e}"));

        let guard = a.lock("s", "write").expect("acquire");
        let seen = b.lock_status("s").expect("status");
        drop(guard);
        assert!(
            seen.is_some(),
            "round {round}: the two stores do not share one database file"
        );
    }
}

/// Another process appended (Pi, or a writer of another host): the writer sees that the
/// file is longer than it last saw, ingests the foreign entries first, and appends its own
/// as a child of the last of them, so the leaf follows file order and nothing forks.
#[test]
fn a_foreign_append_is_ingested_before_ours() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = new_session(dir.path());
    let mut ours = SessionLog::open(&file).expect("open");
    let mut theirs = SessionLog::open(&file).expect("open");
    let foreign = theirs
        .append(NewEntry::message(
            json!({"role": "assistant", "content": "theirs"}),
        ))
        .expect("append");
    let state = shared(&dir.path().join("states.sqlite"));
    let id = state
        .write(&mut ours, &json!("ours"))
        .expect("write")
        .expect("appended");
    let log = SessionLog::open(&file).expect("open");
    assert_eq!(
        log.entry(&id).expect("ours").parent_id(),
        Some(foreign.as_str())
    );
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
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = new_session(dir.path());
    let original = std::fs::read(&file).expect("read");

    // Shrunk (another tool truncated it): refused, and the file is left as it is.
    let mut log = SessionLog::open(&file).expect("open");
    log.append(entry()).expect("append");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open for truncation")
        .set_len(original.len() as u64)
        .expect("truncate");
    let err = log.append(entry()).expect_err("shrunk");
    assert!(matches!(err, AppendError::ChangedOnDisk { .. }), "{err}");
    assert!(
        err.to_string().contains("shrank") && err.to_string().contains("reopen"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&file).expect("read"),
        original,
        "nothing appended"
    );
    let err = log.refresh().expect_err("shrunk");
    assert!(matches!(err, AppendError::ChangedOnDisk { .. }), "{err}");

    // Replaced (a new file renamed over the path): refused, the new file untouched.
    let mut log = SessionLog::open(&file).expect("open");
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, &original).expect("write");
    std::fs::rename(&other, &file).expect("rename");
    let err = log.append(entry()).expect_err("replaced");
    assert!(matches!(err, AppendError::ChangedOnDisk { .. }), "{err}");
    assert!(err.to_string().contains("another file"), "{err}");
    assert_eq!(
        std::fs::read(&file).expect("read"),
        original,
        "nothing appended"
    );
    // Reopening reads the file now at the path, and appends go on.
    SessionLog::open(&file)
        .expect("open")
        .append(entry())
        .expect("append");
}

/// Once a log has appended, its writer checks the open file itself before each append (one
/// `fstat`, `docs/durability.md`): a file renamed over or deleted has no name left, and one
/// moved away had its inode changed by other than a write, so the path is looked at. Each
/// is refused with `ChangedOnDisk`, and no file is written, through `SessionLog::append`
/// and through a state write on the fast path.
#[test]
fn a_file_replaced_behind_a_writer_that_has_appended_is_refused() {
    let entry = || NewEntry::message(json!({"role": "user", "content": "x"}));
    let replaced = |err: &Error| {
        matches!(
            err,
            Error::Log(LogError::Append(AppendError::ChangedOnDisk { .. }))
        ) && err.to_string().contains("another file")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = new_session(dir.path());

    // Renamed over: the open file has no name left.
    let other = dir.path().join("other.jsonl");
    let renamed_over = |append: &mut dyn FnMut() -> session_state::Result<()>| {
        std::fs::copy(&file, &other).expect("copy");
        std::fs::rename(&other, &file).expect("rename over");
        let at_path = std::fs::read(&file).expect("read");
        let err = append().expect_err("renamed over");
        assert!(replaced(&err), "{err}");
        let now = std::fs::read(&file).expect("read");
        assert_eq!(now, at_path, "nothing appended");
    };
    let mut log = SessionLog::open(&file).expect("open");
    log.append(entry()).expect("append");
    renamed_over(&mut || log.append(entry()).map(drop).map_err(Error::from));

    // Deleted: refused, and no file is made at the path.
    let mut log = SessionLog::open(&file).expect("open");
    log.append(entry()).expect("append");
    let kept = std::fs::read(&file).expect("read");
    std::fs::remove_file(&file).expect("remove");
    let err = log
        .append(entry())
        .map_err(Error::from)
        .expect_err("deleted");
    assert!(replaced(&err), "{err}");
    assert!(!file.exists(), "no file made at the path");
    std::fs::write(&file, &kept).expect("put back");

    // Moved away, another file put at the path. A rename moves the inode's change time,
    // not its modification time; within one clock tick of the last write the two can
    // still be equal, so the moved file's modification time is set back, as a rename a
    // moment later would leave them.
    let mut log = SessionLog::open(&file).expect("open");
    log.append(entry()).expect("append");
    let moved = dir.path().join("moved.jsonl");
    std::fs::rename(&file, &moved).expect("move away");
    std::fs::File::options()
        .write(true)
        .open(&moved)
        .and_then(|f| f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(86_400)))
        .expect("set the modification time");
    let bytes = std::fs::read(&moved).expect("read");
    std::fs::write(&file, &bytes).expect("another file at the path");
    let err = log
        .append(entry())
        .map_err(Error::from)
        .expect_err("moved away");
    assert!(replaced(&err), "{err}");
    assert_eq!(
        std::fs::read(&moved).expect("read"),
        bytes,
        "the moved file untouched"
    );
    assert_eq!(
        std::fs::read(&file).expect("read"),
        bytes,
        "the new file untouched"
    );

    // A state write on the fast path (its second write) refuses the same way.
    let state = shared(&dir.path().join("states.sqlite"));
    let mut log = SessionLog::open(&file).expect("open");
    state.write(&mut log, &json!(1)).expect("write");
    state
        .write(&mut log, &json!(2))
        .expect("write on the fast path");
    renamed_over(&mut || state.write(&mut log, &json!(3)).map(drop));
}

/// Rewrites `file` in place (the same inode, no rename) with `bytes`, as Pi's migration and
/// an editor saving in place do, and moves its modification time one millisecond past what
/// it was: a rewrite within one tick of the file system's clock after the last write can
/// leave it equal (`docs/durability.md` says where), which this test does not measure.
fn rewrite_in_place(file: &Path, bytes: &[u8]) {
    let before = std::fs::metadata(file)
        .and_then(|m| m.modified())
        .expect("modification time");
    let f = std::fs::File::options()
        .write(true)
        .truncate(true)
        .open(file)
        .expect("open for rewriting");
    (&f).write_all(bytes).expect("rewrite");
    f.set_modified(before + Duration::from_millis(1))
        .expect("set the modification time");
}

/// `bytes` with its one occurrence of `from` replaced by `to`.
fn replaced_once(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8(bytes.to_vec()).expect("UTF-8");
    assert_eq!(text.matches(from).count(), 1, "{from} once in the file");
    text.replacen(from, to, 1).into_bytes()
}

fn rewritten_error(err: &Error, file: &Path) -> bool {
    matches!(err, Error::Log(LogError::Append(AppendError::ChangedOnDisk { path, .. })) if path == file)
        && err.to_string().contains("rewritten")
        && err.to_string().contains("reopen")
}

/// A file rewritten in place behind an open log at the same length is never decided on
/// what the log remembers: the write of `{"n":1}` over a file that now holds `{"n":3}` is
/// refused with `ChangedOnDisk`, naming the file and the line that changed, not answered
/// "unchanged"; so are an append and `refresh`, and nothing is written. Reopened, the log
/// reads the file as it is and the write appends. A touch (the stamp moved, nothing
/// changed) is read again, found the same, and the write goes on.
#[test]
fn a_file_rewritten_in_place_at_the_same_length_is_never_decided_on_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = new_session(dir.path());
    let state = shared(&dir.path().join("states.sqlite"));
    let mut log = SessionLog::open(&file).expect("open");
    state.write(&mut log, &json!({"n": 0})).expect("write");
    state
        .write(&mut log, &json!({"n": 1}))
        .expect("write on the fast path")
        .expect("appended");
    let rewritten = replaced_once(
        &std::fs::read(&file).expect("read"),
        r#"{"n":1}"#,
        r#"{"n":3}"#,
    );
    rewrite_in_place(&file, &rewritten);

    let err = state
        .write(&mut log, &json!({"n": 1}))
        .expect_err("a write on a file rewritten behind the log");
    assert!(rewritten_error(&err, &file), "{err}");
    assert!(err.to_string().contains("line 4"), "names the line: {err}");
    let entry = || NewEntry::message(json!({"role": "user", "content": "x"}));
    let err = log
        .append(entry())
        .map_err(Error::from)
        .expect_err("an append");
    assert!(rewritten_error(&err, &file), "{err}");
    let err = log.refresh().map_err(Error::from).expect_err("refresh");
    assert!(rewritten_error(&err, &file), "{err}");
    assert_eq!(
        std::fs::read(&file).expect("read"),
        rewritten,
        "nothing written"
    );

    // Reopened: {"n":3} is the value, so {"n":1} is a change, appended.
    let mut log = SessionLog::open(&file).expect("open");
    assert_eq!(state.read(&log).expect("read"), Some(json!({"n": 3})));
    assert!(
        state
            .write(&mut log, &json!({"n": 1}))
            .expect("write after reopening")
            .is_some()
    );
    // Touched: the same bytes with another stamp are read again and found the same.
    let now = std::fs::read(&file).expect("read");
    rewrite_in_place(&file, &now);
    let id = state
        .write(&mut log, &json!({"n": 2}))
        .expect("write after a touch")
        .expect("appended");
    let reread = SessionLog::open(&file).expect("open");
    assert_eq!(reread.leaf_id(), Some(id.as_str()));
    assert_eq!(state.read(&reread).expect("read"), Some(json!({"n": 2})));
}

/// A file rewritten longer and valid behind an open log (a message's text made longer, in
/// place) is a rewrite, refused with `ChangedOnDisk`, never read from the middle of a line
/// and called corrupt, through an append, a state write on the fast path and `refresh`;
/// nothing is written, and the file reads clean. Appends by another writer (the file grew,
/// what was read still there) are still read as appends.
#[test]
fn a_longer_valid_rewrite_behind_an_open_log_is_refused_never_called_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = new_session(dir.path());
    let state = shared(&dir.path().join("states.sqlite"));
    let mut log = SessionLog::open(&file).expect("open");
    for i in 0..38 {
        let text = format!("message {i}");
        log.append(NewEntry::message(json!({"role": "user", "content": text})))
            .expect("append");
    }
    state.write(&mut log, &json!(1)).expect("write");
    state
        .write(&mut log, &json!(2))
        .expect("write on the fast path");
    // Another writer appends: read as an append.
    SessionLog::open(&file)
        .expect("open")
        .append(NewEntry::message(
            json!({"role": "assistant", "content": "theirs"}),
        ))
        .expect("append");
    state
        .write(&mut log, &json!(3))
        .expect("write after a foreign append");

    let bytes = std::fs::read(&file).expect("read");
    let longer = replaced_once(
        &bytes,
        "\"message 7\"",
        "\"message 7, made longer in place\"",
    );
    rewrite_in_place(&file, &longer);
    assert!(
        SessionLog::open(&file).is_ok(),
        "the rewritten file is valid"
    );
    let refused = |err: Error| {
        assert!(rewritten_error(&err, &file), "{err}");
        let text = err.to_string();
        assert!(
            !text.contains("corrupt") && !text.contains("salvage"),
            "{text}"
        );
    };
    refused(
        log.append(NewEntry::message(json!({"role": "user", "content": "x"})))
            .expect_err("an append")
            .into(),
    );
    refused(state.write(&mut log, &json!(4)).expect_err("a state write"));
    refused(log.refresh().expect_err("refresh").into());
    assert_eq!(
        std::fs::read(&file).expect("read"),
        longer,
        "nothing written"
    );
    let reread = SessionLog::open(&file).expect("a strict read");
    assert!(reread.findings().is_empty(), "{:?}", reread.findings());
}

// ---------------------------------------------------------------------------------------
// Writers through different databases: the advisory lock on the session file
// ---------------------------------------------------------------------------------------

/// How a writer reaches the file: with the log in memory (`SessionState::patch`,
/// `src/store/write.rs`) or without it (`SessionState::patch_file`, as the command line
/// writes, `src/store/tail.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Log,
    File,
}

/// Patches `patch` into the plugin's value in `file`, through the database `db` and the
/// file-system seam `fs`.
fn patch_via(
    via: Via,
    file: &Path,
    db: &Path,
    fs: Arc<dyn FileSystem>,
    patch: &Value,
) -> session_state::Result<Option<String>> {
    let store = Store::open(
        StoreOptions::new()
            .database_path(db)
            .file_system(fs.clone()),
    )?;
    let state: SessionState<Value> = store.state(PLUGIN, Scope::Branch)?;
    match via {
        Via::Log => {
            let mut log = LogOptions::new().file_system(fs).open(file)?;
            state.patch(&mut log, patch)
        }
        Via::File => state.patch(On::file(file, None), patch),
    }
}

/// What a write paused on the fast path returns when it is let go: its result, and the
/// state, log and store it wrote with.
type Paused = std::thread::JoinHandle<(
    session_state::Result<Option<String>>,
    SessionState<Value>,
    SessionLog,
    Store,
)>;

/// A writer whose first write judged the rows (so its next one takes the fast path), and
/// that second write, in a thread, paused between its check and its append: the thread,
/// and the sender that lets it go.
fn a_write_paused_on_the_fast_path(s: &Session) -> (Paused, std::sync::mpsc::Sender<()>) {
    a_write_paused_on_the_fast_path_by(s, Hooked::pausing_after(1))
}

/// [`a_write_paused_on_the_fast_path`] where `hooked` pauses it.
fn a_write_paused_on_the_fast_path_by(
    s: &Session,
    hooked: (
        Arc<dyn FileSystem>,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ),
) -> (Paused, std::sync::mpsc::Sender<()>) {
    let file = std::fs::canonicalize(&s.file).expect("canonical");
    let (fs, reached, go) = hooked;
    let writing = Store::open(
        StoreOptions::new()
            .database_path(&s.db)
            .file_system(fs.clone()),
    )
    .expect("store");
    let state: SessionState<Value> = writing.state(PLUGIN, Scope::Branch).expect("state");
    let mut log = LogOptions::new().file_system(fs).open(&file).expect("open");
    state.write(&mut log, &json!(1)).expect("the first write");
    let writer = std::thread::spawn(move || {
        let written = state.write(&mut log, &json!(2));
        (written, state, log, writing)
    });
    reached
        .recv_timeout(Duration::from_secs(60))
        .expect("the second write reached its append");
    (writer, go)
}

/// A row taken by a holder that holds no file lock (as an earlier release takes it) while
/// a write stands between its check and its append on the fast path: the row is taken at
/// once (this release's writes hold nothing on the queue file), the paused write lands,
/// and the writer's next write judges the rows again (the database's version moved) and
/// is refused by the row. A holder of this release holds the session file's lock, which
/// the paused write holds to the end of its sync (`one_lock::*`).
#[test]
fn a_row_taken_while_a_write_is_on_the_fast_path_refuses_the_next_write() {
    let s = session();
    let (writer, go) = a_write_paused_on_the_fast_path(&s);

    let live = Proc::sleep();
    let holder = live.holder();
    let store_b = store(&s.db);
    let taken = store_b.lock_as(&s.id, "prune", now_ms(), &holder);
    // The row stays: its holder is the live process.
    taken
        .map(std::mem::forget)
        .expect("the lock is taken at once");
    go.send(()).expect("let the write go");
    let (written, state, mut log, _store) = writer.join().expect("join");
    written.expect("the paused write lands");

    let err = state
        .write(&mut log, &json!(3))
        .expect_err("the next write sees the row");
    let Error::Lock(e) = err else {
        panic!("not a lock error: {err}")
    };
    assert!(
        matches!(&*e, LockError::Held { initiator, .. } if *initiator == holder.to_string()),
        "{e:?}"
    );
    assert_eq!(
        state.read(&log).expect("read"),
        Some(json!(2)),
        "nothing appended after the row"
    );
}

/// A holder taking a row waits for the line of a write on the fast path, not for its
/// `fdatasync` (docs/lock.md, "The fast path"): with the write's line in the file and the
/// write held in its sync, `Store::lock` returns; the write then lands, before the row.
#[test]
fn a_lock_taken_while_a_write_on_the_fast_path_syncs_does_not_wait_for_the_sync() {
    let s = session();
    let (writer, go) = a_write_paused_on_the_fast_path_by(&s, Hooked::pausing_sync_after(1));

    let live = Proc::sleep();
    let holder = live.holder();
    let locking = store(&s.db);
    let started = Instant::now();
    let taken = locking.lock_as(&s.id, "prune", now_ms(), &holder);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the lock waited for the sync"
    );
    taken.map(std::mem::forget).expect("the lock is taken");
    go.send(()).expect("let the sync go");
    let (written, state, log, _store) = writer.join().expect("join");
    written.expect("the write lands").expect("appended");
    assert_eq!(state.read(&log).expect("read"), Some(json!(2)));
}

/// A holder (`Store::lock`, which takes the session file's lock) behind a write stuck
/// between its check and its append on the fast path: the write holds the file's lock, so
/// the holder waits its bounded wait, then gives up with the four-element refusal naming
/// the file and this process, having taken no row; once the write is done it takes the
/// lock.
#[test]
fn a_holder_behind_a_stuck_write_on_the_fast_path_gives_up_and_takes_no_row() {
    let s = session();
    let file = std::fs::canonicalize(&s.file).expect("canonical");
    let (writer, go) = a_write_paused_on_the_fast_path(&s);

    let holding = store(&s.db);
    holding
        .catch_up(&file)
        .expect("the store knows the session's file");
    let started = Instant::now();
    let err = holding
        .lock(&s.id, "prune")
        .map(drop)
        .expect_err("the write never ends its append");
    assert!(started.elapsed() >= Duration::from_secs(10), "it waited");
    let Error::Lock(e) = err else {
        panic!("not a lock error: {err}")
    };
    let LockError::FileHeld {
        initiator,
        action,
        object,
        ..
    } = &*e
    else {
        panic!("{e:?}")
    };
    assert_eq!(*initiator, Holder::current().to_string());
    assert_eq!(action, "prune");
    assert_eq!(*object, file);
    assert!(
        e.to_string().contains("did not release it within 10 s"),
        "{e}"
    );
    assert_eq!(lock_row(&s.db, &s.id), None, "no row taken");

    go.send(()).expect("let the write go");
    writer.join().expect("join").0.expect("the write lands");
    holding
        .lock(&s.id, "prune")
        .map(drop)
        .expect("taken once the write is done");
}

/// A writer decides its event from the log as it ends under the file lock: one that
/// waited for the lock while a writer through another database set the same value sees
/// that value and appends nothing (decided before the lock, it would append a second
/// event setting it again).
#[test]
fn a_write_that_waited_for_the_file_lock_decides_after_what_was_appended_meanwhile() {
    let s = session();
    let file = std::fs::canonicalize(&s.file).expect("canonical");
    let (db_a, db_b) = (s.dir.path().join("a.sqlite"), s.dir.path().join("b.sqlite"));
    let value = json!({"v": 1});
    let set_via_log = |db: &Path, fs: Arc<dyn FileSystem>| {
        let (file, db, value) = (file.clone(), db.to_path_buf(), value.clone());
        std::thread::spawn(move || {
            let store = Store::open(
                StoreOptions::new()
                    .database_path(&db)
                    .file_system(fs.clone()),
            )?;
            let state: SessionState<Value> = store.state(PLUGIN, Scope::Branch)?;
            let mut log = LogOptions::new().file_system(fs).open(&file)?;
            state.write(&mut log, &value)
        })
    };
    let (a_fs, a_reached, a_go) = Hooked::pausing();
    let a = set_via_log(&db_a, a_fs);
    a_reached
        .recv_timeout(Duration::from_secs(60))
        .expect("A never reached its append");
    // B opens the log now, before A's entry, and waits for the file lock.
    let (b_fs, b_blocked) = Hooked::watching(true);
    let b = set_via_log(&db_b, b_fs);
    b_blocked
        .recv_timeout(Duration::from_secs(60))
        .expect("B was not held back by the file lock");
    a_go.send(()).expect("A waits for the word");
    let id_a = a.join().expect("A's thread").expect("A's write");
    assert!(id_a.is_some(), "A appended its event");
    let id_b = b.join().expect("B's thread").expect("B's write");
    assert_eq!(
        id_b, None,
        "B saw A's event under the lock: nothing to append"
    );
    let text = std::fs::read_to_string(&file).expect("read");
    let events = text
        .lines()
        .filter(|l| l.contains(&format!("\"customType\":\"session-state/{PLUGIN}\"")))
        .count();
    assert_eq!(events, 1, "one event sets the value: {text}");
    assert_eq!(reference_value_at_last_entry(&file), Some(value));
}

/// The plugin's branch value at the last entry in file order (where Pi's leaf is when it
/// opens the file), folded by the reference fold along the path from the root.
fn reference_value_at_last_entry(file: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(file).expect("read");
    let entries: Vec<Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    let by_id: std::collections::HashMap<&str, &Value> = entries
        .iter()
        .map(|e| (e["id"].as_str().expect("an id"), e))
        .collect();
    let mut path = Vec::new();
    let mut at = entries.last();
    while let Some(e) = at {
        path.push(e);
        at = e["parentId"].as_str().map(|p| by_id[p]);
    }
    path.reverse();
    common::reference::fold(path, PLUGIN, "branch")
}

/// One writer is paused between its check of the file's end and its append (through
/// the seam, holding the file lock). A writer through another database cannot append
/// beside it: told not to wait, it is refused with the four-element error naming the
/// file and the holder (this process), having written nothing; told to wait, it waits,
/// and appends after the paused writer's entry once that is done. Both patches are in the
/// fold at the leaf. Every pairing of the two write paths.
#[test]
fn a_writer_paused_before_its_append_keeps_writers_of_other_databases_out() {
    for a_via in [Via::Log, Via::File] {
        for b_via in [Via::Log, Via::File] {
            paused_writer_keeps_the_other_out(a_via, b_via);
        }
    }
}

fn paused_writer_keeps_the_other_out(a_via: Via, b_via: Via) {
    let what = format!("A writes through its {a_via:?}, B through its {b_via:?}");
    let s = session();
    let file = std::fs::canonicalize(&s.file).expect("canonical");
    let (db_a, db_b) = (s.dir.path().join("a.sqlite"), s.dir.path().join("b.sqlite"));
    for db in [&db_a, &db_b] {
        // Each database knows the session, so a write without the log is decided from its
        // rows.
        store(db).catch_up(&file).expect("catch up");
    }
    let patch_in_thread = |via: Via, db: &Path, fs: Arc<dyn FileSystem>, patch: Value| {
        let (file, db) = (file.clone(), db.to_path_buf());
        std::thread::spawn(move || patch_via(via, &file, &db, fs, &patch))
    };
    let (a_fs, a_reached, a_go) = Hooked::pausing();
    let a = patch_in_thread(a_via, &db_a, a_fs, json!({"a": 1}));
    a_reached
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: A never reached its append"));
    let before = std::fs::read(&file).expect("read");

    // B will not wait: refused, naming the file and A's process, nothing written.
    let (b_fs, b_blocked) = Hooked::watching(false);
    let err = patch_via(b_via, &file, &db_b, b_fs, &json!({"b": 0})).expect_err(&what);
    b_blocked
        .try_recv()
        .unwrap_or_else(|_| panic!("{what}: B did not find the file locked: {err}"));
    let shown = err.to_string();
    let Error::Lock(e) = err else {
        panic!("{what}: not a lock error: {shown}")
    };
    let LockError::FileHeld {
        initiator,
        action,
        object,
        reason,
        pid,
    } = *e
    else {
        panic!("{what}: {e:?}")
    };
    assert_eq!(initiator, Holder::current().to_string(), "{what}");
    assert_eq!(action, "patch", "{what}");
    assert_eq!(object, file, "{what}");
    assert!(reason.contains("advisory lock"), "{what}: {reason}");
    assert_eq!(pid, Some(std::process::id()), "{what}");
    for part in [
        initiator.as_str(),
        "patch refused",
        &file.display().to_string(),
        &reason,
        &format!("kill {}", std::process::id()),
    ] {
        assert!(
            shown.contains(part),
            "{what}: {part:?} missing from: {shown}"
        );
    }
    assert_eq!(std::fs::read(&file).expect("read"), before, "{what}");

    // B waits: it finds the file locked, and appends nothing until A is done.
    let (b_fs, b_blocked) = Hooked::watching(true);
    let b = patch_in_thread(b_via, &db_b, b_fs, json!({"b": 1}));
    b_blocked
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: B was not held back by the file lock"));
    assert_eq!(std::fs::read(&file).expect("read"), before, "{what}");
    a_go.send(()).expect("A waits for the word");
    let id_a = a
        .join()
        .expect("A's thread")
        .expect(&what)
        .expect("A appended");
    let id_b = b
        .join()
        .expect("B's thread")
        .expect(&what)
        .expect("B appended");

    let log = SessionLog::open(&file).expect("strict read");
    assert_eq!(
        log.entry(&id_b).expect("B's entry").parent_id(),
        Some(id_a.as_str()),
        "{what}: B appended after A's entry, not beside it"
    );
    assert!(log.forks().is_empty(), "{what}: {:?}", log.forks());
    let both = json!({"a": 1, "b": 1});
    assert_eq!(
        reference_value_at_last_entry(&file),
        Some(both.clone()),
        "{what}"
    );
    for db in [&db_a, &db_b] {
        assert_eq!(
            store(db)
                .read_value(&file, PLUGIN, Scope::Branch, None)
                .expect("read"),
            Some(both.clone()),
            "{what}: {}",
            db.display()
        );
    }
}

/// Four processes patch one session, 40 patches each, each through its own projection
/// database (as with `--db`, or a project's own setting): two with the log in memory,
/// two without (as the command line writes). Before the file lock, two of them now and
/// then appended beside each other under the same parent, and the fold at the leaf lost
/// one patch. Every acknowledged patch is in the file, nothing unacknowledged is, no
/// entry forks, and the value at the leaf (the reference fold, ours, each database's
/// projection) holds all 160 patches.
#[test]
fn four_writers_each_with_its_own_database_lose_no_patch() {
    const WRITERS: usize = 4;
    const PATCHES: usize = 40;
    let s = session();
    let dbs: Vec<PathBuf> = (0..WRITERS)
        .map(|k| s.dir.path().join(format!("db{k}")).join("states.sqlite"))
        .collect();
    let mut writers: Vec<(Writer, u32)> = dbs
        .iter()
        .enumerate()
        .map(|(k, db)| {
            let via = if k % 2 == 0 { Via::Log } else { Via::File };
            let w = Writer::spawn(Program::Patches(via), &s.file, db, PATCHES, Start::Go);
            let pid = w.pid();
            (w, pid)
        })
        .collect();
    for (w, _) in &mut writers {
        w.expect_line("READY");
    }
    for (w, _) in &mut writers {
        w.go();
    }
    let mut expected = serde_json::Map::new();
    let mut acked = Vec::new();
    for (w, pid) in writers {
        let attempts = w.finish();
        assert_eq!(attempts.len(), PATCHES, "one line per attempt");
        for (i, a) in attempts.into_iter().enumerate() {
            match a {
                Attempt::Acked { id, .. } => acked.push(id),
                Attempt::Refused { message, .. } => panic!("writer {pid}: refused: {message}"),
            }
            expected.insert(format!("{pid}-{i}"), json!(i));
        }
    }
    let log = SessionLog::open(&s.file).expect("strict read");
    assert!(log.findings().is_empty(), "{:?}", log.findings());
    for id in &acked {
        assert!(log.entry(id).is_some(), "acknowledged {id} is missing");
    }
    let events = log
        .entries()
        .filter(|e| e.state_plugin() == Some(PLUGIN))
        .count();
    assert_eq!(
        events,
        acked.len(),
        "every event in the file was acknowledged"
    );
    let expected = Value::Object(expected);
    let at_leaf = reference_value_at_last_entry(&s.file).expect("a value");
    let lost: Vec<&String> = expected
        .as_object()
        .expect("object")
        .keys()
        .filter(|k| at_leaf.get(k.as_str()).is_none())
        .collect();
    assert!(
        lost.is_empty(),
        "patches lost at the leaf: {lost:?}; forks at {:?}",
        log.forks()
    );
    assert_eq!(at_leaf, expected);
    assert!(log.forks().is_empty(), "forks at {:?}", log.forks());
    assert_eq!(
        shared(&dbs[0]).read(&log).expect("fold"),
        Some(expected.clone())
    );
    for db in &dbs {
        assert_eq!(
            store(db)
                .read_value(&s.file, PLUGIN, Scope::Branch, None)
                .expect("read"),
            Some(expected.clone()),
            "{}",
            db.display()
        );
    }
}

/// Writers of one SQLite session store in a tight loop, each a store of its own (its own
/// connections, as separate processes have) on one projection database and one store
/// database, take turns too: a stored write decides and appends in one turn, so none
/// loses the race for the next sequence number to a writer that came after it
/// (docs/lock.md, "Taking turns"). Counted in the store, not timed.
#[test]
fn sqlite_store_writers_in_a_tight_loop_take_turns() {
    const WRITERS: usize = 4;
    const WRITES: usize = 40;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("agent").join("states.sqlite");
    let path = dir.path().join("sessions.sqlite");
    let id = "0195f1d0-7c4e-7000-8000-00000000c0de";
    {
        let sessions = Sessions::new(SqliteStore::open(&path).expect("store"));
        sessions
            .create(Header::new(id, "/work").with_timestamp("2026-12-04T20:00:00.000Z"))
            .expect("create");
        let user = json!({"type": "message", "message": {"role": "user", "content": "hi", "timestamp": 0}});
        sessions.append(id, 0, &[user]).expect("append");
    }
    store(&db).connect().expect("create the database");
    let barrier = Arc::new(Barrier::new(WRITERS));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (barrier, db, path) = (barrier.clone(), db.clone(), path.clone());
            std::thread::spawn(move || {
                let backend = SqliteStore::open(&path).expect("store");
                let key = path.display().to_string();
                let session = StoredSession::new(&backend, &key, id);
                let state: SessionState<Value> =
                    store(&db).state(PLUGIN, Scope::Branch).expect("state");
                barrier.wait();
                (0..WRITES)
                    .map(|i| {
                        state
                            .write(On::stored(&session, None), &json!({"writer": w, "i": i}))
                            .expect("write")
                            .expect("a new value is written")
                    })
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    let mut writer_of = std::collections::HashMap::new();
    for (w, t) in writers.into_iter().enumerate() {
        for entry in t.join().expect("writer") {
            writer_of.insert(entry, w);
        }
    }
    let mut out = Vec::new();
    session_state::Sessions::new(SqliteStore::open(&path).expect("store"))
        .export(id, &mut out)
        .expect("export");
    let order: Vec<usize> = String::from_utf8(out)
        .expect("UTF-8")
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).expect("JSON");
            writer_of.get(v["id"].as_str()?).copied()
        })
        .collect();
    assert_eq!(order.len(), WRITERS * WRITES, "every write is stored once");
    let worst = most_overtaken(&order, WRITERS, Begin::Together);
    let changes = order.windows(2).filter(|w| w[0] != w[1]).count();
    eprintln!(
        "SQLite store: {WRITERS} writers x {WRITES} writes: the writer changed {changes} times \
         in {} events; a writer waited behind at most {worst} of another's writes",
        order.len()
    );
    // One turn per write; scheduling may keep a writer out of line for a turn or two.
    // With SQLite alone, one writer writes all its values while the others wait.
    assert!(
        worst <= 3,
        "a writer waited behind {worst} writes of another: {order:?}"
    );
}

/// Writers of one PostgreSQL session, each with its own connection and its own projection
/// (as on separate machines), in a tight loop, take turns at the store
/// (`SessionStore::begin_turn`: an advisory lock granted in the order asked): none writes
/// more than a few times while another waits, and none is refused as contended. Racing
/// for the sequence number instead, the writer that just appended is a round trip ahead of
/// the one that must first read what it appended, and wins again.
#[test]
fn postgres_writers_on_separate_projections_take_turns() {
    const WRITERS: usize = 4;
    const WRITES: usize = 30;
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, _db) = common::pg::fresh_database();
    let id = "0195f1d0-7c4e-7000-8000-00000000c0df";
    {
        let sessions = Sessions::new(session_state::PostgresStore::connect(&url).expect("connect"));
        sessions
            .create(Header::new(id, "/work").with_timestamp("2026-12-04T20:00:00.000Z"))
            .expect("create");
        let user = json!({"type": "message", "message": {"role": "user", "content": "hi", "timestamp": 0}});
        sessions.append(id, 0, &[user]).expect("append");
    }
    let barrier = Arc::new(Barrier::new(WRITERS));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (barrier, url) = (barrier.clone(), url.clone());
            let db = dir.path().join(format!("m{w}")).join("states.sqlite");
            std::thread::spawn(move || {
                let backend = session_state::PostgresStore::connect(&url).expect("connect");
                let key = backend.url().to_owned();
                let session = StoredSession::new(&backend, &key, id);
                let state: SessionState<Value> =
                    store(&db).state(PLUGIN, Scope::Branch).expect("state");
                // Warm: the projection folds the session before the race starts.
                state.read(On::stored(&session, None)).expect("read");
                barrier.wait();
                (0..WRITES)
                    .map(|i| {
                        state
                            .write(On::stored(&session, None), &json!({"writer": w, "i": i}))
                            .expect("write")
                            .expect("a new value is written")
                    })
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    let mut writer_of = std::collections::HashMap::new();
    for (w, t) in writers.into_iter().enumerate() {
        for entry in t.join().expect("writer") {
            writer_of.insert(entry, w);
        }
    }
    let mut out = Vec::new();
    session_state::Sessions::new(session_state::PostgresStore::connect(&url).expect("connect"))
        .export(id, &mut out)
        .expect("export");
    let order: Vec<usize> = String::from_utf8(out)
        .expect("UTF-8")
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).expect("JSON");
            writer_of.get(v["id"].as_str()?).copied()
        })
        .collect();
    assert_eq!(order.len(), WRITERS * WRITES, "every write is stored once");
    let worst = most_overtaken(&order, WRITERS, Begin::Together);
    let changes = order.windows(2).filter(|w| w[0] != w[1]).count();
    eprintln!(
        "PostgreSQL store: {WRITERS} writers x {WRITES} writes on separate projections: the \
         writer changed {changes} times in {} events; a writer waited behind at most {worst} \
         of another's writes",
        order.len()
    );
    assert!(
        worst <= 3,
        "a writer waited behind {worst} writes of another: {order:?}"
    );
}

/// A writer alone takes one turn, for its first write, which judges the rows in a
/// transaction (docs/lock.md, "Taking turns"); its later writes take the fast path, which
/// takes no turn ("The fast path"): the queue's ticket counter moves by one. A writer
/// whose writes all went through a transaction would move it by one per write.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[test]
fn a_writer_alone_takes_one_turn_then_the_fast_path() {
    let s = session();
    let state = shared(&s.db);
    let mut log = SessionLog::open(&s.file).expect("open");
    for i in 0..5 {
        state.write(&mut log, &json!({"i": i})).expect("write");
    }
    let mut queue = s.db.clone().into_os_string();
    queue.push("-queue");
    let bytes = std::fs::read(&queue).expect("the queue file exists");
    assert_eq!(&bytes[..8], b"ssqueue1");
    assert_eq!(
        u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
        1,
        "one ticket, for the first write"
    );
}

/// A log that only reads and has followed another writer's appends keeps the file open for
/// reading: the next `refresh` looks at that file (one `fstat`, the path only when the file
/// was renamed or linked since its last write) and reads the new bytes with the bytes
/// before them in one `pread`. It still reads each append, long or short, and still
/// refuses with `ChangedOnDisk` a file renamed over, deleted, moved away with another put
/// at the path, shrunk, or rewritten in place longer or at the same length; the file is
/// never written.
#[test]
fn a_reading_log_that_followed_appends_refuses_a_file_changed_behind_it() {
    let entry = |text: &str| NewEntry::message(json!({"role": "user", "content": text}));
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = new_session(dir.path());
    let append = |text: &str| {
        SessionLog::open(&file)
            .expect("open")
            .append(entry(text))
            .expect("append")
    };
    let refused = |log: &mut SessionLog, what: &str, detail: &str| {
        let before = std::fs::read(&file).ok();
        let err = log.refresh().expect_err(what);
        assert!(
            matches!(err, AppendError::ChangedOnDisk { .. }),
            "{what}: {err}"
        );
        assert!(err.to_string().contains(detail), "{what}: {err}");
        assert_eq!(std::fs::read(&file).ok(), before, "{what}: nothing written");
    };
    // A log that has read others' appends, with its file kept open.
    let following = || {
        let mut log = SessionLog::open(&file).expect("open");
        let id = append("theirs");
        log.refresh().expect("refresh");
        assert_eq!(log.leaf_id(), Some(id.as_str()));
        log
    };

    // Appends, each read: short ones, a long one (more than one read of it at once), a
    // line cut in two by the writer between two refreshes.
    let mut log = following();
    for i in 0..3 {
        let id = append(&format!("short {i}"));
        log.refresh().expect("refresh");
        assert_eq!(log.leaf_id(), Some(id.as_str()));
    }
    let id = append(&"long ".repeat(300_000));
    log.refresh().expect("refresh after a long append");
    assert_eq!(log.leaf_id(), Some(id.as_str()));
    let mut half = SessionLog::open(&file).expect("open");
    let line = format!(
        "{}\n",
        json!({"type": "message", "id": "cut0001", "parentId": id, "timestamp": "2026-12-08T00:00:00.000Z",
               "message": {"role": "user", "content": "cut"}})
    );
    let (a, b) = line.split_at(40);
    let mut f = std::fs::File::options()
        .append(true)
        .open(&file)
        .expect("open");
    f.write_all(a.as_bytes()).expect("write");
    log.refresh().expect("refresh at half a line");
    assert_eq!(
        log.leaf_id(),
        Some(id.as_str()),
        "half a line is not an entry"
    );
    f.write_all(b.as_bytes()).expect("write");
    log.refresh().expect("refresh after the line's end");
    assert_eq!(log.leaf_id(), Some("cut0001"));
    half.refresh().expect("another log reads it too");
    assert_eq!(log.len(), SessionLog::open(&file).expect("open").len());
    drop(f);

    // Renamed over by a copy with one more line (longer: it would be read as an append).
    let mut log = following();
    let other = dir.path().join("other.jsonl");
    std::fs::copy(&file, &other).expect("copy");
    let mut copy = SessionLog::open(&other).expect("open the copy");
    copy.append(entry("in the copy"))
        .expect("append to the copy");
    std::fs::rename(&other, &file).expect("rename over");
    refused(&mut log, "renamed over", "another file");

    // Deleted.
    let mut log = following();
    let kept = std::fs::read(&file).expect("read");
    std::fs::remove_file(&file).expect("remove");
    let err = log.refresh().expect_err("deleted");
    assert!(
        matches!(err, AppendError::ChangedOnDisk { .. }),
        "deleted: {err}"
    );
    assert!(!file.exists(), "no file made at the path");
    std::fs::write(&file, &kept).expect("put back");

    // Moved away and a longer copy put at the path (the moved file's modification time
    // set back, as in `a_file_replaced_behind_a_writer_that_has_appended_is_refused`).
    let mut log = following();
    let moved = dir.path().join("moved.jsonl");
    std::fs::rename(&file, &moved).expect("move away");
    std::fs::File::options()
        .write(true)
        .open(&moved)
        .and_then(|f| f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(86_400)))
        .expect("set the modification time");
    std::fs::copy(&moved, &file).expect("another file at the path");
    SessionLog::open(&file)
        .expect("open")
        .append(entry("at the new file"))
        .expect("append");
    refused(&mut log, "moved away", "another file");
    std::fs::remove_file(&moved).expect("remove");

    // Shrunk.
    let mut log = following();
    let now = std::fs::read(&file).expect("read");
    std::fs::File::options()
        .write(true)
        .open(&file)
        .and_then(|f| f.set_len(now.len() as u64 - 10))
        .expect("truncate");
    refused(&mut log, "shrunk", "shrank");
    std::fs::write(&file, &now).expect("restore");

    // Rewritten in place, longer, then at the same length (an entry's id: what the log
    // holds; a message's text of the same length is taken as a touch).
    let mut log = following();
    let bytes = std::fs::read(&file).expect("read");
    rewrite_in_place(
        &file,
        &replaced_once(&bytes, "\"short 1\"", "\"short 1, longer now\""),
    );
    refused(&mut log, "rewritten longer", "rewritten");
    let mut log = following();
    let bytes = std::fs::read(&file).expect("read");
    rewrite_in_place(
        &file,
        &replaced_once(&bytes, "\"id\":\"cut0001\"", "\"id\":\"cut0002\""),
    );
    refused(&mut log, "rewritten at the same length", "rewritten");
}
