//! Every `--json` output: one shape per record, with camelCase keys as Pi's own JSON uses
//! (`parentId`, `customType`, `stateVersion`). Each command runs in situations that fill
//! every record it prints (a lock row and a presence row, a refused file with its
//! findings, a gone session's rows, another extension's entries), and no key outside the
//! data a session holds (values, patches, plugin ids, `customType`s) has an underscore.

use crate::common::cli::{EDGE, World, example_log, kill, live_lock};
use serde_json::Value;
use session_state::Store;

/// Keys whose value is a session's own data: not walked.
const DATA: &[&str] = &["value", "argument", "lastData"];
/// Keys whose value maps names from the session (plugin ids, `customType`s) to records:
/// the names are not checked, the records are.
const NAMED: &[&str] = &["session", "branch", "custom", "events"];

/// The keys of `v` that are not camelCase, as paths (`sessions[0].parent_session`).
fn snake_keys(v: &Value, path: &str, names: bool, out: &mut Vec<String>) {
    match v {
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                snake_keys(x, &format!("{path}[{i}]"), false, out);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                let at = format!("{path}.{k}");
                let camel = k.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && k.chars().all(|c| c.is_ascii_alphanumeric());
                if !names && !camel {
                    out.push(at.clone());
                }
                if names || !DATA.contains(&k.as_str()) {
                    snake_keys(x, &at, !names && NAMED.contains(&k.as_str()), out);
                }
            }
        }
        _ => {}
    }
}

/// Runs `args` (a `--json` command), which must exit with one of `codes`, and returns its
/// document after checking its keys.
fn checked(w: &World, args: &[&str], codes: &[i32]) -> Value {
    let out = w.run(args);
    assert!(codes.contains(&out.code), "{args:?}: {}", out.shown());
    let v = out.json();
    let mut bad = Vec::new();
    snake_keys(&v, "", false, &mut bad);
    assert!(
        bad.is_empty(),
        "{args:?} prints keys not in camelCase: {bad:?}\n{v:#}"
    );
    v
}

#[test]
fn every_json_output_has_camel_case_keys() {
    let w = World::example();
    let db = w.root.join("db/states.sqlite");
    let db = db.to_str().unwrap();
    let sid = example_log(&w).session_id().to_owned();

    // read and history: present, absent, at a version above 1.
    w.ok(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        "{\"snake_key\":1}",
        "--version",
        "2",
        "--db",
        db,
    ]);
    let read = checked(
        &w,
        &["read", "s.jsonl", "--plugin", "role", "--json", "--db", db],
        &[0],
    );
    assert!(read.get("entryId").is_some(), "{read}");
    checked(
        &w,
        &[
            "read", "s.jsonl", "--plugin", "nobody", "--json", "--db", db,
        ],
        &[1],
    );
    let history = checked(
        &w,
        &["history", "s.jsonl", "--plugin", "role", "--json"],
        &[0],
    );
    assert!(history["events"][0].get("entryId").is_some(), "{history}");

    // status: a lock row and a presence row, and the state events.
    let store = Store::at(db).unwrap();
    let file = w.file();
    store
        .enter_presence(&sid, Some(file.to_str().unwrap()))
        .unwrap();
    let child = live_lock(std::path::Path::new(db), &sid);
    let status = checked(&w, &["status", "s.jsonl", "--json", "--db", db], &[0]);
    kill(child);
    for member in ["lock", "pi"] {
        assert!(status[member].is_object(), "{member}: {status}");
    }
    assert!(store.leave_presence(&sid).unwrap());
    drop(store);

    // verify: a refused file (its error names an entry) and the salvage read's findings.
    std::fs::copy(
        format!("{EDGE}/dangling-parent.jsonl"),
        w.work.join("bad.jsonl"),
    )
    .unwrap();
    let verify = checked(&w, &["verify", "bad.jsonl", "--salvage", "--json"], &[1]);
    assert!(verify["error"].get("entryId").is_some(), "{verify}");
    checked(&w, &["verify", "s.jsonl", "--json"], &[0]);

    // replay: every tip, another extension's entries.
    let replay = checked(&w, &["replay", "s.jsonl", "--json"], &[0]);
    assert!(replay["sessions"][0].get("sessionId").is_some(), "{replay}");

    // list: files, then a store.
    let list = checked(&w, &["list", ".", "--json"], &[0]);
    assert!(list["sessions"][0].get("parentSession").is_some(), "{list}");
    w.import(&w.file());
    let url = w.store_url();
    let stored = checked(&w, &["list", "--store", &url, "--json"], &[0]);
    assert!(
        stored["sessions"][0].get("parentSession").is_some(),
        "{stored}"
    );
    // A stored session's read and history are the same records.
    let id = sid.as_str();
    let r = checked(
        &w,
        &[
            "read", id, "--plugin", "todo", "--scope", "session", "--store", &url, "--json",
            "--db", db,
        ],
        &[0],
    );
    assert!(r.get("entryId").is_some(), "{r}");

    // prune: a session whose file is gone.
    let gone = w.work.join("gone.jsonl");
    std::fs::copy(w.file(), &gone).unwrap();
    w.ok(&["read", "gone.jsonl", "--plugin", "role", "--db", db]);
    std::fs::remove_file(&gone).unwrap();
    let prune = checked(&w, &["prune", "--dry-run", "--json", "--db", db], &[0]);
    assert!(prune["removed"][0].get("sessionId").is_some(), "{prune}");
}

/// The check itself: a snake_case key is found where it is a record's, not inside the data.
#[test]
fn the_key_check_finds_a_snake_case_key_and_skips_the_data() {
    let mut bad = Vec::new();
    let doc = serde_json::json!({
        "sessions": [{"sessionId": "s", "parent_session": null,
            "session": {"my_plugin": {"value": {"in_data": 1}, "state_version": 2}},
            "argument": {"x_y": 1}}],
    });
    snake_keys(&doc, "", false, &mut bad);
    assert_eq!(
        bad,
        [
            ".sessions[0].parent_session",
            ".sessions[0].session.my_plugin.state_version"
        ]
    );
}

/// The front ends print records by serializing their types: no JSON object is built by
/// hand (`serde_json::Map::new()`, `json!(…)`) in the command line's code or in the Pi
/// addon's, outside their tests.
#[test]
fn no_front_end_builds_a_record_by_hand() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(root.join("src/cli"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.push(root.join("pi/native/src/lib.rs"));
    assert!(files.len() > 5, "{files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if line.contains("Map::new()") || line.contains("json!(") {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a record built by hand; give it a type deriving Serialize (docs/cli.md, \"JSON records\"):\n{}",
        found.join("\n")
    );
}
