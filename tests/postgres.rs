//! The PostgreSQL backend on a real PostgreSQL 15 server started by the tests
//! (`tests/common/pg.rs`): the seam's rules as `tests/persistence.rs` checks them on
//! files, then faults (a writer killed mid-run, a server restarted, a connection
//! terminated), several writer processes on one session, and the password and SQL
//! hygiene. Each test has its own database; tests that stop the server have their own.

use crate::common::examples::example;
use crate::common::pg::{self, Server, ServerOptions};
use serde_json::{Value, json};
use session_state::On;
use session_state::{
    Error, Header, InvalidLog, LogError, LogOptions, OpenError, PostgresStore, Scope, SessionLog,
    SessionStore, Sessions, Store, StoreError, StoredSession,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ID: &str = "0195f1d0-7c4e-7000-8000-000000000001";
const STAMP: &str = "2024-12-03T14:00:00.000Z";

fn header(id: &str) -> Header {
    Header::new(id, "/home/me/project").with_timestamp(STAMP)
}

fn user(text: &str) -> Value {
    json!({"type": "message",
           "message": {"role": "user", "content": text, "timestamp": 1733234401000u64}})
}

fn custom(n: u64) -> Value {
    json!({"type": "custom", "customType": "host/note", "data": {"n": n}})
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// The sessions of the server at `url` (a new connection).
fn pgs(url: &str) -> Sessions {
    Sessions::new(PostgresStore::connect(url).expect("connect"))
}

/// A store on a fresh database holding one session with `events`.
fn store_with(events: &[Value]) -> (String, pg::Guard, Sessions) {
    let (url, guard) = pg::fresh_database();
    let store = pgs(&url);
    store.create(header(ID)).expect("create");
    assert_eq!(
        store.append(ID, 0, events).expect("append"),
        events.len() as u64
    );
    (url, guard, store)
}

/// The stored rows of a session, in sequence order, read with SQL of the test's own.
fn rows(guard: &pg::Guard, id: &str) -> Vec<(i64, String)> {
    guard
        .server()
        .admin(guard.name())
        .query(
            "SELECT seq, line FROM session_state_entries WHERE session_id = $1 ORDER BY seq",
            &[&id],
        )
        .expect("select")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn export(store: &Sessions, id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    store.export(id, &mut out).expect("export");
    out
}

#[test]
fn store_is_a_thread_safe_trait_object_that_prints_no_password() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PostgresStore>();
    let (url, guard) = pg::fresh_database();
    // The shared server trusts loopback, so a URL with any password connects.
    let secret = "pw-7c1e-hunter2";
    let with_password = url.replacen(
        "postgres://postgres@",
        &format!("postgres://postgres:{secret}@"),
        1,
    );
    assert!(with_password.contains(secret), "{with_password}");
    let pg = PostgresStore::connect(&with_password).expect("connect");
    let mut shown = vec![
        format!("{pg:?}"),
        format!("{}", pg.url()),
        format!("{:?}", pg.url()),
        pg.describe(),
    ];
    let store: Box<dyn SessionStore> = Box::new(pg);
    assert!(store.list().expect("list").is_empty());
    let not_found = store.header_line("missing").expect_err("no such session");
    shown.extend([format!("{not_found}"), format!("{not_found:?}")]);
    let sessions = Sessions::from_box(store);
    assert!(sessions.list().expect("list").is_empty());
    let missing = sessions.load("missing").expect_err("no such session");
    shown.extend([
        format!("{sessions:?}"),
        format!("{missing}"),
        format!("{missing:?}"),
    ]);
    let mut source = std::error::Error::source(&missing);
    while let Some(s) = source {
        shown.push(s.to_string());
        source = s.source();
    }
    let port = guard.server().port().to_string();
    for text in &shown {
        assert!(!text.contains(secret), "the password leaked: {text}");
    }
    // What identifies the store is all there: host, port and database, the password
    // replaced.
    for text in &shown[..4] {
        assert!(
            text.contains("127.0.0.1") && text.contains(&port) && text.contains(guard.name()),
            "{text}"
        );
    }
    assert!(shown[1].contains(":***@"), "{}", shown[1]);
    assert!(
        shown[4..].iter().any(|t| t.contains("missing")),
        "{:?}",
        &shown[4..]
    );
}

#[test]
fn the_schema_is_created_once_by_a_first_use_and_a_newer_one_is_refused() {
    let (url, guard) = pg::fresh_database();
    let mut admin = guard.server().admin(guard.name());
    let tables = |admin: &mut postgres::Client| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'session_state_%'",
                &[],
            )
            .expect("tables")
            .get(0)
    };
    // Connecting checks the server and the credentials, nothing of the tables.
    let first = PostgresStore::connect(&url).expect("connect");
    assert_eq!(tables(&mut admin), 0, "connecting makes no table");
    // An append as a connection's first statement: no tables, so the connection is set
    // up (the tables made), and the session is not there.
    let err = first
        .append_lines(ID, 0, &[line_with_id("a0000001", None)])
        .expect_err("no session");
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    assert_eq!(tables(&mut admin), 3, "the append's set-up made the tables");
    // Several stores at once, then again: idempotent, one version row.
    let (url2, guard2) = pg::fresh_database();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                PostgresStore::connect(&url2)
                    .expect("connect")
                    .list()
                    .expect("list")
            });
        }
    });
    PostgresStore::connect(&url2)
        .expect("connect again")
        .list()
        .expect("list again");
    let mut admin2 = guard2.server().admin(guard2.name());
    let versions: Vec<i32> = admin2
        .query("SELECT version FROM session_state_schema", &[])
        .expect("select")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, [1]);
    let types: Vec<(String, String)> = admin2
        .query(
            "SELECT column_name, data_type FROM information_schema.columns \
             WHERE table_name = 'session_state_entries' ORDER BY ordinal_position",
            &[],
        )
        .expect("columns")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        types.contains(&("line".into(), "text".into())),
        "the entry's JSON is kept as text: {types:?}"
    );
    // Tables of a newer version: a store's first read and its first append (a
    // connection's first statement, which sets nothing up) are both refused, and the
    // append writes nothing.
    let sessions = pgs(&url2);
    sessions.create(header(ID)).expect("create");
    sessions.append(ID, 0, &[user("one")]).expect("append");
    let one: Value = serde_json::from_str(&rows(&guard2, ID)[0].1).expect("json");
    let one = one["id"].as_str().expect("id").to_owned();
    admin2
        .execute(
            "INSERT INTO session_state_schema (version) VALUES (99)",
            &[],
        )
        .expect("plant a newer version");
    let newer = |err: &StoreError| {
        matches!(err, StoreError::Database { .. }) && err.to_string().contains("schema version 99")
    };
    let err = PostgresStore::connect(&url2)
        .expect("connect")
        .list()
        .expect_err("a read is refused");
    assert!(newer(&err), "{err}");
    let err = PostgresStore::connect(&url2)
        .expect("connect")
        .append_lines(ID, 1, &[line_with_id("a0000001", Some(&one))])
        .expect_err("an append is refused");
    assert!(newer(&err), "{err}");
    let err = PostgresStore::connect(&url2)
        .expect("connect")
        .append_lines_outside_turns(ID, 1, Some(&one), &[line_with_id("a0000001", Some(&one))])
        .expect_err("an append outside the turns is refused");
    assert!(newer(&err), "{err}");
    assert_eq!(rows(&guard2, ID).len(), 1, "nothing was written");
}

