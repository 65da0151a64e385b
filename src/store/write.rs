//! The one write pipeline: every state write of this crate, on every target, runs
//! [`run`]'s body.
//!
//! 1. **The lock judgement** ([`Target::begin`]): the session's `write_lock` row and a
//!    running Pi's `pi_presence` row are judged in `BEGIN IMMEDIATE` (`docs/lock.md`), or
//!    the judgement of this connection's last write stands (the fast path: no holder
//!    has taken a row since), or, for a stored session, the writers' turn is taken.
//! 2. **The current value** ([`Target::current`]): the value where the write lands, the
//!    state version it was written under and the entry that set it.
//! 3. **The decision** ([`StateKey::decide`]): the event to append, or none, and the
//!    value after it.
//! 4. **The id and the line**: a fresh id no entry of the session has
//!    ([`Target::id_taken`]), the line printed once as a child of [`Target::parent`].
//! 5. **The conditional append** ([`Target::append`]): at the end the decision saw, or not
//!    at all.
//! 6. **Resolving an unknown outcome**: an append whose outcome is unknown is resolved by
//!    what is at its position ([`Target::id_at`], judged by `Landed::of`, which every
//!    other append to a store uses too, through `append_until_known`).
//! 7. **Remembering the value after** ([`Target::remember`]): the fold memo or the rows
//!    learn the event, so the next read or write does not read the line back.
//!
//! [`Target::end`] ends what `begin` opened, whatever happened in between.
//!
//! Three targets supply the primitives:
//! - [`LogTarget`] (below): an open [`SessionLog`]. One short SQLite transaction that
//!   writes nothing to the database, or none on the fast path; under the session file's
//!   advisory lock, what others
//!   appended is read, the event decided from the log as it now ends, appended and
//!   `fdatasync`ed; the lock, held from the check of the file's end to the sync, excludes
//!   writers that use another database. The projection is not updated: the log in memory
//!   answers this process's reads (its fold memo), and the next read through the
//!   projection catches the rows up from their watermark (`docs/projection.md`, "The
//!   write path leaves the projection to the next reader").
//! - `tail.rs`: the projection's rows and the session file's tail, for a process that has
//!   not read the log.
//! - `backend.rs`: a [`crate::SessionStore`]'s session, appended at a sequence number.
//!
//! The Pi package decides with the same [`StateKey::decide`] on the same fold, and
//! Pi appends the line itself (`pi.appendEntry`).

use super::Store;
use super::state::SessionState;
use crate::error::{AppendError, Error, Result, StoreError};
use crate::lock;
use crate::log::NewEntry;
use crate::persistence::retry::Landed;
use crate::projection::Projection;
use crate::state::decide::Decided;
use crate::state::envelope::Op;
use crate::tree::SessionLog;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A place a state write appends to, as the primitives the pipeline's steps need: the
/// value where the write lands, an id no entry has, an append at the end the decision
/// saw, what is at a position, and a memory of the value after.
pub(super) trait Target {
    /// The target's record of where the write lands, from step 2 to step 7.
    type Place;

