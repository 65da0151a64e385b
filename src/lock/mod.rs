//! The per-session write lock (docs/spec.md §6): one writer per session at a time.
//!
//! The lock is a row in the `write_lock` table of the projection database:
//!
//! ```sql
//! CREATE TABLE write_lock (
//!     session_id  TEXT PRIMARY KEY,
//!     holder      TEXT NOT NULL,     -- see `Holder`: pid:<pid>;start:<ticks>;boot:<uuid>;pidns:<inode>
//!     acquired_at INTEGER NOT NULL,  -- ms since the Unix epoch
//!     action      TEXT               -- what the holder is doing ("write", "patch", ...); may be NULL
//! );
//! ```
//!
//! [`acquire_at`] takes the row over when there is none, when the holder is this process,
//! when the holder is provably gone ([`Liveness::NotAlive`]), or when the row is at least
//! [`LEASE`] old (even if its holder is alive); otherwise it refuses with
//! [`LockError::Held`]. A process that crashes while holding the lock therefore seals
//! the session for at most one lease, and usually not at all (its pid is gone).
//!
//! A write (`src/store/write.rs`) writes no row: [`begin_write`] opens its transaction
//! under SQLite's write lock and judges the row that stands, if any, by the same rules.
//! Because two writers of one file may use two databases, each append also holds the
//! advisory lock on the session file itself ([`file`], taken in `src/log/writer.rs`).
//!
//! The module never opens a database: the projection owns the connection (WAL,
//! `busy_timeout`). [`status`] and [`clear`] never create the table.
//!
//! Every refusal names what blocks (a `write_lock` row, a running Pi's `pi_presence`
//! row, or the file lock) and a command that clears it, e.g.
//! `sqlite3 states.sqlite "DELETE FROM write_lock WHERE session_id = '…';"`.

pub(crate) mod file;
mod identity;
pub(crate) mod presence;

pub use identity::{Holder, Liveness};
pub use presence::PresenceStatus;

use identity::assess_raw;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

/// How long a lock row protects its holder, even a live one.
///
/// A row whose `acquired_at` is at least this old is taken over by the next writer. A row
/// stamped more than one lease in the *future* (the clock was set back) counts as expired
/// too, so a clock change cannot seal a session.
pub const LEASE: Duration = Duration::from_secs(60);

const LEASE_MS: i64 = 60_000;

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

fn table_exists(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'write_lock')",
        [],
        |row| row.get(0),
    )
}

fn has_action_column(conn: &Connection) -> rusqlite::Result<bool> {
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

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// The row that refuses a writer in [`LockError::Held`]: what its hint clears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockRow {
    /// A row of the `write_lock` table: a [`crate::Store::lock`] of another process, or an
    /// older version of this crate in the middle of its write.
    WriteLock,
    /// A row of the `pi_presence` table: a running Pi has the session open
    /// (`docs/pi-extension.md`).
    PiPresence,
}

impl LockRow {
    /// The table the row is in.
    pub fn table(self) -> &'static str {
        match self {
            LockRow::WriteLock => "write_lock",
            LockRow::PiPresence => "pi_presence",
        }
    }
}

