//! The durable appender: one `write()` per line, `sync_data()` before acknowledging, and
//! poisoning on the first failure (no retry after a failed fsync: "Can Applications
//! Recover from fsync Failures?", ATC'20); and the advisory lock on the session file that
//! every append holds from its check of the file's end to its `fdatasync`
//! (`docs/lock.md`, "The one lock").

use super::io::{AppendFile, FileIdentity, FileSystem, OpenStatus};
use crate::error::{AppendError, IoContext, IoFailure};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What this module's functions return, unless they say otherwise.
type Result<T, E = AppendError> = std::result::Result<T, E>;

/// How long a writer waits for another writer's lock on the session file before it
/// refuses with [`crate::lock::LockError::FileHeld`]. A writer holds it for one append and one
/// `fdatasync`; the wait is SQLite's `busy_timeout` for the database's write lock.
pub(crate) const FILE_LOCK_WAIT: Duration = Duration::from_secs(10);

pub(crate) struct LogWriter {
    path: PathBuf,
    file: Box<dyn AppendFile>,
    /// The open file's identity, read once: an open file stays the same file.
    identity: Option<FileIdentity>,
    poisoned: Option<String>,
    locked: Locked,
}

/// What a writer holds for its append (`docs/lock.md`, "The one lock").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locked {
    No,
    /// The session file's lock, through this writer's open file.
    File,
    /// This process holds the session ([`crate::lock::hold`]): its turn on the held file.
    Turn(crate::lock::hold::FileKey),
}

impl LogWriter {
    pub(crate) fn new(path: &Path, file: Box<dyn AppendFile>) -> LogWriter {
        LogWriter {
            path: path.to_path_buf(),
            identity: file.identity().ok(),
            file,
            poisoned: None,
            locked: Locked::No,
        }
    }

    /// Takes the session file's lock for one append of `action` (a no-op while held):
    /// waits at most [`FILE_LOCK_WAIT`] for another writer's append, then refuses with
    /// [`crate::lock::LockError::FileHeld`], naming the file and the holder; a holder of
    /// the session ([`crate::Store::lock`], a running Pi) refuses at once where the
    /// platform tells it from a writer. In the process that holds the session, its turn
    /// on the held file instead. A file system without such locks is written without
    /// one, with a warning.
    pub(crate) fn lock(&mut self, action: &str) -> Result<()> {
        if self.lock_within(FILE_LOCK_WAIT)? {
            return Ok(());
        }
        let id = self.identity().map(|id| (id.dev, id.ino));
        let holder = self.file.holder_present();
        Err(crate::lock::file::held(&self.path, id, action, FILE_LOCK_WAIT, holder).into())
    }

    /// [`LogWriter::lock`] without waiting: `Ok(false)` when another holder has it.
    pub(crate) fn try_lock(&mut self) -> Result<bool> {
        self.lock_within(Duration::ZERO)
    }

    fn lock_within(&mut self, wait: Duration) -> Result<bool> {
        if self.locked != Locked::No {
            return Ok(true);
        }
        if let Some(id) = self.identity
            && crate::lock::hold::held_here((id.dev, id.ino))
        {
            return Ok(self.take_turn((id.dev, id.ino), wait));
        }
        match self.file.lock(wait) {
            Ok(true) => {
                self.locked = Locked::File;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) if no_locks_here(&e) => {
                tracing::warn!(file = %self.path.display(), error = %e,
                    "the file system has no advisory locks: appending without the file lock");
                Ok(true)
            }
            Err(source) => Err(IoFailure::new("locking", &self.path, source).into()),
        }
    }

    /// In the process that holds the session: its turn on the held file, waiting at most
    /// `wait` for another thread's append. A hold released meanwhile leaves the file to
    /// the kernel's lock again.
    fn take_turn(&mut self, id: crate::lock::hold::FileKey, wait: Duration) -> bool {
        let deadline = std::time::Instant::now() + wait;
        let mut pause = Duration::from_micros(50);
        loop {
            match crate::lock::hold::begin_append(id) {
                Some(true) => {
                    self.locked = Locked::Turn(id);
                    return true;
                }
                None => {
                    let locked = self.file.lock(Duration::ZERO).unwrap_or(false);
                    if locked {
                        self.locked = Locked::File;
                    }
                    return locked;
                }
                Some(false) => {}
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Releases the lock taken by [`LogWriter::lock`]. On `Err` the lock may still be
    /// held: drop the writer, which closes the file and so releases it.
    pub(crate) fn unlock(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.locked, Locked::No) {
            Locked::No => Ok(()),
            Locked::File => Ok(self.file.unlock().ctx("unlocking", &self.path)?),
            Locked::Turn(id) => {
                crate::lock::hold::end_append(id);
                Ok(())
            }
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        match &self.poisoned {
            Some(cause) => Err(AppendError::Poisoned {
                path: self.path.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn poison(&mut self, cause: String) -> AppendError {
        self.poisoned = Some(cause.clone());
        AppendError::Poisoned {
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
        Ok(self.file.len().ctx("checking the length of", &self.path)?)
    }

    /// [`AppendFile::status`]: `None` when the open file cannot tell.
    pub(crate) fn status(&self) -> Result<Option<OpenStatus>> {
        Ok(self.file.status().ctx("checking", &self.path)?)
    }

    /// The open file's identity, when it could be read at open.
    pub(crate) fn identity(&self) -> Option<FileIdentity> {
        self.identity
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        // The file's lock goes with the file; the holder's turn must be handed back.
        if let Locked::Turn(id) = self.locked {
            crate::lock::hold::end_append(id);
        }
    }
}

/// Whether a lock error says that the file system has no advisory locks (rather than
/// that locking failed).
fn no_locks_here(e: &std::io::Error) -> bool {
    // ENOLCK: e.g. NFS without a lock manager.
    const ENOLCK: i32 = 37;
    e.kind() == std::io::ErrorKind::Unsupported
        || (cfg!(target_os = "linux") && e.raw_os_error() == Some(ENOLCK))
}

/// Appends `line` (one whole line, `\n` included) to the file at `path` only if the file
/// opened for appending is `identity` and `len` bytes long (check the length first,
/// `docs/durability.md`): under the file's advisory lock ([`LogWriter::lock`], refusing
/// `action` when another writer keeps it), one `write()`, then `fdatasync`, as
/// [`LogWriter::append`]; closing the file releases the lock. `Ok(false)`: the file is not
/// so (another file at the path, or someone appended); nothing was written. For a writer
/// that has not read the log but knows its tail (`src/store/tail.rs`).
pub(crate) fn append_if_unchanged(
    fs: &dyn FileSystem,
    path: &Path,
    identity: FileIdentity,
    len: u64,
    line: &[u8],
    action: &str,
) -> Result<bool> {
    let io = |action: &'static str| move |source| IoFailure::new(action, path, source);
    let file = fs.open_append(path).map_err(io("opening for append"))?;
    let mut w = LogWriter::new(path, file);
    // IMPORTANT: from the check of the length to the end of the append, under the lock.
    w.lock(action)?;
    if w.identity() != Some(identity) || w.len()? != len {
        return Ok(false);
    }
    w.append(line)?;
    Ok(true)
}
