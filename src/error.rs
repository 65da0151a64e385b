//! The crate's errors, in redb's shape: each operation returns its own small type (the
//! log's [`OpenError`], [`AppendError`], [`UnknownEntry`], [`RawLineError`], [`RuleError`],
//! sharing [`InvalidLog`]; a store's primitive [`StoreError`]; [`StateError`],
//! [`ProjectionError`], the lock's and the settings'), each converting into the one
//! [`Error`]. What spans the layers returns [`Error`] (`docs/api.md`, "Errors", lists which
//! operation returns which). Every variant names what a user needs to act on: the file, the
//! line and byte offset, the entry id, the plugin, or the lock holder.

pub use crate::sqlite::DatabaseError;
pub(crate) use crate::sqlite::is_corrupt;
use std::io;
use std::path::PathBuf;

/// Where in a session file something was found: 1-based line number and the byte
/// offset of the line's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Location {
    /// 1-based line number (the header is line 1).
    pub line: u64,
    /// Byte offset of the first byte of the line.
    pub offset: u64,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {} (byte offset {})", self.line, self.offset)
    }
}

/// Everything that can go wrong in this crate: an operation's own error (a wrapper, whose
/// message is the inner error's), or one that the crate's layers over them decide.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A session's log cannot be opened, read or appended to, or a new session or event
    /// breaks a rule of every backend (see [`LogError`]).
    #[error(transparent)]
    Log(LogError),

    /// A plugin's state value or state event cannot be written or read (see
    /// [`StateError`]).
    #[error(transparent)]
    State(StateError),

    /// The projection database failed or refused (see [`ProjectionError`]).
    #[error(transparent)]
    Projection(ProjectionError),

    /// A session store's primitive failed or refused (see [`StoreError`]).
    #[error(transparent)]
    Store(StoreError),

    /// The write lock is held by someone else (or could not be taken).
    #[error(transparent)]
    Lock(Box<crate::lock::LockError>),

    /// The database location could not be resolved.
    #[error(transparent)]
    Settings(#[from] crate::settings::SettingsError),

    /// An invalid option or argument (a plugin id, a scope, a key's version, a SQLite
    /// store's path).
    #[error("invalid option {option}: {detail}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What is wrong and what is allowed.
        detail: String,
    },

    /// A store URL that cannot be opened ([`crate::Sessions::open_url`]). The URL in the
    /// message is redacted: it never shows a password.
    #[error("store URL {url}: {detail}")]
    StoreUrl {
        /// The URL, its password replaced by `***`.
        url: String,
        /// What is wrong and what is accepted.
        detail: String,
    },

    /// `import`: the store already holds this session with other content. Nothing was
    /// imported.
    #[error(
        "{file}: store {store} already holds session {session_id} with other content \
         ({detail}); nothing was imported"
    )]
    ImportConflict {
        /// The file being imported.
        file: PathBuf,
        /// The store, as it describes itself (never with a password).
        store: String,
        /// The session id.
        session_id: String,
        /// What differs: the header line, or the entry at some sequence number.
        detail: String,
    },

    /// `import`: the store failed while the entries went in (it stayed unavailable
    /// through the retries, or refused a batch). The store holds a prefix of the file,
    /// told by `stored`; a rerun appends only the rest.
    #[error(
        "{file}: the import into store {store} stopped with {stored} of session {session_id} \
         stored: {source}; running the import again is safe: it checks what is stored and \
         appends only the rest"
    )]
    ImportIncomplete {
        /// The file being imported.
        file: PathBuf,
        /// The store, as it describes itself (never with a password).
        store: String,
        /// The session id.
        session_id: String,
        /// What the store holds of the file's entries: `"37 of the file's 100 entries"`,
        /// or `"40 (or 52: whether the last 12 went in is unknown) of the file's 100
        /// entries"` when a batch's outcome could not be read back.
        stored: String,
        /// Why it stopped.
        #[source]
        source: Box<Error>,
    },

    /// A write through a store lost the race for the session's next sequence number to
    /// other writers every time it tried. Nothing was written by this call.
    #[error(
        "session {session_id}: gave up after {attempts} attempts, each lost to another \
         writer that appended to the session first (retried with random backoff); nothing \
         was written by this call, so running it again is safe"
    )]
    Contended {
        /// The session id.
        session_id: String,
        /// How many times the write was decided and tried.
        attempts: u32,
    },

    /// A store stayed unavailable or busy (a server restarting or shutting down, too
    /// many clients, another writer holding the session) while a call retried it with
    /// backoff for the store's retry window. Trying again is safe: a write checks what is
    /// stored first.
    #[error(
        "session store {store}: gave up after {waited_ms} ms and {attempts} attempts with \
         backoff: {source}; trying again is safe (a write that got through is refused or \
         changes nothing the second time)"
    )]
    StoreUnavailable {
        /// The store, redacted.
        store: String,
        /// How long the call kept retrying.
        waited_ms: u64,
        /// How many attempts were made.
        attempts: u32,
        /// The last failure.
        #[source]
        source: Box<StoreError>,
    },

    /// Something this crate's own invariants rule out happened: a bug in session-state.
    #[error("internal error in session-state: {what}; please report it")]
    Internal {
        /// What went wrong, with the file it concerns.
        what: String,
    },
}

