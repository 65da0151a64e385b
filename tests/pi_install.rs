//! The Pi package installed the Pi way, from `cargo test`: packed (`npm run pack`'s
//! script, `pi/scripts/pack.mjs`), published to an npm registry on loopback (verdaccio,
//! `tests/common/registry.rs`), installed with `pi install npm:@session-state/pi@<version>`
//! with no cargo or rustc on `PATH`, then the package's own tests (its `npm test`: the real
//! Pi 1.6.0 agent loop) run against the installed copy.
//!
//! Time: nothing is built twice. The pack takes the addon the other Pi tests built
//! (`tests/common/pi_addon.rs`: the `pi-test` profile, stripped) instead of a release build,
//! and the registry, Node and Pi come from the npm installs the other tests make.
//!
//! How the installed copy is tested: a run directory gets copies of `pi/test/` and
//! `pi/examples/` and a package.json whose `test` script is `pi/package.json`'s, and a
//! `node_modules/` where `@session-state/pi` is the installed copy (a link to it) and
//! everything else links to `pi/node_modules/` (Pi, pi-ai, typebox…). The test files import
//! the package by its name (`@session-state/pi`, `/extension`, `/testing`), so there they
//! get the installed copy: its compiled `dist/`, its addon from the platform package. Pi's
//! agent directory (where `pi install` puts the package) lies inside the run directory, so
//! the installed copy finds Pi's packages the way an extension author's project would.
//!
//! There is no silent skip: a missing node/npm, a failed install, pack, publish or
//! `pi install`, or a failing Node test fails this test with the output.

use crate::common::pi_addon;
use crate::common::registry::Registry;
use crate::pi_package::assert_node_tests_passed;
use serde_json::Value;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The platform name the package's loader uses (napi-rs's: `linux-x64-gnu`, …), asked of
/// the package itself so the two never disagree.
fn platform_id() -> String {
    let mut c = pi_addon::command(pi_addon::node());
    c.args([
        "--input-type=module",
        "-e",
        "import { platformId } from './src/addon.ts'; process.stdout.write(platformId());",
    ]);
    String::from_utf8(pi_addon::run("platformId()", c).stdout).expect("UTF-8")
}

