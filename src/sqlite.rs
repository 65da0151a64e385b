//! SQLite's error, wrapped so that no rusqlite type is part of the public API; what
//! both SQLite databases of the crate (the projection and the SQLite session store)
//! share: the look at a file's first bytes that begins their "is this file ours" check,
//! and the switch to WAL; and the one transaction bracket ([`begin`] … [`commit`] or
//! [`rollback`], and [`immediate`] around a closure). A leaf: it
//! imports nothing of the crate, and `error`, `lock`, `projection` and `persistence` use
//! it.

use std::io::Read;
use std::path::Path;

/// An error of SQLite, under the projection database and the write lock.
///
/// Opaque on purpose: the SQLite binding behind it can change without breaking callers.
/// `Display` is SQLite's message; [`std::error::Error::source`] goes on to its cause, if
/// any. Ask it what a caller can act on with [`DatabaseError::is_busy`] and
/// [`DatabaseError::is_corrupt`].
#[derive(Debug)]
pub struct DatabaseError(pub(crate) rusqlite::Error);

impl DatabaseError {
    /// Another connection held the database (`SQLITE_BUSY` or `SQLITE_LOCKED`) for longer
    /// than the busy timeout: nothing is wrong with it, and a retry later may succeed.
    pub fn is_busy(&self) -> bool {
        is_busy(&self.0)
    }

    /// SQLite found the file damaged or not a database (`SQLITE_CORRUPT`,
    /// `SQLITE_NOTADB`). The projection is a cache of the logs: a database of
    /// session-state's can be deleted and is rebuilt on the next read.
    pub fn is_corrupt(&self) -> bool {
        is_corrupt(&self.0)
    }
}

/// Whether SQLite's error says another connection held the database (`SQLITE_BUSY`,
/// `SQLITE_LOCKED`).
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Switches `conn`'s database to WAL. Switching a new database can fail with
/// `SQLITE_BUSY` at once, without waiting for the busy timeout, while another connection
/// does the same: retried every 10 ms, at most 500 times.
pub(crate) fn switch_to_wal(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let mut tries = 0;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => return Ok(()),
            Err(e) if tries < 500 && is_busy(&e) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

/// How a database's commits reach the disk (SQLite's `synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Synchronous {
    /// `FULL`: every commit is synced before it returns (a store of sessions).
    Full,
    /// `NORMAL`: synced at checkpoints only; a power loss may lose the last commits,
    /// never the database's consistency (the projection, a cache of the log).
    Normal,
}

/// Opens a connection of this crate to the database at `path`: waiting at most `busy`
/// for another connection's lock, in WAL mode ([`switch_to_wal`]), with `synchronous`,
/// the WAL kept between processes ([`keep_wal_on_close`]). `page_size` applies to a new
/// file only (it must be set before the database is created).
pub(crate) fn open(
    path: &std::path::Path,
    busy: std::time::Duration,
    synchronous: Synchronous,
    page_size: Option<u32>,
) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(busy)?;
    if let Some(size) = page_size {
        conn.pragma_update(None, "page_size", size)?;
    }
    switch_to_wal(&conn)?;
    let mode = match synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", mode)?;
    keep_wal_on_close(&conn)?;
    Ok(conn)
}

/// The most a WAL kept between processes may hold ([`keep_wal_on_close`]): past it, the
/// close checkpoints and truncates it ([`checkpoint_big_wal`]). Every process's first
/// connection reads the whole WAL to rebuild its index, so a WAL kept small keeps that
/// read short; a smaller bound would checkpoint more often.
pub(crate) const WAL_KEEP_BYTES: u64 = 1 << 20;

/// The last connection to close leaves the WAL as it is, neither checkpointed nor
/// deleted: a process that writes once (the CLI, a whole-process store write) then syncs
/// only its commit, instead of also creating the WAL (a sync of it and of its directory)
/// and checkpointing it on close (a sync of the WAL and of the database). The WAL is
/// checkpointed as it fills (SQLite's `wal_autocheckpoint`, 1,000 pages), by whichever
/// writer commits then, or on a close that finds it over [`WAL_KEEP_BYTES`]. Durability
/// is the `synchronous` setting's: a commit in the WAL is as durable as in the database.
pub(crate) fn keep_wal_on_close(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .map(drop)
}

