//! The SQLite projection (SPEC §4): a cache of folds, never the source of truth.
//!
//! Per session the database keeps a watermark (file identity, bytes consumed, length and
//! change stamp at that point, digests of the first and last 4 KiB of the consumed prefix)
//! and, in the same transaction, the parent links of every entry and the folded value
//! after every state event, with each state event's offset, length and digest. A read
//! checks the watermark with one `stat` and then follows `state_anc` links through point
//! lookups: its cost does not grow with the file. When the file grew or its stamp moved,
//! the prefix digests and every folded state event's bytes are checked, then only the
//! bytes after the watermark are read, committed in bounded chunks; when the prefix
//! changed, the session is rebuilt from the log. Only a database that is provably ours
//! is ever modified or deleted. See `docs/architecture.md`.

use crate::error::{DatabaseError, Error, Location, Result};
use crate::log::entry::raw_str;
use crate::log::io::FileIdentity;
use crate::log::reader::{self, EntrySink, Finding, ReadMode, ScanState, ScannedEntry};
use crate::state::envelope::{Envelope, STATE_PREFIX, Scope};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// 2: branch values are stored as snapshots plus merge-patch deltas (`base`, `delta`,
/// `chain`), and the prefix digests are word-wise. A database of ours of another version
/// is rebuilt from the logs.
/// 3: every state event's line length and digest (`events.len`, `events.digest`), so a
/// resumed catch-up can check the folded events' bytes.
const SCHEMA_VERSION: i64 = 3;
const APP: &str = "session-state";
const DIGEST_SPAN: u64 = 4096;
/// A catch-up commits at least every this many entries or bytes (SPEC §4: other sessions
/// wait at most for one chunk).
const CHUNK_ENTRIES: u64 = 20_000;
const CHUNK_BYTES: u64 = 16 << 20;
/// Every state event's line holds this (its `customType`), unless written with escapes.
const STATE_MARK: &str = "session-state";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions(
    file TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    dev INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    consumed INTEGER NOT NULL,
    next_line INTEGER NOT NULL,
    file_len INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    head_digest INTEGER NOT NULL,
    pre_digest INTEGER NOT NULL,
    entry_count INTEGER NOT NULL,
    last_entry_id TEXT
);
CREATE TABLE IF NOT EXISTS nodes(
    file TEXT NOT NULL,
    idx INTEGER NOT NULL,
    entry_id TEXT NOT NULL,
    parent INTEGER,
    state_anc INTEGER,
    PRIMARY KEY(file, idx)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS nodes_by_id ON nodes(file, entry_id);
CREATE TABLE IF NOT EXISTS events(
    file TEXT NOT NULL,
    idx INTEGER NOT NULL,
    plugin TEXT NOT NULL,
    scope TEXT,
    line INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    len INTEGER NOT NULL,
    digest INTEGER NOT NULL,
    prev_anc INTEGER,
    value TEXT,
    error TEXT,
    error_idx INTEGER,
    base INTEGER,
    delta TEXT,
    chain INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(file, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_values(
    file TEXT NOT NULL,
    plugin TEXT NOT NULL,
    value TEXT,
    last_idx INTEGER,
    error TEXT,
    error_idx INTEGER,
    PRIMARY KEY(file, plugin)
) WITHOUT ROWID;
";

/// What a catch-up did, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUp {
    /// The session was (re)built from the start of the file.
    pub rebuilt: bool,
    /// Bytes of the session file parsed after the watermark (the checks of the consumed
    /// prefix are counted in `verified_bytes`).
    pub bytes_read: u64,
    /// Entries added to the projection.
    pub entries_added: u64,
    /// Bytes of the session file read to check that the consumed prefix is unchanged:
    /// the two digest spans and the folded state events (0 when nothing was checked).
    pub verified_bytes: u64,
}

/// The projection database.
#[derive(Debug)]
pub(crate) struct Projection {
    conn: Connection,
    path: PathBuf,
    /// Catch-up reports of this connection, newest last (tests and benches read them).
    last_catch_up: Option<CatchUp>,
    chunks: ChunkPolicy,
}

fn db_err(path: &Path, action: &'static str) -> impl FnOnce(rusqlite::Error) -> Error + use<> {
    let path = path.to_path_buf();
    move |source| Error::Database {
        path,
        action,
        source: DatabaseError(source),
    }
}

fn is_corruption(e: &rusqlite::Error) -> bool {
    crate::error::is_corrupt(e)
}

/// A digest of a span of the file, to tell that a prefix is unchanged (not a defence
/// against an adversary: the file's identity, length and mtime are checked too). Eight
/// bytes per multiply: the spans are read on every catch-up, including after each write.
fn fnv(bytes: &[u8]) -> i64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (bytes.len() as u64).wrapping_mul(K);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(K).rotate_left(29);
    }
    (h ^ (h >> 32)) as i64
}

/// A stamp of the file's last change: mtime and ctime. A same-length rewrite moves at
/// least the ctime, which no user-level tool can set back (`cp -p`, `touch -r` and
/// `rsync -t` restore only the mtime).
fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64);
    #[cfg(unix)]
    let ctime = {
        use std::os::unix::fs::MetadataExt;
        meta.ctime()
            .wrapping_mul(1_000_000_000)
            .wrapping_add(meta.ctime_nsec())
    };
    #[cfg(not(unix))]
    let ctime = 0i64;
    mtime ^ ctime.rotate_left(29)
}

fn read_span(f: &mut std::fs::File, path: &Path, start: u64, len: u64) -> Result<Vec<u8>> {
    let io = |source| Error::Io {
        action: "reading",
        path: path.to_path_buf(),
        source,
    };
    f.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut buf = Vec::with_capacity(len as usize);
    f.by_ref().take(len).read_to_end(&mut buf).map_err(io)?;
    Ok(buf)
}

/// The digests of the first and the last [`DIGEST_SPAN`] bytes of the consumed prefix.
/// `known_head` is the head digest when its span is known to be unchanged (a resumed
/// catch-up whose prefix was just verified, both before and after past the span).
fn digests(
    f: &mut std::fs::File,
    path: &Path,
    consumed: u64,
    known_head: Option<i64>,
) -> Result<(i64, i64)> {
    let head = match known_head {
        Some(h) if consumed >= DIGEST_SPAN => h,
        _ => fnv(&read_span(f, path, 0, consumed.min(DIGEST_SPAN))?),
    };
    let pre_start = consumed.saturating_sub(DIGEST_SPAN);
    let pre = read_span(f, path, pre_start, consumed - pre_start)?;
    Ok((head, fnv(&pre)))
}

