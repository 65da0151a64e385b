//! The Pi package (`pi/`) in the real Pi 1.6.0 agent loop, from `cargo test`: `npm ci`,
//! the napi-rs addon built under `target/pi-native/` (`tests/common/pi_addon.rs`; never in
//! `pi/native/`, where a user's own build lives), `npm run typecheck` (`tsc --strict` over
//! the package's TypeScript) and the package's `npm test` with the pinned Node 22 that
//! `npm ci` installs. The Node tests drive Pi through the package's testing kit (its SDK,
//! with the `faux` provider) and through the `pi` command,
//! load the addon named by `SESSION_STATE_PI_ADDON` and use this build's CLI.
//!
//! There is no silent skip: a missing `npm`, a failed install or build, or a failing Node
//! test fails this test with the output.

use crate::common::pi_addon::{self, ADDON_ENV, failed_node_tests};
use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::time::SystemTime;

/// The tests of the package's `npm test` list: every run of it, from the checkout or from
/// an installed copy (`pi_install`, `pi_arm64`), passes at least this many, so a test
/// that stops running fails the run.
pub const NODE_TESTS: u32 = 74;

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
    let failed = failed_node_tests(stdout);
    assert_eq!(
        count("fail"),
        0,
        "{failed}\n--- all of node's output:\n{stdout}"
    );
    eprintln!("node: {} tests passed", count("pass"));
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
    // Every test of `npm test`'s list: one that stops running fails here.
    assert_node_tests_passed(&String::from_utf8_lossy(&out.stdout), NODE_TESTS);
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

