//! One session of a backend, as the state operations and the projection name it
//! ([`StoredSession`]); what is done with it is in `backend.rs`.

use crate::error::Result;
use crate::log::reader::ReadMode;
use crate::persistence::{SessionStore, read_stored_log, stored_label};
use crate::projection::StoredLines;
use crate::tree::SessionLog;
use std::ops::ControlFlow;
use std::path::PathBuf;

/// One session of a backend, named for the projection: the store, a key that names it
/// among stores (its URL, redacted: the key is part of the rows' key and of messages,
/// so it must never hold a password), and the session id.
#[derive(Clone, Copy)]
pub struct StoredSession<'a> {
    pub(super) store: &'a dyn SessionStore,
    store_key: &'a str,
    pub(super) session_id: &'a str,
}

impl std::fmt::Debug for StoredSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSession")
            .field("store", &self.store_key)
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl<'a> StoredSession<'a> {
    /// The session `session_id` of `store`, whose redacted URL (or another stable name
    /// without secrets) is `store_key` (the URL with its password replaced by `***`).
    pub fn new(
        store: &'a dyn SessionStore,
        store_key: &'a str,
        session_id: &'a str,
    ) -> StoredSession<'a> {
        StoredSession {
            store,
            store_key,
            session_id,
        }
    }

    /// The backend.
    pub fn store(&self) -> &'a dyn SessionStore {
        self.store
    }

    /// The session id.
    pub fn session_id(&self) -> &'a str {
        self.session_id
    }

    /// The key the store is named by.
    pub fn store_key(&self) -> &'a str {
        self.store_key
    }

    /// The session in messages and reports: `<store>#<session id>`, the store as it
    /// describes itself (its URL without the password). The reads' errors name the
    /// session so ([`StoredSession::read_log`]).
    pub fn label(&self) -> PathBuf {
        stored_label(self.store, self.session_id)
    }

    /// The session as a detached log read by the log's reader (strict or salvage),
    /// without side effects: for reads at any entry,
    /// [`crate::SessionState::read_at`], [`crate::SessionState::history`] of an open log, [`SessionLog::branch_key_of`] and
    /// the inspection tools (`tree`, `replay`, `status`, `verify`).
    pub fn read_log(&self, mode: ReadMode) -> Result<SessionLog> {
        read_stored_log(self.store, self.session_id, mode)
    }
}

impl StoredLines for StoredSession<'_> {
    fn label(&self) -> PathBuf {
        StoredSession::label(self)
    }

    fn key(&self) -> String {
        format!("store:{}#{}", self.store_key, self.session_id)
    }

    fn header_line(&self) -> Result<String> {
        Ok(self.store.header_line(self.session_id)?)
    }

    fn read_lines(
        &self,
        from: u64,
        visit: &mut dyn FnMut(u64, &str) -> ControlFlow<()>,
    ) -> Result<u64> {
        Ok(self.store.read_lines(self.session_id, from, visit)?)
    }
}
