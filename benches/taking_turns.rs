//! Writers taking turns on one projection database (docs/lock.md, "Taking turns"), against
//! SQLite's busy handler alone, in the same run (docs/performance.md, "Writers taking
//! turns").
//!
//! WRITERS threads, each with a store of its own (its own connection and open queue file,
//! as separate processes have), write WRITES values each, one after another, into one
//! session file through one database, in branch scope, with the log in memory. All are
//! released together. Per round and mode: acknowledged writes per second of wall time
//! (until the last finishes), p50, p99 and the longest write, how often the file passes
//! from one writer's event to another's, and the most writes of one writer that another
//! waited behind (before its first write or between two of its writes).
//!
//! "busy handler alone" is the queue made unusable the way the store meets it in the
//! wild: a `<database>-queue` file that is not this crate's, which it never writes and
//! does not queue on. Rounds alternate which mode goes first; files are in `$TMPDIR` (use
//! a real disk).
//!
//! With `--sqlite-store`, the session is in a SQLite session store instead (each writer
//! its own `SqliteStore` on it, `write_stored`), and "busy handler alone" unsettles both
//! queue files (the projection's and the store's).
//!
//! `cargo bench --bench taking_turns -- [--writers 4] [--writes 60] [--rounds 5]
//! [--sqlite-store]`

use serde_json::json;
use session_state::On;
use session_state::{
    Header, Scope, SessionLog, SessionState, Sessions, SqliteStore, Store, StoredSession,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Turns,
    BusyHandler,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Turns => "in turns",
            Mode::BusyHandler => "busy handler alone",
        }
    }
}

struct Round {
    per_s: f64,
    p50: Duration,
    p99: Duration,
    longest: Duration,
    changes: usize,
    overtaken: usize,
}

const ID: &str = "0195f1d0-7c4e-7000-8000-00000000c0de";

/// Where the writers write.
#[derive(Clone)]
enum Target {
    File(PathBuf),
    SqliteStore(PathBuf),
}

fn new_stored_session(dir: &Path) -> PathBuf {
    let path = dir.join("sessions.sqlite");
    let sessions = Sessions::new(SqliteStore::open(&path).expect("store"));
    sessions
        .create(Header::new(ID, "/tmp").with_timestamp("2026-01-01T00:00:00.000Z"))
        .expect("create");
    let user =
        json!({"type": "message", "message": {"role": "user", "content": "hi", "timestamp": 0}});
    sessions.append(ID, 0, &[user]).expect("append");
    path
}

