//! Catch-up (docs/spec.md §4): plan under the write lock, then read only the bytes after the
//! watermark into rows, committed in bounded chunks with their watermark, or rebuild the
//! session from the log when its prefix changed.

use super::schema::BUSY_TIMEOUT;
use super::sink::SqlSink;
use super::watermark::{
    DIGEST_SPAN, Plan, SessionRow, Watermark, digests, mtime_ns, plan, session_row, span_digest,
    write_watermark,
};
use super::{CatchUp, db_err, file_key, forget};
use crate::error::{Error, IoContext, Location, Result};
use crate::lock::{Turns, WriterQueue};
use crate::log::io::Meta;
use crate::log::reader::{self, ReadMode, ScanState};
use rusqlite::{Connection, OptionalExtension, params};
use std::io::{Seek, SeekFrom};
use std::path::Path;

/// A catch-up commits at least every this many entries or [`CHUNK_BYTES`] bytes
/// (docs/spec.md §4: other sessions wait at most for one chunk), of a session file here
/// and of a stored session's lines in `stored.rs`.
pub(super) const CHUNK_ENTRIES: u64 = 20_000;

/// The bytes of a catch-up's chunk, with [`CHUNK_ENTRIES`].
pub(super) const CHUNK_BYTES: u64 = 16 << 20;

/// Every state event's line holds this (its `customType`), unless written with escapes.
const STATE_MARK: &str = "session-state";

