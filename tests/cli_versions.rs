//! State versions on the command line (`docs/cli.md`): `write --version`, the version a
//! `patch`, `drop` and plain `write` keep, `read --json`, `history`, and the version in
//! `replay` and `tree`. The real binary through the command line's harness
//! (`common::cli`: a scrubbed environment, only `HOME`, `PI_CODING_AGENT_DIR` and `PATH`),
//! on a copy of `fixtures/example.jsonl` in a temporary folder per test; every versioned
//! event is written by the CLI itself.
//!
//! The example's ids: `role` is set at 4ccd8d6b (line 4, `{"name":"reviewer"}`), on the
//! path to both tips, and at d0ecd23b (line 14, `{"name":"writer"}`) on the leaf's branch
//! only; `todo` is patched in session scope at e8ce2848 (line 8) and c7909563 (line 11).
//! The tips are ddd707d7 and 65e66c1c, the leaf.

use crate::common::cli::{EDGE, World};
use serde_json::{Value, json};
use session_state::{Error, StateError};

const FIRST_TIP: &str = "ddd707d7";
const LEAF: &str = "65e66c1c";

/// `role` set on the leaf's branch at version 2, then at version 3, by the CLI: the two
/// entry ids.
fn role_at_2_then_3(w: &World) -> (String, String) {
    let v2 = w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#"{"name":"writer","tone":"plain"}"#,
        "--version",
        "2",
    ]);
    assert!(
        w.last_line()
            .contains(r#""data":{"v":2,"stateVersion":2,"scope":"branch","op":"set""#),
        "{}",
        w.last_line()
    );
    let v3 = w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#"{"who":{"name":"writer"},"tone":"plain"}"#,
        "--version",
        "3",
    ]);
    assert!(
        w.last_line()
            .contains(r#""data":{"v":2,"stateVersion":3,"scope":"branch","op":"set""#),
        "{}",
        w.last_line()
    );
    (v2, v3)
}

/// The library's own message for a refused newer version, word for word.
fn newer_message(plugin: &str, stored: u32, known: u32, entry: &str) -> String {
    Error::State(StateError::NewerStateVersion {
        plugin: plugin.into(),
        stored,
        known,
        entry_id: Some(entry.into()),
    })
    .to_string()
}

#[test]
fn read_json_shows_the_version_and_the_entry_that_set_the_value() {
    let w = World::example();
    // Version 1: the event without a stateVersion.
    let out = w.ok(&["read", "s.jsonl", "--plugin", "role", "--json"]);
    assert_eq!(
        out.json(),
        json!({"value": {"name": "writer"}, "stateVersion": 1, "entryId": "d0ecd23b"})
    );
    let (_, v3) = role_at_2_then_3(&w);
    let out = w.ok(&["read", "s.jsonl", "--plugin", "role", "--json"]);
    assert_eq!(
        out.json(),
        json!({"value": {"who": {"name": "writer"}, "tone": "plain"}, "stateVersion": 3, "entryId": v3})
    );
    // The keys in this order, pretty-printed as every --json output.
    assert_eq!(
        out.stdout,
        format!(
            "{{\n  \"value\": {{\n    \"who\": {{\n      \"name\": \"writer\"\n    }},\n    \"tone\": \"plain\"\n  }},\n  \"stateVersion\": 3,\n  \"entryId\": \"{v3}\"\n}}\n"
        )
    );
    // The plain output is the value as stored, whatever its version: no migration, and
    // nothing said about the version.
    let out = w.ok(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("{\"who\":{\"name\":\"writer\"},\"tone\":\"plain\"}\n", "")
    );
    // --at: the other branch never saw the versioned writes.
    let out = w.ok(&[
        "read", "s.jsonl", "--plugin", "role", "--at", FIRST_TIP, "--json",
    ]);
    assert_eq!(
        out.json(),
        json!({"value": {"name": "reviewer"}, "stateVersion": 1, "entryId": "4ccd8d6b"})
    );
    // Session scope.
    let out = w.ok(&[
        "read", "s.jsonl", "--plugin", "todo", "--scope", "session", "--json",
    ]);
    assert_eq!(out.json()["entryId"], json!("c7909563"));
    assert_eq!(out.json()["stateVersion"], json!(1));
}

