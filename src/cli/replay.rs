//! `replay`: the state of every plugin at every branch tip, folded from the log alone (no
//! database), plus the last `data` of every other extension's `custom` entries.

use super::{
    CmdResult, Failure, emit_json, emit_text, fail, jsonl_files, require_regular, short_json,
    strict_error, term_safe, without_path,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use session_state::inspect::{self, Replay, ReplayValue, TipReplay, TipReplays};
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
2 could not run (SESSION or DIR missing or unreadable).";

#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// The session: a Pi JSONL file or a directory searched recursively for *.jsonl; with
    /// a store, a session id or a unique prefix of one
    #[arg(value_name = "SESSION|DIR")]
    pub(crate) path: PathBuf,
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

/// A file that could not be read, as the text output shows it.
fn failed_text(file: &str, error: &str) -> String {
    format!("{file}: ERROR: {}\n", without_path(error, file))
}

/// The text output's lines before the tips: the file, its session and counts, and the
/// session-scope values.
fn head_text(file: &str, r: &Replay, tips: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{file}: session {}, {} entries, {tips} tip(s)",
        r.session_id, r.entries
    );
    let session: Vec<_> = r
        .session
        .iter()
        .filter(|(p, _)| wrote(r, p, Scope::Session))
        .collect();
    if !session.is_empty() {
        let _ = writeln!(out, "  session scope (the same at every tip):");
        for (p, v) in session {
            let _ = writeln!(out, "    {p} = {}", value_text(v));
        }
    }
    out
}

/// A scope a plugin never wrote is left out: its value there is trivially absent.
fn wrote(r: &Replay, plugin: &str, scope: Scope) -> bool {
    r.events.of(plugin).may_set(scope)
}

/// One tip's lines of the text output, appended to `out`.
fn tip_text(r: &Replay, t: &TipReplay, out: &mut String) {
    let marks = if t.leaf { " [leaf]" } else { "" };
    let _ = writeln!(
        out,
        "  tip {}{marks} (branch key {}, {} entries on the path)",
        t.tip, t.branch_key, t.depth
    );
    let branch: Vec<_> = t
        .branch
        .iter()
        .filter(|(p, _)| wrote(r, p, Scope::Branch))
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

/// Prints a replay as text, each tip's report built, printed (in chunks of about 64 KiB)
/// and dropped in turn, so the tips are never all held at once. Returns whether
/// everything was read.
fn print_text(file: &str, report: &Replay, tips: TipReplays<'_>) -> Result<bool, Failure> {
    let mut complete = report.is_complete();
    let mut out = head_text(file, report, tips.len());
    for t in tips {
        complete &= t.is_complete();
        tip_text(report, &t, &mut out);
        if out.len() >= 1 << 16 {
            emit_text(&out)?;
            out.clear();
        }
    }
    emit_text(&out)?;
    Ok(complete)
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

/// Opens a session file for a replay, with the progress message; the error as the
/// output shows it.
fn open_file(path: &Path, bar: &ProgressBar) -> Result<SessionLog, String> {
    let shown = term_safe(&path.display().to_string()).into_owned();
    bar.set_message(format!("reading {shown}"));
    let log = SessionLog::open(path).map_err(|e| e.to_string())?;
    bar.set_message(format!("folding {shown}"));
    Ok(log)
}

fn replay_file(path: &Path, bar: &ProgressBar) -> FileReplay {
    match open_file(path, bar) {
        Ok(log) => replay_log(&log, path, bar),
        Err(error) => FileReplay {
            file: path.to_path_buf(),
            outcome: Outcome::Failed { error },
        },
    }
}

/// Replays one file of a directory as text, printed as it comes. Whether it was read
/// whole.
fn print_file(path: &Path, bar: &ProgressBar) -> Result<bool, Failure> {
    let hidden = ProgressBar::hidden();
    let file = path.display().to_string();
    let log = match open_file(path, &hidden) {
        Ok(log) => log,
        Err(error) => {
            bar.suspend(|| emit_text(&failed_text(&file, &error)))?;
            return Ok(false);
        }
    };
    let (report, tips) = inspect::replay_tips(&log, |_| {});
    bar.suspend(|| print_text(&file, &report, tips))
}

/// `replay --json`.
#[derive(Serialize)]
struct Sessions {
    sessions: Vec<FileReplay>,
}

pub(crate) fn run(args: ReplayArgs) -> CmdResult {
    let meta = std::fs::metadata(&args.path)
        .map_err(|e| fail(format_args!("opening {}: {e}", args.path.display())))?;
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
            if args.json {
                let r = replay_file(f, &hidden);
                all_ok &= r.complete();
                reports.push(r);
            } else {
                // Stream the text as it comes, so a long run shows results early.
                all_ok &= print_file(f, &bar)?;
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
    } else {
        require_regular(&args.path)?;
        let log = SessionLog::open(&args.path).map_err(|e| fail(strict_error(&e)))?;
        let bar = progress(|| log.tips().len() as u64, "tips");
        if args.json {
            let r = replay_log(&log, &args.path, &bar);
            bar.finish_and_clear();
            all_ok = r.complete();
            reports.push(r);
        } else {
            let (report, tips) = inspect::replay_tips(&log, |_| bar.inc(1));
            bar.finish_and_clear();
            all_ok = print_text(&args.path.display().to_string(), &report, tips)?;
        }
    }
    if args.json {
        emit_json(&Sessions { sessions: reports })?;
    }
    Ok(if all_ok { 0 } else { 1 })
}
