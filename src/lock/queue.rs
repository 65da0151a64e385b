//! The writers' queue: first come, first served between the writers of one database
//! (`docs/lock.md`, "Taking turns").
//!
//! SQLite's busy handler makes a waiter sleep (1 ms, 2 ms, 5 ms, … up to 100 ms) and try
//! again. A writer that has just committed begins its next write before the sleepers
//! wake, so under constant contention one writer keeps the database for dozens of writes
//! while the others wait. The queue puts writers in line before they ask SQLite for its
//! write lock, with byte-range locks on the file `<database>-queue`:
//!
//! - The file holds [`MAGIC`] and a ticket counter (16 bytes). Under an exclusive lock on
//!   the counter's bytes, a writer reads ticket `n`, locks the byte of its place in line
//!   (`SLOTS + n`), stores `n + 1` and unlocks the counter.
//! - It waits for the byte of ticket `n − 1`: its predecessor holds that byte until its
//!   write ends, or until its process ends (the kernel drops the locks of a closed file).
//!   The wait is a blocking lock, so a hand-off wakes the next writer, and only it, at once.
//! - When its write ends it unlocks its own byte ([`Turn`]'s drop), which wakes its
//!   successor.
//!
//! The same file carries the writers' fast path (`docs/lock.md`, "The fast path"): a write
//! that finds the line empty and the lock rows' generation (bytes 16..24) unchanged since
//! its last judgement appends without SQLite's write lock ([`FastPass`]). The line is
//! known empty without a look while the counter is the one this open file last saw with
//! the line empty. A holder that takes a row moves the generation on inside its
//! transaction, then takes the byte `ROWS` (just below the places) exclusively once
//! ([`WriterQueue::announce_row`]): writes on the fast path of releases that hold that
//! byte shared until their line is written are waited for. This release's writes hold
//! nothing there: the session file's lock, held by every holder of this release, keeps
//! them out (`src/lock/hold.rs`).
//!
//! The locks are Linux's open file description locks (`F_OFD_SETLK`, `F_OFD_SETLKW`):
//! they belong to an open file, not to a process, so two stores in one process queue
//! as two processes do.
//!
//! The queue orders writers; it never decides who may write. SQLite's write lock (on the
//! fast path, the session file's lock) still does. So a writer that cannot queue relies
//! on SQLite's busy handler alone, possibly out of turn, and takes no fast path: on
//! another operating system, on a file system without byte-range locks, or when the
//! `-queue` file is not ours (then it is never written). A writer waits in line at most
//! the wait it is given (the database's busy timeout), then goes to SQLite's lock without
//! its turn; a stalled writer ahead of it therefore delays it by at most that wait.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The first 8 bytes of a queue file of this crate; the next 8 are the ticket counter and
/// the 8 after them the lock rows' generation (little-endian). A file of any other content
/// is not ours and never written; one of ours of 16 bytes (without the generation) gains
/// it, at 0.
#[cfg_attr(
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )),
    expect(
        dead_code,
        reason = "no queue elsewhere (docs/lock.md, \"Taking turns\")"
    )
)]
const MAGIC: &[u8; 8] = b"ssqueue1";

/// How long a holder taking a row waits for the writes already on the fast path: each
/// holds it for one `write()` of its line.
pub(crate) const ANNOUNCE_WAIT: Duration = Duration::from_secs(10);

/// The queue of the writers of the database at `db`, opened at its first turn.
#[derive(Debug)]
pub(crate) struct WriterQueue {
    path: PathBuf,
    file: OnceLock<Option<imp::QueueFile>>,
    held: Arc<Mutex<Held>>,
}

/// The turns this queue's owner holds: a turn taken inside another (a catch-up inside a
/// stored write) is the outer one's, and the place in line is the queue's, so that a long
/// operation can let the writers in line go between its transactions ([`Turns`]).
#[derive(Debug, Default)]
struct Held {
    depth: usize,
    place: Option<imp::TurnInner>,
}