/// The key of a session file in the database: its canonical path.
pub(crate) fn file_key(path: &Path) -> Result<String> {
    let canon = std::fs::canonicalize(path).map_err(|source| Error::Io {
        action: "resolving",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(canon.to_string_lossy().into_owned())
}

#[derive(Debug, Clone)]
struct SessionRow {
    session_id: String,
    version: i64,
    dev: i64,
    ino: i64,
    consumed: i64,
    next_line: i64,
    file_len: i64,
    mtime_ns: i64,
    head_digest: i64,
    pre_digest: i64,
    entry_count: i64,
}

fn session_row(conn: &Connection, file: &str) -> rusqlite::Result<Option<SessionRow>> {
    conn.prepare_cached(
        "SELECT session_id, version, dev, ino, consumed, next_line, file_len, mtime_ns, \
         head_digest, pre_digest, entry_count FROM sessions WHERE file = ?1",
    )?
    .query_row([file], |r| {
        Ok(SessionRow {
            session_id: r.get(0)?,
            version: r.get(1)?,
            dev: r.get(2)?,
            ino: r.get(3)?,
            consumed: r.get(4)?,
            next_line: r.get(5)?,
            file_len: r.get(6)?,
            mtime_ns: r.get(7)?,
            head_digest: r.get(8)?,
            pre_digest: r.get(9)?,
            entry_count: r.get(10)?,
        })
    })
    .optional()
}

/// Opens a connection with the pragmas of SPEC §4.
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // Switching a new database to WAL can fail with SQLITE_BUSY at once, without waiting
    // for the busy timeout, while another connection does the same: retry, bounded.
    let mut tries = 0;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => break,
            Err(e)
                if tries < 500
                    && matches!(
                        e.sqlite_error_code(),
                        Some(
                            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                        )
                    ) =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// Whether the database holds our current schema: `Ok(true)` yes (or no tables yet: a
/// database being created), `Ok(false)` an older schema of ours, to be rebuilt. Only
/// called on a file that [`ownership`] proved ours.
fn check_schema(conn: &Connection) -> rusqlite::Result<bool> {
    let tables = table_names(conn)?;
    if tables.is_empty() {
        return Ok(true);
    }
    if !tables.iter().any(|t| t == "meta") {
        // Only the lock table (created by a writer) is still ours.
        return Ok(tables.iter().all(|t| t == "write_lock"));
    }
    let version: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(meta_app(conn)?.as_deref() == Some(APP) && version == Some(SCHEMA_VERSION.to_string()))
}

fn table_names(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")?
        .query_map([], |r| r.get(0))?
        .collect()
}

/// `meta.app`, if the database has a `meta` table with that key.
fn meta_app(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let has_meta: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta')",
        [],
        |r| r.get(0),
    )?;
    if !has_meta {
        return Ok(None);
    }
    conn.query_row("SELECT value FROM meta WHERE key = 'app'", [], |r| r.get(0))
        .optional()
}

/// What is at a database path, as far as ownership goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Nothing, or an empty file: ours to create.
    Absent,
    /// Not a regular file (a directory, ...): left to SQLite, whose error names it.
    Special,
    /// A SQLite file whose header carries our `application_id`.
    Stamped,
    /// A database of ours from before the stamp (`meta.app` says so), or one holding
    /// only the write-lock table; stamped when opened for writing.
    Unstamped,
}

