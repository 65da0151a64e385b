//! The persistence seam with its Pi JSONL backend: Pi's layout, lazy creation,
//! contiguous sequence numbers, refusals that write nothing, durable closing of an
//! interrupted turn, and header-only listing. Each test runs on its own temporary
//! sessions directory; the last one has the real Pi (both majors) list and read what the
//! store wrote.

use crate::common;

use serde_json::{Value, json};
use session_state::{
    AppendError, Error, Header, InvalidLog, InvalidSessionId, LogError, OpenError, RuleError,
    SessionLog, StoreError,
};
use session_state::{PiJsonlStore, SessionStore, Sessions, format::INTERRUPTED_TOOL_RESULT};
use std::io::Write;
use std::path::{Path, PathBuf};

const ID: &str = "0195f1d0-7c4e-7000-8000-000000000001";
const STAMP: &str = "2024-12-03T14:00:00.000Z";

fn header(id: &str, cwd: &str) -> Header {
    Header::new(id, cwd).with_timestamp(STAMP)
}

/// [`header`] edited into one this crate never makes for a new session (another version,
/// no `cwd` or `timestamp`), as a host may hold one: through the header's serde form.
fn header_with(id: &str, cwd: &str, edit: impl FnOnce(&mut Value)) -> Header {
    let mut value = serde_json::to_value(header(id, cwd)).expect("serialize");
    edit(&mut value);
    serde_json::from_value(value).expect("a header")
}

fn user(text: &str) -> Value {
    json!({"type": "message",
           "message": {"role": "user", "content": text, "timestamp": 1733234401000u64}})
}

/// An assistant message calling `calls` (tool call id, tool name).
fn assistant(calls: &[(&str, &str)], stop: &str) -> Value {
    let mut content = vec![json!({"type": "text", "text": "Let me look."})];
    for (id, name) in calls {
        content.push(json!({"type": "toolCall", "id": id, "name": name,
                            "arguments": {"path": "README.md"}}));
    }
    json!({"type": "message",
           "message": {"role": "assistant", "content": content, "api": "anthropic-messages",
                       "provider": "anthropic", "model": "claude-sonnet-4-5",
                       "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0,
                                 "totalTokens": 2,
                                 "cost": {"input": 0, "output": 0, "cacheRead": 0,
                                          "cacheWrite": 0, "total": 0}},
                       "stopReason": stop, "timestamp": 1733234402000u64}})
}

fn tool_result(call: &str, name: &str) -> Value {
    json!({"type": "message",
           "message": {"role": "toolResult", "toolCallId": call, "toolName": name,
                       "content": [{"type": "text", "text": "ok"}], "isError": false,
                       "timestamp": 1733234403000u64}})
}

fn custom(n: u64) -> Value {
    json!({"type": "custom", "customType": "host/note", "data": {"n": n}})
}

/// The sessions of a file backend on `root`.
fn on(root: impl Into<PathBuf>) -> Sessions {
    Sessions::new(PiJsonlStore::new(root))
}

/// Where the file backend keeps a session (no I/O).
fn locate(root: &Path, h: &Header) -> Option<PathBuf> {
    PiJsonlStore::new(root).locate(h)
}

/// A store on a fresh sessions directory holding one session with `events`.
fn store_with(events: &[Value]) -> (tempfile::TempDir, Sessions, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = on(dir.path().join("sessions"));
    let h = header(ID, "/home/me/project");
    let path = locate(&dir.path().join("sessions"), &h).expect("locate");
    store.create(h).expect("create");
    let next = store.append(ID, 0, events).expect("append");
    assert_eq!(next, events.len() as u64);
    (dir, store, path)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("read session file")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// An event as stored, without what the store assigned.
fn strip(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        for k in ["id", "parentId", "timestamp"] {
            m.remove(k);
        }
    }
    v
}

#[test]
fn store_is_a_thread_safe_trait_object() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PiJsonlStore>();
    assert_send_sync::<Sessions>();
    let dir = tempfile::tempdir().expect("tempdir");
    let backend: Box<dyn SessionStore> = Box::new(PiJsonlStore::new(dir.path()));
    assert!(backend.list().expect("list").is_empty());
    let store = Sessions::from_box(backend);
    assert!(store.list().expect("list").is_empty());
    // The serializing helper works through the trait object too.
    let err = store
        .append_serialized(ID, 0, &[user("hi")])
        .expect_err("unknown session");
    let root = format!("pi-jsonl {}", dir.path().display());
    assert!(
        matches!(&err, Error::Store(StoreError::NotFound { session_id, store })
            if session_id == ID && *store == root),
        "{err:?}"
    );
    assert!(err.to_string().contains(ID), "{err}");
    let err = store.load(ID).expect_err("unknown session");
    assert!(
        matches!(&err, Error::Store(StoreError::NotFound { .. })),
        "{err:?}"
    );
}

#[test]
fn locate_matches_pi_layout_without_io() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("never-created");
    let store = PiJsonlStore::new(&root);
    let file = format!("2024-12-03T14-00-00-000Z_{ID}.jsonl");
    let cases = [
        ("/home/me/project", "--home-me-project--"),
        (r"C:\Users\me\proj", "--C--Users-me-proj--"),
        ("/srv/a:b/c", "--srv-a-b-c--"),
        // Only one leading separator is stripped, as in Pi.
        ("//double/lead", "---double-lead--"),
        (r"\\server\share\x", "---server-share-x--"),
        ("/", "----"),
    ];
    for (cwd, folder) in cases {
        let got = store.locate(&header(ID, cwd)).expect("a path");
        assert_eq!(got, root.join(folder).join(&file), "cwd {cwd:?}");
    }
    assert!(!root.exists(), "locate must not touch the disk");
    // A header that cannot name a file has no location.
    let h = header_with(ID, "/p", |h| h["timestamp"] = Value::Null);
    assert_eq!(store.locate(&h), None);
    let h = header_with(ID, "/p", |h| h["cwd"] = Value::Null);
    assert_eq!(store.locate(&h), None);
    assert_eq!(store.locate(&header("../../etc/x", "/p")), None);
}

