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

    // 2. The registry on loopback, the publish and `pi install`: pi/RELEASING.md's blocks,
    //    as written there.
    let docs = Docs::new(&w);
    let registry = docs.start_registry();
    docs.publish_and_pi_install(&registry, &packed_dir);
    let installed = check_pi_installed(&w, &id);

    // 3. The package's own tests on the installed copy.
    let run_dir = prepare_run_dir(&w, &installed);
    let mut test = installed_world("npm", &w);
    test.current_dir(&run_dir)
        .args(["test", "--silent"])
        .env("SESSION_STATE_BIN", env!("CARGO_BIN_EXE_session-state"));
    let out = pi_addon::run("npm test on the installed copy", test);
    assert_node_tests_passed(&String::from_utf8_lossy(&out.stdout), NODE_TESTS);

    // 4. An extension's own folder: README.md's install (pi/README.md shows the same
    //    block), its ten-line extension and its test, on the pinned Node 22.
    let ext = docs.extension_folder("my-extension", &w, &registry);
    docs.run_readme_extension_test(&ext, &w);

    // 5. The same install on Node 20, below Pi's floor: npm names the floor at install
    //    time, installs the addon all the same, and loading the package gives no advice that
    //    does not help.
    let old = World::new(&w.root.join("node20"), &node20(), Vec::new());
    let ext20 = docs.extension_folder("my-extension-node20", &old, &registry);
    let addon20 = ext20
        .join("node_modules")
        .join(format!("{name}-{id}"))
        .join(format!("session-state.{id}.node"));
    assert!(
        addon20.is_file(),
        "on Node 20, npm installed the platform package too: {}",
        addon20.display()
    );
    let mut load = installed_world(&old.node, &old);
    load.current_dir(&ext20).args([
        "--input-type=module",
        "-e",
        "try { const m = await import('@session-state/pi'); \
           console.log('loaded ' + typeof m.openSessionState); } \
         catch (e) { console.log('refused ' + e.message); }",
    ]);
    let said = String::from_utf8(pi_addon::run("import @session-state/pi on Node 20", load).stdout)
        .expect("UTF-8");
    eprintln!("pi_install: on Node 20, importing the package: {said}");
    assert!(
        said.starts_with("loaded function")
            || (said.starts_with("refused ")
                && said.contains("22.19")
                && !said.contains("optional")),
        "on Node 20 the package loads, or says which Node it needs: {said}"
    );

    // 6. `pi install ./pi` from a checkout (pi/README.md's block).
    docs.pi_install_checkout(&w);
    drop(registry);
}

/// Node 20 (npm's `node@20`, pinned by `tests/node20/package-lock.json`), installed with
/// `npm ci` into `<target>/node20/` once per lockfile; returns its `node`.
fn node20() -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("node20");
    let dir = pi_addon::target_dir().join("node20");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let lock_path = dir.join(".install.lock");
    let lock = fs::File::create(&lock_path).expect("the install lock");
    lock.lock().expect("lock the install lock");
    let mut stamp_text = Vec::new();
    for name in ["package.json", "package-lock.json"] {
        let bytes = fs::read(src.join(name)).unwrap_or_else(|e| panic!("tests/node20/{name}: {e}"));
        stamp_text.extend_from_slice(&bytes);
        fs::write(dir.join(name), &bytes).unwrap_or_else(|e| panic!("write {name}: {e}"));
    }
    let stamp = dir.join(".npm-ci.stamp");
    let node = dir.join("node_modules").join(".bin").join("node");
    if fs::read(&stamp).ok().as_deref() != Some(stamp_text.as_slice()) || !node.exists() {
        let _ = fs::remove_file(&stamp);
        let mut c = Command::new("npm");
        c.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir);
        pi_addon::run(
            "npm ci in target/node20 (node@20, from tests/node20/package-lock.json)",
            c,
        );
        fs::write(&stamp, &stamp_text).expect("write the stamp");
    }
    let version = Command::new(&node)
        .arg("--version")
        .output()
        .expect("node20 --version");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    assert!(
        version.starts_with("v20."),
        "{} is {version}, not Node 20",
        node.display()
    );
    node
}