/// Why the write lock could not be taken or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another holder has the lock: alive, or of unknown liveness, within its lease (a
    /// `write_lock` row), or a running Pi has the session open (a `pi_presence` row).
    /// The message ends with two commands that clear that row.
    #[error(
        "session '{object}' is locked by {initiator} ({liveness}): {action} refused because \
         {reason}. {}",
        row_recovery(*.row, .database.as_deref(), .session_file.as_deref(), .object)
    )]
    Held {
        /// The holder of the lock, as stored (see [`Holder`]).
        initiator: String,
        /// What was refused ("write", "patch", "drop", ...).
        action: String,
        /// The session id.
        object: String,
        /// Why the holder is respected, e.g. "holder pid 1234 is alive and its lease
        /// expires in 41 s".
        reason: String,
        /// The holder's liveness.
        liveness: Liveness,
        /// When the holder took the lock, ms since the Unix epoch.
        acquired_at_ms: i64,
        /// The projection database file, when the connection has one.
        database: Option<Box<Path>>,
        /// The row that refuses: in `write_lock` or in `pi_presence`.
        row: LockRow,
        /// The session file that was to be written, when the writer knows it.
        session_file: Option<Box<Path>>,
    },

    /// Another writer holds the advisory lock on the session file itself
    /// (`docs/lock.md`, "The file lock") and did not release it within the wait
    /// (10 s): a writer of this crate between its check of the file's end and its append,
    /// perhaps through another projection database, or a process that is stuck there.
    /// Nothing was written. The message ends with the command that ends the holder, or
    /// how to find it.
    #[error(
        "session file '{}' is locked by {initiator}: {action} refused because {reason}. {}",
        .object.display(),
        file::recovery(*.pid, .object)
    )]
    FileHeld {
        /// The process holding the lock, as a [`Holder`] string, or "another process"
        /// when it cannot be told (no `/proc/locks`).
        initiator: String,
        /// What was refused ("append", "write", "patch", "drop").
        action: String,
        /// The session file.
        object: PathBuf,
        /// Why, e.g. "holder pid 1234 is alive; it holds the advisory lock on the session
        /// file (…) and did not release it within 10 s".
        reason: String,
        /// The holder's pid, when `/proc/locks` names it.
        pid: Option<u32>,
    },

    /// The lock was taken over (lease expiry) or cleared while this guard held it.
    #[error(
        "write lock on session '{session_id}' was lost: {}; the lease is {} s, so an \
         operation holding the lock must renew it or finish sooner",
        lost_to(.now_held_by.as_deref()),
        LEASE.as_secs()
    )]
    Lost {
        /// The session id.
        session_id: String,
        /// Who holds it now, if anyone.
        now_held_by: Option<String>,
    },

    /// The projection database failed.
    #[error("write lock on session '{session_id}': could not {operation}: {source}")]
    Database {
        /// What was being done ("acquire the lock", "release the lock", ...).
        operation: &'static str,
        /// The session id.
        session_id: String,
        /// The SQLite error.
        #[source]
        source: crate::sqlite::DatabaseError,
    },
}

impl LockError {
    /// The same refusal, naming `action` as what was refused: a file-lock refusal of a
    /// log's append names the state write it was part of.
    pub(crate) fn for_action(self, action: &str) -> LockError {
        match self {
            LockError::FileHeld {
                initiator,
                object,
                reason,
                pid,
                ..
            } => LockError::FileHeld {
                initiator,
                action: action.to_owned(),
                object,
                reason,
                pid,
            },
            other => other,
        }
    }

    fn database(
        operation: &'static str,
        session_id: &str,
    ) -> impl FnOnce(rusqlite::Error) -> Refused {
        move |source| {
            Box::new(LockError::Database {
                operation,
                session_id: session_id.to_owned(),
                source: crate::sqlite::DatabaseError(source),
            })
        }
    }
}

/// A [`LockError`] as the lock's functions return it: boxed, as [`crate::Error`] holds it.
pub(crate) type Refused = Box<LockError>;

fn lost_to(now_held_by: Option<&str>) -> String {
    match now_held_by {
        Some(holder) => format!("it is now held by {holder}"),
        None => "it was cleared".to_owned(),
    }
}

/// The hint of [`LockError::Held`]: the row that refuses, and two commands that delete
/// it (`force-refresh --yes` and `sqlite3`), quoted for a POSIX shell.
fn row_recovery(
    row: LockRow,
    database: Option<&Path>,
    session_file: Option<&Path>,
    session_id: &str,
) -> String {
    let who = match row {
        LockRow::WriteLock => "If that process is gone or stuck",
        LockRow::PiPresence => "If that Pi has exited or is stuck",
    };
    let database = database.filter(|p| !p.as_os_str().is_empty());
    let db_arg = database
        .map(|p| format!(" --db {}", shell_word(&p.to_string_lossy())))
        .unwrap_or_default();
    let file = session_file.map_or_else(
        || "<session file>".to_owned(),
        |f| shell_word(&f.to_string_lossy()),
    );
    format!(
        "{who}, delete its row in the table {}: session-state force-refresh --yes{db_arg} \
         {file}  or  {}",
        row.table(),
        manual_recovery(row, database, session_id)
    )
}

/// The `sqlite3` command that deletes the row, quoted for a POSIX shell.
fn manual_recovery(row: LockRow, database: Option<&Path>, session_id: &str) -> String {
    let db = match database {
        Some(path) if !path.as_os_str().is_empty() => shell_word(&path.to_string_lossy()),
        _ => "states.sqlite".to_owned(),
    };
    let sql = format!(
        "DELETE FROM {} WHERE session_id = '{}';",
        row.table(),
        session_id.replace('\'', "''")
    );
    let mut quoted = String::with_capacity(sql.len() + 2);
    quoted.push('"');
    for c in sql.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    format!("sqlite3 {db} {quoted}")
}

