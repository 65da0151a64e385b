//! Every fixture loads, or is refused with the documented error (fixtures/README.md says
//! which and why). Reading never modifies a fixture.
#![expect(clippy::unwrap_used)]

use crate::common;
use serde_json::json;
use session_state::*;
use session_state::{LogError, StateError};
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
    let r = LogOptions::new()
        .mode(mode)
        .open(&path)
        .map_err(Error::from);
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
            Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Corrupt { at, .. }))) => {
                assert_eq!((at.line, at.offset), (line, offset), "{name}")
            }
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
            matches!(
                e,
                Error::Log(LogError::Open(OpenError::Invalid(
                    InvalidLog::MissingHeader { .. }
                ))) | Error::Log(LogError::Open(OpenError::Invalid(
                    InvalidLog::InvalidHeader { .. }
                )))
            ),
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
        Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::UnsupportedVersion {
            version,
            ..
        }))) => assert_eq!(version, "4"),
        e => panic!("{e}"),
    }
    assert!(matches!(
        open("edge/version-4.jsonl", ReadMode::Salvage),
        Err(Error::Log(LogError::Open(OpenError::Invalid(
            InvalidLog::UnsupportedVersion { .. }
        ))))
    ));
}

#[test]
fn structural_errors_are_refused_and_salvaged_like_pi() {
    match refused("edge/duplicate-id.jsonl") {
        Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DuplicateId {
            id,
            at,
            first_line,
            ..
        }))) => {
            assert_eq!((id.as_str(), at.line, first_line), ("a0000002", 4, Some(3)))
        }
        e => panic!("{e}"),
    }
    match refused("edge/dangling-parent.jsonl") {
        Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DanglingParent {
            id,
            parent,
            at,
            ..
        }))) => {
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
        Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Cycle { id, at, .. }))) => {
            assert_eq!((id.as_str(), at.line), ("a0000003", 4))
        }
        e => panic!("{e}"),
    }
    assert!(
        open("edge/cycle.jsonl", ReadMode::Salvage)
            .unwrap()
            .roots()
            .contains(&"a0000003")
    );
    match refused("edge/forward-parent.jsonl") {
        Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DanglingParent {
            id,
            at,
            ..
        }))) => {
            assert_eq!((id.as_str(), at.line), ("a0000002", 3))
        }
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
    let role = Store::at(dir.path().join("s.sqlite"))
        .and_then(|store| store.state::<serde_json::Value>("role", Scope::Branch))
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
    assert_eq!(log.header().version(), 1);
    assert_eq!(log.roots().len(), 1);
    // A linear chain in file order.
    let all = ids(&log);
    assert_eq!(log.branch(), all);
    // The ids are deterministic: a second read agrees.
    assert_eq!(ids(&strict("edge/v1.jsonl")), all);
    let log = strict("edge/v2.jsonl");
    assert_eq!(log.header().version(), 2);
}

#[test]
fn bad_envelopes_fail_only_their_plugin() {
    let log = strict("edge/bad-envelope.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.sqlite");
    let role = Store::at(&db)
        .and_then(|store| store.state::<serde_json::Value>("role", Scope::Branch))
        .unwrap();
    let err = role.read(&log).unwrap_err();
    match &err {
        Error::State(StateError::BadEvent {
            entry_id,
            at,
            plugin,
            ..
        }) => {
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
        matches!(&err, Error::State(StateError::BadEvent { entry_id, .. }) if entry_id == "a0000003"),
        "{err}"
    );
    assert!(err.to_string().contains("v=9"), "{err}");
    let todo = Store::at(&db)
        .and_then(|store| store.state::<serde_json::Value>("todo", Scope::Session))
        .unwrap();
    assert_eq!(
        todo.read(&log).unwrap(),
        Some(json!({"backoff": "done", "tests": "open"}))
    );
}

/// a session named through a symlink is the file it resolves to. The
/// first append migrates the target in place and appends to it; the link stays a link.
#[cfg(unix)] // symlinks, FIFOs or inode numbers
#[test]
fn a_symlinked_session_is_migrated_and_appended_through_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let real_dir = dir.path().join("real");
    let links = dir.path().join("links");
    std::fs::create_dir_all(&real_dir).unwrap();
    std::fs::create_dir_all(&links).unwrap();
    let target = real_dir.join("s.jsonl");
    std::fs::copy(fixture("edge/v2.jsonl"), &target).unwrap();
    let link = links.join("s.jsonl");
    std::os::unix::fs::symlink("../real/s.jsonl", &link).unwrap();

    let mut log = SessionLog::open(&link).unwrap();
    let before = log.len();
    let id = log
        .append(NewEntry::message(
            json!({"role": "user", "content": "via the link"}),
        ))
        .unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced"
    );
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("../real/s.jsonl")
    );
    let real = SessionLog::open(&target).unwrap();
    assert_eq!(real.header().version(), 3, "the target was migrated");
    assert_eq!(real.len(), before + 1);
    assert_eq!(
        real.leaf_id(),
        Some(id.as_str()),
        "the target got the entry"
    );
    let names: Vec<_> = std::fs::read_dir(&links).unwrap().collect();
    assert_eq!(names.len(), 1, "nothing else in the link's folder");
}

