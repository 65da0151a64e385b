//! Interop with the real Pi, both majors (docs/spec.md §2). Needs npm; fails loudly without it.
//!
//! - Pi → us: sessions Pi generates load with the same ids, parents, leaf and root→entry
//!   paths as Pi's own `getEntries()` / `getBranch()`.
//! - Us → Pi: entries our writer appends (forks included) are read by Pi's
//!   `SessionManager.open`, which skips none of them; Pi's leaf is our last entry; Pi can
//!   go on appending and we read its appends.
//! - v1/v2 sessions migrate to the same tree shape as Pi's migration.
#![expect(clippy::unwrap_used)]

use crate::common;

use common::pi;
use serde_json::{Value, json};
use session_state::*;
use std::path::Path;

fn assert_same_as_pi(log: &SessionLog, dump: &pi::Dump, what: &str) {
    let ours: Vec<(&str, Option<&str>)> = log.entries().map(|e| (e.id(), e.parent_id())).collect();
    let theirs: Vec<(&str, Option<&str>)> = dump
        .entries
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e["parentId"].as_str()))
        .collect();
    assert_eq!(ours, theirs, "{what}: ids and parents");
    assert_eq!(log.leaf_id(), dump.leaf_id.as_deref(), "{what}: leaf");
    assert_eq!(log.branch(), dump.branch, "{what}: branch");
    for (id, path) in &dump.branches {
        let path = path.as_ref().unwrap();
        assert_eq!(&log.path_to(id).unwrap(), path, "{what}: getBranch({id})");
    }
}

#[test]
fn pi_sessions_load_as_pi_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for major in pi::MAJORS {
        for scenario in ["basic", "torn", "state"] {
            let file = dir.path().join(format!("pi{major}-{scenario}.jsonl"));
            let generated = pi::generate(major, &file, scenario, Some(7));
            let dump = pi::dump_copy(major, &file);
            if scenario == "torn" && major == 0 {
                // Pi 0.73 does not terminate a torn line before appending: its next entry
                // fused with the torn record into a line that does not parse, with valid
                // lines after it. Strict refuses it as corruption; salvage reads what Pi
                // reads (the fused entry is lost for both).
                let lost = generated.raw["unreadableIds"][0].as_str().unwrap();
                match SessionLog::open(&file).unwrap_err() {
                    OpenError::Invalid(InvalidLog::Corrupt { at, .. }) => assert_eq!(at.line, 7),
                    e => panic!("pi0 torn: {e}"),
                }
                assert!(!dump.entries.iter().any(|e| e["id"] == lost));
                let log = LogOptions::new()
                    .mode(ReadMode::Salvage)
                    .open(&file)
                    .unwrap();
                assert_eq!(log.leaf_id(), dump.leaf_id.as_deref());
                for (id, path) in &dump.branches {
                    assert_eq!(
                        &log.path_to(id).unwrap(),
                        path.as_ref().unwrap(),
                        "pi0 torn {id}"
                    );
                }
                checked += 1;
                continue;
            }
            let log =
                SessionLog::open(&file).unwrap_or_else(|e| panic!("pi{major} {scenario}: {e}"));
            assert_same_as_pi(&log, &dump, &format!("pi{major} {scenario}"));
            if scenario == "torn" {
                // The crash left a torn record inside the file; Pi 1.x closed it with
                // "\n" at the cut and appended after it. We skip it with a warning, as Pi
                // skips it silently.
                let torn: Vec<_> = log
                    .findings()
                    .into_iter()
                    .filter(|f| f.kind == FindingKind::TornRecord)
                    .collect();
                assert_eq!(torn.len(), 1, "pi{major}: {:?}", log.findings());
                let cut = generated.raw["tornOffset"].as_u64().unwrap() as usize;
                let bytes = std::fs::read(&file).unwrap();
                assert_eq!(bytes[cut], b'\n');
                let line_start = bytes[..cut].iter().rposition(|&b| b == b'\n').unwrap() + 1;
                assert_eq!(torn[0].at.offset, line_start as u64);
            } else {
                assert!(
                    log.findings().is_empty(),
                    "pi{major} {scenario}: {:?}",
                    log.findings()
                );
            }
            checked += 1;
        }
    }
    println!("Pi-generated sessions compared: {checked}");
}

fn user(text: &str) -> NewEntry {
    NewEntry::message(json!({"role": "user", "content": text, "timestamp": 1_733_234_400_000u64}))
}

