//! Import and export: a Pi JSONL file into any [`SessionStore`], line for line, read by
//! the log's own reader, and a stored session back out as a Pi JSONL file. Both stream:
//! neither holds the session's text in memory.

use super::SessionStore;
use super::lines::check_new_header;
use super::lines::line_id;
use super::retry::{Mark, Retry, append_until_known};
use crate::error::{Error, InvalidLog, IoContext, Result, StoreError};
use crate::log::entry::Header;
use crate::log::header::read_header_line;
use crate::log::reader::MAX_HEADER_LINE;
use crate::tree::LogOptions;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// An import stores at least every this many bytes of lines (one store call each) …
const BATCH_BYTES: usize = 8 << 20;
/// … or every this many entries.
const BATCH_ENTRIES: usize = 8192;

/// What [`Sessions::import_file`](super::Sessions::import_file) did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    /// The session's id (its header's).
    pub session_id: String,
    /// Entries the store held before (0 for a new session).
    pub already_stored: u64,
    /// Entries appended by this import (0 when the store already held the whole file).
    pub appended: u64,
}

/// The file's lines, by offset and length, read sequentially through one buffer.
struct FileLines {
    src: BufReader<std::fs::File>,
    pos: u64,
    path: PathBuf,
}

impl FileLines {
    /// The line at `offset` of `len` bytes, newline included, without the newline: every
    /// other byte is kept (a CRLF line keeps its `\r`, as a JSON reader reads it).
    fn line(&mut self, offset: u64, len: u64) -> Result<String> {
        if self.pos != offset {
            self.src
                .seek(SeekFrom::Start(offset))
                .ctx("reading", &self.path)?;
        }
        let mut buf = vec![0; len as usize];
        self.src.read_exact(&mut buf).ctx("reading", &self.path)?;
        self.pos = offset + len;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        // The strict reader read these bytes as JSON: they are UTF-8.
        String::from_utf8(buf)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            .ctx("reading", &self.path)
            .map_err(Error::from)
    }
}