/// `PATH` for the installed world: a directory with `node` (the pinned 22) and `npm`, then
/// every directory of this `PATH` that has neither `cargo` nor `rustc`.
fn path_without_rust(bin: &Path) -> OsString {
    fs::create_dir_all(bin).expect("mkdir bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let npm = std::env::split_paths(&path)
        .map(|d| d.join("npm"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("npm is not on PATH: the install test needs Node.js with npm"));
    std::os::unix::fs::symlink(pi_addon::node(), bin.join("node")).expect("link node");
    std::os::unix::fs::symlink(&npm, bin.join("npm")).expect("link npm");
    let mut dirs = vec![bin.to_path_buf()];
    dirs.extend(
        std::env::split_paths(&path)
            .filter(|d| !d.join("cargo").exists() && !d.join("rustc").exists()),
    );
    for d in &dirs {
        for tool in ["cargo", "rustc"] {
            assert!(
                !d.join(tool).exists(),
                "{tool} is still on PATH in {}",
                d.display()
            );
        }
    }
    std::env::join_paths(dirs).expect("PATH")
}

/// A command in the installed world: a scrubbed environment (no cargo variables, no
/// `SESSION_STATE_PI_ADDON`, no user `HOME` or npm config), `PATH` without Rust.
fn installed_world(program: impl AsRef<std::ffi::OsStr>, w: &World) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .env("PATH", &w.path)
        .env("HOME", w.root.join("home"))
        .env("PI_CODING_AGENT_DIR", w.agent())
        .env("PI_TELEMETRY", "0")
        .env("PI_SKIP_VERSION_CHECK", "1")
        .env("npm_config_userconfig", w.root.join("npmrc"))
        .env("npm_config_cache", w.root.join("npm-cache"))
        .env("npm_config_update_notifier", "false");
    if let Some(tmp) = std::env::var_os("TMPDIR") {
        c.env("TMPDIR", tmp);
    }
    c
}

struct World {
    root: PathBuf,
    path: OsString,
}

impl World {
    /// Where the installed copy's tests run.
    fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
    /// Pi's agent directory: inside the run directory (see the module's docs).
    fn agent(&self) -> PathBuf {
        self.run_dir().join("agent")
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
    for e in fs::read_dir(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display())) {
        let e = e.expect("entry");
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().expect("file type").is_dir() {
            copy_dir(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        }
    }
}

/// The test files and examples reach the package by its name, never by a path into the
/// checkout's `src/`: else this run would test the checkout, not the installed copy.
fn assert_imports_by_name(dir: &Path) {
    for e in fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let p = e.expect("entry").path();
        if p.is_dir() {
            assert_imports_by_name(&p);
        } else if p.extension().is_some_and(|x| x == "ts") {
            let text =
                fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            assert!(
                !text.contains("\"../src/") && !text.contains("'../src/"),
                "{} imports the package by a path into ../src/: the package's tests must import \
                 it by name (@session-state/pi, /extension, /testing) so they can run on an \
                 installed copy",
                p.display()
            );
        }
    }
}

#[test]
fn pi_install_from_a_registry_gives_a_package_that_passes_its_tests_without_rust() {
    let addon = pi_addon::addon();
    let pkg = pi_addon::pkg();
    let manifest: Value =
        serde_json::from_slice(&fs::read(pkg.join("package.json")).expect("pi/package.json"))
            .expect("pi/package.json is JSON");
    let (name, version) = (
        manifest["name"].as_str().expect("name"),
        manifest["version"].as_str().expect("version"),
    );
    let base = pi_addon::target_dir().join("pi-install");
    fs::create_dir_all(&base).expect("mkdir target/pi-install");
    let root = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&base)
        .expect("tempdir");
    let w = World {
        root: root.path().to_path_buf(),
        path: path_without_rust(&root.path().join("bin")),
    };
    fs::create_dir_all(w.root.join("home")).expect("mkdir home");

    // 1. Pack: the addon the other Pi tests load, not a second Rust build.
    let packed_dir = w.root.join("packed");
    let mut pack = pi_addon::command(pi_addon::node());
    pack.arg("scripts/pack.mjs")
        .arg("--prebuilt")
        .arg(addon)
        .arg("--out")
        .arg(&packed_dir);
    pi_addon::run("scripts/pack.mjs --prebuilt (npm run pack)", pack);
    let packed: Vec<Value> =
        serde_json::from_slice(&fs::read(packed_dir.join("packed.json")).expect("packed.json"))
            .expect("packed.json is JSON");
    let id = platform_id();
    let platform_pkg = format!("{name}-{id}");
    let names: Vec<&str> = packed.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [platform_pkg.as_str(), name],
        "packed.json: {packed:?}"
    );
    let files = |i: usize| -> Vec<&str> {
        packed[i]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect()
    };
    assert!(
        files(0).contains(&format!("session-state.{id}.node").as_str()),
        "the platform package carries the addon: {:?}",
        files(0)
    );
    for f in [
        "package.json",
        "README.md",
        "CHANGELOG.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "dist/index.js",
        "dist/extension.js",
    ] {
        assert!(
            files(1).contains(&f),
            "the package ships {f}: {:?}",
            files(1)
        );
    }
    for f in files(1) {
        assert!(
            !f.starts_with("src/") && !f.starts_with("native/") && !f.starts_with("test/"),
            "the package ships only what a user runs, not {f}"
        );
    }
    let tarballs: Vec<(String, u64)> = packed
        .iter()
        .map(|p| {
            (
                p["file"].as_str().unwrap().to_owned(),
                p["size"].as_u64().unwrap(),
            )
        })
        .collect();
    for (file, size) in &tarballs {
        assert!(*size <= 15_000_000, "{file} is {size} bytes, over 15 MB");
    }
    eprintln!("pi_install: tarballs {tarballs:?}");

    // 2. Publish to a registry on loopback, platform package first.
    let registry = Registry::start(&w.root.join("registry"));
    registry.write_npmrc(&w.root.join("npmrc"));
    for (file, _) in &tarballs {
        let mut publish = installed_world("npm", &w);
        publish
            .current_dir(&w.root)
            .args(["publish", "--loglevel=error"])
            .arg(packed_dir.join(file));
        pi_addon::run(&format!("npm publish {file} to {}", registry.url), publish);
    }

    // 3. `pi install`, with no Rust toolchain on PATH.
    let run_dir = w.run_dir();
    fs::create_dir_all(w.agent()).expect("mkdir agent");
    let source = format!("npm:{name}@{version}");
    let mut install = installed_world(pi_addon::node(), &w);
    install
        .current_dir(&run_dir)
        .arg(pkg.join("node_modules").join(".bin").join("pi"))
        .args(["install", &source]);
    pi_addon::run(&format!("pi install {source}"), install);
    let settings: Value = serde_json::from_slice(
        &fs::read(w.agent().join("settings.json")).expect("pi install wrote settings.json"),
    )
    .expect("settings.json is JSON");
    assert!(
        settings["packages"].to_string().contains(&source),
        "settings.json lists {source}: {settings}"
    );
    let modules = w.agent().join("npm").join("node_modules");
    let installed = modules.join(name);
    assert!(
        installed.join("dist").join("index.js").is_file(),
        "installed: {}",
        installed.display()
    );
    assert!(!installed.join("native").exists() && !installed.join("src").exists());
    assert!(
        modules
            .join(&platform_pkg)
            .join(format!("session-state.{id}.node"))
            .is_file(),
        "npm installed the optional dependency {platform_pkg}"
    );

    // 4. The package's tests, on the installed copy.
    for dir in ["test", "examples"] {
        if pkg.join(dir).is_dir() {
            assert_imports_by_name(&pkg.join(dir));
            copy_dir(&pkg.join(dir), &run_dir.join(dir));
        }
    }
    let test_script = manifest["scripts"]["test"].as_str().expect("a test script");
    let run_manifest = serde_json::json!({
        "name": "session-state-pi-installed-copy",
        "private": true,
        "type": "module",
        "scripts": { "test": test_script },
    });
    fs::write(run_dir.join("package.json"), run_manifest.to_string()).expect("package.json");
    let nm = run_dir.join("node_modules");
    fs::create_dir_all(nm.join("@session-state")).expect("mkdir node_modules");
    for e in fs::read_dir(pkg.join("node_modules")).expect("pi/node_modules") {
        let e = e.expect("entry");
        let n = e.file_name();
        if n == ".bin" || n == "@session-state" || n.to_string_lossy().starts_with('.') {
            continue;
        }
        std::os::unix::fs::symlink(e.path(), nm.join(&n)).expect("link a dependency");
    }
    std::os::unix::fs::symlink(&installed, nm.join(name)).expect("link the installed copy");

    // The addon that loads is the platform package's (no SESSION_STATE_PI_ADDON here).
    let mut which = installed_world(pi_addon::node(), &w);
    which.current_dir(&run_dir).args([
        "--input-type=module",
        "-e",
        "await import('@session-state/pi'); \
         const r = process.report.getReport(); \
         process.stdout.write(JSON.stringify(r.sharedObjects.filter((f) => f.endsWith('.node'))));",
    ]);
    let loaded =
        String::from_utf8(pi_addon::run("import @session-state/pi", which).stdout).expect("UTF-8");
    let platform_addon = fs::canonicalize(
        modules
            .join(&platform_pkg)
            .join(format!("session-state.{id}.node")),
    )
    .expect("canonical path");
    assert!(
        loaded.contains(platform_addon.to_str().unwrap()),
        "the installed package loads {} (loaded: {loaded})",
        platform_addon.display()
    );

    let mut test = installed_world("npm", &w);
    test.current_dir(&run_dir)
        .args(["test", "--silent"])
        .env("SESSION_STATE_BIN", env!("CARGO_BIN_EXE_session-state"));
    let out = pi_addon::run("npm test on the installed copy", test);
    assert_node_tests_passed(&String::from_utf8_lossy(&out.stdout), 10);
    drop(registry);
}