#[test]
fn pi_reads_what_we_write_and_we_read_what_pi_appends() {
    for major in pi::MAJORS {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("states.sqlite");
        let mut log = LogOptions::new()
            .create(dir.path(), "/home/dev/proj")
            .unwrap();
        let role = Store::at(&db)
            .and_then(|store| store.state::<Value>("role", Scope::Branch))
            .unwrap();
        // Before the first user message, everything stays in memory (Pi 1.x's rule).
        role.write(&mut log, &json!({"name": "reviewer"})).unwrap();
        assert!(!log.is_materialized());
        let m1 = log.append(user("hello")).unwrap();
        assert!(log.is_materialized());
        let a1 = log
            .append(NewEntry::message(json!({"role": "assistant", "content": [{"type": "text", "text": "hi"}],
                "api": "anthropic-messages", "provider": "anthropic", "model": "m", "stopReason": "stop",
                "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                          "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
                "timestamp": 1_733_234_400_000u64})))
            .unwrap();
        role.patch(&mut log, &json!({"level": 2})).unwrap();
        // A fork from an earlier entry.
        log.navigate(&m1).unwrap();
        role.write(&mut log, &json!({"name": "writer"})).unwrap();
        log.append(NewEntry::custom("my-extension", Some(json!({"count": 1}))))
            .unwrap();
        let ours_last = log.append(user("on the fork")).unwrap();
        let path = log.path().to_path_buf();
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();

        let dump = pi::dump_copy(major, &path);
        assert_eq!(
            dump.entries.len(),
            lines - 1,
            "pi{major} skipped some of our lines"
        );
        assert_eq!(dump.leaf_id.as_deref(), Some(ours_last.as_str()));
        assert_same_as_pi(&log, &dump, &format!("pi{major} reading ours"));
        assert!(log.children(&m1).unwrap().len() == 2 && log.children(&a1).unwrap().len() == 1);

        // Pi appends at its leaf; we read its appends (refresh, then reopen).
        let appended = pi::append(major, &path, 4, Some("session-state/role"));
        log.refresh().unwrap();
        assert_eq!(log.leaf_id(), appended.leaf_id.as_deref());
        assert_eq!(role.read(&log).unwrap(), Some(json!(2)));
        let reopened = SessionLog::open(&path).unwrap();
        assert_same_as_pi(
            &reopened,
            &pi::dump_copy(major, &path),
            &format!("pi{major} after Pi appended"),
        );
        // And we append after Pi again: Pi still reads every line.
        let mut log = reopened;
        let ours = role.write(&mut log, &json!("after pi")).unwrap().unwrap();
        let dump = pi::dump_copy(major, &path);
        assert_eq!(dump.leaf_id.as_deref(), Some(ours.as_str()));
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(dump.entries.len(), lines - 1);
    }
}

/// Parent positions (in file order) of every entry: the tree's shape, whatever the ids.
fn shape_ours(log: &SessionLog) -> Vec<Option<usize>> {
    log.entries()
        .map(|e| e.parent_id().map(|p| log.entry(p).unwrap().index()))
        .collect()
}

fn shape_pi(dump: &pi::Dump) -> Vec<Option<usize>> {
    let pos = |id: &str| dump.entries.iter().position(|e| e["id"] == id).unwrap();
    dump.entries
        .iter()
        .map(|e| e["parentId"].as_str().map(pos))
        .collect()
}

