//! Drives the real Pi coding agent (both majors) from integration tests.
//!
//! `tests/interop/` pins the packages (`package.json` + `package-lock.json`) and holds small
//! Node ESM scripts (`gen.mjs`, `dump.mjs`, `append.mjs`, `lib.mjs`). On first use this module
//! copies them to `<target>/interop-node/`, runs `npm ci` there (once per lockfile; a stamp
//! file records the hash), and runs the scripts with the pinned Node 22
//! (`node_modules/.bin/node`). Installs are serialized across test binaries with a file lock
//! and within a process with a `OnceLock`.
//!
//! A script runs inside a long-lived `serve.mjs` process rather than a `node` of its own:
//! loading Pi's modules costs about a second of CPU, more than most calls. Each server
//! runs one call at a time; the test process keeps a pool of them (one per test thread
//! calling at once), and they exit when the test process does (their stdin closes).
//!
//! There is no silent skip: a missing `npm` or a failed install panics with what to install.
//!
//! Uses std + serde_json only; independent of the crate's own API.

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

/// Pi majors the interop scripts drive: 1 = `@earendil-works/pi-coding-agent` 1.6.0,
/// 0 = `@mariozechner/pi-coding-agent` 0.73.1.
pub const MAJORS: [u8; 2] = [1, 0];

/// `tests/interop/` in the source tree (package.json, package-lock.json, *.mjs).
pub fn interop_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("interop")
}

/// `<target>/interop-node/`: where the scripts are copied and `npm ci` runs
/// (`CARGO_TARGET_DIR` if set, else `<manifest>/target`).
pub fn interop_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => manifest.join(dir), // join keeps an absolute path as is
        _ => manifest.join("target"),
    };
    target.join("interop-node")
}

/// The pinned Node 22 binary (`<target>/interop-node/node_modules/.bin/node`), installed on
/// first use.
pub fn node() -> PathBuf {
    ensure_installed()
        .join("node_modules")
        .join(".bin")
        .join("node")
}

/// Runs `<interop-node>/<script> <args…>` (as `node <script> <args…>` would, inside a
/// `serve.mjs` process) and returns its JSON result. Panics with the script's error if it
/// fails.
pub fn run(script: &str, args: &[&str]) -> Value {
    try_run(script, args).unwrap_or_else(|err| panic!("{err}"))
}

/// Like [`run`], but returns `Err(message)` (the script's error and stack) when the script
/// fails, for tests that expect Pi to refuse a file. Setup failures still panic.
pub fn try_run(script: &str, args: &[&str]) -> Result<Value, String> {
    static IDLE: Mutex<Vec<Server>> = Mutex::new(Vec::new());
    let dir = ensure_installed();
    let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let mut server = idle.unwrap_or_else(|| Server::start(dir));
    let request = serde_json::json!({"script": script, "args": args});
    let mut line = String::new();
    let sent = writeln!(server.stdin, "{request}").and_then(|()| server.stdin.flush());
    let read = sent.and_then(|()| server.stdout.read_line(&mut line));
    if !matches!(read, Ok(n) if n > 0) {
        let _ = server.child.kill();
        let _ = server.child.wait();
        panic!(
            "serve.mjs ended during {script} {args:?} ({read:?}); its stderr is in {}",
            server.log.display()
        );
    }
    let reply: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!("serve.mjs answered {script} {args:?} with invalid JSON ({e}): {line}")
    });
    IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(server);
    match (reply.get("ok"), reply.get("error")) {
        (Some(ok), _) => Ok(ok.clone()),
        (None, Some(Value::String(e))) => Err(format!(
            "pi script failed: {script} {args:?}\n--- error ---\n{e}"
        )),
        _ => panic!("serve.mjs answered {script} {args:?} with {line}"),
    }
}

/// A `serve.mjs` process: requests on its stdin, one JSON reply line each on its stdout.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Where its stderr goes (Pi's warnings, a crash).
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let node = dir.join("node_modules").join(".bin").join("node");
        let log = dir.join(format!("serve-{}.log", std::process::id()));
        let stderr = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
        let mut child = Command::new(&node)
            .arg(dir.join("serve.mjs"))
            // Keep Pi away from the user's ~/.pi (it only needs the dir for defaults we never use).
            .env("PI_CODING_AGENT_DIR", dir.join("agent-home"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Server {
            child,
            stdin,
            stdout,
            log,
        }
    }
}