fn shell_word(s: &str) -> String {
    let plain = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

// ---------------------------------------------------------------------------------------
// Acquire and release
// ---------------------------------------------------------------------------------------

/// Age of a row and whether its lease is over.
fn lease(acquired_at_ms: i64, now_ms: i64) -> (Duration, bool, Duration) {
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

struct Row {
    holder: String,
    acquired_at_ms: i64,
    action: Option<String>,
}

fn read_row(
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

/// Why a row stands in a writer's way: `Err` refuses (a live or unknown holder within its
/// lease), `Ok(Some(why))` takes it over (the holder is gone, or its lease is over),
/// `Ok(None)` the row is this holder's own (or there is none).
fn judge(
    row: Option<Row>,
    holder: &str,
    session_id: &str,
    action: &str,
    now_ms: i64,
    conn: &Connection,
    session_file: Option<&Path>,
) -> Result<Option<String>, Refused> {
    let Some(row) = row.filter(|row| row.holder != holder) else {
        return Ok(None);
    };
    let (liveness, why) = assess_raw(&row.holder);
    let (_, expired, left) = lease(row.acquired_at_ms, now_ms);
    if liveness != Liveness::NotAlive && !expired {
        let left = left.as_millis().div_ceil(1000);
        let what = row
            .action
            .as_deref()
            .map(|a| format!(" (it is doing: {a})"))
            .unwrap_or_default();
        return Err(Box::new(LockError::Held {
            initiator: row.holder,
            action: action.to_owned(),
            object: session_id.to_owned(),
            reason: format!("{why}{what} and its lease expires in {left} s"),
            liveness,
            acquired_at_ms: row.acquired_at_ms,
            database: conn.path().map(|p| Box::from(Path::new(p))),
            row: LockRow::WriteLock,
            session_file: session_file.map(Box::from),
        }));
    }
    let why = if liveness == Liveness::NotAlive {
        why
    } else {
        format!("its {} s lease expired ({why})", LEASE.as_secs())
    };
    tracing::warn!(
        session_id,
        previous_holder = %row.holder,
        reason = %why,
        "taking over the write lock"
    );
    Ok(Some(why))
}

/// Opens the write transaction of one `write`/`patch`/`drop` of `session_id` in the file
/// `session_file` (`src/store/write.rs`, named in a refusal's hint): `BEGIN IMMEDIATE`,
/// then the session's row is judged as
/// [`acquire_at`] judges it. A live or unknown holder within its lease (a [`Store::lock`]
/// of another process, an older version of this crate in the middle of its write, a Pi
/// presence row) refuses with [`LockError::Held`], and the transaction is rolled back. A
/// row of a dead holder or past its lease is deleted in the transaction; this process's
/// own row is left to its owner.
///
/// No row is written for the write itself: SQLite's write lock, held from here to the
/// caller's `COMMIT` or `ROLLBACK`, excludes every other writer of the database for the
/// whole operation, including an older version of this crate, which takes its row under
/// `BEGIN IMMEDIATE` too. A crash inside leaves no row. Waiting for SQLite's write lock
/// is bounded by the connection's `busy_timeout`; past it the result is
/// [`LockError::Database`].
///
/// The connection must not be inside a transaction.
///
/// [`Store::lock`]: crate::Store::lock
pub(crate) fn begin_write(
    conn: &Connection,
    session_id: &str,
    action: &str,
    session_file: &Path,
) -> Result<(), Refused> {
    let err = || LockError::database("acquire the lock", session_id);
    conn.execute_batch("BEGIN IMMEDIATE").map_err(err())?;
    let judged = (|| {
        // The table exists (the projection creates it); only a database changed by hand
        // since needs the schema check.
        let row = match read_row(conn, session_id, true) {
            Ok(row) => row,
            Err(_) => {
                ensure_schema(conn).map_err(err())?;
                read_row(conn, session_id, true).map_err(err())?
            }
        };
        // A running Pi that has the session open refuses every other writer (docs/spec.md §9).
        presence::judge_in_write(conn, session_id, action, session_file)?;
        let Some(row) = row else { return Ok(()) };
        let holder = Holder::current().to_string();
        let file = Some(session_file);
        if judge(Some(row), &holder, session_id, action, now_ms(), conn, file)?.is_some() {
            conn.prepare_cached("DELETE FROM write_lock WHERE session_id = ?1")
                .and_then(|mut q| q.execute([session_id]))
                .map_err(err())?;
        }
        Ok(())
    })();
    if judged.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    judged
}

/// Takes the write lock on `session_id` for `holder` at time `now_ms` (ms since the Unix
/// epoch), as a row that stands until released ([`crate::Store::lock`]). Tests inject
/// the holder and the time.
///
/// In one `BEGIN IMMEDIATE` transaction (so two writers cannot both decide to take over)
/// it creates the table if needed, reads the row and takes it over when there is no row,
/// when its holder string equals `holder`'s, when the holder is
/// [`NotAlive`](Liveness::NotAlive), or when the row is at least [`LEASE`] old. Otherwise
/// it returns [`LockError::Held`]. Waiting for SQLite's own write lock is bounded by the
/// connection's `busy_timeout`; past it the result is [`LockError::Database`].
///
/// The lock is per process, not counted: a second acquisition by the same holder (another
/// thread, or a nested call) succeeds, and the first of the two guards to be released
/// frees the row for everyone. Serialize writers within a process yourself.
///
/// The connection must not be inside a transaction.
pub(crate) fn acquire_at<'c>(
    conn: &'c mut Connection,
    session_id: &str,
    action: &str,
    now_ms: i64,
    holder: &Holder,
) -> Result<LockGuard<'c>, Refused> {
    let err = || LockError::database("acquire the lock", session_id);
    let holder_str = holder.to_string();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err())?;
    ensure_schema(&tx).map_err(err())?;
    let row = read_row(&tx, session_id, true).map_err(err())?;
    judge(row, &holder_str, session_id, action, now_ms, &tx, None)?;
    tx.prepare_cached(
        "INSERT INTO write_lock (session_id, holder, acquired_at, action) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (session_id) DO UPDATE SET
             holder = excluded.holder,
             acquired_at = excluded.acquired_at,
             action = excluded.action",
    )
    .and_then(|mut q| q.execute(params![session_id, holder_str, now_ms, action]))
    .map_err(err())?;
    tx.commit().map_err(err())?;
    Ok(LockGuard {
        conn,
        session_id: session_id.to_owned(),
        holder: holder_str,
        acquired_at_ms: now_ms,
        released: false,
    })
}

