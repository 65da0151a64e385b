//! Messages across commands: bad input exits 2 naming what failed, corrupt files and
//! hostile names from a file, and messages that point to what exists.

use crate::common::cli::{EDGE, World};
use serde_json::{Value, json};
use std::path::Path;

#[test]
fn bad_input_exits_2_naming_what_failed() {
    let w = World::example();
    let len = std::fs::metadata(w.file()).unwrap().len();
    let cases: &[(&str, &[&str])] = &[
        (
            "read_unknown_entry",
            &["read", "s.jsonl", "--plugin", "role", "--at", "deadbeef"],
        ),
        (
            "write_unknown_entry",
            &[
                "write", "s.jsonl", "--plugin", "role", "--value", "1", "--at", "deadbeef",
            ],
        ),
        (
            "write_invalid_json",
            &[
                "write",
                "s.jsonl",
                "--plugin",
                "role",
                "--value",
                "{name: reviewer}",
            ],
        ),
        (
            "patch_invalid_json",
            &["patch", "s.jsonl", "--plugin", "role", "--merge", "{"],
        ),
        (
            "read_invalid_plugin",
            &["read", "s.jsonl", "--plugin", "Role!"],
        ),
        (
            "write_invalid_plugin",
            &["write", "s.jsonl", "--plugin", "", "--value", "1"],
        ),
        (
            "read_relative_db",
            &[
                "read",
                "s.jsonl",
                "--plugin",
                "role",
                "--db",
                "states.sqlite",
            ],
        ),
        (
            "write_relative_db",
            &[
                "write",
                "s.jsonl",
                "--plugin",
                "role",
                "--value",
                "1",
                "--db",
                "db/x.sqlite",
            ],
        ),
        (
            "read_missing_file",
            &["read", "missing.jsonl", "--plugin", "role"],
        ),
        (
            "write_missing_file",
            &["write", "missing.jsonl", "--plugin", "role", "--value", "1"],
        ),
    ];
    let mut shown = String::new();
    for (name, args) in cases {
        let out = w.run(args);
        assert_eq!(out.code, 2, "{name}: {}", out.shown());
        assert_eq!(out.stdout, "", "{name}");
        assert!(out.stderr.starts_with("error: "), "{name}: {}", out.stderr);
        shown.push_str(&format!("## {name}\n{}", out.stderr));
    }
    assert_eq!(
        std::fs::metadata(w.file()).unwrap().len(),
        len,
        "nothing written"
    );
    w.settings()
        .bind(|| insta::assert_snapshot!("bad_input", shown));
    // The unknown id and the offending value are named.
    assert!(shown.contains("'deadbeef'"));
    assert!(shown.contains("\"Role!\""));
    assert!(shown.contains("\"states.sqlite\""));
    assert!(shown.contains("missing.jsonl"));
}

#[test]
fn an_invalid_plugin_id_is_refused_in_the_librarys_words() {
    let w = World::example();
    for id in ["Role!", "", "a b"] {
        let detail = match session_state::format::validate_plugin_id(id) {
            Err(session_state::Error::InvalidOption { detail, .. }) => detail,
            other => panic!("{id:?}: {other:?}"),
        };
        for args in [
            &["read", "s.jsonl", "--plugin", id][..],
            &["write", "s.jsonl", "--plugin", id, "--value", "1"],
        ] {
            let out = w.run(args);
            assert_eq!(out.code, 2, "{args:?}: {}", out.shown());
            assert_eq!(
                out.stderr,
                format!("error: --plugin: {detail}\n"),
                "{args:?}"
            );
        }
    }
}

#[test]
fn corrupt_file_is_an_error_for_read_write_tree_and_replay() {
    let w = World::new();
    let corrupt = w.work.join("c.jsonl");
    std::fs::copy(format!("{EDGE}/corrupt-middle.jsonl"), &corrupt).unwrap();
    let before = std::fs::read(&corrupt).unwrap();
    for args in [
        &["read", "c.jsonl", "--plugin", "role"][..],
        &["write", "c.jsonl", "--plugin", "role", "--value", "1"],
        &["tree", "c.jsonl"],
        &["replay", "c.jsonl"],
    ] {
        let out = w.run(args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.shown());
        assert!(out.stderr.contains("line 3"), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("343"), "{args:?}: the byte offset");
    }
    assert_eq!(std::fs::read(&corrupt).unwrap(), before, "never modified");
}

