//! Hot reads (docs/spec.md §10): `SessionState::read` on an open log, at the same leaf in the
//! same process, must take ≤ 1 µs; a read after one appended entry must cost constant
//! work, whatever the session's size.
//!
//! ```text
//! cargo bench --bench hot_read
//! ```
//!
//! Sessions of 1k and 10k entries are generated at run time (see `benches/common`) in a
//! temp dir on /dev/shm when there is one: the appends between timed reads then cost a
//! few µs instead of an `fdatasync` each. Only the read is timed.
//!
//! - `hot_read/<n>`: the same read again (the fold is memoized).
//! - `after_append/message/<n>`: append one message entry (a child of the leaf), then
//!   read: the new leaf's nearest state event is memoized, so the read is a few lookups.
//! - `after_append/event/<n>`: append one state event of the plugin read, then read: one
//!   envelope decoded and one op applied to the memoized parent value.
//!
//! Every 20,000 appends the file is cut back to its generated length and reopened
//! (untimed), so the session does not grow without bound while criterion iterates.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use session_state::{NewEntry, Scope, SessionLog, SessionState, Store};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SIZES: [usize; 2] = [1_000, 10_000];
const PLUGIN: &str = "alpha";
const REOPEN_EVERY: u64 = 20_000;

fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

/// An open session that is cut back and reopened before it grows too much.
struct Session {
    file: PathBuf,
    len: u64,
    log: SessionLog,
    appended: u64,
}

impl Session {
    fn open(file: PathBuf, state: &SessionState<Value>) -> Session {
        let len = std::fs::metadata(&file).expect("stat").len();
        let log = SessionLog::open(&file).expect("open");
        // Warm the memo, as a host that has read once before.
        state.read(&log).expect("read");
        Session {
            file,
            len,
            log,
            appended: 0,
        }
    }

    fn append(&mut self, state: &SessionState<Value>, entry: NewEntry) {
        if self.appended == REOPEN_EVERY {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&self.file)
                .expect("open")
                .set_len(self.len)
                .expect("truncate");
            self.log = SessionLog::open(&self.file).expect("reopen");
            state.read(&self.log).expect("read");
            self.appended = 0;
        }
        self.log.append(entry).expect("append");
        self.appended += 1;
    }
}

fn message(i: u64) -> NewEntry {
    NewEntry::message(json!({
        "role": "toolResult",
        "toolCallId": format!("toolu_b{i}"),
        "toolName": "read",
        "content": [{"type": "text", "text": "fn main() { println!(\"hello\"); }"}],
        "isError": false,
        "timestamp": 1_764_000_000_000u64 + i,
    }))
}

fn event(i: u64) -> NewEntry {
    NewEntry::custom(
        format!("session-state/{PLUGIN}"),
        Some(json!({"v": 1, "scope": "branch", "op": "set",
                    "value": {"step": i, "note": "the session log keeps every entry"}})),
    )
}

fn benches(c: &mut Criterion) {
    let dir = scratch_dir();
    let state = Store::at(dir.path().join("states.sqlite"))
        .and_then(|store| store.state::<Value>(PLUGIN, Scope::Branch))
        .expect("state");
    let mut group = c.benchmark_group("hot_read");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut files = Vec::new();
    for n in SIZES {
        let file = dir.path().join(format!("session-{n}.jsonl"));
        common::write_session(&file, n, 7 + n as u64);
        let log = SessionLog::open(&file).expect("open");
        assert!(state.read(&log).expect("read").is_some(), "{PLUGIN} is set");
        group.bench_function(n.to_string(), |b| {
            b.iter(|| black_box(state.read(&log).expect("read")))
        });
        files.push((n, file));
    }
    group.finish();

    let mut group = c.benchmark_group("after_append");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (n, file) in &files {
        for (kind, make) in [
            ("message", message as fn(u64) -> NewEntry),
            ("event", event as fn(u64) -> NewEntry),
        ] {
            let mut s = Session::open(file.clone(), &state);
            let mut i = 0u64;
            group.bench_function(format!("{kind}/{n}"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        i += 1;
                        s.append(&state, make(i));
                        let t = Instant::now();
                        black_box(state.read(&s.log).expect("read"));
                        total += t.elapsed();
                    }
                    total
                })
            });
            let v = state.read(&s.log).expect("read");
            assert!(v.is_some());
        }
    }
    group.finish();
}

criterion_group!(hot, benches);
criterion_main!(hot);
