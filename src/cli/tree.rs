//! `tree`: a drawing of the session tree.
//!
//! Each run of single-child entries is drawn as one column; a fork opens one indented
//! column per child. Inside a run, long stretches of entries that are neither state
//! events, the leaf, a branch key nor a fork are folded into one `… N entries …` line.
//! Indentation stops at [`MAX_INDENT`] levels (`[+N] ` marks the levels left out), so
//! the drawing's size is linear in the number of entries however deep forks nest.

use super::{CmdResult, emit_text, open_log, short_json, term_safe};
use crate::Op;
use crate::inspect;
use crate::{EntryRef, EntryType, Role, SessionLog};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub(crate) const EXAMPLES: &str = "\
Examples:
  session-state tree s.jsonl

Markers: [key] the branch key (top of a run of single children), [fork: N] an entry with
N children, [leaf] the active leaf (the last entry in file order). State events show the
plugin, the op, the scope (with the state version, where it is not 1) and the value.
Stretches of 4 or more other entries are folded.
Forks nested more than 12 deep are not indented further: such lines start with [+N], the
number of levels of indentation left out.
Exit codes: 0 drawn; 2 the session could not be read.";

/// Folded stretches are at least this long; shorter ones are drawn in full.
const FOLD_MIN: usize = 4;
const VALUE_WIDTH: usize = 48;
/// Forks nested deeper than this are not indented further: their lines start with
/// `[+N] `, N the levels left out, so every line has a bounded width and the drawing
/// stays linear in the file.
const MAX_INDENT: usize = 12;

#[derive(Debug, clap::Args)]
pub(crate) struct TreeArgs {
    /// The session: a Pi JSONL file, or with a store a session id or a unique prefix of one
    #[arg(value_name = "SESSION")]
    pub(crate) file: PathBuf,
}

pub(crate) fn run(args: TreeArgs) -> CmdResult {
    let log = open_log(&args.file)?;
    emit_text(&draw(&log, &args.file))?;
    Ok(0)
}

fn describe(e: EntryRef<'_>, log: &SessionLog) -> String {
    match e.entry_type() {
        EntryType::Message => match e.role() {
            Some(Role::User) => "message user".into(),
            Some(Role::Assistant) => "message assistant".into(),
            Some(Role::ToolResult) => "message toolResult".into(),
            _ => "message".into(),
        },
        EntryType::Custom => match inspect::state_event(log, e.id()) {
            Some(ev) => match ev.envelope {
                Ok(env) => {
                    let arg = match &env.op {
                        Op::Set(v) | Op::Patch(v) => format!(" {}", short_json(v, VALUE_WIDTH)),
                        Op::Drop => String::new(),
                    };
                    let version = match env.state_version {
                        1 => String::new(),
                        n => format!(", stateVersion {n}"),
                    };
                    let (op, scope) = (env.op.name(), env.scope);
                    format!("state {} {op} ({scope}{version}){arg}", ev.plugin)
                }
                Err(detail) => format!("state {} INVALID: {detail}", ev.plugin),
            },
            None => format!("custom {}", e.custom_type().unwrap_or("(no customType)")),
        },
        EntryType::CustomMessage => format!(
            "custom_message {}",
            e.custom_type().unwrap_or("(no customType)")
        ),
        EntryType::ThinkingLevelChange => "thinking_level_change".into(),
        EntryType::ModelChange => "model_change".into(),
        EntryType::Compaction => "compaction".into(),
        EntryType::BranchSummary => "branch_summary".into(),
        EntryType::Label => "label".into(),
        EntryType::SessionInfo => "session_info".into(),
        EntryType::Usage => "usage".into(),
        EntryType::ContextEdit => "context_edit".into(),
        _ => "(other type)".into(),
    }
}