/// `cd dir; session-state write v2.jsonl …` migrates and appends (the
/// parent of a bare name is the current directory, not "").
#[test]
fn a_bare_relative_name_is_migrated_and_appended() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("edge/v2.jsonl"), dir.path().join("v2.jsonl")).unwrap();
    let before = strict("edge/v2.jsonl").len();
    let out = common::cli()
        .args(["write", "v2.jsonl", "--plugin", "p", "--value", "1"])
        .arg("--db")
        .arg(dir.path().join("db.sqlite"))
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let log = SessionLog::open(dir.path().join("v2.jsonl")).unwrap();
    assert_eq!(log.header().version(), 3);
    assert_eq!(log.len(), before + 1);
    let leaf = log.leaf_id().unwrap();
    assert_eq!(log.entry(leaf).unwrap().state_plugin(), Some("p"));
}

/// only regular files are read. A FIFO is refused without blocking, a
/// link to `/dev/zero` without reading it, and a first line longer than the header limit
/// without buffering more of it.
#[cfg(unix)] // symlinks, FIFOs or inode numbers
#[test]
fn only_regular_files_are_read_and_the_header_line_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    // Opening a FIFO for reading blocks until a writer comes: bound the wait, so the old
    // behaviour fails this test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let f = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(SessionLog::open(&f).map(|_| ()));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("opening a FIFO blocked");
    match got {
        Err(OpenError::NotARegularFile { path, kind }) => {
            assert_eq!(path, fifo);
            assert_eq!(kind, "a FIFO");
        }
        other => panic!("FIFO: {other:?}"),
    }

    let zero = dir.path().join("zero.jsonl");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    match SessionLog::open(&zero) {
        Err(e @ OpenError::NotARegularFile { .. }) => {
            assert!(e.to_string().contains("a character device"), "{e}");
        }
        other => panic!("/dev/zero: {other:?}"),
    }
    match SessionLog::open(dir.path()) {
        Err(OpenError::NotARegularFile { kind, .. }) => assert_eq!(kind, "a directory"),
        other => panic!("directory: {other:?}"),
    }

    let long = dir.path().join("long.jsonl");
    std::fs::write(&long, vec![b' '; (1 << 20) + (1 << 16)]).unwrap();
    match SessionLog::open(&long) {
        Err(e @ OpenError::Invalid(InvalidLog::InvalidHeader { .. })) => {
            let msg = e.to_string();
            assert!(
                msg.contains("long.jsonl") && msg.contains("1048576"),
                "{msg}"
            );
        }
        other => panic!("long header: {other:?}"),
    }
    // Just under the limit, a long (valid) header line still reads.
    let ok = dir.path().join("ok.jsonl");
    let pad = "x".repeat((1 << 20) - 200);
    std::fs::write(
        &ok,
        format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/{pad}\"}}\n"
        ),
    )
    .unwrap();
    assert_eq!(SessionLog::open(&ok).unwrap().session_id(), "s");
}

/// A line that gives a member twice is read as Pi's `JSON.parse` reads it, the last
/// occurrence winning, by both readers, every plugin's fold, the projection and the
/// command line; `verify` lists each repeat and accepts the file.
#[test]
fn a_repeated_member_reads_as_its_last_occurrence_everywhere() {
    let name = "edge/repeated-members.jsonl";
    for mode in [ReadMode::Strict, ReadMode::Salvage] {
        let log = open(name, mode).unwrap_or_else(|e| panic!("{name} {mode:?}: {e}"));
        assert_eq!(
            ids(&log),
            [
                "a0000001", "a0000002", "a0000003", "a0000004", "a0000005", "a0000006", "a0000007"
            ],
            "{mode:?}"
        );
        assert_eq!(log.path_to("a0000007").unwrap().len(), 7, "one chain");
        assert_eq!(
            kinds(&log),
            (2..=8)
                .map(|line| (FindingKind::RepeatedMember, line))
                .collect::<Vec<_>>(),
            "{mode:?}"
        );
        assert!(
            log.findings()[1].to_string().contains("`customType`"),
            "{}",
            log.findings()[1]
        );
    }
    let log = strict(name);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("states.sqlite");
    let projection = common::open_store(&db).unwrap();
    for (plugin, value) in [
        ("role", json!("second")),
        ("todo", json!([1])),
        ("note", json!("m")),
    ] {
        let state = Store::at(&db)
            .and_then(|s| s.state::<serde_json::Value>(plugin, Scope::Branch))
            .unwrap();
        assert_eq!(
            state.read_value(&log).unwrap(),
            Some(value.clone()),
            "{plugin}"
        );
        assert_eq!(
            projection
                .read_value(&fixture(name), plugin, Scope::Branch, None)
                .unwrap(),
            Some(value.clone()),
            "{plugin} projection"
        );
    }
    // The command line reads it, and `verify` accepts the file and lists the repeats.
    let out = common::cli()
        .arg("verify")
        .arg(fixture(name))
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.matches("\"repeated-member\"").count(), 7, "{stdout}");
    // A write on top of it goes through, and Pi's reading of the new line is ours.
    let copy = dir.path().join("copy.jsonl");
    std::fs::copy(fixture(name), &copy).unwrap();
    let out = common::cli()
        .arg("write")
        .arg(&copy)
        .args(["--plugin", "role", "--value", "\"third\"", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = SessionLog::open(&copy).unwrap();
    assert_eq!(log.len(), 8);
    assert_eq!(
        log.entries().last().unwrap().parent_id(),
        Some("a0000007"),
        "a child of the leaf"
    );
}
