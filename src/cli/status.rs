//! `status` and `force-refresh` (`docs/cli.md`, `docs/lock.md`): the projection
//! database, the session's write lock, and the events per plugin.
//!
//! `status` opens the database read-only and never creates it. `force-refresh` breaks a
//! lock whose holder may be alive only after a confirmation (a terminal prompt, or
//! `--yes`).

use super::{
    CmdResult, DbArgs, Failure, emit_json, emit_text, fail, open_log_lenient, open_stored_lenient,
    term_safe, warn,
};
use crate::inspect::{self, EventCount, LockReport, StatusReport};
use crate::{Store, StoredSession, lock::Liveness};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

pub(crate) const STATUS_EXAMPLES: &str = "\
Examples:
  session-state status s.jsonl
  session-state status s.jsonl --db /tmp/states.sqlite --json

Shows the session (a file, or a session in a store), the projection database (a local
SQLite cache of folds and the write lock, never created by this command; for a stored
session, this machine's cache of it), the session's write-lock holder with alive / not
alive / unknown, and the state events per plugin and scope, counted from the session itself.
Exit codes: 0 shown; 2 error.";

pub(crate) const FORCE_REFRESH_EXAMPLES: &str = "\
Examples:
  session-state force-refresh s.jsonl
  session-state force-refresh s.jsonl --yes --db /tmp/states.sqlite

Deletes the session's write-lock row and the projection's cached rows for the file, then
re-reads the file into the projection. When the lock holder may still be alive it asks
first (on a terminal); without a terminal it needs --yes.
Exit codes: 0 refreshed; 1 the lock was left alone (not confirmed); 2 error.";

#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    /// The session: a Pi JSONL file, or with a store a session id or a unique prefix of one
    #[arg(value_name = "SESSION")]
    pub(crate) file: PathBuf,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(crate) db: DbArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ForceRefreshArgs {
    /// The session: a Pi JSONL file, or with a store a session id or a unique prefix of one
    #[arg(value_name = "SESSION")]
    pub(crate) file: PathBuf,
    /// Clear the lock without asking, even when its holder may be alive
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    pub(crate) db: DbArgs,
}

/// `status --json`: the session file's facts around the library's [`StatusReport`], whose
/// members (`database`, `lock`, `pi`) come in between.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CliStatusReport<'a> {
    file: &'a Path,
    session_id: &'a str,
    entries: usize,
    readable: bool,
    #[serde(flatten)]
    rows: &'a StatusReport,
    events: Vec<EventCount>,
}

fn lock_text(st: &LockReport) -> String {
    let mut s = format!(
        "held by {} ({}: {})",
        st.holder, st.liveness, st.liveness_reason
    );
    if let Some(a) = &st.action {
        let _ = write!(s, ", doing: {a}");
    }
    let _ = write!(
        s,
        ", taken {} s ago, lease {}",
        st.age_ms / 1000,
        if st.lease_expired {
            "expired"
        } else {
            "running"
        }
    );
    if st.blocks_writers {
        s.push_str("; other writers are refused");
    } else {
        s.push_str("; the next writer takes it over");
    }
    s
}

/// `status` on the session file `args.file`, or on the stored session `stored` (read from
/// the store's lines, and named `<store>#<session id>` where a file is named by its path).
pub(crate) fn status(args: StatusArgs, stored: Option<&StoredSession<'_>>) -> CmdResult {
    let db = args.db.resolve()?;
    let (name, (log, strict_error)) = match stored {
        None => (args.file.clone(), open_log_lenient(&args.file)?),
        Some(session) => (session.label(), open_stored_lenient(session)?),
    };
    if let Some(e) = &strict_error {
        warn(format_args!(
            "the strict reader refuses this file; counts come from a salvage read \
             (see `session-state verify`): {e}"
        ));
    }
    // Both rows on one read-only connection; a missing database is not created.
    let rows = Store::at(&db)
        .and_then(|store| store.session_status(log.session_id()))
        .map(|st| inspect::status_report(&st))
        .map_err(fail)?;
    let counts = inspect::event_counts(&log);
    if args.json {
        return emit_json(&CliStatusReport {
            file: &name,
            session_id: log.session_id(),
            entries: log.len(),
            readable: strict_error.is_none(),
            rows: &rows,
            events: counts.rows(),
        })
        .map(|()| 0);
    }
    let mut out = String::new();
    let _ = writeln!(out, "session   {} ({})", log.session_id(), name.display());
    let _ = writeln!(
        out,
        "          {}",
        match stored {
            None => "the session file: its lines are the session and its state",
            Some(_) => "in the store: its lines there are the session and its state",
        }
    );
    let _ = writeln!(out, "entries   {}", log.len());
    let _ = writeln!(out, "database  {}", db.display());
    let _ = writeln!(
        out,
        "          {}",
        match stored {
            None => "the projection cache (SQLite): folds cached from the file, and the write lock",
            Some(_) => {
                "this machine's projection cache (SQLite) of the stored session: folds cached \
                 from the store's lines, and this machine's write lock"
            }
        }
    );
    if !rows.database.exists {
        let _ = writeln!(out, "          does not exist: nothing cached, no lock");
    } else {
        match &rows.lock {
            None => {
                let _ = writeln!(out, "lock      none");
            }
            Some(st) => {
                let _ = writeln!(out, "lock      {}", lock_text(st));
            }
        }
    }
    if let Some(p) = &rows.pi {
        let _ = writeln!(
            out,
            "pi        held by a running Pi {} ({}: {}){}",
            p.holder,
            p.liveness,
            p.liveness_reason,
            if p.blocks_writers {
                "; write/patch/drop are refused while it runs"
            } else {
                "; the next writer deletes the row"
            }
        );
    }
    if counts.is_empty() {
        let _ = writeln!(out, "events    none");
    }
    for (i, (p, c)) in counts.plugins.iter().enumerate() {
        let label = if i == 0 { "events" } else { "" };
        let parts: Vec<String> = c.scopes().map(|(s, n)| format!("{n} {s}")).collect();
        let _ = writeln!(out, "{label:<9} {p}: {}", parts.join(", "));
    }
    emit_text(&out)?;
    Ok(0)
}

