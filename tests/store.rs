//! The store handle: one `Store` owns the connection and the fold memo of every log it
//! reads; state keys are cheap and share it; a library read through the projection does
//! not parse the log.

use crate::common;

use serde_json::{Value, json};
use session_state::{LogOptions, Materialize, NewEntry, Scope, SessionLog, SessionState, Store};
use std::path::Path;

fn session(dir: &Path, name: &str) -> SessionLog {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .session_id(format!("0195f1d0-7c4e-7000-8000-00000000000{name}"))
        .create(dir, "/proj")
        .expect("create");
    log.append(NewEntry::message(json!({"role": "user", "content": name})))
        .expect("append");
    log
}

#[test]
fn the_store_and_its_keys_are_send_sync_and_cheap_to_clone() {
    fn send_sync<T: Send + Sync + Clone>() {}
    send_sync::<Store>();
    send_sync::<SessionState<Value>>();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("states.sqlite");
    let store = common::open_store(&db).expect("store");
    let todo = store.state::<Value>("todo", Scope::Branch).expect("key");
    let mut log = session(dir.path(), "1");
    todo.write(&mut log, &json!("a")).expect("write");
    let before = database_fds(dir.path());
    assert!(before > 0, "the store holds its database open");
    // Clones of the store and of the key, each used: no clone opens the database again.
    let stores: Vec<Store> = (0..20).map(|_| store.clone()).collect();
    let keys: Vec<SessionState<Value>> = (0..20).map(|_| todo.clone()).collect();
    for (s, k) in stores.iter().zip(&keys) {
        s.connect().expect("connect");
        assert_eq!(k.read(&log).expect("read"), Some(json!("a")));
    }
    assert_eq!(
        database_fds(dir.path()),
        before,
        "a clone opened the database"
    );
    // They share one projection connection: a catch-up through one clone is the last
    // catch-up of all of them.
    let done = stores[7].catch_up(log.path()).expect("catch up");
    for s in std::iter::once(&store).chain(&stores) {
        assert_eq!(s.last_catch_up(), Some(done));
    }
    // Unlike a second store on the same database, which has a connection of its own.
    let other = common::open_store(&db).expect("another store");
    other.connect().expect("connect");
    assert!(
        database_fds(dir.path()) > before,
        "the count sees a new connection"
    );
    assert_eq!(other.last_catch_up(), None);
}

/// How many of this process's file descriptors are open on `states.sqlite*` in `dir`
/// (the database and its WAL and shared-memory files).
fn database_fds(dir: &Path) -> usize {
    let dir = dir.canonicalize().expect("canonical dir");
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| {
            target.parent() == Some(dir.as_path())
                && target
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("states.sqlite"))
        })
        .count()
}

#[test]
fn one_store_keeps_the_folds_of_each_log_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = common::open_store(&dir.path().join("states.sqlite")).expect("store");
    let todo = store.state::<Value>("todo", Scope::Branch).expect("key");
    let mut a = session(dir.path(), "1");
    let mut b = session(dir.path(), "2");
    todo.write(&mut a, &json!("a")).expect("write a");
    todo.write(&mut b, &json!("b")).expect("write b");
    // Reads memoized on the one store: each log gets its own value.
    for _ in 0..2 {
        assert_eq!(todo.read(&a).expect("read a"), Some(json!("a")));
        assert_eq!(todo.read(&b).expect("read b"), Some(json!("b")));
    }
    // A key made later, and a clone, share the memo and agree.
    let again = store.state::<Value>("todo", Scope::Branch).expect("key");
    assert_eq!(again.read(&a).expect("read"), Some(json!("a")));
    assert_eq!(todo.clone().read(&b).expect("read"), Some(json!("b")));
}

#[test]
fn a_dropped_logs_memo_never_answers_for_another_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = common::open_store(&dir.path().join("states.sqlite")).expect("store");
    let todo = store.state::<Value>("todo", Scope::Branch).expect("key");
    // Many logs opened and dropped in turn: an allocator that reuses the address of a
    // dropped log's identity must not hand its memo to the next log.
    for i in 0..50 {
        let sub = dir.path().join(i.to_string());
        std::fs::create_dir(&sub).expect("mkdir");
        let mut log = session(&sub, "3");
        assert_eq!(todo.read(&log).expect("read"), None, "log {i} starts empty");
        todo.write(&mut log, &json!(i)).expect("write");
        assert_eq!(todo.read(&log).expect("read"), Some(json!(i)));
        let reopened = SessionLog::open(log.path()).expect("reopen");
        drop(log);
        assert_eq!(todo.read(&reopened).expect("read"), Some(json!(i)));
    }
}

