//! `replay`: the state of every plugin at every branch tip, folded from the log alone (no
//! database), plus the last `data` of every other extension's `custom` entries.

use super::{
    CmdResult, emit_json, emit_text, fail, jsonl_files, require_regular, short_json, strict_error,
    term_safe, without_path,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use session_state::inspect::{self, Replay, ReplayValue};
use session_state::{Scope, SessionLog};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) const EXAMPLES: &str = "\
Examples:
  session-state replay fixtures/example.jsonl
  session-state replay ~/.pi/agent/sessions --json

For each branch tip: every plugin's value in branch scope (session scope is the same at
every tip and is shown once per file), and for every other customType of `custom` entries
(state Pi extensions write with pi.appendEntry) the number of such entries on the branch
and the `data` of the last one. A DIR is searched recursively for *.jsonl files.
Exit codes: 0 everything was read; 1 some file or value could not be read (reported);
2 could not run (FILE or DIR missing or unreadable).";

#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// A session file, or a directory searched recursively for *.jsonl
    path: PathBuf,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

/// One file in `replay --json`: the file as named, then its replay or why it could not
/// be read.
#[derive(Serialize)]
struct FileReplay {
    file: PathBuf,
    #[serde(flatten)]
    outcome: Outcome,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Outcome {
    Read(Replay),
    Failed { error: String },
}

impl FileReplay {
    /// Whether everything in the file was read.
    fn complete(&self) -> bool {
        matches!(&self.outcome, Outcome::Read(r) if r.is_complete())
    }
}

fn value_text(v: &ReplayValue) -> String {
    match v {
        ReplayValue::Present(x) => short_json(x, 200),
        ReplayValue::Unreadable(e) => format!("ERROR: {e}"),
        ReplayValue::Absent => "(absent)".into(),
    }
}

fn text(report: &FileReplay) -> String {
    let mut out = String::new();
    let file = report.file.display().to_string();
    let r = match &report.outcome {
        Outcome::Read(r) => r,
        Outcome::Failed { error } => {
            let _ = writeln!(out, "{file}: ERROR: {}", without_path(error, &file));
            return out;
        }
    };
    let _ = writeln!(
        out,
        "{file}: session {}, {} entries, {} tip(s)",
        r.session_id,
        r.entries,
        r.tips.len()
    );
    // A scope a plugin never wrote is left out: its value there is trivially absent.
    let wrote = |p: &str, scope: Scope| r.events.of(p).may_set(scope);
    let session: Vec<_> = r
        .session
        .iter()
        .filter(|(p, _)| wrote(p, Scope::Session))
        .collect();
    if !session.is_empty() {
        let _ = writeln!(out, "  session scope (the same at every tip):");
        for (p, v) in session {
            let _ = writeln!(out, "    {p} = {}", value_text(v));
        }
    }
    for t in &r.tips {
        let marks = if t.leaf { " [leaf]" } else { "" };
        let _ = writeln!(
            out,
            "  tip {}{marks} (branch key {}, {} entries on the path)",
            t.tip, t.branch_key, t.depth
        );
        let branch: Vec<_> = t
            .branch
            .iter()
            .filter(|(p, _)| wrote(p, Scope::Branch))
            .collect();
        if branch.is_empty() && t.custom.is_empty() {
            let _ = writeln!(out, "    (no branch state)");
        }
        for (p, v) in branch {
            let _ = writeln!(out, "    {p} = {}", value_text(v));
        }
        for (ct, c) in &t.custom {
            let data = match &c.last_data {
                Ok(v) => short_json(v, 200),
                Err(e) => format!("ERROR: {e}"),
            };
            let n = c.entries;
            let noun = if n == 1 { "entry" } else { "entries" };
            let _ = writeln!(out, "    custom {ct}: {n} {noun}, last data {data}");
        }
    }
    out
}

/// A progress bar of `len()` steps on stderr when it is a terminal (`len` is not called
/// otherwise: counting the tips is a pass over the tree).
fn progress(len: impl FnOnce() -> u64, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len()), ProgressDrawTarget::stderr());
    let template = format!("{{spinner}} {{wide_msg}} [{{bar:30}}] {{pos}}/{{len}} {unit}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// `path` is the file as the user or the directory scan named it (a symlink is not
/// resolved).
fn replay_log(log: &SessionLog, path: &Path, bar: &ProgressBar) -> FileReplay {
    FileReplay {
        file: path.to_path_buf(),
        outcome: Outcome::Read(inspect::replay(log, |_| bar.inc(1))),
    }
}

fn replay_file(path: &Path, bar: &ProgressBar) -> FileReplay {
    let shown = term_safe(&path.display().to_string()).into_owned();
    bar.set_message(format!("reading {shown}"));
    match SessionLog::open(path) {
        Ok(log) => {
            bar.set_message(format!("folding {shown}"));
            replay_log(&log, path, bar)
        }
        Err(e) => FileReplay {
            file: path.to_path_buf(),
            outcome: Outcome::Failed {
                error: e.to_string(),
            },
        },
    }
}

/// `replay --json`.
#[derive(Serialize)]
struct Sessions {
    sessions: Vec<FileReplay>,
}

pub(crate) fn run(args: ReplayArgs) -> CmdResult {
    let meta = std::fs::metadata(&args.path)
        .map_err(|e| fail(format_args!("{}: {e}", args.path.display())))?;
    let mut reports = Vec::new();
    let mut all_ok = true;
    if meta.is_dir() {
        let files = jsonl_files(&args.path)?;
        if files.is_empty() {
            eprintln!(
                "no *.jsonl session files in {}",
                term_safe(&args.path.display().to_string())
            );
        }
        let bar = progress(|| files.len() as u64, "files");
        let hidden = ProgressBar::hidden();
        for f in &files {
            bar.set_message(term_safe(&f.display().to_string()).into_owned());
            let r = replay_file(f, &hidden);
            bar.inc(1);
            all_ok &= r.complete();
            if !args.json {
                // Stream the text as it comes, so a long run shows results early.
                bar.suspend(|| emit_text(&text(&r)))?;
            }
            reports.push(r);
        }
        bar.finish_and_clear();
    } else {
        require_regular(&args.path)?;
        let log = SessionLog::open(&args.path).map_err(|e| fail(strict_error(&e)))?;
        let bar = progress(|| log.tips().len() as u64, "tips");
        let r = replay_log(&log, &args.path, &bar);
        bar.finish_and_clear();
        all_ok = r.complete();
        if !args.json {
            emit_text(&text(&r))?;
        }
        reports.push(r);
    }
    if args.json {
        emit_json(&Sessions { sessions: reports })?;
    }
    Ok(if all_ok { 0 } else { 1 })
}
