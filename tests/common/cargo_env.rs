//! A cargo started by a test: without the variables cargo sets for the test process.
//!
//! `cargo test` runs each test binary with `CARGO_MANIFEST_DIR`, `CARGO_PKG_*`,
//! `CARGO_CRATE_NAME` and friends set for *this* package. A nested cargo that inherits them
//! hands them on to the build scripts and compilers of every dependency, whose fingerprints
//! then differ from the outer build's: it rebuilds ring, rustls and the crate, and the next
//! `cargo test` rebuilds them back. The user's own settings (`CARGO_HOME`,
//! `CARGO_TARGET_DIR`, `CARGO_PROFILE_*`, `CARGO_BUILD_*`, ...) are kept.

use std::process::Command;

/// Whether cargo sets `name` for a test process (cargo's "Environment variables Cargo sets
/// for crates", plus `RUSTC_WORKSPACE_WRAPPER`, which applies to the outer workspace only).
pub fn set_by_cargo_for_tests(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "CARGO",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "CARGO_MAKEFLAGS",
        "OUT_DIR",
        "RUSTC_WORKSPACE_WRAPPER",
    ];
    const PREFIXES: &[&str] = &["CARGO_PKG_", "CARGO_BIN_EXE_", "CARGO_CFG_"];
    EXACT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Removes from `c` every variable of this process that cargo set for the test
/// ([`set_by_cargo_for_tests`]).
pub fn clear_test_vars(c: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(set_by_cargo_for_tests) {
            c.env_remove(&k);
        }
    }
    c
}
