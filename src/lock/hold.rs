//! The one lock (`docs/lock.md`): the kernel's lock on the session file itself, held by
//! every append of this crate for the length of the append, and by a holder
//! ([`crate::Store::lock`], a running Pi's presence) for as long as it holds the session.
//!
//! The lock is `flock(LOCK_EX)` on an open file description of the session file (std's
//! `File::try_lock`): it belongs to the open file, not to the process, so Pi's own
//! `appendFileSync`, which opens and closes the session file inside the process that
//! holds the presence, never drops it, and the kernel drops it when the holder's process
//! dies. Every writer of a session shares the file, whatever projection database, path,
//! symlink, hard link or release it uses, so nothing else has to be found, trusted or
//! kept alive for exclusion to hold.
//!
//! A writer that finds the file locked must tell a holder (refuse at once) from another
//! writer (wait for its one append). On Linux a holder also takes a shared open file
//! description lock (`F_OFD_SETLK`) on one byte far past the end of any session file,
//! [`HOLDER_BYTE`]; a writer that finds the file locked asks the kernel
//! (`F_OFD_GETLK`) whether anyone holds that byte. Elsewhere the writer waits its bounded
//! wait and is then refused ([`crate::lock::LockError::FileHeld`]).
//!
//! Within the holder's own process its writes cannot take the file's lock (a second open
//! file of the same process conflicts with the holder's): they take the process's turn on
//! the held file instead ([`begin_append`]), so two threads of the holder's process still
//! append one at a time.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The byte on which a holder takes a shared lock on Linux (`F_OFD_SETLK`, `F_RDLCK`), far
/// past the end of any session file: writers never lock it, so a lock there is a holder's.
pub(crate) const HOLDER_BYTE: u64 = 1 << 62;

/// A file's device and inode: "the same file" however it is named.
pub(crate) type FileKey = (u64, u64);

/// The [`FileKey`] of a file from its metadata (zeros where the platform has none).
pub(crate) fn key_of(meta: &std::fs::Metadata) -> FileKey {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        (0, 0)
    }
}

/// A held session file: the open file that holds the lock, how many holds of this
/// process share it, and whether one of this process's writes is appending to it.
#[derive(Debug)]
struct Held {
    _file: File,
    count: usize,
    appending: bool,
}

/// The session files this process holds, by identity.
static HELD: Mutex<Option<HashMap<FileKey, Held>>> = Mutex::new(None);
/// How many files are in [`HELD`]: a write of a process that holds nothing (the common
/// case) looks at this counter only.
static ANY: AtomicUsize = AtomicUsize::new(0);

fn held() -> std::sync::MutexGuard<'static, Option<HashMap<FileKey, Held>>> {
    crate::sync::lock(&HELD)
}

