//! `write`, `patch` and `drop`: what they append (or not), forks with `--at`, values from
//! stdin or `--value`, a refusal by a live lock, and what a terminal adds.

use crate::common::cli::{World, example_log, kill, live_lock, native_bin};
use serde_json::json;

#[test]
fn write_fork_with_at_then_read_both_branches() {
    let w = World::example();
    let leaf = example_log(&w).leaf_id().unwrap().to_owned();

    // On the current branch.
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "mood",
        "--value",
        r#""calm""#,
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let a = out.line();
    assert_eq!(a.len(), 8, "an entry id: {a:?}");

    // A fork: a second child of the old leaf.
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "mood",
        "--value",
        r#""busy""#,
        "--at",
        &leaf,
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let b = out.line();
    let log = example_log(&w);
    assert_eq!(log.entry(&a).unwrap().parent_id(), Some(leaf.as_str()));
    assert_eq!(log.entry(&b).unwrap().parent_id(), Some(leaf.as_str()));
    assert!(log.forks().contains(&leaf.as_str()));

    // Each branch sees its own write; the leaf is the last entry in file order.
    let read = |at: Option<&str>| {
        let mut args = vec!["read", "s.jsonl", "--plugin", "mood"];
        if let Some(at) = at {
            args.extend(["--at", at]);
        }
        w.run(&args)
    };
    assert_eq!(read(Some(&a)).line(), r#""calm""#);
    assert_eq!(read(Some(&b)).line(), r#""busy""#);
    assert_eq!(read(None).line(), r#""busy""#);
    assert_eq!(read(Some(&leaf)).code, 1);

    let tree = w.run(&["tree", "s.jsonl"]);
    w.settings()
        .bind(|| insta::assert_snapshot!("tree_after_fork", tree.shown()));
}

#[test]
fn write_reads_stdin_and_prints_nothing_when_nothing_changes() {
    let w = World::example();
    let out = w.run_stdin(&["write", "s.jsonl", "--plugin", "todo"], "[1, 2, 3]\n");
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.line().len(), 8);
    let len = std::fs::metadata(w.file()).unwrap().len();

    let out = w.run(&["write", "s.jsonl", "--plugin", "todo", "--value", "[1,2,3]"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "", "")
    );
    assert_eq!(
        std::fs::metadata(w.file()).unwrap().len(),
        len,
        "nothing appended"
    );

    let out = w.run(&["read", "s.jsonl", "--plugin", "todo"]);
    assert_eq!(out.line(), "[1,2,3]");
}

#[test]
fn patch_merges_and_drop_makes_absent() {
    let w = World::example();
    let out = w.run(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "role",
        "--merge",
        r#"{"model":"fast"}"#,
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.line().len(), 8);
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(out.json(), json!({"name": "writer", "model": "fast"}));

    // A patch that changes nothing appends nothing.
    let out = w.run(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "role",
        "--merge",
        r#"{"model":"fast"}"#,
    ]);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""));

    // Session scope: patch the session-wide todo.
    let out = w.run(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "todo",
        "--scope",
        "session",
        "--merge",
        r#"{"backoff":null}"#,
    ]);
    assert_eq!(out.code, 0);
    let out = w.run(&["read", "s.jsonl", "--plugin", "todo", "--scope", "session"]);
    assert_eq!(out.json(), json!({"last-error": "open"}));

    let out = w.run(&["drop", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.line().len()), (0, 8));
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    let out = w.run(&["drop", "s.jsonl", "--plugin", "role"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "", "")
    );
}

#[test]
fn empty_stdin_is_invalid_json() {
    let w = World::example();
    let out = w.run_stdin(&["write", "s.jsonl", "--plugin", "role"], "");
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("stdin is not valid JSON"),
        "{}",
        out.stderr
    );
}