/// Before a connection that keeps its WAL ([`keep_wal_on_close`]) closes: a WAL of
/// `db` grown past [`WAL_KEEP_BYTES`] is checkpointed and truncated, without waiting; one
/// that would wait for other connections' readers or writer is left to a later close (or
/// to SQLite's own checkpoint, as the WAL fills).
pub(crate) fn checkpoint_big_wal(conn: &rusqlite::Connection, db: &std::path::Path) {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > WAL_KEEP_BYTES)
        && let Err(e) = conn
            .busy_timeout(std::time::Duration::ZERO)
            .and_then(|()| conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())))
    {
        tracing::debug!(error = %e, db = %db.display(), "the WAL was not checkpointed on close");
    }
}

/// The step of a transaction bracket that failed ([`immediate`]): its name, for an error
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// `BEGIN`: nothing was done.
    Begin,
    /// `COMMIT`: the transaction is rolled back (if it was still open).
    Commit,
}

impl Step {
    /// What the step was doing, as an error message names it.
    pub(crate) fn doing(self) -> &'static str {
        match self {
            Step::Begin => "starting a transaction",
            Step::Commit => "committing",
        }
    }
}

/// How a transaction whose body succeeded ends ([`immediate_ending`], [`end_transaction`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// `COMMIT`: what the body wrote stands.
    Commit,
    /// `ROLLBACK`: the body wrote nothing worth keeping.
    Rollback,
}

// The crate's one SQLite transaction bracket: every `BEGIN IMMEDIATE`, `COMMIT` and
// `ROLLBACK` of the crate is here (`tests/architecture.rs` checks it). The statements are
// prepared once per connection (`prepare_cached`): a write on an open log runs `begin`
// and `commit` every time, and parses neither again.

/// Opens a write transaction on `conn`: `BEGIN IMMEDIATE`, which takes SQLite's write lock
/// (waiting at most the connection's busy timeout). The caller ends it with [`commit`],
/// [`rollback`] or [`end_transaction`]; [`immediate`] does all three around a closure.
pub(crate) fn begin(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.prepare_cached("BEGIN IMMEDIATE")?
        .execute([])
        .map(drop)
}

/// Opens a read transaction on `conn`: `BEGIN` (deferred): the reads that follow see one
/// version of the database. Ended by [`rollback`] ([`reading`] does both).
fn begin_read(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.prepare_cached("BEGIN")?.execute([]).map(drop)
}

/// Commits the open transaction. A failed `COMMIT` that leaves the transaction open is
/// rolled back: the connection is outside any transaction either way.
pub(crate) fn commit(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let done = conn
        .prepare_cached("COMMIT")
        .and_then(|mut q| q.execute([]));
    match done {
        Ok(_) => Ok(()),
        Err(e) => {
            rollback(conn);
            Err(e)
        }
    }
}

/// Rolls back the open transaction, if there is one; a failure leaves only a `tracing`
/// line.
pub(crate) fn rollback(conn: &rusqlite::Connection) {
    if !conn.is_autocommit()
        && let Err(e) = conn.execute_batch("ROLLBACK")
    {
        tracing::debug!(error = %e, "the rollback failed: the transaction stays open, and the next BEGIN on this connection fails");
    }
}

/// Ends the open transaction as `how` says, and rolls back if a commit fails: the
/// connection is left outside any transaction. For paths that have their answer (or
/// error) already; a failure leaves only a `tracing` line.
pub(crate) fn end_transaction(conn: &rusqlite::Connection, how: End) {
    match how {
        End::Commit => {
            if let Err(e) = commit(conn) {
                tracing::debug!(error = %e, "the transaction did not commit; rolled back");
            }
        }
        End::Rollback => rollback(conn),
    }
}

