//! The PostgreSQL backend on a server on loopback started by this benchmark (the tests'
//! harness, `tests/common/pg.rs`), all in one run:
//!
//! 1. a durable append (`PostgresStore::append` of one event) against a bare `INSERT` of
//!    the same row in its own committed transaction (autocommit), interleaved rounds;
//! 2. a cold `load` of a stored 1k-entry and 100k-entry session (a new store each time);
//! 3. bulk import (`PostgresStore::import`, streamed with COPY) of a generated 100k-entry
//!    session: MB/s and the process's peak RSS.
//!
//! `cargo bench --bench postgres` (`-- --quick` for fewer rounds).

#[path = "../tests/common/pg.rs"]
mod pg;

use serde_json::json;
use session_state::{Header, PostgresStore, SessionStore};
use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

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

/// A Pi-like session of `n` entries (user/assistant messages, ~640 bytes a line).
fn generate(path: &std::path::Path, id: &str, n: usize) -> u64 {
    let mut out = BufWriter::new(std::fs::File::create(path).expect("create"));
    let header = json!({"type":"session","version":3,"id":id,
                        "timestamp":"2026-12-01T12:00:00.000Z","cwd":"/work/project"});
    writeln!(out, "{header}").expect("write");
    let filler = "lorem ipsum dolor sit amet ".repeat(18);
    let mut parent = serde_json::Value::Null;
    for i in 0..n {
        let id = format!("{i:08x}");
        let role = if i % 2 == 0 { "user" } else { "assistant" };
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

fn main() {
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
