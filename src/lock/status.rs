//! The lock row as `status` shows it, and `force-refresh`'s delete.

use super::Liveness;
use super::identity::assess_raw;
use super::table::{has_action_column, lease, now_ms, read_row, table_exists};
use rusqlite::Connection;
use std::time::Duration;

/// The lock row of one session, as `session-state status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The holder as stored (see [`Holder`](super::Holder)); may be a foreign format.
    pub holder: String,
    /// What the holder said it was doing, when recorded.
    pub action: Option<String>,
    /// When the lock was taken, ms since the Unix epoch.
    pub acquired_at_ms: i64,
    /// How long ago that was (zero for a row stamped in the future).
    pub age: Duration,
    /// Whether the holder still runs.
    pub liveness: Liveness,
    /// Why `liveness` is what it is, e.g. "holder pid 1234 is gone".
    pub liveness_reason: String,
    /// Whether the row is at least [`LEASE`](super::LEASE) old (or implausibly in the future).
    pub lease_expired: bool,
}

impl LockStatus {
    /// Whether a writer in another process would be refused now: the holder is not known
    /// to be gone and its lease runs. `force-refresh` asks before clearing such a row.
    pub fn blocks_writers(&self) -> bool {
        self.liveness != Liveness::NotAlive && !self.lease_expired
    }
}

/// The lock row of `session_id`, or `None` when there is none.
///
/// Read-only: it never creates the table (a database without one reports `None`), so it
/// works on a connection opened with `SQLITE_OPEN_READ_ONLY`.
pub(crate) fn status(conn: &Connection, session_id: &str) -> rusqlite::Result<Option<LockStatus>> {
    status_at(conn, session_id, now_ms())
}

/// [`status`] at an injected time (ms since the Unix epoch).
pub(crate) fn status_at(
    conn: &Connection,
    session_id: &str,
    now_ms: i64,
) -> rusqlite::Result<Option<LockStatus>> {
    if !table_exists(conn)? {
        return Ok(None);
    }
    let with_action = has_action_column(conn)?;
    let Some(row) = read_row(conn, session_id, with_action)? else {
        return Ok(None);
    };
    let (liveness, liveness_reason) = assess_raw(&row.holder);
    let (age, lease_expired, _) = lease(row.acquired_at_ms, now_ms);
    Ok(Some(LockStatus {
        holder: row.holder,
        action: row.action,
        acquired_at_ms: row.acquired_at_ms,
        age,
        liveness,
        liveness_reason,
        lease_expired,
    }))
}

/// Deletes the lock row of `session_id` whoever holds it (`force-refresh`). Returns whether
/// there was one. Never creates the table.
///
/// This breaks the lock of a possibly live writer; check [`status`] and
/// [`LockStatus::blocks_writers`] first and ask.
pub(crate) fn clear(conn: &Connection, session_id: &str) -> rusqlite::Result<bool> {
    if !table_exists(conn)? {
        return Ok(false);
    }
    let deleted = conn.execute("DELETE FROM write_lock WHERE session_id = ?1", [session_id])?;
    Ok(deleted > 0)
}

/// A row of `write_lock` or `pi_presence` whose holder would refuse another writer: the
/// holder is not known to be gone (and, for a lock row, its lease runs).
#[derive(Debug, Clone)]
pub(crate) struct LiveRow {
    pub(crate) table: super::LockRow,
    pub(crate) session_id: String,
    pub(crate) holder: String,
    /// When the row was written, ms since the Unix epoch.
    pub(crate) since_ms: i64,
    pub(crate) liveness: Liveness,
    pub(crate) liveness_reason: String,
    /// The session file of a presence row.
    pub(crate) session_file: Option<String>,
}

/// Every [`LiveRow`] of the database, lock rows first. Read-only: a table that is not
/// there has no rows.
pub(crate) fn live_rows(conn: &Connection) -> rusqlite::Result<Vec<LiveRow>> {
    let mut out = Vec::new();
    let now = now_ms();
    if table_exists(conn)? {
        let mut stmt = conn.prepare("SELECT session_id, holder, acquired_at FROM write_lock")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (session_id, holder, since_ms) = row?;
            let (liveness, liveness_reason) = assess_raw(&holder);
            let (_, lease_expired, _) = lease(since_ms, now);
            if liveness != Liveness::NotAlive && !lease_expired {
                out.push(LiveRow {
                    table: super::LockRow::WriteLock,
                    session_id,
                    holder,
                    since_ms,
                    liveness,
                    liveness_reason,
                    session_file: None,
                });
            }
        }
    }
    let has_presence: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pi_presence')",
        [],
        |r| r.get(0),
    )?;
    if has_presence {
        let mut stmt =
            conn.prepare("SELECT session_id, holder, since, session_file FROM pi_presence")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })?;
        for row in rows {
            let (session_id, holder, since_ms, session_file) = row?;
            let (liveness, liveness_reason) = assess_raw(&holder);
            if liveness.may_be_alive() {
                out.push(LiveRow {
                    table: super::LockRow::PiPresence,
                    session_id,
                    holder,
                    since_ms,
                    liveness,
                    liveness_reason,
                    session_file,
                });
            }
        }
    }
    Ok(out)
}
