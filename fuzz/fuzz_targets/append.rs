//! Appending to what Pi may leave on disk: sessions of format 1 (no ids: the reader
//! assigns them), 2 (a `hookMessage` role) and 3, some ending in a torn tail (a record
//! cut by a crash), some with a blank line. The first append migrates a v1/v2 file on
//! disk and terminates a torn tail; then:
//! - the file reads strictly, as format 3, with every entry it had (same ids, same
//!   parents, same types) and the new one last, a child of the old leaf;
//! - a v3 file keeps its bytes: the new line follows them (after the `\n` that ends a
//!   torn tail);
//! - a state write on the reopened log (the write transaction) reads back.
//!
//! Proptest relatives: `tests/torn_cuts.rs`, `tests/log_faults.rs`, `tests/fixtures.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use session_state::{EntryType, NewEntry, Scope, SessionLog, Store};
use session_state_fuzz::{Input, Session, scratch_dir};
use std::path::PathBuf;
use std::sync::OnceLock;

struct Scratch {
    _dir: tempfile::TempDir,
    file: PathBuf,
    store: Store,
}

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| {
        let dir = scratch_dir();
        let store = Store::at(dir.path().join("states.sqlite")).expect("a database path");
        Scratch {
            file: dir.path().join("append.jsonl"),
            _dir: dir,
            store,
        }
    })
}

type Shape = Vec<(String, Option<String>, EntryType)>;

fn shape(log: &SessionLog) -> Shape {
    log.entries()
        .map(|e| {
            (
                e.id().to_owned(),
                e.parent_id().map(str::to_owned),
                e.entry_type(),
            )
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let s = scratch();
    let mut inp = Input::new(data);
    let version = 1 + inp.below(3) as u8;
    let session = Session::generate(&mut inp, version, "019df2a8-fuzz", 32);
    let mut text = session.text(session.lines.len());
    if inp.chance(8) && !session.lines.is_empty() {
        // A blank line before the last entry.
        let at = text
            .rfind(&session.lines[session.lines.len() - 1])
            .expect("the last line");
        text.insert(at, '\n');
    }
    if let Some(t) = &session.torn {
        text.push_str(t);
    }
    // Leave the previous input's projection rows behind: this path is reused.
    if s.file.exists() {
        s.store.forget(&s.file).expect("forget");
    }
    std::fs::write(&s.file, &text).expect("write the session");
    let mut log = SessionLog::open(&s.file).expect("a generated session reads strictly");
    let before = shape(&log);
    let leaf = log.leaf_id().map(str::to_owned);

    let id = log
        .append(NewEntry::custom("fuzz", Some(json!({"n": before.len()}))))
        .unwrap_or_else(|e| panic!("append to a v{version} file: {e}"));
    let bytes = std::fs::read(&s.file).expect("read back");
    let reopened = SessionLog::open(&s.file).expect("the appended file reads strictly");
    assert_eq!(reopened.header().version(), 3, "migrated to format 3");
    let mut after = shape(&reopened);
    let last = after.pop().expect("the new entry");
    assert_eq!(after, before, "the entries before the append changed");
    assert_eq!(last, (id.clone(), leaf, EntryType::Custom), "the new entry");
    assert_eq!(
        shape(&log),
        shape(&reopened),
        "the log in memory and the file disagree"
    );
    if version == 3 {
        let mut prefix = text.clone().into_bytes();
        if session.torn.is_some() {
            prefix.push(b'\n');
        }
        assert!(
            bytes.starts_with(&prefix),
            "the file's bytes before the append changed"
        );
        assert_eq!(
            bytes.len(),
            prefix.len() + reopened.raw_line(&id).expect("a line").len() + 1
        );
    }

    // The write transaction on the migrated file.
    let st = s
        .store
        .state::<serde_json::Value>("a", Scope::Session)
        .expect("a plugin id");
    let mut log = reopened;
    let v = json!({"after": id});
    match st.write(&mut log, &v) {
        Ok(_) => {
            assert_eq!(st.read(&log).expect("read"), Some(v.clone()));
            let fresh = SessionLog::open(&s.file).expect("reads strictly");
            assert_eq!(st.read(&fresh).expect("read"), Some(v.clone()));
            assert_eq!(st.read(&s.file).expect("read the file"), Some(v));
        }
        Err(session_state::Error::State(session_state::StateError::BadEvent { .. })) => {}
        Err(e) => panic!("a write to the appended file: {e}"),
    }
});
