//! Bad input (docs/spec.md §2, §3, §4): a corpus of hostile options, values and session files.
//! Each one gets a clear error that names what to fix (file, line, entry, plugin), or a
//! documented acceptance, and never a panic or a stack overflow. `tests/fixtures.rs`
//! checks the checked-in edge fixtures; this corpus builds its files on the fly around
//! them and checks the messages.
//!
//! The proptest equivalents of the `fuzz/` targets run here too: arbitrary bytes as a
//! session file (strict and salvage), arbitrary lines after a valid header, and arbitrary
//! JSON as the `data` of a state event (fold, history and projection).
#![expect(clippy::unwrap_used)]

use crate::common;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use serde_json::{Value, json};
use session_state::settings::SettingsError;
use session_state::*;
use session_state::{LogError, StateError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const HEADER: &str = r#"{"type":"session","version":3,"id":"bad-input","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#;

fn entry(id: &str, parent: Option<&str>, text: &str) -> String {
    json!({
        "type": "message",
        "id": id,
        "parentId": parent,
        "timestamp": "2025-01-01T00:00:01.000Z",
        "message": {"role": "user", "content": text},
    })
    .to_string()
}

fn event(id: &str, parent: Option<&str>, plugin: &str, data: &str) -> String {
    let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
    format!(
        r#"{{"type":"custom","customType":"session-state/{plugin}","data":{data},"id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:02.000Z"}}"#
    )
}

/// Writes `lines` (each followed by `\n`) after the header.
fn file_of(dir: &Path, name: &str, lines: &[&[u8]]) -> PathBuf {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(HEADER.as_bytes());
    bytes.push(b'\n');
    for l in lines {
        bytes.extend_from_slice(l);
        bytes.push(b'\n');
    }
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Opens strictly and checks that the reader left the file alone.
fn open(path: &Path, mode: ReadMode) -> Result<SessionLog> {
    let before = std::fs::read(path).unwrap();
    let r = LogOptions::new().mode(mode).open(path).map_err(Error::from);
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "a reader modified {}",
        path.display()
    );
    r
}

fn refused(path: &Path) -> (Error, String) {
    match open(path, ReadMode::Strict) {
        Ok(_) => panic!("{} should be refused", path.display()),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()),
                "names the file: {msg}"
            );
            (e, msg)
        }
    }
}

fn state(dir: &Path, plugin: &str) -> SessionState<Value> {
    Store::at(dir.join("states.sqlite"))
        .and_then(|store| store.state(plugin, Scope::Branch))
        .unwrap()
}

fn new_session(dir: &Path) -> SessionLog {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, "/proj")
        .unwrap();
    log.append(NewEntry::message(json!({"role": "user", "content": "hi"})))
        .unwrap();
    log
}

// ---------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------

#[test]
fn invalid_plugin_ids_are_refused_naming_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("states.sqlite");
    for id in [
        "",
        "Role",
        "a/b",
        "a b",
        "rôle",
        "😀",
        "a\nb",
        "../x",
        "session-state/x",
    ] {
        let err = Store::at(&db)
            .and_then(|store| store.state::<Value>(id, Scope::Branch))
            .unwrap_err();
        let Error::InvalidOption { option, detail } = &err else {
            panic!("{id:?}: {err:?}")
        };
        assert_eq!(*option, "plugin_id");
        assert!(
            detail.contains(&format!("{id:?}")),
            "names the id {id:?}: {detail}"
        );
        assert!(
            err.to_string().contains("lowercase"),
            "says what is allowed: {err}"
        );
    }
    for id in ["role", "my-ext.todo", "a1", "0"] {
        Store::at(&db)
            .and_then(|store| store.state::<Value>(id, Scope::Branch))
            .unwrap();
    }
    // The command line says the same and exits 2, touching nothing.
    let log = new_session(dir.path());
    let before = std::fs::read(log.path()).unwrap();
    let out = common::cli()
        .args([
            "write",
            &log.path().display().to_string(),
            "--plugin",
            "Role",
            "--value",
            "1",
        ])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"Role\""), "{stderr}");
    assert_eq!(std::fs::read(log.path()).unwrap(), before);
}

#[test]
fn database_paths_must_be_absolute_and_non_empty() {
    for p in [
        "",
        "states.sqlite",
        "./states.sqlite",
        "~/states.sqlite",
        "../x/s.sqlite",
    ] {
        let err = Store::at(p)
            .and_then(|store| store.state::<Value>("role", Scope::Branch))
            .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Settings(
                    SettingsError::EmptyDatabasePath | SettingsError::RelativeDatabasePath { .. }
                )
            ),
            "{p:?}: {err:?}"
        );
        assert!(err.to_string().contains("absolute"), "{err}");
    }
}

// ---------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------

#[test]
fn a_value_that_does_not_serialize_is_refused_and_nothing_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_session(dir.path());
    let before = std::fs::read(log.path()).unwrap();
    let st = Store::at(dir.path().join("states.sqlite"))
        .and_then(|store| store.state::<HashMap<(i32, i32), i32>>("grid", Scope::Branch))
        .unwrap();
    let value = HashMap::from([((1, 2), 3)]);
    let err = st.write(&mut log, &value).unwrap_err();
    let Error::State(StateError::Serialize { plugin, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(plugin, "grid");
    assert!(err.to_string().contains("plugin 'grid'"), "{err}");
    assert_eq!(
        std::fs::read(log.path()).unwrap(),
        before,
        "nothing appended"
    );
    assert_eq!(log.len(), 1);

    // Before materialization too: nothing lands in memory.
    let mut mem = LogOptions::new().create(dir.path(), "/proj").unwrap();
    assert!(st.write(&mut mem, &value).is_err());
    assert_eq!(mem.len(), 0);
    assert!(!mem.is_materialized());
}

/// docs/spec.md §3: NaN and ±Infinity are refused before writing (serde_json would turn them into
/// `null`, which then failed to read back as an `f64`), in `write` and in `patch`, with an
/// error naming the plugin; nothing is appended and reads still work.
#[test]
fn non_finite_numbers_are_refused_before_writing() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Gauge {
        level: f32,
    }
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_session(dir.path());
    let before = std::fs::read(log.path()).unwrap();
    let db = dir.path().join("states.sqlite");
    let num = Store::at(&db)
        .and_then(|store| store.state::<f64>("num", Scope::Branch))
        .unwrap();
    let gauge = Store::at(&db)
        .and_then(|store| store.state::<Gauge>("gauge", Scope::Branch))
        .unwrap();
    let mut errors = Vec::new();
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        errors.push(num.write(&mut log, &v).unwrap_err());
    }
    errors.push(
        gauge
            .write(&mut log, &Gauge { level: f32::NAN })
            .unwrap_err(),
    );
    errors.push(
        gauge
            .patch(
                &mut log,
                &Gauge {
                    level: f32::INFINITY,
                },
            )
            .unwrap_err(),
    );
    for err in &errors {
        assert!(
            matches!(err, Error::State(StateError::Serialize { .. })),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("plugin 'num'") || msg.contains("plugin 'gauge'"),
            "{msg}"
        );
        assert!(msg.contains("JSON cannot carry"), "{msg}");
    }
    assert_eq!(
        std::fs::read(log.path()).unwrap(),
        before,
        "nothing appended"
    );
    assert_eq!(num.read(&log).unwrap(), None);
    // Finite numbers are fine, and read back.
    num.write(&mut log, &2.5).unwrap().unwrap();
    assert_eq!(num.read(&log).unwrap(), Some(2.5));
    assert_eq!(
        num.read(&SessionLog::open(log.path()).unwrap()).unwrap(),
        Some(2.5)
    );
}

/// docs/spec.md §3: a number that Pi's JavaScript would read as another number (an integer
/// beyond 2^53 that a double cannot hold) is refused before writing, naming the plugin;
/// integers a double holds exactly are kept.
#[test]
fn integers_pi_would_not_read_back_are_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_session(dir.path());
    let before = std::fs::read(log.path()).unwrap();
    let st = Store::at(dir.path().join("states.sqlite"))
        .and_then(|store| store.state::<Vec<u64>>("ids", Scope::Branch))
        .unwrap();
    let err = st.write(&mut log, &vec![1, u64::MAX]).unwrap_err();
    let Error::State(StateError::UnrepresentableValue { plugin, detail }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(plugin, "ids");
    assert!(detail.contains("18446744073709551615"), "{detail}");
    assert!(detail.contains("18446744073709552000"), "{detail}");
    assert!(err.to_string().contains("write it as a string"), "{err}");
    let patch = json!({"n": 9007199254740993u64});
    assert!(matches!(
        state(dir.path(), "ids").patch(&mut log, &patch),
        Err(Error::State(StateError::UnrepresentableValue { .. }))
    ));
    assert_eq!(
        std::fs::read(log.path()).unwrap(),
        before,
        "nothing appended"
    );
    let exact = vec![1u64 << 53, 12345];
    st.write(&mut log, &exact).unwrap().unwrap();
    assert_eq!(
        st.read(&SessionLog::open(log.path()).unwrap()).unwrap(),
        Some(exact)
    );
}

