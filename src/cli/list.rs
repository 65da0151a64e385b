//! `list`: sessions from their header lines only. Only the first line of each file is
//! read (at most 64 KiB of it), so thousands of large sessions list in moments.

use super::{CmdResult, Failure, emit_json, emit_text, fail, jsonl_files, term_safe, warn};
use serde_json::{Value, json};
use session_state::LocationInputs;
use session_state::ProjectTrust;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

pub(crate) const EXAMPLES: &str = "\
Examples:
  session-state list
  session-state list ~/.pi/agent/sessions --json

DIR defaults to $PI_CODING_AGENT_DIR/sessions (~/.pi/agent/sessions). Files whose first
line is not a session header are skipped with a warning on stderr.
Exit codes: 0 listed (an absent default directory lists nothing); 2 DIR cannot be read.";

/// Headers longer than this are not headers.
const MAX_HEADER: u64 = 64 * 1024;

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// The folder to search recursively for *.jsonl [default: $PI_CODING_AGENT_DIR/sessions]
    dir: Option<PathBuf>,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

/// The header of one file, or why it is not one.
fn header(path: &Path) -> Result<Value, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    // The scan only lists regular files; this catches one swapped in since.
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err("not a regular file".into());
    }
    let mut line = Vec::new();
    BufReader::with_capacity(8192, file.take(MAX_HEADER))
        .read_until(b'\n', &mut line)
        .map_err(|e| e.to_string())?;
    if line.len() as u64 == MAX_HEADER && !line.ends_with(b"\n") {
        return Err(format!(
            "line 1 is longer than {} KiB, so it is not a session header",
            MAX_HEADER / 1024
        ));
    }
    let text = std::str::from_utf8(&line).map_err(|_| "line 1 is not UTF-8".to_owned())?;
    let text = text.trim_start_matches('\u{feff}').trim_end();
    if text.is_empty() {
        return Err("empty file".into());
    }
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("line 1 is not a JSON object: {e}"))?;
    if v.get("type").and_then(Value::as_str) != Some("session") {
        return Err("line 1 is not a session header".into());
    }
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .ok_or("the header has no id")?;
    Ok(json!({
        "path": path,
        "id": id,
        "cwd": v.get("cwd").and_then(Value::as_str),
        "timestamp": v.get("timestamp").and_then(Value::as_str),
        "version": v.get("version").and_then(Value::as_u64).unwrap_or(1),
        "parent_session": v.get("parentSession").and_then(Value::as_str),
    }))
}

fn default_dir() -> Result<PathBuf, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| fail(format_args!("reading the current directory: {e}")))?;
    let inputs = LocationInputs::from_env(cwd, ProjectTrust::Untrusted)
        .map_err(|e| fail(format_args!("locating the sessions directory: {e}")))?;
    Ok(inputs.agent_dir.join("sessions"))
}

pub(crate) fn run(args: ListArgs) -> CmdResult {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            let d = default_dir()?;
            if !d.exists() {
                eprintln!(
                    "no sessions directory at {}",
                    term_safe(&d.display().to_string())
                );
                if args.json {
                    emit_json(&json!({ "sessions": [] }))?;
                }
                return Ok(0);
            }
            d
        }
    };
    let files = jsonl_files(&dir)?;
    if files.is_empty() {
        eprintln!(
            "no *.jsonl session files in {}",
            term_safe(&dir.display().to_string())
        );
    }
    let mut sessions = Vec::with_capacity(files.len());
    for f in &files {
        match header(f) {
            Ok(h) => sessions.push(h),
            Err(why) => warn(format_args!("skipped {}: {why}", f.display())),
        }
    }
    if sessions.is_empty() && !files.is_empty() {
        eprintln!(
            "no sessions in {}: none of its {} *.jsonl file(s) starts with a session header",
            term_safe(&dir.display().to_string()),
            files.len()
        );
    }
    if args.json {
        emit_json(&json!({ "sessions": sessions }))?;
        return Ok(0);
    }
    // The path goes last: it is the long column.
    let cell = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    let rows: Vec<[String; 4]> = sessions
        .iter()
        .map(|s| {
            [
                cell(&s["id"]),
                cell(&s["timestamp"]),
                cell(&s["cwd"]),
                cell(&s["path"]),
            ]
        })
        .collect();
    let mut width = ["ID".len(), "TIMESTAMP".len(), "CWD".len()];
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let [w0, w1, w2] = width;
    let mut out = String::new();
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "{:<w0$}  {:<w1$}  {:<w2$}  PATH",
            "ID", "TIMESTAMP", "CWD"
        );
    }
    for [id, time, cwd, path] in &rows {
        let _ = writeln!(out, "{id:<w0$}  {time:<w1$}  {cwd:<w2$}  {path}");
    }
    emit_text(&out)?;
    Ok(0)
}
