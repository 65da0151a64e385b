//! Many writers at once through the library, on PostgreSQL and on Pi JSONL files, in the
//! same run (docs/performance.md, "Many writers through the library").
//!
//! Each writer is a thread that lives for the whole round, as an agent's process does:
//! its own projection database and, on PostgreSQL, its own connection
//! (`PostgresStore::connect` once, then `write_stored`); on files, `write_file` on the
//! session file (the file's write lock, `fdatasync`). WRITERS writers on SESSIONS
//! sessions (writer k on session k % SESSIONS, so several race on each), each writing
//! WRITES new values of its own plugin one after another. The server is the tests'
//! (`tests/common/pg.rs`: loopback, `fsync = on`), started by this benchmark; the files
//! are in a temporary directory beside it (`$TMPDIR`: use a real disk).
//!
//! Per round and backend: acknowledged writes per second of wall time (all writers
//! released together, until the last finishes), p50 and p99 of one write, refusals, and
//! a read-back: every acknowledged entry id exactly once in its session, nothing else
//! stored. ROUNDS rounds alternate which backend goes first.
//!
//! `cargo bench --bench many_writers -- [--writers 16] [--sessions 8] [--writes 50]
//! [--rounds 5]`

#[path = "../tests/common/pg.rs"]
mod pg;

