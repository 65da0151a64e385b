//! The persistence seam: where a host keeps its sessions.
//!
//! Two halves, as redb's `StorageBackend` and `Database`:
//!
//! - [`SessionStore`] is what a **backend** implements: storage primitives only (create a
//!   session with its first lines, list the header lines, read a header line, read entry
//!   lines from a sequence number, append complete lines at an expected sequence
//!   number). Three backends: [`PiJsonlStore`] (Pi's own session directory, one JSONL
//!   file per session), [`SqliteStore`] (one database file) and `PostgresStore` (one
//!   server, many machines).
//! - [`Sessions`] is what a **host** programs against (after
//!   `@deepseek-ai/dsh-session-persistence`): the crate's rules, once, on top of any
//!   backend: lazy creation, event lines and their ids, the session-id rule, header
//!   checks, the one JSONL reader, and [`Sessions::load`], which a host resuming a
//!   session calls (it closes an interrupted turn).
//!
//! State reads and writes on a stored session ([`crate::StoredSession`]) use the
//! primitives directly and never `load`: they add nothing to a session but their own
//! event.
//!
//! ```no_run
//! use serde_json::json;
//! use session_state::{Header, PiJsonlStore, Sessions};
//!
//! let sessions = Sessions::new(PiJsonlStore::new("/home/me/.pi/agent/sessions"));
//! let header = Header::new("0195f1d0-7c4e-7000-8000-000000000001", "/home/me/project");
//! sessions.create(header.clone())?;                     // in memory: not listed yet
//! let user = json!({"type": "message",
//!                   "message": {"role": "user", "content": "hi", "timestamp": 0}});
//! let next = sessions.append(header.id(), 0, &[user])?; // stored, durably
//! assert_eq!(next, 1);
//! let loaded = sessions.load(header.id())?;
//! assert_eq!(loaded.next_seq(), 1);
//! # Ok::<(), session_state::Error>(())
//! ```
//!
//! See `docs/persistence.md` for the rules in prose and `docs/backends.md` for the
//! backends.

use crate::error::{InvalidLog, LogError, OpenError, Result, RuleError, StoreError};
use crate::log::entry::Header;
use crate::tree::SessionLog;
use serde_json::Value;
use std::ops::ControlFlow;
use std::path::PathBuf;

mod interrupted;
mod lines;
mod pi_jsonl;
mod pi_names;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "cli")]
mod prefix;
mod read;
mod redact;
pub(crate) mod retry;
mod sessions;
mod sqlite_store;
#[cfg(feature = "postgres")]
mod tls;
mod transfer;
mod url;

pub use interrupted::INTERRUPTED_TOOL_RESULT;
pub use pi_jsonl::PiJsonlStore;
#[cfg(feature = "cli")]
pub(crate) use pi_jsonl::session_files;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "cli")]
pub(crate) use prefix::{ResolveError, resolve_session};
pub(crate) use read::read_stored_log;
pub(crate) use read::stored_label;
pub(crate) use retry::read_id_at;
pub use sessions::Sessions;
#[cfg(feature = "cli")]
pub(crate) use sessions::list_sessions;
pub use sqlite_store::SqliteStore;
pub use transfer::{ImportReport, export_session, import_file};
#[cfg(feature = "cli")]
pub(crate) use url::RedactedUrl;
pub use url::open_store_url;

/// How long a call retries a store that is unavailable or busy before it refuses, unless
/// the backend says otherwise ([`SessionStore::retry_window`]).
pub const DEFAULT_RETRY_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// The visitor of [`SessionStore::read_lines`], as the backends of this crate name it.
pub(crate) type LineVisitor<'a> = dyn FnMut(u64, &str) -> ControlFlow<()> + 'a;

