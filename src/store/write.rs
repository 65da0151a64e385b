//! The write transaction, in one place: take the session's write lock, re-read what
//! others appended, append the event durably, bring the projection up to date, release.
//!
//! The log is durable first; the projection never gets ahead of it (SPEC §4). The
//! projection's catch-up and the lock's release commit together, in one SQLite
//! transaction on the write path instead of two.

use super::Store;
use super::state::SessionState;
use crate::error::{DatabaseError, Error, Result};
use crate::lock;
use crate::log::NewEntry;
use crate::state::envelope::{Envelope, Op};
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
        // The action the lock row and a refusal name (SPEC §6).
        let action = match op {
            Op::Set(_) => "write",
            Op::Patch(_) => "patch",
            Op::Drop => "drop",
        };
        if !log.is_materialized() {
            // Only this process can see a session that is not on disk yet. The database is
            // opened first: one that is refused (not ours, SPEC §4) refuses before this
            // append can create the session file (SPEC §2, decide before touching).
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
            let guard = lock::acquire(db.connection(), log.session_id(), action)?;
            let result = (|| {
                log.refresh()?;
                append_if_changed(state, log, op)
            })();
            let id = match result {
                Ok(Some(id)) => id,
                other => {
                    guard.release()?;
                    return other;
                }
            };
            let caught = guard.execute_batch("BEGIN IMMEDIATE").ok().and_then(|()| {
                match crate::projection::catch_up_in_transaction(&guard, &db_path, log.path()) {
                    Ok(c) => Some(c),
                    Err(_) => {
                        let _ = guard.execute_batch("ROLLBACK");
                        None
                    }
                }
            });
            let released = guard.release();
            let Some(caught) = caught else {
                // The slow path: the release committed alone; `sync` retries the catch-up and
                // handles a corrupt or failing projection.
                released?;
                db.sync(log)?;
                return Ok(Some(id));
            };
            let committed = released.map_err(Error::from).and_then(|_| {
                db.connection()
                    .execute_batch("COMMIT")
                    .map_err(|source| Error::Database {
                        path: db_path.clone(),
                        action: "committing",
                        source: DatabaseError(source),
                    })
            });
            match committed {
                Ok(()) => db.record_catch_up(caught),
                Err(e) => {
                    // Nothing of the transaction stands, the lock row included: release it on its
                    // own (this process holds it, so it takes it back at once).
                    let _ = db.connection().execute_batch("ROLLBACK");
                    lock::acquire(db.connection(), log.session_id(), action)?.release()?;
                    if matches!(e, Error::Lock(_)) {
                        return Err(e);
                    }
                    db.sync(log)?;
                }
            }
            Ok(Some(id))
        })
    }
}

fn append_if_changed<T: Serialize + DeserializeOwned>(
    state: &SessionState<T>,
    log: &mut SessionLog,
    op: Op,
) -> Result<Option<String>> {
    let current = state.folded(log, log.tree().leaf_index())?;
    let next = op.apply(current.value.as_deref());
    // Equal as Pi's JavaScript sees it (`1` is `1.0`, key order aside): nothing to do.
    if crate::json::js_eq_opt(next.as_ref(), current.value.as_deref()) {
        return Ok(None);
    }
    if let Some(next) = &next {
        state.check_depth(next)?;
    }
    let env = Envelope {
        scope: state.scope(),
        op,
    };
    let id = log.append(NewEntry::custom(
        state.custom_type().to_owned(),
        Some(env.to_data()),
    ))?;
    Ok(Some(id))
}
