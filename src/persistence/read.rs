//! A stored session as the log's reader reads it: its header line, then each entry line
//! in sequence order, each ending in `\n`, exactly the bytes of its export, fetched from
//! the store in chunks as the reader asks (one `read_lines` per chunk).

use super::SessionStore;
use crate::error::{Error, InvalidLog, Location, Result, StoreError};
use crate::log::reader::ReadMode;
use crate::tree::{LogOptions, SessionLog};
use std::ops::ControlFlow;
use std::path::PathBuf;

/// How many lines one chunk holds at most (and about how many bytes).
const CHUNK_LINES: usize = 512;
const CHUNK_BYTES: usize = 4 << 20;

/// The name a stored session's lines are read under, in errors and findings:
/// `<store>#<session id>` (the store as it describes itself: never a password).
pub(crate) fn stored_label(store: &dyn SessionStore, session_id: &str) -> PathBuf {
    PathBuf::from(format!("{}#{session_id}", store.describe()))
}

/// The session's bytes as a [`std::io::Read`], from one snapshot's next sequence number:
/// entries stored after the first chunk was read are not part of it. Checks that the
/// sequence numbers are 0, 1, 2, … without a gap.
pub(crate) struct ChunkedLines<'s> {
    store: &'s dyn SessionStore,
    session_id: &'s str,
    next: u64,
    end: Option<u64>,
    buf: Vec<u8>,
    pos: usize,
    /// What stopped the reading (a store error, a gap), returned instead of the reader's.
    pub(crate) failure: Option<Error>,
}

impl<'s> ChunkedLines<'s> {
    /// Starts with `header_line` (without its newline).
    pub(crate) fn new(
        store: &'s dyn SessionStore,
        session_id: &'s str,
        header_line: &str,
    ) -> ChunkedLines<'s> {
        let mut buf = header_line.as_bytes().to_vec();
        buf.push(b'\n');
        ChunkedLines {
            store,
            session_id,
            next: 0,
            end: None,
            buf,
            pos: 0,
            failure: None,
        }
    }

    /// The lines read: the session's next sequence number as the reader saw it.
    pub(crate) fn rows(&self) -> u64 {
        self.next
    }

    fn refill(&mut self) -> std::result::Result<(), Error> {
        self.buf.clear();
        self.pos = 0;
        if self.end.is_some_and(|end| self.next >= end) {
            return Ok(());
        }
        let (mut expect, end, buf) = (self.next, self.end, &mut self.buf);
        let mut gap = None;
        let mut lines = 0;
        let next_seq = self
            .store
            .read_lines(self.session_id, self.next, &mut |seq, line| {
                if end.is_some_and(|e| seq >= e) {
                    return ControlFlow::Break(());
                }
                if seq != expect {
                    gap = Some(seq);
                    return ControlFlow::Break(());
                }
                buf.extend_from_slice(line.as_bytes());
                buf.push(b'\n');
                expect += 1;
                lines += 1;
                if lines >= CHUNK_LINES || buf.len() >= CHUNK_BYTES {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
        let end = *self.end.get_or_insert(next_seq);
        let corrupt = |detail: String| {
            Error::from(StoreError::Corrupt {
                store: self.store.describe(),
                session_id: self.session_id.to_owned(),
                detail,
            })
        };
        if let Some(found) = gap {
            return Err(corrupt(format!(
                "the stored entries skip from seq {expect} to seq {found}"
            )));
        }
        if lines == 0 && expect < end {
            return Err(corrupt(format!(
                "the session's next sequence number is {end}, but no entry is stored at \
                 seq {expect}"
            )));
        }
        self.next = expect;
        Ok(())
    }
}

impl std::io::Read for ChunkedLines<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.buf.len() {
            if self.failure.is_some() {
                return Ok(0);
            }
            if let Err(e) = self.refill() {
                self.failure = Some(e);
                return Err(std::io::Error::other("reading the stored session failed"));
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// A stored session as a detached [`SessionLog`], read by the log's own reader (strict or
/// salvage) from the store's lines, without side effects: nothing is appended (unlike
/// [`super::Sessions::load`], which closes an interrupted turn). What `tree`, `replay`,
/// `status` and `verify` read a stored session with.
///
/// In strict mode every stored row must be an entry: a database row is written whole or
/// not at all, so a row the reader skips (a torn or unparsable line) is refused as
/// corruption, naming its line (its sequence number plus 2, as in an export). A salvage
/// read reports such rows as findings instead, as for a file.
///
/// The log keeps the session's bytes in memory, as every detached log does.
pub fn read_stored_log(
    store: &dyn SessionStore,
    session_id: &str,
    mode: ReadMode,
) -> Result<SessionLog> {
    let label = stored_label(store, session_id);
    let header = store.header_line(session_id)?;
    let mut lines = ChunkedLines::new(store, session_id, &header);
    let read = LogOptions::new().mode(mode).read(label.clone(), &mut lines);
    if let Some(e) = lines.failure.take() {
        return Err(e);
    }
    let log = read?;
    if mode == ReadMode::Strict && log.len() as u64 != lines.rows() {
        let detail = log
            .findings()
            .into_iter()
            .next()
            .map_or_else(|| "a stored row is not an entry".to_owned(), |f| f.message);
        let at = log
            .findings()
            .into_iter()
            .next()
            .map_or(Location { line: 0, offset: 0 }, |f| f.at);
        return Err(InvalidLog::Corrupt {
            path: label,
            at,
            detail: format!(
                "a stored entry is not a complete entry ({detail}); a row cannot be torn"
            ),
        }
        .into());
    }
    Ok(log)
}