#[test]
fn a_library_read_of_an_unchanged_file_reads_none_of_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("states.sqlite");
    let mut log = session(dir.path(), "4");
    let todo = Store::at(&db)
        .and_then(|s| s.state::<Value>("todo", Scope::Branch))
        .expect("key");
    for i in 0..100 {
        log.append(NewEntry::message(json!({"role": "user", "content": i})))
            .expect("append");
    }
    todo.write(&mut log, &json!({"n": 1})).expect("write");
    let path = log.path().to_path_buf();
    // The write leaves the projection to the next reader: this one builds it.
    assert_eq!(todo.read(&path).expect("read"), Some(json!({"n": 1})));
    drop((log, todo));
    // A new store (a new connection, as in a new process): the value comes from the
    // projection; no byte of the file after the watermark is parsed, and only the
    // digest spans and the folded events are checked.
    let store = Store::at(&db).expect("store");
    let todo = store.state::<Value>("todo", Scope::Branch).expect("key");
    assert_eq!(todo.read(&path).expect("read"), Some(json!({"n": 1})));
    let c = store.last_catch_up().expect("the read caught up first");
    assert_eq!(
        (c.rebuilt, c.bytes_read, c.entries_added),
        (false, 0, 0),
        "{c:?}"
    );
    // And at an entry, by id.
    let log = SessionLog::open(&path).expect("open");
    let first = log.entries().next().expect("an entry").id().to_owned();
    assert_eq!(todo.read_at(&path, &first).expect("read"), None);
}

#[test]
fn force_refresh_clears_the_lock_row_drops_the_caches_and_rereads_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("states.sqlite");
    let store = common::open_store(&db).expect("store");
    let todo = store.state::<Value>("todo", Scope::Branch).expect("key");
    let mut log = session(dir.path(), "5");
    todo.write(&mut log, &json!("mine")).expect("write");
    // A row left standing (as a crashed holder's would be), and a write by another
    // process that this log has not read.
    std::mem::forget(store.lock(log.session_id(), "write").expect("lock"));
    let mut other = SessionLog::open(log.path()).expect("open");
    let theirs = Store::at(dir.path().join("other.sqlite"))
        .and_then(|s| s.state::<Value>("todo", Scope::Branch))
        .expect("key");
    theirs.write(&mut other, &json!("theirs")).expect("write");
    assert_eq!(
        todo.read(&log).expect("read"),
        Some(json!("mine")),
        "not re-read yet"
    );

    assert!(
        store.force_refresh(&mut log).expect("force refresh"),
        "a row was cleared"
    );
    assert_eq!(store.lock_status(log.session_id()).expect("status"), None);
    assert_eq!(log.len(), other.len(), "the file was re-read");
    assert_eq!(todo.read(&log).expect("read"), Some(json!("theirs")));
    // The projection's rows were dropped: the next read rebuilds them from the file.
    assert_eq!(todo.read(log.path()).expect("read"), Some(json!("theirs")));
    assert!(store.last_catch_up().expect("caught up").rebuilt);
    assert!(
        !store.force_refresh(&mut log).expect("again"),
        "no row the second time"
    );
}

/// What a write leaves in the fold memo (the value after its event, so the next read at
/// the new leaf neither parses the line nor applies the event again) is what a log
/// opened afresh folds from the file: in both scopes, on a fork, with others' entries and
/// another plugin's events between the writes, and after navigating back.
#[test]
fn the_value_a_write_leaves_in_memory_is_the_value_folded_from_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = common::open_store(&dir.path().join("states.sqlite")).expect("store");
    let branch = store.state::<Value>("p", Scope::Branch).expect("key");
    let session_key = store.state::<Value>("p", Scope::Session).expect("key");
    let other = store.state::<Value>("q", Scope::Branch).expect("key");
    let mut log = session(dir.path(), "7");
    let fresh = |log: &SessionLog, key: &SessionState<Value>| {
        // Another store (no memo) on a log read from the file, at the same leaf.
        let fdir = tempfile::tempdir().expect("tempdir");
        let s = common::open_store(&fdir.path().join("f.sqlite")).expect("store");
        let k = s.state::<Value>("p", key.scope()).expect("key");
        let mut l = SessionLog::open(log.path()).expect("open");
        match log.leaf_id() {
            Some(id) => l.navigate(id).expect("navigate"),
            None => l.reset_leaf(),
        }
        k.read(&l).expect("read")
    };
    let mut fork_at = None;
    for i in 0..24u32 {
        let key = if i % 3 == 2 { &session_key } else { &branch };
        let wrote = match i % 4 {
            0 => key.write(&mut log, &json!({"i": i, "list": [i, "x"]})),
            1 => key.patch(&mut log, &json!({"p": i, "i": null})),
            2 => key.drop(&mut log),
            _ => key.patch(&mut log, &json!({"deep": {"n": i}})),
        }
        .expect("write");
        for k in [&branch, &session_key] {
            assert_eq!(
                k.read(&log).expect("read"),
                fresh(&log, k),
                "step {i} {:?}",
                k.scope()
            );
        }
        if wrote.is_some() && i == 9 {
            fork_at = log.leaf_id().map(str::to_owned);
        }
        if i % 5 == 4 {
            log.append(NewEntry::message(
                json!({"role": "assistant", "content": "ok"}),
            ))
            .expect("append");
            other.write(&mut log, &json!(i)).expect("write q");
        }
        if i == 15 {
            // A fork: back to an earlier own event, and on from there.
            log.navigate(fork_at.as_deref().expect("a write at step 9"))
                .expect("navigate");
        }
    }
}
