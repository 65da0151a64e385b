//! Writing a [`SessionLog`] (the writing rules of `docs/durability.md`): `append` (one
//! `write()` and one `fdatasync` per entry, under the session file's advisory lock,
//! `docs/lock.md`), `materialize` (a new session's file, through the one durable-create
//! routine), `refresh` (another process's appends), and the rules before a byte is
//! written: check the length, ingest a foreign tail, refuse what would be refused after
//! writing, migrate an old version, close a torn tail; a failed write or sync poisons the
//! log.

use super::SessionLog;
use super::options::Materialize;
use super::session::Storage;
use crate::error::{AppendError, InvalidLog, IoContext, IoFailure, Location};
use crate::log::entry::Role;
use crate::log::io::{FileIdentity, Meta};
use crate::log::known::{End, Look};
use crate::log::reader::{self, ReadMode};
use crate::log::writer::LogWriter;
use crate::log::{NewEntry, io, migrate};
use std::path::Path;

/// At most this many new bytes are read into memory at once by a refresh (one `pread`,
/// with the bytes before them that must still be there); more are read in a stream.
const ONE_READ_MAX: u64 = 1 << 20;

/// What this module's functions return, unless they say otherwise.
type Result<T, E = AppendError> = std::result::Result<T, E>;

impl SessionLog {
    /// Reads another process's appends (docs/spec.md §5). Errors if the file was truncated or
    /// replaced; then reopen. A detached log is refused ([`AppendError::Detached`]): it has no
    /// file to follow.
    pub fn refresh(&mut self) -> Result<()> {
        self.refuse_detached()?;
        if !self.is_materialized() {
            return Ok(());
        }
        let at = match self.check_kept_reader()? {
            Some(at) => at,
            None => self.check_same_file_at()?,
        };
        if at.look.len == at.expected {
            return self.judge_same_length(at.look);
        }
        self.ingest_from_disk()
    }

    /// [`SessionLog::check_same_file_at`] from the file kept open for reading alone (one
    /// `fstat`), when it can tell ([`SessionLog::at_end_of_open`]). `None`: look at the path.
    fn check_kept_reader(&self) -> Result<Option<AtEnd>> {
        let (Some(f), Some(identity)) = (&self.reader, self.identity) else {
            return Ok(None);
        };
        let status = io::open_status(f).ctx("checking", &self.index.path)?;
        self.at_end_of_open(status, identity)
    }