use serde_json::{Value, json};
use session_state::On;
use session_state::{
    Header, PiJsonlStore, PostgresStore, Scope, SessionStore, Sessions, Store, StoredSession,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

struct Load {
    writers: usize,
    sessions: usize,
    writes: usize,
    rounds: usize,
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn session_id(s: usize) -> String {
    format!("0195f1d0-7c4e-7000-8000-0000000b{s:04}")
}

fn user() -> Value {
    json!({"type": "message", "message": {"role": "user", "content": "hi", "timestamp": 0}})
}

/// Creates the sessions in `store` (one user message each).
fn seed<S: SessionStore + 'static>(store: S, n: usize) {
    let sessions = Sessions::new(store);
    for s in 0..n {
        let id = session_id(s);
        sessions
            .create(
                Header::new(id.as_str(), "/work/project")
                    .with_timestamp("2026-12-04T20:00:00.000Z"),
            )
            .expect("create");
        sessions.append(&id, 0, &[user()]).expect("append");
    }
}

/// One round's figures.
struct Round {
    secs: f64,
    acked: usize,
    refused: usize,
    latencies: Vec<Duration>,
}

impl Round {
    fn rate(&self) -> f64 {
        self.acked as f64 / self.secs
    }
    fn pct(&self, p: f64) -> Duration {
        let mut l = self.latencies.clone();
        l.sort();
        l[((l.len() as f64 - 1.0) * p).round() as usize]
    }
}

/// Where a writer writes.
#[derive(Clone)]
enum Target {
    Files(Vec<PathBuf>),
    Postgres(String),
}

/// Runs WRITERS threads against `target`; returns the figures and every acknowledged id
/// by session.
fn run(load: &Load, target: &Target, scratch: &Path) -> (Round, HashMap<usize, Vec<String>>) {
    let barrier = Arc::new(Barrier::new(load.writers + 1));
    let threads: Vec<_> = (0..load.writers)
        .map(|k| {
            let (target, barrier) = (target.clone(), barrier.clone());
            let db = scratch.join(format!("w{k}")).join("states.sqlite");
            let (writes, s) = (load.writes, k % load.sessions);
            std::thread::spawn(move || {
                let projection = Store::at(db).expect("projection");
                let state = projection
                    .state::<Value>(format!("w{k}"), Scope::Branch)
                    .expect("state");
                let backend = match &target {
                    Target::Postgres(url) => Some(PostgresStore::connect(url).expect("connect")),
                    Target::Files(_) => None,
                };
                let id = session_id(s);
                let mut acked = Vec::new();
                let mut latencies = Vec::new();
                let mut refused = 0;
                barrier.wait();
                for i in 0..writes {
                    let value = json!({"w": k, "i": i});
                    let t = Instant::now();
                    let r = match (&target, &backend) {
                        (Target::Files(files), _) => state.write(On::file(&files[s], None), &value),
                        (Target::Postgres(_), Some(b)) => state.write(
                            On::stored(&StoredSession::new(b, b.url(), &id), None),
                            &value,
                        ),
                        (Target::Postgres(_), None) => unreachable!("connected above"),
                    };
                    match r {
                        Ok(Some(entry)) => {
                            latencies.push(t.elapsed());
                            acked.push(entry);
                        }
                        Ok(None) => panic!("a new value is a new entry"),
                        Err(e) => {
                            eprintln!("writer {k}: refused: {e}");
                            refused += 1;
                        }
                    }
                }
                (s, acked, latencies, refused)
            })
        })
        .collect();
    barrier.wait();
    let t = Instant::now();
    let mut by_session: HashMap<usize, Vec<String>> = HashMap::new();
    let mut round = Round {
        secs: 0.0,
        acked: 0,
        refused: 0,
        latencies: Vec::new(),
    };
    for th in threads {
        let (s, acked, latencies, refused) = th.join().expect("writer");
        round.acked += acked.len();
        round.refused += refused;
        round.latencies.extend(latencies);
        by_session.entry(s).or_default().extend(acked);
    }
    round.secs = t.elapsed().as_secs_f64();
    (round, by_session)
}

/// Every acknowledged id once in its session, and no other state event stored.
fn check(store: Sessions, load: &Load, acked: &HashMap<usize, Vec<String>>) {
    for s in 0..load.sessions {
        let mut out = Vec::new();
        store.export(&session_id(s), &mut out).expect("export");
        let mut stored: HashMap<String, usize> = HashMap::new();
        for line in String::from_utf8(out).expect("UTF-8").lines().skip(1) {
            let v: Value = serde_json::from_str(line).expect("JSON");
            if v["type"] == "custom" {
                *stored
                    .entry(v["id"].as_str().expect("id").to_owned())
                    .or_default() += 1;
            }
        }
        let mine = acked.get(&s).map(Vec::as_slice).unwrap_or_default();
        for id in mine {
            assert_eq!(stored.get(id), Some(&1), "session {s}: {id} stored once");
        }
        assert_eq!(
            stored.len(),
            mine.len(),
            "session {s}: nothing unacknowledged stored"
        );
    }
}

fn files_round(load: &Load, dir: &Path) -> Round {
    let root = dir.join("sessions");
    seed(PiJsonlStore::new(&root), load.sessions);
    let listing = PiJsonlStore::new(&root).scan().expect("scan");
    let mut files = vec![PathBuf::new(); load.sessions];
    for l in listing.sessions {
        let s = (0..load.sessions)
            .find(|s| session_id(*s) == l.header.id())
            .expect("one of ours");
        files[s] = l.path;
    }
    let (round, acked) = run(load, &Target::Files(files), &dir.join("files-dbs"));
    check(Sessions::new(PiJsonlStore::new(&root)), load, &acked);
    round
}

fn postgres_round(load: &Load, server: &pg::Server, dir: &Path) -> Round {
    let db = server.create_database();
    let url = server.url(&db);
    seed(
        PostgresStore::connect(&url).expect("connect"),
        load.sessions,
    );
    let (round, acked) = run(load, &Target::Postgres(url.clone()), &dir.join("pg-dbs"));
    check(
        Sessions::new(PostgresStore::connect(&url).expect("connect")),
        load,
        &acked,
    );
    server.drop_database(&db);
    round
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let load = Load {
        writers: arg(&args, "--writers", 16),
        sessions: arg(&args, "--sessions", 8),
        writes: arg(&args, "--writes", 50),
        rounds: arg(&args, "--rounds", 5),
    };
    assert!(load.sessions >= 1 && load.writers >= 1 && load.rounds >= 1);
    eprintln!(
        "{} writers on {} sessions, {} writes each, {} rounds; load average {}",
        load.writers,
        load.sessions,
        load.writes,
        load.rounds,
        loadavg()
    );
    let server = pg::Server::start(pg::ServerOptions::default());
    let mut ratios = Vec::new();
    let mut rates: HashMap<&str, Vec<f64>> = HashMap::new();
    println!("| round | backend | writes/s | p50 | p99 | refused |");
    println!("|---:|---|---:|---:|---:|---:|");
    for r in 0..load.rounds {
        let dir = tempfile::tempdir().expect("tempdir");
        let (files, postgres) = if r % 2 == 0 {
            let f = files_round(&load, dir.path());
            (f, postgres_round(&load, &server, dir.path()))
        } else {
            let p = postgres_round(&load, &server, dir.path());
            (files_round(&load, dir.path()), p)
        };
        for (name, round) in [("files", &files), ("PostgreSQL", &postgres)] {
            println!(
                "| {} | {name} | {:.1} | {:.1} ms | {:.1} ms | {} |",
                r + 1,
                round.rate(),
                round.pct(0.5).as_secs_f64() * 1e3,
                round.pct(0.99).as_secs_f64() * 1e3,
                round.refused
            );
            rates.entry(name).or_default().push(round.rate());
        }
        ratios.push(postgres.rate() / files.rate());
    }
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        (lo, hi)
    };
    let (lo, hi) = range(&ratios);
    for (name, v) in &rates {
        let (a, b) = range(v);
        println!("{name}: {a:.1}–{b:.1} writes/s");
    }
    println!(
        "PostgreSQL / files throughput: {lo:.2}–{hi:.2}× over {} rounds",
        ratios.len()
    );
    eprintln!("load average at the end {}", loadavg());
}
