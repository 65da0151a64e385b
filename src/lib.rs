//! # session-state
//!
//! Durable, branch-aware state for agent extensions, stored **inside the Pi coding
//! agent's own session log**. Each state change is a Pi `custom` entry appended to the
//! session tree; the value at any position is the fold of the events on the path from the
//! root, so a fork inherits the state at its fork point and siblings never see each
//! other's writes. A SQLite projection caches the folds so reads stay fast in any process.
//!
//! ```no_run
//! use session_state::{Scope, SessionLog, Store, StoreOptions};
//!
//! let store = Store::open(StoreOptions::new())?;          // one handle: database + lock
//! let todo = store.state::<Vec<String>>("todo", Scope::Branch)?; // a cheap typed key
//! let mut log = SessionLog::open("session.jsonl")?;
//! todo.write(&mut log, &vec!["review".to_string()])?;      // durable when it returns
//! assert_eq!(todo.read(&log)?, Some(vec!["review".to_string()]));
//! # Ok::<(), session_state::Error>(())
//! ```
//!
//! Layers point one way (`docs/architecture.md`; `tests/architecture.rs` checks it), each
//! naming only those before it: `json` (the codec), `settings` (the database's location),
//! `sqlite` → `lock` (the write lock) → `error` → `log` (docs/spec.md §2: bytes ↔
//! entries, durable append) → `tree` (petgraph) → `state` (envelope, index, fold) →
//! `projection` (the SQLite cache) → `persistence` (the seam and its backends) → `store`
//! (the handle, the write transaction, [`SessionState`]) → `inspect` → the CLI. Every
//! module is private; this crate root is the public surface, plus two namespaces of
//! functions: [`json`] (the lossless JSON codec Pi's strings need) and [`inspect`]
//! (read-only views for tools).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::unwrap_used)]

mod error;
pub mod inspect;
pub mod json;
mod lock;
mod log;
mod persistence;
mod projection;
mod settings;
mod sqlite;
mod state;
mod store;
mod sync;
mod tree;

pub use error::{BackendError, DatabaseError, Error, Location, Result, StoreError};
pub use lock::{Holder, LEASE, Liveness, LockError, LockRow, LockStatus, PresenceStatus};
pub use log::NewEntry;
pub use log::entry::{EntryType, Header, Role};
pub use log::header::{MAX_SESSION_ID_BYTES, read_header};
pub use log::io::{AppendFile, FileIdentity, FileSystem, StdFileSystem};
pub use log::reader::{Finding, FindingKind, MAX_HEADER_LINE, ReadMode, Severity};
#[cfg(feature = "postgres")]
pub use persistence::{DEFAULT_LOCK_WAIT, POSTGRES_SCHEMA_VERSION, PostgresStore};
pub use persistence::{
    DEFAULT_RETRY_WINDOW, HEADER_SCAN_LIMIT, INTERRUPTED_TOOL_RESULT, ImportReport, LineVisitor,
    ListProblem, ListedSession, Listing, Loaded, PiJsonlStore, RedactedUrl, SessionStore, Sessions,
    SqliteStore, export_session, import_file, list_sessions, open_store_url, pi_session_dir_name,
    pi_session_file_name, read_stored_log,
};
pub use persistence::{ResolveError, resolve_session};
pub use projection::CatchUp;
pub use settings::{
    AGENT_DIR_ENV, Fallback, LocationInputs, LocationSource, ProjectTrust, ResolvedLocation,
    SettingsDiagnostic, SettingsError, SettingsProblem, agent_dir, default_database_path,
    resolve_location,
};
pub use state::envelope::{
    ENVELOPE_VERSION, Envelope, Op, STATE_PREFIX, Scope, VERSIONED_ENVELOPE,
};
pub use state::fold::HistoryEntry;
pub use state::{MAX_DEPTH, Migrate, StateKey, Unwritable, parse_scope, validate_plugin_id};
pub use store::state::{FileWriteStep, SessionState, StoredValue, TailWrite};
pub use store::{
    Appended, KeptSession, LastEvent, Peeked, PruneReport, PrunedSession, SessionStatus, Store,
    StoreOptions, StoredSession, WriteLock,
};
pub use tree::{EntryRef, LogOptions, Materialize, SessionLog};

/// The branch key of the log's active leaf (docs/spec.md §3): a stable id for "this branch".
/// From the leaf, climb while the parent has exactly one child; the node reached (or the
/// root) is the key. `None` when the log has no leaf. See also
/// [`SessionLog::branch_key_of`].
pub fn branch_key(log: &SessionLog) -> Option<&str> {
    log.leaf_id().and_then(|leaf| log.branch_key_of(leaf).ok())
}

// The README's Rust example is compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
