//! [`SqliteStore`], the SQLite backend of [`SessionStore`]: many sessions in one database
//! file. Headers live in `sessions`, entries in `entries`, one row per entry keyed by
//! (session, sequence number), its JSON line kept byte for byte. See `docs/backends.md`.

use super::lines::line_ids;
use super::{LineVisitor, SessionStore};
use crate::error::{BackendError, Error, IoContext, Result, StoreError};
use crate::log::entry::Header;
use crate::sqlite::{FileHead, Step, Synchronous, checkpoint_big_wal, file_head, is_busy};
use crate::sync::lock;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// `PRAGMA application_id` of a session store ("SSs1"); the projection's is "SSt1".
const STORE_APPLICATION_ID: i32 = 0x5353_7331;

/// The schema (version 1). `entries.line` is the entry's JSON text without its newline.
pub(crate) const STORE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS store_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions(
    session_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    cwd TEXT,
    timestamp TEXT,
    parent_session TEXT,
    header TEXT NOT NULL,
    next_seq INTEGER NOT NULL,
    last_id TEXT
);
CREATE TABLE IF NOT EXISTS entries(
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    entry_id TEXT NOT NULL,
    parent_id TEXT,
    line TEXT NOT NULL,
    PRIMARY KEY(session_id, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS entries_by_id ON entries(session_id, entry_id);
";

/// The SQLite backend of [`SessionStore`]: every session in one database file.
///
/// - `create` and `append_lines` are each one `BEGIN IMMEDIATE` transaction: SQLite's
///   write lock makes it the only writer of the database meanwhile. An append reads the
///   session's `next_seq`, refuses unless it equals `first_seq`, inserts the rows and
///   moves `next_seq`; the primary key (session, seq) makes a sequence number impossible
///   to use twice, the unique index (session, entry id) an entry id. Another writer, in
///   this process or another, gets [`StoreError::SequenceMismatch`] and nothing is
///   written.
/// - WAL with `synchronous=FULL`: a commit is on stable storage when it returns.
/// - `list` reads the `sessions` table only; `read_lines` only the rows asked for.
///
/// Only a database that is provably a session store (its `application_id`) is opened; an
/// empty or absent file is created. Anything else is [`StoreError::NotOurStore`],
/// untouched.
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// The line of the database's writers (`docs/lock.md`, "Taking turns").
    queue: crate::lock::WriterQueue,
}

impl Drop for SqliteStore {
    /// A WAL grown past `sqlite::WAL_KEEP_BYTES` is checkpointed and truncated on close:
    /// the connection does not checkpoint on close otherwise (`connect`).
    fn drop(&mut self) {
        let conn = lock(&self.conn);
        checkpoint_big_wal(&conn, &self.path);
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (or creates) the store at `path`, a non-empty absolute path.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        if path.as_os_str().is_empty() || !path.is_absolute() {
            return Err(Error::InvalidOption {
                option: "sqlite store path",
                detail: format!("{} is not a non-empty absolute path", path.display()),
            });
        }
        let fresh = check_ours(&path)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).ctx("creating the store's directory", dir)?;
        }
        let conn = connect(&path, fresh).map_err(db_err(&path, "opening"))?;
        Ok(SqliteStore {
            queue: crate::lock::WriterQueue::beside(&path),
            path,
            conn: Mutex::new(conn),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn not_found(&self, session_id: &str) -> StoreError {
        StoreError::NotFound {
            store: self.describe(),
            session_id: session_id.into(),
        }
    }

    /// Inserts `lines` as the entries `first_seq..` of the session, in the caller's
    /// transaction; returns the new next sequence number and last entry id.
    fn insert(
        &self,
        tx: &Connection,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
    ) -> Result<Option<String>, StoreError> {
        let mut ins = tx
            .prepare_cached(
                "INSERT INTO entries(session_id, seq, entry_id, parent_id, line) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(db_err(&self.path, "preparing"))?;
        let mut last = None;
        for (i, line) in lines.iter().enumerate() {
            let (id, parent) = line_ids(line);
            let Some(id) = id else {
                return Err(StoreError::Corrupt {
                    store: self.describe(),
                    session_id: session_id.into(),
                    detail: format!("line {i} of an append has no string `id`"),
                });
            };
            match ins.execute(params![
                session_id,
                (first_seq + i as u64) as i64,
                id,
                parent,
                line
            ]) {
                Ok(_) => {}
                Err(e)
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) =>
                {
                    return Err(StoreError::IdTaken {
                        session_id: session_id.into(),
                        id,
                    });
                }
                Err(e) => return Err(db_err(&self.path, "appending")(e)),
            }
            last = Some(id);
        }
        Ok(last)
    }

    fn write<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = lock(&self.conn);
        // In line behind the database's other writers, to the end of the transaction.
        let _turn = self.queue.turn(BUSY_TIMEOUT);
        // IMPORTANT: synchronous=FULL, so the commit is durable when it returns.
        crate::sqlite::immediate(
            &conn,
            |step, e| match step {
                Step::Begin => db_err(&self.path, action)(e),
                Step::Commit => db_err(&self.path, step.doing())(e),
            },
            f,
        )
    }

    /// The session's next sequence number and last entry id, in the transaction `tx`.
    fn end_of(
        &self,
        tx: &Connection,
        session_id: &str,
    ) -> Result<(u64, Option<String>), StoreError> {
        tx.prepare_cached("SELECT next_seq, last_id FROM sessions WHERE session_id = ?1")
            .and_then(|mut q| {
                q.query_row([session_id], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get(1)?))
                })
                .optional()
            })
            .map_err(db_err(&self.path, "reading the session"))?
            .ok_or_else(|| self.not_found(session_id))
    }

    /// Appends `lines` at `first_seq`, the session's next sequence number, in `tx`.
    fn append_in(
        &self,
        tx: &Connection,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        if lines.is_empty() {
            return Ok(first_seq);
        }
        let last = self.insert(tx, session_id, first_seq, lines)?;
        let new_next = first_seq + lines.len() as u64;
        tx.prepare_cached("UPDATE sessions SET next_seq = ?2, last_id = ?3 WHERE session_id = ?1")
            .and_then(|mut q| q.execute(params![session_id, new_next as i64, last]))
            .map_err(db_err(&self.path, "appending"))?;
        Ok(new_next)
    }
}

