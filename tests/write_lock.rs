//! The per-session write lock (docs/spec.md §6) through [`Store`], against a real SQLite file in
//! WAL mode, with real processes standing in for other holders. Rows that other programs
//! (another process, an older version) would leave are written with raw SQL on a
//! connection of the test's own.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};

use crate::common;
use crate::common::holders::Proc;
use crate::common::now_ms;
use crate::common::seams::Hooked;
use rusqlite::{Connection, params};
use session_state::On;
use session_state::{
    AppendError, LogOptions, Materialize, NewEntry, Scope, SessionLog, SessionState, Store,
    StoreOptions,
    lock::{Holder, LEASE, Liveness, LockError},
    maintenance::Peeked,
};
use tempfile::TempDir;

const SESSION: &str = "0195f1d0-7c4e-7000-8000-000000000001";

fn db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("states.sqlite");
    (dir, path)
}

/// A store on `path` whose database exists (schema and lock table included).
fn store(path: &Path) -> Store {
    let store = Store::at(path).expect("store");
    store.connect().expect("open the database");
    store
}

/// A connection of another program on the database.
fn open(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open database");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    conn
}

/// A row as another process would have left it.
fn plant(conn: &Connection, holder: &str, acquired_at_ms: i64) {
    conn.execute(
        "INSERT OR REPLACE INTO write_lock (session_id, holder, acquired_at, action)
         VALUES (?1, ?2, ?3, 'write')",
        params![SESSION, holder, acquired_at_ms],
    )
    .expect("plant row");
}

fn row_holder(store: &Store) -> Option<String> {
    store
        .lock_status(SESSION)
        .expect("status")
        .map(|s| s.holder)
}

fn table_count(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .expect("count tables")
}

/// The lock error inside a refused `lock`/`lock_as`.
fn lock_error(result: session_state::Result<impl std::fmt::Debug>) -> LockError {
    match result.expect_err("must be refused") {
        session_state::Error::Lock(e) => *e,
        other => panic!("expected a lock error, got {other:?}"),
    }
}

#[test]
fn acquire_then_release_leaves_no_row() {
    let (_dir, path) = db();
    let store = store(&path);
    let guard = store.lock(SESSION, "write").expect("acquire");
    assert_eq!(guard.holder(), Holder::current().to_string());
    assert_eq!(guard.session_id(), SESSION);

    let st = store.lock_status(SESSION).expect("status").expect("row");
    assert_eq!(st.holder, Holder::current().to_string());
    assert_eq!(st.action.as_deref(), Some("write"));
    assert_eq!(st.acquired_at_ms, guard.acquired_at_ms());
    assert!(!st.lease_expired);

    assert!(guard.release().expect("release"), "the row was ours");
    assert_eq!(row_holder(&store), None);
}

#[test]
fn same_process_takes_over_its_own_row() {
    let (_dir, path) = db();
    let store = store(&path);
    // A row this process left behind (release failed, or the guard was leaked).
    std::mem::forget(store.lock(SESSION, "write").expect("first"));
    let guard = store.lock(SESSION, "patch").expect("own row is taken over");
    let st = store.lock_status(SESSION).expect("status").expect("row");
    assert_eq!(st.action.as_deref(), Some("patch"));
    assert!(guard.release().expect("release"));

    // Nested acquisition: allowed, not counted.
    let outer = store.lock(SESSION, "write").expect("outer");
    let inner = store.lock(SESSION, "drop").expect("inner");
    assert!(inner.release().expect("release inner"));
    assert_eq!(row_holder(&store), None, "the first release frees the row");
    assert!(!outer.release().expect("release outer"));
}

