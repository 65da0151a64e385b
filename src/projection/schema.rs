//! The database file (docs/spec.md §4): the schema and its version, whether a file is provably
//! ours (its `application_id`, or `meta.app` of an older version), opening and stamping
//! it, removing it for a rebuild, and the columns an event's storage is kept in.

use super::{db_err, is_corruption};
use crate::error::{Error, IoContext, ProjectionError, Result};
use crate::sqlite::{End, FileHead, Synchronous, file_head};
use crate::state::step::Stored;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// 2: branch values are stored as snapshots plus merge-patch deltas (`base`, `delta`,
/// `chain`), and the prefix digests are word-wise.
/// 3: every state event's line length and digest (`events.len`, `events.digest`), so a
/// resumed catch-up can check the folded events' bytes.
/// 4: segments (`nodes.seg`, `segments`, `events.seg` and the `events_by_plugin` index), so
/// that a plugin's nearest event is found without looking at other plugins' events; and
/// `spans`, the lines' offsets, lengths and digests of each 256 folded events in one row
/// (`sessions.open_events` counts those after the last group).
/// 5: the state version of each event and value (`events.sv`, `session_values.sv`).
/// 6: the same tables; a holder taking a lock or presence row tells the writers on the
/// fast path (`docs/lock.md`, "The fast path"), which an earlier version does not, so an
/// earlier version must refuse this database (it does: a later version is refused).
///
/// A database of an earlier version is migrated in place (its cached rows dropped, its
/// lock and presence rows kept); one of a later version is refused, never written
/// (docs/spec.md §4, P4).
pub(super) const SCHEMA_VERSION: i64 = 6;

const APP: &str = "session-state";

