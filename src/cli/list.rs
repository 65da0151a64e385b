//! `list`: sessions from their header lines only, as the library lists them
//! ([`PiJsonlStore::scan`]: the one walk, the one header reader and its one limit). Only
//! the first line of each file is read, so thousands of large sessions list in moments.

use super::store::{Opened, Origin, Sessions};
use super::{CmdResult, Failure, emit_json, emit_text, fail, skipped, term_safe};
use crate::Header;
use crate::PiJsonlStore;
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

/// One listed session, as `--json` prints it (field order is the output's), from a
/// directory of files or from a store (which has no `path`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a Path>,
    id: String,
    cwd: Option<String>,
    timestamp: Option<String>,
    version: u32,
    parent_session: Option<String>,
}

impl<'a> Row<'a> {
    /// The row of a session whose header is `h`, in the file `path` (`None`: in a store).
    fn of(path: Option<&'a Path>, h: &Header) -> Row<'a> {
        Row {
            path,
            id: h.id().to_owned(),
            cwd: h.cwd().map(str::to_owned),
            timestamp: h.timestamp().map(str::to_owned),
            version: h.version(),
            parent_session: h.parent_session().map(str::to_owned),
        }
    }
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Listing<'a> {
    sessions: Vec<Row<'a>>,
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
        return list_store(&store, args.json);
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
                    emit_json(&Listing { sessions: vec![] })?;
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
    let sessions: Vec<Row<'_>> = listing
        .sessions
        .iter()
        .map(|s| Row::of(Some(&s.path), &s.header))
        .collect();
    if args.json {
        emit_json(&Listing { sessions })?;
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
                s.path.map(|p| p.display().to_string()).unwrap_or_default(),
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

/// `list` with a store: its sessions, from their headers only.
fn list_store(store: &Opened, json: bool) -> CmdResult {
    let headers = crate::persistence::list_sessions(store.backend()).map_err(fail)?;
    let rows: Vec<Row<'_>> = headers.iter().map(|h| Row::of(None, h)).collect();
    if json {
        emit_json(&Listing { sessions: rows })?;
        return Ok(0);
    }
    if rows.is_empty() {
        emit_text("no sessions in this store\n")?;
        return Ok(0);
    }
    let mut text = String::new();
    for r in &rows {
        text.push_str(&format!(
            "{}  {}  {}\n",
            r.id,
            r.timestamp.as_deref().unwrap_or("-"),
            r.cwd.as_deref().unwrap_or("-")
        ));
    }
    emit_text(&text)?;
    Ok(0)
}
