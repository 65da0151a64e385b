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
//! use session_state::persistence::{PiJsonlStore, SessionStore};
//!
//! let store = PiJsonlStore::new("/home/me/.pi/agent/sessions");
//! let header = Header::new("0195f1d0-7c4e-7000-8000-000000000001", "/home/me/project");
//! store.create(header.clone())?;                     // in memory: not listed yet
//! let user = json!({"type": "message",
//!                   "message": {"role": "user", "content": "hi", "timestamp": 0}});
//! let next = store.append(&header.id, 0, &[user])?;  // the file exists, durably
//! assert_eq!(next, 1);
//! let loaded = store.load(&header.id)?;
//! assert_eq!(loaded.next_seq, 1);
//! # Ok::<(), session_state::Error>(())
//! ```
//!
//! See `docs/persistence.md` for the rules in prose.

use crate::error::{Error, IoContext, Result};
use crate::log::entry::{EntryType, Header, Role};
use crate::log::header;
use crate::log::reader;
use crate::log::{LogOptions, NewEntry, SessionLog};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How many bytes [`PiJsonlStore::list`] reads at most to find a file's first line
/// (Pi 1.x's `MAX_SESSION_HEADER_SCAN_BYTES`).
pub const HEADER_SCAN_LIMIT: usize = reader::MAX_HEADER_LINE;

/// The text of the error tool result that [`SessionStore::load`] appends for a tool call
/// that never returned.
pub const INTERRUPTED_TOOL_RESULT: &str =
    "interrupted: the session ended before this tool call returned";

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
    /// Refused when the header cannot be stored (not version 3, no `cwd` or `timestamp`,
    /// an id that cannot be part of a file name) or the session already exists.
    fn create(&self, header: Header) -> Result<()>;

    /// Appends `events` to the session, the first one with sequence number `first_seq`,
    /// each as a child of the previous one (the first as a child of the session's last
    /// entry). Returns the session's next sequence number.
    ///
    /// **Durability:** when this returns `Ok`, every event is on stable storage.
    ///
    /// **Refusals** (nothing is written): `first_seq` is not the stored next sequence
    /// number (the error names both), or an event is not acceptable (not an object, no
    /// string `type`, a `session` type, or an `id`, `parentId` or `timestamp` field; the
    /// error names the event by its index in `events` and its sequence number).
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
    /// version are refused with the reader's error (file, line, byte offset).
    fn load(&self, session_id: &str) -> Result<Loaded>;

    /// The headers of every stored session, without parsing the sessions themselves.
    /// Files that are not readable sessions are left out (a backend may report them
    /// elsewhere: see [`PiJsonlStore::scan`]).
    fn list(&self) -> Result<Vec<Header>>;
}

