//! The PostgreSQL store against its targets (docs/postgres.md, "Performance"), on a
//! server on loopback started by this benchmark (the tests' harness,
//! `tests/common/pg.rs`), all in one run, on Pi-format sessions generated at run time
//! (`benches/common`: 6.6 KB per entry, 100k entries = 667 MB):
//!
//! 1. `Sessions::import_file` (the log's reader, `COPY` in batches) of the 100k-entry session into a
//!    new database, in a child process that reports its peak RSS, against `psql \copy` of
//!    the same rows (`session_id, seq, entry_id, line`, the same keys) into the same
//!    database, rounds interleaved (targets ≥ 0.8× the throughput of `psql \copy`,
//!    ≤ 64 MiB);
//! 2. a **state write through the store, whole process** (connect while the projection
//!    opens on a thread of its own, as the command line does; `write_stored` at the
//!    leaf; warm) at 1k and 100k entries against a **bare INSERT +
//!    commit** of the same line in a process of its own (connect, one autocommit
//!    `INSERT`), interleaved (targets: 100k ≤ 2× 1k, ≤ 2× the bare INSERT, ≤ 100 MiB);
//! 3. a durable append in process (`Sessions::append` of one event) against a bare
//!    `INSERT` in its own committed transaction, interleaved (target ≤ 2×);
//! 4. a cold read in a new process (connect, open the projection, `read_stored` at the
//!    leaf; warm) at 1k and 100k entries, interleaved (target 100k ≤ 1.5× 1k).
//!
//! `cargo bench --bench postgres` (`-- --quick` for fewer rounds and 10k in place of
//! 100k; `BENCH_SKIP_IMPORT=1` skips 1). The bench re-executes itself as the child.

#[path = "../tests/common/pg.rs"]
mod pg;

mod common;

use serde_json::{Value, json};
use session_state::On;
use session_state::{Header, PostgresStore, Scope, SessionStore, Sessions, Store, StoredSession};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in a child: `import|write|bare|read …`, separated by U+001F.
const CHILD: &str = "SESSION_STATE_POSTGRES_BENCH";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A state event's line, as a write of value `k` lays it out.
fn event_line(k: u64) -> String {
    format!(
        r#"{{"type":"custom","customType":"session-state/bench","data":{{"v":1,"scope":"branch","op":"set","value":{{"k":{k}}}}},"id":"{k:08x}","parentId":"0000abcd","timestamp":"2026-12-01T12:00:01.000Z"}}"#
    )
}

/// In a child: prints its seconds and its peak RSS in KiB.
fn child(args: &str) {
    let parts: Vec<&str> = args.split('\u{1f}').collect();
    let started = Instant::now();
    match parts.as_slice() {
        ["import", url, file] => {
            let backend = Sessions::new(PostgresStore::connect(url).expect("connect"));
            let r = backend.import_file(Path::new(file)).expect("import");
            assert!(r.appended > 0);
        }
        ["write", url, db, id, k] => {
            // As the command line writes: the projection opened on a thread of its own
            // while the process connects.
            let projection = Store::at(db).expect("projection");
            let backend = std::thread::scope(|s| {
                let opening = s.spawn(|| projection.connect());
                let backend = PostgresStore::connect(url).expect("connect");
                opening.join().expect("join").expect("the projection");
                backend
            });
            let state = projection
                .state::<Value>("bench", Scope::Branch)
                .expect("state");
            let session = StoredSession::new(&backend, backend.url(), id);
            let k: u64 = k.parse().expect("k");
            let w = state
                .write(On::stored(&session, None), &json!({ "k": k }))
                .expect("write");
            assert!(w.is_some(), "a new value is one new entry");
        }
        ["bare", url, k] => {
            let mut client = url
                .parse::<postgres::Config>()
                .expect("url")
                .connect(postgres::NoTls)
                .expect("connect");
            let k: i64 = k.parse().expect("k");
            client
                .execute(
                    "INSERT INTO bench_bare VALUES ('bench', $1, $2, $3)",
                    &[&k, &format!("{k:08x}"), &event_line(k as u64)],
                )
                .expect("insert");
        }
        ["read", url, db, id] => {
            let backend = PostgresStore::connect(url).expect("connect");
            let projection = Store::at(db).expect("projection");
            let state = projection
                .state::<Value>("bench", Scope::Branch)
                .expect("state");
            let session = StoredSession::new(&backend, backend.url(), id);
            assert!(
                state
                    .read(On::stored(&session, None))
                    .expect("read")
                    .is_some()
            );
        }
        other => panic!("bad child arguments {other:?}"),
    }
    println!(
        "{} {}",
        started.elapsed().as_secs_f64(),
        common::proc_status_kib("VmHWM").unwrap_or(0)
    );
}

