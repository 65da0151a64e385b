//! A writer process for `tests/concurrency.rs`: writes `n` values to one session with
//! [`SessionState`], as a second agent host would.
//!
//! ```text
//! cargo run --example writer -- <file> <db> <plugin> <n> [--go | --hold]
//! ```
//!
//! Attempt `i` (from 0) writes `{"writer": <pid>, "i": i}` in branch scope and prints one
//! line, flushed at once: the new entry's id when the write is acknowledged (durable), or
//! `REFUSED <message>` when another process holds the session's write lock; then it goes
//! on with the next value.
//!
//! - `--go`: after opening the session, print `READY` and wait for a line (or EOF) on
//!   stdin before writing: a start barrier for tests.
//! - `--hold`: take the session's write lock, print `HOLDING`, wait for a line (or EOF) on
//!   stdin, release the lock, then write. A test can kill the process while it holds.
//!
//! Exits 0 once every attempt was made; 2 on any other error, with the message on stderr.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};
use session_state::{Error, LockError, Scope, SessionLog, SessionState, Store};

struct Args {
    file: PathBuf,
    db: PathBuf,
    plugin: String,
    n: u64,
    go: bool,
    hold: bool,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: writer <file> <db> <plugin> <n> [--go | --hold]";
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
    let flag = args.next();
    let flag = flag.as_deref().and_then(|f| f.to_str());
    let (go, hold) = match flag {
        None => (false, false),
        Some("--go") => (true, false),
        Some("--hold") => (false, true),
        Some(other) => return Err(format!("unknown flag {other}\n{usage}")),
    };
    Ok(Args {
        file,
        db,
        plugin,
        n,
        go,
        hold,
    })
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
    if args.hold {
        let guard = store
            .lock(log.session_id(), "write")
            .map_err(|e| e.to_string())?;
        say("HOLDING")?;
        wait_for_stdin()?;
        guard.release().map_err(|e| e.to_string())?;
    }
    if args.go {
        say("READY")?;
        wait_for_stdin()?;
    }
    let pid = std::process::id();
    for i in 0..args.n {
        match state.write(&mut log, &json!({"writer": pid, "i": i})) {
            Ok(Some(id)) => say(&id)?,
            Ok(None) => return Err(format!("value {i} changed nothing, so nothing was written")),
            Err(Error::Lock(e)) if matches!(*e, LockError::Held { .. }) => {
                say(&format!("REFUSED {e}"))?;
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
