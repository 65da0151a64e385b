//! The SQLite projection (docs/spec.md §4): a cache of folds, never the source of truth.
//!
//! Per session the database keeps a watermark (file identity, bytes consumed, length and
//! change stamp at that point, digests of the first and last 4 KiB of the consumed prefix)
//! and, in the same transaction, every entry's node and segment, the segments, the folded
//! value after every state event, and its line's offset, length and digest (grouped in
//! `spans`). A read checks the watermark with one `stat` and then finds the plugin's
//! nearest event segment by segment, one index lookup each: its cost grows neither with
//! the file nor with other plugins' events. When the file grew or its stamp moved, the
//! prefix digests and every folded state event's bytes are checked, then only the bytes
//! after the watermark are read, committed in bounded chunks; when the prefix changed, the
//! session is rebuilt from the log. Only a database that is provably ours is ever
//! modified or deleted. See `docs/projection.md`.
//!
//! The fold itself is the state layer's ([`crate::state::step`]: the value after each
//! event and whether it is stored whole or as a delta); this module only moves it in and
//! out of rows. Its parts: [`schema`] (the tables, ownership, opening), [`watermark`]
//! (the consumed prefix and whether it is intact), [`ingest`] (catch-up in bounded
//! chunks), [`sink`] (the scanner's sink that writes the rows), [`read`] (a value at a
//! position from the rows), [`stored`] (the rows of a session kept by a store, fed from
//! its lines by sequence number instead of a file's bytes).

mod ingest;
pub(crate) mod prune;
mod read;
mod schema;
mod sink;
// Where a session's lines come from: a file (`ingest`, by byte offset) or a store
// (`stored`, by sequence number).
mod stored;
mod tail;
mod watermark;

#[cfg(feature = "__internal")]
pub(crate) use ingest::ChunkHook;
pub(crate) use read::ReadValue;
pub(crate) use stored::{StoredDecision, StoredLines};
pub(crate) use tail::{Tail, tail_in_transaction};

use crate::error::{DatabaseError, Error, IoContext, ProjectionError, Result};
use crate::state::envelope::Scope;
use crate::state::step::{self, Stored, Unfold};
use ingest::ChunkPolicy;
use rusqlite::Connection;
use schema::{Found, NotOpened};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// Work done by the projection on the calling thread since it started, counted instead of
/// timed (tests and benchmarks: a cost that must stay flat or linear is asserted on these
/// counts). Per thread, so that tests running in parallel do not see each other's work.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProjectionWork {
    /// Steps taken to find a plugin's nearest event above a node, by builds and reads:
    /// each stored event or segment looked at.
    pub lookups: u64,
    /// SQLite virtual-machine steps of the stored lookups: a few per lookup when the
    /// `events_by_plugin` index answers, one loop per row when a query steps over rows.
    pub lookup_vm_steps: u64,
    /// Database rows read to check that the folded state events are unchanged.
    pub verify_rows: u64,
    /// Positioned reads of the session file made by that check (the two digest spans
    /// included).
    pub verify_reads: u64,
}

thread_local! {
    static WORK: std::cell::Cell<ProjectionWork> = const {
        std::cell::Cell::new(ProjectionWork {
            lookups: 0,
            lookup_vm_steps: 0,
            verify_rows: 0,
            verify_reads: 0,
        })
    };
}

/// Adds to this thread's [`ProjectionWork`].
pub(crate) fn count(f: impl FnOnce(&mut ProjectionWork)) {
    WORK.with(|w| {
        let mut v = w.get();
        f(&mut v);
        w.set(v);
    });
}

/// This thread's [`ProjectionWork`] so far.
#[cfg(feature = "__internal")]
pub(crate) fn work() -> ProjectionWork {
    WORK.with(std::cell::Cell::get)
}