fn run_child(args: &[&str]) -> (Duration, u64) {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .env(CHILD, args.join("\u{1f}"))
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "the child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut it = text.split_whitespace();
    let secs: f64 = it.next().and_then(|s| s.parse().ok()).expect("secs");
    let kib: u64 = it.next().and_then(|s| s.parse().ok()).expect("kib");
    (Duration::from_secs_f64(secs), kib)
}

/// COPY's text format: a backslash, tab, newline or carriage return is escaped.
fn copy_escape(s: &str, out: &mut Vec<u8>) {
    for &b in s.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

/// The rows `import` stores for `file`, as `COPY` text (not timed).
fn copy_file(file: &Path, id: &str, out: &Path) {
    let src = BufReader::with_capacity(1 << 20, std::fs::File::open(file).expect("open"));
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out).expect("create"));
    let mut row = Vec::new();
    for (seq, line) in src.lines().skip(1).enumerate() {
        let line = line.expect("line");
        let entry: Value = serde_json::from_str(&line).expect("json");
        row.clear();
        copy_escape(id, &mut row);
        row.push(b'\t');
        row.extend_from_slice(seq.to_string().as_bytes());
        row.push(b'\t');
        copy_escape(entry["id"].as_str().expect("id"), &mut row);
        row.push(b'\t');
        copy_escape(&line, &mut row);
        row.push(b'\n');
        w.write_all(&row).expect("write");
    }
    w.flush().expect("flush");
}

/// 1: import against `psql \copy`, interleaved rounds, each on a new database.
fn import_vs_copy(server: &pg::Server, dir: &Path, n: usize, rounds: usize) {
    let file = dir.join("import.jsonl");
    let g = common::write_session(&file, n, 7);
    let id = session_state::format::read_header(&file, 1 << 20)
        .expect("header")
        .id()
        .to_owned();
    let tsv = dir.join("import.tsv");
    copy_file(&file, &id, &tsv);
    let psql = Path::new(
        String::from_utf8(
            Command::new("pg_config")
                .arg("--bindir")
                .output()
                .expect("pg_config")
                .stdout,
        )
        .expect("utf-8")
        .trim(),
    )
    .join("psql");
    let (mut ours, mut theirs, mut rss) = (Vec::new(), Vec::new(), 0u64);
    for _ in 0..rounds {
        let db = server.create_database();
        let url = server.url(&db);
        // The tables made before the timed import (a store's first use makes them).
        PostgresStore::connect(&url)
            .expect("connect")
            .list()
            .expect("the tables");
        let (t, kib) = run_child(&["import", &url, file.to_str().expect("utf-8")]);
        ours.push(t);
        rss = rss.max(kib);
        let mut admin = server.admin(&db);
        admin
            .batch_execute(
                "CREATE TABLE bench_copy (session_id text NOT NULL, seq bigint NOT NULL, \
                 entry_id text NOT NULL, line text NOT NULL, PRIMARY KEY (session_id, seq), \
                 UNIQUE (session_id, entry_id))",
            )
            .expect("table");
        let t = Instant::now();
        let out = Command::new(&psql)
            .arg(&url)
            .arg("-q")
            .arg("-c")
            .arg(format!(
                "\\copy bench_copy (session_id, seq, entry_id, line) FROM '{}'",
                tsv.display()
            ))
            .output()
            .expect("psql");
        theirs.push(t.elapsed());
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let counts: (i64, i64) = admin
            .query_one(
                "SELECT (SELECT count(*) FROM bench_copy), \
                 (SELECT count(*) FROM session_state_entries)",
                &[],
            )
            .map(|r| (r.get(0), r.get(1)))
            .expect("count");
        assert_eq!(counts, (n as i64, n as i64), "the same rows");
        drop(admin);
        server.drop_database(&db);
    }
    let (o, t) = (median(ours), median(theirs));
    let mb = g.bytes as f64 / 1e6;
    println!(
        "| import, {n} entries ({mb:.0} MB), median of {rounds} | {:.2} s = {:.0} MB/s, peak RSS {:.0} MiB |",
        o.as_secs_f64(),
        mb / o.as_secs_f64(),
        rss as f64 / 1024.0
    );
    println!(
        "| psql \\copy of the same rows, median of {rounds} | {:.2} s = {:.0} MB/s |",
        t.as_secs_f64(),
        mb / t.as_secs_f64()
    );
    println!(
        "| import throughput against psql \\copy | {:.2}× (target ≥ 0.8×) |",
        t.as_secs_f64() / o.as_secs_f64()
    );
    let _ = std::fs::remove_file(&tsv);
    let _ = std::fs::remove_file(&file);
}