/// Decides, without modifying anything, whether the file at `path` is provably our
/// projection (SPEC §4). A file that is not is an [`Error::NotOurDatabase`] naming what is
/// there.
fn ownership(path: &Path) -> Result<Found> {
    let not_ours = |what: String| Error::NotOurDatabase {
        path: path.to_path_buf(),
        what,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Absent),
        Err(source) => {
            return Err(Error::Io {
                action: "inspecting",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if meta.is_dir() {
        return Ok(Found::Special);
    }
    if !meta.is_file() {
        return Err(not_ours("is not a regular file".into()));
    }
    if meta.len() == 0 {
        return Ok(Found::Absent);
    }
    let mut head = Vec::with_capacity(100);
    std::fs::File::open(path)
        .and_then(|f| f.take(100).read_to_end(&mut head))
        .map_err(|source| Error::Io {
            action: "inspecting",
            path: path.to_path_buf(),
            source,
        })?;
    if !head.starts_with(SQLITE_MAGIC) || head.len() < 100 {
        return Err(not_ours(format!(
            "is not a SQLite database (starts with `{}`)",
            printable_start(&head)
        )));
    }
    let app_id = i32::from_be_bytes([head[68], head[69], head[70], head[71]]);
    if app_id == APPLICATION_ID {
        return Ok(Found::Stamped);
    }
    if app_id != 0 {
        return Err(not_ours(format!(
            "is a SQLite database of another program (application_id {app_id:#010x})"
        )));
    }
    // No stamp in the file's header: look inside, read-only (a stamp still in the WAL,
    // a database of ours from before the stamp, or somebody else's).
    let inspect = || -> rusqlite::Result<(i32, Option<String>, Vec<String>)> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(10))?;
        let id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        Ok((id, meta_app(&conn)?, table_names(&conn)?))
    };
    match inspect() {
        Ok((id, _, _)) if id == APPLICATION_ID => Ok(Found::Stamped),
        Ok((_, Some(app), _)) if app == APP => Ok(Found::Unstamped),
        Ok((_, _, tables)) if !tables.is_empty() && tables.iter().all(|t| t == "write_lock") => {
            Ok(Found::Unstamped)
        }
        Ok((_, _, tables)) if tables.is_empty() => Err(not_ours(
            "is an empty SQLite database without session-state's stamp (no tables; if it is \
             the leftover of an interrupted session-state run, remove it)"
                .into(),
        )),
        Ok((_, _, tables)) => {
            let mut list: Vec<&str> = tables.iter().map(String::as_str).take(5).collect();
            if tables.len() > 5 {
                list.push("…");
            }
            Err(not_ours(format!(
                "is a SQLite database of another program (tables: {})",
                list.join(", ")
            )))
        }
        Err(e) if is_corruption(&e) => Err(not_ours(format!(
            "is a damaged SQLite database without session-state's stamp ({e})"
        ))),
        Err(e) => Err(db_err(path, "inspecting")(e)),
    }
}

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
/// `PRAGMA application_id` of our databases ("SSt1"), header bytes 68..72.
const APPLICATION_ID: i32 = 0x5353_7431;

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

/// Removes the database at `path` and its side files, after checking (again, just
/// before) that it is provably ours.
fn remove_our_files(path: &Path) -> Result<()> {
    if ownership(path)? == Found::Special {
        return Err(Error::NotOurDatabase {
            path: path.to_path_buf(),
            what: "is not a regular file".into(),
        });
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    Ok(())
}

/// Opens (creating if needed) a database that [`ownership`] proved ours, checks and
/// creates the schema and stamps it, all in one write transaction. `Ok(Err(()))`: an
/// older schema of ours, to be rebuilt.
fn open_ours(path: &Path, found: Found) -> rusqlite::Result<std::result::Result<Connection, ()>> {
    if found == Found::Absent {
        // Stamp a new file before anything else (before the switch to WAL, so that the
        // stamp lands in the file's own header): a crash at any later point leaves a file
        // that is provably ours. Checked and stamped in one write transaction: another
        // opener may be creating it at the same moment.
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let id: i32 = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        if id != APPLICATION_ID && table_names(&tx)?.is_empty() {
            tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        }
        tx.commit()?;
    }
    let mut conn = connect(path)?;
    // Check and create in one write transaction, so a second opener of a new database
    // sees either nothing or the whole schema, never half of it.
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let id: i32 = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    if id != APPLICATION_ID {
        // Ours without the stamp yet (checked again here, in the transaction): nothing,
        // a database of an older version, or only the lock table. Anything else appeared
        // since we looked; the caller's rebuild checks ownership before it deletes.
        let tables = table_names(&tx)?;
        let unstamped_ours = tables.is_empty()
            || meta_app(&tx)?.as_deref() == Some(APP)
            || tables.iter().all(|t| t == "write_lock");
        if !unstamped_ours {
            return Ok(Err(()));
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    }
    if !check_schema(&tx)? {
        return Ok(Err(()));
    }
    tx.execute_batch(SCHEMA)?;
    tx.execute(
        "INSERT OR IGNORE INTO meta(key, value) VALUES ('app', ?1), ('schema_version', ?2)",
        params![APP, SCHEMA_VERSION.to_string()],
    )?;
    crate::lock::ensure_schema(&tx)?;
    tx.commit()?;
    Ok(Ok(conn))
}

impl Projection {
    /// Opens (or creates) the projection database. Only a file that is provably ours
    /// (SPEC §4: our `application_id` in its header, or `meta.app` of an older version)
    /// is used; a corrupt one or one of an older schema is deleted and rebuilt. Anything
    /// else at the path is refused with [`Error::NotOurDatabase`] and left untouched; a
    /// database that cannot be opened at all is an error.
    pub fn open(path: &Path) -> Result<Projection> {
        let found = ownership(path)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                action: "creating the database directory",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let why = match open_ours(path, found) {
            Ok(Ok(conn)) => {
                return Ok(Projection {
                    conn,
                    path: path.to_path_buf(),
                    last_catch_up: None,
                    chunks: ChunkPolicy::default(),
                });
            }
            Ok(Err(())) => "an older schema".to_string(),
            Err(e) if is_corruption(&e) => format!("corrupt ({e})"),
            Err(e) => return Err(db_err(path, "opening")(e)),
        };
        // Ours, but never trusted: deleted and rebuilt from the logs on demand.
        tracing::warn!(db = %path.display(), "{why}: rebuilding the projection");
        remove_our_files(path)?;
        let conn = open_ours(path, Found::Absent)
            .map_err(db_err(path, "recreating"))?
            .map_err(|()| Error::NotOurDatabase {
                path: path.to_path_buf(),
                what: "was replaced while being rebuilt by a file that is not this version's \
                       database (another program, or an older session-state)"
                    .into(),
            })?;
        Ok(Projection {
            conn,
            path: path.to_path_buf(),
            last_catch_up: None,
            chunks: ChunkPolicy::default(),
        })
    }

    /// Opens an existing database read-only, never creating it (for `status`). Nothing
    /// (or an empty file) is `None`; a file that is not provably ours is
    /// [`Error::NotOurDatabase`].
    pub fn open_existing(path: &Path) -> Result<Option<Connection>> {
        if ownership(path)? == Found::Absent {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(db_err(path, "opening"))?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(db_err(path, "configuring"))?;
        Ok(Some(conn))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection (for the lock).
    pub fn connection(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// What the last catch-up did.
    pub fn last_catch_up(&self) -> Option<CatchUp> {
        self.last_catch_up
    }

    /// Records a catch-up made through [`catch_up_in_transaction`].
    pub(crate) fn record_catch_up(&mut self, c: CatchUp) {
        self.last_catch_up = Some(c);
    }

    /// Brings the projection of `file` up to date with the log and returns what it read.
    pub fn catch_up(&mut self, file: &Path) -> Result<CatchUp> {
        let r = catch_up(&mut self.conn, &self.path, file, false, &mut self.chunks);
        let r = match r {
            Err(Error::Database { source, .. }) if source.is_corrupt() => {
                self.reopen_rebuilt()?;
                catch_up(&mut self.conn, &self.path, file, false, &mut self.chunks)
            }
            // Rows of this session that do not decode: rebuild it from the log, once.
            Err(e @ Error::CorruptProjection { .. }) => {
                tracing::warn!(error = %e, "rebuilding the session's projection");
                catch_up(&mut self.conn, &self.path, file, true, &mut self.chunks)
            }
            r => r,
        };
        if let Ok(c) = r {
            self.last_catch_up = Some(c);
        }
        r
    }

    /// Deletes the database (ours: checked again first) and opens a new one in its place.
    fn reopen_rebuilt(&mut self) -> Result<()> {
        remove_our_files(&self.path)?;
        let chunks = std::mem::take(&mut self.chunks);
        *self = Projection::open(&self.path)?;
        self.chunks = chunks;
        Ok(())
    }

    /// The folded value of `plugin` in `scope` for `file`, as if the leaf were `at` (the
    /// last entry in file order by default). Catches up first. Stored rows that do not
    /// decode are never an answer: the session is rebuilt from the log and read again.
    pub fn read(
        &mut self,
        file: &Path,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<Option<Value>> {
        self.catch_up(file)?;
        let key = file_key(file)?;
        match read_value(&self.conn, &self.path, file, &key, plugin, scope, at) {
            // Corruption found by the read itself (pages the catch-up did not touch):
            // rebuild the database from the log and answer from the new one.
            Err(Error::Database { source, .. }) if source.is_corrupt() => {
                self.reopen_rebuilt()?;
                self.catch_up(file)?;
                read_value(&self.conn, &self.path, file, &key, plugin, scope, at)
            }
            Err(e @ Error::CorruptProjection { .. }) => {
                tracing::warn!(error = %e, "rebuilding the session's projection");
                let c = catch_up(&mut self.conn, &self.path, file, true, &mut self.chunks)?;
                self.last_catch_up = Some(c);
                read_value(&self.conn, &self.path, file, &key, plugin, scope, at)
            }
            r => r,
        }
    }

    /// Test hook: commit catch-ups every `entries` entries and call `hook` between two
    /// chunks (after one committed, before the next begins) with the catch-up so far; a
    /// hook returning `false` stops the build there, as a killed process would.
    #[doc(hidden)]
    pub fn set_chunk_hook(&mut self, entries: u64, hook: Option<ChunkHook>) {
        self.chunks = ChunkPolicy {
            entries: entries.max(1),
            bytes: CHUNK_BYTES,
            hook,
        };
    }

    /// Records a session's state after this process appended to it (catch-up from the
    /// file: the projection never gets ahead of the log).
    pub fn sync(&mut self, log: &crate::tree::SessionLog) -> Result<()> {
        if !log.is_materialized() {
            return Ok(());
        }
        match self.catch_up(log.path()) {
            Ok(_) => Ok(()),
            Err(e) => {
                // The log is durable; a projection that cannot follow is dropped and rebuilt
                // by the next reader, which will then report the problem itself.
                tracing::warn!(error = %e, "projection could not follow the log; dropping its rows");
                if let Ok(key) = file_key(log.path()) {
                    let _ = forget(&self.conn, &key);
                }
                Ok(())
            }
        }
    }

    /// Drops this session's cached rows (force-refresh).
    pub fn forget(&mut self, file: &Path) -> Result<()> {
        let key = file_key(file)?;
        forget(&self.conn, &key).map_err(db_err(&self.path, "forgetting a session"))
    }
}

fn forget(conn: &Connection, key: &str) -> rusqlite::Result<()> {
    for table in ["sessions", "nodes", "events", "session_values"] {
        conn.execute(&format!("DELETE FROM {table} WHERE file = ?1"), [key])?;
    }
    Ok(())
}

enum Plan {
    UpToDate,
    /// The consumed prefix is intact: read on from the watermark. The number is the bytes
    /// read to verify it (the prefix digests' spans and every folded state event).
    Resume(SessionRow, u64),
    Rebuild,
}

/// What a catch-up must do. Without `verify`, a changed file is assumed to be `Resume`
/// without reading its prefix: enough to decide that there is work to do.
fn plan(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    meta: &std::fs::Metadata,
    verify: bool,
) -> Result<Plan> {
    let Some(row) = session_row(conn, key).map_err(db_err(db, "reading the watermark"))? else {
        return Ok(Plan::Rebuild);
    };
    let id = FileIdentity::of(meta);
    if id.dev as i64 != row.dev || id.ino as i64 != row.ino {
        return Ok(Plan::Rebuild);
    }
    let len = meta.len() as i64;
    if len < row.file_len || len < row.consumed {
        return Ok(Plan::Rebuild);
    }
    if len == row.file_len && mtime_ns(meta) == row.mtime_ns {
        return Ok(Plan::UpToDate);
    }
    if !verify {
        return Ok(Plan::Resume(row, 0));
    }
    // It grew, or was touched or rewritten in place: the consumed prefix must be intact.
    // Then a same-length file only gets a new stamp (a resume that reads nothing new).
    Ok(match prefix_intact(conn, db, file, key, &row)? {
        Some(verified) => Plan::Resume(row, verified),
        None => Plan::Rebuild,
    })
}

/// Whether the consumed prefix is what the projection folded: the digests of its first
/// and last [`DIGEST_SPAN`] bytes, and the bytes of every state event folded (their
/// offsets, lengths and digests are in `events`). `Some(bytes read)` if intact. Entries
/// that are not state events are checked only inside the two spans (docs/architecture.md,
/// "Limits").
fn prefix_intact(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    row: &SessionRow,
) -> Result<Option<u64>> {
    let mut f = std::fs::File::open(file).map_err(|source| Error::Io {
        action: "opening",
        path: file.to_path_buf(),
        source,
    })?;
    let consumed = row.consumed as u64;
    let (head, pre) = digests(&mut f, file, consumed, None)?;
    let mut verified =
        consumed.min(DIGEST_SPAN) + (consumed - consumed.saturating_sub(DIGEST_SPAN));
    if head != row.head_digest || pre != row.pre_digest {
        return Ok(None);
    }
    let q = db_err(db, "reading the projection");
    let mut stmt = conn
        .prepare_cached("SELECT offset, len, digest FROM events WHERE file = ?1 ORDER BY idx")
        .map_err(db_err(db, "reading the projection"))?;
    let spans = stmt
        .query_map([key], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(q)?;
    // In file order through one buffer: events close together cost one read.
    let io = |source| Error::Io {
        action: "reading",
        path: file.to_path_buf(),
        source,
    };
    let mut r = std::io::BufReader::with_capacity(64 << 10, f);
    let mut pos = r.stream_position().map_err(io)?;
    let mut buf = Vec::new();
    for (offset, len, digest) in spans {
        let (offset, len) = (offset as u64, len as u64);
        if offset.saturating_add(len) > consumed {
            return Ok(None);
        }
        r.seek_relative(offset as i64 - pos as i64).map_err(io)?;
        buf.resize(len as usize, 0);
        r.read_exact(&mut buf).map_err(io)?;
        pos = offset + len;
        verified += len;
        if fnv(&buf) != digest {
            return Ok(None);
        }
    }
    Ok(Some(verified))
}

/// How a catch-up commits (SPEC §4: building one session must not block the others).
enum Commit<'h> {
    /// In bounded chunks, each committed with its watermark; the hook runs between
    /// chunks and may stop the build there (as a killed process would).
    Chunks(&'h mut ChunkPolicy),
    /// Inside the caller's transaction: at most one chunk; the rest is left to the next
    /// catch-up.
    Caller(&'h ChunkPolicy),
}

/// The size of a catch-up's chunks, and a test hook between them.
pub(crate) struct ChunkPolicy {
    entries: u64,
    bytes: u64,
    hook: Option<ChunkHook>,
}

/// Called between two committed chunks with the catch-up so far; `false` stops there
/// (a test hook, see [`Projection::set_chunk_hook`]).
#[doc(hidden)]
pub type ChunkHook = Box<dyn FnMut(&CatchUp) -> bool + Send>;

impl Default for ChunkPolicy {
    fn default() -> Self {
        ChunkPolicy {
            entries: CHUNK_ENTRIES,
            bytes: CHUNK_BYTES,
            hook: None,
        }
    }
}

impl std::fmt::Debug for ChunkPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkPolicy")
            .field("entries", &self.entries)
            .field("bytes", &self.bytes)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

fn catch_up(
    conn: &mut Connection,
    db: &Path,
    file: &Path,
    force_rebuild: bool,
    policy: &mut ChunkPolicy,
) -> Result<CatchUp> {
    let key = file_key(file)?;
    let meta = std::fs::metadata(file).map_err(|source| Error::Io {
        action: "reading",
        path: file.to_path_buf(),
        source,
    })?;
    // Fast path without a write transaction.
    if !force_rebuild && matches!(plan(conn, db, file, &key, &meta, false)?, Plan::UpToDate) {
        return Ok(CatchUp::default());
    }
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(db_err(db, "starting a transaction"))?;
    let r = catch_up_locked(conn, db, file, &key, force_rebuild, Commit::Chunks(policy));
    match r {
        Ok(stats) => {
            conn.execute_batch("COMMIT")
                .map_err(db_err(db, "committing"))?;
            Ok(stats)
        }
        Err(e) => {
            // Chunks committed before stand: each is a consistent prefix.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(e)
        }
    }
}

/// The catch-up itself, inside a write transaction the caller opened and commits.
fn catch_up_locked(
    tx: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    force_rebuild: bool,
    commit: Commit<'_>,
) -> Result<CatchUp> {
    // Re-plan under the write lock: another process may have caught up meanwhile.
    let meta = std::fs::metadata(file).map_err(|source| Error::Io {
        action: "reading",
        path: file.to_path_buf(),
        source,
    })?;
    let plan = if force_rebuild {
        Plan::Rebuild
    } else {
        plan(tx, db, file, key, &meta, true)?
    };
    Ok(match plan {
        Plan::UpToDate => CatchUp::default(),
        Plan::Resume(row, verified) => {
            let mut c = ingest(tx, db, file, key, Some(row), commit)?;
            c.verified_bytes += verified;
            c
        }
        Plan::Rebuild => {
            // The first chunk of a rebuild clears the old rows (same transaction).
            forget(tx, key).map_err(db_err(db, "clearing a session"))?;
            ingest(tx, db, file, key, None, commit)?
        }
    })
}

/// Catches the projection of `file` up inside a write transaction that the caller has
/// opened (`BEGIN IMMEDIATE`) on `conn` and will commit or roll back. A writer uses it to
/// commit the catch-up after its append together with the release of its write lock. At
/// most one chunk is ingested (the transaction stays short); the next catch-up goes on.
pub(crate) fn catch_up_in_transaction(
    conn: &Connection,
    db: &Path,
    file: &Path,
) -> Result<CatchUp> {
    let key = file_key(file)?;
    catch_up_locked(
        conn,
        db,
        file,
        &key,
        false,
        Commit::Caller(&ChunkPolicy::default()),
    )
}

/// A fold's error: the detail and the node index of the bad event.
type FoldErr = (String, i64);
/// A session-scope value (JSON text; `None` = absent) and its error, if any.
type SessionVal = (Option<String>, Option<FoldErr>);
/// An `events` row as read back: plugin, scope, prev_anc, error, error_idx.
type EventTuple = (
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
);

/// How a branch-fold event stores its folded value.
///
/// A `patch` event whose value is large next to its patch stores only the patch (a delta
/// on its `base`, the plugin's previous branch event), until the patches since the last
/// snapshot add up to more bytes than the value; then it stores the whole value again.
/// So a list grown one item per step stores O(final size) bytes, not O(steps × size),
/// and a read applies patches totalling at most the value's own size.
#[derive(Clone, Debug, Default, PartialEq)]
enum Stored {
    /// The folded value (JSON text; `None` = absent).
    #[default]
    Absent,
    Snapshot(String),
    /// A merge patch on the value at event `base`; `chain` = patch bytes since the
    /// last snapshot, this one included.
    Delta {
        base: i64,
        patch: String,
        chain: i64,
    },
}

impl Stored {
    fn snapshot(value: Option<String>) -> Stored {
        value.map_or(Stored::Absent, Stored::Snapshot)
    }
    fn chain(&self) -> i64 {
        match self {
            Stored::Delta { chain, .. } => *chain,
            _ => 0,
        }
    }
    /// The columns `value`, `base`, `delta`, `chain`.
    fn columns(&self) -> (Option<&str>, Option<i64>, Option<&str>, i64) {
        match self {
            Stored::Absent => (None, None, None, 0),
            Stored::Snapshot(v) => (Some(v), None, None, 0),
            Stored::Delta { base, patch, chain } => (None, Some(*base), Some(patch), *chain),
        }
    }
    /// From the columns; a half-stored delta is `Err` with what is wrong.
    fn from_columns(
        value: Option<String>,
        base: Option<i64>,
        delta: Option<String>,
        chain: i64,
    ) -> std::result::Result<Stored, String> {
        match (base, delta) {
            (Some(base), Some(patch)) => Ok(Stored::Delta { base, patch, chain }),
            (None, None) => Ok(Stored::snapshot(value)),
            (Some(base), None) => Err(format!("a delta on event {base} without its patch")),
            (None, Some(_)) => Err("a delta without its base event".into()),
        }
    }
}

/// Where stored rows come from, to name them when they do not decode.
#[derive(Clone, Copy)]
struct Rows<'a> {
    db: &'a Path,
    file: &'a Path,
}

impl Rows<'_> {
    fn corrupt(&self, detail: impl Into<String>) -> Error {
        Error::CorruptProjection {
            path: self.db.to_path_buf(),
            file: self.file.to_path_buf(),
            detail: detail.into(),
        }
    }

    /// Parses a stored JSON text (a folded value or a patch); one small function, so the
    /// parser is easy to swap.
    fn json(&self, what: &str, text: &str) -> Result<Value> {
        crate::json::from_str(text).map_err(|e| self.corrupt(format!("{what}: {e}")))
    }
}

/// The folded value (JSON text) of a stored event: its snapshot, or the snapshot below
/// it with the deltas since applied in order. `row(idx)` reads another event's storage.
/// A missing base or a text that does not parse is [`Error::CorruptProjection`].
fn folded_text(
    rows: Rows<'_>,
    at: Stored,
    mut row: impl FnMut(i64) -> Result<Option<Stored>>,
) -> Result<Option<String>> {
    let mut patches = Vec::new();
    let mut cur = at;
    let base = loop {
        match cur {
            Stored::Absent => break None,
            Stored::Snapshot(v) => break Some(v),
            Stored::Delta { base, patch, .. } => {
                patches.push(patch);
                match row(base)? {
                    Some(next) => cur = next,
                    None => {
                        return Err(
                            rows.corrupt(format!("the base event {base} of a delta is missing"))
                        );
                    }
                }
            }
        }
    };
    if patches.is_empty() {
        return Ok(base);
    }
    // In place, as `Op::Patch` applies a patch (an absent value patches `{}`), without
    // copying the value at every step.
    let mut value: Value = match base {
        Some(b) => rows.json("a stored value", &b)?,
        None => Value::Object(serde_json::Map::new()),
    };
    for p in patches.iter().rev() {
        let patch = rows.json("a stored patch", p)?;
        crate::json::merge_patch(&mut value, &patch);
    }
    Ok(Some(crate::json::to_string_exact(&value)))
}

#[derive(Clone)]
struct EventRow {
    plugin: String,
    scope: Option<Scope>,
    prev_anc: Option<i64>,
    stored: Stored,
    error: Option<(String, i64)>,
}

/// The scanner's sink over SQL, with in-memory caches for what this pass added.
struct SqlSink<'c> {
    tx: &'c Connection,
    db: PathBuf,
    file: PathBuf,
    key: String,
    session_id: String,
    next_idx: i64,
    last_id: Option<String>,
    ids: HashMap<String, (i64, Option<i64>)>,
    events: HashMap<i64, EventRow>,
    /// Per plugin: the last branch event ingested and its folded value, so that a linear
    /// run of deltas is folded once, not rebuilt from its snapshot at every step.
    last_folded: HashMap<String, (i64, Option<String>)>,
    session_values: HashMap<String, SessionVal>,
    added: u64,
    /// An error met where the scanner's interface cannot return one (`assign_id`).
    deferred: Option<Error>,
    /// Length and digest of the current line, when it may be a state event.
    line_digest: Option<(i64, i64)>,
}

impl SqlSink<'_> {
    fn sql<T>(&self, r: rusqlite::Result<T>) -> Result<T> {
        r.map_err(db_err(&self.db, "updating the projection"))
    }

    fn node_by_id(&self, id: &str) -> Result<Option<(i64, Option<i64>)>> {
        if let Some(n) = self.ids.get(id) {
            return Ok(Some(*n));
        }
        self.sql(
            self.tx
                .prepare_cached(
                    "SELECT idx, state_anc FROM nodes WHERE file = ?1 AND entry_id = ?2",
                )
                .and_then(|mut q| {
                    q.query_row(params![self.key, id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                }),
        )
    }

    fn event(&self, idx: i64) -> Result<Option<EventRow>> {
        if let Some(e) = self.events.get(&idx) {
            return Ok(Some(e.clone()));
        }
        self.sql(
            self.tx
                .prepare_cached(
                    "SELECT plugin, scope, prev_anc, value, error, error_idx, base, delta, chain \
                     FROM events WHERE file = ?1 AND idx = ?2",
                )
                .and_then(|mut q| {
                    q.query_row(params![self.key, idx], |r| {
                        let scope: Option<String> = r.get(1)?;
                        let error: Option<String> = r.get(4)?;
                        let error_idx: Option<i64> = r.get(5)?;
                        Ok((
                            r.get::<_, String>(0)?,
                            scope,
                            r.get::<_, Option<i64>>(2)?,
                            Stored::from_columns(r.get(3)?, r.get(6)?, r.get(7)?, r.get(8)?),
                            error.zip(error_idx),
                        ))
                    })
                    .optional()
                }),
        )?
        .map(|(plugin, scope, prev_anc, stored, error)| {
            let rows = self.rows();
            Ok(EventRow {
                plugin,
                scope: match scope {
                    None => None,
                    Some(s) => Some(s.parse().map_err(|_| {
                        rows.corrupt(format!("event {idx}: unknown stored scope {s:?}"))
                    })?),
                },
                prev_anc,
                stored: stored.map_err(|d| rows.corrupt(format!("event {idx}: {d}")))?,
                error,
            })
        })
        .transpose()
    }

    fn digest_line(&self, offset: u64, len: u64) -> Result<(i64, i64)> {
        let mut f = std::fs::File::open(&self.file).map_err(|source| Error::Io {
            action: "opening",
            path: self.file.clone(),
            source,
        })?;
        Ok((
            len as i64,
            fnv(&read_span(&mut f, &self.file, offset, len)?),
        ))
    }

    fn rows(&self) -> Rows<'_> {
        Rows {
            db: &self.db,
            file: &self.file,
        }
    }

    /// This plugin's branch fold just above a node whose parent's `state_anc` is `anc`:
    /// the event it continues (if any) with its storage, and the folded value there.
    fn branch_base(&self, plugin: &str, mut anc: Option<i64>) -> Result<BranchBase> {
        while let Some(e) = anc {
            let Some(row) = self.event(e)? else { break };
            if row.plugin == plugin && row.scope != Some(Scope::Session) {
                if let Some(err) = row.error {
                    return Ok(Err(err));
                }
                let value = match self.last_folded.get(plugin) {
                    Some((idx, v)) if *idx == e => v.clone(),
                    _ => folded_text(self.rows(), row.stored.clone(), |i| {
                        Ok(self.event(i)?.map(|r| r.stored))
                    })?,
                };
                return Ok(Ok(Some((e, row.stored.chain(), value))));
            }
            anc = row.prev_anc;
        }
        Ok(Ok(None))
    }

    fn session_value(&self, plugin: &str) -> Result<SessionVal> {
        if let Some(v) = self.session_values.get(plugin) {
            return Ok(v.clone());
        }
        let row = self.sql(
            self.tx
                .prepare_cached(
                    "SELECT value, error, error_idx FROM session_values WHERE file = ?1 AND plugin = ?2",
                )
                .and_then(|mut q| {
                    q.query_row(params![self.key, plugin], |r| {
                        let e: Option<String> = r.get(1)?;
                        let ei: Option<i64> = r.get(2)?;
                        Ok((r.get::<_, Option<String>>(0)?, e.zip(ei)))
                    })
                    .optional()
                }),
        )?;
        Ok(row.unwrap_or((None, None)))
    }
}

/// The base of a branch-fold step: `(event, its delta chain, folded value)`, or nothing
/// (the plugin has no branch event above), or the error of a bad event above.
type BranchBase = std::result::Result<Option<(i64, i64, Option<String>)>, FoldErr>;

fn apply_op(rows: Rows<'_>, env: &Envelope, current: Option<&str>) -> Result<Option<String>> {
    let cur = match current {
        Some(c) => Some(rows.json("a stored value", c)?),
        None => None,
    };
    Ok(env
        .op
        .apply(cur.as_ref())
        .map(|v| crate::json::to_string_exact(&v)))
}

impl EntrySink for SqlSink<'_> {
    fn entry(&mut self, e: ScannedEntry<'_, '_>, _state: &ScanState) -> Result<()> {
        if let Some(err) = self.deferred.take() {
            return Err(err);
        }
        let id = &*e.id;
        if self.node_by_id(id)?.is_some() {
            return Err(Error::DuplicateId {
                path: self.file.clone(),
                at: e.at,
                id: id.into(),
                first_line: None,
            });
        }
        let parent = match e.parent.as_deref() {
            None => None,
            Some(p) => match self.node_by_id(p)? {
                Some(n) => Some(n),
                None if p == id => {
                    return Err(Error::Cycle {
                        path: self.file.clone(),
                        at: e.at,
                        id: id.into(),
                    });
                }
                None => {
                    return Err(Error::DanglingParent {
                        path: self.file.clone(),
                        at: e.at,
                        id: id.into(),
                        parent: p.into(),
                    });
                }
            },
        };
        let idx = self.next_idx;
        let prev_anc = parent.and_then(|(_, anc)| anc);
        let plugin = (e.raw.ty.0 == "custom")
            .then(|| e.raw.custom_type.and_then(raw_str))
            .flatten()
            .and_then(|ct| ct.strip_prefix(STATE_PREFIX).map(str::to_owned));
        let state_anc = if plugin.is_some() {
            Some(idx)
        } else {
            prev_anc
        };
        self.sql(
            self.tx
                .prepare_cached(
                    "INSERT INTO nodes(file, idx, entry_id, parent, state_anc) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut q| {
                    q.execute(params![self.key, idx, id, parent.map(|p| p.0), state_anc])
                }),
        )?;
        if let Some(plugin) = plugin {
            let decoded = Envelope::decode(e.raw.data);
            let scope = match &decoded {
                Ok(env) => Some(env.scope),
                Err(d) => d.scope,
            };
            let here = |detail: &str| (detail.to_owned(), idx);
            let (line_len, line_digest) = match self.line_digest.take() {
                Some(d) => d,
                // Written with escapes: read the line back.
                None => self.digest_line(e.at.offset, e.len - 1)?,
            };
            let mut row = EventRow {
                plugin: plugin.clone(),
                scope,
                prev_anc,
                stored: Stored::Absent,
                error: None,
            };
            // Branch fold (also for an event of unknown scope: it poisons both folds).
            if scope != Some(Scope::Session) {
                match (&decoded, self.branch_base(&plugin, prev_anc)?) {
                    (_, Err(err)) => row.error = Some(err),
                    (Err(d), _) => row.error = Some(here(&d.detail)),
                    (Ok(env), Ok(base)) => {
                        let (base_idx, base_chain, base_value) = match base {
                            Some((i, c, v)) => (Some(i), c, v),
                            None => (None, 0, None),
                        };
                        let value = apply_op(self.rows(), env, base_value.as_deref())?;
                        row.stored = match (&env.op, base_idx) {
                            (crate::state::envelope::Op::Patch(p), Some(base)) => {
                                let patch = crate::json::to_string_exact(p);
                                let chain = base_chain + patch.len() as i64;
                                if chain <= value.as_ref().map_or(0, |v| v.len() as i64) {
                                    Stored::Delta { base, patch, chain }
                                } else {
                                    Stored::snapshot(value.clone())
                                }
                            }
                            _ => Stored::snapshot(value.clone()),
                        };
                        self.last_folded.insert(plugin.clone(), (idx, value));
                    }
                }
            }
            if scope != Some(Scope::Branch) {
                let (cur, err) = self.session_value(&plugin)?;
                let next = match (err, &decoded) {
                    (Some(err), _) => (cur, Some(err)),
                    (None, Err(d)) => (cur, Some(here(&d.detail))),
                    (None, Ok(env)) => (apply_op(self.rows(), env, cur.as_deref())?, None),
                };
                self.sql(
                    self.tx
                        .prepare_cached(
                            "INSERT OR REPLACE INTO session_values(file, plugin, value, last_idx, \
                             error, error_idx) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        )
                        .and_then(|mut q| {
                            q.execute(params![
                                self.key,
                                plugin,
                                next.0,
                                idx,
                                next.1.as_ref().map(|e| &e.0),
                                next.1.as_ref().map(|e| e.1)
                            ])
                        }),
                )?;
                self.session_values.insert(plugin.clone(), next);
            }
            self.sql(
                self.tx
                    .prepare_cached(
                        "INSERT INTO events(file, idx, plugin, scope, line, offset, len, digest, \
                         prev_anc, value, error, error_idx, base, delta, chain) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                    )
                    .and_then(|mut q| {
                        let (value, base, delta, chain) = row.stored.columns();
                        q.execute(params![
                            self.key,
                            idx,
                            plugin,
                            scope.map(Scope::as_str),
                            e.at.line as i64,
                            e.at.offset as i64,
                            line_len,
                            line_digest,
                            prev_anc,
                            value,
                            row.error.as_ref().map(|e| &e.0),
                            row.error.as_ref().map(|e| e.1),
                            base,
                            delta,
                            chain
                        ])
                    }),
            )?;
            self.events.insert(idx, row);
        }
        self.ids.insert(id.to_owned(), (idx, state_anc));
        self.last_id = Some(id.to_owned());
        self.next_idx += 1;
        self.added += 1;
        Ok(())
    }

    fn finding(&mut self, _f: Finding) {}

    /// A v1 entry's id, collision-checked against the projection. The trait cannot fail
    /// here, so a database error is kept and returned by the next `entry` (and by the
    /// ingest), never taken for "the id is free".
    fn assign_id(&mut self, ordinal: u64) -> String {
        let mut attempt = 0;
        loop {
            let id = crate::log::migrate::v1_id(&self.session_id, ordinal, attempt);
            match self.node_by_id(&id) {
                Ok(Some(_)) => attempt += 1,
                Ok(None) => return id,
                Err(e) => {
                    self.deferred.get_or_insert(e);
                    return id;
                }
            }
        }
    }

    fn last_id(&self) -> Option<String> {
        self.last_id.clone()
    }
}

/// The watermark of a consistent prefix: everything before `consumed` is in the rows.
struct Watermark<'a> {
    session_id: &'a str,
    version: u32,
    consumed: Location,
    file_len: i64,
    mtime: i64,
    head: i64,
    pre: i64,
    entry_count: i64,
    last_id: Option<&'a str>,
}

fn write_watermark(
    tx: &Connection,
    db: &Path,
    key: &str,
    ident: FileIdentity,
    w: &Watermark<'_>,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO sessions(file, session_id, version, dev, ino, consumed, next_line, \
         file_len, mtime_ns, head_digest, pre_digest, entry_count, last_entry_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )
    .and_then(|mut q| {
        q.execute(params![
            key,
            w.session_id,
            w.version,
            ident.dev as i64,
            ident.ino as i64,
            w.consumed.offset as i64,
            w.consumed.line as i64,
            w.file_len,
            w.mtime,
            w.head,
            w.pre,
            w.entry_count,
            w.last_id
        ])
    })
    .map_err(db_err(db, "writing the watermark"))?;
    Ok(())
}

fn ingest(
    tx: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    resume: Option<SessionRow>,
    mut commit: Commit<'_>,
) -> Result<CatchUp> {
    let mut f = reader::open_regular(file)?;
    let (header_id, version, mut scan, start_idx, last_id) = match &resume {
        Some(row) => {
            let last_id: Option<String> = tx
                .prepare_cached("SELECT entry_id FROM nodes WHERE file = ?1 AND idx = ?2")
                .and_then(|mut q| {
                    q.query_row(params![key, row.entry_count - 1], |r| r.get(0))
                        .optional()
                })
                .map_err(db_err(db, "reading the projection"))?;
            let scan = ScanState {
                next: Location {
                    line: row.next_line as u64,
                    offset: row.consumed as u64,
                },
                pending_bad: Vec::new(),
                version: row.version as u32,
                ordinal: row.entry_count as u64,
            };
            (
                row.session_id.clone(),
                row.version as u32,
                scan,
                row.entry_count,
                last_id,
            )
        }
        None => {
            let (header, len) =
                crate::log::header::read_header_from(&mut f, file, reader::MAX_HEADER_LINE)?;
            let scan = ScanState::after_header(&header, len);
            (header.id.clone(), header.version, scan, 0, None)
        }
    };
    let start = scan.next;
    f.seek(SeekFrom::Start(start.offset))
        .map_err(|source| Error::Io {
            action: "reading",
            path: file.to_path_buf(),
            source,
        })?;
    let ident = FileIdentity::of(&f.metadata().map_err(|source| Error::Io {
        action: "reading",
        path: file.to_path_buf(),
        source,
    })?);
    let mut sink = SqlSink {
        tx,
        db: db.to_path_buf(),
        file: file.to_path_buf(),
        key: key.to_owned(),
        session_id: header_id.clone(),
        next_idx: start_idx,
        last_id,
        ids: HashMap::new(),
        events: HashMap::new(),
        last_folded: HashMap::new(),
        session_values: HashMap::new(),
        added: 0,
        deferred: None,
        line_digest: None,
    };
    let mut last_good = start;
    // The start of the current chunk (entries added, byte offset).
    let mut chunk_start = (0u64, start.offset);
    let (max_entries, max_bytes) = match &commit {
        Commit::Chunks(p) => (p.entries, p.bytes),
        Commit::Caller(p) => (p.entries, p.bytes),
    };
    // Set when the build stops at a chunk boundary before the end of the file.
    let mut stopped = false;
    // A resumed catch-up verified the head of the prefix just now (`plan`, same
    // transaction): its digest carries over, and so does one computed at a chunk boundary.
    let mut known_head = resume
        .as_ref()
        .filter(|row| row.consumed as u64 >= DIGEST_SPAN)
        .map(|row| row.head_digest);
    // Its own handle: the digests seek, and `f` is being read.
    let mut digest_file = std::fs::File::open(file).map_err(|source| Error::Io {
        action: "opening",
        path: file.to_path_buf(),
        source,
    })?;
    let result = reader::for_each_line(&f, file, start, |bytes, at| {
        // The digest of a state event's line, for the check on resume (item of SPEC §4):
        // computed only for lines that can be one.
        sink.line_digest = memchr::memmem::find(bytes, STATE_MARK.as_bytes())
            .map(|_| (bytes.len() as i64, fnv(bytes)));
        scan.line(file, ReadMode::Strict, bytes, at, &mut sink)?;
        if !scan.pending_bad.is_empty() {
            return Ok(());
        }
        last_good = scan.next;
        if sink.added - chunk_start.0 < max_entries && last_good.offset - chunk_start.1 < max_bytes
        {
            return Ok(());
        }
        // A chunk boundary: a consistent prefix ends here.
        let (head, pre) = digests(&mut digest_file, file, last_good.offset, known_head)?;
        if last_good.offset >= DIGEST_SPAN {
            known_head = Some(head);
        }
        write_watermark(
            tx,
            db,
            key,
            ident,
            &Watermark {
                session_id: &header_id,
                version,
                consumed: last_good,
                // Not a full read: the next catch-up verifies the prefix and goes on.
                file_len: last_good.offset as i64,
                mtime: 0,
                head,
                pre,
                entry_count: sink.next_idx,
                last_id: sink.last_id.as_deref(),
            },
        )?;
        let Commit::Chunks(policy) = &mut commit else {
            stopped = true;
            return Err(stop_marker());
        };
        tx.execute_batch("COMMIT")
            .map_err(db_err(db, "committing a chunk"))?;
        let so_far = CatchUp {
            rebuilt: resume.is_none(),
            bytes_read: last_good.offset - start.offset,
            entries_added: sink.added,
            verified_bytes: 0,
        };
        let go_on = policy.hook.as_mut().is_none_or(|hook| hook(&so_far));
        // The caller commits (or rolls back) the transaction it finds open.
        tx.execute_batch("BEGIN IMMEDIATE")
            .map_err(db_err(db, "starting a transaction"))?;
        if !go_on {
            stopped = true;
            return Err(stop_marker());
        }
        // Another process may have caught up this session between the chunks: it owns
        // the rest of the work then.
        let row = session_row(tx, key).map_err(db_err(db, "reading the watermark"))?;
        if row
            .is_none_or(|r| r.consumed as u64 != last_good.offset || r.entry_count != sink.next_idx)
        {
            stopped = true;
            return Err(stop_marker());
        }
        chunk_start = (sink.added, last_good.offset);
        Ok(())
    });
    let tail = match result {
        Ok(tail) => tail,
        Err(_) if stopped => {
            return Ok(CatchUp {
                rebuilt: resume.is_none(),
                bytes_read: last_good.offset - start.offset,
                entries_added: sink.added,
                verified_bytes: 0,
            });
        }
        Err(e) => return Err(e),
    };
    if let Some(err) = sink.deferred.take() {
        return Err(err);
    }
    // Lines still pending (unparsable, nothing valid after them yet) are re-read next time.
    let consumed = last_good;
    let file_end = scan.next.offset + tail;
    let meta = f.metadata().map_err(|source| Error::Io {
        action: "reading",
        path: file.to_path_buf(),
        source,
    })?;
    let (head, pre) = digests(&mut f, file, consumed.offset, known_head)?;
    // If the file grew while we read, record the length we saw; the next read resumes.
    let (file_len, mtime) = if meta.len() == file_end {
        (file_end as i64, mtime_ns(&meta))
    } else {
        (file_end as i64, 0)
    };
    write_watermark(
        tx,
        db,
        key,
        FileIdentity::of(&meta),
        &Watermark {
            session_id: &header_id,
            version,
            consumed,
            file_len,
            mtime,
            head,
            pre,
            entry_count: sink.next_idx,
            last_id: sink.last_id.as_deref(),
        },
    )?;
    Ok(CatchUp {
        rebuilt: resume.is_none(),
        bytes_read: file_end - start.offset,
        entries_added: sink.added,
        verified_bytes: 0,
    })
}

/// The error that stops the line loop at a chunk boundary (recognised by the flag set
/// with it, never shown).
fn stop_marker() -> Error {
    Error::Internal {
        what: "a catch-up's stop marker escaped its line loop".into(),
    }
}

/// The [`Error::BadEvent`] of the stored event `idx`; a row that cannot say which entry
/// and line it is makes the projection [`Error::CorruptProjection`] (rebuilt on read).
fn bad_event(
    conn: &Connection,
    rows: Rows<'_>,
    key: &str,
    plugin: &str,
    detail: String,
    idx: i64,
) -> Error {
    let found: Option<(String, i64, i64)> = match conn
        .query_row(
            "SELECT n.entry_id, e.line, e.offset FROM nodes n JOIN events e ON e.file = n.file AND e.idx = n.idx \
             WHERE n.file = ?1 AND n.idx = ?2",
            params![key, idx],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
    {
        Ok(found) => found,
        Err(e) => return db_err(rows.db, "reading a bad event")(e),
    };
    let Some((entry_id, line, offset)) = found else {
        return rows.corrupt(format!("event {idx}, named by a stored error, is missing"));
    };
    Error::BadEvent {
        path: rows.file.to_path_buf(),
        plugin: plugin.into(),
        entry_id,
        at: Location {
            line: line as u64,
            offset: offset as u64,
        },
        detail,
    }
}

fn read_value(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    plugin: &str,
    scope: Scope,
    at: Option<&str>,
) -> Result<Option<Value>> {
    let q = |r| db_err(db, "reading the projection")(r);
    let rows = Rows { db, file };
    let parse = |v: Option<String>| -> Result<Option<Value>> {
        v.map(|s| rows.json("a stored value", &s)).transpose()
    };
    match scope {
        Scope::Session => {
            if let Some(at) = at {
                node_anc(conn, key, at)
                    .map_err(q)?
                    .ok_or_else(|| Error::UnknownEntry {
                        path: file.to_path_buf(),
                        id: at.into(),
                    })?;
            }
            let row: Option<(Option<String>, Option<String>, Option<i64>)> = conn
                .query_row(
                    "SELECT value, error, error_idx FROM session_values WHERE file = ?1 AND plugin = ?2",
                    params![key, plugin],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()
                .map_err(q)?;
            match row {
                None => Ok(None),
                Some((_, Some(err), Some(idx))) => {
                    Err(bad_event(conn, rows, key, plugin, err, idx))
                }
                Some((v, _, _)) => parse(v),
            }
        }
        Scope::Branch => {
            let start = match at {
                Some(at) => {
                    node_anc(conn, key, at)
                        .map_err(q)?
                        .ok_or_else(|| Error::UnknownEntry {
                            path: file.to_path_buf(),
                            id: at.into(),
                        })?
                }
                None => conn
                    .query_row(
                        "SELECT n.state_anc FROM sessions s JOIN nodes n ON n.file = s.file \
                         AND n.idx = s.entry_count - 1 WHERE s.file = ?1",
                        [key],
                        |r| r.get::<_, Option<i64>>(0),
                    )
                    .optional()
                    .map_err(q)?
                    .flatten(),
            };
            let mut anc = start;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT plugin, scope, prev_anc, error, error_idx, value, base, delta, chain \
                     FROM events WHERE file = ?1 AND idx = ?2",
                )
                .map_err(q)?;
            let stored = |r: &rusqlite::Row<'_>| -> rusqlite::Result<_> {
                Ok(Stored::from_columns(
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ))
            };
            let decoded = |i: i64, s: std::result::Result<Stored, String>| {
                s.map_err(|d| rows.corrupt(format!("event {i}: {d}")))
            };
            while let Some(e) = anc {
                let row: Option<(EventTuple, std::result::Result<Stored, String>)> = stmt
                    .query_row(params![key, e], |r| {
                        Ok((
                            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
                            stored(r)?,
                        ))
                    })
                    .optional()
                    .map_err(q)?;
                let Some(((p, s, prev, error, error_idx), at)) = row else {
                    return Err(rows.corrupt(format!("event {e}, named by a link, is missing")));
                };
                if !matches!(s.as_deref(), None | Some("branch" | "session")) {
                    return Err(rows.corrupt(format!("event {e}: unknown stored scope {s:?}")));
                }
                if p == plugin && s.as_deref() != Some("session") {
                    if let (Some(err), Some(idx)) = (error, error_idx) {
                        return Err(bad_event(conn, rows, key, plugin, err, idx));
                    }
                    let at = decoded(e, at)?;
                    let text = folded_text(rows, at, |i| {
                        stmt.query_row(params![key, i], stored)
                            .optional()
                            .map_err(q)?
                            .map(|s| decoded(i, s))
                            .transpose()
                    })?;
                    return parse(text);
                }
                anc = prev;
            }
            Ok(None)
        }
    }
}

fn node_anc(conn: &Connection, key: &str, id: &str) -> rusqlite::Result<Option<Option<i64>>> {
    conn.query_row(
        "SELECT state_anc FROM nodes WHERE file = ?1 AND entry_id = ?2",
        params![key, id],
        |r| r.get(0),
    )
    .optional()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `assign_id` cannot return an error through the scanner's interface; a database
    /// error while checking an id for collisions is kept and returned by the next entry
    /// and the ingest, never read as "the id is free".
    #[test]
    fn assign_id_keeps_a_database_error_instead_of_calling_the_id_free() {
        let conn = Connection::open_in_memory().expect("open");
        // No `nodes` table: every lookup fails.
        let mut sink = SqlSink {
            tx: &conn,
            db: PathBuf::from("/db"),
            file: PathBuf::from("/s.jsonl"),
            key: "/s.jsonl".into(),
            session_id: "s".into(),
            next_idx: 0,
            last_id: None,
            ids: HashMap::new(),
            events: HashMap::new(),
            last_folded: HashMap::new(),
            session_values: HashMap::new(),
            added: 0,
            deferred: None,
            line_digest: None,
        };
        let _ = sink.assign_id(0);
        assert!(
            matches!(sink.deferred, Some(Error::Database { .. })),
            "{:?}",
            sink.deferred
        );
    }

    #[test]
    fn stored_rows_that_do_not_decode_are_errors() {
        let rows = Rows {
            db: Path::new("/db"),
            file: Path::new("/s.jsonl"),
        };
        let delta = Stored::Delta {
            base: 1,
            patch: "{\"b\":".into(),
            chain: 5,
        };
        let base = |_| Ok(Some(Stored::Snapshot("{\"a\":1}".into())));
        assert!(matches!(
            folded_text(rows, delta, base),
            Err(Error::CorruptProjection { .. })
        ));
        let missing = Stored::Delta {
            base: 1,
            patch: "{}".into(),
            chain: 2,
        };
        assert!(matches!(
            folded_text(rows, missing, |_| Ok(None)),
            Err(Error::CorruptProjection { .. })
        ));
        assert!(Stored::from_columns(None, Some(1), None, 0).is_err());
        assert!(Stored::from_columns(None, None, Some("{}".into()), 0).is_err());
    }
}
