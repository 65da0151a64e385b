//! Import and export (SPEC §7): a Pi JSONL file into any [`SessionStore`], line for line,
//! and a stored session back out as a Pi JSONL file. Both stream: neither holds the
//! session's text in memory.

use super::SessionStore;
use crate::error::{Error, IoContext, Result};
use crate::log::header::parse_header;
use crate::log::reader::ReadMode;
use crate::tree::LogOptions;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// An import commits at least every this many bytes of lines (one `append_lines` each).
const BATCH_BYTES: usize = 8 << 20;
/// … or every this many entries.
const BATCH_ENTRIES: usize = 4096;

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

/// Copies the Pi session file `file` into `store`, its lines byte for byte, and returns
/// its id. Idempotent: importing the same file again appends nothing; importing it after
/// Pi appended to it appends only the new entries. Refused, with nothing written: a file
/// the strict reader refuses (its error names line and byte offset), a format version
/// other than 3 (open it with Pi or session-state once to migrate it), and a file that
/// disagrees with what the store already holds for that session (a different header or
/// a different line at some sequence number, named in the error).
///
/// A torn final record (a line cut by a crash) is not imported. The entries go in
/// batches ([`SessionStore::append_lines`], each durable and conditional on the sequence
/// number); an import that fails midway leaves a prefix, and the next import goes on from
/// it. The file is read twice, sequentially: once by the strict reader, once for the
/// lines.
pub fn import_file(store: &dyn SessionStore, file: &Path) -> Result<ImportReport> {
    let log = LogOptions::new().open(file)?;
    let header = log.header().clone();
    if header.version() != 3 {
        return Err(Error::UnsupportedNewVersion {
            session_id: header.id().to_owned(),
            version: header.version(),
        });
    }
    let id = header.id().to_owned();
    let already = match store.read_lines(&id, u64::MAX, &mut |_, _| Ok(())) {
        Ok(next) => Some(next),
        Err(Error::SessionNotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    let mut src =
        BufReader::with_capacity(1 << 20, std::fs::File::open(file).ctx("opening", file)?);
    let mut pos = 0u64;
    let mut line_at =
        |src: &mut BufReader<std::fs::File>, offset: u64, len: u64| -> Result<String> {
            if pos != offset {
                src.seek(SeekFrom::Start(offset)).ctx("reading", file)?;
            }
            let mut buf = vec![0; len as usize];
            src.read_exact(&mut buf).ctx("reading", file)?;
            pos = offset + len;
            // The strict reader read these bytes as JSON: they are UTF-8.
            if buf.last() == Some(&b'\n') {
                buf.pop();
            }
            String::from_utf8(buf).map_err(|e| Error::Io {
                action: "reading",
                path: file.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
        };
    let total = log.len() as u64;
    let mut next = match already {
        None => {
            store.create(header.clone())?;
            0
        }
        Some(stored) => {
            let line = store.header_line(&id)?;
            let theirs = parse_header(&label(store, &id), line.as_bytes(), ReadMode::Strict)?;
            if theirs != header {
                return Err(conflict(
                    file,
                    &id,
                    "its header differs from the stored one",
                ));
            }
            // The stored entries must be the file's, line for line.
            let mut entries = log.entries();
            let mut mismatch: Option<u64> = None;
            store.read_lines(&id, 0, &mut |seq, stored_line| {
                let Some(e) = entries.next() else {
                    return Ok(());
                };
                let mine = line_at(&mut src, e.location().offset, e.line_len())?;
                if mine != stored_line && mismatch.is_none() {
                    mismatch = Some(seq);
                }
                Ok(())
            })?;
            if let Some(seq) = mismatch {
                return Err(conflict(
                    file,
                    &id,
                    &format!("its entry with sequence number {seq} differs from the stored one"),
                ));
            }
            stored
        }
    };
    let already_stored = next;
    let mut batch: Vec<String> = Vec::new();
    let mut bytes = 0usize;
    for e in log.entries().skip(next.min(total) as usize) {
        let line = line_at(&mut src, e.location().offset, e.line_len())?;
        bytes += line.len();
        batch.push(line);
        if bytes >= BATCH_BYTES || batch.len() >= BATCH_ENTRIES {
            next = store.append_lines(&id, next, &batch)?;
            batch.clear();
            bytes = 0;
        }
    }
    if !batch.is_empty() || (already.is_none() && next == 0) {
        next = store.append_lines(&id, next, &batch)?;
    }
    Ok(ImportReport {
        session_id: id,
        already_stored,
        appended: next.saturating_sub(already_stored),
    })
}

fn label(store: &dyn SessionStore, id: &str) -> PathBuf {
    PathBuf::from(format!("{}#{id}", store.describe()))
}

fn conflict(file: &Path, id: &str, what: &str) -> Error {
    Error::ChangedOnDisk {
        path: file.to_path_buf(),
        detail: format!(
            "session {id} is already in the store with other entries: {what}; nothing was \
             imported"
        ),
    }
}

/// Writes the stored session `session_id` to `out` as a Pi JSONL file: its header line,
/// then every entry line in sequence order, each as stored (byte for byte) and ended by a
/// newline. Returns the number of entries written. Streams: one row at a time.
pub fn export_session(
    store: &dyn SessionStore,
    session_id: &str,
    out: &mut dyn Write,
) -> Result<u64> {
    let io = |e: std::io::Error| Error::Io {
        action: "writing the export",
        path: PathBuf::from("<output>"),
        source: e,
    };
    let header = store.header_line(session_id)?;
    out.write_all(header.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    let mut n = 0u64;
    store.read_lines(session_id, 0, &mut |_, line| {
        out.write_all(line.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
        n += 1;
        Ok(())
    })?;
    out.flush().map_err(io)?;
    Ok(n)
}