/// docs/spec.md §2: lone surrogate escapes are valid JSON wherever they stand: in an unknown
/// top-level key, in a message's keys, in an entry's type (then an unknown type) and in
/// a state value. The strict reader loads the file, `verify` says it is readable, and
/// the value reads back with its escapes. Written through the CLI, such a value lands in
/// the file as the escape and `read` prints it back.
#[test]
fn lone_surrogates_in_keys_types_and_values_are_read_and_written_losslessly() {
    let dir = tempfile::tempdir().unwrap();
    let a = r#"{"type":"message","id":"a0000001","parentId":null,"timestamp":"t","\ud83d":1,"message":{"role":"user","\udc00k":"cut \ud83d","content":"x"}}"#;
    let b = r#"{"type":"odd\ud83d","id":"b0000001","parentId":"a0000001","timestamp":"t"}"#;
    let c = event(
        "c0000001",
        Some("b0000001"),
        "role",
        r#"{"v":1,"scope":"branch","op":"set","value":{"\ud83d":"\udfff","pair":"\ud83d\ude00"}}"#,
    );
    let path = file_of(
        dir.path(),
        "lone.jsonl",
        &[a.as_bytes(), b.as_bytes(), c.as_bytes()],
    );
    let log = open(&path, ReadMode::Strict).unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(
        log.entry("b0000001").unwrap().entry_type(),
        EntryType::Other
    );
    assert_eq!(log.entry("a0000001").unwrap().role(), Some(Role::User));
    let v = state(dir.path(), "role").read_value(&log).unwrap().unwrap();
    assert_eq!(json::to_string(&v), r#"{"\ud83d":"\udfff","pair":"😀"}"#);
    let verify = common::cli().arg("verify").arg(&path).output().unwrap();
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    let db = dir.path().join("cli.sqlite");
    let run = |args: &[&str]| {
        let out = common::cli()
            .args(args)
            .arg(&path)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (code, id, err) = run(&[
        "write",
        "--plugin",
        "cut",
        "--value",
        r#"["\ud83d",{"\udc00":1}]"#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let line = SessionLog::open(&path)
        .unwrap()
        .raw_line(id.trim())
        .unwrap();
    assert!(
        line.contains(r#""value":["\ud83d",{"\udc00":1}]"#),
        "{line}"
    );
    let (code, out, err) = run(&["read", "--plugin", "cut"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "[\"\\ud83d\",{\"\\udc00\":1}]\n"),
        "{err}"
    );
    let (code, out, err) = run(&["read", "--plugin", "role"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "{\"\\ud83d\":\"\\udfff\",\"pair\":\"😀\"}\n"),
        "{err}"
    );
}

/// docs/spec.md §2: nesting deeper than serde_json's 128 levels is valid JSON: a state value 255
/// levels deep (as Pi could write it) reads back with its text, in memory and through
/// the projection; beyond the documented limit ([`json::MAX_READ_DEPTH`]) a read is a
/// typed error naming the entry, never a stack overflow.
#[test]
fn a_state_value_deeper_than_serde_json_reads_is_read_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let deep = nested_text(json::MAX_READ_DEPTH - 1);
    let ev = event(
        "e0000001",
        Some("a0000001"),
        "deep",
        &format!(r#"{{"v":1,"scope":"branch","op":"set","value":{deep}}}"#),
    );
    let too = nested_text(json::MAX_READ_DEPTH);
    let bad = event(
        "f0000001",
        Some("e0000001"),
        "too",
        &format!(r#"{{"v":1,"scope":"branch","op":"set","value":{too}}}"#),
    );
    let path = file_of(
        dir.path(),
        "deep.jsonl",
        &[a.as_bytes(), ev.as_bytes(), bad.as_bytes()],
    );
    let log = open(&path, ReadMode::Strict).unwrap();
    let v = state(dir.path(), "deep").read_value(&log).unwrap().unwrap();
    assert_eq!(json::to_string(&v), deep);
    let db = common::open_store(&dir.path().join("p.sqlite")).unwrap();
    let projected = db
        .read_value(&path, "deep", Scope::Branch, None)
        .unwrap()
        .unwrap();
    assert_eq!(json::to_string(&projected), deep);
    // The `data` object is one level more: this one is past the limit.
    let err = state(dir.path(), "too").read_value(&log).unwrap_err();
    let Error::State(StateError::BadEvent { entry_id, at, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!((entry_id.as_str(), at.line), ("f0000001", 4));
    assert!(
        err.to_string()
            .contains(&format!("nested deeper than {}", json::MAX_READ_DEPTH)),
        "{err}"
    );
    assert!(db.read_value(&path, "too", Scope::Branch, None).is_err());
}

/// docs/spec.md §3 and §7: a number on the command line that JavaScript would read as another
/// number is refused (exit 2, with the advice to write it as a string) and nothing is
/// appended; `1` after `1.0`, or the same object with its keys in another order, is the
/// same value: nothing is appended.
#[test]
fn the_cli_refuses_inexact_numbers_and_appends_nothing_for_equal_values() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_session(dir.path());
    let path = log.path().to_path_buf();
    let db = dir.path().join("cli.sqlite");
    let run = |cmd: &str, flag: &str, value: &str| {
        let out = common::cli()
            .arg(cmd)
            .arg(&path)
            .args(["--plugin", "n", flag, value, "--db"])
            .arg(&db)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let before = std::fs::read(&path).unwrap();
    for big in [
        "123456789012345678901234567890",
        "9007199254740993",
        "0.1000000000000000055511151231257827",
        r#"{"a":[18446744073709551615]}"#,
    ] {
        let (code, out, err) = run("write", "--value", big);
        assert_eq!((code, out.as_str()), (Some(2), ""), "{big}: {err}");
        assert!(err.contains("write it as a string"), "{big}: {err}");
    }
    let (code, _, err) = run(
        "patch",
        "--merge",
        r#"{"n":123456789012345678901234567890}"#,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("1.2345678901234568e+29"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing appended");

    let (code, id, err) = run("write", "--value", "1.0");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(id.trim().len(), 8, "{id}");
    let (code, out, err) = run("write", "--value", "1");
    assert_eq!((code, out.as_str()), (Some(0), ""), "1 after 1.0: {err}");
    let (_, _, err) = run("write", "--value", r#"{"a":1,"b":[2.5,{"c":3}]}"#);
    assert!(err.is_empty(), "{err}");
    let (code, out, err) = run("write", "--value", r#"{"b":[2.50,{"c":3.0}],"a":1e0}"#);
    assert_eq!((code, out.as_str()), (Some(0), ""), "reordered keys: {err}");
    let (code, out, err) = run("patch", "--merge", r#"{"a":1.0}"#);
    assert_eq!((code, out.as_str()), (Some(0), ""), "a no-op patch: {err}");
    // Exactly three events: 1.0, the object... and no more.
    assert_eq!(SessionLog::open(&path).unwrap().len(), 3);
    let out = common::cli()
        .arg("read")
        .arg(&path)
        .args(["--plugin", "n", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"a\":1,\"b\":[2.5,{\"c\":3}]}\n"
    );
}

/// Runs the CLI on `path` (`read`, `write`, `patch` and `drop` with `--db`), stdin
/// closed; (exit code, stdout, stderr).
fn cli_on(path: &Path, db: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let cmd = args[0];
    let mut c = common::cli();
    c.arg(cmd).arg(path).args(&args[1..]);
    if !matches!(cmd, "replay" | "tree") {
        c.arg("--db").arg(db);
    }
    let out = c.stdin(std::process::Stdio::null()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The CLI's `read` of `plugin`: its line, or `None` when absent (exit 1). Any other exit
/// fails the test.
fn cli_value(path: &Path, db: &Path, plugin: &str) -> Option<String> {
    let (code, out, err) = cli_on(path, db, &["read", "--plugin", plugin]);
    match code {
        Some(0) => Some(out.trim_end_matches('\n').to_owned()),
        Some(1) => None,
        _ => panic!("read --plugin {plugin}: exit {code:?}: {err}"),
    }
}

/// Issue: what is in the file is read as JavaScript's `JSON.parse` reads it. An integer
/// beyond 2^53 that a state value holds is the nearest double, printed as JavaScript
/// prints it, in the in-memory fold, the projection, a typed read and the CLI's `read`
/// and `replay`; writing it back as read appends nothing.
#[test]
fn integers_beyond_2_53_in_the_file_read_as_javascript_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let big = event(
        "b0000001",
        Some("a0000001"),
        "big",
        r#"{"v":1,"scope":"branch","op":"set","value":{"n":123456789012345678,"m":9007199254740993,"l":[18446744073709551615,-123456789012345678]}}"#,
    );
    let id = event(
        "c0000001",
        Some("b0000001"),
        "id",
        r#"{"v":1,"scope":"branch","op":"set","value":123456789012345678}"#,
    );
    let path = file_of(
        dir.path(),
        "big.jsonl",
        &[a.as_bytes(), big.as_bytes(), id.as_bytes()],
    );
    let js = r#"{"n":123456789012345680,"m":9007199254740992,"l":[18446744073709552000,-123456789012345680]}"#;
    let log = open(&path, ReadMode::Strict).unwrap();
    let v = state(dir.path(), "big").read_value(&log).unwrap().unwrap();
    assert_eq!(json::to_string(&v), js, "in memory");
    let db = common::open_store(&dir.path().join("p.sqlite")).unwrap();
    let projected = db.read_value(&path, "big", Scope::Branch, None).unwrap();
    assert_eq!(json::to_string(&projected.unwrap()), js, "projection");
    let typed = Store::at(dir.path().join("states.sqlite"))
        .and_then(|store| store.state::<u64>("id", Scope::Branch))
        .unwrap();
    assert_eq!(typed.read(&log).unwrap(), Some(123_456_789_012_345_680));
    assert_eq!(typed.read(&path).unwrap(), Some(123_456_789_012_345_680));

    let cli_db = dir.path().join("cli.sqlite");
    assert_eq!(cli_value(&path, &cli_db, "big").as_deref(), Some(js));
    assert_eq!(
        cli_value(&path, &cli_db, "id").as_deref(),
        Some("123456789012345680")
    );
    let (code, out, err) = cli_on(&path, &cli_db, &["replay"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("123456789012345680"), "{out}");
    assert!(!out.contains("123456789012345678"), "{out}");
    // The value as read is the value in the file: writing it appends nothing.
    let before = std::fs::read(&path).unwrap();
    let (code, out, err) = cli_on(&path, &cli_db, &["write", "--plugin", "big", "--value", js]);
    assert_eq!((code, out.as_str()), (Some(0), ""), "{err}");
    let mut log = log;
    assert_eq!(
        typed.write(&mut log, &123_456_789_012_345_680).unwrap(),
        None
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing appended");
}

/// Issue: a number beyond the double range (`1e400`) in a state value is Infinity, as
/// Pi's fold reads it: carried through the fold (a patch `{"c":1e999}` sets `c`), printed
/// `null`, and it seals nothing: `read`, `write`, `patch` and `drop` of the plugin work.
/// Infinity is not `null`: writing `null` over it appends. Writing a value that holds it
/// is refused, as JSON cannot carry it.
#[test]
fn a_number_beyond_the_double_range_is_infinity_and_seals_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let set = event(
        "b0000001",
        Some("a0000001"),
        "inf",
        r#"{"v":1,"scope":"branch","op":"set","value":{"a":1e400,"b":[-1e400,1]}}"#,
    );
    let patch = event(
        "c0000001",
        Some("b0000001"),
        "inf",
        r#"{"v":1,"scope":"branch","op":"patch","patch":{"c":1E999}}"#,
    );
    let top = event(
        "d0000001",
        Some("c0000001"),
        "top",
        r#"{"v":1,"scope":"branch","op":"set","value":-1e400}"#,
    );
    let path = file_of(
        dir.path(),
        "inf.jsonl",
        &[
            a.as_bytes(),
            set.as_bytes(),
            patch.as_bytes(),
            top.as_bytes(),
        ],
    );
    let js = r#"{"a":null,"b":[null,1],"c":null}"#;
    let mut log = open(&path, ReadMode::Strict).unwrap();
    let st = state(dir.path(), "inf");
    let v = st.read_value(&log).unwrap().unwrap();
    assert_eq!(json::to_string(&v), js);
    assert_eq!(json::infinity(&v["c"]), Some(false), "the patch set c");
    assert_eq!(json::infinity(&v["b"][0]), Some(true));
    let db = common::open_store(&dir.path().join("p.sqlite")).unwrap();
    let projected = db.read_value(&path, "inf", Scope::Branch, None).unwrap();
    assert!(json::js_eq(&projected.unwrap(), &v), "projection");
    // A value holding it is not a value to write.
    let before = std::fs::read(&path).unwrap();
    let err = st.write(&mut log, &v).unwrap_err();
    assert!(
        matches!(err, Error::State(StateError::UnrepresentableValue { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("Infinity"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing appended");

    let cli_db = dir.path().join("cli.sqlite");
    assert_eq!(cli_value(&path, &cli_db, "inf").as_deref(), Some(js));
    assert_eq!(cli_value(&path, &cli_db, "top").as_deref(), Some("null"));
    let (code, _, err) = cli_on(&path, &cli_db, &["replay"]);
    assert_eq!(code, Some(0), "replay: {err}");
    let (code, _, err) = cli_on(&path, &cli_db, &["tree"]);
    assert_eq!(code, Some(0), "tree: {err}");
    let (code, id, err) = cli_on(
        &path,
        &cli_db,
        &["patch", "--plugin", "inf", "--merge", r#"{"d":1}"#],
    );
    assert_eq!((code, id.trim().len()), (Some(0), 8), "patch: {err}");
    assert_eq!(
        cli_value(&path, &cli_db, "inf").as_deref(),
        Some(r#"{"a":null,"b":[null,1],"c":null,"d":1}"#)
    );
    // Infinity is not null: a write of null over it appends, and then it is null.
    let (code, id, err) = cli_on(
        &path,
        &cli_db,
        &["write", "--plugin", "top", "--value", "null"],
    );
    assert_eq!(
        (code, id.trim().len()),
        (Some(0), 8),
        "write null over -Infinity: {err}"
    );
    let (code, id, err) = cli_on(
        &path,
        &cli_db,
        &["write", "--plugin", "top", "--value", "null"],
    );
    assert_eq!((code, id.as_str()), (Some(0), ""), "null over null: {err}");
    let (code, id, err) = cli_on(
        &path,
        &cli_db,
        &["write", "--plugin", "inf", "--value", r#"{"a":1}"#],
    );
    assert_eq!((code, id.trim().len()), (Some(0), 8), "write: {err}");
    let (code, id, err) = cli_on(&path, &cli_db, &["drop", "--plugin", "inf"]);
    assert_eq!((code, id.trim().len()), (Some(0), 8), "drop: {err}");
    assert_eq!(cli_value(&path, &cli_db, "inf"), None);
    // Given as a new value, it is refused.
    let (code, out, err) = cli_on(
        &path,
        &cli_db,
        &["write", "--plugin", "inf", "--value", "1e400"],
    );
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    assert!(err.contains("Infinity"), "{err}");
}

/// Issue: a value nested as deep as Pi writes (its `JSON.stringify` stops at about
/// 4,170 levels; `interop::values_pi_writes_as_deep_as_it_can_read_and_fold_as_pis`
/// measures it) is read in memory, by the projection, by `read`, `replay` and `tree`, and
/// written over: `patch` (whose own patch is shallow), `write` and `drop` work. The
/// test runs on a test thread's 2 MiB stack.
#[test]
fn a_value_nested_as_deep_as_pi_writes_is_read_and_written_over() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let mut lines = vec![a];
    let mut parent = "a0000001".to_owned();
    for (i, depth) in [300, 4_300].into_iter().enumerate() {
        let id = format!("e000000{i}");
        lines.push(event(
            &id,
            Some(&parent),
            &format!("d{depth}"),
            &format!(
                r#"{{"v":1,"scope":"branch","op":"set","value":{{"k":{}}}}}"#,
                nested_text(depth - 1)
            ),
        ));
        parent = id;
    }
    let refs: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    let path = file_of(dir.path(), "deep.jsonl", &refs);
    let cli_db = dir.path().join("cli.sqlite");
    for depth in [300, 4_300] {
        let plugin = format!("d{depth}");
        let text = format!(r#"{{"k":{}}}"#, nested_text(depth - 1));
        let mut log = open(&path, ReadMode::Strict).unwrap();
        let st = state(dir.path(), &plugin);
        let v = st.read_value(&log).unwrap().unwrap();
        assert_eq!(json::to_string(&v), text, "{plugin} in memory");
        let db = common::open_store(&dir.path().join("p.sqlite")).unwrap();
        let projected = db.read_value(&path, &plugin, Scope::Branch, None).unwrap();
        assert_eq!(
            json::to_string(&projected.unwrap()),
            text,
            "{plugin} projection"
        );
        assert_eq!(st.history(&log).unwrap().len(), 1);
        assert_eq!(
            cli_value(&path, &cli_db, &plugin).as_deref(),
            Some(text.as_str())
        );
        // A library patch on top: the value stays as deep, and reads back.
        st.patch(&mut log, &json!({"n": 1})).unwrap().unwrap();
        let fresh = open(&path, ReadMode::Strict).unwrap();
        let after = st.read_value(&fresh).unwrap().unwrap();
        assert_eq!(
            json::to_string(&after),
            format!(r#"{}{}"#, &text[..text.len() - 1], r#","n":1}"#)
        );
        let (code, id, err) = cli_on(
            &path,
            &cli_db,
            &["patch", "--plugin", &plugin, "--merge", r#"{"x":1}"#],
        );
        assert_eq!(
            (code, id.trim().len()),
            (Some(0), 8),
            "{plugin} patch: {err}"
        );
        let want = format!(r#"{}{}"#, &text[..text.len() - 1], r#","n":1,"x":1}"#);
        assert_eq!(
            cli_value(&path, &cli_db, &plugin).as_deref(),
            Some(want.as_str())
        );
    }
    for cmd in ["replay", "tree"] {
        let (code, _, err) = cli_on(&path, &cli_db, &[cmd]);
        assert_eq!(code, Some(0), "{cmd}: {err}");
    }
    for plugin in ["d300", "d4300"] {
        let (code, id, err) = cli_on(
            &path,
            &cli_db,
            &["write", "--plugin", plugin, "--value", "1"],
        );
        assert_eq!(
            (code, id.trim().len()),
            (Some(0), 8),
            "{plugin} write: {err}"
        );
        let (code, id, err) = cli_on(&path, &cli_db, &["drop", "--plugin", plugin]);
        assert_eq!(
            (code, id.trim().len()),
            (Some(0), 8),
            "{plugin} drop: {err}"
        );
    }
}

/// Issue: a number typed with an exponent at the end of an `i64`'s range
/// (`1.5e-9223372036854775808`, which JavaScript reads as 0) panicked the CLI with
/// "attempt to subtract with overflow" (a build with overflow checks, as this one). Given
/// as `--value`, on stdin, or in `patch --merge`, it is refused as inexact: exit 2, the
/// nearest value named, nothing appended.
#[test]
fn a_typed_number_with_an_extreme_exponent_is_refused_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_session(dir.path());
    let path = log.path().to_path_buf();
    let db = dir.path().join("cli.sqlite");
    let before = std::fs::read(&path).unwrap();
    let run = |args: &[&str], stdin: Option<&str>| {
        let mut child = common::cli()
            .args(args)
            .arg(&path)
            .args(["--plugin", "n", "--db"])
            .arg(&db)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut input = child.stdin.take().unwrap();
            input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        (out.status.code(), String::from_utf8(out.stderr).unwrap())
    };
    for literal in ["1.5e-9223372036854775808", "-15e-9223372036854775808"] {
        let value = format!(r#"{{"a":{literal}}}"#);
        for (args, stdin) in [
            (vec!["write", "--value", literal], None),
            (vec!["write"], Some(literal)),
            (vec!["patch", "--merge", value.as_str()], None),
        ] {
            let (code, err) = run(&args, stdin);
            assert_eq!(code, Some(2), "{args:?} {stdin:?}: {err}");
            assert!(!err.contains("panicked"), "{err}");
            assert!(err.contains("reads it as 0"), "{args:?}: {err}");
        }
    }
    for literal in ["1.5e9223372036854775807", "1e400"] {
        let (code, err) = run(&["write", "--value", literal], None);
        assert_eq!(code, Some(2), "{literal}: {err}");
        assert!(err.contains("Infinity"), "{literal}: {err}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing appended");
}

/// `[[[…]]]`, `depth` arrays deep, as text.
fn nested_text(depth: usize) -> String {
    let mut s = String::with_capacity(2 * depth + 1);
    s.extend(std::iter::repeat_n('[', depth));
    s.push('0');
    s.extend(std::iter::repeat_n(']', depth));
    s
}

#[test]
fn a_line_with_100k_nested_arrays_never_overflows_the_stack() {
    let dir = tempfile::tempdir().unwrap();
    let deep = nested_text(100_000);
    // In a message body: the reader skips bodies without recursion, so it loads.
    let body = format!(
        r#"{{"type":"message","id":"d0000001","parentId":"a0000001","timestamp":"t","message":{{"role":"user","content":{deep}}}}}"#
    );
    let a = entry("a0000001", None, "a");
    let c = entry("c0000001", Some("d0000001"), "c");
    let path = file_of(
        dir.path(),
        "deep-body.jsonl",
        &[a.as_bytes(), body.as_bytes(), c.as_bytes()],
    );
    let log = open(&path, ReadMode::Strict).unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(log.raw_line("d0000001").unwrap().len(), body.len());

    // In a state event's data: the file loads; reading that plugin is a clean error that
    // names the plugin, the entry and the line; other plugins are unaffected.
    let ev = event(
        "e0000001",
        Some("a0000001"),
        "deep",
        &format!(r#"{{"v":1,"scope":"branch","op":"set","value":{deep}}}"#),
    );
    let ok = event(
        "f0000001",
        Some("e0000001"),
        "other",
        r#"{"v":1,"scope":"branch","op":"set","value":1}"#,
    );
    let path = file_of(
        dir.path(),
        "deep-data.jsonl",
        &[a.as_bytes(), ev.as_bytes(), ok.as_bytes()],
    );
    let log = open(&path, ReadMode::Strict).unwrap();
    let err = state(dir.path(), "deep").read(&log).unwrap_err();
    let Error::State(StateError::BadEvent {
        plugin,
        entry_id,
        at,
        ..
    }) = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (plugin.as_str(), entry_id.as_str(), at.line),
        ("deep", "e0000001", 3)
    );
    assert!(
        err.to_string()
            .contains(&format!("nested deeper than {}", json::MAX_READ_DEPTH)),
        "{err}"
    );
    assert_eq!(
        state(dir.path(), "other").read(&log).unwrap(),
        Some(json!(1))
    );
    // The projection reports the same problem, and still serves the other plugin.
    let db = common::open_store(&dir.path().join("p.sqlite")).unwrap();
    assert!(db.read_value(&path, "deep", Scope::Branch, None).is_err());
    assert_eq!(
        db.read_value(&path, "other", Scope::Branch, None).unwrap(),
        Some(json!(1))
    );

    // As the header's cwd: a clean refusal of the header.
    let path = dir.path().join("deep-header.jsonl");
    let header = format!(r#"{{"type":"session","version":3,"id":"x","cwd":{deep}}}"#);
    std::fs::write(&path, format!("{header}\n{a}\n")).unwrap();
    let (err, _) = refused(&path);
    assert!(
        matches!(
            err,
            Error::Log(LogError::Open(OpenError::Invalid(
                InvalidLog::InvalidHeader { .. }
            )))
        ),
        "{err}"
    );

    // As a whole line between entries (not an entry): refused at its line, in strict mode.
    let path = file_of(
        dir.path(),
        "deep-line.jsonl",
        &[a.as_bytes(), deep.as_bytes(), c.as_bytes()],
    );
    let (err, msg) = refused(&path);
    assert!(
        matches!(err, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::InvalidEntry { at, .. }))) if at.line == 3),
        "{msg}"
    );
}

/// A value nested deeper than the reader's JSON limit (128) must not be acknowledged:
/// either refused before anything is written, or written so that it reads back.
#[test]
fn a_value_nested_deeper_than_the_reader_accepts_is_refused_or_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_session(dir.path());
    let st = state(dir.path(), "deep");
    let value: Value = serde_json::from_str(&nested_text(100)).unwrap();
    let value = json!({"a": [value]});
    let before = std::fs::read(log.path()).unwrap();
    let deeper = {
        let mut v = value.clone();
        for _ in 0..50 {
            v = json!([v]);
        }
        v
    };
    match st.write(&mut log, &deeper) {
        Err(e) => {
            assert!(e.to_string().contains("plugin 'deep'"), "{e}");
            assert_eq!(
                std::fs::read(log.path()).unwrap(),
                before,
                "refused, yet appended"
            );
        }
        Ok(id) => {
            let id = id.unwrap();
            let read = st.read(&log);
            let fresh = SessionLog::open(log.path()).unwrap();
            let reread = st.read_at(&fresh, &id);
            assert!(
                matches!(&read, Ok(Some(v)) if *v == deeper)
                    && matches!(&reread, Ok(Some(v)) if *v == deeper),
                "write of a 152-deep value acknowledged as entry {id}, but it does not read \
                 back: in this process {read:?}; after reopening {reread:?}"
            );
        }
    }
}

/// The child half of [`a_100k_deep_value_given_to_write_or_patch_is_a_clean_error`].
fn deep_value_child(op: &str, dir: &Path) {
    let mut v = Value::from(0);
    for _ in 0..100_000 {
        v = Value::Array(vec![v]);
    }
    let mut log = new_session(dir);
    let st = state(dir, "deep");
    let r = match op {
        "write" => {
            let r = st.write(&mut log, &v);
            // Dropping a 100k-deep Value recurses; this child ends without dropping it.
            std::mem::forget(v);
            r
        }
        _ => {
            let mut patch = serde_json::Map::new();
            patch.insert("k".into(), v);
            let patch = Value::Object(patch);
            let r = st.patch(&mut log, &patch);
            std::mem::forget(patch);
            r
        }
    };
    match r {
        Ok(id) => println!("RESULT ok {id:?}"),
        Err(e) => println!("RESULT err {e}"),
    }
    std::process::exit(0);
}

/// Run in a child process (the test binary itself) so that a stack overflow shows as a
/// failed test rather than killing every other test.
#[test]
fn a_100k_deep_value_given_to_write_or_patch_is_a_clean_error() {
    // The name as the runner binary lists it (its module path, less the crate).
    const TEST: &str = "bad_input::a_100k_deep_value_given_to_write_or_patch_is_a_clean_error";
    if let (Ok(op), Ok(dir)) = (
        std::env::var("BAD_INPUT_DEEP_OP"),
        std::env::var("BAD_INPUT_DEEP_DIR"),
    ) {
        deep_value_child(&op, Path::new(&dir));
        return;
    }
    for op in ["write", "patch"] {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env("BAD_INPUT_DEEP_OP", op)
            .env("BAD_INPUT_DEEP_DIR", dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{op} of a 100k-deep value crashed the process ({}): {}",
            out.status,
            stderr
                .lines()
                .find(|l| l.contains("overflow"))
                .unwrap_or(&stderr)
        );
        let result = stdout
            .lines()
            .find_map(|l| l.find("RESULT ").map(|i| &l[i + "RESULT ".len()..]))
            .unwrap_or_default();
        assert!(
            result.starts_with("err "),
            "{op}: expected a clean error, got {result:?}"
        );
        assert!(
            result.contains("plugin 'deep'"),
            "{op}: names the plugin: {result}"
        );
        let session = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .unwrap();
        assert_eq!(
            SessionLog::open(&session).unwrap().len(),
            1,
            "{op}: nothing appended"
        );
    }
}

#[test]
fn a_10_mb_value_is_written_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_session(dir.path());
    let st = state(dir.path(), "big");
    let chunk: String = "0123456789abcdef\"\\é✓".repeat(64);
    let value = json!({"chunks": vec![chunk; 10 * 1024 * 1024 / (64 * 22)]});
    let len = value.to_string().len();
    assert!(len >= 10 * 1024 * 1024, "{len}");
    let id = st.write(&mut log, &value).unwrap().unwrap();
    assert_eq!(st.read(&log).unwrap().as_ref(), Some(&value));
    let fresh = SessionLog::open(log.path()).unwrap();
    assert_eq!(st.read_at(&fresh, &id).unwrap().as_ref(), Some(&value));
    assert!(fresh.entry(&id).unwrap().line_len() > len as u64);
    let db = common::open_store(&dir.path().join("states.sqlite")).unwrap();
    assert_eq!(
        db.read_value(log.path(), "big", Scope::Branch, None)
            .unwrap()
            .as_ref(),
        Some(&value)
    );
    // A patch on top of it stays small on disk.
    let before = std::fs::metadata(log.path()).unwrap().len();
    st.patch(&mut log, &json!({"extra": 1})).unwrap().unwrap();
    assert!(std::fs::metadata(log.path()).unwrap().len() - before < 1024);
}

// ---------------------------------------------------------------------------------------
// Session files
// ---------------------------------------------------------------------------------------

#[test]
fn invalid_utf8_and_nul_bytes_are_corruption_in_the_middle_and_torn_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let c = entry("c0000001", Some("a0000001"), "c");
    let bad_utf8 = entry("b0000001", Some("a0000001"), "XX")
        .replace("XX", "\u{1}")
        .into_bytes();
    let bad_utf8: Vec<u8> = bad_utf8
        .iter()
        .map(|&b| if b == 1 { 0xFF } else { b })
        .collect();
    let with_nul: Vec<u8> = entry("b0000001", Some("a0000001"), "XX")
        .replace("XX", "\u{1}")
        .bytes()
        .map(|b| if b == 1 { 0 } else { b })
        .collect();
    for (name, bad) in [("utf8", &bad_utf8), ("nul", &with_nul)] {
        // In the middle, followed by a valid line: corruption at line 3 with its offset.
        let path = file_of(
            dir.path(),
            &format!("{name}-mid.jsonl"),
            &[a.as_bytes(), bad, c.as_bytes()],
        );
        let (err, msg) = refused(&path);
        let Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Corrupt { at, .. }))) = err
        else {
            panic!("{name}: {msg}")
        };
        assert_eq!(at.line, 3, "{msg}");
        assert_eq!(at.offset, (HEADER.len() + 1 + a.len() + 1) as u64, "{msg}");
        assert!(msg.contains("line 3 (byte offset"), "{msg}");
        // Salvage skips it and reports it; the entry after it becomes a child of a.
        let s = open(&path, ReadMode::Salvage).unwrap();
        assert_eq!(s.len(), 2, "{name}");
        assert!(
            s.findings()
                .iter()
                .any(|f| f.kind == FindingKind::Corrupt && f.at.line == 3)
        );

        // As the final line: treated as torn (a warning) ...
        let path = file_of(
            dir.path(),
            &format!("{name}-end.jsonl"),
            &[a.as_bytes(), bad],
        );
        let mut log = open(&path, ReadMode::Strict).unwrap();
        let f = log.findings();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].kind, f[0].at.line),
            (FindingKind::UnparsableFinalLine, 3)
        );
        // ... and the writer refuses to bury it under a new entry.
        let err = log
            .append(NewEntry::message(json!({"role": "user", "content": "x"})))
            .unwrap_err();
        assert!(
            matches!(err, AppendError::TrailingGarbage { at, .. } if at.line == 3),
            "{err}"
        );
        assert!(err.to_string().contains("verify"), "says what to do: {err}");
    }
}

/// What some file systems leave after a power loss: a tail of zero bytes. It is an
/// invisible torn tail; the writer closes it with a newline (as for any torn tail), the
/// zeros stay as a torn record that readers skip and report, and the append follows: a
/// crash never seals a session (docs/spec.md §2).
#[test]
fn a_tail_of_nul_bytes_is_invisible_and_the_writer_continues_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = new_session(dir.path());
    let path = log.path().to_path_buf();
    drop(log);
    let mut bytes = std::fs::read(&path).unwrap();
    let valid_len = bytes.len();
    bytes.extend_from_slice(&[0; 512]);
    std::fs::write(&path, &bytes).unwrap();
    let mut log = open(&path, ReadMode::Strict).unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log.findings()[0].kind, FindingKind::TornTail);
    let id = log
        .append(NewEntry::message(json!({"role": "user", "content": "x"})))
        .unwrap();
    let after = std::fs::read(&path).unwrap();
    assert_eq!(&after[..valid_len + 512], &bytes[..], "no byte destroyed");
    assert_eq!(after[valid_len + 512], b'\n', "closed before the append");
    let reopened = open(&path, ReadMode::Strict).unwrap();
    assert_eq!(reopened.len(), 2);
    assert_eq!(reopened.leaf_id(), Some(id.as_str()));
    let kinds: Vec<_> = reopened.findings().iter().map(|f| f.kind).collect();
    assert_eq!(kinds, vec![FindingKind::TornRecord]);
}

#[test]
fn crlf_line_endings_are_accepted_and_appends_use_lf() {
    let dir = tempfile::tempdir().unwrap();
    let a = format!("{}\r", entry("a0000001", None, "a"));
    let b = format!("{}\r", entry("b0000001", Some("a0000001"), "b"));
    let path = dir.path().join("crlf.jsonl");
    std::fs::write(&path, format!("{HEADER}\r\n{a}\n{b}\n")).unwrap();
    let mut log = open(&path, ReadMode::Strict).unwrap();
    assert_eq!(log.len(), 2);
    assert!(log.findings().is_empty());
    let st = state(dir.path(), "role");
    let id = st.write(&mut log, &json!("after crlf")).unwrap().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with("}\n") && !text.ends_with("\r\n"));
    let log = open(&path, ReadMode::Strict).unwrap();
    assert_eq!(log.entry(&id).unwrap().parent_id(), Some("b0000001"));
    assert_eq!(st.read(&log).unwrap(), Some(json!("after crlf")));
}

/// A second `session` header line inside the file (Pi 0.73 re-flushes a whole session
/// after a header): skipped with a warning at its line, as Pi skips it.
#[test]
fn a_second_header_line_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let b = entry("b0000001", Some("a0000001"), "b");
    let path = file_of(
        dir.path(),
        "two-headers.jsonl",
        &[a.as_bytes(), HEADER.as_bytes(), b.as_bytes()],
    );
    let log = open(&path, ReadMode::Strict).unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log.entry("b0000001").unwrap().parent_id(), Some("a0000001"));
    let f = log.findings();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].kind, f[0].severity, f[0].at.line),
        (FindingKind::ExtraHeader, Severity::Warning, 3)
    );
}

#[test]
fn a_byte_order_mark_is_refused_strictly_and_skipped_by_salvage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bom.jsonl");
    std::fs::write(
        &path,
        format!("\u{feff}{HEADER}\n{}\n", entry("a0000001", None, "a")),
    )
    .unwrap();
    let (err, msg) = refused(&path);
    assert!(
        matches!(
            err,
            Error::Log(LogError::Open(OpenError::Invalid(
                InvalidLog::InvalidHeader { .. }
            )))
        ),
        "{msg}"
    );
    assert!(
        msg.contains("byte order mark") && msg.contains("line 1"),
        "{msg}"
    );
    assert_eq!(open(&path, ReadMode::Salvage).unwrap().len(), 1);
}

#[test]
fn a_5_mb_line_in_the_middle_loads_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let big = entry(
        "b0000001",
        Some("a0000001"),
        &"x✓".repeat(5 * 1024 * 1024 / 4),
    );
    assert!(big.len() > 5 * 1024 * 1024);
    let c = event(
        "c0000001",
        Some("b0000001"),
        "role",
        r#"{"v":1,"scope":"branch","op":"set","value":"after"}"#,
    );
    let path = file_of(
        dir.path(),
        "big-line.jsonl",
        &[a.as_bytes(), big.as_bytes(), c.as_bytes()],
    );
    let mut log = open(&path, ReadMode::Strict).unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(log.raw_line("b0000001").unwrap(), big);
    assert_eq!(log.entry("c0000001").unwrap().location().line, 4);
    let st = state(dir.path(), "role");
    assert_eq!(st.read(&log).unwrap(), Some(json!("after")));
    st.write(&mut log, &json!("next")).unwrap().unwrap();
    assert_eq!(open(&path, ReadMode::Strict).unwrap().len(), 4);
}

/// What a refused file's error must match.
type Expect = fn(&Error) -> bool;

#[test]
fn structural_damage_is_refused_naming_line_and_entry() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let b = entry("b0000001", Some("a0000001"), "b");
    let cases: Vec<(&str, Vec<String>, Expect, Vec<&str>)> = vec![
        (
            "duplicate id",
            vec![
                a.clone(),
                b.clone(),
                entry("b0000001", Some("a0000001"), "again"),
            ],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DuplicateId { at, first_line: Some(3), .. }))) if at.line == 4),
            vec!["'b0000001'", "line 4", "first used on line 3"],
        ),
        (
            "self-parent",
            vec![a.clone(), entry("s0000001", Some("s0000001"), "me")],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Cycle { at, .. }))) if at.line == 3),
            vec!["'s0000001'", "line 3", "its own parent"],
        ),
        (
            "a cycle through a forward reference",
            vec![
                a.clone(),
                entry("x0000001", Some("y0000001"), "x"),
                entry("y0000001", Some("x0000001"), "y"),
            ],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DanglingParent { at, .. }))) if at.line == 3),
            vec!["'x0000001'", "'y0000001'", "line 3", "forward reference"],
        ),
        (
            "a dangling parent",
            vec![a.clone(), entry("d0000001", Some("gone0000"), "d")],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DanglingParent { at, .. }))) if at.line == 3),
            vec!["'d0000001'", "'gone0000'", "line 3"],
        ),
        (
            "an empty id",
            vec![a.clone(), entry("", Some("a0000001"), "e")],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::InvalidEntry { at, .. }))) if at.line == 3),
            vec!["line 3", "`id` is empty"],
        ),
        (
            "a numeric id",
            vec![
                a.clone(),
                r#"{"type":"message","id":7,"parentId":null}"#.to_owned(),
            ],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::InvalidEntry { at, .. }))) if at.line == 3),
            vec!["line 3", "`id`"],
        ),
        (
            "a numeric parentId",
            vec![
                a.clone(),
                r#"{"type":"message","id":"n0000001","parentId":7}"#.to_owned(),
            ],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::InvalidEntry { at, id: Some(id), .. }))) if at.line == 3 && id == "n0000001"),
            vec!["line 3", "'n0000001'", "`parentId` is 7"],
        ),
        (
            "a JSON array line",
            vec![a.clone(), "[1,2,3]".to_owned(), b.clone()],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::InvalidEntry { at, .. }))) if at.line == 3),
            vec!["line 3"],
        ),
        (
            "a JSON number line",
            vec![a.clone(), "42".to_owned(), b.clone()],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::InvalidEntry { at, .. }))) if at.line == 3),
            vec!["line 3"],
        ),
        (
            "a syntax error in the middle",
            vec![
                a.clone(),
                r#"{"type":"message","id":"aa",,}"#.to_owned(),
                b.clone(),
            ],
            |e| matches!(e, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::Corrupt { at, .. }))) if at.line == 3),
            vec!["line 3", "byte offset", "verify --salvage"],
        ),
    ];
    for (i, (what, lines, expected, words)) in cases.iter().enumerate() {
        let refs: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        let path = file_of(dir.path(), &format!("case{i}.jsonl"), &refs);
        let (err, msg) = refused(&path);
        assert!(expected(&err), "{what}: {msg}");
        for w in words {
            assert!(msg.contains(w), "{what}: {msg:?} names {w:?}");
        }
        // Salvage reads what Pi would, and reports the problem at the same line.
        let s = open(&path, ReadMode::Salvage).unwrap_or_else(|e| panic!("{what}: salvage: {e}"));
        assert!(
            s.findings().iter().any(|f| f.severity == Severity::Error),
            "{what}: salvage reports it: {:?}",
            s.findings()
        );
    }
}

