//! A plugin's state: a cheap typed key on a [`Store`] (docs/spec.md §3).
//!
//! ```no_run
//! use session_state::{Scope, SessionLog, Store};
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct Role { name: String }
//!
//! let store = Store::at("/tmp/states.sqlite")?;
//! let role = store.state::<Role>("role", Scope::Branch)?;
//! let mut log = SessionLog::open("session.jsonl")?;
//! role.write(&mut log, &Role { name: "reviewer".into() })?; // durable when it returns
//! assert_eq!(role.read(&log)?, Some(Role { name: "reviewer".into() }));
//! # Ok::<(), session_state::Error>(())
//! ```

use super::Store;
use super::stored::StoredSession;
use crate::error::{Error, Result, StateError};
use crate::log::NewEntry;
use crate::state::decide::Decided;
use crate::state::envelope::{Envelope, Op, Scope};
use crate::state::fold::{self, HistoryEntry};
use crate::state::key::StateKey;
use crate::tree::SessionLog;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::Path;

/// A state's value as stored, with the version of its shape it was written under and
/// the event that set it: what [`crate::Store::read_versioned`] reports to tools (the
/// value is not migrated; a [`SessionState`]'s reads migrate it).
///
/// Serialized as `{"value": …, "stateVersion": N, "entryId": "…"}`: `value` left out when
/// absent (a stored `null` is `"value": null`), `entryId` `null` when no event set it.
/// The command line's `read --json` and the Pi package's stored reads print this.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredValue {
    /// The value (`None`: absent), in [`crate::json`]'s lossless encoding.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json::serialize_some_value"
    )]
    pub value: Option<Value>,
    /// The state version of the event that set it (1 for an event without one, and
    /// when there is no event).
    pub state_version: u32,
    /// The entry id of that event (`None`: no event).
    #[serde(rename = "entryId")]
    pub entry: Option<String>,
}

/// What a write decided from the projection's rows and the file's tail did (the first
/// half of a write on [`On::File`]; `SessionState::apply_at_tail`, a test hook).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum TailWrite {
    /// The rows answered and the event was appended, durably: the new entry's id.
    Appended(String),
    /// The rows answered: the value is already what the op makes it; nothing appended.
    Unchanged,
    /// The rows cannot answer for this write (none yet, a replaced or rewritten file, a
    /// torn last line, a v1/v2 file, an `at` they do not know): nothing was written.
    NeedsLog,
}

/// Where a state is read or written: an open log, a session file, or a backend's
/// session. Every [`SessionState`] operation takes one; `&log`, `&mut log`, a path
/// (`&Path`, `&PathBuf`, `&str`) and `&StoredSession` convert into it, at the file's or the
/// session's last entry.
///
/// ```no_run
/// use session_state::{On, Scope, SessionLog, Store};
/// let store = Store::at("/tmp/states.sqlite")?;
/// let role = store.state::<String>("role", Scope::Branch)?;
/// let mut log = SessionLog::open("session.jsonl")?;
/// role.write(&mut log, &"reviewer".to_string())?;              // an open log, at its leaf
/// assert_eq!(role.read(&log)?, Some("reviewer".to_string()));
/// let in_another_process = role.read("session.jsonl")?;          // the file, not parsed
/// role.drop(On::file("session.jsonl", Some("1a2b3c4d")))?;      // a child of 1a2b3c4d
/// # Ok::<(), session_state::Error>(())
/// ```
#[derive(Debug)]
pub enum On<'a> {
    /// An open log, read at its active leaf. Reads only: a write needs [`On::LogMut`]
    /// (`&mut log`), and is refused here with [`Error::InvalidOption`].
    Log(&'a SessionLog),
    /// An open log, read and written at its active leaf: folded in memory, memoized on
    /// the store; a write appends as a child of the leaf.
    LogMut(&'a mut SessionLog),
    /// A session file, at `at` (default: its last entry in file order, Pi's leaf when it
    /// opens the file), **without opening the log** when the projection can answer: a
    /// read from its rows (the same cost for a 1 MB and a 1 GB session once the
    /// projection is warm); a write decided from its rows and the file's tail as a child
    /// of `at`, else through the opened log. `history` opens the log.
    File {
        /// The session file.
        path: &'a Path,
        /// The entry to read at or to write a child of (`None`: the last entry).
        at: Option<&'a str>,
    },
    /// A backend's session ([`StoredSession`]), at `at` (default: its last entry; a write
    /// as a child of `at` forks when it has children), through the projection's rows of
    /// the store's lines (see [`StoredSession`]). Adds nothing to the session but a
    /// write's own event. `history` reads the session as a detached log.
    Stored {
        /// The session.
        session: StoredSession<'a>,
        /// The entry to read at or to write a child of (`None`: the last entry).
        at: Option<&'a str>,
    },
}

impl<'a> On<'a> {
    /// The session file `path` at `at` ([`On::File`]).
    pub fn file<P: AsRef<Path> + ?Sized>(path: &'a P, at: Option<&'a str>) -> On<'a> {
        On::File {
            path: path.as_ref(),
            at,
        }
    }

    /// The backend's session `session` at `at` ([`On::Stored`]).
    pub fn stored(session: &StoredSession<'a>, at: Option<&'a str>) -> On<'a> {
        On::Stored {
            session: *session,
            at,
        }
    }
}

