//! The write of a process that has not read the log (the CLI's `write`, `patch`, `drop`;
//! [`SessionState::write_file`]): answered from the projection's rows and the file's
//! tail, so its cost does not grow with the session (docs/spec.md §10). The same transaction as
//! `write.rs`, without the log in memory:
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
use crate::error::{DatabaseError, Error, Result};
use crate::log::writer::append_if_unchanged;
use crate::projection::{Tail, tail_in_transaction};
use crate::sqlite::end_transaction;
use crate::state::envelope::Op;
use rusqlite::Connection;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;

/// A write decided from the rows: the tail it extends, the line, the new id.
type Decided = (Tail, String, String);

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
            let db_path = db.path().to_path_buf();
            let action = super::write::action_of(&op);
            // In line behind the database's other writers, if any, to the end of the write.
            let _turn = db.begin_write(&session_id, action, file)?;
            let (conn, _) = db.write_parts();
            let (tail, line, id) = match decide(conn, &db_path, file, at, state, op) {
                Ok(Ok(Some(decided))) => decided,
                Ok(Ok(None)) => {
                    // Unchanged: what stands is at most a dead holder's row deleted.
                    end_transaction(conn, "COMMIT");
                    return Ok(TailWrite::Unchanged);
                }
                Ok(Err(why)) => {
                    end_transaction(conn, "ROLLBACK");
                    tracing::debug!(file = %file.display(), why, "writing through the log");
                    return Ok(TailWrite::NeedsLog);
                }
                Err(e) => {
                    end_transaction(conn, "ROLLBACK");
                    return Err(e);
                }
            };
            let fs = &**self.file_system();
            match append_if_unchanged(fs, file, tail.identity, tail.len, line.as_bytes(), action) {
                Ok(true) => {}
                Ok(false) => {
                    end_transaction(conn, "ROLLBACK");
                    tracing::debug!(file = %file.display(), "appended to meanwhile: writing through the log");
                    return Ok(TailWrite::NeedsLog);
                }
                Err(e) => {
                    end_transaction(conn, "ROLLBACK");
                    return Err(e);
                }
            }
            let committed = tail.catch_up(conn, &db_path, file).and_then(|caught| {
                conn.execute_batch("COMMIT")
                    .map(|()| caught)
                    .map_err(|source| Error::Database {
                        path: db_path.clone(),
                        action: "committing",
                        source: DatabaseError(source),
                    })
            });
            match committed {
                Ok(caught) => db.record_catch_up(caught),
                Err(e) => {
                    // The event is durable; the projection follows it on its own, or drops
                    // the session's rows for the next reader to rebuild.
                    tracing::debug!(error = %e, "the write's catch-up did not commit");
                    let conn = db.connection();
                    if !conn.is_autocommit() {
                        end_transaction(conn, "ROLLBACK");
                    }
                    db.sync_file(file);
                }
            }
            Ok(TailWrite::Appended(id))
        })
    }
}

/// The write, decided from the rows inside the transaction: `Ok(None)` when it changes
/// nothing, `Err(why)` when the rows cannot answer.
fn decide<T: Serialize + DeserializeOwned>(
    conn: &Connection,
    db: &Path,
    file: &Path,
    at: Option<&str>,
    state: &SessionState<T>,
    op: Op,
) -> Result<std::result::Result<Option<Decided>, &'static str>> {
    let tail = match tail_in_transaction(conn, db, file, at, state.plugin_id(), state.scope())? {
        Ok(tail) => tail,
        Err(why) => return Ok(Err(why)),
    };
    let current = &tail.current;
    let entry = || tail.current_entry(conn);
    let Some(env) = state
        .key()
        .decide_on(current.value.as_ref(), current.version, entry, op)?
    else {
        return Ok(Ok(None));
    };
    let id = crate::log::fresh_id(|id| tail.id_is_free(conn, db, id).map(|free| !free))?;
    let line = state.entry(&env).to_line(&id, tail.parent.as_deref());
    Ok(Ok(Some((tail, line, id))))
}
