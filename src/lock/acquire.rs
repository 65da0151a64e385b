//! Taking, renewing and releasing the write lock, and judging the row a writer meets.

use super::error::{LockError, LockRow, Refused};
use super::identity::assess_raw;
use super::presence;
use super::table::{LEASE, Row, ensure_schema, lease, now_ms, read_row};
use super::{Holder, Liveness, WriterQueue};
use rusqlite::{Connection, params};
use std::path::Path;

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
/// of another process, a Pi presence row) refuses with [`LockError::Held`], and the
/// transaction is rolled back. A row of a dead holder or past its lease is deleted in the
/// transaction; this process's own row is left to its owner.
///
/// No row is written for the write itself: SQLite's write lock, held from here to the
/// caller's `COMMIT` or `ROLLBACK`, excludes every other writer of the database for the
/// whole operation, and every holder taking a row, which does so under `BEGIN IMMEDIATE`
/// too. A judgement that finds nothing in the way is remembered with the rows' generation
/// read here ([`ClearRows::generation`]), which the next write's fast path checks
/// (`docs/lock.md`). A crash inside leaves no row. Waiting for SQLite's write lock
/// is bounded by the connection's `busy_timeout`; past it the result is
/// [`LockError::Database`].
///
/// The connection must not be inside a transaction.
///
/// [`Store::lock`]: crate::Store::lock
///
/// `clear` remembers a judgement that found nothing in the way; while no other connection
/// has committed to the database since (`PRAGMA data_version`) and this one has changed
/// nothing (`total_changes`), the rows are the same and are not read again.
pub(crate) fn begin_write(
    conn: &Connection,
    queue: &WriterQueue,
    commits: &super::CommitStamp,
    session_id: &str,
    action: &str,
    session_file: &Path,
    clear: &mut ClearRows,
) -> Result<(), Refused> {
    let err = || LockError::database("acquire the lock", session_id);
    // The crate's one bracket, its statements prepared once per connection: a write runs
    // this and its commit every time.
    crate::sqlite::begin(conn).map_err(err())?;
    // Read in the transaction: the version of the database this write sees.
    let version = match database_version(conn) {
        Ok(v) => v,
        Err(e) => {
            crate::sqlite::rollback(conn);
            return Err(err()(e));
        }
    };
    // Read under SQLite's write lock, which a holder taking a row holds while it moves
    // the generation on: every row this judgement does not see comes with a later one.
    let generation = queue.rows_generation();
    // Under the write lock too: nobody commits between this read and the judgement.
    let counted = commits.read();
    if clear.is(session_id, version) {
        clear.remember(session_id, version, generation, counted);
        return Ok(());
    }
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
    match &judged {
        Err(_) => {
            crate::sqlite::rollback(conn);
        }
        // Nothing deleted: the rows are as they were read.
        Ok(()) if conn.total_changes() == version.1 => {
            clear.remember(session_id, version, generation, counted)
        }
        Ok(()) => clear.forget(),
    }
    judged
}

/// The version of the database as `conn` sees it: `PRAGMA data_version`, which moves on
/// whenever another connection (of this process or any other) has committed, and the
/// connection's own `total_changes`.
pub(crate) fn database_version(conn: &Connection) -> rusqlite::Result<(i64, u64)> {
    let v = conn
        .prepare_cached("PRAGMA data_version")?
        .query_row([], |r| r.get::<_, i64>(0))?;
    Ok((v, conn.total_changes()))
}

/// A judgement of the rows that found nothing in the way of a write of one session, and
/// the version of the database it read ([`begin_write`]).
#[derive(Debug, Default)]
pub(crate) struct ClearRows {
    seen: Option<Judged>,
}

/// What a judgement that found nothing in the way read: the session, the database's
/// version (`data_version`, `total_changes`), the rows' generation in the writers' queue
/// file and the database's transaction counter ([`CommitStamp`]), each when it has one.
///
/// [`CommitStamp`]: super::CommitStamp
#[derive(Debug)]
struct Judged {
    session_id: String,
    version: (i64, u64),
    generation: Option<u64>,
    commits: Option<u32>,
}

impl ClearRows {
    /// Whether the judgement of `session_id` was made on the database at `version`
    /// ([`database_version`]): nobody has committed since, so the rows are the ones judged.
    pub(crate) fn is(&self, session_id: &str, version: (i64, u64)) -> bool {
        self.seen
            .as_ref()
            .is_some_and(|j| j.session_id == session_id && j.version == version)
    }

    /// The rows' generation and the database's transaction counter of a judgement of
    /// `session_id` that found nothing in the way: while both are the same, no holder has
    /// taken a row since ([`WriterQueue::fast_pass`], `Projection::fast_pass`).
    pub(crate) fn generation(&self, session_id: &str) -> Option<(u64, Option<u32>)> {
        let j = self.seen.as_ref().filter(|j| j.session_id == session_id)?;
        Some((j.generation?, j.commits))
    }

    fn remember(
        &mut self,
        session_id: &str,
        version: (i64, u64),
        generation: Option<u64>,
        commits: Option<u32>,
    ) {
        match &mut self.seen {
            Some(j) if j.session_id == session_id => {
                (j.version, j.generation, j.commits) = (version, generation, commits);
            }
            seen => {
                *seen = Some(Judged {
                    session_id: session_id.to_owned(),
                    version,
                    generation,
                    commits,
                });
            }
        }
    }