#[test]
fn the_projection_refuses_a_duplicate_id_without_inventing_the_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let b = entry("b0000001", Some("a0000001"), "b");
    let again = entry("b0000001", Some("a0000001"), "again");
    let path = file_of(
        dir.path(),
        "dup.jsonl",
        &[a.as_bytes(), b.as_bytes(), again.as_bytes()],
    );
    // The catch-up keeps ids, not the lines they came from: it says the id was used
    // before, not on which line.
    let err = state(dir.path(), "p").read(&path).unwrap_err();
    assert!(
        matches!(&err, Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::DuplicateId { at, id, first_line: None, .. })))
            if at.line == 4 && id == "b0000001"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("first used by an earlier entry"), "{msg}");
    assert!(!msg.contains("line 0"), "{msg}");
}

#[test]
fn bad_headers_are_refused_naming_line_1() {
    let dir = tempfile::tempdir().unwrap();
    let a = entry("a0000001", None, "a");
    let cases: [(&str, &[u8], Expect); 8] = [
        ("empty", b"", |e| {
            matches!(
                e,
                Error::Log(LogError::Open(OpenError::Invalid(
                    InvalidLog::MissingHeader { .. }
                )))
            )
        }),
        ("no newline", HEADER.as_bytes(), |e| {
            matches!(
                e,
                Error::Log(LogError::Open(OpenError::Invalid(
                    InvalidLog::MissingHeader { .. }
                )))
            )
        }),
        (
            "version 4",
            br#"{"type":"session","version":4,"id":"v4"}"#,
            |e| {
                matches!(
                    e,
                    Error::Log(LogError::Open(OpenError::Invalid(
                        InvalidLog::UnsupportedVersion { .. }
                    )))
                )
            },
        ),
        (
            "version 3.5",
            br#"{"type":"session","version":3.5,"id":"v"}"#,
            |e| {
                matches!(
                    e,
                    Error::Log(LogError::Open(OpenError::Invalid(
                        InvalidLog::UnsupportedVersion { .. }
                    )))
                )
            },
        ),
        (
            "version \"3\"",
            br#"{"type":"session","version":"3","id":"v"}"#,
            |e| {
                matches!(
                    e,
                    Error::Log(LogError::Open(OpenError::Invalid(
                        InvalidLog::InvalidHeader { .. }
                    )))
                )
            },
        ),
        (
            "version 0",
            br#"{"type":"session","version":0,"id":"v"}"#,
            |e| {
                matches!(
                    e,
                    Error::Log(LogError::Open(OpenError::Invalid(
                        InvalidLog::InvalidHeader { .. }
                    )))
                )
            },
        ),
        ("no id", br#"{"type":"session","version":3}"#, |e| {
            matches!(
                e,
                Error::Log(LogError::Open(OpenError::Invalid(
                    InvalidLog::InvalidHeader { .. }
                )))
            )
        }),
        ("an entry first", a.as_bytes(), |e| {
            matches!(
                e,
                Error::Log(LogError::Open(OpenError::Invalid(
                    InvalidLog::MissingHeader { .. }
                )))
            )
        }),
    ];
    for (what, first, expected) in cases {
        let path = dir.path().join("h.jsonl");
        let mut bytes = first.to_vec();
        if what != "empty" && what != "no newline" {
            bytes.push(b'\n');
            bytes.extend_from_slice(a.as_bytes());
            bytes.push(b'\n');
        }
        std::fs::write(&path, &bytes).unwrap();
        let (err, msg) = refused(&path);
        assert!(expected(&err), "{what}: {msg}");
        if let Error::Log(LogError::Open(OpenError::Invalid(InvalidLog::UnsupportedVersion {
            ..
        }))) = err
        {
            assert!(msg.contains("upgrade"), "{msg}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Proptest equivalents of the fuzz targets (fuzz/fuzz_targets/*.rs)
// ---------------------------------------------------------------------------------------

/// A runner that saves failing cases to `proptest-regressions/bad_input.txt` (commit
/// them: they are replayed first on every later run).
fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/bad_input.txt"
        )))),
        ..Config::default()
    })
}

