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
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoredValue {
    /// The value (`None`: absent), in [`crate::json`]'s lossless encoding.
    pub value: Option<Value>,
    /// The state version of the event that set it (1 for an event without one, and
    /// when there is no event).
    #[serde(rename = "stateVersion")]
    pub state_version: u32,
    /// The entry id of that event (`None`: no event).
    pub entry: Option<String>,
}

/// What [`SessionState::apply_at_tail`] did.
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

/// Which step of a file write ([`SessionState::apply_file`]) an error came from, for a
/// tool that words its errors its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileWriteStep {
    /// Opening the log, when the rows could not answer for the write (the strict reader's
    /// refusal of the file, or an I/O error).
    Open,
    /// Moving the opened log's leaf to `at` (an entry the log does not have).
    At,
    /// Any other: the op refused, the lock, the write from the rows or through the log.
    Write,
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
    /// The key: plugin id, scope, `customType`; it decides every write's event.
    pub fn key(&self) -> &StateKey<T> {
        &self.key
    }
    /// The `customType` of this state's events (`session-state/<plugin>`).
    pub fn custom_type(&self) -> &str {
        self.key.custom_type()
    }

    /// The entry that appends `event` (a [`StateKey::decide`]d one) for this state: every
    /// writer builds its line from it.
    pub(super) fn entry(&self, event: &Envelope) -> NewEntry {
        NewEntry::custom_printed(self.key.custom_type_shared(), event.data_text())
    }

    /// The value at the log's active leaf: `None` when absent, `Some` (possibly of a
    /// JSON `null`) when written. Folded in memory, memoized on the store: a read at an
    /// unchanged leaf is a few map lookups.
    pub fn read(&self, log: &SessionLog) -> Result<Option<T>> {
        self.decode(log, self.folded(log, log.tree().leaf_index())?)
    }

    /// The value as if the active leaf were `entry_id`.
    pub fn read_at(&self, log: &SessionLog, entry_id: &str) -> Result<Option<T>> {
        let node = log.require(entry_id)?;
        self.decode(log, self.folded(log, Some(node))?)
    }

    /// The raw JSON value at the active leaf, in [`crate::json`]'s lossless encoding:
    /// print it with [`crate::json::to_string`] to get the text Pi's `JSON.stringify`
    /// would print (lone surrogates included).
    pub fn read_value(&self, log: &SessionLog) -> Result<Option<Value>> {
        let f = self.folded(log, log.tree().leaf_index())?;
        let entry = || f.last.map(|l| log.entry_at(l).id().to_owned());
        self.key.resolve(
            f.value.as_deref().map(crate::json::clone_value),
            f.version,
            entry,
        )
    }

    /// The value at the last entry of the session file `file` (Pi's leaf when it opens
    /// the file), answered by the projection without parsing the log: in a new process
    /// it costs the same for a 1 MB and a 1 GB session once the projection is warm
    /// (docs/spec.md §4). The projection catches up first, reading only what was appended.
    pub fn read_file(&self, file: impl AsRef<Path>) -> Result<Option<T>> {
        self.read_file_inner(file.as_ref(), None)
    }

    /// [`SessionState::read_file`] as if the leaf were `entry_id`.
    pub fn read_file_at(&self, file: impl AsRef<Path>, entry_id: &str) -> Result<Option<T>> {
        self.read_file_inner(file.as_ref(), Some(entry_id))
    }

    /// [`SessionState::read_file`] as raw JSON, in [`crate::json`]'s lossless encoding
    /// (migrated to the key's version when written under an older one).
    pub fn read_file_value(
        &self,
        file: impl AsRef<Path>,
        at: Option<&str>,
    ) -> Result<Option<Value>> {
        let file = file.as_ref();
        let (read, entry) = self.store.read_file_raw(file, self.key(), at)?;
        self.key.resolve(read.value, read.version, || entry)
    }

    fn read_file_inner(&self, file: &Path, at: Option<&str>) -> Result<Option<T>> {
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

    /// The events that made the current value, oldest first, with their entry ids
    /// (branch scope: along the branch; session scope: the whole file).
    pub fn history(&self, log: &SessionLog) -> Result<Vec<HistoryEntry>> {
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

    /// Sets the value. Returns the new entry's id, or `None` when the value was already
    /// equal (nothing is appended). Durable when it returns (once the session file
    /// exists; see [`crate::Materialize`]).
    ///
    /// Refused before anything is written: a value nested deeper than [`crate::format::MAX_DEPTH`], NaN
    /// or ±Infinity ([`StateError::Serialize`]: JSON has no such number; serde_json and Pi's
    /// `JSON.stringify` would write `null`), and an integer that Pi's JavaScript would not
    /// read back as written, such as one beyond 2^53 that a double cannot hold exactly
    /// ([`StateError::UnrepresentableValue`]; store it as a string).
    pub fn write(&self, log: &mut SessionLog, value: &T) -> Result<Option<String>> {
        let value = self.key.check_value(value)?;
        self.apply(log, Op::Set(value))
    }

    /// Applies an RFC 7396 JSON Merge Patch to the value (an absent value patches `{}`).
    /// The patch is any serializable value (usually a [`serde_json::Value`]); it is
    /// refused as [`SessionState::write`] refuses a value.
    pub fn patch<P: Serialize + ?Sized>(
        &self,
        log: &mut SessionLog,
        patch: &P,
    ) -> Result<Option<String>> {
        let patch = self.key.check_value(patch)?;
        self.apply(log, Op::Patch(patch))
    }

    /// Makes the value absent. `None` when it already was.
    pub fn drop(&self, log: &mut SessionLog) -> Result<Option<String>> {
        self.apply(log, Op::Drop)
    }

    /// The write of an op already checked, on an open log.
    fn apply(&self, log: &mut SessionLog, op: Op) -> Result<Option<String>> {
        self.store.commit(self, log, op)
    }

    /// The JSON value [`SessionState::write`] would store for `value` (or
    /// [`SessionState::patch`] apply), refused with the same errors and nothing written
    /// ([`StateKey::check_value`]): for hosts that append the event themselves.
    pub fn check_value<V: Serialize + ?Sized>(&self, value: &V) -> Result<Value> {
        self.key.check_value(value)
    }

    /// Refuses the value a write would leave if this crate could not read it back: one
    /// nested deeper than [`crate::json::MAX_READ_DEPTH`] levels with its event's `data`
    /// ([`StateKey::check_result`]). The caller's own value or patch was held to
    /// [`crate::format::MAX_DEPTH`] before; what the value inherits from the file (a value Pi wrote
    /// thousands of levels deep, ±Infinity, an integer beyond 2^53) passes, so that writes
    /// on top of it keep working. For hosts that compute the next value themselves.
    pub fn check_result(&self, next: &Value) -> Result<()> {
        self.key.check_result(next)
    }

    /// [`SessionState::write`] on the session file `file`, without an open log: as a
    /// child of `at` (default: the last entry in file order, Pi's leaf when it opens the
    /// file). Durable when it returns, under the same write lock and refusals.
    ///
    /// When the projection is up to date with the file (after reading what others
    /// appended, as [`SessionState::read_file`] does), the write is decided from its rows
    /// and the file's tail without parsing the log, so it costs the same for a 1 MB and a
    /// 1 GB session. Otherwise (a new database, a file replaced, rewritten or ending in a
    /// torn line, an older version, an `at` the rows do not know) the log is opened and
    /// the write goes through [`SessionState::write`].
    pub fn write_file(
        &self,
        file: impl AsRef<Path>,
        at: Option<&str>,
        value: &T,
    ) -> Result<Option<String>> {
        let value = self.key.check_value(value)?;
        self.file_write(file.as_ref(), at, Op::Set(value))
            .map_err(|(_, e)| e)
    }

    /// [`SessionState::patch`] on the session file `file`, as [`SessionState::write_file`].
    pub fn patch_file<P: Serialize + ?Sized>(
        &self,
        file: impl AsRef<Path>,
        at: Option<&str>,
        patch: &P,
    ) -> Result<Option<String>> {
        let patch = self.key.check_value(patch)?;
        self.file_write(file.as_ref(), at, Op::Patch(patch))
            .map_err(|(_, e)| e)
    }

    /// [`SessionState::drop`] on the session file `file`, as [`SessionState::write_file`].
    pub fn drop_file(&self, file: impl AsRef<Path>, at: Option<&str>) -> Result<Option<String>> {
        self.file_write(file.as_ref(), at, Op::Drop)
            .map_err(|(_, e)| e)
    }

    /// [`SessionState::write_file`], `patch_file` or `drop_file` of an [`Op`] the caller
    /// built (its value or patch checked as [`StateKey::check_op`] does), each error
    /// handed to `on_error` with the step it came from: for a tool that reports them its
    /// own way, as the command line does (`--at: ...` for an unknown `at`).
    #[cfg_attr(
        windows,
        expect(
            clippy::result_large_err,
            reason = "a Windows path is larger; the error is built once, on failure"
        )
    )]
    pub fn apply_file<E>(
        &self,
        file: impl AsRef<Path>,
        at: Option<&str>,
        op: Op,
        on_error: impl FnOnce(FileWriteStep, Error) -> E,
    ) -> std::result::Result<Option<String>, E> {
        self.key
            .check_op(&op)
            .map_err(|e| (FileWriteStep::Write, e))
            .and_then(|()| self.file_write(file.as_ref(), at, op))
            .map_err(|(step, e)| on_error(step, e))
    }

    /// The projection's half of [`SessionState::write_file`] (and `patch_file`,
    /// `drop_file`): `op` decided from the rows and the file's tail, without opening the
    /// log, or [`TailWrite::NeedsLog`] when the rows cannot answer for it (nothing was
    /// written; write through an opened [`crate::SessionLog`]). For a tool that opens the
    /// log itself. Same lock, refusals and durability as [`SessionState::write`].
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
    /// the file's tail when they can answer, else through the log. An error comes with
    /// the step it came from.
    #[cfg_attr(
        windows,
        expect(
            clippy::result_large_err,
            reason = "a Windows path is larger; the error is built once, on failure"
        )
    )]
    fn file_write(
        &self,
        file: &Path,
        at: Option<&str>,
        op: Op,
    ) -> std::result::Result<Option<String>, (FileWriteStep, Error)> {
        let step = |step| move |e| (step, e);
        match self
            .store
            .commit_at_tail(self, file, at, op.clone())
            .map_err(step(FileWriteStep::Write))?
        {
            TailWrite::Appended(id) => return Ok(Some(id)),
            TailWrite::Unchanged => return Ok(None),
            TailWrite::NeedsLog => {}
        }
        let mut log = crate::tree::LogOptions::new()
            .file_system(self.store.file_system().clone())
            .open(file)
            .map_err(step(FileWriteStep::Open))?;
        if let Some(at) = at {
            log.navigate(at).map_err(step(FileWriteStep::At))?;
        }
        let id = self
            .apply(&mut log, op)
            .map_err(step(FileWriteStep::Write))?;
        // The write leaves the projection to the next reader; this caller's next write is
        // one (`commit_at_tail` answers from the rows), so the rows catch up now. A
        // catch-up that fails leaves that write to the log again, which names the problem.
        if let Err(e) = self.store.catch_up(file) {
            tracing::debug!(error = %e, file = %file.display(), "the rows did not catch up after the write");
        }
        Ok(id)
    }
}