    /// Step 1: the lock judgement. [`Target::end`] is called after it whatever happens,
    /// also when it fails half way.
    fn begin(&mut self, action: &'static str) -> Result<()>;

    /// Step 2: where the write lands; `Err(why)` when this target cannot answer for it
    /// (nothing was done).
    fn current<T: Serialize + DeserializeOwned>(
        &mut self,
        state: &SessionState<T>,
    ) -> Result<std::result::Result<Self::Place, &'static str>>;

    /// The value at `place` and the state version it was written under.
    fn value(place: &Self::Place) -> (Option<&Value>, u32);

    /// The entry of the event that set the value at `place` (for a refusal's message
    /// and a migration).
    fn entry(&self, place: &Self::Place) -> Option<String>;

    /// Step 4: whether an entry of the session has the id `id`.
    fn id_taken(&self, place: &Self::Place, id: &str) -> Result<bool>;

    /// Step 4: the parent of the new entry.
    fn parent<'p>(&'p self, place: &'p Self::Place) -> Option<&'p str>;

    /// Step 5: appends `line` at the end `place` saw, or not at all.
    fn append(&mut self, place: &Self::Place, line: &str) -> Result<Appended>;

    /// Step 6: the id of the entry at the position the append was for, read back (for an
    /// append of unknown outcome).
    fn id_at(&mut self, place: &Self::Place) -> Result<Option<String>>;

    /// Step 7: the event `decided`, appended as `own` at `place`, is remembered with the
    /// value after it. An error here comes after the line is durable.
    fn remember<T: Serialize + DeserializeOwned>(
        &mut self,
        state: &SessionState<T>,
        place: Self::Place,
        own: Own,
        decided: Decided,
    ) -> Result<()>;

    /// Ends what [`Target::begin`] opened: `outcome` is how the write ended.
    fn end(&mut self, outcome: &Result<Outcome>);
}

/// The appended line of step 7.
pub(super) struct Own {
    pub id: String,
    pub line: String,
    pub entry: NewEntry,
}

/// How a conditional append (step 5) ended.
pub(super) enum Appended {
    /// The line is in the session, at the end the decision saw.
    Ours,
    /// Another writer appended first: nothing was written.
    Lost,
    /// Unknown: the store failed after the append may have reached it.
    Unknown(StoreError),
}

/// How one run of the pipeline ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Appended, durably: the new entry's id.
    Appended(String),
    /// The op changes nothing: nothing appended.
    Unchanged,
    /// The target cannot answer for this write (why); nothing was done.
    Elsewhere(&'static str),
    /// Another writer appended first at the end this run decided on; the id it drew.
    Lost(String),
    /// An append of unknown outcome that did not get in; the id it drew.
    NotWritten(String, StoreError),
}

/// The pipeline: one run of steps 1 to 7 of `op` for `state` on `target`.
pub(super) fn run<W: Target, T: Serialize + DeserializeOwned>(
    target: &mut W,
    state: &SessionState<T>,
    op: Op,
) -> Result<Outcome> {
    // `end` ends what `begin` opened, also when `begin` stopped half way.
    let written = target
        .begin(action_of(&op))
        .and_then(|()| steps(target, state, op));
    target.end(&written);
    written
}

fn steps<W: Target, T: Serialize + DeserializeOwned>(
    target: &mut W,
    state: &SessionState<T>,
    op: Op,
) -> Result<Outcome> {
    // 2. The current value.
    let place = match target.current(state)? {
        Ok(place) => place,
        Err(why) => return Ok(Outcome::Elsewhere(why)),
    };
    // 3. The decision.
    let (value, version) = W::value(&place);
    let entry = || target.entry(&place);
    let Some(decided) = state.key().decide(value, version, entry, op)? else {
        return Ok(Outcome::Unchanged);
    };
    // 4. The id and the line.
    let id = crate::log::fresh_id(|id| target.id_taken(&place, id))?;
    let entry = state.entry(&decided.event);
    let line = entry.to_line(&id, target.parent(&place));
    // 5. The conditional append; 6. an unknown outcome resolved.
    match target.append(&place, &line)? {
        Appended::Ours => {}
        Appended::Lost => return Ok(Outcome::Lost(id)),
        Appended::Unknown(e) => match Landed::of(e, target.id_at(&place)?.map(|f| f == id)) {
            Landed::Ours => {}
            Landed::Lost => return Ok(Outcome::Lost(id)),
            Landed::NotWritten(e) => return Ok(Outcome::NotWritten(id, e)),
        },
    }
    // 7. The value after, remembered.
    let own = Own {
        id: id.clone(),
        line,
        entry,
    };
    target.remember(state, place, own, decided)?;
    Ok(Outcome::Appended(id))
}

/// The action the lock row and a refusal name (`docs/lock.md`).
pub(super) fn action_of(op: &Op) -> &'static str {
    match op {
        Op::Set(_) => "write",
        Op::Patch(_) => "patch",
        Op::Drop => "drop",
    }
}

/// An open log as the pipeline's target, with its store's database.
struct LogTarget<'a> {
    db: &'a mut Projection,
    log: &'a mut SessionLog,
    /// The database's transaction is open (a materialized session only).
    in_transaction: bool,
    _turn: Option<lock::Turn>,
    /// On the fast path, without a transaction (`docs/lock.md`, "The fast path").
    fast: Option<lock::FastPass>,
}

