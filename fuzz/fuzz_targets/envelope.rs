//! The envelope decoder (docs/spec.md §3): arbitrary text as the `data` of `session-state/p`
//! events (the input is split at 0xFF bytes into up to four events on one branch), read
//! in both scopes at the leaf and at every event, with history. Reading a plugin must
//! never panic: a bad envelope is an error naming the plugin, entry and line.
//! Proptest equivalent: `tests/bad_input.rs::arbitrary_state_event_data_never_panics_a_read`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use session_state::{Error, Scope, SessionLog, SessionState, Store, StateError};
use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

struct Scratch {
    _dir: tempfile::TempDir,
    file: PathBuf,
    states: Vec<SessionState<Value>>,
}

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("never-opened.sqlite");
        let store = Store::at(&db).expect("a valid database path");
        let states = [Scope::Branch, Scope::Session]
            .into_iter()
            .map(|s| store.state("p", s).expect("a valid plugin id"))
            .collect();
        Scratch {
            file: dir.path().join("envelope.jsonl"),
            _dir: dir,
            states,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let s = scratch();
    let mut out = Vec::new();
    out.extend_from_slice(br#"{"type":"session","version":3,"id":"fuzz","cwd":"/"}"#);
    out.push(b'\n');
    let mut parent = String::from("null");
    for (i, part) in data.split(|&b| b == 0xFF).take(4).enumerate() {
        let text = String::from_utf8_lossy(part).replace('\n', " ");
        let id = format!("e{i:07}");
        let _ = write!(
            out,
            r#"{{"type":"custom","customType":"session-state/p","data":{text},"id":"{id}","parentId":{parent},"timestamp":"t"}}"#
        );
        out.push(b'\n');
        parent = format!("\"{id}\"");
    }
    std::fs::write(&s.file, &out).expect("write the input");
    // Data that is not JSON makes the line corrupt or torn: the line reader's business.
    let Ok(log) = SessionLog::open(&s.file) else {
        return;
    };
    let ids: Vec<String> = log.entries().map(|e| e.id().to_owned()).collect();
    for st in &s.states {
        let mut results = vec![st.read(&log).map(drop), st.history(&log).map(drop)];
        results.extend(ids.iter().map(|id| st.read_at(&log, id).map(drop)));
        for r in results {
            if let Err(e) = r {
                assert!(
                    matches!(&e, Error::State(StateError::BadEvent { plugin, .. }) if plugin == "p"),
                    "{e}"
                );
            }
        }
    }
});
