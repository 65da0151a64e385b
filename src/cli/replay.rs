//! `replay`: the state of every plugin at every branch tip, folded from the log alone (no
//! database), plus the last `data` of every other extension's `custom` entries.

use super::{
    CmdResult, emit_json, emit_text, fail, jsonl_files, require_regular, short_json, strict_error,
    term_safe, without_path,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, Value, json};
use session_state::{Scope, SessionLog, inspect};
use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// A plugin value: present, absent, or a fold error (a bad event).
fn value_json(r: Result<Option<Value>, session_state::Error>) -> (Value, bool) {
    match r {
        Ok(Some(v)) => (json!({ "value": v }), true),
        Ok(None) => (json!({ "absent": true }), true),
        Err(e) => (json!({ "error": e.to_string() }), false),
    }
}

fn value_text(v: &Value) -> String {
    if let Some(x) = v.get("value") {
        short_json(x, 200)
    } else if let Some(e) = v.get("error") {
        format!("ERROR: {}", e.as_str().unwrap_or_default())
    } else {
        "(absent)".into()
    }
}

/// The replay of one session file, as JSON; the flag is false when something in it could
/// not be read.
/// `shown` is the path as the user or the directory scan named it (a symlink is not
/// resolved).
fn replay_log(log: &SessionLog, shown: &Path, bar: &ProgressBar) -> (Value, bool) {
    let mut ok = true;
    let plugins: BTreeSet<&str> = log.entries().filter_map(|e| e.state_plugin()).collect();
    // Events per plugin and scope ("invalid": cannot be decoded), so the text can leave
    // out a scope a plugin never wrote (its value there is trivially absent).
    let mut counts: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
    for e in log.entries() {
        if let Some(ev) = inspect::state_event(log, e.id()) {
            let scope = ev
                .envelope
                .as_ref()
                .map_or("invalid", |env| env.scope.as_str());
            *counts
                .entry(ev.plugin)
                .or_default()
                .entry(scope)
                .or_insert(0) += 1;
        }
    }
    let mut session = Map::new();
    let tips = log.tips();
    for p in &plugins {
        let at = tips.first().copied().unwrap_or_default();
        let (v, good) = value_json(inspect::value_at(log, p, Scope::Session, at));
        ok &= good;
        session.insert((*p).to_owned(), v);
    }
    let leaf = log.leaf_id();
    // One walk of the tree gives every tip's values; the data of a custom entry is read
    // once, however many tips it is the last one of.
    let mut tip_rows: Vec<(usize, Value)> = Vec::with_capacity(tips.len());
    let mut data_of: HashMap<&str, (Value, bool)> = HashMap::new();
    inspect::fold_tips(log, |t| {
        bar.inc(1);
        let mut branch = Map::new();
        for (p, r) in t.branch {
            let (v, good) = value_json(r);
            ok &= good;
            branch.insert(p.to_owned(), v);
        }
        let mut custom = Map::new();
        for (ct, count, last) in t.custom {
            let (data, good) = data_of
                .entry(last)
                .or_insert_with(|| match log.raw_line(last) {
                    Ok(line) => match session_state::json::from_str(&line) {
                        Ok(v) => (v.get("data").cloned().unwrap_or(Value::Null), true),
                        Err(e) => (
                            json!({ "error": format!("entry '{last}' does not parse: {e}") }),
                            false,
                        ),
                    },
                    Err(e) => (json!({ "error": e.to_string() }), false),
                });
            ok &= *good;
            custom.insert(
                ct.to_owned(),
                json!({ "entries": count, "last_entry": last, "last_data": data }),
            );
        }
        tip_rows.push((
            t.index,
            json!({
                "tip": t.tip,
                "leaf": leaf == Some(t.tip),
                "branch_key": t.branch_key,
                "depth": t.depth,
                "branch": branch,
                "custom": custom,
            }),
        ));
    });
    tip_rows.sort_by_key(|r| r.0);
    let tip_rows: Vec<Value> = tip_rows.into_iter().map(|r| r.1).collect();
    let v = json!({
        "file": shown,
        "session_id": log.session_id(),
        "entries": log.len(),
        "leaf": leaf,
        "events": counts,
        "session": session,
        "tips": tip_rows,
    });
    (v, ok)
}

