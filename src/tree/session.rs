//! [`SessionLog`]: one session as a tree (docs/spec.md §2), read from its file by the log's
//! reader and appended to through the log's durable writer (`append.rs`).
//!
//! It holds the entry tree of one session in memory (ids, parents, types and the `data`
//! of `custom` entries; no message bodies), the active leaf, and, once the file exists, a
//! durable appender. See `docs/durability.md` for what is durable when.
//!
//! A file and any other byte source (a storage backend's rows rendered as JSONL lines,
//! [`LogOptions::read`]) go through one reading routine, `scan_all`; a log read from a
//! byte source is *detached*: it reads like any other and refuses every write.

use super::graph::{NodeData, Tree};
use super::index::Index;
use super::options::LogOptions;
use crate::error::{InvalidSessionId, IoContext, Location, OpenError, RawLineError, UnknownEntry};
use crate::log::entry::{EntryType, Header, Role};
use crate::log::header;
use crate::log::io::{FileIdentity, Meta};
use crate::log::known::{End, Look};
use crate::log::reader::{self, Finding, ReadMode, ScanState};
use crate::log::scan;
use crate::log::writer::LogWriter;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What this module's functions return, unless they say otherwise.
type Result<T, E = OpenError> = std::result::Result<T, E>;

/// A read-only view of one entry.
#[derive(Debug, Clone, Copy)]
pub struct EntryRef<'a> {
    pub(super) log: &'a SessionLog,
    pub(super) idx: u32,
}

impl<'a> EntryRef<'a> {
    fn node(&self) -> &'a NodeData {
        self.log.index.tree.node(self.idx)
    }
    /// The entry's id.
    pub fn id(&self) -> &'a str {
        self.log.index.tree.id(self.idx)
    }
    /// The parent's id; `None` for a root.
    pub fn parent_id(&self) -> Option<&'a str> {
        self.node().parent.map(|p| self.log.index.tree.id(p))
    }
    /// The entry's type.
    pub fn entry_type(&self) -> EntryType {
        self.node().ty
    }
    /// The `customType` of a `custom` or `custom_message` entry.
    pub fn custom_type(&self) -> Option<&'a str> {
        self.node()
            .custom
            .and_then(|c| self.log.index.custom_types.get_index(c as usize))
            .map(|s| &**s)
    }
    /// The role of a `message` entry.
    pub fn role(&self) -> Option<Role> {
        self.node().role
    }
    /// Where its line starts.
    pub fn location(&self) -> Location {
        self.node().at
    }
    /// Length of its line in bytes, newline included.
    pub fn line_len(&self) -> u64 {
        self.node().len
    }
    /// Its index in file order (0 = first entry after the header).
    pub fn index(&self) -> usize {
        self.idx as usize
    }
    /// Ids of its children, in file order.
    pub fn children(&self) -> Vec<&'a str> {
        self.log
            .index
            .tree
            .children_of(self.idx)
            .into_iter()
            .map(|c| self.log.index.tree.id(c))
            .collect()
    }
    /// The `data` of a `custom` entry, as written (`None`: another type, or no `data`).
    pub(crate) fn custom_data(&self) -> Option<&'a str> {
        self.node()
            .data
            .and_then(|d| self.log.index.custom_data.get(d as usize))
            .map(|d| &**d)
    }
}

/// Where a session's bytes are.
pub(super) enum Storage {
    /// The file exists. The writer is opened on the first append.
    File(Option<LogWriter>),
    /// A new session that exists only in memory: the bytes the file will hold.
    Memory(Vec<u8>),
    /// Read from a byte source, not a file ([`LogOptions::read`]): the bytes read, for
    /// raw lines. Never written; the session belongs to the store it came from.
    Detached(Vec<u8>),
}

/// What the reader made of a whole session.
struct Scanned {
    header: Header,
    index: Index,
    scan: ScanState,
    /// Bytes after the last newline.
    tail: u64,
}

/// A byte source that keeps what is read from it (a detached log's lines).
struct Keep<R> {
    src: R,
    bytes: Vec<u8>,
}

