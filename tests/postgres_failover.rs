//! PostgreSQL with a hot standby: the primary dies (SIGKILL to all its processes) under 8
//! writers and the standby is promoted. The writers name both servers in one URL
//! (`postgres://127.0.0.1:P1,127.0.0.1:P2/db?target_session_attrs=read-write`) and go on
//! against the new primary after the library's bounded retries.
//!
//! - With a synchronous standby (`synchronous_standby_names`, `synchronous_commit = on`),
//!   no acknowledged write is lost, none is stored twice, and every session reads back
//!   with the value each writer last had acknowledged.
//! - With an asynchronous standby, what the primary acknowledged but had not yet
//!   streamed is lost, as PostgreSQL documents: the test counts it, checks that only
//!   writes acknowledged before the kill are missing, and that nothing is stored twice.
//!
//! Each writer is a thread with its own connection and its own projection, as a machine
//! of its own would have.

use crate::common::pg::Server;
use serde_json::{Value, json};
use session_state::On;
use session_state::{Header, PostgresStore, ReadMode, Scope, Sessions, Store, StoredSession};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WRITERS: usize = 8;
/// Writers per session: two, so they also race each other for the next sequence number.
const PER_SESSION: usize = 2;
/// Acknowledged writes per writer before the kill, and again after the promotion.
const ROUND: usize = 15;
/// The writers' retry window (their lock wait): a kill and a promotion take 1.5-3.5 s on
/// a loaded 2-core machine, and the default 5 s refused a write in one run of four there.
const RETRY_WINDOW: Duration = Duration::from_secs(15);

fn session_id(writer: usize) -> String {
    format!(
        "0195f1d0-7c4e-7000-8000-00000000f0{:02}",
        writer / PER_SESSION
    )
}

/// One acknowledged write.
#[derive(Clone, Debug)]
struct Ack {
    writer: usize,
    value: u64,
    entry_id: String,
    /// The write began before the primary was killed (it may have committed there).
    before_kill: bool,
}

#[derive(Default)]
struct Tally {
    acks: Mutex<Vec<Ack>>,
    refusals: Mutex<Vec<String>>,
}

impl Tally {
    fn acked_by(&self, writer: usize, after_kill: bool) -> usize {
        self.acks
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.writer == writer && a.before_kill != after_kill)
            .count()
    }
}

/// Sets the flag when dropped, so writer threads stop even when the test fails.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Polls `done` (bounded) until it holds.
fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A writer: its own connection and projection; writes 0, 1, 2, … to its plugin until
/// told to stop.
fn writer(
    k: usize,
    url: String,
    scratch: &Path,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    killed: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let db = scratch.join(format!("m{k}")).join("states.sqlite");
    std::thread::spawn(move || {
        let backend = PostgresStore::connect(&url)
            .expect("connect")
            .with_lock_wait(RETRY_WINDOW);
        let key = backend.url().to_owned();
        let store = Store::at(db).expect("projection");
        let state = store
            .state::<u64>(format!("w{k}"), Scope::Session)
            .expect("state");
        let id = session_id(k);
        let session = StoredSession::new(&backend, &key, &id);
        let mut value = 0;
        while !stop.load(Ordering::SeqCst) {
            // Read before the write: a write that began before the primary was killed may
            // have committed there before the kill and still be returning after it (its
            // turn ended with a round trip to the dead server), so only a write begun after
            // the kill must be on the new primary.
            let before_kill = !killed.load(Ordering::SeqCst);
            match state.write(On::stored(&session, None), &value) {
                Ok(Some(entry_id)) => {
                    tally.acks.lock().unwrap().push(Ack {
                        writer: k,
                        value,
                        entry_id,
                        before_kill,
                    });
                    value += 1;
                }
                Ok(None) => panic!("writer {k}: value {value} was already there"),
                Err(e) => {
                    tally.refusals.lock().unwrap().push(format!("w{k}: {e}"));
                    value += 1;
                }
            }
        }
    })
}

/// What one run saw.
struct Outcome {
    acked: usize,
    lost: Vec<Ack>,
    refusals: Vec<String>,
    read_back: usize,
    failover: Duration,
}