#[cfg(target_os = "linux")]
#[test]
fn live_foreign_holder_is_refused_with_all_four_elements() {
    let (_dir, path) = db();
    let store = store(&path);
    let other = Proc::sleep();
    let holder = other.holder().to_string();
    assert_eq!(other.holder().liveness(), Liveness::Alive);
    let now = now_ms();
    plant(&open(&path), &holder, now - 19_000);

    let err = lock_error(store.lock_as(SESSION, "write", now, &Holder::current()));
    let LockError::Held {
        initiator,
        action,
        object,
        reason,
        liveness,
        ..
    } = &err
    else {
        panic!("expected Held, got {err:?}");
    };
    assert_eq!(initiator, &holder);
    assert_eq!(action, "write");
    assert_eq!(object, SESSION);
    assert_eq!(*liveness, Liveness::Alive);
    assert!(
        reason.contains(&format!("pid {} is alive", other.0.id())),
        "{reason}"
    );
    assert!(reason.contains("lease expires in 41 s"), "{reason}");

    // The crate's error shows the same message as the lock error it carries.
    let shown = store
        .lock_as(SESSION, "write", now, &Holder::current())
        .expect_err("refused again")
        .to_string();
    let msg = err.to_string();
    assert_eq!(shown, msg);
    for part in [
        holder.as_str(),
        "write refused",
        SESSION,
        reason.as_str(),
        "(alive)",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    assert!(msg.contains("session-state force-refresh"), "{msg}");
    let manual = format!("DELETE FROM write_lock WHERE session_id = '{SESSION}';");
    assert!(msg.contains(&manual), "{msg}");
    assert!(msg.contains(path.to_str().expect("utf-8 path")), "{msg}");

    assert_eq!(
        row_holder(&store),
        Some(holder),
        "a refusal changes nothing"
    );
    other.end();
}

#[cfg(target_os = "linux")]
#[test]
fn dead_holder_is_taken_over_at_once() {
    let (_dir, path) = db();
    let store = store(&path);
    let other = Proc::sleep();
    let holder = other.holder();
    other.end();
    assert_eq!(holder.liveness(), Liveness::NotAlive);
    plant(&open(&path), &holder.to_string(), now_ms());

    let st = store.lock_status(SESSION).expect("status").expect("row");
    assert_eq!(st.liveness, Liveness::NotAlive);
    assert!(!st.blocks_writers());

    let _guard = store.lock(SESSION, "write").expect("takeover");
    assert_eq!(row_holder(&store), Some(Holder::current().to_string()));
}

#[cfg(target_os = "linux")]
#[test]
fn reused_pid_or_other_boot_is_not_the_holder() {
    let me = Holder::current();
    assert_eq!(me.liveness(), Liveness::Alive);
    let start = me.start_ticks().expect("start time on Linux");
    let boot = me.boot_id().expect("boot id on Linux");
    let pid = me.pid();

    let reused =
        Holder::parse(&format!("pid:{pid};start:{};boot:{boot}", start + 1)).expect("parse");
    assert_eq!(reused.liveness(), Liveness::NotAlive);
    let earlier_boot = Holder::parse(&format!(
        "pid:{pid};start:{start};boot:00000000-0000-0000-0000-000000000000"
    ))
    .expect("parse");
    assert_eq!(earlier_boot.liveness(), Liveness::NotAlive);
    let no_start = Holder::parse(&format!("pid:{pid}")).expect("parse");
    assert_eq!(
        no_start.liveness(),
        Liveness::Unknown,
        "a live pid may be reused"
    );
    let other_ns =
        Holder::parse(&format!("pid:{pid};start:{start};boot:{boot};pidns:1")).expect("parse");
    assert_eq!(other_ns.liveness(), Liveness::Unknown);

    let (_dir, path) = db();
    let store = store(&path);
    plant(&open(&path), &reused.to_string(), now_ms());
    let guard = store
        .lock(SESSION, "write")
        .expect("reused pid is taken over");
    assert_eq!(guard.holder(), me.to_string());
}

#[cfg(target_os = "linux")]
#[test]
fn holder_identity_survives_odd_process_names() {
    // comm may contain spaces and parentheses; the start time must still be found.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let odd = dir.path().join("a) b (c");
    std::fs::copy("/bin/sleep", &odd).expect("copy sleep");
    let child = Proc::spawn(Command::new(&odd).arg("30"));
    let pid = child.0.id();
    // `spawn` returns after the exec, so the name is already the odd one.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_comm = stat
        .strip_prefix(&format!("{pid} (a) b (c) "))
        .unwrap_or_else(|| panic!("unexpected stat line: {stat}"));
    let start: u64 = after_comm
        .split(' ')
        .nth(22 - 3)
        .expect("field 22")
        .parse()
        .expect("ticks");

    let holder = child.holder();
    assert_eq!(holder.start_ticks(), Some(start));
    assert_eq!(holder.liveness(), Liveness::Alive);
    child.end();
    assert_eq!(holder.liveness(), Liveness::NotAlive);
}

#[test]
fn current_holder_round_trips() {
    let me = Holder::current();
    let text = me.to_string();
    assert!(
        text.starts_with(&format!("pid:{};", std::process::id()))
            || text == format!("pid:{}", std::process::id())
    );
    assert_eq!(Holder::parse(&text), Some(me));
}

#[cfg(target_os = "linux")]
#[test]
fn lease_expiry_frees_even_a_live_holder() {
    let (_dir, path) = db();
    let store = store(&path);
    let conn = open(&path);
    let other = Proc::sleep();
    let holder = other.holder().to_string();
    let me = Holder::current();
    let now = now_ms();
    assert_eq!(LEASE.as_millis(), 60_000);

    plant(&conn, &holder, now - 59_000);
    let err = lock_error(store.lock_as(SESSION, "write", now, &me));
    assert!(
        matches!(&err, LockError::Held { reason, .. } if reason.contains("expires in 1 s")),
        "{err}"
    );
    let st = store
        .lock_status_at(SESSION, now)
        .expect("status")
        .expect("row");
    assert!(!st.lease_expired && st.blocks_writers());
    assert_eq!(st.age.as_millis(), 59_000);

    plant(&conn, &holder, now - 60_000);
    let st = store
        .lock_status_at(SESSION, now)
        .expect("status")
        .expect("row");
    assert!(st.lease_expired && !st.blocks_writers());
    assert_eq!(st.liveness, Liveness::Alive);
    drop(
        store
            .lock_as(SESSION, "write", now, &me)
            .expect("at exactly 60 s"),
    );

    plant(&conn, &holder, now - 61_000);
    let guard = store
        .lock_as(SESSION, "write", now, &me)
        .expect("after 61 s");
    assert_eq!(guard.acquired_at_ms(), now);
    assert_eq!(row_holder(&store), Some(me.to_string()));
    drop(guard);
    other.end();
}

#[test]
fn unknown_holder_is_refused_until_its_lease_expires() {
    let (_dir, path) = db();
    let store = store(&path);
    let conn = open(&path);
    let me = Holder::current();
    let now = now_ms();
    for foreign in ["pid:abc", "host=build-7,pid=1234", "pid:1;lock:v9"] {
        plant(&conn, foreign, now - 1_000);
        let err = lock_error(store.lock_as(SESSION, "patch", now, &me));
        match &err {
            LockError::Held {
                initiator,
                liveness,
                action,
                ..
            } => {
                assert_eq!(initiator, foreign);
                assert_eq!(*liveness, Liveness::Unknown);
                assert_eq!(action, "patch");
            }
            other => panic!("expected Held, got {other:?}"),
        }
        assert!(err.to_string().contains("(unknown)"), "{err}");

        plant(&conn, foreign, now - 61_000);
        let guard = store.lock_as(SESSION, "patch", now, &me).expect("expired");
        assert!(guard.release().expect("release"));
    }
}

/// Work under the lock that fails half-way (here: its session file is missing).
fn protected_operation(store: &Store, dir: &Path) -> Result<(), Box<dyn Error>> {
    let _guard = store.lock(SESSION, "write")?;
    let _log = SessionLog::open(dir.join("no-such-session.jsonl"))?;
    Ok(())
}

#[test]
fn guard_releases_on_drop_error_and_panic() {
    let (dir, path) = db();
    let store = store(&path);
    {
        let _guard = store.lock(SESSION, "write").expect("acquire");
        assert!(row_holder(&store).is_some());
    }
    assert_eq!(row_holder(&store), None, "released on drop");

    assert!(
        protected_operation(&store, dir.path()).is_err(),
        "the operation fails"
    );
    assert_eq!(row_holder(&store), None, "released on the error path");

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _guard = store.lock(SESSION, "write").expect("acquire");
        panic!("the protected operation panics");
    }));
    assert!(panicked.is_err());
    assert_eq!(row_holder(&store), None, "released while unwinding");
}

