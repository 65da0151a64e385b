//! [`LogOptions`]: how a [`SessionLog`] is read (strict or salvage), when a new session's
//! file is created ([`Materialize`]), and the file-system seam its writes go through.

use super::SessionLog;
use crate::error::Result;
use crate::log::io::{FileSystem, StdFileSystem};
use crate::log::reader::ReadMode;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// When a new session's file is first written (docs/spec.md §2, lazy materialization).
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
    pub(super) mode: ReadMode,
    pub(super) materialize: Materialize,
    pub(super) fs: Arc<dyn FileSystem>,
    pub(super) session_id: Option<String>,
    pub(super) parent_session: Option<String>,
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
    /// The file-system seam (for the file backend of the persistence seam, whose writes
    /// go through it as the log's do).
    pub(crate) fn file_system_ref(&self) -> &Arc<dyn FileSystem> {
        &self.fs
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
    /// [`crate::Error::Detached`]: the session belongs to its store, append through it.
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
    pub fn create(&self, dir: impl AsRef<Path>, cwd: impl Into<String>) -> Result<SessionLog> {
        SessionLog::create_with(dir.as_ref(), cwd.into(), self.clone())
    }
}
