//! In-process timings for `bench/compare/run` (our side of the comparison with Pi).
//!
//! ```text
//! compare_inproc read  <FILE> <PLUGIN> <DB> <N>   cold read with a warm projection, and full replay
//! compare_inproc write <FILE> <PLUGIN> <DB> <N>   durable write vs raw write + fdatasync
//! compare_inproc cold  <FILE> <PLUGIN> <DB> <N>   the same, the caches evicted before each
//! compare_inproc serve <FILE> <PLUGIN> <DB>       one timed operation per stdin line (below)
//! compare_inproc replay <FILE> <PLUGIN>           one full replay; peak RSS (VmHWM)
//! compare_inproc grow <FILE> <DB> patch|set < items.jsonl
//! ```
//!
//! `grow` (for `bench/langgraph`) grows a list by one item per stdin line, one durable
//! event per step in one process, as a host would: `patch` merges `{"<i>": item}` into an
//! object keyed by index (RFC 7396 replaces arrays wholesale, so a merge patch cannot
//! append to an array); `set` writes the whole array each step.
//!
//! `write` alternates the order within each pair (raw first, then ours first) and reports
//! the median of the per-pair ratios beside the two medians: on a shared virtual disk the
//! `fdatasync` latency drifts by several times within seconds, and a pair sees one device.
//!
//! `serve` is the Rust side of `bench/langgraph/put.py`, which alternates three operations
//! per round in one run (a raw append, `SessionState::write`, LangGraph's
//! `SqliteSaver.put`): it prints `{"line_bytes": N}` once, then answers each stdin line
//! `raw` or `write` with the microseconds that one operation took (timed here, so the
//! pipe is not in the figure), and `pairs N` with `write`'s JSON object for N pairs run
//! back to back in this process (no pipe between them). Empty line or EOF ends it.
//!
//! Prints one JSON object. Times are medians over N runs, in milliseconds (`read`) or
//! microseconds (`write`). `read` first warms the projection (a catch-up of the whole
//! file, reported as `warm_ms`).

use serde_json::{Value, json};
use session_state::{Scope, SessionLog, Store};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn read(file: &Path, plugin: &str, db: &Path, n: usize) -> Value {
    let t = Instant::now();
    let p = Store::at(db)
        .and_then(|store| store.state::<Value>(plugin, Scope::Branch))
        .expect("open the store");
    let first = p.read(file).expect("read").unwrap_or(Value::Null);
    let warm_ms = t.elapsed().as_secs_f64() * 1e3;
    drop(p);
    let cold: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            // A new store each time: a new connection, as in a new process.
            let p = Store::at(db)
                .and_then(|store| store.state::<Value>(plugin, Scope::Branch))
                .expect("open the store");
            let v = p.read(file).expect("read");
            assert_eq!(v.as_ref(), Some(&first));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let state = Store::at(db)
        .and_then(|store| store.state::<Value>(plugin, Scope::Branch))
        .expect("state");
    let replay: Vec<f64> = (0..n.min(5))
        .map(|_| {
            let t = Instant::now();
            let log = SessionLog::open(file).expect("open");
            let v = state.read(&log).expect("read");
            assert_eq!(v.as_ref(), Some(&first));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let log = SessionLog::open(file).expect("open");
    state.read(&log).expect("read");
    let hot: Vec<f64> = (0..1000)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(state.read(&log).expect("read"));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    json!({
        "value": first,
        "warm_ms": warm_ms,
        "cold_read_ms": median(cold),
        "replay_ms": median(replay),
        "hot_read_ms": median(hot),
        "peak_rss_kib": peak_rss_kib(),
    })
}

/// A store's state key, the log, and the floor's line: after one warm-up write, the line
/// that write appended, to be appended raw to a file beside the session.
struct Writer {
    state: session_state::SessionState<Value>,
    log: SessionLog,
    line: String,
    raw: std::fs::File,
    raw_path: std::path::PathBuf,
    step: u64,
}

impl Writer {
    fn open(file: &Path, plugin: &str, db: &Path) -> Writer {
        let state = Store::at(db)
            .and_then(|store| store.state::<Value>(plugin, Scope::Branch))
            .expect("state");
        let mut log = SessionLog::open(file).expect("open");
        state
            .write(&mut log, &json!({"step": 0, "note": "warm-up"}))
            .expect("write");
        let last = log.leaf_id().expect("leaf").to_owned();
        let line = format!("{}\n", log.raw_line(&last).expect("line"));
        let raw_path = file.with_extension("raw");
        let raw = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&raw_path)
            .expect("raw");
        Writer {
            state,
            log,
            line,
            raw,
            raw_path,
            step: 0,
        }
    }

    /// One raw `write()` of the line and `fdatasync`, in microseconds.
    fn raw(&mut self) -> f64 {
        let t = Instant::now();
        let n = self.raw.write(self.line.as_bytes()).expect("write");
        assert_eq!(n, self.line.len(), "one write() of the whole line");
        self.raw.sync_data().expect("fdatasync");
        t.elapsed().as_secs_f64() * 1e6
    }

    /// One `SessionState::write` of a new value, in microseconds.
    fn write(&mut self) -> f64 {
        self.step += 1;
        let value = json!({"step": self.step, "note": "the session log keeps every entry"});
        let t = Instant::now();
        self.state
            .write(&mut self.log, &value)
            .expect("write")
            .expect("a new value is appended");
        t.elapsed().as_secs_f64() * 1e6
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.raw_path);
    }
}