/// The projection database's failures: opening, reading and writing it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionError {
    /// The projection database failed.
    #[error("projection database {path}: {action}: {source}")]
    Database {
        /// The database file.
        path: PathBuf,
        /// What we were doing.
        action: &'static str,
        /// SQLite's error.
        #[source]
        source: DatabaseError,
    },

    /// The file at the projection database's path is not provably session-state's own
    /// database (docs/spec.md §4): it was neither opened for writing nor modified.
    #[error(
        "projection database {path}: refusing to use this file: it {what}; it was left \
         untouched (choose another database path)"
    )]
    NotOurDatabase {
        /// The file at the database path.
        path: PathBuf,
        /// What is there ("is not a SQLite database (starts with …)", ...).
        what: String,
    },

    /// The projection database was made by a later version of session-state (its schema
    /// version is newer than this one knows): it is never written, deleted or trusted,
    /// so every command that would use it refuses.
    #[error(
        "projection database {path}: made by a newer session-state (schema version \
         {version}; this session-state knows versions up to {known}); it was left untouched. \
         Upgrade this session-state (the command line, or the Pi package) to the version \
         that made it, or use another database (--db, or sessionState.databasePath in \
         Pi's settings)"
    )]
    NewerDatabase {
        /// The database file.
        path: PathBuf,
        /// Its schema version, as written in it.
        version: String,
        /// The newest schema version this session-state knows.
        known: i64,
    },

    /// A row of the projection database does not decode (damaged or edited). Readers
    /// rebuild the session from its log and answer from the rebuild; this error is
    /// returned only when the rebuilt rows do not decode either.
    #[error("projection database {path}: a stored row for {file} does not decode: {detail}")]
    CorruptProjection {
        /// The database file.
        path: PathBuf,
        /// The session file whose rows are affected.
        file: PathBuf,
        /// Which row and what is wrong with it.
        detail: String,
    },
}

impl From<ProjectionError> for Error {
    fn from(e: ProjectionError) -> Self {
        Error::Projection(e)
    }
}

/// A plugin's state: its value (serializing, deserializing, its version of the shape) and the
/// events that store it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A value could not be serialized to JSON; nothing was written.
    #[error("plugin '{plugin}': the value cannot be serialized to JSON: {source}")]
    Serialize {
        /// The plugin id.
        plugin: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },

    /// A value JSON as Pi's JavaScript reads it cannot carry exactly (an integer beyond
    /// 2^53 that a double cannot hold, ...); nothing was written.
    #[error("plugin '{plugin}': {detail}; nothing was written")]
    UnrepresentableValue {
        /// The plugin id.
        plugin: String,
        /// Which number, and what JavaScript would read instead.
        detail: String,
    },

    /// A stored value does not deserialize into the caller's type (the type is the
    /// state's schema: this is the read's validation).
    #[error(
        "plugin '{plugin}': the stored value{} does not deserialize into the requested \
         type at `{path}`: {source}",
        fmt_id(.entry_id)
    )]
    Deserialize {
        /// The plugin id.
        plugin: String,
        /// The entry whose fold produced the value, when known.
        entry_id: Option<String>,
        /// The first path in the value that fails (`.` for the value itself).
        path: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },

    /// A state written under a newer version of its shape than the reader knows: every
    /// read and write of it is refused, and nothing is written over it.
    #[error(
        "plugin '{plugin}': the state{} was written under stateVersion {stored}, newer than \
         version {known} that this code knows; it is neither read nor written over \
         (upgrade the extension that reads it)",
        fmt_id(.entry_id)
    )]
    NewerStateVersion {
        /// The plugin id.
        plugin: String,
        /// The version the state was written under.
        stored: u32,
        /// The version the reader knows (its key's version).
        known: u32,
        /// The event that wrote it, when known.
        entry_id: Option<String>,
    },

    /// The key's `migrate` function refused a value written under an older version.
    #[error(
        "plugin '{plugin}': migrating the state{} from version {from} to {to} failed: {detail}",
        fmt_id(.entry_id)
    )]
    Migrate {
        /// The plugin id.
        plugin: String,
        /// The version the value was written under.
        from: u32,
        /// The key's version.
        to: u32,
        /// The event that wrote the value, when known.
        entry_id: Option<String>,
        /// What `migrate` said.
        detail: String,
    },

    /// The key's validation ([`crate::StateKey::validated`]) refused a value: one a read
    /// resolved (`entry_id` the event that set it, `migrated_from` the version it was
    /// migrated from), or the value a write would leave (`write`: nothing was written).
    #[error(
        "plugin '{plugin}': {}does not pass validate at {}: {detail}{}",
        invalid_value(*.write, .entry_id, *.migrated_from, *.to),
        if .path.is_empty() { "the root (the value itself)" } else { .path.as_str() },
        if *.write { "; nothing was written" } else { "" }
    )]
    Invalid {
        /// The plugin id.
        plugin: String,
        /// The value a write would leave (else a stored value a read resolved).
        write: bool,
        /// The event that set the stored value, when known.
        entry_id: Option<String>,
        /// The version the stored value was migrated from, when it was.
        migrated_from: Option<u32>,
        /// The key's version.
        to: u32,
        /// The first failing place, as a JSON Pointer (`""`: the value itself).
        path: String,
        /// What is wrong there.
        detail: String,
    },

    /// A state event that this crate cannot interpret.
    #[error("{path}: plugin '{plugin}': bad state event '{entry_id}' at {at}: {detail}")]
    BadEvent {
        /// The session file.
        path: PathBuf,
        /// The plugin id.
        plugin: String,
        /// The entry id.
        entry_id: String,
        /// Where the entry starts.
        at: Location,
        /// What is wrong (unknown `v`, op or scope, missing value...).
        detail: String,
    },
}

