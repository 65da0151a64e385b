//! The presence row of a running Pi (docs/spec.md §9; `src/lock/presence.rs`), on the store.

use super::{Peeked, Store};
use crate::error::{DatabaseError, Error, Result};
use crate::lock::{self, Holder, PresenceStatus, presence};
use crate::projection::Projection;

impl Store {
    /// Records that this process (a running Pi) has the session `session_id` open, so
    /// that other processes' `write`/`patch`/`drop` refuse it until
    /// [`Store::leave_presence`] (or until this process is gone). `session_file` is shown
    /// by `status`.
    pub fn enter_presence(&self, session_id: &str, session_file: Option<&str>) -> Result<()> {
        self.with_db(|db| {
            let path = db.path().to_path_buf();
            presence::enter(
                db.connection(),
                session_id,
                &Holder::current(),
                session_file,
                lock::now_ms(),
            )
            .map_err(|source| Error::Database {
                path,
                action: "recording the Pi presence row",
                source: DatabaseError(source),
            })
        })
    }

    /// Removes this process's presence row of `session_id`; `true` when there was one.
    pub fn leave_presence(&self, session_id: &str) -> Result<bool> {
        self.with_db(|db| {
            let path = db.path().to_path_buf();
            presence::leave(db.connection(), session_id, &Holder::current()).map_err(|source| {
                Error::Database {
                    path,
                    action: "removing the Pi presence row",
                    source: DatabaseError(source),
                }
            })
        })
    }

    /// Removes the presence row of `session_id` whoever holds it (`force-refresh`).
    pub fn clear_presence(&self, session_id: &str) -> Result<bool> {
        self.with_db(|db| {
            let path = db.path().to_path_buf();
            presence::clear(db.connection(), session_id).map_err(|source| Error::Database {
                path,
                action: "clearing the Pi presence row",
                source: DatabaseError(source),
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
            .map_err(|source| Error::Database {
                path: path.to_path_buf(),
                action: "reading the Pi presence row",
                source: DatabaseError(source),
            })
    }
}