/// This process's hold on one session file; dropping it lets the file go (the last hold
/// of the process closes the file, which releases the kernel's lock).
#[derive(Debug)]
#[must_use = "dropping the hold releases the session file at once"]
pub(crate) struct Hold {
    identity: FileKey,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut map = held();
        let Some(files) = map.as_mut() else { return };
        if let Some(h) = files.get_mut(&self.identity) {
            h.count -= 1;
            if h.count == 0 {
                files.remove(&self.identity);
                ANY.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// How taking a hold ended.
#[derive(Debug)]
pub(crate) enum Taken {
    /// The file is held (by this process, now or already).
    Held(Hold),
    /// There is no file at the path: nothing to hold (nobody can append to it either).
    NoFile,
    /// A holder of another open file has it (`holder: true`), or another writer kept it
    /// for all of `wait`.
    Refused { identity: FileKey, holder: bool },
}

/// Takes the session file at `path` for this process, waiting at most `wait` for a
/// writer's append to end; a holder of another process refuses at once where the
/// platform tells holders from writers (Linux).
pub(crate) fn hold(path: &Path, wait: Duration) -> io::Result<Taken> {
    // Windows locks are mandatory: a hold there would stop Pi's own appends. Until it has
    // a lock of its own, nothing is held there (`docs/lock.md`, "Where it holds").
    if cfg!(not(unix)) {
        return Ok(Taken::NoFile);
    }
    let file = match open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Taken::NoFile),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let identity = key_of(&meta);
    {
        let mut map = held();
        if let Some(h) = map.get_or_insert_with(HashMap::new).get_mut(&identity) {
            h.count += 1;
            return Ok(Taken::Held(Hold { identity }));
        }
    }
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_micros(250);
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        if holder_present(&file) {
            return Ok(Taken::Refused {
                identity,
                holder: true,
            });
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(Taken::Refused {
                identity,
                holder: false,
            });
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
    mark(&file)?;
    let mut map = held();
    let files = map.get_or_insert_with(HashMap::new);
    // Another thread of this process may have taken it meanwhile (through another open
    // file it could not: the lock excludes it; through this one it did not): count it.
    let h = files.entry(identity).or_insert_with(|| {
        ANY.fetch_add(1, Ordering::Relaxed);
        Held {
            _file: file,
            count: 0,
            appending: false,
        }
    });
    h.count += 1;
    Ok(Taken::Held(Hold { identity }))
}

/// Whether this process holds the file `identity` ([`hold`]).
pub(crate) fn held_here(identity: FileKey) -> bool {
    ANY.load(Ordering::Relaxed) > 0 && held().as_ref().is_some_and(|m| m.contains_key(&identity))
}

/// The holder process's turn to append to the file it holds: `Some(true)` taken,
/// `Some(false)` another thread of this process is appending, `None` this process no
/// longer holds it.
pub(crate) fn begin_append(identity: FileKey) -> Option<bool> {
    let mut map = held();
    let h = map.as_mut()?.get_mut(&identity)?;
    Some(!std::mem::replace(&mut h.appending, true))
}

/// Ends the turn taken by [`begin_append`].
pub(crate) fn end_append(identity: FileKey) {
    if let Some(h) = held().as_mut().and_then(|m| m.get_mut(&identity)) {
        h.appending = false;
    }
}

/// Whether a holder of another open file holds the session file at `path`: what says
/// whether a holder that holds the file's lock is still there (its row is then judged by
/// it, not by `/proc`). `None` where that cannot be told (no such file, no locks here).
/// On Linux the holder's byte answers; elsewhere a lock tried and let go at once, which
/// another writer's append also answers `true` for.
pub(crate) fn held_by_another(path: &Path) -> Option<bool> {
    if cfg!(not(unix)) {
        return None;
    }
    let file = open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    if held_here(key_of(&meta)) {
        return Some(true);
    }
    if cfg!(target_os = "linux") {
        return Some(holder_present(&file));
    }
    match file.try_lock() {
        Ok(()) => Some(false),
        Err(std::fs::TryLockError::WouldBlock) => Some(true),
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

/// Opens the session file to lock it: read-only, never blocking on a FIFO.
fn open(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY);
    }
    options.open(path)
}

/// Whether another open file holds [`HOLDER_BYTE`] of `file` (one `F_OFD_GETLK`).
pub(crate) fn holder_present(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        ofd::probe(file)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// Marks `file`'s lock as a holder's ([`HOLDER_BYTE`]).
fn mark(file: &File) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        ofd::mark(file)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        Ok(())
    }
}

#[cfg(target_os = "linux")]
mod ofd {
    use super::HOLDER_BYTE;
    use nix::errno::Errno;
    use nix::fcntl::{FcntlArg, fcntl};
    use nix::libc;
    use std::fs::File;
    use std::io;

    fn range(kind: libc::c_int) -> libc::flock {
        libc::flock {
            l_type: kind as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            #[expect(clippy::cast_possible_wrap, reason = "2^62 fits an off_t")]
            l_start: HOLDER_BYTE as libc::off_t,
            l_len: 1,
            l_pid: 0,
        }
    }

    pub(super) fn mark(file: &File) -> io::Result<()> {
        let lock = range(libc::F_RDLCK);
        loop {
            return match fcntl(file, FcntlArg::F_OFD_SETLK(&lock)) {
                Ok(_) => Ok(()),
                Err(Errno::EINTR) => continue,
                Err(e) => Err(e.into()),
            };
        }
    }

    pub(super) fn probe(file: &File) -> bool {
        let mut lock = range(libc::F_WRLCK);
        match fcntl(file, FcntlArg::F_OFD_GETLK(&mut lock)) {
            Ok(_) => lock.l_type != libc::F_UNLCK as libc::c_short,
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hold keeps every other open file's lock out, is counted within the process, and
    /// tells writers that a holder (not a writer) has the file.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_hold_excludes_other_open_files_and_is_marked_as_a_holders() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, "{}\n").expect("write");
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        let other = File::open(&path).expect("open");
        assert!(!holder_present(&other));
        let Taken::Held(first) = hold(&link, Duration::ZERO).expect("hold") else {
            panic!("not held")
        };
        assert!(matches!(
            other.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        assert!(holder_present(&other), "a holder, through the symlink");
        let id = key_of(&other.metadata().expect("meta"));
        assert!(held_here(id));
        let Taken::Held(second) = hold(&path, Duration::ZERO).expect("again") else {
            panic!("counted")
        };
        assert_eq!(begin_append(id), Some(true));
        assert_eq!(begin_append(id), Some(false), "one append at a time");
        end_append(id);
        drop(first);
        assert!(held_here(id), "the second hold stands");
        drop(second);
        assert!(!held_here(id));
        assert_eq!(begin_append(id), None);
        other.try_lock().expect("released with the last hold");
        assert!(!holder_present(&other));
        assert!(matches!(
            hold(&dir.path().join("none"), Duration::ZERO).expect("no file"),
            Taken::NoFile
        ));
    }
}
