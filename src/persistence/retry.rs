//! The crate's one retry rule for stores: random ("full jitter") exponential backoff.
//!
//! - A **lost race** (another writer took the session's next sequence number first) is
//!   decided again at once on what that writer stored, after a pause drawn uniformly
//!   from `[0, min(2^n ms, 50 ms)]` (n the number of races lost so far), at most
//!   [`MAX_RACES`] times: writers that collide once spread out instead of colliding
//!   again in lockstep. A race lost by an attempt that took no turn at the store is
//!   counted the same, with no pause: the next attempt waits for its turn instead.
//! - A **transient failure** (the store unavailable or busy:
//!   [`StoreError::is_transient`]) is tried again after the same kind of pause, capped
//!   at 250 ms, for as long as the store's [`SessionStore::retry_window`] lasts, then
//!   refused with its cause ([`Error::StoreUnavailable`]).

use super::SessionStore;
use super::lines::line_id;
use crate::error::{Error, StoreError};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// How many lost races a write tries before it gives up ([`Error::Contended`]).
pub(crate) const MAX_RACES: u32 = 32;

/// A random number of microseconds in `[0, max]`.
fn jitter_us(max: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    // uuid's v4 draws from the OS's random source: no extra dependency for a pause.
    let r = (uuid::Uuid::new_v4().as_u128() & u128::from(u64::MAX)) as u64;
    r % (max + 1)
}

/// The pause before attempt `n + 1` (n ≥ 1 failures so far), capped at `cap`.
pub(crate) fn pause(n: u32, cap: Duration) -> Duration {
    let ceiling = Duration::from_millis(1u64 << n.min(16)).min(cap);
    Duration::from_micros(jitter_us(ceiling.as_micros() as u64))
}

/// The retries of one call on one store: counts lost races and transient failures, and
/// sleeps between attempts.
pub(crate) struct Retry<'s> {
    store: &'s dyn SessionStore,
    started: Instant,
    races: u32,
    failures: u32,
}

