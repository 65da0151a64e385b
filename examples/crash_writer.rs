//! A state writer for the crash and concurrency tests (`tests/crash_loop.rs`,
//! `tests/concurrency.rs`): it appends state events to one session through
//! [`SessionState`], alternating `write` and `patch`, and records every acknowledged one.
//!
//! ```text
//! cargo run --example crash_writer -- <file> <db> <ack-file> [--count N] [--go] [--plugin ID]
//! ```
//!
//! After each call returns an entry id, the writer appends `<id>\t<value>\n` to
//! `<ack-file>` with one `write()` and `fdatasync`, where `<value>` is the plugin's value
//! at that entry as one line of JSON, and only then prints `ACK <id>` on stdout (flushed).
//! A line a killed writer left without its newline is ended first, so it stays a torn
//! line of its own.
//! So every line of the ack file names a write the library had acknowledged, and a test
//! that kills the writer with SIGKILL may count stdout lines to know how far it got.
//!
//! - `--count N`: stop after N attempts (default: write until killed).
//! - `--go`: print `READY` after opening the session, then wait for one line (or EOF) on
//!   stdin before writing: a start barrier, so tests never synchronize with sleeps.
//! - `--plugin ID`: the plugin id (default `crash`).
//!
//! A write refused because another process holds the session's write lock prints
//! `REFUSED <message>` and the writer goes on with the next attempt. Any other error ends
//! the process with exit code 2 and the message on stderr.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};
use session_state::{Error, Scope, SessionLog, SessionState, Store, lock::LockError};

struct Args {
    file: PathBuf,
    db: PathBuf,
    ack: PathBuf,
    count: Option<u64>,
    go: bool,
    plugin: String,
}

const USAGE: &str = "usage: crash_writer <file> <db> <ack-file> [--count N] [--go] [--plugin ID]";

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args_os().skip(1);
    let mut positional = Vec::new();
    let mut count = None;
    let mut go = false;
    let mut plugin = "crash".to_owned();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--go") => go = true,
            Some("--count") => {
                let n = args.next().and_then(|n| n.to_str()?.parse().ok());
                count = Some(n.ok_or_else(|| format!("--count needs a number\n{USAGE}"))?);
            }
            Some("--plugin") => {
                plugin = args
                    .next()
                    .and_then(|p| p.into_string().ok())
                    .ok_or_else(|| format!("--plugin needs an id\n{USAGE}"))?;
            }
            Some(f) if f.starts_with("--") => return Err(format!("unknown flag {f}\n{USAGE}")),
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [file, db, ack] = <[PathBuf; 3]>::try_from(positional)
        .map_err(|_| format!("expected <file> <db> <ack-file>\n{USAGE}"))?;
    Ok(Args {
        file,
        db,
        ack,
        count,
        go,
        plugin,
    })
}

fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to stdout: {e}"))
}

/// Appends one acknowledgement durably: one `write()`, then `fdatasync`.
fn record(ack: &mut File, id: &str, value: &Value) -> Result<(), String> {
    let line = format!("{id}\t{value}\n");
    ack.write_all(line.as_bytes())
        .and_then(|()| ack.sync_data())
        .map_err(|e| format!("recording the acknowledgement of {id}: {e}"))
}

/// A SIGKILL can cut a `write()` at a page boundary, so a killed writer may have left a
/// line without its newline (never acknowledged on stdout: `ACK` follows the fsync).
/// Ending that line first keeps this writer's records on lines of their own.
fn close_torn_line(ack: &mut File) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let len = ack.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    ack.seek(SeekFrom::Start(len - 1))?;
    ack.read_exact(&mut last)?;
    if last[0] != b'\n' {
        ack.write_all(b"\n")?;
        ack.sync_data()?;
    }
    Ok(())
}

fn run(args: Args) -> Result<(), String> {
    let mut log = SessionLog::open(&args.file).map_err(|e| e.to_string())?;
    let state: SessionState<Value> = Store::at(&args.db)
        .and_then(|store| store.state(&args.plugin, Scope::Branch))
        .map_err(|e| e.to_string())?;
    let mut ack = OpenOptions::new()
        .read(true)
        .create(true)
        .append(true)
        .open(&args.ack)
        .map_err(|e| format!("opening {}: {e}", args.ack.display()))?;
    close_torn_line(&mut ack).map_err(|e| format!("reading {}: {e}", args.ack.display()))?;
    if args.go {
        say("READY")?;
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| format!("reading stdin: {e}"))?;
    }
    let pid = std::process::id();
    let mut i: u64 = 0;
    while args.count.is_none_or(|n| i < n) {
        // Every value differs from the one before (the pid and counter are in it), so
        // every call appends.
        let result = if i.is_multiple_of(2) {
            let items: Vec<u64> = (0..i % 7).collect();
            state.write(&mut log, &json!({"pid": pid, "i": i, "items": items}))
        } else {
            state.patch(&mut log, &json!({"i": i, "patched": pid, "items": null}))
        };
        match result {
            Ok(Some(id)) => {
                let value = state
                    .read_at(&log, &id)
                    .map_err(|e| format!("reading back {id}: {e}"))?
                    .ok_or_else(|| format!("{id}: the value just written reads as absent"))?;
                record(&mut ack, &id, &value)?;
                say(&format!("ACK {id}"))?;
            }
            Ok(None) => {
                return Err(format!(
                    "attempt {i} changed nothing, so nothing was written"
                ));
            }
            Err(Error::Lock(e)) if matches!(*e, LockError::Held { .. }) => {
                say(&format!("REFUSED {e}"))?;
            }
            Err(e) => return Err(format!("attempt {i}: {e}")),
        }
        i += 1;
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crash_writer: {e}");
            ExitCode::from(2)
        }
    }
}
