//! The watermark (docs/spec.md §4): what a session's rows were folded from (file identity, bytes
//! consumed, the length and change stamp seen, digests of the consumed prefix), and
//! whether that prefix is still intact, which decides what a catch-up must do.

use super::db_err;
use crate::error::{Error, Location, Result};
use crate::log::io::FileIdentity;
use rusqlite::{Connection, OptionalExtension, params};
#[cfg(not(unix))]
use std::io::{Read, Seek};
use std::path::Path;

pub(super) const DIGEST_SPAN: u64 = 4096;

/// Folded events at most this far apart are checked with one read.
const GAP: u64 = 4096;

/// A digest of a span of the file, to tell that a prefix is unchanged (not a defence
/// against an adversary: the file's identity, length and mtime are checked too). Eight
/// bytes per multiply: the spans are read on every catch-up, including after each write.
pub(super) fn fnv(bytes: &[u8]) -> i64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (bytes.len() as u64).wrapping_mul(K);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(K).rotate_left(29);
    }
    (h ^ (h >> 32)) as i64
}

/// A stamp of the file's last change: mtime and ctime. A same-length rewrite moves at
/// least the ctime, which no user-level tool can set back (`cp -p`, `touch -r` and
/// `rsync -t` restore only the mtime).
pub(super) fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64);
    #[cfg(unix)]
    let ctime = {
        use std::os::unix::fs::MetadataExt;
        meta.ctime()
            .wrapping_mul(1_000_000_000)
            .wrapping_add(meta.ctime_nsec())
    };
    #[cfg(not(unix))]
    let ctime = 0i64;
    mtime ^ ctime.rotate_left(29)
}