impl<'s> Retry<'s> {
    pub(crate) fn new(store: &'s dyn SessionStore) -> Retry<'s> {
        Retry {
            store,
            started: Instant::now(),
            races: 0,
            failures: 0,
        }
    }

    /// After a lost race: `Err` once [`MAX_RACES`] are lost, else a short random pause.
    pub(crate) fn lost_race(&mut self, session_id: &str) -> Result<(), Error> {
        self.count_race(session_id)?;
        std::thread::sleep(pause(self.races, Duration::from_millis(50)));
        Ok(())
    }

    /// Counts a lost race with no pause: `Err` once [`MAX_RACES`] are lost. For an
    /// attempt that took no turn at the store, whose next attempt waits for its turn.
    pub(crate) fn count_race(&mut self, session_id: &str) -> Result<(), Error> {
        self.races += 1;
        if self.races >= MAX_RACES {
            return Err(Error::Contended {
                session_id: session_id.to_owned(),
                attempts: self.races,
            });
        }
        Ok(())
    }

    /// After a failure: a transient one is waited out (a pause) while the store's retry
    /// window lasts; anything else, or a transient failure past the window, is returned.
    pub(crate) fn failed(&mut self, e: StoreError) -> Result<(), Error> {
        if !e.is_transient() {
            return Err(e.into());
        }
        self.failures += 1;
        let waited = self.started.elapsed();
        let window = self.store.retry_window();
        if waited >= window {
            return Err(Error::StoreUnavailable {
                store: self.store.describe(),
                waited_ms: waited.as_millis() as u64,
                attempts: self.failures,
                source: Box::new(e),
            });
        }
        let left = window - waited;
        std::thread::sleep(pause(self.failures + 2, Duration::from_millis(250)).min(left));
        Ok(())
    }

    /// Runs `f` until it succeeds or fails for good, waiting out transient failures.
    pub(crate) fn transient<T>(
        &mut self,
        mut f: impl FnMut() -> Result<T, StoreError>,
    ) -> Result<T, Error> {
        loop {
            match f() {
                Ok(v) => return Ok(v),
                Err(e) => self.failed(e)?,
            }
        }
    }
}

/// Where an append of unknown outcome ended, told by what the store holds at the position
/// it was for: every writer of a store resolves an unknown outcome here (the state write
/// pipeline, `store/write.rs`, and [`append_until_known`], which every other append to a
/// store goes through).
#[derive(Debug)]
pub(crate) enum Landed {
    /// The line at the position is the append's own (its first entry's id).
    Ours,
    /// Another writer's line is there: the append lost the race.
    Lost,
    /// Nothing is there: the append did not get in; the transient failure it is.
    NotWritten(StoreError),
}

impl Landed {
    /// The append of unknown outcome `e` judged by what the store holds at its position:
    /// `found` is whether the line there is the append's own (`None`: nothing there).
    pub(crate) fn of(e: StoreError, found: Option<bool>) -> Landed {
        match found {
            Some(true) => Landed::Ours,
            Some(false) => Landed::Lost,
            None => Landed::NotWritten(not_written(e)),
        }
    }
}

/// What identifies an append when it is read back ([`append_until_known`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mark<'a> {
    /// The id of its first entry, stored at the append's position.
    Entry(&'a str),
    /// A new session without entries: its header line.
    Header(&'a str),
}

/// An append that [`append_until_known`] gave up on: the error, and whether the append's
/// outcome is still unknown (it could not be read back), or known not to have stored it.
#[derive(Debug)]
pub(crate) struct Unsettled {
    pub(crate) error: Error,
    pub(crate) unknown: bool,
}

impl From<Box<Unsettled>> for Error {
    fn from(u: Box<Unsettled>) -> Error {
        u.error
    }
}

/// The one loop around an append of unknown outcome: sends `send` (an append at `at` of
/// `session_id`, or the creation of a session) until its outcome is known, and returns
/// the store's next sequence number (`landed`: the one after the append, when it is known
/// to have landed by reading it back).
///
/// - An append of unknown outcome ([`StoreError::Indeterminate`]) is read back at `at`
///   and judged by [`Landed::of`]: its own line there means it landed; another writer's
///   means it lost the race, and the next attempt is refused by the store with its own
///   error; nothing there is the transient failure it is.
/// - A transient failure is waited out ([`Retry::failed`]); anything else is returned.
/// - After a failed attempt, the store's refusal of the position
///   ([`StoreError::SequenceMismatch`], [`StoreError::AlreadyExists`]) may be that
///   attempt's own success: read back, it is one when the line there is the append's.
pub(crate) fn append_until_known(
    store: &dyn SessionStore,
    retry: &mut Retry<'_>,
    session_id: &str,
    at: u64,
    mark: Mark<'_>,
    landed: u64,
    mut send: impl FnMut() -> Result<u64, StoreError>,
) -> Result<u64, Box<Unsettled>> {
    // Boxed: an `Error` is large (on Windows above clippy's bound for an `Err`).
    let sure = |error| {
        Box::new(Unsettled {
            error,
            unknown: false,
        })
    };
    let doubt = |error| {
        Box::new(Unsettled {
            error,
            unknown: true,
        })
    };
    // Whether the line (or header) at the position is the append's own; `None`: nothing.
    let read_back = |retry: &mut Retry<'_>| -> Result<Option<bool>, Error> {
        let found = match mark {
            Mark::Entry(id) => read_id_at(store, session_id, at, retry).map(|f| f.map(|f| f == id)),
            Mark::Header(line) => retry
                .transient(|| store.header_line(session_id))
                .map(|stored| Some(stored == line)),
        };
        match found {
            // No session: nothing of the append is there.
            Err(Error::Store(StoreError::NotFound { .. })) => Ok(None),
            found => found,
        }
    };
    let mut failed_before = false;
    loop {
        match send() {
            Ok(next) => return Ok(next),
            Err(e @ StoreError::Indeterminate { .. }) => {
                match Landed::of(e, read_back(retry).map_err(doubt)?) {
                    Landed::Ours => return Ok(landed),
                    // Another writer's line (or session): the next attempt is refused with
                    // the store's own error.
                    Landed::Lost => {}
                    Landed::NotWritten(e) => retry.failed(e).map_err(sure)?,
                }
            }
            Err(e @ (StoreError::SequenceMismatch { .. } | StoreError::AlreadyExists { .. }))
                if failed_before =>
            {
                return match read_back(retry).map_err(doubt)? {
                    Some(true) => Ok(landed),
                    _ => Err(sure(e.into())),
                };
            }
            Err(e) => retry.failed(e).map_err(sure)?,
        }
        failed_before = true;
    }
}

/// An append of unknown outcome that the store shows did not get in: the transient
/// failure it is (the call may try again).
fn not_written(e: StoreError) -> StoreError {
    match e {
        StoreError::Indeterminate { store, source, .. } => StoreError::Unavailable {
            store,
            action: "appending (the append did not commit)".into(),
            source,
        },
        e => e,
    }
}

/// The id of the entry stored at `seq`, if any: [`stored_id_at`], reading back with `retry` waiting out a store that is unavailable:
/// how an append of unknown outcome is resolved ([`Landed::of`]).
pub(crate) fn read_id_at(
    store: &dyn SessionStore,
    session_id: &str,
    seq: u64,
    retry: &mut Retry<'_>,
) -> Result<Option<String>, Error> {
    retry.transient(|| stored_id_at(store, session_id, seq))
}

/// Whether the stored line before `next_seq` is the entry `after` (`None`: none there, as
/// at the start of a session), read back from the store.
pub(crate) fn stored_before_is<S: SessionStore + ?Sized>(
    store: &S,
    session_id: &str,
    next_seq: u64,
    after: Option<&str>,
) -> std::result::Result<bool, StoreError> {
    let last = match next_seq.checked_sub(1) {
        Some(seq) => stored_id_at(store, session_id, seq)?,
        None => None,
    };
    Ok(last.as_deref() == after)
}

/// The id of the stored line at `seq` (`None`: no line there, or one without an id).
fn stored_id_at<S: SessionStore + ?Sized>(
    store: &S,
    session_id: &str,
    seq: u64,
) -> std::result::Result<Option<String>, StoreError> {
    let mut found = None;
    store.read_lines(session_id, seq, &mut |s, line| {
        if s == seq {
            found = line_id(line);
        }
        ControlFlow::Break(())
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_are_random_and_bounded() {
        let cap = Duration::from_millis(50);
        let pauses: Vec<Duration> = (0..200).map(|_| pause(10, cap)).collect();
        assert!(pauses.iter().all(|p| *p <= cap));
        let distinct: std::collections::HashSet<_> = pauses.iter().collect();
        assert!(distinct.len() > 100, "jittered: {}", distinct.len());
        assert!(pause(1, cap) <= Duration::from_millis(2));
        assert_eq!(jitter_us(0), 0);
    }
}
