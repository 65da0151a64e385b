//! [`SessionLog`]: one session as a tree (SPEC §2), read from its file by the log's
//! reader and appended to through the log's durable writer.
//!
//! It holds the entry tree of one session in memory (ids, parents, types and the `data`
//! of `custom` entries; no message bodies), the active leaf, and, once the file exists, a
//! durable appender. See `docs/durability.md` for what is durable when.

use super::graph::{NodeData, Tree};
use crate::error::{Error, IoContext, Location, Result};
use crate::log::entry::{EntryType, Header, Role, raw_str};
use crate::log::io::{FileIdentity, FileSystem, StdFileSystem};
use crate::log::reader::{
    self, EntrySink, Finding, FindingKind, ReadMode, ScanState, ScannedEntry, Severity,
};
use crate::log::writer::LogWriter;
use crate::log::{NewEntry, header, io, migrate};
use indexmap::IndexSet;
use serde_json::value::RawValue;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// When a new session's file is first written (SPEC §2, lazy materialization).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Materialize {
    /// Pi 1.x's rule: the file is created once the session holds a user or assistant
    /// message. Until then entries live only in memory; a process that ends first loses
    /// them, exactly as in Pi.
    #[default]
    OnConversation,
    /// Create the file on the first append, for hosts that are not Pi.
    FirstAppend,
}

/// Options for opening or creating a [`SessionLog`].
#[derive(Clone)]
pub struct LogOptions {
    mode: ReadMode,
    materialize: Materialize,
    fs: Arc<dyn FileSystem>,
    session_id: Option<String>,
    parent_session: Option<String>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            mode: ReadMode::Strict,
            materialize: Materialize::OnConversation,
            fs: Arc::new(StdFileSystem),
            session_id: None,
            parent_session: None,
        }
    }
}

impl std::fmt::Debug for LogOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogOptions")
            .field("mode", &self.mode)
            .field("materialize", &self.materialize)
            .finish_non_exhaustive()
    }
}

impl LogOptions {
    /// Strict reading, Pi's materialization rule, the real file system.
    pub fn new() -> LogOptions {
        LogOptions::default()
    }
    /// Strict (default) or salvage reading.
    pub fn mode(mut self, mode: ReadMode) -> Self {
        self.mode = mode;
        self
    }
    /// When a new session's file is created.
    pub fn materialize(mut self, m: Materialize) -> Self {
        self.materialize = m;
        self
    }
    /// The file-system seam (tests inject faults through it).
    pub fn file_system(mut self, fs: Arc<dyn FileSystem>) -> Self {
        self.fs = fs;
        self
    }
    /// The id of a new session (default: a UUIDv7, as Pi 1.x).
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }
    /// The `parentSession` of a new session's header.
    pub fn parent_session(mut self, p: impl Into<String>) -> Self {
        self.parent_session = Some(p.into());
        self
    }
    /// Opens an existing session file.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<SessionLog> {
        SessionLog::open_with(path.as_ref(), self.clone())
    }
    /// Starts a new session in `dir` for `cwd` (in memory until materialized).
    pub fn create(&self, dir: impl AsRef<Path>, cwd: impl Into<String>) -> Result<SessionLog> {
        SessionLog::create_with(dir.as_ref(), cwd.into(), self.clone())
    }
}

/// A read-only view of one entry.
#[derive(Debug, Clone, Copy)]
pub struct EntryRef<'a> {
    log: &'a SessionLog,
    idx: u32,
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
    pub(crate) fn custom_data(&self) -> Option<&'a RawValue> {
        self.node()
            .data
            .and_then(|d| self.log.index.custom_data.get(d as usize))
            .map(|d| &**d)
    }
}

enum Storage {
    /// The file exists. The writer is opened on the first append.
    File(Option<LogWriter>),
    /// A new session that exists only in memory: the bytes the file will hold.
    Memory(Vec<u8>),
}