impl From<StateError> for Error {
    fn from(e: StateError) -> Self {
        Error::State(e)
    }
}

/// The strict reader's refusals of a session's lines, with file, line and byte offset: what
/// opening or reading a log refuses ([`OpenError::Invalid`]), and what a refresh or an
/// append refuses in the lines another process appended ([`AppendError::Invalid`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidLog {
    /// The file has no session header line.
    #[error("{path}: not a Pi session file: {detail}")]
    MissingHeader {
        /// The session file.
        path: PathBuf,
        /// Why ("the file is empty", "line 1 is a message entry", ...).
        detail: String,
    },

    /// The header line exists but is not a valid session header.
    #[error("{path}: invalid session header on line 1: {detail}")]
    InvalidHeader {
        /// The session file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },

    /// The session file was written by a newer Pi than this crate understands.
    #[error(
        "{path}: session format version {version} is newer than the supported version 3; \
         upgrade session-state"
    )]
    UnsupportedVersion {
        /// The session file.
        path: PathBuf,
        /// The version found in the header.
        version: String,
    },

    /// A complete line that is not valid JSON, followed by valid lines.
    #[error(
        "{path}: corrupt line at {at}: {detail}; valid entries follow it, so this is not a \
         torn write (run `session-state verify --salvage` to see what a salvage read keeps)"
    )]
    Corrupt {
        /// The session file.
        path: PathBuf,
        /// Where the line starts.
        at: Location,
        /// The parser's complaint.
        detail: String,
    },

    /// A line that is valid JSON but not a valid entry (missing `id`, wrong types, ...).
    #[error("{path}: invalid entry at {at}{}: {detail}", fmt_id(.id))]
    InvalidEntry {
        /// The session file.
        path: PathBuf,
        /// Where the line starts.
        at: Location,
        /// The entry id, when the line has one.
        id: Option<String>,
        /// What is wrong.
        detail: String,
    },

    /// Two entries share an id.
    #[error("{path}: duplicate entry id '{id}' at {at} ({})", fmt_first_line(.first_line))]
    DuplicateId {
        /// The session file.
        path: PathBuf,
        /// Where the second use starts.
        at: Location,
        /// The id.
        id: String,
        /// Line of the first entry with this id; `None` when the reader no longer knows it
        /// (the projection's catch-up keeps ids, not the lines they came from).
        first_line: Option<u64>,
    },

    /// An entry's `parentId` names no earlier entry.
    #[error(
        "{path}: entry '{id}' at {at} has parentId '{parent}', which names no earlier entry \
         (a missing entry or a forward reference)"
    )]
    DanglingParent {
        /// The session file.
        path: PathBuf,
        /// Where the entry starts.
        at: Location,
        /// The entry id.
        id: String,
        /// The parent id it names.
        parent: String,
    },

    /// An entry is its own ancestor.
    #[error("{path}: entry '{id}' at {at} is its own parent (a cycle)")]
    Cycle {
        /// The session file.
        path: PathBuf,
        /// Where the entry starts.
        at: Location,
        /// The entry id.
        id: String,
    },
}

/// What opening or reading a session's log returns: [`crate::SessionLog::open`],
/// [`crate::LogOptions::open`] and [`crate::LogOptions::read`] (and what lists session
/// files: [`crate::PiJsonlStore::scan`], a [`crate::ListProblem`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// An I/O operation on a file failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What we were doing ("reading", "appending to", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A session path that does not name a regular file (a FIFO, a device, a directory).
    #[error("{path}: not a regular file ({kind}); a session log must be a regular file")]
    NotARegularFile {
        /// The path as given (or as resolved through a symlink).
        path: PathBuf,
        /// What is there instead ("a FIFO", "a character device", ...).
        kind: String,
    },

    /// The strict reader refuses the file's content.
    #[error(transparent)]
    Invalid(#[from] InvalidLog),
}