impl<R: Read> Read for Keep<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.src.read(buf)?;
        self.bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// One Pi session: its header, its entry tree, and a durable appender.
///
/// ```no_run
/// use session_state::SessionLog;
/// let log = SessionLog::open("session.jsonl")?;
/// println!("{} entries, leaf {:?}", log.len(), log.leaf_id());
/// # Ok::<(), session_state::Error>(())
/// ```
pub struct SessionLog {
    pub(super) header: Header,
    pub(super) index: Index,
    pub(super) scan: ScanState,
    /// Bytes after the last newline, not consumed.
    pub(super) tail: u64,
    pub(super) identity: Option<FileIdentity>,
    /// The file's length and change stamp from one look, taken when that length was the
    /// end of what this log read (after opening, ingesting or appending): the same length
    /// with another stamp later is a rewrite in place (`log::known`).
    pub(super) seen: Option<Look>,
    /// The bytes before the end of the complete lines read (`scan.next.offset`): a file
    /// that grew must still hold them, or it was rewritten.
    pub(super) end: End,
    pub(super) storage: Storage,
    /// The file open for reading, kept by the first read of what others appended
    /// (`refresh`): the next one looks at it with one `fstat` (the path only when the file
    /// was renamed or linked since its last write) and reads the new bytes with one `pread`.
    pub(super) reader: Option<std::fs::File>,
    pub(super) options: LogOptions,
    /// The leaf is the last entry in file order and follows new appends (from this or
    /// another process). False after an explicit `navigate`.
    pub(super) leaf_follows: bool,
    /// Set when creating the file failed part-way: nothing more is appended.
    pub(super) poisoned: Option<String>,
    /// A new session stays in memory until `materialize` is called explicitly.
    pub(super) hold: bool,
    /// Identifies this log for caches above it (the store's folds): they hold a `Weak`
    /// of it, so an entry of a dropped log is recognised and pruned.
    instance: Arc<()>,
}

impl std::fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLog")
            .field("path", &self.index.path)
            .field("session_id", &self.header.id())
            .field("entries", &self.index.tree.len())
            .field("leaf", &self.leaf_id())
            .finish_non_exhaustive()
    }
}

impl SessionLog {
    /// Opens a session file with the strict reader.
    pub fn open(path: impl AsRef<Path>) -> Result<SessionLog> {
        LogOptions::new().open(path)
    }

    /// Starts a new session in `dir` (Pi's rule: the file appears once the session holds
    /// a user or assistant message).
    pub fn create(
        dir: impl AsRef<Path>,
        cwd: impl Into<String>,
    ) -> Result<SessionLog, InvalidSessionId> {
        LogOptions::new().create(dir, cwd)
    }