pub(super) const SCHEMA: &str = "
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
    last_entry_id TEXT,
    open_events INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS nodes(
    file TEXT NOT NULL,
    idx INTEGER NOT NULL,
    entry_id TEXT NOT NULL,
    parent INTEGER,
    seg INTEGER NOT NULL,
    PRIMARY KEY(file, idx)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS nodes_by_id ON nodes(file, entry_id);
CREATE TABLE IF NOT EXISTS segments(
    file TEXT NOT NULL,
    seg INTEGER NOT NULL,
    fork INTEGER,
    fork_seg INTEGER,
    tail INTEGER NOT NULL,
    PRIMARY KEY(file, seg)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(
    file TEXT NOT NULL,
    idx INTEGER NOT NULL,
    plugin TEXT NOT NULL,
    scope TEXT,
    seg INTEGER NOT NULL,
    line INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    len INTEGER NOT NULL,
    digest INTEGER NOT NULL,
    value TEXT,
    error TEXT,
    error_idx INTEGER,
    base INTEGER,
    delta TEXT,
    chain INTEGER NOT NULL DEFAULT 0,
    sv INTEGER,
    PRIMARY KEY(file, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_by_plugin ON events(file, plugin, seg, idx)
    WHERE scope IS NOT 'session';
CREATE TABLE IF NOT EXISTS spans(
    file TEXT NOT NULL,
    first_idx INTEGER NOT NULL,
    last_idx INTEGER NOT NULL,
    count INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    layout BLOB NOT NULL,
    digest INTEGER NOT NULL,
    PRIMARY KEY(file, first_idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_values(
    file TEXT NOT NULL,
    plugin TEXT NOT NULL,
    value TEXT,
    last_idx INTEGER,
    error TEXT,
    error_idx INTEGER,
    sv INTEGER,
    PRIMARY KEY(file, plugin)
) WITHOUT ROWID;
";

/// How long a connection waits for another's write lock (SQLite's busy timeout), and a
/// writer for its turn among the database's writers (`lock::WriterQueue`).
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens a connection with the pragmas of docs/spec.md §4: `synchronous=NORMAL` (a
/// cache of the log; see docs/durability.md, "The projection's syncs", for why the WAL
/// may stay between processes).
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    crate::sqlite::open(path, BUSY_TIMEOUT, Synchronous::Normal, None)
}

/// What a database of ours holds, as its `meta` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Schema {
    /// This version's schema, or nothing yet (a database being created), or only the lock
    /// table: what is missing is created.
    Current,
    /// An earlier version's: migrated in place ([`migrate`]).
    Older,
    /// A later version's, or one this version cannot read (`meta.schema_version` as
    /// written): never written, deleted or trusted.
    Newer(String),
}

/// The schema a database holds (see [`Schema`]). Only called on a file that
/// [`ownership`] proved ours.
fn check_schema(conn: &Connection) -> rusqlite::Result<Schema> {
    let tables = table_names(conn)?;
    if tables.is_empty() {
        return Ok(Schema::Current);
    }
    if !tables.iter().any(|t| t == "meta") {
        // Only the lock table (created by a writer) is ours: the rest is created.
        return Ok(if tables.iter().all(|t| t == "write_lock") {
            Schema::Current
        } else {
            Schema::Older
        });
    }
    let version: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(judge_version(version.as_deref()))
}

/// A `meta.schema_version` against this version's.
fn judge_version(version: Option<&str>) -> Schema {
    match version.map(|v| (v, v.parse::<i64>())) {
        None => Schema::Older,
        Some((_, Ok(v))) if v < SCHEMA_VERSION => Schema::Older,
        Some((_, Ok(SCHEMA_VERSION))) => Schema::Current,
        Some((v, _)) => Schema::Newer(v.to_owned()),
    }
}

/// The version a newer database names, if the database at `conn` is of a newer schema
/// (read-only: for connections opened without the right to write).
pub(super) fn newer_version(conn: &Connection) -> rusqlite::Result<Option<String>> {
    if meta_app(conn)?.as_deref() != Some(APP) {
        return Ok(None);
    }
    let version: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(match judge_version(version.as_deref()) {
        Schema::Newer(v) => Some(v),
        _ => None,
    })
}

/// Brings an earlier version's database to this version's schema, in the caller's write
/// transaction: the cached rows (every table but `meta` and the lock and presence tables)
/// are dropped, to be rebuilt from the logs on demand, and the lock and presence rows
/// stay where they are, so that no live holder loses its row. Nothing is deleted from
/// the file system.
fn migrate(tx: &Connection) -> rusqlite::Result<()> {
    for table in table_names(tx)? {
        if !matches!(table.as_str(), "meta" | "write_lock" | "pi_presence") {
            tx.execute_batch(&format!("DROP TABLE \"{}\";", table.replace('"', "\"\"")))?;
        }
    }
    tx.execute_batch(SCHEMA)?;
    tx.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('app', ?1), ('schema_version', ?2)",
        params![APP, SCHEMA_VERSION.to_string()],
    )?;
    Ok(())
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
pub(super) enum Found {
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

/// Decides, without modifying anything, whether the file at `path` is provably our projection
/// (docs/spec.md §4). A file that is not is an [`ProjectionError::NotOurDatabase`] naming what
/// is there.
pub(super) fn ownership(path: &Path) -> Result<Found> {
    let not_ours = |what: String| {
        Error::Projection(ProjectionError::NotOurDatabase {
            path: path.to_path_buf(),
            what,
        })
    };
    let app_id = match file_head(path).ctx("inspecting", path)? {
        FileHead::Absent => return Ok(Found::Absent),
        FileHead::Directory => return Ok(Found::Special),
        FileHead::Special => return Err(not_ours("is not a regular file".into())),
        FileHead::NotSqlite(start) => {
            return Err(not_ours(format!(
                "is not a SQLite database (starts with `{start}`)"
            )));
        }
        FileHead::Sqlite { application_id } => application_id,
    };
    if app_id == APPLICATION_ID {
        return Ok(Found::Stamped);
    }
    if app_id != 0 {
        return Err(not_ours(format!(
            "is a SQLite database of another program (application_id {app_id:#010x})"
        )));
    }
    // No stamp in the file's header: look inside, read-only (a database of ours from
    // before the stamp, or somebody else's). The file alone is looked at (`immutable`):
    // a WAL beside it may be a leftover of ours whose database was deleted, and SQLite
    // would lay its pages over another program's file (our stamp included).
    let inspect = || -> rusqlite::Result<Inside> {
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match immutable_uri(path) {
            Some(uri) => Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)?,
            None => Connection::open_with_flags(path, flags)?,
        };
        inside(&conn)
    };
    let seen = match inspect() {
        // The file alone holds no tables: a database whose tables are all still in its
        // WAL (its makers still connected, nothing checkpointed) looks so. A copy of the
        // two is read with the WAL; nothing beside the file is read by SQLite or written.
        Ok((id, app, tables)) if tables.is_empty() => match inside_with_wal(path) {
            Some(Ok((wal_id, wal_app, wal_tables))) if !wal_tables.is_empty() => {
                return match judge_inside(&not_ours, (wal_id, wal_app, wal_tables)) {
                    // Ours: the transaction that opens it checks it again, with its WAL.
                    Ok(_) => Ok(Found::Unstamped),
                    Err(e) => Err(e),
                };
            }
            _ => Ok((id, app, tables)),
        },
        seen => seen,
    };
    match seen {
        Ok(inside) => judge_inside(&not_ours, inside),
        Err(e) if is_corruption(&e) => Err(not_ours(format!(
            "is a damaged SQLite database without session-state's stamp ({e})"
        ))),
        Err(e) => Err(db_err(path, "inspecting")(e)),
    }
}

/// What a look inside an unstamped SQLite file found: its `application_id`, `meta.app`
/// and its tables.
type Inside = (i32, Option<String>, Vec<String>);

fn inside(conn: &Connection) -> rusqlite::Result<Inside> {
    conn.busy_timeout(Duration::from_secs(10))?;
    let id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    Ok((id, meta_app(conn)?, table_names(conn)?))
}

/// [`inside`] the database at `path` as SQLite reads it with its `-wal`: `None` when no
/// WAL (a regular file, not empty) is beside it. The two files are copied into a new
/// private directory and the copy is read there, so that nothing is created or written
/// beside `path` (SQLite would make a `-shm` there) and no WAL is laid over a file not
/// proven ours.
fn inside_with_wal(path: &Path) -> Option<rusqlite::Result<Inside>> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    match std::fs::symlink_metadata(&wal) {
        Ok(m) if m.is_file() && m.len() > 0 => {}
        _ => return None,
    }
    let dir = std::env::temp_dir().join(format!(
        "session-state-inspect-{}",
        uuid::Uuid::new_v4().simple()
    ));
    // A new directory of a random name: a directory that exists is never used.
    std::fs::create_dir(&dir).ok()?;
    let copy = dir.join("db");
    let read = (|| {
        std::fs::copy(path, &copy).ok()?;
        std::fs::copy(&wal, dir.join("db-wal")).ok()?;
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        Some(Connection::open_with_flags(&copy, flags).and_then(|conn| inside(&conn)))
    })();
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not remove a temporary copy");
    }
    read
}

/// Whether what [`inside`] found is ours (stamped, `meta.app`, or only the lock table),
/// else the refusal naming what is there.
fn judge_inside(not_ours: &dyn Fn(String) -> Error, inside: Inside) -> Result<Found> {
    match inside {
        (id, _, _) if id == APPLICATION_ID => Ok(Found::Stamped),
        (_, Some(app), _) if app == APP => Ok(Found::Unstamped),
        (_, _, tables) if !tables.is_empty() && tables.iter().all(|t| t == "write_lock") => {
            Ok(Found::Unstamped)
        }
        (_, _, tables) if tables.is_empty() => Err(not_ours(
            "is an empty SQLite database without session-state's stamp (no tables; if it is \
             the leftover of an interrupted session-state run, remove it)"
                .into(),
        )),
        (_, _, tables) => {
            let mut list: Vec<&str> = tables.iter().map(String::as_str).take(5).collect();
            if tables.len() > 5 {
                list.push("…");
            }
            Err(not_ours(format!(
                "is a SQLite database of another program (tables: {})",
                list.join(", ")
            )))
        }
    }
}

/// `file:PATH?immutable=1`: SQLite reads the file alone, without its WAL or `-shm`.
/// `None` for a path that is not UTF-8.
fn immutable_uri(path: &Path) -> Option<String> {
    let mut uri = String::from("file:");
    for c in path.to_str()?.chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?immutable=1");
    Some(uri)
}

/// `PRAGMA application_id` of our databases ("SSt1"), header bytes 68..72.
const APPLICATION_ID: i32 = 0x5353_7431;

/// Removes the database at `path` and its side files, after checking (again, just
/// before) that it is provably ours.
pub(super) fn remove_our_files(path: &Path) -> Result<()> {
    if ownership(path)? == Found::Special {
        return Err(ProjectionError::NotOurDatabase {
            path: path.to_path_buf(),
            what: "is not a regular file".into(),
        }
        .into());
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a file of our database");
            }
            _ => {}
        }
    }
    Ok(())
}

/// Why [`open_ours`] did not open a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NotOpened {
    /// The file stopped being provably ours between the check and the open.
    Replaced,
    /// A later version's schema (`meta.schema_version` as written): left untouched.
    Newer(String),
    /// `meta` says this version's schema (`stamped`, as written) over the tables of an
    /// earlier one (`tables`): rebuilt only when no live holder could be hurt.
    Mismatch {
        /// `meta.schema_version`.
        stamped: String,
        /// The version the tables are.
        tables: i64,
    },
}

