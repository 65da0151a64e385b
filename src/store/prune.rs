//! `prune`: removing the projection's rows of sessions whose file no longer exists.
//!
//! Pi has no session-deletion hook, so the rows of a deleted session (its watermark,
//! parent links, folded values, and its lock and presence rows) would stay in the
//! database forever. [`Store::prune`] removes them. It never touches a session file:
//! it only `stat`s them. What it removes is a cache: a session that comes back is rebuilt
//! from its file on the next read.
//!
//! A session counts as gone only when its file provably is: `stat` says it does not
//! exist **and its folder does**. A file whose folder is missing too (a disk that is not
//! mounted, a network share that is away, or a folder removed for good), or whose `stat`
//! fails otherwise (no permission, an I/O error), is kept and reported with the reason.
//! The check is made again under the database's write lock just before the rows go.
//!
//! The lock row and the presence row of a pruned session go with it when no other file
//! in the projection has the same session id (a copy of the file) and their holder is
//! not a live process within its lease: a live Pi's presence row stays until that Pi
//! leaves the session, and is reported.

use super::Store;
use crate::error::Result;
use crate::lock::{self, Liveness, presence};
use crate::projection::prune::{self, Hold};
use crate::projection::{Projection, db_err};
use rusqlite::Connection;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// What [`Store::prune`] removed, or [`Store::prune_dry_run`] would remove.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneReport {
    /// The projection database.
    pub database: PathBuf,
    /// Whether it exists (prune never creates it).
    pub database_exists: bool,
    /// A dry run: nothing was removed; `removed` lists what would be.
    pub dry_run: bool,
    /// Sessions the projection holds rows of.
    pub checked: usize,
    /// Sessions whose file is gone, and whose rows were (or would be) removed.
    pub removed: Vec<PrunedSession>,
    /// Sessions whose file is missing but not provably gone: their rows stay.
    pub kept: Vec<KeptSession>,
}

/// A session whose rows were removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrunedSession {
    /// The session file (the canonical path the projection knew it by).
    pub file: PathBuf,
    /// Its session id.
    pub session_id: String,
    /// Entries and state events whose rows went.
    pub entries: u64,
    /// State events among them.
    pub events: u64,
    /// The holder of the session's lock row, when that row went too.
    pub lock: Option<String>,
    /// The holder (a Pi process) of the session's presence row, when that row went too.
    pub presence: Option<String>,
    /// Rows of the session that stay, and why (a live Pi's presence, another copy of the
    /// file with the same session id).
    pub left: Vec<String>,
}

/// A session whose file is missing but whose rows stay.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptSession {
    /// The session file.
    pub file: PathBuf,
    /// Its session id.
    pub session_id: String,
    /// Why it was kept, and what to do if the file is gone for good.
    pub reason: String,
}

/// What `stat` says of a session file.
enum FileState {
    Present,
    Gone,
    Unknown(String),
}