impl<'a> From<&'a SessionLog> for On<'a> {
    fn from(log: &'a SessionLog) -> On<'a> {
        On::Log(log)
    }
}

impl<'a> From<&'a mut SessionLog> for On<'a> {
    fn from(log: &'a mut SessionLog) -> On<'a> {
        On::LogMut(log)
    }
}

impl<'a> From<&'a Path> for On<'a> {
    fn from(path: &'a Path) -> On<'a> {
        On::file(path, None)
    }
}

impl<'a> From<&'a std::path::PathBuf> for On<'a> {
    fn from(path: &'a std::path::PathBuf) -> On<'a> {
        On::file(path, None)
    }
}

impl<'a> From<&'a str> for On<'a> {
    fn from(path: &'a str) -> On<'a> {
        On::file(path, None)
    }
}

impl<'a, 'b: 'a> From<&'a StoredSession<'b>> for On<'a> {
    fn from(session: &'a StoredSession<'b>) -> On<'a> {
        On::stored(session, None)
    }
}

/// One plugin's state in one scope, on a [`Store`]: a [`StateKey`] bound to the store
/// ([`Store::state`], [`Store::state_of`] make one).
///
/// Reads fold the plugin's events at the log's active leaf (or at an entry); writes
/// append one event as a child of the leaf, durably, under the session's write lock.
/// A key reads and writes only its own `customType` (`session-state/<plugin>`). Cloning
/// is cheap: clones share the store.
pub struct SessionState<T> {
    store: Store,
    key: StateKey<T>,
}

impl<T> Clone for SessionState<T> {
    fn clone(&self) -> Self {
        SessionState {
            store: self.store.clone(),
            key: self.key.clone(),
        }
    }
}

impl<T> std::fmt::Debug for SessionState<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionState")
            .field("plugin", &self.key.plugin_id())
            .field("scope", &self.key.scope())
            .field("store", &self.store)
            .finish()
    }
}

impl<T: Serialize + DeserializeOwned> SessionState<T> {
    pub(super) fn new(store: Store, key: StateKey<T>) -> SessionState<T> {
        SessionState { store, key }
    }

    /// The plugin id.
    pub fn plugin_id(&self) -> &str {
        self.key.plugin_id()
    }
    /// The scope.
    pub fn scope(&self) -> Scope {
        self.key.scope()
    }
    /// The store this key is on.
    pub fn store(&self) -> &Store {
        &self.store
    }
    /// The key: plugin id, scope, `customType`, version; it checks every value and
    /// decides every write's event ([`StateKey::check_value`], [`StateKey::decide`]).
    pub fn key(&self) -> &StateKey<T> {
        &self.key
    }

    /// The entry that appends `event` (a [`StateKey::decide`]d one) for this state: every
    /// writer builds its line from it.
    pub(super) fn entry(&self, event: &Envelope) -> NewEntry {
        NewEntry::custom_printed(self.key.custom_type_shared(), event.data_text())
    }