/// A writer's turn, from [`WriterQueue::turn`] to the end of its write; dropping the
/// outermost one hands the turn to the next writer.
#[derive(Debug)]
#[must_use = "the turn ends when it is dropped"]
pub(crate) struct Turn {
    held: Arc<Mutex<Held>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut held = crate::sync::lock(&self.held);
        held.depth -= 1;
        if held.depth == 0 {
            held.place = None;
        }
    }
}

impl WriterQueue {
    /// The queue beside the database file `db` (`<db>-queue`). Nothing is opened yet.
    pub(crate) fn beside(db: &Path) -> WriterQueue {
        let mut path = db.as_os_str().to_owned();
        path.push("-queue");
        WriterQueue {
            path: PathBuf::from(path),
            file: OnceLock::new(),
            held: Arc::default(),
        }
    }

    /// The file that holds the line.
    #[cfg(all(
        test,
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn file(&self) -> Option<&imp::QueueFile> {
        self.file
            .get_or_init(|| imp::QueueFile::open(&self.path))
            .as_ref()
    }

    /// Takes this writer's place in line and waits, at most `wait`, for the writers ahead
    /// of it. `None` when this writer cannot queue (it then writes without a turn); a turn
    /// that waited in vain is still a place in line, which the writers behind it wait for.
    ///
    /// Inside a turn of this same queue (the caller holds one), the turn is the one held:
    /// it neither queues again nor waits for itself. The queue's owner (a projection, a
    /// store) is used by one thread at a time.
    pub(crate) fn turn(&self, wait: Duration) -> Option<Turn> {
        let mut held = crate::sync::lock(&self.held);
        if held.depth == 0 {
            held.place = Some(self.file()?.turn(wait)?);
        }
        held.depth += 1;
        Some(Turn {
            held: self.held.clone(),
        })
    }

    /// Whether no writer of another open file is in line (one lock query, no turn taken),
    /// as a write on the fast path asks. `false` inside a turn of this owner, and when the
    /// query fails; `true` when this writer cannot queue.
    #[cfg(all(
        test,
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    pub(crate) fn line_is_empty(&self) -> bool {
        if crate::sync::lock(&self.held).depth > 0 {
            return false;
        }
        self.file().is_none_or(imp::QueueFile::line_is_empty)
    }

    /// The lock rows' generation, read by a write inside its transaction (which excludes
    /// every holder taking a row); `None` when the queue cannot serve.
    pub(crate) fn rows_generation(&self) -> Option<u64> {
        self.file()?.rows_generation()
    }

    /// A write's fast pass, when no writer is in line and the rows' generation is still
    /// `seen`: held from before the write's check of the file until its line is written
    /// (before its `fdatasync`). `None` otherwise, and inside a turn of this owner.
    pub(crate) fn fast_pass(&self, seen: u64) -> Option<FastPass> {
        if crate::sync::lock(&self.held).depth > 0 {
            return None;
        }
        let pass = self.file()?.fast_pass(seen)?;
        Some(FastPass { _pass: pass })
    }

    /// Inside the transaction of a holder that has just written its row (before its
    /// `COMMIT`): moves the rows' generation on, then waits, at most [`ANNOUNCE_WAIT`],
    /// until every write on the fast path that started before it has written its line.
    /// An error leaves the holder to roll back. Nothing to do when the queue cannot serve:
    /// then no writer of this database takes the fast path.
    pub(crate) fn announce_row(
        &self,
        operation: &'static str,
        session_id: &str,
    ) -> Result<(), super::Refused> {
        // Without a queue file of its own (none could be opened, or what is at the path is
        // not ours), there is nobody to tell: writers of this release are kept out by the
        // session file's lock, which the holder takes first (`docs/lock.md`).
        let announced = match self.file() {
            Some(file) => file.announce_row(ANNOUNCE_WAIT),
            None => Ok(()),
        };
        announced.map_err(|source| {
            Box::new(super::LockError::Writers {
                operation,
                session_id: session_id.to_owned(),
                queue: self.path.clone(),
                source,
            })
        })
    }

    /// Between two transactions of a turn (inside an outer one, or not): the writers in
    /// line go first, then this one takes a place at the back of the line.
    pub(crate) fn pass(&self, wait: Duration) {
        self.step_aside();
        self.rejoin(wait);
    }