/// What appending to a session's log returns: [`crate::SessionLog::append`],
/// [`crate::SessionLog::materialize`] and [`crate::SessionLog::refresh`]. Nothing that
/// another process appended is taken in unless the strict reader accepts it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// An I/O operation on a file failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What we were doing ("reading", "appending to", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A session path that does not name a regular file (a FIFO, a device, a directory).
    #[error("{path}: not a regular file ({kind}); a session log must be a regular file")]
    NotARegularFile {
        /// The path as given (or as resolved through a symlink).
        path: PathBuf,
        /// What is there instead ("a FIFO", "a character device", ...).
        kind: String,
    },

    /// An earlier write or sync failed; the writer refuses further appends.
    #[error(
        "{path}: an earlier append failed ({cause}); this writer is poisoned and appends \
         nothing more. Reopen the session: the reader will show what reached the disk"
    )]
    Poisoned {
        /// The session file.
        path: PathBuf,
        /// The first failure.
        cause: String,
    },

    /// Another process (or a holder of the session in this one) holds the session file's
    /// lock past the append's wait ([`crate::lock::LockError::FileHeld`]). Nothing was
    /// written. In [`Error`] it is [`Error::Lock`].
    #[error(transparent)]
    Held(Box<crate::lock::LockError>),

    /// The file changed behind our back in a way appends cannot explain.
    #[error("{path}: the file changed behind this process's back ({detail}); reopen the session")]
    ChangedOnDisk {
        /// The session file.
        path: PathBuf,
        /// What changed.
        detail: String,
    },

    /// The last complete line does not parse; appending after it would turn it into
    /// corruption in the middle of the file.
    #[error(
        "{path}: the last complete line, at {at}, is not valid JSON: {detail}; refusing to \
         append after it. Inspect it with `session-state verify`"
    )]
    TrailingGarbage {
        /// The session file.
        path: PathBuf,
        /// Where the line starts.
        at: Location,
        /// The parser's complaint.
        detail: String,
    },

    /// A v1/v2 file cannot be migrated to version 3 without changing or losing content;
    /// the file was not touched.
    #[error(
        "{path}: cannot migrate this version 1/2 session to version 3: {at}: {detail}; the \
         file was not changed"
    )]
    MigrationRefused {
        /// The session file.
        path: PathBuf,
        /// The line that cannot be migrated (line 1 for a whole-file check).
        at: Location,
        /// Why.
        detail: String,
    },

    /// A write to a detached log: one read from a store's entries
    /// ([`crate::LogOptions::read`]), not opened on its file. Nothing was written, and no
    /// file was created at the label.
    #[error(
        "{label}: this session was read from its store, not opened on a file; it cannot be \
         appended to, materialized or refreshed here: append through the store that holds it"
    )]
    Detached {
        /// The label the log was read under (it names no file).
        label: PathBuf,
    },

    /// The session file already exists.
    #[error("{path}: a file already exists at this path")]
    AlreadyExists {
        /// The path.
        path: PathBuf,
    },

    /// The strict reader refuses lines another process appended to the file.
    #[error(transparent)]
    Invalid(#[from] InvalidLog),
}

/// An entry id that the session does not contain: what [`crate::SessionLog::navigate`],
/// [`crate::SessionLog::path_to`], [`crate::SessionLog::children`] and
/// [`crate::SessionLog::branch_key_of`] return.
#[derive(Debug, thiserror::Error)]
#[error("{path}: no entry with id '{id}' in this session")]
#[non_exhaustive]
pub struct UnknownEntry {
    /// The session file.
    pub path: PathBuf,
    /// The id that was asked for.
    pub id: String,
}

/// What [`crate::SessionLog::raw_line`] returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RawLineError {
    /// The session has no entry with this id.
    #[error(transparent)]
    UnknownEntry(#[from] UnknownEntry),

    /// An I/O operation on a file failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What we were doing ("reading", "appending to", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// The rules every backend keeps for a new session and an appended event, in a file or in
/// a store (see `docs/persistence.md`): what a [`crate::Sessions`] call refuses before it
/// writes anything, and [`crate::Loaded::event`]'s sequence number past the end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// A new session's header (created or imported) is not in format version 3, the only
    /// one new sessions are written in.
    #[error(
        "session {session_id}: new sessions are written in format version 3, the header \
         says {version}"
    )]
    UnsupportedNewVersion {
        /// The session id.
        session_id: String,
        /// The header's version.
        version: u32,
    },

    /// A new session's id (created or imported) breaks the one session-id rule of every
    /// backend.
    #[error(transparent)]
    InvalidSessionId(#[from] InvalidSessionId),

    /// A new session's header cannot name a Pi session file (every backend keeps this
    /// rule, so that any stored session can be exported as one).
    #[error(
        "session {session_id}: the header cannot name a session file (it needs a cwd, and \
         a timestamp and an id without path separators)"
    )]
    UnlocatableHeader {
        /// The session id.
        session_id: String,
    },

    /// [`crate::Sessions::create`] twice for a session that is still only in memory.
    #[error(
        "session {session_id} was already created in this store (it is written on its \
         first append)"
    )]
    AlreadyCreated {
        /// The session id.
        session_id: String,
    },

    /// The session exists only in memory; the operation needs the file.
    #[error("session {session_id} has not been written to disk yet")]
    NotMaterialized {
        /// The session id.
        session_id: String,
    },

    /// [`crate::Sessions::append`] or [`crate::Sessions::append_lines`]: an event or a
    /// line is not acceptable. Nothing was written.
    #[error("session {session_id}: event {index} (seq {seq}) {detail}; nothing was written")]
    InvalidEvent {
        /// The session id.
        session_id: String,
        /// The event's index in the batch.
        index: usize,
        /// The sequence number it would have had.
        seq: u64,
        /// What is wrong ("is not a JSON object", "has a `parentId` field; …").
        detail: String,
    },

    /// [`crate::Sessions::append_serialized`]: an event cannot be serialized to JSON.
    /// Nothing was written.
    #[error(
        "session {session_id}: event {index} (seq {seq}) cannot be serialized to JSON: \
         {source}; nothing was written"
    )]
    EventNotSerializable {
        /// The session id.
        session_id: String,
        /// The event's index in the batch.
        index: usize,
        /// The sequence number it would have had.
        seq: u64,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },

    /// [`crate::Loaded::event`]: no event has this sequence number.
    #[error("session {session_id}: no event with seq {seq} (next_seq is {next_seq})")]
    NoSuchEvent {
        /// The session id.
        session_id: String,
        /// The sequence number asked for.
        seq: u64,
        /// The session's next sequence number (its number of events).
        next_seq: u64,
    },
}

