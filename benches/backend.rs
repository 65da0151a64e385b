//! The SQLite backend against SPEC §10 and issue 14's targets:
//!
//! 1. a durable append (`SqliteStore::append`: one `BEGIN IMMEDIATE` transaction that
//!    checks the sequence number, inserts the row and moves `next_seq`; WAL,
//!    `synchronous=FULL`) against a bare `INSERT` of the same row in its own committed
//!    transaction on a twin database with the same pragmas (target ≤ 2×);
//! 2. a cold read of a stored session in a new process (open the store and the
//!    projection, `read_stored` at the leaf; the projection warm) at 1k and 100k entries
//!    (target 100k ≤ 1.5× 1k);
//! 3. `import_file` of the 100k-entry session (667 MB, Pi's format) into a new store, in
//!    a child process that reports its peak RSS (targets ≥ 50 MB/s, ≤ 100 MiB).
//!
//! ```text
//! cargo bench --bench backend            # all three; BENCH_DIR chooses the scratch dir
//! BENCH_QUICK=1 cargo bench --bench backend   # 1k and 10k only (no 667 MB session)
//! ```
//!
//! Not a criterion bench: sizes this large are generated once (see `benches/common`,
//! 2.1 GB of disk at 100k: the session, the store, the local mirror; deleted at the end).

mod common;

use serde_json::{Value, json};
use session_state::{Scope, SessionStore, SqliteStore, Store, StoredSession};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD: &str = "SESSION_STATE_BACKEND_BENCH";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// In a child: `read <store> <db> <id>` or `import <store> <file>`; prints seconds and
/// peak RSS in KiB.
fn child(args: &str) {
    let parts: Vec<&str> = args.split('\u{1f}').collect();
    let started = Instant::now();
    match parts.as_slice() {
        ["read", store, db, id] => {
            let backend = SqliteStore::open(store).expect("open the store");
            let key = format!("sqlite://{store}");
            let projection = Store::at(db).expect("projection");
            let state = projection
                .state::<Value>("bench", Scope::Branch)
                .expect("state");
            let session = StoredSession::new(&backend, &key, id);
            assert!(state.read_stored(&session, None).expect("read").is_some());
        }
        ["phases", store, db, id] => {
            let t = Instant::now();
            let backend = SqliteStore::open(store).expect("open the store");
            let open = t.elapsed();
            let t = Instant::now();
            let next = backend
                .read_lines(id, u64::MAX, &mut |_, _| Ok(()))
                .expect("next");
            let query = t.elapsed();
            let key = format!("sqlite://{store}");
            let projection = Store::at(db).expect("projection");
            let session = StoredSession::new(&backend, &key, id);
            let t = Instant::now();
            let mirror = projection.sync_mirror(&session).expect("mirror");
            let sync = t.elapsed();
            let t = Instant::now();
            projection
                .read_value(&mirror, "bench", Scope::Branch, None)
                .expect("read");
            let read = t.elapsed();
            eprintln!(
                "phases ({next} entries): store open {:.0} µs, next_seq query {:.0} µs, mirror sync {:.0} µs, projection read {:.0} µs",
                us(open),
                us(query),
                us(sync),
                us(read)
            );
        }
        ["import", store, file] => {
            let backend = SqliteStore::open(store).expect("open the store");
            let r = session_state::import_file(&backend, Path::new(file)).expect("import");
            assert!(r.appended > 0);
        }
        other => panic!("bad child arguments {other:?}"),
    }
    println!(
        "{} {}",
        started.elapsed().as_secs_f64(),
        common::proc_status_kib("VmHWM").unwrap_or(0)
    );
}

fn run_child(args: &[&str]) -> (f64, u64) {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .env(CHILD, args.join("\u{1f}"))
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut it = text.split_whitespace();
    let secs = it.next().and_then(|s| s.parse().ok()).expect("secs");
    let kib = it.next().and_then(|s| s.parse().ok()).expect("kib");
    (secs, kib)
}