#[test]
fn messages_point_to_what_exists() {
    let w = World::example();
    // A BOM: `read` has no --salvage; the message points to `verify --salvage`.
    std::fs::copy(format!("{EDGE}/bom.jsonl"), w.work.join("bom.jsonl")).unwrap();
    let out = w.run(&["read", "bom.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert!(
        !out.stderr.contains("read with --salvage")
            && out.stderr.contains("`session-state verify --salvage`"),
        "{}",
        out.stderr
    );
    // `read` of a missing file says "opening", as the other commands do.
    let out = w.run(&["read", "missing.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("error: opening missing.jsonl: No such file"),
        "{}",
        out.stderr
    );
    // `verify` of a corrupt file does not tell you to run the salvage report it shows.
    std::fs::copy(
        format!("{EDGE}/corrupt-middle.jsonl"),
        w.work.join("bad.jsonl"),
    )
    .unwrap();
    let out = w.run(&["verify", "bad.jsonl"]);
    assert_eq!(out.code, 1);
    assert!(
        !out.stdout.contains("run `session-state verify") && out.stdout.contains("salvage: "),
        "{}",
        out.stdout
    );
    // `replay DIR` names a refused file once.
    std::fs::create_dir_all(w.work.join("d")).unwrap();
    std::fs::copy(
        format!("{EDGE}/corrupt-middle.jsonl"),
        w.work.join("d/bad.jsonl"),
    )
    .unwrap();
    let out = w.run(&["replay", "d"]);
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stdout.matches("d/bad.jsonl").count(),
        1,
        "{}",
        out.stdout
    );
    // The refusal to append after an unparsable last line: no nested parentheses.
    let e = session_state::Error::from(session_state::AppendError::TrailingGarbage {
        path: "s.jsonl".into(),
        at: session_state::Location {
            line: 16,
            offset: 4699,
        },
        detail: "expected value at line 1 column 1".into(),
    });
    let text = e.to_string();
    assert!(
        text.starts_with(
            "s.jsonl: the last complete line, at line 16 (byte offset 4699), is not valid JSON: \
             expected value"
        ),
        "{text}"
    );
}

/// Appends one raw line to `file` as a child of its last entry; returns the new id.
fn append_child(file: &Path, id: &str, fields: Value) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let mut entry =
        json!({"id": id, "parentId": last["id"], "timestamp": "2026-01-01T00:00:00.000Z"});
    entry
        .as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    use std::io::Write as _;
    writeln!(f, "{entry}").unwrap();
    id.to_owned()
}

#[test]
fn names_from_the_file_cannot_drive_the_terminal() {
    let w = World::example();
    let f = w.file();
    let title = "x\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}1m\u{202e}";
    append_child(
        &f,
        "e0e0e001",
        json!({"type": "custom", "customType": title, "data": {"k": "\u{1b}[2J"}}),
    );
    append_child(
        &f,
        "e0e0e002",
        json!({"type": "custom", "customType": format!("session-state/ev\u{1b}[2Jil"),
               "data": {"v": 1, "scope": "branch", "op": "set", "value": 1}}),
    );
    for args in [
        &["tree", "s.jsonl"][..],
        &["replay", "s.jsonl"],
        &["replay", "."],
        &["status", "s.jsonl"],
        &["verify", "s.jsonl"],
    ] {
        let out = w.run(args);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(
            !all.chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{args:?} printed a raw control character: {all:?}"
        );
        if args[0] != "verify" {
            assert!(
                all.contains(r"\u001b[2J") || all.contains(r"\u001b]0;pwned\u0007"),
                "{args:?}: the name is shown, escaped: {all}"
            );
        }
    }
    let out = w.run(&["tree", "s.jsonl"]);
    assert!(
        out.stdout
            .contains(r"custom x\u001b]0;pwned\u0007\u001b[2J\u009b1m\u202e"),
        "{}",
        out.stdout
    );
    // JSON output stays JSON, with the same strings.
    let out = w.run(&["replay", "s.jsonl", "--json"]);
    let v = out.json();
    assert!(
        v["sessions"][0]["tips"][1]["custom"].get(title).is_some(),
        "{v}"
    );
}