/// A custom entry's line with its id, as the crate appends it.
fn line_with_id(id: &str, parent: Option<&str>) -> String {
    json!({"type": "custom", "customType": "host/note", "data": {}, "id": id,
           "parentId": parent, "timestamp": STAMP})
    .to_string()
}

#[test]
fn a_connections_first_append_sets_its_lock_wait_and_never_commits_unflushed() {
    let (url, guard, _first) = store_with(&[user("one")]);
    let stored = rows(&guard, ID);
    let one: Value = serde_json::from_str(&stored[0].1).expect("json");
    let one = one["id"].as_str().expect("id").to_owned();
    let mut admin = guard.server().admin(guard.name());
    // What the append's own transaction runs with, seen by a trigger; the database's
    // sessions start with commits that return before the WAL is flushed.
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET synchronous_commit = off;
             CREATE TABLE seen (lock_timeout text, synchronous_commit text);
             CREATE FUNCTION note_settings() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO seen VALUES (current_setting('lock_timeout'),
                                          current_setting('synchronous_commit'));
                 RETURN NEW;
             END $$;
             CREATE TRIGGER note AFTER INSERT ON session_state_entries
                 FOR EACH ROW EXECUTE FUNCTION note_settings();",
            guard.name()
        ))
        .expect("the trigger");
    let seen = |admin: &mut postgres::Client| -> Vec<(String, String)> {
        admin
            .query("SELECT * FROM seen", &[])
            .expect("seen")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    // Outside the turns and in one, each as a new connection's first statement.
    let store = PostgresStore::connect(&url)
        .expect("connect")
        .with_lock_wait(Duration::from_millis(1234));
    let next = store
        .append_lines_outside_turns(ID, 1, Some(&one), &[line_with_id("a0000001", Some(&one))])
        .expect("append");
    assert_eq!(next, Some(2));
    let store = PostgresStore::connect(&url)
        .expect("connect")
        .with_lock_wait(Duration::from_millis(4321));
    let next = store
        .append_lines(ID, 2, &[line_with_id("a0000002", Some("a0000001"))])
        .expect("append");
    assert_eq!(next, 3);
    assert_eq!(
        seen(&mut admin),
        [
            ("1234ms".into(), "on".into()),
            ("4321ms".into(), "on".into())
        ],
        "each append ran with the store's lock wait and flushed commits"
    );
    // A connection set up by another statement first keeps the same settings.
    store.list().expect("list");
    store
        .append_lines(ID, 3, &[line_with_id("a0000003", Some("a0000002"))])
        .expect("append");
    assert_eq!(seen(&mut admin)[2], ("4321ms".into(), "on".into()));
}

