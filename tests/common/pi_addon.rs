//! The Pi package (`pi/`) as the tests use it: `npm ci` in `pi/` (the pinned Node 22, Pi
//! 1.6.0, napi-rs's CLI, TypeScript) and its native addon, built once per run under
//! `target/pi-native/` and never in `pi/native/`, so a test run leaves a user's own build
//! alone. The tests hand the addon to the package through `SESSION_STATE_PI_ADDON`, the
//! loader's first choice (`pi/src/addon.ts`).
//!
//! The addon is built with the `pi-test` profile (`Cargo.toml`): unoptimized like `dev`,
//! without debug info and stripped, so the install test (`tests/pi_install.rs`) packs the
//! very file the other Pi tests load. It has a `CARGO_TARGET_DIR` of its own so that the
//! nested cargo never waits on the lock of the build that runs these tests.
//!
//! Within a process a `OnceLock` makes one install and one build; across processes a file
//! lock does. There is no silent skip: a missing `npm`, a failed install or build panics
//! with the output and what to install.

use std::collections::hash_map::DefaultHasher;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The environment variable the package's loader takes the addon's absolute path from.
pub const ADDON_ENV: &str = "SESSION_STATE_PI_ADDON";

/// `pi/` in the source tree.
pub fn pkg() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pi")
}

/// `CARGO_TARGET_DIR` if set, else `<manifest>/target`.
pub fn target_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => manifest.join(dir),
        _ => manifest.join("target"),
    }
}

/// `<target>/pi-native/`: the addon's cargo target directory and the install stamp.
pub fn native_dir() -> PathBuf {
    target_dir().join("pi-native")
}

/// The pinned Node 22 that `npm ci` installs in `pi/` (Pi 1.6 and napi-rs's CLI need it).
pub fn node() -> PathBuf {
    pkg().join("node_modules").join(".bin").join("node")
}

/// `PATH` with `pi/node_modules/.bin` (the pinned Node 22, `napi`, `tsc`, `pi`) first.
pub fn path_with_node() -> OsString {
    let mut dirs = vec![pkg().join("node_modules").join(".bin")];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH")
}

/// A command in `pi/` with cargo's own variables removed (a nested cargo must not take the
/// test's package for its own), the pinned Node first on `PATH`, the addon's target dir,
/// and no `SESSION_STATE_PI_ADDON` inherited from the caller.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new(program);
    c.current_dir(pkg());
    super::cargo_env::clear_test_vars(&mut c);
    c.env_remove(ADDON_ENV);
    c.env("PATH", path_with_node());
    c.env("CARGO_TARGET_DIR", native_dir());
    c
}

/// Runs `c` and returns its output; panics with both streams unless it succeeds.
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
        let stdout = String::from_utf8_lossy(&out.stdout);
        // A Node test run's failures first (the rest of its report follows).
        let failures = if stdout.contains("\nnot ok ") || stdout.starts_with("not ok ") {
            failed_node_tests(&stdout) + "\n"
        } else {
            String::new()
        };
        panic!(
            "{what} failed ({})\n{failures}--- stdout ---\n{stdout}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// The failed tests of a TAP report, each with its details (error, stack, location), first
/// in a failure's message: a report of 73 tests is cut in the middle by the places that keep
/// only its head and tail, which is where the failures are.
pub fn failed_node_tests(tap: &str) -> String {
    let mut out = String::new();
    let mut in_failure = false;
    for line in tap.lines() {
        let top = !line.starts_with(' ');
        if line.starts_with("not ok ") {
            in_failure = true;
        } else if top && (line.starts_with("ok ") || line.starts_with("# Subtest")) {
            in_failure = false;
        }
        if in_failure {
            out.push_str(line);
            out.push('\n');
        }
    }
    if out.is_empty() {
        "no test of the report failed".to_owned()
    } else {
        format!("the failed tests:\n{out}")
    }
}

/// `pi/node_modules` installed from `pi/package-lock.json` (`npm ci` once per lockfile).
pub fn npm_ci() {
    prepared();
}

/// The addon, built once per run: `<target>/pi-native/addon/session-state.node`.
pub fn addon() -> &'static Path {
    static ADDON: OnceLock<PathBuf> = OnceLock::new();
    ADDON.get_or_init(|| {
        prepared();
        let _lock = lock();
        let out = native_dir().join("addon");
        let mut build = command(pkg().join("node_modules").join(".bin").join("napi"));
        build.args([
            "build",
            "--profile",
            "pi-test",
            "--manifest-path",
            "native/Cargo.toml",
        ]);
        build.arg("--output-dir").arg(&out);
        run(
            "napi build --profile pi-test (the Pi package's addon)",
            build,
        );
        let file = out.join("session-state.node");
        assert!(
            file.is_file(),
            "napi build made no {} (its output: {})",
            file.display(),
            out.display()
        );
        file
    })
}

/// Serializes installs and builds across test processes; released on drop.
fn lock() -> File {
    let dir = native_dir();
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let path = dir.join(".lock");
    let file = File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    file
}

fn prepared() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let _lock = lock();
        let lockfile = fs::read(pkg().join("package-lock.json")).expect("pi/package-lock.json");
        let mut h = DefaultHasher::new();
        lockfile.hash(&mut h);
        let want = format!("{:016x}\n", h.finish());
        let stamp = native_dir().join("npm-ci.stamp");
        if fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) && node().exists() {
            return;
        }
        let mut c = command("npm");
        c.args(["ci", "--no-audit", "--no-fund"]);
        run("npm ci in pi/", c);
        assert!(
            node().exists(),
            "npm ci did not install the pinned Node 22 at {} (allowScripts in pi/package.json \
             must let the `node` package's install script run)",
            node().display()
        );
        fs::write(&stamp, want).unwrap_or_else(|e| panic!("write {}: {e}", stamp.display()));
    });
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
