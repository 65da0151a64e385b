//! The narrow I/O seam under the log writer (after redb's `StorageBackend`).
//!
//! Every byte the writer puts on disk goes through [`FileSystem`] and [`AppendFile`], so
//! tests can fail the Nth write, shorten a write, fail a sync or run out of space, and
//! then check what a fresh reader sees. Reading does not go through the seam: a reader
//! never changes a file, so there is nothing to inject there.
//!
//! A whole file is created in one way only, `create_durably`: a new session's first
//! write and a migration's rewrite both go through it.
//!
//! Every append of this crate holds the file's advisory lock ([`AppendFile::lock`]) from
//! its check of the file's length to the end of its `fdatasync` (`docs/lock.md`, "The
//! file lock"), so two writers of this crate never append beside each other, whatever
//! projection database each one uses.

use crate::error::{AppendError, IoContext, IoFailure};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What this module's functions return, unless they say otherwise.
type Result<T, E = AppendError> = std::result::Result<T, E>;

/// A file opened for appending (`O_APPEND`).
// Public (so the lint applies) only with the test hooks (`crate::io`, `__internal`).
#[cfg_attr(feature = "__internal", expect(clippy::len_without_is_empty))]
pub trait AppendFile: Send {
    /// The current length of the file.
    fn len(&self) -> io::Result<u64>;
    /// One `write()` call. May write fewer bytes than given (a short write).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// `fdatasync`: the written bytes and the length are durable when it returns `Ok`.
    fn sync_data(&mut self) -> io::Result<()>;
    /// The identity of the open file (device, inode) to detect a replaced path.
    fn identity(&self) -> io::Result<FileIdentity>;
    /// Takes the exclusive advisory lock on the open file (`flock(LOCK_EX)` on Unix; on
    /// Windows `LockFileEx` on one byte past any content, `docs/lock.md`),
    /// waiting at most `wait` while another open file holds it: `Ok(true)` when this file
    /// holds it, `Ok(false)` when another still does after `wait`. Pi ignores the lock;
    /// the kernel drops it when the file is closed or its process ends. An error of kind
    /// [`io::ErrorKind::Unsupported`] means the file system has no such locks.
    fn lock(&mut self, wait: Duration) -> io::Result<bool>;
    /// Releases the lock taken by [`AppendFile::lock`]. Closing the file releases it too.
    fn unlock(&mut self) -> io::Result<()>;
    /// Whether the lock is held by a holder of the session (a `Store::lock` or a running
    /// Pi, `docs/lock.md`) rather than by another writer's append: `false` (the default)
    /// where the platform cannot tell.
    fn holder_present(&self) -> bool {
        false
    }
    /// What the open file itself says of its length and its names (one `fstat`), for the
    /// check before an append: `None` (the default) when it cannot tell, and then the
    /// writer looks at the path instead.
    fn status(&self) -> io::Result<Option<OpenStatus>> {
        Ok(None)
    }
}

/// The status of an open file ([`AppendFile::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenStatus {
    /// The file's length.
    pub len: u64,
    /// Its number of names (hard links): 0 once it was deleted or another file was
    /// renamed over its path.
    pub links: u64,
    /// Whether the last change of its inode was a write of its content (its change time
    /// is its modification time). A rename, a new link or a change of mode also moves the
    /// change time, but not the modification time.
    pub written_last: bool,
    /// A stamp of its last change (its modification and change times mixed): a file
    /// rewritten in place at the same length has another stamp, within the file system's
    /// clock (`docs/durability.md`).
    pub changed: i64,
}

/// Device and inode of a file (on Windows: volume serial number and file index): what
/// tells "the same file" from "another file at the same path".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FileIdentity {
    /// Device number (Windows: the volume's serial number).
    pub dev: u64,
    /// Inode number (Windows: the file index).
    pub ino: u64,
}

impl FileIdentity {
    /// The identity of a file from its metadata. std's metadata carries no file index on
    /// Windows: there it is all zeros, and [`FileIdentity::of_file`] is the one to use
    /// (the crate itself calls this one only elsewhere).
    #[cfg_attr(windows, allow(dead_code))]
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