    /// Between two transactions of a turn: lets the writers in line go first
    /// ([`WriterQueue::rejoin`] takes a place at the back of the line again).
    fn step_aside(&self) {
        crate::sync::lock(&self.held).place = None;
    }

    /// After [`WriterQueue::step_aside`]: a new place in line, waited for at most `wait`.
    fn rejoin(&self, wait: Duration) {
        let mut held = crate::sync::lock(&self.held);
        if held.depth > 0 && held.place.is_none() {
            held.place = self.file().and_then(|f| f.turn(wait));
        }
    }
}

/// A write on the fast path ([`WriterQueue::fast_pass`]); dropping it ends the window.
#[derive(Debug)]
#[must_use = "the fast path's window ends when it is dropped"]
pub(crate) struct FastPass {
    _pass: imp::PassInner,
}

/// The turn of one operation made of several transactions (a catch-up that commits in
/// chunks), also inside an outer turn: the writers in line go between the transactions.
#[derive(Debug)]
pub(crate) struct Turns<'q> {
    queue: &'q WriterQueue,
    wait: Duration,
    _turn: Option<Turn>,
}

impl<'q> Turns<'q> {
    /// Takes the first transaction's turn.
    pub(crate) fn new(queue: &'q WriterQueue, wait: Duration) -> Turns<'q> {
        Turns {
            queue,
            wait,
            _turn: queue.turn(wait),
        }
    }

    /// After a transaction committed: the writers in line go first.
    pub(crate) fn end(&mut self) {
        self.queue.step_aside();
    }

    /// Before the next transaction: a place at the back of the line.
    pub(crate) fn take(&mut self) {
        self.queue.rejoin(self.wait);
    }
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod imp {
    use super::MAGIC;
    use nix::errno::Errno;
    use nix::fcntl::{FcntlArg, fcntl};
    use nix::libc;
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::unix::fs::FileExt;
    use std::path::Path;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::{Duration, Instant};

    /// The counter's bytes: its lock is the line's entrance.
    const COUNTER: (u64, u64) = (8, 8);
    /// The lock rows' generation.
    const GENERATION: u64 = 16;
    /// The byte offset of ticket 0's place; tickets wrap after [`SPAN`] places.
    const SLOTS: u64 = 1 << 20;
    const SPAN: u64 = 1 << 40;
    /// The byte a holder announcing a row locks exclusively, and a write on the fast path
    /// of an earlier release shared. Not a place: a writer taking its place in line never waits for a write on
    /// the fast path (which would let one writer on the fast path pass it again and again).
    const ROWS: u64 = SLOTS - 1;

    /// The open queue file, and the ticket counter when this open file last knew the line
    /// empty: when it saw no place held, or after its own place, once every place before
    /// it had had its turn ([`NO_PLACE`] before either). A write on the fast path that
    /// reads the same counter needs no look at the line: any place taken since moves the
    /// counter on.
    #[derive(Debug)]
    pub(super) struct QueueFile(Arc<File>, AtomicU64);

    /// The line not known empty yet (or this open file's last place waited in vain).
    const NO_PLACE: u64 = u64::MAX;

    #[derive(Debug)]
    pub(super) struct TurnInner {
        file: Arc<File>,
        place: u64,
    }

    /// A write on the fast path. It holds no lock of the queue file: the session file's
    /// lock, which it tries, keeps out every holder of this crate's release, and a row
    /// taken by an earlier release moves the database's version on
    /// (`Projection::fast_pass`).
    #[derive(Debug)]
    pub(super) struct PassInner;

    impl Drop for TurnInner {
        fn drop(&mut self) {
            if let Err(e) = set(&self.file, libc::F_UNLCK, self.place, 1, false) {
                // The place is released with the file at the latest (this process's end).
                tracing::debug!(error = %e, "the writers' queue: a turn was not handed on");
            }
        }
    }

    impl QueueFile {
        /// Opens (or creates) the queue file; `None`, logged, when it cannot serve: not
        /// ours, no byte-range locks here, or no access.
        pub(super) fn open(path: &Path) -> Option<QueueFile> {
            match Self::try_open(path) {
                Ok(Some(file)) => Some(file),
                Ok(None) => {
                    tracing::warn!(file = %path.display(),
                        "the writers' queue file is not session-state's: writers do not queue");
                    None
                }
                Err(e) => {
                    tracing::debug!(file = %path.display(), error = %e,
                        "the writers' queue cannot be used: writers do not queue");
                    None
                }
            }
        }

        fn try_open(path: &Path) -> io::Result<Option<QueueFile>> {
            use std::os::unix::fs::OpenOptionsExt;
            // Never through a symlink (a dangling one would create its target, another
            // would have us write a file elsewhere), never blocking on a FIFO, and only a
            // regular file: anything else at the path is not ours and is left as it is.
            let open = |create: bool| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(create)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
                    .open(path)
            };
            let file = match open(true) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => open(false),
                other => other,
            };
            let file = match file {
                Ok(file) => file,
                // ELOOP: a symlink at the path.
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
                Err(e) => return Err(e),
            };
            if !file.metadata()?.file_type().is_file() {
                return Ok(None);
            }
            let file = Arc::new(file);
            // Also the check that this file system has the locks.
            let deadline = Instant::now() + Duration::from_secs(1);
            if !lock_until(&file, COUNTER.0, COUNTER.1, deadline)? {
                return Err(io::Error::other("the queue's counter stayed locked"));
            }
            let checked = (|| -> io::Result<bool> {
                let mut head = [0u8; 24];
                let len = file.metadata()?.len();
                if len == 0 {
                    // New (or an empty file: nothing in it to lose).
                    head[..8].copy_from_slice(MAGIC);
                    file.write_all_at(&head, 0)?;
                    return Ok(true);
                }
                if len != 16 && len != 24 {
                    return Ok(false);
                }
                file.read_exact_at(&mut head[..8], 0)?;
                if &head[..8] != MAGIC {
                    return Ok(false);
                }
                if len == 16 {
                    // Ours, without the rows' generation yet: it starts at 0.
                    file.write_all_at(&[0u8; 8], GENERATION)?;
                }
                Ok(true)
            })();
            unlock(&file, COUNTER.0, COUNTER.1);
            Ok(checked?.then_some(QueueFile(file, AtomicU64::new(NO_PLACE))))
        }

        /// No other open file holds a place in line.
        pub(super) fn line_is_empty(&self) -> bool {
            let Ok(mut lock) = flock(libc::F_RDLCK, SLOTS, SPAN) else {
                return false;
            };
            match fcntl(&*self.0, FcntlArg::F_OFD_GETLK(&mut lock)) {
                Ok(_) => lock.l_type == libc::F_UNLCK as libc::c_short,
                Err(_) => false,
            }
        }

        pub(super) fn rows_generation(&self) -> Option<u64> {
            let mut bytes = [0u8; 8];
            match self.0.read_exact_at(&mut bytes, GENERATION) {
                Ok(()) => Some(u64::from_le_bytes(bytes)),
                Err(e) => {
                    tracing::debug!(error = %e, "the writers' queue: no rows' generation");
                    None
                }
            }
        }

        pub(super) fn fast_pass(&self, seen: u64) -> Option<PassInner> {
            let pass = PassInner;
            // The counter and the generation in one read. A value read while another
            // process writes it can only differ from the one expected: the write then
            // goes the usual way.
            let mut bytes = [0u8; 16];
            self.0.read_exact_at(&mut bytes, COUNTER.0).ok()?;
            let (counter, generation) = (bytes.first_chunk(), bytes.last_chunk());
            let (Some(&counter), Some(&generation)) = (counter, generation) else {
                return None;
            };
            let (counter, generation) =
                (u64::from_le_bytes(counter), u64::from_le_bytes(generation));
            if generation != seen {
                return None;
            }
            // A writer in line goes first. Nobody has taken a place since this file last
            // saw the line empty (or since its own place, when every place before it had
            // had its turn): nobody is in line. Otherwise it looks, after that read: a
            // place taken after it moves the counter on again.
            if counter != self.1.load(Ordering::Relaxed) {
                if !self.line_is_empty() {
                    return None;
                }
                self.1.store(counter, Ordering::Relaxed);
            }
            Some(pass)
        }

        pub(super) fn announce_row(&self, wait: Duration) -> io::Result<()> {
            let (file, deadline) = (&self.0, Instant::now() + wait);
            if !lock_until(file, COUNTER.0, COUNTER.1, deadline)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the writers' queue's counter stayed locked",
                ));
            }
            let moved = (|| {
                let mut head = [0u8; 24];
                file.read_exact_at(&mut head, 0)?;
                if !ours(&head) {
                    return Ok(());
                }
                let next = u64::from_le_bytes(head[16..].try_into().expect("8 bytes"));
                file.write_all_at(&next.wrapping_add(1).to_le_bytes(), GENERATION)
            })();
            unlock(file, COUNTER.0, COUNTER.1);
            moved?;
            // A write on the fast path of an earlier release holds `ROWS` shared until its
            // append ends.
            if !lock_until(file, ROWS, 1, deadline)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "a write on the fast path did not end its append in time",
                ));
            }
            unlock(file, ROWS, 1);
            Ok(())
        }

        pub(super) fn turn(&self, wait: Duration) -> Option<TurnInner> {
            match self.take(Instant::now() + wait) {
                Ok(turn) => turn,
                Err(e) => {
                    tracing::debug!(error = %e, "the writers' queue: writing without a turn");
                    None
                }
            }
        }

        fn take(&self, deadline: Instant) -> io::Result<Option<TurnInner>> {
            let file = &self.0;
            if !lock_until(file, COUNTER.0, COUNTER.1, deadline)? {
                return Ok(None);
            }
            let placed = (|| -> io::Result<Option<(TurnInner, u64, u64)>> {
                let mut head = [0u8; 16];
                file.read_exact_at(&mut head, 0)?;
                if !ours(&head) {
                    return Ok(None);
                }
                let ticket = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
                let place = SLOTS + ticket % SPAN;
                // Held only if the line wrapped around onto a writer still in it.
                if !set(file, libc::F_WRLCK, place, 1, false)? {
                    return Ok(None);
                }
                let turn = TurnInner {
                    file: file.clone(),
                    place,
                };
                let next = ticket.wrapping_add(1);
                file.write_all_at(&next.to_le_bytes(), COUNTER.0)?;
                Ok(Some((turn, SLOTS + ticket.wrapping_sub(1) % SPAN, next)))
            })();
            unlock(file, COUNTER.0, COUNTER.1);
            let Some((turn, ahead, next)) = placed? else {
                return Ok(None);
            };
            // The writer ahead holds its place until its write ends.
            if lock_until(file, ahead, 1, deadline)? {
                unlock(file, ahead, 1);
                // Every writer that took a place before this one has had its turn: the
                // counter as this place left it is what the fast path expects.
                self.1.store(next, Ordering::Relaxed);
            } else {
                self.1.store(NO_PLACE, Ordering::Relaxed);
                tracing::debug!("the writers' queue: the writer ahead did not finish in time");
            }
            Ok(Some(turn))
        }
    }

    /// Whether the head of the open queue file still starts with the marker: a file
    /// overwritten behind this writer (same inode, another program's bytes) is no longer
    /// ours, and is never written again (the writer goes without a turn).
    fn ours(head: &[u8]) -> bool {
        let ours = head.starts_with(MAGIC);
        if !ours {
            tracing::warn!(
                "the writers' queue file was overwritten by another program: not written"
            );
        }
        ours
    }

    fn flock(kind: libc::c_int, start: u64, len: u64) -> io::Result<libc::flock> {
        let offset = |v: u64| libc::off_t::try_from(v).map_err(io::Error::other);
        Ok(libc::flock {
            l_type: kind as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: offset(start)?,
            l_len: offset(len)?,
            l_pid: 0,
        })
    }

    /// One lock operation on `len` bytes at `start`: `Ok(false)` when another open file
    /// holds a conflicting lock and `block` is false.
    fn set(file: &File, kind: libc::c_int, start: u64, len: u64, block: bool) -> io::Result<bool> {
        let lock = flock(kind, start, len)?;
        loop {
            let arg = if block {
                FcntlArg::F_OFD_SETLKW(&lock)
            } else {
                FcntlArg::F_OFD_SETLK(&lock)
            };
            return match fcntl(file, arg) {
                Ok(_) => Ok(true),
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN | Errno::EACCES) if !block => Ok(false),
                Err(e) => Err(e.into()),
            };
        }
    }

    fn unlock(file: &File, start: u64, len: u64) {
        if let Err(e) = set(file, libc::F_UNLCK, start, len, false) {
            tracing::debug!(error = %e, "the writers' queue: an unlock failed");
        }
    }

    /// Locks `len` bytes at `start` exclusively, waiting until `deadline`: `Ok(false)` if
    /// another holder still has them then. A blocking lock has no timeout, so the wait
    /// runs on a thread of its own; one that outlives the deadline releases what it then
    /// gets.
    fn lock_until(file: &Arc<File>, start: u64, len: u64, deadline: Instant) -> io::Result<bool> {
        if set(file, libc::F_WRLCK, start, len, false)? {
            return Ok(true);
        }
        #[derive(PartialEq)]
        enum Wait {
            Waiting,
            Got,
            Failed,
            GaveUp,
        }
        let shared = Arc::new((Mutex::new(Wait::Waiting), Condvar::new()));
        let waiter = {
            let (shared, file) = (shared.clone(), file.clone());
            move || {
                let got = set(&file, libc::F_WRLCK, start, len, true).unwrap_or(false);
                let (state, woken) = &*shared;
                let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                match (*state == Wait::GaveUp, got) {
                    (true, true) => unlock(&file, start, len),
                    (true, false) => {}
                    (false, true) => *state = Wait::Got,
                    (false, false) => *state = Wait::Failed,
                }
                woken.notify_one();
            }
        };
        std::thread::Builder::new()
            .name("session-state-queue".into())
            .spawn(waiter)?;
        let (state, woken) = &*shared;
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match *state {
                Wait::Got => return Ok(true),
                Wait::Failed => return Err(io::Error::other("the blocking lock failed")),
                Wait::Waiting | Wait::GaveUp => {}
            }
            let now = Instant::now();
            if now >= deadline {
                *state = Wait::GaveUp;
                return Ok(false);
            }
            state = woken
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    #[cfg(test)]
    mod tests {
        use super::super::WriterQueue;
        use super::*;

        fn queue_in(dir: &Path) -> (WriterQueue, WriterQueue) {
            let db = dir.join("states.sqlite");
            (WriterQueue::beside(&db), WriterQueue::beside(&db))
        }

        const WAIT: Duration = Duration::from_secs(10);

        /// Two queues on one file are two open files: the second waits for the first's
        /// turn to end, then gets its own; the counter moves by one per turn.
        #[test]
        fn a_turn_waits_for_the_one_ahead() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (a, b) = queue_in(dir.path());
            let first = a.turn(WAIT).expect("a queues");
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                let turn = b.turn(WAIT).expect("b queues");
                tx.send(()).expect("send");
                drop(turn);
                b
            });
            // While `first` stands, `b` is in line behind it and sends nothing.
            assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
            drop(first);
            rx.recv_timeout(WAIT).expect("b's turn came when a's ended");
            let b = waiter.join().expect("join");
            let bytes = std::fs::read(b.path()).expect("read");
            assert_eq!(&bytes[..8], MAGIC);
            assert_eq!(u64::from_le_bytes(bytes[8..16].try_into().expect("8")), 2);
        }

        /// Waiting in line is bounded: behind a turn that never ends, the next writer gets
        /// a turn (out of order) after its wait, and the writer after it waits for it.
        #[test]
        fn a_stalled_turn_delays_the_next_by_at_most_its_wait() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (a, b) = queue_in(dir.path());
            let _stalled = a.turn(WAIT).expect("a queues");
            let started = Instant::now();
            let late = b.turn(Duration::from_millis(100)).expect("b queues anyway");
            assert!(started.elapsed() >= Duration::from_millis(100));
            let c = WriterQueue::beside(&dir.path().join("states.sqlite"));
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                let turn = c.turn(WAIT);
                tx.send(turn.is_some()).expect("send");
            });
            assert!(
                rx.recv_timeout(Duration::from_millis(200)).is_err(),
                "c waits for b"
            );
            drop(late);
            assert!(rx.recv_timeout(WAIT).expect("c's turn"));
            waiter.join().expect("join");
        }

        /// A turn taken inside another of the same queue is the outer one: it does not
        /// wait for itself, and the line moves on only when the outer one ends.
        #[test]
        fn a_turn_inside_a_turn_is_the_same_turn() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (a, b) = queue_in(dir.path());
            let outer = a.turn(WAIT).expect("a queues");
            let started = Instant::now();
            let inner = a.turn(WAIT).expect("nested");
            assert!(started.elapsed() < WAIT, "it did not wait for itself");
            drop(inner);
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                let turn = b.turn(WAIT);
                tx.send(turn.is_some()).expect("send");
            });
            assert!(
                rx.recv_timeout(Duration::from_millis(200)).is_err(),
                "b waits for the outer turn"
            );
            drop(outer);
            assert!(rx.recv_timeout(WAIT).expect("b's turn"));
            waiter.join().expect("join");
            let bytes = std::fs::read(dir.path().join("states.sqlite-queue")).expect("read");
            assert_eq!(u64::from_le_bytes(bytes[8..16].try_into().expect("8")), 2);
        }

        /// The line is empty until another open file takes a place in it, and again when
        /// that turn ends; this owner's own turn does not count for others.
        #[test]
        fn an_empty_line_is_seen_as_empty() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (a, b) = queue_in(dir.path());
            assert!(a.line_is_empty() && b.line_is_empty());
            let turn = a.turn(WAIT).expect("a queues");
            assert!(!b.line_is_empty(), "a is in line");
            assert!(!a.line_is_empty(), "inside its own turn, a queues (nested)");
            drop(turn);
            assert!(a.line_is_empty() && b.line_is_empty());
        }

        /// The fast path: a pass while the generation is the one seen, nobody is in line
        /// and nobody announces a row; a turn in line, or a generation moved on, refuses it.
        #[test]
        fn a_fast_pass_needs_an_empty_line_and_the_same_generation() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (a, b) = queue_in(dir.path());
            let seen = a.rows_generation().expect("a generation");
            assert_eq!(seen, 0, "a new queue starts at 0");
            let pass = a.fast_pass(seen).expect("a pass");
            // Two passes at once: both are shared.
            let other = b.fast_pass(seen).expect("a second pass");
            assert!(b.line_is_empty(), "a pass is not a place in line");
            drop((pass, other));
            assert!(a.fast_pass(seen + 1).is_none(), "another generation");
            let turn = b.turn(WAIT).expect("b queues");
            assert!(a.fast_pass(seen).is_none(), "b is in line");
            drop(turn);
            b.announce_row("acquire the lock", "s").expect("announced");
            assert_eq!(a.rows_generation(), Some(seen + 1), "moved on");
            assert!(a.fast_pass(seen).is_none(), "the old generation");
            assert!(a.fast_pass(seen + 1).is_some());
        }

        /// A place whose wait for the writer ahead ran out does not count as a look at the
        /// line: while that writer is still in line, this owner gets no fast pass; after
        /// a place that had its turn, it needs none.
        #[test]
        fn a_place_that_waited_in_vain_gets_no_pass_past_the_writer_ahead() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (a, b) = queue_in(dir.path());
            let ahead = b.turn(WAIT).expect("b queues");
            drop(
                a.turn(Duration::from_millis(50))
                    .expect("a place, waited in vain"),
            );
            assert!(a.fast_pass(0).is_none(), "b is still in line");
            drop(ahead);
            assert!(a.fast_pass(0).is_some(), "the line is empty");
            drop(a.turn(WAIT).expect("a queues"));
            assert!(a.fast_pass(0).is_some(), "after its own turn");
            let turn = b.turn(WAIT).expect("b queues");
            assert!(a.fast_pass(0).is_none(), "b took a place since");
            drop(turn);
        }

        /// A holder's announcement waits for every pass of an earlier release already
        /// taken (`ROWS` held shared); this release's passes hold nothing there, so it
        /// does not wait for them (the session file's lock orders those). A writer that
        /// queues while a pass stands gets its place at once, and then no pass is given.
        #[test]
        fn an_announcement_waits_for_the_passes_taken_before_it() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (a, b) = queue_in(dir.path());
            // A write on the fast path of an earlier release: `ROWS` shared, on its own
            // open file, until its line is written.
            drop(a.turn(WAIT).expect("the file made"));
            let old = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(a.path())
                .expect("open");
            assert!(set(&old, libc::F_RDLCK, ROWS, 1, false).expect("lock"));
            let (tx, rx) = std::sync::mpsc::channel();
            let holder = std::thread::spawn(move || {
                let announced = b.announce_row("acquire the lock", "s");
                tx.send(announced.is_ok()).expect("send");
                b
            });
            assert!(
                rx.recv_timeout(Duration::from_millis(200)).is_err(),
                "the holder waits for the pass"
            );
            unlock(&old, ROWS, 1);
            assert!(
                rx.recv_timeout(WAIT)
                    .expect("announced once the pass ended")
            );
            let b = holder.join().expect("join");
            // This release's passes hold nothing there: an announcement does not wait.
            let pass = a.fast_pass(1).expect("a pass at the new generation");
            b.announce_row("acquire the lock", "s").expect("at once");
            drop(pass);
            let turn = b.turn(WAIT).expect("a place");
            assert!(a.fast_pass(2).is_none(), "b is in line");
            drop(turn);
            assert!(a.fast_pass(2).is_some());
        }

        /// A queue file of ours without the generation (16 bytes) gains it, at 0, and keeps
        /// its counter.
        #[test]
        fn a_queue_file_without_the_generation_gains_it() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (q, _) = queue_in(dir.path());
            let mut old = MAGIC.to_vec();
            old.extend_from_slice(&7u64.to_le_bytes());
            std::fs::write(q.path(), &old).expect("plant");
            assert_eq!(q.rows_generation(), Some(0));
            let bytes = std::fs::read(q.path()).expect("read");
            assert_eq!(bytes.len(), 24);
            assert_eq!(&bytes[..16], &old[..]);
        }

        /// A file at the queue's path that is not ours is never written, and its writers
        /// do not queue; an empty file becomes the queue.
        #[test]
        fn a_file_that_is_not_ours_is_left_alone() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (q, _) = queue_in(dir.path());
            std::fs::write(q.path(), b"my notes\n").expect("plant");
            assert!(q.turn(WAIT).is_none());
            assert_eq!(std::fs::read(q.path()).expect("read"), b"my notes\n");
            let same_length = b"0123456789abcdef";
            std::fs::write(q.path(), same_length).expect("plant");
            let (q, _) = queue_in(dir.path());
            assert!(q.turn(WAIT).is_none());
            assert_eq!(std::fs::read(q.path()).expect("read"), same_length);
            std::fs::write(q.path(), b"").expect("empty");
            let (q, _) = queue_in(dir.path());
            assert!(q.turn(WAIT).is_some());
            assert_eq!(&std::fs::read(q.path()).expect("read")[..8], MAGIC);
        }
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
mod imp {
    use std::path::Path;
    use std::time::Duration;

    #[derive(Debug)]
    pub(super) enum QueueFile {}
    #[derive(Debug)]
    pub(super) struct TurnInner;
    #[derive(Debug)]
    pub(super) struct PassInner;

    impl QueueFile {
        pub(super) fn open(_: &Path) -> Option<QueueFile> {
            None
        }
        pub(super) fn rows_generation(&self) -> Option<u64> {
            match *self {}
        }
        pub(super) fn fast_pass(&self, _: u64) -> Option<PassInner> {
            match *self {}
        }
        pub(super) fn announce_row(&self, _: Duration) -> std::io::Result<()> {
            match *self {}
        }
        pub(super) fn turn(&self, _: Duration) -> Option<TurnInner> {
            match *self {}
        }
    }
}