/// The projection database.
#[derive(Debug)]
pub(crate) struct Projection {
    conn: Connection,
    path: PathBuf,
    /// Catch-up reports of this connection, newest last (tests and benches read them).
    last_catch_up: Option<CatchUp>,
    chunks: ChunkPolicy,
    /// The last write's judgement of the lock rows, while it stands (`lock::begin_write`).
    clear_rows: crate::lock::ClearRows,
    /// The line of this database's writers (`docs/lock.md`, "Taking turns").
    queue: crate::lock::WriterQueue,
    /// The database's transaction counter, for the fast path (`lock::CommitStamp`).
    commits: crate::lock::CommitStamp,
}

pub(crate) fn db_err(
    path: &Path,
    action: &'static str,
) -> impl FnOnce(rusqlite::Error) -> Error + use<> {
    let path = path.to_path_buf();
    move |source| {
        Error::Projection(ProjectionError::Database {
            path,
            action,
            source: DatabaseError(source),
        })
    }
}

fn is_corruption(e: &rusqlite::Error) -> bool {
    crate::error::is_corrupt(e)
}

/// The key of a session file in the database: its canonical path, exactly. A path that
/// is UTF-8 is its own text; any other is `bytes:` and the path's bytes in hex, which no
/// canonical path (it starts with `/`) can be, so two files never share a key and
/// [`key_path`] gives the file back (a lossy text would name another file, or none).
pub(crate) fn file_key(path: &Path) -> Result<String> {
    let canon = std::fs::canonicalize(path).ctx("resolving", path)?;
    Ok(key_of_canonical(&canon))
}

const BYTES_KEY: &str = "bytes:";