    /// The identity of an open file (one `fstat`; on Windows `GetFileInformationByHandle`).
    pub fn of_file(file: &File) -> io::Result<FileIdentity> {
        Ok(Meta::of_file(file)?.identity())
    }
}

/// A file's metadata with what std does not tell on every platform: on Windows, the
/// volume serial number, file index, links and change time of the file
/// (`GetFileInformationByHandle`, `FILE_BASIC_INFO`). On Unix it is std's metadata.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    std: std::fs::Metadata,
    #[cfg(windows)]
    info: Option<crate::os::windows::FileInfo>,
}

impl std::ops::Deref for Meta {
    type Target = std::fs::Metadata;
    fn deref(&self) -> &std::fs::Metadata {
        &self.std
    }
}

impl Meta {
    /// The metadata of the file at `path`, following symlinks (`stat`); on Windows the file
    /// is opened for its attributes only, sharing everything, and closed.
    pub(crate) fn of_path(path: &Path) -> io::Result<Meta> {
        let std = std::fs::metadata(path)?;
        #[cfg(windows)]
        {
            use std::os::windows::fs::OpenOptionsExt;
            // FILE_READ_ATTRIBUTES; FILE_SHARE_READ | WRITE | DELETE; and
            // FILE_FLAG_BACKUP_SEMANTICS, which a directory needs to be opened at all.
            let info = OpenOptions::new()
                .access_mode(0x80)
                .share_mode(7)
                .custom_flags(0x0200_0000)
                .open(path)
                .and_then(|f| crate::os::windows::file_info(&f))
                .ok();
            Ok(Meta { std, info })
        }
        #[cfg(not(windows))]
        Ok(Meta { std })
    }

    /// The metadata of an open file (`fstat`).
    pub(crate) fn of_file(file: &File) -> io::Result<Meta> {
        let std = file.metadata()?;
        #[cfg(windows)]
        {
            let info = Some(crate::os::windows::file_info(file)?);
            Ok(Meta { std, info })
        }
        #[cfg(not(windows))]
        Ok(Meta { std })
    }

    /// The file's [`FileIdentity`].
    pub(crate) fn identity(&self) -> FileIdentity {
        #[cfg(windows)]
        {
            self.info
                .map_or_else(FileIdentity::default, |i| FileIdentity {
                    dev: i.volume,
                    ino: i.index,
                })
        }
        #[cfg(not(windows))]
        FileIdentity::of(&self.std)
    }

    /// The file's change time (`ctime`; Windows: `ChangeTime`), in the platform's unit, and
    /// whether it equals the modification time (the last change was a write of the
    /// content). `None` where the platform does not tell it.
    pub(crate) fn change_time(&self) -> Option<(i64, bool)> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let m = &self.std;
            let ctime = m
                .ctime()
                .wrapping_mul(1_000_000_000)
                .wrapping_add(m.ctime_nsec());
            let mtime = m
                .mtime()
                .wrapping_mul(1_000_000_000)
                .wrapping_add(m.mtime_nsec());
            Some((ctime, ctime == mtime))
        }
        #[cfg(windows)]
        {
            self.info.map(|i| (i.change, i.change == i.last_write))
        }
        #[cfg(not(any(unix, windows)))]
        None
    }

    /// The file's number of names (hard links), where the platform tells it.
    pub(crate) fn links(&self) -> Option<u64> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Some(self.std.nlink())
        }
        #[cfg(windows)]
        {
            self.info.map(|i| i.links)
        }
        #[cfg(not(any(unix, windows)))]
        None
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
    fn link(&self, from: &Path, to: &Path) -> io::Result<()>;
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
        FileIdentity::of_file(&self.0)
    }
    fn lock(&mut self, wait: Duration) -> io::Result<bool> {
        // std's lock has no timeout: poll the non-blocking one, as SQLite's busy handler
        // does. A holder keeps the lock for one append and one `fdatasync`, so the first
        // retries come soon.
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_micros(250);
        loop {
            if crate::lock::hold::try_lock_file(&self.0)? {
                return Ok(true);
            }
            let now = Instant::now();
            // A holder keeps the session for longer than any wait: refused at once.
            if now >= deadline || crate::lock::hold::holder_present(&self.0) {
                return Ok(false);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
    fn unlock(&mut self) -> io::Result<()> {
        crate::lock::hold::unlock_file(&self.0)
    }
    fn holder_present(&self) -> bool {
        crate::lock::hold::holder_present(&self.0)
    }
    fn status(&self) -> io::Result<Option<OpenStatus>> {
        open_status(&self.0)
    }
}

/// [`AppendFile::status`] of an open file (one `fstat`; on Windows two calls on its
/// handle); `None` where the platform does not tell the change time and the links.
pub(crate) fn open_status(file: &File) -> io::Result<Option<OpenStatus>> {
    let meta = Meta::of_file(file)?;
    let (Some((_, written_last)), Some(links)) = (meta.change_time(), meta.links()) else {
        return Ok(None);
    };
    Ok(Some(OpenStatus {
        len: meta.len(),
        links,
        written_last,
        changed: change_stamp(&meta),
    }))
}

/// How a session file is opened for appending: `O_APPEND` (Windows: `FILE_APPEND_DATA`,
/// and read access too, because `LockFileEx` needs a handle with read or write access and
/// an append-only handle has neither; `FlushFileBuffers` takes the append access).
fn append_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.append(true);
    if cfg!(windows) {
        options.read(true);
    }
    options
}

impl FileSystem for StdFileSystem {
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        let f = append_options().open(path)?;
        Ok(Box::new(StdAppendFile(f)))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        let f = append_options().create_new(true).open(path)?;
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
    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }
}