fn file_state(file: &Path) -> FileState {
    let err = match std::fs::symlink_metadata(file) {
        Ok(_) => return FileState::Present,
        Err(e) => e,
    };
    if err.kind() != ErrorKind::NotFound {
        return FileState::Unknown(format!("cannot tell whether it exists ({err}); kept"));
    }
    let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return FileState::Unknown("it has no folder; kept".into());
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => FileState::Gone,
        Ok(_) => FileState::Unknown(format!(
            "its folder {} is not a folder; kept",
            dir.display()
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => FileState::Unknown(format!(
            "its folder {} is missing too (a disk that is not mounted?); kept. If the folder \
             is gone for good, create it (mkdir -p) and prune again",
            dir.display()
        )),
        Err(e) => FileState::Unknown(format!(
            "its folder {} cannot be examined ({e}); kept",
            dir.display()
        )),
    }
}

/// The lock and presence rows of `session_id` that may go with it, and the ones that stay.
fn judge_holds(
    conn: &Connection,
    db: &Path,
    session_id: &str,
) -> Result<(Option<Hold>, Option<Hold>, Vec<String>)> {
    let mut left = Vec::new();
    let lock = lock::status(conn, session_id).map_err(db_err(db, "reading the write lock"))?;
    let lock = match lock {
        Some(l) if l.blocks_writers() => {
            left.push(format!(
                "the lock row of {} ({}: {}), whose lease runs",
                l.holder, l.liveness, l.liveness_reason
            ));
            None
        }
        Some(l) => Some(Hold {
            holder: l.holder,
            at_ms: l.acquired_at_ms,
        }),
        None => None,
    };
    let pi =
        presence::status(conn, session_id).map_err(db_err(db, "reading the Pi presence row"))?;
    let pi = match pi {
        Some(p) if p.liveness != Liveness::NotAlive => {
            left.push(format!(
                "the presence row of the Pi {} ({}: {})",
                p.holder, p.liveness, p.liveness_reason
            ));
            None
        }
        Some(p) => Some(Hold {
            holder: p.holder,
            at_ms: p.since_ms,
        }),
        None => None,
    };
    Ok((lock, pi, left))
}

impl Store {
    /// Removes the rows of every session whose file no longer exists (see the module
    /// docs for what counts as gone) and says what it removed. Never touches a session
    /// file; never creates the database. Each session's rows go in bounded chunks, so
    /// other sessions' writers are never held up for long.
    ///
    /// ```no_run
    /// let store = session_state::Store::at("/home/me/.pi/agent/sessions/states.sqlite")?;
    /// for s in store.prune()?.removed {
    ///     println!("removed {} ({} entries)", s.file.display(), s.entries);
    /// }
    /// # Ok::<(), session_state::Error>(())
    /// ```
    pub fn prune(&self) -> Result<PruneReport> {
        self.prune_as(false)
    }

    /// What [`Store::prune`] would remove, without removing anything (the database is
    /// opened read-only).
    pub fn prune_dry_run(&self) -> Result<PruneReport> {
        self.prune_as(true)
    }

    fn prune_as(&self, dry_run: bool) -> Result<PruneReport> {
        let database = self.database_path().to_path_buf();
        let mut report = PruneReport {
            database: database.clone(),
            database_exists: false,
            dry_run,
            checked: 0,
            removed: Vec::new(),
            kept: Vec::new(),
        };
        // Never created here; a file that is not ours is refused by the same check.
        let Some(read_only) = Projection::open_existing(&database)? else {
            return Ok(report);
        };
        report.database_exists = true;
        if dry_run {
            plan(&read_only, &database, &mut report, |_, _| {
                Ok(Some(Default::default()))
            })?;
            return Ok(report);
        }
        drop(read_only);
        self.with_db(|db| {
            let conn = db.connection();
            plan(conn, &database, &mut report, |s, holds| {
                let (lock, pi) = (holds.0.as_ref(), holds.1.as_ref());
                let path = crate::projection::key_path(&s.file);
                prune::remove(
                    conn,
                    &database,
                    &s.file,
                    &s.session_id,
                    || matches!(file_state(&path), FileState::Gone),
                    lock,
                    pi,
                )
                .map(|r| r.rows.then_some(r))
            })
        })?;
        Ok(report)
    }
}

/// Classifies every projected session; `remove` is called for each gone one (with its
/// removable lock and presence rows) and returns what it removed, `None` when the file
/// was back by then.
fn plan(
    conn: &Connection,
    db: &Path,
    report: &mut PruneReport,
    mut remove: impl FnMut(
        &prune::SessionRows,
        &(Option<Hold>, Option<Hold>),
    ) -> Result<Option<prune::Removed>>,
) -> Result<()> {
    let sessions = prune::sessions(conn, db)?;
    report.checked = sessions.len();
    for s in &sessions {
        let file = crate::projection::key_path(&s.file);
        match file_state(&file) {
            FileState::Present => {}
            FileState::Unknown(reason) => report.kept.push(KeptSession {
                file,
                session_id: s.session_id.clone(),
                reason,
            }),
            FileState::Gone => {
                // A copy of the file (same session id) that stays keeps the session's
                // lock and presence rows.
                let other_copy = sessions.iter().any(|o| {
                    o.session_id == s.session_id
                        && o.file != s.file
                        && !matches!(
                            file_state(&crate::projection::key_path(&o.file)),
                            FileState::Gone
                        )
                });
                let (lock, pi, left) = if other_copy {
                    let why = "its lock and presence rows: another file has the same session id";
                    (None, None, vec![why.to_string()])
                } else {
                    judge_holds(conn, db, &s.session_id)?
                };
                let holds = (lock, pi);
                let Some(done) = remove(s, &holds)? else {
                    report.kept.push(KeptSession {
                        file,
                        session_id: s.session_id.clone(),
                        reason: "the file was there again when its rows were about to go; kept"
                            .into(),
                    });
                    continue;
                };
                let dry = report.dry_run;
                let lock = holds.0.filter(|_| dry || done.lock).map(|h| h.holder);
                let presence = holds.1.filter(|_| dry || done.presence).map(|h| h.holder);
                report.removed.push(PrunedSession {
                    file,
                    session_id: s.session_id.clone(),
                    entries: s.entries,
                    events: s.events,
                    lock,
                    presence,
                    left,
                });
            }
        }
    }
    Ok(())
}