/// A fenced block of a doc, found by the HTML comment `<!-- install-test: NAME -->` on the
/// line before its opening fence: the commands the docs give, as written there.
pub(crate) fn doc_block(doc: &str, name: &str) -> String {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc))
        .unwrap_or_else(|e| panic!("{doc}: {e}"));
    let marker = format!("<!-- install-test: {name} -->\n");
    let mut found = text.match_indices(&marker);
    let (at, _) = found
        .next()
        .unwrap_or_else(|| panic!("{doc} has no block marked {marker:?}"));
    assert!(found.next().is_none(), "{doc} marks two blocks {marker:?}");
    let rest = &text[at + marker.len()..];
    assert!(
        rest.starts_with("```"),
        "{doc}: {marker:?} is not right before a fenced block"
    );
    let body = &rest[rest.find('\n').expect("a fence line") + 1..];
    body[..body
        .find("\n```")
        .unwrap_or_else(|| panic!("{doc}: {name}: the block does not end"))]
        .to_owned()
        + "\n"
}

/// `text` with each `(from, to)` replaced; each `from` must occur, so a doc that drops a
/// placeholder fails here rather than run with the doc's own value.
fn substitute(text: &str, subs: &[(&str, &str)]) -> String {
    let mut out = text.to_owned();
    for (from, to) in subs {
        assert!(out.contains(from), "the block has no {from:?}:\n{text}");
        out = out.replace(from, to);
    }
    out
}

/// The docs' blocks, run in a world: a scratch checkout (`pi/` the real one, `tests/registry/`
/// a copy of the repository's), `pi` on `PATH` (the checkout's, on the world's Node), and npm
/// as this machine configures it (its user configuration, read only, and its cache), so
/// what the blocks fetch from the registry npm normally uses comes as it would for a user.
struct Docs {
    checkout: PathBuf,
    /// This machine's npm user configuration (its registry, its CA file, …).
    userconfig: String,
    cache: String,
}

