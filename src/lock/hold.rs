//! The one lock (`docs/lock.md`): the kernel's lock on the session file itself, held by
//! every append of this crate for the length of the append, and by a holder
//! ([`crate::Store::lock`], a running Pi's presence) for as long as it holds the session.
//!
//! The lock is `flock(LOCK_EX)` on an open file description of the session file (std's
//! `File::try_lock`; on Windows `LockFileEx` on `SESSION_BYTE`, see below): it belongs
//! to the open file, not to the process, so Pi's own
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
//! (`F_OFD_GETLK`) whether anyone holds that byte. On Windows the holder locks that byte
//! exclusively, and the bytes of its pid (`PID_BYTES`); a writer asks with a shared lock
//! on the byte, tried and let go at once. Elsewhere (macOS) the writer waits its bounded
//! wait and is then refused ([`crate::lock::LockError::FileHeld`]).
//!
//! Windows byte-range locks are mandatory: a locked byte cannot be read or written through
//! another handle. So on Windows nothing locks the file's content: the session lock is the
//! byte `SESSION_BYTE`, next to the holder's, far past the end of any session file, which
//! no read and no append ever reaches (`LockFileEx` locks bytes past the end of a file).
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

/// The byte on which a holder takes a shared lock on Linux (`F_OFD_SETLK`, `F_RDLCK`; on
/// Windows an exclusive `LockFileEx`), far past the end of any session file: writers never
/// hold it, so a lock there is a holder's.
#[cfg_attr(
    not(any(target_os = "linux", windows)),
    expect(
        dead_code,
        reason = "no holder's byte where it cannot be asked (macOS)"
    )
)]
pub(crate) const HOLDER_BYTE: u64 = 1 << 62;

/// Windows: the byte that is the session lock itself, locked exclusively by every append
/// and every holder (Unix: `flock` on the whole file).
#[cfg(windows)]
const SESSION_BYTE: u64 = HOLDER_BYTE + 1;

/// Windows: the first of 32 bytes that tell a holder's pid, bit `i` of the pid locked
/// exclusively at `PID_BYTES + i` while the holder holds (Linux reads `/proc/locks`).
#[cfg(windows)]
const PID_BYTES: u64 = HOLDER_BYTE + 64;

/// A file's device and inode (Windows: volume serial number and file index): "the same
/// file" however it is named.
pub(crate) type FileKey = (u64, u64);

/// The [`FileKey`] of an open file.
fn key_of(file: &File) -> io::Result<FileKey> {
    // The same pair as the log's `FileIdentity` (this layer is below the log's).
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata()?;
        Ok((meta.dev(), meta.ino()))
    }
    #[cfg(windows)]
    {
        let info = crate::os::windows::file_info(file)?;
        Ok((info.volume, info.index))
    }
}

