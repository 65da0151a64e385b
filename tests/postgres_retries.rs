//! The command line against a PostgreSQL server that goes away: every connection and
//! the first query of a command are retried with backoff for the store's retry window
//! (5 s), so a restart shorter than that costs no write; a server that stays away is
//! refused with how long the command tried, how many attempts it made and that a rerun
//! is safe, in the store's words (not the `--store` option's).

use crate::common;
use crate::common::pg::{self, Server, ServerOptions};
use serde_json::{Value, json};
use session_state::{Header, PostgresStore, Sessions};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const ID: &str = "0195f1d0-7c4e-7000-8000-0000000000aa";

/// A stored session with one user message.
fn seeded(url: &str) {
    let store = Sessions::new(PostgresStore::connect(url).expect("connect"));
    store
        .create(Header::new(ID, "/work/project").with_timestamp("2026-12-01T12:00:00.000Z"))
        .expect("create");
    let user = json!({"type": "message",
                      "message": {"role": "user", "content": "hi", "timestamp": 0}});
    store.append(ID, 0, &[user]).expect("append");
}

/// `session-state write ID --plugin PLUGIN --value VALUE --store URL --db DB`.
fn write(url: &str, db: &Path, plugin: &str, value: u64) -> std::process::Output {
    common::cli()
        .args([
            "write",
            ID,
            "--plugin",
            plugin,
            "--value",
            &value.to_string(),
        ])
        .args(["--store", url, "--db"])
        .arg(db)
        .output()
        .expect("run session-state")
}

/// The ids of the session's entries, in order, as exported.
fn stored_ids(url: &str) -> Vec<String> {
    let store = Sessions::new(PostgresStore::connect(url).expect("connect"));
    let mut out = Vec::new();
    store.export(ID, &mut out).expect("export");
    String::from_utf8(out)
        .expect("UTF-8")
        .lines()
        .skip(1)
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("a JSON line")["id"]
                .as_str()
                .expect("an id")
                .to_owned()
        })
        .collect()
}

/// Polls `done` (bounded) until it holds.
fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the writers saw.
#[derive(Default)]
struct Tally {
    acked: std::sync::Mutex<Vec<String>>,
    refusals: std::sync::Mutex<Vec<String>>,
    /// Writes started while the server was stopped.
    started_while_down: AtomicUsize,
}

#[test]
fn cli_writers_ride_out_a_server_restart_shorter_than_the_retry_window() {
    const WRITERS: usize = 4;
    const OUTAGE: Duration = Duration::from_secs(1);
    let server = Server::start(ServerOptions::default());
    let url = server.url(&server.create_database());
    seeded(&url);
    let scratch = tempfile::tempdir().expect("tempdir");
    let tally = Arc::new(Tally::default());
    let down = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (url, tally, down, stop) = (url.clone(), tally.clone(), down.clone(), stop.clone());
            // Each writer process stands in for a machine: its own projection.
            let db = scratch.path().join(format!("m{w}")).join("states.sqlite");
            std::thread::spawn(move || {
                let mut k = 0;
                while !stop.load(Ordering::SeqCst) {
                    if down.load(Ordering::SeqCst) {
                        tally.started_while_down.fetch_add(1, Ordering::SeqCst);
                    }
                    k += 1;
                    let out = write(&url, &db, &format!("w{w}"), k);
                    if out.status.success() {
                        let id = String::from_utf8(out.stdout).expect("UTF-8");
                        tally.acked.lock().unwrap().push(id.trim().to_owned());
                    } else {
                        let err = String::from_utf8_lossy(&out.stderr).into_owned();
                        tally.refusals.lock().unwrap().push(err);
                    }
                }
            })
        })
        .collect();
    let acked = || tally.acked.lock().unwrap().len();
    wait_until("the first writes", Duration::from_secs(120), || {
        acked() >= 2 * WRITERS
    });
    let before = acked();
    let t = Instant::now();
    down.store(true, Ordering::SeqCst);
    server.stop();
    // The outage under test: the server stays down this long (the writes in flight
    // and those started meanwhile meet a refused connection), then starts again.
    std::thread::sleep(OUTAGE);
    server.start_again();
    down.store(false, Ordering::SeqCst);
    let outage = t.elapsed();
    assert!(
        outage < Duration::from_millis(4500),
        "the restart took {outage:?}: not shorter than the 5 s retry window, so this run \
         tests nothing"
    );
    wait_until("writes after the restart", Duration::from_secs(120), || {
        acked() >= before + 2 * WRITERS
    });
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().expect("writer thread");
    }
    let acked = tally.acked.lock().unwrap().clone();
    let refusals = tally.refusals.lock().unwrap().clone();
    eprintln!(
        "restart of {outage:?}: {} writes acknowledged, {} started while the server was down, \
         {} refused",
        acked.len(),
        tally.started_while_down.load(Ordering::SeqCst),
        refusals.len()
    );
    assert!(
        refusals.is_empty(),
        "{} writes refused across a {outage:?} restart; the first: {}",
        refusals.len(),
        refusals[0]
    );
    // Exactly once: every acknowledged write is stored once, and nothing else was.
    let ids = stored_ids(&url);
    for a in &acked {
        assert_eq!(ids.iter().filter(|i| *i == a).count(), 1, "{a} stored once");
    }
    assert_eq!(
        ids.len(),
        1 + acked.len(),
        "nothing unacknowledged, nothing twice"
    );
}