fn key_of_canonical(canon: &Path) -> String {
    if let Some(text) = canon.to_str() {
        return text.to_owned();
    }
    let bytes = canon.as_os_str().as_encoded_bytes();
    let mut key = String::with_capacity(BYTES_KEY.len() + 2 * bytes.len());
    key.push_str(BYTES_KEY);
    for b in bytes {
        key.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        key.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    key
}

/// The file a [`file_key`] names.
pub(crate) fn key_path(key: &str) -> PathBuf {
    #[cfg(unix)]
    if let Some(hex) = key.strip_prefix(BYTES_KEY)
        && hex.len() % 2 == 0
        && let Some(bytes) = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()
    {
        use std::os::unix::ffi::OsStringExt;
        return PathBuf::from(std::ffi::OsString::from_vec(bytes));
    }
    PathBuf::from(key)
}

impl Projection {
    /// Opens (or creates) the projection database. Only a file that is provably ours
    /// (docs/spec.md §4: our `application_id` in its header, or `meta.app` of an older version)
    /// is used. An earlier version's schema is migrated in place, its lock and presence rows
    /// kept; a later version's is refused with [`ProjectionError::NewerDatabase`] and left
    /// untouched; a corrupt one is deleted and rebuilt unless it holds the row of a live holder
    /// other than this process, which is refused with [`LockError::Held`] (this process's own
    /// rows are carried over). Anything else at the path is refused with
    /// [`ProjectionError::NotOurDatabase`] and left untouched; a database that cannot be opened
    /// at all is an error.
    ///
    /// [`LockError::Held`]: crate::lock::LockError::Held
    pub fn open(path: &Path) -> Result<Projection> {
        let found = schema::ownership(path)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).ctx("creating the database directory", dir)?;
        }
        let why = match schema::open_ours(path, found) {
            Ok(Ok(conn)) => return Ok(Projection::with(conn, path)),
            Ok(Err(NotOpened::Newer(version))) => return Err(newer(path, version)),
            Ok(Err(NotOpened::Replaced)) => return Err(replaced(path)),
            Ok(Err(NotOpened::Mismatch { stamped, tables })) => format!(
                "stamped schema version {stamped} over the tables of schema version {tables} \
                 (this session-state reads schema version {})",
                schema::SCHEMA_VERSION
            ),
            Err(e) if is_corruption(&e) => format!("corrupt ({e})"),
            Err(e) => return Err(db_err(path, "opening")(e)),
        };
        Projection::rebuild(path, &why)
    }

    fn with(conn: Connection, path: &Path) -> Projection {
        Projection {
            conn,
            path: path.to_path_buf(),
            last_catch_up: None,
            chunks: ChunkPolicy::default(),
            clear_rows: Default::default(),
            queue: crate::lock::WriterQueue::beside(path),
            commits: crate::lock::CommitStamp::beside(path),
        }
    }

    /// Deletes a corrupt database of ours and creates a new one in its place, unless that
    /// would delete the row of a live holder other than this process (refused); this
    /// process's own live rows are written into the new database.
    fn rebuild(path: &Path, why: &str) -> Result<Projection> {
        let own = rows_to_keep(path, why)?;
        // Ours, but never trusted: deleted and rebuilt from the logs on demand.
        tracing::warn!(db = %path.display(), "{why}: rebuilding the projection");
        schema::remove_our_files(path)?;
        let conn =
            match schema::open_ours(path, Found::Absent).map_err(db_err(path, "recreating"))? {
                Ok(conn) => conn,
                Err(NotOpened::Newer(version)) => return Err(newer(path, version)),
                Err(NotOpened::Replaced | NotOpened::Mismatch { .. }) => {
                    return Err(replaced(path));
                }
            };
        restore_rows(&conn, &own).map_err(db_err(path, "restoring this process's rows"))?;
        Ok(Projection::with(conn, path))
    }

    /// Opens an existing database read-only, never creating it (for `status`). Nothing
    /// (or an empty file) is `None`; a file that is not provably ours is
    /// [`ProjectionError::NotOurDatabase`].
    pub fn open_existing(path: &Path) -> Result<Option<Connection>> {
        if schema::ownership(path)? == Found::Absent {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(db_err(path, "opening"))?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(db_err(path, "configuring"))?;
        // A later version's rows are not ours to judge: refused, as `open` refuses it.
        if let Some(version) = schema::newer_version(&conn).map_err(db_err(path, "inspecting"))? {
            return Err(newer(path, version));
        }
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

    /// The connection and the writers' queue, for a holder taking a row (`Store::lock`,
    /// a Pi presence row), which tells the writers on the fast path of it.
    pub(crate) fn lock_parts(&mut self) -> (&mut Connection, &crate::lock::WriterQueue) {
        (&mut self.conn, &self.queue)
    }

    /// The connection, for statements that need no `&mut`.
    pub(crate) fn sql(&self) -> &Connection {
        &self.conn
    }

    /// This writer's turn among the database's writers, taken before its write
    /// transaction and held to its end; waits at most the connection's busy timeout for
    /// the writers ahead (`docs/lock.md`, "Taking turns").
    pub(crate) fn turn(&self) -> Option<crate::lock::Turn> {
        self.queue.turn(schema::BUSY_TIMEOUT)
    }

    /// Opens a write's transaction on `session_id` (`lock::begin_write`) in its turn, which
    /// it holds to the transaction's end (`docs/lock.md`, "Taking turns"). Even alone, the
    /// writer takes a place in line: it is what a write on the fast path, which takes no
    /// turn, yields to, so that it cannot pass this one again and again while this one
    /// waits for the session file's lock.
    pub(crate) fn begin_write(
        &mut self,
        session_id: &str,
        action: &str,
        file: &Path,
    ) -> std::result::Result<Option<crate::lock::Turn>, crate::lock::Refused> {
        let turn = self.queue.turn(schema::BUSY_TIMEOUT);
        crate::lock::begin_write(
            &self.conn,
            &self.queue,
            &self.commits,
            session_id,
            action,
            file,
            &mut self.clear_rows,
        )?;
        Ok(turn)
    }

    /// The fast path of a write of `session_id` on an open log (`docs/lock.md`, "The fast
    /// path"): no transaction, when this connection's last judgement of the session's
    /// rows found nothing in the way, no writer is in line and no holder has taken a row
    /// since. Held to the end of the append.
    pub(crate) fn fast_pass(&self, session_id: &str) -> Option<crate::lock::FastPass> {
        let (seen, counted) = self.clear_rows.generation(session_id)?;
        let pass = self.queue.fast_pass(seen)?;
        // A row of a process that does not announce its rows (a release before the
        // announcement, or one that found the queue file gone) is still a commit: the
        // database's transaction counter moved on since the judgement, and the rows are
        // judged again. Where the counter cannot be read, SQLite's own version.
        let same = match counted {
            Some(counted) => self.commits.read() == Some(counted),
            None => crate::lock::database_version(&self.conn)
                .is_ok_and(|version| self.clear_rows.is(session_id, version)),
        };
        same.then_some(pass)
    }

    /// The session files this database has read for `session_id` (what
    /// [`crate::Store::lock`] holds).
    pub(crate) fn session_files(&self, session_id: &str) -> Result<Vec<PathBuf>> {
        let failed = |source| {
            Error::Projection(ProjectionError::Database {
                path: self.path.clone(),
                action: "finding the session's files",
                source: DatabaseError(source),
            })
        };
        let mut q = self
            .conn
            .prepare_cached("SELECT file FROM sessions WHERE session_id = ?1")
            .map_err(failed)?;
        let rows = q
            .query_map([session_id], |r| r.get::<_, String>(0))
            .map_err(failed)?;
        rows.map(|r| r.map(PathBuf::from).map_err(failed)).collect()
    }

    /// The connection and the memo of its last write's judgement of the lock rows.
    pub(crate) fn write_parts(&mut self) -> (&Connection, &mut crate::lock::ClearRows) {
        (&self.conn, &mut self.clear_rows)
    }

    /// What the last catch-up did.
    pub fn last_catch_up(&self) -> Option<CatchUp> {
        self.last_catch_up
    }

    /// Records a catch-up made inside a writer's transaction (`src/store/tail.rs`).
    pub(crate) fn record_catch_up(&mut self, c: CatchUp) {
        self.last_catch_up = Some(c);
    }

    /// One catch-up of `file` (`force_rebuild`: from the start), in this database's
    /// writers' turns.
    fn ingest(&mut self, file: &Path, force_rebuild: bool) -> Result<CatchUp> {
        ingest::catch_up(
            &mut self.conn,
            &self.path,
            file,
            force_rebuild,
            &mut self.chunks,
            &self.queue,
        )
    }

    /// Brings the projection of `file` up to date with the log and returns what it read.
    pub fn catch_up(&mut self, file: &Path) -> Result<CatchUp> {
        let r = self.ingest(file, false);
        let r = match r {
            Err(Error::Projection(ProjectionError::Database { source, .. }))
                if source.is_corrupt() =>
            {
                self.reopen_rebuilt(&format!("corrupt ({source})"))?;
                self.ingest(file, false)
            }
            // Rows of this session that do not decode: rebuild it from the log, once.
            Err(e @ Error::Projection(ProjectionError::CorruptProjection { .. })) => {
                tracing::warn!(error = %e, "rebuilding the session's projection");
                self.ingest(file, true)
            }
            r => r,
        };
        if let Ok(c) = r {
            self.last_catch_up = Some(c);
        }
        r
    }

    /// Deletes the corrupt database (ours: checked again first; refused while a live
    /// holder other than this process has a row in it) and opens a new one in its place.
    fn reopen_rebuilt(&mut self, why: &str) -> Result<()> {
        let chunks = std::mem::take(&mut self.chunks);
        *self = Projection::rebuild(&self.path, why)?;
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
    ) -> Result<ReadValue> {
        self.catch_up(file)?;
        let key = file_key(file)?;
        match read::read_value(&self.conn, &self.path, file, &key, plugin, scope, at) {
            // Corruption found by the read itself (pages the catch-up did not touch):
            // rebuild the database from the log and answer from the new one.
            Err(Error::Projection(ProjectionError::Database { source, .. }))
                if source.is_corrupt() =>
            {
                self.reopen_rebuilt(&format!("corrupt ({source})"))?;
                self.catch_up(file)?;
                read::read_value(&self.conn, &self.path, file, &key, plugin, scope, at)
            }
            Err(e @ Error::Projection(ProjectionError::CorruptProjection { .. })) => {
                tracing::warn!(error = %e, "rebuilding the session's projection");
                let c = self.ingest(file, true)?;
                self.last_catch_up = Some(c);
                read::read_value(&self.conn, &self.path, file, &key, plugin, scope, at)
            }
            r => r,
        }
    }

    /// The entry id of the event a [`ReadValue`] of `file` names (`None` when it names
    /// none, or the lookup fails: for messages and reports).
    pub(crate) fn entry_of(&self, file: &Path, read: &ReadValue) -> Option<String> {
        let idx = read.event?;
        let key = file_key(file).ok()?;
        self.entry_by_key(&key, idx)
    }

    /// The entry id of node `idx` of the session keyed `key`.
    pub(crate) fn entry_by_key(&self, key: &str, idx: i64) -> Option<String> {
        read::entry_id_at(&self.conn, key, idx)
            .inspect_err(|e| tracing::debug!(error = %e, "looking up a state event's entry"))
            .ok()
            .flatten()
    }

    /// Test hook: commit catch-ups every `entries` entries and call `hook` between two
    /// chunks (after one committed, before the next begins) with the catch-up so far; a
    /// hook returning `false` stops the build there, as a killed process would.
    #[cfg(feature = "__internal")]
    pub(crate) fn set_chunk_hook(&mut self, entries: u64, hook: Option<ChunkHook>) {
        self.chunks = ChunkPolicy::with_hook(entries, hook);
    }

    /// Catches up with `file` after this process appended to it; a projection that cannot
    /// follow drops the session's rows. The log is durable either way.
    pub(crate) fn sync_file(&mut self, file: &Path) {
        if let Err(e) = self.catch_up(file) {
            // The next reader rebuilds the rows, and then reports the problem itself.
            tracing::warn!(error = %e, "projection could not follow the log; dropping its rows");
            if let Ok(key) = file_key(file)
                && let Err(e) = forget(&self.conn, &key)
            {
                // Rows left behind are checked against the file by the next reader.
                tracing::warn!(error = %e, "could not drop the session's rows");
            }
        }
    }

    /// Drops this session's cached rows (force-refresh).
    pub fn forget(&mut self, file: &Path) -> Result<()> {
        let key = file_key(file)?;
        forget(&self.conn, &key).map_err(db_err(&self.path, "forgetting a session"))
    }
}

/// A database of a later version's schema: the error that names it.
fn newer(path: &Path, version: String) -> Error {
    Error::Projection(ProjectionError::NewerDatabase {
        path: path.to_path_buf(),
        version,
        known: schema::SCHEMA_VERSION,
    })
}

fn replaced(path: &Path) -> Error {
    Error::Projection(ProjectionError::NotOurDatabase {
        path: path.to_path_buf(),
        what: "was replaced while being opened by a file that is not a session-state \
               database"
            .into(),
    })
}

/// Before a corrupt database is deleted: the live rows of this process, to be written
/// into the new database. A live row of any other holder refuses the rebuild with the
/// lock's four-element error: deleting it would let a second writer into that holder's
/// session. Rows that cannot be read at all cannot be judged; they are lost with the
/// database (the advisory lock on each session file still keeps two writers of one file
/// apart).
fn rows_to_keep(path: &Path, why: &str) -> Result<Vec<crate::lock::LiveRow>> {
    let read = || -> rusqlite::Result<Vec<crate::lock::LiveRow>> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(10))?;
        crate::lock::live_rows(&conn)
    };
    let rows = match read() {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(db = %path.display(), error = %e,
                "the lock and presence rows of the corrupt projection cannot be read");
            return Ok(Vec::new());
        }
    };
    let me = crate::lock::Holder::current().to_string();
    let (own, others): (Vec<_>, Vec<_>) = rows.into_iter().partition(|r| r.holder == me);
    if let Some(r) = others.into_iter().next() {
        let initiator = match r.table {
            crate::lock::LockRow::PiPresence => format!("a running Pi ({})", r.holder),
            _ => r.holder,
        };
        return Err(crate::lock::LockError::Held {
            initiator,
            action: "rebuilding the projection database".into(),
            object: r.session_id,
            reason: format!(
                "the database is {why}, and a rebuild would delete this holder's row in {} \
                 ({}); nothing was deleted, and the command can run again once that \
                 process has exited",
                r.table.table(),
                r.liveness_reason
            ),
            liveness: r.liveness,
            acquired_at_ms: r.since_ms,
            database: Some(Box::from(path)),
            row: r.table,
            session_file: r.session_file.map(|f| Box::from(Path::new(&f))),
        }
        .into());
    }
    Ok(own)
}