fn text(report: &Value) -> String {
    let mut out = String::new();
    let file = report["file"].as_str().unwrap_or_default();
    if let Some(e) = report.get("error").and_then(Value::as_str) {
        let _ = writeln!(out, "{file}: ERROR: {}", without_path(e, file));
        return out;
    }
    let tips = report["tips"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let _ = writeln!(
        out,
        "{file}: session {}, {} entries, {} tip(s)",
        report["session_id"].as_str().unwrap_or_default(),
        report["entries"],
        tips.len()
    );
    // A scope is shown for a plugin when it has events there (or undecodable ones).
    let wrote = |p: &str, scope: &str| {
        let c = &report["events"][p];
        c.get(scope).is_some() || c.get("invalid").is_some()
    };
    let session: Vec<(&String, &Value)> = report["session"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(p, _)| wrote(p, "session"))
        .collect();
    if !session.is_empty() {
        let _ = writeln!(out, "  session scope (the same at every tip):");
        for (p, v) in session {
            let _ = writeln!(out, "    {p} = {}", value_text(v));
        }
    }
    for t in tips {
        let mut marks = String::new();
        if t["leaf"] == Value::Bool(true) {
            marks.push_str(" [leaf]");
        }
        let _ = writeln!(
            out,
            "  tip {}{marks} (branch key {}, {} entries on the path)",
            t["tip"].as_str().unwrap_or_default(),
            t["branch_key"].as_str().unwrap_or("?"),
            t["depth"]
        );
        let branch: Vec<(&String, &Value)> = t["branch"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(p, _)| wrote(p, "branch"))
            .collect();
        let custom = t["custom"].as_object();
        if branch.is_empty() && custom.is_none_or(Map::is_empty) {
            let _ = writeln!(out, "    (no branch state)");
        }
        for (p, v) in branch {
            let _ = writeln!(out, "    {p} = {}", value_text(v));
        }
        for (ct, c) in custom.into_iter().flatten() {
            let data = &c["last_data"];
            let data = match data.get("error") {
                Some(e) => format!("ERROR: {}", e.as_str().unwrap_or_default()),
                None => short_json(data, 200),
            };
            let n = c["entries"].as_u64().unwrap_or(0);
            let noun = if n == 1 { "entry" } else { "entries" };
            let _ = writeln!(out, "    custom {ct}: {n} {noun}, last data {data}");
        }
    }
    out
}

fn progress(len: u64, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let template = format!("{{spinner}} {{wide_msg}} [{{bar:30}}] {{pos}}/{{len}} {unit}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

fn replay_file(path: &Path, bar: &ProgressBar) -> (Value, bool) {
    let shown = term_safe(&path.display().to_string()).into_owned();
    bar.set_message(format!("reading {shown}"));
    match SessionLog::open(path) {
        Ok(log) => {
            bar.set_message(format!("folding {shown}"));
            replay_log(&log, path, bar)
        }
        Err(e) => (json!({ "file": path, "error": e.to_string() }), false),
    }
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
        let bar = progress(files.len() as u64, "files");
        let hidden = ProgressBar::hidden();
        for f in &files {
            bar.set_message(term_safe(&f.display().to_string()).into_owned());
            let (r, ok) = replay_file(f, &hidden);
            bar.inc(1);
            all_ok &= ok;
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
        let bar = progress(log.tips().len() as u64, "tips");
        let (r, ok) = replay_log(&log, &args.path, &bar);
        bar.finish_and_clear();
        all_ok = ok;
        if !args.json {
            emit_text(&text(&r))?;
        }
        reports.push(r);
    }
    if args.json {
        emit_json(&json!({ "sessions": reports }))?;
    }
    Ok(if all_ok { 0 } else { 1 })
}
