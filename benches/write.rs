//! Durable writes (docs/spec.md §10 T4): `SessionState::write` on an open, materialized log
//! with a projection database must take ≤ 1.15× a raw `write` + `fdatasync` of the same
//! line bytes on an `O_APPEND` file in the same directory, measured in the same run. (The
//! paired figure at 1k and 100k entries, beside LangGraph's `SqliteSaver.put`, is
//! `bench/langgraph/put`; this bench gives criterion's means.)
//!
//! ```text
//! cargo bench --bench write
//! ```
//!
//! A 1k-entry session (6.6 MB) is generated in a temp dir under `$BENCH_DIR`, or the
//! system temp dir (it must be on a real disk: on tmpfs `fdatasync` costs nothing). The
//! database sits next to it.
//!
//! - `write/session_state`: `SessionState::write` of a new value each time: SQLite's write
//!   lock and the lock row judged, the length check under the file lock, one `write()` +
//!   `fdatasync` of the line, a `COMMIT` that writes nothing (the projection is left to the
//!   next reader).
//! - `write/log_append`: `SessionLog::append` of the same event alone (no lock, no
//!   projection), to show where the difference goes. It appends to a second copy of the
//!   session.
//! - `write/raw_fdatasync`: the floor: one `write()` of the same line bytes on an
//!   `O_APPEND` file and `fdatasync`.
//!
//! Each iteration runs all three operations in turn and times one: the device's
//! `fdatasync` latency drifts by a factor of several over seconds on a virtual disk, and
//! so all three are measured under the same conditions.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use session_state::{NewEntry, Scope, SessionLog, Store};
use std::io::Write;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Raw,
    State,
    Append,
}

fn value(i: u64) -> Value {
    json!({"step": i, "note": "the session log keeps every entry as one line and branches form"})
}

fn benches(c: &mut Criterion) {
    let dir = match std::env::var_os("BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("tempdir");
    let file = dir.path().join("session.jsonl");
    common::write_session(&file, 1_000, 42);
    let state = Store::at(dir.path().join("states.sqlite"))
        .and_then(|store| store.state::<Value>("bench", Scope::Branch))
        .expect("state");
    let plain = dir.path().join("plain.jsonl");
    std::fs::copy(&file, &plain).expect("copy the session");
    let mut log = SessionLog::open(&file).expect("open");
    let mut plain = SessionLog::open(&plain).expect("open the copy");
    // A warm-up write (it opens the database and the append handle).
    let mut i = 0u64;
    state.write(&mut log, &value(i)).expect("write");
    let last = log.leaf_id().expect("leaf").to_owned();
    let line = format!("{}\n", log.raw_line(&last).expect("line"));
    eprintln!("write: line of {} bytes", line.len());

    let mut raw = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.path().join("raw.jsonl"))
        .expect("open raw");

    let mut step = |op: Op, i: &mut u64| match op {
        Op::Raw => {
            let n = raw.write(line.as_bytes()).expect("write");
            assert_eq!(n, line.len());
            raw.sync_data().expect("fdatasync");
        }
        Op::State => {
            *i += 1;
            state
                .write(&mut log, &value(*i))
                .expect("write")
                .expect("changed");
        }
        Op::Append => {
            *i += 1;
            let data = json!({"v": 1, "scope": "branch", "op": "set", "value": value(*i)});
            plain
                .append(NewEntry::custom("session-state/bench", Some(data)))
                .expect("append");
        }
    };
    let mut group = c.benchmark_group("write");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    // Every iteration runs the three operations in turn and times one of them, so that
    // all three see the same device (its fdatasync latency drifts) and the same file sizes.
    for (name, timed) in [
        ("raw_fdatasync", Op::Raw),
        ("session_state", Op::State),
        ("log_append", Op::Append),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    for op in [Op::Raw, Op::State, Op::Append] {
                        let t = Instant::now();
                        step(op, &mut i);
                        if op == timed {
                            total += t.elapsed();
                        }
                    }
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(write, benches);
criterion_main!(write);
