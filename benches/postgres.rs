//! The PostgreSQL backend on a server on loopback started by this benchmark (the tests'
//! harness, `tests/common/pg.rs`), all in one run:
//!
//! 1. a durable append (`PostgresStore::append` of one event) against a bare `INSERT` of
//!    the same row in its own committed transaction (autocommit), interleaved rounds;
//! 2. a cold `load` of a stored 1k-entry and 100k-entry session (a new store each time);
//! 3. bulk import (`PostgresStore::import`, streamed with COPY) of a generated 100k-entry
//!    session: MB/s and the process's peak RSS;
//! 4. a cold read of a stored session in a new process (SPEC §10, issue 14: connect, open
//!    the projection, `read_stored` at the leaf; the projection and the local mirror
//!    warm) at 1k and 100k entries, the sizes interleaved, medians (target 100k ≤ 1.5×
//!    1k). The bench re-executes itself as the child.
//!
//! `cargo bench --bench postgres` (`-- --quick` for fewer rounds and 20k in place of
//! 100k).

#[path = "../tests/common/pg.rs"]
mod pg;

use serde_json::{Value, json};
use session_state::{Header, PostgresStore, Scope, SessionStore, Store, StoredSession};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in the child of 4: `read|phases <url> <projection db> <session id>`, separated
/// by U+001F.
const CHILD: &str = "SESSION_STATE_POSTGRES_BENCH";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A Pi-like session of `n` entries (user/assistant messages, ~640 bytes a line).
fn generate(path: &Path, id: &str, n: usize) -> u64 {
    generate_with(path, id, n, false)
}

/// [`generate`], with `state`: a `session-state/bench` state event (branch scope, `set`)
/// every twelfth entry and as the last one, so a read at the leaf has something to fold.
fn generate_with(path: &Path, id: &str, n: usize, state: bool) -> u64 {
    let mut out = BufWriter::new(std::fs::File::create(path).expect("create"));
    let header = json!({"type":"session","version":3,"id":id,
                        "timestamp":"2026-12-01T12:00:00.000Z","cwd":"/work/project"});
    writeln!(out, "{header}").expect("write");
    let filler = "lorem ipsum dolor sit amet ".repeat(18);
    let mut parent = serde_json::Value::Null;
    for i in 0..n {
        let id = format!("{i:08x}");
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        if state && (i % 12 == 11 || i + 1 == n) {
            let line = json!({"type":"custom","customType":"session-state/bench",
                              "data":{"v":1,"scope":"branch","op":"set",
                                      "value":{"step":i,"note":"lorem ipsum"}},
                              "id":id,"parentId":parent,
                              "timestamp":"2026-12-01T12:00:01.000Z"});
            writeln!(out, "{line}").expect("write");
            parent = json!(id);
            continue;
        }
        let line = json!({"type":"message","id":id,"parentId":parent,
                          "timestamp":"2026-12-01T12:00:01.000Z",
                          "message":{"role":role,"content":[{"type":"text","text":filler}],
                                     "timestamp":1764590401000u64}});
        writeln!(out, "{line}").expect("write");
        parent = json!(id);
    }
    out.flush().expect("flush");
    std::fs::metadata(path).expect("stat").len()
}

/// In the child of 4: a cold read (prints its seconds) or the same read in phases (on
/// stderr).
fn child(args: &str) {
    let parts: Vec<&str> = args.split('\u{1f}').collect();
    let started = Instant::now();
    match parts.as_slice() {
        ["read", url, db, id] => {
            let backend = PostgresStore::connect(url).expect("connect");
            let projection = Store::at(db).expect("projection");
            let state = projection
                .state::<Value>("bench", Scope::Branch)
                .expect("state");
            let session = StoredSession::new(&backend, backend.url(), id);
            let value = state.read_stored(&session, None).expect("read");
            // The last entry is the last `set` (generate_with).
            let n: u64 = id.trim_start_matches("cold-").parse().expect("size");
            assert_eq!(value, Some(json!({"step": n - 1, "note": "lorem ipsum"})));
        }
        ["phases", url, db, id] => {
            let t = Instant::now();
            let backend = PostgresStore::connect(url).expect("connect");
            let connect = t.elapsed();
            let t = Instant::now();
            let projection = Store::at(db).expect("projection");
            let open = t.elapsed();
            let session = StoredSession::new(&backend, backend.url(), id);
            let t = Instant::now();
            let mirror = projection.sync_mirror(&session).expect("mirror");
            let sync = t.elapsed();
            let t = Instant::now();
            let v = projection
                .read_value(&mirror, "bench", Scope::Branch, None)
                .expect("read");
            let read = t.elapsed();
            assert!(v.is_some());
            eprintln!(
                "phases ({id}): connect {:.0} µs, projection open {:.0} µs, mirror sync {:.0} µs, projection read {:.0} µs",
                us(connect),
                us(open),
                us(sync),
                us(read)
            );
        }
        other => panic!("bad child arguments {other:?}"),
    }
    println!("{}", started.elapsed().as_secs_f64());
}

fn run_child(args: &[&str]) -> (Duration, String) {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .env(CHILD, args.join("\u{1f}"))
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "the child failed: {stderr}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let secs: f64 = text.trim().parse().expect("the child's seconds");
    (Duration::from_secs_f64(secs), stderr)
}

