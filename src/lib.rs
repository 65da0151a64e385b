//! # session-state
//!
//! Durable, branch-aware state for agent extensions, stored **inside the Pi coding
//! agent's own session log**. Each state change is a Pi `custom` entry appended to the
//! session tree; the value at any position is the fold of the events on the path from the
//! root, so a fork inherits the state at its fork point and siblings never see each
//! other's writes. A SQLite projection caches the folds so reads stay fast in any process.
//!
//! ```no_run
//! use session_state::{Options, Scope, SessionLog, SessionState};
//!
//! let mut log = SessionLog::open("session.jsonl")?;
//! let todo = SessionState::<Vec<String>>::open(Options::new("todo").scope(Scope::Branch))?;
//! todo.write(&mut log, &vec!["review".to_string()])?;   // durable when it returns
//! assert_eq!(todo.read(&log)?, Some(vec!["review".to_string()]));
//! # Ok::<(), session_state::Error>(())
//! ```
//!
//! Modules follow SPEC.md's sections: [`log`] (§2, the file format), [`tree`] (the
//! petgraph view), [`state`] (§3, events and fold), [`projection`] (§4, SQLite),
//! [`lock`] (§6), [`settings`] (§4, location), [`persistence`] (§8, the seam).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::unwrap_used)]

pub mod error;
pub mod inspect;
pub mod json;
pub mod lock;
pub mod log;
pub mod persistence;
pub mod projection;
pub mod settings;
pub mod state;
pub mod tree;

pub use error::{Error, Location, Result};
pub use log::entry::{EntryType, Header, Role};
pub use log::io::{AppendFile, FileIdentity, FileSystem, StdFileSystem};
pub use log::reader::{Finding, FindingKind, ReadMode, Severity};
pub use log::{EntryRef, LogOptions, Materialize, NewEntry, SessionLog};
pub use persistence::{Loaded, PiJsonlStore, SessionStore, SessionStoreExt};
pub use projection::{CatchUp, Projection};
pub use settings::ProjectTrust;
pub use state::envelope::{Envelope, Op, Scope};
pub use state::fold::HistoryEntry;
pub use state::{Options, SessionState, validate_plugin_id};

/// The branch key of the log's active leaf (SPEC §3): a stable id for "this branch".
pub fn branch_key(log: &SessionLog) -> Option<&str> {
    log.branch_key()
}

// The README's Rust example is compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
