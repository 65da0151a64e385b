//! [`SqliteStore`], the SQLite backend of [`SessionStore`]: many sessions in one database
//! file. Headers live in `sessions`, entries in `entries`, one row per entry keyed by
//! (session, sequence number), its JSON line kept byte for byte. See `docs/backends.md`.

use super::interrupted::missing_tool_results;
use super::lines::{LineFacts, check_line, check_new_header, event_lines};
use super::{Loaded, SessionStore};
use crate::error::{Error, Result};
use crate::log::entry::Header;
use crate::sqlite::DatabaseError;
use crate::tree::LogOptions;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// `PRAGMA application_id` of a session store ("SSs1"); the projection's is "SSt1".
const STORE_APPLICATION_ID: i32 = 0x5353_7331;

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

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
/// - `append` is one `BEGIN IMMEDIATE` transaction that reads the session's `next_seq`,
///   refuses unless it equals `first_seq`, inserts the rows and moves `next_seq`: SQLite's
///   write lock makes it the only writer of the database meanwhile, and the primary key
///   (session, seq) makes a sequence number impossible to use twice. Another writer, in
///   this process or another, gets [`Error::SequenceMismatch`] and nothing is written.
/// - WAL with `synchronous=FULL`: a commit is on stable storage when `append` returns.
/// - `list` reads the `sessions` table only; `load` reads the rows into a detached
///   [`crate::SessionLog`] with the strict reader and closes an interrupted final turn
///   through `append` (so durably, and conditionally).
///
/// Only a database that is provably a session store (its `application_id`) is opened; an
/// empty or absent file is created. Anything else is [`Error::NotOurStore`], untouched.
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// Sessions created and not yet appended to (lazy create, SPEC §8).
    pending: Mutex<HashMap<String, Header>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                action: "creating the store's directory",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = connect(&path, fresh).map_err(db_err(&path, "opening"))?;
        Ok(SqliteStore {
            path,
            conn: Mutex::new(conn),
            pending: Mutex::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn label(&self, session_id: &str) -> PathBuf {
        PathBuf::from(format!("sqlite://{}#{session_id}", self.path.display()))
    }

    fn not_found(&self, session_id: &str) -> Error {
        Error::SessionNotFound {
            session_id: session_id.into(),
            root: self.path.clone(),
        }
    }

    /// Inserts `lines` (checked) as the entries `first_seq..` of the session, in one
    /// transaction that also creates the session when `new` is given.
    fn insert(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[(String, LineFacts)],
        new: Option<&Header>,
    ) -> Result<u64> {
        let mut conn = lock(&self.conn);
        let path = self.path.clone();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_err(&path, "starting an append"))?;
        let row: Option<(i64, Option<String>)> = tx
            .prepare_cached("SELECT next_seq, last_id FROM sessions WHERE session_id = ?1")
            .and_then(|mut q| {
                q.query_row([session_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(db_err(&path, "reading the session"))?;
        let (next, mut last_id) = match (row, new) {
            (Some(_), Some(_)) => {
                return Err(Error::AlreadyExists {
                    path: self.label(session_id),
                });
            }
            (Some((n, last)), None) => (n as u64, last),
            (None, Some(h)) => {
                tx.prepare_cached(
                    "INSERT INTO sessions(session_id, version, cwd, timestamp, parent_session, \
                     header, next_seq, last_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, NULL)",
                )
                .and_then(|mut q| {
                    q.execute(params![
                        h.id(),
                        h.version(),
                        h.cwd(),
                        h.timestamp(),
                        h.parent_session(),
                        h.to_line().trim_end_matches('\n'),
                    ])
                })
                .map_err(db_err(&path, "creating the session"))?;
                (0, None)
            }
            (None, None) => return Err(self.not_found(session_id)),
        };
        if first_seq != next {
            return Err(Error::SequenceMismatch {
                session_id: session_id.into(),
                expected: next,
                got: first_seq,
            });
        }
        {
            let mut has_id = tx
                .prepare_cached("SELECT 1 FROM entries WHERE session_id = ?1 AND entry_id = ?2")
                .map_err(db_err(&path, "preparing"))?;
            let mut ins = tx
                .prepare_cached(
                    "INSERT INTO entries(session_id, seq, entry_id, parent_id, line) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(db_err(&path, "preparing"))?;
            let mut batch: HashSet<&str> = HashSet::new();
            for (i, (line, facts)) in lines.iter().enumerate() {
                let seq = first_seq + i as u64;
                let refuse = |detail: String| Error::InvalidEvent {
                    session_id: session_id.into(),
                    index: i,
                    seq,
                    detail,
                };
                let known = |id: &str, has_id: &mut rusqlite::CachedStatement<'_>| {
                    has_id
                        .exists(params![session_id, id])
                        .map_err(db_err(&path, "checking an entry id"))
                };
                if facts.id == session_id
                    || batch.contains(facts.id.as_str())
                    || known(&facts.id, &mut has_id)?
                {
                    return Err(refuse(format!(
                        "has id {:?}, which the session already uses",
                        facts.id
                    )));
                }
                if let Some(p) = &facts.parent
                    && !batch.contains(p.as_str())
                    && !known(p, &mut has_id)?
                {
                    return Err(refuse(format!(
                        "has parentId {p:?}, which is no entry of the session"
                    )));
                }
                ins.execute(params![
                    session_id,
                    seq as i64,
                    facts.id,
                    facts.parent,
                    line
                ])
                .map_err(db_err(&path, "appending"))?;
                batch.insert(&facts.id);
                last_id = Some(facts.id.clone());
            }
        }
        let new_next = first_seq + lines.len() as u64;
        tx.prepare_cached("UPDATE sessions SET next_seq = ?2, last_id = ?3 WHERE session_id = ?1")
            .and_then(|mut q| q.execute(params![session_id, new_next as i64, last_id]))
            .map_err(db_err(&path, "appending"))?;
        // IMPORTANT: synchronous=FULL, so the commit is durable when it returns.
        tx.commit().map_err(db_err(&path, "committing an append"))?;
        Ok(new_next)
    }

    /// The last entry's id and the next sequence number of a stored session.
    fn tip(&self, session_id: &str) -> Result<Option<(u64, Option<String>)>> {
        let conn = lock(&self.conn);
        conn.prepare_cached("SELECT next_seq, last_id FROM sessions WHERE session_id = ?1")
            .and_then(|mut q| {
                q.query_row([session_id], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get(1)?))
                })
                .optional()
            })
            .map_err(db_err(&self.path, "reading the session"))
    }

    /// Whether the session stores an entry with this id (an error counts as taken: the
    /// caller draws another id).
    fn id_taken(&self, session_id: &str, id: &str) -> bool {
        let conn = lock(&self.conn);
        conn.prepare_cached("SELECT 1 FROM entries WHERE session_id = ?1 AND entry_id = ?2")
            .and_then(|mut q| q.exists(params![session_id, id]))
            .unwrap_or(true)
    }

    fn pending_header(&self, session_id: &str) -> Option<Header> {
        lock(&self.pending).get(session_id).cloned()
    }

    /// Appends checked lines, creating a pending session on its first append.
    fn append_checked(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[(String, LineFacts)],
    ) -> Result<u64> {
        if let Some(header) = self.pending_header(session_id) {
            if first_seq != 0 {
                return Err(Error::SequenceMismatch {
                    session_id: session_id.into(),
                    expected: 0,
                    got: first_seq,
                });
            }
            if lines.is_empty() {
                return Ok(0);
            }
            let next = self.insert(session_id, 0, lines, Some(&header))?;
            lock(&self.pending).remove(session_id);
            return Ok(next);
        }
        self.insert(session_id, first_seq, lines, None)
    }

    fn read_detached(&self, session_id: &str) -> Result<crate::tree::SessionLog> {
        let label = self.label(session_id);
        let reader = RowReader::new(self, session_id)?;
        LogOptions::new().read(label, reader)
    }
}

impl SessionStore for SqliteStore {
    fn locate(&self, _header: &Header) -> Option<PathBuf> {
        None
    }

    fn create(&self, header: Header) -> Result<()> {
        check_new_header(&header)?;
        let mut pending = lock(&self.pending);
        if pending.contains_key(header.id()) {
            return Err(Error::AlreadyCreated {
                session_id: header.id().to_owned(),
            });
        }
        if self.tip(header.id())?.is_some() {
            return Err(Error::AlreadyExists {
                path: self.label(header.id()),
            });
        }
        pending.insert(header.id().to_owned(), header);
        Ok(())
    }

    fn append(&self, session_id: &str, first_seq: u64, events: &[Value]) -> Result<u64> {
        // The parent of the first event: the session's last entry.
        let parent = match self.pending_header(session_id) {
            Some(_) => None,
            None => match self.tip(session_id)? {
                Some((_, last)) => last,
                None => return Err(self.not_found(session_id)),
            },
        };
        let lines = event_lines(session_id, first_seq, parent, events, |id| {
            id == session_id || self.id_taken(session_id, id)
        })?;
        self.append_checked(session_id, first_seq, &lines)
    }

    fn load(&self, session_id: &str) -> Result<Loaded> {
        if self.pending_header(session_id).is_some() {
            return Err(Error::NotMaterialized {
                session_id: session_id.into(),
            });
        }
        let mut closed = Vec::new();
        // A concurrent load may close the same turn first: then read again.
        for _ in 0..3 {
            let log = self.read_detached(session_id)?;
            let missing = missing_tool_results(&log)?;
            if missing.is_empty() {
                return Ok(Loaded::new(log, closed));
            }
            let events: Vec<Value> = missing
                .iter()
                .map(|(_, m)| serde_json::json!({"type": "message", "message": m}))
                .collect();
            match self.append(session_id, log.len() as u64, &events) {
                Ok(_) => closed = missing.into_iter().map(|(id, _)| id).collect(),
                Err(Error::SequenceMismatch { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let log = self.read_detached(session_id)?;
        Ok(Loaded::new(log, closed))
    }

    fn list(&self) -> Result<Vec<Header>> {
        let conn = lock(&self.conn);
        let mut q = conn
            .prepare_cached(
                "SELECT session_id, version, cwd, timestamp, parent_session FROM sessions \
                 ORDER BY timestamp, session_id",
            )
            .map_err(db_err(&self.path, "listing"))?;
        let rows = q
            .query_map([], |r| {
                Ok(Header::from_parts(
                    r.get(0)?,
                    r.get::<_, i64>(1)? as u32,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                ))
            })
            .map_err(db_err(&self.path, "listing"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(db_err(&self.path, "listing"))
    }

    fn header_line(&self, session_id: &str) -> Result<String> {
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
        visit: &mut dyn FnMut(u64, &str) -> Result<()>,
    ) -> Result<u64> {
        let conn = lock(&self.conn);
        // One read transaction: the rows and next_seq agree.
        let tx = conn
            .unchecked_transaction()
            .map_err(db_err(&self.path, "reading"))?;
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
                visit(seq as u64, line)?;
            }
        }
        Ok(next)
    }

    fn append_lines(&self, session_id: &str, first_seq: u64, lines: &[String]) -> Result<u64> {
        let checked = lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                check_line(session_id, first_seq + i as u64, i, l).map(|f| (l.clone(), f))
            })
            .collect::<Result<Vec<_>>>()?;
        self.append_checked(session_id, first_seq, &checked)
    }

    fn describe(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}

/// The session's JSONL text (header line, then every entry line in sequence order),
/// produced from the rows in chunks as the reader asks: a large session is never held as
/// one string.
struct RowReader<'s> {
    store: &'s SqliteStore,
    session_id: String,
    next_seq: u64,
    total: u64,
    buf: Vec<u8>,
    pos: usize,
}

/// How many rows one refill of [`RowReader`] fetches.
const ROWS_PER_CHUNK: i64 = 512;

impl<'s> RowReader<'s> {
    fn new(store: &'s SqliteStore, session_id: &str) -> Result<RowReader<'s>> {
        let header = store.header_line(session_id)?;
        let total = store
            .tip(session_id)?
            .map(|(n, _)| n)
            .ok_or_else(|| store.not_found(session_id))?;
        let mut buf = header.into_bytes();
        buf.push(b'\n');
        Ok(RowReader {
            store,
            session_id: session_id.to_owned(),
            next_seq: 0,
            total,
            buf,
            pos: 0,
        })
    }

    fn refill(&mut self) -> rusqlite::Result<()> {
        self.buf.clear();
        self.pos = 0;
        if self.next_seq >= self.total {
            return Ok(());
        }
        let conn = lock(&self.store.conn);
        let mut q = conn.prepare_cached(
            "SELECT seq, line FROM entries WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 \
             ORDER BY seq",
        )?;
        let end = (self.next_seq as i64 + ROWS_PER_CHUNK).min(self.total as i64);
        let mut rows = q.query(params![self.session_id, self.next_seq as i64, end])?;
        let mut expect = self.next_seq as i64;
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(0)?;
            if seq != expect {
                // A gap: the reader sees a torn record there and refuses what follows.
                break;
            }
            self.buf.extend_from_slice(r.get_ref(1)?.as_bytes()?);
            self.buf.push(b'\n');
            expect += 1;
        }
        self.next_seq = if expect == self.next_seq as i64 {
            // Nothing readable: stop here; the reader reports the session as it stands.
            self.total
        } else {
            expect as u64
        };
        Ok(())
    }
}

impl Read for RowReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.buf.len() {
            self.refill().map_err(std::io::Error::other)?;
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn db_err(path: &Path, action: &'static str) -> impl FnOnce(rusqlite::Error) -> Error + use<> {
    let path = path.to_path_buf();
    move |source| Error::StoreDatabase {
        path,
        action,
        source: DatabaseError(source),
    }
}

/// Whether the file at `path` may be used: `Ok(true)` absent or empty (ours to create),
/// `Ok(false)` a store of ours; anything else is [`Error::NotOurStore`].
fn check_ours(path: &Path) -> Result<bool> {
    let not_ours = |what: String| Error::NotOurStore {
        path: path.to_path_buf(),
        what,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(source) => {
            return Err(Error::Io {
                action: "inspecting",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if !meta.is_file() {
        return Err(not_ours("is not a regular file".into()));
    }
    if meta.len() == 0 {
        return Ok(true);
    }
    let mut head = Vec::with_capacity(100);
    std::fs::File::open(path)
        .and_then(|f| f.take(100).read_to_end(&mut head))
        .map_err(|source| Error::Io {
            action: "inspecting",
            path: path.to_path_buf(),
            source,
        })?;
    if head.len() < 100 || !head.starts_with(SQLITE_MAGIC) {
        return Err(not_ours("is not a SQLite database".into()));
    }
    let app_id = i32::from_be_bytes([head[68], head[69], head[70], head[71]]);
    if app_id == STORE_APPLICATION_ID {
        return Ok(false);
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
    )))
}

fn connect(path: &Path, fresh: bool) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    if fresh {
        // Entries are kilobytes each (6.6 KB on average in Pi's sessions): large pages
        // keep most of them off overflow chains. Only a new file takes a page size.
        conn.pragma_update(None, "page_size", 65536)?;
    }
    let mut tries = 0;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => break,
            Err(e) if tries < 500 && is_busy(&e) => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
    // IMPORTANT: durability lives here (unlike the projection's NORMAL).
    conn.pragma_update(None, "synchronous", "FULL")?;
    // 16 MiB of page cache (the default 2 MiB is 32 of its 64 KiB pages): an import's
    // inserts keep the indexes' pages in memory.
    conn.pragma_update(None, "cache_size", -16384)?;
    if fresh {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let r = (|| {
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
        })();
        match r {
            Ok(()) => conn.execute_batch("COMMIT")?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    } else {
        conn.execute_batch(STORE_SCHEMA)?;
    }
    Ok(conn)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
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
                Err(Error::NotOurStore { .. })
            ));
            assert_eq!(std::fs::read(p).expect("read"), before);
        }
        assert!(matches!(
            SqliteStore::open("relative.sqlite"),
            Err(Error::InvalidOption { .. })
        ));
    }
}
