//! The Pi package (`pi/`) in the real Pi 1.6.0 agent loop, from `cargo test`:
//! `npm ci` and `npm run build:debug` (`tests/common/pi_pkg.rs`, shared with
//! `tests/pi_tui.rs`), `npm run typecheck` (`tsc --strict` over the package's
//! TypeScript) and `node --test` with the pinned Node 22 that `npm ci` installs
//! (`pi/node_modules/.bin/node`). The Node tests drive Pi through the package's testing
//! kit (its SDK, with the `faux` provider) and through the `pi` command, and use this
//! build's CLI.
//!
//! There is no silent skip: a missing `npm`, a failed install or build, or a failing Node
//! test fails this test with the output.

use crate::common::pi_pkg::{command, ensure_built, node, run};

#[test]
fn the_pi_package_passes_its_tests_in_the_real_pi() {
    ensure_built();
    let mut typecheck = command("npm");
    typecheck.args(["run", "typecheck"]);
    run("npm run typecheck (tsc --strict)", typecheck);
    let mut test = command(node());
    test.args([
        "--test",
        "--test-concurrency=1",
        "test/pi.test.ts",
        "test/example.test.ts",
        "test/testing.test.ts",
        "test/print.test.ts",
        "examples/role.test.ts",
    ])
    .env("SESSION_STATE_BIN", env!("CARGO_BIN_EXE_session-state"));
    let out = run("node --test", test);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let count = |key: &str| -> u32 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {key} ")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no '# {key}' line in node's output:\n{stdout}"))
    };
    assert_eq!(count("fail"), 0, "{stdout}");
    assert!(count("pass") >= 18, "the Node tests ran: {stdout}");
}
