//! The crate's one way to take a mutex, and the map of its in-memory memos. A leaf: it
//! imports nothing of the crate; `persistence`, `state` and `store` use it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// The map of the in-memory memos (the fold memo, the state index, a store's memos by
/// log), hashed with foldhash rather than SipHash, which cost a write more than a tenth of
/// its instructions. Their keys are node numbers and pointers, and plugin ids, which a
/// session file names: foldhash's seed is random per process, so a file cannot choose
/// ids that collide (it is "minimally DoS-resistant"). The maps a file fills entry by
/// entry (ids, customTypes) keep SipHash.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Locks `m`, whether or not a thread panicked while holding it. The library never
/// panics on input, so a poisoned mutex means a caller's panic unwound through one of its
/// calls; what the crate keeps behind a mutex (caches of what a store holds, a
/// connection, a prepared statement's state) is checked against the store or the file
/// before it is relied on, so the next caller goes on instead of panicking in turn.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