#[test]
fn created_session_is_absent_until_first_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("sessions");
    let store = on(&root);
    let h = header(ID, "/home/me/project");
    let path = locate(&root, &h).expect("locate");
    store.create(h.clone()).expect("create");

    assert!(store.list().expect("list").is_empty());
    assert!(!root.exists(), "create writes nothing");
    match store.load(ID) {
        Err(Error::Log(LogError::Rule(RuleError::NotMaterialized { session_id }))) => {
            assert_eq!(session_id, ID)
        }
        other => panic!("load of a never-appended session: {other:?}"),
    }
    // An empty batch is not a first append.
    assert_eq!(store.append(ID, 0, &[]).expect("empty append"), 0);
    assert!(store.list().expect("list").is_empty());
    assert!(!path.exists());

    assert_eq!(store.append(ID, 0, &[user("hello")]).expect("append"), 1);
    assert_eq!(store.list().expect("list"), vec![h.clone()]);
    assert!(path.exists(), "the file is where locate said");
    // Only the session file is in its folder: no temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(path.parent().expect("parent"))
        .expect("read dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![path.file_name().expect("name").to_owned()]);
    let log = SessionLog::open(&path).expect("open");
    assert_eq!(log.header(), &h);
    assert_eq!(log.len(), 1);

    // Creating it again is refused, in this store and in a fresh one.
    assert!(matches!(
        store.create(h.clone()),
        Err(Error::Store(StoreError::AlreadyExists { .. }))
    ));
    let other = on(&root);
    assert!(matches!(
        other.create(h),
        Err(Error::Store(StoreError::AlreadyExists { .. }))
    ));
}

#[test]
fn create_refuses_headers_that_cannot_be_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = on(dir.path());
    let v2 = header_with(ID, "/p", |h| h["version"] = json!(2));
    let err = store.create(v2).expect_err("refused");
    assert!(
        matches!(&err, Error::Log(LogError::Rule(RuleError::UnsupportedNewVersion { session_id, version: 2 })) if session_id == ID),
        "{err:?}"
    );
    assert!(err.to_string().contains("version"), "{err}");
    for id in ["a/b", ""] {
        let err = store.create(header(id, "/p")).expect_err("refused");
        assert!(
            matches!(&err, Error::Log(LogError::Rule(RuleError::InvalidSessionId(InvalidSessionId { session_id, max, .. }))) if session_id == id && *max == session_state::format::MAX_SESSION_ID_BYTES),
            "{err:?}"
        );
        assert!(err.to_string().contains("file name"), "{err}");
    }
    let no_cwd = header_with(ID, "/p", |h| h["cwd"] = Value::Null);
    let no_stamp = header_with(ID, "/p", |h| h["timestamp"] = Value::Null);
    for h in [no_cwd, no_stamp] {
        let err = store.create(h).expect_err("refused");
        assert!(
            matches!(&err, Error::Log(LogError::Rule(RuleError::UnlocatableHeader { session_id })) if session_id == ID),
            "{err:?}"
        );
        assert!(err.to_string().contains("cwd"), "{err}");
    }
    store.create(header(ID, "/p")).expect("create");
    let err = store.create(header(ID, "/p")).expect_err("twice");
    assert!(
        matches!(&err, Error::Log(LogError::Rule(RuleError::AlreadyCreated { session_id })) if session_id == ID),
        "{err:?}"
    );
    assert!(err.to_string().contains("already created"), "{err}");
}

#[test]
fn a_session_in_two_files_is_refused_naming_both() {
    let (_dir, store, path) = store_with(&[user("one")]);
    let root = dir_of(&path);
    let twin = root
        .join("--elsewhere--")
        .join(path.file_name().expect("name"));
    std::fs::create_dir_all(twin.parent().expect("folder")).expect("mkdir");
    std::fs::copy(&path, &twin).expect("copy");
    drop(store);
    let fresh = on(&root);
    let err = fresh.load(ID).expect_err("ambiguous");
    match &err {
        Error::Store(StoreError::Ambiguous { session_id, paths }) => {
            assert_eq!(session_id, ID);
            let mut paths = paths.clone();
            paths.sort();
            let mut both = vec![path.clone(), twin.clone()];
            both.sort();
            assert_eq!(paths, both);
        }
        other => panic!("expected AmbiguousSession, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(
        shown.contains(&*path.to_string_lossy()) && shown.contains(&*twin.to_string_lossy()),
        "{shown}"
    );
    let err = fresh.append(ID, 1, &[custom(1)]).expect_err("ambiguous");
    assert!(
        matches!(err, Error::Store(StoreError::Ambiguous { .. })),
        "{err:?}"
    );
}

#[test]
fn append_assigns_contiguous_sequence_numbers() {
    let (dir, store, path) = store_with(&[user("one"), custom(1)]);
    assert_eq!(store.append(ID, 2, &[custom(2)]).expect("append"), 3);

    for wrong in [0, 2, 5] {
        let err = store.append(ID, wrong, &[custom(9)]).expect_err("refused");
        assert!(
            matches!(&err, Error::Store(StoreError::SequenceMismatch { session_id, expected: 3, got })
                if session_id == ID && *got == wrong),
            "{err:?}"
        );
        let shown = err.to_string();
        assert!(
            shown.contains("expected first_seq 3") && shown.contains(&format!("got {wrong}")),
            "{shown}"
        );
    }
    assert_eq!(lines(&path).len(), 4, "header + 3 entries: nothing written");

    // Each event is a child of the one before: one linear branch.
    let log = SessionLog::open(&path).expect("open");
    let ids: Vec<_> = log.entries().map(|e| e.id().to_owned()).collect();
    assert_eq!(
        log.branch(),
        ids.iter().map(String::as_str).collect::<Vec<_>>()
    );

    // A store that starts afresh (another process, a restart) continues the numbering.
    let again = on(dir.path().join("sessions"));
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
    // The first store sees the other's appends before checking the sequence number.
    assert_eq!(store.append(ID, 5, &[custom(5)]).expect("append"), 6);
    assert_eq!(SessionLog::open(&path).expect("open").len(), 6);
}

/// A value whose serialization fails, as a map with non-string keys or a failing
/// `Serialize` impl would.
struct Unserializable;

impl serde::Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this value refuses to serialize"))
    }
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Event {
    Json(Value),
    Bad(Unserializable),
    Map(std::collections::HashMap<(u8, u8), u8>),
}

