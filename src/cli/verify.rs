//! `verify`: the integrity report of the log's reading rules (`docs/durability.md`).
//!
//! Exit 0: the strict reader accepts the file (its warnings, such as torn records, are
//! listed). Exit 1: the strict reader refuses it; the salvage reader then says what it
//! would keep. Exit 2: the file could not be read at all (missing, I/O error).

use super::{CmdResult, emit_json, emit_text, fail, is_refusal, require_regular, without_path};
use crate::inspect::{self, Integrity};
use crate::{
    AppendError, Error, InvalidLog, Location, LogError, LogOptions, ReadMode, SessionLog,
    StoredSession,
};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub(crate) const EXAMPLES: &str = "\
Examples:
  session-state verify s.jsonl
  session-state verify s.jsonl --salvage --json

Every finding is listed with its line, byte offset and entry id. State events that cannot
be decoded (unknown envelope version, op or scope) are listed too: they make reads of that
plugin fail, not the file.
Exit codes: 0 a strict read succeeds (warnings may be listed); 1 the strict reader refuses
the file (the salvage reader says what it would keep); 2 could not run (missing file, I/O).";

#[derive(Debug, clap::Args)]
pub(crate) struct VerifyArgs {
    /// The session: a Pi JSONL file, or with a store a session id or a unique prefix of one
    #[arg(value_name = "SESSION")]
    pub(crate) file: PathBuf,
    /// Also run the salvage reader (Pi's lenient rules) when the strict read succeeds, and
    /// report what it keeps
    #[arg(long)]
    salvage: bool,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

/// Why a reader refused a file, and where when the error points at a line (the header's
/// errors point at line 1, byte 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
struct Refusal {
    /// The error's message.
    message: String,
    /// The line, 1-based.
    line: Option<u64>,
    /// The line's byte offset.
    offset: Option<u64>,
    /// The entry, when the error names one.
    entry_id: Option<String>,
}

impl From<&Error> for Refusal {
    fn from(e: &Error) -> Refusal {
        let (at, entry_id) = match (e, e.invalid_log()) {
            (_, Some(InvalidLog::Corrupt { at, .. }))
            | (Error::Log(LogError::Append(AppendError::TrailingGarbage { at, .. })), _) => {
                (Some(*at), None)
            }
            (_, Some(InvalidLog::InvalidEntry { at, id, .. })) => (Some(*at), id.clone()),
            (_, Some(InvalidLog::DuplicateId { at, id, .. }))
            | (_, Some(InvalidLog::DanglingParent { at, id, .. }))
            | (_, Some(InvalidLog::Cycle { at, id, .. })) => (Some(*at), Some(id.clone())),
            (_, Some(InvalidLog::MissingHeader { .. }))
            | (_, Some(InvalidLog::InvalidHeader { .. }))
            | (_, Some(InvalidLog::UnsupportedVersion { .. })) => {
                (Some(Location { line: 1, offset: 0 }), None)
            }
            _ => (None, None),
        };
        Refusal {
            message: e.to_string(),
            line: at.map(|a| a.line),
            offset: at.map(|a| a.offset),
            entry_id,
        }
    }
}

/// `verify --json`: the strict read's verdict, then the salvage read's (`null` when the
/// strict read succeeded and `--salvage` was not given).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    file: &'a Path,
    #[serde(flatten)]
    strict: Verdict<Refusal>,
    salvage: Option<Verdict<String>>,
}

/// What one reader made of the file: `readable`, then what it read or why it refused.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Verdict<E> {
    readable: bool,
    #[serde(flatten)]
    read: Option<Integrity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<E>,
}

impl<E> Verdict<E> {
    fn read(log: &SessionLog) -> Self {
        Verdict {
            readable: true,
            read: Some(inspect::integrity(log)),
            error: None,
        }
    }

    fn refused(error: E) -> Self {
        Verdict {
            readable: false,
            read: None,
            error: Some(error),
        }
    }
}

fn salvage_report(read: Result<SessionLog, Error>) -> Verdict<String> {
    match read {
        Ok(log) => Verdict::read(&log),
        Err(e) => Verdict::refused(e.to_string()),
    }
}