/// Runs the scenario: a primary and a standby (`sync`: a synchronous one), 8 writers,
/// the primary killed and the standby promoted; checks what the new primary holds.
fn fail_over(sync: bool) -> Outcome {
    let primary = Server::start_primary();
    let db = primary.create_database();
    let standby = Server::standby_of(&primary, "standby1");
    if sync {
        primary.set("synchronous_standby_names", "standby1");
        wait_until(
            "the standby to be synchronous",
            Duration::from_secs(30),
            || {
                primary
                    .admin("postgres")
                    .query_opt(
                        "SELECT 1 FROM pg_stat_replication WHERE application_name = 'standby1' \
                     AND sync_state = 'sync'",
                        &[],
                    )
                    .is_ok_and(|r| r.is_some())
            },
        );
    }
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let seed = Sessions::new(PostgresStore::connect(&url).expect("connect"));
    for s in 0..WRITERS / PER_SESSION {
        let id = session_id(s * PER_SESSION);
        seed.create(
            Header::new(id.as_str(), "/work/project").with_timestamp("2026-12-04T20:00:00.000Z"),
        )
        .expect("create");
        let user = json!({"type": "message",
                          "message": {"role": "user", "content": "hi", "timestamp": 0}});
        seed.append(&id, 0, &[user]).expect("append");
    }
    drop(seed);

    let scratch = tempfile::tempdir().expect("tempdir");
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_guard = StopOnDrop(stop.clone());
    let killed = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..WRITERS)
        .map(|k| {
            writer(
                k,
                url.clone(),
                scratch.path(),
                tally.clone(),
                stop.clone(),
                killed.clone(),
            )
        })
        .collect();
    wait_until("writes before the kill", Duration::from_secs(180), || {
        (0..WRITERS).all(|k| tally.acked_by(k, false) >= ROUND)
    });
    let t = Instant::now();
    primary.kill_hard();
    // Set once the primary is gone: a write begun after this cannot have reached it.
    killed.store(true, Ordering::SeqCst);
    standby.promote();
    let failover = t.elapsed();
    wait_until(
        "writes after the promotion",
        Duration::from_secs(180),
        || (0..WRITERS).all(|k| tally.acked_by(k, true) >= ROUND),
    );
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("writer thread");
    }
    let acks = tally.acks.lock().unwrap().clone();
    let refusals = tally.refusals.lock().unwrap().clone();

    // What the new primary holds, read through the standby's own port.
    let new_url = standby.url(&db);
    let backend = PostgresStore::connect(&new_url).expect("connect to the new primary");
    let exports = session_state::Sessions::new(
        PostgresStore::connect(&new_url).expect("connect to the new primary"),
    );
    let mut stored: BTreeMap<String, usize> = BTreeMap::new();
    for s in 0..WRITERS / PER_SESSION {
        let id = session_id(s * PER_SESSION);
        // The strict reader, as Pi reads the exported file: every line an entry, one
        // linear branch (the writers never fork a session).
        let log = StoredSession::new(&backend, backend.url(), &id)
            .read_log(ReadMode::Strict)
            .expect("the session reads back");
        assert_eq!(log.branch().len(), log.len(), "session {id}: one branch");
        let mut out = Vec::new();
        exports.export(&id, &mut out).expect("export");
        for line in String::from_utf8(out).expect("UTF-8").lines().skip(1) {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            if v["customType"]
                .as_str()
                .is_some_and(|c| c.starts_with("session-state/w"))
            {
                *stored
                    .entry(v["id"].as_str().expect("an id").to_owned())
                    .or_default() += 1;
            }
        }
    }
    for (id, n) in &stored {
        assert_eq!(*n, 1, "entry {id} stored {n} times");
    }
    let lost: Vec<Ack> = acks
        .iter()
        .filter(|a| !stored.contains_key(&a.entry_id))
        .cloned()
        .collect();
    // Every stored write was acknowledged, or refused (its outcome then unknown to the
    // writer): none appears from nowhere.
    assert!(
        stored.len() <= acks.len() - lost.len() + refusals.len(),
        "{} stored, {} acknowledged and kept, {} refused",
        stored.len(),
        acks.len() - lost.len(),
        refusals.len()
    );
    // The fold, from a projection that never saw the writers: each writer's last
    // acknowledged value (written after the promotion, so on the new primary).
    let fresh = Store::at(scratch.path().join("fresh.sqlite")).expect("projection");
    for k in 0..WRITERS {
        let last = acks
            .iter()
            .filter(|a| a.writer == k)
            .map(|a| a.value)
            .max()
            .expect("acknowledged writes");
        let id = session_id(k);
        let value = fresh
            .state::<u64>(format!("w{k}"), Scope::Session)
            .expect("state")
            .read(On::stored(
                &StoredSession::new(&backend, backend.url(), &id),
                None,
            ))
            .expect("read back");
        assert_eq!(value, Some(last), "writer {k}'s last acknowledged value");
    }
    Outcome {
        acked: acks.len(),
        read_back: acks.len() - lost.len(),
        lost,
        refusals,
        failover,
    }
}