#[test]
fn unserializable_or_malformed_event_is_refused_naming_it() {
    let (_dir, store, path) = store_with(&[user("one")]);
    let before = std::fs::read(&path).expect("read");

    let err = store
        .append_serialized(ID, 1, &[Event::Json(custom(1)), Event::Bad(Unserializable)])
        .expect_err("refused");
    assert!(
        matches!(&err, Error::Log(LogError::Rule(RuleError::EventNotSerializable { session_id, index: 1, seq: 2, .. }))
            if session_id == ID),
        "{err:?}"
    );
    let shown = err.to_string();
    assert!(
        shown.contains("event 1 (seq 2)") && shown.contains("refuses to serialize"),
        "{shown}"
    );
    let map = Event::Map([((1, 2), 3)].into_iter().collect());
    let err = store.append_serialized(ID, 1, &[map]).expect_err("refused");
    assert!(
        matches!(
            err,
            Error::Log(LogError::Rule(RuleError::EventNotSerializable {
                index: 0,
                seq: 1,
                ..
            }))
        ),
        "{err:?}"
    );
    let shown = err.to_string();
    assert!(
        shown.contains("event 0 (seq 1)") && shown.contains("key"),
        "{shown}"
    );

    let malformed = [
        (json!([1, 2]), "not a JSON object"),
        (json!({"customType": "x"}), "no string `type`"),
        (json!({"type": "session", "version": 3}), "`session`"),
        (json!({"type": "custom", "id": "abcd1234"}), "`id`"),
        (json!({"type": "custom", "parentId": null}), "`parentId`"),
        (json!({"type": "custom", "timestamp": STAMP}), "`timestamp`"),
    ];
    for (bad, why) in malformed {
        let err = store
            .append(ID, 1, &[custom(1), bad.clone()])
            .expect_err("refused");
        match &err {
            Error::Log(LogError::Rule(RuleError::InvalidEvent {
                session_id,
                index: 1,
                seq: 2,
                detail,
            })) if session_id == ID => assert!(detail.contains(why), "{bad}: {detail}"),
            other => panic!("{bad}: expected InvalidEvent, got {other:?}"),
        }
        assert!(err.to_string().contains("event 1 (seq 2)"), "{err}");
    }
    assert_eq!(
        std::fs::read(&path).expect("read"),
        before,
        "nothing written"
    );

    // A new session refused on its first append stays absent.
    store.create(header("fresh", "/p")).expect("create");
    store
        .append_serialized("fresh", 0, &[Event::Bad(Unserializable)])
        .expect_err("refused");
    let ids: Vec<_> = store
        .list()
        .expect("list")
        .into_iter()
        .map(|h| h.id().to_owned())
        .collect();
    assert_eq!(ids, vec![ID.to_string()]);
    // The serializing helper accepts what serializes.
    assert_eq!(
        store
            .append_serialized(ID, 1, &[Event::Json(custom(7))])
            .expect("append"),
        2
    );
}

#[test]
fn load_after_reopen_returns_the_same_entries() {
    let events = [user("one"), custom(1), assistant(&[], "stop"), custom(2)];
    let (dir, store, path) = store_with(&events);
    let written = SessionLog::open(&path).expect("open");
    let written_ids: Vec<_> = written.entries().map(|e| e.id().to_owned()).collect();
    drop(store);

    let store = on(dir.path().join("sessions"));
    let loaded = store.load(ID).expect("load");
    assert_eq!(loaded.header(), &header(ID, "/home/me/project"));
    assert_eq!(
        locate(&dir.path().join("sessions"), loaded.header()),
        Some(path.clone())
    );
    // Read from the store's lines: a detached log named by the store and the session.
    assert!(loaded.log().is_detached());
    assert!(
        loaded
            .log()
            .path()
            .to_string_lossy()
            .ends_with(&format!("#{ID}")),
        "{:?}",
        loaded.log().path()
    );
    assert_eq!(loaded.next_seq(), events.len() as u64);
    assert!(loaded.closed_tool_calls().is_empty());
    let ids: Vec<_> = loaded.log().entries().map(|e| e.id().to_owned()).collect();
    assert_eq!(ids, written_ids);
    for (seq, event) in events.iter().enumerate() {
        assert_eq!(
            &strip(loaded.event(seq as u64).expect("event")),
            event,
            "seq {seq}"
        );
    }
    let next = events.len() as u64;
    assert!(
        matches!(loaded.event(next), Err(LogError::Rule(RuleError::NoSuchEvent { seq, next_seq, .. }))
            if seq == next && next_seq == next),
        "past the end"
    );
    assert_eq!(lines(&path).len(), events.len() + 1, "load wrote nothing");
}

