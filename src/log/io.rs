//! The narrow I/O seam under the log writer (after redb's `StorageBackend`).
//!
//! Every byte the writer puts on disk goes through [`FileSystem`] and [`AppendFile`], so
//! tests can fail the Nth write, shorten a write, fail a sync or run out of space, and
//! then check what a fresh reader sees. Reading does not go through the seam: a reader
//! never changes a file, so there is nothing to inject there.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// A file opened for appending (`O_APPEND`).
#[allow(clippy::len_without_is_empty)]
pub trait AppendFile: Send {
    /// The current length of the file.
    fn len(&self) -> io::Result<u64>;
    /// One `write()` call. May write fewer bytes than given (a short write).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// `fdatasync`: the written bytes and the length are durable when it returns `Ok`.
    fn sync_data(&mut self) -> io::Result<()>;
    /// The identity of the open file (device, inode) to detect a replaced path.
    fn identity(&self) -> io::Result<FileIdentity>;
}

/// Device and inode of a file: what tells "the same file" from "another file at the
/// same path".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FileIdentity {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

impl FileIdentity {
    /// The identity of a file from its metadata.
    pub fn of(meta: &std::fs::Metadata) -> FileIdentity {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileIdentity {
                dev: meta.dev(),
                ino: meta.ino(),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            FileIdentity::default()
        }
    }
}

/// The file-system operations the writer needs.
pub trait FileSystem: Send + Sync {
    /// Opens an existing file for appending.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>>;
    /// Creates a new file for appending; fails if it exists (`O_CREAT|O_EXCL`).
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn AppendFile>>;
    /// fsyncs a directory, making a create or rename in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Atomically renames `from` to `to` (same directory).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file (used to clean up a temporary file).
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Gives the file `from` a second name `to`; fails if `to` exists. A new session file
    /// is written under a temporary name and linked into place, so its real name never
    /// shows a half-written file.
    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFileSystem;

struct StdAppendFile(File);

impl AppendFile for StdAppendFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn identity(&self) -> io::Result<FileIdentity> {
        Ok(FileIdentity::of(&self.0.metadata()?))
    }
}

impl FileSystem for StdFileSystem {
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        let f = OpenOptions::new().append(true).open(path)?;
        Ok(Box::new(StdAppendFile(f)))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        let f = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(StdAppendFile(f)))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        #[cfg(unix)]
        {
            File::open(dir)?.sync_all()
        }
        #[cfg(not(unix))]
        {
            let _ = dir;
            Ok(())
        }
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
}