#[test]
fn a_cli_write_to_a_server_that_stays_away_gives_up_saying_how_long_and_that_a_rerun_is_safe() {
    // A loopback port nobody listens on: every connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/sessions");
    let scratch = tempfile::tempdir().expect("tempdir");
    let t = Instant::now();
    let out = write(&url, &scratch.path().join("states.sqlite"), "role", 1);
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        took >= Duration::from_millis(4500),
        "retried for the 5 s window, not {took:?}: {err}"
    );
    assert!(
        err.starts_with(&format!(
            "error: session store postgres://postgres@127.0.0.1:{port}/sessions: gave up after "
        )) && err.contains(" attempts with backoff")
            && err.contains("Connection refused")
            && err.contains("trying again is safe"),
        "{err}"
    );
    assert!(
        !err.contains("--store"),
        "the server, not the option: {err}"
    );
}

/// `write` with `--store URL --db DB`, killed (and the test failed) if it runs for a
/// minute: far above the retry window plus the connect timeout these tests give.
fn write_within(url: &str, db: &Path, value: u64) -> std::process::Output {
    let mut cmd = common::cli();
    cmd.args([
        "write",
        ID,
        "--plugin",
        "role",
        "--value",
        &value.to_string(),
    ])
    .args(["--store", url, "--db"])
    .arg(db);
    pg::output_within(cmd, Duration::from_secs(60))
}

#[test]
fn a_cli_write_to_a_server_that_accepts_and_never_answers_ends_saying_what_it_waited_for() {
    let hung = pg::Unanswering::start();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/sessions?connect_timeout=1",
        hung.port()
    );
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = write_within(&url, &scratch.path().join("states.sqlite"), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("gave up after")
            && err.contains("no answer from the server within 1s while connecting to 127.0.0.1:")
            && err.contains("trying again is safe"),
        "{err}"
    );
    // Each attempt of the window met the hung server, and none was left waiting on it.
    assert!(hung.finish() >= 2, "retried within the window");
}

#[test]
fn a_cli_write_to_a_sigstopped_postmaster_ends_and_goes_through_once_it_is_continued() {
    let server = Server::start(ServerOptions::default());
    let db = server.create_database();
    let url = format!("{}?connect_timeout=1", server.url(&db));
    seeded(&url);
    let scratch = tempfile::tempdir().expect("tempdir");
    let states = scratch.path().join("states.sqlite");
    let before = stored_ids(&url).len();
    {
        let _stopped = pg::Stopped::stop(server.postmaster_pid());
        let out = write_within(&url, &states, 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("no answer from the server within 1s while connecting")
                && err.contains("trying again is safe"),
            "{err}"
        );
    }
    // Continued: the rerun the refusal called safe stores the write, once.
    let out = write_within(&url, &states, 1);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stored_ids(&url).len(), before + 1);
}