/// The version of the projection's tables, told from the columns each version added (5
/// and 6 share their tables: 5); `None` without an `events` table (nothing cached yet: the
/// tables are created). Another table that is missing counts as its columns missing.
fn tables_version(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    if !table_names(conn)?.iter().any(|t| t == "events") {
        return Ok(None);
    }
    let marks: [i64; 4] = conn.query_row(
        "SELECT \
           (SELECT count(*) FROM pragma_table_info('events') \
              WHERE name IN ('base', 'delta', 'chain')) = 3, \
           (SELECT count(*) FROM pragma_table_info('events') WHERE name IN ('len', 'digest')) = 2, \
           (SELECT count(*) FROM pragma_table_info('events') WHERE name = 'seg') \
             + (SELECT count(*) FROM pragma_table_info('nodes') WHERE name = 'seg') \
             + (SELECT count(*) FROM sqlite_master WHERE type = 'table' \
                  AND name IN ('segments', 'spans')) = 4, \
           (SELECT count(*) FROM pragma_table_info('events') WHERE name = 'sv') \
             + (SELECT count(*) FROM pragma_table_info('session_values') WHERE name = 'sv') = 2",
        [],
        |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]),
    )?;
    Ok(Some(
        1 + marks.iter().take_while(|&&m| m == 1).count() as i64,
    ))
}

