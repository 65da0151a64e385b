//! Stores on the command line: `--store`, `$SESSION_STATE_STORE`, `--store none`, session
//! ids and their unique prefixes, and a URL's password never shown.

use crate::common::cli::{Out, STORE_ENV, World};
use serde_json::json;

/// What a user sees of a command: stdout and stderr.
fn seen(out: &Out) -> String {
    format!("{}{}", out.stdout, out.stderr)
}

#[test]
fn a_url_typo_with_a_password_never_shows_the_password() {
    let w = World::example();
    for url in [
        "postgres:/u:s3cret@h/db",
        "postgresql:u:s3cret@h/db",
        "mysql://u:s3cret@h/db",
        "sqlite://u:s3cret@h/db",
        "u:s3cret@h/db",
        "postgres://u:s3cret@127.0.0.1:1/db",
        "postgres://u:s3/cret@127.0.0.1:1/db",
    ] {
        for args in [
            &["list"][..],
            &["read", "0195f1d0", "--plugin", "role"],
            &["import", "s.jsonl"],
        ] {
            let mut with_flag = args.to_vec();
            with_flag.extend(["--store", url]);
            for out in [w.run(&with_flag), w.run_env(url, args)] {
                assert_eq!(out.code, 2, "{url} {args:?}: {}", out.shown());
                assert!(
                    !seen(&out).contains("s3cret") && !seen(&out).contains("cret@"),
                    "{url} {args:?}: {}",
                    out.shown()
                );
                assert_eq!(out.stderr.matches("error:").count(), 1, "{}", out.shown());
            }
        }
    }
    // A typo of a known scheme says what the scheme looks like.
    let out = w.run(&["list", "--store", "postgres:/u:s3cret@h/db"]);
    assert!(
        out.stderr.contains("starts with postgres://"),
        "{}",
        out.shown()
    );
}

