//! The harness of the command line's tests (`tests/cli_*.rs`, one file per command, and
//! `tests/cli_versions.rs`): the `session-state` binary, run for real in a scrubbed
//! environment (only `HOME`, `PI_CODING_AGENT_DIR` and `PATH` are set, each test in its
//! own temporary folder), with insta snapshots of what a user sees. Paths, ids, session
//! ids, timestamps and lock holders are filtered out of the snapshots; the assertions
//! check them structurally.
//!
//! `docs/cli.md` shows outputs taken from these snapshots.
//!
//! With `SESSION_STATE_CLI_WINDOWS_EXE` set to the path of a Windows `session-state.exe`,
//! every command runs as that binary under Wine instead (`.ci/windows-cli` builds it and
//! runs the tests that way; the tests it leaves out, and why, are listed there).

use crate::common;
use serde_json::{Value, json};
use session_state::{LogOptions, Materialize, NewEntry, SessionLog, Store, lock::Holder};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::process::Command;

/// The example session (`fixtures/example.jsonl`), which a world copies to `s.jsonl`.
pub const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/example.jsonl");

/// The edge-case sessions (`fixtures/edge/`).
pub const EDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/edge");

/// One test's world: `root/home`, `root/agent` (= `$PI_CODING_AGENT_DIR`), `root/work`
/// (the current directory, holding `s.jsonl`, a copy of the example session).
pub struct World {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub work: PathBuf,
    pub agent: PathBuf,
}

impl World {
    /// An empty world: the folders, no session.
    pub fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let work = root.join("work");
        let agent = root.join("agent");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        World {
            _tmp: tmp,
            root,
            work,
            agent,
        }
    }

    /// With `s.jsonl`, a copy of `fixtures/example.jsonl`.
    pub fn example() -> World {
        let w = World::new();
        std::fs::copy(EXAMPLE, w.file()).unwrap();
        w
    }

    /// `work/s.jsonl`.
    pub fn file(&self) -> PathBuf {
        self.work.join("s.jsonl")
    }

    /// Where the projection database is when nothing names another.
    pub fn default_db(&self) -> PathBuf {
        self.agent.join("sessions/states.sqlite")
    }

    /// The binary under test with `args`, in this world (not run yet).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = cli();
        c.env("HOME", self.root.join("home"))
            .env("PI_CODING_AGENT_DIR", &self.agent)
            .current_dir(&self.work)
            .args(args);
        c
    }

    /// Runs `args` in this world, stdin empty.
    pub fn run(&self, args: &[&str]) -> Out {
        Out::of(self.cmd(args).output().unwrap())
    }

    /// Runs `args` in this world with `stdin` on its stdin.
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Out {
        use std::io::Write as _;
        let mut child = self
            .cmd(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A writer that exits early closes the pipe; what it printed is the result.
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        Out::of(child.wait_with_output().unwrap())
    }

    /// insta settings that replace what changes from run to run.
    pub fn settings(&self) -> insta::Settings {
        let mut s = insta::Settings::clone_current();
        s.add_filter(&regex_escape(&self.root.to_string_lossy()), "[TMP]");
        s.add_filter(&regex_escape(EDGE), "[EDGE]");
        s.add_filter(
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[SESSION]",
        );
        s.add_filter(r"\b[0-9a-f]{8}\b", "[ID]");
        s.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]");
        // Session file names start with the creation time: `2025-01-02T03-04-05-678Z_`.
        s.add_filter(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d+Z", "[TIME]");
        s.add_filter(r"pid:\d+(;[a-z]+:[^;\s)]+)*", "[HOLDER]");
        s.add_filter(r"pid \d+", "pid [PID]");
        s.add_filter(r"taken \d+ s ago", "taken [N] s ago");
        s.add_filter(r"expires in \d+ s", "expires in [N] s");
        s
    }

    /// A command that must succeed; what it printed.
    pub fn ok(&self, args: &[&str]) -> Out {
        let out = self.run(args);
        assert_eq!(out.code, 0, "{args:?}: {}", out.shown());
        out
    }

    /// A write that must append: the new entry's id.
    pub fn appended(&self, args: &[&str]) -> String {
        let id = self.ok(args).line();
        assert_eq!(id.len(), 8, "{args:?}: an entry id: {id:?}");
        id
    }

    /// The file's last line.
    pub fn last_line(&self) -> String {
        let text = std::fs::read_to_string(self.file()).unwrap();
        text.lines().last().unwrap().to_owned()
    }

    /// A SQLite store of this world (created by the first command that opens it).
    pub fn store_url(&self) -> String {
        format!("sqlite://{}", self.root.join("store.sqlite").display())
    }

    /// A command with `$SESSION_STATE_STORE` set.
    pub fn run_env(&self, store: &str, args: &[&str]) -> Out {
        Out::of(self.cmd(args).env(STORE_ENV, store).output().unwrap())
    }

    /// `work/<name>`: the example session under another session id.
    pub fn session_with_id(&self, name: &str, id: &str) -> PathBuf {
        let text = std::fs::read_to_string(EXAMPLE).unwrap();
        let (header, rest) = text.split_once('\n').unwrap();
        let mut h: Value = serde_json::from_str(header).unwrap();
        h["id"] = json!(id);
        let path = self.work.join(name);
        std::fs::write(
            &path,
            format!("{}\n{rest}", serde_json::to_string(&h).unwrap()),
        )
        .unwrap();
        path
    }

    /// Imports `file` into the world's store; its id as printed.
    pub fn import(&self, file: &Path) -> String {
        let url = self.store_url();
        let out = self.run(&["import", file.to_str().unwrap(), "--store", &url]);
        assert_eq!(out.code, 0, "{}", out.shown());
        out.line()
    }
}