fn appends(dir: &Path) {
    const N: usize = 300;
    let store = SqliteStore::open(dir.join("append.sqlite")).expect("store");
    let header = session_state::Header::new("bench-append", "/bench");
    store.create(header).expect("create");
    let event = json!({"type": "custom", "customType": "session-state/bench",
        "data": {"v": 1, "scope": "branch", "op": "set", "value": {"n": 1}}});
    store
        .append("bench-append", 0, std::slice::from_ref(&event))
        .expect("first");
    // The bare twin: same table and pragmas, no check.
    let twin = rusqlite::Connection::open(dir.join("bare.sqlite")).expect("twin");
    twin.pragma_update(None, "page_size", 65536)
        .expect("page size");
    twin.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    twin.pragma_update(None, "synchronous", "FULL")
        .expect("full");
    twin.execute_batch(
        "CREATE TABLE entries(session_id TEXT NOT NULL, seq INTEGER NOT NULL, entry_id TEXT \
         NOT NULL, parent_id TEXT, line TEXT NOT NULL, PRIMARY KEY(session_id, seq));",
    )
    .expect("schema");
    let mut line = String::new();
    store
        .read_lines("bench-append", 0, &mut |_, l| {
            line = l.to_owned();
            Ok(())
        })
        .expect("line");
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    // Interleaved, so both see the same disk.
    for i in 0..N {
        let t = Instant::now();
        store
            .append("bench-append", 1 + i as u64, std::slice::from_ref(&event))
            .expect("append");
        ours.push(t.elapsed());
        let t = Instant::now();
        twin.execute_batch("BEGIN").expect("begin");
        twin.execute(
            "INSERT INTO entries VALUES ('bench-append', ?1, ?2, NULL, ?3)",
            rusqlite::params![i as i64, format!("{i:08x}"), line],
        )
        .expect("insert");
        twin.execute_batch("COMMIT").expect("commit");
        bare.push(t.elapsed());
    }
    let (o, b) = (median(ours), median(bare));
    println!("| durable append (SqliteStore::append) | {:.0} µs |", us(o));
    println!(
        "| bare INSERT, own committed transaction | {:.0} µs |",
        us(b)
    );
    println!(
        "| ratio | {:.2}× (target ≤ 2×) |",
        o.as_secs_f64() / b.as_secs_f64()
    );
}

fn cold_read(dir: &Path, sizes: &[usize]) -> Vec<(usize, PathBuf, u64)> {
    // Prepare every size first, then time them interleaved (the machine is shared: both
    // sizes see the same load).
    let mut prepared = Vec::new();
    for &n in sizes {
        let file = dir.join(format!("s{n}.jsonl"));
        let g = common::write_session(&file, n, n as u64);
        let store_path = dir.join(format!("store{n}.sqlite"));
        let db = dir.join(format!("proj{n}.sqlite"));
        let backend = SqliteStore::open(&store_path).expect("store");
        let id = session_state::import_file(&backend, &file)
            .expect("import")
            .session_id;
        drop(backend);
        let (s, d) = (
            store_path.to_str().expect("utf-8").to_owned(),
            db.to_str().expect("utf-8").to_owned(),
        );
        run_child(&["read", &s, &d, &id]); // warms the projection and the mirror
        prepared.push((n, file, g.bytes, s, d, id));
    }
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(); prepared.len()];
    for _ in 0..21 {
        for (i, (_, _, _, s, d, id)) in prepared.iter().enumerate() {
            runs[i].push(Duration::from_secs_f64(run_child(&["read", s, d, id]).0));
        }
    }
    let mut medians = Vec::new();
    let mut files = Vec::new();
    for ((n, file, bytes, s, d, id), runs) in prepared.into_iter().zip(runs) {
        let min = *runs.iter().min().expect("runs");
        let m = median(runs);
        let out = Command::new(std::env::current_exe().expect("exe"))
            .env(CHILD, ["phases", &s, &d, &id].join("\u{1f}"))
            .output()
            .expect("spawn");
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        println!(
            "| cold read, new process, {n} entries ({:.0} MB), median / min of 21 | {:.0} / {:.0} µs |",
            bytes as f64 / 1e6,
            us(m),
            us(min)
        );
        medians.push(m);
        files.push((n, file, bytes));
        // The store, the projection and the mirror of this size are no longer needed.
        for p in [&s, &d] {
            let _ = std::fs::remove_file(p);
            for ext in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{p}{ext}"));
            }
        }
        let _ = std::fs::remove_dir_all(format!("{d}.stores"));
    }
    if let (Some(first), Some(last)) = (medians.first(), medians.last()) {
        println!(
            "| cold read ratio {}/{} (medians) | {:.2}× (target ≤ 1.5×) |",
            sizes[sizes.len() - 1],
            sizes[0],
            last.as_secs_f64() / first.as_secs_f64()
        );
    }
    files
}

fn import(dir: &Path, n: usize, file: &Path, bytes: u64) {
    let store = dir.join("import.sqlite");
    let (secs, kib) = run_child(&[
        "import",
        store.to_str().expect("utf-8"),
        file.to_str().expect("utf-8"),
    ]);
    println!(
        "| import, {n} entries ({:.0} MB) | {:.2} s = {:.0} MB/s, peak RSS {:.0} MiB (targets ≥ 50 MB/s, ≤ 100 MiB) |",
        bytes as f64 / 1e6,
        secs,
        bytes as f64 / 1e6 / secs,
        kib as f64 / 1024.0
    );
    let _ = std::fs::remove_file(&store);
}

fn main() {
    if let Ok(args) = std::env::var(CHILD) {
        child(&args);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let base = std::env::var_os("BENCH_DIR").map(PathBuf::from);
    let dir = match &base {
        Some(b) => tempfile::tempdir_in(b),
        None => tempfile::tempdir(),
    }
    .expect("scratch dir");
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let sizes: &[usize] = if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 100_000]
    };
    println!("| measurement | result |\n|---|---|");
    appends(dir.path());
    let files = cold_read(dir.path(), sizes);
    if let Some((n, file, bytes)) = files.last() {
        import(dir.path(), *n, file, *bytes);
    }
}
