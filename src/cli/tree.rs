//! `tree`: a drawing of the session tree.
//!
//! Each run of single-child entries is drawn as one column; a fork opens one indented
//! column per child. Inside a run, long stretches of entries that are neither state
//! events, the leaf, a branch key nor a fork are folded into one `… N entries …` line.

use super::{CmdResult, emit_text, open_log, short_json};
use session_state::inspect;
use session_state::state::envelope::Op;
use session_state::{EntryRef, EntryType, Role, SessionLog};
use std::fmt::Write as _;
use std::path::PathBuf;

pub(crate) const EXAMPLES: &str = "\
Examples:
  session-state tree s.jsonl

Markers: [key] the branch key (top of a run of single children), [fork: N] an entry with
N children, [leaf] the active leaf (the last entry in file order). State events show the
plugin, the op, the scope and the value. Stretches of 4 or more other entries are folded.
Exit codes: 0 drawn; 2 the file could not be read.";

/// Folded stretches are at least this long; shorter ones are drawn in full.
const FOLD_MIN: usize = 4;
const VALUE_WIDTH: usize = 48;

#[derive(Debug, clap::Args)]
pub(crate) struct TreeArgs {
    /// The session file (.jsonl)
    file: PathBuf,
}

pub(crate) fn run(args: TreeArgs) -> CmdResult {
    let log = open_log(&args.file)?;
    emit_text(&draw(&log))?;
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
                    format!("state {} {} ({}){arg}", ev.plugin, env.op.name(), env.scope)
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

pub(crate) fn draw(log: &SessionLog) -> String {
    let leaf = log.leaf_id();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: session {}, {} entries, {} root(s), {} fork(s), {} tip(s), leaf {}",
        log.path().display(),
        log.session_id(),
        log.len(),
        log.roots().len(),
        log.forks().len(),
        log.tips().len(),
        leaf.unwrap_or("(none)")
    );
    // (first entry of a run, prefix of its first line, prefix of the following lines)
    let mut stack: Vec<(&str, String, String)> = log
        .roots()
        .into_iter()
        .rev()
        .map(|r| (r, String::new(), String::new()))
        .collect();
    while let Some((start, first, rest)) = stack.pop() {
        let run = run_from(log, start);
        let last = run.len() - 1;
        let keep = |i: usize, id: &str| {
            i == 0 || i == last || leaf == Some(id) || inspect::state_event(log, id).is_some()
        };
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
            let (f, r) = if k + 1 == n {
                ("└─ ", "   ")
            } else {
                ("├─ ", "│  ")
            };
            stack.push((child, format!("{rest}{f}"), format!("{rest}{r}")));
        }
    }
    out
}
