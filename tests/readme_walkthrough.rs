//! The README's CLI session, run for real on a copy of fixtures/example.jsonl: every
//! value the README shows is what the binary prints (entry ids differ per run; the ones
//! the README passes to `--at` come from the committed fixture).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

struct Run {
    code: i32,
    out: String,
}

fn ss(agent: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_session-state"))
        .args(args)
        .env_clear()
        .env("PI_CODING_AGENT_DIR", agent)
        .env("HOME", agent)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap(),
        out: String::from_utf8(out.stdout).unwrap(),
    }
}

#[test]
fn the_readme_walkthrough_holds() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    let demo = dir.path().join("demo.jsonl");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/example.jsonl"),
        &demo,
    )
    .unwrap();
    let f = demo.to_str().unwrap();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(readme.contains("ss read /tmp/demo.jsonl --plugin role --at ddd707d7"));

    let r = ss(&agent, &["read", f, "--plugin", "role"]);
    assert_eq!((r.code, r.out.as_str()), (0, "{\"name\":\"writer\"}\n"));
    let r = ss(&agent, &["read", f, "--plugin", "role", "--at", "ddd707d7"]);
    assert_eq!(r.out, "{\"name\":\"reviewer\"}\n");
    let tester = ss(
        &agent,
        &[
            "write",
            f,
            "--plugin",
            "role",
            "--value",
            r#"{"name":"tester"}"#,
        ],
    );
    assert_eq!((tester.code, tester.out.trim().len()), (0, 8));
    let again = ss(
        &agent,
        &[
            "write",
            f,
            "--plugin",
            "role",
            "--value",
            r#"{"name":"tester"}"#,
        ],
    );
    assert_eq!((again.code, again.out.as_str()), (0, ""));
    let fork = ss(
        &agent,
        &[
            "write",
            f,
            "--plugin",
            "role",
            "--at",
            "ddd707d7",
            "--value",
            r#"{"name":"auditor"}"#,
        ],
    );
    assert_eq!(fork.out.trim().len(), 8);
    assert_eq!(
        ss(&agent, &["read", f, "--plugin", "role"]).out,
        "{\"name\":\"auditor\"}\n"
    );
    let r = ss(
        &agent,
        &["read", f, "--plugin", "role", "--at", tester.out.trim()],
    );
    assert_eq!(r.out, "{\"name\":\"tester\"}\n");
    let p = ss(
        &agent,
        &[
            "patch",
            f,
            "--plugin",
            "todo",
            "--scope",
            "session",
            "--merge",
            r#"{"last-error":null}"#,
        ],
    );
    assert_eq!(p.out.trim().len(), 8);
    let r = ss(
        &agent,
        &["read", f, "--plugin", "todo", "--scope", "session"],
    );
    assert_eq!(r.out, "{\"backoff\":\"done\"}\n");
    let r = ss(&agent, &["read", f, "--plugin", "nothing"]);
    assert_eq!((r.code, r.out.as_str()), (1, ""));
    let tree = ss(&agent, &["tree", f]).out;
    let tail: Vec<&str> = tree.lines().rev().take(5).collect();
    assert!(
        tail.iter().any(|l| l.contains(&format!(
            "{} state role set (branch) {{\"name\":\"tester\"}}",
            tester.out.trim()
        ))),
        "{tree}"
    );
    assert!(
        tree.contains(&format!(
            "{} state todo patch (session) {{\"last-error\":null}}  [leaf]",
            p.out.trim()
        )),
        "{tree}"
    );
    let v = ss(&agent, &["verify", f]);
    assert_eq!(v.code, 0);
    assert!(
        v.out.contains(
            "readable: session 01a22bc8-9653-71cb-b4ad-8e4c64f53380, 17 entries, 0 finding(s)"
        ),
        "{}",
        v.out
    );
    // The main job of the README: replay the example.
    let r = ss(
        &agent,
        &[
            "replay",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/example.jsonl")
                .to_str()
                .unwrap(),
        ],
    );
    assert_eq!(r.code, 0);
    assert!(
        r.out.contains("role = {\"name\":\"writer\"}")
            && r.out.contains("role = {\"name\":\"reviewer\"}"),
        "{}",
        r.out
    );
}