/// How [`create_durably`] gives the new file its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A hard link, which fails if the name exists ([`AppendError::AlreadyExists`]): a new
    /// session never replaces a file that appeared meanwhile. There is no rename fallback.
    Link,
    /// A rename over the file at the name, which it replaces atomically (a migration).
    Rename,
}

/// The step at which [`create_durably`] failed: what the caller may still rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The temporary file could not be created: nothing was written.
    Create,
    /// Writing, syncing or checking the temporary file failed; it was removed and the
    /// name is untouched.
    Fill,
    /// The link or rename failed; the temporary file was removed.
    Place,
    /// The directory fsync failed: the name shows the new file, which may not survive a
    /// power loss.
    SyncDir,
}

/// A failed [`create_durably`].
#[derive(Debug)]
pub(crate) struct CreateFailed {
    /// Where it failed.
    pub step: Step,
    /// Why.
    pub error: AppendError,
}

/// The temporary file that [`create_durably`] hands to its `fill` step.
pub(crate) struct TempFile {
    file: Box<dyn AppendFile>,
    path: PathBuf,
    unsynced: bool,
}

impl TempFile {
    /// Its (temporary) path, to read the copy back.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `bytes` with exactly one `write()`; a short write is an error, not retried.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.unsynced = true;
        let n = self.file.write(bytes).ctx("writing", &self.path)?;
        if n != bytes.len() {
            return Err(IoFailure::new(
                "writing",
                &self.path,
                io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write: {n} of {} bytes", bytes.len()),
                ),
            )
            .into());
        }
        Ok(())
    }

    /// `fdatasync`s what was written. [`create_durably`] syncs after `fill` anyway; call
    /// this to check the durable copy before it gets its name.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.file.sync_data().ctx("syncing", &self.path)?;
        self.unsynced = false;
        Ok(())
    }
}

/// Removes a temporary file of [`create_durably`]'s after a failed step; the step's error is
/// the one returned, this one leaves a tracing line (a crash may leave the name too: it is
/// hidden and never blocks a later attempt).
fn remove_temp(fs: &dyn FileSystem, path: &Path) {
    if let Err(e) = fs.remove(path) {
        tracing::warn!(path = %path.display(), error = %e, "could not remove a temporary file");
    }
}