/// Opens `bytes` strictly and in salvage mode: never a panic, never a change to the
/// file, and what a strict read accepts, a salvage read keeps too.
fn open_both(path: &Path, bytes: &[u8]) -> Result<(), TestCaseError> {
    std::fs::write(path, bytes).unwrap();
    let strict = LogOptions::new().open(path);
    let salvage = LogOptions::new().mode(ReadMode::Salvage).open(path);
    prop_assert_eq!(std::fs::read(path).unwrap(), bytes);
    if let Ok(s) = &strict {
        let kept: Vec<&str> = s.entries().map(|e| e.id()).collect();
        prop_assert!(s.findings().iter().all(|f| f.severity == Severity::Warning));
        match &salvage {
            Ok(v) => prop_assert_eq!(kept, v.entries().map(|e| e.id()).collect::<Vec<_>>()),
            Err(e) => prop_assert!(false, "strict read it, salvage refused: {}", e),
        }
        // Every entry's line can be read back, and state reads do not panic.
        for e in s.entries() {
            s.raw_line(e.id()).unwrap();
        }
    }
    if let Err(e) = &strict {
        prop_assert!(!e.to_string().is_empty());
    }
    Ok(())
}

#[test]
fn arbitrary_bytes_never_panic_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzz.jsonl");
    let cases = 1024;
    runner(cases)
        .run(&prop::collection::vec(any::<u8>(), 0..4096), |bytes| {
            open_both(&path, &bytes)
        })
        .unwrap();
    println!("arbitrary files tried: {cases}");
}