    pub(super) fn open_with(path: &Path, options: LogOptions) -> Result<SessionLog> {
        // A session named through a symlink is the file it resolves to: migration and
        // appends act on that file and never replace the link (docs/spec.md §2).
        let resolved;
        let path = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                resolved = std::fs::canonicalize(path).ctx("resolving", path)?;
                resolved.as_path()
            }
            _ => path,
        };
        let file = reader::open_regular(path)?;
        let identity = Meta::of_file(&file).ok().map(|m| m.identity());
        let scanned = scan_all(path, options.mode, &file)?;
        let read = scanned.scan.next.offset + scanned.tail;
        // What the file is now, if that is what was read (another writer may have
        // appended during the read: then the next look sees it grown).
        let seen = Meta::of_file(&file)
            .ok()
            .map(|m| Look::of(&m))
            .filter(|l| l.len == read);
        let end = End::read(&file, scanned.scan.next.offset).ctx("reading", path)?;
        let mut log = SessionLog::assemble(scanned, Storage::File(None), identity, options);
        log.seen = seen;
        log.end = end;
        Ok(log)
    }

    /// A detached log: `src` read by the same reader as a file (see [`LogOptions::read`]).
    pub(super) fn read_with(
        label: PathBuf,
        src: impl Read,
        options: LogOptions,
    ) -> Result<SessionLog> {
        let mut kept = Keep {
            src,
            bytes: Vec::new(),
        };
        let scanned = scan_all(&label, options.mode, &mut kept)?;
        Ok(SessionLog::assemble(
            scanned,
            Storage::Detached(kept.bytes),
            None,
            options,
        ))
    }

    /// A log on what the reader found; the leaf is the last entry in file order.
    fn assemble(
        scanned: Scanned,
        storage: Storage,
        identity: Option<FileIdentity>,
        options: LogOptions,
    ) -> SessionLog {
        let Scanned {
            header,
            index,
            scan,
            tail,
        } = scanned;
        let mut log = SessionLog {
            header,
            index,
            scan,
            tail,
            identity,
            seen: None,
            end: End::default(),
            storage,
            reader: None,
            options,
            leaf_follows: true,
            poisoned: None,
            hold: false,
            instance: Arc::new(()),
        };
        log.index.tree.set_leaf(log.index.tree.last_index());
        log
    }

    pub(super) fn create_with(
        dir: &Path,
        cwd: String,
        options: LogOptions,
    ) -> Result<SessionLog, InvalidSessionId> {
        let id = options
            .session_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        // The one session-id rule of every backend (`docs/persistence.md`).
        header::check_session_id(&id)?;
        let mut header = Header::new(id.clone(), cwd);
        if let Some(parent) = &options.parent_session {
            header = header.with_parent_session(parent.clone());
        }
        let stamp = header
            .timestamp()
            .unwrap_or_default()
            .replace([':', '.'], "-");
        let path = dir.join(format!("{stamp}_{id}.jsonl"));
        Ok(SessionLog::in_memory(path, header, options))
    }

    /// A new session at `path` that exists only in memory until [`SessionLog::materialize`]
    /// (or, unless `hold` is set, until its first conversation message).
    pub(crate) fn in_memory(path: PathBuf, header: Header, options: LogOptions) -> SessionLog {
        let line = header.to_line();
        let scanned = Scanned {
            index: Index::new(path, header.id().to_owned(), options.mode),
            scan: ScanState::after_header(&header, line.len() as u64),
            header,
            tail: 0,
        };
        SessionLog::assemble(scanned, Storage::Memory(line.into_bytes()), None, options)
    }

    /// The session file's path (where it is or will be). A path given through a symlink
    /// is resolved to the file it names, which migration and appends act on. For a
    /// detached log, the label it was read under, which names no file.
    pub fn path(&self) -> &Path {
        &self.index.path
    }
    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// The session id.
    pub fn session_id(&self) -> &str {
        self.header.id()
    }
    /// Whether the file exists yet (see [`Materialize`](crate::Materialize)). False for
    /// a detached log, which has no file.
    pub fn is_materialized(&self) -> bool {
        matches!(self.storage, Storage::File(_))
    }
    /// Whether this log was read from a byte source ([`LogOptions::read`]) rather than
    /// a file: it reads like any log and refuses `append`, `materialize` and `refresh`
    /// with [`crate::AppendError::Detached`].
    pub fn is_detached(&self) -> bool {
        matches!(self.storage, Storage::Detached(_))
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.index.tree.len()
    }
    /// True when the session has no entries.
    pub fn is_empty(&self) -> bool {
        self.index.tree.is_empty()
    }
    /// The read mode this log was opened with.
    pub fn read_mode(&self) -> ReadMode {
        self.options.mode
    }
    /// Bytes of complete lines read so far (the watermark).
    pub fn consumed_bytes(&self) -> u64 {
        self.scan.next.offset
    }
    /// Bytes after the last newline (a torn tail), invisible to readers.
    pub fn tail_bytes(&self) -> u64 {
        self.tail
    }

    /// Every warning and (in salvage mode) every skipped line, in file order.
    pub fn findings(&self) -> Vec<Finding> {
        let mut f = self.index.findings.clone();
        f.extend(self.scan.trailing_findings());
        if self.tail > 0 {
            f.push(reader::torn_tail_finding(self.scan.next, self.tail));
        }
        f.sort_by_key(|f| f.at.offset);
        f
    }

    /// This log's identity for caches kept above it (see the field).
    pub(crate) fn instance(&self) -> &Arc<()> {
        &self.instance
    }

    pub(crate) fn tree(&self) -> &Tree {
        &self.index.tree
    }

    pub(crate) fn entry_at(&self, idx: u32) -> EntryRef<'_> {
        EntryRef { log: self, idx }
    }

    /// Looks an entry up by id.
    pub fn entry(&self, id: &str) -> Option<EntryRef<'_>> {
        self.index.tree.index_of(id).map(|idx| self.entry_at(idx))
    }

    pub(crate) fn require(&self, id: &str) -> Result<u32, UnknownEntry> {
        self.index.tree.index_of(id).ok_or_else(|| UnknownEntry {
            path: self.index.path.clone(),
            id: id.into(),
        })
    }

    /// All entries in file order.
    pub fn entries(&self) -> impl Iterator<Item = EntryRef<'_>> + '_ {
        (0..self.len() as u32).map(move |idx| self.entry_at(idx))
    }

    /// The active leaf: the last entry in file order unless navigated elsewhere. `None`
    /// for a session with no entries, or after [`SessionLog::reset_leaf`].
    pub fn leaf_id(&self) -> Option<&str> {
        self.index.tree.leaf_index().map(|i| self.index.tree.id(i))
    }

    /// Moves the leaf to `id`, in memory only: the next append becomes its child (a fork
    /// when it already has children), exactly like Pi's `branch()`.
    pub fn navigate(&mut self, id: &str) -> Result<(), UnknownEntry> {
        let idx = self.require(id)?;
        self.index.tree.set_leaf(Some(idx));
        self.leaf_follows = false;
        Ok(())
    }

    /// Clears the leaf: the next append starts a new root (Pi's `resetLeaf()`).
    pub fn reset_leaf(&mut self) {
        self.index.tree.set_leaf(None);
        self.leaf_follows = false;
    }

    /// Ids from a root to `id` (inclusive), in path order, like Pi's `getBranch(id)`.
    pub fn path_to(&self, id: &str) -> Result<Vec<&str>, UnknownEntry> {
        let idx = self.require(id)?;
        Ok(self
            .index
            .tree
            .path_indexes(idx)
            .into_iter()
            .map(|i| self.index.tree.id(i))
            .collect())
    }

    /// The branch from a root to the active leaf.
    pub fn branch(&self) -> Vec<&str> {
        match self.leaf_id() {
            Some(l) => self.path_to(l).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// Children of `id`, in file order.
    pub fn children(&self, id: &str) -> Result<Vec<&str>, UnknownEntry> {
        Ok(self.entry_at(self.require(id)?).children())
    }

    /// Entries with more than one child.
    pub fn forks(&self) -> Vec<&str> {
        (0..self.len() as u32)
            .filter(|&i| self.index.tree.child_count(i) > 1)
            .map(|i| self.index.tree.id(i))
            .collect()
    }

    /// Entries with no parent.
    pub fn roots(&self) -> Vec<&str> {
        self.index
            .tree
            .roots()
            .into_iter()
            .map(|i| self.index.tree.id(i))
            .collect()
    }

    /// Entries with no children: the tips of every branch.
    pub fn tips(&self) -> Vec<&str> {
        self.index
            .tree
            .tips()
            .into_iter()
            .map(|i| self.index.tree.id(i))
            .collect()
    }

    /// The branch key of any entry (docs/spec.md §3; of [`SessionLog::leaf_id`] for the
    /// branch a write goes to): climb while the parent has exactly one child; the node reached (or the
    /// root) is the key.
    pub fn branch_key_of(&self, id: &str) -> Result<&str, UnknownEntry> {
        let idx = self.require(id)?;
        Ok(self.index.tree.id(self.index.tree.branch_key_of(idx)))
    }

    /// Reads the raw line of an entry (without the newline) from the file or, before
    /// materialization or for a detached log, from memory.
    pub fn raw_line(&self, id: &str) -> Result<String, RawLineError> {
        let node = self.index.tree.node(self.require(id)?);
        let (off, len) = (node.at.offset as usize, node.len as usize - 1);
        match &self.storage {
            Storage::Memory(buf) | Storage::Detached(buf) => {
                Ok(String::from_utf8_lossy(&buf[off..off + len]).into_owned())
            }
            Storage::File(_) => {
                use std::io::{Read, Seek, SeekFrom};
                let path = &self.index.path;
                let mut f = std::fs::File::open(path).ctx("opening", path)?;
                f.seek(SeekFrom::Start(off as u64)).ctx("reading", path)?;
                let mut buf = vec![0; len];
                f.read_exact(&mut buf).ctx("reading", path)?;
                Ok(String::from_utf8_lossy(&buf).into_owned())
            }
        }
    }
}

/// Reads a whole session from `src` (a file, or a byte source for a detached log) with the
/// log's one reading routine ([`crate::log::scan::scan_all`]) into a new tree index.
/// `path` names the source in errors and findings.
fn scan_all(path: &Path, mode: ReadMode, src: impl Read) -> Result<Scanned> {
    let mut index = Index::new(path.to_path_buf(), String::new(), mode);
    let read = scan::scan_all::<_, OpenError>(path, mode, src, &mut index, |index, h| {
        index.session_id = h.id().to_owned();
    })?;
    Ok(Scanned {
        header: read.header,
        index,
        scan: read.scan,
        tail: read.tail,
    })
}

// The constructors of a log from its options, here beside the log they build (so that
// `options.rs` does not name `SessionLog`).
impl LogOptions {
    /// Opens an existing session file.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<SessionLog> {
        SessionLog::open_with(path.as_ref(), self.clone())
    }
    /// Reads a session from a byte source that is not its file: a storage backend's
    /// header and entries rendered as JSONL lines, exactly as a file would hold them.
    ///
    /// The very reader of [`LogOptions::open`] runs on `bytes`: strict or salvage, the
    /// findings, version 1 and 2 migrated in memory, the header size limit. `label` names
    /// the source in errors and findings (and is [`SessionLog::path`]); no file is ever
    /// read or written at it.
    ///
    /// The log is *detached*: the tree, the leaf and navigation, [`SessionLog::raw_line`]
    /// (from the bytes read, which it keeps in memory), findings and folds
    /// ([`crate::SessionState::read`]) work as on a file; [`SessionLog::append`],
    /// [`SessionLog::materialize`] and [`SessionLog::refresh`] are refused with
    /// [`crate::AppendError::Detached`]: the session belongs to its store, append through it.
    ///
    /// ```
    /// use session_state::LogOptions;
    /// let lines = concat!(
    ///     r#"{"type":"session","version":3,"id":"s1","timestamp":"2024-12-03T14:00:00.000Z","cwd":"/p"}"#, "\n",
    ///     r#"{"type":"custom","customType":"note","data":1,"id":"a1b2c3d4","parentId":null,"timestamp":"2024-12-03T14:00:01.000Z"}"#, "\n",
    /// );
    /// let log = LogOptions::new().read("store:s1", lines.as_bytes())?;
    /// assert_eq!((log.session_id(), log.len(), log.leaf_id()), ("s1", 1, Some("a1b2c3d4")));
    /// assert!(log.is_detached());
    /// # Ok::<(), session_state::Error>(())
    /// ```
    pub fn read(&self, label: impl Into<PathBuf>, bytes: impl std::io::Read) -> Result<SessionLog> {
        SessionLog::read_with(label.into(), bytes, self.clone())
    }
    /// Starts a new session in `dir` for `cwd` (in memory until materialized).
    pub fn create(
        &self,
        dir: impl AsRef<Path>,
        cwd: impl Into<String>,
    ) -> Result<SessionLog, InvalidSessionId> {
        SessionLog::create_with(dir.as_ref(), cwd.into(), self.clone())
    }
}
