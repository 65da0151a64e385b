//! `verify`: the integrity report of SPEC §2's reading rules.
//!
//! Exit 0: the strict reader accepts the file (its warnings, such as torn records, are
//! listed). Exit 1: the strict reader refuses it; the salvage reader then says what it
//! would keep. Exit 2: the file could not be read at all (missing, I/O error).

use super::{CmdResult, emit_json, emit_text, fail, require_regular, without_path};
use serde_json::{Value, json};
use session_state::{Error, Finding, LogOptions, ReadMode, SessionLog, inspect};
use std::fmt::Write as _;
use std::path::PathBuf;

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
    /// The session file (.jsonl)
    file: PathBuf,
    /// Also run the salvage reader (Pi's lenient rules) when the strict read succeeds, and
    /// report what it keeps
    #[arg(long)]
    salvage: bool,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

/// Where the strict reader's error points, when it points somewhere.
fn error_place(e: &Error) -> (Option<u64>, Option<u64>, Option<&str>) {
    match e {
        Error::Corrupt { at, .. } | Error::TrailingGarbage { at, .. } => {
            (Some(at.line), Some(at.offset), None)
        }
        Error::InvalidEntry { at, id, .. } => (Some(at.line), Some(at.offset), id.as_deref()),
        Error::DuplicateId { at, id, .. }
        | Error::DanglingParent { at, id, .. }
        | Error::Cycle { at, id, .. } => (Some(at.line), Some(at.offset), Some(id)),
        Error::MissingHeader { .. }
        | Error::InvalidHeader { .. }
        | Error::UnsupportedVersion { .. } => (Some(1), Some(0), None),
        _ => (None, None, None),
    }
}

/// Undecodable state events, as findings.
fn event_findings(log: &SessionLog) -> Vec<Value> {
    log.entries()
        .filter_map(|e| {
            let ev = inspect::state_event(log, e.id())?;
            let detail = ev.envelope.err()?;
            Some(json!({
                "severity": "warning",
                "kind": "bad-state-event",
                "at": { "line": e.location().line, "offset": e.location().offset },
                "entry_id": e.id(),
                "message": format!("plugin '{}': {detail}; reads of this plugin fail", ev.plugin),
            }))
        })
        .collect()
}

fn findings_json(log: &SessionLog) -> Vec<Value> {
    let mut all: Vec<Value> = log
        .findings()
        .iter()
        .filter_map(|f: &Finding| serde_json::to_value(f).ok())
        .collect();
    all.extend(event_findings(log));
    all.sort_by_key(|f| f["at"]["offset"].as_u64().unwrap_or(0));
    all
}

fn finding_text(f: &Value) -> String {
    let mut s = format!(
        "  {} {} at line {}, byte {}",
        f["severity"].as_str().unwrap_or_default(),
        f["kind"].as_str().unwrap_or_default(),
        f["at"]["line"],
        f["at"]["offset"]
    );
    if let Some(id) = f["entry_id"].as_str() {
        let _ = write!(s, ", entry '{id}'");
    }
    let _ = write!(s, ": {}", f["message"].as_str().unwrap_or_default());
    s
}

fn salvage_report(file: &PathBuf) -> Value {
    match LogOptions::new().mode(ReadMode::Salvage).open(file) {
        Ok(log) => json!({
            "readable": true,
            "session_id": log.session_id(),
            "entries": log.len(),
            "findings": findings_json(&log),
        }),
        Err(e) => json!({ "readable": false, "error": e.to_string() }),
    }
}

fn salvage_text(out: &mut String, s: &Value) {
    if s["readable"] == Value::Bool(true) {
        let findings = s["findings"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let _ = writeln!(
            out,
            "salvage: would keep {} entries, skipping or repairing what these {} finding(s) \
             describe:",
            s["entries"],
            findings.len()
        );
        for f in findings {
            let _ = writeln!(out, "{}", finding_text(f));
        }
    } else {
        let _ = writeln!(
            out,
            "salvage: cannot read it either: {}",
            s["error"].as_str().unwrap_or_default()
        );
    }
}

/// The strict reader's complaint for the report: without the file name (the report's
/// first line has it) and, for a corrupt line, without the advice to run the salvage
/// report that follows it.
fn strict_message(e: &Error, file: &str) -> String {
    match e {
        Error::Corrupt { detail, .. } => {
            format!("corrupt line: {detail}; valid entries follow it, so this is not a torn write")
        }
        _ => without_path(&e.to_string(), file).to_owned(),
    }
}

pub(crate) fn run(args: VerifyArgs) -> CmdResult {
    require_regular(&args.file)?;
    let strict = LogOptions::new().mode(ReadMode::Strict).open(&args.file);
    let mut shown_error = String::new();
    let (report, code) = match strict {
        Err(e @ Error::Io { .. }) => return Err(fail(e)),
        Ok(log) => {
            let salvage = args.salvage.then(|| salvage_report(&args.file));
            let r = json!({
                "file": args.file,
                "readable": true,
                "session_id": log.session_id(),
                "entries": log.len(),
                "findings": findings_json(&log),
                "salvage": salvage,
            });
            (r, 0)
        }
        Err(e) => {
            shown_error = strict_message(&e, &args.file.display().to_string());
            let (line, offset, entry) = error_place(&e);
            let r = json!({
                "file": args.file,
                "readable": false,
                "error": { "message": e.to_string(), "line": line, "offset": offset, "entry_id": entry },
                "salvage": salvage_report(&args.file),
            });
            (r, 1)
        }
    };
    if args.json {
        emit_json(&report)?;
        return Ok(code);
    }
    let mut out = String::new();
    let file = args.file.display();
    if code == 0 {
        let findings = report["findings"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let _ = writeln!(
            out,
            "{file}: readable: session {}, {} entries, {} finding(s)",
            report["session_id"].as_str().unwrap_or_default(),
            report["entries"],
            findings.len()
        );
        for f in findings {
            let _ = writeln!(out, "{}", finding_text(f));
        }
    } else {
        let err = &report["error"];
        let _ = writeln!(out, "{file}: REFUSED by the strict reader");
        let mut place = String::new();
        if let (Some(l), Some(o)) = (err["line"].as_u64(), err["offset"].as_u64()) {
            let _ = write!(place, " at line {l}, byte {o}");
        }
        if let Some(id) = err["entry_id"].as_str() {
            let _ = write!(place, ", entry '{id}'");
        }
        let _ = writeln!(out, "  error{place}: {shown_error}");
    }
    if let Some(s) = report.get("salvage").filter(|s| !s.is_null()) {
        salvage_text(&mut out, s);
    }
    emit_text(&out)?;
    Ok(code)
}
