//! `list` (and `replay` of a directory): the agent's sessions folder or a named one, the
//! header limits the library applies, and what is not a regular file skipped.

use crate::common::cli::{EXAMPLE, Out, World, make_session};
use serde_json::json;
use session_state::SessionLog;
use std::path::Path;
use std::process::Command;

#[test]
fn list_reads_headers_from_the_agents_sessions_directory() {
    let w = World::new();
    let sessions = w.agent.join("sessions");
    let a = make_session(&sessions.join("--project-a--"), "/project/a", 2);
    let b = make_session(&sessions.join("--project-b--"), "/project/b", 1);
    std::fs::write(sessions.join("junk.jsonl"), "hello\n").unwrap();
    let out = w.run(&["list"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("list", out.shown()));

    let v = w.run(&["list", "--json"]).json();
    let rows = v["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    for p in [&a, &b] {
        let id = SessionLog::open(p).unwrap().session_id().to_owned();
        assert!(ids.contains(&id.as_str()));
    }
    assert_eq!(rows[0]["cwd"], json!("/project/a"));
    assert_eq!(rows[0]["path"], json!(a));
    assert_eq!(rows[0]["version"], json!(3));

    // An explicit folder.
    let v = w
        .run(&[
            "list",
            sessions.join("--project-b--").to_str().unwrap(),
            "--json",
        ])
        .json();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1);
}

#[test]
fn list_missing_dir() {
    let w = World::new();
    // The default folder may not exist yet: nothing to list.
    let out = w.run(&["list", "--json"]);
    assert_eq!(out.code, 0);
    assert_eq!(out.json(), json!({"sessions": []}));
    // An explicit one must.
    let out = w.run(&["list", "nowhere"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("nowhere"));
}

#[test]
fn list_walks_and_limits_headers_as_the_library_does() {
    let w = World::new();
    let dir = w.work.join("sessions");
    let folder = dir.join("--p--");
    std::fs::create_dir_all(&folder).unwrap();
    // Line 1 over the one header limit (1 MiB, Pi's own), and a valid header of 200 KiB.
    std::fs::write(folder.join("huge.jsonl"), vec![b' '; (1 << 20) + 1]).unwrap();
    let pad = "x".repeat(200 << 10);
    std::fs::write(
        folder.join("long.jsonl"),
        format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"long\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/{pad}\"}}\n"
        ),
    )
    .unwrap();
    // In DIR itself, and two folders down (not walked).
    make_session(&dir, "/p", 1);
    let deeper = dir.join("archive").join("--old--");
    make_session(&deeper, "/old", 1);

    let out = w.run(&["list", "sessions", "--json"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stderr
            .contains("skipped sessions/--p--/huge.jsonl: line 1 is longer than 1 MiB"),
        "{}",
        out.stderr
    );
    let listed: Vec<String> = out.json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap().to_owned())
        .collect();
    // The library's listing of the same folder: the same files, in the same order, and
    // the same file refused.
    let library = session_state::PiJsonlStore::new(&dir).scan().unwrap();
    let expected: Vec<String> = library
        .sessions
        .iter()
        .map(|s| {
            Path::new("sessions")
                .join(s.path.strip_prefix(&dir).unwrap())
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(listed, expected);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.contains(&"sessions/--p--/long.jsonl".to_owned()));
    assert!(listed.iter().all(|p| !p.contains("archive")), "{listed:?}");
    let problems: Vec<_> = library.problems.iter().map(|p| &p.path).collect();
    assert_eq!(problems, [&folder.join("huge.jsonl")]);
    assert!(
        library.problems[0]
            .error
            .to_string()
            .contains("line 1 is longer than 1 MiB"),
        "{}",
        library.problems[0].error
    );
}

#[test]
fn empty_directories_say_so() {
    let w = World::new();
    std::fs::create_dir_all(w.work.join("empty")).unwrap();
    for cmd in ["list", "replay"] {
        let out = w.run(&[cmd, "empty"]);
        assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{cmd}");
        assert_eq!(out.stderr, "no *.jsonl session files in empty\n", "{cmd}");
        let out = w.run(&[cmd, "empty", "--json"]);
        assert_eq!(out.json(), json!({"sessions": []}), "{cmd}");
    }
    // Files, but no sessions among them.
    std::fs::write(w.work.join("empty/notes.jsonl"), "{}\n").unwrap();
    let out = w.run(&["list", "empty"]);
    assert!(
        out.stderr.contains(
            "no sessions in empty: none of its 1 *.jsonl file(s) starts with a session header"
        ),
        "{}",
        out.stderr
    );
}

/// Runs with a time limit, so a command that blocks fails the test instead of hanging it.
fn run_bounded(w: &World, args: &[&str]) -> Out {
    let child = w
        .cmd(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(out) => Out::of(out.unwrap()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("session-state {args:?} still running after 60 s: it blocked");
        }
    }
}

#[cfg(unix)] // symlinks, FIFOs or inode numbers
#[test]
fn directory_scans_skip_what_is_not_a_regular_file() {
    let w = World::new();
    let dir = w.work.join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(EXAMPLE, dir.join("a.jsonl")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("fifo.jsonl"))
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo failed");
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.jsonl")).unwrap();
    std::os::unix::fs::symlink("a.jsonl", dir.join("link.jsonl")).unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("dangling.jsonl")).unwrap();
    for cmd in ["list", "replay"] {
        let out = run_bounded(&w, &[cmd, "sessions", "--json"]);
        assert_eq!(out.code, 0, "{cmd}: {}", out.shown());
        let v = out.json();
        let files: Vec<&str> = v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s[if cmd == "list" { "path" } else { "file" }]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(files, ["sessions/a.jsonl", "sessions/link.jsonl"], "{cmd}");
        for (name, kind) in [
            ("fifo.jsonl", "a FIFO"),
            ("zero.jsonl", "a character device"),
            ("dangling.jsonl", "No such file"),
        ] {
            assert!(
                out.stderr
                    .contains(&format!("warning: skipped sessions/{name}: {kind}")),
                "{cmd} {name}: {}",
                out.stderr
            );
        }
    }
    // Named directly, a FIFO or a device is refused at once, before it is opened.
    for args in [
        &["verify", "/dev/zero"][..],
        &["read", "/dev/zero", "--plugin", "x"],
        &["write", "/dev/zero", "--plugin", "x", "--value", "1"],
        &["tree", "sessions/fifo.jsonl"],
        &["replay", "sessions/fifo.jsonl"],
        &["status", "sessions/zero.jsonl"],
        &["verify", "sessions/fifo.jsonl"],
    ] {
        let out = run_bounded(&w, args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.shown());
        assert!(
            out.stderr.contains("not a regular file"),
            "{args:?}: {}",
            out.stderr
        );
    }
}
