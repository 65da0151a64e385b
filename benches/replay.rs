//! Full replay without the projection (docs/spec.md §10), two targets, each against the same
//! floor measured in the same run: a serde_json skip-parse of the file that keeps only
//! `type`, `id` and `parentId`.
//!
//! - The library: `SessionLog::open` (read, parse, build the tree) and
//!   `SessionLog::open` + the replay report of `session-state replay` (the state at every tip), in process, ≥ 50%
//!   of the floor's throughput.
//! - The command line: `session-state replay FILE` as a whole process (start-up, open,
//!   the walk, printing the report to a pipe that is read and dropped), ≥ 50% of the
//!   floor on the 100k session, and linear in the file whatever the tree's shape: also
//!   run on a deep chain with a side tip after every 10th entry (`side_tips`, 10k tips at
//!   100k, each as deep as the chain so far), where a replay that walks every tip's path
//!   is quadratic.
//!
//! ```text
//! cargo bench --bench replay
//! cargo bench --bench replay -- 'replay/.*/100000'       # one size
//! ```
//!
//! Sessions of 1k (6.6 MB), 10k (66 MB) and 100k entries (667 MB) are generated at run
//! time in a temp dir (see `benches/common`), one at a time, and read from the page
//! cache, so every side measures CPU, not the disk. The floor reads the file the way the
//! log reader does (1 MiB buffer, lines split with memchr) and parses each line into a
//! struct of borrowed `&str` (`examples/skip_parse.rs` is the same floor as a process).

mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde::Deserialize;
use session_state::__internal;
use session_state::SessionLog;
use std::hint::black_box;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// The floor: only what a tree needs, borrowed from the line.
#[derive(Deserialize)]
struct Skip<'a> {
    #[serde(rename = "type", borrow)]
    t: &'a str,
    #[serde(borrow, default)]
    id: Option<&'a str>,
    #[serde(rename = "parentId", borrow, default)]
    parent_id: Option<&'a str>,
}

/// Reads `path` through a 1 MiB buffer and skip-parses every complete line. Returns the
/// number of lines and a checksum of what was kept, so nothing is optimized away.
fn skip_parse(path: &Path) -> (usize, usize) {
    let mut f = std::fs::File::open(path).expect("open");
    let mut buf = vec![0u8; 1 << 20];
    let (mut filled, mut lines, mut sum) = (0usize, 0usize, 0usize);
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = f.read(&mut buf[filled..]).expect("read");
        if n == 0 {
            return (lines, sum);
        }
        let mut start = 0;
        let mut search = filled;
        filled += n;
        while let Some(pos) = memchr::memchr(b'\n', &buf[search..filled]) {
            let end = search + pos;
            let e: Skip<'_> = serde_json::from_slice(&buf[start..end]).expect("a JSON line");
            sum += e.t.len() + e.id.map_or(0, str::len) + e.parent_id.map_or(0, str::len);
            lines += 1;
            start = end + 1;
            search = start;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
    }
}

/// `session-state replay FILE` as a whole process; its output is read and counted.
fn command(file: &Path) -> usize {
    let out = Command::new(env!("CARGO_BIN_EXE_session-state"))
        .arg("replay")
        .arg(file)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run session-state replay");
    assert!(out.status.success(), "session-state replay: {}", out.status);
    out.stdout.len()
}

/// The benchmarks of one session file, all in the same group so the ratios are of one run.
fn bench_file(c: &mut Criterion, dir: &Path, label: &str, n: usize) {
    let file = dir.join(format!("{label}-{n}.jsonl"));
    let g = if label == "side_tips" {
        common::write_side_tip_session(&file, n, n as u64, 10)
    } else {
        common::write_session(&file, n, n as u64)
    };
    // Every side sees the same file from the page cache; check that each reads it whole.
    let log = SessionLog::open(&file).expect("open");
    assert_eq!(log.len(), n);
    let tips = log.tips().len();
    assert_eq!(__internal::replay(&log, |_| {}).tips.len(), tips);
    drop(log);
    assert_eq!(skip_parse(&file).0, n + 1);
    assert!(command(&file) > 0);
    eprintln!(
        "replay/{label}/{n}: {:.1} MB, {:.2} KB/entry, {tips} tips",
        g.bytes as f64 / 1e6,
        g.bytes as f64 / n as f64 / 1e3
    );
    let mut group = c.benchmark_group(format!("replay/{label}"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(if n >= 100_000 { 8 } else { 3 }))
        .throughput(Throughput::Bytes(g.bytes));
    group.bench_function(format!("serde_skip_parse/{n}"), |b| {
        b.iter(|| black_box(skip_parse(&file)))
    });
    if label == "sessions" {
        group.bench_function(format!("library_open/{n}"), |b| {
            b.iter(|| black_box(SessionLog::open(&file).expect("open").len()))
        });
    }
    group.bench_function(format!("library_replay/{n}"), |b| {
        b.iter(|| {
            let log = SessionLog::open(&file).expect("open");
            black_box(__internal::replay(&log, |_| {}).tips.len())
        })
    });
    group.bench_function(format!("command/{n}"), |b| {
        b.iter(|| black_box(command(&file)))
    });
    group.finish();
    let _ = std::fs::remove_file(&file);
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    for n in SIZES {
        bench_file(c, dir.path(), "sessions", n);
    }
    for n in SIZES {
        bench_file(c, dir.path(), "side_tips", n);
    }
}

criterion_group!(replay, benches);
criterion_main!(replay);