/// The variable that names a store when `--store` is not given.
pub const STORE_ENV: &str = "SESSION_STATE_STORE";

/// The variable that swaps the binary under test for a Windows build run under Wine.
pub const WINDOWS_EXE: &str = "SESSION_STATE_CLI_WINDOWS_EXE";

/// The binary under test, in a scrubbed environment: this build's `session-state`, or the
/// Windows `session-state.exe` that `SESSION_STATE_CLI_WINDOWS_EXE` names, run by Wine's
/// `wine64` (`SESSION_STATE_WINE`, else `/usr/lib/wine/wine64`, else `wine64` on `PATH`)
/// with Wine's own variables kept: `WINEPREFIX` (default `~/.wine` of the user running the
/// tests, since each test sets its own `HOME`) and `WINEDEBUG` (default `-all`). A missing
/// `.exe` or Wine fails the test.
pub fn cli() -> Command {
    let Some(exe) = std::env::var_os(WINDOWS_EXE) else {
        return common::cli();
    };
    assert!(
        Path::new(&exe).is_file(),
        "{WINDOWS_EXE}={} is not a file: build it with .ci/windows-cli",
        Path::new(&exe).display()
    );
    let wine = std::env::var_os("SESSION_STATE_WINE")
        .map(PathBuf::from)
        .inspect(|w| {
            assert!(
                w.is_file(),
                "SESSION_STATE_WINE={} is not a file: install Wine (Debian: apt-get install \
                 wine64) or name its wine64",
                w.display()
            );
        })
        .or_else(|| {
            let debian = PathBuf::from("/usr/lib/wine/wine64");
            debian.is_file().then_some(debian)
        })
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join("wine64"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "{WINDOWS_EXE} is set but Wine is not installed: no /usr/lib/wine/wine64, no \
                 wine64 on PATH, no SESSION_STATE_WINE (Debian: apt-get install wine64)"
            )
        });
    let prefix = std::env::var_os("WINEPREFIX").unwrap_or_else(|| {
        let home = std::env::var_os("HOME").expect("HOME or WINEPREFIX is set");
        Path::new(&home).join(".wine").into_os_string()
    });
    // As `common::cli`: only `PATH` from this process, and Wine's own two.
    let mut c = Command::new(wine);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("WINEPREFIX", prefix)
        .env(
            "WINEDEBUG",
            std::env::var_os("WINEDEBUG").unwrap_or_else(|| "-all".into()),
        )
        .arg(exe);
    c
}

/// This build's binary, for the tests that give it a terminal through `script`: with
/// `SESSION_STATE_CLI_WINDOWS_EXE` set they would test the wrong binary, so they fail.
pub fn native_bin() -> &'static Path {
    assert!(
        std::env::var_os(WINDOWS_EXE).is_none(),
        "this test runs the binary on a terminal (script, a pty), which the Windows build \
         under Wine does not get: leave it out of the Wine run"
    );
    Path::new(common::BIN)
}

/// `s` as a regex that matches it literally (for insta filters).
pub fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What a run gave: its exit code and its output.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// The result of a finished process.
    pub fn of(o: std::process::Output) -> Out {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
    /// The text a snapshot records.
    pub fn shown(&self) -> String {
        format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
    /// stdout as JSON; not JSON fails the test.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.shown()))
    }
    /// The one line printed (an entry id, a value): more or fewer lines fail the test.
    pub fn line(&self) -> String {
        assert_eq!(self.stdout.lines().count(), 1, "{}", self.shown());
        self.stdout.trim_end().to_owned()
    }
}

/// A new session in `dir` made with the library: `n` alternating user/assistant messages.
pub fn make_session(dir: &Path, cwd: &str, n: usize) -> PathBuf {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, cwd)
        .unwrap();
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        log.append(NewEntry::message(json!({"role": role, "content": "hi"})))
            .unwrap();
    }
    log.path().to_path_buf()
}

/// The world's `s.jsonl`, opened with the library.
pub fn example_log(w: &World) -> SessionLog {
    SessionLog::open(w.file()).unwrap()
}

/// A `sleep 30` whose pid holds the session's write lock in `db`, as a live foreign
/// writer would. Kill it at the end of the test.
pub fn live_lock(db: &Path, session_id: &str) -> Child {
    let child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let holder = Holder::for_pid(child.id()).unwrap();
    let store = common::open_store(db).unwrap();
    let guard = store
        .lock_as(session_id, "write", common::now_ms(), &holder)
        .unwrap();
    // The row must outlive this function, as a crashed or busy writer's would.
    std::mem::forget(guard);
    child
}

/// The holder of the session's lock row in `db`, if there is one.
pub fn lock_holder(db: &Path, session_id: &str) -> Option<String> {
    Store::at(db)
        .unwrap()
        .peek_lock_status(session_id)
        .unwrap()
        .row()
        .map(|s| s.holder)
}

/// Ends a child of the test (a `live_lock` holder) and reaps it.
pub fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}