/// Runs `body` in one write transaction on `conn` ([`begin`]): committed when it returns
/// `Ok`, rolled back when it returns `Err`. A failed `BEGIN` or `COMMIT` is `fail`'s
/// error for that [`Step`]. The body may commit and begin again itself (a catch-up
/// committing chunk by chunk): whatever it leaves open is ended here.
pub(crate) fn immediate<T, E>(
    conn: &rusqlite::Connection,
    fail: impl FnOnce(Step, rusqlite::Error) -> E,
    body: impl FnOnce(&rusqlite::Connection) -> Result<T, E>,
) -> Result<T, E> {
    immediate_ending(conn, fail, |conn| body(conn).map(|t| (t, End::Commit)))
}

/// [`immediate`] whose body also says how the transaction ends when it succeeds: a body
/// that found nothing to do rolls back.
pub(crate) fn immediate_ending<T, E>(
    conn: &rusqlite::Connection,
    fail: impl FnOnce(Step, rusqlite::Error) -> E,
    body: impl FnOnce(&rusqlite::Connection) -> Result<(T, End), E>,
) -> Result<T, E> {
    if let Err(e) = begin(conn) {
        return Err(fail(Step::Begin, e));
    }
    match body(conn) {
        Ok((t, End::Commit)) => match commit(conn) {
            Ok(()) => Ok(t),
            Err(e) => Err(fail(Step::Commit, e)),
        },
        Ok((t, End::Rollback)) => {
            rollback(conn);
            Ok(t)
        }
        Err(e) => {
            rollback(conn);
            Err(e)
        }
    }
}

/// Runs `body` in one read transaction on `conn`: what it reads is one version of the
/// database. Nothing is written; the transaction is rolled back. A failed `BEGIN` is
/// `fail`'s error.
pub(crate) fn reading<T, E>(
    conn: &rusqlite::Connection,
    fail: impl FnOnce(rusqlite::Error) -> E,
    body: impl FnOnce(&rusqlite::Connection) -> Result<T, E>,
) -> Result<T, E> {
    if let Err(e) = begin_read(conn) {
        return Err(fail(e));
    }
    let r = body(conn);
    rollback(conn);
    r
}

/// Whether SQLite's error says the file is damaged or not a database.
pub(crate) fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
    )
}

impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

// Transparent, like `#[error(transparent)]`: the message is SQLite's own, so the chain
// goes on with its cause rather than repeating it.
impl std::error::Error for DatabaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// What a path holds, as far as telling a database of ours goes: read from its metadata
/// and its first 100 bytes (SQLite's file header), without opening it as a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileHead {
    /// Nothing, or an empty file.
    Absent,
    /// A directory.
    Directory,
    /// Neither a regular file nor a directory (a FIFO, a socket, a device, ...).
    Special,
    /// A regular file that does not begin with a SQLite header: its first bytes, printed
    /// for an error message (at most 24 characters, control characters escaped).
    NotSqlite(String),
    /// A SQLite database, with the `application_id` its header carries (0: none yet;
    /// the stamp of a database just created may still be in its WAL only).
    Sqlite {
        /// `PRAGMA application_id`, header bytes 68..72.
        application_id: i32,
    },
}

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// Looks at `path` without modifying anything (docs/spec.md §4: only a file provably ours
/// is opened). Symbolic links are followed.
pub(crate) fn file_head(path: &Path) -> std::io::Result<FileHead> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileHead::Absent),
        Err(e) => return Err(e),
    };
    if meta.is_dir() {
        return Ok(FileHead::Directory);
    }
    if !meta.is_file() {
        return Ok(FileHead::Special);
    }
    if meta.len() == 0 {
        return Ok(FileHead::Absent);
    }
    let mut head = Vec::with_capacity(100);
    std::fs::File::open(path)?
        .take(100)
        .read_to_end(&mut head)?;
    if head.len() < 100 || !head.starts_with(SQLITE_MAGIC) {
        return Ok(FileHead::NotSqlite(printable_start(&head)));
    }
    Ok(FileHead::Sqlite {
        application_id: i32::from_be_bytes([head[68], head[69], head[70], head[71]]),
    })
}

