//! Peak memory while replaying the largest session (docs/spec.md §10): `SessionLog::open` of a
//! 100k-entry, 667 MB session must peak at ≤ 100 MiB of resident memory.
//!
//! ```text
//! cargo bench --bench memory
//! ```
//!
//! Not a criterion bench: it generates sessions of 1k, 10k and 100k entries in a temp dir
//! (see `benches/common`; set `BENCH_DIR` to choose where; 0.74 GB of disk, deleted at
//! the end), then replays each in a fresh child process (this same executable) that reads
//! its own peak RSS (`VmHWM` in /proc/self/status) when done. A child that only reports
//! gives the baseline of the process itself.

mod common;

use session_state::{Scope, SessionLog, Store};
use std::process::Command;
use std::time::Instant;

const CHILD: &str = "SESSION_STATE_MEMORY_BENCH_FILE";
const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// In the child: replay the file, fold one state at the leaf, report.
fn child(file: &str) {
    let started = Instant::now();
    let mut entries = 0;
    if !file.is_empty() {
        let log = SessionLog::open(file).expect("open");
        let state = Store::at("/nonexistent/never-opened.sqlite")
            .and_then(|store| store.state::<serde_json::Value>("bench", Scope::Branch))
            .expect("state");
        assert!(state.read(&log).expect("read").is_some());
        entries = log.len();
    }
    println!(
        "{entries} {} {} {}",
        started.elapsed().as_secs_f64(),
        common::proc_status_kib("VmHWM").unwrap_or(0),
        common::proc_status_kib("VmRSS").unwrap_or(0),
    );
}

fn run_child(file: &str) -> (usize, f64, u64, u64) {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .env(CHILD, file)
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    (
        f[0].parse().expect("entries"),
        f[1].parse().expect("secs"),
        f[2].parse().expect("hwm"),
        f[3].parse().expect("rss"),
    )
}

fn main() {
    if let Some(file) = std::env::var_os(CHILD) {
        child(&file.to_string_lossy());
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = match std::env::var_os("BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("tempdir");
    let (_, _, base_hwm, _) = run_child("");
    println!(
        "memory/baseline: process peak RSS {:.1} MiB",
        base_hwm as f64 / 1024.0
    );
    for n in SIZES {
        let file = dir.path().join(format!("session-{n}.jsonl"));
        let g = common::write_session(&file, n, 11 + n as u64);
        let (entries, secs, hwm, rss) = run_child(&file.to_string_lossy());
        assert_eq!(entries, n);
        println!(
            "memory/{n}: {:.1} MB replayed in {:.3} s ({:.0} MB/s); peak RSS {:.1} MiB \
             (end RSS {:.1} MiB, process baseline {:.1} MiB)",
            g.bytes as f64 / 1e6,
            secs,
            g.bytes as f64 / 1e6 / secs,
            hwm as f64 / 1024.0,
            rss as f64 / 1024.0,
            base_hwm as f64 / 1024.0,
        );
        std::fs::remove_file(&file).expect("remove");
    }
}