    /// The refusal of every write to a detached log: the session belongs to the store its
    /// bytes came from.
    fn refuse_detached(&self) -> Result<()> {
        match self.storage {
            Storage::Detached(_) => Err(AppendError::Detached {
                label: self.index.path.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Checks that the file at the path is still the one this log read (same identity,
    /// not shorter than what was read) and returns how it ends.
    fn check_same_file_at(&self) -> Result<AtEnd> {
        let path = &self.index.path;
        let meta = Meta::of_path(path).ctx("checking", path)?;
        let expected = self.scan.next.offset + self.tail;
        if let Some(id) = self.identity
            && id != FileIdentity::default()
            && meta.identity() != id
        {
            return Err(changed_file(path));
        }
        if meta.len() < expected {
            return Err(shrank(path, expected, meta.len()));
        }
        Ok(AtEnd {
            look: Look::of(&meta),
            expected,
            identity: meta.identity(),
        })
    }

    /// [`SessionLog::check_same_file_at`] from the open writer alone (one `fstat`, no
    /// look at the path), when it can tell ([`SessionLog::at_end_of_open`]). `None`: look
    /// at the path.
    fn check_open_file(&self) -> Result<Option<AtEnd>> {
        let Storage::File(Some(w)) = &self.storage else {
            return Ok(None);
        };
        let Some(open) = w.identity() else {
            return Ok(None);
        };
        self.at_end_of_open(w.status()?, open)
    }

    /// How the file ends, from the `status` of a handle this log holds open on it (`open`:
    /// that file's identity), when that tells: a file without a name left was deleted or
    /// had another renamed over its path (refused); one whose inode last changed by a
    /// write of its content was not renamed or linked since, so the path still names it.
    /// `None` (no status on this platform, or another change last): look at the path.
    fn at_end_of_open(
        &self,
        status: Option<io::OpenStatus>,
        open: FileIdentity,
    ) -> Result<Option<AtEnd>> {
        let Some(status) = status else {
            return Ok(None);
        };
        if status.links == 0 {
            return Err(changed_file(&self.index.path));
        }
        if !status.written_last {
            return Ok(None);
        }
        let expected = self.scan.next.offset + self.tail;
        if status.len < expected {
            return Err(shrank(&self.index.path, expected, status.len));
        }
        Ok(Some(AtEnd {
            look: Look {
                len: status.len,
                stamp: status.changed,
            },
            expected,
            identity: open,
        }))
    }

    /// A file seen at the length this log read (`now`): when its change stamp moved since
    /// this log last saw that length, it was touched or rewritten in place, so it is read
    /// again whole and must hold what this log holds, or the log refuses it
    /// ([`AppendError::ChangedOnDisk`]): nothing is decided on what this log remembers of a
    /// file rewritten behind it.
    fn judge_same_length(&mut self, now: Look) -> Result<()> {
        match self.seen {
            Some(seen) if seen.rewritten_at_same_length(now) => self.read_again_and_compare(),
            Some(_) => Ok(()),
            None => {
                self.seen = Some(now);
                Ok(())
            }
        }
    }

    /// Reads the file again whole, as it was opened: it must hold the header, the entries
    /// (ids, parents, types, customTypes, roles, places, lengths, state data) and the end
    /// this log holds. A touch, or a rewrite of what this log does not hold (a message's
    /// text), is taken as the file now is; anything else refuses, naming the first line
    /// that differs.
    fn read_again_and_compare(&mut self) -> Result<()> {
        let path = self.index.path.clone();
        let fresh = SessionLog::open_with(&path, self.options.clone()).map_err(|e| {
            rewritten(
                &path,
                format!(
                    "it was rewritten in place at the {} bytes this log read, and reading it \
                     again fails: {e}",
                    self.scan.next.offset + self.tail
                ),
            )
        })?;
        if let Some(line) = first_difference(self, &fresh) {
            return Err(rewritten(
                &path,
                format!(
                    "it was rewritten in place at the {} bytes this log read: line {line} is \
                     not what this log read there",
                    self.scan.next.offset + self.tail
                ),
            ));
        }
        self.seen = fresh.seen;
        self.end = fresh.end;
        Ok(())
    }

    /// Reads what others appended after what this log read: the file must still be the
    /// one this log read, not shorter, and hold the bytes before the end of what was read
    /// (else it was rewritten: [`AppendError::ChangedOnDisk`], never a line read from the
    /// middle of another's and called corrupt). Reads up to the length one look saw, which
    /// it remembers with that look's change stamp.
    fn ingest_from_disk(&mut self) -> Result<()> {
        let path = self.index.path.clone();
        // The file kept open by an earlier ingest is the log's own (its identity was
        // checked when it was opened); the caller checked that the path still names it.
        let f = match self.reader.take() {
            Some(f) => f,
            None => reader::open_regular(&path)?,
        };
        let meta = Meta::of_file(&f).ctx("checking", &path)?;
        if let Some(id) = self.identity
            && id != FileIdentity::default()
            && meta.identity() != id
        {
            return Err(changed_file(&path));
        }
        let look = Look::of(&meta);
        let from = self.scan.next.offset;
        if look.len < from + self.tail {
            return Err(shrank(&path, from + self.tail, look.len));
        }
        let rewritten_before = |log: &SessionLog| {
            rewritten(
                &path,
                format!(
                    "it was rewritten: the bytes before offset {from}, the end of line {} as \
                     this log read it, are not there any more (it is {} bytes long now)",
                    log.scan.next.line.saturating_sub(1),
                    look.len
                ),
            )
        };
        let was_last = self.leaf_follows;
        let mode = self.options.mode;
        let start = self.scan.next;
        let scan = &mut self.scan;
        let index = &mut self.index;
        let mut line = |bytes: &[u8], at| scan.line(&path, mode, bytes, at, index);
        if look.len - from <= ONE_READ_MAX {
            // The usual refresh: the kept end and what follows it, in one `pread`.
            let Some((kept, read)) = self
                .end
                .still_then_read(&f, from, look.len)
                .ctx("reading", &path)?
            else {
                return Err(rewritten_before(self));
            };
            self.tail = reader::for_each_line_in(&read[kept..], start, &mut line)?;
            // The end of the complete lines now read, from the same bytes.
            let complete = (self.scan.next.offset - from) as usize;
            self.end = End::of_bytes(&read[..kept + complete]);
        } else {
            use std::io::{Read, Seek, SeekFrom};
            if !self.end.still(&f, from).ctx("reading", &path)? {
                return Err(rewritten_before(self));
            }
            (&f).seek(SeekFrom::Start(from)).ctx("reading", &path)?;
            self.tail = reader::for_each_line::<_, AppendError>(
                (&f).take(look.len - from),
                &path,
                start,
                &mut line,
            )?;
            self.end = End::read(&f, self.scan.next.offset).ctx("reading", &path)?;
        }
        if was_last {
            self.index.tree.set_leaf(self.index.tree.last_index());
        }
        self.seen = Some(look);
        self.reader = Some(f);
        Ok(())
    }

    /// Whether an entry of the log (or its header) has the id `id`: a new entry's id
    /// must not.
    pub(crate) fn id_taken(&self, id: &str) -> bool {
        self.index.tree.contains(id) || id == self.header.id()
    }

    /// Appends an entry as a child of the active leaf, which then moves to it.
    ///
    /// Once the file exists, the entry is durable when this returns `Ok` (one `write()`
    /// of the whole line, then `fdatasync`), and the append holds the session file's
    /// advisory lock from its check of the file's end to the sync, so another writer of
    /// this crate never appends beside it (`docs/lock.md`, "The one lock"); when another
    /// writer keeps that lock longer than the wait (10 s), the append is refused with
    /// [`crate::lock::LockError::FileHeld`] and nothing is written. Before the session is
    /// materialized, the entry is kept in memory (see [`Materialize`]). On an I/O failure
    /// the log is poisoned: reopen it to see what reached the disk. A detached log is
    /// refused ([`AppendError::Detached`]) before anything is written.
    pub fn append(&mut self, entry: NewEntry) -> Result<String> {
        let written = self.begin_append().and_then(|()| {
            let taken = |id: &str| Ok::<_, AppendError>(self.id_taken(id));
            let id = crate::log::fresh_id(taken)?;
            let line = entry.to_line(&id, self.leaf_id());
            self.write_line(&line).map(|()| (id, line))
        });
        let indexed =
            written.and_then(|(id, line)| self.ingest_written(entry, &id, &line).map(|()| id));
        self.end_append();
        indexed
    }

    /// The start of an append (the state write pipeline's, `store/write.rs`, and
    /// [`SessionLog::append`]'s): refuses a detached or poisoned log; once the file
    /// exists, takes the session file's lock and reads what others appended, so that what
    /// is decided next sees the file's end. [`SessionLog::end_append`] must follow,
    /// whatever happens.
    pub(crate) fn begin_append(&mut self) -> Result<()> {
        self.begin_append_within(true).map(drop)
    }

    /// [`SessionLog::begin_append`] that does not wait for the session file's lock:
    /// `Ok(false)` when another writer holds it, with nothing read or written
    /// ([`SessionLog::end_append`] must follow all the same).
    pub(crate) fn begin_append_now(&mut self) -> Result<bool> {
        self.begin_append_within(false)
    }

    fn begin_append_within(&mut self, wait: bool) -> Result<bool> {
        self.refuse_detached()?;
        if let Some(cause) = &self.poisoned {
            return Err(AppendError::Poisoned {
                path: self.index.path.clone(),
                cause: cause.clone(),
            });
        }
        if !self.is_materialized() {
            return Ok(true);
        }
        // IMPORTANT: the file lock is held from the check of the file's end (in
        // `prepare_file_append`) to the end of the `fdatasync`.
        self.prepare_file_append(wait)
    }

    /// Writes `line` (a whole entry line, a child of the leaf) after
    /// [`SessionLog::begin_append`]: to the file with one `write()` and `fdatasync`, or
    /// to the memory of a session not on disk yet.
    pub(crate) fn write_line(&mut self, line: &str) -> Result<()> {
        if let Storage::Memory(buf) = &mut self.storage {
            buf.extend_from_slice(line.as_bytes());
            return Ok(());
        }
        let end_at = self.scan.next.offset + self.tail + line.len() as u64;
        let path = &self.index.path;
        let writer = writer(&mut self.storage, &self.options, path, &self.header)?;
        writer.append(line.as_bytes())?;
        // The file as this append left it (one `fstat`), so that a rewrite in place at the
        // same length is told from it later.
        self.seen = look_at(writer, path).filter(|l| l.len == end_at);
        Ok(())
    }

    /// [`writer`] of this log.
    fn writer(&mut self) -> Result<&mut LogWriter> {
        writer(
            &mut self.storage,
            &self.options,
            &self.index.path,
            &self.header,
        )
    }

    /// After [`SessionLog::write_line`] of `line`, the line of `entry` with the id `id`:
    /// the file lock is released and the log indexes the entry (as built, for a state
    /// event), its leaf moving to it; a session in memory is materialized once it holds
    /// a conversation (or at once, with `FirstAppend`).
    pub(crate) fn ingest_written(&mut self, entry: NewEntry, id: &str, line: &str) -> Result<()> {
        let start = self.scan.next;
        if let Storage::File(_) = self.storage {
            self.unlock_file();
            self.end = self.end.then(line.as_bytes());
            return self.ingest_own(entry, id, line, start);
        }
        self.ingest_own_line(line.as_bytes(), start)?;
        if !self.hold {
            let conversation = self.options.materialize == Materialize::FirstAppend
                || self
                    .entries()
                    .any(|e| matches!(e.role(), Some(Role::User | Role::Assistant)))
                || matches!(entry.role(), Some(Role::User | Role::Assistant));
            if conversation {
                self.materialize()?;
            }
        }
        Ok(())
    }

    /// The end of an append: the file lock, if taken, is released.
    pub(crate) fn end_append(&mut self) {
        self.unlock_file();
    }

    /// Opens the writer if it is not open, and takes the session file's advisory lock on
    /// it (`LogWriter::lock`: a bounded wait, then a refusal).
    fn lock_file(&mut self, wait: bool) -> Result<bool> {
        let w = self.writer()?;
        match wait {
            true => w.lock("append").map(|()| true),
            false => w.try_lock(),
        }
    }

    /// Releases the file lock. Should that fail, the writer is closed, which releases it
    /// (the next append opens the file again); a poisoned writer's cause stays with the
    /// log.
    fn unlock_file(&mut self) {
        let Storage::File(Some(w)) = &mut self.storage else {
            return;
        };
        if let Err(e) = w.unlock() {
            tracing::warn!(error = %e, "closing the session file to release its lock");
            if let Err(AppendError::Poisoned { cause, .. }) = w.check() {
                self.poisoned.get_or_insert(cause);
            }
            self.storage = Storage::File(None);
        }
    }

    /// Indexes the entry this log just appended as `line` at `at`, with the id `id`, as a
    /// child of the leaf: a printed `custom` entry (every state event) is taken as it was
    /// built, any other is read back from its line. The leaf moves to it.
    fn ingest_own(&mut self, entry: NewEntry, id: &str, line: &str, at: Location) -> Result<()> {
        let len = line.len() as u64;
        if let Ok((custom_type, data)) = entry.into_printed_custom()
            && self.scan.own_line(at, len)
        {
            // `next_line` printed the line as a child of this leaf.
            let parent = self.index.tree.leaf_index();
            let data = data.into_boxed_str();
            self.index
                .push_own_custom(id, parent, &custom_type, data, at, len);
            let last = self.index.tree.last_index();
            self.index.tree.set_leaf(last);
            self.leaf_follows = true;
            return Ok(());
        }
        self.ingest_own_line(line.as_bytes(), at)
    }

    fn ingest_own_line(&mut self, line: &[u8], at: Location) -> Result<()> {
        let bytes = &line[..line.len() - 1];
        let path = self.index.path.clone();
        self.scan
            .line::<AppendError>(&path, self.options.mode, bytes, at, &mut self.index)?;
        let last = self.index.tree.last_index();
        self.index.tree.set_leaf(last);
        self.leaf_follows = true;
        Ok(())
    }

    /// Writes a new session's buffered entries to disk through the one durable-create
    /// routine (`io::create_durably`): one write to a hidden temporary file in the same
    /// directory, `fdatasync`, a hard link to the real name (which fails if that name
    /// exists), then fsync the directory. The real name never shows a half-written file,
    /// even after a crash; a failure leaves at most a hidden temporary file. A failed write
    /// or sync, or a failure after the file became visible, poisons the log. A detached
    /// log is refused ([`AppendError::Detached`]): no file is created at its label.
    pub fn materialize(&mut self) -> Result<()> {
        self.refuse_detached()?;
        if let Some(cause) = &self.poisoned {
            return Err(AppendError::Poisoned {
                path: self.index.path.clone(),
                cause: cause.clone(),
            });
        }
        let Storage::Memory(buf) = &self.storage else {
            return Ok(());
        };
        let buf = buf.clone();
        let path = self.index.path.clone();
        let dir = reader::parent_dir(&path).to_path_buf();
        std::fs::create_dir_all(&dir).ctx("creating the directory", &dir)?;
        if path.exists() {
            return Err(AppendError::AlreadyExists { path });
        }
        let fs = self.options.fs.clone();
        let created = io::create_durably(&*fs, &path, "creating", io::Place::Link, |tmp| {
            tmp.write(&buf)
        });
        match created {
            Ok(()) => {}
            Err(io::CreateFailed {
                step: io::Step::Create | io::Step::Place,
                error,
            }) => return Err(error),
            Err(io::CreateFailed {
                step: io::Step::Fill,
                error,
            }) => {
                // No retry after a failed write or fsync ("Can Applications Recover from
                // fsync Failures?", ATC'20).
                let cause = error.to_string();
                self.poisoned = Some(cause.clone());
                return Err(AppendError::Poisoned { path, cause });
            }
            Err(io::CreateFailed {
                step: io::Step::SyncDir,
                error,
            }) => {
                // The file exists but is not known to be durable: append nothing more here.
                self.poisoned = Some(error.to_string());
                return Err(error);
            }
        }
        match fs
            .open_append(&path)
            .ctx("opening for append", &path)
            .map_err(AppendError::from)
        {
            Ok(file) => {
                let writer = LogWriter::new(&path, file);
                self.identity = writer.identity();
                self.seen = look_at(&writer, &path).filter(|l| l.len == buf.len() as u64);
                self.end = End::default().then(&buf);
                self.storage = Storage::File(Some(writer));
                Ok(())
            }
            Err(e) => {
                self.poisoned = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Before an append to an existing file: open the writer and take the file lock,
    /// check the length, ingest a foreign tail, migrate an old version, close a torn tail.
    /// The caller releases the lock ([`SessionLog::unlock_file`]) whatever the outcome.
    fn prepare_file_append(&mut self, wait: bool) -> Result<bool> {
        if let Storage::File(Some(w)) = &self.storage {
            w.check()?;
        }
        // Under the lock, no other writer of this crate appends or migrates until this
        // append is done, whatever database it uses.
        if !self.lock_file(wait)? {
            return Ok(false);
        }
        // Decide before touching the file (`docs/durability.md`): every refusal happens
        // here, before a migration or the newline that closes a torn tail writes a byte.
        // The identity of the file at the path, seen under the lock.
        let mut on_path = Some(self.decide_before_writing()?);
        if self.header.version() < 3 {
            // The old file's writer, and its lock, go with the log it replaces; the new
            // file is locked before its length is checked.
            self.migrate_on_disk()?;
            self.lock_file(true)?;
            on_path = None;
        }
        let was = self.identity;
        let now = self.writer()?.identity();
        if let Some(on_path) = on_path {
            // The path was looked at under the lock (its length checked and what had grown
            // read): it must name the file this writer has open.
            if let (Some(now), Some(was)) = (now, was)
                && (now != was || on_path != now)
            {
                return Err(changed_file(&self.index.path));
            }
        } else {
            // After a migration: the new file, locked, looked at through the writer.
            let len = self.writer()?.len()?;
            let expected = self.scan.next.offset + self.tail;
            let on_path = Meta::of_path(&self.index.path).ok().map(|m| m.identity());
            if let (Some(now), Some(was)) = (now, was)
                && (now != was || on_path != Some(now))
            {
                return Err(changed_file(&self.index.path));
            }
            if len < expected {
                return Err(shrank(&self.index.path, expected, len));
            }
            if len > expected {
                // Someone appended meanwhile: ingest their entries first.
                self.ingest_from_disk()?;
            }
        }
        if self.tail > 0 {
            // Close the torn tail so two records can never fuse. Its bytes stay in the
            // file as a torn record that readers skip and report.
            if let Storage::File(Some(w)) = &mut self.storage {
                w.append(b"\n")?;
            }
            self.ingest_from_disk()?;
        }
        if let Some((at, detail)) = self.scan.pending_bad.first() {
            return Err(AppendError::TrailingGarbage {
                path: self.index.path.clone(),
                at: *at,
                detail: detail.clone(),
            });
        }
        Ok(true)
    }

    /// Reads what others appended and refuses, without writing, a file this writer would
    /// refuse after writing: an unparsable last line, or a tail that the closing newline
    /// would turn into one. Returns the identity of the file at the path.
    fn decide_before_writing(&mut self) -> Result<FileIdentity> {
        let at = match self.check_open_file()? {
            Some(at) => at,
            None => self.check_same_file_at()?,
        };
        let on_path = at.identity;
        if at.look.len > at.expected {
            self.ingest_from_disk()?;
        } else {
            self.judge_same_length(at.look)?;
        }
        let path = &self.index.path;
        let refuse = |at: Location, detail: String| AppendError::TrailingGarbage {
            path: path.clone(),
            at,
            detail,
        };
        if let Some((at, detail)) = self.scan.pending_bad.first() {
            return Err(refuse(*at, detail.clone()));
        }
        if self.tail > 0 {
            use std::io::{Read, Seek, SeekFrom};
            let mut f = reader::open_regular(path)?;
            f.seek(SeekFrom::Start(self.scan.next.offset))
                .ctx("reading", path)?;
            let mut tail = Vec::new();
            f.take(self.tail)
                .read_to_end(&mut tail)
                .ctx("reading", path)?;
            match reader::classify(&tail) {
                reader::LineClass::Bad(detail) => return Err(refuse(self.scan.next, detail)),
                reader::LineClass::Invalid(detail) if self.options.mode == ReadMode::Strict => {
                    return Err(InvalidLog::InvalidEntry {
                        path: path.clone(),
                        at: self.scan.next,
                        id: None,
                        detail,
                    }
                    .into());
                }
                _ => {}
            }
        }
        Ok(on_path)
    }

    fn migrate_on_disk(&mut self) -> Result<()> {
        let assigned: Vec<(String, Option<String>)> = self
            .entries()
            .map(|e| (e.id().to_owned(), e.parent_id().map(str::to_owned)))
            .collect();
        let path = self.index.path.clone();
        migrate::migrate_file(&*self.options.fs, &path, self.header.version(), &assigned)?;
        let leaf = self.leaf_id().map(str::to_owned);
        let follows = self.leaf_follows;
        let mut fresh = SessionLog::open_with(&path, self.options.clone())?;
        if !follows {
            match leaf {
                Some(l) => fresh.navigate(&l).map_err(|e| AppendError::ChangedOnDisk {
                    path: e.path,
                    detail: format!("the migrated file has no entry '{}', the leaf", e.id),
                })?,
                None => fresh.reset_leaf(),
            }
        }
        *self = fresh;
        Ok(())
    }
}

/// How a file ends, from one look at it, beside the length this log expects.
struct AtEnd {
    look: Look,
    /// The bytes this log read (complete lines and a torn tail).
    expected: u64,
    /// The file's identity.
    identity: FileIdentity,
}

/// One look at the file `writer` has open (`fstat`), or at the path when the open file
/// cannot tell and the path names that file: `None` when neither can be had.
fn look_at(writer: &LogWriter, path: &Path) -> Option<Look> {
    match writer.status() {
        Ok(Some(s)) => Some(Look {
            len: s.len,
            stamp: s.changed,
        }),
        _ => Meta::of_path(path)
            .ok()
            .filter(|m| writer.identity() == Some(m.identity()))
            .map(|m| Look::of(&m)),
    }
}

/// The first line at which `fresh` (the file read again) does not hold what `log` holds:
/// the header, each entry as indexed, and where the lines read end. `None`: the same.
fn first_difference(log: &SessionLog, fresh: &SessionLog) -> Option<u64> {
    if log.header != fresh.header {
        return Some(1);
    }
    let same = |a: crate::EntryRef<'_>, b: crate::EntryRef<'_>| {
        a.id() == b.id()
            && a.parent_id() == b.parent_id()
            && a.entry_type() == b.entry_type()
            && a.custom_type() == b.custom_type()
            && a.role() == b.role()
            && a.location() == b.location()
            && a.line_len() == b.line_len()
            && a.custom_data() == b.custom_data()
    };
    let mut theirs = fresh.entries();
    for ours in log.entries() {
        match theirs.next() {
            Some(t) if same(ours, t) => {}
            _ => return Some(ours.location().line),
        }
    }
    if let Some(t) = theirs.next() {
        return Some(t.location().line);
    }
    let ends = |l: &SessionLog| (l.scan.next.offset, l.tail);
    (ends(log) != ends(fresh)).then_some(log.scan.next.line)
}

fn rewritten(path: &Path, detail: String) -> AppendError {
    AppendError::ChangedOnDisk {
        path: path.to_path_buf(),
        detail,
    }
}

fn changed_file(path: &Path) -> AppendError {
    AppendError::ChangedOnDisk {
        path: path.to_path_buf(),
        detail: "another file now sits at this path".into(),
    }
}

fn shrank(path: &Path, expected: u64, len: u64) -> AppendError {
    AppendError::ChangedOnDisk {
        path: path.to_path_buf(),
        detail: format!("it shrank from {expected} to {len} bytes"),
    }
}

/// The session file's writer, opened on the first append. A log that has no file to write
/// is refused as it is: detached ([`AppendError::Detached`]); one only in memory is not
/// on disk to be opened (the callers ask only for a materialized log's writer).
fn writer<'a>(
    storage: &'a mut Storage,
    options: &super::LogOptions,
    path: &Path,
    header: &crate::log::entry::Header,
) -> Result<&'a mut LogWriter> {
    match storage {
        Storage::File(Some(w)) => Ok(w),
        Storage::File(slot) => {
            let w = options
                .fs
                .open_append(path)
                .ctx("opening for append", path)?;
            Ok(slot.insert(LogWriter::new(path, w)))
        }
        Storage::Memory(_) => Err(IoFailure::new(
            "opening for append",
            path,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("session {} has not been written to disk yet", header.id()),
            ),
        )
        .into()),
        Storage::Detached(_) => Err(AppendError::Detached {
            label: path.to_path_buf(),
        }),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Everything the index holds of each entry, in file order.
    fn entries(log: &SessionLog) -> Vec<String> {
        log.entries()
            .map(|e| {
                format!(
                    "{} {:?} {:?} {:?} {:?} {:?} {} {:?}",
                    e.id(),
                    e.parent_id(),
                    e.entry_type(),
                    e.custom_type(),
                    e.role(),
                    e.location(),
                    e.line_len(),
                    e.custom_data(),
                )
            })
            .collect()
    }

    /// The entries this log appends and indexes without reading their lines back are
    /// indexed exactly as a reader of the file indexes them: ids, parents, types,
    /// customTypes (escaped ones too), data, places, lengths, the leaf and the end.
    #[test]
    fn what_an_append_indexes_is_what_reading_the_file_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = SessionLog::create(dir.path(), "/w").unwrap();
        log.append(NewEntry::message(json!({"role": "user", "content": "hi"})))
            .unwrap();
        let fork = log.leaf_id().unwrap().to_owned();
        // `data` as the state layer prints it (the printer is not this layer's).
        let printed = |ct: &str, data: &str| NewEntry::custom_printed(ct.into(), data.into());
        log.append(printed("plain", r#"{"v":1,"s":"x\"y\\z\n"}"#))
            .unwrap();
        log.append(printed("quo\"te é", r#"[1.5,null,{"é":"😀"}]"#))
            .unwrap();
        log.append(NewEntry::custom("not-printed", Some(json!({"a": 1}))))
            .unwrap();
        log.navigate(&fork).unwrap();
        log.append(printed("plain", r#""on the fork""#)).unwrap();
        log.append(NewEntry::message(
            json!({"role": "assistant", "content": []}),
        ))
        .unwrap();
        log.append(printed("plain", "2")).unwrap();
        let reread = SessionLog::open(log.path()).unwrap();
        assert_eq!(entries(&log), entries(&reread));
        assert_eq!(log.leaf_id(), reread.leaf_id());
        assert_eq!(log.consumed_bytes(), reread.consumed_bytes());
        assert_eq!(log.len(), 7);
        assert!(log.findings().is_empty() && reread.findings().is_empty());
        // The customTypes as written, one after another and alternating (interned once).
        for l in [&log, &reread] {
            let types: Vec<&str> = l.entries().filter_map(|e| e.custom_type()).collect();
            assert_eq!(
                types,
                ["plain", "quo\"te é", "not-printed", "plain", "plain"]
            );
        }
        // Both go on the same way: the next append is read back the same.
        log.append(printed("plain", "3")).unwrap();
        let again = SessionLog::open(log.path()).unwrap();
        assert_eq!(entries(&log), entries(&again));
    }
}
