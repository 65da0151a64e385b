//! The Pi package (`pi/`) in the real Pi 1.6.0 agent loop, from `cargo test`: `npm ci`,
//! the napi-rs addon built under `target/pi-native/` (`tests/common/pi_addon.rs`; never in
//! `pi/native/`, where a user's own build lives), `npm run typecheck` (`tsc --strict` over
//! the package's TypeScript) and the package's `npm test` with the pinned Node 22 that
//! `npm ci` installs. The Node tests drive Pi through its SDK with the `faux` provider,
//! load the addon named by `SESSION_STATE_PI_ADDON` and use this build's CLI.
//!
//! There is no silent skip: a missing `npm`, a failed install or build, or a failing Node
//! test fails this test with the output.

use crate::common::pi_addon::{self, ADDON_ENV};
use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::time::SystemTime;

/// The counts of node's test reporter (`# pass N`, `# fail N`), asserted: none failed and
/// at least `min` passed.
pub fn assert_node_tests_passed(stdout: &str, min: u32) {
    let count = |key: &str| -> u32 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {key} ")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no '# {key}' line in node's output:\n{stdout}"))
    };
    assert_eq!(count("fail"), 0, "{stdout}");
    assert!(count("pass") >= min, "the Node tests ran: {stdout}");
}

#[test]
fn the_pi_package_passes_its_tests_in_the_real_pi() {
    let addon = pi_addon::addon();
    let native = pi_addon::pkg().join("native");
    let before = listing(&native);
    let mut typecheck = pi_addon::command("npm");
    typecheck.args(["run", "typecheck"]);
    pi_addon::run("npm run typecheck (tsc --strict)", typecheck);
    let mut test = pi_addon::command("npm");
    test.args(["test", "--silent"])
        .env(ADDON_ENV, addon)
        .env("SESSION_STATE_BIN", env!("CARGO_BIN_EXE_session-state"));
    let out = pi_addon::run("npm test (the Pi package's tests)", test);
    assert_node_tests_passed(&String::from_utf8_lossy(&out.stdout), 10);
    assert_eq!(
        before,
        listing(&native),
        "the tests wrote into {} (a user's own addon lives there)",
        native.display()
    );
}

/// Each file's name, length and modification time, sorted by name.
fn listing(dir: &Path) -> Vec<(OsString, u64, Option<SystemTime>)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| {
            let e = e.expect("a directory entry");
            let meta = e.metadata().expect("metadata");
            (e.file_name(), meta.len(), meta.modified().ok())
        })
        .collect();
    files.sort();
    files
}
