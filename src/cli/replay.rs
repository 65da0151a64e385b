//! `replay`: the state of every plugin at every branch tip, folded from the log alone (no
//! database), plus the last `data` of every other extension's `custom` entries, and each
//! plugin's state version where it is not 1 (as the replay's walk carries it).

use super::{
    CmdResult, Failure, emit, emit_text, fail, jsonl_files, require_regular, short_json,
    strict_error, term_safe, without_path,
};
use crate::inspect::{self, Replay, ReplayValue, TipReplay, TipReplays};
use crate::{Scope, SessionLog, json};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
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
and the `data` of the last one. A value written under a state version other than 1 shows
it: `role (stateVersion 3) = …` (--json: \"stateVersion\": 3 beside its \"value\"); values
are shown as stored, never migrated. A DIR is searched recursively for *.jsonl files.
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

/// How the text output shows a value's version: ` (stateVersion N)` for a value that could
/// be read (present or absent) at a version N other than 1, else nothing.
fn version_text(versions: &BTreeMap<String, u32>, plugin: &str, v: &ReplayValue) -> String {
    match versions.get(plugin) {
        Some(n) if v.is_readable() => format!(" (stateVersion {n})"),
        _ => String::new(),
    }
}

/// `--json`: `"stateVersion": N` beside each readable value of a version other than 1, in
/// a report's map of plugins to values.
fn add_versions(values: Option<&mut Value>, versions: &BTreeMap<String, u32>) {
    let Some(Value::Object(values)) = values else {
        return;
    };
    for (plugin, n) in versions {
        if let Some(Value::Object(v)) = values.get_mut(plugin)
            && !v.contains_key("error")
        {
            v.insert("stateVersion".into(), (*n).into());
        }
    }
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
            let version = version_text(&r.session_versions, p, v);
            let _ = writeln!(out, "    {p}{version} = {}", value_text(v));
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
        let version = version_text(&t.versions, p, v);
        let _ = writeln!(out, "    {p}{version} = {}", value_text(v));
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
    match ProgressStyle::with_template(&template) {
        Ok(style) => bar.set_style(style.progress_chars("=> ")),
        Err(e) => {
            tracing::debug!(error = %e, "the progress bar's template was refused; the bar keeps its default style")
        }
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
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

/// Where the output goes: text, or the JSON document being written.
enum Output<S> {
    Text,
    Json(JsonDoc<S>),
}

impl<S: FnMut(&str) -> Result<(), Failure>> Output<S> {
    /// `json`: starts the document, `{"sessions": [`, written to `sink`.
    fn new(json: bool, sink: S) -> Output<S> {
        if !json {
            return Output::Text;
        }
        let mut doc = JsonDoc::new(sink);
        doc.open('{');
        doc.key("sessions");
        doc.open('[');
        Output::Json(doc)
    }

    /// Prints one file's replay, each tip built, printed and dropped in turn. `path` is
    /// the file as the user or the directory scan named it (a symlink is not resolved).
    /// Whether everything in it was read.
    fn replay(
        &mut self,
        path: &Path,
        log: &SessionLog,
        report: &Replay,
        tips: TipReplays<'_>,
    ) -> Result<bool, Failure> {
        match self {
            Output::Text => print_text(&path.display().to_string(), report, tips),
            Output::Json(doc) => doc.file(path, Head::Read(report), Some((log, tips))),
        }
    }

    /// Prints a file that could not be read.
    fn failed(&mut self, path: &Path, error: &str) -> Result<(), Failure> {
        match self {
            Output::Text => emit_text(&failed_text(&path.display().to_string(), error)),
            Output::Json(doc) => doc.file(path, Head::Failed { error }, None).map(drop),
        }
    }

    /// Ends the document (JSON) and writes what is left.
    fn finish(self) -> Result<(), Failure> {
        match self {
            Output::Text => Ok(()),
            Output::Json(mut doc) => {
                doc.close(']');
                doc.close('}');
                doc.out.push('\n');
                doc.flush()
            }
        }
    }
}

/// One file's object in `replay --json` without its tips: the file as named, then its
/// replay's fields, or why it could not be read.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileHead<'a> {
    file: &'a Path,
    #[serde(flatten)]
    head: Head<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Head<'a> {
    Read(&'a Replay),
    Failed { error: &'a str },
}

/// `replay --json`'s document, written as it goes: byte for byte what
/// `json::to_string_pretty` prints for the whole document (two-space indentation, every
/// object in JavaScript's key order), but each tip is turned into a `Value`, printed and
/// dropped in turn, and the text goes to the sink in chunks of about 64 KiB. So the
/// memory is that of one tip's report, not of every tip's report and of the document's
/// `Value` and text.
struct JsonDoc<S> {
    /// Printed, not yet given to the sink.
    out: String,
    /// Open arrays and objects.
    depth: usize,
    /// Whether the innermost open array or object has no member yet.
    empty: bool,
    sink: S,
}

fn to_value(v: &impl Serialize) -> Result<Value, Failure> {
    serde_json::to_value(v).map_err(|e| fail(format_args!("printing the report as JSON: {e}")))
}

impl<S: FnMut(&str) -> Result<(), Failure>> JsonDoc<S> {
    fn new(sink: S) -> JsonDoc<S> {
        JsonDoc {
            out: String::new(),
            depth: 0,
            empty: true,
            sink,
        }
    }

    fn newline(&mut self) {
        self.out.push('\n');
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
    }

    fn open(&mut self, bracket: char) {
        self.out.push(bracket);
        self.depth += 1;
        self.empty = true;
    }

    /// Closes the innermost array or object (an empty one prints as `[]` / `{}`).
    fn close(&mut self, bracket: char) {
        self.depth -= 1;
        if !self.empty {
            self.newline();
        }
        self.out.push(bracket);
        self.empty = false;
    }

    /// Starts the next member of the innermost array or object.
    fn member(&mut self) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        self.newline();
    }

    /// Starts the next member of the innermost object: its key.
    fn key(&mut self, key: &str) {
        self.member();
        self.out
            .push_str(&json::to_string(&Value::String(key.to_owned())));
        self.out.push_str(": ");
    }

    /// A whole value, printed as `to_string_pretty` prints it at this depth (its lines
    /// indented by the depth: JSON text has no newline inside a string).
    fn value(&mut self, v: &Value) {
        let text = json::to_string_pretty(v);
        let mut lines = text.split('\n');
        if let Some(first) = lines.next() {
            self.out.push_str(first);
        }
        for line in lines {
            self.newline();
            self.out.push_str(line);
        }
    }

    /// Gives what was printed to the sink.
    fn flush(&mut self) -> Result<(), Failure> {
        (self.sink)(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// One file's object, its tips (when read, with the log they are of) printed one at
    /// a time in place of the head's empty `tips`, the versions other than 1 added to the
    /// values. Whether everything in it was read.
    fn file(
        &mut self,
        path: &Path,
        head: Head<'_>,
        tips: Option<(&SessionLog, TipReplays<'_>)>,
    ) -> Result<bool, Failure> {
        let mut complete = match head {
            Head::Read(r) => r.is_complete(),
            Head::Failed { .. } => false,
        };
        let session_versions = match &head {
            Head::Read(r) => Some(r.session_versions.clone()),
            Head::Failed { .. } => None,
        };
        let Value::Object(mut fields) = to_value(&FileHead { file: path, head })? else {
            return Err(fail(
                "printing the report as JSON: a file's report is not an object",
            ));
        };
        if let Some(versions) = &session_versions {
            add_versions(fields.get_mut("session"), versions);
        }
        let mut tips = tips.map(|(_, tips)| tips);
        self.member();
        self.open('{');
        for (k, v) in &fields {
            self.key(k);
            match tips.take_if(|_| k == "tips") {
                Some(tips) => {
                    self.open('[');
                    for t in tips {
                        complete &= t.is_complete();
                        self.member();
                        let mut t_value = to_value(&t)?;
                        add_versions(t_value.get_mut("branch"), &t.versions);
                        self.value(&t_value);
                        if self.out.len() >= 1 << 16 {
                            self.flush()?;
                        }
                    }
                    self.close(']');
                }
                None => self.value(v),
            }
        }
        self.close('}');
        Ok(complete)
    }
}

pub(crate) fn run(args: ReplayArgs) -> CmdResult {
    let meta = std::fs::metadata(&args.path)
        .map_err(|e| fail(format_args!("opening {}: {e}", args.path.display())))?;
    let mut out = Output::new(args.json, emit);
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
            // Print each file as it comes, so a long run shows results early.
            match open_file(f, &hidden) {
                Ok(log) => {
                    let (report, tips) = inspect::replay_tips(&log, |_| {});
                    all_ok &= bar.suspend(|| out.replay(f, &log, &report, tips))?;
                }
                Err(error) => {
                    bar.suspend(|| out.failed(f, &error))?;
                    all_ok = false;
                }
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
    } else {
        require_regular(&args.path)?;
        let log = SessionLog::open(&args.path).map_err(|e| fail(strict_error(&e.into())))?;
        let bar = progress(|| log.tips().len() as u64, "tips");
        let (report, tips) = inspect::replay_tips(&log, |_| bar.inc(1));
        bar.finish_and_clear();
        all_ok = out.replay(&args.path, &log, &report, tips)?;
    }
    out.finish()?;
    Ok(if all_ok { 0 } else { 1 })
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The document as `replay --json` printed it before it streamed: every file's whole
    /// report, one `Value` of the whole document, printed at once.
    fn whole(files: &[PathBuf]) -> String {
        let sessions: Vec<Value> = files
            .iter()
            .map(|f| match SessionLog::open(f) {
                Ok(log) => {
                    let r = inspect::replay(&log, |_| {});
                    to_value(&FileHead {
                        file: f,
                        head: Head::Read(&r),
                    })
                    .unwrap()
                }
                Err(e) => to_value(&FileHead {
                    file: f,
                    head: Head::Failed {
                        error: &e.to_string(),
                    },
                })
                .unwrap(),
            })
            .collect();
        let doc = serde_json::json!({ "sessions": sessions });
        json::to_string_pretty(&doc) + "\n"
    }

    /// The streamed document, and how many pieces the sink was given.
    fn streamed(files: &[PathBuf]) -> (String, usize, bool) {
        let mut text = String::new();
        let mut pieces = 0;
        let mut all_ok = true;
        let mut out = Output::new(true, |s: &str| {
            text.push_str(s);
            pieces += 1;
            Ok(())
        });
        for f in files {
            match SessionLog::open(f) {
                Ok(log) => {
                    let (report, tips) = inspect::replay_tips(&log, |_| {});
                    all_ok &= out.replay(f, &log, &report, tips).unwrap();
                }
                Err(e) => {
                    out.failed(f, &e.to_string()).unwrap();
                    all_ok = false;
                }
            }
        }
        out.finish().unwrap();
        (text, pieces, all_ok)
    }

    const HEADER: &str = r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}"#;

    fn custom(id: &str, parent: Option<&str>, custom_type: &str, data: &str) -> String {
        let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
        format!(
            r#"{{"type":"custom","customType":"{custom_type}","data":{data},"id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:00.000Z"}}"#
        )
    }

    /// Keys that JavaScript orders first (array indexes) as plugin ids, customTypes and in
    /// values, lone surrogates, empty arrays and objects, numbers JavaScript prints
    /// differently, a bad event, and a session with no entries.
    fn tricky(dir: &Path) -> Vec<PathBuf> {
        let t = dir.join("t.jsonl");
        let lines = [
            HEADER.to_owned(),
            custom(
                "e0",
                None,
                "session-state/10",
                r#"{"v":1,"scope":"branch","op":"set","value":{"10":1,"9":2,"x":"cut \ud83d","e":[],"o":{},"n":1.0,"big":1e21}}"#,
            ),
            custom(
                "e1",
                Some("e0"),
                "session-state/9",
                r#"{"v":1,"scope":"session","op":"set","value":[1,{"2":[],"1":{}}]}"#,
            ),
            custom("e2", Some("e1"), "7", r#"{"n":"\udc00"}"#),
            custom("e3", Some("e1"), "session-state/bad", r#"{"v":9}"#),
            custom("e4", Some("e0"), "12", "null"),
        ];
        std::fs::write(&t, lines.join("\n") + "\n").unwrap();
        let empty = dir.join("empty.jsonl");
        std::fs::write(&empty, format!("{HEADER}\n")).unwrap();
        vec![t, empty]
    }

    fn fixtures(sub: &str) -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(sub);
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn the_streamed_document_is_the_whole_document_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = fixtures("");
        files.extend(fixtures("edge"));
        files.extend(tricky(dir.path()));
        let failed = files
            .iter()
            .filter(|f| SessionLog::open(f).is_err())
            .count();
        assert!(files.len() >= 14 && failed >= 3, "{files:?}");
        for f in &files {
            assert_eq!(
                streamed(std::slice::from_ref(f)).0,
                whole(std::slice::from_ref(f)),
                "{}",
                f.display()
            );
        }
        let (text, _, all_ok) = streamed(&files);
        assert_eq!(text, whole(&files));
        assert!(!all_ok, "bad files and events make the replay incomplete");
        assert!(text.contains(r#""x": "cut \ud83d""#) && text.contains(r#""big": 1e+21"#));
        assert_eq!(streamed(&[]).0, "{\n  \"sessions\": []\n}\n");
    }

    /// The versions the replay shows are the library's fold's: at every tip of random
    /// trees with forks, each plugin's branch version is the version of the last event of
    /// its history there (1 when none), and its session version the same over the file.
    #[test]
    fn the_versions_are_the_folds() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::Store::at(dir.path().join("unused.sqlite")).unwrap();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut versioned_tips = 0;
        for round in 0..20 {
            let path = dir.path().join(format!("r{round}.jsonl"));
            let mut text = format!("{HEADER}\n");
            for i in 0..120u64 {
                // A child of one of the last few entries: forks, and branches that end.
                let parent = (i > 0).then(|| format!("e{}", i - 1 - next(i.min(4))));
                let plugin = ["a", "b", "c"][next(3) as usize];
                let scope = if next(4) == 0 { "session" } else { "branch" };
                let version = [1, 1, 2, 3, 7][next(5) as usize];
                let envelope = match version {
                    1 => r#"{"v":1"#.to_owned(),
                    n => format!(r#"{{"v":2,"stateVersion":{n}"#),
                };
                let op = match next(3) {
                    0 => r#""op":"drop""#.to_owned(),
                    1 => format!(r#""op":"patch","patch":{{"k":{i}}}"#),
                    _ => format!(r#""op":"set","value":{i}"#),
                };
                let data = format!(r#"{envelope},"scope":"{scope}",{op}}}"#);
                let ct = format!("session-state/{plugin}");
                let _ = writeln!(
                    text,
                    "{}",
                    custom(&format!("e{i}"), parent.as_deref(), &ct, &data)
                );
            }
            std::fs::write(&path, text).unwrap();
            let view = SessionLog::open(&path).unwrap();
            let replayed = inspect::replay(&view, |_| {});
            // A second log of the file, whose leaf moves to each tip for the fold.
            let mut log = SessionLog::open(&path).unwrap();
            let fold = |log: &SessionLog, plugin: &str, scope: Scope| {
                let state = store.state::<Value>(plugin, scope).unwrap();
                let history = state.history(log).unwrap();
                history.last().map_or(1, |h| h.state_version)
            };
            for plugin in ["a", "b", "c"] {
                let shown = replayed.session_versions.get(plugin).copied().unwrap_or(1);
                assert_eq!(
                    shown,
                    fold(&log, plugin, Scope::Session),
                    "{round} {plugin}"
                );
            }
            let tips: Vec<String> = log.tips().iter().map(|t| (*t).to_owned()).collect();
            assert!(tips.len() > 1, "{round}: forks");
            for tip in &tips {
                let at = &replayed
                    .tips
                    .iter()
                    .find(|t| &t.tip == tip)
                    .expect("a tip of the replay")
                    .versions;
                versioned_tips += usize::from(!at.is_empty());
                log.navigate(tip).unwrap();
                for plugin in ["a", "b", "c"] {
                    let shown = at.get(plugin).copied().unwrap_or(1);
                    let folded = fold(&log, plugin, Scope::Branch);
                    assert_eq!(shown, folded, "{round}: {plugin} at {tip}");
                }
            }
        }
        assert!(versioned_tips > 20, "{versioned_tips}");
    }

    #[test]
    fn a_file_of_many_tips_is_printed_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fan.jsonl");
        let mut text = format!("{HEADER}\n");
        let _ = writeln!(
            text,
            "{}",
            custom(
                "r",
                None,
                "session-state/a",
                r#"{"v":1,"scope":"branch","op":"set","value":{}}"#
            )
        );
        for i in 0..2_000 {
            let data = format!(r#"{{"v":1,"scope":"branch","op":"patch","patch":{{"k":{i}}}}}"#);
            let _ = writeln!(
                text,
                "{}",
                custom(&format!("t{i}"), Some("r"), "session-state/a", &data)
            );
        }
        std::fs::write(&path, text).unwrap();
        let files = [path];
        let (doc, pieces, all_ok) = streamed(&files);
        assert!(all_ok);
        assert_eq!(doc, whole(&files));
        // About 64 KiB a piece: the document is never held whole.
        assert!(
            doc.len() > 400_000 && pieces >= doc.len() >> 16,
            "{} bytes in {pieces} pieces",
            doc.len()
        );
    }
}
