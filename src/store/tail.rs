//! The write of a process that has not read the log (the CLI's `write`, `patch`, `drop`;
//! [`SessionState::write`] on a file): the pipeline's target made of the projection's rows and
//! the file's tail (`write.rs`), so its cost does not grow with the session (docs/spec.md
//! §10). Without the log in memory:
//!
//! 1. Before the database is locked: the rows catch up with what others appended (their
//!    bytes only, as a read does). Rows that cannot answer (none yet, another file at the
//!    path, a catch-up that fails) send the caller to the log: nothing was done.
//! 2. `BEGIN IMMEDIATE`; the session's `write_lock` and `pi_presence` rows are judged
//!    (`docs/lock.md`).
//! 3. In the transaction: the file is still exactly what the rows were folded from
//!    (identity, length, change stamp), its last line is complete and valid, its version
//!    is 3, and `--at` names a known entry; the value at the leaf comes from the rows.
//!    Otherwise: `ROLLBACK`, and the caller reads the log.
//! 4. Unchanged: `COMMIT` (at most a dead holder's row was deleted), nothing appended.
//! 5. The line is appended only if the file opened for appending still has that identity
//!    and length, checked under the session file's advisory lock and held to the end of
//!    the append (one `write()`, `fdatasync`: `append_if_unchanged`), so a writer through
//!    another database cannot append in between; a foreign append before the check sends
//!    the caller to the log, nothing written.
//! 6. The rows fold the new line (read from the watermark on), `COMMIT`.
//!
//! The log is durable before the projection commits (docs/spec.md §4); after the append, a
//! failure to catch up or commit leaves the projection to catch up on its own.

use super::Store;
use super::state::{SessionState, TailWrite};
use super::write::{Appended, Outcome, Own, Target, run};
use crate::error::{DatabaseError, Error, ProjectionError, Result};
use crate::log::io::FileSystem;
use crate::log::writer::append_if_unchanged;
use crate::projection::{Projection, Tail, tail_in_transaction};
use crate::sqlite::{End, end_transaction};
use crate::state::decide::Decided;
use crate::state::envelope::Op;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The rows and the file's tail as the pipeline's target.
struct TailTarget<'a> {
    db: &'a mut Projection,
    db_path: PathBuf,
    fs: &'a dyn FileSystem,
    file: &'a Path,
    at: Option<&'a str>,
    session_id: String,
    action: &'static str,
    /// The transaction is open.
    open: bool,
    _turn: Option<crate::lock::Turn>,
}

impl Target for TailTarget<'_> {
    type Place = Tail;

    fn begin(&mut self, action: &'static str) -> Result<()> {
        self.action = action;
        // In line behind the database's other writers, if any, to the end of the write.
        self._turn = self.db.begin_write(&self.session_id, action, self.file)?;
        self.open = true;
        Ok(())
    }

    fn current<T: Serialize + DeserializeOwned>(
        &mut self,
        state: &SessionState<T>,
    ) -> Result<std::result::Result<Tail, &'static str>> {
        let conn = self.db.sql();
        tail_in_transaction(
            conn,
            &self.db_path,
            self.file,
            self.at,
            state.plugin_id(),
            state.scope(),
        )
    }

    fn value(tail: &Tail) -> (Option<&Value>, u32) {
        (tail.current.value.as_ref(), tail.current.version)
    }

    fn entry(&self, tail: &Tail) -> Option<String> {
        tail.current_entry(self.db.sql())
    }

    fn id_taken(&self, tail: &Tail, id: &str) -> Result<bool> {
        tail.id_is_free(self.db.sql(), &self.db_path, id)
            .map(|free| !free)
    }

    fn parent<'p>(&'p self, tail: &'p Tail) -> Option<&'p str> {
        tail.parent.as_deref()
    }

    fn append(&mut self, tail: &Tail, line: &str) -> Result<Appended> {
        let (identity, len) = (tail.identity, tail.len);
        match append_if_unchanged(
            self.fs,
            self.file,
            identity,
            len,
            line.as_bytes(),
            self.action,
        )? {
            true => Ok(Appended::Ours),
            false => Ok(Appended::Lost),
        }
    }

    fn id_at(&mut self, _: &Tail) -> Result<Option<String>> {
        // A file append's outcome is known: it is written and synced, or an error.
        Ok(None)
    }

    fn remember<T: Serialize + DeserializeOwned>(
        &mut self,
        _: &SessionState<T>,
        tail: Tail,
        _: Own,
        _: Decided,
    ) -> Result<()> {
        // The rows fold the new line, from the watermark on, and commit.
        self.open = false;
        let conn = self.db.sql();
        let committed = tail
            .catch_up(conn, &self.db_path, self.file)
            .and_then(|caught| {
                crate::sqlite::commit(conn)
                    .map(|()| caught)
                    .map_err(|source| {
                        Error::Projection(ProjectionError::Database {
                            path: self.db_path.clone(),
                            action: "committing",
                            source: DatabaseError(source),
                        })
                    })
            });
        match committed {
            Ok(caught) => self.db.record_catch_up(caught),
            Err(e) => {
                // The event is durable; the projection follows it on its own, or drops
                // the session's rows for the next reader to rebuild.
                tracing::debug!(error = %e, "the write's catch-up did not commit");
                crate::sqlite::rollback(self.db.sql());
                self.db.sync_file(self.file);
            }
        }
        Ok(())
    }

    fn end(&mut self, written: &Result<Outcome>) {
        if !std::mem::take(&mut self.open) {
            return;
        }
        let conn = self.db.sql();
        match written {
            // Unchanged: what stands is at most a dead holder's row deleted.
            Ok(Outcome::Unchanged) => end_transaction(conn, End::Commit),
            _ => end_transaction(conn, End::Rollback),
        }
    }
}

impl Store {
    /// Appends `op` for `state` at the tail of the session file `file` (as a child of
    /// `at`, default the last entry) unless it changes nothing. [`TailWrite::NeedsLog`]:
    /// the rows cannot answer, nothing was written; the caller reads the log.
    pub(super) fn commit_at_tail<T: Serialize + DeserializeOwned>(
        &self,
        state: &SessionState<T>,
        file: &Path,
        at: Option<&str>,
        op: Op,
    ) -> Result<TailWrite> {
        self.with_db(|db| {
            let session_id = match db.tail_session(file)? {
                Ok(id) => id,
                Err(why) => {
                    tracing::debug!(file = %file.display(), why, "writing through the log");
                    return Ok(TailWrite::NeedsLog);
                }
            };
            let mut target = TailTarget {
                db_path: db.path().to_path_buf(),
                db,
                fs: &**self.file_system(),
                file,
                at,
                session_id,
                action: "write",
                open: false,
                _turn: None,
            };
            Ok(match run(&mut target, state, op)? {
                Outcome::Appended(id) => TailWrite::Appended(id),
                Outcome::Unchanged => TailWrite::Unchanged,
                Outcome::Elsewhere(why) => {
                    tracing::debug!(file = %file.display(), why, "writing through the log");
                    TailWrite::NeedsLog
                }
                Outcome::Lost(_) | Outcome::NotWritten(..) => {
                    tracing::debug!(file = %file.display(), "appended to meanwhile: writing through the log");
                    TailWrite::NeedsLog
                }
            })
        })
    }
}
