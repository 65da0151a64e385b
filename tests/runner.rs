//! The one integration-test binary (as jj-lib's `tests/runner.rs`): each behaviour's tests
//! live in their own file beside this one and are declared here, so the suite links once.
#![expect(clippy::unwrap_used)]

mod common;

mod api_surface;
mod architecture;
mod bad_input;
// The command line's tests, one file per command, over one harness (`common::cli`).
mod cli_force_refresh;
mod cli_help;
mod cli_json;
// Some imports serve only the tests that need Unix (symlinks, FIFOs).
#[cfg_attr(not(unix), allow(unused))]
mod cli_list;
mod cli_messages;
mod cli_read;
mod cli_replay;
mod cli_status;
mod cli_store;
mod cli_tree;
mod cli_verify;
mod cli_versions;
mod cli_write;
mod concurrency;
mod conformance;
mod corruption;
mod crash_loop;
mod deferred_projection;
mod differential;
mod fixtures;
mod fork_inheritance;
mod guard_example;
mod interop;
mod log_faults;
#[cfg(unix)]
mod one_lock;
mod persistence;
#[cfg(unix)]
mod pi_arm64;
#[cfg(unix)]
mod pi_install;
mod pi_package;
mod pi_platforms;
mod pi_release;
#[cfg(unix)]
mod pi_tui;
#[cfg(unix)]
mod pi_windows;
mod plugins;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_failover;
#[cfg(feature = "postgres")]
mod postgres_retries;
#[cfg(feature = "postgres")]
mod postgres_tls;
mod projection;
mod prune;
mod readme_walkthrough;
mod replay;
mod schema_upgrade;
mod seam_faults;
mod settings_location;
mod store;
mod torn_cuts;
mod versions;
// Some helpers serve only the tests that need Unix (symlinks, FIFOs, signals).
#[cfg_attr(not(unix), allow(unused))]
mod write_lock;
mod write_path;

/// The `tests/*.rs` files (by module name) that `runner` does not declare with `mod`: with
/// `autotests = false`, such a file would never be compiled or run (jj-lib's guard).
fn undeclared(runner: &str, files: &[String]) -> Vec<String> {
    let declared: std::collections::BTreeSet<&str> = runner
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod "))
        .map(|m| m.trim_end_matches(';').trim())
        .collect();
    files
        .iter()
        .filter(|f| f.as_str() != "runner" && !declared.contains(f.as_str()))
        .cloned()
        .collect()
}

#[test]
fn every_test_file_is_declared_in_the_runner() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let runner = std::fs::read_to_string(dir.join("runner.rs")).unwrap();
    // Only files: helper folders (`tests/common/`, `tests/interop/`) are not test files.
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(files.len() > 20, "only {} test files found", files.len());
    let missing = undeclared(&runner, &files);
    assert!(
        missing.is_empty(),
        "tests/<name>.rs not declared in tests/runner.rs, so never run: {missing:?}"
    );
    // The check itself: a file missing from a runner is found.
    let planted = undeclared(
        "mod common;\nmod cli;\n#[cfg(feature = \"postgres\")]\nmod postgres;\n",
        &[
            "cli".into(),
            "postgres".into(),
            "store".into(),
            "runner".into(),
        ],
    );
    assert_eq!(planted, ["store"]);
}

/// A cargo that a test starts (the examples of `common::examples`, the Pi addon's build)
/// runs without the variables cargo set for this test process, so it finds up to date what
/// `cargo test` built instead of rebuilding ring, rustls and the crate (and the next `cargo
/// test` rebuilding them back).
#[test]
fn nested_cargo_builds_find_what_cargo_test_built() {
    let set: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| common::cargo_env::set_by_cargo_for_tests(k))
        .collect();
    assert!(
        set.iter().any(|k| k == "CARGO_MANIFEST_DIR") && set.iter().any(|k| k == "CARGO_PKG_NAME"),
        "run by cargo test: {set:?}"
    );
    let commands = [
        ("examples", common::examples::build_command("writer")),
        ("the Pi addon", common::pi_addon::command("napi")),
    ];
    for (what, c) in &commands {
        let removed: Vec<String> = c
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        let passed: Vec<&String> = set.iter().filter(|k| !removed.contains(k)).collect();
        assert!(passed.is_empty(), "{what}: passed on {passed:?}");
    }
    // The examples' build: every library it needs is the one `cargo test` built.
    let out = common::examples::build_command("writer")
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    let rebuilt: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["fresh"] == false)
        .filter(|m| m["target"]["kind"][0] != "example")
        .map(|m| m["target"]["name"].as_str().unwrap_or("?").to_owned())
        .collect();
    assert!(
        rebuilt.is_empty(),
        "rebuilt by the nested cargo: {rebuilt:?}"
    );
}
