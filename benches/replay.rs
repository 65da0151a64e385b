//! Full replay without the projection (SPEC §10): `SessionLog::open` of a big session
//! (read, parse, build the tree) must run at ≥ 50% of the throughput of a serde_json
//! skip-parse of the same file that keeps only `type`, `id` and `parentId`, measured in
//! the same run.
//!
//! ```text
//! cargo bench --bench replay
//! ```
//!
//! Sessions of 10k (66 MB) and 100k entries (667 MB) are generated at run time in a temp
//! dir (see `benches/common`) and read from the page cache, so both sides measure CPU,
//! not the disk. The floor reads the file the way the log reader does (1 MiB buffer,
//! lines split with memchr) and parses each line into a struct of borrowed `&str`.

mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde::Deserialize;
use session_state::SessionLog;
use std::hint::black_box;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

const SIZES: [usize; 2] = [10_000, 100_000];

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

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("replay");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for n in SIZES {
        let file = dir.path().join(format!("session-{n}.jsonl"));
        let g = common::write_session(&file, n, n as u64);
        // Both sides see the same file from the page cache; check that both read it whole.
        let log = SessionLog::open(&file).expect("open");
        assert_eq!(log.len(), n);
        assert_eq!(skip_parse(&file).0, n + 1);
        drop(log);
        eprintln!(
            "replay/{n}: {:.1} MB, {:.2} KB/entry",
            g.bytes as f64 / 1e6,
            g.bytes as f64 / n as f64 / 1e3
        );
        group.throughput(Throughput::Bytes(g.bytes));
        group.bench_function(format!("session_log_open/{n}"), |b| {
            b.iter(|| black_box(SessionLog::open(&file).expect("open").len()))
        });
        group.bench_function(format!("serde_skip_parse/{n}"), |b| {
            b.iter(|| black_box(skip_parse(&file)))
        });
        let _ = std::fs::remove_file(&file);
    }
    group.finish();
}

criterion_group!(replay, benches);
criterion_main!(replay);
