//! `tree`: forks, the leaf, keys and state events drawn; long runs folded; output linear
//! in nested forks (`replay` too).

use crate::common::cli::{World, make_session};
use serde_json::json;
use session_state::{NewEntry, SessionLog};
use std::path::Path;

#[test]
fn tree_draws_forks_leaf_keys_and_state_events() {
    let w = World::example();
    let out = w.run(&["tree", "s.jsonl"]);
    assert_eq!(out.code, 0);
    w.settings()
        .bind(|| insta::assert_snapshot!("tree_example", out.shown()));
    assert!(out.stdout.contains("[fork: 2]"));
    assert!(out.stdout.contains("[leaf]"));
    assert!(out.stdout.contains("state role set (branch)"));
    assert!(out.stdout.contains("state todo patch (session)"));
}

#[test]
fn tree_folds_long_linear_runs() {
    let w = World::new();
    let path = make_session(&w.work, "/p", 40);
    let mut log = SessionLog::open(&path).unwrap();
    let root = log.roots()[0].to_owned();
    let mid = log.path_to(log.leaf_id().unwrap()).unwrap()[20].to_owned();
    drop(log);
    log = SessionLog::open(&path).unwrap();
    log.navigate(&mid).unwrap();
    log.append(NewEntry::message(
        json!({"role":"user","content":"other way"}),
    ))
    .unwrap();
    drop(log);
    let out = w.run(&["tree", path.to_str().unwrap()]);
    assert_eq!(out.code, 0);
    w.settings()
        .bind(|| insta::assert_snapshot!("tree_folded", out.shown()));
    assert!(out.stdout.contains(&format!("{root} message user  [key]")));
    assert!(out.stdout.contains("… 19 entries …"), "{}", out.stdout);
    assert!(out.stdout.contains("… 17 entries …"), "{}", out.stdout);
}

#[test]
fn tree_missing_file_exits_2() {
    let w = World::new();
    let out = w.run(&["tree", "missing.jsonl"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("missing.jsonl"));
}

/// A session of `n` forks, each inside the previous one: fork `i` is a state event of
/// plugin `depth` (value `i`) with two children, a message (a tip) and fork `i + 1`.
fn nested_forks(path: &Path, n: usize) -> usize {
    use std::fmt::Write as _;
    let mut s = String::from(
        "{\"type\":\"session\",\"version\":3,\"id\":\"01a22bc8-9653-71cb-b4ad-000000000000\",\
         \"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n",
    );
    let mut parent = "null".to_owned();
    for i in 0..n {
        let fork = format!("f{i:07}");
        let _ = writeln!(
            s,
            "{{\"type\":\"custom\",\"customType\":\"session-state/depth\",\"data\":{{\"v\":1,\
             \"scope\":\"branch\",\"op\":\"set\",\"value\":{i}}},\"id\":\"{fork}\",\
             \"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\"}}"
        );
        let _ = writeln!(
            s,
            "{{\"type\":\"message\",\"id\":\"t{i:07}\",\"parentId\":\"{fork}\",\
             \"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"user\",\
             \"content\":\"hi\",\"timestamp\":1}}}}"
        );
        parent = format!("\"{fork}\"");
    }
    std::fs::write(path, s).unwrap();
    2 * n
}

#[test]
fn tree_and_replay_output_is_linear_in_nested_forks() {
    let w = World::new();
    let f = w.work.join("nested.jsonl");
    let entries = nested_forks(&f, 2000);
    let out = w.run(&["tree", "nested.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.len() <= 120 * entries,
        "tree printed {} bytes for {entries} entries",
        out.stdout.len()
    );
    // Every entry is still drawn, the deep ones with the depth marker.
    assert_eq!(out.stdout.lines().count(), entries + 1);
    assert!(
        out.stdout.lines().any(|l| l.starts_with("[+1987] ")
            && l.ends_with("└─ f0001999 state depth set (branch) 1999  [key]")),
        "{}",
        &out.stdout[out.stdout.len() - 2000..]
    );
    let widest = out.stdout.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(widest < 160, "a line of {widest} characters");

    // replay: one row per tip, each with the value of its own fork.
    let out = w.run(&["replay", "nested.jsonl", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = out.json();
    let tips = v["sessions"][0]["tips"].as_array().unwrap();
    assert_eq!(tips.len(), 2000);
    for (i, t) in tips.iter().enumerate() {
        assert_eq!(t["tip"], json!(format!("t{i:07}")));
        assert_eq!(t["branch"]["depth"]["value"], json!(i), "{t}");
        assert_eq!(t["depth"], json!(i + 2));
    }
    let text = w.run(&["replay", "nested.jsonl"]);
    assert!(text.stdout.len() <= 120 * entries, "{}", text.stdout.len());
}