fn report(kind: &str, o: &Outcome) {
    eprintln!(
        "{kind} standby: kill + promote took {:?}; {} writes acknowledged, {} of them read \
         back from the new primary, {} lost, {} refused",
        o.failover,
        o.acked,
        o.read_back,
        o.lost.len(),
        o.refusals.len()
    );
    for r in o.refusals.iter().take(3) {
        eprintln!("  refused: {r}");
    }
}

#[test]
fn a_synchronous_standby_promoted_after_the_primary_is_killed_loses_no_acknowledged_write() {
    let o = fail_over(true);
    report("synchronous", &o);
    assert!(o.lost.is_empty(), "acknowledged writes lost: {:?}", o.lost);
    assert!(
        o.refusals.is_empty(),
        "the failover took {:?}, within the {RETRY_WINDOW:?} retry window, yet writes were \
         refused: {:?}",
        o.failover,
        o.refusals
    );
}

#[test]
fn an_asynchronous_standby_may_lose_only_writes_acknowledged_before_the_kill() {
    let o = fail_over(false);
    report("asynchronous", &o);
    assert!(
        o.lost.iter().all(|a| a.before_kill),
        "a write begun after the kill was lost: {:?}",
        o.lost
    );
}

/// A primary that hangs instead of dying: it accepts and never answers. With
/// `target_session_attrs=read-write`, each host is tried for at most the connect timeout,
/// so the hung first host is passed over and the write lands on the second.
#[test]
fn a_hung_first_host_is_passed_over_within_the_connect_timeout_and_the_write_lands_on_the_second() {
    let hung = crate::common::pg::Unanswering::start();
    let (_, guard) = crate::common::pg::fresh_database();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{}?target_session_attrs=read-write&connect_timeout=1",
        hung.port(),
        guard.server().port(),
        guard.name()
    );
    let id = "0195f1d0-7c4e-7000-8000-00000000fa11";
    // On a thread, bounded far above the connect timeout: a hang fails the test.
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let r = PostgresStore::connect(&url).map(|store| {
            let sessions = Sessions::new(store);
            sessions
                .create(Header::new(id, "/work/project").with_timestamp("2026-12-01T12:00:00.000Z"))
                .expect("create");
            let user = json!({"type": "message",
                              "message": {"role": "user", "content": "hi", "timestamp": 0}});
            sessions.append(id, 0, &[user]).expect("append")
        });
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    let next = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the write ended: the hung host did not hold it")
        .expect("connected past the hung host");
    writer.join().expect("the writer thread");
    assert_eq!(next, 1);
    let stored: i64 = guard
        .server()
        .admin(guard.name())
        .query_one(
            "SELECT count(*) FROM session_state_entries WHERE session_id = $1",
            &[&id],
        )
        .expect("count")
        .get(0);
    assert_eq!(stored, 1, "the write is on the second host");
    assert!(hung.finish() >= 1, "the hung first host was tried first");
}
