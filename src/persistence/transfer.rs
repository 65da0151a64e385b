//! Import and export: a Pi JSONL file into any [`SessionStore`], line for line, read by
//! the log's own reader, and a stored session back out as a Pi JSONL file. Both stream:
//! neither holds the session's text in memory.

use super::SessionStore;
use super::lines::check_new_header;
use super::retry::Retry;
use crate::error::{Error, IoContext, LogError, Result, StoreError};
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

/// What [`import_file`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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
    }
}

/// Copies the Pi session file `file` into `store` and returns its id: the header line
/// and every entry line byte for byte (unknown fields, number texts and a CRLF line's
/// `\r` included), read by the log's strict reader, so a file imports exactly as
/// `verify` reads it. A session without entries is stored too (its header alone).
///
/// Idempotent: importing the same file again appends nothing; importing it after Pi
/// appended to it appends only the new entries. Refused, with nothing written: a file the
/// strict reader refuses (its error names line and byte offset), a format version other
/// than 3 (open it with Pi or session-state once to migrate it), a header no backend
/// stores for a new session (the session-id rule: [`LogError::InvalidSessionId`]), and a
/// file that disagrees with what the store holds for that session
/// ([`Error::ImportConflict`]: a different header line, or a different line at some
/// sequence number).
///
/// A torn final record (a line cut by a crash) is not imported. The entries go in
/// batches of at most 8 MiB, each durable and conditional on the sequence number (the
/// first creates the session); an import that fails midway leaves a prefix, and the next
/// import goes on from it. The file is read twice, sequentially: once by the strict
/// reader, once for the lines.
pub fn import_file(store: &dyn SessionStore, file: &Path) -> Result<ImportReport> {
    let log = LogOptions::new().open(file)?;
    let header = log.header().clone();
    check_new_header(&header)?;
    let header_line = String::from_utf8(read_header_line(file, MAX_HEADER_LINE)?).map_err(|e| {
        Error::Log(LogError::InvalidHeader {
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
        *next = if created {
            store.append_lines(&id, *next, batch)?
        } else {
            created = true;
            store.create(&header, &header_line, batch)?
        };
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

/// Writes the stored session `session_id` to `out` as a Pi JSONL file: its header line,
/// then every entry line in sequence order, each as stored (byte for byte) and ended by a
/// newline. Returns the number of entries written. Streams: one row at a time.
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
