//! Costs linear in events and independent of other plugins (docs/projection.md,
//! "Segments"), and the check after a foreign append.
//!
//! ```text
//! cargo bench --bench plugins                       # all three groups, ~4 min
//! cargo bench --bench plugins -- build              # or one group: build, quiet_read, check
//! ```
//!
//! Inputs are generated at run time in a temp dir under `$BENCH_DIR` (default: the system
//! temp dir) and deleted afterwards (at most ~0.7 GB at once, for the 100k sparse check).
//!
//! - `build/<n>`: the first read of a chain of `n` state events, each of a different
//!   plugin (a fresh database each time: the projection built from the whole file, then
//!   one read). Linear in `n`.
//! - `quiet_read/<k>/{a,absent}`: one event of plugin `a`, then `k` events of plugin `b`
//!   (`k` up to 200k, 30 MB); a warm read of `a`, or of a plugin that has no event, at the
//!   leaf, through an open [`Store`]. Flat in `k`.
//! - `check/<layout>/<n>`: the catch-up after one foreign line was appended to a session
//!   of `n` state events: the consumed prefix is checked (its two digest spans and every
//!   folded event's bytes), then the one line is read. `dense`: each event after a
//!   300-byte message; `sparse`: after a 6.3 KB one (as in sessions Pi writes, where
//!   events are tens of KB apart: one positioned read per event).
//!
//! Results go to `docs/performance.md`.

use std::fs::{self, File};
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use session_state::{Scope, Store};

const HEADER: &str = "{\"type\":\"session\",\"version\":3,\"id\":\"bench-plugins\",\
                      \"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/bench\"}";

fn scratch() -> tempfile::TempDir {
    match std::env::var_os("BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(base),
        None => tempfile::tempdir(),
    }
    .expect("scratch dir")
}

/// Writes a chain of entries: `line(i, parent_id)` for `i` in `0..n`.
fn write_chain(path: &Path, n: usize, mut line: impl FnMut(usize, &str) -> String) {
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path).expect("create session"));
    writeln!(w, "{HEADER}").expect("write");
    let mut parent = String::from("null");
    for i in 0..n {
        w.write_all(line(i, &parent).as_bytes()).expect("write");
        w.write_all(b"\n").expect("write");
        parent = format!("\"{:08x}\"", i);
    }
    w.into_inner().expect("flush").sync_all().expect("sync");
}

fn event(i: usize, parent: &str, plugin: &str) -> String {
    format!(
        "{{\"type\":\"custom\",\"customType\":\"session-state/{plugin}\",\"data\":{{\"v\":1,\
         \"scope\":\"branch\",\"op\":\"set\",\"value\":{{\"n\":{i}}}}},\"id\":\"{i:08x}\",\
         \"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\"}}"
    )
}

fn message(i: usize, parent: &str, len: usize) -> String {
    format!(
        "{{\"type\":\"message\",\"id\":\"{i:08x}\",\"parentId\":{parent},\
         \"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"toolResult\",\
         \"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}]}}}}",
        "result of the tool call ".repeat(len / 24)
    )
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let _ = fs::remove_file(PathBuf::from(p));
    }
}

fn store(db: &Path) -> Store {
    let s = Store::at(db).expect("store");
    s.connect().expect("open the database");
    s
}

fn build(c: &mut Criterion) {
    let dir = scratch();
    let mut g = c.benchmark_group("build");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    for n in [2_500usize, 5_000, 10_000, 20_000] {
        let file = dir.path().join(format!("plugins-{n}.jsonl"));
        write_chain(&file, n, |i, parent| event(i, parent, &format!("p{i}")));
        let db = dir.path().join(format!("plugins-{n}.sqlite"));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_batched(
                || remove_db(&db),
                |()| {
                    let s = store(&db);
                    let v = s
                        .read_value(&file, "p0", Scope::Branch, None)
                        .expect("read");
                    black_box(v).expect("p0 has a value");
                },
                BatchSize::PerIteration,
            );
        });
        remove_db(&db);
    }
    g.finish();
}

fn quiet_read(c: &mut Criterion) {
    let dir = scratch();
    let mut g = c.benchmark_group("quiet_read");
    for k in [1_000usize, 10_000, 100_000, 200_000] {
        let file = dir.path().join(format!("quiet-{k}.jsonl"));
        write_chain(&file, k + 1, |i, parent| {
            event(i, parent, if i == 0 { "a" } else { "b" })
        });
        let db = dir.path().join(format!("quiet-{k}.sqlite"));
        let s = store(&db);
        let started = Instant::now();
        s.catch_up(&file).expect("warm the projection");
        eprintln!(
            "quiet_read/{k}: {:.1} MB, built in {:.2?}",
            fs::metadata(&file).expect("stat").len() as f64 / 1e6,
            started.elapsed()
        );
        for plugin in ["a", "absent"] {
            g.bench_function(BenchmarkId::new(k.to_string(), plugin), |b| {
                b.iter(|| {
                    black_box(
                        s.read_value(&file, plugin, Scope::Branch, None)
                            .expect("read"),
                    )
                });
            });
        }
        drop(s);
        remove_db(&db);
        fs::remove_file(&file).expect("remove the session");
    }
    g.finish();
}

fn check(c: &mut Criterion) {
    let dir = scratch();
    let mut g = c.benchmark_group("check");
    g.sample_size(20);
    for (layout, gap) in [("dense", 300usize), ("sparse", 6_300)] {
        for n in [1_000usize, 100_000] {
            let file = dir.path().join(format!("check-{layout}-{n}.jsonl"));
            write_chain(&file, 2 * n, |i, parent| {
                if i.is_multiple_of(2) {
                    message(i, parent, gap)
                } else {
                    event(i, parent, if i % 4 == 1 { "p" } else { "q" })
                }
            });
            let db = dir.path().join(format!("check-{layout}-{n}.sqlite"));
            let s = store(&db);
            s.catch_up(&file).expect("warm the projection");
            let mut next = 2 * n;
            let mut parent = format!("\"{:08x}\"", next - 1);
            g.bench_function(BenchmarkId::new(layout, n), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        // One foreign line, appended untimed.
                        let line = format!(
                            "{{\"type\":\"custom\",\"customType\":\"other-extension\",\
                             \"data\":{{}},\"id\":\"{next:08x}\",\"parentId\":{parent},\
                             \"timestamp\":\"2026-01-01T00:00:00.000Z\"}}\n"
                        );
                        fs::OpenOptions::new()
                            .append(true)
                            .open(&file)
                            .and_then(|mut f| f.write_all(line.as_bytes()))
                            .expect("append");
                        parent = format!("\"{next:08x}\"");
                        next += 1;
                        let started = Instant::now();
                        let caught = s.catch_up(&file).expect("catch up");
                        total += started.elapsed();
                        assert!(!caught.rebuilt && caught.entries_added == 1, "{caught:?}");
                    }
                    total
                });
            });
            drop(s);
            remove_db(&db);
            fs::remove_file(&file).expect("remove the session");
        }
    }
    g.finish();
}

criterion_group!(benches, build, quiet_read, check);
criterion_main!(benches);