/// A stored session of `n` entries and a warm projection for it.
struct Prepared {
    n: usize,
    bytes: u64,
    db: String,
    id: String,
}

fn prepare(url: &str, dir: &Path, sizes: &[usize]) -> Vec<Prepared> {
    let store = Sessions::new(PostgresStore::connect(url).expect("connect"));
    let mut prepared = Vec::new();
    for &n in sizes {
        let file = dir.join(format!("s{n}.jsonl"));
        let g = common::write_session(&file, n, n as u64);
        let id = store.import_file(&file).expect("import").session_id;
        std::fs::remove_file(&file).expect("remove the generated session");
        let db = dir.join(format!("proj-{n}.sqlite"));
        let db = db.to_str().expect("utf-8").to_owned();
        run_child(&["read", url, &db, &id]); // builds the projection's rows
        prepared.push(Prepared {
            n,
            bytes: g.bytes,
            db,
            id,
        });
    }
    prepared
}

/// The URL of `db` without TLS, as the bare INSERT's process connects (`NoTls` sends no
/// `SSLRequest`): the loopback server has none, and the default `sslmode=prefer` would
/// ask for it first, one round trip more for the store's processes only. Set
/// `BENCH_PG_SSLMODE` (e.g. `prefer`) to measure another mode.
fn plain(server: &pg::Server, db: &str) -> String {
    let mode = std::env::var("BENCH_PG_SSLMODE").unwrap_or_else(|_| "disable".into());
    format!("{}?sslmode={mode}", server.url(db))
}

/// 2: whole-process writes at each size and the bare INSERT, interleaved.
fn writes(server: &pg::Server, db: &str, prepared: &[Prepared], rounds: usize) {
    let url = plain(server, db);
    server
        .admin(db)
        .batch_execute(
            "CREATE TABLE bench_bare (session_id text NOT NULL, seq bigint NOT NULL, \
             entry_id text NOT NULL, line text NOT NULL, PRIMARY KEY (session_id, seq), \
             UNIQUE (session_id, entry_id))",
        )
        .expect("create");
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(); prepared.len() + 1];
    let mut rss: Vec<u64> = vec![0; prepared.len() + 1];
    for round in 0..=rounds {
        for (i, p) in prepared.iter().enumerate() {
            let k = (1000 + round).to_string();
            let (t, kib) = run_child(&["write", &url, &p.db, &p.id, &k]);
            if round > 0 {
                runs[i].push(t);
                rss[i] = rss[i].max(kib);
            }
        }
        let (t, kib) = run_child(&["bare", &url, &round.to_string()]);
        if round > 0 {
            runs[prepared.len()].push(t);
            rss[prepared.len()] = rss[prepared.len()].max(kib);
        }
    }
    let medians: Vec<Duration> = runs.into_iter().map(median).collect();
    let bare = medians[prepared.len()];
    for (i, p) in prepared.iter().enumerate() {
        println!(
            "| state write, whole process, {} entries ({:.0} MB), median of {rounds} | {:.2} ms, peak RSS {:.0} MiB; {:.2}× the bare INSERT |",
            p.n,
            p.bytes as f64 / 1e6,
            ms(medians[i]),
            rss[i] as f64 / 1024.0,
            medians[i].as_secs_f64() / bare.as_secs_f64()
        );
    }
    println!(
        "| bare INSERT + commit of the line, whole process (connect, INSERT), median of {rounds} | {:.2} ms, peak RSS {:.0} MiB |",
        ms(bare),
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
}