fn line(log: &SessionLog, id: &str, leaf: Option<&str>, head: bool) -> String {
    let Some(e) = log.entry(id) else {
        return id.to_owned();
    };
    let mut s = format!("{id} {}", describe(e, log));
    if head {
        s.push_str("  [key]");
    }
    let n = e.children().len();
    if n > 1 {
        let _ = write!(s, "  [fork: {n}]");
    }
    if leaf == Some(id) {
        s.push_str("  [leaf]");
    }
    s
}

/// The run of single children starting at `id`, ending at a tip or a fork.
fn run_from<'a>(log: &'a SessionLog, id: &'a str) -> Vec<&'a str> {
    let mut out = vec![id];
    let mut cur = id;
    loop {
        let children = log.entry(cur).map(|e| e.children()).unwrap_or_default();
        match children.as_slice() {
            [only] => {
                out.push(only);
                cur = only;
            }
            _ => return out,
        }
    }
}

/// Where a run is drawn: its nesting depth and the columns of its last
/// [`MAX_INDENT`] levels (`true`: more siblings follow at that level, drawn `│`).
#[derive(Clone)]
struct Indent {
    depth: usize,
    more: Vec<bool>,
}

impl Indent {
    /// The prefix of the run's first line (`is_head`) or of its other lines.
    fn prefix(&self, is_head: bool) -> String {
        let mut s = String::new();
        let hidden = self.depth - self.more.len();
        if hidden > 0 {
            let _ = write!(s, "[+{hidden}] ");
        }
        let n = self.more.len();
        for (k, &more) in self.more.iter().enumerate() {
            s.push_str(match (is_head && k + 1 == n, more) {
                (true, true) => "├─ ",
                (true, false) => "└─ ",
                (false, true) => "│  ",
                (false, false) => "   ",
            });
        }
        s
    }

    fn child(&self, more: bool) -> Indent {
        let mut next = self.more.clone();
        if next.len() == MAX_INDENT {
            next.remove(0);
        }
        next.push(more);
        Indent {
            depth: self.depth + 1,
            more: next,
        }
    }
}

/// The drawing; `shown` is the path as the user named it (a symlink is not resolved).
pub(crate) fn draw(log: &SessionLog, shown: &Path) -> String {
    let leaf = log.leaf_id();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: session {}, {} entries, {} root(s), {} fork(s), {} tip(s), leaf {}",
        term_safe(&shown.display().to_string()),
        log.session_id(),
        log.len(),
        log.roots().len(),
        log.forks().len(),
        log.tips().len(),
        leaf.unwrap_or("(none)")
    );
    // (first entry of a run, where it is drawn)
    let top = Indent {
        depth: 0,
        more: Vec::new(),
    };
    let mut stack: Vec<(&str, Indent)> = log
        .roots()
        .into_iter()
        .rev()
        .map(|r| (r, top.clone()))
        .collect();
    while let Some((start, indent)) = stack.pop() {
        let run = run_from(log, start);
        let last = run.len() - 1;
        let keep = |i: usize, id: &str| {
            i == 0 || i == last || leaf == Some(id) || inspect::state_event(log, id).is_some()
        };
        let first = indent.prefix(true);
        let rest = indent.prefix(false);
        let mut i = 0;
        while i < run.len() {
            if keep(i, run[i]) {
                let prefix = if i == 0 { &first } else { &rest };
                let _ = writeln!(out, "{prefix}{}", line(log, run[i], leaf, i == 0));
                i += 1;
                continue;
            }
            let mut j = i;
            while j < run.len() && !keep(j, run[j]) {
                j += 1;
            }
            if j - i >= FOLD_MIN {
                let _ = writeln!(out, "{rest}… {} entries …", j - i);
            } else {
                for id in &run[i..j] {
                    let _ = writeln!(out, "{rest}{}", line(log, id, leaf, false));
                }
            }
            i = j;
        }
        let children = log
            .entry(run[last])
            .map(|e| e.children())
            .unwrap_or_default();
        let n = children.len();
        for (k, child) in children.into_iter().enumerate().rev() {
            stack.push((child, indent.child(k + 1 != n)));
        }
    }
    out
}
