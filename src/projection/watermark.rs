//! The watermark (docs/spec.md §4): what a session's rows were folded from (file identity, bytes
//! consumed, the length and change stamp seen, digests of the consumed prefix), and
//! whether that prefix is still intact, which decides what a catch-up must do.

use super::db_err;
use crate::error::{Error, IoContext, Location, Result};
use crate::log::hash::FNV_OFFSET;
use crate::log::io::{FileIdentity, Meta};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

pub(super) const DIGEST_SPAN: u64 = 4096;

/// Folded events at most this far apart are checked with one read: a positioned read
/// costs about as much as copying 4-8 KiB from the page cache (1.5-2 µs on the machine of
/// `docs/performance.md`), so a smaller gap is cheaper read through than skipped.
const GAP: u64 = 4096;

/// The largest read of the check: a run of dense events is read in pieces of this size
/// into one reused buffer, so memory does not grow with the session.
const MAX_READ: u64 = 256 << 10;

/// A digest of a span of the file, to tell that a prefix is unchanged (not a defence
/// against an adversary: the file's identity, length and mtime are checked too). Eight
/// bytes per multiply: the spans are read on every catch-up, including after each write.
/// Not FNV-1a itself: it starts from FNV-1a's offset basis and mixes a word at a time
/// with [`mix`]. Stored in `watermarks` and `spans`: the tests pin its values.
pub(super) fn span_digest(bytes: &[u8]) -> i64 {
    let mut h = FNV_OFFSET ^ (bytes.len() as u64).wrapping_mul(MIX);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = mix(h, u64::from_le_bytes(b));
    }
    for &b in words.remainder() {
        h = mix(h, u64::from(b));
    }
    (h ^ (h >> 32)) as i64
}

/// The multiplier of [`mix`] (2^64 over the golden ratio).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// One step of the span digests: of a word into a span's digest ([`span_digest`]), and of a
/// line's digest into a group's ([`SpanGroup::combine`]).
fn mix(h: u64, x: u64) -> u64 {
    (h ^ x).wrapping_mul(MIX).rotate_left(29)
}

/// The stamp of the file's last change the watermark keeps: the log's own
/// ([`crate::log::known::change_stamp`]), so a reader and an open log agree on a change.
pub(super) fn mtime_ns(meta: &Meta) -> i64 {
    crate::log::known::change_stamp(meta)
}

pub(super) fn read_span(
    f: &mut std::fs::File,
    path: &Path,
    start: u64,
    len: u64,
) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    read_into(f, path, start, len, &mut buf)?;
    Ok(buf)
}

/// One positioned read (`pread` on Unix, `ReadFile` at an offset on Windows).
fn read_at(f: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::read_at(f, buf, at);
    #[cfg(windows)]
    return std::os::windows::fs::FileExt::seek_read(f, buf, at);
}