/// Writes 64 MiB (twice the last-level cache) and sleeps in the kernel for 1 ms, so that
/// the next operation starts as one does after another program ran: its code and data
/// out of the caches, the branch predictors trained on something else.
fn evict(buf: &mut [u8]) {
    for i in (0..buf.len()).step_by(64) {
        buf[i] = buf[i].wrapping_add(1);
    }
    std::hint::black_box(&buf);
    std::thread::sleep(std::time::Duration::from_millis(1));
}

/// `n` pairs as in [`pairs`], each operation after [`evict`]; medians, and the median of
/// the per-pair difference (on tmpfs: the write's CPU and system calls beyond `write()`).
fn cold(file: &Path, plugin: &str, db: &Path, n: usize) -> Value {
    let mut w = Writer::open(file, plugin, db);
    let mib = std::env::var("EVICT_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut buf = vec![0u8; mib << 20];
    let (mut ours, mut floor, mut ratios, mut extra) = (vec![], vec![], vec![], vec![]);
    for i in 1..=n {
        let (r, o) = if i % 2 == 1 {
            evict(&mut buf);
            let r = w.raw();
            evict(&mut buf);
            (r, w.write())
        } else {
            evict(&mut buf);
            let o = w.write();
            evict(&mut buf);
            (w.raw(), o)
        };
        floor.push(r);
        ours.push(o);
        ratios.push(o / r);
        extra.push(o - r);
    }
    json!({
        "line_bytes": w.line.len(),
        "write_us": median(ours),
        "raw_fdatasync_us": median(floor),
        "median_pair_ratio": median(ratios),
        "median_pair_extra_us": median(extra),
    })
}

fn write(file: &Path, plugin: &str, db: &Path, n: usize) -> Value {
    pairs(&mut Writer::open(file, plugin, db), n)
}

/// `n` pairs of a raw append and a write, back to back, the order alternating.
fn pairs(w: &mut Writer, n: usize) -> Value {
    let (mut ours, mut floor, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..=n {
        // Alternate the order within the pair, so that neither always goes first.
        let (r, o) = if i % 2 == 1 {
            let r = w.raw();
            (r, w.write())
        } else {
            let o = w.write();
            (w.raw(), o)
        };
        floor.push(r);
        ours.push(o);
        ratios.push(o / r);
    }
    json!({
        "line_bytes": w.line.len(),
        "write_us": median(ours),
        "raw_fdatasync_us": median(floor),
        "median_pair_ratio": median(ratios),
    })
}

fn serve(file: &Path, plugin: &str, db: &Path) {
    use std::io::BufRead;
    let mut w = Writer::open(file, plugin, db);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", json!({"line_bytes": w.line.len()})).expect("stdout");
    out.flush().expect("stdout");
    for cmd in std::io::stdin().lock().lines() {
        let cmd = cmd.expect("stdin");
        if let Some(n) = cmd.strip_prefix("pairs ") {
            let n = n.parse().expect("serve: pairs N");
            writeln!(out, "{}", pairs(&mut w, n)).expect("stdout");
            out.flush().expect("stdout");
            continue;
        }
        let us = match cmd.as_str() {
            "raw" => w.raw(),
            "write" => w.write(),
            "" => break,
            other => panic!("serve: unknown operation {other:?}"),
        };
        writeln!(out, "{us}").expect("stdout");
        out.flush().expect("stdout");
    }
}

fn grow(file: &Path, db: &Path, mode: &str) -> Value {
    use std::io::BufRead;
    let state = Store::at(db)
        .and_then(|store| store.state::<Value>("todo", Scope::Branch))
        .expect("state");
    let mut log = SessionLog::open(file).expect("open");
    let mut items = Vec::new();
    let t = Instant::now();
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let item: Value = serde_json::from_str(&line.expect("stdin")).expect("an item");
        items.push(item.clone());
        let id = match mode {
            "patch" => state.patch(&mut log, &json!({ i.to_string(): item })),
            _ => state.write(&mut log, &Value::Array(items.clone())),
        }
        .expect("write");
        assert!(id.is_some());
    }
    let secs = t.elapsed().as_secs_f64();
    let value = state.read(&log).expect("read").expect("a value");
    let ok = match mode {
        "patch" => (0..items.len()).all(|i| value.get(i.to_string()) == Some(&items[i])),
        _ => value == Value::Array(items.clone()),
    };
    assert!(ok, "the value read back is the list written");
    json!({ "steps": items.len(), "seconds": secs })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: compare_inproc read|write|cold <FILE> <PLUGIN> <DB> <N> | serve <FILE> <PLUGIN> <DB> | replay <FILE> <PLUGIN> \
                 | read-once <FILE> <PLUGIN> <DB> | grow <FILE> <DB> patch|set < items.jsonl";
    let out = match args.first().map(String::as_str) {
        Some("read") if args.len() == 5 => read(
            Path::new(&args[1]),
            &args[2],
            Path::new(&args[3]),
            args[4].parse().expect("N"),
        ),
        Some("write") if args.len() == 5 => write(
            Path::new(&args[1]),
            &args[2],
            Path::new(&args[3]),
            args[4].parse().expect("N"),
        ),
        Some("cold") if args.len() == 5 => cold(
            Path::new(&args[1]),
            &args[2],
            Path::new(&args[3]),
            args[4].parse().expect("N"),
        ),
        // The library's cold read, once, in this (new) process: a store, a key, `read_file`.
        // Timed as a whole process by bench/compare/run.
        Some("read-once") if args.len() == 4 => {
            let state = Store::at(&args[3])
                .and_then(|store| store.state::<Value>(&args[2], Scope::Branch))
                .expect("state");
            json!({ "value": state.read(args[1].as_str()).expect("read") })
        }
        Some("serve") if args.len() == 4 => {
            serve(Path::new(&args[1]), &args[2], Path::new(&args[3]));
            return;
        }
        Some("grow") if args.len() == 4 => grow(Path::new(&args[1]), Path::new(&args[2]), &args[3]),
        Some("replay") if args.len() == 3 => {
            let t = Instant::now();
            let log = SessionLog::open(&args[1]).expect("open");
            let state = Store::at("/nonexistent/never-opened.sqlite")
                .and_then(|store| store.state::<Value>(args[2].clone(), Scope::Branch))
                .expect("state");
            let v = state.read(&log).expect("read");
            json!({
                "entries": log.len(),
                "value": v,
                "ms": t.elapsed().as_secs_f64() * 1e3,
                "peak_rss_kib": peak_rss_kib(),
            })
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    println!("{out}");
}