#[test]
fn read_json_tells_an_absent_value_from_a_written_null() {
    let w = World::example();
    // Never written: no "value", version 1, no entry; exit 1 as a plain read.
    let out = w.run(&["read", "s.jsonl", "--plugin", "nobody", "--json"]);
    assert_eq!(out.code, 1, "{}", out.shown());
    assert_eq!(out.json(), json!({"stateVersion": 1, "entryId": null}));
    assert_eq!(out.stderr, "");
    // A written null is present: "value": null, exit 0.
    let id = w.appended(&["write", "s.jsonl", "--plugin", "nothing", "--value", "null"]);
    let out = w.ok(&["read", "s.jsonl", "--plugin", "nothing", "--json"]);
    assert_eq!(
        out.json(),
        json!({"value": null, "stateVersion": 1, "entryId": id})
    );
    assert!(out.stdout.contains("\"value\": null"), "{}", out.stdout);
    // Dropped at version 3: absent, and the drop is the entry, at the version it kept.
    role_at_2_then_3(&w);
    let dropped = w.appended(&["drop", "s.jsonl", "--plugin", "role"]);
    let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--json"]);
    assert_eq!(out.code, 1, "{}", out.shown());
    assert_eq!(out.json(), json!({"stateVersion": 3, "entryId": dropped}));
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
}

#[test]
fn patch_drop_and_a_plain_write_keep_the_stored_version() {
    let w = World::example();
    role_at_2_then_3(&w);
    // A patch on a version-3 value is a version-3 patch.
    let patched = w.appended(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "role",
        "--merge",
        r#"{"model":"fast"}"#,
    ]);
    let line = w.last_line();
    assert!(line.contains(&format!(r#""id":"{patched}""#)), "{line}");
    assert!(
        line.contains(r#""data":{"v":2,"stateVersion":3,"scope":"branch","op":"patch","patch":{"model":"fast"}}"#),
        "{line}"
    );
    // A write without --version keeps 3.
    w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#""plain""#,
    ]);
    assert!(
        w.last_line().contains(
            r#""data":{"v":2,"stateVersion":3,"scope":"branch","op":"set","value":"plain"}"#
        ),
        "{}",
        w.last_line()
    );
    // So does a drop, and a write after the drop (the value's version is its last event's).
    w.appended(&["drop", "s.jsonl", "--plugin", "role"]);
    assert!(
        w.last_line()
            .contains(r#""data":{"v":2,"stateVersion":3,"scope":"branch","op":"drop"}"#),
        "{}",
        w.last_line()
    );
    w.appended(&["write", "s.jsonl", "--plugin", "role", "--value", "1"]);
    assert!(
        w.last_line().contains(r#""stateVersion":3"#),
        "{}",
        w.last_line()
    );
    // A plugin never versioned stays at version 1: the v=1 envelope, no stateVersion.
    w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "mood",
        "--value",
        r#""calm""#,
    ]);
    assert!(
        w.last_line()
            .contains(r#""data":{"v":1,"scope":"branch","op":"set","value":"calm"}"#),
        "{}",
        w.last_line()
    );
    // Session scope keeps its own version too.
    w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "todo",
        "--scope",
        "session",
        "--value",
        "{}",
        "--version",
        "2",
    ]);
    w.appended(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "todo",
        "--scope",
        "session",
        "--merge",
        r#"{"x":1}"#,
    ]);
    assert!(
        w.last_line()
            .contains(r#""data":{"v":2,"stateVersion":2,"scope":"session","op":"patch""#),
        "{}",
        w.last_line()
    );
}