/// One line of a session file, from pieces that reach the interesting classifications.
fn line_strategy() -> impl Strategy<Value = Vec<u8>> {
    let id = prop::sample::select(vec!["a0000001", "b0000001", "c0000001", "d0000001", ""]);
    let parent = prop::option::of(prop::sample::select(vec![
        "a0000001", "b0000001", "c0000001", "zz",
    ]));
    let valid = (id, parent).prop_map(|(id, p)| entry(id, p, "x").into_bytes());
    prop_oneof![
        4 => valid.clone(),
        // A valid line cut anywhere (a torn record), or with one byte changed.
        2 => (valid.clone(), any::<prop::sample::Index>()).prop_map(|(l, i)| l[..i.index(l.len())].to_vec()),
        2 => (valid, any::<prop::sample::Index>(), any::<u8>()).prop_map(|(mut l, i, b)| {
            let at = i.index(l.len());
            l[at] = b;
            l.retain(|&c| c != b'\n');
            l
        }),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|mut l| {
            l.retain(|&c| c != b'\n');
            l
        }),
        1 => Just(b"".to_vec()),
        1 => Just(HEADER.as_bytes().to_vec()),
    ]
}

#[test]
fn arbitrary_lines_after_a_valid_header_never_panic_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lines.jsonl");
    let cases = 1024;
    let strategy = (prop::collection::vec(line_strategy(), 0..12), any::<bool>());
    runner(cases)
        .run(&strategy, |(lines, final_newline)| {
            let mut bytes = HEADER.as_bytes().to_vec();
            bytes.push(b'\n');
            for (i, l) in lines.iter().enumerate() {
                bytes.extend_from_slice(l);
                if i + 1 < lines.len() || final_newline {
                    bytes.push(b'\n');
                }
            }
            open_both(&path, &bytes)
        })
        .unwrap();
    println!("arbitrary line sequences tried: {cases}");
}