/// What `gen.mjs` reports.
#[derive(Debug, Clone)]
pub struct Generated {
    pub file: PathBuf,
    /// Every entry id Pi appended, in append order (for `torn`: minus the torn entry).
    pub ids: Vec<String>,
    /// The whole JSON output (the `torn` scenario adds tornId, tornOffset, appendedIds,
    /// unreadableIds).
    pub raw: Value,
}

/// Generates `out` with Pi `major`. `scenario` is `basic`, `torn`, `state` (seeded) or
/// `example`; see [`generate_big`] for `big`. An existing `out` is replaced.
pub fn generate(major: u8, out: &Path, scenario: &str, seed: Option<u64>) -> Generated {
    let seed = seed.map(|s| s.to_string());
    let mut args = vec![major_arg(major), path_arg(out), scenario];
    if let Some(seed) = &seed {
        args.push(seed);
    }
    generated(run("gen.mjs", &args))
}

/// Generates a benchmark session of `n` entries (a few KB per assistant message, occasional
/// forks).
pub fn generate_big(major: u8, out: &Path, n: usize, seed: u64) -> Generated {
    let (n, seed) = (n.to_string(), seed.to_string());
    generated(run(
        "gen.mjs",
        &[major_arg(major), path_arg(out), "big", &n, &seed],
    ))
}

/// What Pi reads from a file (`dump.mjs`).
#[derive(Debug, Clone)]
pub struct Dump {
    pub header: Value,
    /// `getEntries()`: every parsed entry in file order (duplicates included), header excluded.
    pub entries: Vec<Value>,
    pub leaf_id: Option<String>,
    /// `getBranch()` ids, root first.
    pub branch: Vec<String>,
    /// `getBranch(id)` ids for every entry id; `None` where the parent chain has a cycle.
    pub branches: BTreeMap<String, Option<Vec<String>>>,
    pub raw: Value,
}

/// Opens `file` with Pi `major` and reports what it sees. Pi's `open()` may modify the file
/// (v1/v2 migration, "\n" after a torn tail in 1.x, overwrite of a bad header in 0.73):
/// prefer [`dump_copy`] for fixtures.
pub fn dump(major: u8, file: &Path) -> Dump {
    parse_dump(run("dump.mjs", &[major_arg(major), path_arg(file)]))
}

/// [`dump`], but fails with `Err` (Pi's error message) where Pi refuses the file.
pub fn try_dump(major: u8, file: &Path) -> Result<Dump, String> {
    try_run("dump.mjs", &[major_arg(major), path_arg(file)]).map(parse_dump)
}

/// [`dump`] on a private copy of `file` (Pi's open() can rewrite what it opens).
pub fn dump_copy(major: u8, file: &Path) -> Dump {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir
        .path()
        .join(file.file_name().unwrap_or("session.jsonl".as_ref()));
    fs::copy(file, &copy).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
    dump(major, &copy)
}

/// [`dump_copy`] with `--links`: each entry is `{type, id, parentId, message}`, where
/// `message` is Pi's `JSON.stringify(entry.message)` as a string, so entries that
/// serde_json's `Value` cannot hold (lone surrogates, deep nesting) still arrive.
pub fn dump_links_copy(major: u8, file: &Path) -> Dump {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("session.jsonl");
    fs::copy(file, &copy).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
    parse_dump(run(
        "dump.mjs",
        &[major_arg(major), path_arg(&copy), "--links"],
    ))
}

/// What `append.mjs` reports.
#[derive(Debug, Clone)]
pub struct Appended {
    pub ids: Vec<String>,
    pub leaf_id: Option<String>,
}

/// Lets Pi `major` append `n` entries to `file` at its leaf: a user message, then a custom
/// entry of `custom_type` (default `session-state/append`) with data
/// `{"v":1,"scope":"branch","op":"set","value":k}` (k = 1, 2, …), alternating.
pub fn append(major: u8, file: &Path, n: usize, custom_type: Option<&str>) -> Appended {
    let n = n.to_string();
    let mut args = vec![major_arg(major), path_arg(file), &n];
    if let Some(ct) = custom_type {
        args.push(ct);
    }
    let v = run("append.mjs", &args);
    Appended {
        ids: strings(&v["ids"]),
        leaf_id: v["leafId"].as_str().map(str::to_owned),
    }
}

// ---------------------------------------------------------------------------------------