#[test]
fn negative_numbers_are_values() {
    let w = World::example();
    for (value, shown) in [("-1", "-1"), ("-2.5", "-2.5")] {
        let out = w.run(&["write", "s.jsonl", "--plugin", "n", "--value", value]);
        assert_eq!(out.code, 0, "{value}: {}", out.shown());
        assert_eq!(out.line().len(), 8, "{value}: {}", out.shown());
        let out = w.run(&["read", "s.jsonl", "--plugin", "n"]);
        assert_eq!((out.code, out.line().as_str()), (0, shown), "{value}");
    }
    // A merge patch that is not an object replaces the value (RFC 7396).
    let out = w.run(&["patch", "s.jsonl", "--plugin", "n", "--merge", "-5"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let out = w.run(&["read", "s.jsonl", "--plugin", "n"]);
    assert_eq!(out.line(), "-5");
    // `--value=-7` and a value after `--`-less flags keep working too.
    let out = w.run(&["write", "s.jsonl", "--value=-7", "--plugin", "n"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(w.run(&["read", "s.jsonl", "--plugin", "n"]).line(), "-7");
    // Something that is not JSON is still refused, by the JSON parser.
    let out = w.run(&["write", "s.jsonl", "--plugin", "n", "--value", "-x"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("--value is not valid JSON"),
        "{}",
        out.stderr
    );
}

#[test]
fn write_refused_by_a_live_lock_names_holder_action_session_and_reason() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    let len = std::fs::metadata(w.file()).unwrap().len();
    let out = w.run(&["write", "s.jsonl", "--plugin", "role", "--value", "1"]);
    kill(child);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert_eq!(out.stdout, "");
    assert!(out.stderr.contains(&sid), "{}", out.stderr);
    assert!(out.stderr.contains("write refused"), "{}", out.stderr);
    assert!(out.stderr.contains("alive"), "{}", out.stderr);
    assert_eq!(std::fs::metadata(w.file()).unwrap().len(), len);
    w.settings()
        .bind(|| insta::assert_snapshot!("write_locked", out.shown()));
}

#[test]
fn library_warnings_reach_stderr() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    kill(live_lock(&db, &sid));
    let out = w.run(&["write", "s.jsonl", "--plugin", "n", "--value", "1"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stderr.contains("WARN") && out.stderr.contains("taking over the write lock"),
        "{}",
        out.stderr
    );
    // Quiet by default: a plain read prints nothing on stderr; -v is accepted anywhere.
    let out = w.run(&["read", "s.jsonl", "--plugin", "n"]);
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let out = w.run(&["-v", "read", "s.jsonl", "--plugin", "n", "-vv"]);
    assert_eq!(out.code, 0, "{}", out.shown());
}

#[test]
fn write_says_when_it_waits_for_a_terminal() {
    let w = World::example();
    let bin = native_bin();
    // `script` gives the command a terminal on stdin; Ctrl-D (\x04) ends the value.
    let out = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("{} write s.jsonl --plugin n", bin.display()),
            "/dev/null",
        ])
        .env("PI_CODING_AGENT_DIR", &w.agent)
        .env("HOME", w.root.join("home"))
        .current_dir(&w.work)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(b"5\n\x04")?;
            c.wait_with_output()
        })
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("reading the value from stdin… (Ctrl-D to end)"),
        "{shown}"
    );
    assert_eq!(w.run(&["read", "s.jsonl", "--plugin", "n"]).line(), "5");
    // Without a terminal: no such line.
    let out = w.run_stdin(&["write", "s.jsonl", "--plugin", "n"], "6");
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
}

/// The binary run with `args` (one shell word list) on a terminal that `script` gives it,
/// in `w`, stdin empty; what it printed (stdout and stderr both come through the terminal).
fn on_a_terminal(w: &World, args: &str) -> std::process::Output {
    let bin = native_bin();
    std::process::Command::new("script")
        .args(["-qec", &format!("{} {args}", bin.display()), "/dev/null"])
        .env("PI_CODING_AGENT_DIR", &w.agent)
        .env("HOME", w.root.join("home"))
        .current_dir(&w.work)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// `write` keeps stdout the new id alone (scripts take it as it is); on a terminal it adds,
/// on stderr, the `history --at <id>` that shows the state through the new entry: after a
/// write `--at X`, the state at X itself does not include the entry, which is X's child.
#[test]
fn write_prints_the_id_alone_and_on_a_terminal_the_history_that_shows_it() {
    let w = World::example();
    let out = on_a_terminal(
        &w,
        "write s.jsonl --plugin role --at ddd707d7 --value '{\"name\":\"auditor\"}'",
    );
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    let mut lines = shown.lines();
    let id = lines.next().unwrap().to_owned();
    assert_eq!(id.len(), 8, "the id alone on its line: {shown}");
    let hint = lines.next().unwrap_or_default();
    let history = format!("session-state history s.jsonl --plugin role --at {id}");
    assert!(
        hint.contains(&format!("appended {id}; its state: {history}"))
            && hint.contains(
                "(--at ddd707d7 shows the state before it: the new entry is a child of ddd707d7)"
            ),
        "{shown}"
    );
    // The command the hint shows lists the new entry; the one at --at does not.
    let args: Vec<&str> = history.split(' ').skip(1).collect();
    let through = w.run(&args);
    assert_eq!(through.code, 0, "{}", through.shown());
    assert!(through.stdout.contains(&id), "{}", through.shown());
    let before = w.run(&["history", "s.jsonl", "--plugin", "role", "--at", "ddd707d7"]);
    assert!(!before.stdout.contains(&id), "{}", before.shown());
    // Without a terminal: the id alone on stdout, nothing on stderr.
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        "{\"name\":\"x\"}",
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.stdout.trim_end().len(), 8, "{}", out.shown());
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.shown());
    assert_eq!(out.stderr, "", "{}", out.shown());
    // Session scope: the hint names the scope.
    let out = on_a_terminal(&w, "write s.jsonl --plugin todo --scope session --value 1");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("--plugin todo --scope session --at "),
        "{shown}"
    );
}
