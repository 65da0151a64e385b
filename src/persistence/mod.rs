//! The persistence seam (SPEC §8): where a host keeps its sessions.
//!
//! [`SessionStore`] is the small trait a host programs against (after
//! `@deepseek-ai/dsh-session-persistence`): `locate`, `create`, `append`, `load`, `list`.
//! [`PiJsonlStore`] is its first backend: Pi's own session directory, one JSONL file per
//! session, laid out exactly as Pi 1.x lays it out, so Pi lists and resumes the sessions a
//! host writes and the host loads the ones Pi writes.
//!
//! ```no_run
//! use serde_json::json;
//! use session_state::Header;
//! use session_state::{PiJsonlStore, SessionStore};
//!
//! let store = PiJsonlStore::new("/home/me/.pi/agent/sessions");
//! let header = Header::new("0195f1d0-7c4e-7000-8000-000000000001", "/home/me/project");
//! store.create(header.clone())?;                     // in memory: not listed yet
//! let user = json!({"type": "message",
//!                   "message": {"role": "user", "content": "hi", "timestamp": 0}});
//! let next = store.append(header.id(), 0, &[user])?; // the file exists, durably
//! assert_eq!(next, 1);
//! let loaded = store.load(header.id())?;
//! assert_eq!(loaded.next_seq(), 1);
//! # Ok::<(), session_state::Error>(())
//! ```
//!
//! See `docs/persistence.md` for the rules in prose.

use crate::error::{Error, Result};
use crate::log::entry::Header;
use crate::tree::SessionLog;
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;

mod interrupted;
mod lines;
mod pi_jsonl;
#[cfg(feature = "postgres")]
mod postgres;
mod prefix;
mod sqlite_store;
#[cfg(feature = "postgres")]
mod tls;
mod transfer;
mod url;

pub use interrupted::INTERRUPTED_TOOL_RESULT;
pub(crate) use lines::check_session_id;
pub(crate) use lines::event_lines;
pub use pi_jsonl::{HEADER_SCAN_LIMIT, PiJsonlStore, pi_session_dir_name, pi_session_file_name};
#[cfg(feature = "postgres")]
pub use postgres::{DEFAULT_LOCK_WAIT, Imported, POSTGRES_SCHEMA_VERSION, PostgresStore};
pub use prefix::{ResolveError, resolve_session};
pub use sqlite_store::SqliteStore;
pub use transfer::{ImportReport, export_session, import_file};
pub use url::{RedactedUrl, open_store_url};

/// Where sessions are kept: the seam between a host and its storage (SPEC §8).
///
/// **Sequence numbers.** The entries of a session after its header are numbered 0, 1, 2,
/// … in storage order; a session's *next* sequence number is its entry count. Every
/// `append` states the sequence number its first event will get, and is refused unless
/// that is the stored next one, so two writers (or a writer retrying after a failure)
/// can never interleave or duplicate events unnoticed.
///
/// **Events** are JSON objects with a string `type`, laid out like a Pi entry without its
/// `id`, `parentId` and `timestamp` (the store assigns those): for example
/// `{"type":"message","message":{…}}` or `{"type":"custom","customType":"x","data":…}`.
/// [`SessionStoreExt::append_serialized`] takes any `Serialize` value instead.
///
/// The trait is object safe: hosts may hold a `Box<dyn SessionStore>`.
pub trait SessionStore: Send + Sync {
    /// Where the session of `header` lives, computed from the header alone (no I/O).
    /// `None` for backends that do not keep one file per session, and for a header that
    /// cannot name a file (no `cwd` or `timestamp`, or a path separator in the id).
    fn locate(&self, header: &Header) -> Option<PathBuf>;

    /// Registers a new session. Nothing is stored until its first non-empty `append`:
    /// a session that is never appended to is absent from [`SessionStore::list`], and a
    /// process that ends before the first append leaves nothing behind.
    ///
    /// Refused when the header cannot be stored ([`Error::UnsupportedNewVersion`],
    /// [`Error::InvalidSessionId`], [`Error::UnlocatableHeader`]: no `cwd` or
    /// `timestamp`) or the session already exists ([`Error::AlreadyExists`] on disk,
    /// [`Error::AlreadyCreated`] in this store).
    fn create(&self, header: Header) -> Result<()>;