/// The first bytes of a file, for an error message: at most 24 characters, control
/// characters escaped.
fn printable_start(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(24)]);
    let mut out = String::new();
    for c in text.chars() {
        if c.is_control() || c == '`' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if bytes.len() > 24 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(conn: &rusqlite::Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count")
    }

    #[test]
    fn the_bracket_commits_on_ok_rolls_back_otherwise_and_leaves_no_transaction_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.sqlite");
        let conn = open(
            &path,
            std::time::Duration::from_secs(5),
            Synchronous::Full,
            None,
        )
        .expect("open");
        conn.execute_batch("CREATE TABLE t(x)").expect("table");
        let fail = |step: Step, e: rusqlite::Error| format!("{}: {e}", step.doing());
        let insert = |c: &rusqlite::Connection| {
            c.execute("INSERT INTO t VALUES (1)", [])
                .map(drop)
                .map_err(|e| e.to_string())
        };
        // Ok: committed.
        immediate(&conn, fail, insert).expect("committed");
        assert_eq!(count(&conn), 1);
        assert!(conn.is_autocommit());
        // Err: rolled back, the body's error returned.
        let err = immediate(&conn, fail, |c| {
            insert(c)?;
            Err::<(), _>("the body failed".to_owned())
        })
        .expect_err("the body's error");
        assert_eq!(err, "the body failed");
        assert_eq!(count(&conn), 1);
        assert!(conn.is_autocommit());
        // A body that found nothing to keep: rolled back, its answer returned.
        let kept = immediate_ending(&conn, fail, |c| {
            insert(c)?;
            Ok((7, End::Rollback))
        })
        .expect("an answer");
        assert_eq!((kept, count(&conn)), (7, 1));
        assert!(conn.is_autocommit());
        // It takes SQLite's write lock: another connection's bracket waits, then fails
        // with the step that could not begin, and leaves nothing open.
        let other = open(&path, std::time::Duration::ZERO, Synchronous::Full, None).expect("open");
        begin(&conn).expect("begin");
        let refused = immediate(&other, fail, insert).expect_err("busy");
        assert!(refused.starts_with("starting a transaction: "), "{refused}");
        assert!(other.is_autocommit());
        // The body may commit and begin again itself: what it leaves open is ended.
        commit(&conn).expect("commit");
        immediate(&conn, fail, |c| {
            insert(c)?;
            commit(c).map_err(|e| e.to_string())?;
            begin(c).map_err(|e| e.to_string())?;
            insert(c)
        })
        .expect("two commits");
        assert_eq!(count(&conn), 3);
        assert!(conn.is_autocommit());
        // A commit that fails (a constraint deferred to the commit) rolls back.
        conn.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TABLE p(id INTEGER PRIMARY KEY);
             CREATE TABLE c(p REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .expect("tables");
        let err = immediate(&conn, fail, |c| {
            c.execute("INSERT INTO c VALUES (9)", [])
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .expect_err("the commit fails");
        assert!(err.starts_with("committing: "), "{err}");
        assert!(conn.is_autocommit());
        let orphans: i64 = conn
            .query_row("SELECT count(*) FROM c", [], |r| r.get(0))
            .expect("count");
        assert_eq!(orphans, 0);
        // A read transaction sees one version and writes nothing.
        let n = reading(&conn, |e| e.to_string(), |c| Ok(count(c))).expect("read");
        assert_eq!(n, 3);
        assert!(conn.is_autocommit());
        // The paths that have their answer already end it either way.
        begin(&conn).expect("begin");
        insert(&conn).expect("insert");
        end_transaction(&conn, End::Rollback);
        assert_eq!(count(&conn), 3);
        begin(&conn).expect("begin");
        insert(&conn).expect("insert");
        end_transaction(&conn, End::Commit);
        assert_eq!(count(&conn), 4);
        assert!(conn.is_autocommit());
    }
}