/// The version of this version's tables ([`tables_version`] of [`SCHEMA`]).
const TABLES_VERSION: i64 = 5;

/// [`NotOpened::Mismatch`] when the tables of a database whose `meta` says this version
/// are an earlier version's.
fn mismatch(conn: &Connection) -> rusqlite::Result<Option<NotOpened>> {
    match tables_version(conn)? {
        Some(v) if v < TABLES_VERSION => mismatch_of(conn, v).map(Some),
        _ => Ok(None),
    }
}

/// [`NotOpened::Mismatch`] of a database whose tables are of version `tables`.
fn mismatch_of(conn: &Connection, tables: i64) -> rusqlite::Result<NotOpened> {
    let stamped: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(NotOpened::Mismatch {
        stamped: stamped.unwrap_or_else(|| SCHEMA_VERSION.to_string()),
        tables,
    })
}

/// Opens (creating if needed) a database that [`ownership`] proved ours, checks and
/// creates the schema and stamps it, all in one write transaction. An earlier version's
/// schema is migrated in place ([`migrate`]), its lock and presence rows kept; a later
/// version's is not written at all.
pub(super) fn open_ours(
    path: &Path,
    found: Found,
) -> rusqlite::Result<std::result::Result<Connection, NotOpened>> {
    if found == Found::Absent {
        // Stamp a new file before anything else (before the switch to WAL, so that the
        // stamp lands in the file's own header): a crash at any later point leaves a file
        // that is provably ours. Checked and stamped in one write transaction: another
        // opener may be creating it at the same moment.
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        crate::sqlite::immediate(
            &conn,
            |_, e| e,
            |tx| {
                let id: i32 = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
                if id != APPLICATION_ID && table_names(tx)?.is_empty() {
                    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
                }
                Ok(())
            },
        )?;
    }
    let conn = connect(path)?;
    if found == Found::Stamped {
        match stamped_schema(&conn)? {
            // The common case, read without a write transaction: nothing to create.
            Some(Schema::Current) => match tables_version(&conn)? {
                Some(v) if v >= TABLES_VERSION => return Ok(Ok(conn)),
                Some(v) => return Ok(Err(mismatch_of(&conn, v)?)),
                // No cached tables yet: created below.
                None => {}
            },
            Some(Schema::Newer(v)) => return Ok(Err(NotOpened::Newer(v))),
            _ => {}
        }
    }
    // Check and create in one write transaction, so a second opener of a new database
    // sees either nothing or the whole schema, never half of it.
    let checked = crate::sqlite::immediate_ending(
        &conn,
        |_, e| e,
        |tx| {
            let refused = |why| Ok((Err(why), End::Rollback));
            let id: i32 = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
            if id != APPLICATION_ID {
                // Ours without the stamp yet (checked again here, in the transaction):
                // nothing, a database of an older version, or only the lock table.
                // Anything else appeared since we looked.
                let tables = table_names(tx)?;
                let unstamped_ours = tables.is_empty()
                    || meta_app(tx)?.as_deref() == Some(APP)
                    || tables.iter().all(|t| t == "write_lock");
                if !unstamped_ours {
                    return refused(NotOpened::Replaced);
                }
            }
            match check_schema(tx)? {
                Schema::Newer(v) => return refused(NotOpened::Newer(v)),
                Schema::Older => migrate(tx)?,
                Schema::Current => {
                    if let Some(m) = mismatch(tx)? {
                        return refused(m);
                    }
                }
            }
            let stamped = id != APPLICATION_ID;
            if stamped {
                tx.pragma_update(None, "application_id", APPLICATION_ID)?;
            }
            tx.execute_batch(SCHEMA)?;
            tx.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('app', ?1), ('schema_version', ?2)",
                params![APP, SCHEMA_VERSION.to_string()],
            )?;
            crate::lock::ensure_schema(tx)?;
            Ok((Ok(stamped), End::Commit))
        },
    )?;
    let stamped = match checked {
        Ok(stamped) => stamped,
        Err(why) => return Ok(Err(why)),
    };
    if stamped {
        // Into the file's own header now, where `ownership` looks for it: the connection
        // does not checkpoint on close.
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    }
    Ok(Ok(conn))
}