#[test]
fn release_spares_a_row_that_is_no_longer_ours() {
    let (_dir, path) = db();
    let store = store(&path);
    let mut guard = store.lock(SESSION, "write").expect("acquire");
    guard.renew().expect("renew while held");

    // Another writer took over after the lease expired.
    plant(&open(&path), "pid:abc", now_ms());
    match lock_error(guard.renew()) {
        LockError::Lost { now_held_by, .. } => {
            assert_eq!(now_held_by.as_deref(), Some("pid:abc"));
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(
        !guard.release().expect("release"),
        "nothing of ours to delete"
    );
    assert_eq!(
        row_holder(&store).as_deref(),
        Some("pid:abc"),
        "the new holder keeps it"
    );

    let mut guard = store
        .lock_as(SESSION, "write", now_ms() + 61_000, &Holder::current())
        .expect("takeover");
    assert!(store.clear_lock(SESSION).expect("clear"));
    assert!(matches!(
        lock_error(guard.renew()),
        LockError::Lost {
            now_held_by: None,
            ..
        }
    ));
}

/// `peek_lock_status` is what `status` uses: it never creates the database, nor (on a
/// database without one) the lock table, so it works read-only.
#[test]
fn peeking_at_the_lock_creates_nothing() {
    let (_dir, path) = db();
    let store = Store::at(&path).expect("store");
    assert_eq!(
        store.peek_lock_status(SESSION).expect("peek"),
        Peeked::NoDatabase
    );
    assert!(!path.exists(), "peeking created the database");

    store.connect().expect("create the database");
    assert_eq!(
        store.peek_lock_status(SESSION).expect("peek"),
        Peeked::NoRow
    );

    // A database of ours without the lock table (as before any writer used it): peeking
    // reads it as holding no row and creates nothing.
    let conn = open(&path);
    conn.execute_batch("DROP TABLE write_lock")
        .expect("drop the table");
    let tables = table_count(&conn);
    assert_eq!(
        store.peek_lock_status(SESSION).expect("peek"),
        Peeked::NoRow
    );
    assert_eq!(table_count(&conn), tables, "peeking created something");

    // Opened for writing, the store creates the table again; a row shows read-only.
    let store = self::store(&path);
    plant(&conn, "pid:abc", now_ms());
    let st = store
        .peek_lock_status(SESSION)
        .expect("peek")
        .row()
        .expect("row");
    assert_eq!(st.holder, "pid:abc");
    assert_eq!(st.liveness, Liveness::Unknown);
}

#[test]
fn status_reads_a_table_with_only_the_spec_columns() {
    let (_dir, path) = db();
    // A database that an older writer left: nothing but the lock table of docs/spec.md §6.
    let conn = open(&path);
    conn.execute_batch(
        "CREATE TABLE write_lock (session_id TEXT PRIMARY KEY, holder TEXT NOT NULL,
                                  acquired_at INTEGER NOT NULL);",
    )
    .expect("old schema");
    conn.execute(
        "INSERT INTO write_lock VALUES (?1, 'pid:abc', ?2)",
        params![SESSION, now_ms()],
    )
    .expect("insert");
    let store = Store::at(&path).expect("store");
    let st = store
        .peek_lock_status(SESSION)
        .expect("peek")
        .row()
        .expect("row");
    assert_eq!((st.holder.as_str(), st.action), ("pid:abc", None));

    let now = now_ms() + 61_000;
    let guard = store
        .lock_as(SESSION, "write", now, &Holder::current())
        .expect("the store takes the database and upgrades the table");
    let st = store
        .lock_status_at(SESSION, now)
        .expect("status")
        .expect("row");
    assert_eq!(st.action.as_deref(), Some("write"));
    assert_eq!(st.holder, guard.holder());
}

#[test]
fn clear_removes_any_holder() {
    let (_dir, path) = db();
    let store = store(&path);
    plant(&open(&path), "pid:abc", now_ms());
    assert!(store.clear_lock(SESSION).expect("clear"));
    assert_eq!(row_holder(&store), None);
    assert!(!store.clear_lock(SESSION).expect("clear again"));
}

#[cfg(target_os = "linux")]
#[test]
fn racing_writers_on_two_stores_exactly_one_wins() {
    let (_dir, path) = db();
    let (a, b) = (Proc::sleep(), Proc::sleep());
    let holders = [a.holder(), b.holder()];
    for round in 0..25 {
        let barrier = Arc::new(Barrier::new(2));
        // Both stores (each with its own connection) are opened here, one after the
        // other: two threads switching a new database to WAL at once can fail at once,
        // and a thread that panics before the barrier would leave the other waiting there
        // forever.
        let stores = [store(&path), store(&path)];
        let threads = holders
            .clone()
            .into_iter()
            .zip(stores)
            .map(|(holder, store)| {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    let result = store.lock_as(SESSION, "write", now_ms(), &holder);
                    let won = match &result {
                        Ok(_) => true,
                        Err(session_state::Error::Lock(e))
                            if matches!(**e, LockError::Held { .. }) =>
                        {
                            false
                        }
                        Err(e) => panic!("unexpected error: {e}"),
                    };
                    // The winner holds the lock until the loser has tried.
                    barrier.wait();
                    drop(result);
                    won
                })
            });
        let threads: Vec<_> = threads.collect();
        let wins: Vec<bool> = threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect();
        assert_eq!(
            wins.iter().filter(|&&w| w).count(),
            1,
            "round {round}: {wins:?}"
        );
        assert_eq!(
            row_holder(&store(&path)),
            None,
            "round {round}: winner released"
        );
    }
    a.end();
    b.end();
}