/// Tries once to take the session lock through `file`: `Ok(false)` when another open file
/// has it.
pub(crate) fn try_lock_file(file: &File) -> io::Result<bool> {
    #[cfg(windows)]
    {
        crate::os::windows::try_lock(file, SESSION_BYTE, true)
    }
    #[cfg(not(windows))]
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Lets the session lock taken by [`try_lock_file`] go.
pub(crate) fn unlock_file(file: &File) -> io::Result<()> {
    #[cfg(windows)]
    {
        crate::os::windows::unlock(file, SESSION_BYTE)
    }
    #[cfg(not(windows))]
    {
        file.unlock()
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
/// platform tells holders from writers (Linux, Windows).
pub(crate) fn hold(path: &Path, wait: Duration) -> io::Result<Taken> {
    let file = match open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Taken::NoFile),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let identity = key_of(&file)?;
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
        if try_lock_file(&file)? {
            break;
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
/// On Linux and Windows the holder's byte answers; elsewhere a lock tried and let go at
/// once, which another writer's append also answers `true` for.
pub(crate) fn held_by_another(path: &Path) -> Option<bool> {
    let file = open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    if held_here(key_of(&file).ok()?) {
        return Some(true);
    }
    if cfg!(any(target_os = "linux", windows)) {
        return Some(holder_present(&file));
    }
    match try_lock_file(&file) {
        Ok(true) => {
            // Closing the file lets it go too.
            let _ = unlock_file(&file);
            Some(false)
        }
        Ok(false) => Some(true),
        Err(_) => None,
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

/// Whether another open file holds [`HOLDER_BYTE`] of `file` (Linux: one `F_OFD_GETLK`;
/// Windows: a shared lock on it, tried and let go at once).
pub(crate) fn holder_present(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        ofd::probe(file)
    }
    #[cfg(windows)]
    {
        win::probe(file, HOLDER_BYTE)
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = file;
        false
    }
}

/// Marks `file`'s lock as a holder's ([`HOLDER_BYTE`]; on Windows also its pid).
fn mark(file: &File) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        ofd::mark(file)
    }
    #[cfg(windows)]
    {
        win::mark(file)
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = file;
        Ok(())
    }
}

/// Windows: the pid of the holder of the session file at `path`, read from its pid bytes
/// (`PID_BYTES`: 32 shared locks tried and let go), while a holder holds it.
#[cfg(windows)]
pub(crate) fn holder_pid(path: &Path) -> Option<u32> {
    let file = open(path).ok()?;
    if !holder_present(&file) {
        return None;
    }
    let mut pid = 0u32;
    for bit in 0..32_u32 {
        if win::probe(&file, PID_BYTES + u64::from(bit)) {
            pid |= 1 << bit;
        }
    }
    // A holder that let go meanwhile leaves no pid worth naming.
    (pid != 0 && holder_present(&file)).then_some(pid)
}

#[cfg(windows)]
mod win {
    use super::{HOLDER_BYTE, PID_BYTES};
    use crate::os::windows::{try_lock, unlock};
    use std::fs::File;
    use std::io;
    use std::time::{Duration, Instant};

    /// Whether another handle holds the byte at `offset` exclusively: a shared lock tried
    /// and let go at once (a holder's own handle never asks).
    pub(super) fn probe(file: &File, offset: u64) -> bool {
        match try_lock(file, offset, false) {
            Ok(true) => {
                let _ = unlock(file, offset);
                false
            }
            Ok(false) => true,
            Err(_) => false,
        }
    }

    /// Locks the holder's pid bytes, then [`HOLDER_BYTE`], exclusively. Only the holder of
    /// the session lock takes them; a writer's probe holds one for an instant, so a byte
    /// in the way is tried again (for at most a second).
    pub(super) fn mark(file: &File) -> io::Result<()> {
        let pid = std::process::id();
        let bytes = (0..32_u32)
            .filter(|bit| pid & (1 << bit) != 0)
            .map(|bit| PID_BYTES + u64::from(bit))
            .chain([HOLDER_BYTE]);
        let deadline = Instant::now() + Duration::from_secs(1);
        for offset in bytes {
            while !try_lock(file, offset, true)? {
                if Instant::now() >= deadline {
                    return Err(io::Error::other(
                        "the holder's byte stayed locked by another handle",
                    ));
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
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
pub(crate) mod tests {
    use super::*;
    use std::io::{BufRead, Read, Write};
    use std::process::{Child, Command, Stdio};

    /// Runs this test binary's [`helper_process`] in a child process with `env`, and
    /// returns once it says "helper ready" (it holds what it was asked to hold); it ends when
    /// its stdin is closed.
    pub(crate) fn helper(env: &[(&str, &str)]) -> Child {
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args([
                "--exact",
                "--ignored",
                "lock::hold::tests::helper_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the helper");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        // libtest prints the test's name, then (without a line break) what it prints.
        while !line.trim_end().ends_with("helper ready") {
            line.clear();
            let n = out.read_line(&mut line).expect("the helper's output");
            assert!(n > 0, "the helper ended before it was ready");
        }
        // The rest of its output (the test's result) is read to its end, never blocking it.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        child
    }

    /// Not a test of its own: the child process of [`helper`], which runs it (ignored in a
    /// plain run). With `SS_TEST_HOLD`, it holds that session file; then it says "helper
    /// ready" and waits for the end of its stdin.
    #[test]
    #[ignore = "the child process of the tests that call `helper`, run by them"]
    fn helper_process() {
        let hold_path = std::env::var_os("SS_TEST_HOLD");
        let _hold = hold_path.map(|p| match hold(Path::new(&p), Duration::ZERO) {
            Ok(Taken::Held(h)) => h,
            other => panic!("the helper could not hold {}: {other:?}", p.display()),
        });
        println!("helper ready");
        std::io::stdout().flush().expect("flush");
        let mut rest = Vec::new();
        std::io::stdin().read_to_end(&mut rest).expect("stdin");
    }

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
        let id = key_of(&other).expect("identity");
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
