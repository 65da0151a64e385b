//! [`LogOptions`]: how a [`SessionLog`](super::SessionLog) is read (strict or salvage), when a new session's
//! file is created ([`Materialize`]), and the file-system seam its writes go through.

use crate::log::io::{FileSystem, StdFileSystem};
use crate::log::reader::ReadMode;
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

/// Options for opening or creating a [`SessionLog`](super::SessionLog).
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
    /// The file-system seam: a test hook (the `__internal` feature), not public API.
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    pub fn file_system(self, fs: Arc<dyn FileSystem>) -> Self {
        self.with_file_system(fs)
    }
    /// The file-system seam every byte of the log goes through (a store passes its own;
    /// tests inject faults through [`LogOptions::file_system`]).
    pub(crate) fn with_file_system(mut self, fs: Arc<dyn FileSystem>) -> Self {
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
}
