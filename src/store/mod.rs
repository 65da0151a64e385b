//! The store handle (like redb's `Database`): it owns the one projection connection, the
//! write lock's use of it, the resolved database location, and the fold memo of every log
//! it has read. A plugin's state is a cheap typed key on it ([`SessionState`]).
//!
//! ```no_run
//! use session_state::{Scope, SessionLog, Store, StoreOptions};
//!
//! let store = Store::open(StoreOptions::new())?;          // location from settings (docs/spec.md §4)
//! let todo = store.state::<Vec<String>>("todo", Scope::Branch)?;
//! let mut log = SessionLog::open("session.jsonl")?;
//! todo.write(&mut log, &vec!["review".to_string()])?;      // durable when it returns
//! assert_eq!(todo.read(&log)?, Some(vec!["review".to_string()]));
//! // In a new process: a flat read through the projection, without parsing the log.
//! assert_eq!(todo.read("session.jsonl")?, Some(vec!["review".to_string()]));
//! # Ok::<(), session_state::Error>(())
//! ```

mod backend;
mod last;
mod presence;
mod prune;
pub(crate) mod state;
mod stored;
mod tail;
mod write;

pub use last::{Appended, LastEvent};
pub use presence::SessionStatus;
pub use prune::{KeptSession, PruneReport, PrunedSession};
pub use stored::StoredSession;

use crate::error::{DatabaseError, Error, IoContext, ProjectionError, Result};
use crate::lock::{self, Holder, LockStatus};
use crate::log::io::{FileSystem, StdFileSystem};
use crate::projection::{CatchUp, Projection};
use crate::settings::{LocationInputs, ProjectTrust, ResolvedLocation, SettingsDiagnostic};
use crate::state::envelope::Scope;
use crate::state::fold::Folds;
use crate::state::key::StateKey;
use crate::tree::SessionLog;
use serde_json::Value;
use state::{SessionState, StoredValue};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

#[cfg(feature = "__internal")]
use crate::projection::{ChunkHook, ProjectionWork};

/// What a read-only look at the store's database found ([`Store::peek_lock_status`],
/// [`Store::peek_presence`]); nothing is created to answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked<T> {
    /// There is no database at the store's location.
    NoDatabase,
    /// The database exists and holds no such row.
    NoRow,
    /// The row.
    Row(T),
}

impl<T> Peeked<T> {
    /// The row, if there is one.
    pub fn row(self) -> Option<T> {
        match self {
            Peeked::Row(r) => Some(r),
            Peeked::NoDatabase | Peeked::NoRow => None,
        }
    }

    /// Whether there is a database at the store's location.
    pub fn database_exists(&self) -> bool {
        !matches!(self, Peeked::NoDatabase)
    }
}

/// Where a [`Store`] keeps its projection database; validated by [`Store::open`].
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    database_path: Option<PathBuf>,
    cwd: Option<PathBuf>,
    trust: ProjectTrust,
    fs: Option<SharedFs>,
}

/// The file-system seam of a store's writes to session files.
#[derive(Clone)]
// Made only by the test hook `StoreOptions::file_system`.
#[cfg_attr(not(feature = "__internal"), allow(dead_code))]
struct SharedFs(Arc<dyn FileSystem>);

impl std::fmt::Debug for SharedFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileSystem")
    }
}

impl StoreOptions {
    /// The default location, resolved from settings files as docs/spec.md §4 describes.
    pub fn new() -> StoreOptions {
        StoreOptions::default()
    }
    /// Where the projection database lives: a non-empty absolute path, checked by
    /// [`ResolvedLocation::explicit`] when the store opens. Default: resolved from
    /// settings files (see `docs/settings.md`).
    pub fn database_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.database_path = Some(path.into());
        self
    }
    /// The project directory for settings resolution (default: the process's cwd).
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
    /// Whether the project's `.pi/settings.json` may choose the database location.
    pub fn trust(mut self, trust: ProjectTrust) -> Self {
        self.trust = trust;
        self
    }
    /// The file-system seam that the store's writes to session files without an open log
    /// go through ([`SessionState::write`] on a file; tests inject faults and pauses through
    /// it). Default: the standard file system. A test hook (the `__internal` feature), not
    /// public API.
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    pub fn file_system(mut self, fs: Arc<dyn FileSystem>) -> Self {
        self.fs = Some(SharedFs(fs));
        self
    }
}