#[test]
fn append_assigns_contiguous_sequence_numbers() {
    let (url, guard, store) = store_with(&[user("one"), custom(1)]);
    assert_eq!(store.append(ID, 2, &[custom(2)]).expect("append"), 3);
    for wrong in [0, 2, 5] {
        let err = store.append(ID, wrong, &[custom(9)]).expect_err("refused");
        assert!(
            matches!(&err, Error::Store(StoreError::SequenceMismatch { session_id, expected: 3, got })
                if session_id == ID && *got == wrong),
            "{err:?}"
        );
    }
    let stored = rows(&guard, ID);
    assert_eq!(
        stored.iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 1, 2],
        "contiguous, nothing written by the refusals"
    );
    // One linear branch: each entry a child of the one before.
    let loaded = store.load(ID).expect("load");
    let ids: Vec<_> = loaded.log().entries().map(|e| e.id().to_owned()).collect();
    assert_eq!(
        loaded.log().branch(),
        ids.iter().map(String::as_str).collect::<Vec<_>>()
    );
    // Another store (another machine) continues the numbering; the first sees its rows.
    let again = pgs(&url);
    let err = again.append(ID, 1, &[custom(3)]).expect_err("refused");
    assert!(
        matches!(
            err,
            Error::Store(StoreError::SequenceMismatch {
                expected: 3,
                got: 1,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(
        again
            .append(ID, 3, &[custom(3), custom(4)])
            .expect("append"),
        5
    );
    let err = store.append(ID, 3, &[custom(5)]).expect_err("stale");
    assert!(
        matches!(
            err,
            Error::Store(StoreError::SequenceMismatch {
                expected: 5,
                got: 3,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(store.append(ID, 5, &[custom(5)]).expect("append"), 6);
    let loaded = store.load(ID).expect("load");
    assert_eq!(loaded.next_seq(), 6);
    assert_eq!(loaded.event(5).expect("event")["data"], json!({"n": 5}));
    assert_eq!(
        loaded.log().entries().nth(3).and_then(|e| e.parent_id()),
        loaded.log().entries().nth(2).map(|e| e.id()),
        "another machine's first event is a child of the last stored one"
    );
}

#[test]
fn bytes_are_kept_exactly_and_load_matches_the_rows() {
    let tricky = json!({"type": "custom", "customType": "host/bytes",
        "data": {"big": 12345678901234567890u64, "float": 0.1, "neg": -0.0,
                 "text": "tab\there \"quoted\" back\\slash \u{1F600} é \u{0007}",
                 "nested": {"z": 1, "a": [1, 2, {"k": null}]}}});
    let (_url, guard, store) = store_with(&[user("one"), tricky]);
    let stored = rows(&guard, ID);
    let loaded = store.load(ID).expect("load");
    for (i, entry) in loaded.log().entries().enumerate() {
        assert_eq!(
            loaded
                .log()
                .raw_line(entry.id())
                .expect("raw")
                .trim_end_matches('\n'),
            stored[i].1,
            "the line read is the row, byte for byte"
        );
    }
    // Keys keep their order and numbers their spelling (text, not jsonb).
    assert!(
        stored[1].1.contains(r#""big":12345678901234567890"#),
        "{}",
        stored[1].1
    );
    assert!(
        stored[1].1.contains(r#""nested":{"z":1,"a""#),
        "{}",
        stored[1].1
    );
    // Export is the header row and the rows, each a line.
    let mut expected = String::new();
    let header_row: String = guard
        .server()
        .admin(guard.name())
        .query_one(
            "SELECT header FROM session_state_sessions WHERE session_id = $1",
            &[&ID],
        )
        .expect("header")
        .get(0);
    expected.push_str(&header_row);
    expected.push('\n');
    for (_, line) in &stored {
        expected.push_str(line);
        expected.push('\n');
    }
    assert_eq!(
        String::from_utf8(export(&store, ID)).expect("utf-8"),
        expected
    );
}

#[test]
fn pi_made_sessions_round_trip_byte_for_byte() {
    let (url, _guard) = pg::fresh_database();
    let store = pgs(&url);
    for name in [
        "pi1-basic.jsonl",
        "pi1-state.jsonl",
        "pi0-basic.jsonl",
        "pi0-state.jsonl",
    ] {
        let path = fixture(name);
        let bytes = std::fs::read(&path).expect("fixture");
        let imported = store.import_file(&path).expect("import");
        let file = SessionLog::open(&path).expect("open");
        assert_eq!(imported.appended, file.len() as u64, "{name}: {imported:?}");
        assert_eq!(export(&store, file.session_id()), bytes, "{name}: export");
        // A second import changes nothing.
        let again = store.import_file(&path).expect("import again");
        assert_eq!(
            (again.already_stored, again.appended),
            (file.len() as u64, 0),
            "{name}: {again:?}"
        );
        let loaded = store.load(file.session_id()).expect("load");
        assert!(loaded.closed_tool_calls().is_empty(), "{name}");
        let ours: Vec<_> = loaded.log().entries().map(|e| e.id().to_owned()).collect();
        let theirs: Vec<_> = file.entries().map(|e| e.id().to_owned()).collect();
        assert_eq!(ours, theirs, "{name}");
        assert_eq!(loaded.log().leaf_id(), file.leaf_id(), "{name}");
        for id in &theirs {
            assert_eq!(
                loaded.log().raw_line(id).expect("raw"),
                file.raw_line(id).expect("raw"),
                "{name}"
            );
        }
    }
    // A torn final record is left out of the import, as the reader leaves it out.
    let path = fixture("pi1-torn.jsonl");
    let file = LogOptions::new().open(&path).expect("open");
    let imported = store.import_file(&path).expect("import");
    assert_eq!(imported.appended, file.len() as u64, "{imported:?}");
    let listed: BTreeSet<String> = store
        .list()
        .expect("list")
        .iter()
        .map(|h| h.id().to_owned())
        .collect();
    assert_eq!(listed.len(), 5);
}

#[test]
fn corruption_in_the_rows_is_refused_naming_the_line() {
    let (_url, guard, store) = store_with(&[user("one"), custom(1), custom(2)]);
    let mut admin = guard.server().admin(guard.name());
    // The last row: in a file a torn write, here corruption.
    admin
        .execute(
            "UPDATE session_state_entries SET line = '{\"type\":\"cus' \
             WHERE session_id = $1 AND seq = 2",
            &[&ID],
        )
        .expect("plant");
    let err = store.load(ID).expect_err("refused");
    assert!(
        matches!(&err, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Corrupt { at, .. }))) if at.line == 4),
        "{err:?}"
    );
    // A middle row.
    admin
        .execute(
            "UPDATE session_state_entries SET line = 'not json' WHERE session_id = $1 AND seq = 1",
            &[&ID],
        )
        .expect("plant");
    let err = store.load(ID).expect_err("refused");
    assert!(
        matches!(&err, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Corrupt { at, .. }))) if at.line == 3),
        "{err:?}"
    );
    assert!(err.to_string().contains(ID), "names the session: {err}");
    // A gap in the sequence.
    admin
        .execute(
            "DELETE FROM session_state_entries WHERE session_id = $1 AND seq = 1",
            &[&ID],
        )
        .expect("plant");
    let err = store.load(ID).expect_err("refused");
    assert!(
        matches!(&err, Error::Store(StoreError::Corrupt { .. }))
            && err.to_string().contains("skip"),
        "{err}"
    );
    // An unknown version in the header row.
    let id2 = "v9";
    store.create(header(id2)).expect("create");
    store.append(id2, 0, &[user("x")]).expect("append");
    admin
        .execute(
            "UPDATE session_state_sessions SET header = replace(header, '\"version\":3', \
             '\"version\":9') WHERE session_id = $1",
            &[&id2],
        )
        .expect("plant");
    let err = store.load(id2).expect_err("refused");
    assert!(
        matches!(
            err,
            Error::Log(LogError::Open(OpenError::Invalid(
                InvalidLog::UnsupportedVersion { .. }
            )))
        ),
        "{err:?}"
    );
}

#[test]
fn a_session_id_full_of_sql_round_trips_and_is_never_spliced() {
    let (url, guard) = pg::fresh_database();
    let store = pgs(&url);
    let evil = "x'); DROP TABLE session_state_entries; --\"; SELECT '1";
    store.create(header(evil)).expect("create");
    assert_eq!(
        store
            .append(evil, 0, &[user("hi"), custom(1)])
            .expect("append"),
        2
    );
    let loaded = store.load(evil).expect("load");
    assert_eq!(loaded.header().id(), evil);
    assert_eq!(store.list().expect("list")[0].id(), evil);
    assert_eq!(rows(&guard, evil).len(), 2, "the table is still there");
    assert!(matches!(
        store.load("' OR '1'='1"),
        Err(Error::Store(StoreError::NotFound { .. }))
    ));
}

#[test]
fn a_writer_holding_the_session_gets_the_four_element_refusal() {
    let (url, guard, _first) = store_with(&[user("one")]);
    let store = Sessions::new(
        PostgresStore::connect(&url)
            .expect("connect")
            .with_lock_wait(Duration::from_millis(200)),
    );
    // Another machine's writer mid-transaction: it holds the session's row.
    let mut holder = {
        let mut c: postgres::Config = url.parse().expect("url");
        c.application_name("writer-on-machine-b");
        c.connect(postgres::NoTls).expect("connect")
    };
    let mut tx = holder.transaction().expect("begin");
    tx.query(
        "SELECT 1 FROM session_state_sessions WHERE session_id = $1 FOR UPDATE",
        &[&ID],
    )
    .expect("lock the row");
    let err = store.append(ID, 1, &[custom(1)]).expect_err("refused");
    // Retried with backoff for the lock wait, then refused with the holder named.
    let Error::StoreUnavailable {
        source, attempts, ..
    } = &err
    else {
        panic!("not the busy refusal: {err:?}")
    };
    let StoreError::Busy {
        initiator,
        action,
        session_id: object,
        reason,
    } = &**source
    else {
        panic!("not busy: {source:?}")
    };
    assert!(*attempts >= 1, "{err}");
    assert!(initiator.contains("writer-on-machine-b"), "{initiator}");
    assert_eq!(action, "append");
    assert_eq!(object, ID);
    assert!(reason.contains("lock wait"), "{reason}");
    let shown = err.to_string();
    for part in [initiator.as_str(), "append", ID, reason.as_str()] {
        assert!(shown.contains(part), "{shown} lacks {part}");
    }
    tx.rollback().expect("rollback");
    assert_eq!(rows(&guard, ID).len(), 1, "nothing written");
    // The holder is gone: the next append proceeds.
    assert_eq!(store.append(ID, 1, &[custom(1)]).expect("append"), 2);
}

/// A `pg_writer` process and what it printed, line by line.
struct Writer {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Writer {
    fn spawn(url: &str, session: &str, name: &str, count: u64, extra: &[&str]) -> Writer {
        let mut child = Command::new(example("pg_writer"))
            .args([url, session, name, &count.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn pg_writer");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Writer {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits (bounded) for a printed line satisfying `pred`.
    fn wait_for(&mut self, pred: impl Fn(&str) -> bool) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("pg_writer printed no such line; saw {:?}", self.seen));
            self.seen.push(line.clone());
            if pred(&line) {
                return line;
            }
        }
    }

    /// Waits for the process to end; every line it printed.
    fn finish(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let status = self.child.wait().expect("wait");
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(30)) {
            self.seen.push(line);
        }
        (status, std::mem::take(&mut self.seen))
    }

    fn kill(mut self) -> Vec<String> {
        // SIGKILL: no destructor, no rollback from the client; the server sees the socket
        // close and rolls back whatever was in flight.
        self.child.kill().expect("kill");
        self.finish().1
    }
}

impl Drop for Writer {
    /// A failing test leaves no writer behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `(seq, writer, i)` of every `ack` line.
fn acks(lines: &[String]) -> Vec<(u64, String, u64)> {
    lines
        .iter()
        .filter_map(|l| {
            let mut p = l.strip_prefix("ack ")?.split(' ');
            Some((
                p.next()?.parse().ok()?,
                p.next()?.to_owned(),
                p.next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// Every acknowledged event is in the session at its sequence number, once.
fn assert_all_acknowledged_stored(store: &Sessions, session: &str, acked: &[(u64, String, u64)]) {
    let loaded = store.load(session).expect("load");
    let mut stored: BTreeMap<(String, u64), Vec<u64>> = BTreeMap::new();
    for seq in 0..loaded.next_seq() {
        let e = loaded.event(seq).expect("event");
        if e["customType"] == "pg-writer" {
            let w = e["data"]["writer"].as_str().expect("writer").to_owned();
            let i = e["data"]["i"].as_u64().expect("i");
            stored.entry((w, i)).or_default().push(seq);
        }
    }
    for (seq, w, i) in acked {
        assert_eq!(
            stored.get(&(w.clone(), *i)),
            Some(&vec![*seq]),
            "acknowledged event {w}/{i} at seq {seq}: stored exactly once, there"
        );
    }
    for ((w, i), seqs) in &stored {
        assert_eq!(seqs.len(), 1, "{w}/{i} stored twice: {seqs:?}");
    }
}

#[test]
fn a_writer_killed_mid_run_loses_nothing_acknowledged_and_the_next_proceeds() {
    let (url, _guard) = pg::fresh_database();
    let mut w = Writer::spawn(&url, "killed", "a", 1_000_000, &["--create"]);
    // Kill it at some point after 50 acknowledged appends: likely mid-statement.
    w.wait_for(|l| l.starts_with("ack 49 "));
    let lines = w.kill();
    let acked = acks(&lines);
    assert!(acked.len() >= 50);
    let store = pgs(&url);
    assert_all_acknowledged_stored(&store, "killed", &acked);
    let next = store.load("killed").expect("load").next_seq();
    assert!(
        next >= acked.len() as u64 && next <= acked.len() as u64 + 1,
        "{next}"
    );
    // The next writer proceeds at once (no lock left behind).
    let w2 = Writer::spawn(&url, "killed", "b", 20, &["--lock-wait-ms", "100"]);
    let (status, lines) = w2.finish();
    assert!(status.success(), "{lines:?}");
    assert!(!lines.iter().any(|l| l.starts_with("busy")), "{lines:?}");
    let mut all = acked;
    all.extend(acks(&lines));
    assert_all_acknowledged_stored(&store, "killed", &all);
}

#[test]
fn a_server_restart_mid_run_loses_nothing_acknowledged() {
    let server = Server::start(ServerOptions::default());
    let db = server.create_database();
    let url = server.url(&db);
    let mut w = Writer::spawn(&url, "restarted", "a", 400, &["--create"]);
    w.wait_for(|l| l.starts_with("ack 99 "));
    server.restart();
    let (status, lines) = w.finish();
    assert!(status.success(), "{lines:?}");
    // The library waits the restart out and resolves the append in flight by reading
    // the store back: every event is acknowledged once, none stored twice.
    let acked = acks(&lines);
    assert_eq!(acked.len(), 400, "every event acknowledged once in the end");
    let store = pgs(&url);
    assert_all_acknowledged_stored(&store, "restarted", &acked);
}

#[test]
fn a_terminated_connection_is_a_typed_error_and_the_next_call_reconnects() {
    let (_url, guard, store) = store_with(&[user("one")]);
    let mut admin = guard.server().admin(guard.name());
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&guard.name()],
        )
        .expect("terminate")
        .get(0);
    assert_eq!(killed, 1, "the store's one connection");
    // The primitive says what happened: the connection is gone (before anything was
    // sent), a typed error that the crate retries.
    let line = r#"{"type":"custom","customType":"host/note","data":{"n":1},"id":"aaaa0001","parentId":null,"timestamp":"2024-12-03T14:00:01.000Z"}"#;
    let err = store
        .backend()
        .append_lines(ID, 1, &[line.to_owned()])
        .expect_err("lost");
    assert!(
        matches!(
            err,
            StoreError::Unavailable { .. } | StoreError::Indeterminate { .. }
        ),
        "{err:?}"
    );
    // Through the crate's rules, the next call reconnects; what the store holds decides.
    let next = store.load(ID).expect("reconnects").next_seq();
    match store.append(ID, 1, &[custom(1)]) {
        Ok(n) => assert_eq!((next, n), (1, 2)),
        Err(Error::Store(StoreError::SequenceMismatch { expected: 2, .. })) => {
            assert_eq!(next, 2)
        }
        Err(e) => panic!("{e:?}"),
    }
    assert_eq!(rows(&guard, ID).len(), 2);
}

#[test]
fn several_writer_processes_on_one_session_never_fork_or_lose_it() {
    let (url, _guard) = pg::fresh_database();
    let store = pgs(&url);
    store.create(header("shared")).expect("create");
    store.append("shared", 0, &[user("start")]).expect("append");
    let writers: Vec<Writer> = (0..4)
        .map(|k| {
            Writer::spawn(
                &url,
                "shared",
                &format!("w{k}"),
                50,
                &["--lock-wait-ms", "50"],
            )
        })
        .collect();
    let mut all = Vec::new();
    let mut refusals = 0;
    for w in writers {
        let (status, lines) = w.finish();
        assert!(status.success(), "{lines:?}");
        for l in &lines {
            if let Some(m) = l.strip_prefix("busy ") {
                refusals += 1;
                assert!(
                    m.contains("is being written by") && m.contains("append refused"),
                    "{m}"
                );
            }
            assert!(
                l.starts_with("ack ")
                    || l.starts_with("mismatch ")
                    || l.starts_with("busy ")
                    || l == "ready"
                    || l == "done",
                "only acknowledged appends and the typed refusals: {l}"
            );
        }
        all.extend(acks(&lines));
    }
    assert_eq!(all.len(), 200);
    let seqs: BTreeSet<u64> = all.iter().map(|a| a.0).collect();
    assert_eq!(seqs.len(), 200, "no sequence number acknowledged twice");
    assert_all_acknowledged_stored(&store, "shared", &all);
    let loaded = store.load("shared").expect("load");
    assert_eq!(loaded.next_seq(), 201);
    // One linear branch: nobody forked the session.
    assert_eq!(loaded.log().branch().len(), 201);
    eprintln!("{refusals} busy refusals");
}

/// The lock of the writers' turn on session `id`, as every version of the crate names it
/// (docs/postgres.md, "Writers take turns").
const TURN_KEY: &str = "hashtextextended('session-state/turn/' || $1::text, 0)";

/// Waits until a connection to this test's database waits for an advisory lock (seen in
/// `pg_locks`).
fn until_one_waits_for_the_turn(admin: &mut postgres::Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .expect("pg_locks")
            .get(0);
        if waiting > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "nobody waits for the turn");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The id of the session's last stored entry.
fn last_id(guard: &pg::Guard) -> String {
    let rows = rows(guard, ID);
    let last: Value = serde_json::from_str(&rows.last().expect("an entry").1).expect("JSON");
    last["id"].as_str().expect("an id").to_owned()
}

/// An append outside the turns goes in only while no writer holds the session's turn
/// or waits for one: a shared holder of the turn's lock (another append outside the
/// turns, under way) does not stop it; an exclusive holder does, and so does a writer
/// waiting in line behind a shared holder. It also goes in only after the entry it
/// names, at the sequence number it names. Refused, it writes nothing.
#[test]
fn an_append_outside_the_turns_never_passes_a_writer_in_line() {
    let (url, guard, _first) = store_with(&[user("one")]);
    let store = PostgresStore::connect(&url).expect("connect");
    let mut holder = guard.server().admin(guard.name());
    let mut admin = guard.server().admin(guard.name());
    let line = |id: &str, parent: &str| {
        vec![
            json!({"type": "custom", "customType": "host/note", "data": {}, "id": id,
                   "parentId": parent, "timestamp": STAMP})
            .to_string(),
        ]
    };
    let first = last_id(&guard);

    holder
        .query(&format!("SELECT pg_advisory_lock({TURN_KEY})"), &[&ID])
        .expect("take the turn");
    let refused = store.append_lines_outside_turns(ID, 1, Some(&first), &line("0000a001", &first));
    assert!(matches!(refused, Ok(None)), "{refused:?}");
    assert_eq!(rows(&guard, ID).len(), 1, "a refused append writes nothing");
    holder
        .query(&format!("SELECT pg_advisory_unlock({TURN_KEY})"), &[&ID])
        .expect("end the turn");

    // Not after the last entry, or not at the next sequence number: refused.
    for (seq, after) in [
        (1, Some("0000ffff")),
        (1, None),
        (0, None),
        (2, Some(first.as_str())),
    ] {
        let refused = store.append_lines_outside_turns(ID, seq, after, &line("0000a001", &first));
        assert!(matches!(refused, Ok(None)), "{seq} {after:?}: {refused:?}");
    }
    assert_eq!(rows(&guard, ID).len(), 1);

    holder
        .query(
            &format!("SELECT pg_advisory_lock_shared({TURN_KEY})"),
            &[&ID],
        )
        .expect("share the lock");
    let went = store.append_lines_outside_turns(ID, 1, Some(&first), &line("0000a001", &first));
    assert!(matches!(went, Ok(Some(2))), "{went:?}");

    let in_line = {
        let url = url.clone();
        std::thread::spawn(move || {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
            c.query(&format!("SELECT pg_advisory_lock({TURN_KEY})"), &[&ID])
                .expect("wait for the turn");
            c.query(&format!("SELECT pg_advisory_unlock({TURN_KEY})"), &[&ID])
                .expect("end the turn");
        })
    };
    until_one_waits_for_the_turn(&mut admin);
    let next = line("0000a002", "0000a001");
    let refused = store.append_lines_outside_turns(ID, 2, Some("0000a001"), &next);
    assert!(matches!(refused, Ok(None)), "{refused:?}");
    assert_eq!(rows(&guard, ID).len(), 2);
    holder
        .query(
            &format!("SELECT pg_advisory_unlock_shared({TURN_KEY})"),
            &[&ID],
        )
        .expect("let go");
    in_line.join().expect("the writer in line");

    let went = store.append_lines_outside_turns(ID, 2, Some("0000a001"), &next);
    assert!(matches!(went, Ok(Some(3))), "{went:?}");
    assert_eq!(rows(&guard, ID).len(), 3);
    assert_eq!(last_id(&guard), "0000a002");
}

/// A batch outside the turns (64 lines or more, `COPY`) takes a turn for its
/// transaction: it goes in only after the entry it names, and waits in line behind a
/// writer in its turn (here past a lock wait of 200 ms: refused, nothing written).
#[test]
fn a_batch_outside_the_turns_waits_in_line_and_goes_only_after_the_entry_named() {
    let (url, guard, _first) = store_with(&[user("one")]);
    let store = PostgresStore::connect(&url)
        .expect("connect")
        .with_lock_wait(Duration::from_millis(200));
    let first = last_id(&guard);
    let batch: Vec<String> = (0..64u32)
        .map(|i| {
            let parent = if i == 0 {
                first.clone()
            } else {
                format!("0000b{:03x}", i - 1)
            };
            json!({"type": "custom", "customType": "host/note", "data": {"i": i},
                   "id": format!("0000b{i:03x}"), "parentId": parent, "timestamp": STAMP})
            .to_string()
        })
        .collect();
    let refused = store.append_lines_outside_turns(ID, 1, Some("0000ffff"), &batch);
    assert!(matches!(refused, Ok(None)), "{refused:?}");
    let mut holder = guard.server().admin(guard.name());
    holder
        .query(&format!("SELECT pg_advisory_lock({TURN_KEY})"), &[&ID])
        .expect("take the turn");
    let waited = store.append_lines_outside_turns(ID, 1, Some(&first), &batch);
    assert!(
        matches!(waited, Err(StoreError::Busy { .. })),
        "it waits in line, past the lock wait: {waited:?}"
    );
    assert_eq!(rows(&guard, ID).len(), 1, "nothing written");
    holder
        .query(&format!("SELECT pg_advisory_unlock({TURN_KEY})"), &[&ID])
        .expect("end the turn");
    let went = store.append_lines_outside_turns(ID, 1, Some(&first), &batch);
    assert!(matches!(went, Ok(Some(65))), "{went:?}");
    assert_eq!(rows(&guard, ID).len(), 65);
    assert_eq!(last_id(&guard), "0000b03f");
}

/// A state write alone takes no turn at the store: it goes through while another
/// connection shares the turn's lock, which a turn would wait for (here past a lock wait
/// of 200 ms, a refusal). Behind a writer in its turn, its append is refused and it waits
/// in line, then writes once the turn ends.
#[test]
fn a_state_write_takes_a_turn_only_behind_a_writer_in_one() {
    let (url, guard, _first) = store_with(&[user("one")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("states.sqlite");
    let backend = PostgresStore::connect(&url)
        .expect("connect")
        .with_lock_wait(Duration::from_millis(200));
    let key = backend.url().to_owned();
    let session = StoredSession::new(&backend, &key, ID);
    let role = Store::at(&db)
        .expect("store")
        .state::<Value>("role", Scope::Branch)
        .expect("state");
    let mut holder = guard.server().admin(guard.name());

    holder
        .query(
            &format!("SELECT pg_advisory_lock_shared({TURN_KEY})"),
            &[&ID],
        )
        .expect("share the lock");
    let first = role
        .write(On::stored(&session, None), &json!("reviewer"))
        .expect("a write alone takes no turn")
        .expect("written");
    holder
        .query(
            &format!("SELECT pg_advisory_unlock_shared({TURN_KEY})"),
            &[&ID],
        )
        .expect("let go");

    holder
        .query(&format!("SELECT pg_advisory_lock({TURN_KEY})"), &[&ID])
        .expect("take the turn");
    let writer = {
        let (url, db) = (url.clone(), db.clone());
        std::thread::spawn(move || {
            let backend = PostgresStore::connect(&url).expect("connect");
            let key = backend.url().to_owned();
            let session = StoredSession::new(&backend, &key, ID);
            Store::at(&db)
                .expect("store")
                .state::<Value>("role", Scope::Branch)
                .expect("state")
                .write(On::stored(&session, None), &json!("author"))
        })
    };
    until_one_waits_for_the_turn(&mut guard.server().admin(guard.name()));
    assert_eq!(
        rows(&guard, ID).len(),
        2,
        "the writer in line wrote nothing yet"
    );
    holder
        .query(&format!("SELECT pg_advisory_unlock({TURN_KEY})"), &[&ID])
        .expect("end the turn");
    let second = writer
        .join()
        .expect("the writer")
        .expect("written in its turn")
        .expect("a new value");
    let ids: Vec<String> = rows(&guard, ID)
        .iter()
        .map(|(_, l)| {
            serde_json::from_str::<Value>(l).expect("JSON")["id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    assert_eq!(ids[1..], [first, second]);
    assert_eq!(
        role.read(On::stored(&session, None)).expect("read"),
        Some(json!("author"))
    );
}

#[test]
fn the_password_never_appears_in_errors_or_output() {
    let password = "pw-9f3b'secret;\"x";
    let server = Server::start(ServerOptions {
        password: Some(password.into()),
    });
    let db = server.create_database();
    let enc = "pw-9f3b%27secret%3B%22x";
    let good = format!("postgres://postgres:{enc}@127.0.0.1:{}/{db}", server.port());
    let pg = PostgresStore::connect(&good).expect("connect with the password");
    assert!(pg.url().contains(":***@"), "{}", pg.url());
    for shown in [pg.url().to_owned(), format!("{pg:?}")] {
        assert!(
            !shown.contains("secret") && !shown.contains("9f3b"),
            "{shown}"
        );
    }
    let store = Sessions::new(pg.with_lock_wait(Duration::from_millis(300)));
    store.create(header(ID)).expect("create");
    store.append(ID, 0, &[user("hi")]).expect("append");
    let mut errors: Vec<Error> = vec![
        store.load("missing").expect_err("not found"),
        store.append(ID, 7, &[custom(1)]).expect_err("mismatch"),
    ];
    // A wrong password, an unreachable server, a URL that does not parse.
    let wrong = format!(
        "postgres://postgres:wrong-{enc}@127.0.0.1:{}/{db}",
        server.port()
    );
    errors.push(PostgresStore::connect(&wrong).expect_err("refused"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let nowhere = format!("postgres://postgres:{enc}@127.0.0.1:{port}/{db}");
    errors.push(PostgresStore::connect(&nowhere).expect_err("unreachable"));
    errors.push(
        PostgresStore::connect(&format!(
            "postgres://postgres:{enc}@127.0.0.1:notaport/{db}"
        ))
        .expect_err("unparsable"),
    );
    errors.push(
        PostgresStore::connect(&format!("host=127.0.0.1 password='{password}' port=x"))
            .expect_err("unparsable"),
    );
    // The server stops under a live store.
    server.stop();
    errors.push(store.append(ID, 1, &[custom(1)]).expect_err("server gone"));
    for e in &errors {
        for shown in [e.to_string(), format!("{e:?}")] {
            assert!(
                !shown.contains("secret") && !shown.contains("9f3b"),
                "the password leaked: {shown}"
            );
        }
    }
    assert!(
        matches!(
            errors.last(),
            Some(Error::StoreUnavailable { source, .. })
                if matches!(**source, StoreError::Unavailable { .. })
        ),
        "{:?}",
        errors.last()
    );
    assert!(
        matches!(&errors[2], Error::Store(StoreError::Database { source, .. }) if source.sql_state() == Some("28P01"))
            && errors[2]
                .to_string()
                .contains("password authentication failed"),
        "{:?}",
        errors[2]
    );
}

/// libpq's URL grammar: the userinfo ends at the last `@` before the query, so a password
/// with a raw `@`, `:`, `/`, `?` and `#` connects as written, in the userinfo and in
/// `password=`; and no part of it is printed, by the store or by the command line when
/// the connection fails (a wrong password, a port nobody listens on).
#[test]
fn a_password_with_url_delimiters_connects_and_no_part_of_it_is_printed() {
    let password = "Pw@S3:c/r?e#tTail";
    let parts = ["Pw", "S3", "c/r", "e#t", "Tail"];
    let server = Server::start(ServerOptions {
        password: Some(password.into()),
    });
    let port = server.port();
    let raw = format!("postgres://postgres:{password}@127.0.0.1:{port}/postgres");
    let query = format!("postgres://postgres@127.0.0.1:{port}/postgres?password={password}");
    for url in [&raw, &query] {
        let pg = PostgresStore::connect(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        for shown in [pg.url().to_owned(), format!("{pg:?}")] {
            assert!(
                shown.contains(&format!("127.0.0.1:{port}/postgres")),
                "{shown}"
            );
            for part in parts {
                assert!(!shown.contains(part), "{part} in {shown}");
            }
        }
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    for url in [
        format!("postgres://postgres:{password}X@127.0.0.1:{port}/postgres"),
        format!("postgres://postgres@127.0.0.1:{port}/postgres?password={password}X"),
        format!("postgres://root:{password}@127.0.0.1:{closed}/sdb?connect_timeout=1"),
        format!("postgres://root@127.0.0.1:{closed}/sdb?password={password}&connect_timeout=1"),
    ] {
        let out = crate::common::cli()
            .args(["list", "--store", &url])
            .output()
            .expect("run session-state");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(text.contains("127.0.0.1:"), "the store is named: {text}");
        for part in parts {
            assert!(
                !text.contains(part),
                "{part} of the password printed: {text}"
            );
        }
    }
}

/// A writer stalled in its turn (its connection holds the session's advisory lock and
/// sends nothing, as a SIGSTOPped writer's does) is named in the refusal: its pid and host
/// from the `application_name` every session-state connection sets, its server backend,
/// and since when its connection has been idle, with what to do about it.
#[test]
fn a_writer_stalled_in_its_turn_is_named_with_pid_host_and_since_when() {
    let (url, guard, _first) = store_with(&[user("one")]);
    let mut holder = {
        let mut c: postgres::Config = url.parse().expect("url");
        c.application_name("session-state pid:4242@machine-b");
        c.connect(postgres::NoTls).expect("connect")
    };
    let backend_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    holder
        .query(&format!("SELECT pg_advisory_lock({TURN_KEY})"), &[&ID])
        .expect("take the turn");
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = PostgresStore::connect(&url)
        .expect("connect")
        .with_lock_wait(Duration::from_millis(200));
    let key = backend.url().to_owned();
    let session = StoredSession::new(&backend, &key, ID);
    let role = Store::at(dir.path().join("states.sqlite"))
        .expect("store")
        .state::<Value>("role", Scope::Branch)
        .expect("state");
    let err = role
        .write(On::stored(&session, None), &json!("reviewer"))
        .expect_err("refused while the turn is held");
    let Error::StoreUnavailable { source, .. } = &err else {
        panic!("not the busy refusal: {err:?}")
    };
    let StoreError::Busy {
        initiator,
        action,
        session_id,
        reason,
    } = &**source
    else {
        panic!("not busy: {source:?}")
    };
    for part in [
        "session-state pid:4242@machine-b",
        "process 4242 on machine-b",
        &format!("server backend pid {backend_pid}"),
    ] {
        assert!(initiator.contains(part), "{part} not in {initiator}");
    }
    assert_eq!((action.as_str(), session_id.as_str()), ("append", ID));
    for part in [
        "holds the session's turn",
        "idle since 20",
        "connected since 20",
        "lock wait of 200ms",
        "kill process 4242 on machine-b",
        &format!("pg_terminate_backend({backend_pid})"),
    ] {
        assert!(reason.contains(part), "{part} not in {reason}");
    }
    let shown = err.to_string();
    for part in [initiator.as_str(), "append", ID, reason.as_str()] {
        assert!(shown.contains(part), "{shown} lacks {part}");
    }
    assert_eq!(rows(&guard, ID).len(), 1, "nothing written");
    // The turn ends with the holder's connection: the write then goes through.
    drop(holder);
    assert!(
        role.write(On::stored(&session, None), &json!("reviewer"))
            .expect("written")
            .is_some()
    );
}

/// A Pi session file of `n` entries (custom events, one branch): its lines.
fn session_lines(id: &str, n: usize) -> Vec<String> {
    let mut lines = vec![format!(
        r#"{{"type":"session","version":3,"id":"{id}","timestamp":"{STAMP}","cwd":"/work/project"}}"#
    )];
    let mut parent = "null".to_owned();
    for i in 0..n {
        let eid = format!("{:08x}", 0x1000_0000 + i);
        lines.push(format!(
            r#"{{"type":"custom","customType":"bulk","data":{{"n":{i}}},"id":"{eid}","parentId":{parent},"timestamp":"{STAMP}"}}"#
        ));
        parent = format!("\"{eid}\"");
    }
    lines
}

/// An import whose connection is cut at its `COMMIT` (the server committed; the client got
/// no answer) is settled as a write is: read back, found stored, and reported imported,
/// once; the same for the batch that extends a stored session.
#[test]
fn an_import_cut_at_its_commit_reads_back_what_is_stored_and_stores_it_once() {
    let (url, guard) = pg::fresh_database();
    pgs(&url).list().expect("the tables are made");
    let relay = pg::CutAtCommit::start(guard.server().port());
    let via = format!(
        "postgres://postgres@127.0.0.1:{}/{}?sslmode=disable",
        relay.port(),
        guard.name()
    );
    let id = "0195f1d0-7c4e-7000-8000-0000000000c7";
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.jsonl");
    let import = || {
        let out = pg::output_within(
            {
                let mut c = crate::common::cli();
                c.args(["import"]).arg(&file).args(["--store", &via]);
                c
            },
            Duration::from_secs(120),
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{id}\n"));
    };
    // A new session: one transaction (COPY), cut at its COMMIT.
    let lines = session_lines(id, 100);
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    relay.arm();
    import();
    assert_eq!(relay.cuts(), 1, "the COMMIT was cut");
    let stored: Vec<String> = rows(&guard, id).into_iter().map(|(_, l)| l).collect();
    assert_eq!(stored, lines[1..], "every line stored, once");
    // Pi appended: the import extends the session, cut at its COMMIT again.
    let lines = session_lines(id, 180);
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    relay.arm();
    import();
    assert_eq!(relay.cuts(), 2, "the COMMIT was cut");
    let stored: Vec<String> = rows(&guard, id).into_iter().map(|(_, l)| l).collect();
    assert_eq!(stored, lines[1..], "every line stored, once");
    // A rerun changes nothing.
    import();
    assert_eq!(rows(&guard, id).len(), 180);
}
