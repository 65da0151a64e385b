//! `replay`: every plugin's value at every tip, of a file or of every session below a
//! directory, with other extensions' entries and bad events shown.

use crate::common::cli::{EDGE, EXAMPLE, World, example_log, make_session};
use serde_json::{Value, json};
use session_state::{NewEntry, SessionLog};

#[test]
fn replay_shows_every_plugin_at_every_tip() {
    let w = World::example();
    let out = w.run(&["replay", "s.jsonl"]);
    assert_eq!(out.code, 0);
    w.settings()
        .bind(|| insta::assert_snapshot!("replay_example", out.shown()));

    let out = w.run(&["replay", "s.jsonl", "--json"]);
    assert_eq!(out.code, 0);
    let v = out.json();
    let s = &v["sessions"][0];
    let log = example_log(&w);
    assert_eq!(s["sessionId"], json!(log.session_id()));
    assert_eq!(s["entries"], json!(14));
    assert_eq!(
        s["session"]["todo"]["value"],
        json!({"backoff":"done","last-error":"open"})
    );
    assert_eq!(s["session"]["role"], json!({"absent": true}));
    let tips = s["tips"].as_array().unwrap();
    assert_eq!(tips.len(), 2);
    let by_tip = |id: &str| tips.iter().find(|t| t["tip"] == json!(id)).unwrap();
    let [first, leaf] = [log.tips()[0], log.leaf_id().unwrap()];
    assert_eq!(
        by_tip(first)["branch"]["role"]["value"],
        json!({"name":"reviewer"})
    );
    assert_eq!(
        by_tip(leaf)["branch"]["role"]["value"],
        json!({"name":"writer"})
    );
    assert_eq!(by_tip(leaf)["leaf"], json!(true));
    assert_eq!(by_tip(leaf)["branch"]["todo"], json!({"absent": true}));
}

#[test]
fn replay_shows_other_extensions_custom_entries() {
    let w = World::new();
    let path = make_session(&w.work, "/project", 2);
    let mut log = SessionLog::open(&path).unwrap();
    let fork_at = log.leaf_id().unwrap().to_owned();
    log.append(NewEntry::custom("my-ext", Some(json!({"n": 1}))))
        .unwrap();
    log.append(NewEntry::custom("my-ext", Some(json!({"n": 2}))))
        .unwrap();
    log.navigate(&fork_at).unwrap();
    log.append(NewEntry::custom("other.ext", None)).unwrap();
    drop(log);
    let name = path.file_name().unwrap().to_str().unwrap();
    let out = w.run(&["replay", name]);
    assert_eq!(out.code, 0, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("replay_custom", out.shown()));
    let v = w.run(&["replay", name, "--json"]).json();
    let tips = v["sessions"][0]["tips"].as_array().unwrap().clone();
    assert_eq!(
        tips[0]["custom"]["my-ext"],
        json!({"entries": 2, "lastEntry": tips[0]["tip"], "lastData": {"n": 2}})
    );
    assert_eq!(tips[1]["custom"]["other.ext"]["entries"], json!(1));
    assert_eq!(tips[1]["custom"]["other.ext"]["lastData"], Value::Null);
    assert!(
        tips[1]["custom"].get("my-ext").is_none(),
        "siblings are separate"
    );
}

#[test]
fn replay_dir_reads_every_session_below_it() {
    let w = World::new();
    let dir = w.work.join("sessions");
    std::fs::create_dir_all(dir.join("nested")).unwrap();
    std::fs::copy(EXAMPLE, dir.join("a.jsonl")).unwrap();
    make_session(&dir.join("nested"), "/p", 3);
    std::fs::write(dir.join("notes.txt"), "not a session").unwrap();
    let out = w.run(&["replay", "sessions", "--json"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let v = out.json();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 2);
    assert!(
        out.stderr.is_empty(),
        "no progress bar without a terminal: {}",
        out.stderr
    );

    // A bad file is reported and makes the exit code 1; the others are still replayed.
    std::fs::copy(
        format!("{EDGE}/corrupt-middle.jsonl"),
        dir.join("bad.jsonl"),
    )
    .unwrap();
    let out = w.run(&["replay", "sessions"]);
    assert_eq!(out.code, 1, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("replay_dir", out.shown()));
}

#[test]
fn replay_missing_path_exits_2() {
    let w = World::new();
    let out = w.run(&["replay", "nowhere"]);
    assert_eq!(out.code, 2);
    // The message every command gives for a missing session file (docs/cli.md).
    assert!(
        out.stderr
            .starts_with("error: opening nowhere: No such file or directory"),
        "{}",
        out.shown()
    );
    for cmd in [
        &["tree"][..],
        &["verify"],
        &["status"],
        &["read", "--plugin", "p"],
    ] {
        let mut args = cmd.to_vec();
        args.insert(1, "nowhere");
        let out = w.run(&args);
        assert!(
            out.stderr
                .starts_with("error: opening nowhere: No such file or directory"),
            "{args:?}: {}",
            out.shown()
        );
    }
}

#[test]
fn replay_bad_event_is_shown_and_exits_1() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.file()).unwrap();
    let out = w.run(&["replay", "s.jsonl"]);
    assert_eq!(out.code, 1, "{}", out.shown());
    assert!(out.stdout.contains("role = ERROR"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains(r#"todo = {"backoff":"done","tests":"open"}"#)
    );
}