/// A new session's id (created or imported) that breaks the one session-id rule of every
/// backend ([`crate::format::MAX_SESSION_ID_BYTES`]; see `docs/persistence.md`): what
/// [`crate::SessionLog::create`] and [`crate::LogOptions::create`] return, and
/// [`RuleError::InvalidSessionId`] for a [`crate::Sessions`] call.
#[derive(Debug, thiserror::Error)]
#[error(
    "session id {session_id:?} cannot be part of a Pi session file name: an id is 1 to \
     {max} bytes, without `/`, `\\`, a newline or a NUL, and not `.` or `..`"
)]
#[non_exhaustive]
pub struct InvalidSessionId {
    /// The session id.
    pub session_id: String,
    /// The longest id, in bytes ([`crate::format::MAX_SESSION_ID_BYTES`]).
    pub max: usize,
}

/// A session's log, as [`Error::Log`] and the file backend ([`StoreError::File`]) carry
/// it: one of the log's operation types. [`crate::Loaded::event`] returns it too.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// Opening or reading a log failed or was refused (see [`OpenError`]).
    #[error(transparent)]
    Open(#[from] OpenError),

    /// Appending to a log failed or was refused (see [`AppendError`]).
    #[error(transparent)]
    Append(AppendError),

    /// An entry id that the session does not contain.
    #[error(transparent)]
    UnknownEntry(#[from] UnknownEntry),

    /// A new session or an event that breaks a rule of every backend (see [`RuleError`]).
    #[error(transparent)]
    Rule(#[from] RuleError),
}

impl From<AppendError> for LogError {
    fn from(e: AppendError) -> Self {
        LogError::Append(e)
    }
}

impl From<InvalidLog> for LogError {
    /// The strict reader's refusal, as opening or reading the log refuses it.
    fn from(e: InvalidLog) -> Self {
        LogError::Open(OpenError::Invalid(e))
    }
}

impl From<RawLineError> for LogError {
    fn from(e: RawLineError) -> Self {
        match e {
            RawLineError::UnknownEntry(e) => LogError::UnknownEntry(e),
            RawLineError::Io {
                action,
                path,
                source,
            } => LogError::Open(OpenError::Io {
                action,
                path,
                source,
            }),
        }
    }
}

impl From<LogError> for Error {
    /// A log's error as the crate's error; the session file's lock held by another holder
    /// is [`Error::Lock`], as every lock refusal.
    fn from(e: LogError) -> Self {
        match e {
            LogError::Append(AppendError::Held(e)) => Error::Lock(e),
            e => Error::Log(e),
        }
    }
}

impl From<OpenError> for Error {
    fn from(e: OpenError) -> Self {
        Error::Log(LogError::Open(e))
    }
}

impl From<AppendError> for Error {
    fn from(e: AppendError) -> Self {
        Error::from(LogError::Append(e))
    }
}

impl From<InvalidLog> for Error {
    fn from(e: InvalidLog) -> Self {
        Error::from(LogError::from(e))
    }
}

impl From<UnknownEntry> for Error {
    fn from(e: UnknownEntry) -> Self {
        Error::Log(LogError::UnknownEntry(e))
    }
}

impl From<RawLineError> for Error {
    fn from(e: RawLineError) -> Self {
        Error::Log(LogError::from(e))
    }
}

impl From<InvalidSessionId> for Error {
    fn from(e: InvalidSessionId) -> Self {
        Error::Log(LogError::Rule(e.into()))
    }
}

impl From<RuleError> for Error {
    fn from(e: RuleError) -> Self {
        Error::Log(LogError::Rule(e))
    }
}

impl From<OpenError> for AppendError {
    /// The file read again by an append (what another process appended, a migration's
    /// original): what reading it returns, unchanged.
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Io {
                action,
                path,
                source,
            } => AppendError::Io {
                action,
                path,
                source,
            },
            OpenError::NotARegularFile { path, kind } => {
                AppendError::NotARegularFile { path, kind }
            }
            OpenError::Invalid(e) => AppendError::Invalid(e),
        }
    }
}

impl From<crate::lock::LockError> for AppendError {
    fn from(e: crate::lock::LockError) -> Self {
        AppendError::Held(Box::new(e))
    }
}

/// An I/O failure with what was being done and to which file: what [`IoContext::ctx`]
/// gives, converted into the `Io` variant of the operation's own type.
#[derive(Debug)]
pub(crate) struct IoFailure {
    pub(crate) action: &'static str,
    pub(crate) path: PathBuf,
    pub(crate) source: io::Error,
}