/// Asks on the terminal; `false` unless the answer is yes.
pub(crate) fn confirm(question: &str) -> Result<bool, Failure> {
    let mut err = std::io::stderr().lock();
    if let Err(e) = write!(err, "{} [y/N] ", term_safe(question)).and_then(|()| err.flush()) {
        tracing::debug!(error = %e, "the question was not shown; the answer is read all the same");
    }
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| fail(format_args!("reading the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

pub(crate) fn force_refresh(args: ForceRefreshArgs) -> CmdResult {
    let db = args.db.resolve()?;
    let (mut log, _) = open_log_lenient(&args.file)?;
    let session_id = log.session_id().to_owned();
    if !db.exists() {
        // Nothing cached and no lock; creating a database here would be a side effect
        // nobody asked for. The file was re-read above.
        emit_text(&format!(
            "no projection database at {}: nothing cached, no lock to clear\nre-read {} \
             entries from {}\n",
            db.display(),
            log.len(),
            args.file.display()
        ))?;
        return Ok(0);
    }
    let store = Store::at(&db).map_err(fail)?;
    let st = store.lock_status(&session_id).map_err(fail)?;
    let mut out = String::new();
    if let Some(st) = &st {
        if Liveness::may_be_alive(st.liveness) && !args.yes {
            let question = format!(
                "session '{session_id}' is locked by {} ({}: {}). Clearing the lock lets \
                 another writer in while it may still be writing. Clear it?",
                st.holder, st.liveness, st.liveness_reason
            );
            let confirmed = std::io::stdin().is_terminal() && confirm(&question)?;
            if !confirmed {
                let message = format!(
                    "error: left the lock on session '{session_id}' alone: its holder {} may be \
                     alive ({}){}. Nothing was changed; run again with --yes to clear it \
                     anyway.",
                    st.holder,
                    st.liveness_reason,
                    if std::io::stdin().is_terminal() {
                        ""
                    } else {
                        " and there is no terminal to ask on"
                    }
                );
                eprintln!("{}", term_safe(&message));
                return Ok(1);
            }
        }
        // Cleared below, with the rest of the sequence.
        let _ = writeln!(
            out,
            "cleared the lock held by {} ({})",
            st.holder, st.liveness
        );
    } else {
        let _ = writeln!(out, "no lock on session '{session_id}'");
    }
    if let Some(p) = store.peek_presence(&session_id).map_err(fail)?.row() {
        // A running Pi's hold (`docs/pi-extension.md`): asked about as a live lock holder is.
        if p.blocks_writers() && !args.yes {
            let question = format!(
                "session '{session_id}' is open in a running Pi {} ({}: {}). Clearing its \
                 presence row lets other writers append while that Pi ignores them. Clear it?",
                p.holder, p.liveness, p.liveness_reason
            );
            if !(std::io::stdin().is_terminal() && confirm(&question)?) {
                let message = format!(
                    "error: left the presence row of session '{session_id}' alone: the Pi {} \
                     may be running ({}){}. Nothing was changed; run again with --yes to \
                     clear it anyway.",
                    p.holder,
                    p.liveness_reason,
                    if std::io::stdin().is_terminal() {
                        ""
                    } else {
                        " and there is no terminal to ask on"
                    }
                );
                // Nothing was changed: the lock is left as it is too.
                eprintln!("{}", term_safe(&message));
                return Ok(1);
            } else {
                store.clear_presence(&session_id).map_err(fail)?;
                let _ = writeln!(out, "cleared the presence row of the Pi {}", p.holder);
            }
        } else {
            store.clear_presence(&session_id).map_err(fail)?;
            let _ = writeln!(out, "cleared the presence row of the Pi {}", p.holder);
        }
    }
    // The one force-refresh sequence: the lock row cleared, the caches of the file
    // dropped, the file read again; then the rows rebuilt, to say what was read.
    store.force_refresh(&mut log).map_err(fail)?;
    let c = store.catch_up(&args.file).map_err(fail)?;
    let _ = writeln!(
        out,
        "dropped the cached rows; re-read {} entries ({} bytes) from {}",
        c.entries_added,
        c.bytes_read,
        args.file.display()
    );
    emit_text(&out)?;
    Ok(0)
}
