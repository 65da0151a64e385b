//! Which running Pi holds a session (docs/spec.md §9): the presence row.
//!
//! Inside a running Pi, writes go through `pi.appendEntry`; a running Pi ignores what
//! others append. So while a Pi process has a session open, the CLI's `write`/`patch`/
//! `drop` must refuse it. The Pi package (`pi/`) records that with a row, written at
//! `session_start` and removed at `session_shutdown`:
//!
//! ```sql
//! CREATE TABLE pi_presence (
//!     session_id   TEXT PRIMARY KEY,
//!     holder       TEXT NOT NULL,     -- the §6 holder identity of the Pi process (`Holder`)
//!     since        INTEGER NOT NULL,  -- ms since the Unix epoch
//!     session_file TEXT               -- the file Pi had open, when it had one
//! );
//! ```
//!
//! The row has no lease: a Pi session lasts hours. A row whose holder is judged dead by
//! the §6 liveness test ([`Liveness::NotAlive`], e.g. the Pi process was killed) is
//! ignored and deleted by the next writer, so a crash never seals the session. A holder of
//! unknown liveness (another pid namespace, no `/proc`) is respected; `force-refresh`
//! clears the row.

use super::identity::assess_raw;
use super::{Holder, Liveness, LockError, LockRow, Refused};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

/// Creates the `pi_presence` table if it does not exist.
///
/// A table of an earlier release gains the column `holds_file` (`1`: the holder holds the
/// session file's lock, so the lock, not `/proc`, says whether it is still there).
pub(crate) fn ensure_schema(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS pi_presence (
             session_id   TEXT PRIMARY KEY,
             holder       TEXT NOT NULL,
             since        INTEGER NOT NULL,
             session_file TEXT,
             holds_file   INTEGER
         );",
    )?;
    if !has_holds_file(conn)? {
        conn.execute_batch("ALTER TABLE pi_presence ADD COLUMN holds_file INTEGER;")?;
    }
    Ok(())
}

fn has_holds_file(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('pi_presence') WHERE name = 'holds_file')",
    )?
    .query_row([], |row| row.get(0))
}

fn table_exists(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pi_presence')",
    )?
    .query_row([], |row| row.get(0))
}

/// A running Pi's hold on a session, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PresenceStatus {
    /// The Pi process, as stored (see [`Holder`]).
    pub holder: String,
    /// Since when, ms since the Unix epoch.
    pub since_ms: i64,
    /// The session file that Pi had open, when it had one.
    pub session_file: Option<String>,
    /// Whether that process still runs.
    pub liveness: Liveness,
    /// Why `liveness` is what it is.
    pub liveness_reason: String,
}

impl PresenceStatus {
    /// Whether a writer other than that Pi would be refused (the holder is not known to
    /// be gone).
    pub fn blocks_writers(&self) -> bool {
        self.liveness.may_be_alive()
    }

    /// Whether the row is this process's own (a Pi asking about the session it holds).
    pub fn is_this_process(&self) -> bool {
        self.holder == Holder::current().to_string()
    }
}

/// Records that `holder` (a Pi process) has `session_id` open. Replaces an older row.
/// `holds_file`: this process holds the session file's lock (`src/lock/hold.rs`).
pub(crate) fn enter(
    conn: &Connection,
    session_id: &str,
    holder: &Holder,
    session_file: Option<&str>,
    holds_file: bool,
    now_ms: i64,
) -> rusqlite::Result<()> {
    ensure_schema(conn)?;
    conn.prepare_cached(
        "INSERT INTO pi_presence (session_id, holder, since, session_file, holds_file)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (session_id) DO UPDATE SET
             holder = excluded.holder, since = excluded.since,
             session_file = excluded.session_file, holds_file = excluded.holds_file",
    )?
    .execute(params![
        session_id,
        holder.to_string(),
        now_ms,
        session_file,
        holds_file
    ])?;
    Ok(())
}

/// Records that `holder`'s presence of `session_id` now holds the session file's lock
/// (taken once the file exists).
pub(crate) fn holds_file_now(
    conn: &Connection,
    session_id: &str,
    holder: &Holder,
) -> rusqlite::Result<()> {
    ensure_schema(conn)?;
    conn.prepare_cached(
        "UPDATE pi_presence SET holds_file = 1 WHERE session_id = ?1 AND holder = ?2",
    )?
    .execute(params![session_id, holder.to_string()])?;
    Ok(())
}

/// Removes `holder`'s row of `session_id`; `true` when there was one.
pub(crate) fn leave(
    conn: &Connection,
    session_id: &str,
    holder: &Holder,
) -> rusqlite::Result<bool> {
    if !table_exists(conn)? {
        return Ok(false);
    }
    let n = conn
        .prepare_cached("DELETE FROM pi_presence WHERE session_id = ?1 AND holder = ?2")?
        .execute(params![session_id, holder.to_string()])?;
    Ok(n > 0)
}

/// Removes the row of `session_id` whoever holds it (`force-refresh`).
pub(crate) fn clear(conn: &Connection, session_id: &str) -> rusqlite::Result<bool> {
    if !table_exists(conn)? {
        return Ok(false);
    }
    let n = conn.execute(
        "DELETE FROM pi_presence WHERE session_id = ?1",
        [session_id],
    )?;
    Ok(n > 0)
}