#[test]
fn interrupted_turn_is_closed_durably_once() {
    let (dir, store, path) = store_with(&[
        user("read two files"),
        assistant(&[("call_1", "read"), ("call_2", "grep")], "toolUse"),
        tool_result("call_1", "read"),
        custom(1),
    ]);
    drop(store);
    let store = on(dir.path().join("sessions"));
    let loaded = store.load(ID).expect("load");
    assert_eq!(loaded.closed_tool_calls(), ["call_2".to_string()]);
    assert_eq!(loaded.next_seq(), 5);
    let leaf_before = loaded
        .log()
        .path_to(loaded.log().leaf_id().expect("leaf"))
        .expect("path");
    assert_eq!(leaf_before.len(), 5);

    // On disk, not only in memory: a fresh reader sees it.
    let log = SessionLog::open(&path).expect("open");
    assert_eq!(log.len(), 5);
    let last = log.leaf_id().expect("leaf").to_owned();
    let line: Value = serde_json::from_str(&log.raw_line(&last).expect("raw")).expect("json");
    assert_eq!(line["type"], "message");
    assert_eq!(
        line["parentId"].as_str(),
        log.entry(&last).expect("e").parent_id()
    );
    let msg = &line["message"];
    assert_eq!(msg["role"], "toolResult");
    assert_eq!(msg["toolCallId"], "call_2");
    assert_eq!(msg["toolName"], "grep");
    assert_eq!(msg["isError"], true);
    assert_eq!(
        msg["content"],
        json!([{"type": "text", "text": INTERRUPTED_TOOL_RESULT}])
    );
    assert!(
        msg["timestamp"]
            .as_u64()
            .is_some_and(|t| t > 1_700_000_000_000)
    );

    // Closed once: a second load (in this store or another) appends nothing.
    let before = std::fs::read(&path).expect("read");
    for s in [&store, &on(dir.path().join("sessions"))] {
        let again = s.load(ID).expect("load");
        assert!(again.closed_tool_calls().is_empty());
        assert_eq!(again.next_seq(), 5);
    }
    assert_eq!(std::fs::read(&path).expect("read"), before);
    // The store keeps numbering after the closing results.
    assert_eq!(store.append(ID, 5, &[user("go on")]).expect("append"), 6);
}

#[test]
fn finished_turns_are_not_closed() {
    let cases: [(&str, Vec<Value>); 4] = [
        (
            "all results present",
            vec![
                assistant(&[("c1", "read"), ("c2", "read")], "toolUse"),
                tool_result("c2", "read"),
                tool_result("c1", "read"),
            ],
        ),
        (
            "an aborted assistant message (Pi drops it from the context)",
            vec![user("hi"), assistant(&[("c1", "read")], "aborted")],
        ),
        (
            "a user message after the call (Pi closes the turn in memory)",
            vec![assistant(&[("c1", "read")], "toolUse"), user("never mind")],
        ),
        (
            "the last assistant message made no tool call",
            vec![user("hi"), assistant(&[], "stop")],
        ),
    ];
    for (why, events) in cases {
        let (_dir, store, path) = store_with(&events);
        let before = std::fs::read(&path).expect("read");
        let loaded = store.load(ID).expect("load");
        assert!(loaded.closed_tool_calls().is_empty(), "{why}");
        assert_eq!(std::fs::read(&path).expect("read"), before, "{why}");
    }
}

#[test]
fn torn_final_record_is_discarded() {
    let events = [user("one"), custom(1)];
    let (_dir, store, path) = store_with(&events);
    let intact = store.load(ID).expect("load");
    let ids: Vec<_> = intact.log().entries().map(|e| e.id().to_owned()).collect();
    drop(intact);

    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open");
    f.write_all(br#"{"type":"custom","customType":"host/note","data":{"n":"#)
        .expect("tear");
    drop(f);

    let loaded = store.load(ID).expect("a torn tail loads");
    assert_eq!(loaded.next_seq(), 2);
    assert_eq!(
        loaded
            .log()
            .entries()
            .map(|e| e.id().to_owned())
            .collect::<Vec<_>>(),
        ids
    );
    assert!(
        SessionLog::open(&path).expect("open").tail_bytes() > 0,
        "the torn bytes are seen, and left alone"
    );
    drop(loaded);

    // Appending after it keeps the numbering; the torn bytes stay a skipped record.
    assert_eq!(store.append(ID, 2, &[custom(2)]).expect("append"), 3);
    let log = SessionLog::open(&path).expect("open");
    assert_eq!(log.len(), 3);
    assert_eq!(
        lines(&path).len(),
        5,
        "header, 2 entries, the torn record, the new entry"
    );
}

#[test]
fn corrupt_middle_line_is_refused_with_its_line_number() {
    let (_dir, _store, path) = store_with(&[user("one"), custom(1), custom(2)]);
    let mut l = lines(&path);
    l[2] = r#"{"type":"custom", oops "id":"deadbeef"}"#.into();
    std::fs::write(&path, l.join("\n") + "\n").expect("write");

    let fresh = on(dir_of(&path));
    match fresh.load(ID) {
        Err(Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Corrupt {
            path: p,
            at,
            ..
        })))) => {
            assert_eq!(p, path);
            assert_eq!(at.line, 3);
        }
        other => panic!("expected Corrupt at line 3, got {other:?}"),
    }
    let err = fresh.append(ID, 3, &[custom(3)]).expect_err("refused");
    assert!(err.to_string().contains("line 3"), "{err}");
}