/// [`SessionStore::append`] for events of any `Serialize` type.
pub trait SessionStoreExt: SessionStore {
    /// Serializes `events` to JSON and appends them. An event that cannot be serialized
    /// (a map with non-string keys, a `Serialize` impl that fails) is refused with an
    /// error naming its index and sequence number; then nothing is written.
    ///
    /// ```no_run
    /// # use session_state::persistence::{PiJsonlStore, SessionStoreExt};
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
                serde_json::to_value(e).map_err(|source| Error::InvalidInput {
                    detail: format!(
                        "session {session_id}: event {i} (seq {}) cannot be serialized to \
                         JSON: {source}; nothing was written",
                        first_seq + i as u64
                    ),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.append(session_id, first_seq, &values)
    }
}

impl<S: SessionStore + ?Sized> SessionStoreExt for S {}

/// A loaded session (what [`SessionStore::load`] returns).
#[derive(Debug)]
pub struct Loaded {
    /// The header.
    pub header: Header,
    /// The session file.
    pub path: PathBuf,
    /// The next sequence number: the number of entries, including the tool results
    /// appended to close an interrupted turn.
    pub next_seq: u64,
    /// The `toolCallId`s that had no result and were closed with an error tool result by
    /// this load, in the order of the assistant message. Empty almost always.
    pub closed_tool_calls: Vec<String>,
    /// The session log, opened on the file: the tree, the leaf, raw lines, and a durable
    /// appender. Appending through it and through the store is safe in turn (each checks
    /// the file's length first and reads what the other wrote), but not concurrently.
    pub log: SessionLog,
}

impl Loaded {
    /// The event with sequence number `seq`: the entry's whole line as JSON, `id`,
    /// `parentId` and `timestamp` included. Reads the line from the file; message bodies
    /// are never held in memory otherwise.
    pub fn event(&self, seq: u64) -> Result<Value> {
        let Some(entry) = usize::try_from(seq)
            .ok()
            .and_then(|i| self.log.entries().nth(i))
        else {
            return Err(Error::InvalidInput {
                detail: format!(
                    "session {}: no event with seq {seq} (next_seq is {})",
                    self.header.id,
                    self.log.len()
                ),
            });
        };
        let line = self.log.raw_line(entry.id())?;
        crate::json::from_str(&line).map_err(|e| Error::InvalidEntry {
            path: self.path.clone(),
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

/// Pi's session directory name for `cwd`, exactly as Pi 1.x's
/// `getDefaultSessionDirPath` builds it: strip one leading `/` or `\`, replace every
/// `/`, `\` and `:` with `-`, and wrap the result in `--…--`.
///
/// ```
/// use session_state::persistence::pi_session_dir_name;
/// assert_eq!(pi_session_dir_name("/home/me/project"), "--home-me-project--");
/// assert_eq!(pi_session_dir_name(r"C:\Users\me"), "--C--Users-me--");
/// ```
pub fn pi_session_dir_name(cwd: &str) -> String {
    let rest = cwd
        .strip_prefix('/')
        .or_else(|| cwd.strip_prefix('\\'))
        .unwrap_or(cwd);
    format!("--{}--", rest.replace(['/', '\\', ':'], "-"))
}

/// Pi's file name for a session: `<timestamp>_<id>.jsonl`, where the timestamp is the
/// header's with `:` and `.` replaced by `-`. `None` when the header has no timestamp or
/// the name would contain a path separator.
pub fn pi_session_file_name(header: &Header) -> Option<String> {
    let stamp = header.timestamp.as_deref()?.replace([':', '.'], "-");
    let name = format!("{stamp}_{}.jsonl", header.id);
    if name.contains(['/', '\\', '\0']) {
        return None;
    }
    Some(name)
}

/// The state of one session in a store.
#[derive(Debug)]
enum Slot {
    /// Not touched yet by this store (or evicted after an error): open from disk.
    Unopened,
    /// Created, never appended: only in memory.
    Pending(Header),
    /// The file exists; its log is open.
    Open(Box<SessionLog>),
}

/// The Pi JSONL backend of [`SessionStore`]: one file per session under Pi's sessions
/// directory, `<root>/--<cwd>--/<timestamp>_<id>.jsonl` (see [`pi_session_dir_name`]).
///
/// Files are read and written through [`SessionLog`], so every rule of SPEC §2 holds:
/// one `write()` and one `fdatasync` per entry, a directory fsync when a file is created,
/// strict reading, torn tails closed before appending.
///
/// The store keeps the sessions it has touched open (one [`SessionLog`] each, behind its
/// own mutex), so appends to different sessions proceed in parallel and appends to one
/// session are serialized. It does not take the write lock of SPEC §6: a host that owns
/// its sessions through the store is their only writer, and each append still checks the
/// file's length and reads a foreign tail first.
#[derive(Debug)]
pub struct PiJsonlStore {
    root: PathBuf,
    options: LogOptions,
    sessions: Mutex<HashMap<String, Arc<Mutex<Slot>>>>,
}

impl PiJsonlStore {
    /// A store on `root`, the agent's sessions directory (Pi's default is
    /// `~/.pi/agent/sessions`). Nothing is read or created until needed.
    pub fn new(root: impl Into<PathBuf>) -> PiJsonlStore {
        PiJsonlStore::with_options(root, LogOptions::new())
    }

    /// A store that opens session files with `options` (read mode, file-system seam).
    /// Their materialization setting does not matter: a new session is always written on
    /// its first append.
    pub fn with_options(root: impl Into<PathBuf>, options: LogOptions) -> PiJsonlStore {
        PiJsonlStore {
            root: root.into(),
            options,
            sessions: Mutex::default(),
        }
    }

    /// The sessions directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every session under the root, with the files that could not be listed.
    ///
    /// Reads only the first line of each `*.jsonl` file in each subdirectory of the root
    /// (at most [`HEADER_SCAN_LIMIT`] bytes), as Pi's session list does, and parses it
    /// with the strict header parser. A missing root lists nothing.
    pub fn scan(&self) -> Result<Listing> {
        let mut listing = Listing::default();
        let dirs = match std::fs::read_dir(&self.root) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(listing),
            Err(e) => return Err(e).ctx("listing", &self.root),
        };
        for dir in dirs {
            let dir = dir.ctx("listing", &self.root)?.path();
            // Pi's layout: session files live one level down; follow symlinked folders.
            if !dir.is_dir() {
                continue;
            }
            let files = match std::fs::read_dir(&dir) {
                Ok(f) => f,
                Err(e) => {
                    listing.problems.push(problem_io(&dir, e));
                    continue;
                }
            };
            for file in files {
                let path = match file {
                    Ok(f) => f.path(),
                    Err(e) => {
                        listing.problems.push(problem_io(&dir, e));
                        continue;
                    }
                };
                if path.extension().is_none_or(|x| x != "jsonl") {
                    continue;
                }
                // A FIFO, a device or a folder named `*.jsonl` is reported, never opened
                // (reading a FIFO would block, a link to /dev/zero would never end).
                match header::read_header(&path, HEADER_SCAN_LIMIT) {
                    Ok(header) => listing.sessions.push(ListedSession { header, path }),
                    Err(error) => listing.problems.push(ListProblem { path, error }),
                }
            }
        }
        listing.sessions.sort_by(|a, b| {
            (&a.header.timestamp, &a.header.id, &a.path).cmp(&(
                &b.header.timestamp,
                &b.header.id,
                &b.path,
            ))
        });
        listing.problems.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(listing)
    }

    fn slot(&self, session_id: &str) -> Arc<Mutex<Slot>> {
        lock(&self.sessions)
            .entry(session_id.to_owned())
            .or_insert_with(|| Arc::new(Mutex::new(Slot::Unopened)))
            .clone()
    }

    /// The file of a session that is not open: among the files Pi's naming points at
    /// (`…_<id>.jsonl`) first, then by reading every header.
    fn find(&self, session_id: &str) -> Result<PathBuf> {
        let suffix = format!("_{session_id}.jsonl");
        let named = |p: &Path| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(&suffix))
        };
        let mut by_name = Vec::new();
        if let Ok(dirs) = std::fs::read_dir(&self.root) {
            for dir in dirs.flatten() {
                let Ok(files) = std::fs::read_dir(dir.path()) else {
                    continue;
                };
                for file in files.flatten() {
                    let path = file.path();
                    if named(&path)
                        && header::read_header(&path, HEADER_SCAN_LIMIT)
                            .is_ok_and(|h| h.id == session_id)
                    {
                        by_name.push(path);
                    }
                }
            }
        }
        if let [one] = by_name.as_slice() {
            return Ok(one.clone());
        }
        let listing = self.scan()?;
        let found: Vec<&ListedSession> = listing
            .sessions
            .iter()
            .filter(|s| s.header.id == session_id)
            .collect();
        match found.as_slice() {
            [one] => Ok(one.path.clone()),
            [] => {
                // A file named for the session whose header cannot be read: say why.
                if let Some(p) = listing.problems.into_iter().find(|p| named(&p.path)) {
                    return Err(p.error);
                }
                Err(Error::Io {
                    action: "looking for the session in",
                    path: self.root.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("no session with id {session_id}"),
                    ),
                })
            }
            many => Err(Error::InvalidInput {
                detail: format!(
                    "session {session_id} is stored in {} files ({}); keep one",
                    many.len(),
                    many.iter()
                        .map(|s| s.path.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }

    /// Writes a new session's file with its first events, all or nothing, through the
    /// log's one durable-create routine ([`SessionLog::materialize`], on the file-system
    /// seam): the header and the events go to a hidden temporary file with a random name in
    /// the session's folder (one write, one sync), which is hard-linked to its final name
    /// (failing if that exists: a session that appeared meanwhile is never overwritten),
    /// removed, and the folder fsynced. Readers and Pi never see a session without its
    /// events.
    fn materialize(&self, header: &Header, entries: Vec<NewEntry>) -> Result<SessionLog> {
        let path = self.require_location(header)?;
        let mut log =
            SessionLog::in_memory(path, header.clone(), self.options.clone()).hold_in_memory();
        for entry in entries {
            log.append(entry)?;
        }
        log.materialize()?;
        Ok(log)
    }

    fn require_location(&self, header: &Header) -> Result<PathBuf> {
        self.locate(header).ok_or_else(|| Error::InvalidInput {
            detail: format!(
                "session {}: the header cannot name a session file (it needs a cwd, a \
                 timestamp, and an id without path separators)",
                header.id
            ),
        })
    }
}

impl SessionStore for PiJsonlStore {
    fn locate(&self, header: &Header) -> Option<PathBuf> {
        let cwd = header.cwd.as_deref()?;
        let name = pi_session_file_name(header)?;
        Some(self.root.join(pi_session_dir_name(cwd)).join(name))
    }

    fn create(&self, header: Header) -> Result<()> {
        if header.version != 3 {
            return Err(Error::InvalidInput {
                detail: format!(
                    "session {}: new sessions are written in format version 3, the header \
                     says {}",
                    header.id, header.version
                ),
            });
        }
        if header.id.is_empty() || header.id.contains(['/', '\\', '\n', '\0']) {
            return Err(Error::InvalidInput {
                detail: format!("session id {:?} cannot be part of a file name", header.id),
            });
        }
        let path = self.require_location(&header)?;
        let slot = self.slot(&header.id);
        let mut slot = lock_slot(&slot);
        match &*slot {
            Slot::Unopened => {}
            Slot::Pending(_) => {
                return Err(Error::InvalidInput {
                    detail: format!("session {} was already created in this store", header.id),
                });
            }
            Slot::Open(log) => {
                return Err(Error::AlreadyExists {
                    path: log.path().to_path_buf(),
                });
            }
        }
        if path.exists() {
            return Err(Error::AlreadyExists { path });
        }
        *slot = Slot::Pending(header);
        Ok(())
    }

    fn append(&self, session_id: &str, first_seq: u64, events: &[Value]) -> Result<u64> {
        let entries = events
            .iter()
            .enumerate()
            .map(|(i, e)| to_new_entry(session_id, first_seq + i as u64, i, e))
            .collect::<Result<Vec<_>>>()?;
        let slot = self.slot(session_id);
        let mut slot = lock_slot(&slot);
        if let Slot::Pending(header) = &*slot {
            check_seq(session_id, 0, first_seq)?;
            if entries.is_empty() {
                return Ok(0);
            }
            let log = self.materialize(header, entries)?;
            let next = log.len() as u64;
            *slot = Slot::Open(Box::new(log));
            return Ok(next);
        }
        if let Slot::Unopened = &*slot {
            let path = self.find(session_id)?;
            *slot = Slot::Open(Box::new(self.options.open(&path)?));
        }
        let Slot::Open(log) = &mut *slot else {
            return Err(Error::NotMaterialized {
                session_id: session_id.into(),
            });
        };
        let result = append_to(log, session_id, first_seq, entries);
        if matches!(
            result,
            Err(Error::Io { .. } | Error::Poisoned { .. } | Error::ChangedOnDisk { .. })
        ) {
            // Reopen from disk next time: the reader shows what reached the disk.
            *slot = Slot::Unopened;
        }
        result
    }

    fn load(&self, session_id: &str) -> Result<Loaded> {
        let slot = self.slot(session_id);
        let slot = lock_slot(&slot);
        let path = match &*slot {
            Slot::Pending(_) => {
                return Err(Error::NotMaterialized {
                    session_id: session_id.into(),
                });
            }
            Slot::Open(log) => log.path().to_path_buf(),
            Slot::Unopened => self.find(session_id)?,
        };
        let mut log = self.options.open(&path)?;
        if log.session_id() != session_id {
            return Err(Error::InvalidInput {
                detail: format!(
                    "{}: the header names session {}, not {session_id}",
                    path.display(),
                    log.session_id()
                ),
            });
        }
        let closed_tool_calls = close_interrupted_turn(&mut log)?;
        Ok(Loaded {
            header: log.header().clone(),
            path,
            next_seq: log.len() as u64,
            closed_tool_calls,
            log,
        })
    }

    fn list(&self) -> Result<Vec<Header>> {
        let listing = self.scan()?;
        for p in &listing.problems {
            tracing::warn!(path = %p.path.display(), "not listed: {}", p.error);
        }
        Ok(listing.sessions.into_iter().map(|s| s.header).collect())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks a session's slot. A panic during an earlier operation leaves the in-memory log
/// in an unknown state, so the session is reopened from disk (a pending header is kept).
fn lock_slot(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => {
            let mut g = poisoned.into_inner();
            if let Slot::Open(_) = &*g {
                *g = Slot::Unopened;
            }
            m.clear_poison();
            g
        }
    }
}

fn check_seq(session_id: &str, next: u64, first_seq: u64) -> Result<()> {
    if first_seq == next {
        return Ok(());
    }
    Err(Error::InvalidInput {
        detail: format!(
            "session {session_id}: append expected first_seq {next} (the next sequence \
             number), got {first_seq}; nothing was written"
        ),
    })
}

fn append_to(
    log: &mut SessionLog,
    session_id: &str,
    first_seq: u64,
    entries: Vec<NewEntry>,
) -> Result<u64> {
    // Another writer may have appended since this store last looked.
    log.refresh()?;
    check_seq(session_id, log.len() as u64, first_seq)?;
    for entry in entries {
        log.append(entry)?;
    }
    Ok(log.len() as u64)
}

/// Checks one event and turns it into an entry; `index` is its place in the batch.
fn to_new_entry(session_id: &str, seq: u64, index: usize, event: &Value) -> Result<NewEntry> {
    let refuse = |why: String| Error::InvalidInput {
        detail: format!(
            "session {session_id}: event {index} (seq {seq}) {why}; nothing was written"
        ),
    };
    let Value::Object(map) = event else {
        return Err(refuse("is not a JSON object".into()));
    };
    let ty = match map.get("type") {
        Some(Value::String(t)) if !t.is_empty() => t,
        _ => return Err(refuse("has no string `type`".into())),
    };
    if ty == "session" {
        return Err(refuse(
            "has type `session`, which only the header may have".into(),
        ));
    }
    for key in ["id", "parentId", "timestamp"] {
        if map.contains_key(key) {
            return Err(refuse(format!(
                "has a `{key}` field; the store assigns id, parentId and timestamp"
            )));
        }
    }
    let fields: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| k.as_str() != "type")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(NewEntry::new(ty.clone(), fields))
}

fn problem_io(path: &Path, source: std::io::Error) -> ListProblem {
    ListProblem {
        path: path.to_path_buf(),
        error: Error::Io {
            action: "listing",
            path: path.to_path_buf(),
            source,
        },
    }
}

/// A tool call of an assistant message.
struct ToolCall {
    id: String,
    name: String,
}

/// Closes a complete interrupted final turn; returns the tool call ids it closed.
///
/// Walks the active branch back from the leaf. Tool results, system messages and
/// entries that are not messages (custom, label, model change, …) are passed over; the
/// first other message decides:
/// - an assistant message whose `stopReason` is not `error` or `aborted`: each of its
///   `toolCall` blocks without a tool result after it gets one, an error;
/// - anything else (a user message, a custom or bash message, a compaction, a branch
///   summary), or an errored or aborted assistant message: the turn is over, nothing is
///   appended. Pi's `transformMessages` already gives the model a result for the calls of
///   such a turn, and drops errored and aborted messages; a result appended after them
///   would be an orphan the provider rejects.
fn close_interrupted_turn(log: &mut SessionLog) -> Result<Vec<String>> {
    let branch: Vec<String> = log.branch().into_iter().map(str::to_owned).collect();
    let mut answered: Vec<String> = Vec::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    for id in branch.iter().rev() {
        let Some(entry) = log.entry(id) else { break };
        match entry.entry_type() {
            EntryType::Message => {}
            EntryType::Compaction | EntryType::BranchSummary => return Ok(Vec::new()),
            _ => continue,
        }
        match entry.role() {
            Some(Role::ToolResult) => {
                let line = parse_line(log, id)?;
                if let Some(call) = line.pointer("/message/toolCallId").and_then(Value::as_str) {
                    answered.push(call.to_owned());
                }
            }
            Some(Role::Assistant) => {
                let line = parse_line(log, id)?;
                let message = line.get("message").unwrap_or(&Value::Null);
                let stop = message.get("stopReason").and_then(Value::as_str);
                if matches!(stop, Some("error" | "aborted")) {
                    return Ok(Vec::new());
                }
                calls = message
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("toolCall"))
                    .filter_map(|b| {
                        Some(ToolCall {
                            id: b.get("id")?.as_str()?.to_owned(),
                            name: b
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        })
                    })
                    .collect();
                break;
            }
            Some(Role::Other) => {
                let line = parse_line(log, id)?;
                if line.pointer("/message/role").and_then(Value::as_str) == Some("system") {
                    continue;
                }
                return Ok(Vec::new());
            }
            Some(Role::User) | None => return Ok(Vec::new()),
        }
    }
    let mut closed = Vec::new();
    for call in calls {
        if answered.contains(&call.id) || closed.contains(&call.id) {
            continue;
        }
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        let result = serde_json::json!({
            "role": "toolResult",
            "toolCallId": call.id,
            "toolName": call.name,
            "content": [{"type": "text", "text": INTERRUPTED_TOOL_RESULT}],
            "isError": true,
            "timestamp": timestamp,
        });
        // Durable when it returns (one write + fdatasync).
        log.append(NewEntry::message(result))?;
        closed.push(call.id);
    }
    Ok(closed)
}

fn parse_line(log: &SessionLog, id: &str) -> Result<Value> {
    let line = log.raw_line(id)?;
    crate::json::from_str(&line).map_err(|e| Error::InvalidEntry {
        path: log.path().to_path_buf(),
        at: log
            .entry(id)
            .map(|e| e.location())
            .unwrap_or(crate::error::Location { line: 0, offset: 0 }),
        id: Some(id.to_owned()),
        detail: e.to_string(),
    })
}
