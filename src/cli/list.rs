//! `list`: sessions from their header lines only. Only the first line of each file is
//! read (at most 64 KiB of it), so thousands of large sessions list in moments.

use super::store::{Origin, Sessions};
use super::{
    CmdResult, Failure, emit_json, emit_text, fail, jsonl_files, term_safe, warn, without_path,
};
use serde::Serialize;
use session_state::format::read_header;
use session_state::settings::LocationInputs;
use session_state::{Error, settings::ProjectTrust};
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

/// Headers longer than this are not headers.
const MAX_HEADER: usize = 64 * 1024;

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// The folder to search recursively for *.jsonl [default: $PI_CODING_AGENT_DIR/sessions]
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

/// The header of one file (through the library's one header reader), or why it is not
/// one, in words that follow the file's name.
fn header(path: &Path) -> Result<Row<'_>, String> {
    let h = read_header(path, MAX_HEADER).map_err(|e| match e {
        Error::MissingHeader { detail, .. } | Error::InvalidHeader { detail, .. } => detail,
        Error::Io { source, .. } => source.to_string(),
        e => without_path(&e.to_string(), &path.display().to_string()).to_owned(),
    })?;
    Ok(Row {
        path,
        id: h.id().to_owned(),
        cwd: h.cwd().map(str::to_owned),
        timestamp: h.timestamp().map(str::to_owned),
        version: h.version(),
        parent_session: h.parent_session().map(str::to_owned),
    })
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