/// The one handle on a projection database. Cheap to clone (clones share the connection
/// and the fold memo); `Send + Sync`.
///
/// The database is opened on first use ([`Store::connect`] opens it now), so resolving a
/// location never creates a file. Only a database that is provably ours is used (docs/spec.md
/// §4); anything else at the path is refused with [`ProjectionError::NotOurDatabase`].
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    location: ResolvedLocation,
    fs: Arc<dyn FileSystem>,
    db: Mutex<Option<Projection>>,
    /// The fold memo of each log read through this store, keyed by the log's identity;
    /// the `Weak` tells a live log from a dropped one whose address was reused.
    folds: Mutex<crate::sync::FastMap<usize, (Weak<()>, Folds)>>,
    /// The session files held for this process's presence rows, by session
    /// ([`Store::enter_presence`]): `None` while the file does not exist yet.
    presence: Mutex<crate::sync::FastMap<String, Option<lock::hold::Hold>>>,
    /// The session files of the logs read or written through this store, by session
    /// (what [`Store::lock`] holds beside the files the database knows).
    logs: Mutex<crate::sync::FastMap<String, Vec<PathBuf>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("database", &self.inner.location.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Validates the options and resolves the database location. An invalid option is an
    /// error, never a silent fallback; settings problems that fall back to the default are
    /// in [`Store::diagnostics`].
    pub fn open(options: StoreOptions) -> Result<Store> {
        let location = match &options.database_path {
            // An explicit path needs neither a home, an agent directory nor a cwd.
            Some(p) => ResolvedLocation::explicit(p.clone())?,
            None => {
                let cwd = match &options.cwd {
                    Some(c) => c.clone(),
                    None => std::env::current_dir()
                        .ctx("reading the current directory", Path::new("."))?,
                };
                LocationInputs::from_env(cwd, options.trust)?.resolve()?
            }
        };
        let fs = options
            .fs
            .map_or_else(|| Arc::new(StdFileSystem) as _, |fs| fs.0);
        Ok(Store::with(location, fs))
    }

    /// A store on the database at `path` (a non-empty absolute path).
    pub fn at(path: impl Into<PathBuf>) -> Result<Store> {
        Store::open(StoreOptions::new().database_path(path))
    }

    /// A store on an already resolved location.
    pub fn with_location(location: ResolvedLocation) -> Store {
        Store::with(location, Arc::new(StdFileSystem))
    }

    fn with(location: ResolvedLocation, fs: Arc<dyn FileSystem>) -> Store {
        Store {
            inner: Arc::new(Inner {
                location,
                fs,
                db: Mutex::new(None),
                folds: Mutex::new(Default::default()),
                presence: Mutex::new(Default::default()),
                logs: Mutex::new(Default::default()),
            }),
        }
    }

    /// Where the projection database is, and why.
    pub fn location(&self) -> &ResolvedLocation {
        &self.inner.location
    }

    /// The file-system seam of the store's writes to session files.
    pub(crate) fn file_system(&self) -> &Arc<dyn FileSystem> {
        &self.inner.fs
    }

    /// The projection database's path.
    pub fn database_path(&self) -> &Path {
        &self.inner.location.path
    }

    /// Settings problems met while resolving the location (each reported once).
    pub fn diagnostics(&self) -> &[SettingsDiagnostic] {
        &self.inner.location.diagnostics
    }

    /// Opens the database now (it is otherwise opened on first use), so a location that
    /// is refused is reported here.
    pub fn connect(&self) -> Result<()> {
        self.with_db(|_| Ok(()))
    }

    /// The state of `plugin_id` in `scope`: a cheap typed key on this store. The plugin
    /// id is checked here: lowercase ASCII letters, digits, `-` and `.`, non-empty
    /// ([`StateKey::new`]).
    pub fn state<T>(&self, plugin_id: impl AsRef<str>, scope: Scope) -> Result<SessionState<T>>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        Ok(self.state_of(&StateKey::new(plugin_id, scope)?))
    }

    /// The state of `key` on this store (a key is checked when it is made, so this cannot
    /// fail), as redb's `open_table` takes a `TableDefinition`.
    pub fn state_of<T>(&self, key: &StateKey<T>) -> SessionState<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        SessionState::new(self.clone(), key.clone())
    }

    /// Brings the projection of the session file `file` up to date and says what it read.
    pub fn catch_up(&self, file: impl AsRef<Path>) -> Result<CatchUp> {
        self.with_db(|db| db.catch_up(file.as_ref()))
    }

    /// What the last catch-up of this store did (tests and benchmarks read it).
    pub fn last_catch_up(&self) -> Option<CatchUp> {
        crate::sync::lock(&self.inner.db)
            .as_ref()
            .and_then(Projection::last_catch_up)
    }

    /// Test hook: commit catch-ups every `entries` entries and call `hook` between two
    /// chunks; a hook returning `false` stops the build there, as a killed process would.
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    pub fn set_chunk_hook(&self, entries: u64, hook: Option<ChunkHook>) -> Result<()> {
        self.with_db(|db| {
            db.set_chunk_hook(entries, hook);
            Ok(())
        })
    }

    /// Test hook: the projection's work on this thread so far (see
    /// [`crate::projection::ProjectionWork`]); tests compare two of them.
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    pub fn projection_work(&self) -> ProjectionWork {
        crate::projection::work()
    }

    /// Test hook: the value of `PRAGMA name` on the store's own connection, as text.
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    pub fn pragma(&self, name: &str) -> Result<String> {
        self.with_db(|db| {
            let path = db.path().to_path_buf();
            db.connection()
                .query_row(&format!("PRAGMA {name}"), [], |r| {
                    r.get::<_, rusqlite::types::Value>(0)
                })
                .map(|v| match v {
                    rusqlite::types::Value::Text(t) => t,
                    rusqlite::types::Value::Integer(i) => i.to_string(),
                    other => format!("{other:?}"),
                })
                .map_err(|source| {
                    Error::Projection(ProjectionError::Database {
                        path,
                        action: "reading a pragma",
                        source: DatabaseError(source),
                    })
                })
        })
    }

    /// Drops the cached rows of the session file `file`; the next read rebuilds them.
    pub fn forget(&self, file: impl AsRef<Path>) -> Result<()> {
        self.with_db(|db| db.forget(file.as_ref()))
    }

    /// The lock row of `session_id`, or `None` when there is none (docs/spec.md §6).
    pub fn lock_status(&self, session_id: &str) -> Result<Option<LockStatus>> {
        self.status_at(session_id, lock::now_ms())
    }

    /// Test hook: [`Store::lock_status`] at an injected time (ms since the Unix epoch).
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    pub fn lock_status_at(&self, session_id: &str, now_ms: i64) -> Result<Option<LockStatus>> {
        self.status_at(session_id, now_ms)
    }

    fn status_at(&self, session_id: &str, now_ms: i64) -> Result<Option<LockStatus>> {
        self.with_db(|db| {
            let path = db.path().to_path_buf();
            lock::status_at(db.connection(), session_id, now_ms).map_err(|source| {
                Error::Projection(ProjectionError::Database {
                    path,
                    action: "reading the write lock",
                    source: DatabaseError(source),
                })
            })
        })
    }

    /// [`Store::lock_status`] without creating anything (what `status` shows):
    /// [`Peeked::NoDatabase`] when there is no database at the store's location,
    /// [`Peeked::NoRow`] when it holds no row. Opens the database read-only, on its own
    /// connection.
    pub fn peek_lock_status(&self, session_id: &str) -> Result<Peeked<LockStatus>> {
        let path = self.database_path();
        let Some(conn) = Projection::open_existing(path)? else {
            return Ok(Peeked::NoDatabase);
        };
        lock::status(&conn, session_id)
            .map(|row| row.map_or(Peeked::NoRow, Peeked::Row))
            .map_err(|source| {
                Error::Projection(ProjectionError::Database {
                    path: path.to_path_buf(),
                    action: "reading the lock",
                    source: DatabaseError(source),
                })
            })
    }

    /// Deletes the lock row of `session_id` whoever holds it (what `force-refresh` does).
    /// Returns whether there was one. This breaks the lock of a possibly live writer:
    /// check [`Store::lock_status`] and [`LockStatus::blocks_writers`] first, and ask.
    pub fn clear_lock(&self, session_id: &str) -> Result<bool> {
        self.with_db(|db| {
            let path = db.path().to_path_buf();
            lock::clear(db.connection(), session_id).map_err(|source| {
                Error::Projection(ProjectionError::Database {
                    path,
                    action: "clearing the lock",
                    source: DatabaseError(source),
                })
            })
        })
    }

    /// Takes the write lock on `session_id` for this process, for work beyond one
    /// `write` (the state's writes take it themselves). Refused with the four-element
    /// [`crate::lock::LockError::Held`] while another live process holds it within its lease.
    pub fn lock(&self, session_id: &str, action: &str) -> Result<WriteLock<'_>> {
        let holds = self.hold_session(session_id, action)?;
        let mut lock = self.lock_with(session_id, action, lock::now_ms(), &Holder::current())?;
        lock.holds = holds;
        Ok(lock)
    }

    /// The session files this database knows for `session_id`, held for this process
    /// (`docs/lock.md`, "The one lock"): refused at once by another holder, after
    /// [`crate::log::writer::FILE_LOCK_WAIT`] by another writer's append.
    fn hold_session(&self, session_id: &str, action: &str) -> Result<Vec<lock::hold::Hold>> {
        let mut files = self.with_db(|db| db.session_files(session_id))?;
        if let Some(logs) = crate::sync::lock(&self.inner.logs).get(session_id) {
            files.extend(logs.iter().cloned());
        }
        // One hold per file, however it was named (a second hold of a file counts).
        files
            .iter()
            .filter_map(|file| hold_file(file, action).transpose())
            .collect()
    }

    /// Test hook: [`Store::lock`] for an injected holder and time (tests stand in for
    /// other processes with it).
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    pub fn lock_as(
        &self,
        session_id: &str,
        action: &str,
        now_ms: i64,
        holder: &Holder,
    ) -> Result<WriteLock<'_>> {
        self.lock_with(session_id, action, now_ms, holder)
    }

    fn lock_with(
        &self,
        session_id: &str,
        action: &str,
        now_ms: i64,
        holder: &Holder,
    ) -> Result<WriteLock<'_>> {
        self.with_db(|db| {
            let (conn, queue) = db.lock_parts();
            let g = lock::acquire_at(conn, queue, session_id, action, now_ms, holder)?;
            let (holder, acquired_at_ms) = (g.holder().to_owned(), g.acquired_at_ms());
            g.keep();
            Ok(WriteLock {
                store: self,
                session_id: session_id.to_owned(),
                holder,
                acquired_at_ms,
                released: false,
                holds: Vec::new(),
            })
        })
    }

    /// docs/spec.md §5 `force_refresh`: clears the session's lock row, drops this store's caches
    /// of `log` (its folds and its projection rows: [`Store::force_refresh_session`]) and
    /// re-reads the file. Returns whether there was a lock row.
    pub fn force_refresh(&self, log: &mut SessionLog) -> Result<bool> {
        crate::sync::lock(&self.inner.folds).remove(&(Arc::as_ptr(log.instance()) as usize));
        let file = log.is_materialized().then(|| log.path().to_path_buf());
        let cleared = self.force_refresh_session(log.session_id(), file.as_deref())?;
        log.refresh()?;
        Ok(cleared)
    }

    /// [`Store::force_refresh`] for a host that holds its own reads of the session (the Pi
    /// package's addon drops and re-reads its logs itself): clears the lock row of
    /// `session_id`, and, when the session has a file, drops this store's projection rows
    /// of it (the next read rebuilds them from the file as it then is). Returns whether
    /// there was a lock row. The one sequence of a force-refresh: [`Store::force_refresh`]
    /// runs it too.
    pub fn force_refresh_session(&self, session_id: &str, file: Option<&Path>) -> Result<bool> {
        let cleared = self.clear_lock(session_id)?;
        if let Some(file) = file {
            self.forget(file)?;
        }
        Ok(cleared)
    }

    /// The folded value of `plugin` in `scope` for the session file `file`, as if the
    /// leaf were `at` (default: the last entry in file order), answered by the projection
    /// without parsing the log (for tools that read any plugin; an extension uses its
    /// [`SessionState::read`] on a file). In [`crate::json`]'s lossless encoding.
    ///
    /// The value is as stored, written under the version [`Store::read_versioned`]
    /// reports; a [`SessionState`] migrates it to its own.
    pub fn read_value(
        &self,
        file: &Path,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<Option<Value>> {
        self.with_db(|db| db.read(file, plugin, scope, at).map(|r| r.value))
    }

    /// [`Store::read_value`] with the state version the value was written under and the
    /// entry of the event that set it.
    pub fn read_versioned(
        &self,
        file: &Path,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<StoredValue> {
        self.with_db(|db| {
            let read = db.read(file, plugin, scope, at)?;
            let entry = db.entry_of(file, &read);
            Ok(StoredValue {
                value: read.value,
                state_version: read.version,
                entry,
            })
        })
    }

    /// The rows' value for `key` in `file`, and the entry of the event that set it when
    /// it was written under another version than the key's (for the errors).
    pub(crate) fn read_file_raw<T>(
        &self,
        file: &Path,
        key: &StateKey<T>,
        at: Option<&str>,
    ) -> Result<(crate::projection::ReadValue, Option<String>)> {
        self.with_db(|db| {
            let read = db.read(file, key.plugin_id(), key.scope(), at)?;
            let entry = if read.version != key.version() {
                db.entry_of(file, &read)
            } else {
                None
            };
            Ok((read, entry))
        })
    }

    /// Runs `f` on the projection, opening it first if needed.
    fn with_db<R>(&self, f: impl FnOnce(&mut Projection) -> Result<R>) -> Result<R> {
        let mut slot = crate::sync::lock(&self.inner.db);
        let db = match &mut *slot {
            Some(db) => db,
            empty => empty.insert(Projection::open(&self.inner.location.path)?),
        };
        f(db)
    }

    /// Runs `f` on the fold memo of `log` (made on first use, following the log's new
    /// entries on every call).
    pub(crate) fn with_folds<R>(&self, log: &SessionLog, f: impl FnOnce(&mut Folds) -> R) -> R {
        let token = log.instance();
        let key = Arc::as_ptr(token) as usize;
        let mut map = crate::sync::lock(&self.inner.folds);
        let live = map
            .get(&key)
            .is_some_and(|(w, _)| w.upgrade().is_some_and(|t| Arc::ptr_eq(&t, token)));
        if !live {
            // Logs dropped since: their memo goes with them.
            map.retain(|_, (w, _)| w.strong_count() > 0);
            map.insert(key, (Arc::downgrade(token), Folds::default()));
            let mut logs = crate::sync::lock(&self.inner.logs);
            let files = logs.entry(log.session_id().to_owned()).or_default();
            if !files.iter().any(|f| f == log.path()) {
                files.push(log.path().to_path_buf());
            }
        }
        let (_, folds) = map.get_mut(&key).expect("inserted above");
        folds.follow(log);
        f(folds)
    }
}

/// The write lock on one session, held by this process; released when dropped.
///
/// Release deletes the row only if it still names this holder, so a lock whose lease was
/// taken over does not free the new holder's. Dropping ignores release errors (they are
/// logged with `tracing`); call [`WriteLock::release`] to see them.
#[derive(Debug)]
#[must_use = "dropping the lock releases it at once"]
pub struct WriteLock<'s> {
    store: &'s Store,
    session_id: String,
    holder: String,
    acquired_at_ms: i64,
    released: bool,
    /// The session files held for as long as the row stands (`docs/lock.md`).
    holds: Vec<lock::hold::Hold>,
}