#[test]
fn store_none_means_files_even_when_the_variable_is_set() {
    let w = World::example();
    let url = w.store_url();
    let out = w.run_env(
        &url,
        &["read", "s.jsonl", "--plugin", "role", "--store", "none"],
    );
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.stdout, "{\"name\":\"writer\"}\n");
    let before = std::fs::metadata(w.file()).unwrap().len();
    let out = w.run_env(
        &url,
        &[
            "write", "s.jsonl", "--plugin", "mood", "--value", "1", "--store", "none",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        std::fs::metadata(w.file()).unwrap().len() > before,
        "the file got the event"
    );
    let out = w.run_env(&url, &["tree", "s.jsonl", "--store=none"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        !w.root.join("store.sqlite").exists(),
        "the store was never opened"
    );
    // An empty variable is no store either.
    let out = w.run_env("", &["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    // import needs a store, and says that none is files.
    let out = w.run(&["import", "s.jsonl", "--store", "none"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("import needs a store"),
        "{}",
        out.shown()
    );
}

#[test]
fn a_message_caused_by_the_variable_names_it() {
    let w = World::example();
    // A URL that cannot be opened.
    let out = w.run_env(
        "sqlite://relative.sqlite",
        &["read", "s.jsonl", "--plugin", "role"],
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.starts_with("error: $SESSION_STATE_STORE: ")
            && out.stderr.contains("--store none"),
        "{}",
        out.shown()
    );
    // With --store, the message names --store, not the variable.
    let out = w.run(&[
        "read",
        "s.jsonl",
        "--plugin",
        "role",
        "--store",
        "sqlite://relative.sqlite",
    ]);
    assert!(
        out.stderr.starts_with("error: --store: ") && !out.stderr.contains(STORE_ENV),
        "{}",
        out.shown()
    );
    // A file name where the variable's store wants a session id.
    let url = w.store_url();
    let out = w.run_env(&url, &["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("no stored session has the id s.jsonl")
            && out.stderr.contains("$SESSION_STATE_STORE")
            && out.stderr.contains("--store none"),
        "{}",
        out.shown()
    );
    let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--store", &url]);
    assert!(
        out.stderr.contains("without it, by its file") && !out.stderr.contains(STORE_ENV),
        "{}",
        out.shown()
    );
}

#[test]
fn list_dir_under_the_variable_prints_one_error() {
    let w = World::example();
    let url = w.store_url();
    let out = w.run_env(&url, &["list", "."]);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert_eq!(out.stderr.matches("error:").count(), 1, "{}", out.shown());
    assert!(
        out.stderr.contains("$SESSION_STATE_STORE") && out.stderr.contains("--store none"),
        "{}",
        out.shown()
    );
    // What it suggests works.
    let out = w.run_env(&url, &["list", "--store", "none", "."]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(out.stdout.contains("01a22bc8-9653-71cb-b4ad-8e4c64f53380"));
    // And without DIR, the store's sessions.
    w.import(&w.file());
    let out = w.run_env(&url, &["list"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stdout
            .starts_with("01a22bc8-9653-71cb-b4ad-8e4c64f53380  ")
    );
}

#[test]
fn a_unique_prefix_names_a_stored_session() {
    let w = World::new();
    let url = w.store_url();
    let a_id = "0195f1d0-aaaa-7000-8000-000000000001";
    let b_id = "0195f1d0-bbbb-7000-8000-000000000002";
    let a = w.session_with_id("a.jsonl", a_id);
    let b = w.session_with_id("b.jsonl", b_id);
    // An id that another id starts with: named by itself, never ambiguous.
    let long = w.session_with_id("long.jsonl", &format!("{a_id}-copy"));
    assert_eq!(w.import(&a), a_id, "import prints the whole id");
    assert_eq!(w.import(&b), b_id);
    assert_eq!(w.import(&long), format!("{a_id}-copy"));
    let s = ["--store", url.as_str()];
    let run = |args: &[&str]| w.run(&[args, &s[..]].concat());
    let out = run(&["read", "0195f1d0-b", "--plugin", "role"]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "{\"name\":\"writer\"}\n"),
        "{}",
        out.shown()
    );
    let out = run(&[
        "write",
        "0195f1d0-bb",
        "--plugin",
        "mood",
        "--value",
        "\"calm\"",
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let out = run(&["read", b_id, "--plugin", "mood"]);
    assert_eq!(out.stdout, "\"calm\"\n", "the prefix named b");
    let out = run(&["read", a_id, "--plugin", "mood"]);
    assert_eq!(
        out.code, 1,
        "the exact id names a, not its longer neighbour"
    );
    let out = run(&["export", "0195f1d0-a"]);
    assert_eq!(
        out.code,
        2,
        "a prefix of a and of its neighbour: {}",
        out.shown()
    );
    let out = run(&["export", a_id]);
    assert_eq!(
        out.stdout.as_bytes(),
        std::fs::read(&a).unwrap(),
        "{}",
        out.shown()
    );
    let out = run(&["tree", "0195f1d0-b"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    // Ambiguous: one error, listing every candidate.
    let out = run(&["read", "0195f1d0", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert_eq!(out.stderr.matches("error:").count(), 1, "{}", out.shown());
    for id in [a_id, b_id] {
        assert!(out.stderr.contains(id), "{}", out.shown());
    }
    assert!(
        out.stderr.contains("give more of the id"),
        "{}",
        out.shown()
    );
    let out = run(&["read", "ffff", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("no stored session has the id ffff"),
        "{}",
        out.shown()
    );
}

#[test]
fn status_and_verify_name_a_stored_session_by_its_store_and_id() {
    let w = World::example();
    let url = w.store_url();
    let id = w.import(&w.file());
    let label = format!("{url}#{id}");
    // The commands' temporary directory: a temporary copy of the session would be here.
    let tmp = w.root.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp_text = tmp.to_str().unwrap();
    let prefix = &id[..8];
    let run = |args: &[&str]| {
        let args = [args, &["--store", url.as_str()][..]].concat();
        Out::of(w.cmd(&args).env("TMPDIR", &tmp).output().unwrap())
    };
    let no_temporary_path = |out: &Out| {
        assert!(
            !seen(out).contains(tmp_text) && !seen(out).contains("session.jsonl"),
            "{}",
            out.shown()
        );
    };
    let out = run(&["status", prefix]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stdout.contains(&format!(
            "session   {id} ({label})\n          in the store: its lines there are the session and its state\n"
        )) && out.stdout.contains(
            "          this machine's projection cache (SQLite) of the stored session: folds cached from the store's lines, and this machine's write lock\n"
        ),
        "{}",
        out.shown()
    );
    no_temporary_path(&out);
    for args in [&["verify", prefix][..], &["verify", prefix, "--salvage"]] {
        let out = run(args);
        assert_eq!(out.code, 0, "{}", out.shown());
        assert!(
            out.stdout
                .starts_with(&format!("{label}: readable: session {id}, ")),
            "{}",
            out.shown()
        );
        no_temporary_path(&out);
    }
    for args in [
        &["status", prefix, "--json"][..],
        &["verify", prefix, "--json"],
        &["verify", prefix, "--salvage", "--json"],
    ] {
        let out = run(args);
        assert_eq!(out.code, 0, "{}", out.shown());
        let v = out.json();
        assert_eq!(v["file"], json!(label), "{}", out.shown());
        assert_eq!(v["sessionId"], json!(id), "{}", out.shown());
        no_temporary_path(&out);
    }
    // They read the store's lines: nothing was copied out.
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}

#[test]
fn an_id_with_escape_characters_is_printed_escaped() {
    let w = World::new();
    let url = w.store_url();
    let raw = |n: u8| format!("x\u{1b}]0;pwned\u{7}\u{202e}-{n}");
    let shown = |n: u8| format!("x\\u001b]0;pwned\\u0007\\u202e-{n}");
    w.session_with_id("one.jsonl", &raw(1));
    w.session_with_id("two.jsonl", &raw(2));
    let out = w.run(&["import", "one.jsonl", "--store", &url]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.stdout, format!("{}\n", shown(1)));
    w.import(&w.work.join("two.jsonl"));
    let out = w.run(&["list", "--store", &url]);
    assert!(out.stdout.contains(&shown(1)) && out.stdout.contains(&shown(2)));
    // An ambiguous prefix lists the candidates, escaped.
    let out = w.run(&["read", "x", "--plugin", "role", "--store", &url]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains(&shown(1)) && out.stderr.contains(&shown(2)),
        "{}",
        out.shown()
    );
    for out in [&out, &w.run(&["list", "--store", &url])] {
        assert!(
            !seen(out).contains('\u{1b}') && !seen(out).contains('\u{202e}'),
            "{}",
            out.shown()
        );
    }
}