/// The variables a user's npm and Node take the network's proxy and certificates from,
/// passed through to the blocks that fetch from the registry npm normally uses.
const NETWORK_ENV: [&str; 9] = [
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// A registry the docs' block started: the block's process group, killed on drop.
struct DocsRegistry {
    child: std::process::Child,
    port: u16,
}

impl Drop for DocsRegistry {
    fn drop(&mut self) {
        // The block is a shell running npm, then node: the whole group is this test's
        // (`--`: procps' kill would take `-<pgid>` for an option).
        // verdaccio handles SIGTERM by closing gracefully, which can wait on open
        // connections: SIGKILL ends it at once, as the drop of `Registry` does.
        let _ = Command::new("kill")
            .args(["-KILL", "--"])
            .arg(format!("-{}", self.child.id()))
            .status();
        let _ = self.child.wait();
    }
}

impl Docs {
    fn new(w: &World) -> Docs {
        let checkout = w.root.join("checkout");
        let registry_src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join("registry");
        let registry_dir = checkout.join("tests").join("registry");
        fs::create_dir_all(&registry_dir).expect("mkdir checkout/tests/registry");
        for f in ["package.json", "package-lock.json", "serve.mjs"] {
            fs::copy(registry_src.join(f), registry_dir.join(f))
                .unwrap_or_else(|e| panic!("copy tests/registry/{f}: {e}"));
        }
        std::os::unix::fs::symlink(pi_addon::pkg(), checkout.join("pi")).expect("link pi");
        std::os::unix::fs::symlink(
            pi_addon::pkg().join("node_modules").join(".bin").join("pi"),
            w.root.join("bin").join("pi"),
        )
        .expect("link pi onto PATH");
        let ask = |key: &str| -> String {
            let mut c = pi_addon::command("npm");
            c.args(["config", "get", key]);
            String::from_utf8(pi_addon::run(&format!("npm config get {key}"), c).stdout)
                .expect("UTF-8")
                .trim()
                .to_owned()
        };
        Docs {
            checkout,
            userconfig: ask("userconfig"),
            cache: ask("cache"),
        }
    }

    /// A `bash` running `script` in the world `w`, from `dir`, with this machine's npm
    /// configuration and cache, and its network variables.
    fn bash(&self, w: &World, dir: &Path, script: &str) -> Command {
        let mut c = installed_world("bash", w);
        c.current_dir(dir)
            .arg("-euo")
            .arg("pipefail")
            .arg("-c")
            .arg(script)
            .env("npm_config_userconfig", &self.userconfig)
            .env("npm_config_cache", &self.cache);
        for name in NETWORK_ENV {
            if let Some(v) = std::env::var_os(name) {
                c.env(name, v);
            }
        }
        c
    }

    /// pi/RELEASING.md's `start-registry` block, with a storage directory of the world's
    /// for `/tmp/registry` and a port the system picks for `4873`; waits for the
    /// `{"port":N}` line it prints once it accepts connections.
    fn start_registry(&self) -> DocsRegistry {
        use std::io::BufRead as _;
        use std::os::unix::process::CommandExt as _;
        let w_root = self.checkout.parent().expect("the world").to_path_buf();
        let storage = w_root.join("registry");
        let block = doc_block("pi/RELEASING.md", "start-registry");
        let script = substitute(
            &block,
            &[
                ("/tmp/registry", storage.to_str().expect("UTF-8")),
                (" 4873", " 0"),
            ],
        );
        let w = world_at(&w_root);
        let mut c = self.bash(&w, &self.checkout, &script);
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .process_group(0);
        let mut child = c.spawn().expect("start pi/RELEASING.md's registry block");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let port = serde_json::from_str::<Value>(&line)
                    .ok()
                    .and_then(|v| v["port"].as_u64());
                if let Some(p) = port {
                    let _ = tx.send(p);
                }
            }
        });
        let port = match rx.recv_timeout(std::time::Duration::from_secs(300)) {
            Ok(p) => u16::try_from(p).expect("a port"),
            Err(e) => {
                let _ = Command::new("kill")
                    .args(["-KILL", "--"])
                    .arg(format!("-{}", child.id()))
                    .status();
                let status = child.wait();
                panic!(
                    "pi/RELEASING.md's registry block printed no {{\"port\":N}} ({e}; exit {status:?}):\n{script}"
                );
            }
        };
        DocsRegistry { child, port }
    }

    /// pi/RELEASING.md's `publish` block: its npm configuration at a path of the world's,
    /// the registry's port, and the tarballs the test packed for `pi/packed`.
    fn publish_and_pi_install(&self, registry: &DocsRegistry, packed: &Path) {
        let w_root = self.checkout.parent().expect("the world");
        let block = doc_block("pi/RELEASING.md", "publish");
        let port = registry.port.to_string();
        let npmrc = w_root.join("docs-npmrc");
        let script = substitute(
            &block,
            &[
                ("/tmp/npmrc", npmrc.to_str().expect("UTF-8")),
                ("4873", &port),
                ("pi/packed", packed.to_str().expect("UTF-8")),
            ],
        );
        let w = world_at(w_root);
        fs::create_dir_all(w.agent()).expect("mkdir agent");
        let c = self.bash(&w, &self.checkout, &script);
        pi_addon::run("pi/RELEASING.md's publish block", c);
    }

    /// README.md's `extension` block (pi/README.md's is the same) in a new folder `name` of
    /// the world `w` (its Node): the package from the registry on loopback, Pi's packages
    /// from the normal one. On a Node below Pi's floor npm names the floor. Returns the
    /// folder.
    fn extension_folder(&self, name: &str, w: &World, registry: &DocsRegistry) -> PathBuf {
        let block = doc_block("README.md", "extension");
        assert_eq!(
            block,
            doc_block("pi/README.md", "extension"),
            "README.md and pi/README.md show the same install of the package in an extension"
        );
        let port = registry.port.to_string();
        let script = substitute(&block, &[("4873", &port)]);
        let dir = w.root.join(name);
        fs::create_dir_all(&dir).expect("mkdir the extension's folder");
        let out = pi_addon::run(
            &format!("README.md's extension block in {name}"),
            self.bash(w, &dir, &script),
        );
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let node = Command::new(&w.node)
            .arg("--version")
            .output()
            .expect("node --version");
        let old = String::from_utf8_lossy(&node.stdout).starts_with("v20.");
        if old {
            let (pkg_name, version) = name_and_version();
            assert!(
                said.lines()
                    .any(|l| l.contains("EBADENGINE")
                        && l.contains(&format!("'{pkg_name}@{version}'")))
                    && said.contains("node: '>=22.19.0'"),
                "on Node 20 npm names the package's floor, Node >= 22.19, at install time:\n{said}"
            );
            eprintln!("pi_install: npm on Node 20 says:\n{said}");
        }
        dir
    }

    /// README.md's ten-line extension and its test, written into the extension's folder
    /// as the README shows them, and its `run-test` block run there.
    fn run_readme_extension_test(&self, ext: &Path, w: &World) {
        for file in ["role.ts", "role.test.ts"] {
            fs::write(ext.join(file), doc_block("README.md", file))
                .unwrap_or_else(|e| panic!("write {file}: {e}"));
        }
        let script = doc_block("README.md", "run-test");
        let out = pi_addon::run(
            "README.md's run-test block (node --test role.test.ts)",
            self.bash(w, ext, &script),
        );
        assert_node_tests_passed(&String::from_utf8_lossy(&out.stdout), 1);
    }

    /// pi/README.md's checkout blocks: the build (`npm ci && npm run build` in `pi/`, which
    /// the tests stand in for with the addon they built: the same `napi build` of
    /// `pi/native`, into `target/`), then `pi install ./pi` from the checkout's root, as
    /// written; then `pi -p /state:status` answers through the package that Pi loads from
    /// its settings.
    fn pi_install_checkout(&self, w: &World) {
        let build = doc_block("pi/README.md", "checkout-build");
        assert!(
            build.starts_with("cd pi && npm ci && npm run build "),
            "pi/README.md's build block: {build}"
        );
        let manifest: Value = serde_json::from_slice(
            &fs::read(pi_addon::pkg().join("package.json")).expect("pi/package.json"),
        )
        .expect("JSON");
        assert_eq!(
            manifest["scripts"]["build"],
            "napi build --manifest-path native/Cargo.toml --output-dir native --release",
            "the build the tests stand in for"
        );
        let agent = w.root.join("checkout-agent");
        fs::create_dir_all(&agent).expect("mkdir");
        let script = doc_block("pi/README.md", "checkout");
        let mut c = self.bash(w, &self.checkout, &script);
        c.env("PI_CODING_AGENT_DIR", &agent);
        pi_addon::run("pi/README.md's checkout block (pi install ./pi)", c);
        let settings = fs::read_to_string(agent.join("settings.json")).expect("settings.json");
        assert!(
            settings.contains("pi"),
            "settings.json lists the checkout: {settings}"
        );
        let mut status = self.bash(w, &self.checkout, "pi --offline -p /state:status");
        status
            .env("PI_CODING_AGENT_DIR", &agent)
            .env(pi_addon::ADDON_ENV, pi_addon::addon());
        let out = pi_addon::run("pi -p /state:status after pi install ./pi", status);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("session   ") && text.contains("\ndatabase  "),
            "the package installed from the checkout answers /state:status: {text}"
        );
    }
}