#[test]
fn unknown_version_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = PiJsonlStore::new(dir.path());
    let store = on(dir.path());
    let h = header_with(ID, "/home/me/project", |h| h["version"] = json!(4));
    let path = files.locate(&h).expect("locate");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let body = user("hi").to_string().replace(r#""type":"message""#,
        r#""type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2024-12-03T14:00:01.000Z""#);
    std::fs::write(&path, format!("{}{body}\n", h.to_line())).expect("write");

    match store.load(ID) {
        Err(Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::UnsupportedVersion {
            version,
            ..
        })))) => assert_eq!(version, "4"),
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    assert!(store.list().expect("list").is_empty());
    let listing = files.scan().expect("scan");
    assert_eq!(listing.problems.len(), 1);
    assert_eq!(listing.problems[0].path, path);
    assert!(matches!(
        listing.problems[0].error,
        OpenError::Invalid(InvalidLog::UnsupportedVersion { .. })
    ));
    assert!(matches!(
        store.append(ID, 1, &[custom(1)]),
        Err(Error::Log(LogError::Open(OpenError::Invalid(
            InvalidLog::UnsupportedVersion { .. }
        ))))
    ));
}

#[test]
fn list_reads_only_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = PiJsonlStore::new(dir.path());
    let store = on(dir.path());
    let big = header("big", "/work/big");
    let path = files.locate(&big).expect("locate");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    // 5 MB of lines that are no JSON at all, then a valid entry: a full strict parse
    // refuses this file, a header scan does not look past line 1.
    let mut body = big.to_line();
    let junk = "this is not json, and neither is the next line ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n";
    while body.len() < 5 << 20 {
        body.push_str(junk);
    }
    body.push_str(r#"{"type":"custom","customType":"x","id":"a1b2c3d4","parentId":null,"timestamp":"2024-12-03T14:00:01.000Z"}"#);
    body.push('\n');
    std::fs::write(&path, body).expect("write");

    // Beside it: an ordinary session, a non-session file, an empty file, and files that
    // Pi's listing ignores too (not `*.jsonl`, or two folders down: the walk,
    // `session_files`, goes one level down, as Pi lays sessions out).
    store
        .create(header(ID, "/home/me/project"))
        .expect("create");
    store.append(ID, 0, &[user("hi")]).expect("append");
    let other_dir = path.parent().expect("parent");
    std::fs::write(other_dir.join("notes.jsonl"), "{\"type\":\"message\"}\n").expect("write");
    std::fs::write(other_dir.join("empty.jsonl"), "").expect("write");
    std::fs::write(other_dir.join("readme.txt"), "hello\n").expect("write");
    let deeper = dir.path().join("archive").join("--old--");
    std::fs::create_dir_all(&deeper).expect("mkdir");
    std::fs::write(deeper.join("stray.jsonl"), big.to_line()).expect("write");

    let mut listed = store.list().expect("list");
    listed.sort_by(|a, b| a.id().cmp(b.id()));
    assert_eq!(listed, vec![header(ID, "/home/me/project"), big]);
    let listing = files.scan().expect("scan");
    let problems: Vec<_> = listing
        .problems
        .iter()
        .map(|p| {
            p.path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(problems, vec!["empty.jsonl", "notes.jsonl"]);
    assert!(matches!(
        listing.problems[1].error,
        OpenError::Invalid(InvalidLog::MissingHeader { .. })
    ));
    assert!(
        matches!(
            store.load("big"),
            Err(Error::Log(LogError::Open(OpenError::Invalid(
                InvalidLog::Corrupt { .. }
            ))))
        ),
        "the body is corrupt"
    );
}

/// The store's layout is Pi's: the real Pi (both majors) lists a store-written session
/// under the cwd it records, and reads the tool result that closed its interrupted turn.
#[test]
fn pi_lists_and_reads_what_the_store_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = dir.path().join("agent");
    let store = on(agent.join("sessions"));
    let cwd = dir.path().join("work:tree").join("proj");
    std::fs::create_dir_all(&cwd).expect("mkdir cwd");
    let cwd = cwd.to_str().expect("utf-8 path").to_owned();
    let h = header(ID, &cwd);
    store.create(h.clone()).expect("create");
    store
        .append(
            ID,
            0,
            &[user("read it"), assistant(&[("call_1", "read")], "toolUse")],
        )
        .expect("append");
    let loaded = store.load(ID).expect("load");
    assert_eq!(loaded.closed_tool_calls(), ["call_1".to_string()]);
    let closing = loaded.log().leaf_id().expect("leaf").to_owned();
    let path = locate(&agent.join("sessions"), loaded.header()).expect("the file");

    let script = r#"
        const [major, cwd] = process.argv.slice(1);
        const { SessionManager } = await import(major === "1" ? "pi1" : "pi0");
        const list = await SessionManager.list(cwd);
        console.log(JSON.stringify(list.map((s) => ({ id: s.id, path: s.path, cwd: s.cwd }))));
    "#;
    for major in common::pi::MAJORS {
        let out = std::process::Command::new(common::pi::node())
            .current_dir(common::pi::interop_dir())
            .env("PI_CODING_AGENT_DIR", &agent)
            .args([
                "--input-type=module",
                "-e",
                script,
                &major.to_string(),
                &cwd,
            ])
            .output()
            .expect("run node");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(
            listed,
            json!([{"id": ID, "path": path.to_str(), "cwd": cwd}]),
            "Pi {major}"
        );
        let dump = common::pi::dump_copy(major, &path);
        assert_eq!(
            dump.leaf_id.as_deref(),
            Some(closing.as_str()),
            "Pi {major}"
        );
        assert_eq!(dump.entries.len(), 3, "Pi {major} skips none of our lines");
        let result = &dump.entries[2]["message"];
        assert_eq!(result["role"], "toolResult");
        assert_eq!(result["toolCallId"], "call_1");
        assert_eq!(result["isError"], true);
    }
}

/// A file-system seam that records what it is asked to do and, when armed, creates the
/// session's final name first, as another process would in between.
struct Racing {
    calls: std::sync::Mutex<Vec<String>>,
    squat: Option<PathBuf>,
}

struct Fs(std::sync::Arc<Racing>);

impl session_state::io::FileSystem for Fs {
    fn open_append(&self, path: &Path) -> std::io::Result<Box<dyn session_state::io::AppendFile>> {
        self.0
            .calls
            .lock()
            .expect("lock")
            .push("open_append".into());
        session_state::io::StdFileSystem.open_append(path)
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn session_state::io::AppendFile>> {
        self.0.calls.lock().expect("lock").push("create_new".into());
        if let Some(p) = &self.0.squat {
            std::fs::write(p, "somebody else's session\n")?;
        }
        session_state::io::StdFileSystem.create_new(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.0.calls.lock().expect("lock").push("sync_dir".into());
        session_state::io::StdFileSystem.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.calls.lock().expect("lock").push("rename".into());
        session_state::io::StdFileSystem.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.0.calls.lock().expect("lock").push("remove".into());
        session_state::io::StdFileSystem.remove(path)
    }
    fn link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.calls.lock().expect("lock").push("link".into());
        session_state::io::StdFileSystem.link(from, to)
    }
}

/// the store creates a session through the log's one durable-create
/// routine on the file-system seam (temporary file with a random name, write, sync, hard
/// link, directory sync), and a session file that appears in between is never
/// overwritten.
#[test]
fn first_append_creates_through_the_seam_and_never_overwrites() {
    for squat in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("sessions");
        let h = header(ID, "/home/me/project");
        let path = locate(&root, &h).expect("locate");
        let racing = std::sync::Arc::new(Racing {
            calls: std::sync::Mutex::default(),
            squat: squat.then(|| path.clone()),
        });
        let options =
            session_state::LogOptions::new().file_system(std::sync::Arc::new(Fs(racing.clone())));
        let store = Sessions::new(PiJsonlStore::with_options(&root, options));
        store.create(h.clone()).expect("create");
        let result = store.append(ID, 0, &[user("hello"), custom(1)]);
        let calls = racing.calls.lock().expect("lock").clone();
        assert_eq!(
            calls.first().map(String::as_str),
            Some("create_new"),
            "{calls:?}"
        );
        assert!(calls.iter().any(|c| c == "link"), "{calls:?}");
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("parent"))
            .expect("read dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            names,
            vec![path.file_name().expect("name").to_owned()],
            "squat={squat}"
        );
        if squat {
            match result {
                Err(Error::Store(StoreError::AlreadyExists { session_id, .. })) => {
                    assert_eq!(session_id, ID)
                }
                other => panic!("a session that appeared meanwhile: {other:?}"),
            }
            assert_eq!(
                std::fs::read_to_string(&path).expect("read"),
                "somebody else's session\n",
                "never overwritten"
            );
        } else {
            assert_eq!(result.expect("append"), 2);
            assert!(calls.iter().any(|c| c == "sync_dir"), "{calls:?}");
            assert!(!calls.iter().any(|c| c == "rename"), "{calls:?}");
            assert_eq!(SessionLog::open(&path).expect("open").len(), 2);
        }
    }
}