#[test]
fn old_versions_migrate_to_the_shape_pi_gives() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/edge");
    for name in ["v1.jsonl", "v2.jsonl"] {
        for major in pi::MAJORS {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join(name);
            std::fs::copy(fixtures.join(name), &file).unwrap();
            let log = SessionLog::open(&file).unwrap();
            let dump = pi::dump_copy(major, &file);
            assert_eq!(shape_ours(&log), shape_pi(&dump), "{name} pi{major}");
            // Our on-disk migration, before the first append, gives a v3 file that Pi
            // reads with our ids, and keeps every field Pi's migration keeps.
            let mut log = log;
            log.append(user("after migration")).unwrap();
            let ours = SessionLog::open(&file).unwrap();
            assert_eq!(ours.header().version(), 3);
            let dump_after = pi::dump_copy(major, &file);
            assert_same_as_pi(
                &ours,
                &dump_after,
                &format!("{name} pi{major} after our migration"),
            );
            for (a, b) in dump_after.entries.iter().zip(&dump.entries) {
                let strip = |v: &Value| {
                    let mut v = v.clone();
                    for k in ["id", "parentId", "firstKeptEntryId"] {
                        v.as_object_mut().unwrap().remove(k);
                    }
                    v
                };
                assert_eq!(
                    strip(a),
                    strip(b),
                    "{name} pi{major}: content after migration"
                );
            }
            // firstKeptEntryId points at the same position as Pi's.
            for (i, e) in dump.entries.iter().enumerate() {
                if let Some(target) = e["firstKeptEntryId"].as_str() {
                    let pi_pos = dump.entries.iter().position(|x| x["id"] == target);
                    let ours_target = dump_after.entries[i]["firstKeptEntryId"].as_str().unwrap();
                    let our_pos = dump_after
                        .entries
                        .iter()
                        .position(|x| x["id"] == ours_target);
                    assert_eq!(pi_pos, our_pos, "{name} pi{major}: firstKeptEntryId");
                }
            }
        }
    }
}

/// a v1 file whose messages serde_json's `Value` cannot hold (a lone
/// surrogate escape, nesting 200 deep) migrates with the ids the reader assigned, every
/// line keeps its content, and Pi's `getBranch()` still has every message.
#[test]
fn v1_lines_serde_value_cannot_hold_migrate_without_losing_a_message() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let lines = [
        r#"{"type":"session","id":"s-odd-json","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#.to_owned(),
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"cut \ud83d here","timestamp":1}}"#.to_owned(),
        format!(
            r#"{{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{{"role":"assistant","content":[{{"type":"text","text":"deep"}}],"deep":{deep},"timestamp":2}}}}"#
        ),
        r#"{"type":"message","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"user","content":"after","timestamp":3}}"#.to_owned(),
    ];
    for major in pi::MAJORS {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("odd.jsonl");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let pi_before = pi::dump_links_copy(major, &file);
        assert_eq!(pi_before.branch.len(), 3, "pi{major} reads the v1 file");
        let mut log = SessionLog::open(&file).unwrap();
        let mut ids: Vec<String> = log.entries().map(|e| e.id().to_owned()).collect();
        ids.push(log.append(user("after migration")).unwrap());

        let ours = SessionLog::open(&file).unwrap_or_else(|e| panic!("pi{major}: {e}"));
        assert_eq!(ours.header().version(), 3);
        assert!(ours.findings().is_empty(), "{:?}", ours.findings());
        let got: Vec<&str> = ours.entries().map(|e| e.id()).collect();
        assert_eq!(got, ids, "the ids the reader assigned, in order");
        assert_eq!(ours.branch(), ids, "a linear chain");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(r#""content":"cut \ud83d here""#), "{text}");
        assert!(text.contains(&deep));

        let dump = pi::dump_links_copy(major, &file);
        assert_same_as_pi(&ours, &dump, &format!("pi{major} after our migration"));
        // Every message Pi saw before our migration, Pi sees after it, with its content.
        let messages = |d: &pi::Dump| -> Vec<Value> {
            d.entries.iter().map(|e| e["message"].clone()).collect()
        };
        assert_eq!(messages(&dump)[..3], messages(&pi_before)[..], "pi{major}");
    }
}