/// Writes this process's rows, kept by [`rows_to_keep`], into a new database.
fn restore_rows(conn: &Connection, rows: &[crate::lock::LiveRow]) -> rusqlite::Result<()> {
    for r in rows {
        match r.table {
            crate::lock::LockRow::PiPresence => {
                crate::lock::presence::ensure_schema(conn)?;
                conn.execute(
                    "INSERT OR REPLACE INTO pi_presence(session_id, holder, since, session_file) \
                     VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![r.session_id, r.holder, r.since_ms, r.session_file],
                )?;
            }
            _ => {
                conn.execute(
                    "INSERT OR REPLACE INTO write_lock(session_id, holder, acquired_at) \
                     VALUES (?1, ?2, ?3)",
                    rusqlite::params![r.session_id, r.holder, r.since_ms],
                )?;
            }
        }
    }
    Ok(())
}

impl Drop for Projection {
    /// A WAL grown past `sqlite::WAL_KEEP_BYTES` (1 MiB, about 50 CLI writes of one event
    /// each) is checkpointed and truncated on close: the connection does not checkpoint on
    /// close otherwise (`schema::connect`).
    fn drop(&mut self) {
        crate::sqlite::checkpoint_big_wal(&self.conn, &self.path);
    }
}

fn forget(conn: &Connection, key: &str) -> rusqlite::Result<()> {
    for table in [
        "sessions",
        "nodes",
        "segments",
        "events",
        "spans",
        "session_values",
    ] {
        conn.execute(&format!("DELETE FROM {table} WHERE file = ?1"), [key])?;
    }
    Ok(())
}

