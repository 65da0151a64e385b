//! The Pi package in a real terminal: Pi 1.6.0's interactive TUI runs in `tmux` (its
//! own server, on a socket in the test's folder) with the package, the scripted faux
//! model and a test extension (`pi/test/tui/`). A command writes a state; the captured
//! screen shows the transcript line (plugin, op, scope, value), and expanded (ctrl+o) the
//! whole value. Then the same session is resumed in a new Pi that loads only the package
//! (not the extension that wrote the event), and the screen shows the line again.
//!
//! The screen is polled with `capture-pane` until the text appears, with a deadline; no
//! fixed sleeps. `tmux` missing is a failure, never a skip (`.ci/run` installs it): this
//! test fails with what to install, before it builds anything, and the other tests of the
//! run still report.

use crate::common::pi_addon::{ADDON_ENV, addon, node, pi_cli, pkg};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long Pi may take to show something (a cold start compiles the extensions).
const DEADLINE: Duration = Duration::from_secs(90);

/// A tmux server of this test; killed however the test ends.
struct Tmux {
    socket: PathBuf,
}

/// Fails the calling test, with what to install, unless `tmux -V` runs.
fn require_tmux() {
    let hint = "this test drives Pi's interactive TUI in tmux; install it (`apt-get install \
                tmux`; `.ci/run` does)";
    match Command::new("tmux").arg("-V").output() {
        Ok(v) => assert!(v.status.success(), "tmux -V failed ({v:?}): {hint}"),
        Err(e) => panic!("cannot run tmux ({e}): {hint}"),
    }
}

impl Tmux {
    fn new(socket: PathBuf) -> Tmux {
        require_tmux();
        Tmux { socket }
    }

    fn try_raw(&self, args: &[&str]) -> std::io::Result<Output> {
        Command::new("tmux")
            .arg("-u")
            .arg("-S")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .env("LANG", "C.UTF-8")
            .output()
    }

    fn raw(&self, args: &[&str]) -> Output {
        self.try_raw(args)
            .unwrap_or_else(|e| panic!("cannot run tmux {args:?}: {e}"))
    }

    fn ok(&self, args: &[&str]) {
        let out = self.raw(args);
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts `pi args…` in a new detached session, 120×40, in `cwd`, with `env`.
    fn start_pi(&self, cwd: &Path, env: &[(&str, &Path)], args: &[&str]) {
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        let mut cmd = String::from("exec env");
        for (k, v) in env {
            cmd.push_str(&format!(" {k}={}", quote(&v.to_string_lossy())));
        }
        cmd.push_str(" LANG=C.UTF-8 TERM=xterm-256color");
        for a in [
            node().to_string_lossy().as_ref(),
            pi_cli().to_string_lossy().as_ref(),
        ] {
            cmd.push(' ');
            cmd.push_str(&quote(a));
        }
        for a in args {
            cmd.push(' ');
            cmd.push_str(&quote(a));
        }
        let cwd = cwd.to_string_lossy();
        self.ok(&[
            "new-session",
            "-d",
            "-x",
            "120",
            "-y",
            "40",
            "-c",
            &cwd,
            &cmd,
        ]);
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.raw(&["capture-pane", "-p", "-J"]).stdout).into_owned()
    }

