//! The SQLite store (`SqliteStore`) against its targets (docs/backends.md, "Performance"),
//! all in one run, on Pi-format sessions generated at run time (`benches/common`: 6.6 KB
//! per entry, 1k entries = 6.6 MB, 100k = 667 MB):
//!
//! 1. a **state write through the store, whole process** (open the store and the
//!    projection, `write_stored` of a new value at the leaf; the projection warm) at 1k and
//!    100k entries, against a **bare INSERT + commit** of the same line in a process of
//!    its own on a twin database with the same pragmas (WAL, `synchronous=FULL`), the
//!    three interleaved; medians and each write's peak RSS (targets: 100k ≤ 2× 1k, ≤ 2×
//!    the bare INSERT, ≤ 100 MiB);
//! 2. a durable append in process (the `append_lines` primitive) against a bare INSERT in
//!    its own committed transaction, interleaved (target ≤ 2×);
//! 3. a cold read in a new process (open, `read_stored` at the leaf; warm) at 1k and
//!    100k entries (target 100k ≤ 1.5× 1k);
//! 4. `Sessions::import_file` of the 100k-entry session into a new store, in a child process that
//!    reports its peak RSS.
//!
//! ```text
//! cargo bench --bench backend            # BENCH_DIR chooses the scratch dir
//! BENCH_QUICK=1 cargo bench --bench backend   # 1k and 10k only, fewer rounds
//! ```
//!
//! Not a criterion bench: the sessions are generated once per run (1.4 GB of disk at
//! 100k: the session and its store; deleted at the end).

mod common;

use serde_json::{Value, json};
use session_state::On;
use session_state::{Scope, SessionStore, Sessions, SqliteStore, Store, StoredSession};
use std::ops::ControlFlow;
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

/// The twin database of the bare INSERT: the store's table and pragmas, no checks.
fn twin(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("twin");
    conn.pragma_update(None, "page_size", 65536)
        .expect("page size");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("full");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS entries(session_id TEXT NOT NULL, seq INTEGER NOT NULL, \
         entry_id TEXT NOT NULL, parent_id TEXT, line TEXT NOT NULL, \
         PRIMARY KEY(session_id, seq));
         CREATE UNIQUE INDEX IF NOT EXISTS entries_by_id ON entries(session_id, entry_id);",
    )
    .expect("schema");
    conn
}

/// A state event's line, as a write of value `k` lays it out.
fn event_line(k: u64) -> String {
    format!(
        r#"{{"type":"custom","customType":"session-state/bench","data":{{"v":1,"scope":"branch","op":"set","value":{{"k":{k}}}}},"id":"{k:08x}","parentId":"0000abcd","timestamp":"2026-12-01T12:00:01.000Z"}}"#
    )
}