#[test]
fn write_version_is_recorded_as_given_and_an_older_one_is_refused() {
    let w = World::example();
    let (_, v3) = role_at_2_then_3(&w);
    let before = std::fs::read(w.file()).unwrap();
    // Older than the stored version: the library's refusal, then what to pass; nothing
    // written, the file byte for byte as it was.
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#""old""#,
        "--version",
        "2",
    ]);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!(
            "error: {}\n(--version 2 is older than the stored value's stateVersion 3: nothing \
             was written; pass --version 3 or more, or leave --version out to keep 3)\n",
            newer_message("role", 3, 2, &v3)
        )
    );
    assert_eq!(std::fs::read(w.file()).unwrap(), before, "nothing written");
    // At the version-3 write itself (--at): refused too. On the other branch, which has
    // no versioned value, --version 2 is recorded.
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#""old""#,
        "--version",
        "1",
        "--at",
        &v3,
    ]);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert!(
        out.stderr.contains(&newer_message("role", 3, 1, &v3)),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read(w.file()).unwrap(), before, "nothing written");
    w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#""side""#,
        "--version",
        "2",
        "--at",
        FIRST_TIP,
    ]);
    assert!(
        w.last_line().contains(r#""stateVersion":2"#),
        "{}",
        w.last_line()
    );

    // The same value at the same version appends nothing; at a new version it is recorded.
    let len = std::fs::metadata(w.file()).unwrap().len();
    let out = w.ok(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#"{"who":{"name":"writer"},"tone":"plain"}"#,
        "--version",
        "3",
        "--at",
        &v3,
    ]);
    assert_eq!(out.stdout, "");
    assert_eq!(std::fs::metadata(w.file()).unwrap().len(), len);
    let v4 = w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#"{"who":{"name":"writer"},"tone":"plain"}"#,
        "--version",
        "4",
        "--at",
        &v3,
    ]);
    let line = w.last_line();
    assert!(line.contains(&format!(r#""id":"{v4}""#)), "{line}");
    assert!(
        line.contains(r#""data":{"v":2,"stateVersion":4,"scope":"branch","op":"set","value":{"who":{"name":"writer"},"tone":"plain"}}"#),
        "{line}"
    );

    // A version is a whole number from 1.
    for bad in ["0", "-1", "x", "1.5"] {
        let flag = format!("--version={bad}");
        let out = w.run(&[
            "write", "s.jsonl", "--plugin", "role", "--value", "1", &flag,
        ]);
        assert_eq!(out.code, 2, "{bad}: {}", out.shown());
        assert!(out.stderr.contains("--version"), "{bad}: {}", out.stderr);
    }
    // patch and drop have no --version: they keep the stored one.
    for cmd in [&["patch", "--merge", "{}"][..], &["drop"]] {
        let mut args = vec![cmd[0], "s.jsonl", "--plugin", "role", "--version", "2"];
        args.extend(&cmd[1..]);
        let out = w.run(&args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.shown());
    }
}

#[test]
fn history_lists_each_events_op_version_and_value() {
    let w = World::example();
    let (v2, v3) = role_at_2_then_3(&w);
    let patched = w.appended(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "role",
        "--merge",
        r#"{"tone":"short"}"#,
    ]);
    // What docs/cli.md shows of this file: the patch's line, the refusal of an older
    // version, the replay and the tree.
    assert!(
        w.last_line().contains(&format!(
            r#""data":{{"v":2,"stateVersion":3,"scope":"branch","op":"patch","patch":{{"tone":"short"}}}},"id":"{patched}","parentId":"{v3}""#
        )),
        "{}",
        w.last_line()
    );
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#"{"name":"writer"}"#,
        "--version",
        "2",
    ]);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert!(
        out.stderr.starts_with(&format!(
            "error: {}\n",
            newer_message("role", 3, 2, &patched)
        )),
        "{}",
        out.stderr
    );
    assert_eq!(
        w.ok(&["replay", "s.jsonl"]).stdout,
        format!(
            "s.jsonl: session 01a22bc8-9653-71cb-b4ad-8e4c64f53380, 17 entries, 2 tip(s)\n  \
             session scope (the same at every tip):\n    \
             todo = {{\"backoff\":\"done\",\"last-error\":\"open\"}}\n  \
             tip ddd707d7 (branch key e8ce2848, 11 entries on the path)\n    \
             role = {{\"name\":\"reviewer\"}}\n  \
             tip {patched} [leaf] (branch key 8a83c354, 12 entries on the path)\n    \
             role (stateVersion 3) = {{\"who\":{{\"name\":\"writer\"}},\"tone\":\"short\"}}\n"
        )
    );
    let tree = w.ok(&["tree", "s.jsonl"]).stdout;
    assert!(
        tree.contains(&format!(
            "{patched} state role patch (branch, stateVersion 3) {{\"tone\":\"short\"}}  [leaf]\n"
        )),
        "{tree}"
    );
    let nulled = w.appended(&["write", "s.jsonl", "--plugin", "role", "--value", "null"]);
    let dropped = w.appended(&["drop", "s.jsonl", "--plugin", "role"]);
    let out = w.ok(&["history", "s.jsonl", "--plugin", "role", "--json"]);
    assert_eq!(
        out.json(),
        json!({
            "plugin": "role",
            "scope": "branch",
            "leaf": dropped,
            "events": [
                {"entryId": "4ccd8d6b", "line": 4, "op": "set", "stateVersion": 1,
                 "argument": {"name": "reviewer"}, "value": {"name": "reviewer"}},
                {"entryId": "d0ecd23b", "line": 14, "op": "set", "stateVersion": 1,
                 "argument": {"name": "writer"}, "value": {"name": "writer"}},
                {"entryId": v2, "line": 16, "op": "set", "stateVersion": 2,
                 "argument": {"name": "writer", "tone": "plain"}, "value": {"name": "writer", "tone": "plain"}},
                {"entryId": v3, "line": 17, "op": "set", "stateVersion": 3,
                 "argument": {"who": {"name": "writer"}, "tone": "plain"},
                 "value": {"who": {"name": "writer"}, "tone": "plain"}},
                {"entryId": patched, "line": 18, "op": "patch", "stateVersion": 3,
                 "argument": {"tone": "short"}, "value": {"who": {"name": "writer"}, "tone": "short"}},
                {"entryId": nulled, "line": 19, "op": "set", "stateVersion": 3,
                 "argument": null, "value": null},
                {"entryId": dropped, "line": 20, "op": "drop", "stateVersion": 3},
            ]
        })
    );
    // The text: one line per event, the version in its own column.
    let out = w.ok(&["history", "s.jsonl", "--plugin", "role"]);
    assert_eq!(
        out.stdout,
        format!(
            "ENTRY     LINE  OP     VERSION  VALUE AFTER\n\
             4ccd8d6b     4  set          1  {{\"name\":\"reviewer\"}}\n\
             d0ecd23b    14  set          1  {{\"name\":\"writer\"}}\n\
             {v2}    16  set          2  {{\"name\":\"writer\",\"tone\":\"plain\"}}\n\
             {v3}    17  set          3  {{\"who\":{{\"name\":\"writer\"}},\"tone\":\"plain\"}}\n\
             {patched}    18  patch        3  {{\"who\":{{\"name\":\"writer\"}},\"tone\":\"short\"}}\n\
             {nulled}    19  set          3  null\n\
             {dropped}    20  drop         3  (absent)\n"
        )
    );
    assert_eq!(out.stderr, "");
    // --at: the path to the other tip, which has only the first event.
    let out = w.ok(&[
        "history", "s.jsonl", "--plugin", "role", "--at", FIRST_TIP, "--json",
    ]);
    let v = out.json();
    assert_eq!(v["leaf"], json!(FIRST_TIP));
    let entries: Vec<&Value> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["entryId"])
        .collect();
    assert_eq!(entries, [&json!("4ccd8d6b")]);
    // Session scope: every event of the file, in append order, whatever its branch.
    let out = w.ok(&[
        "history", "s.jsonl", "--plugin", "todo", "--scope", "session", "--json",
    ]);
    let v = out.json();
    assert_eq!(v["scope"], json!("session"));
    let events: Vec<(Value, Value, Value)> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["entryId"].clone(),
                e["op"].clone(),
                e["stateVersion"].clone(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            (json!("e8ce2848"), json!("patch"), json!(1)),
            (json!("c7909563"), json!("patch"), json!(1)),
        ]
    );
    // A branch-scope history of a session-scope plugin, and a plugin with no events: exit
    // 1, nothing printed; --json prints the document with no events.
    for plugin in ["todo", "nobody"] {
        let out = w.run(&["history", "s.jsonl", "--plugin", plugin]);
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (1, "", ""),
            "{plugin}"
        );
        let out = w.run(&["history", "s.jsonl", "--plugin", plugin, "--json"]);
        assert_eq!(out.code, 1, "{}", out.shown());
        assert_eq!(out.json()["events"], json!([]));
    }
    // The history is folded from the file: it never creates the projection database.
    let fresh = World::example();
    fresh.ok(&["history", "s.jsonl", "--plugin", "role"]);
    assert!(!fresh.default_db().exists());
}

