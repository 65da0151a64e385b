//! A file-system seam for tests of the file lock: it passes every call to the real file
//! system, and can pause its writer in front of its first append (holding the file lock)
//! or report when its writer finds the lock held.

use session_state::io::{AppendFile, FileIdentity, FileSystem, StdFileSystem};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// What a [`Hooked`] seam does besides passing every call to the real file system.
#[derive(Default)]
struct Hooks {
    /// The first write after `skip` others: say so, then wait for the test (the writer
    /// has checked the file's end and holds its lock, but has not appended).
    pause: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
    skip: AtomicUsize,
    /// The first time the file lock is found held: say so.
    blocked: Mutex<Option<mpsc::Sender<()>>>,
    /// Then wait for it as the writer asked (`true`), or give up at once (`false`).
    wait: bool,
    /// Pause in the `fdatasync` after the write, not in front of the write.
    in_sync: bool,
}

pub struct Hooked(Arc<Hooks>);

struct HookedFile {
    inner: Box<dyn AppendFile>,
    hooks: Arc<Hooks>,
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

impl Hooked {
    /// A seam that pauses its writer in front of its first append: returns it, the
    /// receiver told when the writer got there, and the sender that lets it go (dropping
    /// it does too).
    pub fn pausing() -> (Arc<dyn FileSystem>, mpsc::Receiver<()>, mpsc::Sender<()>) {
        Hooked::pausing_after(0)
    }

    /// [`Hooked::pausing`] in front of the append after the first `skip` ones.
    pub fn pausing_after(
        skip: usize,
    ) -> (Arc<dyn FileSystem>, mpsc::Receiver<()>, mpsc::Sender<()>) {
        Hooked::pausing_in(skip, false)
    }

    /// [`Hooked::pausing_after`] in the `fdatasync` of that append: the line is in the
    /// file, the writer still holds the file lock.
    pub fn pausing_sync_after(
        skip: usize,
    ) -> (Arc<dyn FileSystem>, mpsc::Receiver<()>, mpsc::Sender<()>) {
        Hooked::pausing_in(skip, true)
    }

    fn pausing_in(
        skip: usize,
        in_sync: bool,
    ) -> (Arc<dyn FileSystem>, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (reached_tx, reached) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let hooks = Hooks {
            pause: Mutex::new(Some((reached_tx, go_rx))),
            skip: AtomicUsize::new(skip),
            in_sync,
            ..Hooks::default()
        };
        (Arc::new(Hooked(Arc::new(hooks))), reached, go)
    }

    /// A seam that reports the first time its writer finds the file lock held, and then
    /// waits for it (`wait`) or gives up at once.
    pub fn watching(wait: bool) -> (Arc<dyn FileSystem>, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel();
        let hooks = Hooks {
            blocked: Mutex::new(Some(tx)),
            wait,
            ..Hooks::default()
        };
        (Arc::new(Hooked(Arc::new(hooks))), rx)
    }

    fn wrap(&self, inner: Box<dyn AppendFile>) -> Box<dyn AppendFile> {
        Box::new(HookedFile {
            inner,
            hooks: self.0.clone(),
        })
    }
}

impl HookedFile {
    /// The pause, if this call is the one it waits in.
    fn pause_here(&self) {
        let skipped = self
            .hooks
            .skip
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if skipped {
            return;
        }
        if let Some((reached, go)) = take(&self.hooks.pause) {
            let _ = reached.send(());
            // A message or a dropped sender: either lets the writer go.
            let _ = go.recv();
        }
    }
}

impl AppendFile for HookedFile {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.hooks.in_sync {
            self.pause_here();
        }
        self.inner.write(buf)
    }
    fn sync_data(&mut self) -> std::io::Result<()> {
        if self.hooks.in_sync {
            self.pause_here();
        }
        self.inner.sync_data()
    }
    fn identity(&self) -> std::io::Result<FileIdentity> {
        self.inner.identity()
    }
    fn lock(&mut self, wait: Duration) -> std::io::Result<bool> {
        if self.inner.lock(Duration::ZERO)? {
            return Ok(true);
        }
        if let Some(blocked) = take(&self.hooks.blocked) {
            let _ = blocked.send(());
        }
        match self.hooks.wait {
            true => self.inner.lock(wait),
            false => Ok(false),
        }
    }
    fn unlock(&mut self) -> std::io::Result<()> {
        self.inner.unlock()
    }
    fn status(&self) -> std::io::Result<Option<session_state::io::OpenStatus>> {
        self.inner.status()
    }
}

impl FileSystem for Hooked {
    fn open_append(&self, path: &Path) -> std::io::Result<Box<dyn AppendFile>> {
        Ok(self.wrap(StdFileSystem.open_append(path)?))
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn AppendFile>> {
        Ok(self.wrap(StdFileSystem.create_new(path)?))
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        StdFileSystem.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        StdFileSystem.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        StdFileSystem.remove(path)
    }
    fn link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        StdFileSystem.link(from, to)
    }
}