/// The schema of a stamped database without a write transaction, when that settles it:
/// `Some(Current)` when it already holds this version's whole schema (its `meta` and the
/// lock table with its `action` column), so that opening it writes nothing;
/// `Some(Newer)` for a later version's; `None` when the write transaction must decide.
fn stamped_schema(conn: &Connection) -> rusqlite::Result<Option<Schema>> {
    let found: Option<(String, i64)> = conn
        .query_row(
            "SELECT (SELECT value FROM meta WHERE key = 'schema_version'), \
             (SELECT count(*) FROM pragma_table_info('write_lock') WHERE name = 'action') \
             WHERE (SELECT value FROM meta WHERE key = 'app') = ?1",
            [APP],
            |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                    r.get(1)?,
                ))
            },
        )
        .optional()
        .or_else(|e| match e {
            // No `meta` table (yet): the write transaction below decides.
            rusqlite::Error::SqliteFailure(..) => Ok(None),
            e => Err(e),
        })?;
    Ok(match found {
        None => None,
        Some((v, action)) => match judge_version(Some(&v)) {
            Schema::Current if action == 1 => Some(Schema::Current),
            Schema::Newer(v) => Some(Schema::Newer(v)),
            _ => None,
        },
    })
}

/// The columns `value`, `base`, `delta`, `chain` of an event's storage (the policy that
/// chose it is [`crate::state::step::step`]'s).
pub(super) fn columns(stored: &Stored) -> (Option<&str>, Option<i64>, Option<&str>, i64) {
    match stored {
        Stored::Absent => (None, None, None, 0),
        Stored::Snapshot(v) => (Some(v), None, None, 0),
        Stored::Delta { base, patch, chain } => (None, Some(*base), Some(patch), *chain),
    }
}

/// An event's storage from its columns; a half-stored delta is `Err` with what is wrong.
pub(super) fn from_columns(
    value: Option<String>,
    base: Option<i64>,
    delta: Option<String>,
    chain: i64,
) -> std::result::Result<Stored, String> {
    match (base, delta) {
        (Some(base), Some(patch)) => Ok(Stored::Delta { base, patch, chain }),
        (None, None) => Ok(value.map_or(Stored::Absent, Stored::Snapshot)),
        (Some(base), None) => Err(format!("a delta on event {base} without its patch")),
        (None, Some(_)) => Err("a delta without its base event".into()),
    }
}
