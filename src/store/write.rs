//! The in-process write, in one place: one short SQLite transaction per write, which
//! writes nothing to the database.
//!
//! 1. `BEGIN IMMEDIATE`: SQLite's write lock, held to the end, excludes every other
//!    writer of the database (of this session and of the others) for the whole operation;
//!    in it the session's `write_lock` row and a running Pi's `pi_presence` row are
//!    judged (`docs/lock.md`: a live holder within its lease refuses, a dead or expired
//!    one is deleted). No row is written for the write.
//! 2. Under the session file's advisory lock, what others appended is read, the event
//!    decided from the log as it now ends, appended and `fdatasync`ed; the lock, held from
//!    the check of the file's end to the sync, excludes writers that use another database
//!    (`SessionLog::append_decided`).
//! 3. `COMMIT` (which writes no WAL frame: nothing changed).
//!
//! The projection is not updated here: the log in memory answers this process's reads
//! (its fold memo), and the next read through the projection, in this process or any
//! other, catches the rows up from their watermark, checking the consumed prefix first
//! (`docs/projection.md`, "The write path leaves the projection to the next reader";
//! `docs/durability.md`). So the projection is never ahead of the log, and a crash
//! anywhere leaves at most rows behind the file, which every reader catches up the same
//! way.

use super::Store;
use super::state::SessionState;
use crate::error::{Error, Result};
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
            return self.with_db(|_| append_if_changed(state, log, op));
        }
        self.with_db(|db| {
            // Others' appends are read by the append, under both locks, and the event is
            // decided from the log as it then ends: one look at the file per write.
            // In line behind the database's other writers, if any, to the end of the write.
            let _turn = db.begin_write(log.session_id(), action, log.path())?;
            let (conn, _) = db.write_parts();
            let appended = append_if_changed(state, log, op);
            // What stands in the database is at most a dead holder's row deleted; a commit
            // that fails after the append leaves the append standing (it is durable).
            if let Err(e) = lock::end_write(conn) {
                tracing::debug!(error = %e, "the write's transaction did not commit");
                if !conn.is_autocommit()
                    && let Err(e) = conn.execute_batch("ROLLBACK")
                {
                    tracing::debug!(error = %e, "the rollback failed too: the transaction stays open, and the next BEGIN on this connection fails");
                }
            }
            appended
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

/// Appends the event `op` makes, decided from the log under the session file's lock
/// (after others' appends were read), unless it changes nothing.
fn append_if_changed<T: Serialize + DeserializeOwned>(
    state: &SessionState<T>,
    log: &mut SessionLog,
    op: Op,
) -> Result<Option<String>> {
    let action = action_of(&op);
    let mut decided = None;
    let id = log
        .append_decided(|log| {
            let current = state.folded(log, log.tree().leaf_index())?;
            let entry = || current.last.map(|l| log.entry_at(l).id().to_owned());
            let next =
                state
                    .key()
                    .decide_next_on(current.value.as_deref(), current.version, entry, op)?;
            let entry = next.as_ref().map(|d| state.entry(&d.event));
            decided = next;
            Ok(entry)
        })
        .map_err(|e| match e {
            // The file lock refused the log's append: name the state write it was.
            Error::Lock(refused) => Error::Lock(Box::new(refused.for_action(action))),
            other => other,
        })?;
    if let (Some(_), Some(decided)) = (&id, decided) {
        // The next read at the new leaf answers from memory, not from the line.
        state.remember_appended(log, decided);
    }
    Ok(id)
}
