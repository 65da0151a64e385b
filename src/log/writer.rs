//! The durable appender: one `write()` per line, `sync_data()` before acknowledging, and
//! poisoning on the first failure (no retry after a failed fsync: "Can Applications
//! Recover from fsync Failures?", ATC'20).

use super::io::{AppendFile, FileIdentity, FileSystem};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub(crate) struct LogWriter {
    path: PathBuf,
    file: Box<dyn AppendFile>,
    poisoned: Option<String>,
}

impl LogWriter {
    pub(crate) fn new(path: &Path, file: Box<dyn AppendFile>) -> LogWriter {
        LogWriter {
            path: path.to_path_buf(),
            file,
            poisoned: None,
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        match &self.poisoned {
            Some(cause) => Err(Error::Poisoned {
                path: self.path.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn poison(&mut self, cause: String) -> Error {
        self.poisoned = Some(cause.clone());
        Error::Poisoned {
            path: self.path.clone(),
            cause,
        }
    }

    /// Appends `bytes` with exactly one `write()` and makes them durable.
    ///
    /// On `Ok`, the bytes are on stable storage. On `Err`, the writer is poisoned: the
    /// bytes may be absent, partly present (a torn tail, invisible to readers), or fully
    /// present but not known to be durable.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.check()?;
        match self.file.write(bytes) {
            Ok(n) if n == bytes.len() => {}
            Ok(n) => {
                return Err(
                    self.poison(format!("short write: {n} of {} bytes written", bytes.len()))
                );
            }
            Err(e) => return Err(self.poison(format!("write failed: {e}"))),
        }
        // IMPORTANT: the append is acknowledged only after this returns Ok.
        if let Err(e) = self.file.sync_data() {
            return Err(self.poison(format!("fdatasync failed: {e}")));
        }
        Ok(())
    }

    pub(crate) fn len(&self) -> Result<u64> {
        self.file.len().map_err(|source| Error::Io {
            action: "checking the length of",
            path: self.path.clone(),
            source,
        })
    }

    pub(crate) fn identity(&self) -> Option<FileIdentity> {
        self.file.identity().ok()
    }
}

/// Appends `line` (one whole line, `\n` included) to the file at `path` only if the file
/// opened for appending is `identity` and `len` bytes long (SPEC §2: check the length
/// first): one `write()`, then `fdatasync`, as [`LogWriter::append`]. `Ok(false)`: the
/// file is not so (another file at the path, or someone appended); nothing was written.
/// For a writer that has not read the log but knows its tail (`src/store/tail.rs`).
pub(crate) fn append_if_unchanged(
    fs: &dyn FileSystem,
    path: &Path,
    identity: FileIdentity,
    len: u64,
    line: &[u8],
) -> Result<bool> {
    let io = |action: &'static str| {
        move |source| Error::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    let file = fs.open_append(path).map_err(io("opening for append"))?;
    let mut w = LogWriter::new(path, file);
    if w.identity() != Some(identity) || w.len()? != len {
        return Ok(false);
    }
    w.append(line)?;
    Ok(true)
}