/// Reads `len` bytes at `start` into `buf` (reused: no allocation, and no page faults,
/// once it is as large), fewer at the end of the file.
fn read_into(
    f: &mut std::fs::File,
    path: &Path,
    start: u64,
    len: u64,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let io = |source| Error::io("reading", path, source);
    buf.resize(len as usize, 0);
    // Positioned reads: no seek before each span.
    let mut got = 0;
    while got < buf.len() {
        match read_at(f, &mut buf[got..], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    buf.truncate(got);
    Ok(())
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
        _ => span_digest(&read_span(f, path, 0, consumed.min(DIGEST_SPAN))?),
    };
    let pre_start = consumed.saturating_sub(DIGEST_SPAN);
    let pre = read_span(f, path, pre_start, consumed - pre_start)?;
    Ok((head, span_digest(&pre)))
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
    /// Folded events after the last `spans` group.
    pub(super) open_events: i64,
}

pub(super) fn session_row(conn: &Connection, file: &str) -> rusqlite::Result<Option<SessionRow>> {
    conn.prepare_cached(
        "SELECT session_id, version, dev, ino, consumed, next_line, file_len, mtime_ns, \
         head_digest, pre_digest, entry_count, last_entry_id, open_events FROM sessions \
         WHERE file = ?1",
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
            open_events: r.get(12)?,
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
    meta: &Meta,
    verify: bool,
) -> Result<Plan> {
    let Some(row) = session_row(conn, key).map_err(db_err(db, "reading the watermark"))? else {
        return Ok(Plan::Rebuild);
    };
    let id = meta.identity();
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
/// offsets, lengths and digests are in `spans`, a row per group of events). `Some(bytes
/// read)` if intact. Entries that are not state events are checked only inside the two
/// spans (docs/projection.md, "Limits").
///
/// The events are read in file order, close ones together (at most [`GAP`] apart, in
/// reads of at most [`MAX_READ`]) into one reused buffer; an event inside one of the two
/// spans is hashed from the span already read, not read again.
fn prefix_intact(
    conn: &Connection,
    db: &Path,
    file: &Path,
    key: &str,
    row: &SessionRow,
) -> Result<Option<u64>> {
    let mut f = std::fs::File::open(file).ctx("opening", file)?;
    let consumed = row.consumed as u64;
    let pre_start = consumed.saturating_sub(DIGEST_SPAN);
    let head = read_span(&mut f, file, 0, consumed.min(DIGEST_SPAN))?;
    let pre = read_span(&mut f, file, pre_start, consumed - pre_start)?;
    let mut reads = 2;
    let mut verified = (head.len() + pre.len()) as u64;
    if span_digest(&head) != row.head_digest || span_digest(&pre) != row.pre_digest {
        super::count(|w| w.verify_reads += reads);
        return Ok(None);
    }
    let q = |e| db_err(db, "reading the projection")(e);
    let groups = conn
        .prepare_cached(
            "SELECT first_offset, count, layout, digest, last_idx FROM spans WHERE file = ?1 \
             ORDER BY first_idx",
        )
        .and_then(|mut stmt| {
            stmt.query_map([key], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(q)?;
    // The events after the last group (fewer than a group), each with its own digest.
    let after = groups.last().map_or(-1, |g| g.4);
    let open = conn
        .prepare_cached(
            "SELECT offset, len, digest FROM events WHERE file = ?1 AND idx > ?2 ORDER BY idx",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![key, after], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(q)?;
    super::count(|w| w.verify_rows += (groups.len() + open.len()) as u64);
    // Every folded event's span, in file order, and where each group ends with its digest.
    let mut spans: Vec<(u64, u64)> = Vec::new();
    let mut ends: Vec<(usize, i64)> = Vec::with_capacity(groups.len() + open.len());
    for (first_offset, count, layout, digest, _) in &groups {
        let before = spans.len();
        let from = spans.last().map_or(0, |&(o, l)| o + l);
        if *first_offset < 0 || (*first_offset as u64) < from {
            return Ok(None);
        }
        if !SpanGroup::decode(*first_offset as u64, layout, &mut spans)
            || spans.len() - before != *count as usize
        {
            // Rows that do not decode: rebuilt like a changed prefix.
            return Ok(None);
        }
        ends.push((spans.len(), *digest));
    }
    for &(offset, len, digest) in &open {
        let from = spans.last().map_or(0, |&(o, l)| o + l);
        if offset < 0 || len < 0 || (offset as u64) < from {
            return Ok(None);
        }
        spans.push((offset as u64, len as u64));
        ends.push((spans.len(), SpanGroup::combine(SpanGroup::SEED, digest)));
    }
    if spans.last().is_some_and(|&(o, l)| o + l > consumed) {
        return Ok(None);
    }
    let mut buf = Vec::new();
    // The part of the file in `buf`.
    let mut window = (0u64, 0u64);
    let mut h = SpanGroup::SEED;
    let mut group = 0;
    for (i, &(offset, len)) in spans.iter().enumerate() {
        let end = offset + len;
        let bytes: &[u8] = if end <= head.len() as u64 {
            &head[offset as usize..end as usize]
        } else if offset >= pre_start {
            &pre[(offset - pre_start) as usize..(end - pre_start) as usize]
        } else {
            if offset < window.0 || end > window.1 {
                // Read this event and those close after it (not those in the last span).
                let mut stop = end;
                for &(o, l) in &spans[i + 1..] {
                    if o >= pre_start || o > stop + GAP || o + l - offset > MAX_READ {
                        break;
                    }
                    stop = o + l;
                }
                read_into(&mut f, file, offset, stop - offset, &mut buf)?;
                reads += 1;
                verified += buf.len() as u64;
                window = (offset, offset + buf.len() as u64);
                if window.1 < end {
                    super::count(|w| w.verify_reads += reads);
                    return Ok(None);
                }
            }
            &buf[(offset - window.0) as usize..(end - window.0) as usize]
        };
        h = SpanGroup::combine(h, span_digest(bytes));
        if ends[group].0 == i + 1 {
            if h != ends[group].1 {
                super::count(|w| w.verify_reads += reads);
                return Ok(None);
            }
            h = SpanGroup::SEED;
            group += 1;
        }
    }
    super::count(|w| w.verify_reads += reads);
    Ok(Some(verified))
}

/// A row of `spans`: the offsets, lengths and one digest of a few hundred folded state
/// events' lines, consecutive in file order. The check after a foreign append reads a row
/// per group instead of one per event.
#[derive(Debug, Clone)]
pub(super) struct SpanGroup {
    /// The entry indexes of its first and last events.
    first_idx: i64,
    last_idx: i64,
    count: i64,
    first_offset: i64,
    /// Per event: the gap since the previous event's end (the first: 0) and the length,
    /// as LEB128 varints.
    layout: Vec<u8>,
    /// The events' line digests combined in order ([`SpanGroup::combine`]).
    digest: i64,
}

impl SpanGroup {
    /// The combined digest of no event.
    const SEED: i64 = 0x5353_7431;

    /// Folds one event's line digest into a group's.
    fn combine(h: i64, d: i64) -> i64 {
        mix(h as u64, d as u64) as i64
    }

    /// The group of `spans` (entry index, offset, length, digest), in file order.
    pub(super) fn of(spans: &[(i64, i64, i64, i64)]) -> SpanGroup {
        let first_offset = spans.first().map_or(0, |s| s.1);
        let mut g = SpanGroup {
            first_idx: spans.first().map_or(0, |s| s.0),
            last_idx: spans.last().map_or(0, |s| s.0),
            count: spans.len() as i64,
            first_offset,
            layout: Vec::with_capacity(spans.len() * 3),
            digest: SpanGroup::SEED,
        };
        let mut end = first_offset;
        for &(_, offset, len, digest) in spans {
            push_varint(&mut g.layout, (offset - end).max(0) as u64);
            push_varint(&mut g.layout, len.max(0) as u64);
            end = offset.max(end) + len.max(0);
            g.digest = SpanGroup::combine(g.digest, digest);
        }
        g
    }

    /// Writes the group's row.
    pub(super) fn store(&self, tx: &Connection, key: &str) -> rusqlite::Result<()> {
        tx.prepare_cached(
            "INSERT OR REPLACE INTO spans(file, first_idx, last_idx, count, first_offset, \
             layout, digest) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            key,
            self.first_idx,
            self.last_idx,
            self.count,
            self.first_offset,
            self.layout,
            self.digest
        ])
        .map(|_| ())
    }

    /// Appends the spans (offset, length) of a stored layout to `out`; `false` if it does
    /// not decode.
    fn decode(first_offset: u64, layout: &[u8], out: &mut Vec<(u64, u64)>) -> bool {
        let mut at = 0;
        let mut end = first_offset;
        while at < layout.len() {
            let (Some(gap), Some(len)) =
                (read_varint(layout, &mut at), read_varint(layout, &mut at))
            else {
                return false;
            };
            let Some(offset) = end.checked_add(gap) else {
                return false;
            };
            let Some(e) = offset.checked_add(len) else {
                return false;
            };
            out.push((offset, len));
            end = e;
        }
        true
    }
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
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
    /// Folded events after the last `spans` group.
    pub(super) open_events: i64,
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
        w.last_id,
        w.open_events
    ];
    // In place when the row exists (a resume): a `REPLACE` would delete it and insert it
    // again under a new rowid, writing its index too.
    let updated = tx
        .prepare_cached(
            "UPDATE sessions SET session_id = ?2, version = ?3, dev = ?4, ino = ?5, \
             consumed = ?6, next_line = ?7, file_len = ?8, mtime_ns = ?9, head_digest = ?10, \
             pre_digest = ?11, entry_count = ?12, last_entry_id = ?13, open_events = ?14 \
             WHERE file = ?1",
        )
        .and_then(|mut q| q.execute(values))
        .map_err(db_err(db, "writing the watermark"))?;
    if updated == 0 {
        tx.prepare_cached(
            "INSERT INTO sessions(file, session_id, version, dev, ino, consumed, next_line, \
             file_len, mtime_ns, head_digest, pre_digest, entry_count, last_entry_id, \
             open_events) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )
        .and_then(|mut q| q.execute(values))
        .map_err(db_err(db, "writing the watermark"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{SpanGroup, span_digest};

    #[test]
    fn the_span_digests_are_the_ones_already_stored() {
        // Watermarks and span groups written by earlier versions hold these: a change
        // here makes every stored projection look changed and rebuild.
        assert_eq!(span_digest(b""), -3_750_763_035_240_644_671);
        assert_eq!(span_digest(b"a"), 4_414_831_331_694_321_467);
        assert_eq!(span_digest(b"12345678"), 6_133_230_400_249_876_965);
        assert_eq!(
            span_digest(br#"{"type":"session","version":3,"id":"s1"}"#),
            2_882_640_713_428_676_988
        );
        let one = SpanGroup::combine(SpanGroup::SEED, span_digest(b"a"));
        assert_eq!(one, -192_946_723_079_283_595);
        assert_eq!(
            SpanGroup::combine(one, span_digest(b"12345678")),
            2_937_037_012_451_966_902
        );
    }
}