/// A session's storage primitives: what a backend implements (see the module docs).
///
/// **Sequence numbers.** A session's entries after its header are numbered 0, 1, 2, …
/// in storage order; its *next* sequence number is its entry count. Lines are stored
/// byte for byte: [`SessionStore::read_lines`] gives back exactly what
/// [`SessionStore::create`] and [`SessionStore::append_lines`] were given.
///
/// **No policy.** A backend checks nothing about what a line means: the crate has
/// checked every line (its shape, its id, its parent) before it calls. A backend keeps
/// only its storage invariants: a sequence number is used once (the append is
/// conditional on the next one), an entry id once per session (a unique key), a create
/// never replaces a stored session, and a call that returns `Ok` is durable.
///
/// The trait is object safe: hosts and the CLI hold a `Box<dyn SessionStore>`.
pub trait SessionStore: Send + Sync {
    /// Stores a new session: its header line (byte for byte, without its newline) and
    /// its first entry lines (possibly none), all or nothing, durable when it returns.
    /// Returns the session's next sequence number (`lines.len()`). `header` is the
    /// parsed `header_line`, for backends that file sessions by their header.
    ///
    /// Refused, with nothing written: a session with this id is already stored
    /// ([`StoreError::AlreadyExists`]).
    fn create(
        &self,
        header: &Header,
        header_line: &str,
        lines: &[String],
    ) -> Result<u64, StoreError>;

    /// Every stored session's id and header line (without its newline), reading only
    /// the headers. Sessions stored with no entries are listed too.
    fn list(&self) -> Result<Vec<(String, String)>, StoreError>;

    /// The session's header line as stored, without its newline.
    fn header_line(&self, session_id: &str) -> Result<String, StoreError>;