impl SessionStore for SqliteStore {
    fn create(
        &self,
        header: &Header,
        header_line: &str,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        let session_id = header.id();
        self.write("storing a new session", |tx| {
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO sessions(session_id, version, cwd, timestamp, parent_session, \
                     header, next_seq, last_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, NULL) \
                     ON CONFLICT(session_id) DO NOTHING",
                )
                .and_then(|mut q| {
                    q.execute(params![
                        session_id,
                        header.version(),
                        header.cwd(),
                        header.timestamp(),
                        header.parent_session(),
                        header_line,
                    ])
                })
                .map_err(db_err(&self.path, "storing a new session"))?;
            if inserted == 0 {
                return Err(StoreError::AlreadyExists {
                    store: self.describe(),
                    session_id: session_id.into(),
                });
            }
            self.append_in(tx, session_id, 0, lines)
        })
    }

    fn list(&self) -> Result<Vec<(String, String)>, StoreError> {
        let conn = lock(&self.conn);
        let mut q = conn
            .prepare_cached("SELECT session_id, header FROM sessions")
            .map_err(db_err(&self.path, "listing"))?;
        let rows = q
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db_err(&self.path, "listing"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(db_err(&self.path, "listing"))
    }

    fn header_line(&self, session_id: &str) -> Result<String, StoreError> {
        let conn = lock(&self.conn);
        conn.prepare_cached("SELECT header FROM sessions WHERE session_id = ?1")
            .and_then(|mut q| q.query_row([session_id], |r| r.get(0)).optional())
            .map_err(db_err(&self.path, "reading the header"))?
            .ok_or_else(|| self.not_found(session_id))
    }

    fn read_lines(
        &self,
        session_id: &str,
        from_seq: u64,
        visit: &mut LineVisitor<'_>,
    ) -> Result<u64, StoreError> {
        let conn = lock(&self.conn);
        // One read transaction: the rows and next_seq agree.
        crate::sqlite::reading(&conn, db_err(&self.path, "reading"), |tx| {
            let next: u64 = tx
                .prepare_cached("SELECT next_seq FROM sessions WHERE session_id = ?1")
                .and_then(|mut q| q.query_row([session_id], |r| r.get::<_, i64>(0)).optional())
                .map_err(db_err(&self.path, "reading the session"))?
                .ok_or_else(|| self.not_found(session_id))? as u64;
            if from_seq < next {
                let mut q = tx
                    .prepare_cached(
                        "SELECT seq, line FROM entries WHERE session_id = ?1 AND seq >= ?2 \
                         ORDER BY seq",
                    )
                    .map_err(db_err(&self.path, "reading entries"))?;
                let mut rows = q
                    .query(params![session_id, from_seq as i64])
                    .map_err(db_err(&self.path, "reading entries"))?;
                while let Some(r) = rows.next().map_err(db_err(&self.path, "reading entries"))? {
                    let seq: i64 = r.get(0).map_err(db_err(&self.path, "reading entries"))?;
                    let line = r
                        .get_ref(1)
                        .and_then(|v| v.as_str().map_err(Into::into))
                        .map_err(db_err(&self.path, "reading entries"))?;
                    if visit(seq as u64, line).is_break() {
                        break;
                    }
                }
            }
            Ok(next)
        })
    }

    fn append_lines(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        self.write("appending", |tx| {
            let (next, _) = self.end_of(tx, session_id)?;
            StoreError::check_next(session_id, next, first_seq)?;
            self.append_in(tx, session_id, first_seq, lines)
        })
    }

    /// No turns here: the writers of one database take turns for each transaction
    /// (`self.write`), and the session's end is checked in it.
    fn append_lines_outside_turns(
        &self,
        session_id: &str,
        first_seq: u64,
        after: Option<&str>,
        lines: &[String],
    ) -> Result<Option<u64>, StoreError> {
        self.write("appending", |tx| {
            let (next, last) = self.end_of(tx, session_id)?;
            if next != first_seq || last.as_deref() != after {
                return Ok(None);
            }
            self.append_in(tx, session_id, first_seq, lines).map(Some)
        })
    }

    fn describe(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}

fn db_err(path: &Path, action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError + use<> {
    let store = format!("sqlite://{}", path.display());
    move |source| {
        let busy = is_busy(&source);
        let source = BackendError {
            sql_state: None,
            source: Box::new(source),
        };
        if busy {
            // Another writer held the database past the busy timeout: later may work.
            StoreError::Unavailable {
                store,
                action: action.into(),
                source,
            }
        } else {
            StoreError::Database {
                store,
                action: action.into(),
                source,
            }
        }
    }
}

/// Whether the file at `path` may be used: `Ok(true)` absent or empty (ours to create),
/// `Ok(false)` a store of ours; anything else is [`Error::NotOurStore`].
fn check_ours(path: &Path) -> Result<bool> {
    let not_ours = |what: String| StoreError::NotOurStore {
        path: path.to_path_buf(),
        what,
    };
    match file_head(path).ctx("inspecting", path)? {
        FileHead::Absent => return Ok(true),
        FileHead::Directory | FileHead::Special => {
            return Err(not_ours("is not a regular file".into()).into());
        }
        FileHead::NotSqlite(start) => {
            return Err(
                not_ours(format!("is not a SQLite database (starts with `{start}`)")).into(),
            );
        }
        FileHead::Sqlite { application_id } if application_id == STORE_APPLICATION_ID => {
            return Ok(false);
        }
        FileHead::Sqlite { .. } => {}
    }
    // The stamp of a store just created may still be in its WAL only.
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(db_err(path, "inspecting"))?;
    let id: i32 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(db_err(path, "inspecting"))?;
    if id == STORE_APPLICATION_ID {
        return Ok(false);
    }
    Err(not_ours(format!(
        "is a SQLite database that is not a session store (application_id {id:#010x})"
    ))
    .into())
}

/// How long a writer waits for SQLite's write lock, and for its turn among the writers.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

fn connect(path: &Path, fresh: bool) -> rusqlite::Result<Connection> {
    // Entries are kilobytes each (6.6 KB on average in Pi's sessions): large pages keep
    // most of them off overflow chains; only a new file takes a page size. IMPORTANT:
    // durability lives here (`FULL`, unlike the projection's `NORMAL`). Every commit is
    // synced in the WAL, and the WAL stays between processes, so a process that appends
    // once syncs its commit only (docs/backends.md, "The WAL stays between processes").
    let conn = crate::sqlite::open(
        path,
        BUSY_TIMEOUT,
        Synchronous::Full,
        fresh.then_some(65536),
    )?;
    // 16 MiB of page cache (the default 2 MiB is 32 of its 64 KiB pages): an import's
    // inserts keep the indexes' pages in memory.
    conn.pragma_update(None, "cache_size", -16384)?;
    if fresh {
        crate::sqlite::immediate(
            &conn,
            |_, e| e,
            |conn| {
                let id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
                if id == 0 {
                    conn.pragma_update(None, "application_id", STORE_APPLICATION_ID)?;
                }
                conn.execute_batch(STORE_SCHEMA)?;
                conn.execute(
                    "INSERT OR IGNORE INTO store_meta(key, value) VALUES ('schema_version', '1')",
                    [],
                )?;
                Ok(())
            },
        )?;
    } else {
        conn.execute_batch(STORE_SCHEMA)?;
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_durable_stamped_and_only_ours_is_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sqlite");
        let store = SqliteStore::open(&path).expect("open");
        {
            let conn = lock(&store.conn);
            let get = |p: &str| -> String {
                conn.query_row(&format!("PRAGMA {p}"), [], |r| {
                    r.get::<_, rusqlite::types::Value>(0)
                })
                .map(|v| match v {
                    rusqlite::types::Value::Integer(i) => i.to_string(),
                    rusqlite::types::Value::Text(t) => t,
                    other => format!("{other:?}"),
                })
                .expect("pragma")
            };
            // synchronous=FULL (2): a commit is on stable storage when it returns.
            assert_eq!(get("synchronous"), "2");
            assert_eq!(get("journal_mode"), "wal");
            assert_eq!(get("application_id"), STORE_APPLICATION_ID.to_string());
        }
        drop(store);
        SqliteStore::open(&path).expect("ours: reopened");

        // Another program's database and a text file are refused, byte for byte untouched.
        let other = dir.path().join("other.sqlite");
        Connection::open(&other)
            .and_then(|c| c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);"))
            .expect("other db");
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "my notes, not a database\n".repeat(10)).expect("write");
        for p in [&other, &text] {
            let before = std::fs::read(p).expect("read");
            assert!(matches!(
                SqliteStore::open(p),
                Err(Error::Store(StoreError::NotOurStore { .. }))
            ));
            assert_eq!(std::fs::read(p).expect("read"), before);
        }
        assert!(matches!(
            SqliteStore::open("relative.sqlite"),
            Err(Error::InvalidOption { .. })
        ));
    }
}
