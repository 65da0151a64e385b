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
//! (the handle, the write transaction, [`SessionState`]) → `inspect` → `cli` (the command
//! line: the `session-state` binary calls [`cli::main`]).
//!
//! The crate root holds what a host needs: the [`Store`] handle and its typed keys, the
//! session log, the persistence seam and its backends, and the errors. What tools need
//! beyond that lives in named modules: [`json`] (the lossless JSON codec Pi's strings
//! need), [`inspect`] (read-only views), [`settings`] (where the projection database
//! is), [`lock`] (the write lock's rows and judgements), [`maintenance`] (status and prune reports) and [`format`](mod@format) (the file format's
//! constants and checks). `docs/api.md` lists every public
//! name, and `tests/api_surface.rs` checks that it does.
// Only `os` (the system calls std does not offer) allows it, module by module.
#![deny(unsafe_code)]
#![warn(missing_docs)]
// A type a public item returns or holds has a public name (`docs/api.md` lists it); the
// test seam (`__internal`) is exempt: it names only its functions.
#![cfg_attr(not(feature = "__internal"), warn(unnameable_types))]
#![deny(clippy::unwrap_used)]

#[cfg(feature = "cli")]
pub mod cli;
mod error;
pub mod inspect;
pub mod json;
pub mod lock;
mod log;
mod os;
mod persistence;
mod projection;
pub mod settings;
mod sqlite;
mod state;
mod store;
mod sync;
mod tree;

pub use error::{
    AppendError, BackendError, DatabaseError, Error, InvalidLog, InvalidSessionId, Location,
    LogError, OpenError, ProjectionError, RawLineError, Result, RuleError, StateError, StoreError,
    UnknownEntry,
};
pub use log::NewEntry;
pub use log::entry::{EntryType, Header, Role};
pub use log::reader::{Finding, FindingKind, ReadMode, Severity};
#[cfg(feature = "postgres")]
pub use persistence::PostgresStore;
pub use persistence::{
    ImportReport, ListProblem, ListedSession, Listing, Loaded, PiJsonlStore, SessionStore,
    Sessions, SqliteStore,
};
pub use projection::CatchUp;
pub use state::envelope::{Op, Scope};
pub use state::fold::HistoryEntry;
pub use state::{Decided, Invalid, Migrate, StateKey, Unwritable};
#[cfg(feature = "__internal")]
#[doc(hidden)]
pub use store::state::TailWrite;
pub use store::state::{On, SessionState, StoredValue};
pub use store::{Appended, LastEvent, Store, StoreOptions, StoredSession, WriteLock};
pub use tree::{EntryRef, LogOptions, Materialize, SessionLog};

/// The session file's format as data (docs/spec.md §2–§3): the state envelope, its
/// `customType` prefix and versions, and the limits and checks every reader and writer
/// applies, for a tool that reads or writes the file on its own.
pub mod format {
    pub use crate::log::header::{MAX_SESSION_ID_BYTES, read_header};
    pub use crate::log::reader::MAX_HEADER_LINE;
    pub use crate::persistence::INTERRUPTED_TOOL_RESULT;
    pub use crate::state::envelope::{Envelope, STATE_PREFIX};
    pub use crate::state::{MAX_DEPTH, validate_plugin_id};
}

/// Not public API (a test hook of the `__internal` feature; `docs/api.md`): the I/O seam
/// under every byte the log writer puts on disk. `LogOptions::file_system` and
/// `StoreOptions::file_system` take one, so a test injects short writes, failed syncs and
/// a full disk.
#[cfg(feature = "__internal")]
#[doc(hidden)]
pub mod io {
    pub use crate::log::io::{AppendFile, FileIdentity, FileSystem, OpenStatus, StdFileSystem};
}

/// What the `status` and `prune` commands report: a session's lock and presence rows
/// ([`Store::session_status`](crate::Store::session_status)), a read that never creates a
/// database ([`Peeked`](maintenance::Peeked)), and the rows
/// [`Store::prune`](crate::Store::prune) deletes or keeps.
pub mod maintenance {
    pub use crate::store::{KeptSession, Peeked, PruneReport, PrunedSession, SessionStatus};
}

/// Not public API (no semver promise, hidden from the docs, not in `docs/api.md`'s count):
/// the command line's own views (`replay`, `verify`'s integrity check) and the one walk
/// under them, reached by the crate's tests, benchmarks and fuzz targets through the
/// `__internal` feature.
#[cfg(feature = "__internal")]
#[doc(hidden)]
pub mod __internal {
    pub use crate::inspect::report::{IntegrityKind, ReplayValue, integrity, replay, replay_tips};
    pub use crate::inspect::walk::{fold_tips, state_event};
}

// The README's Rust example is compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