/// In a child: `write <store> <db> <id> <k>`, `bare <twin> <k>`, `read <store> <db> <id>`
/// or `import <store> <file>`; prints seconds and peak RSS in KiB.
fn child(args: &str) {
    let parts: Vec<&str> = args.split('\u{1f}').collect();
    let started = Instant::now();
    match parts.as_slice() {
        ["write", store, db, id, k] => {
            let backend = SqliteStore::open(store).expect("open the store");
            let key = format!("sqlite://{store}");
            let projection = Store::at(db).expect("projection");
            let state = projection
                .state::<Value>("bench", Scope::Branch)
                .expect("state");
            let session = StoredSession::new(&backend, &key, id);
            let k: u64 = k.parse().expect("k");
            let w = state
                .write(On::stored(&session, None), &json!({ "k": k }))
                .expect("write");
            assert!(w.is_some(), "a new value is one new entry");
        }
        ["bare", path, k] => {
            let conn = twin(Path::new(path));
            let k: i64 = k.parse().expect("k");
            conn.execute_batch("BEGIN").expect("begin");
            conn.execute(
                "INSERT INTO entries VALUES ('bench', ?1, ?2, '0000abcd', ?3)",
                rusqlite::params![k, format!("{k:08x}"), event_line(k as u64)],
            )
            .expect("insert");
            conn.execute_batch("COMMIT").expect("commit");
        }
        ["read", store, db, id] => {
            let backend = SqliteStore::open(store).expect("open the store");
            let key = format!("sqlite://{store}");
            let projection = Store::at(db).expect("projection");
            let state = projection
                .state::<Value>("bench", Scope::Branch)
                .expect("state");
            let session = StoredSession::new(&backend, &key, id);
            assert!(
                state
                    .read(On::stored(&session, None))
                    .expect("read")
                    .is_some()
            );
        }
        ["import", store, file] => {
            let backend = Sessions::new(SqliteStore::open(store).expect("open the store"));
            let r = backend.import_file(Path::new(file)).expect("import");
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

fn remove_db(p: &str) {
    let _ = std::fs::remove_file(p);
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{p}{ext}"));
    }
}

/// A session of `n` entries in a store of its own, and a projection for it (both warm).
struct Prepared {
    n: usize,
    file: PathBuf,
    bytes: u64,
    store: String,
    db: String,
    id: String,
}

fn prepare(dir: &Path, sizes: &[usize]) -> Vec<Prepared> {
    let mut prepared = Vec::new();
    for &n in sizes {
        let file = dir.join(format!("s{n}.jsonl"));
        let g = common::write_session(&file, n, n as u64);
        let store = dir.join(format!("store{n}.sqlite"));
        let db = dir.join(format!("proj{n}.sqlite"));
        let backend = Sessions::new(SqliteStore::open(&store).expect("store"));
        let id = backend.import_file(&file).expect("import").session_id;
        drop(backend);
        let (store, db) = (
            store.to_str().expect("utf-8").to_owned(),
            db.to_str().expect("utf-8").to_owned(),
        );
        run_child(&["read", &store, &db, &id]); // builds the projection's rows
        prepared.push(Prepared {
            n,
            file,
            bytes: g.bytes,
            store,
            db,
            id,
        });
    }
    prepared
}

/// 1: whole-process writes at each size and the bare INSERT, interleaved.
fn writes(dir: &Path, prepared: &[Prepared], rounds: usize) {
    let bare = dir.join("bare.sqlite");
    let bare = bare.to_str().expect("utf-8").to_owned();
    drop(twin(Path::new(&bare)));
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(); prepared.len() + 1];
    let mut rss: Vec<u64> = vec![0; prepared.len() + 1];
    for round in 0..=rounds {
        for (i, p) in prepared.iter().enumerate() {
            let k = (1000 + round).to_string();
            let (secs, kib) = run_child(&["write", &p.store, &p.db, &p.id, &k]);
            if round > 0 {
                runs[i].push(Duration::from_secs_f64(secs));
                rss[i] = rss[i].max(kib);
            }
        }
        let (secs, kib) = run_child(&["bare", &bare, &round.to_string()]);
        if round > 0 {
            let last = prepared.len();
            runs[last].push(Duration::from_secs_f64(secs));
            rss[last] = rss[last].max(kib);
        }
    }
    let medians: Vec<Duration> = runs.into_iter().map(median).collect();
    let bare_m = medians[prepared.len()];
    for (i, p) in prepared.iter().enumerate() {
        println!(
            "| state write, whole process, {} entries ({:.0} MB), median of {rounds} | {:.2} ms, peak RSS {:.0} MiB; {:.2}× the bare INSERT |",
            p.n,
            p.bytes as f64 / 1e6,
            medians[i].as_secs_f64() * 1e3,
            rss[i] as f64 / 1024.0,
            medians[i].as_secs_f64() / bare_m.as_secs_f64()
        );
    }
    println!(
        "| bare INSERT + commit of the line, whole process, median of {rounds} | {:.2} ms, peak RSS {:.0} MiB |",
        bare_m.as_secs_f64() * 1e3,
        rss[prepared.len()] as f64 / 1024.0
    );
    if prepared.len() >= 2 {
        println!(
            "| state write ratio {}/{} (medians) | {:.2}× (target ≤ 2×) |",
            prepared[prepared.len() - 1].n,
            prepared[0].n,
            medians[prepared.len() - 1].as_secs_f64() / medians[0].as_secs_f64()
        );
    }
    remove_db(&bare);
}

/// 2: the append primitive in process against a bare INSERT, interleaved.
fn appends(dir: &Path) {
    const N: usize = 300;
    let store = SqliteStore::open(dir.join("append.sqlite")).expect("store");
    let header = session_state::Header::new("bench-append", "/bench")
        .with_timestamp("2026-12-01T12:00:00.000Z");
    let mut header_line = header.to_line();
    header_line.pop();
    store.create(&header, &header_line, &[]).expect("create");
    let twin = twin(&dir.join("bare-append.sqlite"));
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for i in 0..N {
        let line = event_line(i as u64);
        let t = Instant::now();
        store
            .append_lines("bench-append", i as u64, std::slice::from_ref(&line))
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
    println!(
        "| durable append in process (append_lines), median of {N} | {:.0} µs; {:.2}× a bare INSERT in its own transaction ({:.0} µs) (target ≤ 2×) |",
        us(o),
        o.as_secs_f64() / b.as_secs_f64(),
        us(b)
    );
    let mut n = 0;
    store
        .read_lines("bench-append", 0, &mut |_, _| {
            n += 1;
            ControlFlow::Continue(())
        })
        .expect("read");
    assert_eq!(n, N);
}

/// 3: cold reads in new processes, the sizes interleaved.
fn cold_reads(prepared: &[Prepared], rounds: usize) {
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(); prepared.len()];
    for _ in 0..rounds {
        for (i, p) in prepared.iter().enumerate() {
            runs[i].push(Duration::from_secs_f64(
                run_child(&["read", &p.store, &p.db, &p.id]).0,
            ));
        }
    }
    let medians: Vec<Duration> = runs.into_iter().map(median).collect();
    for (p, m) in prepared.iter().zip(&medians) {
        println!(
            "| cold read, new process, {} entries ({:.0} MB), median of {rounds} | {:.0} µs |",
            p.n,
            p.bytes as f64 / 1e6,
            us(*m)
        );
    }
    if let (Some(first), Some(last)) = (medians.first(), medians.last()) {
        println!(
            "| cold read ratio {}/{} (medians) | {:.2}× (target ≤ 1.5×) |",
            prepared[prepared.len() - 1].n,
            prepared[0].n,
            last.as_secs_f64() / first.as_secs_f64()
        );
    }
}

/// 4: `import_file` of the largest session into a new store, in a child.
fn import(dir: &Path, p: &Prepared) {
    let store = dir.join("import.sqlite");
    let (secs, kib) = run_child(&[
        "import",
        store.to_str().expect("utf-8"),
        p.file.to_str().expect("utf-8"),
    ]);
    println!(
        "| import, {} entries ({:.0} MB) | {:.2} s = {:.0} MB/s, peak RSS {:.0} MiB |",
        p.n,
        p.bytes as f64 / 1e6,
        secs,
        p.bytes as f64 / 1e6 / secs,
        kib as f64 / 1024.0
    );
    remove_db(store.to_str().expect("utf-8"));
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
    let (sizes, rounds): (&[usize], usize) = if quick {
        (&[1_000, 10_000], 7)
    } else {
        (&[1_000, 100_000], 21)
    };
    println!("| measurement | result |\n|---|---|");
    let prepared = prepare(dir.path(), sizes);
    writes(dir.path(), &prepared, rounds);
    appends(dir.path());
    cold_reads(&prepared, rounds);
    if let Some(p) = prepared.last() {
        import(dir.path(), p);
    }
    for p in &prepared {
        let _ = std::fs::remove_file(&p.file);
        remove_db(&p.store);
        remove_db(&p.db);
    }
}