impl Target for LogTarget<'_> {
    /// The fold at the log's leaf.
    type Place = crate::state::fold::Folded;

    fn begin(&mut self, action: &'static str) -> Result<()> {
        // The file lock refused the append: name the state write it was.
        let named = |e| match e {
            AppendError::Held(refused) => AppendError::Held(Box::new(refused.for_action(action))),
            other => other,
        };
        if self.log.is_materialized() {
            // Nothing in the way since this connection last judged the rows, and nobody in
            // line: the file lock alone, if it is free at once.
            // When another writer has the file: wait in line, in a transaction.
            if let Some(pass) = self.db.fast_pass(self.log.session_id())
                && self.log.begin_append_now().map_err(named)?
            {
                self.fast = Some(pass);
                return Ok(());
            }
            // In line behind the database's other writers, if any, to the end of the write.
            self._turn = self
                .db
                .begin_write(self.log.session_id(), action, self.log.path())?;
            self.in_transaction = true;
        }
        // Only this process can see a session that is not on disk yet; the database was
        // opened first: one that is refused (not ours) refuses before this append can
        // create the session file (decide before touching). Others' appends are read under
        // the file lock, and the event decided from the log as it then ends.
        Ok(self.log.begin_append().map_err(named)?)
    }

    fn current<T: Serialize + DeserializeOwned>(
        &mut self,
        state: &SessionState<T>,
    ) -> Result<std::result::Result<Self::Place, &'static str>> {
        state.folded(self.log, self.log.tree().leaf_index()).map(Ok)
    }

    fn value(place: &Self::Place) -> (Option<&Value>, u32) {
        (place.value.as_deref(), place.version)
    }

    fn entry(&self, place: &Self::Place) -> Option<String> {
        place.last.map(|l| self.log.entry_at(l).id().to_owned())
    }

    fn id_taken(&self, _: &Self::Place, id: &str) -> Result<bool> {
        Ok(self.log.id_taken(id))
    }

    fn parent<'p>(&'p self, _: &'p Self::Place) -> Option<&'p str> {
        self.log.leaf_id()
    }

    fn append(&mut self, _: &Self::Place, line: &str) -> Result<Appended> {
        // On the fast path as in a transaction: the session file's lock, held to the end
        // of the sync, keeps every other writer and holder after it.
        self.fast = None;
        Ok(self.log.write_line(line).map(|()| Appended::Ours)?)
    }

    fn id_at(&mut self, _: &Self::Place) -> Result<Option<String>> {
        // A file append's outcome is known: it is written and synced, or an error.
        Ok(None)
    }

    fn remember<T: Serialize + DeserializeOwned>(
        &mut self,
        state: &SessionState<T>,
        _: Self::Place,
        own: Own,
        decided: Decided,
    ) -> Result<()> {
        // The log indexes the entry as built; the next read at the new leaf answers from
        // memory, not from the line.
        self.log.ingest_written(own.entry, &own.id, &own.line)?;
        state.remember_appended(self.log, decided);
        Ok(())
    }

    fn end(&mut self, _: &Result<Outcome>) {
        self.log.end_append();
        // A fast path that did not reach its append ends here.
        self.fast = None;
        if !std::mem::take(&mut self.in_transaction) {
            return;
        }
        // What stands in the database is at most a dead holder's row deleted; a commit
        // that fails after the append leaves the append standing (it is durable).
        let (conn, _) = self.db.write_parts();
        if let Err(e) = crate::sqlite::commit(conn) {
            tracing::debug!(error = %e, "the write's transaction did not commit; rolled back");
        }
    }
}

impl Store {
    /// Appends `op` for `state` as a child of the log's leaf unless it changes nothing.
    pub(super) fn commit<T: Serialize + DeserializeOwned>(
        &self,
        state: &SessionState<T>,
        log: &mut SessionLog,
        op: Op,
    ) -> Result<Option<String>> {
        self.with_db(|db| {
            let mut target = LogTarget {
                db,
                log,
                in_transaction: false,
                _turn: None,
                fast: None,
            };
            match run(&mut target, state, op)? {
                Outcome::Appended(id) => Ok(Some(id)),
                Outcome::Unchanged => Ok(None),
                other => Err(Error::Internal {
                    what: format!("a write on an open log ended as {other:?}"),
                }),
            }
        })
    }
}