/// [`Sessions::import_file`](super::Sessions::import_file) on a bare backend.
pub fn import_file(store: &dyn SessionStore, file: &Path) -> Result<ImportReport> {
    let log = LogOptions::new().open(file)?;
    let header = log.header().clone();
    check_new_header(&header)?;
    let header_line = String::from_utf8(read_header_line(file, MAX_HEADER_LINE)?).map_err(|e| {
        Error::from(InvalidLog::InvalidHeader {
            path: file.to_path_buf(),
            detail: format!("line 1 is not UTF-8: {e}"),
        })
    })?;
    let id = header.id().to_owned();
    let conflict = |detail: String| Error::ImportConflict {
        file: file.to_path_buf(),
        store: store.describe(),
        session_id: id.clone(),
        detail,
    };
    let mut src = FileLines {
        src: BufReader::with_capacity(1 << 20, std::fs::File::open(file).ctx("opening", file)?),
        pos: 0,
        path: file.to_path_buf(),
    };
    let total = log.len() as u64;
    // The import's first query: a store that is unavailable is waited out.
    let already = match Retry::new(store).transient(|| store.header_line(&id)) {
        Ok(stored) => {
            if stored != header_line {
                return Err(conflict(
                    "its header line differs from the stored one".into(),
                ));
            }
            // The stored entries must be the file's, line for line.
            let mut entries = log.entries();
            let mut mismatch: Option<u64> = None;
            let mut failed: Option<Error> = None;
            let stored = store.read_lines(&id, 0, &mut |seq, stored_line| {
                let Some(e) = entries.next() else {
                    return ControlFlow::Break(());
                };
                match src.line(e.location().offset, e.line_len()) {
                    Ok(mine) if mine == stored_line => ControlFlow::Continue(()),
                    Ok(_) => {
                        mismatch = Some(seq);
                        ControlFlow::Break(())
                    }
                    Err(err) => {
                        failed = Some(err);
                        ControlFlow::Break(())
                    }
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            if let Some(seq) = mismatch {
                return Err(conflict(format!(
                    "its entry with sequence number {seq} (line {}) differs from the stored one",
                    seq + 2
                )));
            }
            Some(stored)
        }
        Err(Error::Store(StoreError::NotFound { .. })) => None,
        Err(e) => return Err(e),
    };
    let already_stored = already.unwrap_or(0);
    let mut next = already_stored;
    let mut batch: Vec<String> = Vec::new();
    let mut bytes = 0usize;
    let mut created = already.is_some();
    let mut flush = |batch: &mut Vec<String>, next: &mut u64| -> Result<()> {
        let to = Batch {
            header: &header,
            header_line: &header_line,
            first: *next,
            lines: batch,
            create: !created,
        };
        *next = store_batch(store, &to).map_err(|failed| {
            let (source, in_doubt) = *failed;
            let stored = match in_doubt {
                0 => next.to_string(),
                n => format!(
                    "{} (or {}: whether the last {n} went in is unknown)",
                    *next,
                    *next + n
                ),
            };
            Error::ImportIncomplete {
                file: file.to_path_buf(),
                store: store.describe(),
                session_id: id.clone(),
                stored: format!("{stored} of the file's {total} entries"),
                source: Box::new(source),
            }
        })?;
        created = true;
        batch.clear();
        Ok(())
    };
    for e in log.entries().skip(already_stored.min(total) as usize) {
        let line = src.line(e.location().offset, e.line_len())?;
        bytes += line.len();
        batch.push(line);
        if bytes >= BATCH_BYTES || batch.len() >= BATCH_ENTRIES {
            flush(&mut batch, &mut next)?;
            bytes = 0;
        }
    }
    if !batch.is_empty() || already.is_none() {
        flush(&mut batch, &mut next)?;
    }
    Ok(ImportReport {
        session_id: id.clone(),
        already_stored,
        appended: next.saturating_sub(already_stored),
    })
}

/// One batch of an import: its lines, for the session from `first` on.
struct Batch<'a> {
    header: &'a Header,
    header_line: &'a str,
    first: u64,
    lines: &'a [String],
    /// The batch creates the session.
    create: bool,
}

/// A batch's failure, and how many of its lines may or may not be stored.
type Unstored = Box<(Error, u64)>;

/// Stores one batch and returns the next sequence number, as a write stores its line: a
/// store that is unavailable is waited out for its retry window, and an append of
/// unknown outcome is settled by reading the store back (the batch's first entry at
/// `first` means it committed; nothing there means it did not, and it is sent again;
/// another line there is refused by the next attempt). The error comes with how many of
/// the batch's lines may or may not be stored (0, or all of them when the outcome could
/// not be read back).
fn store_batch(store: &dyn SessionStore, b: &Batch<'_>) -> std::result::Result<u64, Unstored> {
    let id = b.header.id();
    let mut retry = Retry::new(store);
    // A session without entries: its header row is the whole batch.
    let first_id = b.lines.first().and_then(|l| line_id(l));
    let mark = match &first_id {
        Some(first_id) => Mark::Entry(first_id),
        None => Mark::Header(b.header_line),
    };
    let landed = b.first + b.lines.len() as u64;
    append_until_known(store, &mut retry, id, b.first, mark, landed, || {
        if b.create {
            store.create(b.header, b.header_line, b.lines)
        } else {
            store.append_lines(id, b.first, b.lines)
        }
    })
    .map_err(|u| {
        let u = *u;
        let stored = if u.unknown {
            b.lines.len().max(1) as u64
        } else {
            0
        };
        Box::new((u.error, stored))
    })
}

/// [`Sessions::export`](super::Sessions::export) on a bare backend.
pub fn export_session(
    store: &dyn SessionStore,
    session_id: &str,
    out: &mut dyn Write,
) -> Result<u64> {
    let output = Path::new("<output>");
    let io = |e| Error::io("writing the export", output, e);
    // The export's first query: a store that is unavailable is waited out (the lines
    // after it are not retried: a visitor may have written some of them).
    let header = Retry::new(store).transient(|| store.header_line(session_id))?;
    out.write_all(header.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    let mut n = 0u64;
    let mut failed = None;
    store.read_lines(session_id, 0, &mut |_, line| match out
        .write_all(line.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
    {
        Ok(()) => {
            n += 1;
            ControlFlow::Continue(())
        }
        Err(e) => {
            failed = Some(e);
            ControlFlow::Break(())
        }
    })?;
    if let Some(e) = failed {
        return Err(io(e));
    }
    out.flush().map_err(io)?;
    Ok(n)
}