    /// The value at `on`: `None` when absent, `Some` (possibly of a JSON `null`) when
    /// written; migrated to the key's version when written under an older one.
    ///
    /// - On an open log ([`On::Log`], [`On::LogMut`]), at its active leaf: folded in
    ///   memory, memoized on the store, so a read at an unchanged leaf is a few map
    ///   lookups.
    /// - On a session file ([`On::File`]), at its last entry or `at`: answered by the
    ///   projection without parsing the log, so in a new process it costs the same for a
    ///   1 MB and a 1 GB session once the projection is warm (docs/spec.md §4). The
    ///   projection catches up first, reading only what was appended.
    /// - On a backend's session ([`On::Stored`]): answered by the projection from the
    ///   store's lines, flat in the session's size once it is warm; adds nothing to the
    ///   session.
    pub fn read<'a>(&self, on: impl Into<On<'a>>) -> Result<Option<T>> {
        match on.into() {
            On::Log(log) => self.read_log(log, log.tree().leaf_index()),
            On::LogMut(log) => self.read_log(log, log.tree().leaf_index()),
            On::File { path, at } => self.read_file(path, at),
            On::Stored { session, at } => self.read_stored(&session, at),
        }
    }

    /// [`SessionState::read`] as if the leaf were `entry_id` (`at` of a file or a stored
    /// session is replaced by it). An entry the log does not have is
    /// [`crate::UnknownEntry`].
    pub fn read_at<'a>(&self, on: impl Into<On<'a>>, entry_id: &str) -> Result<Option<T>> {
        match on.into() {
            On::Log(log) => self.read_log(log, Some(log.require(entry_id)?)),
            On::LogMut(log) => self.read_log(log, Some(log.require(entry_id)?)),
            On::File { path, .. } => self.read_file(path, Some(entry_id)),
            On::Stored { session, .. } => self.read_stored(&session, Some(entry_id)),
        }
    }

    /// [`SessionState::read`] as raw JSON, in [`crate::json`]'s lossless encoding (migrated
    /// to the key's version when written under an older one): print it with
    /// [`crate::json::to_string`] to get the text Pi's `JSON.stringify` would print (lone
    /// surrogates included).
    pub fn read_value<'a>(&self, on: impl Into<On<'a>>) -> Result<Option<Value>> {
        match on.into() {
            On::Log(log) => self.read_log_value(log),
            On::LogMut(log) => self.read_log_value(log),
            On::File { path, at } => self.read_file_value(path, at),
            On::Stored { session, at } => self.read_stored_value(&session, at),
        }
    }

    /// The value at `on` as stored, not migrated, with the state version it was written
    /// under and the entry of the event that set it (on a file, for a value at the key's
    /// version, `None`: looked up only when asked): for a host that reads where the core
    /// cannot (the Pi package: its background log, the entries Pi holds in memory) and
    /// then resolves ([`StateKey::resolve`]) or decides ([`StateKey::decide`]) on it. Read
    /// the way [`SessionState::read`] reads, at the same cost.
    pub fn read_as_stored<'a>(&self, on: impl Into<On<'a>>) -> Result<StoredValue> {
        let of_log = |log: &SessionLog| -> Result<StoredValue> {
            let f = self.folded(log, log.tree().leaf_index())?;
            Ok(StoredValue {
                value: f.value.as_deref().map(crate::json::clone_value),
                state_version: f.version,
                entry: f.last.map(|l| log.entry_at(l).id().to_owned()),
            })
        };
        match on.into() {
            On::Log(log) => of_log(log),
            On::LogMut(log) => of_log(log),
            On::File { path, at } => {
                let (read, entry) = self.store.read_file_raw(path, self.key(), at)?;
                Ok(StoredValue {
                    value: read.value,
                    state_version: read.version,
                    entry,
                })
            }
            On::Stored { session, at } => {
                self.store
                    .read_stored_versioned(&session, self.plugin_id(), self.scope(), at)
            }
        }
    }

    fn read_log(&self, log: &SessionLog, node: Option<u32>) -> Result<Option<T>> {
        self.decode(log, self.folded(log, node)?)
    }

    fn read_log_value(&self, log: &SessionLog) -> Result<Option<Value>> {
        let f = self.folded(log, log.tree().leaf_index())?;
        let entry = || f.last.map(|l| log.entry_at(l).id().to_owned());
        self.key.resolve(
            f.value.as_deref().map(crate::json::clone_value),
            f.version,
            entry,
        )
    }

    fn read_file_value(&self, file: &Path, at: Option<&str>) -> Result<Option<Value>> {
        let (read, entry) = self.store.read_file_raw(file, self.key(), at)?;
        // The entry of a value at the key's version is looked up only for an error's message.
        self.key.resolve(read.value, read.version, || {
            entry.or_else(|| {
                self.store
                    .read_versioned(file, self.plugin_id(), self.scope(), at)
                    .ok()
                    .and_then(|v| v.entry)
            })
        })
    }

    fn read_file(&self, file: &Path, at: Option<&str>) -> Result<Option<T>> {
        let value = self.read_file_value(file, at)?;
        self.deserialize(value.as_ref(), || {
            self.store
                .read_versioned(file, self.plugin_id(), self.scope(), at)
                .ok()
                .and_then(|v| v.entry)
        })
    }

    /// `value` as the caller's type; when it does not deserialize, the error names the
    /// plugin, the entry `entry` names, and the first path that fails.
    pub(super) fn deserialize(
        &self,
        value: Option<&Value>,
        entry: impl FnOnce() -> Option<String>,
    ) -> Result<Option<T>> {
        match value {
            None => Ok(None),
            Some(v) => crate::json::deserialize_with_path::<T>(v)
                .map(Some)
                .map_err(|(path, source)| {
                    Error::State(StateError::Deserialize {
                        plugin: self.plugin_id().to_owned(),
                        entry_id: entry(),
                        path,
                        source,
                    })
                }),
        }
    }

    /// Provenance: the events that made the value at `on`, oldest first, with their entry
    /// ids, lines, ops, arguments, the value after each and the state version each was
    /// written under (branch scope: along the branch; session scope: the whole file).
    /// On an open log, folded with the store's memo; a session file or a backend's
    /// session is read as a log for the call ([`On::File`] through the strict reader, with
    /// the leaf at `at`), folded for the call alone ([`StateKey::history`]).
    pub fn history<'a>(&self, on: impl Into<On<'a>>) -> Result<Vec<HistoryEntry>> {
        let (mut log, at) = match on.into() {
            On::Log(log) => return self.log_history(log),
            On::LogMut(log) => return self.log_history(log),
            On::File { path, at } => (
                crate::tree::LogOptions::new()
                    .with_file_system(self.store.file_system().clone())
                    .open(path)?,
                at,
            ),
            On::Stored { session, at } => {
                (session.read_log(crate::log::reader::ReadMode::Strict)?, at)
            }
        };
        if let Some(at) = at {
            log.navigate(at)?;
        }
        self.key.history(&log)
    }

    fn log_history(&self, log: &SessionLog) -> Result<Vec<HistoryEntry>> {
        self.store.with_folds(log, |f| {
            fold::history(
                f,
                log,
                self.plugin_id(),
                self.scope(),
                log.tree().leaf_index(),
            )
        })
    }

    pub(super) fn folded(&self, log: &SessionLog, node: Option<u32>) -> Result<fold::Folded> {
        self.store.with_folds(log, |f| {
            fold::value_at(f, log, self.plugin_id(), self.scope(), node)
        })
    }

    /// After this process appended the `decided` event at the log's leaf: the fold memo
    /// learns the value after it ([`fold::remember_appended`]).
    pub(super) fn remember_appended(&self, log: &SessionLog, decided: Decided) {
        let Some(node) = log.tree().leaf_index() else {
            return;
        };
        self.store.with_folds(log, |f| {
            fold::remember_appended(f, self.plugin_id(), node, decided);
        });
    }

    fn decode(&self, log: &SessionLog, f: fold::Folded) -> Result<Option<T>> {
        let entry = || f.last.map(|l| log.entry_at(l).id().to_owned());
        if f.version != self.key.version() {
            let v = self.key.resolve(
                f.value.as_deref().map(crate::json::clone_value),
                f.version,
                entry,
            )?;
            return self.deserialize(v.as_ref(), entry);
        }
        self.deserialize(f.value.as_deref(), entry)
    }

    /// Sets the value at `on`. Returns the new entry's id, or `None` when the value was
    /// already equal (nothing is appended). Durable when it returns (once the session
    /// file exists; see [`crate::Materialize`]), under the session's write lock; every
    /// target runs the one write pipeline (`src/store/write.rs`).
    ///
    /// - On an open log ([`On::LogMut`]), a child of its active leaf. [`On::Log`] (a log
    ///   borrowed shared) is refused with [`Error::InvalidOption`], nothing written.
    /// - On a session file ([`On::File`]), a child of `at` (default: its last entry),
    ///   without opening the log when the projection is up to date with the file (after
    ///   reading what others appended): decided from its rows and the file's tail, so it
    ///   costs the same for a 1 MB and a 1 GB session. Otherwise (a new database, a file
    ///   replaced, rewritten or ending in a torn line, an older version, an `at` the rows
    ///   do not know) the log is opened, its leaf moved to `at`, and the write goes
    ///   through it; the rows then catch up, so the next write is answered from them.
    /// - On a backend's session ([`On::Stored`]), a child of `at` (default: its last
    ///   entry; a fork when `at` has children), appended through the store at the next
    ///   sequence number, with the retries [`StoredSession`] describes.
    ///
    /// Refused before anything is written: a value nested deeper than
    /// [`crate::format::MAX_DEPTH`], NaN or ±Infinity ([`StateError::Serialize`]: JSON has
    /// no such number; serde_json and Pi's `JSON.stringify` would write `null`), and an
    /// integer that Pi's JavaScript would not read back as written, such as one beyond
    /// 2^53 that a double cannot hold exactly ([`StateError::UnrepresentableValue`]; store
    /// it as a string).
    pub fn write<'a>(&self, on: impl Into<On<'a>>, value: &T) -> Result<Option<String>> {
        let value = self.key.check_value(value)?;
        self.apply_checked(on.into(), Op::Set(value))
    }

    /// Applies an RFC 7396 JSON Merge Patch to the value at `on` (an absent value patches
    /// `{}`), as [`SessionState::write`] writes. The patch is any serializable value
    /// (usually a [`serde_json::Value`]); it is refused as a value is.
    pub fn patch<'a, P: Serialize + ?Sized>(
        &self,
        on: impl Into<On<'a>>,
        patch: &P,
    ) -> Result<Option<String>> {
        let patch = self.key.check_value(patch)?;
        self.apply_checked(on.into(), Op::Patch(patch))
    }

    /// Makes the value at `on` absent, as [`SessionState::write`] writes. `None` when it
    /// already was.
    pub fn drop<'a>(&self, on: impl Into<On<'a>>) -> Result<Option<String>> {
        self.apply_checked(on.into(), Op::Drop)
    }

    /// [`SessionState::write`], `patch` or `drop` of an [`Op`] the caller built (the
    /// command line's `write`, `patch`, `drop`), its value or patch checked as
    /// [`StateKey::check_op`] does.
    pub fn apply<'a>(&self, on: impl Into<On<'a>>, op: Op) -> Result<Option<String>> {
        self.key.check_op(&op)?;
        self.apply_checked(on.into(), op)
    }

    /// The write of an op already checked, on any target.
    fn apply_checked(&self, on: On<'_>, op: Op) -> Result<Option<String>> {
        match on {
            On::LogMut(log) => self.store.commit(self, log, op),
            On::Log(_) => Err(Error::InvalidOption {
                option: "target",
                detail: format!(
                    "a write of plugin {} needs the log borrowed mutably (`&mut log`, \
                     `On::LogMut`); nothing was written",
                    self.plugin_id()
                ),
            }),
            On::File { path, at } => self.file_write(path, at, op),
            On::Stored { session, at } => self.commit_stored(&session, at, op),
        }
    }

    /// The projection's half of a write on [`On::File`]: `op` decided from the rows and
    /// the file's tail, without opening the log, or [`TailWrite::NeedsLog`] when the rows
    /// cannot answer for it (nothing was written). A test hook: the crate's tests check
    /// with it which writes the rows answer.
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    pub fn apply_at_tail(
        &self,
        file: impl AsRef<Path>,
        at: Option<&str>,
        op: Op,
    ) -> Result<TailWrite> {
        self.key.check_op(&op)?;
        self.store.commit_at_tail(self, file.as_ref(), at, op)
    }

    /// The write of an op already checked, on the session file `file`: from the rows and
    /// the file's tail when they can answer, else through the log.
    fn file_write(&self, file: &Path, at: Option<&str>, op: Op) -> Result<Option<String>> {
        match self.store.commit_at_tail(self, file, at, op.clone())? {
            TailWrite::Appended(id) => return Ok(Some(id)),
            TailWrite::Unchanged => return Ok(None),
            TailWrite::NeedsLog => {}
        }
        let mut log = crate::tree::LogOptions::new()
            .with_file_system(self.store.file_system().clone())
            .open(file)?;
        if let Some(at) = at {
            log.navigate(at)?;
        }
        let id = self.store.commit(self, &mut log, op)?;
        // The write leaves the projection to the next reader; this caller's next write is
        // one (`commit_at_tail` answers from the rows), so the rows catch up now. A
        // catch-up that fails leaves that write to the log again, which names the problem.
        if let Err(e) = self.store.catch_up(file) {
            tracing::debug!(error = %e, file = %file.display(), "the rows did not catch up after the write");
        }
        Ok(id)
    }
}