pub(super) fn read_span(
    f: &mut std::fs::File,
    path: &Path,
    start: u64,
    len: u64,
) -> Result<Vec<u8>> {
    let io = |source| Error::Io {
        action: "reading",
        path: path.to_path_buf(),
        source,
    };
    let mut buf = vec![0; len as usize];
    let mut got = 0;
    // Positioned reads: no seek before each span.
    #[cfg(unix)]
    while got < buf.len() {
        use std::os::unix::fs::FileExt;
        match f.read_at(&mut buf[got..], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    #[cfg(not(unix))]
    {
        f.seek(std::io::SeekFrom::Start(start)).map_err(io)?;
        got = f.by_ref().take(len).read(&mut buf).map_err(io)?;
    }
    buf.truncate(got);
    Ok(buf)
}

/// The digests of the first and the last [`DIGEST_SPAN`] bytes of the consumed prefix.
/// `known_head` is the head digest when its span is known to be unchanged (a resumed
/// catch-up whose prefix was just verified, both before and after past the span).
pub(super) fn digests(
    f: &mut std::fs::File,
    path: &Path,
    consumed: u64,
    known_head: Option<i64>,
) -> Result<(i64, i64)> {
    let head = match known_head {
        Some(h) if consumed >= DIGEST_SPAN => h,
        _ => fnv(&read_span(f, path, 0, consumed.min(DIGEST_SPAN))?),
    };
    let pre_start = consumed.saturating_sub(DIGEST_SPAN);
    let pre = read_span(f, path, pre_start, consumed - pre_start)?;
    Ok((head, fnv(&pre)))
}

#[derive(Debug, Clone)]
pub(super) struct SessionRow {
    pub(super) session_id: String,
    pub(super) version: i64,
    pub(super) dev: i64,
    pub(super) ino: i64,
    pub(super) consumed: i64,
    pub(super) next_line: i64,
    pub(super) file_len: i64,
    pub(super) mtime_ns: i64,
    pub(super) head_digest: i64,
    pub(super) pre_digest: i64,
    pub(super) entry_count: i64,
    pub(super) last_entry_id: Option<String>,
}

pub(super) fn session_row(conn: &Connection, file: &str) -> rusqlite::Result<Option<SessionRow>> {
    conn.prepare_cached(
        "SELECT session_id, version, dev, ino, consumed, next_line, file_len, mtime_ns, \
         head_digest, pre_digest, entry_count, last_entry_id FROM sessions WHERE file = ?1",
    )?
    .query_row([file], |r| {
        Ok(SessionRow {
            session_id: r.get(0)?,
            version: r.get(1)?,
            dev: r.get(2)?,
            ino: r.get(3)?,
            consumed: r.get(4)?,
            next_line: r.get(5)?,
            file_len: r.get(6)?,
            mtime_ns: r.get(7)?,
            head_digest: r.get(8)?,
            pre_digest: r.get(9)?,
            entry_count: r.get(10)?,
            last_entry_id: r.get(11)?,
        })
    })
    .optional()
}

pub(super) enum Plan {
    UpToDate,
    /// The consumed prefix is intact: read on from the watermark. The number is the bytes
    /// read to verify it (the prefix digests' spans and every folded state event).
    Resume(SessionRow, u64),
    Rebuild,
}

/// What a catch-up must do. Without `verify`, a changed file is assumed to be `Resume`
/// without reading its prefix: enough to decide that there is work to do.
pub(super) fn plan(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    meta: &std::fs::Metadata,
    verify: bool,
) -> Result<Plan> {
    let Some(row) = session_row(conn, key).map_err(db_err(db, "reading the watermark"))? else {
        return Ok(Plan::Rebuild);
    };
    let id = FileIdentity::of(meta);
    if id.dev as i64 != row.dev || id.ino as i64 != row.ino {
        return Ok(Plan::Rebuild);
    }
    let len = meta.len() as i64;
    if len < row.file_len || len < row.consumed {
        return Ok(Plan::Rebuild);
    }
    if len == row.file_len && mtime_ns(meta) == row.mtime_ns {
        return Ok(Plan::UpToDate);
    }
    if !verify {
        return Ok(Plan::Resume(row, 0));
    }
    // It grew, or was touched or rewritten in place: the consumed prefix must be intact.
    // Then a same-length file only gets a new stamp (a resume that reads nothing new).
    Ok(match prefix_intact(conn, db, file, key, &row)? {
        Some(verified) => Plan::Resume(row, verified),
        None => Plan::Rebuild,
    })
}

/// Whether the consumed prefix is what the projection folded: the digests of its first
/// and last [`DIGEST_SPAN`] bytes, and the bytes of every state event folded (their
/// offsets, lengths and digests are in `events`). `Some(bytes read)` if intact. Entries
/// that are not state events are checked only inside the two spans (docs/architecture.md,
/// "Limits").
fn prefix_intact(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    row: &SessionRow,
) -> Result<Option<u64>> {
    let mut f = std::fs::File::open(file).map_err(|source| Error::Io {
        action: "opening",
        path: file.to_path_buf(),
        source,
    })?;
    let consumed = row.consumed as u64;
    let (head, pre) = digests(&mut f, file, consumed, None)?;
    let mut verified =
        consumed.min(DIGEST_SPAN) + (consumed - consumed.saturating_sub(DIGEST_SPAN));
    if head != row.head_digest || pre != row.pre_digest {
        return Ok(None);
    }
    let q = db_err(db, "reading the projection");
    let mut stmt = conn
        .prepare_cached("SELECT offset, len, digest FROM events WHERE file = ?1 ORDER BY idx")
        .map_err(db_err(db, "reading the projection"))?;
    let spans = stmt
        .query_map([key], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(q)?;
    // In file order, one positioned read per run of events less than a page apart: a
    // read-ahead buffer would copy 64 KiB per event of a large session instead of its line.
    let mut buf = Vec::new();
    let mut i = 0;
    while i < spans.len() {
        let start = spans[i].0 as u64;
        let mut end = start;
        let mut j = i;
        while j < spans.len() {
            let (offset, len) = (spans[j].0 as u64, spans[j].1 as u64);
            if offset.saturating_add(len) > consumed || offset < start {
                return Ok(None);
            }
            if j > i && offset > end + GAP {
                break;
            }
            end = end.max(offset + len);
            j += 1;
        }
        buf.clear();
        buf.extend_from_slice(&read_span(&mut f, file, start, end - start)?);
        if (buf.len() as u64) < end - start {
            return Ok(None);
        }
        for &(offset, len, digest) in &spans[i..j] {
            let at = (offset as u64 - start) as usize;
            verified += len as u64;
            if fnv(&buf[at..at + len as usize]) != digest {
                return Ok(None);
            }
        }
        i = j;
    }
    Ok(Some(verified))
}

/// The watermark of a consistent prefix: everything before `consumed` is in the rows.
pub(super) struct Watermark<'a> {
    pub(super) session_id: &'a str,
    pub(super) version: u32,
    pub(super) consumed: Location,
    pub(super) file_len: i64,
    pub(super) mtime: i64,
    pub(super) head: i64,
    pub(super) pre: i64,
    pub(super) entry_count: i64,
    pub(super) last_id: Option<&'a str>,
}

pub(super) fn write_watermark(
    tx: &Connection,
    db: &Path,
    key: &str,
    ident: FileIdentity,
    w: &Watermark<'_>,
) -> Result<()> {
    let values = params![
        key,
        w.session_id,
        w.version,
        ident.dev as i64,
        ident.ino as i64,
        w.consumed.offset as i64,
        w.consumed.line as i64,
        w.file_len,
        w.mtime,
        w.head,
        w.pre,
        w.entry_count,
        w.last_id
    ];
    // In place when the row exists (a resume): a `REPLACE` would delete it and insert it
    // again under a new rowid, writing its index too.
    let updated = tx
        .prepare_cached(
            "UPDATE sessions SET session_id = ?2, version = ?3, dev = ?4, ino = ?5, \
             consumed = ?6, next_line = ?7, file_len = ?8, mtime_ns = ?9, head_digest = ?10, \
             pre_digest = ?11, entry_count = ?12, last_entry_id = ?13 WHERE file = ?1",
        )
        .and_then(|mut q| q.execute(values))
        .map_err(db_err(db, "writing the watermark"))?;
    if updated == 0 {
        tx.prepare_cached(
            "INSERT INTO sessions(file, session_id, version, dev, ino, consumed, next_line, \
             file_len, mtime_ns, head_digest, pre_digest, entry_count, last_entry_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )
        .and_then(|mut q| q.execute(values))
        .map_err(db_err(db, "writing the watermark"))?;
    }
    Ok(())
}
