//! State on a session kept by a [`SessionStore`](crate::SessionStore) backend: folds, `--at`, history and the
//! projection's guarantees on every backend, with no local copy of the session.
//!
//! - **Reads** go through the projection, whose rows for a stored session are fed from
//!   the store's lines by sequence number (`src/projection/stored.rs`): a read asks the
//!   store for the lines from the last one folded on (one `read_lines`), checks that
//!   this last line is still the stored one, folds what is new and answers from the
//!   rows. Its cost does not grow with the session.
//! - **Writes** are decided from the same rows and the stored tail, as a write to a file
//!   is decided from its rows and the file's tail (`tail.rs`): the value at the leaf (or
//!   at `at`), a fresh id no entry of the session has, and one line appended through the
//!   store at the next sequence number the rows know. The first attempt reads nothing
//!   and takes no turn: it decides on the rows as they stand and appends outside the
//!   writers' turns ([`SessionStore::append_lines_outside_turns`](crate::SessionStore::append_lines_outside_turns)), which the store
//!   refuses when another writer came first or is in line. The write then takes its turn
//!   ([`SessionStore::begin_turn`](crate::SessionStore::begin_turn)), catches up and decides again; refused in its turn (a
//!   store without turns), again after a random pause, at most 32 attempts in all
//!   ([`Error::Contended`]). A store that is
//!   unavailable is tried again within its retry window ([`Error::StoreUnavailable`]).
//!   An append whose outcome is unknown (the connection broke) is resolved by reading
//!   the store back: the write knows the id it appended. Nothing is ever lost or applied
//!   twice: an event is stored once, at the sequence number it was decided for.
//! - A state read or write never loads the session ([`crate::Sessions::load`] closes an
//!   interrupted turn, for a host resuming it): it adds nothing to a session but its own
//!   event, so a live agent in the middle of a tool call is left alone.
//!
//! ```no_run
//! use session_state::{Scope, SqliteStore, Store, StoredSession};
//! let backend = SqliteStore::open("/srv/sessions.sqlite")?;
//! let store = Store::at("/var/cache/states.sqlite")?;
//! let role = store.state::<String>("role", Scope::Branch)?;
//! let session = StoredSession::new(&backend, "sqlite:///srv/sessions.sqlite", "0195f1d0");
//! role.write(&session, &"reviewer".to_string())?;
//! assert_eq!(role.read(&session)?, Some("reviewer".to_string()));
//! # Ok::<(), session_state::Error>(())
//! ```

use super::Store;
use super::state::{SessionState, StoredValue};
use super::stored::StoredSession;
use super::write::{Appended, Outcome, Own, Target, run};
use crate::error::{Error, Result, StoreError};
use crate::persistence::read_id_at;
use crate::persistence::retry::Retry;
use crate::projection::{CatchUp, Projection, StoredDecision, StoredLines};
use crate::state::decide::Decided;
use crate::state::envelope::{Op, Scope};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

impl<T: Serialize + DeserializeOwned> SessionState<T> {
    /// The value of a backend's session at its last entry (or as if the leaf were `at`),
    /// answered by the projection from the store's lines (see the module docs).
    pub(super) fn read_stored(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
    ) -> Result<Option<T>> {
        let stored =
            self.store()
                .read_stored_versioned(session, self.plugin_id(), self.scope(), at)?;
        let entry = stored.entry;
        let value = self
            .key()
            .resolve(stored.value, stored.state_version, || entry.clone())?;
        self.deserialize(value.as_ref(), || entry)
    }

    /// `read_stored` as raw JSON, in [`crate::json`]'s lossless encoding.
    pub(super) fn read_stored_value(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
    ) -> Result<Option<Value>> {
        let stored =
            self.store()
                .read_stored_versioned(session, self.plugin_id(), self.scope(), at)?;
        let entry = stored.entry;
        self.key()
            .resolve(stored.value, stored.state_version, || entry)
    }