    /// Appends `events` to the session, the first one with sequence number `first_seq`,
    /// each as a child of the previous one (the first as a child of the session's last
    /// entry). Returns the session's next sequence number.
    ///
    /// **Durability:** when this returns `Ok`, every event is on stable storage.
    ///
    /// **Refusals** (nothing is written): `first_seq` is not the stored next sequence
    /// number ([`Error::SequenceMismatch`] names both), or an event is not acceptable
    /// ([`Error::InvalidEvent`]: not an object, no string `type`, a `session` type, or an
    /// `id`, `parentId` or `timestamp` field; the error names the event by its index in
    /// `events` and its sequence number). An unknown session is
    /// [`Error::SessionNotFound`] (or [`Error::AmbiguousSession`] when several files hold
    /// it).
    ///
    /// **Failure midway:** the first append of a new session is all or nothing. Later,
    /// each event is durable on its own: after an I/O error, some leading events of the
    /// batch may be stored. [`SessionStore::load`] tells the next sequence number, and the
    /// sequence check makes the retry safe.
    fn append(&self, session_id: &str, first_seq: u64, events: &[Value]) -> Result<u64>;

    /// Reads a session: its header and its whole contiguous log.
    ///
    /// A complete interrupted final turn (the last assistant message on the active branch
    /// made tool calls that have no result) is kept, and closed: one error tool result
    /// per missing result is appended, durably, before this returns (see
    /// `docs/persistence.md` for the exact rule). Only a torn final record is discarded;
    /// corruption in the committed prefix, an invalid structure and an unknown format
    /// version are refused with the reader's error (file, line, byte offset). An unknown
    /// session is [`Error::SessionNotFound`], one created but never appended to
    /// [`Error::NotMaterialized`].
    fn load(&self, session_id: &str) -> Result<Loaded>;

    /// The headers of every stored session, without parsing the sessions themselves.
    /// Files that are not readable sessions are left out (a backend may report them
    /// elsewhere: see [`PiJsonlStore::scan`]).
    fn list(&self) -> Result<Vec<Header>>;

    // Provided: what import, export, forks and the local cache need beyond the five
    // operations. A backend gets working defaults (built on `load`, so they read the
    // whole session) or a clear refusal, and overrides them to be fast or to support them.

    /// The session's header line as stored, without its newline (byte for byte where the
    /// backend keeps it). Default: the loaded header, as [`Header::to_line`] prints it.
    fn header_line(&self, session_id: &str) -> Result<String> {
        let mut line = self.load(session_id)?.header().to_line();
        line.pop();
        Ok(line)
    }

    /// Calls `visit(seq, line)` for every stored entry with a sequence number from
    /// `from_seq` on, in order (each line without its newline, byte for byte), and returns
    /// the session's next sequence number as of that read. A `from_seq` at or past the end
    /// visits nothing, so `read_lines(id, u64::MAX, …)` asks for the next sequence number
    /// alone. An error of `visit` ends the read and is returned.
    ///
    /// Default: through [`SessionStore::load`] (which may close an interrupted turn);
    /// a backend with rows reads only the rows asked for.
    fn read_lines(
        &self,
        session_id: &str,
        from_seq: u64,
        visit: &mut dyn FnMut(u64, &str) -> Result<()>,
    ) -> Result<u64> {
        let loaded = self.load(session_id)?;
        let log = loaded.log();
        for (seq, entry) in log.entries().enumerate() {
            if (seq as u64) < from_seq {
                continue;
            }
            visit(seq as u64, &log.raw_line(entry.id())?)?;
        }
        Ok(loaded.next_seq())
    }

    /// Appends complete entry lines (with their own `id`, `parentId` and `timestamp`),
    /// kept byte for byte, the first with sequence number `first_seq`: how `import`
    /// copies a Pi session in, and how a write with `--at` forks (its parent is any
    /// entry, not only the last). The rules of [`SessionStore::append`] hold (the sequence
    /// check, durability, nothing written on a refusal); besides, each line must be one
    /// JSON object with a string `type` other than `session`, a new `id`, a `parentId`
    /// that is null or names an entry of the session (or an earlier line of the batch)
    /// and a `timestamp` ([`Error::InvalidEvent`] names the line). The first append to a
    /// created session creates it, as `append` does.
    ///
    /// Default: [`Error::Unsupported`].
    fn append_lines(&self, session_id: &str, first_seq: u64, lines: &[String]) -> Result<u64> {
        let _ = (session_id, first_seq, lines);
        Err(Error::Unsupported {
            store: self.describe(),
            what: "appending complete entry lines (import, a write with --at)",
        })
    }

