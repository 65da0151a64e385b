//! The one integration-test binary (as jj-lib's `tests/runner.rs`): each behaviour's tests
//! live in their own file beside this one and are declared here, so the suite links once.
#![expect(clippy::unwrap_used)]

mod common;

mod architecture;
mod bad_input;
mod cli;
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
mod persistence;
mod pi_install;
mod pi_package;
mod pi_tui;
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
mod seam_faults;
mod settings_location;
mod store;
mod torn_cuts;
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