/// Any JSON value, nested a few levels.
fn json_strategy() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z0-9 ✓\"\\\\]{0,8}".prop_map(Value::from),
        prop::sample::select(vec![
            "v", "scope", "op", "value", "patch", "set", "drop", "branch", "session"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec!["v", "scope", "op", "value", "patch", "x"]),
                    inner
                ),
                0..5
            )
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// Envelope-shaped data: mostly valid keys with arbitrary values, so decoding gets past
/// its first checks.
fn data_strategy() -> impl Strategy<Value = String> {
    let envelope = (
        prop::option::of(prop_oneof![Just(json!(1)), Just(json!(2)), json_strategy()]),
        prop::option::of(prop_oneof![
            Just(json!("branch")),
            Just(json!("session")),
            json_strategy()
        ]),
        prop::option::of(prop_oneof![
            Just(json!("set")),
            Just(json!("patch")),
            Just(json!("drop")),
            json_strategy()
        ]),
        prop::option::of(json_strategy()),
        prop::option::of(json_strategy()),
    )
        .prop_map(|(v, scope, op, value, patch)| {
            let mut m = serde_json::Map::new();
            for (k, x) in [
                ("v", v),
                ("scope", scope),
                ("op", op),
                ("value", value),
                ("patch", patch),
            ] {
                if let Some(x) = x {
                    m.insert(k.into(), x);
                }
            }
            Value::Object(m).to_string()
        });
    prop_oneof![
        6 => envelope,
        2 => json_strategy().prop_map(|v| v.to_string()),
        1 => "[ -~]{0,40}",
    ]
}