/// Holds the session file `file` for this process ([`lock::hold::hold`]): `None` when
/// there is no file at the path; a holder or a stuck writer of another process refuses
/// `action` with [`lock::LockError::FileHeld`].
pub(crate) fn hold_file(file: &Path, action: &str) -> Result<Option<lock::hold::Hold>> {
    use lock::hold::{Taken, hold};
    match hold(file, crate::log::writer::FILE_LOCK_WAIT) {
        Ok(Taken::Held(h)) => Ok(Some(h)),
        Ok(Taken::NoFile) => Ok(None),
        Ok(Taken::Refused { identity, holder }) => {
            let id = Some(identity);
            let wait = crate::log::writer::FILE_LOCK_WAIT;
            Err(lock::file::held(file, id, action, wait, holder).into())
        }
        Err(source) => Err(Error::io("holding", file, source)),
    }
}

impl WriteLock<'_> {
    /// The locked session.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }
    /// The holder string stored in the row.
    pub fn holder(&self) -> &str {
        &self.holder
    }
    /// When the lock was taken or last renewed, ms since the Unix epoch.
    pub fn acquired_at_ms(&self) -> i64 {
        self.acquired_at_ms
    }

    /// Restarts the lease, for work that may outlast [`crate::lock::LEASE`]. Fails with
    /// [`crate::lock::LockError::Lost`] when the row no longer names this holder.
    pub fn renew(&mut self) -> Result<()> {
        let (session, holder) = (&self.session_id, &self.holder);
        let at = self
            .store
            .with_db(|db| Ok(lock::renew_row(db.connection(), session, holder)?))?;
        self.acquired_at_ms = at;
        Ok(())
    }

    /// Releases the lock now. `false` when the row was already gone or held by someone
    /// else (taken over after the lease, or cleared).
    pub fn release(mut self) -> Result<bool> {
        self.released = true;
        self.delete()
    }

    fn delete(&self) -> Result<bool> {
        let (session, holder) = (&self.session_id, &self.holder);
        self.store
            .with_db(|db| Ok(lock::release_row(db.connection(), session, holder)?))
    }
}

impl Drop for WriteLock<'_> {
    fn drop(&mut self) {
        if !self.released
            && let Err(e) = self.delete()
        {
            tracing::warn!(error = %e, "write lock not released; it expires with its lease");
        }
    }
}