/// Proof of holding the write lock on one session; releases it when dropped, unless
/// [`LockGuard::keep`] hands the row to the store's [`crate::WriteLock`].
///
/// Release deletes the row only if it still names this guard's holder, so a guard whose
/// lease was taken over does not free the new holder's lock. Dropping ignores release
/// errors (they are logged with `tracing`). A row left behind that way expires with its
/// lease, and this process takes it back at once.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub(crate) struct LockGuard<'c> {
    conn: &'c mut Connection,
    session_id: String,
    holder: String,
    acquired_at_ms: i64,
    released: bool,
}

impl LockGuard<'_> {
    /// The holder string stored in the row.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// When the lock was taken or last renewed, ms since the Unix epoch.
    pub fn acquired_at_ms(&self) -> i64 {
        self.acquired_at_ms
    }

    /// Lets the row stand past the guard (the store's [`crate::WriteLock`] releases it).
    pub(crate) fn keep(mut self) {
        self.released = true;
    }
}

/// Restarts the lease of `holder`'s row; returns the new time (`WriteLock::renew`).
pub(crate) fn renew_row(conn: &Connection, session_id: &str, holder: &str) -> Result<i64, Refused> {
    let now = now_ms();
    let changed = conn
        .execute(
            "UPDATE write_lock SET acquired_at = ?3 WHERE session_id = ?1 AND holder = ?2",
            params![session_id, holder, now],
        )
        .map_err(LockError::database("renew the lock", session_id))?;
    if changed == 0 {
        let now_held_by = read_row(conn, session_id, false)
            .map_err(LockError::database("renew the lock", session_id))?
            .map(|row| row.holder);
        return Err(Box::new(LockError::Lost {
            session_id: session_id.to_owned(),
            now_held_by,
        }));
    }
    Ok(now)
}