#[test]
fn arbitrary_state_event_data_never_panics_a_read() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.sqlite");
    let states: Vec<SessionState<Value>> = [Scope::Branch, Scope::Session]
        .into_iter()
        .map(|s| {
            Store::at(&db)
                .and_then(|store| store.state("p", s))
                .unwrap()
        })
        .collect();
    let projection = std::cell::RefCell::new(common::open_store(&db).unwrap());
    let cases = 512;
    let n = std::cell::Cell::new(0u32);
    let errors = std::cell::Cell::new(0u32);
    runner(cases)
        .run(&prop::collection::vec(data_strategy(), 1..4), |datas| {
            n.set(n.get() + 1);
            let n = n.get();
            let a = entry("a0000001", None, "a");
            let mut lines = vec![a];
            let mut parent = "a0000001".to_owned();
            for (i, d) in datas.iter().enumerate() {
                let id = format!("e{i:07}");
                lines.push(event(&id, Some(&parent), "p", d));
                parent = id;
            }
            let refs: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
            let path = file_of(dir.path(), &format!("data{n}.jsonl"), &refs);
            let Ok(log) = SessionLog::open(&path) else {
                // Data that is not JSON makes a corrupt or torn line: the reader's business.
                return Ok(());
            };
            for st in &states {
                for r in [
                    st.read(&log).map(drop),
                    st.read_at(&log, "a0000001").map(drop),
                    st.history(&log).map(drop),
                ] {
                    if let Err(e) = r {
                        errors.set(errors.get() + 1);
                        prop_assert!(
                            matches!(e, Error::State(StateError::BadEvent { ref plugin, .. }) if plugin == "p"),
                            "{}",
                            e
                        );
                    }
                }
                let fold = st.read(&log).ok();
                let proj = projection
                    .borrow_mut()
                    .read_value(&path, "p", st.scope(), None)
                    .ok();
                prop_assert_eq!(fold, proj, "the projection folds as the log does");
            }
            std::fs::remove_file(&path).unwrap();
            Ok(())
        })
        .unwrap();
    println!(
        "state event data tried: {cases} sessions ({} reads refused as bad events)",
        errors.get()
    );
}

