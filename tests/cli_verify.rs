//! `verify`: readable files, warnings, corrupt files and what `--salvage` keeps,
//! structural errors and undecodable state events, with the exit code of each.

use crate::common::cli::{EDGE, World};
use serde_json::json;

#[test]
fn verify_readable_file_exits_0() {
    let w = World::example();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 0);
    w.settings()
        .bind(|| insta::assert_snapshot!("verify_ok", out.shown()));
    let v = w.run(&["verify", "s.jsonl", "--json", "--salvage"]).json();
    assert_eq!(v["readable"], json!(true));
    assert_eq!(v["findings"], json!([]));
    assert_eq!(v["salvage"]["entries"], json!(14));
}

#[test]
fn verify_lists_warnings_and_still_exits_0() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/torn-record-middle.jsonl"), w.file()).unwrap();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("verify_torn", out.shown()));
    let v = w.run(&["verify", "s.jsonl", "--json"]).json();
    let f = &v["findings"][0];
    assert_eq!(f["kind"], json!("torn-record"));
    assert_eq!(f["severity"], json!("warning"));
    assert_eq!(f["at"], json!({"line": 4, "offset": 823}));
}

#[test]
fn verify_corrupt_file_exits_1_and_says_what_salvage_keeps() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/corrupt-middle.jsonl"), w.file()).unwrap();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 1, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("verify_corrupt", out.shown()));
    let v = w.run(&["verify", "s.jsonl", "--json"]).json();
    assert_eq!(v["readable"], json!(false));
    assert_eq!(v["error"]["line"], json!(3));
    assert_eq!(v["error"]["offset"], json!(343));
    assert_eq!(v["salvage"]["entries"], json!(3));
    assert_eq!(v["salvage"]["findings"][0]["kind"], json!("corrupt"));
}

#[test]
fn verify_names_the_entry_of_structural_errors() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/dangling-parent.jsonl"), w.file()).unwrap();
    let v = w.run(&["verify", "s.jsonl", "--json"]);
    assert_eq!(v.code, 1);
    let v = v.json();
    assert_eq!(v["error"]["entryId"], json!("a0000003"));
    assert_eq!(v["salvage"]["findings"][0]["entryId"], json!("a0000003"));
}

#[test]
fn verify_reports_undecodable_state_events() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.file()).unwrap();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stdout
            .contains("bad-state-event at line 4, byte 823, entry 'a0000003'")
    );
    assert!(out.stdout.contains("entry 'a0000004'"));
}

#[test]
fn verify_unreadable_header_exits_1_and_missing_file_exits_2() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/version-4.jsonl"), w.file()).unwrap();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("salvage: cannot read it either"));
    let out = w.run(&["verify", "missing.jsonl"]);
    assert_eq!((out.code, out.stdout.as_str()), (2, ""));
    w.settings()
        .bind(|| insta::assert_snapshot!("verify_missing", out.shown()));
}
