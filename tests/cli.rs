//! The `session-state` binary, run for real in a scrubbed environment (only `HOME`,
//! `PI_CODING_AGENT_DIR` and `PATH` are set, each test in its own temporary folder), with
//! insta snapshots of what a user sees. Paths, ids, session ids, timestamps and lock
//! holders are filtered out of the snapshots; the assertions check them structurally.
//!
//! `docs/cli.md` shows outputs taken from these snapshots.
//!
//! With `SESSION_STATE_CLI_WINDOWS_EXE` set to the path of a Windows `session-state.exe`,
//! every command runs as that binary under Wine instead (`.ci/windows-cli` builds it and
//! runs the tests that way; the tests it leaves out, and why, are listed there).
#![expect(clippy::unwrap_used)]

use crate::common;
use serde_json::{Value, json};
use session_state::{
    LogOptions, Materialize, NewEntry, SessionLog, Store,
    lock::{Holder, Liveness},
};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::process::Command;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/example.jsonl");
const EDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/edge");

/// One test's world: `root/home`, `root/agent` (= `$PI_CODING_AGENT_DIR`), `root/work`
/// (the current directory, holding `s.jsonl`, a copy of the example session).
struct World {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
    agent: PathBuf,
}

impl World {
    fn new() -> World {
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
    fn example() -> World {
        let w = World::new();
        std::fs::copy(EXAMPLE, w.file()).unwrap();
        w
    }

    fn file(&self) -> PathBuf {
        self.work.join("s.jsonl")
    }

    fn default_db(&self) -> PathBuf {
        self.agent.join("sessions/states.sqlite")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = cli();
        c.env("HOME", self.root.join("home"))
            .env("PI_CODING_AGENT_DIR", &self.agent)
            .current_dir(&self.work)
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Out {
        Out::of(self.cmd(args).output().unwrap())
    }

    fn run_stdin(&self, args: &[&str], stdin: &str) -> Out {
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
    fn settings(&self) -> insta::Settings {
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
}

/// The variable that swaps the binary under test for a Windows build run under Wine.
const WINDOWS_EXE: &str = "SESSION_STATE_CLI_WINDOWS_EXE";

/// The binary under test, in a scrubbed environment: this build's `session-state`, or the
/// Windows `session-state.exe` that `SESSION_STATE_CLI_WINDOWS_EXE` names, run by Wine's
/// `wine64` (`SESSION_STATE_WINE`, else `/usr/lib/wine/wine64`, else `wine64` on `PATH`)
/// with Wine's own variables kept: `WINEPREFIX` (default `~/.wine` of the user running the
/// tests, since each test sets its own `HOME`) and `WINEDEBUG` (default `-all`). A missing
/// `.exe` or Wine fails the test.
fn cli() -> Command {
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
fn native_bin() -> &'static Path {
    assert!(
        std::env::var_os(WINDOWS_EXE).is_none(),
        "this test runs the binary on a terminal (script, a pty), which the Windows build \
         under Wine does not get: leave it out of the Wine run"
    );
    Path::new(common::BIN)
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn of(o: std::process::Output) -> Out {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
    /// The text a snapshot records.
    fn shown(&self) -> String {
        format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.shown()))
    }
    fn line(&self) -> String {
        self.stdout.trim_end().to_owned()
    }
}

/// A new session in `dir` made with the library: `n` alternating user/assistant messages.
fn make_session(dir: &Path, cwd: &str, n: usize) -> PathBuf {
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

fn example_log(w: &World) -> SessionLog {
    SessionLog::open(w.file()).unwrap()
}

/// A `sleep 30` whose pid holds the session's write lock in `db`, as a live foreign
/// writer would. Kill it at the end of the test.
fn live_lock(db: &Path, session_id: &str) -> Child {
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

fn lock_holder(db: &Path, session_id: &str) -> Option<String> {
    Store::at(db)
        .unwrap()
        .peek_lock_status(session_id)
        .unwrap()
        .row()
        .map(|s| s.holder)
}

fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

// ---------------------------------------------------------------------------------------
// help
// ---------------------------------------------------------------------------------------

/// The binary under test is the one the run names: this build's, or with
/// `SESSION_STATE_CLI_WINDOWS_EXE` the Windows `.exe` under Wine, whose usage line names
/// the program as Windows started it.
#[test]
fn the_binary_under_test_is_the_one_the_run_names() {
    let out = World::new().run(&["--help"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let usage = if std::env::var_os(WINDOWS_EXE).is_some() {
        "Usage: session-state.exe [OPTIONS] <COMMAND>"
    } else {
        "Usage: session-state [OPTIONS] <COMMAND>"
    };
    assert!(out.stdout.lines().any(|l| l == usage), "{}", out.stdout);
}

#[test]
fn help_lists_every_command_with_examples() {
    let w = World::new();
    let out = w.run(&["--help"]);
    assert_eq!(out.code, 0);
    insta::assert_snapshot!("help", out.stdout);
    for sub in [
        "read",
        "write",
        "patch",
        "drop",
        "history",
        "replay",
        "tree",
        "status",
        "force-refresh",
        "verify",
        "list",
        "import",
        "export",
    ] {
        let out = w.run(&[sub, "--help"]);
        assert_eq!(out.code, 0, "{sub}");
        assert!(
            out.stdout.contains("Examples:\n  session-state ")
                || out.stdout.contains("Examples:\n  SESSION_STATE_STORE="),
            "{sub}: {}",
            out.stdout
        );
        assert!(out.stdout.contains("Exit codes:"), "{sub}");
        // The help cites the project's own docs only, never a section of another text.
        assert!(!out.stdout.contains('§'), "{sub}: {}", out.stdout);
        // Every example is one command line: none is cut by a line break.
        let examples = out.stdout.split("Examples:\n").nth(1).unwrap();
        for line in examples.lines().take_while(|l| !l.is_empty()) {
            assert!(
                line.contains("session-state ") || line.starts_with("      ("),
                "{sub}: {line:?}"
            );
            assert!(!line.ends_with('\\'), "{sub}: {line:?}");
        }
    }
    assert!(!out.stdout.contains('§'), "{}", out.stdout);
    // The positional is named the same in the usage line and in the text.
    let replay = w.run(&["replay", "--help"]).stdout;
    assert!(
        replay.contains("Usage: session-state replay [OPTIONS] <SESSION|DIR>"),
        "{replay}"
    );
    assert!(!replay.contains("FILE"), "{replay}");
    let import = w.run(&["import", "--help"]).stdout;
    assert!(
        import.contains("Usage: session-state import [OPTIONS] <FILE>"),
        "{import}"
    );
    assert!(!import.contains("<FILE> is a session id"), "{import}");
    for example in import
        .lines()
        .filter(|l| l.starts_with("  ") && l.contains("session-state import"))
    {
        assert!(
            example.contains("--store") || example.contains("SESSION_STATE_STORE="),
            "every import example names a store: {example}"
        );
    }
}

/// Every command, as its help names it.
const COMMANDS: [&str; 14] = [
    "read",
    "write",
    "patch",
    "drop",
    "history",
    "replay",
    "tree",
    "status",
    "force-refresh",
    "verify",
    "list",
    "import",
    "export",
    "prune",
];

/// The lines of a help's section under `heading` (up to the next heading), with its
/// whitespace folded to single spaces.
fn help_section(help: &str, heading: &str) -> String {
    let mut lines = help.lines().skip_while(|l| *l != heading);
    assert_eq!(lines.next(), Some(heading), "{heading}: {help}");
    let body: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect();
    folded(&body.join("\n"))
}

/// A help text with its line breaks and runs of spaces folded to single spaces.
fn folded(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `--store`'s text in a command's help: its entry under "Global options".
fn store_text(help: &str) -> String {
    let global = help_section(help, "Global options:");
    let start = global
        .find("--store <URL>")
        .expect("--store is a global option");
    global[start..].to_owned()
}

#[test]
fn global_options_stand_apart_from_each_commands_own() {
    let w = World::new();
    let top = w.run(&["--help"]).stdout;
    let global = help_section(&top, "Global options:");
    assert!(
        global.contains("--verbose") && global.contains("--store"),
        "{top}"
    );
    assert!(!help_section(&top, "Options:").contains("--store"), "{top}");
    for sub in COMMANDS {
        for flag in ["-h", "--help"] {
            let help = w.run(&[sub, flag]).stdout;
            let global = help_section(&help, "Global options:");
            let own = help_section(&help, "Options:");
            assert!(
                global.contains("--verbose") && global.contains("--store"),
                "{sub}: {help}"
            );
            assert!(
                !own.contains("--verbose") && !own.contains("--store"),
                "{sub}: {help}"
            );
            // The command's own options are under its own heading only.
            for option in [
                "--plugin",
                "--scope",
                "--at",
                "--db",
                "--json",
                "--dry-run",
                "--output",
            ] {
                assert!(!global.contains(option), "{sub}: {option} in {global}");
            }
        }
    }
}

#[test]
fn store_help_says_what_store_means_for_each_command() {
    let w = World::new();
    for sub in COMMANDS {
        let help = w.run(&[sub, "--help"]).stdout;
        let store = store_text(&help);
        let usage = help.lines().find(|l| l.starts_with("Usage: ")).unwrap();
        let takes_a_session = usage.contains("<SESSION");
        // <SESSION> only where the command has one.
        assert_eq!(
            store.contains("<SESSION"),
            takes_a_session,
            "{sub}: {store}"
        );
        // `none` (session files) only where a command works on files without a store.
        let works_on_files = !matches!(sub, "import" | "export" | "prune");
        assert_eq!(store.contains("`none`"), works_on_files, "{sub}: {store}");
    }
    let prune = store_text(&w.run(&["prune", "--help"]).stdout);
    assert!(prune.contains("Not used by prune"), "{prune}");
    let import = store_text(&w.run(&["import", "--help"]).stdout);
    assert!(import.contains("required"), "{import}");
}

#[test]
fn scope_help_says_what_each_scope_is() {
    let w = World::new();
    for sub in ["read", "write", "patch", "drop"] {
        for flag in ["-h", "--help"] {
            let help = folded(&w.run(&[sub, flag]).stdout);
            assert!(!help.contains("Which fold"), "{sub}: {help}");
            assert!(!help.contains("Folded"), "{sub}: {help}");
            assert!(help.contains("along the current branch"), "{sub}: {help}");
            assert!(help.contains("forks inherit it"), "{sub}: {help}");
            assert!(help.contains("siblings are isolated"), "{sub}: {help}");
            assert!(
                help.contains("over the whole file in append order"),
                "{sub}: {help}"
            );
        }
    }
}

#[test]
fn top_level_exit_codes_name_every_commands_exit_1() {
    let w = World::new();
    let help = folded(&w.run(&["--help"]).stdout);
    let codes = &help[help.find("Exit codes:").unwrap()..];
    let codes = &codes[..codes.find("2 error").unwrap()];
    // Every command whose own help has an exit 1.
    for sub in COMMANDS {
        let own = folded(&w.run(&[sub, "--help"]).stdout);
        let own_codes = &own[own.find("Exit codes:").unwrap()..];
        if own_codes.contains("; 1 ") {
            assert!(codes.contains(&format!("{sub}: ")), "{sub}: {codes}");
        }
    }
    assert!(
        codes.contains("prune: not confirmed, nothing removed"),
        "{codes}"
    );
}

#[test]
fn help_points_to_what_an_installed_binary_has() {
    let w = World::new();
    let top = w.run(&["--help"]).stdout;
    assert!(
        folded(&top).contains("session-state <command> --help"),
        "{top}"
    );
    for args in std::iter::once(vec!["--help"])
        .chain(COMMANDS.iter().map(|sub| vec![*sub, "--help"]))
        .chain(COMMANDS.iter().map(|sub| vec!["help", *sub]))
    {
        let help = w.run(&args).stdout;
        // No repository path: an installed binary's user has no docs/ folder.
        assert!(!help.contains("docs/"), "{args:?}: {help}");
        assert!(!help.contains(".md"), "{args:?}: {help}");
    }
}

#[test]
fn bad_arguments_exit_2() {
    let w = World::example();
    let out = w.run(&["read", "s.jsonl"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--plugin"), "{}", out.stderr);
    let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--scope", "tree"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("branch") && out.stderr.contains("session"));
}

// ---------------------------------------------------------------------------------------
// read / write / patch / drop
// ---------------------------------------------------------------------------------------

#[test]
fn read_prints_the_value_or_exits_1_when_absent() {
    let w = World::example();
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "{\"name\":\"writer\"}\n")
    );
    assert_eq!(out.stderr, "");

    let out = w.run(&["read", "s.jsonl", "--plugin", "todo", "--scope", "session"]);
    assert_eq!(out.code, 0);
    assert_eq!(out.json(), json!({"backoff": "done", "last-error": "open"}));

    // Absent: no output at all, exit 1. Branch scope of a session-scope plugin is absent.
    let out = w.run(&["read", "s.jsonl", "--plugin", "todo"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (1, "", "")
    );
    let out = w.run(&["read", "s.jsonl", "--plugin", "nobody"]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));

    // The read used (and created) the default projection database.
    assert!(w.default_db().exists());
}

#[test]
fn read_at_an_entry_folds_up_to_it() {
    let w = World::example();
    let log = example_log(&w);
    let fork = log.forks()[0].to_owned();
    let first_tip = log.tips()[0].to_owned();
    // At the fork point the role is the reviewer; on the first branch too.
    for at in [&fork, &first_tip] {
        let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--at", at]);
        assert_eq!(out.line(), r#"{"name":"reviewer"}"#, "at {at}");
    }
    // Before the first role event: absent.
    let root = log.roots()[0].to_owned();
    let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--at", &root]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
}

#[test]
fn write_fork_with_at_then_read_both_branches() {
    let w = World::example();
    let leaf = example_log(&w).leaf_id().unwrap().to_owned();

    // On the current branch.
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "mood",
        "--value",
        r#""calm""#,
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let a = out.line();
    assert_eq!(a.len(), 8, "an entry id: {a:?}");

    // A fork: a second child of the old leaf.
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "mood",
        "--value",
        r#""busy""#,
        "--at",
        &leaf,
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let b = out.line();
    let log = example_log(&w);
    assert_eq!(log.entry(&a).unwrap().parent_id(), Some(leaf.as_str()));
    assert_eq!(log.entry(&b).unwrap().parent_id(), Some(leaf.as_str()));
    assert!(log.forks().contains(&leaf.as_str()));

    // Each branch sees its own write; the leaf is the last entry in file order.
    let read = |at: Option<&str>| {
        let mut args = vec!["read", "s.jsonl", "--plugin", "mood"];
        if let Some(at) = at {
            args.extend(["--at", at]);
        }
        w.run(&args)
    };
    assert_eq!(read(Some(&a)).line(), r#""calm""#);
    assert_eq!(read(Some(&b)).line(), r#""busy""#);
    assert_eq!(read(None).line(), r#""busy""#);
    assert_eq!(read(Some(&leaf)).code, 1);

    let tree = w.run(&["tree", "s.jsonl"]);
    w.settings()
        .bind(|| insta::assert_snapshot!("tree_after_fork", tree.shown()));
}

#[test]
fn write_reads_stdin_and_prints_nothing_when_nothing_changes() {
    let w = World::example();
    let out = w.run_stdin(&["write", "s.jsonl", "--plugin", "todo"], "[1, 2, 3]\n");
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.line().len(), 8);
    let len = std::fs::metadata(w.file()).unwrap().len();

    let out = w.run(&["write", "s.jsonl", "--plugin", "todo", "--value", "[1,2,3]"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "", "")
    );
    assert_eq!(
        std::fs::metadata(w.file()).unwrap().len(),
        len,
        "nothing appended"
    );

    let out = w.run(&["read", "s.jsonl", "--plugin", "todo"]);
    assert_eq!(out.line(), "[1,2,3]");
}

#[test]
fn patch_merges_and_drop_makes_absent() {
    let w = World::example();
    let out = w.run(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "role",
        "--merge",
        r#"{"model":"fast"}"#,
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.line().len(), 8);
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(out.json(), json!({"name": "writer", "model": "fast"}));

    // A patch that changes nothing appends nothing.
    let out = w.run(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "role",
        "--merge",
        r#"{"model":"fast"}"#,
    ]);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""));

    // Session scope: patch the session-wide todo.
    let out = w.run(&[
        "patch",
        "s.jsonl",
        "--plugin",
        "todo",
        "--scope",
        "session",
        "--merge",
        r#"{"backoff":null}"#,
    ]);
    assert_eq!(out.code, 0);
    let out = w.run(&["read", "s.jsonl", "--plugin", "todo", "--scope", "session"]);
    assert_eq!(out.json(), json!({"last-error": "open"}));

    let out = w.run(&["drop", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.line().len()), (0, 8));
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    let out = w.run(&["drop", "s.jsonl", "--plugin", "role"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "", "")
    );
}

#[test]
fn written_null_is_present_not_absent() {
    let w = World::example();
    let out = w.run(&["write", "s.jsonl", "--plugin", "role", "--value", "null"]);
    assert_eq!(out.code, 0);
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.stdout.as_str()), (0, "null\n"));
}

#[test]
fn bad_input_exits_2_naming_what_failed() {
    let w = World::example();
    let len = std::fs::metadata(w.file()).unwrap().len();
    let cases: &[(&str, &[&str])] = &[
        (
            "read_unknown_entry",
            &["read", "s.jsonl", "--plugin", "role", "--at", "deadbeef"],
        ),
        (
            "write_unknown_entry",
            &[
                "write", "s.jsonl", "--plugin", "role", "--value", "1", "--at", "deadbeef",
            ],
        ),
        (
            "write_invalid_json",
            &[
                "write",
                "s.jsonl",
                "--plugin",
                "role",
                "--value",
                "{name: reviewer}",
            ],
        ),
        (
            "patch_invalid_json",
            &["patch", "s.jsonl", "--plugin", "role", "--merge", "{"],
        ),
        (
            "read_invalid_plugin",
            &["read", "s.jsonl", "--plugin", "Role!"],
        ),
        (
            "write_invalid_plugin",
            &["write", "s.jsonl", "--plugin", "", "--value", "1"],
        ),
        (
            "read_relative_db",
            &[
                "read",
                "s.jsonl",
                "--plugin",
                "role",
                "--db",
                "states.sqlite",
            ],
        ),
        (
            "write_relative_db",
            &[
                "write",
                "s.jsonl",
                "--plugin",
                "role",
                "--value",
                "1",
                "--db",
                "db/x.sqlite",
            ],
        ),
        (
            "read_missing_file",
            &["read", "missing.jsonl", "--plugin", "role"],
        ),
        (
            "write_missing_file",
            &["write", "missing.jsonl", "--plugin", "role", "--value", "1"],
        ),
    ];
    let mut shown = String::new();
    for (name, args) in cases {
        let out = w.run(args);
        assert_eq!(out.code, 2, "{name}: {}", out.shown());
        assert_eq!(out.stdout, "", "{name}");
        assert!(out.stderr.starts_with("error: "), "{name}: {}", out.stderr);
        shown.push_str(&format!("## {name}\n{}", out.stderr));
    }
    assert_eq!(
        std::fs::metadata(w.file()).unwrap().len(),
        len,
        "nothing written"
    );
    w.settings()
        .bind(|| insta::assert_snapshot!("bad_input", shown));
    // The unknown id and the offending value are named.
    assert!(shown.contains("'deadbeef'"));
    assert!(shown.contains("\"Role!\""));
    assert!(shown.contains("\"states.sqlite\""));
    assert!(shown.contains("missing.jsonl"));
}

#[test]
fn an_invalid_plugin_id_is_refused_in_the_librarys_words() {
    let w = World::example();
    for id in ["Role!", "", "a b"] {
        let detail = match session_state::format::validate_plugin_id(id) {
            Err(session_state::Error::InvalidOption { detail, .. }) => detail,
            other => panic!("{id:?}: {other:?}"),
        };
        for args in [
            &["read", "s.jsonl", "--plugin", id][..],
            &["write", "s.jsonl", "--plugin", id, "--value", "1"],
        ] {
            let out = w.run(args);
            assert_eq!(out.code, 2, "{args:?}: {}", out.shown());
            assert_eq!(
                out.stderr,
                format!("error: --plugin: {detail}\n"),
                "{args:?}"
            );
        }
    }
}

#[test]
fn empty_stdin_is_invalid_json() {
    let w = World::example();
    let out = w.run_stdin(&["write", "s.jsonl", "--plugin", "role"], "");
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("stdin is not valid JSON"),
        "{}",
        out.stderr
    );
}

#[test]
fn corrupt_file_is_an_error_for_read_write_tree_and_replay() {
    let w = World::new();
    let corrupt = w.work.join("c.jsonl");
    std::fs::copy(format!("{EDGE}/corrupt-middle.jsonl"), &corrupt).unwrap();
    let before = std::fs::read(&corrupt).unwrap();
    for args in [
        &["read", "c.jsonl", "--plugin", "role"][..],
        &["write", "c.jsonl", "--plugin", "role", "--value", "1"],
        &["tree", "c.jsonl"],
        &["replay", "c.jsonl"],
    ] {
        let out = w.run(args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.shown());
        assert!(out.stderr.contains("line 3"), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("343"), "{args:?}: the byte offset");
    }
    assert_eq!(std::fs::read(&corrupt).unwrap(), before, "never modified");
}

#[test]
fn explicit_db_is_used_and_settings_problems_are_reported_once() {
    let w = World::example();
    let db = w.root.join("elsewhere/my.sqlite");
    let out = w.run(&[
        "read",
        "s.jsonl",
        "--plugin",
        "role",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0);
    assert!(db.exists());
    assert!(!w.default_db().exists());

    // A broken user settings file: the default location is used, and said so once.
    std::fs::create_dir_all(&w.agent).unwrap();
    std::fs::write(w.agent.join("settings.json"), "{ not json").unwrap();
    let out = w.run(&["write", "s.jsonl", "--plugin", "role", "--value", "1"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.stderr.matches("warning:").count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("settings.json"));
    assert!(w.default_db().exists());
}

#[test]
fn trusted_project_settings_choose_the_database() {
    let w = World::example();
    let project = w.root.join("project");
    std::fs::create_dir_all(project.join(".pi")).unwrap();
    std::fs::write(
        project.join(".pi/settings.json"),
        r#"{"sessionState":{"databasePath":"cache/p.sqlite"}}"#,
    )
    .unwrap();
    let cwd = project.to_str().unwrap();
    let base = ["status", "s.jsonl", "--json", "--cwd", cwd];
    // Untrusted (no --trust-project, no saved Pi decision): the default location.
    let out = w.run(&base);
    assert_eq!(out.json()["database"]["path"], json!(w.default_db()));
    let mut trusted = base.to_vec();
    trusted.push("--trust-project");
    let out = w.run(&trusted);
    assert_eq!(
        out.json()["database"]["path"],
        json!(project.join(".pi/cache/p.sqlite"))
    );
}

#[test]
fn write_refused_by_a_live_lock_names_holder_action_session_and_reason() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    let len = std::fs::metadata(w.file()).unwrap().len();
    let out = w.run(&["write", "s.jsonl", "--plugin", "role", "--value", "1"]);
    kill(child);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert_eq!(out.stdout, "");
    assert!(out.stderr.contains(&sid), "{}", out.stderr);
    assert!(out.stderr.contains("write refused"), "{}", out.stderr);
    assert!(out.stderr.contains("alive"), "{}", out.stderr);
    assert_eq!(std::fs::metadata(w.file()).unwrap().len(), len);
    w.settings()
        .bind(|| insta::assert_snapshot!("write_locked", out.shown()));
}

// ---------------------------------------------------------------------------------------
// replay
// ---------------------------------------------------------------------------------------

#[test]
fn replay_shows_every_plugin_at_every_tip() {
    let w = World::example();
    let out = w.run(&["replay", "s.jsonl"]);
    assert_eq!(out.code, 0);
    w.settings()
        .bind(|| insta::assert_snapshot!("replay_example", out.shown()));

    let out = w.run(&["replay", "s.jsonl", "--json"]);
    assert_eq!(out.code, 0);
    let v = out.json();
    let s = &v["sessions"][0];
    let log = example_log(&w);
    assert_eq!(s["session_id"], json!(log.session_id()));
    assert_eq!(s["entries"], json!(14));
    assert_eq!(
        s["session"]["todo"]["value"],
        json!({"backoff":"done","last-error":"open"})
    );
    assert_eq!(s["session"]["role"], json!({"absent": true}));
    let tips = s["tips"].as_array().unwrap();
    assert_eq!(tips.len(), 2);
    let by_tip = |id: &str| tips.iter().find(|t| t["tip"] == json!(id)).unwrap();
    let [first, leaf] = [log.tips()[0], log.leaf_id().unwrap()];
    assert_eq!(
        by_tip(first)["branch"]["role"]["value"],
        json!({"name":"reviewer"})
    );
    assert_eq!(
        by_tip(leaf)["branch"]["role"]["value"],
        json!({"name":"writer"})
    );
    assert_eq!(by_tip(leaf)["leaf"], json!(true));
    assert_eq!(by_tip(leaf)["branch"]["todo"], json!({"absent": true}));
}

#[test]
fn replay_shows_other_extensions_custom_entries() {
    let w = World::new();
    let path = make_session(&w.work, "/project", 2);
    let mut log = SessionLog::open(&path).unwrap();
    let fork_at = log.leaf_id().unwrap().to_owned();
    log.append(NewEntry::custom("my-ext", Some(json!({"n": 1}))))
        .unwrap();
    log.append(NewEntry::custom("my-ext", Some(json!({"n": 2}))))
        .unwrap();
    log.navigate(&fork_at).unwrap();
    log.append(NewEntry::custom("other.ext", None)).unwrap();
    drop(log);
    let name = path.file_name().unwrap().to_str().unwrap();
    let out = w.run(&["replay", name]);
    assert_eq!(out.code, 0, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("replay_custom", out.shown()));
    let v = w.run(&["replay", name, "--json"]).json();
    let tips = v["sessions"][0]["tips"].as_array().unwrap().clone();
    assert_eq!(
        tips[0]["custom"]["my-ext"],
        json!({"entries": 2, "last_entry": tips[0]["tip"], "last_data": {"n": 2}})
    );
    assert_eq!(tips[1]["custom"]["other.ext"]["entries"], json!(1));
    assert_eq!(tips[1]["custom"]["other.ext"]["last_data"], Value::Null);
    assert!(
        tips[1]["custom"].get("my-ext").is_none(),
        "siblings are separate"
    );
}

#[test]
fn replay_dir_reads_every_session_below_it() {
    let w = World::new();
    let dir = w.work.join("sessions");
    std::fs::create_dir_all(dir.join("nested")).unwrap();
    std::fs::copy(EXAMPLE, dir.join("a.jsonl")).unwrap();
    make_session(&dir.join("nested"), "/p", 3);
    std::fs::write(dir.join("notes.txt"), "not a session").unwrap();
    let out = w.run(&["replay", "sessions", "--json"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let v = out.json();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 2);
    assert!(
        out.stderr.is_empty(),
        "no progress bar without a terminal: {}",
        out.stderr
    );

    // A bad file is reported and makes the exit code 1; the others are still replayed.
    std::fs::copy(
        format!("{EDGE}/corrupt-middle.jsonl"),
        dir.join("bad.jsonl"),
    )
    .unwrap();
    let out = w.run(&["replay", "sessions"]);
    assert_eq!(out.code, 1, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("replay_dir", out.shown()));
}

#[test]
fn replay_missing_path_exits_2() {
    let w = World::new();
    let out = w.run(&["replay", "nowhere"]);
    assert_eq!(out.code, 2);
    // The message every command gives for a missing session file (docs/cli.md).
    assert!(
        out.stderr
            .starts_with("error: opening nowhere: No such file or directory"),
        "{}",
        out.shown()
    );
    for cmd in [
        &["tree"][..],
        &["verify"],
        &["status"],
        &["read", "--plugin", "p"],
    ] {
        let mut args = cmd.to_vec();
        args.insert(1, "nowhere");
        let out = w.run(&args);
        assert!(
            out.stderr
                .starts_with("error: opening nowhere: No such file or directory"),
            "{args:?}: {}",
            out.shown()
        );
    }
}

#[test]
fn replay_bad_event_is_shown_and_exits_1() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.file()).unwrap();
    let out = w.run(&["replay", "s.jsonl"]);
    assert_eq!(out.code, 1, "{}", out.shown());
    assert!(out.stdout.contains("role = ERROR"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains(r#"todo = {"backoff":"done","tests":"open"}"#)
    );
}

// ---------------------------------------------------------------------------------------
// tree
// ---------------------------------------------------------------------------------------

#[test]
fn tree_draws_forks_leaf_keys_and_state_events() {
    let w = World::example();
    let out = w.run(&["tree", "s.jsonl"]);
    assert_eq!(out.code, 0);
    w.settings()
        .bind(|| insta::assert_snapshot!("tree_example", out.shown()));
    assert!(out.stdout.contains("[fork: 2]"));
    assert!(out.stdout.contains("[leaf]"));
    assert!(out.stdout.contains("state role set (branch)"));
    assert!(out.stdout.contains("state todo patch (session)"));
}

#[test]
fn tree_folds_long_linear_runs() {
    let w = World::new();
    let path = make_session(&w.work, "/p", 40);
    let mut log = SessionLog::open(&path).unwrap();
    let root = log.roots()[0].to_owned();
    let mid = log.path_to(log.leaf_id().unwrap()).unwrap()[20].to_owned();
    drop(log);
    log = SessionLog::open(&path).unwrap();
    log.navigate(&mid).unwrap();
    log.append(NewEntry::message(
        json!({"role":"user","content":"other way"}),
    ))
    .unwrap();
    drop(log);
    let out = w.run(&["tree", path.to_str().unwrap()]);
    assert_eq!(out.code, 0);
    w.settings()
        .bind(|| insta::assert_snapshot!("tree_folded", out.shown()));
    assert!(out.stdout.contains(&format!("{root} message user  [key]")));
    assert!(out.stdout.contains("… 19 entries …"), "{}", out.stdout);
    assert!(out.stdout.contains("… 17 entries …"), "{}", out.stdout);
}

#[test]
fn tree_missing_file_exits_2() {
    let w = World::new();
    let out = w.run(&["tree", "missing.jsonl"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("missing.jsonl"));
}

// ---------------------------------------------------------------------------------------
// status and force-refresh
// ---------------------------------------------------------------------------------------

#[test]
fn status_never_creates_the_database() {
    let w = World::example();
    let out = w.run(&["status", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(!w.default_db().exists(), "status created the database");
    assert!(!w.agent.join("sessions").exists());
    w.settings()
        .bind(|| insta::assert_snapshot!("status_no_db", out.shown()));
    let v = w.run(&["status", "s.jsonl", "--json"]).json();
    assert_eq!(v["database"]["exists"], json!(false));
    assert_eq!(v["lock"], Value::Null);
    assert_eq!(
        v["events"],
        json!([
            {"plugin": "role", "scope": "branch", "events": 2},
            {"plugin": "todo", "scope": "session", "events": 2},
        ])
    );
}

#[test]
fn status_shows_a_live_lock_holder() {
    let w = World::example();
    let db = w.root.join("db/states.sqlite");
    let db_arg = db.to_str().unwrap();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    let out = w.run(&["status", "s.jsonl", "--db", db_arg]);
    let json_out = w.run(&["status", "s.jsonl", "--db", db_arg, "--json"]);
    kill(child);
    assert_eq!(out.code, 0, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("status_locked", out.shown()));
    let v = json_out.json();
    assert_eq!(v["database"], json!({"path": db, "exists": true}));
    assert_eq!(v["lock"]["liveness"], json!("alive"));
    assert_eq!(v["lock"]["blocks_writers"], json!(true));
    assert_eq!(v["lock"]["action"], json!("write"));
    assert_eq!(v["lock"]["may_be_alive"], json!(true));
    // The file's facts around the library's report of the rows; no Pi holds the session.
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "file",
            "session_id",
            "entries",
            "readable",
            "database",
            "lock",
            "events"
        ]
    );
}

#[test]
fn status_relative_db_and_missing_file_exit_2() {
    let w = World::example();
    let out = w.run(&["status", "s.jsonl", "--db", "x.sqlite"]);
    assert_eq!(out.code, 2);
    let out = w.run(&["status", "missing.jsonl"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("missing.jsonl"));
}

#[test]
fn force_refresh_without_terminal_or_yes_leaves_a_live_lock_alone() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    let holder = lock_holder(&db, &sid);
    // `output()` gives the child no terminal for stdin (null, not a tty).
    let out = w.run(&["force-refresh", "s.jsonl"]);
    let after = lock_holder(&db, &sid);
    kill(child);
    assert_eq!(out.code, 1, "{}", out.shown());
    assert_eq!(after, holder, "the lock was left alone");
    assert!(out.stderr.contains("--yes"), "{}", out.stderr);
    w.settings()
        .bind(|| insta::assert_snapshot!("force_refresh_refused", out.shown()));
}

#[test]
fn force_refresh_with_yes_clears_a_live_lock_and_rereads() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    // Cache the session first, so there are rows to drop.
    assert_eq!(w.run(&["read", "s.jsonl", "--plugin", "role"]).code, 0);
    let out = w.run(&["force-refresh", "s.jsonl", "--yes"]);
    let after = lock_holder(&db, &sid);
    let write = w.run(&["write", "s.jsonl", "--plugin", "role", "--value", "1"]);
    kill(child);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(after, None);
    w.settings()
        .bind(|| insta::assert_snapshot!("force_refresh_yes", out.shown()));
    assert_eq!(write.code, 0, "a writer gets in again: {}", write.shown());
}

#[test]
fn force_refresh_clears_a_dead_holders_lock_without_asking() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    let child = live_lock(&db, &sid);
    kill(child);
    let store = Store::at(&db).unwrap();
    assert_eq!(
        store
            .peek_lock_status(&sid)
            .unwrap()
            .row()
            .expect("a lock row")
            .liveness,
        Liveness::NotAlive
    );
    let out = w.run(&["force-refresh", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(out.stdout.contains("not alive"), "{}", out.stdout);
    assert_eq!(lock_holder(&db, &sid), None);
}

#[test]
fn force_refresh_without_database_creates_none() {
    let w = World::example();
    let out = w.run(&["force-refresh", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(!w.default_db().exists());
    assert!(out.stdout.contains("no projection database"));
}

// ---------------------------------------------------------------------------------------
// verify
// ---------------------------------------------------------------------------------------

#[test]
fn verify_readable_file_exits_0() {
    let w = World::example();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 0);
    w.settings()
        .bind(|| insta::assert_snapshot!("verify_ok", out.shown()));
    let v = w.run(&["verify", "s.jsonl", "--json", "--salvage"]).json();
    assert_eq!(v["readable"], json!(true));
    assert_eq!(v["findings"], json!([]));
    assert_eq!(v["salvage"]["entries"], json!(14));
}

#[test]
fn verify_lists_warnings_and_still_exits_0() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/torn-record-middle.jsonl"), w.file()).unwrap();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("verify_torn", out.shown()));
    let v = w.run(&["verify", "s.jsonl", "--json"]).json();
    let f = &v["findings"][0];
    assert_eq!(f["kind"], json!("torn-record"));
    assert_eq!(f["severity"], json!("warning"));
    assert_eq!(f["at"], json!({"line": 4, "offset": 823}));
}

#[test]
fn verify_corrupt_file_exits_1_and_says_what_salvage_keeps() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/corrupt-middle.jsonl"), w.file()).unwrap();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 1, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("verify_corrupt", out.shown()));
    let v = w.run(&["verify", "s.jsonl", "--json"]).json();
    assert_eq!(v["readable"], json!(false));
    assert_eq!(v["error"]["line"], json!(3));
    assert_eq!(v["error"]["offset"], json!(343));
    assert_eq!(v["salvage"]["entries"], json!(3));
    assert_eq!(v["salvage"]["findings"][0]["kind"], json!("corrupt"));
}

#[test]
fn verify_names_the_entry_of_structural_errors() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/dangling-parent.jsonl"), w.file()).unwrap();
    let v = w.run(&["verify", "s.jsonl", "--json"]);
    assert_eq!(v.code, 1);
    let v = v.json();
    assert_eq!(v["error"]["entry_id"], json!("a0000003"));
    assert_eq!(v["salvage"]["findings"][0]["entry_id"], json!("a0000003"));
}

#[test]
fn verify_reports_undecodable_state_events() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.file()).unwrap();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stdout
            .contains("bad-state-event at line 4, byte 823, entry 'a0000003'")
    );
    assert!(out.stdout.contains("entry 'a0000004'"));
}

#[test]
fn verify_unreadable_header_exits_1_and_missing_file_exits_2() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/version-4.jsonl"), w.file()).unwrap();
    let out = w.run(&["verify", "s.jsonl"]);
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("salvage: cannot read it either"));
    let out = w.run(&["verify", "missing.jsonl"]);
    assert_eq!((out.code, out.stdout.as_str()), (2, ""));
    w.settings()
        .bind(|| insta::assert_snapshot!("verify_missing", out.shown()));
}

// ---------------------------------------------------------------------------------------
// list
// ---------------------------------------------------------------------------------------

#[test]
fn list_reads_headers_from_the_agents_sessions_directory() {
    let w = World::new();
    let sessions = w.agent.join("sessions");
    let a = make_session(&sessions.join("--project-a--"), "/project/a", 2);
    let b = make_session(&sessions.join("--project-b--"), "/project/b", 1);
    std::fs::write(sessions.join("junk.jsonl"), "hello\n").unwrap();
    let out = w.run(&["list"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    w.settings()
        .bind(|| insta::assert_snapshot!("list", out.shown()));

    let v = w.run(&["list", "--json"]).json();
    let rows = v["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    for p in [&a, &b] {
        let id = SessionLog::open(p).unwrap().session_id().to_owned();
        assert!(ids.contains(&id.as_str()));
    }
    assert_eq!(rows[0]["cwd"], json!("/project/a"));
    assert_eq!(rows[0]["path"], json!(a));
    assert_eq!(rows[0]["version"], json!(3));

    // An explicit folder.
    let v = w
        .run(&[
            "list",
            sessions.join("--project-b--").to_str().unwrap(),
            "--json",
        ])
        .json();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1);
}

#[test]
fn list_missing_dir() {
    let w = World::new();
    // The default folder may not exist yet: nothing to list.
    let out = w.run(&["list", "--json"]);
    assert_eq!(out.code, 0);
    assert_eq!(out.json(), json!({"sessions": []}));
    // An explicit one must.
    let out = w.run(&["list", "nowhere"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("nowhere"));
}

#[test]
fn read_of_a_plugin_with_a_bad_event_exits_2_naming_the_entry() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.file()).unwrap();
    let out = w.run(&["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!((out.code, out.stdout.as_str()), (2, ""), "{}", out.shown());
    assert!(out.stderr.contains("a0000003"), "{}", out.stderr);
    assert!(out.stderr.contains("line 4"), "{}", out.stderr);
    // Other plugins are unaffected.
    let out = w.run(&["read", "s.jsonl", "--plugin", "todo", "--scope", "session"]);
    assert_eq!(out.json(), json!({"backoff": "done", "tests": "open"}));
}

#[test]
fn status_of_a_corrupt_file_uses_a_salvage_read() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/corrupt-middle.jsonl"), w.file()).unwrap();
    let out = w.run(&["status", "s.jsonl", "--json"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(out.stderr.contains("salvage"), "{}", out.stderr);
    let v = out.json();
    assert_eq!(v["readable"], json!(false));
    assert_eq!(v["entries"], json!(3));
}

// ---------------------------------------------------------------------------------------
// Values with a leading '-', hostile names, linear output, odd files, friction
// ---------------------------------------------------------------------------------------

/// Appends one raw line to `file` as a child of its last entry; returns the new id.
fn append_child(file: &Path, id: &str, fields: Value) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let mut entry =
        json!({"id": id, "parentId": last["id"], "timestamp": "2026-01-01T00:00:00.000Z"});
    entry
        .as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    use std::io::Write as _;
    writeln!(f, "{entry}").unwrap();
    id.to_owned()
}

#[test]
fn negative_numbers_are_values() {
    let w = World::example();
    for (value, shown) in [("-1", "-1"), ("-2.5", "-2.5")] {
        let out = w.run(&["write", "s.jsonl", "--plugin", "n", "--value", value]);
        assert_eq!(out.code, 0, "{value}: {}", out.shown());
        assert_eq!(out.line().len(), 8, "{value}: {}", out.shown());
        let out = w.run(&["read", "s.jsonl", "--plugin", "n"]);
        assert_eq!((out.code, out.line().as_str()), (0, shown), "{value}");
    }
    // A merge patch that is not an object replaces the value (RFC 7396).
    let out = w.run(&["patch", "s.jsonl", "--plugin", "n", "--merge", "-5"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let out = w.run(&["read", "s.jsonl", "--plugin", "n"]);
    assert_eq!(out.line(), "-5");
    // `--value=-7` and a value after `--`-less flags keep working too.
    let out = w.run(&["write", "s.jsonl", "--value=-7", "--plugin", "n"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(w.run(&["read", "s.jsonl", "--plugin", "n"]).line(), "-7");
    // Something that is not JSON is still refused, by the JSON parser.
    let out = w.run(&["write", "s.jsonl", "--plugin", "n", "--value", "-x"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("--value is not valid JSON"),
        "{}",
        out.stderr
    );
}

#[test]
fn names_from_the_file_cannot_drive_the_terminal() {
    let w = World::example();
    let f = w.file();
    let title = "x\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}1m\u{202e}";
    append_child(
        &f,
        "e0e0e001",
        json!({"type": "custom", "customType": title, "data": {"k": "\u{1b}[2J"}}),
    );
    append_child(
        &f,
        "e0e0e002",
        json!({"type": "custom", "customType": format!("session-state/ev\u{1b}[2Jil"),
               "data": {"v": 1, "scope": "branch", "op": "set", "value": 1}}),
    );
    for args in [
        &["tree", "s.jsonl"][..],
        &["replay", "s.jsonl"],
        &["replay", "."],
        &["status", "s.jsonl"],
        &["verify", "s.jsonl"],
    ] {
        let out = w.run(args);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(
            !all.chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{args:?} printed a raw control character: {all:?}"
        );
        if args[0] != "verify" {
            assert!(
                all.contains(r"\u001b[2J") || all.contains(r"\u001b]0;pwned\u0007"),
                "{args:?}: the name is shown, escaped: {all}"
            );
        }
    }
    let out = w.run(&["tree", "s.jsonl"]);
    assert!(
        out.stdout
            .contains(r"custom x\u001b]0;pwned\u0007\u001b[2J\u009b1m\u202e"),
        "{}",
        out.stdout
    );
    // JSON output stays JSON, with the same strings.
    let out = w.run(&["replay", "s.jsonl", "--json"]);
    let v = out.json();
    assert!(
        v["sessions"][0]["tips"][1]["custom"].get(title).is_some(),
        "{v}"
    );
}

/// A session of `n` forks, each inside the previous one: fork `i` is a state event of
/// plugin `depth` (value `i`) with two children, a message (a tip) and fork `i + 1`.
fn nested_forks(path: &Path, n: usize) -> usize {
    use std::fmt::Write as _;
    let mut s = String::from(
        "{\"type\":\"session\",\"version\":3,\"id\":\"01a22bc8-9653-71cb-b4ad-000000000000\",\
         \"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n",
    );
    let mut parent = "null".to_owned();
    for i in 0..n {
        let fork = format!("f{i:07}");
        let _ = writeln!(
            s,
            "{{\"type\":\"custom\",\"customType\":\"session-state/depth\",\"data\":{{\"v\":1,\
             \"scope\":\"branch\",\"op\":\"set\",\"value\":{i}}},\"id\":\"{fork}\",\
             \"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\"}}"
        );
        let _ = writeln!(
            s,
            "{{\"type\":\"message\",\"id\":\"t{i:07}\",\"parentId\":\"{fork}\",\
             \"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"user\",\
             \"content\":\"hi\",\"timestamp\":1}}}}"
        );
        parent = format!("\"{fork}\"");
    }
    std::fs::write(path, s).unwrap();
    2 * n
}

#[test]
fn tree_and_replay_output_is_linear_in_nested_forks() {
    let w = World::new();
    let f = w.work.join("nested.jsonl");
    let entries = nested_forks(&f, 2000);
    let out = w.run(&["tree", "nested.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.len() <= 120 * entries,
        "tree printed {} bytes for {entries} entries",
        out.stdout.len()
    );
    // Every entry is still drawn, the deep ones with the depth marker.
    assert_eq!(out.stdout.lines().count(), entries + 1);
    assert!(
        out.stdout.lines().any(|l| l.starts_with("[+1987] ")
            && l.ends_with("└─ f0001999 state depth set (branch) 1999  [key]")),
        "{}",
        &out.stdout[out.stdout.len() - 2000..]
    );
    let widest = out.stdout.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(widest < 160, "a line of {widest} characters");

    // replay: one row per tip, each with the value of its own fork.
    let out = w.run(&["replay", "nested.jsonl", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = out.json();
    let tips = v["sessions"][0]["tips"].as_array().unwrap();
    assert_eq!(tips.len(), 2000);
    for (i, t) in tips.iter().enumerate() {
        assert_eq!(t["tip"], json!(format!("t{i:07}")));
        assert_eq!(t["branch"]["depth"]["value"], json!(i), "{t}");
        assert_eq!(t["depth"], json!(i + 2));
    }
    let text = w.run(&["replay", "nested.jsonl"]);
    assert!(text.stdout.len() <= 120 * entries, "{}", text.stdout.len());
}

/// Runs with a time limit, so a command that blocks fails the test instead of hanging it.
fn run_bounded(w: &World, args: &[&str]) -> Out {
    let child = w
        .cmd(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(out) => Out::of(out.unwrap()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("session-state {args:?} still running after 60 s: it blocked");
        }
    }
}

#[cfg(unix)] // symlinks, FIFOs or inode numbers
#[test]
fn directory_scans_skip_what_is_not_a_regular_file() {
    let w = World::new();
    let dir = w.work.join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(EXAMPLE, dir.join("a.jsonl")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("fifo.jsonl"))
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo failed");
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.jsonl")).unwrap();
    std::os::unix::fs::symlink("a.jsonl", dir.join("link.jsonl")).unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("dangling.jsonl")).unwrap();
    for cmd in ["list", "replay"] {
        let out = run_bounded(&w, &[cmd, "sessions", "--json"]);
        assert_eq!(out.code, 0, "{cmd}: {}", out.shown());
        let v = out.json();
        let files: Vec<&str> = v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s[if cmd == "list" { "path" } else { "file" }]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(files, ["sessions/a.jsonl", "sessions/link.jsonl"], "{cmd}");
        for (name, kind) in [
            ("fifo.jsonl", "a FIFO"),
            ("zero.jsonl", "a character device"),
            ("dangling.jsonl", "No such file"),
        ] {
            assert!(
                out.stderr
                    .contains(&format!("warning: skipped sessions/{name}: {kind}")),
                "{cmd} {name}: {}",
                out.stderr
            );
        }
    }
    // Named directly, a FIFO or a device is refused at once, before it is opened.
    for args in [
        &["verify", "/dev/zero"][..],
        &["read", "/dev/zero", "--plugin", "x"],
        &["write", "/dev/zero", "--plugin", "x", "--value", "1"],
        &["tree", "sessions/fifo.jsonl"],
        &["replay", "sessions/fifo.jsonl"],
        &["status", "sessions/zero.jsonl"],
        &["verify", "sessions/fifo.jsonl"],
    ] {
        let out = run_bounded(&w, args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.shown());
        assert!(
            out.stderr.contains("not a regular file"),
            "{args:?}: {}",
            out.stderr
        );
    }
}

#[test]
fn list_walks_and_limits_headers_as_the_library_does() {
    let w = World::new();
    let dir = w.work.join("sessions");
    let folder = dir.join("--p--");
    std::fs::create_dir_all(&folder).unwrap();
    // Line 1 over the one header limit (1 MiB, Pi's own), and a valid header of 200 KiB.
    std::fs::write(folder.join("huge.jsonl"), vec![b' '; (1 << 20) + 1]).unwrap();
    let pad = "x".repeat(200 << 10);
    std::fs::write(
        folder.join("long.jsonl"),
        format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"long\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/{pad}\"}}\n"
        ),
    )
    .unwrap();
    // In DIR itself, and two folders down (not walked).
    make_session(&dir, "/p", 1);
    let deeper = dir.join("archive").join("--old--");
    make_session(&deeper, "/old", 1);

    let out = w.run(&["list", "sessions", "--json"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stderr
            .contains("skipped sessions/--p--/huge.jsonl: line 1 is longer than 1 MiB"),
        "{}",
        out.stderr
    );
    let listed: Vec<String> = out.json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap().to_owned())
        .collect();
    // The library's listing of the same folder: the same files, in the same order, and
    // the same file refused.
    let library = session_state::PiJsonlStore::new(&dir).scan().unwrap();
    let expected: Vec<String> = library
        .sessions
        .iter()
        .map(|s| {
            Path::new("sessions")
                .join(s.path.strip_prefix(&dir).unwrap())
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(listed, expected);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.contains(&"sessions/--p--/long.jsonl".to_owned()));
    assert!(listed.iter().all(|p| !p.contains("archive")), "{listed:?}");
    let problems: Vec<_> = library.problems.iter().map(|p| &p.path).collect();
    assert_eq!(problems, [&folder.join("huge.jsonl")]);
    assert!(
        library.problems[0]
            .error
            .to_string()
            .contains("line 1 is longer than 1 MiB"),
        "{}",
        library.problems[0].error
    );
}

#[test]
fn empty_directories_say_so() {
    let w = World::new();
    std::fs::create_dir_all(w.work.join("empty")).unwrap();
    for cmd in ["list", "replay"] {
        let out = w.run(&[cmd, "empty"]);
        assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{cmd}");
        assert_eq!(out.stderr, "no *.jsonl session files in empty\n", "{cmd}");
        let out = w.run(&[cmd, "empty", "--json"]);
        assert_eq!(out.json(), json!({"sessions": []}), "{cmd}");
    }
    // Files, but no sessions among them.
    std::fs::write(w.work.join("empty/notes.jsonl"), "{}\n").unwrap();
    let out = w.run(&["list", "empty"]);
    assert!(
        out.stderr.contains(
            "no sessions in empty: none of its 1 *.jsonl file(s) starts with a session header"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn messages_point_to_what_exists() {
    let w = World::example();
    // A BOM: `read` has no --salvage; the message points to `verify --salvage`.
    std::fs::copy(format!("{EDGE}/bom.jsonl"), w.work.join("bom.jsonl")).unwrap();
    let out = w.run(&["read", "bom.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert!(
        !out.stderr.contains("read with --salvage")
            && out.stderr.contains("`session-state verify --salvage`"),
        "{}",
        out.stderr
    );
    // `read` of a missing file says "opening", as the other commands do.
    let out = w.run(&["read", "missing.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("error: opening missing.jsonl: No such file"),
        "{}",
        out.stderr
    );
    // `verify` of a corrupt file does not tell you to run the salvage report it shows.
    std::fs::copy(
        format!("{EDGE}/corrupt-middle.jsonl"),
        w.work.join("bad.jsonl"),
    )
    .unwrap();
    let out = w.run(&["verify", "bad.jsonl"]);
    assert_eq!(out.code, 1);
    assert!(
        !out.stdout.contains("run `session-state verify") && out.stdout.contains("salvage: "),
        "{}",
        out.stdout
    );
    // `replay DIR` names a refused file once.
    std::fs::create_dir_all(w.work.join("d")).unwrap();
    std::fs::copy(
        format!("{EDGE}/corrupt-middle.jsonl"),
        w.work.join("d/bad.jsonl"),
    )
    .unwrap();
    let out = w.run(&["replay", "d"]);
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stdout.matches("d/bad.jsonl").count(),
        1,
        "{}",
        out.stdout
    );
    // The refusal to append after an unparsable last line: no nested parentheses.
    let e = session_state::Error::Log(session_state::LogError::TrailingGarbage {
        path: "s.jsonl".into(),
        at: session_state::Location {
            line: 16,
            offset: 4699,
        },
        detail: "expected value at line 1 column 1".into(),
    });
    let text = e.to_string();
    assert!(
        text.starts_with(
            "s.jsonl: the last complete line, at line 16 (byte offset 4699), is not valid JSON: \
             expected value"
        ),
        "{text}"
    );
}

#[test]
fn write_says_when_it_waits_for_a_terminal() {
    let w = World::example();
    let bin = native_bin();
    // `script` gives the command a terminal on stdin; Ctrl-D (\x04) ends the value.
    let out = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("{} write s.jsonl --plugin n", bin.display()),
            "/dev/null",
        ])
        .env("PI_CODING_AGENT_DIR", &w.agent)
        .env("HOME", w.root.join("home"))
        .current_dir(&w.work)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(b"5\n\x04")?;
            c.wait_with_output()
        })
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("reading the value from stdin… (Ctrl-D to end)"),
        "{shown}"
    );
    assert_eq!(w.run(&["read", "s.jsonl", "--plugin", "n"]).line(), "5");
    // Without a terminal: no such line.
    let out = w.run_stdin(&["write", "s.jsonl", "--plugin", "n"], "6");
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
}

/// The binary run with `args` (one shell word list) on a terminal that `script` gives it,
/// in `w`, stdin empty; what it printed (stdout and stderr both come through the terminal).
fn on_a_terminal(w: &World, args: &str) -> std::process::Output {
    let bin = native_bin();
    std::process::Command::new("script")
        .args(["-qec", &format!("{} {args}", bin.display()), "/dev/null"])
        .env("PI_CODING_AGENT_DIR", &w.agent)
        .env("HOME", w.root.join("home"))
        .current_dir(&w.work)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// `write` keeps stdout the new id alone (scripts take it as it is); on a terminal it adds,
/// on stderr, the `history --at <id>` that shows the state through the new entry: after a
/// write `--at X`, the state at X itself does not include the entry, which is X's child.
#[test]
fn write_prints_the_id_alone_and_on_a_terminal_the_history_that_shows_it() {
    let w = World::example();
    let out = on_a_terminal(
        &w,
        "write s.jsonl --plugin role --at ddd707d7 --value '{\"name\":\"auditor\"}'",
    );
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    let mut lines = shown.lines();
    let id = lines.next().unwrap().to_owned();
    assert_eq!(id.len(), 8, "the id alone on its line: {shown}");
    let hint = lines.next().unwrap_or_default();
    let history = format!("session-state history s.jsonl --plugin role --at {id}");
    assert!(
        hint.contains(&format!("appended {id}; its state: {history}"))
            && hint.contains(
                "(--at ddd707d7 shows the state before it: the new entry is a child of ddd707d7)"
            ),
        "{shown}"
    );
    // The command the hint shows lists the new entry; the one at --at does not.
    let args: Vec<&str> = history.split(' ').skip(1).collect();
    let through = w.run(&args);
    assert_eq!(through.code, 0, "{}", through.shown());
    assert!(through.stdout.contains(&id), "{}", through.shown());
    let before = w.run(&["history", "s.jsonl", "--plugin", "role", "--at", "ddd707d7"]);
    assert!(!before.stdout.contains(&id), "{}", before.shown());
    // Without a terminal: the id alone on stdout, nothing on stderr.
    let out = w.run(&[
        "write",
        "s.jsonl",
        "--plugin",
        "role",
        "--value",
        "{\"name\":\"x\"}",
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.stdout.trim_end().len(), 8, "{}", out.shown());
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.shown());
    assert_eq!(out.stderr, "", "{}", out.shown());
    // Session scope: the hint names the scope.
    let out = on_a_terminal(&w, "write s.jsonl --plugin todo --scope session --value 1");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("--plugin todo --scope session --at "),
        "{shown}"
    );
}

/// `write --help` says the command line does not know an extension's `validate`, and how to
/// check a value first.
#[test]
fn write_help_says_the_cli_does_not_know_an_extensions_validate() {
    let w = World::new();
    let help = w.run(&["write", "--help"]).stdout;
    assert!(
        help.contains("The command line does not know an extension's `validate`")
            && help.contains("StateValidationError")
            && help.contains("Check a value first with the extension")
            && help.contains("@session-state/pi/testing"),
        "{help}"
    );
}

/// `status` says what each path is: the session file (or the session in a store), and the
/// projection database, a local cache.
#[test]
fn status_says_what_each_path_is() {
    let w = World::example();
    let out = w.run(&["status", "s.jsonl"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stdout.contains(
            "(s.jsonl)\n          the session file: its lines are the session and its state\n"
        ) && out.stdout.contains(
            "states.sqlite\n          the projection cache (SQLite): folds cached from the file, and the write lock\n"
        ),
        "{}",
        out.shown()
    );
}

#[test]
fn library_warnings_reach_stderr() {
    let w = World::example();
    let db = w.default_db();
    let sid = example_log(&w).session_id().to_owned();
    kill(live_lock(&db, &sid));
    let out = w.run(&["write", "s.jsonl", "--plugin", "n", "--value", "1"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stderr.contains("WARN") && out.stderr.contains("taking over the write lock"),
        "{}",
        out.stderr
    );
    // Quiet by default: a plain read prints nothing on stderr; -v is accepted anywhere.
    let out = w.run(&["read", "s.jsonl", "--plugin", "n"]);
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let out = w.run(&["-v", "read", "s.jsonl", "--plugin", "n", "-vv"]);
    assert_eq!(out.code, 0, "{}", out.shown());
}

#[test]
fn status_and_replay_print_the_library_event_counts() {
    let w = World::new();
    std::fs::copy(format!("{EDGE}/bad-envelope.jsonl"), w.file()).unwrap();
    let counts = session_state::inspect::event_counts(&SessionLog::open(w.file()).unwrap());
    assert_eq!(counts.of("role").invalid, 2, "{counts:?}");
    let replay = w.run(&["replay", "s.jsonl", "--json"]).json();
    assert_eq!(
        replay["sessions"][0]["events"],
        serde_json::to_value(&counts).unwrap()
    );
    let status = w.run(&["status", "s.jsonl", "--json"]).json();
    assert_eq!(
        status["events"],
        json!([
            {"plugin": "role", "scope": "invalid", "events": 2},
            {"plugin": "todo", "scope": "session", "events": 2},
        ])
    );
    assert_eq!(
        status["events"],
        serde_json::to_value(counts.rows()).unwrap()
    );
}

// ---------------------------------------------------------------------------------------
// stores: --store, $SESSION_STATE_STORE, session ids and prefixes
// ---------------------------------------------------------------------------------------

const STORE_ENV: &str = "SESSION_STATE_STORE";

impl World {
    /// A SQLite store of this world (created by the first command that opens it).
    fn store_url(&self) -> String {
        format!("sqlite://{}", self.root.join("store.sqlite").display())
    }

    /// A command with `$SESSION_STATE_STORE` set.
    fn run_env(&self, store: &str, args: &[&str]) -> Out {
        Out::of(self.cmd(args).env(STORE_ENV, store).output().unwrap())
    }

    /// `work/<name>`: the example session under another session id.
    fn session_with_id(&self, name: &str, id: &str) -> PathBuf {
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
    fn import(&self, file: &Path) -> String {
        let url = self.store_url();
        let out = self.run(&["import", file.to_str().unwrap(), "--store", &url]);
        assert_eq!(out.code, 0, "{}", out.shown());
        out.line()
    }
}

/// What a user sees of a command: stdout and stderr.
fn seen(out: &Out) -> String {
    format!("{}{}", out.stdout, out.stderr)
}

#[test]
fn a_url_typo_with_a_password_never_shows_the_password() {
    let w = World::example();
    for url in [
        "postgres:/u:s3cret@h/db",
        "postgresql:u:s3cret@h/db",
        "mysql://u:s3cret@h/db",
        "sqlite://u:s3cret@h/db",
        "u:s3cret@h/db",
        "postgres://u:s3cret@127.0.0.1:1/db",
        "postgres://u:s3/cret@127.0.0.1:1/db",
    ] {
        for args in [
            &["list"][..],
            &["read", "0195f1d0", "--plugin", "role"],
            &["import", "s.jsonl"],
        ] {
            let mut with_flag = args.to_vec();
            with_flag.extend(["--store", url]);
            for out in [w.run(&with_flag), w.run_env(url, args)] {
                assert_eq!(out.code, 2, "{url} {args:?}: {}", out.shown());
                assert!(
                    !seen(&out).contains("s3cret") && !seen(&out).contains("cret@"),
                    "{url} {args:?}: {}",
                    out.shown()
                );
                assert_eq!(out.stderr.matches("error:").count(), 1, "{}", out.shown());
            }
        }
    }
    // A typo of a known scheme says what the scheme looks like.
    let out = w.run(&["list", "--store", "postgres:/u:s3cret@h/db"]);
    assert!(
        out.stderr.contains("starts with postgres://"),
        "{}",
        out.shown()
    );
}

#[test]
fn store_none_means_files_even_when_the_variable_is_set() {
    let w = World::example();
    let url = w.store_url();
    let out = w.run_env(
        &url,
        &["read", "s.jsonl", "--plugin", "role", "--store", "none"],
    );
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.stdout, "{\"name\":\"writer\"}\n");
    let before = std::fs::metadata(w.file()).unwrap().len();
    let out = w.run_env(
        &url,
        &[
            "write", "s.jsonl", "--plugin", "mood", "--value", "1", "--store", "none",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        std::fs::metadata(w.file()).unwrap().len() > before,
        "the file got the event"
    );
    let out = w.run_env(&url, &["tree", "s.jsonl", "--store=none"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        !w.root.join("store.sqlite").exists(),
        "the store was never opened"
    );
    // An empty variable is no store either.
    let out = w.run_env("", &["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    // import needs a store, and says that none is files.
    let out = w.run(&["import", "s.jsonl", "--store", "none"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("import needs a store"),
        "{}",
        out.shown()
    );
}

#[test]
fn a_message_caused_by_the_variable_names_it() {
    let w = World::example();
    // A URL that cannot be opened.
    let out = w.run_env(
        "sqlite://relative.sqlite",
        &["read", "s.jsonl", "--plugin", "role"],
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.starts_with("error: $SESSION_STATE_STORE: ")
            && out.stderr.contains("--store none"),
        "{}",
        out.shown()
    );
    // With --store, the message names --store, not the variable.
    let out = w.run(&[
        "read",
        "s.jsonl",
        "--plugin",
        "role",
        "--store",
        "sqlite://relative.sqlite",
    ]);
    assert!(
        out.stderr.starts_with("error: --store: ") && !out.stderr.contains(STORE_ENV),
        "{}",
        out.shown()
    );
    // A file name where the variable's store wants a session id.
    let url = w.store_url();
    let out = w.run_env(&url, &["read", "s.jsonl", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("no stored session has the id s.jsonl")
            && out.stderr.contains("$SESSION_STATE_STORE")
            && out.stderr.contains("--store none"),
        "{}",
        out.shown()
    );
    let out = w.run(&["read", "s.jsonl", "--plugin", "role", "--store", &url]);
    assert!(
        out.stderr.contains("without it, by its file") && !out.stderr.contains(STORE_ENV),
        "{}",
        out.shown()
    );
}

#[test]
fn list_dir_under_the_variable_prints_one_error() {
    let w = World::example();
    let url = w.store_url();
    let out = w.run_env(&url, &["list", "."]);
    assert_eq!(out.code, 2, "{}", out.shown());
    assert_eq!(out.stderr.matches("error:").count(), 1, "{}", out.shown());
    assert!(
        out.stderr.contains("$SESSION_STATE_STORE") && out.stderr.contains("--store none"),
        "{}",
        out.shown()
    );
    // What it suggests works.
    let out = w.run_env(&url, &["list", "--store", "none", "."]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(out.stdout.contains("01a22bc8-9653-71cb-b4ad-8e4c64f53380"));
    // And without DIR, the store's sessions.
    w.import(&w.file());
    let out = w.run_env(&url, &["list"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stdout
            .starts_with("01a22bc8-9653-71cb-b4ad-8e4c64f53380  ")
    );
}

#[test]
fn a_unique_prefix_names_a_stored_session() {
    let w = World::new();
    let url = w.store_url();
    let a_id = "0195f1d0-aaaa-7000-8000-000000000001";
    let b_id = "0195f1d0-bbbb-7000-8000-000000000002";
    let a = w.session_with_id("a.jsonl", a_id);
    let b = w.session_with_id("b.jsonl", b_id);
    // An id that another id starts with: named by itself, never ambiguous.
    let long = w.session_with_id("long.jsonl", &format!("{a_id}-copy"));
    assert_eq!(w.import(&a), a_id, "import prints the whole id");
    assert_eq!(w.import(&b), b_id);
    assert_eq!(w.import(&long), format!("{a_id}-copy"));
    let s = ["--store", url.as_str()];
    let run = |args: &[&str]| w.run(&[args, &s[..]].concat());
    let out = run(&["read", "0195f1d0-b", "--plugin", "role"]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "{\"name\":\"writer\"}\n"),
        "{}",
        out.shown()
    );
    let out = run(&[
        "write",
        "0195f1d0-bb",
        "--plugin",
        "mood",
        "--value",
        "\"calm\"",
    ]);
    assert_eq!(out.code, 0, "{}", out.shown());
    let out = run(&["read", b_id, "--plugin", "mood"]);
    assert_eq!(out.stdout, "\"calm\"\n", "the prefix named b");
    let out = run(&["read", a_id, "--plugin", "mood"]);
    assert_eq!(
        out.code, 1,
        "the exact id names a, not its longer neighbour"
    );
    let out = run(&["export", "0195f1d0-a"]);
    assert_eq!(
        out.code,
        2,
        "a prefix of a and of its neighbour: {}",
        out.shown()
    );
    let out = run(&["export", a_id]);
    assert_eq!(
        out.stdout.as_bytes(),
        std::fs::read(&a).unwrap(),
        "{}",
        out.shown()
    );
    let out = run(&["tree", "0195f1d0-b"]);
    assert_eq!(out.code, 0, "{}", out.shown());
    // Ambiguous: one error, listing every candidate.
    let out = run(&["read", "0195f1d0", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert_eq!(out.stderr.matches("error:").count(), 1, "{}", out.shown());
    for id in [a_id, b_id] {
        assert!(out.stderr.contains(id), "{}", out.shown());
    }
    assert!(
        out.stderr.contains("give more of the id"),
        "{}",
        out.shown()
    );
    let out = run(&["read", "ffff", "--plugin", "role"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("no stored session has the id ffff"),
        "{}",
        out.shown()
    );
}

#[test]
fn status_and_verify_name_a_stored_session_by_its_store_and_id() {
    let w = World::example();
    let url = w.store_url();
    let id = w.import(&w.file());
    let label = format!("{url}#{id}");
    // The commands' temporary directory: a temporary copy of the session would be here.
    let tmp = w.root.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp_text = tmp.to_str().unwrap();
    let prefix = &id[..8];
    let run = |args: &[&str]| {
        let args = [args, &["--store", url.as_str()][..]].concat();
        Out::of(w.cmd(&args).env("TMPDIR", &tmp).output().unwrap())
    };
    let no_temporary_path = |out: &Out| {
        assert!(
            !seen(out).contains(tmp_text) && !seen(out).contains("session.jsonl"),
            "{}",
            out.shown()
        );
    };
    let out = run(&["status", prefix]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert!(
        out.stdout.contains(&format!(
            "session   {id} ({label})\n          in the store: its lines there are the session and its state\n"
        )) && out.stdout.contains(
            "          this machine's projection cache (SQLite) of the stored session: folds cached from the store's lines, and this machine's write lock\n"
        ),
        "{}",
        out.shown()
    );
    no_temporary_path(&out);
    for args in [&["verify", prefix][..], &["verify", prefix, "--salvage"]] {
        let out = run(args);
        assert_eq!(out.code, 0, "{}", out.shown());
        assert!(
            out.stdout
                .starts_with(&format!("{label}: readable: session {id}, ")),
            "{}",
            out.shown()
        );
        no_temporary_path(&out);
    }
    for args in [
        &["status", prefix, "--json"][..],
        &["verify", prefix, "--json"],
        &["verify", prefix, "--salvage", "--json"],
    ] {
        let out = run(args);
        assert_eq!(out.code, 0, "{}", out.shown());
        let v = out.json();
        assert_eq!(v["file"], json!(label), "{}", out.shown());
        assert_eq!(v["session_id"], json!(id), "{}", out.shown());
        no_temporary_path(&out);
    }
    // They read the store's lines: nothing was copied out.
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}

#[test]
fn an_id_with_escape_characters_is_printed_escaped() {
    let w = World::new();
    let url = w.store_url();
    let raw = |n: u8| format!("x\u{1b}]0;pwned\u{7}\u{202e}-{n}");
    let shown = |n: u8| format!("x\\u001b]0;pwned\\u0007\\u202e-{n}");
    w.session_with_id("one.jsonl", &raw(1));
    w.session_with_id("two.jsonl", &raw(2));
    let out = w.run(&["import", "one.jsonl", "--store", &url]);
    assert_eq!(out.code, 0, "{}", out.shown());
    assert_eq!(out.stdout, format!("{}\n", shown(1)));
    w.import(&w.work.join("two.jsonl"));
    let out = w.run(&["list", "--store", &url]);
    assert!(out.stdout.contains(&shown(1)) && out.stdout.contains(&shown(2)));
    // An ambiguous prefix lists the candidates, escaped.
    let out = w.run(&["read", "x", "--plugin", "role", "--store", &url]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains(&shown(1)) && out.stderr.contains(&shown(2)),
        "{}",
        out.shown()
    );
    for out in [&out, &w.run(&["list", "--store", &url])] {
        assert!(
            !seen(out).contains('\u{1b}') && !seen(out).contains('\u{202e}'),
            "{}",
            out.shown()
        );
    }
}