// ---------------------------------------------------------------------------------------
// Every refusal's hint names what blocks and a command that clears it
// ---------------------------------------------------------------------------------------

/// A session file with one user message in `dir`, and its id.
fn session_file(dir: &Path) -> (PathBuf, String) {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, "/proj")
        .expect("create session");
    log.append(NewEntry::message(
        serde_json::json!({"role": "user", "content": "hints"}),
    ))
    .expect("append");
    (log.path().to_path_buf(), log.session_id().to_owned())
}

/// `session-state write <file> --plugin hint --value <value> --db <db>`: whether it
/// succeeded, and its stderr.
fn cli_write(file: &Path, db: &Path, value: u32) -> (bool, String) {
    let out = common::cli()
        .arg("write")
        .arg(file)
        .args(["--plugin", "hint", "--value", &value.to_string(), "--db"])
        .arg(db)
        .output()
        .expect("run session-state write");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The two commands a row's refusal offers, after "delete its row in the table <table>: ".
fn row_hint_commands(message: &str, table: &str) -> [String; 2] {
    let marker = format!("delete its row in the table {table}: ");
    let (_, commands) = message
        .split_once(&marker)
        .unwrap_or_else(|| panic!("the hint does not name the table {table}: {message}"));
    let (force_refresh, sqlite) = commands
        .split_once("  or  ")
        .unwrap_or_else(|| panic!("two commands: {message}"));
    [force_refresh.trim().to_owned(), sqlite.trim().to_owned()]
}

/// Runs `command` as a user pasting it would: in `sh`, with the binary under test on
/// `PATH` as `session-state`, and nothing else of the environment.
fn run_hint(command: &str) {
    let bin = Path::new(common::BIN)
        .parent()
        .expect("the binary's directory");
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let out = Command::new("sh")
        .arg("-c")
        .arg(command)
        .env_clear()
        .env("PATH", path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run sh -c {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// For each of the two commands of a row's refusal: `plant` leaves the row of a live
/// process (a `sleep`) in `table`; the command line's write is refused, naming the table
/// (and `check` looks at the message); the command, run as printed, deletes the row; the
/// write then goes through.
fn each_hint_command_clears(
    table: &str,
    plant: impl Fn(&Path, &str, &Path, &Holder),
    check: impl Fn(&str),
) {
    assert_sqlite3_cli();
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, id) = session_file(dir.path());
    let db = dir.path().join("states.sqlite");
    assert!(
        cli_write(&file, &db, 0).0,
        "a first write creates the database"
    );
    let rows = |conn: &Connection| -> i64 {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .expect("count")
    };
    for (which, value) in [(0, 1), (1, 2)] {
        let holder = Proc::sleep();
        plant(&db, &id, &file, &holder.holder());
        let (ok, refusal) = cli_write(&file, &db, value);
        assert!(!ok && refusal.contains("write refused"), "{refusal}");
        assert!(refusal.contains(&holder.holder().to_string()), "{refusal}");
        check(&refusal);
        let commands = row_hint_commands(&refusal, table);
        assert!(
            commands[0].starts_with("session-state force-refresh --yes --db "),
            "{commands:?}"
        );
        assert!(
            commands[1].starts_with("sqlite3 ")
                && commands[1].contains(&format!("DELETE FROM {table} WHERE session_id")),
            "{commands:?}"
        );
        run_hint(&commands[which]);
        assert_eq!(rows(&open(&db)), 0, "{commands:?}");
        let (ok, err) = cli_write(&file, &db, value);
        assert!(ok, "after {:?}: {err}", commands[which]);
        holder.end();
    }
}

/// A live holder's `write_lock` row refuses the command line's write; the hint names the
/// table, and each of its two commands (`force-refresh --yes`, `sqlite3`), run as
/// printed, deletes the row, after which the write goes through.
#[cfg(target_os = "linux")]
#[test]
fn each_command_in_a_lock_rows_hint_clears_it() {
    let plant = |db: &Path, id: &str, _: &Path, holder: &Holder| {
        let other = store(db);
        let guard = other
            .lock_as(id, "patch", now_ms(), holder)
            .expect("the other holder's row");
        std::mem::forget(guard);
    };
    each_hint_command_clears("write_lock", plant, |refusal| {
        assert!(refusal.contains("(it is doing: patch)"), "{refusal}");
    });
}

/// A running Pi's presence row refuses the command line's write. The hint used to offer
/// `DELETE FROM write_lock …`, which deleted nothing; it names `pi_presence` now, and
/// each of its two commands, run as printed, deletes that row, after which the write
/// goes through.
#[cfg(target_os = "linux")]
#[test]
fn each_command_in_a_pi_presence_refusals_hint_clears_it() {
    let plant = |db: &Path, id: &str, file: &Path, pi: &Holder| {
        let conn = open(db);
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS pi_presence (session_id TEXT PRIMARY KEY, holder TEXT \
             NOT NULL, since INTEGER NOT NULL, session_file TEXT)",
        )
        .expect("the Pi package's table");
        conn.execute(
            "INSERT OR REPLACE INTO pi_presence VALUES (?1, ?2, ?3, ?4)",
            params![id, pi.to_string(), now_ms(), file.to_string_lossy()],
        )
        .expect("a running Pi's row");
    };
    each_hint_command_clears("pi_presence", plant, |refusal| {
        assert!(refusal.contains("a running Pi"), "{refusal}");
        assert!(!refusal.contains("write_lock"), "{refusal}");
    });
}

/// Another process holds the session file's advisory lock (a writer stuck between its
/// check and its append, played by `examples/writer.rs --hold-file`): a write that will
/// not wait is refused, naming the file and that process; the hint's command, run as
/// printed, ends it, and the write then goes through.
#[cfg(target_os = "linux")]
/// Another process (`examples/writer --hold-file`) holding `file`'s lock until its stdin
/// closes, once it says so.
fn holding_the_file(file: &Path, dir: &Path) -> std::process::Child {
    use std::io::BufRead;
    let mut holder = Command::new(common::examples::example("writer"))
        .arg(file)
        .arg(dir.join("holder.sqlite"))
        .args(["hint", "0", "--hold-file"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the holder");
    assert_eq!(line.trim_end(), "HOLDING");
    holder
}

#[test]
fn the_command_in_a_file_lock_refusals_hint_clears_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = session_file(dir.path());
    let file = std::fs::canonicalize(file).expect("canonical");
    let db = dir.path().join("states.sqlite");
    let mut holder = holding_the_file(&file, dir.path());
    let (fs, _) = Hooked::watching(false);
    let state: SessionState<serde_json::Value> =
        Store::open(StoreOptions::new().database_path(&db).file_system(fs))
            .and_then(|store| store.state("hint", Scope::Branch))
            .expect("state");
    let before = std::fs::read(&file).expect("read");
    let refused = state
        .write(On::file(&file, None), &serde_json::json!(1))
        .expect_err("the file is locked");
    let message = refused.to_string();
    let session_state::Error::Lock(e) = refused else {
        panic!("{message}")
    };
    let LockError::FileHeld { object, pid, .. } = *e else {
        panic!("{message}")
    };
    assert_eq!(object, file);
    assert_eq!(pid, Some(holder.id()), "{message}");
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert_eq!(
        std::fs::read(&file).expect("read"),
        before,
        "nothing written"
    );
    let (_, command) = message
        .split_once("when it exits): ")
        .unwrap_or_else(|| panic!("a command: {message}"));
    assert_eq!(command, format!("kill {}", holder.id()));
    run_hint(command);
    holder.wait().expect("the holder ended");
    state
        .write(On::file(&file, None), &serde_json::json!(1))
        .expect("the lock is gone")
        .expect("appended");
}

/// A log's own append refused by another process's hold on the session file is the
/// log's error, `AppendError::Held` with the four-element `LockError::FileHeld`, and it is
/// `Error::Lock` in the crate's one error, as every lock refusal. Nothing is written.
#[test]
fn a_log_append_refused_by_a_held_file_is_the_logs_error_and_a_lock_error_in_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = session_file(dir.path());
    let file = std::fs::canonicalize(file).expect("canonical");
    let mut holder = holding_the_file(&file, dir.path());
    let before = std::fs::read(&file).expect("read");
    let mut log = SessionLog::open(&file).expect("open");
    let refused: AppendError = log
        .append(NewEntry::custom("x", Some(serde_json::json!(1))))
        .expect_err("the file is held");
    let message = refused.to_string();
    let AppendError::Held(e) = &refused else {
        panic!("not the held file: {message}")
    };
    let LockError::FileHeld { object, pid, .. } = &**e else {
        panic!("{message}")
    };
    assert_eq!(*object, file);
    assert_eq!(*pid, Some(holder.id()), "{message}");
    let as_error = session_state::Error::from(refused);
    assert!(
        matches!(&as_error, session_state::Error::Lock(e) if matches!(**e, LockError::FileHeld { .. })),
        "{as_error}"
    );
    assert_eq!(as_error.to_string(), message, "the same message");
    assert_eq!(
        std::fs::read(&file).expect("read"),
        before,
        "nothing written"
    );
    holder.kill().expect("end the holder");
    holder.wait().expect("the holder ended");
}

/// The hint tests run the `sqlite3` program as printed: it must be installed.
fn assert_sqlite3_cli() {
    let found = Command::new("sqlite3")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "these tests run the sqlite3 command line program: install it"
    );
}