/// 4: cold reads in new processes, the sizes interleaved.
fn cold_read(store: &PostgresStore, url: &str, dir: &Path, sizes: &[usize], rounds: usize) {
    let mut prepared = Vec::new();
    for &n in sizes {
        let id = format!("cold-{n}");
        let file = dir.join(format!("{id}.jsonl"));
        let bytes = generate_with(&file, &id, n, true);
        store
            .import(
                &file,
                std::io::BufReader::new(std::fs::File::open(&file).expect("open")),
            )
            .expect("import");
        std::fs::remove_file(&file).expect("remove the generated session");
        let db = dir.join(format!("proj-{n}.sqlite"));
        let db = db.to_str().expect("utf-8").to_owned();
        // Warms the projection and builds the local mirror.
        run_child(&["read", url, &db, &id]);
        prepared.push((n, bytes, db, id));
    }
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(); prepared.len()];
    for _ in 0..rounds {
        for (i, (_, _, db, id)) in prepared.iter().enumerate() {
            runs[i].push(run_child(&["read", url, db, id]).0);
        }
    }
    let mut medians = Vec::new();
    for ((n, bytes, db, id), runs) in prepared.iter().zip(runs) {
        let min = *runs.iter().min().expect("runs");
        let m = median(runs);
        eprint!("{}", run_child(&["phases", url, db, id]).1);
        println!(
            "cold read in a new process (connect, open the projection, read_stored at the leaf; warm) of {n} entries ({:.1} MB): median {:.0} µs, min {:.0} µs of {rounds}",
            *bytes as f64 / 1e6,
            us(m),
            us(min)
        );
        medians.push(m);
    }
    if let (Some(first), Some(last)) = (medians.first(), medians.last()) {
        println!(
            "cold read ratio {}/{} (medians): {:.2}× (target ≤ 1.5×)",
            sizes[sizes.len() - 1],
            sizes[0],
            last.as_secs_f64() / first.as_secs_f64()
        );
    }
}

fn main() {
    if let Ok(args) = std::env::var(CHILD) {
        child(&args);
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let server = pg::Server::start(pg::ServerOptions::default());
    let db = server.create_database();
    let url = server.url(&db);
    let dir = tempfile::tempdir().expect("tempdir");

    // 3 first, so the peak RSS is the import's.
    let big = dir.path().join("big.jsonl");
    let n_big = if quick { 20_000 } else { 100_000 };
    let bytes = generate(&big, "big", n_big);
    let store = PostgresStore::connect(&url).expect("connect");
    let before = peak_rss_mib();
    let t = Instant::now();
    let file = std::io::BufReader::new(std::fs::File::open(&big).expect("open"));
    store.import(&big, file).expect("import");
    let took = t.elapsed();
    println!(
        "import: {n_big} entries, {:.1} MB in {:.2} s = {:.1} MB/s; peak RSS {:.1} MiB (before: {:.1} MiB)",
        bytes as f64 / 1e6,
        took.as_secs_f64(),
        bytes as f64 / 1e6 / took.as_secs_f64(),
        peak_rss_mib(),
        before
    );

    // 2. Cold loads.
    let small = dir.path().join("small.jsonl");
    generate(&small, "small", 1_000);
    store
        .import(
            &small,
            std::io::BufReader::new(std::fs::File::open(&small).expect("open")),
        )
        .expect("import");
    for (id, n) in [("small", 1_000), ("big", n_big)] {
        let runs: Vec<Duration> = (0..if quick { 2 } else { 5 })
            .map(|_| {
                let s = PostgresStore::connect(&url).expect("connect");
                let t = Instant::now();
                let loaded = s.load(id).expect("load");
                assert_eq!(loaded.next_seq(), n as u64);
                t.elapsed()
            })
            .collect();
        println!(
            "cold load of {n} entries (new store, load): median {:.1} ms",
            median(runs).as_secs_f64() * 1e3
        );
    }

    // 4. Cold reads in new processes.
    cold_read(
        &store,
        &url,
        dir.path(),
        &[1_000, n_big],
        if quick { 7 } else { 21 },
    );

    // 1. Durable append vs a bare INSERT of the same row, interleaved.
    let mut bare = server.admin(&db);
    bare.batch_execute(
        "CREATE TABLE bench_bare (session_id text, seq bigint, entry_id text, line text, \
         PRIMARY KEY (session_id, seq))",
    )
    .expect("create");
    let insert = bare
        .prepare("INSERT INTO bench_bare VALUES ($1, $2, $3, $4)")
        .expect("prepare");
    store
        .create(Header::new("appends", "/work/project").with_timestamp("2026-12-01T12:00:00.000Z"))
        .expect("create");
    let event = json!({"type":"custom","customType":"bench","data":{"n":1,"text":"x".repeat(200)}});
    let line = json!({"type":"custom","customType":"bench","data":{"n":1,"text":"x".repeat(200)},
                      "id":"0000abcd","parentId":"0000abcc","timestamp":"2026-12-01T12:00:01.000Z"})
    .to_string();
    let rounds = if quick { 100 } else { 500 };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut next = 0u64;
    for i in 0..rounds {
        let t = Instant::now();
        next = store
            .append("appends", next, std::slice::from_ref(&event))
            .expect("append");
        ours.push(t.elapsed());
        let t = Instant::now();
        bare.execute(
            &insert,
            &[&"appends", &(i as i64), &format!("{i:08x}"), &line],
        )
        .expect("insert");
        theirs.push(t.elapsed());
    }
    let (a, b) = (median(ours), median(theirs));
    println!(
        "durable append: median {:.0} µs; bare INSERT (autocommit): median {:.0} µs; ratio {:.2}",
        a.as_secs_f64() * 1e6,
        b.as_secs_f64() * 1e6,
        a.as_secs_f64() / b.as_secs_f64()
    );
}
