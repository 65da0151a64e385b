//! `prune`: removes the projection's rows of sessions whose file no longer exists
//! ([`Store::prune`]; `docs/cli.md`). It never touches a session file and never creates
//! the database. It asks first on a terminal; without one it needs `--yes`.

use super::{CmdResult, DbArgs, emit_json, emit_text, fail, term_safe};
use crate::Store;
use crate::store::PruneReport;
use serde::Serialize;
use std::fmt::Write as _;
use std::io::IsTerminal;

pub(crate) const EXAMPLES: &str = "\
Examples:
  session-state prune --dry-run
  session-state prune --yes --db /tmp/states.sqlite

Removes the projection database's rows (watermark, cached folds, lock and presence rows)
of sessions whose file no longer exists. A session counts as gone only when its folder is
there and the file is not; a file whose folder is missing too (a disk that is not mounted)
is kept and listed. Session files are never touched; the rows are a cache, rebuilt from
the file if it comes back. Asks first on a terminal; without one it needs --yes.
Exit codes: 0 pruned (or nothing to prune, or --dry-run); 1 not confirmed; 2 error.";

#[derive(Debug, clap::Args)]
pub(crate) struct PruneArgs {
    /// Only list what would be removed
    #[arg(long)]
    dry_run: bool,
    /// Remove without asking
    #[arg(long, conflicts_with = "dry_run")]
    yes: bool,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArgs,
}

/// `prune --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    database: &'a std::path::Path,
    database_exists: bool,
    dry_run: bool,
    checked: usize,
    removed: Vec<Removed<'a>>,
    kept: Vec<Kept<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Removed<'a> {
    file: &'a std::path::Path,
    session_id: &'a str,
    entries: u64,
    events: u64,
    lock: Option<&'a str>,
    presence: Option<&'a str>,
    left: &'a [String],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Kept<'a> {
    file: &'a std::path::Path,
    session_id: &'a str,
    reason: &'a str,
}

fn json(r: &PruneReport) -> Report<'_> {
    Report {
        database: &r.database,
        database_exists: r.database_exists,
        dry_run: r.dry_run,
        checked: r.checked,
        removed: r
            .removed
            .iter()
            .map(|s| Removed {
                file: &s.file,
                session_id: &s.session_id,
                entries: s.entries,
                events: s.events,
                lock: s.lock.as_deref(),
                presence: s.presence.as_deref(),
                left: &s.left,
            })
            .collect(),
        kept: r
            .kept
            .iter()
            .map(|k| Kept {
                file: &k.file,
                session_id: &k.session_id,
                reason: &k.reason,
            })
            .collect(),
    }
}

fn text(r: &PruneReport) -> String {
    let mut out = String::new();
    if !r.database_exists {
        let _ = writeln!(
            out,
            "no projection database at {}: nothing to prune",
            r.database.display()
        );
        return out;
    }
    let verb = if r.dry_run { "would remove" } else { "removed" };
    for s in &r.removed {
        let _ = write!(
            out,
            "{verb} {} (session {}: {} entries, {} state events",
            s.file.display(),
            s.session_id,
            s.entries,
            s.events
        );
        if let Some(h) = &s.lock {
            let _ = write!(out, "; the lock row of {h}");
        }
        if let Some(h) = &s.presence {
            let _ = write!(out, "; the presence row of the Pi {h}");
        }
        out.push_str(")\n");
        for l in &s.left {
            let _ = writeln!(out, "  left {l}");
        }
    }
    for k in &r.kept {
        let _ = writeln!(out, "kept {}: {}", k.file.display(), k.reason);
    }
    let _ = writeln!(
        out,
        "{} sessions in {}: {} {verb}, {} kept, {} in place",
        r.checked,
        r.database.display(),
        r.removed.len(),
        r.kept.len(),
        r.checked - r.removed.len() - r.kept.len()
    );
    out
}

fn print(r: &PruneReport, as_json: bool) -> Result<(), super::Failure> {
    if as_json {
        emit_json(&json(r))
    } else {
        emit_text(&text(r))
    }
}

pub(crate) fn run(args: PruneArgs) -> CmdResult {
    let db = args.db.resolve()?;
    let store = Store::at(&db).map_err(fail)?;
    let plan = store.prune_dry_run().map_err(fail)?;
    if args.dry_run || plan.removed.is_empty() {
        print(&plan, args.json)?;
        return Ok(0);
    }
    if !args.yes {
        let terminal = std::io::stdin().is_terminal();
        if !terminal || !confirm(&plan)? {
            print(&plan, args.json)?;
            eprintln!(
                "{}",
                term_safe(&format!(
                    "error: nothing was removed{}; run again with --yes to remove the rows of \
                     {}",
                    if terminal {
                        ""
                    } else {
                        " (there is no terminal to ask on)"
                    },
                    sessions(plan.removed.len())
                ))
            );
            return Ok(1);
        }
    }
    print(&store.prune().map_err(fail)?, args.json)?;
    Ok(0)
}

fn sessions(n: usize) -> String {
    if n == 1 {
        "this session".into()
    } else {
        format!("these {n} sessions")
    }
}

/// Shows the plan on stderr and asks; `false` unless the answer is yes.
fn confirm(plan: &PruneReport) -> Result<bool, super::Failure> {
    super::status::confirm(&format!(
        "{}Remove the rows of {}?",
        text(plan),
        sessions(plan.removed.len())
    ))
}
