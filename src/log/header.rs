//! Line 1 of a session file, the header (docs/spec.md §2): the one place that finds, bounds and
//! parses it.
//!
//! Two ways in, one set of rules:
//! - [`read_header`] (and `read_header_from` on an open file) reads only line 1, at most
//!   `limit` bytes of it: a session list, a store's scan, a projection catch-up.
//! - `scan_line` and `not_found` are the same rules for the log reader, which streams
//!   the whole file and, in salvage mode, looks past lines that do not parse (as Pi does).
//!
//! Every failure is a typed error naming the file: [`InvalidLog::MissingHeader`] (no line 1, or
//! not a session), [`InvalidLog::InvalidHeader`] (a session line that is malformed or too long),
//! [`InvalidLog::UnsupportedVersion`], and from [`read_header`] also
//! [`OpenError::NotARegularFile`] and [`OpenError::Io`].

use super::entry::{Header, RawHeader, raw_str};
use super::reader::{self, Finding, FindingKind, ReadMode, Severity};
use crate::error::{InvalidLog, InvalidSessionId, IoContext, Location, OpenError};
use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

/// What this module's functions return, unless they say otherwise.
type Result<T, E = OpenError> = std::result::Result<T, E>;

/// Reads and strictly parses line 1 of the session file at `path`, reading at most
/// `limit` bytes of it ([`reader::MAX_HEADER_LINE`] is Pi 1.x's own limit). Anything but
/// a regular file is refused before it is opened, so a FIFO cannot block the call and a
/// link to `/dev/zero` cannot make it read without end.
///
/// ```no_run
/// use session_state::format::{MAX_HEADER_LINE, read_header};
/// use std::path::Path;
/// let header = read_header(Path::new("session.jsonl"), MAX_HEADER_LINE)?;
/// println!("session {} in {:?}", header.id(), header.cwd());
/// # Ok::<(), session_state::Error>(())
/// ```
pub fn read_header(path: &Path, limit: usize) -> Result<Header> {
    let mut file = reader::open_regular(path)?;
    read_header_from(&mut file, path, limit).map(|(header, _)| header)
}

/// Line 1 of the session file at `path`, without its newline, byte for byte (at most
/// `limit` bytes), after the same checks as [`read_header`]: how the file backend of the
/// persistence seam gives a session's header line, which the crate then parses.
pub(crate) fn read_header_line(path: &Path, limit: usize) -> Result<Vec<u8>> {
    let mut file = reader::open_regular(path)?;
    first_line(&mut file, path, limit)
}

/// The longest session id a new session may have, in bytes: the one session-id rule of
/// every backend (`docs/persistence.md`, "Session ids"). Pi names a session's file
/// `<timestamp>_<id>.jsonl` (31 bytes besides the id with Pi's timestamps) and it is
/// created under a temporary name 43 bytes longer; a file name holds 255 bytes, so 181
/// would fit exactly. 128 leaves room for longer timestamps; Pi's own ids are 36-byte
/// UUIDs.
pub const MAX_SESSION_ID_BYTES: usize = 128;

/// The one session-id rule, for every backend and for a new [`crate::SessionLog`]: an id
/// that can be part of Pi's file name for the session on every system. 1 to
/// [`MAX_SESSION_ID_BYTES`] bytes, no `/`, `\`, newline or NUL, not `.` or `..`. Checked
/// when a session is created or imported; sessions already stored are read whatever
/// their id.
pub(crate) fn check_session_id(id: &str) -> Result<(), InvalidSessionId> {
    if id.is_empty()
        || id.len() > MAX_SESSION_ID_BYTES
        || id.contains(['/', '\\', '\n', '\0'])
        || id == "."
        || id == ".."
    {
        return Err(InvalidSessionId {
            session_id: id.to_owned(),
            max: MAX_SESSION_ID_BYTES,
        });
    }
    Ok(())
}

