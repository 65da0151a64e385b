//! The `write_lock` table: its schema, reading a row, and the lease arithmetic.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a lock row protects its holder, even a live one.
///
/// A row whose `acquired_at` is at least this old is taken over by the next writer. A row
/// stamped more than one lease in the *future* (the clock was set back) counts as expired
/// too, so a clock change cannot seal a session.
pub const LEASE: Duration = Duration::from_secs(60);

pub(super) const LEASE_MS: i64 = 60_000;

/// Creates the `write_lock` table if it does not exist.
///
/// A table created by an older version (the three columns of docs/spec.md §6 only) gets the optional
/// `action` column added. [`acquire_at`] calls this itself, and [`begin_write`] when the
/// table is missing; the projection calls it when it creates its schema.
pub(crate) fn ensure_schema(conn: &Connection) -> rusqlite::Result<()> {
    // The common case, checked with a cached statement: the table is there, complete.
    if has_action_column(conn)? {
        return Ok(());
    }
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS write_lock (
             session_id  TEXT PRIMARY KEY,
             holder      TEXT NOT NULL,
             acquired_at INTEGER NOT NULL,
             action      TEXT
         );",
    )?;
    if !has_action_column(conn)? {
        conn.execute_batch("ALTER TABLE write_lock ADD COLUMN action TEXT;")?;
    }
    Ok(())
}

pub(super) fn table_exists(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'write_lock')",
        [],
        |row| row.get(0),
    )
}

pub(super) fn has_action_column(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('write_lock') WHERE name = 'action')",
    )?
    .query_row([], |row| row.get(0))
}

/// Milliseconds since the Unix epoch, the unit of `acquired_at`.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Age of a row and whether its lease is over.
pub(super) fn lease(acquired_at_ms: i64, now_ms: i64) -> (Duration, bool, Duration) {
    let elapsed = now_ms.saturating_sub(acquired_at_ms);
    let expired = !(-LEASE_MS..LEASE_MS).contains(&elapsed);
    let age = Duration::from_millis(u64::try_from(elapsed).unwrap_or(0));
    let left = if expired {
        Duration::ZERO
    } else {
        Duration::from_millis(u64::try_from(LEASE_MS - elapsed.max(0)).unwrap_or(0))
    };
    (age, expired, left)
}

/// Reads `acquired_at` tolerantly: a hand-edited non-integer value counts as the epoch,
/// that is, as long expired.
fn acquired_at_of(value: Value) -> i64 {
    match value {
        Value::Integer(ms) => ms,
        // `as` saturates (and maps NaN to 0), which is what a garbage value deserves.
        Value::Real(ms) => ms as i64,
        _ => 0,
    }
}

pub(super) struct Row {
    pub(super) holder: String,
    pub(super) acquired_at_ms: i64,
    pub(super) action: Option<String>,
}

pub(super) fn read_row(
    conn: &Connection,
    session_id: &str,
    with_action: bool,
) -> rusqlite::Result<Option<Row>> {
    let sql = if with_action {
        "SELECT holder, acquired_at, action FROM write_lock WHERE session_id = ?1"
    } else {
        "SELECT holder, acquired_at, NULL FROM write_lock WHERE session_id = ?1"
    };
    conn.prepare_cached(sql)?
        .query_row([session_id], |row| {
            Ok(Row {
                holder: row.get(0)?,
                acquired_at_ms: acquired_at_of(row.get(1)?),
                action: row.get(2)?,
            })
        })
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_boundaries() {
        let (_, expired, left) = lease(0, 59_000);
        assert!(!expired);
        assert_eq!(left, Duration::from_secs(1));
        assert!(lease(0, 60_000).1);
        assert!(!lease(1_000, 0).1, "slightly in the future is a live lease");
        assert!(
            lease(60_001, 0).1,
            "more than a lease in the future is expired"
        );
        assert_eq!(lease(1_000, 0).0, Duration::ZERO);
        assert!(lease(i64::MIN, i64::MAX).1);
    }
}