/// The loader's error when no addon matches, in the shapes a user meets: a checkout with
/// no build, a published package whose platform package npm skipped, a platform with no
/// prebuilt addon, a platform package of another version or whose package.json does not
/// parse, a relative `SESSION_STATE_PI_ADDON` or one naming a file that is not an addon.
/// Each names the platform (or the variable) and the fix.
#[test]
fn the_loader_names_the_platform_and_the_fix_when_no_addon_loads() {
    pi_addon::npm_ci();
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = dir.path().join("pkg");
    fs::create_dir_all(pkg.join("src")).expect("mkdir");
    fs::copy(
        pi_addon::pkg().join("src").join("addon.ts"),
        pkg.join("src").join("addon.ts"),
    )
    .expect("copy addon.ts");
    let load = |manifest: serde_json::Value, env: Option<&str>| -> String {
        fs::write(pkg.join("package.json"), manifest.to_string()).expect("package.json");
        let mut c = pi_addon::command(pi_addon::node());
        c.current_dir(&pkg).args([
            "--input-type=module",
            "-e",
            "import { loadAddon, platformId } from './src/addon.ts'; \
             try { loadAddon(); console.log('loaded'); } \
             catch (e) { console.log(platformId() + '\\n' + e.message); }",
        ]);
        if let Some(v) = env {
            c.env(ADDON_ENV, v);
        }
        String::from_utf8(pi_addon::run("loadAddon()", c).stdout).expect("UTF-8")
    };
    let base = serde_json::json!({
        "name": "@session-state/pi", "version": "0.1.0", "type": "module",
        "napi": { "binaryName": "session-state" },
    });

    let out = load(base.clone(), None);
    let (id, msg) = out.split_once('\n').expect("two lines");
    assert!(
        msg.contains(&format!("no native addon for this platform, {id}"))
            && msg.contains("npm ci && npm run build")
            && msg.contains(ADDON_ENV),
        "a checkout with no build: {msg}"
    );

    let mut published = base.clone();
    published["optionalDependencies"] = serde_json::json!({ format!("@session-state/pi-{id}"): "0.1.0", "@session-state/pi-sunos-x64": "0.1.0" });
    let msg = load(published, None);
    assert!(
        msg.contains(&format!(
            "npm skipped the optional dependency @session-state/pi-{id}"
        )) && msg.contains("pi install npm:@session-state/pi@0.1.0"),
        "a published package whose platform package is missing: {msg}"
    );

    let mut elsewhere = base.clone();
    elsewhere["optionalDependencies"] =
        serde_json::json!({ "@session-state/pi-sunos-x64": "0.1.0" });
    let msg = load(elsewhere, None);
    assert!(
        msg.contains(&format!(
            "there is no prebuilt addon for {id} (prebuilt: sunos-x64)"
        )) && msg.contains("npm ci && npm run build"),
        "a platform with no prebuilt addon: {msg}"
    );

    let other = dir
        .path()
        .join("node_modules")
        .join("@session-state")
        .join(format!("pi-{id}"));
    fs::create_dir_all(&other).expect("mkdir");
    fs::write(
        other.join("package.json"),
        r#"{"name":"x","version":"0.0.9"}"#,
    )
    .expect("write");
    let msg = load(base.clone(), None);
    assert!(
        msg.contains(&format!(
            "@session-state/pi-{id} is version 0.0.9, but @session-state/pi is 0.1.0"
        )),
        "a platform package of another version: {msg}"
    );

    let msg = load(base.clone(), Some("relative/session-state.node"));
    assert!(
        msg.contains("SESSION_STATE_PI_ADDON must be the absolute path"),
        "a relative {ADDON_ENV}: {msg}"
    );

    // SESSION_STATE_PI_ADDON naming a file that is not an addon: a JavaScript module (which
    // `require` would load as one), and a text file named like an addon. Each message names
    // the platform, the file tried and the fix, never a failure further down.
    let js = dir.path().join("not-an-addon.js");
    fs::write(&js, "module.exports = { hello: 1 };\n").expect("write");
    let fake = dir.path().join("session-state.node");
    fs::write(&fake, "not an addon\n").expect("write");
    for (file, what) in [
        (&js, "an addon is a .node file"),
        (&fake, "cannot load the addon"),
    ] {
        let out = load(base.clone(), Some(file.to_str().expect("UTF-8")));
        let (id, msg) = out.split_once('\n').expect("two lines");
        assert!(
            msg.contains(what)
                && msg.contains(id)
                && msg.contains(file.to_str().unwrap())
                && msg.contains("Fix: set SESSION_STATE_PI_ADDON to a session-state.node")
                && msg.contains("npm run build")
                && !msg.contains("is not a function"),
            "{ADDON_ENV} naming {}: {msg}",
            file.display()
        );
    }

    // A platform package whose package.json does not parse: the platform, what was tried
    // and the fix, not Node's raw "Invalid package config".
    fs::write(other.join("package.json"), "{\"name\": ").expect("write");
    let out = load(base, None);
    let (id, msg) = out.split_once('\n').expect("two lines");
    assert!(
        msg.contains(&format!(
            "the addon package @session-state/pi-{id} for this platform, {id}, is damaged: its package.json does not parse"
        )) && msg.contains("Tried: ")
            && msg.contains("native/session-state.node: not built")
            && msg.contains("Fix: reinstall @session-state/pi")
            && msg.contains("pi install npm:@session-state/pi@0.1.0"),
        "a platform package whose package.json does not parse: {msg}"
    );
}

/// `npm run typecheck` covers every TypeScript file of the package: the sources, the
/// examples, the tests and the benchmarks. A file left out of its list would go
/// unchecked, and `node` strips types without checking them.
#[test]
fn the_typecheck_lists_every_typescript_file_of_the_package() {
    let pkg = Path::new(env!("CARGO_MANIFEST_DIR")).join("pi");
    let manifest: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(pkg.join("package.json")).expect("package.json"))
            .expect("package.json is JSON");
    let script = manifest["scripts"]["typecheck"]
        .as_str()
        .expect("a typecheck script");
    let listed: std::collections::BTreeSet<&str> = script.split_whitespace().collect();
    let mut missing = Vec::new();
    for dir in [
        "src",
        "test",
        "examples",
        "examples/plan-mode",
        "examples/fixtures",
        "bench",
    ] {
        let Ok(entries) = fs::read_dir(pkg.join(dir)) else {
            continue;
        };
        for e in entries {
            let name = e
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            let rel = format!("{dir}/{name}");
            // The sources are checked through the entry points that import them.
            if name.ends_with(".ts")
                && !name.ends_with(".d.ts")
                && !listed.contains(rel.as_str())
                && dir != "src"
            {
                missing.push(rel);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "pi/package.json's typecheck does not list: {missing:?}"
    );
}