fn salvage_text(out: &mut String, s: &Verdict<String>) {
    match (&s.read, &s.error) {
        (Some(r), _) => {
            let _ = writeln!(
                out,
                "salvage: would keep {} entries, skipping or repairing what these {} \
                 finding(s) describe:",
                r.entries,
                r.findings.len()
            );
            for f in &r.findings {
                let _ = writeln!(out, "  {f}");
            }
        }
        (None, Some(e)) => {
            let _ = writeln!(out, "salvage: cannot read it either: {e}");
        }
        (None, None) => {}
    }
}

/// The strict reader's complaint for the report: without the file name (the report's
/// first line has it) and, for a corrupt line, without the advice to run the salvage
/// report that follows it.
fn strict_message(e: &Error, file: &str) -> String {
    match e.invalid_log() {
        Some(InvalidLog::Corrupt { detail, .. }) => {
            format!("corrupt line: {detail}; valid entries follow it, so this is not a torn write")
        }
        _ => without_path(&e.to_string(), file).to_owned(),
    }
}

/// `verify` on the session file `args.file`, or on the stored session `stored` (read from
/// the store's lines, and named `<store>#<session id>` where a file is named by its path).
pub(crate) fn run(args: VerifyArgs, stored: Option<&StoredSession<'_>>) -> CmdResult {
    let name = match stored {
        None => {
            require_regular(&args.file)?;
            args.file.clone()
        }
        Some(session) => session.label(),
    };
    let read = |mode| match stored {
        None => LogOptions::new()
            .mode(mode)
            .open(&args.file)
            .map_err(Error::from),
        Some(session) => session.read_log(mode),
    };
    let strict = read(ReadMode::Strict);
    let mut shown_error = String::new();
    let (report, code) = match strict {
        Err(e) if !is_refusal(&e) => return Err(fail(e)),
        Ok(log) => {
            let salvage = args
                .salvage
                .then(|| salvage_report(read(ReadMode::Salvage)));
            let r = Report {
                file: &name,
                strict: Verdict::read(&log),
                salvage,
            };
            (r, 0)
        }
        Err(e) => {
            shown_error = strict_message(&e, &name.display().to_string());
            let r = Report {
                file: &name,
                strict: Verdict::refused(Refusal::from(&e)),
                salvage: Some(salvage_report(read(ReadMode::Salvage))),
            };
            (r, 1)
        }
    };
    if args.json {
        emit_json(&report)?;
        return Ok(code);
    }
    let mut out = String::new();
    let file = name.display();
    if let Some(r) = &report.strict.read {
        let _ = writeln!(
            out,
            "{file}: readable: session {}, {} entries, {} finding(s)",
            r.session_id,
            r.entries,
            r.findings.len()
        );
        for f in &r.findings {
            let _ = writeln!(out, "  {f}");
        }
    }
    if let Some(err) = &report.strict.error {
        let _ = writeln!(out, "{file}: REFUSED by the strict reader");
        let mut place = String::new();
        if let (Some(l), Some(o)) = (err.line, err.offset) {
            let _ = write!(place, " at line {l}, byte {o}");
        }
        if let Some(id) = &err.entry_id {
            let _ = write!(place, ", entry '{id}'");
        }
        let _ = writeln!(out, "  error{place}: {shown_error}");
    }
    if let Some(s) = &report.salvage {
        salvage_text(&mut out, s);
    }
    emit_text(&out)?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(name)
    }

    #[test]
    fn a_refusal_points_at_the_line_and_entry() {
        let e: Error = SessionLog::open(fixture("edge/dangling-parent.jsonl"))
            .expect_err("refused")
            .into();
        let r = Refusal::from(&e);
        assert_eq!(r.entry_id.as_deref(), Some("a0000003"));
        assert!(r.line.is_some() && r.offset.is_some());
        assert_eq!(r.message, e.to_string());
        let e: Error = SessionLog::open(fixture("edge/bad-header.jsonl"))
            .expect_err("refused")
            .into();
        let r = Refusal::from(&e);
        assert_eq!((r.line, r.offset, r.entry_id), (Some(1), Some(0), None));
    }
}