/// How a catch-up commits (docs/spec.md §4: building one session must not block the others).
enum Commit<'h, 'q> {
    /// In bounded chunks, each committed with its watermark, each in its own turn among
    /// the database's writers; the hook runs between chunks and may stop the build there
    /// (as a killed process would).
    Chunks(&'h mut ChunkPolicy, &'h mut Turns<'q>),
    /// Inside the caller's transaction: at most one chunk; the rest is left to the next
    /// catch-up.
    Caller(&'h ChunkPolicy),
}

/// The size of a catch-up's chunks, and a test hook between them.
pub(crate) struct ChunkPolicy {
    entries: u64,
    bytes: u64,
    hook: Option<ChunkHook>,
}

/// Called between two committed chunks with the catch-up so far; `false` stops there
/// (a test hook, see `Projection::set_chunk_hook`).
pub(crate) type ChunkHook = Box<dyn FnMut(&CatchUp) -> bool + Send>;

impl ChunkPolicy {
    /// Chunks of `entries` entries (at least 1) and the default bytes, with a test hook.
    #[cfg(feature = "__internal")]
    pub(super) fn with_hook(entries: u64, hook: Option<ChunkHook>) -> ChunkPolicy {
        ChunkPolicy {
            entries: entries.max(1),
            bytes: CHUNK_BYTES,
            hook,
        }
    }
}

impl Default for ChunkPolicy {
    fn default() -> Self {
        ChunkPolicy {
            entries: CHUNK_ENTRIES,
            bytes: CHUNK_BYTES,
            hook: None,
        }
    }
}

impl std::fmt::Debug for ChunkPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkPolicy")
            .field("entries", &self.entries)
            .field("bytes", &self.bytes)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

pub(super) fn catch_up(
    conn: &mut Connection,
    db: &Path,
    file: &Path,
    force_rebuild: bool,
    policy: &mut ChunkPolicy,
    queue: &WriterQueue,
) -> Result<CatchUp> {
    let key = file_key(file)?;
    let meta = Meta::of_path(file).ctx("reading", file)?;
    // Fast path without a write transaction.
    if !force_rebuild && matches!(plan(conn, db, file, &key, &meta, false)?, Plan::UpToDate) {
        return Ok(CatchUp::default());
    }
    let mut turns = Turns::new(queue, BUSY_TIMEOUT);
    // Chunks committed before an error stand: each is a consistent prefix.
    crate::sqlite::immediate(
        conn,
        |step, e| db_err(db, step.doing())(e),
        |conn| {
            let commit = Commit::Chunks(policy, &mut turns);
            catch_up_locked(conn, db, file, &key, force_rebuild, commit)
        },
    )
}

/// The catch-up itself, inside a write transaction the caller opened and commits.
fn catch_up_locked(
    tx: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    force_rebuild: bool,
    commit: Commit<'_, '_>,
) -> Result<CatchUp> {
    // Re-plan under the write lock: another process may have caught up meanwhile.
    let meta = Meta::of_path(file).ctx("reading", file)?;
    let plan = if force_rebuild {
        Plan::Rebuild
    } else {
        plan(tx, db, file, key, &meta, true)?
    };
    Ok(match plan {
        Plan::UpToDate => CatchUp::default(),
        Plan::Resume(row, verified) => {
            let mut c = ingest(tx, db, file, key, Some(row), commit)?;
            c.verified_bytes += verified;
            c
        }
        Plan::Rebuild => {
            // The first chunk of a rebuild clears the old rows (same transaction).
            forget(tx, key).map_err(db_err(db, "clearing a session"))?;
            ingest(tx, db, file, key, None, commit)?
        }
    })
}

/// The watermark row of `key` when the rows are up to date with `file` as it is now
/// (identity, length and change stamp, as `plan` checks them). `Err(true)`: the same file,
/// grown or touched since (a catch-up reads on); `Err(false)`: no row, another file at
/// the path, a shorter one, or none at all.
pub(super) fn up_to_date_row(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
) -> Result<std::result::Result<SessionRow, bool>> {
    let Ok(meta) = Meta::of_path(file) else {
        return Ok(Err(false));
    };
    let Some(row) = session_row(conn, key).map_err(db_err(db, "reading the watermark"))? else {
        return Ok(Err(false));
    };
    let id = meta.identity();
    if !meta.is_file() || id.dev as i64 != row.dev || id.ino as i64 != row.ino {
        return Ok(Err(false));
    }
    let len = meta.len() as i64;
    if len == row.file_len && mtime_ns(&meta) == row.mtime_ns {
        return Ok(Ok(row));
    }
    Ok(Err(len >= row.file_len && len >= row.consumed))
}

/// Reads on from the watermark `row`, inside the caller's transaction (at most one
/// chunk), without verifying the consumed prefix: the caller has just shown it intact.
pub(super) fn ingest_resumed(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    row: SessionRow,
) -> Result<CatchUp> {
    let policy = ChunkPolicy::default();
    ingest(conn, db, file, key, Some(row), Commit::Caller(&policy))
}

fn ingest(
    tx: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    resume: Option<SessionRow>,
    mut commit: Commit<'_, '_>,
) -> Result<CatchUp> {
    let mut f = reader::open_regular(file)?;
    let (header_id, version, mut scan, start_idx, last_id) = match &resume {
        Some(row) => {
            // The watermark names the last entry; older rows may not.
            let last_id: Option<String> = match &row.last_entry_id {
                Some(id) => Some(id.clone()),
                None => tx
                    .prepare_cached("SELECT entry_id FROM nodes WHERE file = ?1 AND idx = ?2")
                    .and_then(|mut q| {
                        q.query_row(params![key, row.entry_count - 1], |r| r.get(0))
                            .optional()
                    })
                    .map_err(db_err(db, "reading the projection"))?,
            };
            let scan = ScanState {
                next: Location {
                    line: row.next_line as u64,
                    offset: row.consumed as u64,
                },
                pending_bad: Vec::new(),
                version: row.version as u32,
                ordinal: row.entry_count as u64,
            };
            (
                row.session_id.clone(),
                row.version as u32,
                scan,
                row.entry_count,
                last_id,
            )
        }
        None => {
            let (header, len) =
                crate::log::header::read_header_from(&mut f, file, reader::MAX_HEADER_LINE)?;
            let scan = ScanState::after_header(&header, len);
            (header.id().to_owned(), header.version(), scan, 0, None)
        }
    };
    let start = scan.next;
    f.seek(SeekFrom::Start(start.offset)).ctx("reading", file)?;
    let mut sink = SqlSink::new(tx, db, file, key, &header_id, start_idx, last_id);
    if let Some(row) = &resume {
        sink.set_open_events(row.open_events);
    }
    let mut last_good = start;
    // The start of the current chunk (entries added, byte offset).
    let mut chunk_start = (0u64, start.offset);
    let (max_entries, max_bytes) = match &commit {
        Commit::Chunks(p, _) => (p.entries, p.bytes),
        Commit::Caller(p) => (p.entries, p.bytes),
    };
    // Set when the build stops at a chunk boundary before the end of the file.
    let mut stopped = false;
    // A resumed catch-up verified the head of the prefix just now (`plan`, same
    // transaction): its digest carries over, and so does one computed at a chunk boundary.
    let mut known_head = resume
        .as_ref()
        .filter(|row| row.consumed as u64 >= DIGEST_SPAN)
        .map(|row| row.head_digest);
    // Its own handle, opened at the first chunk boundary: `f` is being read.
    let mut digest_file: Option<std::fs::File> = None;
    let result = reader::for_each_line(&f, file, start, |bytes, at| {
        // The digest of a state event's line, for the check on resume (item of docs/spec.md §4):
        // computed only for lines that can be one.
        sink.line_digest = memchr::memmem::find(bytes, STATE_MARK.as_bytes())
            .map(|_| (bytes.len() as i64, span_digest(bytes)));
        scan.line(file, ReadMode::Strict, bytes, at, &mut sink)?;
        if !scan.pending_bad.is_empty() {
            return Ok(());
        }
        last_good = scan.next;
        if sink.added - chunk_start.0 < max_entries && last_good.offset - chunk_start.1 < max_bytes
        {
            return Ok(());
        }
        // A chunk boundary: a consistent prefix ends here.
        let io = |action| move |source| Error::io(action, file, source);
        let df = match &mut digest_file {
            Some(df) => df,
            None => digest_file.insert(std::fs::File::open(file).map_err(io("opening"))?),
        };
        let (head, pre) = digests(df, file, last_good.offset, known_head)?;
        let ident = Meta::of_file(&f).map_err(io("reading"))?.identity();
        if last_good.offset >= DIGEST_SPAN {
            known_head = Some(head);
        }
        sink.flush()?;
        write_watermark(
            tx,
            db,
            key,
            ident,
            &Watermark {
                session_id: &header_id,
                version,
                consumed: last_good,
                // Not a full read: the next catch-up verifies the prefix and goes on.
                file_len: last_good.offset as i64,
                mtime: 0,
                head,
                pre,
                entry_count: sink.next_idx,
                last_id: sink.last_id.as_deref(),
                open_events: sink.open_events(),
            },
        )?;
        let Commit::Chunks(policy, turns) = &mut commit else {
            stopped = true;
            return Err(stop_marker());
        };
        crate::sqlite::commit(tx).map_err(db_err(db, "committing a chunk"))?;
        // The writers in line go before the next chunk.
        turns.end();
        let so_far = CatchUp {
            rebuilt: resume.is_none(),
            bytes_read: last_good.offset - start.offset,
            entries_added: sink.added,
            verified_bytes: 0,
        };
        let go_on = policy.hook.as_mut().is_none_or(|hook| hook(&so_far));
        // The caller commits (or rolls back) the transaction it finds open.
        turns.take();
        crate::sqlite::begin(tx).map_err(db_err(db, "starting a transaction"))?;
        if !go_on {
            stopped = true;
            return Err(stop_marker());
        }
        // Another process may have caught up this session between the chunks: it owns
        // the rest of the work then.
        let row = session_row(tx, key).map_err(db_err(db, "reading the watermark"))?;
        if row
            .is_none_or(|r| r.consumed as u64 != last_good.offset || r.entry_count != sink.next_idx)
        {
            stopped = true;
            return Err(stop_marker());
        }
        chunk_start = (sink.added, last_good.offset);
        Ok(())
    });
    let tail = match result {
        Ok(tail) => tail,
        Err(_) if stopped => {
            return Ok(CatchUp {
                rebuilt: resume.is_none(),
                bytes_read: last_good.offset - start.offset,
                entries_added: sink.added,
                verified_bytes: 0,
            });
        }
        Err(e) => return Err(e),
    };
    if let Some(err) = sink.deferred.take() {
        return Err(err);
    }
    // Lines still pending (unparsable, nothing valid after them yet) are re-read next time.
    let consumed = last_good;
    let file_end = scan.next.offset + tail;
    let meta = Meta::of_file(&f).ctx("reading", file)?;
    let (head, pre) = digests(&mut f, file, consumed.offset, known_head)?;
    // If the file grew while we read, record the length we saw; the next read resumes.
    let (file_len, mtime) = if meta.len() == file_end {
        (file_end as i64, mtime_ns(&meta))
    } else {
        (file_end as i64, 0)
    };
    sink.flush()?;
    write_watermark(
        tx,
        db,
        key,
        meta.identity(),
        &Watermark {
            session_id: &header_id,
            version,
            consumed,
            file_len,
            mtime,
            head,
            pre,
            entry_count: sink.next_idx,
            last_id: sink.last_id.as_deref(),
            open_events: sink.open_events(),
        },
    )?;
    Ok(CatchUp {
        rebuilt: resume.is_none(),
        bytes_read: file_end - start.offset,
        entries_added: sink.added,
        verified_bytes: 0,
    })
}

/// The error that stops the line loop at a chunk boundary (recognised by the flag set
/// with it, never shown).
fn stop_marker() -> Error {
    Error::Internal {
        what: "a catch-up's stop marker escaped its line loop".into(),
    }
}