/// The index built from a session's lines; the sink of the scanner.
struct Index {
    path: PathBuf,
    session_id: String,
    mode: ReadMode,
    tree: Tree,
    custom_types: IndexSet<Box<str>>,
    /// The `data` of every `custom` entry (an extension's state; usually small).
    custom_data: Vec<Box<RawValue>>,
    findings: Vec<Finding>,
}

impl EntrySink for Index {
    fn entry(&mut self, e: ScannedEntry<'_, '_>, _state: &ScanState) -> Result<()> {
        let id = &*e.id;
        if let Some(first) = self.tree.index_of(id) {
            let first_line = self.tree.node(first).at.line;
            if self.mode == ReadMode::Strict {
                return Err(Error::DuplicateId {
                    path: self.path.clone(),
                    at: e.at,
                    id: id.into(),
                    first_line: Some(first_line),
                });
            }
            self.findings.push(Finding {
                severity: Severity::Error,
                kind: FindingKind::DuplicateId,
                at: e.at,
                entry_id: Some(id.into()),
                message: format!("skipped: id already used on line {first_line}"),
            });
            return Ok(());
        }
        let parent = match e.parent.as_deref() {
            None => None,
            Some(p) => match self.tree.index_of(p) {
                Some(pi) => Some(pi),
                None => {
                    let (kind, err) = if p == id {
                        (
                            FindingKind::Cycle,
                            Error::Cycle {
                                path: self.path.clone(),
                                at: e.at,
                                id: id.into(),
                            },
                        )
                    } else {
                        (
                            FindingKind::DanglingParent,
                            Error::DanglingParent {
                                path: self.path.clone(),
                                at: e.at,
                                id: id.into(),
                                parent: p.into(),
                            },
                        )
                    };
                    if self.mode == ReadMode::Strict {
                        return Err(err);
                    }
                    self.findings.push(Finding {
                        severity: Severity::Error,
                        kind,
                        at: e.at,
                        entry_id: Some(id.into()),
                        message: format!("parentId '{p}' names no earlier entry; read as a root"),
                    });
                    None
                }
            },
        };
        let ty = EntryType::from_name(&e.raw.ty.0);
        let mut custom = None;
        let mut data = None;
        if matches!(ty, EntryType::Custom | EntryType::CustomMessage)
            && let Some(ct) = e.raw.custom_type.and_then(raw_str)
        {
            let (ci, _) = self.custom_types.insert_full(ct.into());
            custom = Some(ci as u32);
        }
        if ty == EntryType::Custom
            && let Some(d) = e.raw.data
        {
            data = Some(self.custom_data.len() as u32);
            self.custom_data.push(d.to_owned());
        }
        let role = e
            .raw
            .message
            .as_ref()
            .and_then(|m| m.role.as_ref())
            .map(|r| Role::from_name(&r.0))
            .filter(|_| ty == EntryType::Message);
        self.tree.push(
            id,
            NodeData {
                parent,
                ty,
                custom,
                role,
                at: e.at,
                len: e.len,
                data,
            },
        );
        Ok(())
    }

    fn finding(&mut self, f: Finding) {
        self.findings.push(f);
    }

    fn assign_id(&mut self, ordinal: u64) -> String {
        let mut attempt = 0;
        loop {
            let id = migrate::v1_id(&self.session_id, ordinal, attempt);
            if !self.tree.contains(&id) {
                return id;
            }
            attempt += 1;
        }
    }

