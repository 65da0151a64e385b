//! The one routine that reads a whole session (docs/spec.md §2): the header (line 1, at
//! most [`MAX_HEADER_LINE`] bytes; salvage looks past lines that do not parse), then every
//! line after it, strict or salvage, each entry handed to an [`EntrySink`]. A file and any
//! other byte source (a storage backend's rows as JSONL lines) go through it.

use super::entry::Header;
use super::header::{self, ScannedLine};
use super::reader::{self, EntrySink, MAX_HEADER_LINE, ReadMode, ScanState};
use crate::error::{Location, ReadFailure};
use std::io::Read;
use std::path::Path;

/// What [`scan_all`] read besides the entries it gave the sink.
pub(crate) struct Scanned {
    pub header: Header,
    /// The reader's state after the last line (where the next line starts, pending
    /// damage, the version).
    pub scan: ScanState,
    /// Bytes after the last newline.
    pub tail: u64,
}

/// Reads a whole session from `src`: `on_header` is called once with the header, before
/// any entry reaches `sink`; lines salvage skips before the header are the sink's
/// findings. `path` names the source in errors and findings.
pub(crate) fn scan_all<S: EntrySink<E>, E: ReadFailure>(
    path: &Path,
    mode: ReadMode,
    src: impl Read,
    sink: &mut S,
    mut on_header: impl FnMut(&mut S, &Header),
) -> std::result::Result<Scanned, E> {
    let mut header: Option<(Header, ScanState)> = None;
    // The end of the last complete line: with the tail, every byte read.
    let mut end = 0;
    let start = Location { line: 1, offset: 0 };
    let limit = Some(MAX_HEADER_LINE);
    let tail = reader::for_each_line_limited(src, path, start, limit, |bytes, at| {
        end = at.offset + bytes.len() as u64 + 1;
        match &mut header {
            Some((_, scan)) => scan.line(path, mode, bytes, at, sink),
            None => match header::scan_line(path, mode, bytes, at)? {
                ScannedLine::Header(h) => {
                    on_header(sink, &h);
                    let mut scan = ScanState::after_header(&h, 0);
                    scan.next = Location {
                        line: at.line + 1,
                        offset: end,
                    };
                    header = Some((h, scan));
                    Ok(())
                }
                ScannedLine::Skipped(finding) => {
                    sink.finding(finding);
                    Ok(())
                }
            },
        }
    })?;
    let Some((header, scan)) = header else {
        return Err(header::not_found(path, end + tail, tail).into());
    };
    Ok(Scanned { header, scan, tail })
}