fn major_arg(major: u8) -> &'static str {
    match major {
        1 => "1",
        0 => "0",
        _ => panic!("Pi major must be 1 or 0, got {major}"),
    }
}

fn path_arg(p: &Path) -> &str {
    p.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path: {}", p.display()))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an array of ids, got {v}"))
        .iter()
        .map(|x| {
            x.as_str()
                .unwrap_or_else(|| panic!("expected an id string, got {x}"))
                .to_owned()
        })
        .collect()
}

fn generated(v: Value) -> Generated {
    Generated {
        file: PathBuf::from(v["file"].as_str().expect("gen.mjs: file")),
        ids: strings(&v["ids"]),
        raw: v,
    }
}

fn parse_dump(v: Value) -> Dump {
    let branches = match v.get("branches").and_then(Value::as_object) {
        Some(map) => map
            .iter()
            .map(|(k, b)| (k.clone(), if b.is_null() { None } else { Some(strings(b)) }))
            .collect(),
        None => BTreeMap::new(),
    };
    Dump {
        header: v["header"].clone(),
        entries: v["entries"].as_array().cloned().unwrap_or_default(),
        leaf_id: v["leafId"].as_str().map(str::to_owned),
        branch: if v["branch"].is_null() {
            Vec::new()
        } else {
            strings(&v["branch"])
        },
        branches,
        raw: v,
    }
}

/// Copies the interop files to `<target>/interop-node/` and runs `npm ci` there if the
/// lockfile changed since the last install. Returns that directory.
fn ensure_installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let (src, dir) = (interop_src(), interop_dir());
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));

        // One installer at a time across test binaries; released when `lock` drops.
        let lock_path = dir.join(".install.lock");
        let lock = File::create(&lock_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));

        let mut hasher = DefaultHasher::new();
        for name in ["package.json", "package-lock.json"] {
            let bytes = fs::read(src.join(name))
                .unwrap_or_else(|e| panic!("read {}: {e}", src.join(name).display()));
            bytes.hash(&mut hasher);
            sync_file(&dir.join(name), &bytes);
        }
        // Scripts are always refreshed so edits are picked up.
        for entry in fs::read_dir(&src).unwrap_or_else(|e| panic!("read {}: {e}", src.display())) {
            let path = entry.expect("read_dir entry").path();
            if path.extension().is_some_and(|x| x == "mjs") {
                let bytes =
                    fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                sync_file(&dir.join(path.file_name().unwrap()), &bytes);
            }
        }

        let stamp = dir.join(".npm-ci.stamp");
        let want = format!("{:016x}\n", hasher.finish());
        let node = dir.join("node_modules").join(".bin").join("node");
        if fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) || !node.exists() {
            let _ = fs::remove_file(&stamp);
            npm_ci(&dir);
            if !node.exists() {
                panic!(
                    "npm ci in {} did not install {} (the `node` package's preinstall script must \
                     be allowed to run: see allowScripts in tests/interop/package.json)",
                    dir.display(),
                    node.display()
                );
            }
            fs::write(&stamp, &want).unwrap_or_else(|e| panic!("write {}: {e}", stamp.display()));
        }
        drop(lock);
        dir
    })
}

fn npm_ci(dir: &Path) {
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            if e.kind() == ErrorKind::NotFound {
                panic!(
                    "`npm` was not found on PATH. The Pi interop tests need Node.js (>= 20) with npm \
                     to install the pinned Pi packages from tests/interop/package-lock.json. Install \
                     Node.js + npm (e.g. `apt-get install nodejs npm`, or from nodejs.org) and re-run."
                )
            }
            panic!("cannot run `npm ci` in {}: {e}", dir.display())
        });
    if !out.status.success() {
        panic!(
            "`npm ci --no-audit --no-fund` failed in {} ({}). The Pi interop tests need the npm \
             registry (or a configured mirror/cache) to install tests/interop/package-lock.json.\n\
             --- stdout ---\n{}\n--- stderr ---\n{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Writes `bytes` to `dst` unless it already holds them; via a temp file and a rename, so a
/// script that another test process is starting never reads a half-written file.
fn sync_file(dst: &Path, bytes: &[u8]) {
    if fs::read(dst).is_ok_and(|old| old == bytes) {
        return;
    }
    let tmp = dst.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, bytes).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    fs::rename(&tmp, dst).unwrap_or_else(|e| panic!("rename to {}: {e}", dst.display()));
}
