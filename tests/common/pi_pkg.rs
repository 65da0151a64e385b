//! The Pi package (`pi/`) made ready for tests, once per test process: `npm ci` (the
//! pinned Pi 1.6.0, pi-ai's faux provider, the pinned Node 22 at
//! `pi/node_modules/.bin/node`), then `npm run build:debug` (the napi-rs addon, built in
//! its own `CARGO_TARGET_DIR` under `target/` so it never waits on this build's lock).
//! `tests/pi_package.rs` and `tests/pi_tui.rs` share it, so the addon is built once.
//!
//! There is no silent skip: a missing `npm`, a failed install or build panics with the
//! output.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// `pi/` in the source tree.
pub fn pkg() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pi")
}

/// This build's target folder (`CARGO_TARGET_DIR` if set, else `<manifest>/target`).
pub fn target_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => manifest.join(dir),
        _ => manifest.join("target"),
    }
}

/// The pinned Node 22 that `npm ci` installs.
pub fn node() -> PathBuf {
    pkg().join("node_modules").join(".bin").join("node")
}

/// Pi's `pi` command (its package.json `bin`), run with [`node`].
pub fn pi_cli() -> PathBuf {
    pkg()
        .join("node_modules")
        .join("@earendil-works")
        .join("pi-coding-agent")
        .join("dist")
        .join("bundle")
        .join("cli.js")
}

/// `PATH` with the pinned Node 22 first (napi-rs's CLI needs Node >= 22).
pub fn path_with_node() -> OsString {
    let bin = pkg().join("node_modules").join(".bin");
    let mut dirs = vec![bin];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH")
}

/// A command in `pi/` with cargo's own variables removed (the nested cargo of `napi
/// build` must not take this test's package for its own).
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
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

/// Runs `c`; panics with its output unless it succeeds.
pub fn run(what: &str, mut c: Command) -> Output {
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
    if fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) && node().exists() {
        return;
    }
    let mut c = command("npm");
    c.args(["ci", "--no-audit", "--no-fund"]);
    run("npm ci", c);
    assert!(
        node().exists(),
        "npm ci did not install the pinned Node 22 at {} (allowScripts in pi/package.json \
         must let the `node` package's install script run)",
        node().display()
    );
    fs::create_dir_all(stamp.parent().expect("parent")).expect("mkdir");
    fs::write(&stamp, want).expect("stamp");
}

/// `npm ci` and the addon's debug build, once per process (later callers wait for the
/// first). A debug build: the tests need the addon's behaviour, not its speed (`npm run
/// build`, the release build, is what users and `pi/bench/` run).
pub fn ensure_built() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        npm_ci();
        let mut build = command("npm");
        build.args(["run", "build:debug"]);
        run("npm run build:debug", build);
        assert!(
            pkg().join("native").join("session-state.node").exists(),
            "npm run build:debug made no pi/native/session-state.node"
        );
    });
}