    /// A write of an op already checked in a backend's session, as a child of its last
    /// entry (or of `at`), with the retries the module docs describe.
    pub(super) fn commit_stored(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
        op: Op,
    ) -> Result<Option<String>> {
        let mut retry = Retry::new(session.store);
        // The ids earlier attempts drew: one that got in after all (a store that reported
        // a failure for a write it committed) is this write's, and is reported as such.
        let mut drawn: Vec<String> = Vec::new();
        let mut attempt = Attempt::FromRows;
        loop {
            let mut from_rows = false;
            let once = self.store().with_db(|db| {
                let mut target = StoredTarget {
                    db,
                    session,
                    at,
                    key: StoredLines::key(session),
                    turn: None,
                    attempt,
                    from_rows: false,
                    store_turn: false,
                };
                let outcome = run(&mut target, self, op.clone());
                from_rows = target.from_rows;
                outcome
            });
            match once {
                // Decided on rows that may be behind the store: nothing to write there
                // proves nothing. The rows catch up and the write decides again.
                Ok(Outcome::Unchanged) if from_rows => attempt = Attempt::CaughtUp,
                Ok(Outcome::Unchanged) if !drawn.is_empty() => {
                    return self
                        .store()
                        .with_db(|db| db.stored_entries_among(session, &drawn));
                }
                Ok(Outcome::Unchanged) => return Ok(None),
                Ok(Outcome::Appended(id)) => return Ok(Some(id)),
                Ok(Outcome::Lost(id)) => {
                    drawn.push(id);
                    if attempt == Attempt::InTurn {
                        retry.lost_race(session.session_id)?;
                    } else {
                        // Refused outside the turns: in line at once (it raced no writer
                        // in line).
                        retry.count_race(session.session_id)?;
                        attempt = Attempt::InTurn;
                    }
                }
                Ok(Outcome::NotWritten(id, e)) => {
                    drawn.push(id);
                    retry.failed(e)?;
                }
                Ok(Outcome::Elsewhere(why)) => {
                    return Err(Error::Internal {
                        what: format!("a stored write could not be decided: {why}"),
                    });
                }
                Err(Error::Store(e)) if e.is_transient() => retry.failed(e)?,
                Err(e) => return Err(e),
            }
        }
    }
}

/// How an attempt of a stored write stands to the store's turns
/// ([`SessionStore::begin_turn`](crate::SessionStore::begin_turn)). A write's first attempt takes no turn and reads
/// nothing from the store: it decides on the projection's rows as they stand and appends
/// outside the turns ([`SessionStore::append_lines_outside_turns`](crate::SessionStore::append_lines_outside_turns)), which goes in only
/// after the rows' last entry at their next sequence number and while no writer is in
/// line. Refused, the write takes its turn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// No turn, no catch-up: the rows as they stand (a catch-up when they hold nothing
    /// of the session).
    FromRows,
    /// No turn: the rows catch up first (a first attempt that found nothing to write).
    CaughtUp,
    /// In the writer's turn: the rows catch up, then the append.
    InTurn,
}

/// A stored session, with the projection's rows of it, as the pipeline's target: one
/// decision and one conditional append at the next sequence number.
struct StoredTarget<'a, 'b> {
    db: &'a mut Projection,
    session: &'a StoredSession<'b>,
    at: Option<&'a str>,
    key: String,
    turn: Option<crate::lock::Turn>,
    attempt: Attempt,
    /// The decision was made on the rows with no catch-up.
    from_rows: bool,
    /// The store's turn was taken.
    store_turn: bool,
}

impl Target for StoredTarget<'_, '_> {
    type Place = StoredDecision;

    fn begin(&mut self, _: &'static str) -> Result<()> {
        // One turn among the projection's writers from the decision to the append (the
        // catch-ups inside are part of it), so that no writer that came later can take
        // the sequence number this one decided on (docs/lock.md, "Taking turns").
        self.turn = self.db.turn();
        // And, after a first attempt outside them, one turn among the session's writers
        // at the store, of every process and machine, for the same span: writers take
        // turns instead of racing for the sequence number (`SessionStore::begin_turn`).
        if self.attempt == Attempt::InTurn {
            self.session.store.begin_turn(self.session.session_id)?;
            self.store_turn = true;
        }
        Ok(())
    }