    fn forget(&mut self) {
        self.seen = None;
    }
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
    queue: &WriterQueue,
    session_id: &str,
    action: &str,
    now_ms: i64,
    holder: &Holder,
) -> Result<LockGuard<'c>, Refused> {
    let err = || LockError::database("acquire the lock", session_id);
    let holder_str = holder.to_string();
    crate::sqlite::immediate(
        conn,
        |_, e| Refused::from(err()(e)),
        |tx| {
            ensure_schema(tx).map_err(err())?;
            let row = read_row(tx, session_id, true).map_err(err())?;
            judge(row, &holder_str, session_id, action, now_ms, tx, None)?;
            tx.prepare_cached(
                "INSERT INTO write_lock (session_id, holder, acquired_at, action) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session_id) DO UPDATE SET
                     holder = excluded.holder,
                     acquired_at = excluded.acquired_at,
                     action = excluded.action",
            )
            .and_then(|mut q| q.execute(params![session_id, holder_str, now_ms, action]))
            .map_err(err())?;
            // The writers on the fast path are told before the row commits (docs/lock.md).
            queue.announce_row("acquire the lock", session_id)
        },
    )?;
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::super::table::LEASE_MS;
    use super::*;

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

    /// A writers' queue beside a database in a directory of its own.
    fn queue() -> (tempfile::TempDir, WriterQueue) {
        let dir = tempfile::tempdir().expect("tempdir");
        let q = WriterQueue::beside(&dir.path().join("lock.sqlite"));
        (dir, q)
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
        let (dir, q) = queue();
        let c = super::super::CommitStamp::beside(&dir.path().join("lock.sqlite"));
        let file = Path::new("/s.jsonl");
        begin_write(&conn, &q, &c, "s", "write", file, &mut ClearRows::default()).expect("no row");
        assert!(!conn.is_autocommit(), "the transaction stays open");
        assert_eq!(holder_of(&conn), None, "no row is written for the write");
        crate::sqlite::commit(&conn).expect("commit");

        let parent = Holder::for_pid(std::os::unix::process::parent_id())
            .expect("the parent runs")
            .to_string();
        plant(&conn, &parent, now_ms());
        let err = begin_write(&conn, &q, &c, "s", "patch", file, &mut ClearRows::default())
            .expect_err("a live holder");
        assert!(
            matches!(&*err, LockError::Held { initiator, action, object, .. }
                if *initiator == parent && action == "patch" && object == "s"),
            "{err:?}"
        );
        assert!(conn.is_autocommit(), "a refusal rolls back");
        assert_eq!(holder_of(&conn), Some(parent.clone()), "its row stands");

        plant(&conn, &parent, now_ms() - LEASE_MS - 1);
        begin_write(&conn, &q, &c, "s", "write", file, &mut ClearRows::default())
            .expect("an expired lease");
        crate::sqlite::commit(&conn).expect("commit");
        assert_eq!(holder_of(&conn), None, "taken over: deleted");

        // This process with another start time: a reused pid, not alive.
        let me = Holder::current().to_string();
        let dead = me.replacen(";start:", ";start:9", 1);
        assert_ne!(dead, me);
        plant(&conn, &dead, now_ms());
        begin_write(&conn, &q, &c, "s", "write", file, &mut ClearRows::default())
            .expect("a dead holder");
        crate::sqlite::commit(&conn).expect("commit");
        assert_eq!(holder_of(&conn), None, "taken over: deleted");

        plant(&conn, &me, now_ms());
        begin_write(&conn, &q, &c, "s", "write", file, &mut ClearRows::default())
            .expect("our own row");
        crate::sqlite::commit(&conn).expect("commit");
        assert_eq!(holder_of(&conn), Some(me), "left to its owner");
    }

    /// The memo of a clear judgement stands only while nothing changed: a row another
    /// connection commits, or one this connection writes, is read and refuses.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_remembered_clear_judgement_sees_every_new_row() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("lock.sqlite");
        let open = || {
            let c = Connection::open(&db).expect("open");
            c.busy_timeout(std::time::Duration::from_secs(10))
                .expect("busy");
            c.pragma_update(None, "journal_mode", "WAL").expect("wal");
            c
        };
        let (mine, other) = (open(), open());
        let q = WriterQueue::beside(&db);
        let c = super::super::CommitStamp::beside(&db);
        ensure_schema(&mine).expect("schema");
        let file = Path::new("/s.jsonl");
        let mut clear = ClearRows::default();
        for _ in 0..2 {
            begin_write(&mine, &q, &c, "s", "write", file, &mut clear).expect("no row");
            crate::sqlite::commit(&mine).expect("commit");
        }
        assert!(clear.seen.is_some(), "a clear judgement is remembered");
        let parent = Holder::for_pid(std::os::unix::process::parent_id())
            .expect("the parent runs")
            .to_string();
        // Another connection's row.
        plant(&other, &parent, now_ms());
        let err = begin_write(&mine, &q, &c, "s", "write", file, &mut clear).expect_err("seen");
        assert!(matches!(&*err, LockError::Held { .. }), "{err:?}");
        other.execute("DELETE FROM write_lock", []).expect("delete");
        begin_write(&mine, &q, &c, "s", "write", file, &mut clear).expect("no row again");
        crate::sqlite::commit(&mine).expect("commit");
        // This connection's own change (no other connection committed).
        plant(&mine, &parent, now_ms());
        let err = begin_write(&mine, &q, &c, "s", "patch", file, &mut clear).expect_err("seen");
        assert!(matches!(&*err, LockError::Held { .. }), "{err:?}");
        // Another session's memo does not answer for this one.
        mine.execute("DELETE FROM write_lock", []).expect("delete");
        begin_write(&mine, &q, &c, "t", "write", file, &mut clear).expect("no row for t");
        crate::sqlite::commit(&mine).expect("commit");
        plant(&mine, &parent, now_ms());
        mine.execute("UPDATE write_lock SET session_id = 's'", [])
            .expect("move");
        assert!(begin_write(&mine, &q, &c, "s", "write", file, &mut clear).is_err());
    }
}
