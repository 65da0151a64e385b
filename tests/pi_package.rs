//! The Pi package (`pi/`, SPEC §9) in the real Pi 1.6.0 agent loop, from `cargo test`:
//! `npm ci`, `npm run build:debug` (the napi-rs addon, in its own `CARGO_TARGET_DIR` under
//! `target/` so it never waits on this build's lock), `npm run typecheck` (`tsc --strict`
//! over the package's TypeScript) and `node --test` with the pinned
//! Node 22 that `npm ci` installs (`pi/node_modules/.bin/node`). The Node tests drive Pi
//! through its SDK with the `faux` provider and use this build's CLI.
//!
//! There is no silent skip: a missing `npm`, a failed install or build, or a failing Node
//! test fails this test with the output.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn pkg() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pi")
}

fn target_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => manifest.join(dir),
        _ => manifest.join("target"),
    }
}

/// `PATH` with the pinned Node 22 first (napi-rs's CLI needs Node >= 22).
fn path_with_node() -> OsString {
    let bin = pkg().join("node_modules").join(".bin");
    let mut dirs = vec![bin];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH")
}

/// A command in `pi/` with cargo's own variables removed (the nested cargo of `napi
/// build` must not take this test's package for its own).
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.current_dir(pkg());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if (k.starts_with("CARGO_") && k != "CARGO_HOME") || k.starts_with("RUSTC_WORKSPACE") {
            c.env_remove(&k);
        }
    }
    c.env("PATH", path_with_node());
    c.env("CARGO_TARGET_DIR", target_dir().join("pi-native"));
    c
}

fn run(what: &str, mut c: Command) -> Output {
    let out = c.output().unwrap_or_else(|e| {
        if e.kind() == ErrorKind::NotFound {
            panic!(
                "{what}: not found on PATH. The Pi package's tests need Node.js with npm (the \
                 machine's npm installs the pinned Node 22 from pi/package-lock.json)"
            );
        }
        panic!("{what}: cannot run: {e}");
    });
    if !out.status.success() {
        panic!(
            "{what} failed in {} ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            pkg().display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// `npm ci`, unless `node_modules` was installed from this very lockfile.
fn npm_ci() {
    let lock = fs::read(pkg().join("package-lock.json")).expect("pi/package-lock.json");
    let mut h = DefaultHasher::new();
    lock.hash(&mut h);
    let want = format!("{:016x}\n", h.finish());
    let stamp = target_dir().join("pi-native").join("npm-ci.stamp");
    let node = pkg().join("node_modules").join(".bin").join("node");
    if fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) && node.exists() {
        return;
    }
    let mut c = command("npm");
    c.args(["ci", "--no-audit", "--no-fund"]);
    run("npm ci", c);
    assert!(
        node.exists(),
        "npm ci did not install the pinned Node 22 at {} (allowScripts in pi/package.json \
         must let the `node` package's install script run)",
        node.display()
    );
    fs::create_dir_all(stamp.parent().expect("parent")).expect("mkdir");
    fs::write(&stamp, want).expect("stamp");
}

#[test]
fn the_pi_package_passes_its_tests_in_the_real_pi() {
    npm_ci();
    // A debug build: the tests need the addon's behaviour, not its speed, and a release
    // build from scratch costs CI minutes (`npm run build`, the release build, is what
    // users and `pi/bench/` run).
    let mut build = command("npm");
    build.args(["run", "build:debug"]);
    run("npm run build:debug", build);
    assert!(
        pkg().join("native").join("session-state.node").exists(),
        "npm run build:debug made no pi/native/session-state.node"
    );
    let mut typecheck = command("npm");
    typecheck.args(["run", "typecheck"]);
    run("npm run typecheck (tsc --strict)", typecheck);
    let mut test = command(pkg().join("node_modules").join(".bin").join("node"));
    test.args([
        "--test",
        "--test-concurrency=1",
        "test/pi.test.ts",
        "test/example.test.ts",
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
    assert!(count("pass") >= 10, "the Node tests ran: {stdout}");
}