/// after any torn tail (truncated JSON, NUL bytes, a JSON prefix and
/// NULs; with or without a newline after it) our writer and the real Pi can go on, and
/// both readers agree afterwards. Pi 0.73 does not close a torn tail before appending:
/// its first entry fuses with the torn bytes (lost for both readers); strict refuses
/// that file and salvage reads what Pi reads.
#[test]
fn after_any_torn_tail_our_writer_and_pi_continue_and_agree() {
    let assistant = json!({"role": "assistant", "content": [{"type": "text", "text": "hi"}],
        "api": "anthropic-messages", "provider": "anthropic", "model": "m", "stopReason": "stop",
        "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                  "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
        "timestamp": 1_733_234_400_000u64});
    let torn_line = br#"{"type":"custom","customType":"x","data":{"n":1},"id":"deadbeef","parentId":null,"times"#;
    let tails: [(&str, Vec<u8>); 3] = [
        ("truncated", torn_line.to_vec()),
        ("nul", vec![0; 200]),
        ("prefix+nul", [&torn_line[..40], &[0u8; 200][..]].concat()),
    ];
    let mut checked = 0;
    for (name, tail) in &tails {
        for terminated in [false, true] {
            for writer in ["ours", "pi1", "pi0"] {
                let what = format!("{name} terminated={terminated} writer={writer}");
                let dir = tempfile::tempdir().unwrap();
                let mut log = LogOptions::new()
                    .materialize(Materialize::FirstAppend)
                    .create(dir.path(), "/home/dev/proj")
                    .unwrap();
                log.append(user("hello")).unwrap();
                log.append(NewEntry::message(assistant.clone())).unwrap();
                let path = log.path().to_path_buf();
                drop(log);
                let mut bytes = std::fs::read(&path).unwrap();
                bytes.extend_from_slice(tail);
                if terminated {
                    bytes.push(b'\n');
                }
                std::fs::write(&path, &bytes).unwrap();
                assert!(SessionLog::open(&path).is_ok(), "{what}: readable before");

                let major = match writer {
                    "ours" => {
                        let mut log = SessionLog::open(&path).unwrap();
                        log.append(user("ours after the tail"))
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        1
                    }
                    "pi1" => {
                        pi::append(1, &path, 2, None);
                        1
                    }
                    _ => {
                        pi::append(0, &path, 2, None);
                        0
                    }
                };
                let after = std::fs::read(&path).unwrap();
                assert_eq!(
                    &after[..bytes.len()],
                    &bytes[..],
                    "{what}: no byte destroyed"
                );
                let dump = pi::dump_copy(major, &path);
                if major == 0 && !terminated {
                    assert!(SessionLog::open(&path).is_err(), "{what}: fused line");
                    let salvage = LogOptions::new()
                        .mode(ReadMode::Salvage)
                        .open(&path)
                        .unwrap();
                    assert_eq!(salvage.leaf_id(), dump.leaf_id.as_deref(), "{what}");
                    assert_eq!(salvage.branch(), dump.branch, "{what}");
                    checked += 1;
                    continue;
                }
                let ours = SessionLog::open(&path).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_same_as_pi(&ours, &dump, &what);
                assert!(
                    ours.findings()
                        .iter()
                        .all(|f| f.kind == FindingKind::TornRecord),
                    "{what}: {:?}",
                    ours.findings()
                );
                // And our writer goes on after Pi (never sealed); Pi reads it all.
                let mut ours = ours;
                let last = ours
                    .append(user("ours again"))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let dump = pi::dump_copy(major, &path);
                assert_eq!(dump.leaf_id.as_deref(), Some(last.as_str()), "{what}");
                assert_same_as_pi(&SessionLog::open(&path).unwrap(), &dump, &what);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 18);
}

/// Pi's own fold at the leaf (`values.mjs fold`, on a private copy): plugin → text.
fn pi_fold_at_leaf(major: u8, file: &Path) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.jsonl");
    std::fs::copy(file, &copy).unwrap();
    let folds = pi::run(
        "values.mjs",
        &["fold", &major.to_string(), copy.to_str().unwrap(), "--leaf"],
    );
    let leaf = folds["leafId"].as_str().unwrap().to_owned();
    folds["branch"][leaf].clone()
}

/// The CLI's `read` of `plugin` at the last entry: its line, or `None` when absent.
fn cli_read(file: &Path, db: &Path, plugin: &str) -> Option<String> {
    let out = common::cli()
        .arg("read")
        .arg(file)
        .args(["--plugin", plugin, "--db"])
        .arg(db)
        .output()
        .unwrap();
    match out.status.code() {
        Some(0) => Some(String::from_utf8(out.stdout).unwrap().trim_end().to_owned()),
        Some(1) => None,
        code => panic!(
            "read --plugin {plugin}: exit {code:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A CLI write command (`write`, `patch`, `drop`) on `file`; panics unless it exits 0.
fn cli_write(file: &Path, db: &Path, args: &[&str]) {
    let out = common::cli()
        .arg(args[0])
        .arg(file)
        .args(&args[1..])
        .arg("--db")
        .arg(db)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Our reads of every plugin at the leaf (in memory, projection, CLI) equal Pi's fold.
fn assert_reads_as_pi_folds(major: u8, file: &Path, plugins: &[&str], what: &str) {
    let pi = pi_fold_at_leaf(major, file);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("states.sqlite");
    let log = SessionLog::open(file).unwrap();
    let projection = common::open_store(&db).unwrap();
    for plugin in plugins {
        let expect = pi[plugin].as_str().map(str::to_owned);
        let st = Store::at(&db)
            .and_then(|store| store.state::<Value>(plugin, Scope::Branch))
            .unwrap();
        let ours = st.read_value(&log).unwrap();
        assert_eq!(
            ours.as_ref().map(json::to_string),
            expect,
            "pi{major} {what}: {plugin} in memory"
        );
        let projected = projection
            .read_value(file, plugin, Scope::Branch, None)
            .unwrap();
        assert_eq!(
            projected.as_ref().map(json::to_string),
            expect,
            "pi{major} {what}: {plugin} projection"
        );
        assert_eq!(
            cli_read(file, &dir.path().join("cli.sqlite"), plugin),
            expect,
            "pi{major} {what}: {plugin} CLI read"
        );
    }
}

/// Appends a state event line written as text (so its numbers are as written).
fn append_event_text(file: &Path, id: &str, plugin: &str, data: &str) {
    use std::io::Write;
    let parent = SessionLog::open(file)
        .unwrap()
        .leaf_id()
        .unwrap()
        .to_owned();
    let mut out = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    writeln!(
        out,
        r#"{{"type":"custom","customType":"session-state/{plugin}","data":{data},"id":"{id}","parentId":"{parent}","timestamp":"2026-01-01T00:00:00.000Z"}}"#
    )
    .unwrap();
}

/// Values nested as deep as the real Pi writes them: `values.mjs deep` finds the deepest
/// value Pi's `appendCustomEntry` writes (about 4,170 levels: JSON.stringify runs out of
/// stack beyond it) and writes it, a 300-deep one, and a patch. We read both as Pi's fold
/// prints them (in memory, projection, CLI), our CLI patches, writes and drops on top, and
/// Pi folds what we wrote to what we read. Both majors. The read limit is above Pi's.
#[test]
fn values_pi_writes_as_deep_as_it_can_read_and_fold_as_pis() {
    for major in pi::MAJORS {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("deep.jsonl");
        let written = pi::run(
            "values.mjs",
            &["deep", &major.to_string(), file.to_str().unwrap()],
        );
        let max = written["maxDepth"].as_u64().unwrap() as usize;
        println!("pi{major}: appendCustomEntry writes values up to {max} levels deep");
        assert!(max > 1_000, "pi{major}: {max}");
        // The event's data object is one level more.
        assert!(max < json::MAX_READ_DEPTH, "pi{major} writes {max} levels");
        let plugins = ["deep", "d300"];
        assert_reads_as_pi_folds(major, &file, &plugins, "as Pi wrote it");
        let db = dir.path().join("cli.sqlite");
        cli_write(
            &file,
            &db,
            &["patch", "--plugin", "deep", "--merge", r#"{"x":[1]}"#],
        );
        cli_write(
            &file,
            &db,
            &["patch", "--plugin", "d300", "--merge", r#"{"k":null}"#],
        );
        assert_reads_as_pi_folds(major, &file, &plugins, "after our patches");
        assert_eq!(
            pi_fold_at_leaf(major, &file)["d300"].as_str(),
            Some("{}"),
            "pi{major}"
        );
        cli_write(&file, &db, &["write", "--plugin", "d300", "--value", "1"]);
        cli_write(&file, &db, &["drop", "--plugin", "deep"]);
        assert_reads_as_pi_folds(major, &file, &plugins, "after our write and drop");
        assert!(pi_fold_at_leaf(major, &file)["deep"].is_null(), "pi{major}");
    }
}

/// Numbers as the real Pi reads them, both majors: state events written as text with
/// integers a double cannot hold (`123456789012345678`, `9007199254740993`) and numbers
/// beyond the double range (`1e400`, a patch `{"c":1E999}`). Our reads (in memory,
/// projection, CLI) print what Pi's fold prints; our CLI's patch, write and drop of those
/// plugins work, and Pi folds the result to what we read, also after Pi's own appends
/// on top (`values.mjs more`).
#[test]
fn numbers_beyond_doubles_in_the_file_fold_as_pi_folds_them() {
    for major in pi::MAJORS {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("numbers.jsonl");
        let m = major.to_string();
        pi::run("values.mjs", &["gen", &m, file.to_str().unwrap(), "5"]);
        let set = |v: &str| format!(r#"{{"v":1,"scope":"branch","op":"set","value":{v}}}"#);
        append_event_text(
            &file,
            "f0000001",
            "big",
            &set(r#"{"n":123456789012345678,"m":[9007199254740993,-18446744073709551617]}"#),
        );
        append_event_text(
            &file,
            "f0000002",
            "inf",
            &set(r#"{"a":1e400,"b":[-1e400,1]}"#),
        );
        append_event_text(
            &file,
            "f0000003",
            "inf",
            r#"{"v":1,"scope":"branch","op":"patch","patch":{"c":1E999}}"#,
        );
        append_event_text(&file, "f0000004", "top", &set("1e400"));
        let plugins = ["big", "inf", "top", "p0", "p5", "p11", "p23"];
        assert_reads_as_pi_folds(major, &file, &plugins, "as written");
        let pi = pi_fold_at_leaf(major, &file);
        assert_eq!(
            pi["big"].as_str(),
            Some(r#"{"n":123456789012345680,"m":[9007199254740992,-18446744073709552000]}"#)
        );
        assert_eq!(
            pi["inf"].as_str(),
            Some(r#"{"a":null,"b":[null,1],"c":null}"#)
        );
        let db = dir.path().join("cli.sqlite");
        cli_write(
            &file,
            &db,
            &["patch", "--plugin", "inf", "--merge", r#"{"d":1,"a":null}"#],
        );
        cli_write(
            &file,
            &db,
            &["patch", "--plugin", "big", "--merge", r#"{"x":1}"#],
        );
        cli_write(&file, &db, &["write", "--plugin", "top", "--value", "null"]);
        assert_reads_as_pi_folds(major, &file, &plugins, "after our writes");
        let pi = pi_fold_at_leaf(major, &file);
        assert_eq!(pi["inf"].as_str(), Some(r#"{"b":[null,1],"c":null,"d":1}"#));
        assert_eq!(pi["top"].as_str(), Some("null"));
        // Pi appends on top (forks included: its leaf may leave our events' branch).
        pi::run("values.mjs", &["more", &m, file.to_str().unwrap(), "5"]);
        assert_reads_as_pi_folds(major, &file, &plugins, "after Pi appended");
        cli_write(&file, &db, &["drop", "--plugin", "inf"]);
        assert_reads_as_pi_folds(major, &file, &plugins, "after our drop");
        // Pi goes on appending after our lines and reads every one of them.
        let appended = pi::append(major, &file, 2, None);
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        assert_eq!(
            pi::dump_links_copy(major, &file).entries.len(),
            lines - 1,
            "pi{major}"
        );
        assert_eq!(
            SessionLog::open(&file).unwrap().leaf_id(),
            appended.leaf_id.as_deref()
        );
    }
}

/// Lines that repeat a member, the first occurrence wrong and the last right, for every
/// member the reader looks at (`fixtures/edge/repeated-members.jsonl`): Pi's `JSON.parse`
/// keeps the last occurrence, and so do both our readers. The same entries, parents, leaf
/// and branches as Pi's, and every plugin's fold equal to Pi's (in memory, projection,
/// CLI), both majors.
#[test]
fn repeated_members_read_as_pis_json_parse_reads_them() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/edge/repeated-members.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    for member in [
        "\"id\"",
        "\"type\"",
        "\"parentId\"",
        "\"customType\"",
        "\"data\"",
        "\"message\"",
        "\"role\"",
    ] {
        assert!(
            text.lines()
                .any(|l| l.matches(&format!("{member}:")).count() > 1),
            "the fixture repeats {member} in some line"
        );
    }
    for major in pi::MAJORS {
        let dump = pi::dump_copy(major, &file);
        for mode in [ReadMode::Strict, ReadMode::Salvage] {
            let log = LogOptions::new().mode(mode).open(&file).unwrap();
            assert_same_as_pi(&log, &dump, &format!("pi{major} {mode:?}"));
        }
        let types: Vec<&str> = dump
            .entries
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "message", "custom", "custom", "custom", "custom", "message", "custom"
            ],
            "pi{major}: the last `type` of each line"
        );
        assert_eq!(dump.entries[5]["message"]["role"], "assistant", "pi{major}");
        assert_reads_as_pi_folds(major, &file, &["role", "todo", "note"], "repeated members");
    }
}