macro_rules! from_io_failure {
    ($($t:ident),*) => {$(
        impl From<IoFailure> for $t {
            fn from(IoFailure { action, path, source }: IoFailure) -> Self {
                $t::Io { action, path, source }
            }
        }
    )*};
}
from_io_failure!(OpenError, AppendError, RawLineError);

impl From<IoFailure> for LogError {
    fn from(e: IoFailure) -> Self {
        LogError::Open(e.into())
    }
}

impl From<IoFailure> for Error {
    fn from(e: IoFailure) -> Self {
        Error::Log(LogError::from(e))
    }
}

/// What the log's functions that span its operations (the file backend's) return.
pub(crate) type LogResult<T> = std::result::Result<T, LogError>;

/// What the strict reader's line loop can fail with (its file's I/O, a refusal of a
/// line): the error types it reads into.
pub(crate) trait ReadFailure: From<IoFailure> + From<InvalidLog> {}
impl<E: From<IoFailure> + From<InvalidLog>> ReadFailure for E {}

impl From<StoreError> for Error {
    /// A store error as the crate's error; the file backend's errors (its session file's
    /// reader and I/O) come out as the log names them.
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::File(e) => Error::from(*e),
            e => Error::Store(e),
        }
    }
}

impl From<crate::lock::LockError> for Error {
    fn from(e: crate::lock::LockError) -> Self {
        Error::Lock(Box::new(e))
    }
}

/// What a session store's primitive ([`crate::SessionStore`]) returns when it fails or
/// refuses: the seam's own error, converted into [`Error`] (as [`Error::Store`], or the
/// file backend's errors as the log reader names them).
///
/// Every `store` field is the store as it describes itself, never with a password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No session with this id is stored.
    #[error("session store {store}: no session with id {session_id} is stored here")]
    NotFound {
        /// The store.
        store: String,
        /// The session id.
        session_id: String,
    },

    /// `create`: a session with this id is already stored. Nothing was written.
    #[error("session store {store}: session {session_id} is already stored")]
    AlreadyExists {
        /// The store.
        store: String,
        /// The session id.
        session_id: String,
    },

    /// `append_lines`: `first_seq` is not the stored next sequence number (another writer
    /// appended first, or a retry repeats lines that were stored). Nothing was written.
    #[error(
        "session {session_id}: append expected first_seq {expected} (the next sequence \
         number), got {got}; nothing was written"
    )]
    SequenceMismatch {
        /// The session id.
        session_id: String,
        /// The stored next sequence number.
        expected: u64,
        /// The `first_seq` given.
        got: u64,
    },

    /// `append_lines`: a line's entry id is already an entry of the session (a store
    /// keeps ids unique per session). Nothing was written.
    #[error("session {session_id}: entry id {id:?} is already stored; nothing was written")]
    IdTaken {
        /// The session id.
        session_id: String,
        /// The id.
        id: String,
    },

    /// A shared store (PostgreSQL) holds the session for another writer: its
    /// transaction on the session is still open after the store's lock wait. The
    /// database's own row lock: released when that transaction ends (a killed writer's
    /// connection is closed by the server and its transaction rolled back). Nothing was
    /// written.
    #[error(
        "session '{session_id}' is being written by {initiator}: {action} refused because \
         {reason}; nothing was written, and trying again is safe"
    )]
    Busy {
        /// The other writer, as the database knows it (its `application_name`, backend
        /// pid and client address), or "another writer" when it cannot tell.
        initiator: String,
        /// What was refused ("append").
        action: String,
        /// The session id.
        session_id: String,
        /// Why: "its transaction on the session is still open after the lock wait of 5s".
        reason: String,
    },

    /// The store cannot be reached or refuses connections for now (a server starting,
    /// restarting or shutting down, too many clients, a broken connection before a
    /// write was sent). Nothing was done; trying again later is safe.
    #[error("session store {store}: {action}: {source} (the store is unavailable)")]
    Unavailable {
        /// The store.
        store: String,
        /// What was being done.
        action: String,
        /// The driver's or the server's error.
        #[source]
        source: BackendError,
    },

    /// The connection broke while an append was in flight: whether it committed is
    /// unknown. The state calls of this crate resolve it by reading the store back; a
    /// host appending through [`crate::Sessions`] gets the same resolution.
    #[error(
        "session store {store}: the connection broke during an append to session \
         {session_id} at seq {first_seq}, so whether it committed is unknown: {source}"
    )]
    Indeterminate {
        /// The store.
        store: String,
        /// The session id.
        session_id: String,
        /// The sequence number of the append's first line.
        first_seq: u64,
        /// The driver's error.
        #[source]
        source: BackendError,
    },

    /// The store's database failed (a SQL error, a full disk, a refused permission).
    #[error("session store {store}: {action}: {source}")]
    Database {
        /// The store.
        store: String,
        /// What was being done.
        action: String,
        /// The driver's or the server's error.
        #[source]
        source: BackendError,
    },

    /// What the store holds breaks its own invariants (a gap in the sequence numbers, a
    /// row count that disagrees with the session's row). Nothing was changed.
    #[error("session store {store}: session {session_id}: {detail}")]
    Corrupt {
        /// The store.
        store: String,
        /// The session id.
        session_id: String,
        /// What is wrong.
        detail: String,
    },

    /// More than one file holds a session with this id (the file backend); it will not
    /// pick one.
    #[error(
        "session {session_id} is stored in {} files ({}); keep one",
        paths.len(),
        fmt_paths(paths)
    )]
    Ambiguous {
        /// The session id.
        session_id: String,
        /// The files whose header names it.
        paths: Vec<PathBuf>,
    },

    /// The file at a SQLite store's path is not provably a session-state store: it was
    /// neither opened for writing nor modified.
    #[error("session store {path}: refusing to use this file: it {what}; it was left untouched")]
    NotOurStore {
        /// The file.
        path: PathBuf,
        /// What is there.
        what: String,
    },

    /// The file backend: its session file's error, as the log names it (the strict
    /// reader's refusal with file, line and byte offset; an I/O error with its path).
    /// Converted into [`Error::Log`].
    #[error(transparent)]
    File(Box<LogError>),
}