fn new_session(dir: &Path) -> PathBuf {
    let file = dir.join("s.jsonl");
    let id = ID;
    let header = json!({"type": "session", "version": 3, "id": id,
        "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/tmp"});
    let user = json!({"type": "message", "id": "a1b2c3d4", "parentId": null,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": "hi", "timestamp": 0}});
    std::fs::write(&file, format!("{header}\n{user}\n")).expect("write the session");
    file
}

/// The most events of one writer between two consecutive events of another, or before
/// another's first (all start together), over the waits that begin before the first
/// writer to finish has finished.
fn most_overtaken(order: &[usize], n: usize) -> usize {
    let Some(last) = (0..n)
        .filter_map(|w| order.iter().rposition(|&x| x == w))
        .min()
    else {
        return 0;
    };
    let mut worst = 0;
    for w in 0..n {
        let mut mine: Vec<isize> = vec![-1];
        mine.extend(
            (0..order.len())
                .filter(|&i| order[i] == w)
                .map(|i| i as isize),
        );
        for pair in mine.windows(2).filter(|p| p[0] <= last as isize) {
            let mut count = vec![0usize; n];
            for &x in &order[(pair[0] + 1) as usize..pair[1] as usize] {
                count[x] += 1;
            }
            worst = worst.max(count.into_iter().max().unwrap_or(0));
        }
    }
    worst
}

fn round(mode: Mode, writers: usize, writes: usize, stored: bool) -> Round {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = match stored {
        false => Target::File(new_session(dir.path())),
        true => Target::SqliteStore(new_stored_session(dir.path())),
    };
    let db = dir.path().join("states.sqlite");
    Store::at(&db)
        .expect("store")
        .connect()
        .expect("create the database");
    if mode == Mode::BusyHandler {
        for queue in ["states.sqlite-queue", "sessions.sqlite-queue"] {
            std::fs::write(dir.path().join(queue), "not the queue\n").expect("plant");
        }
    }
    let barrier = Arc::new(Barrier::new(writers + 1));
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (barrier, target, db) = (barrier.clone(), target.clone(), db.clone());
            std::thread::spawn(move || {
                let store = Store::at(&db).expect("store");
                let state: SessionState<serde_json::Value> =
                    store.state(format!("w{w}"), Scope::Branch).expect("state");
                let mut took = Vec::with_capacity(writes);
                let mut ids = Vec::with_capacity(writes);
                match &target {
                    Target::File(file) => {
                        let mut log = SessionLog::open(file).expect("open");
                        barrier.wait();
                        for i in 0..writes {
                            let t = Instant::now();
                            let id = state.write(&mut log, &json!({"i": i})).expect("write");
                            took.push(t.elapsed());
                            ids.push(id.expect("a new value is written"));
                        }
                    }
                    Target::SqliteStore(path) => {
                        let backend = SqliteStore::open(path).expect("store");
                        let key = path.display().to_string();
                        let session = StoredSession::new(&backend, &key, ID);
                        barrier.wait();
                        for i in 0..writes {
                            let t = Instant::now();
                            let id = state
                                .write(On::stored(&session, None), &json!({"i": i}))
                                .expect("write");
                            took.push(t.elapsed());
                            ids.push(id.expect("a new value is written"));
                        }
                    }
                }
                (took, ids)
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let mut took = Vec::new();
    let mut writer_of = std::collections::HashMap::new();
    for (w, t) in threads.into_iter().enumerate() {
        let (times, ids) = t.join().expect("writer");
        took.extend(times);
        writer_of.extend(ids.into_iter().map(|id| (id, w)));
    }
    let wall = started.elapsed();
    took.sort_unstable();
    let q = |f: f64| took[((took.len() - 1) as f64 * f) as usize];
    let lines = match &target {
        Target::File(file) => std::fs::read_to_string(file).expect("read"),
        Target::SqliteStore(path) => {
            let mut out = Vec::new();
            let backend = session_state::Sessions::new(SqliteStore::open(path).expect("store"));
            backend.export(ID, &mut out).expect("export");
            String::from_utf8(out).expect("UTF-8")
        }
    };
    let order: Vec<usize> = lines
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            writer_of.get(v["id"].as_str()?).copied()
        })
        .collect();
    assert_eq!(order.len(), writers * writes, "every write is stored once");
    Round {
        per_s: order.len() as f64 / wall.as_secs_f64(),
        p50: q(0.5),
        p99: q(0.99),
        longest: q(1.0),
        changes: order.windows(2).filter(|w| w[0] != w[1]).count(),
        overtaken: most_overtaken(&order, writers),
    }
}

fn range<T: PartialOrd + Copy>(v: impl Iterator<Item = T>) -> (T, T) {
    let v: Vec<T> = v.collect();
    let lo = v
        .iter()
        .copied()
        .fold(v[0], |a, b| if b < a { b } else { a });
    let hi = v
        .iter()
        .copied()
        .fold(v[0], |a, b| if b > a { b } else { a });
    (lo, hi)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let writers = arg(&args, "--writers", 4);
    let writes = arg(&args, "--writes", 60);
    let rounds = arg(&args, "--rounds", 5);
    let stored = args.iter().any(|a| a == "--sqlite-store");
    let on = if stored {
        "a SQLite session store"
    } else {
        "a file"
    };
    println!(
        "{writers} writers x {writes} writes, one session in {on}, one projection database, \
         {rounds} rounds"
    );
    let mut results: Vec<(Mode, Round)> = Vec::new();
    for r in 0..rounds {
        let order = match r % 2 {
            0 => [Mode::Turns, Mode::BusyHandler],
            _ => [Mode::BusyHandler, Mode::Turns],
        };
        for mode in order {
            let x = round(mode, writers, writes, stored);
            println!(
                "round {r} {:>18}: {:>6.0} writes/s, p50 {:>6.2?}, p99 {:>8.2?}, longest \
                 {:>8.2?}, writer changed {:>4} times, most overtaken {:>3}",
                mode.name(),
                x.per_s,
                x.p50,
                x.p99,
                x.longest,
                x.changes,
                x.overtaken
            );
            results.push((mode, x));
        }
    }
    for mode in [Mode::Turns, Mode::BusyHandler] {
        let of = || {
            results
                .iter()
                .filter(move |(m, _)| *m == mode)
                .map(|(_, x)| x)
        };
        let (a, b) = range(of().map(|x| x.per_s));
        let (p50a, p50b) = range(of().map(|x| x.p50));
        let (p99a, p99b) = range(of().map(|x| x.p99));
        let (la, lb) = range(of().map(|x| x.longest));
        let (ca, cb) = range(of().map(|x| x.changes));
        let (oa, ob) = range(of().map(|x| x.overtaken));
        println!(
            "{:>18}: {a:.0}–{b:.0} writes/s, p50 {p50a:.2?}–{p50b:.2?}, p99 {p99a:.2?}–{p99b:.2?}, \
             longest {la:.2?}–{lb:.2?}, changes {ca}–{cb}, most overtaken {oa}–{ob}",
            mode.name()
        );
    }
}