#[test]
fn history_errors_exit_2_naming_what_failed() {
    let w = World::example();
    let cases: &[(&[&str], &str)] = &[
        (
            &["history", "s.jsonl", "--plugin", "role", "--at", "deadbeef"],
            "error: s.jsonl: no entry with id 'deadbeef' in this session\n",
        ),
        (
            &["history", "missing.jsonl", "--plugin", "role"],
            "error: opening missing.jsonl: No such file or directory (os error 2)\n",
        ),
        (
            &["history", "s.jsonl", "--plugin", "Role!"],
            "error: --plugin: ",
        ),
        (&["history", "s.jsonl"], "--plugin"),
    ];
    for (args, expected) in cases {
        let out = w.run(args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.shown());
        assert_eq!(out.stdout, "", "{args:?}");
        assert!(
            out.stderr.starts_with(expected) || out.stderr.contains(expected),
            "{args:?}: {}",
            out.stderr
        );
    }
    // A corrupt file: the strict reader's error with its line and offset.
    std::fs::copy(
        format!("{EDGE}/corrupt-middle.jsonl"),
        w.work.join("c.jsonl"),
    )
    .unwrap();
    let out = w.run(&["history", "c.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert!(
        out.stderr.contains("line 3") && out.stderr.contains("343"),
        "{}",
        out.stderr
    );
    // A bad event of the plugin names its entry.
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.work.join("b.jsonl")).unwrap();
    let out = w.run(&["history", "b.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert!(out.stderr.contains("role"), "{}", out.stderr);
}

#[test]
fn replay_and_tree_show_versions_other_than_1() {
    let w = World::example();
    let before = w.ok(&["replay", "s.jsonl"]).stdout;
    assert!(!before.contains("stateVersion"), "{before}");
    let (_, v3) = role_at_2_then_3(&w);
    // The other branch at version 4, and session scope at version 2.
    w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        r#""side""#,
        "--version",
        "4",
        "--at",
        FIRST_TIP,
    ]);
    let session = w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "todo",
        "--scope",
        "session",
        "--value",
        r#"{"all":"done"}"#,
        "--version",
        "2",
    ]);
    // A plugin at version 1 shows none.
    w.appended(&[
        "write",
        "s.jsonl",
        "--plugin",
        "mood",
        "--value",
        r#""calm""#,
        "--at",
        &v3,
    ]);
    let out = w.ok(&["replay", "s.jsonl"]);
    let text = out.stdout;
    assert!(
        text.contains("\n    todo (stateVersion 2) = {\"all\":\"done\"}\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "\n    role (stateVersion 3) = {\"who\":{\"name\":\"writer\"},\"tone\":\"plain\"}\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("\n    role (stateVersion 4) = \"side\"\n"),
        "{text}"
    );
    assert!(text.contains("\n    mood = \"calm\"\n"), "{text}");
    assert_eq!(text.matches("stateVersion").count(), 3, "{text}");

    let v = w.ok(&["replay", "s.jsonl", "--json"]).json();
    let s = &v["sessions"][0];
    assert_eq!(
        s["session"]["todo"],
        json!({"value": {"all": "done"}, "stateVersion": 2})
    );
    assert_eq!(s["session"]["role"], json!({"absent": true}));
    let tips = s["tips"].as_array().unwrap();
    let tip = |id: &str| {
        tips.iter()
            .find(|t| t["tip"] == json!(id))
            .unwrap_or_else(|| panic!("no tip {id}: {v}"))
    };
    // The other branch: the side write, then the session-scope write (a child of the
    // last entry, so of the side write), its tip.
    assert_eq!(
        tip(&session)["branch"]["role"],
        json!({"value": "side", "stateVersion": 4})
    );
    let leaf = tips.iter().find(|t| t["leaf"] == json!(true)).unwrap();
    assert_eq!(
        leaf["branch"]["role"],
        json!({"value": {"who": {"name": "writer"}, "tone": "plain"}, "stateVersion": 3})
    );
    assert_eq!(leaf["branch"]["mood"], json!({"value": "calm"}));
    assert_eq!(leaf["branch"]["todo"], json!({"absent": true}));
    // Dropped at version 3: absent, at version 3.
    w.appended(&["drop", "s.jsonl", "--plugin", "role"]);
    let v = w.ok(&["replay", "s.jsonl", "--json"]).json();
    let tips = v["sessions"][0]["tips"].as_array().unwrap();
    let leaf = tips.iter().find(|t| t["leaf"] == json!(true)).unwrap();
    assert_eq!(
        leaf["branch"]["role"],
        json!({"absent": true, "stateVersion": 3})
    );
    // A directory replay shows them too.
    let out = w.ok(&["replay", "."]);
    assert!(
        out.stdout.contains("todo (stateVersion 2) = "),
        "{}",
        out.stdout
    );

    // tree: the version beside the scope, where it is not 1.
    let tree = w.ok(&["tree", "s.jsonl"]).stdout;
    assert!(
        tree.contains(&format!(
            "{v3} state role set (branch, stateVersion 3) {{\"who\":{{\"name\":\"writer\"}},\"tone\":\"plain\"}}"
        )),
        "{tree}"
    );
    assert!(
        tree.contains(&format!(
            "{session} state todo set (session, stateVersion 2) {{\"all\":\"done\"}}"
        )),
        "{tree}"
    );
    assert!(
        tree.contains("4ccd8d6b state role set (branch) {\"name\":\"reviewer\"}"),
        "{tree}"
    );
    assert!(tree.contains(LEAF), "{tree}");
}