impl StoreError {
    /// The append rule of every backend: an append starts at the stored next sequence
    /// number `next`, or it is [`StoreError::SequenceMismatch`] and writes nothing.
    pub(crate) fn check_next(
        session_id: &str,
        next: u64,
        first_seq: u64,
    ) -> Result<(), StoreError> {
        if next == first_seq {
            return Ok(());
        }
        Err(StoreError::SequenceMismatch {
            session_id: session_id.into(),
            expected: next,
            got: first_seq,
        })
    }

    /// Whether trying the same call again later may succeed without anything changing
    /// first: [`StoreError::Unavailable`] and [`StoreError::Busy`].
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. } | StoreError::Busy { .. }
        )
    }
}

impl From<LogError> for StoreError {
    /// The file backend's errors: its file's reader, its I/O.
    fn from(e: LogError) -> Self {
        StoreError::File(Box::new(e))
    }
}

macro_rules! store_from_log {
    ($($t:ident),*) => {$(
        impl From<$t> for StoreError {
            /// The file backend's error, as the log names it.
            fn from(e: $t) -> Self {
                StoreError::File(Box::new(LogError::from(e)))
            }
        }
    )*};
}
store_from_log!(OpenError, AppendError, RuleError, InvalidLog);

impl From<IoFailure> for StoreError {
    fn from(e: IoFailure) -> Self {
        StoreError::File(Box::new(LogError::from(e)))
    }
}

impl From<Box<crate::lock::LockError>> for Error {
    fn from(e: Box<crate::lock::LockError>) -> Self {
        Error::Lock(e)
    }
}

/// The error of a session store's database driver or server, kept opaque so that no
/// driver type is part of the public API. `Display` is the driver's message (which never
/// holds the connection's password); [`std::error::Error::source`] goes on to its cause.
#[derive(Debug)]
pub struct BackendError {
    pub(crate) source: Box<dyn std::error::Error + Send + Sync>,
    pub(crate) sql_state: Option<String>,
}