/// The row of `session_id`, judged; `None` when there is none. Read-only: never creates
/// the table.
pub(crate) fn status(
    conn: &Connection,
    session_id: &str,
) -> rusqlite::Result<Option<PresenceStatus>> {
    if !table_exists(conn)? {
        return Ok(None);
    }
    let sql = if has_holds_file(conn)? {
        "SELECT holder, since, session_file, holds_file FROM pi_presence WHERE session_id = ?1"
    } else {
        "SELECT holder, since, session_file, NULL FROM pi_presence WHERE session_id = ?1"
    };
    let row = conn
        .prepare_cached(sql)?
        .query_row([session_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<i64>>(3)? == Some(1),
            ))
        })
        .optional()?;
    Ok(row.map(|(holder, since_ms, session_file, holds_file)| {
        // A holder that holds the session file's lock is there exactly while the lock
        // is: the kernel drops it with the process, whatever `/proc` can tell.
        let held = match (&session_file, holds_file) {
            (Some(file), true) => super::hold::held_by_another(Path::new(file)),
            _ => None,
        };
        let (liveness, liveness_reason) = match held {
            Some(true) => (
                Liveness::Alive,
                "it holds the session file's lock".to_owned(),
            ),
            Some(false) => (
                Liveness::NotAlive,
                "it no longer holds the session file's lock (the kernel drops it when its \
                 process ends)"
                    .to_owned(),
            ),
            None => assess_raw(&holder),
        };
        PresenceStatus {
            holder,
            since_ms,
            session_file,
            liveness,
            liveness_reason,
        }
    }))
}

/// In a write transaction (after `BEGIN IMMEDIATE`): refuses with the four-element
/// [`LockError::Held`] when a live Pi other than this process holds `session_id`, and
/// deletes a dead one's row.
pub(crate) fn judge_in_write(
    conn: &Connection,
    session_id: &str,
    action: &str,
    session_file: &Path,
) -> Result<(), Refused> {
    let err = LockError::database("check the Pi presence row", session_id);
    let Some(st) = status(conn, session_id).map_err(err)? else {
        return Ok(());
    };
    if st.holder == Holder::current().to_string() {
        return Ok(());
    }
    if st.blocks_writers() {
        return Err(Box::new(LockError::Held {
            initiator: format!("a running Pi ({})", st.holder),
            action: action.to_owned(),
            object: session_id.to_owned(),
            reason: format!(
                "{}: that Pi has the session open and would not see this append (write \
                 from inside Pi, or wait until it exits)",
                st.liveness_reason
            ),
            liveness: st.liveness,
            acquired_at_ms: st.since_ms,
            database: conn.path().map(|p| Box::from(Path::new(p))),
            row: LockRow::PiPresence,
            session_file: Some(Box::from(session_file)),
        }));
    }
    tracing::warn!(session_id, holder = %st.holder, reason = %st.liveness_reason,
        "deleting the presence row of a Pi that is gone");
    conn.execute(
        "DELETE FROM pi_presence WHERE session_id = ?1",
        [session_id],
    )
    .map_err(LockError::database("check the Pi presence row", session_id))?;
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_live_pi_refuses_writers_and_a_dead_one_is_deleted() {
        let conn = Connection::open_in_memory().expect("open");
        let file = Path::new("/x.jsonl");
        assert_eq!(
            status(&conn, "s").expect("status"),
            None,
            "no table, no row"
        );
        judge_in_write(&conn, "s", "write", file).expect("no table: nothing to refuse");

        let parent = Holder::for_pid(std::os::unix::process::parent_id()).expect("the parent runs");
        enter(&conn, "s", &parent, Some("/x.jsonl"), false, 5).expect("enter");
        let err = judge_in_write(&conn, "s", "patch", file).expect_err("a live Pi");
        assert!(
            matches!(&*err, LockError::Held { initiator, action, object, .. }
                if initiator.contains(&parent.to_string()) && action == "patch" && object == "s"),
            "{err:?}"
        );
        assert!(
            status(&conn, "s").expect("status").is_some(),
            "its row stands"
        );

        // This process's own row does not refuse it.
        enter(&conn, "s", &Holder::current(), None, false, 6).expect("enter");
        judge_in_write(&conn, "s", "write", file).expect("our own Pi");

        // A reused pid (another start time): not alive, deleted.
        let me = Holder::current().to_string();
        let dead = Holder::parse(&me.replacen(";start:", ";start:9", 1)).expect("parse");
        enter(&conn, "s", &dead, None, false, 7).expect("enter");
        judge_in_write(&conn, "s", "write", file).expect("a dead Pi");
        assert_eq!(status(&conn, "s").expect("status"), None, "deleted");

        enter(&conn, "s", &parent, None, false, 8).expect("enter");
        assert!(
            !leave(&conn, "s", &Holder::current()).expect("leave"),
            "not ours"
        );
        assert!(leave(&conn, "s", &parent).expect("leave"));
        assert!(!clear(&conn, "s").expect("clear"));
    }
}