/// a FIFO or a link to `/dev/zero` named `*.jsonl` in a sessions folder
/// is reported by `scan`, never opened (which would block or never end); `list` and
/// `load` return instead of hanging.
#[cfg(unix)] // symlinks, FIFOs or inode numbers
#[test]
fn scan_reports_files_that_are_not_regular_without_opening_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("sessions");
    let folder = root.join("--p--");
    std::fs::create_dir_all(&folder).expect("mkdir");
    let fifo = folder.join(format!("2024-12-03T14-00-00-000Z_{ID}.jsonl"));
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", folder.join("zero.jsonl")).expect("symlink");
    let (tx, rx) = std::sync::mpsc::channel();
    let r = root.clone();
    std::thread::spawn(move || {
        let files = PiJsonlStore::new(&r);
        let store = Sessions::new(PiJsonlStore::new(&r));
        let scan = files.scan().map(|l| {
            l.problems
                .into_iter()
                .map(|p| (p.path, p.error))
                .collect::<Vec<_>>()
        });
        let _ = tx.send((
            scan,
            store.list().map(|l| l.len()),
            store.load(ID).map(|_| ()),
        ));
    });
    let (scan, list, load) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the store blocked on a FIFO");
    let problems = scan.expect("scan");
    assert_eq!(problems.len(), 2, "{problems:?}");
    for (path, error) in &problems {
        assert!(
            matches!(error, OpenError::NotARegularFile { path: p, .. } if p == path),
            "{path:?}: {error}"
        );
    }
    assert_eq!(list.expect("list"), 0);
    assert!(
        matches!(
            load,
            Err(Error::Log(LogError::Open(
                OpenError::NotARegularFile { .. }
            )))
        ),
        "{load:?}"
    );
}

// How a backend without files gives the tree its entries: the same lines, read from a byte
// source by `LogOptions::read` into a detached log.

