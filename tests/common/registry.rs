//! An npm registry on loopback for the install test: verdaccio, pinned by
//! `tests/registry/package.json` + `package-lock.json` and installed with `npm ci` into
//! `<target>/registry-node/` on first use (once per lockfile; a stamp records its hash; a
//! file lock serializes installs across processes). `tests/registry/serve.mjs` runs it
//! with the pinned Node 22 of `pi/` (verdaccio 6.10 needs Node 22), storage in a directory
//! of the test's, no uplinks, on a port the system picks. Dropping the [`Registry`] kills
//! the server.
//!
//! There is no silent skip: a failed install or a server that does not come up panics with
//! its output.

use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::pi_addon;

/// How long the server may take to listen (verdaccio loads its plugins first).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// `tests/registry/` in the source tree.
fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("registry")
}

/// `<target>/registry-node/`, verdaccio installed, the scripts copied.
fn installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = pi_addon::target_dir().join("registry-node");
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let lock_path = dir.join(".install.lock");
        let lock = File::create(&lock_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
        let mut hasher = DefaultHasher::new();
        for name in ["package.json", "package-lock.json", "serve.mjs"] {
            let bytes = fs::read(src().join(name))
                .unwrap_or_else(|e| panic!("read {}: {e}", src().join(name).display()));
            if name != "serve.mjs" {
                bytes.hash(&mut hasher);
            }
            fs::write(dir.join(name), &bytes)
                .unwrap_or_else(|e| panic!("write {}: {e}", dir.join(name).display()));
        }
        let stamp = dir.join(".npm-ci.stamp");
        let want = format!("{:016x}\n", hasher.finish());
        let verdaccio = dir.join("node_modules").join("verdaccio");
        if fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) || !verdaccio.exists()
        {
            let _ = fs::remove_file(&stamp);
            let mut c = Command::new("npm");
            c.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir);
            pi_addon::run(
                "npm ci in target/registry-node (verdaccio, from tests/registry/package-lock.json)",
                c,
            );
            fs::write(&stamp, &want).unwrap_or_else(|e| panic!("write {}: {e}", stamp.display()));
        }
        drop(lock);
        dir
    })
}

/// A running verdaccio; killed on drop.
pub struct Registry {
    child: Child,
    /// `http://127.0.0.1:<port>/`.
    pub url: String,
    port: u16,
}

impl Registry {
    /// Starts a registry whose storage is `dir` (created; it must be the caller's).
    pub fn start(dir: &Path) -> Registry {
        let installed = installed();
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let mut child = Command::new(pi_addon::node())
            .arg(installed.join("serve.mjs"))
            .arg(dir)
            .current_dir(installed)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start verdaccio ({}): {e}", pi_addon::node().display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            // Keep draining so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!(
                    "verdaccio did not report its port within {START_TIMEOUT:?} ({other:?})\n--- stderr ---\n{err}"
                );
            }
        };
        let port = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| panic!("verdaccio printed {line:?}, not {{\"port\":N}}"));
        // Drain stderr too (warnings), so a chatty server never blocks.
        let stderr = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || for _ in BufReader::new(stderr).lines() {});
        Registry {
            child,
            url: format!("http://127.0.0.1:{port}/"),
            port,
        }
    }

    /// An npm config file for this registry (`npm_config_userconfig`): the registry, and a
    /// token for publishing (verdaccio lets anyone publish here, npm still wants one).
    pub fn write_npmrc(&self, path: &Path) {
        let text = format!(
            "registry={}\n//127.0.0.1:{}/:_authToken=session-state-test\n",
            self.url, self.port
        );
        fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