/// Number literals of the class the value defects came from: beyond 2^53, beyond and
/// below the double range, longer than a double holds, and ordinary ones.
fn number_literal() -> impl Strategy<Value = String> {
    prop_oneof![
        (-1000i64..1000).prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "123456789012345678",
            "9007199254740993",
            "-9007199254740993",
            "9007199254740992",
            "18446744073709551615",
            "-18446744073709551617",
            "1152921504606846976",
            "123456789012345678901234567890",
            "1e400",
            "-1e400",
            "1E+999",
            "0.1e310",
            "1e-400",
            "4.9e-325",
            "1.7976931348623157e308",
            "1.0",
            "-0",
            "2.50",
        ])
        .prop_map(str::to_owned),
        (1u64..u64::MAX, -400i32..400).prop_map(|(m, e)| format!("{m}e{e}")),
    ]
}

/// Values holding those numbers, now and then nested 100 to 600 deep.
fn literal_value() -> impl Strategy<Value = common::reference::Lit> {
    use common::reference::Lit;
    let leaf = prop_oneof![
        Just(Lit::Null),
        any::<bool>().prop_map(Lit::Bool),
        number_literal().prop_map(Lit::Num),
        "[a-z]{0,3}".prop_map(Lit::Str),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Lit::Arr),
            prop::collection::btree_map("[a-d]", inner.clone(), 0..4)
                .prop_map(|m| Lit::Obj(m.into_iter().collect())),
            (100usize..600, inner).prop_map(|(n, v)| Lit::Deep(n, Box::new(v))),
        ]
    })
}

/// One generated state event: (parent choice, plugin, scope, op, value or patch).
type GenEvent = (prop::sample::Index, usize, bool, u8, common::reference::Lit);

/// The property test for values as Pi reads them: a tree of state events of up to 12
/// plugins, both scopes, `set`/`patch`/`drop`, whose values and patches hold numbers
/// beyond 2^53 and beyond the double range and nesting up to 600 deep, written as text.
/// At every entry, every plugin's fold in memory and from the projection holds what a
/// naive JavaScript model of the same events holds (`tests/common/reference.rs`: numbers
/// as doubles, Infinity carried, RFC 7396 as JavaScript runs it).
#[test]
fn state_values_fold_as_javascript_reads_them() {
    use common::reference::{Js, Lit, js_merge, same_as_js};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.sqlite");
    let projection = std::cell::RefCell::new(common::open_store(&db).unwrap());
    let n = std::cell::Cell::new(0u32);
    let events = prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            0usize..12,
            any::<bool>(),
            0u8..10,
            literal_value(),
        ),
        1..24,
    );
    runner(96)
        .run(&events, |events: Vec<GenEvent>| {
            n.set(n.get() + 1);
            let mut lines = vec![entry("a0000001", None, "a")];
            let mut ids = vec!["a0000001".to_owned()];
            let mut parents: Vec<usize> = vec![usize::MAX];
            for (i, (parent, plugin, session, op, v)) in events.iter().enumerate() {
                let p = if parent.index(4) == 0 {
                    parent.index(ids.len())
                } else {
                    ids.len() - 1
                };
                let scope = if *session { "session" } else { "branch" };
                let data = match op {
                    0 => format!(r#"{{"v":1,"scope":"{scope}","op":"drop"}}"#),
                    1..=4 => {
                        let patch = match v {
                            Lit::Obj(_) => v.clone(),
                            other => Lit::Obj(vec![("k".into(), other.clone())]),
                        };
                        format!(
                            r#"{{"v":1,"scope":"{scope}","op":"patch","patch":{}}}"#,
                            patch.text()
                        )
                    }
                    _ => format!(
                        r#"{{"v":1,"scope":"{scope}","op":"set","value":{}}}"#,
                        v.text()
                    ),
                };
                let id = format!("e{i:07}");
                lines.push(event(&id, Some(&ids[p]), &format!("p{plugin}"), &data));
                ids.push(id);
                parents.push(p);
            }
            let refs: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
            let path = file_of(dir.path(), &format!("values{}.jsonl", n.get()), &refs);
            let log = SessionLog::open(&path).unwrap();
            // The model: each event's effect, folded along parents (branch) or in file
            // order (session).
            let step = |cur: Option<Js>, (_, _, _, op, v): &GenEvent| -> Option<Js> {
                match op {
                    0 => None,
                    1..=4 => {
                        let patch = match v {
                            Lit::Obj(_) => v.js(),
                            other => Js::Obj(vec![("k".into(), other.js())]),
                        };
                        Some(js_merge(cur.as_ref(), &patch))
                    }
                    _ => Some(v.js()),
                }
            };
            for plugin in 0..12 {
                let name = format!("p{plugin}");
                let ours = |scope| {
                    Store::at(&db)
                        .and_then(|store| store.state::<Value>(&name, scope))
                        .unwrap()
                };
                let (branch, session) = (ours(Scope::Branch), ours(Scope::Session));
                let mut session_model = None;
                for e in events.iter().filter(|e| e.1 == plugin && e.2) {
                    session_model = step(session_model, e);
                }
                for (at, id) in ids.iter().enumerate() {
                    let mut path = Vec::new();
                    let mut k = at;
                    while k != usize::MAX {
                        path.push(k);
                        k = parents[k];
                    }
                    let mut model = None;
                    for &k in path.iter().rev().filter(|&&k| k > 0) {
                        let e = &events[k - 1];
                        if e.1 == plugin && !e.2 {
                            model = step(model, e);
                        }
                    }
                    for (what, scope, st, model) in [
                        ("branch", Scope::Branch, &branch, &model),
                        ("session", Scope::Session, &session, &session_model),
                    ] {
                        let mem = st.read_at(&log, id).unwrap();
                        let proj = projection
                            .borrow()
                            .read_value(&path_of(&log), &name, scope, Some(id))
                            .unwrap();
                        for (how, got) in [("in memory", &mem), ("projection", &proj)] {
                            let same = match (got, model) {
                                (None, None) => true,
                                (Some(g), Some(m)) => same_as_js(g, m),
                                _ => false,
                            };
                            prop_assert!(
                                same,
                                "{name} {what} at {id} {how}: ours {:?}, JavaScript {:?}",
                                got.as_ref().map(json::to_string),
                                model
                            );
                        }
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

fn path_of(log: &SessionLog) -> PathBuf {
    log.path().to_path_buf()
}