/// The world rooted at `root` (made by [`World::new`]): its `PATH`, its pinned Node.
fn world_at(root: &Path) -> World {
    World {
        root: root.to_path_buf(),
        path: world_path(root),
        node: pi_addon::node(),
        env: Vec::new(),
    }
}

/// The `PATH` [`World::new`] made for `root`: its `bin/`, then this `PATH` without Rust.
fn world_path(root: &Path) -> OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![root.join("bin")];
    dirs.extend(
        std::env::split_paths(&path)
            .filter(|d| !d.join("cargo").exists() && !d.join("rustc").exists()),
    );
    std::env::join_paths(dirs).expect("PATH")
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
    let run_dir = w.run_dir();
    fs::create_dir_all(w.agent()).expect("mkdir agent");
    let source = format!("npm:{name}@{version}");
    let mut install = installed_world(&w.node, w);
    install
        .current_dir(&run_dir)
        .arg(pkg.join("node_modules").join(".bin").join("pi"))
        .args(["install", &source]);
    pi_addon::run(&format!("pi install {source}"), install);
    check_pi_installed(w, id)
}

/// What `pi install npm:<name>@<version>` must have left in `w`: the package in Pi's
/// settings and under its agent directory, npm's install of the platform package `id` and
/// no other, and that addon the one that loads. Returns the installed copy.
pub(crate) fn check_pi_installed(w: &World, id: &str) -> PathBuf {
    let (name, version) = name_and_version();
    let platform_pkg = format!("{name}-{id}");
    let run_dir = w.run_dir();
    let source = format!("npm:{name}@{version}");
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