/// The sessions directory of a session file (two folders up).
fn dir_of(path: &Path) -> PathBuf {
    path.parent()
        .and_then(Path::parent)
        .expect("root")
        .to_path_buf()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Everything a reader of a log can see, with `label` written as `path` (errors and
/// findings name their source).
fn view(log: &SessionLog, store: &session_state::Store, plugins: &[&str]) -> Vec<String> {
    use session_state::Scope;
    let mut seen = vec![
        format!("{:?}", log.header()),
        format!("{:?} {:?}", log.len(), log.leaf_id()),
        format!("{:?}", log.branch()),
        format!("{:?} {:?} {:?}", log.roots(), log.tips(), log.forks()),
        format!("{} {}", log.consumed_bytes(), log.tail_bytes()),
        format!("{:?}", log.findings()),
        format!(
            "{:?}",
            log.leaf_id()
                .map(|l| log.branch_key_of(l).expect("branch key"))
        ),
    ];
    for e in log.entries() {
        seen.push(format!(
            "{} {:?} {:?} {:?} {:?} {:?} {} {:?} {:?}",
            e.id(),
            e.parent_id(),
            e.entry_type(),
            e.custom_type(),
            e.role(),
            e.location(),
            e.line_len(),
            e.children(),
            log.branch_key_of(e.id()).expect("branch key"),
        ));
        seen.push(log.raw_line(e.id()).expect("raw line"));
    }
    for plugin in plugins {
        for scope in [Scope::Branch, Scope::Session] {
            let state = store.state::<Value>(plugin, scope).expect("state");
            seen.push(format!("{plugin} {scope:?} {:?}", state.read(log)));
            seen.push(format!("{plugin} {scope:?} {:?}", state.history(log)));
            for e in log.entries() {
                seen.push(format!(
                    "{plugin} {scope:?} at {}: {:?}",
                    e.id(),
                    state.read_at(log, e.id())
                ));
            }
        }
    }
    seen
}

#[test]
fn a_detached_log_reads_exactly_as_the_file_it_was_read_from() {
    use session_state::{LogOptions, ReadMode};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = session_state::Store::at(dir.path().join("states.sqlite")).expect("store");
    let cases: &[(&str, ReadMode, &[&str])] = &[
        ("pi1-state.jsonl", ReadMode::Strict, &["alpha", "beta"]),
        ("pi0-state.jsonl", ReadMode::Strict, &["alpha", "beta"]),
        ("example.jsonl", ReadMode::Strict, &["role", "todo"]),
        ("pi1-basic.jsonl", ReadMode::Strict, &[]),
        ("pi1-torn.jsonl", ReadMode::Strict, &[]),
        ("edge/torn-tail.jsonl", ReadMode::Strict, &[]),
        ("edge/blank-line.jsonl", ReadMode::Strict, &[]),
        ("edge/v1.jsonl", ReadMode::Strict, &[]),
        ("edge/v2.jsonl", ReadMode::Strict, &[]),
        (
            "edge/bad-envelope.jsonl",
            ReadMode::Strict,
            &["role", "todo"],
        ),
        ("edge/multi-root.jsonl", ReadMode::Strict, &["role"]),
        ("pi0-reflush.jsonl", ReadMode::Salvage, &["role"]),
        ("edge/corrupt-middle.jsonl", ReadMode::Salvage, &[]),
        ("edge/dangling-parent.jsonl", ReadMode::Salvage, &[]),
    ];
    for &(name, mode, plugins) in cases {
        let path = fixture(name);
        let options = LogOptions::new().mode(mode);
        let file = options.open(&path).expect("open");
        let label = dir.path().join("no-such-dir").join(name);
        let bytes = std::fs::read(&path).expect("read");
        let detached = options.read(&label, &bytes[..]).expect("read");
        assert!(
            detached.is_detached() && !detached.is_materialized(),
            "{name}"
        );
        assert!(!file.is_detached(), "{name}");
        assert_eq!(detached.path(), label, "{name}");
        assert_eq!(detached.read_mode(), mode, "{name}");
        let (label_text, path_text) = (label.display().to_string(), path.display().to_string());
        let seen: Vec<String> = view(&detached, &store, plugins)
            .into_iter()
            .map(|s| s.replace(&label_text, &path_text))
            .collect();
        let expected = view(&file, &store, plugins);
        assert!(expected.len() > 7, "{name}: the comparison sees entries");
        assert_eq!(seen, expected, "{name}");
        // Navigation is in memory, as on a file.
        let mut detached = detached;
        if let Some(first) = file.entries().next().map(|e| e.id().to_owned()) {
            detached.navigate(&first).expect("navigate");
            assert_eq!(detached.leaf_id(), Some(first.as_str()), "{name}");
        }
    }
    assert!(
        !dir.path().join("no-such-dir").exists(),
        "reading never creates the label"
    );
}

#[test]
fn a_detached_log_refuses_what_the_reader_refuses_naming_its_label() {
    use session_state::LogOptions;
    let label = Path::new("store:0195f1d0");
    for (name, check) in [
        ("edge/corrupt-middle.jsonl", "line 3 (byte offset 343)"),
        ("edge/duplicate-id.jsonl", "a0000002"),
        ("edge/version-4.jsonl", "4"),
        ("edge/bad-header.jsonl", "not a Pi session file"),
        ("edge/empty.jsonl", "the file is empty"),
    ] {
        let bytes = std::fs::read(fixture(name)).expect("read");
        let from_file = LogOptions::new().open(fixture(name)).expect_err("refused");
        let err = LogOptions::new()
            .read(label, &bytes[..])
            .expect_err("refused");
        assert_eq!(
            std::mem::discriminant(&err),
            std::mem::discriminant(&from_file),
            "{name}: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.starts_with("store:0195f1d0"), "{name}: {msg}");
        assert!(msg.contains(check), "{name}: {msg}");
        assert_eq!(
            msg.replace("store:0195f1d0", &fixture(name).display().to_string()),
            from_file.to_string(),
            "{name}"
        );
    }
    // An endless source is refused at the header size limit, not read to its end.
    match LogOptions::new().read(label, std::io::repeat(b'x')) {
        Err(OpenError::Invalid(InvalidLog::InvalidHeader { detail, .. })) => {
            assert!(
                detail.starts_with("line 1 is longer than 1 MiB"),
                "{detail}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_write_to_a_detached_log_is_refused_and_creates_no_file() {
    use session_state::{LogOptions, NewEntry, Scope};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = session_state::Store::at(dir.path().join("states.sqlite")).expect("store");
    let role = store.state::<Value>("role", Scope::Branch).expect("state");
    // A v1 file too: a write to it would migrate the file first.
    for name in ["example.jsonl", "edge/v1.jsonl", "edge/torn-tail.jsonl"] {
        let label = dir.path().join("sessions").join(name);
        let bytes = std::fs::read(fixture(name)).expect("read");
        let mut log = LogOptions::new().read(&label, &bytes[..]).expect("read");
        let (len, leaf) = (log.len(), log.leaf_id().map(str::to_owned));
        let refused = |r: session_state::Result<()>, what: &str| match r {
            Err(Error::Log(LogError::Append(AppendError::Detached { label: l }))) => {
                assert_eq!(l, label, "{name}: {what}");
            }
            other => panic!("{name}: {what}: {other:?}"),
        };
        refused(
            log.append(NewEntry::custom("x", Some(json!(1))))
                .map(|_| ())
                .map_err(Error::from),
            "append",
        );
        refused(
            log.append(NewEntry::message(
                json!({"role": "user", "content": "hi", "timestamp": 0}),
            ))
            .map(|_| ())
            .map_err(Error::from),
            "append a message",
        );
        refused(log.materialize().map_err(Error::from), "materialize");
        refused(log.refresh().map_err(Error::from), "refresh");
        refused(
            role.write(&mut log, &json!("writer")).map(|_| ()),
            "SessionState::write",
        );
        refused(store.force_refresh(&mut log).map(|_| ()), "force_refresh");
        log.reset_leaf();
        refused(
            log.append(NewEntry::custom("x", Some(json!(2))))
                .map(|_| ())
                .map_err(Error::from),
            "append a root",
        );
        let err = log.materialize().expect_err("refused");
        assert!(
            err.to_string()
                .contains("append through the store that holds it"),
            "{err}"
        );
        assert_eq!(log.len(), len, "{name}: nothing was added in memory either");
        // Reads still work after the refusals.
        if let Some(leaf) = &leaf {
            log.navigate(leaf).expect("navigate");
            assert!(log.raw_line(leaf).is_ok(), "{name}");
        }
    }
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("states.sqlite"))
        .collect();
    assert!(names.is_empty(), "no file was created: {names:?}");
}

#[test]
fn a_backend_without_files_loads_through_a_detached_log() {
    use session_state::{Loaded, LogOptions, NewEntry};
    // The file backend's session, rendered as a row store would render it: the header
    // line, then each entry's line, in sequence order.
    let events = [
        user("hi"),
        assistant(&[("call_1", "read")], "toolUse"),
        custom(1),
    ];
    let (_dir, store, path) = store_with(&events);
    let from_file = store.load(ID).expect("load");
    let rows: Vec<String> = std::iter::once(from_file.header().to_line())
        .chain((0..from_file.next_seq()).map(|seq| {
            let id = from_file
                .log()
                .entries()
                .nth(seq as usize)
                .expect("entry")
                .id();
            format!("{}\n", from_file.log().raw_line(id).expect("line"))
        }))
        .collect();
    let log = LogOptions::new()
        .read(format!("rows:{ID}"), rows.concat().as_bytes())
        .expect("read");
    let loaded = Loaded::new(log, Vec::new());
    assert_eq!(loaded.header(), from_file.header());
    assert_eq!(loaded.next_seq(), from_file.next_seq());
    assert_eq!(loaded.log().leaf_id(), from_file.log().leaf_id());
    for seq in 0..loaded.next_seq() {
        assert_eq!(
            loaded.event(seq).expect("event"),
            from_file.event(seq).expect("event")
        );
    }
    assert!(matches!(
        loaded.event(loaded.next_seq()),
        Err(LogError::Rule(RuleError::NoSuchEvent { .. }))
    ));
    let before = std::fs::read(&path).expect("read");
    let mut log = loaded.into_log();
    assert!(matches!(
        log.append(NewEntry::custom("x", Some(json!(1)))),
        Err(AppendError::Detached { .. })
    ));
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

/// The SQLite store keeps its WAL between processes (no checkpoint on close): a process
/// that appends once syncs its commit only. The commit is durable in the WAL, which the
/// next connection reads; a WAL grown past 1 MiB is checkpointed and truncated on close.
#[test]
fn the_sqlite_store_keeps_a_small_wal_between_processes_and_truncates_a_big_one() {
    use session_state::SqliteStore;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sessions.sqlite");
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    let wal_len = || std::fs::metadata(&wal).map(|m| m.len()).ok();
    {
        let sessions = Sessions::new(SqliteStore::open(&path).expect("store"));
        sessions.create(header(ID, "/work")).expect("create");
        sessions.append(ID, 0, &[user("hi")]).expect("append");
    }
    let kept = wal_len().expect("the WAL stays after the last connection closed");
    assert!(
        kept > 0 && kept <= 1 << 20,
        "a WAL of {kept} bytes is kept as it is"
    );
    // The next process reads the append from the WAL.
    let sessions = Sessions::new(SqliteStore::open(&path).expect("store"));
    let log = sessions
        .read_log(ID, session_state::ReadMode::Strict)
        .expect("read");
    assert_eq!(log.len(), 1, "the appended entry, read back");
    // Appends until the WAL holds more than 1 MiB (64 KiB pages: a few commits).
    let mut next = 1;
    while wal_len().unwrap_or(0) <= 1 << 20 {
        next = sessions.append(ID, next, &[custom(next)]).expect("append");
        assert!(next < 1_000, "the WAL did not grow");
    }
    drop(sessions);
    assert_eq!(
        wal_len(),
        Some(0),
        "a WAL past 1 MiB is checkpointed and truncated on close"
    );
    let sessions = Sessions::new(SqliteStore::open(&path).expect("store"));
    let log = sessions
        .read_log(ID, session_state::ReadMode::Strict)
        .expect("read");
    assert_eq!(log.len() as u64, next, "every entry, from the database");
}
