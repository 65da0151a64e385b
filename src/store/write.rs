//! The write transaction, in one place: one short SQLite write transaction per write.
//!
//! 1. `BEGIN IMMEDIATE`: SQLite's write lock, held to the end, excludes every other
//!    writer of the database (of this session and of the others) for the whole operation;
//!    in it the session's `write_lock` row and a running Pi's `pi_presence` row are
//!    judged (`docs/lock.md`: a live holder within its lease refuses, a dead or expired
//!    one is deleted). No row is written for the write.
//! 2. The log is refreshed (others' appends, most of them already read before step 1),
//!    the event appended and `fdatasync`ed; the append holds the session file's advisory
//!    lock from its check of the file's end to the sync, which excludes writers that use
//!    another database (`SessionLog::append`).
//! 3. The projection catches up with the new bytes, in the same transaction.
//! 4. `COMMIT`.
//!
//! The log is durable before the projection commits; the projection never gets ahead of
//! it (`docs/durability.md`). If the catch-up or the commit fails, the transaction is rolled back, the
//! appended event stands, and the projection catches up on its own (or is dropped, and the
//! next reader rebuilds it).

use super::Store;
use super::state::SessionState;
use crate::error::{DatabaseError, Error, Result};
use crate::lock;
use crate::state::envelope::Op;
use crate::tree::SessionLog;
use serde::Serialize;
use serde::de::DeserializeOwned;

impl Store {
    /// Appends `op` for `state` as a child of the log's leaf unless it changes nothing.
    pub(super) fn commit<T: Serialize + DeserializeOwned>(
        &self,
        state: &SessionState<T>,
        log: &mut SessionLog,
        op: Op,
    ) -> Result<Option<String>> {
        let action = action_of(&op);
        if !log.is_materialized() {
            // Only this process can see a session that is not on disk yet. The database is
            // opened first: one that is refused (not ours, docs/spec.md §4) refuses before this
            // append can create the session file (docs/spec.md §2, decide before touching).
            return self.with_db(|db| {
                let id = append_if_changed(state, log, op)?;
                if id.is_some() && log.is_materialized() {
                    db.sync(log)?;
                }
                Ok(id)
            });
        }
        self.with_db(|db| {
            let db_path = db.path().to_path_buf();
            let file = log.path().to_path_buf();
            // Others' appends are read before the database is locked, so that the
            // transaction holds it for this write only (docs/spec.md §4: other sessions wait
            // briefly); the refresh inside then finds at most what arrived meanwhile.
            let seen = log.consumed_bytes() + log.tail_bytes();
            log.refresh()?;
            if log.consumed_bytes() + log.tail_bytes() != seen {
                // The projection follows in its own bounded chunks; a failure is the
                // in-transaction catch-up's to meet again.
                let _ = db.catch_up(&file);
            }
            let conn = db.connection();
            lock::begin_write(conn, log.session_id(), action, &file)?;
            let appended =
                crate::projection::catch_up_in_transaction(conn, &db_path, &file, || {
                    log.refresh()?;
                    append_if_changed(state, log, op)
                });
            let (id, caught) = match appended {
                Ok(Some(done)) => done,
                other => {
                    // Nothing appended: what stands is at most a dead holder's row deleted.
                    if conn.execute_batch("COMMIT").is_err() {
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                    return other.map(|_| None);
                }
            };
            let committed = caught.and_then(|caught| {
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
                    // the session's rows for the next reader to rebuild (`sync`).
                    tracing::debug!(error = %e, "the write's catch-up did not commit");
                    if !conn.is_autocommit() {
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                    db.sync(log)?;
                }
            }
            Ok(Some(id))
        })
    }
}

/// The action the lock row and a refusal name (`docs/lock.md`).
pub(super) fn action_of(op: &Op) -> &'static str {
    match op {
        Op::Set(_) => "write",
        Op::Patch(_) => "patch",
        Op::Drop => "drop",
    }
}

fn append_if_changed<T: Serialize + DeserializeOwned>(
    state: &SessionState<T>,
    log: &mut SessionLog,
    op: Op,
) -> Result<Option<String>> {
    let current = state.folded(log, log.tree().leaf_index())?;
    let action = action_of(&op);
    let Some(env) = state.key().decide(current.value.as_deref(), op)? else {
        return Ok(None);
    };
    let id = log.append(state.entry(&env)).map_err(|e| match e {
        // The file lock refused the log's append: name the state write it was.
        Error::Lock(refused) => Error::Lock(Box::new(refused.for_action(action))),
        other => other,
    })?;
    Ok(Some(id))
}
