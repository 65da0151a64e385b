//! `list`: sessions from their header lines only, as the library lists them
//! ([`PiJsonlStore::scan`]: the one walk, the one header reader and its one limit). Only
//! the first line of each file is read, so thousands of large sessions list in moments.

use super::store::{Origin, Sessions};
use super::{CmdResult, Failure, emit_json, emit_text, fail, skipped, term_safe};
use crate::PiJsonlStore;
use crate::persistence::ListedSession;
use crate::settings::{LocationInputs, ProjectTrust};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub(crate) const EXAMPLES: &str = "\
Examples:
  session-state list
  session-state list ~/.pi/agent/sessions --json
  session-state list --store sqlite:///srv/sessions.sqlite

DIR defaults to $PI_CODING_AGENT_DIR/sessions (~/.pi/agent/sessions). Files whose first
line is not a session header are skipped with a warning on stderr. With a store, its
sessions are listed (from their headers), and there is no DIR.
Exit codes: 0 listed (an absent default directory lists nothing); 2 DIR cannot be read.";

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// The folder whose *.jsonl files, and its folders' (one level down), are listed [default: $PI_CODING_AGENT_DIR/sessions]
    dir: Option<PathBuf>,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

/// One listed session, as `--json` prints it (field order is the output's).
#[derive(Debug, Serialize)]
struct Row<'a> {
    path: &'a Path,
    id: String,
    cwd: Option<String>,
    timestamp: Option<String>,
    version: u32,
    parent_session: Option<String>,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Listing<'a> {
    sessions: Vec<Row<'a>>,
}

fn emit_listing(listing: &Listing<'_>) -> Result<(), Failure> {
    let value = serde_json::to_value(listing).map_err(|e| fail(format_args!("--json: {e}")))?;
    emit_json(&value)
}

fn row(s: &ListedSession) -> Row<'_> {
    let h = &s.header;
    Row {
        path: &s.path,
        id: h.id().to_owned(),
        cwd: h.cwd().map(str::to_owned),
        timestamp: h.timestamp().map(str::to_owned),
        version: h.version(),
        parent_session: h.parent_session().map(str::to_owned),
    }
}

fn default_dir() -> Result<PathBuf, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| fail(format_args!("reading the current directory: {e}")))?;
    let inputs = LocationInputs::from_env(cwd, ProjectTrust::Untrusted)
        .map_err(|e| fail(format_args!("locating the sessions directory: {e}")))?;
    Ok(inputs.agent_dir.join("sessions"))
}

pub(crate) fn run(args: ListArgs, sessions: &Sessions) -> CmdResult {
    if let Sessions::Store { origin, .. } = sessions {
        if let Some(dir) = &args.dir {
            return Err(fail(format_args!(
                "list {}: a directory of session files, but {} names a store, whose \
                 sessions have no directory; run `session-state list --store none {}` for \
                 the files, or leave DIR out for the store's sessions",
                dir.display(),
                match origin {
                    Origin::Flag => "--store".to_owned(),
                    Origin::Env => format!("${}", super::store::STORE_ENV),
                },
                dir.display()
            )));
        }
        let store = sessions.require("list")?;
        return super::store::list(&store, args.json);
    }
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
                    emit_listing(&Listing { sessions: vec![] })?;
                }
                return Ok(0);
            }
            d
        }
    };
    // An explicit DIR must be there (the library lists a missing root as empty).
    std::fs::metadata(&dir).map_err(|e| fail(format_args!("reading {}: {e}", dir.display())))?;
    let listing = PiJsonlStore::new(&dir).scan().map_err(fail)?;
    for p in &listing.problems {
        skipped(p);
    }
    if listing.sessions.is_empty() {
        if listing.problems.is_empty() {
            eprintln!(
                "no *.jsonl session files in {}",
                term_safe(&dir.display().to_string())
            );
        } else {
            eprintln!(
                "no sessions in {}: none of its {} *.jsonl file(s) starts with a session header",
                term_safe(&dir.display().to_string()),
                listing.problems.len()
            );
        }
    }
    let sessions: Vec<Row<'_>> = listing.sessions.iter().map(row).collect();
    if args.json {
        emit_listing(&Listing { sessions })?;
        return Ok(0);
    }
    // The path goes last: it is the long column.
    let cell = |v: &Option<String>| v.as_deref().unwrap_or("-").to_owned();
    let rows: Vec<[String; 4]> = sessions
        .iter()
        .map(|s| {
            [
                s.id.clone(),
                cell(&s.timestamp),
                cell(&s.cwd),
                s.path.display().to_string(),
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