impl BackendError {
    /// A driver's or server's error, for a backend of a host's own (`Display` must not
    /// hold a password).
    pub fn new(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> BackendError {
        BackendError {
            source: source.into(),
            sql_state: None,
        }
    }

    /// The same error with the server's SQLSTATE code.
    pub fn with_sql_state(mut self, code: impl Into<String>) -> BackendError {
        self.sql_state = Some(code.into());
        self
    }

    /// The server's SQLSTATE code (`"57P01"`, `"28P01"`, ...), when the server answered.
    pub fn sql_state(&self) -> Option<&str> {
        self.sql_state.as_deref()
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The driver's kind ("db error") says little without its cause (the server's
        // message), so both are shown.
        self.source.fmt(f)?;
        if let Some(cause) = self.source.source() {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

// The message already shows the cause; the chain goes on below it.
impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source().and_then(|c| c.source())
    }
}

fn fmt_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_first_line(line: &Option<u64>) -> String {
    match line {
        Some(line) => format!("first used on line {line}"),
        None => "first used by an earlier entry".into(),
    }
}

/// The value [`StateError::Invalid`] is about, as its message names it.
fn invalid_value(write: bool, entry: &Option<String>, from: Option<u32>, to: u32) -> String {
    if write {
        return "the value the write would leave ".to_owned();
    }
    let migrated = from.map_or(String::new(), |from| {
        format!(", migrated from version {from} to {to},")
    });
    format!("the stored value{}{migrated} ", fmt_id(entry))
}

fn fmt_id(id: &Option<String>) -> String {
    match id {
        Some(id) => format!(" (entry '{id}')"),
        None => String::new(),
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl IoFailure {
    /// The one constructor of an `Io` variant: what was being done, to which file. Prefer
    /// [`IoContext::ctx`] on an `io::Result`.
    pub(crate) fn new(
        action: &'static str,
        path: &std::path::Path,
        source: io::Error,
    ) -> IoFailure {
        IoFailure {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl Error {
    /// Whether this is a log's I/O failure (reading or appending to a file), not a
    /// refusal of what was read (the command line's exit codes and hints).
    #[cfg(any(test, feature = "cli"))]
    pub(crate) fn is_log_io(&self) -> bool {
        matches!(
            self,
            Error::Log(
                LogError::Open(OpenError::Io { .. }) | LogError::Append(AppendError::Io { .. })
            )
        )
    }

    /// The strict reader's refusal this is, if it is one (when opening, or in lines
    /// appended by another process): where `verify` points.
    #[cfg(any(test, feature = "cli"))]
    pub(crate) fn invalid_log(&self) -> Option<&InvalidLog> {
        match self {
            Error::Log(
                LogError::Open(OpenError::Invalid(e)) | LogError::Append(AppendError::Invalid(e)),
            ) => Some(e),
            _ => None,
        }
    }

    /// [`IoFailure::new`] as the crate's error.
    pub(crate) fn io(action: &'static str, path: &std::path::Path, source: io::Error) -> Error {
        IoFailure::new(action, path, source).into()
    }
}

/// Attaches a path and an action to an `io::Error` (jj's `.context(path)`): every I/O
/// error of the crate names its file this way, as the `Io` variant of the caller's type.
pub(crate) trait IoContext<T> {
    fn ctx(self, action: &'static str, path: &std::path::Path) -> Result<T, IoFailure>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, action: &'static str, path: &std::path::Path) -> Result<T, IoFailure> {
        self.map_err(|source| IoFailure::new(action, path, source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Location {
        Location {
            line: 3,
            offset: 120,
        }
    }

    fn corrupt() -> InvalidLog {
        InvalidLog::Corrupt {
            path: "s.jsonl".into(),
            at: at(),
            detail: "expected value".into(),
        }
    }

    /// Each of the log's operation types converts into `Error` where `docs/api.md` says,
    /// with the message of the error it carries, byte for byte.
    #[test]
    fn the_logs_operation_types_convert_into_error_keeping_their_message() {
        let message = corrupt().to_string();
        type Lands = fn(&Error) -> bool;
        let cases: Vec<(Error, Lands)> = vec![
            (Error::from(corrupt()), |e| {
                matches!(
                    e,
                    Error::Log(LogError::Open(OpenError::Invalid(
                        InvalidLog::Corrupt { .. }
                    )))
                )
            }),
            (Error::from(OpenError::from(corrupt())), |e| {
                matches!(e, Error::Log(LogError::Open(OpenError::Invalid(_))))
            }),
            (Error::from(AppendError::from(corrupt())), |e| {
                matches!(e, Error::Log(LogError::Append(AppendError::Invalid(_))))
            }),
            (
                Error::from(StoreError::from(AppendError::from(corrupt()))),
                |e| matches!(e, Error::Log(LogError::Append(AppendError::Invalid(_)))),
            ),
        ];
        for (e, lands) in cases {
            assert!(lands(&e), "{e:?}");
            assert_eq!(e.to_string(), message);
            assert_eq!(
                e.invalid_log().map(ToString::to_string),
                Some(message.clone())
            );
        }
    }

    /// An append refused by a held session file is the log's `AppendError::Held`, and
    /// `Error::Lock` in the crate's one error, as every lock refusal; a raw line's I/O
    /// failure is a read's (`Open(Io)`), and an I/O failure is `is_log_io` on either side.
    #[test]
    fn held_is_a_lock_error_and_io_stays_io() {
        let held = AppendError::from(crate::lock::LockError::FileHeld {
            initiator: "pid 7".into(),
            action: "append".into(),
            object: "s.jsonl".into(),
            reason: "it holds the lock".into(),
            pid: Some(7),
        });
        let text = held.to_string();
        let e = Error::from(held);
        assert!(
            matches!(&e, Error::Lock(l) if matches!(**l, crate::lock::LockError::FileHeld { .. })),
            "{e:?}"
        );
        assert_eq!(e.to_string(), text);

        let io = || std::io::Error::other("disk gone");
        let raw = RawLineError::from(IoFailure::new("reading", "s.jsonl".as_ref(), io()));
        let e = Error::from(raw);
        assert!(matches!(
            e,
            Error::Log(LogError::Open(OpenError::Io {
                action: "reading",
                ..
            }))
        ));
        assert!(e.is_log_io());
        let e = Error::from(AppendError::from(IoFailure::new(
            "syncing",
            "s.jsonl".as_ref(),
            io(),
        )));
        assert!(e.is_log_io());
        assert_eq!(e.to_string(), "syncing s.jsonl: disk gone");
        assert!(!Error::from(corrupt()).is_log_io());
    }

    /// A file an append reads again fails as reading it does: each `OpenError` becomes the
    /// `AppendError` variant of the same name and message.
    #[test]
    fn an_open_error_read_again_by_an_append_keeps_its_variant() {
        let not_regular = || OpenError::NotARegularFile {
            path: "s.jsonl".into(),
            kind: "a FIFO".into(),
        };
        let e = AppendError::from(not_regular());
        assert!(matches!(e, AppendError::NotARegularFile { .. }), "{e:?}");
        assert_eq!(e.to_string(), not_regular().to_string());
        assert!(matches!(
            AppendError::from(OpenError::from(corrupt())),
            AppendError::Invalid(InvalidLog::Corrupt { .. })
        ));
    }
}
