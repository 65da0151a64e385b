//! A writer process for `tests/concurrency.rs` and `tests/write_lock.rs`: writes `n`
//! values to one session with [`SessionState`], as a second agent host would.
//!
//! ```text
//! cargo run --example writer -- <file> <db> <plugin> <n> [--go | --hold | --presence | --hold-file] [--patch] [--file] [--times]
//! ```
//!
//! Attempt `i` (from 0) writes `{"writer": <pid>, "i": i}` in branch scope and prints one
//! line, flushed at once: the new entry's id when the write is acknowledged (durable), or
//! `REFUSED <message>` when another process holds the session's write lock; then it goes
//! on with the next value.
//!
//! - `--go`: after opening the session, print `READY` and wait for a line (or EOF) on
//!   stdin before writing: a start barrier for tests.
//! - `--hold`: take the session's write lock ([`Store::lock`], after one read through the
//!   store, so that it holds the session file too), print `HOLDING`, wait for a line (or
//!   EOF) on stdin, release the lock, then write. A test can kill the process while it
//!   holds.
//! - `--presence`: the same with a running Pi's hold ([`Store::enter_presence`] with the
//!   session file), left with [`Store::leave_presence`].
//! - `--hold-file`: take the advisory lock on the session file itself, as a writer of
//!   this crate holds it in the middle of an append (`docs/lock.md`, "The file lock"),
//!   print `HOLDING`, wait for a line (or EOF) on stdin, release it, then write.
//! - `--patch`: attempt `i` merges `{"<pid>-<i>": i}` into the value instead (a patch,
//!   which a lost update would visibly drop).
//! - `--file`: write with [`SessionState::write_file`] / [`SessionState::patch_file`],
//!   without a log in memory, as the command line does.
//! - `--times`: end each attempt's line with ` @<start>-<end>`, when the attempt began and
//!   returned in nanoseconds since the Unix epoch, so a test can tell that attempts of two
//!   processes were in flight at once.
//!
//! Exits 0 once every attempt was made; 2 on any other error, with the message on stderr.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};
use session_state::On;
use session_state::{Error, Scope, SessionLog, SessionState, Store, lock::LockError};

struct Args {
    file: PathBuf,
    db: PathBuf,
    plugin: String,
    n: u64,
    go: bool,
    hold: bool,
    presence: bool,
    hold_file: bool,
    patch: bool,
    without_log: bool,
    times: bool,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: writer <file> <db> <plugin> <n> [--go | --hold | --presence | --hold-file] [--patch] \
                 [--file] [--times]";
    let mut args = std::env::args_os().skip(1);
    let mut next = |what: &str| {
        args.next()
            .ok_or_else(|| format!("missing <{what}>\n{usage}"))
    };
    let file = PathBuf::from(next("file")?);
    let db = PathBuf::from(next("db")?);
    let plugin = next("plugin")?
        .into_string()
        .map_err(|_| format!("<plugin> is not UTF-8\n{usage}"))?;
    let n = next("n")?
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("<n> must be a non-negative integer\n{usage}"))?;
    let mut parsed = Args {
        file,
        db,
        plugin,
        n,
        go: false,
        hold: false,
        presence: false,
        hold_file: false,
        patch: false,
        without_log: false,
        times: false,
    };
    for flag in args {
        let flag = flag.to_string_lossy();
        let set = match &*flag {
            "--go" => &mut parsed.go,
            "--hold" => &mut parsed.hold,
            "--presence" => &mut parsed.presence,
            "--hold-file" => &mut parsed.hold_file,
            "--patch" => &mut parsed.patch,
            "--file" => &mut parsed.without_log,
            "--times" => &mut parsed.times,
            other => return Err(format!("unknown flag {other}\n{usage}")),
        };
        *set = true;
    }
    let modes = [parsed.go, parsed.hold, parsed.presence, parsed.hold_file];
    if modes.into_iter().filter(|m| *m).count() > 1 {
        return Err(format!(
            "--go, --hold, --presence and --hold-file exclude each other\n{usage}"
        ));
    }
    Ok(parsed)
}

fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to stdout: {e}"))
}

fn wait_for_stdin() -> Result<(), String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map(drop)
        .map_err(|e| format!("reading stdin: {e}"))
}

fn run(args: Args) -> Result<(), String> {
    let mut log = SessionLog::open(&args.file).map_err(|e| e.to_string())?;
    let store = Store::at(&args.db).map_err(|e| e.to_string())?;
    let state: SessionState<Value> = store
        .state(&args.plugin, Scope::Branch)
        .map_err(|e| e.to_string())?;
    if args.hold || args.presence {
        // The store learns the session's file from a read.
        state.read(&log).map_err(|e| e.to_string())?;
    }
    if args.presence {
        let file = args.file.to_string_lossy();
        store
            .enter_presence(log.session_id(), Some(&file))
            .map_err(|e| e.to_string())?;
        say("HOLDING")?;
        wait_for_stdin()?;
        store
            .leave_presence(log.session_id())
            .map_err(|e| e.to_string())?;
    }
    if args.hold {
        let guard = store
            .lock(log.session_id(), "write")
            .map_err(|e| e.to_string())?;
        say("HOLDING")?;
        wait_for_stdin()?;
        guard.release().map_err(|e| e.to_string())?;
    }
    if args.hold_file {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&args.file)
            .map_err(|e| format!("opening {}: {e}", args.file.display()))?;
        file.lock().map_err(|e| format!("locking: {e}"))?;
        say("HOLDING")?;
        wait_for_stdin()?;
        file.unlock().map_err(|e| format!("unlocking: {e}"))?;
    }
    if args.go {
        say("READY")?;
        wait_for_stdin()?;
    }
    let pid = std::process::id();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    };
    for i in 0..args.n {
        let start = now();
        let value = match args.patch {
            true => json!({format!("{pid}-{i}"): i}),
            false => json!({"writer": pid, "i": i}),
        };
        let written = match (args.patch, args.without_log) {
            (false, false) => state.write(&mut log, &value),
            (true, false) => state.patch(&mut log, &value),
            (false, true) => state.write(On::file(&args.file, None), &value),
            (true, true) => state.patch(On::file(&args.file, None), &value),
        };
        let span = match args.times {
            true => format!(" @{start}-{}", now()),
            false => String::new(),
        };
        match written {
            Ok(Some(id)) => say(&format!("{id}{span}"))?,
            Ok(None) => return Err(format!("value {i} changed nothing, so nothing was written")),
            Err(Error::Lock(e))
                if matches!(*e, LockError::Held { .. } | LockError::FileHeld { .. }) =>
            {
                say(&format!("REFUSED {e}{span}"))?;
            }
            Err(e) => return Err(format!("write {i}: {e}")),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writer: {e}");
            ExitCode::from(2)
        }
    }
}