#[test]
fn a_stored_session_has_the_same_versions() {
    let w = World::example();
    let url = w.store_url();
    let id = w.ok(&["import", "s.jsonl", "--store", &url]).line();
    let stored = |args: &[&str]| {
        let mut a = vec![args[0], id.as_str()];
        a.extend(&args[1..]);
        a.extend(["--store", url.as_str()]);
        w.run(&a)
    };
    let written = |args: &[&str]| {
        let out = stored(args);
        assert_eq!(out.code, 0, "{args:?}: {}", out.shown());
        let id = out.stdout.trim_end().to_owned();
        assert_eq!(id.len(), 8, "{args:?}: {}", out.shown());
        id
    };
    let v3 = written(&[
        "write",
        "--plugin",
        "role",
        "--value",
        r#"{"n":3}"#,
        "--version",
        "3",
    ]);
    let patched = written(&["patch", "--plugin", "role", "--merge", r#"{"m":1}"#]);
    let kept = written(&["write", "--plugin", "role", "--value", r#""r3b""#]);
    let out = stored(&["read", "--plugin", "role", "--json"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(
        out.json(),
        json!({"value": "r3b", "stateVersion": 3, "entryId": kept})
    );
    let out = stored(&["history", "--plugin", "role", "--json"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let versions: Vec<(Value, Value, Value)> = out.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["entryId"].clone(),
                e["stateVersion"].clone(),
                e["value"].clone(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [
            (json!("4ccd8d6b"), json!(1), json!({"name": "reviewer"})),
            (json!("d0ecd23b"), json!(1), json!({"name": "writer"})),
            (json!(v3), json!(3), json!({"n": 3})),
            (json!(patched), json!(3), json!({"n": 3, "m": 1})),
            (json!(kept.clone()), json!(3), json!("r3b")),
        ]
    );
    // Refused: the library's message; the store keeps what it had.
    let export = |name: &str| {
        let out = w.run(&["export", &id, "--store", &url, "--output", name]);
        assert_eq!(out.code, 0, "{}", out.shown());
        std::fs::read(w.work.join(name)).unwrap()
    };
    let before = export("before.jsonl");
    let out = stored(&[
        "write",
        "--plugin",
        "role",
        "--value",
        "1",
        "--version",
        "2",
    ]);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert!(
        out.stderr.starts_with(&format!(
            "error: {}\n(--version 2 is older",
            newer_message("role", 3, 2, &kept)
        )),
        "{}",
        out.stderr
    );
    assert_eq!(export("after.jsonl"), before, "nothing stored");
}