/// Where stored rows come from, to name them when they do not decode.
#[derive(Clone, Copy)]
struct Rows<'a> {
    db: &'a Path,
    file: &'a Path,
}

impl Rows<'_> {
    fn corrupt(&self, detail: impl Into<String>) -> Error {
        Error::Projection(ProjectionError::CorruptProjection {
            path: self.db.to_path_buf(),
            file: self.file.to_path_buf(),
            detail: detail.into(),
        })
    }

    /// Parses a stored JSON text (a folded value or a patch); one small function, so the
    /// parser is easy to swap.
    fn json(&self, what: &str, text: &str) -> Result<Value> {
        crate::json::from_str(text).map_err(|e| self.corrupt(format!("{what}: {e}")))
    }

    /// The value stored as `at` ([`step::unfold`]); `stored_at(idx)` reads another event's
    /// storage. A missing base or a text that does not parse is
    /// [`ProjectionError::CorruptProjection`].
    fn unfold(
        &self,
        at: Stored,
        stored_at: impl FnMut(i64) -> Result<Option<Stored>>,
    ) -> Result<Option<Value>> {
        step::unfold(at, stored_at).map_err(|e| match e {
            Unfold::Read(e) => e,
            Unfold::Corrupt(detail) => self.corrupt(detail),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::schema::from_columns;
    use super::*;

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
            rows.unfold(delta, base),
            Err(Error::Projection(ProjectionError::CorruptProjection { .. }))
        ));
        let missing = Stored::Delta {
            base: 1,
            patch: "{}".into(),
            chain: 2,
        };
        assert!(matches!(
            rows.unfold(missing, |_| Ok(None)),
            Err(Error::Projection(ProjectionError::CorruptProjection { .. }))
        ));
        assert!(from_columns(None, Some(1), None, 0).is_err());
        assert!(from_columns(None, None, Some("{}".into()), 0).is_err());
    }
}