    /// The store, for messages and cache keys: never a password. Default: the type's
    /// name.
    fn describe(&self) -> String {
        std::any::type_name::<Self>().to_owned()
    }
}

/// [`SessionStore::append`] for events of any `Serialize` type.
pub trait SessionStoreExt: SessionStore {
    /// Serializes `events` to JSON and appends them. An event that cannot be serialized
    /// (a map with non-string keys, a `Serialize` impl that fails) is refused with
    /// [`Error::EventNotSerializable`], naming its index and sequence number; then
    /// nothing is written.
    ///
    /// ```no_run
    /// # use session_state::{PiJsonlStore, SessionStoreExt};
    /// #[derive(serde::Serialize)]
    /// struct Note { r#type: &'static str, #[serde(rename = "customType")] custom_type: &'static str }
    /// let store = PiJsonlStore::new("sessions");
    /// store.append_serialized("0195f1d0", 3, &[Note { r#type: "custom", custom_type: "note" }])?;
    /// # Ok::<(), session_state::Error>(())
    /// ```
    fn append_serialized<E: Serialize>(
        &self,
        session_id: &str,
        first_seq: u64,
        events: &[E],
    ) -> Result<u64> {
        let values = events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                serde_json::to_value(e).map_err(|source| Error::EventNotSerializable {
                    session_id: session_id.into(),
                    index: i,
                    seq: first_seq + i as u64,
                    source,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.append(session_id, first_seq, &values)
    }
}

impl<S: SessionStore + ?Sized> SessionStoreExt for S {}

/// A loaded session (what [`SessionStore::load`] returns): its header and its entries,
/// as a [`SessionLog`], the tree view every backend can give. The Pi JSONL backend opens
/// the session's file; a backend without files renders its header and entries as JSONL
/// lines and reads them with [`LogOptions::read`](crate::LogOptions::read), which gives
/// a *detached* log (see `docs/persistence.md`, "How a backend gives the tree its
/// entries"). Where a file backend keeps the session: [`SessionStore::locate`] of the
/// header, or [`PiJsonlStore::scan`].
#[derive(Debug)]
pub struct Loaded {
    log: SessionLog,
    closed_tool_calls: Vec<String>,
}

impl Loaded {
    /// What a backend's [`SessionStore::load`] returns: the session's `log`, read after
    /// the load closed an interrupted turn, and the `toolCallId`s that load closed.
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

    /// The log itself. From the Pi JSONL backend, a log on the file with a durable
    /// appender: appending through it and through the store is safe in turn (each checks
    /// the file's length first and reads what the other wrote), but not concurrently.
    /// From a backend without files, a detached log, which refuses writes
    /// ([`Error::Detached`]): append through the store.
    pub fn into_log(self) -> SessionLog {
        self.log
    }

    /// The event with sequence number `seq`: the entry's whole line as JSON, `id`,
    /// `parentId` and `timestamp` included. Reads the line from the log's storage (the
    /// file); message bodies are never held in memory otherwise. A `seq` past the end is
    /// [`Error::NoSuchEvent`].
    pub fn event(&self, seq: u64) -> Result<Value> {
        let Some(entry) = usize::try_from(seq)
            .ok()
            .and_then(|i| self.log.entries().nth(i))
        else {
            return Err(Error::NoSuchEvent {
                session_id: self.header().id().to_owned(),
                seq,
                next_seq: self.next_seq(),
            });
        };
        let line = self.log.raw_line(entry.id())?;
        crate::json::from_str(&line).map_err(|e| Error::InvalidEntry {
            path: self.log.path().to_path_buf(),
            at: entry.location(),
            id: Some(entry.id().to_owned()),
            detail: e.to_string(),
        })
    }
}

/// One session found by [`PiJsonlStore::scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSession {
    /// Its header (line 1).
    pub header: Header,
    /// Its file.
    pub path: PathBuf,
}

/// A `*.jsonl` file (or a directory) that [`PiJsonlStore::scan`] could not list.
#[derive(Debug)]
pub struct ListProblem {
    /// The file or directory.
    pub path: PathBuf,
    /// Why: no header on line 1, an unsupported version, an I/O error, ...
    pub error: Error,
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