/// Deletes the row if it still names `holder`; `true` when it did.
pub(crate) fn release_row(
    conn: &Connection,
    session_id: &str,
    holder: &str,
) -> Result<bool, Refused> {
    let deleted = conn
        .prepare_cached("DELETE FROM write_lock WHERE session_id = ?1 AND holder = ?2")
        .and_then(|mut q| q.execute(params![session_id, holder]))
        .map_err(LockError::database("release the lock", session_id))?;
    Ok(deleted > 0)
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        if let Err(e) = release_row(self.conn, &self.session_id, &self.holder) {
            tracing::warn!(
                error = %e,
                "write lock not released; it expires with its lease"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// status and force-refresh
// ---------------------------------------------------------------------------------------

/// The lock row of one session, as `session-state status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The holder as stored (see [`Holder`]); may be a foreign format.
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
    /// Whether the row is at least [`LEASE`] old (or implausibly in the future).
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

    #[test]
    fn recovery_command_is_quoted() {
        assert_eq!(
            manual_recovery(LockRow::WriteLock, None, "abc"),
            r#"sqlite3 states.sqlite "DELETE FROM write_lock WHERE session_id = 'abc';""#
        );
        assert_eq!(
            manual_recovery(LockRow::PiPresence, Some(Path::new("/a b/s.db")), "o'$x"),
            r#"sqlite3 '/a b/s.db' "DELETE FROM pi_presence WHERE session_id = 'o''\$x';""#
        );
        assert_eq!(
            row_recovery(
                LockRow::PiPresence,
                Some(Path::new("/d/s.db")),
                Some(Path::new("/s/it's.jsonl")),
                "x"
            ),
            r#"If that Pi has exited or is stuck, delete its row in the table pi_presence: session-state force-refresh --yes --db /d/s.db '/s/it'\''s.jsonl'  or  sqlite3 /d/s.db "DELETE FROM pi_presence WHERE session_id = 'x';""#
        );
        assert!(
            row_recovery(LockRow::WriteLock, None, None, "x")
                .contains("force-refresh --yes <session file>  or  sqlite3 states.sqlite")
        );
    }

    fn lock_db() -> Connection {
        let conn = Connection::open_in_memory().expect("open");
        ensure_schema(&conn).expect("schema");
        conn
    }

    fn plant(conn: &Connection, holder: &str, acquired_at_ms: i64) {
        conn.execute(
            "INSERT OR REPLACE INTO write_lock VALUES ('s', ?1, ?2, 'write')",
            params![holder, acquired_at_ms],
        )
        .expect("plant");
    }

    fn holder_of(conn: &Connection) -> Option<String> {
        read_row(conn, "s", true).expect("row").map(|r| r.holder)
    }

    /// A write's transaction writes no row of its own, refuses a live holder's row within
    /// its lease (and leaves it), deletes a dead holder's row, and leaves this process's
    /// own row (a `Store::lock`) to its owner.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_transaction_judges_the_row_and_writes_none() {
        let conn = lock_db();
        let file = Path::new("/s.jsonl");
        begin_write(&conn, "s", "write", file).expect("no row");
        assert!(!conn.is_autocommit(), "the transaction stays open");
        assert_eq!(holder_of(&conn), None, "no row is written for the write");
        conn.execute_batch("COMMIT").expect("commit");

        let parent = Holder::for_pid(std::os::unix::process::parent_id())
            .expect("the parent runs")
            .to_string();
        plant(&conn, &parent, now_ms());
        let err = begin_write(&conn, "s", "patch", file).expect_err("a live holder");
        assert!(
            matches!(&*err, LockError::Held { initiator, action, object, .. }
                if *initiator == parent && action == "patch" && object == "s"),
            "{err:?}"
        );
        assert!(conn.is_autocommit(), "a refusal rolls back");
        assert_eq!(holder_of(&conn), Some(parent.clone()), "its row stands");

        plant(&conn, &parent, now_ms() - LEASE_MS - 1);
        begin_write(&conn, "s", "write", file).expect("an expired lease");
        conn.execute_batch("COMMIT").expect("commit");
        assert_eq!(holder_of(&conn), None, "taken over: deleted");

        // This process with another start time: a reused pid, not alive.
        let me = Holder::current().to_string();
        let dead = me.replacen(";start:", ";start:9", 1);
        assert_ne!(dead, me);
        plant(&conn, &dead, now_ms());
        begin_write(&conn, "s", "write", file).expect("a dead holder");
        conn.execute_batch("COMMIT").expect("commit");
        assert_eq!(holder_of(&conn), None, "taken over: deleted");

        plant(&conn, &me, now_ms());
        begin_write(&conn, "s", "write", file).expect("our own row");
        conn.execute_batch("COMMIT").expect("commit");
        assert_eq!(holder_of(&conn), Some(me), "left to its owner");
    }
}
