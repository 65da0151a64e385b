//! The presence row of a running Pi (docs/spec.md §9; `src/lock/presence.rs`), on the store,
//! and what `status` shows of a session's rows.

use super::{Peeked, Store};
use crate::error::{DatabaseError, Error, ProjectionError, Result};
use crate::lock::{self, Holder, LockStatus, PresenceStatus, presence};
use crate::projection::Projection;
use std::path::PathBuf;

/// A session's rows in the projection database, as `status` shows them (the CLI's
/// `session-state status` and the Pi package's `/state:status`): read-only, never
/// creating anything. Each front end words it its own way; what the rows mean
/// ([`LockStatus::blocks_writers`], [`crate::lock::Liveness::may_be_alive`],
/// [`PresenceStatus::is_this_process`]) is decided here.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionStatus {
    /// The projection database's path.
    pub database: PathBuf,
    /// Whether there is a database at that path (without one there is no row either).
    pub exists: bool,
    /// The session's write-lock row.
    pub lock: Option<LockStatus>,
    /// The row of a running Pi that holds the session.
    pub presence: Option<PresenceStatus>,
}

impl Store {
    /// Records that this process (a running Pi) has the session `session_id` open, so
    /// that other processes' `write`/`patch`/`drop` refuse it until
    /// [`Store::leave_presence`] (or until this process is gone). `session_file` is shown
    /// by `status`.
    ///
    /// It also holds the session file itself (`docs/lock.md`, "The one lock"), which
    /// excludes every writer of the file whatever database it uses, until
    /// [`Store::leave_presence`] or this process's end; a file that does not exist yet
    /// (Pi writes a new session's file at its first reply) is held by the next call once
    /// it does. Another holder of the file (a second Pi with the session open) refuses
    /// with [`crate::lock::LockError::FileHeld`], and no row is written.
    pub fn enter_presence(&self, session_id: &str, session_file: Option<&str>) -> Result<()> {
        let held = match session_file {
            Some(file) => super::hold_file(std::path::Path::new(file), "enter the session")?,
            None => None,
        };
        let mut map = crate::sync::lock(&self.inner.presence);
        // Entered already: the row stands; the file is held now if it was not.
        if let Some(slot) = map.get_mut(session_id) {
            if slot.is_some() || held.is_none() {
                return Ok(());
            }
            *slot = held;
            drop(map);
            return self.with_db(|db| {
                presence::holds_file_now(db.connection(), session_id, &Holder::current()).map_err(
                    |source| {
                        Error::Projection(ProjectionError::Database {
                            path: db.path().to_path_buf(),
                            action: "recording the Pi presence row",
                            source: DatabaseError(source),
                        })
                    },
                )
            });
        }
        let holds_file = held.is_some();
        map.insert(session_id.to_owned(), held);
        drop(map);
        let entered = self.with_db(|db| {
            let path = db.path().to_path_buf();
            let failed = |source| {
                Error::Projection(ProjectionError::Database {
                    path: path.clone(),
                    action: "recording the Pi presence row",
                    source: DatabaseError(source),
                })
            };
            let (conn, queue) = db.lock_parts();
            // One transaction, in which the writers on the fast path are told of the row
            // before it commits (docs/lock.md, "The fast path").
            crate::sqlite::immediate(
                conn,
                |_, e| failed(e),
                |tx| {
                    presence::enter(
                        tx,
                        session_id,
                        &Holder::current(),
                        session_file,
                        holds_file,
                        lock::now_ms(),
                    )
                    .map_err(failed)?;
                    queue
                        .announce_row("record the Pi presence row", session_id)
                        .map_err(Error::Lock)
                },
            )
        });
        if entered.is_err() {
            crate::sync::lock(&self.inner.presence).remove(session_id);
        }
        entered
    }

    /// Removes this process's presence row of `session_id`; `true` when there was one.
    pub fn leave_presence(&self, session_id: &str) -> Result<bool> {
        crate::sync::lock(&self.inner.presence).remove(session_id);
        self.with_db(|db| {
            let path = db.path().to_path_buf();
            presence::leave(db.connection(), session_id, &Holder::current()).map_err(|source| {
                Error::Projection(ProjectionError::Database {
                    path,
                    action: "removing the Pi presence row",
                    source: DatabaseError(source),
                })
            })
        })
    }

    /// Removes the presence row of `session_id` whoever holds it (`force-refresh`).
    pub fn clear_presence(&self, session_id: &str) -> Result<bool> {
        crate::sync::lock(&self.inner.presence).remove(session_id);
        self.with_db(|db| {
            let path = db.path().to_path_buf();
            presence::clear(db.connection(), session_id).map_err(|source| {
                Error::Projection(ProjectionError::Database {
                    path,
                    action: "clearing the Pi presence row",
                    source: DatabaseError(source),
                })
            })
        })
    }

    /// The presence row of `session_id`, judged by the §6 liveness test, without creating
    /// anything: [`Peeked::NoDatabase`] when there is no database at the store's
    /// location, [`Peeked::NoRow`] when no Pi holds the session. Opens the database
    /// read-only.
    pub fn peek_presence(&self, session_id: &str) -> Result<Peeked<PresenceStatus>> {
        let path = self.database_path();
        let Some(conn) = Projection::open_existing(path)? else {
            return Ok(Peeked::NoDatabase);
        };
        presence::status(&conn, session_id)
            .map(|row| row.map_or(Peeked::NoRow, Peeked::Row))
            .map_err(|source| {
                Error::Projection(ProjectionError::Database {
                    path: path.to_path_buf(),
                    action: "reading the Pi presence row",
                    source: DatabaseError(source),
                })
            })
    }

    /// The lock row and the presence row of `session_id`, read on one read-only
    /// connection; a missing database is reported (`exists: false`), not created.
    pub fn session_status(&self, session_id: &str) -> Result<SessionStatus> {
        let path = self.database_path();
        let mut status = SessionStatus {
            database: path.to_path_buf(),
            exists: false,
            lock: None,
            presence: None,
        };
        let Some(conn) = Projection::open_existing(path)? else {
            return Ok(status);
        };
        let read = |action| {
            move |source| {
                Error::Projection(ProjectionError::Database {
                    path: path.to_path_buf(),
                    action,
                    source: DatabaseError(source),
                })
            }
        };
        status.exists = true;
        status.lock = lock::status(&conn, session_id).map_err(read("reading the lock"))?;
        status.presence =
            presence::status(&conn, session_id).map_err(read("reading the Pi presence row"))?;
        Ok(status)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use crate::Store;

    /// The rows' generation in the writers' queue file, as this store sees it.
    fn generation(store: &Store) -> Option<u64> {
        store
            .with_db(|db| Ok(db.lock_parts().1.rows_generation()))
            .expect("generation")
    }

    /// A presence row, like a lock row, is announced to the writers on the fast path
    /// (`docs/lock.md`, "The fast path"): the rows' generation moves on, so a write whose
    /// connection judged the rows before it judges them again.
    #[cfg(target_os = "linux")]
    #[test]
    fn entering_presence_or_taking_a_lock_moves_the_rows_generation_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::at(dir.path().join("states.sqlite")).expect("store");
        let first = generation(&store).expect("a queue file");
        store.enter_presence("s", Some("/s.jsonl")).expect("enter");
        assert_eq!(generation(&store), Some(first + 1));
        let lock = store.lock("t", "prune").expect("lock");
        assert_eq!(generation(&store), Some(first + 2));
        lock.release().expect("release");
        assert!(store.leave_presence("s").expect("leave"));
        assert_eq!(generation(&store), Some(first + 2), "leaving adds no row");
    }
}