/// [`read_header`] on a file the caller opened (with [`reader::open_regular`]), read from
/// its current position. Returns the header and the length of line 1 with its newline,
/// where the entries start; the source may have been read past it.
pub(crate) fn read_header_from(
    src: &mut impl Read,
    path: &Path,
    limit: usize,
) -> Result<(Header, u64)> {
    let line = first_line(src, path, limit)?;
    let header = parse_header(path, &line, ReadMode::Strict)?;
    Ok((header, line.len() as u64 + 1))
}

/// Line 1 without its newline, reading at most `limit + 1` bytes.
fn first_line(src: &mut impl Read, path: &Path, limit: usize) -> Result<Vec<u8>> {
    let mut src = src.take(limit as u64 + 1);
    let mut line = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = match src.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).ctx("reading", path).map_err(Into::into),
        };
        if n == 0 {
            let len = line.len() as u64;
            return Err(not_found(path, len, len).into());
        }
        if let Some(pos) = memchr::memchr(b'\n', &buf[..n]) {
            line.extend_from_slice(&buf[..pos]);
            return Ok(line);
        }
        line.extend_from_slice(&buf[..n]);
        if line.len() > limit {
            return Err(reader::too_long(path, limit).into());
        }
    }
}

/// What the log reader makes of a line while it has not found the header yet.
pub(crate) enum ScannedLine {
    /// The header.
    Header(Header),
    /// A line salvage skips, as Pi does: it does not parse as JSON, or is blank.
    Skipped(Finding),
}

/// One line of a whole-file scan before the header. Strict mode takes line 1 or refuses
/// the file; salvage mode skips lines that do not parse (reported as a [`Finding`]) and
/// refuses a line that parses but is not a header, and any unsupported version.
pub(crate) fn scan_line(
    path: &Path,
    mode: ReadMode,
    bytes: &[u8],
    at: Location,
) -> Result<ScannedLine, InvalidLog> {
    match parse_header(path, bytes, mode) {
        Ok(header) => Ok(ScannedLine::Header(header)),
        Err(e) if mode == ReadMode::Strict => Err(e),
        Err(e @ InvalidLog::UnsupportedVersion { .. }) => Err(e),
        Err(e) => {
            let blank = bytes.iter().all(u8::is_ascii_whitespace);
            let parses = serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok();
            if parses && !blank {
                return Err(e);
            }
            Ok(ScannedLine::Skipped(Finding {
                severity: Severity::Error,
                kind: FindingKind::InvalidHeader,
                at,
                entry_id: None,
                message: format!("skipped before the header: {e}"),
            }))
        }
    }
}

/// The error for a file whose scan found no header: `len` bytes in all, `tail` of them
/// after the last newline.
pub(crate) fn not_found(path: &Path, len: u64, tail: u64) -> InvalidLog {
    let detail = if len == 0 {
        "the file is empty".to_string()
    } else if tail == len {
        format!("no complete line: {len} bytes without a terminating newline")
    } else {
        "no session header found".to_string()
    };
    InvalidLog::MissingHeader {
        path: path.to_path_buf(),
        detail,
    }
}