/// 3: `Sessions::append` of one event against a bare autocommit INSERT, interleaved.
fn appends(server: &pg::Server, db: &str, rounds: usize) {
    let sessions = Sessions::new(PostgresStore::connect(&server.url(db)).expect("connect"));
    let mut bare = server.admin(db);
    bare.batch_execute(
        "CREATE TABLE bench_append (session_id text, seq bigint, entry_id text, line text, \
         PRIMARY KEY (session_id, seq))",
    )
    .expect("create");
    let insert = bare
        .prepare("INSERT INTO bench_append VALUES ($1, $2, $3, $4)")
        .expect("prepare");
    sessions
        .create(Header::new("appends", "/work/project").with_timestamp("2026-12-01T12:00:00.000Z"))
        .expect("create");
    let event = json!({"type":"custom","customType":"bench","data":{"n":1,"text":"x".repeat(200)}});
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut next = 0u64;
    for i in 0..rounds {
        let t = Instant::now();
        next = sessions
            .append("appends", next, std::slice::from_ref(&event))
            .expect("append");
        ours.push(t.elapsed());
        let t = Instant::now();
        bare.execute(
            &insert,
            &[
                &"appends",
                &(i as i64),
                &format!("{i:08x}"),
                &event_line(i as u64),
            ],
        )
        .expect("insert");
        theirs.push(t.elapsed());
    }
    let (a, b) = (median(ours), median(theirs));
    println!(
        "| durable append in process (Sessions::append), median of {rounds} | {:.0} µs; {:.2}× a bare autocommit INSERT ({:.0} µs) (target ≤ 2×) |",
        us(a),
        a.as_secs_f64() / b.as_secs_f64(),
        us(b)
    );
}

/// 4: cold reads in new processes, the sizes interleaved.
fn cold_reads(url: &str, prepared: &[Prepared], rounds: usize) {
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(); prepared.len()];
    for _ in 0..rounds {
        for (i, p) in prepared.iter().enumerate() {
            runs[i].push(run_child(&["read", url, &p.db, &p.id]).0);
        }
    }
    let medians: Vec<Duration> = runs.into_iter().map(median).collect();
    for (p, m) in prepared.iter().zip(&medians) {
        println!(
            "| cold read, new process, {} entries ({:.0} MB), median of {rounds} | {:.2} ms |",
            p.n,
            p.bytes as f64 / 1e6,
            ms(*m)
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

fn main() {
    if let Ok(args) = std::env::var(CHILD) {
        child(&args);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let big = if quick { 10_000 } else { 100_000 };
    let rounds = if quick { 7 } else { 21 };
    let server = pg::Server::start(pg::ServerOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    println!("| measurement | result |\n|---|---|");
    // `BENCH_SKIP_IMPORT=1`: the writes and reads only (the import rounds take minutes).
    if std::env::var_os("BENCH_SKIP_IMPORT").is_none() {
        import_vs_copy(&server, dir.path(), big, if quick { 2 } else { 3 });
    }
    let db = server.create_database();
    let url = plain(&server, &db);
    let prepared = prepare(&url, dir.path(), &[1_000, big]);
    writes(&server, &db, &prepared, rounds);
    appends(&server, &db, if quick { 100 } else { 500 });
    cold_reads(&url, &prepared, rounds);
}