    fn current<T: Serialize + DeserializeOwned>(
        &mut self,
        state: &SessionState<T>,
    ) -> Result<std::result::Result<StoredDecision, &'static str>> {
        let (plugin, scope) = (state.plugin_id(), state.scope());
        if self.attempt == Attempt::FromRows
            && let Some(d) =
                self.db
                    .decide_stored_from_rows(self.session, plugin, scope, self.at)?
        {
            self.from_rows = true;
            return Ok(Ok(d));
        }
        self.db
            .decide_stored(self.session, plugin, scope, self.at)
            .map(Ok)
    }

    fn value(d: &StoredDecision) -> (Option<&Value>, u32) {
        (d.current.value.as_ref(), d.current.version)
    }

    fn entry(&self, d: &StoredDecision) -> Option<String> {
        d.current
            .event
            .and_then(|idx| self.db.entry_by_key(&self.key, idx))
    }

    fn id_taken(&self, d: &StoredDecision, id: &str) -> Result<bool> {
        self.db
            .stored_id_is_free(self.session, &d.tail, id)
            .map(|free| !free)
    }

    fn parent<'p>(&'p self, d: &'p StoredDecision) -> Option<&'p str> {
        d.parent.as_deref()
    }

    fn append(&mut self, d: &StoredDecision, line: &str) -> Result<Appended> {
        let line = line.strip_suffix('\n').unwrap_or(line).to_owned();
        let (session, lines) = (self.session, std::slice::from_ref(&line));
        let appended = if self.attempt == Attempt::InTurn {
            session
                .store
                .append_lines(session.session_id, d.tail.next_seq, lines)
                .map(Some)
        } else {
            session.store.append_lines_outside_turns(
                session.session_id,
                d.tail.next_seq,
                d.tail.last_entry_id.as_deref(),
                lines,
            )
        };
        match appended {
            Ok(Some(_)) => Ok(Appended::Ours),
            // Another writer appended, holds a turn or waits for one: nothing was written.
            Ok(None) => Ok(Appended::Lost),
            Err(StoreError::SequenceMismatch { .. } | StoreError::IdTaken { .. }) => {
                Ok(Appended::Lost)
            }
            Err(e @ StoreError::Indeterminate { .. }) => Ok(Appended::Unknown(e)),
            Err(e) => Err(e.into()),
        }
    }

    fn id_at(&mut self, d: &StoredDecision) -> Result<Option<String>> {
        // The store tells: the line at the sequence number is ours, another writer's, or
        // none.
        let store = self.session.store;
        let mut retry = Retry::new(store);
        read_id_at(store, self.session.session_id, d.tail.next_seq, &mut retry)
    }

    fn remember<T: Serialize + DeserializeOwned>(
        &mut self,
        _: &SessionState<T>,
        d: StoredDecision,
        own: Own,
        _: Decided,
    ) -> Result<()> {
        // The rows fold the new line (a failure leaves that to the next catch-up; the store
        // holds the line either way).
        let line = own.line.strip_suffix('\n').unwrap_or(&own.line);
        if let Err(e) = self.db.follow_own_stored(self.session, &d.tail, line) {
            tracing::debug!(error = %e, "the projection did not follow the write; the next read does");
        }
        Ok(())
    }

    fn end(&mut self, _: &Result<Outcome>) {
        if std::mem::take(&mut self.store_turn) {
            self.session.store.end_turn(self.session.session_id);
        }
        self.turn = None;
    }
}

impl Store {
    /// The folded value of `plugin` in `scope` in a stored session, as if the leaf were
    /// `at` (default: its last entry), answered by the projection from the store's lines
    /// (for tools that read any plugin; an extension uses [`SessionState::read`] on
    /// [`crate::On::Stored`]). A store that is unavailable is tried again within
    /// its retry window.
    pub fn read_stored_value(
        &self,
        session: &StoredSession<'_>,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<Option<Value>> {
        Ok(self
            .read_stored_versioned(session, plugin, scope, at)?
            .value)
    }

    /// [`Store::read_stored_value`] with the state version the value was written under
    /// and the entry of the event that set it.
    pub fn read_stored_versioned(
        &self,
        session: &StoredSession<'_>,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<StoredValue> {
        let mut retry = Retry::new(session.store);
        let key = StoredLines::key(session);
        loop {
            let read = self.with_db(|db| {
                let read = db.read_stored(session, plugin, scope, at)?;
                let entry = read.event.and_then(|idx| db.entry_by_key(&key, idx));
                Ok(StoredValue {
                    value: read.value,
                    state_version: read.version,
                    entry,
                })
            });
            match read {
                Err(Error::Store(e)) if e.is_transient() => retry.failed(e)?,
                r => return r,
            }
        }
    }

    /// Brings the projection's rows of a stored session up to date with the store and
    /// says what it read.
    pub fn catch_up_stored(&self, session: &StoredSession<'_>) -> Result<CatchUp> {
        self.with_db(|db| {
            db.catch_up_stored(session)?;
            Ok(db.last_catch_up().unwrap_or_default())
        })
    }

    /// Drops the projection's rows of a stored session (what `force-refresh` does for a
    /// file's rows); the next read rebuilds them from the store.
    pub fn forget_stored(&self, session: &StoredSession<'_>) -> Result<()> {
        self.with_db(|db| db.forget_stored(session))
    }
}