/// Creates the file `path` durably, all or nothing (docs/spec.md §2): `fill` writes a temporary
/// file in the same directory, `.<name>.<purpose>-<random>` (hidden, and a crashed
/// attempt's leftover never blocks a later one); it is `fdatasync`ed, then given its name
/// by `place`, then the directory is fsynced. The name never shows a partial file, even
/// after a crash. On any failure the temporary name is removed; a crash may leave it.
///
/// Every step goes through `fs`, the seam the fault tests inject through.
#[cfg_attr(
    windows,
    expect(
        clippy::result_large_err,
        reason = "a Windows path is larger; the error is built once, on failure"
    )
)]
pub(crate) fn create_durably(
    fs: &dyn FileSystem,
    path: &Path,
    purpose: &str,
    place: Place,
    fill: impl FnOnce(&mut TempFile) -> Result<()>,
) -> std::result::Result<(), CreateFailed> {
    let failed = |step| move |error| CreateFailed { step, error };
    let dir = super::reader::parent_dir(path);
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".{purpose}-{}", uuid::Uuid::new_v4().simple()));
    let tmp = dir.join(name);
    let file = fs
        .create_new(&tmp)
        .ctx("creating", &tmp)
        .map_err(|e| failed(Step::Create)(e.into()))?;
    let mut temp = TempFile {
        file,
        path: tmp,
        unsynced: false,
    };
    // IMPORTANT: only synced bytes get the name.
    let filled = fill(&mut temp).and_then(|()| match temp.unsynced {
        true => temp.sync(),
        false => Ok(()),
    });
    if let Err(error) = filled {
        remove_temp(fs, &temp.path);
        return Err(failed(Step::Fill)(error));
    }
    let placed = match place {
        Place::Link => {
            let linked = fs.link(&temp.path, path);
            // Linked or not, the temporary name goes: the file keeps its real name.
            remove_temp(fs, &temp.path);
            linked.map_err(|source| match source.kind() {
                io::ErrorKind::AlreadyExists => AppendError::AlreadyExists {
                    path: path.to_path_buf(),
                },
                _ => IoFailure::new("linking the new file to", path, source).into(),
            })
        }
        Place::Rename => {
            let renamed = fs.rename(&temp.path, path);
            if renamed.is_err() {
                remove_temp(fs, &temp.path);
            }
            renamed
                .ctx("renaming the new file over", path)
                .map_err(AppendError::from)
        }
    };
    placed.map_err(failed(Step::Place))?;
    drop(temp);
    // IMPORTANT: fsync the folder, or the new name may not survive a crash.
    fs.sync_dir(dir)
        .ctx("syncing the directory", dir)
        .map_err(|e| failed(Step::SyncDir)(e.into()))
}