    fn last_id(&self) -> Option<String> {
        self.tree.last_index().map(|i| self.tree.id(i).to_owned())
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
    header: Header,
    index: Index,
    scan: ScanState,
    /// Bytes after the last newline, not consumed.
    tail: u64,
    identity: Option<FileIdentity>,
    storage: Storage,
    options: LogOptions,
    /// The leaf is the last entry in file order and follows new appends (from this or
    /// another process). False after an explicit `navigate`.
    leaf_follows: bool,
    /// Set when creating the file failed part-way: nothing more is appended.
    poisoned: Option<String>,
    /// A new session stays in memory until `materialize` is called explicitly.
    hold: bool,
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
    pub fn create(dir: impl AsRef<Path>, cwd: impl Into<String>) -> Result<SessionLog> {
        LogOptions::new().create(dir, cwd)
    }

    fn open_with(path: &Path, options: LogOptions) -> Result<SessionLog> {
        // A session named through a symlink is the file it resolves to: migration and
        // appends act on that file and never replace the link (SPEC §2).
        let resolved;
        let path = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                resolved = std::fs::canonicalize(path).ctx("resolving", path)?;
                resolved.as_path()
            }
            _ => path,
        };
        let file = reader::open_regular(path)?;
        let identity = file.metadata().ok().map(|m| FileIdentity::of(&m));
        let mut index = Index {
            path: path.to_path_buf(),
            session_id: String::new(),
            mode: options.mode,
            tree: Tree::default(),
            custom_types: IndexSet::new(),
            custom_data: Vec::new(),
            findings: Vec::new(),
        };
        let mut header: Option<(Header, ScanState)> = None;
        let mode = options.mode;
        let start = Location { line: 1, offset: 0 };
        let limit = Some(reader::MAX_HEADER_LINE);
        let tail =
            reader::for_each_line_limited(
                &file,
                path,
                start,
                limit,
                |bytes, at| match &mut header {
                    Some((_, scan)) => scan.line(path, mode, bytes, at, &mut index),
                    None => match header::scan_line(path, mode, bytes, at)? {
                        header::ScannedLine::Header(h) => {
                            index.session_id = h.id().to_owned();
                            let mut scan = ScanState::after_header(&h, 0);
                            scan.next = Location {
                                line: at.line + 1,
                                offset: at.offset + bytes.len() as u64 + 1,
                            };
                            header = Some((h, scan));
                            Ok(())
                        }
                        header::ScannedLine::Skipped(finding) => {
                            index.findings.push(finding);
                            Ok(())
                        }
                    },
                },
            )?;
        let Some((header, scan)) = header else {
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            return Err(header::not_found(path, len, tail));
        };
        let mut log = SessionLog {
            header,
            index,
            scan,
            tail,
            identity,
            storage: Storage::File(None),
            options,
            leaf_follows: true,
            poisoned: None,
            hold: false,
            instance: Arc::new(()),
        };
        log.index.tree.set_leaf(log.index.tree.last_index());
        Ok(log)
    }

    fn create_with(dir: &Path, cwd: String, options: LogOptions) -> Result<SessionLog> {
        let id = options
            .session_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        if id.is_empty() || id.contains(['/', '\\', '\n']) {
            return Err(Error::InvalidOption {
                option: "session_id",
                detail: format!("{id:?} cannot name a session file"),
            });
        }
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
        let scan = ScanState::after_header(&header, line.len() as u64);
        SessionLog {
            index: Index {
                path,
                session_id: header.id().to_owned(),
                mode: options.mode,
                tree: Tree::default(),
                custom_types: IndexSet::new(),
                custom_data: Vec::new(),
                findings: Vec::new(),
            },
            header,
            scan,
            tail: 0,
            identity: None,
            storage: Storage::Memory(line.into_bytes()),
            options,
            leaf_follows: true,
            poisoned: None,
            hold: false,
            instance: Arc::new(()),
        }
    }

    /// Keeps appends in memory until [`SessionLog::materialize`] is called (the store's
    /// all-or-nothing first append).
    pub(crate) fn hold_in_memory(mut self) -> SessionLog {
        self.hold = true;
        self
    }

    /// The session file's path (where it is or will be). A path given through a symlink
    /// is resolved to the file it names, which migration and appends act on.
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
    /// Whether the file exists yet (see [`Materialize`]).
    pub fn is_materialized(&self) -> bool {
        matches!(self.storage, Storage::File(_))
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

    pub(crate) fn require(&self, id: &str) -> Result<u32> {
        self.index
            .tree
            .index_of(id)
            .ok_or_else(|| Error::UnknownEntry {
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
    pub fn navigate(&mut self, id: &str) -> Result<()> {
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
    pub fn path_to(&self, id: &str) -> Result<Vec<&str>> {
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
    pub fn children(&self, id: &str) -> Result<Vec<&str>> {
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

    /// The branch key of any entry (SPEC §3; [`crate::branch_key`] gives the active
    /// leaf's): climb while the parent has exactly one child; the node reached (or the
    /// root) is the key.
    pub fn branch_key_of(&self, id: &str) -> Result<&str> {
        let idx = self.require(id)?;
        Ok(self.index.tree.id(self.index.tree.branch_key_of(idx)))
    }

    /// Reads the raw line of an entry (without the newline) from the file or, before
    /// materialization, from memory.
    pub fn raw_line(&self, id: &str) -> Result<String> {
        let node = self.index.tree.node(self.require(id)?);
        let (off, len) = (node.at.offset as usize, node.len as usize - 1);
        match &self.storage {
            Storage::Memory(buf) => Ok(String::from_utf8_lossy(&buf[off..off + len]).into_owned()),
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

    /// Reads another process's appends (SPEC §5). Errors if the file was truncated or
    /// replaced; then reopen.
    pub fn refresh(&mut self) -> Result<()> {
        if !self.is_materialized() {
            return Ok(());
        }
        let (len, expected) = self.check_same_file()?;
        if len == expected {
            return Ok(());
        }
        self.ingest_from_disk()
    }

    /// Checks that the file at the path is still the one this log read (same identity,
    /// not shorter than what was read) and returns its length and the length expected.
    fn check_same_file(&self) -> Result<(u64, u64)> {
        let path = &self.index.path;
        let meta = std::fs::metadata(path).ctx("checking", path)?;
        let expected = self.scan.next.offset + self.tail;
        if let Some(id) = self.identity
            && id != FileIdentity::default()
            && FileIdentity::of(&meta) != id
        {
            return Err(Error::ChangedOnDisk {
                path: path.clone(),
                detail: "another file now sits at this path".into(),
            });
        }
        if meta.len() < expected {
            return Err(Error::ChangedOnDisk {
                path: path.clone(),
                detail: format!("it shrank from {expected} to {} bytes", meta.len()),
            });
        }
        Ok((meta.len(), expected))
    }

    fn ingest_from_disk(&mut self) -> Result<()> {
        use std::io::{Seek, SeekFrom};
        let path = self.index.path.clone();
        let mut f = reader::open_regular(&path)?;
        f.seek(SeekFrom::Start(self.scan.next.offset))
            .ctx("reading", &path)?;
        let was_last = self.leaf_follows;
        let mode = self.options.mode;
        let start = self.scan.next;
        let scan = &mut self.scan;
        let index = &mut self.index;
        self.tail = reader::for_each_line(f, &path, start, |bytes, at| {
            scan.line(&path, mode, bytes, at, index)
        })?;
        if was_last {
            self.index.tree.set_leaf(self.index.tree.last_index());
        }
        Ok(())
    }

    fn fresh_id(&self) -> String {
        loop {
            let u = uuid::Uuid::new_v4().simple().to_string();
            let id = &u[..8];
            if !self.index.tree.contains(id) && id != self.header.id() {
                return id.to_owned();
            }
        }
    }

    /// Appends an entry as a child of the active leaf, which then moves to it.
    ///
    /// Once the file exists, the entry is durable when this returns `Ok` (one `write()`
    /// of the whole line, then `fdatasync`). Before the session is materialized, the entry
    /// is kept in memory (see [`Materialize`]). On an I/O failure the log is poisoned:
    /// reopen it to see what reached the disk.
    pub fn append(&mut self, entry: NewEntry) -> Result<String> {
        if let Some(cause) = &self.poisoned {
            return Err(Error::Poisoned {
                path: self.index.path.clone(),
                cause: cause.clone(),
            });
        }
        if self.is_materialized() {
            self.prepare_file_append()?;
        }
        let id = self.fresh_id();
        let parent = self
            .index
            .tree
            .leaf_index()
            .map(|p| self.index.tree.id(p).to_owned());
        let line = entry.to_line(&id, parent.as_deref());
        let start = self.scan.next;
        match &mut self.storage {
            Storage::File(writer) => {
                let writer = match writer {
                    Some(w) => w,
                    None => unreachable_writer(&self.index.path)?,
                };
                writer.append(line.as_bytes())?;
            }
            Storage::Memory(buf) => buf.extend_from_slice(line.as_bytes()),
        }
        self.ingest_own_line(line.as_bytes(), start)?;
        if let Storage::Memory(_) = self.storage
            && !self.hold
        {
            let conversation = self.options.materialize == Materialize::FirstAppend
                || self
                    .entries()
                    .any(|e| matches!(e.role(), Some(Role::User | Role::Assistant)))
                || matches!(entry.role(), Some(Role::User | Role::Assistant));
            if conversation {
                self.materialize()?;
            }
        }
        Ok(id)
    }

    fn ingest_own_line(&mut self, line: &[u8], at: Location) -> Result<()> {
        let bytes = &line[..line.len() - 1];
        let path = self.index.path.clone();
        self.scan
            .line(&path, self.options.mode, bytes, at, &mut self.index)?;
        let last = self.index.tree.last_index();
        self.index.tree.set_leaf(last);
        self.leaf_follows = true;
        Ok(())
    }

    /// Writes a new session's buffered entries to disk through the one durable-create
    /// routine (`io::create_durably`): one write to a hidden temporary file in the same
    /// directory, `fdatasync`, a hard link to the real name (which fails if that name
    /// exists), then fsync the directory. The real name never shows a half-written file,
    /// even after a crash; a failure leaves at most a hidden temporary file. A failed write
    /// or sync, or a failure after the file became visible, poisons the log.
    pub fn materialize(&mut self) -> Result<()> {
        if let Some(cause) = &self.poisoned {
            return Err(Error::Poisoned {
                path: self.index.path.clone(),
                cause: cause.clone(),
            });
        }
        let Storage::Memory(buf) = &self.storage else {
            return Ok(());
        };
        let buf = buf.clone();
        let path = self.index.path.clone();
        let dir = reader::parent_dir(&path).to_path_buf();
        std::fs::create_dir_all(&dir).ctx("creating the directory", &dir)?;
        if path.exists() {
            return Err(Error::AlreadyExists { path });
        }
        let fs = self.options.fs.clone();
        let created = io::create_durably(&*fs, &path, "creating", io::Place::Link, |tmp| {
            tmp.write(&buf)
        });
        match created {
            Ok(()) => {}
            Err(io::CreateFailed {
                step: io::Step::Create | io::Step::Place,
                error,
            }) => return Err(error),
            Err(io::CreateFailed {
                step: io::Step::Fill,
                error,
            }) => {
                // No retry after a failed write or fsync ("Can Applications Recover from
                // fsync Failures?", ATC'20).
                let cause = error.to_string();
                self.poisoned = Some(cause.clone());
                return Err(Error::Poisoned { path, cause });
            }
            Err(io::CreateFailed {
                step: io::Step::SyncDir,
                error,
            }) => {
                // The file exists but is not known to be durable: append nothing more here.
                self.poisoned = Some(error.to_string());
                return Err(error);
            }
        }
        match fs.open_append(&path).ctx("opening for append", &path) {
            Ok(file) => {
                let writer = LogWriter::new(&path, file);
                self.identity = writer.identity();
                self.storage = Storage::File(Some(writer));
                Ok(())
            }
            Err(e) => {
                self.poisoned = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Before an append to an existing file: open the writer, check the length, ingest a
    /// foreign tail, migrate an old version, close a torn tail.
    fn prepare_file_append(&mut self) -> Result<()> {
        if let Storage::File(Some(w)) = &self.storage {
            w.check()?;
        }
        // Decide before touching the file (SPEC §2): every refusal happens here, before a
        // migration or the newline that closes a torn tail writes a byte.
        self.decide_before_writing()?;
        if self.header.version() < 3 {
            self.migrate_on_disk()?;
        }
        if let Storage::File(None) = self.storage {
            let w = self
                .options
                .fs
                .open_append(&self.index.path)
                .ctx("opening for append", &self.index.path)?;
            self.storage = Storage::File(Some(LogWriter::new(&self.index.path, w)));
        }
        let Storage::File(Some(w)) = &self.storage else {
            return unreachable_writer::<()>(&self.index.path);
        };
        let len = w.len()?;
        let expected = self.scan.next.offset + self.tail;
        if let (Some(now), Some(was)) = (w.identity(), self.identity) {
            let on_path = std::fs::metadata(&self.index.path)
                .ok()
                .map(|m| FileIdentity::of(&m));
            if now != was || on_path != Some(now) {
                return Err(Error::ChangedOnDisk {
                    path: self.index.path.clone(),
                    detail: "another file now sits at this path".into(),
                });
            }
        }
        if len < expected {
            return Err(Error::ChangedOnDisk {
                path: self.index.path.clone(),
                detail: format!("it shrank from {expected} to {len} bytes"),
            });
        }
        if len > expected {
            // Someone appended meanwhile: ingest their entries first.
            self.ingest_from_disk()?;
        }
        if self.tail > 0 {
            // Close the torn tail so two records can never fuse. Its bytes stay in the
            // file as a torn record that readers skip and report.
            if let Storage::File(Some(w)) = &mut self.storage {
                w.append(b"\n")?;
            }
            self.ingest_from_disk()?;
        }
        if let Some((at, detail)) = self.scan.pending_bad.first() {
            return Err(Error::TrailingGarbage {
                path: self.index.path.clone(),
                at: *at,
                detail: detail.clone(),
            });
        }
        Ok(())
    }

    /// Reads what others appended and refuses, without writing, a file this writer would
    /// refuse after writing: an unparsable last line, or a tail that the closing newline
    /// would turn into one.
    fn decide_before_writing(&mut self) -> Result<()> {
        let path = self.index.path.clone();
        let (len, expected) = self.check_same_file()?;
        if len > expected {
            self.ingest_from_disk()?;
        }
        let refuse = |at: Location, detail: String| Error::TrailingGarbage {
            path: path.clone(),
            at,
            detail,
        };
        if let Some((at, detail)) = self.scan.pending_bad.first() {
            return Err(refuse(*at, detail.clone()));
        }
        if self.tail > 0 {
            use std::io::{Read, Seek, SeekFrom};
            let mut f = reader::open_regular(&path)?;
            f.seek(SeekFrom::Start(self.scan.next.offset))
                .ctx("reading", &path)?;
            let mut tail = Vec::new();
            f.take(self.tail)
                .read_to_end(&mut tail)
                .ctx("reading", &path)?;
            match reader::classify(&tail) {
                reader::LineClass::Bad(detail) => return Err(refuse(self.scan.next, detail)),
                reader::LineClass::Invalid(detail) if self.options.mode == ReadMode::Strict => {
                    return Err(Error::InvalidEntry {
                        path,
                        at: self.scan.next,
                        id: None,
                        detail,
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn migrate_on_disk(&mut self) -> Result<()> {
        let assigned: Vec<(String, Option<String>)> = self
            .entries()
            .map(|e| (e.id().to_owned(), e.parent_id().map(str::to_owned)))
            .collect();
        let path = self.index.path.clone();
        migrate::migrate_file(&*self.options.fs, &path, self.header.version(), &assigned)?;
        let leaf = self.leaf_id().map(str::to_owned);
        let follows = self.leaf_follows;
        let mut fresh = SessionLog::open_with(&path, self.options.clone())?;
        if !follows {
            match leaf {
                Some(l) => fresh.navigate(&l)?,
                None => fresh.reset_leaf(),
            }
        }
        *self = fresh;
        Ok(())
    }
}

fn unreachable_writer<T>(path: &Path) -> Result<T> {
    Err(Error::Internal {
        what: format!("{}: the session file has no open writer", path.display()),
    })
}
