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
use crate::pi_package::{NODE_TESTS, assert_node_tests_passed};
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

/// `PATH` for the installed world: a directory with `node` (`node`: the pinned 22, or
/// another build of it) and `npm`, then every directory of this `PATH` that has neither
/// `cargo` nor `rustc`.
pub(crate) fn path_without_rust(bin: &Path, node: &Path) -> OsString {
    fs::create_dir_all(bin).expect("mkdir bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let npm = std::env::split_paths(&path)
        .map(|d| d.join("npm"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("npm is not on PATH: the install test needs Node.js with npm"));
    std::os::unix::fs::symlink(node, bin.join("node")).expect("link node");
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
/// `SESSION_STATE_PI_ADDON`, no user `HOME` or npm config), `PATH` without Rust, and the
/// world's own variables.
pub(crate) fn installed_world(program: impl AsRef<std::ffi::OsStr>, w: &World) -> Command {
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
    c.envs(w.env.iter().map(|(k, v)| (k, v)));
    c
}

/// A machine with the package installed and no Rust: a folder, its `PATH`, its `node`.
pub(crate) struct World {
    pub root: PathBuf,
    pub path: OsString,
    /// The `node` first on `PATH` (what `npm` and `pi` run on).
    pub node: PathBuf,
    /// Variables of this world's own (for example `QEMU_LD_PREFIX`).
    pub env: Vec<(String, OsString)>,
}

impl World {
    /// A world in `root` whose `node` is `node`.
    pub fn new(root: &Path, node: &Path, env: Vec<(String, OsString)>) -> World {
        fs::create_dir_all(root.join("home")).expect("mkdir home");
        World {
            root: root.to_path_buf(),
            path: path_without_rust(&root.join("bin"), node),
            node: node.to_path_buf(),
            env,
        }
    }
    /// Where the installed copy's tests run.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
    /// Pi's agent directory: inside the run directory (see the module's docs).
    pub fn agent(&self) -> PathBuf {
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
    let (name, _) = name_and_version();
    let name = name.as_str();
    let base = pi_addon::target_dir().join("pi-install");
    fs::create_dir_all(&base).expect("mkdir target/pi-install");
    let root = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&base)
        .expect("tempdir");
    let w = World::new(root.path(), &pi_addon::node(), Vec::new());

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

    // 2.–4. Publish, `pi install`, and the package's tests on the installed copy.
    let registry = publish(&w, &packed_dir, tarballs.iter().map(|(f, _)| f.as_str()));
    let installed = pi_install(&w, &id);
    let run_dir = prepare_run_dir(&w, &installed);
    let mut test = installed_world("npm", &w);
    test.current_dir(&run_dir)
        .args(["test", "--silent"])
        .env("SESSION_STATE_BIN", env!("CARGO_BIN_EXE_session-state"));
    let out = pi_addon::run("npm test on the installed copy", test);
    assert_node_tests_passed(&String::from_utf8_lossy(&out.stdout), NODE_TESTS);
    drop(registry);
}

/// The package's name and version (`pi/package.json`).
pub(crate) fn name_and_version() -> (String, String) {
    let manifest: Value = serde_json::from_slice(
        &fs::read(pi_addon::pkg().join("package.json")).expect("pi/package.json"),
    )
    .expect("pi/package.json is JSON");
    (
        manifest["name"].as_str().expect("name").to_owned(),
        manifest["version"].as_str().expect("version").to_owned(),
    )
}

/// Starts a registry on loopback in `w` and publishes `tarballs` (files of `packed_dir`, in
/// the order given: platform packages first) with `w`'s npm. The registry lives as long
/// as what is returned.
pub(crate) fn publish<'a>(
    w: &World,
    packed_dir: &Path,
    tarballs: impl IntoIterator<Item = &'a str>,
) -> Registry {
    let registry = Registry::start(&w.root.join("registry"));
    registry.write_npmrc(&w.root.join("npmrc"));
    for file in tarballs {
        let mut publish = installed_world("npm", w);
        publish
            .current_dir(&w.root)
            .args(["publish", "--loglevel=error"])
            .arg(packed_dir.join(file));
        pi_addon::run(&format!("npm publish {file} to {}", registry.url), publish);
    }
    registry
}

/// `pi install npm:<name>@<version>` in `w` (its `node`, no Rust on `PATH`); checks that
/// npm installed the platform package `id` and no other, and returns the installed copy.
pub(crate) fn pi_install(w: &World, id: &str) -> PathBuf {
    let pkg = pi_addon::pkg();
    let (name, version) = name_and_version();
    let platform_pkg = format!("{name}-{id}");
    let run_dir = w.run_dir();
    fs::create_dir_all(w.agent()).expect("mkdir agent");
    let source = format!("npm:{name}@{version}");
    let mut install = installed_world(&w.node, w);
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
    let installed = modules.join(&name);
    assert!(
        installed.join("dist").join("index.js").is_file(),
        "installed: {}",
        installed.display()
    );
    assert!(!installed.join("native").exists() && !installed.join("src").exists());
    let addon = modules
        .join(&platform_pkg)
        .join(format!("session-state.{id}.node"));
    assert!(
        addon.is_file(),
        "npm installed the optional dependency {platform_pkg}"
    );
    let scope = modules.join(name.split('/').next().expect("a scope"));
    let platform_packages: Vec<String> = fs::read_dir(&scope)
        .expect("the scope's folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pi-"))
        .collect();
    assert_eq!(
        platform_packages,
        [format!("pi-{id}")],
        "npm installs this machine's platform package and no other"
    );

    // The addon that loads is the platform package's (no SESSION_STATE_PI_ADDON here).
    let mut which = installed_world(&w.node, w);
    which.current_dir(&run_dir).args([
        "--input-type=module",
        "-e",
        "const { platformId } = await import('@session-state/pi/addon'); \
         await import('@session-state/pi'); \
         const r = process.report.getReport(); \
         process.stdout.write(JSON.stringify({ id: platformId(), arch: process.arch, \
           loaded: r.sharedObjects.filter((f) => f.endsWith('.node')) }));",
    ]);
    prepare_modules(w, &installed);
    let out: Value =
        serde_json::from_slice(&pi_addon::run("import @session-state/pi", which).stdout)
            .expect("JSON");
    assert_eq!(out["id"], id, "the loader's platform: {out}");
    let platform_addon = fs::canonicalize(&addon).expect("canonical path");
    assert!(
        out["loaded"]
            .as_array()
            .expect("loaded")
            .iter()
            .any(|f| f.as_str() == platform_addon.to_str()),
        "the installed package loads {} (loaded: {out})",
        platform_addon.display()
    );
    installed
}

/// `node_modules/` of the run folder: `@session-state/pi` is the installed copy (a link to
/// it), everything else links to `pi/node_modules/` (Pi, pi-ai, typebox…).
fn prepare_modules(w: &World, installed: &Path) {
    let pkg = pi_addon::pkg();
    let (name, _) = name_and_version();
    let nm = w.run_dir().join("node_modules");
    if nm.exists() {
        return;
    }
    fs::create_dir_all(nm.join("@session-state")).expect("mkdir node_modules");
    for e in fs::read_dir(pkg.join("node_modules")).expect("pi/node_modules") {
        let e = e.expect("entry");
        let n = e.file_name();
        if n == ".bin" || n == "@session-state" || n.to_string_lossy().starts_with('.') {
            continue;
        }
        std::os::unix::fs::symlink(e.path(), nm.join(&n)).expect("link a dependency");
    }
    std::os::unix::fs::symlink(installed, nm.join(&name)).expect("link the installed copy");
}

/// The run folder for the package's own tests on the installed copy: copies of `pi/test/`
/// and `pi/examples/`, a package.json whose `test` script is `pi/package.json`'s, and the
/// `node_modules/` of [`prepare_modules`]. Returns it.
pub(crate) fn prepare_run_dir(w: &World, installed: &Path) -> PathBuf {
    let pkg = pi_addon::pkg();
    let run_dir = w.run_dir();
    for dir in ["test", "examples"] {
        if pkg.join(dir).is_dir() {
            assert_imports_by_name(&pkg.join(dir));
            copy_dir(&pkg.join(dir), &run_dir.join(dir));
        }
    }
    let manifest: Value =
        serde_json::from_slice(&fs::read(pkg.join("package.json")).expect("pi/package.json"))
            .expect("pi/package.json is JSON");
    let test_script = manifest["scripts"]["test"].as_str().expect("a test script");
    let run_manifest = serde_json::json!({
        "name": "session-state-pi-installed-copy",
        "private": true,
        "type": "module",
        "scripts": { "test": test_script },
    });
    fs::write(run_dir.join("package.json"), run_manifest.to_string()).expect("package.json");
    prepare_modules(w, installed);
    run_dir
}