/// A stamp of the file's last change: its modification and change times mixed. A
/// same-length rewrite moves at least the change time, which no user-level tool can set
/// back (`cp -p`, `touch -r` and `rsync -t` restore only the modification time). Two looks
/// with the same stamp saw no write in between, unless both fell within one tick of the
/// file system's clock (`docs/durability.md` says which clocks tick how).
pub(crate) fn change_stamp(meta: &Meta) -> i64 {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64);
    let ctime = meta.change_time().map_or(0, |(ctime, _)| ctime);
    mtime ^ ctime.rotate_left(29)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::hold::{Taken, held_by_another, hold};

    /// A file's identity (Unix: device and inode; Windows: volume serial number and file
    /// index) is the same through a hard link and from an open file, another file's is
    /// not, and the open file tells its links (run on Linux and, by `.ci/windows-unit`,
    /// under Wine; on Windows without `GetFileInformationByHandle` the identity is all
    /// zeros and the links unknown).
    #[test]
    fn the_identity_tells_the_same_file_and_the_open_file_its_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b, link) = (
            dir.path().join("a.jsonl"),
            dir.path().join("b.jsonl"),
            dir.path().join("link.jsonl"),
        );
        std::fs::write(&a, "{}\n").expect("write");
        std::fs::write(&b, "{}\n").expect("write");
        std::fs::hard_link(&a, &link).expect("link");
        let id = |p: &Path| Meta::of_path(p).expect("stat").identity();
        assert_ne!(id(&a), FileIdentity::default(), "a real identity");
        assert_eq!(id(&a), id(&link), "the same file through a hard link");
        assert_ne!(id(&a), id(&b), "another file");
        let f = OpenOptions::new().append(true).open(&a).expect("open");
        assert_eq!(FileIdentity::of_file(&f).expect("identity"), id(&a));
        let status = open_status(&f)
            .expect("status")
            .expect("the platform tells it");
        assert_eq!((status.len, status.links), (3, 2));
        // A name deleted while the file is open goes at once on Unix; on Windows it may
        // stay until the file's last handle closes (Wine 8.0, and Windows without POSIX
        // delete semantics: docs/durability.md, section 8).
        std::fs::remove_file(&link).expect("unlink");
        if cfg!(unix) {
            let status = open_status(&f)
                .expect("status")
                .expect("the platform tells it");
            assert_eq!(status.links, 1);
        }
    }

    // The session file's lock (`crate::lock::hold`) beside this layer's append files.

    /// Appends a line through a handle of its own without any lock, as Pi does, and reads
    /// the file back: no lock of this crate covers a byte of content (Windows locks are
    /// mandatory for the bytes they cover).
    fn append_as_pi(path: &Path, line: &str) -> String {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .expect("open for append");
        f.write_all(line.as_bytes()).expect("Pi's append");
        drop(f);
        std::fs::read_to_string(path).expect("Pi's read")
    }

    /// A holder in another process keeps this process's holds and writers out at once
    /// (told from a writer), is named by its pid, never stops Pi's own reads and appends,
    /// and lets the next writer in at once when its process is killed.
    #[cfg(any(target_os = "linux", windows))]
    #[test]
    fn a_holder_in_another_process_refuses_writers_at_once_and_dies_with_its_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, "{}\n").expect("write");
        let mut child =
            crate::lock::hold::tests::helper(&[("SS_TEST_HOLD", path.to_str().expect("utf-8"))]);
        assert_eq!(append_as_pi(&path, "{\"n\":1}\n"), "{}\n{\"n\":1}\n");
        assert!(matches!(
            hold(&path, Duration::from_secs(10)).expect("hold"),
            Taken::Refused { holder: true, .. }
        ));
        let mut writer = StdFileSystem.open_append(&path).expect("open");
        assert!(writer.holder_present(), "a holder, not a writer");
        assert!(
            !writer.lock(Duration::from_secs(10)).expect("lock"),
            "refused"
        );
        let id = writer.identity().expect("identity");
        assert_ne!(id, FileIdentity::default());
        let refusal = crate::lock::file::held(
            &path,
            Some((id.dev, id.ino)),
            "write",
            Duration::from_secs(10),
            true,
        );
        let crate::lock::LockError::FileHeld { pid, initiator, .. } = &refusal else {
            panic!("{refusal:?}")
        };
        assert_eq!(*pid, Some(child.id()), "{refusal}");
        assert!(initiator.contains(";start:"), "{refusal}");
        assert_eq!(held_by_another(&path), Some(true));

        child.kill().expect("kill the holder");
        child.wait().expect("wait");
        assert!(writer.lock(Duration::ZERO).expect("lock"), "in at once");
        assert!(!writer.holder_present());
        writer.unlock().expect("unlock");
        assert_eq!(held_by_another(&path), Some(false));
        assert!(matches!(
            hold(&path, Duration::ZERO).expect("hold"),
            Taken::Held(_)
        ));
    }

    /// Two writers of one file: the second finds a writer, not a holder (it waits), and
    /// takes the lock once the first lets it go; Pi reads and appends beside both.
    #[cfg(any(target_os = "linux", windows))]
    #[test]
    fn a_writer_waits_for_another_writer_and_pi_appends_beside_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, "{}\n").expect("write");
        let mut first = StdFileSystem.open_append(&path).expect("open");
        let mut second = StdFileSystem.open_append(&path).expect("open");
        assert!(first.lock(Duration::ZERO).expect("lock"));
        assert!(
            !second.lock(Duration::ZERO).expect("lock"),
            "one writer at a time"
        );
        assert!(!second.holder_present(), "a writer: wait, not refuse");
        assert_eq!(held_by_another(&path), Some(false), "no holder");
        assert_eq!(append_as_pi(&path, "{\"n\":1}\n"), "{}\n{\"n\":1}\n");
        assert_eq!(first.write(b"{\"n\":2}\n").expect("append"), 8);
        first.sync_data().expect("sync");
        first.unlock().expect("unlock");
        assert!(second.lock(Duration::ZERO).expect("lock"), "its turn");
        second.unlock().expect("unlock");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "{}\n{\"n\":1}\n{\"n\":2}\n"
        );
    }
}
