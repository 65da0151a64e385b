//! Every fixture loads, or is refused with the documented error (fixtures/README.md says
//! which and why). Reading never modifies a fixture.
#![allow(clippy::unwrap_used)]

use serde_json::json;
use session_state::*;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Opens strictly, checking that the file is unchanged afterwards.
fn open(name: &str, mode: ReadMode) -> Result<SessionLog> {
    let path = fixture(name);
    let before = std::fs::read(&path).unwrap();
    let r = LogOptions::new().mode(mode).open(&path);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "{name} was modified by a reader"
    );
    r
}

fn strict(name: &str) -> SessionLog {
    open(name, ReadMode::Strict).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn refused(name: &str) -> Error {
    match open(name, ReadMode::Strict) {
        Ok(_) => panic!("{name} should be refused"),
        Err(e) => e,
    }
}

fn ids(log: &SessionLog) -> Vec<&str> {
    log.entries().map(|e| e.id()).collect()
}

fn kinds(log: &SessionLog) -> Vec<(FindingKind, u64)> {
    log.findings().iter().map(|f| (f.kind, f.at.line)).collect()
}

#[test]
fn pi_generated_fixtures_load() {
    for name in [
        "example.jsonl",
        "pi1-basic.jsonl",
        "pi0-basic.jsonl",
        "pi1-state.jsonl",
        "pi0-state.jsonl",
    ] {
        let log = strict(name);
        assert!(log.len() > 5, "{name}");
        assert!(log.findings().is_empty(), "{name}: {:?}", log.findings());
        // On load, the active leaf is the last entry in file order.
        assert_eq!(
            log.leaf_id(),
            log.entries().last().map(|e| e.id()),
            "{name}"
        );
    }
    assert_eq!(strict("pi1-basic.jsonl").roots().len(), 3);
    let torn = strict("pi1-torn.jsonl");
    assert_eq!(torn.len(), 8);
    assert_eq!(kinds(&torn), vec![(FindingKind::TornRecord, 7)]);
    assert_eq!(torn.findings()[0].at.offset, 1871);
}

#[test]
fn torn_fixtures_load_with_warnings() {
    let log = strict("edge/torn-tail.jsonl");
    assert_eq!(ids(&log), ["a0000001", "a0000002", "a0000003", "a0000004"]);
    assert_eq!(log.findings()[0].kind, FindingKind::TornTail);
    assert_eq!(log.findings()[0].at.offset, 1227);
    let log = strict("edge/torn-terminated.jsonl");
    assert_eq!(log.leaf_id(), Some("a0000004"));
    assert_eq!(kinds(&log), vec![(FindingKind::TornRecord, 6)]);
    let log = strict("edge/torn-record-middle.jsonl");
    assert_eq!(ids(&log), ["a0000001", "a0000002", "a0000006", "a0000007"]);
    assert_eq!(kinds(&log), vec![(FindingKind::TornRecord, 4)]);
    assert_eq!(log.findings()[0].at.offset, 823);
    let log = strict("edge/blank-line.jsonl");
    assert_eq!(log.len(), 4);
    assert_eq!(kinds(&log), vec![(FindingKind::BlankLine, 4)]);
}

#[test]
fn corruption_is_refused_with_line_and_offset_and_salvage_reports_it() {
    for (name, line, offset) in [
        ("edge/corrupt-middle.jsonl", 3, 343),
        ("edge/invalid-utf8.jsonl", 3, 343),
        ("edge/nul-byte.jsonl", 3, 343),
    ] {
        match refused(name) {
            Error::Corrupt { at, .. } => assert_eq!((at.line, at.offset), (line, offset), "{name}"),
            e => panic!("{name}: expected corruption, got {e}"),
        }
        let msg = refused(name).to_string();
        assert!(
            msg.contains(&format!("line {line} (byte offset {offset})")),
            "{msg}"
        );
        let log = open(name, ReadMode::Salvage).unwrap();
        assert_eq!(log.findings()[0].kind, FindingKind::Corrupt, "{name}");
        assert_eq!(log.findings()[0].at.line, line, "{name}");
    }
    assert_eq!(
        open("edge/corrupt-middle.jsonl", ReadMode::Salvage)
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn bad_headers_and_versions_are_refused() {
    for name in [
        "edge/bad-header.jsonl",
        "edge/header-not-json.jsonl",
        "edge/bom.jsonl",
        "edge/empty.jsonl",
    ] {
        let e = refused(name);
        assert!(
            matches!(e, Error::MissingHeader { .. } | Error::InvalidHeader { .. }),
            "{name}: {e}"
        );
        assert!(
            e.to_string().contains(name.trim_start_matches("edge/")),
            "{e}"
        );
        // Salvage cannot invent a header either (a BOM aside).
        if name != "edge/bom.jsonl" {
            assert!(open(name, ReadMode::Salvage).is_err(), "{name}");
        }
    }
    assert!(
        refused("edge/bom.jsonl")
            .to_string()
            .contains("byte order mark")
    );
    assert_eq!(open("edge/bom.jsonl", ReadMode::Salvage).unwrap().len(), 5);
    assert!(
        refused("edge/empty.jsonl")
            .to_string()
            .contains("the file is empty")
    );
    match refused("edge/version-4.jsonl") {
        Error::UnsupportedVersion { version, .. } => assert_eq!(version, "4"),
        e => panic!("{e}"),
    }
    assert!(matches!(
        open("edge/version-4.jsonl", ReadMode::Salvage),
        Err(Error::UnsupportedVersion { .. })
    ));
}

#[test]
fn structural_errors_are_refused_and_salvaged_like_pi() {
    match refused("edge/duplicate-id.jsonl") {
        Error::DuplicateId {
            id, at, first_line, ..
        } => {
            assert_eq!((id.as_str(), at.line, first_line), ("a0000002", 4, 3))
        }
        e => panic!("{e}"),
    }
    match refused("edge/dangling-parent.jsonl") {
        Error::DanglingParent { id, parent, at, .. } => {
            assert_eq!(
                (id.as_str(), parent.as_str(), at.line),
                ("a0000003", "deadbeef", 4)
            )
        }
        e => panic!("{e}"),
    }
    let log = open("edge/dangling-parent.jsonl", ReadMode::Salvage).unwrap();
    assert_eq!(log.branch(), ["a0000003", "a0000004"]);
    match refused("edge/cycle.jsonl") {
        Error::Cycle { id, at, .. } => assert_eq!((id.as_str(), at.line), ("a0000003", 4)),
        e => panic!("{e}"),
    }
    assert!(
        open("edge/cycle.jsonl", ReadMode::Salvage)
            .unwrap()
            .roots()
            .contains(&"a0000003")
    );
    match refused("edge/forward-parent.jsonl") {
        Error::DanglingParent { id, at, .. } => assert_eq!((id.as_str(), at.line), ("a0000002", 3)),
        e => panic!("{e}"),
    }
}

#[test]
fn accepted_oddities() {
    let log = strict("edge/crlf.jsonl");
    assert_eq!(log.len(), 5);
    let log = strict("edge/header-only.jsonl");
    assert_eq!((log.len(), log.leaf_id()), (0, None));
    let log = strict("edge/unknown-type.jsonl");
    let hologram = log
        .entries()
        .find(|e| e.entry_type() == EntryType::Other)
        .unwrap();
    assert!(log.raw_line(hologram.id()).unwrap().contains("hologram"));
    let log = strict("edge/multi-root.jsonl");
    assert_eq!(log.leaf_id(), Some("b0000003"));
    assert_eq!(log.roots(), ["a0000001", "b0000001"]);
    let dir = tempfile::tempdir().unwrap();
    let role = SessionState::<serde_json::Value>::open(
        Options::new("role").database_path(dir.path().join("s.sqlite")),
    )
    .unwrap();
    assert_eq!(role.read(&log).unwrap(), Some(json!({"name": "writer"})));
    assert_eq!(
        role.read_at(&log, "a0000003").unwrap(),
        Some(json!({"name": "reviewer"}))
    );
}

#[test]
fn old_versions_migrate_in_memory_only() {
    let log = strict("edge/v1.jsonl");
    assert_eq!(log.len(), 9);
    assert_eq!(log.header().version, 1);
    assert_eq!(log.roots().len(), 1);
    // A linear chain in file order.
    let all = ids(&log);
    assert_eq!(log.branch(), all);
    // The ids are deterministic: a second read agrees.
    assert_eq!(ids(&strict("edge/v1.jsonl")), all);
    let log = strict("edge/v2.jsonl");
    assert_eq!(log.header().version, 2);
}

#[test]
fn bad_envelopes_fail_only_their_plugin() {
    let log = strict("edge/bad-envelope.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.sqlite");
    let role =
        SessionState::<serde_json::Value>::open(Options::new("role").database_path(&db)).unwrap();
    let err = role.read(&log).unwrap_err();
    match &err {
        Error::BadEvent {
            entry_id,
            at,
            plugin,
            ..
        } => {
            assert_eq!(
                (entry_id.as_str(), at.line, plugin.as_str()),
                ("a0000004", 5, "role")
            )
        }
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains("frobnicate"), "{err}");
    let err = role.read_at(&log, "a0000003").unwrap_err();
    assert!(
        matches!(&err, Error::BadEvent { entry_id, .. } if entry_id == "a0000003"),
        "{err}"
    );
    assert!(err.to_string().contains("v=9"), "{err}");
    let todo = SessionState::<serde_json::Value>::open(
        Options::new("todo")
            .scope(Scope::Session)
            .database_path(&db),
    )
    .unwrap();
    assert_eq!(
        todo.read(&log).unwrap(),
        Some(json!({"backoff": "done", "tests": "open"}))
    );
}
