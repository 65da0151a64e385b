//! Example binaries that tests run as separate processes, built once per test binary with
//! the cargo that runs the tests, in the `test` profile: `cargo test` has built them so
//! already (every example, with the same dependencies), so this finds them up to date
//! instead of building the crate and all its dependencies a second time in `dev`.

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The path of `examples/<name>.rs`, built (once) with
/// `cargo build --profile test --example <name>`.
pub fn example(name: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(exe) = built.get_or_insert_with(HashMap::new).get(name) {
        return exe.clone();
    }
    let out = build_command(name)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
    assert!(
        out.status.success(),
        "cargo build --profile test --example {name} failed"
    );
    let exe = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reported no executable for example {name}"));
    assert!(exe.exists(), "{}", exe.display());
    built
        .get_or_insert_with(HashMap::new)
        .insert(name.to_owned(), exe.clone());
    exe
}

/// `cargo build --profile test --example <name> --message-format=json` for this package,
/// without the variables cargo set for the test (so it finds what `cargo test` built).
pub fn build_command(name: &str) -> Command {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut c = Command::new(env!("CARGO"));
    super::cargo_env::clear_test_vars(&mut c)
        .args(["build", "--profile", "test", "--example", name])
        .arg("--message-format=json")
        .arg("--manifest-path")
        .arg(&manifest);
    c
}

/// A small xorshift: random but reproducible from the seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next raw value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A value in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