/// Parses line 1. `bytes` excludes the newline.
pub(crate) fn parse_header(
    path: &Path,
    bytes: &[u8],
    mode: ReadMode,
) -> Result<Header, InvalidLog> {
    let invalid = |detail: String| InvalidLog::InvalidHeader {
        path: path.to_path_buf(),
        detail,
    };
    let mut bytes = bytes;
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        if mode == ReadMode::Strict {
            return Err(invalid(
                "the file starts with a UTF-8 byte order mark (EF BB BF), which Pi cannot read \
                 either; remove it (`session-state verify --salvage` shows what a salvage \
                 read keeps)"
                    .into(),
            ));
        }
        bytes = rest;
    }
    let text =
        std::str::from_utf8(bytes).map_err(|e| invalid(format!("line 1 is not UTF-8: {e}")))?;
    let raw: RawHeader<'_> = serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => invalid(format!("not a session header: {e}")),
        _ => invalid(format!("line 1 is not a JSON object: {e}")),
    })?;
    if raw_str(raw.ty).as_deref() != Some("session") {
        let ty = raw_str(raw.ty).unwrap_or(Cow::Borrowed(raw.ty.get()));
        return Err(InvalidLog::MissingHeader {
            path: path.to_path_buf(),
            detail: format!("line 1 has type {ty:?}, not \"session\""),
        });
    }
    let id = raw
        .id
        .and_then(raw_str)
        .ok_or_else(|| invalid("`id` is missing or not a string".into()))?;
    let version = match raw.version {
        None => 1,
        Some(v) => match serde_json::from_str::<u64>(v.get()) {
            Ok(n @ 1..=3) => n as u32,
            Ok(n) if n > 3 => {
                return Err(InvalidLog::UnsupportedVersion {
                    path: path.to_path_buf(),
                    version: n.to_string(),
                });
            }
            _ => match serde_json::from_str::<f64>(v.get()) {
                Ok(f) if f > 3.0 => {
                    return Err(InvalidLog::UnsupportedVersion {
                        path: path.to_path_buf(),
                        version: v.get().to_string(),
                    });
                }
                _ => return Err(invalid(format!("`version` {} is not 1, 2 or 3", v.get()))),
            },
        },
    };
    let s = |v: Option<serde_json::Value>| match v {
        Some(serde_json::Value::String(s)) => Some(s),
        _ => None,
    };
    Ok(Header::from_parts(
        id.into_owned(),
        version,
        s(raw.cwd),
        s(raw.timestamp),
        s(raw.parent_session),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8], limit: usize) -> Result<(Header, u64)> {
        read_header_from(&mut &bytes[..], Path::new("s.jsonl"), limit)
    }

    #[test]
    fn line_1_is_read_up_to_the_limit_and_no_further() {
        let line = br#"{"type":"session","version":3,"id":"h"}"#;
        let mut file = line.to_vec();
        file.extend_from_slice(b"\nnot read\n");
        let (h, len) = read(&file, line.len()).expect("exactly the limit");
        assert_eq!((h.id(), len), ("h", line.len() as u64 + 1));
        match read(&file, line.len() - 1) {
            Err(OpenError::Invalid(InvalidLog::InvalidHeader { detail, .. })) => {
                assert!(detail.starts_with("line 1 is longer than"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        match read(&line[..], 1 << 20) {
            Err(OpenError::Invalid(InvalidLog::MissingHeader { detail, .. })) => assert_eq!(
                detail,
                format!(
                    "no complete line: {} bytes without a terminating newline",
                    line.len()
                )
            ),
            other => panic!("{other:?}"),
        }
        match read(b"", 1 << 20) {
            Err(OpenError::Invalid(InvalidLog::MissingHeader { detail, .. })) => {
                assert_eq!(detail, "the file is empty")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_session_id_rule_takes_what_a_file_name_can_hold() {
        let longest = "a".repeat(MAX_SESSION_ID_BYTES);
        for ok in [
            "0195f1d0-7c4e-7000-8000-000000000001",
            "x",
            longest.as_str(),
            "a b:c",
        ] {
            assert!(check_session_id(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(MAX_SESSION_ID_BYTES + 1);
        for bad in ["", ".", "..", "a/b", "a\\b", "a\nb", "a\0b", long.as_str()] {
            match check_session_id(bad) {
                Err(InvalidSessionId { session_id, .. }) => {
                    assert_eq!(session_id, bad)
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        // Pi's name and the durable create's temporary name fit in a file name.
        let name = format!("2026-01-05T10-00-00-000Z_{longest}.jsonl");
        assert!(name.len() + 43 <= 255, "{}", name.len());
    }

    #[test]
    fn the_size_limit_is_named_in_bytes_and_in_words() {
        for (limit, words) in [(1 << 20, "1 MiB"), (64 << 10, "64 KiB"), (100, "100 bytes")] {
            let msg = reader::too_long(Path::new("s.jsonl"), limit).to_string();
            assert!(
                msg.contains(&format!("longer than {words} ({limit} bytes")),
                "{msg}"
            );
        }
    }
}