    /// Calls `visit(seq, line)` for every stored entry with a sequence number from
    /// `from_seq` on, in order, until `visit` breaks; returns the session's next sequence
    /// number as of that read (one consistent snapshot). A `from_seq` at or past the end
    /// visits nothing, so `read_lines(id, u64::MAX, …)` asks for the next sequence number
    /// alone. The visitor is given the entry's sequence number and its line (without the
    /// newline), and answers: go on or stop.
    fn read_lines(
        &self,
        session_id: &str,
        from_seq: u64,
        visit: &mut (dyn FnMut(u64, &str) -> ControlFlow<()> + '_),
    ) -> Result<u64, StoreError>;

    /// Appends complete entry lines (each without its newline), the first with sequence
    /// number `first_seq`, all or nothing, durable when it returns; returns the next
    /// sequence number.
    ///
    /// Refused, with nothing written: `first_seq` is not the stored next sequence number
    /// ([`StoreError::SequenceMismatch`] names both), or a line's id is already stored
    /// ([`StoreError::IdTaken`]). An append whose outcome cannot be known (the
    /// connection broke after it was sent) is [`StoreError::Indeterminate`].
    fn append_lines(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
    ) -> Result<u64, StoreError>;

    /// Appends as [`SessionStore::append_lines`] does, for a writer that took no turn
    /// ([`SessionStore::begin_turn`]) and decided on what it knew of the session: only
    /// while the stored lines still end at `first_seq` with the entry `after` (`None`: no
    /// entries), and no writer holds a turn on the session or waits for one. `Ok(None)`:
    /// not so, and nothing was written; the writer takes its turn, reads what is new and
    /// decides again. A writer that asks for its turn while such an append is under way
    /// waits for it, so an append outside the turns never overtakes a writer in line. A
    /// store may instead take a turn for the append, waiting in line (PostgreSQL does for
    /// a batch of 64 lines or more, which goes in with `COPY`).
    ///
    /// A state write's first attempt appends this way, so a writer alone makes no round
    /// trip for a turn or for a read. Default, for a store without turns: the id at
    /// `first_seq - 1` is read back, then [`SessionStore::append_lines`] appends (a
    /// [`StoreError::SequenceMismatch`] is `Ok(None)`).
    fn append_lines_outside_turns(
        &self,
        session_id: &str,
        first_seq: u64,
        after: Option<&str>,
        lines: &[String],
    ) -> Result<Option<u64>, StoreError> {
        if !retry::stored_before_is(self, session_id, first_seq, after)? {
            return Ok(None);
        }
        match self.append_lines(session_id, first_seq, lines) {
            Ok(next) => Ok(Some(next)),
            Err(StoreError::SequenceMismatch { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The store, for messages and cache keys: never a password.
    fn describe(&self) -> String;

    /// Waits for this writer's turn on the session at the store, first come first served
    /// among the writers of every process and machine, and holds it until
    /// [`SessionStore::end_turn`]: a state write takes its turn from its decision to its
    /// append, so that writers take turns instead of racing for the next sequence number
    /// (a writer that keeps losing the race would be refused as contended). Waits at most
    /// the store's lock wait ([`StoreError::Busy`], retried within the retry window). A
    /// turn ends with the connection that holds it. Default: no turns (the writers race,
    /// and a loser decides again on what the winner stored).
    fn begin_turn(&self, session_id: &str) -> Result<(), StoreError> {
        let _ = session_id;
        Ok(())
    }

    /// Ends the turn [`SessionStore::begin_turn`] took (a failure to end it is logged:
    /// the turn then ends with its connection).
    fn end_turn(&self, session_id: &str) {
        let _ = session_id;
    }

    /// How long the crate retries this store when it is unavailable or busy
    /// ([`StoreError::is_transient`]) before it refuses. Default:
    /// 5 seconds; the PostgreSQL backend uses its lock wait.
    fn retry_window(&self) -> std::time::Duration {
        DEFAULT_RETRY_WINDOW
    }
}

/// A loaded session (what [`Sessions::load`] returns): its header and its entries as a
/// detached [`SessionLog`] (read from the store's lines by the log's reader; it refuses
/// writes: append through [`Sessions`]), and the tool calls the load closed.
#[derive(Debug)]
pub struct Loaded {
    log: SessionLog,
    closed_tool_calls: Vec<String>,
}

impl Loaded {
    /// A loaded session: its `log`, read after the load closed an interrupted turn, and
    /// the `toolCallId`s that load closed.
    pub fn new(log: SessionLog, closed_tool_calls: Vec<String>) -> Loaded {
        Loaded {
            log,
            closed_tool_calls,
        }
    }

    /// The header.
    pub fn header(&self) -> &Header {
        self.log.header()
    }

    /// The next sequence number: the number of entries, including the tool results
    /// appended to close an interrupted turn.
    pub fn next_seq(&self) -> u64 {
        self.log.len() as u64
    }

    /// The `toolCallId`s that had no result and were closed with an error tool result by
    /// this load, in the order of the assistant message. Empty almost always.
    pub fn closed_tool_calls(&self) -> &[String] {
        &self.closed_tool_calls
    }

    /// The entries as a tree, for reads: entries, the leaf, paths, raw lines, folds
    /// ([`crate::SessionState::read`]).
    pub fn log(&self) -> &SessionLog {
        &self.log
    }

    /// The log itself (detached: it refuses writes, [`crate::AppendError::Detached`]).
    pub fn into_log(self) -> SessionLog {
        self.log
    }

    /// The event with sequence number `seq`: the entry's whole line as JSON, `id`,
    /// `parentId` and `timestamp` included. A `seq` past the end is
    /// [`RuleError::NoSuchEvent`]; a line no longer JSON is
    /// [`InvalidLog::InvalidEntry`].
    pub fn event(&self, seq: u64) -> Result<Value, LogError> {
        let Some(entry) = usize::try_from(seq)
            .ok()
            .and_then(|i| self.log.entries().nth(i))
        else {
            return Err(RuleError::NoSuchEvent {
                session_id: self.header().id().to_owned(),
                seq,
                next_seq: self.next_seq(),
            }
            .into());
        };
        let line = self.log.raw_line(entry.id())?;
        crate::json::from_str(&line).map_err(|e| {
            InvalidLog::InvalidEntry {
                path: self.log.path().to_path_buf(),
                at: entry.location(),
                id: Some(entry.id().to_owned()),
                detail: e.to_string(),
            }
            .into()
        })
    }
}

/// One session found by [`PiJsonlStore::scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSession {
    /// Its header (line 1).
    pub header: Header,
    /// Line 1 as in the file, without its newline.
    pub header_line: String,
    /// Its file.
    pub path: PathBuf,
}

/// A `*.jsonl` file (or a directory) that [`PiJsonlStore::scan`] could not list.
#[derive(Debug)]
pub struct ListProblem {
    /// The file or directory.
    pub path: PathBuf,
    /// Why: no header on line 1, an unsupported version, an I/O error, ...
    pub error: OpenError,
}

/// What [`PiJsonlStore::scan`] found under the root.
#[derive(Debug, Default)]
pub struct Listing {
    /// Readable sessions, ordered by header timestamp, then id.
    pub sessions: Vec<ListedSession>,
    /// Files that look like sessions (`*.jsonl`) but whose first line is not a session
    /// header this crate reads, and directories that could not be read.
    pub problems: Vec<ListProblem>,
}