    /// Polls the screen until `want` is on it; fails with the screen at the deadline.
    fn wait_for(&self, want: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(want) {
                return screen;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{want:?} did not appear within {DEADLINE:?}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend_from_slice(keys);
        self.ok(&args);
    }

    /// Quits Pi with ctrl+d (on an empty editor), as a user does, and waits until it has
    /// exited (its session_shutdown ran).
    fn quit(&self) {
        self.keys(&["C-d"]);
        let start = Instant::now();
        while self.raw(&["has-session"]).status.success() {
            assert!(
                start.elapsed() < DEADLINE,
                "Pi did not exit; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    /// Never panics: a second panic while the test unwinds would abort the whole test
    /// binary and lose every result.
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Ok(out) = self.try_raw(&["capture-pane", "-p", "-J"])
            && out.status.success()
        {
            eprintln!(
                "the screen when the test failed:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let _ = self.try_raw(&["kill-server"]);
    }
}

fn session_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn the_transcript_shows_state_events_in_a_real_terminal_and_after_a_resume() {
    require_tmux();
    let addon = addon();
    let dir = tempfile::tempdir().expect("tempdir");
    let (agent, project) = (dir.path().join("agent"), dir.path().join("project"));
    std::fs::create_dir_all(&agent).expect("mkdir");
    std::fs::create_dir_all(&project).expect("mkdir");
    let env = [
        ("HOME", dir.path()),
        ("PI_CODING_AGENT_DIR", agent.as_path()),
        (ADDON_ENV, addon),
    ];
    let tui = pkg().join("test").join("tui");
    let (package, faux, ready) = (
        pkg().to_string_lossy().into_owned(),
        tui.join("faux-ext.ts").to_string_lossy().into_owned(),
        tui.join("ready.ts").to_string_lossy().into_owned(),
    );
    let common = [
        "--offline",
        "--tui-mode",
        "regular",
        "-e",
        &package,
        "-e",
        &ready,
    ];
    let line = r#"state note · set · branch · {"text":"hello world"}"#;

    let tmux = Tmux::new(dir.path().join("tmux.sock"));
    let mut args = common.to_vec();
    args.extend(["-e", &faux, "--provider", "faux", "--model", "faux-1"]);
    tmux.start_pi(&project, &env, &args);
    tmux.wait_for("tui-test: ready");
    tmux.keys(&["/remember hello world", "Enter"]);
    let screen = tmux.wait_for(line);
    assert!(!screen.contains("renderer failed"), "{screen}");
    // A message, so that Pi creates the session file; the faux model answers.
    tmux.keys(&["hi", "Enter"]);
    tmux.wait_for("noted");
    // Expanded: the entry id and the whole value.
    tmux.keys(&["C-o"]);
    let expanded = tmux.wait_for(r#""text": "hello world""#);
    assert!(
        expanded.contains("state note · set · branch · entry "),
        "{expanded}"
    );
    tmux.keys(&["C-o"]);
    tmux.quit();

    let files = session_files(&agent.join("sessions"));
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).expect("read the session");
    assert!(
        text.contains(r#""customType":"session-state/note""#),
        "{text}"
    );

    // Resumed in a Pi with only the package: the old event is drawn the same way.
    let file = files[0].to_string_lossy().into_owned();
    let mut args = common.to_vec();
    args.extend(["--session", &file]);
    tmux.start_pi(&project, &env, &args);
    tmux.wait_for("tui-test: ready");
    let screen = tmux.wait_for(line);
    assert!(screen.contains("noted"), "the resumed transcript: {screen}");
    tmux.quit();
}

/// A `PATH` of one folder with a link to every program on this `PATH` except `tmux`.
fn path_without_tmux(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let path = std::env::var_os("PATH").unwrap_or_default();
    for d in std::env::split_paths(&path) {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name();
            let link = bin.join(&name);
            if name != "tmux" && !link.exists() {
                let _ = std::os::unix::fs::symlink(e.path(), link);
            }
        }
    }
    bin
}

#[test]
fn without_tmux_the_tui_test_fails_with_the_hint_and_the_run_still_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = path_without_tmux(dir.path());
    // This test binary again, running the TUI test and one plain test.
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "pi_tui::the_transcript_shows_state_events_in_a_real_terminal_and_after_a_resume",
            "every_test_file_is_declared_in_the_runner",
            "--test-threads=1",
        ])
        .env("PATH", &bin)
        .output()
        .expect("run the test binary");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let both = format!("--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    assert_eq!(out.status.code(), Some(101), "{:?}\n{both}", out.status);
    assert!(
        stdout.contains("test result: FAILED. 1 passed; 1 failed"),
        "{both}"
    );
    assert!(
        both.contains("cannot run tmux") && both.contains("apt-get install tmux"),
        "{both}"
    );
}
