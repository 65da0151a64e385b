//! The rows of a session kept by a store (not a file): fed from the store's lines by
//! sequence number, keyed by store and session, with no local copy of the session.
//!
//! Where the lines come from is the one difference with a file's rows (`ingest.rs`): a
//! file is read from a byte offset and its prefix is checked by identity, length, change
//! stamp and digests; a store's session is read from a sequence number and is
//! append-only, so its watermark (`stored_sessions`) records how many lines were folded
//! and the length and digest of the last one. A catch-up asks the store for the lines
//! from that last one on (one `read_lines`): if the last line is still the stored one,
//! what follows is new and only that is folded; if not (the session was replaced or cut
//! short), the session's rows are rebuilt from its lines. The rows themselves (`nodes`,
//! `events`, `session_values`) are written by the same sink and read by the same reads
//! as a file's, under the key `store:<store>#<session id>`; each line goes through the
//! log's scanner (`ScanState::line`), the one JSONL reader.
//!
//! A stored row is written whole or not at all, so a row the scanner does not read as an
//! entry is corruption, named by its line (sequence number + 2) and its byte offset in
//! the session's export.

use super::ingest::{CHUNK_BYTES, CHUNK_ENTRIES};
use super::read::{ReadValue, read_value};
use super::sink::SqlSink;
use super::watermark::span_digest;
use super::{CatchUp, Projection, db_err, forget};
use crate::error::{Error, InvalidLog, Location, LogError, ProjectionError, Result, UnknownEntry};
use crate::log::header::parse_header;
use crate::log::reader::{ReadMode, ScanState};
use crate::sqlite::{End, immediate_ending};
use crate::state::envelope::Scope;
use rusqlite::{Connection, OptionalExtension, params};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

const TABLE: &str = "
CREATE TABLE IF NOT EXISTS stored_sessions(
    key TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    header_digest INTEGER NOT NULL,
    entry_count INTEGER NOT NULL,
    consumed INTEGER NOT NULL,
    last_entry_id TEXT,
    last_len INTEGER NOT NULL,
    last_digest INTEGER NOT NULL
) WITHOUT ROWID";

/// A stored session's lines, as the projection reads them (the store layer gives them:
/// [`crate::StoredSession`]).
pub(crate) trait StoredLines {
    /// The session in messages: `<store>#<session id>`, never a password.
    fn label(&self) -> PathBuf;
    /// The rows' key: `store:<store>#<session id>` (never a file's canonical path).
    fn key(&self) -> String;
    /// The header line, without its newline.
    fn header_line(&self) -> Result<String>;
    /// The store's `read_lines`: `visit(seq, line)` from `from` on until it breaks;
    /// returns the next sequence number.
    fn read_lines(
        &self,
        from: u64,
        visit: &mut dyn FnMut(u64, &str) -> ControlFlow<()>,
    ) -> Result<u64>;
}

/// The watermark of a stored session's rows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mark {
    session_id: String,
    version: i64,
    header_digest: i64,
    /// Lines folded: the next sequence number the rows expect.
    entry_count: u64,
    /// Bytes of the header and those lines with their newlines (offsets as in an export).
    consumed: u64,
    last_entry_id: Option<String>,
    last_len: i64,
    last_digest: i64,
}

/// What the rows know of a stored session after a catch-up: what a write decides from.
#[derive(Debug, Clone)]
pub(crate) struct StoredTail {
    /// The session id (the header's).
    pub(crate) session_id: String,
    /// The next sequence number: the one an append after the rows must take.
    pub(crate) next_seq: u64,
    /// The last entry in storage order (the leaf), `None` for a session without entries.
    pub(crate) last_entry_id: Option<String>,
    mark: Mark,
}

/// A write's decision inputs: the entry the new one is a child of and the plugin's
/// value there.
#[derive(Debug)]
pub(crate) struct StoredDecision {
    pub(crate) tail: StoredTail,
    pub(crate) parent: Option<String>,
    pub(crate) current: ReadValue,
}

fn ensure_table(conn: &Connection, db: &Path) -> Result<()> {
    let there: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND \
             name = 'stored_sessions')",
            [],
            |r| r.get(0),
        )
        .map_err(db_err(db, "reading the projection"))?;
    if !there {
        conn.execute_batch(TABLE)
            .map_err(db_err(db, "creating the stored sessions' table"))?;
    }
    Ok(())
}

fn read_mark(conn: &Connection, db: &Path, key: &str) -> Result<Option<Mark>> {
    conn.prepare_cached(
        "SELECT session_id, version, header_digest, entry_count, consumed, last_entry_id, \
         last_len, last_digest FROM stored_sessions WHERE key = ?1",
    )
    .and_then(|mut q| {
        q.query_row([key], |r| {
            Ok(Mark {
                session_id: r.get(0)?,
                version: r.get(1)?,
                header_digest: r.get(2)?,
                entry_count: r.get::<_, i64>(3)? as u64,
                consumed: r.get::<_, i64>(4)? as u64,
                last_entry_id: r.get(5)?,
                last_len: r.get(6)?,
                last_digest: r.get(7)?,
            })
        })
        .optional()
    })
    .map_err(db_err(db, "reading the watermark"))
}

fn write_mark(conn: &Connection, db: &Path, key: &str, m: &Mark) -> Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO stored_sessions(key, session_id, version, header_digest, \
         entry_count, consumed, last_entry_id, last_len, last_digest) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .and_then(|mut q| {
        q.execute(params![
            key,
            m.session_id,
            m.version,
            m.header_digest,
            m.entry_count as i64,
            m.consumed as i64,
            m.last_entry_id,
            m.last_len,
            m.last_digest
        ])
    })
    .map_err(db_err(db, "writing the watermark"))?;
    Ok(())
}

/// Folds stored lines into the rows, one at a time, inside the caller's transaction.
struct Folder<'c> {
    sink: SqlSink<'c>,
    scan: ScanState,
    label: PathBuf,
    mark: Mark,
    bytes: u64,
}

impl<'c> Folder<'c> {
    fn new(conn: &'c Connection, db: &Path, label: &Path, key: &str, mark: Mark) -> Folder<'c> {
        let sink = SqlSink::new(
            conn,
            db,
            label,
            key,
            &mark.session_id,
            mark.entry_count as i64,
            mark.last_entry_id.clone(),
        );
        let scan = ScanState {
            next: Location {
                line: mark.entry_count + 2,
                offset: mark.consumed,
            },
            pending_bad: Vec::new(),
            version: mark.version as u32,
            ordinal: mark.entry_count,
        };
        Folder {
            sink,
            scan,
            label: label.to_path_buf(),
            mark,
            bytes: 0,
        }
    }

    /// Folds the line stored at `seq`, which must be the next one.
    fn line(&mut self, seq: u64, line: &str) -> Result<()> {
        let at = Location {
            line: seq + 2,
            offset: self.mark.consumed,
        };
        if seq != self.mark.entry_count {
            return Err(InvalidLog::Corrupt {
                path: self.label.clone(),
                at,
                detail: format!(
                    "the stored entries skip from seq {} to seq {seq}",
                    self.mark.entry_count
                ),
            }
            .into());
        }
        let bytes = line.as_bytes();
        let digest = span_digest(bytes);
        self.sink.line_digest = Some((bytes.len() as i64, digest));
        let before = self.sink.added;
        self.scan.next = at;
        self.scan
            .line(&self.label, ReadMode::Strict, bytes, at, &mut self.sink)?;
        if let Some(e) = self.sink.deferred.take() {
            return Err(e);
        }
        if self.sink.added == before {
            return Err(InvalidLog::Corrupt {
                path: self.label.clone(),
                at,
                detail: "a stored row is not a complete entry; a row cannot be torn".into(),
            }
            .into());
        }
        self.mark.entry_count += 1;
        self.mark.consumed += bytes.len() as u64 + 1;
        self.mark.last_entry_id = self.sink.last_id.clone();
        self.mark.last_len = bytes.len() as i64;
        self.mark.last_digest = digest;
        self.bytes += bytes.len() as u64 + 1;
        Ok(())
    }
}

impl Projection {
    /// Brings the rows of a stored session up to date with the store (see the module
    /// docs): one `read_lines` from the last folded line on when nothing is new. Commits
    /// in chunks of at most [`CHUNK_ENTRIES`] lines or [`CHUNK_BYTES`] bytes.
    pub(crate) fn catch_up_stored(&mut self, src: &dyn StoredLines) -> Result<StoredTail> {
        self.catch_up_stored_with(src, false)
    }

    fn catch_up_stored_with(
        &mut self,
        src: &dyn StoredLines,
        mut rebuild: bool,
    ) -> Result<StoredTail> {
        ensure_table(&self.conn, &self.path)?;
        let (key, label) = (src.key(), src.label());
        let mut report = CatchUp::default();
        let mut rounds = 0;
        loop {
            rounds += 1;
            if rounds > 1_000_000 {
                return Err(Error::Internal {
                    what: format!(
                        "{}: the projection's catch-up does not end",
                        label.display()
                    ),
                });
            }
            let mark = match read_mark(&self.conn, &self.path, &key)? {
                Some(m) if !rebuild => m,
                seen => {
                    // Only the rows as they were judged are started over: another process
                    // may have started them over, or folded more, meanwhile; then look
                    // again.
                    if self.start_over(src, &key, &label, seen.as_ref())? {
                        report.rebuilt = true;
                    }
                    rebuild = false;
                    continue;
                }
            };
            // The known last line, and what follows it (one chunk at most).
            let from = mark.entry_count.saturating_sub(1);
            let mut agrees = mark.entry_count == 0;
            let mut new: Vec<(u64, String)> = Vec::new();
            let mut new_bytes = 0u64;
            let mut full = false;
            let mut verified = 0u64;
            let next = src.read_lines(from, &mut |seq, line| {
                if mark.entry_count > 0 && seq + 1 == mark.entry_count {
                    verified += line.len() as u64;
                    agrees = line.len() as i64 == mark.last_len
                        && span_digest(line.as_bytes()) == mark.last_digest;
                    return if agrees {
                        ControlFlow::Continue(())
                    } else {
                        ControlFlow::Break(())
                    };
                }
                if !agrees {
                    return ControlFlow::Break(());
                }
                new_bytes += line.len() as u64;
                new.push((seq, line.to_owned()));
                if new.len() as u64 >= CHUNK_ENTRIES || new_bytes >= CHUNK_BYTES {
                    full = true;
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            report.verified_bytes += verified;
            if mark.entry_count == 0 && agrees {
                // No last line to check: the header tells a replaced session.
                agrees = span_digest(src.header_line()?.as_bytes()) == mark.header_digest;
            }
            if !agrees || next < mark.entry_count {
                tracing::info!(
                    session = %label.display(),
                    "the store no longer holds what the projection folded: rebuilding its rows"
                );
                rebuild = true;
                continue;
            }
            if new.is_empty() {
                self.last_catch_up = Some(report);
                return Ok(StoredTail {
                    session_id: mark.session_id.clone(),
                    next_seq: mark.entry_count,
                    last_entry_id: mark.last_entry_id.clone(),
                    mark,
                });
            }
            let _turn = self.queue.turn(super::schema::BUSY_TIMEOUT);
            let path = &self.path;
            let folded = immediate_ending(
                &self.conn,
                |step, e| db_err(path, step.doing())(e),
                |conn| {
                    // Another process may have folded them meanwhile: then look again.
                    if read_mark(conn, path, &key)?.as_ref() != Some(&mark) {
                        return Ok((None, End::Rollback));
                    }
                    let mut folder = Folder::new(conn, path, &label, &key, mark);
                    for (seq, line) in &new {
                        folder.line(*seq, line)?;
                    }
                    folder.sink.flush()?;
                    write_mark(conn, path, &key, &folder.mark)?;
                    report.entries_added += new.len() as u64;
                    report.bytes_read += folder.bytes;
                    Ok((Some(folder.mark), End::Commit))
                },
            )?;
            if let Some(m) = folded {
                if full {
                    // A long catch-up, also one inside a stored write's turn: the
                    // writers in line go before the next chunk.
                    self.queue.pass(super::schema::BUSY_TIMEOUT);
                } else {
                    // Everything up to the store's next sequence number is folded.
                    self.last_catch_up = Some(report);
                    return Ok(StoredTail {
                        session_id: m.session_id.clone(),
                        next_seq: m.entry_count,
                        last_entry_id: m.last_entry_id.clone(),
                        mark: m,
                    });
                }
            }
        }
    }

    /// Drops a stored session's rows and starts them again from its header, if its mark
    /// is still `seen` (none: no rows yet); `false` when another process changed it since.
    fn start_over(
        &mut self,
        src: &dyn StoredLines,
        key: &str,
        label: &Path,
        seen: Option<&Mark>,
    ) -> Result<bool> {
        let header_line = src.header_line()?;
        let header = parse_header(label, header_line.as_bytes(), ReadMode::Strict)?;
        let mark = Mark {
            session_id: header.id().to_owned(),
            version: i64::from(header.version()),
            header_digest: span_digest(header_line.as_bytes()),
            entry_count: 0,
            consumed: header_line.len() as u64 + 1,
            last_entry_id: None,
            last_len: 0,
            last_digest: 0,
        };
        let _turn = self.queue.turn(super::schema::BUSY_TIMEOUT);
        let path = &self.path;
        immediate_ending(
            &self.conn,
            |step, e| db_err(path, step.doing())(e),
            |conn| {
                if read_mark(conn, path, key)?.as_ref() != seen {
                    return Ok((false, End::Rollback));
                }
                forget(conn, key).map_err(db_err(path, "clearing a session"))?;
                write_mark(conn, path, key, &mark)?;
                Ok((true, End::Commit))
            },
        )
    }

    /// The folded value of `plugin` in `scope` in a stored session, as if the leaf were
    /// `at` (default: its last entry), after a catch-up. Rows that do not decode are
    /// never an answer: the session's rows are rebuilt from the store and read again.
    pub(crate) fn read_stored(
        &mut self,
        src: &dyn StoredLines,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<ReadValue> {
        Ok(self.decide_stored(src, plugin, scope, at)?.current)
    }

    /// What a write to a stored session decides from when it trusts the rows as they
    /// stand, with no catch-up: their watermark as the tail. `None` when the rows hold
    /// nothing of the session yet, or not `at`: then a catch-up is needed. Such a decision
    /// is proven current only by an append that goes in after the rows' last entry at
    /// their next sequence number ([`crate::SessionStore::append_lines_outside_turns`]);
    /// a decision to write nothing proves nothing.
    pub(crate) fn decide_stored_from_rows(
        &mut self,
        src: &dyn StoredLines,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<Option<StoredDecision>> {
        ensure_table(&self.conn, &self.path)?;
        let Some(mark) = read_mark(&self.conn, &self.path, &src.key())? else {
            return Ok(None);
        };
        let tail = StoredTail {
            session_id: mark.session_id.clone(),
            next_seq: mark.entry_count,
            last_entry_id: mark.last_entry_id.clone(),
            mark,
        };
        match self.value_at(src, &tail, plugin, scope, at) {
            Err(Error::Log(LogError::UnknownEntry(_))) => Ok(None),
            r => {
                let (parent, current) = r?;
                Ok(Some(StoredDecision {
                    tail,
                    parent,
                    current,
                }))
            }
        }
    }

    /// What a write to a stored session decides from: the rows caught up with the store,
    /// the entry the new one is a child of (`at`, which must be an entry of the session,
    /// else the last one) and the plugin's value there.
    pub(crate) fn decide_stored(
        &mut self,
        src: &dyn StoredLines,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<StoredDecision> {
        // Another process may start the rows over between the catch-up and the read (a
        // store that no longer holds what was folded); then the last entry is not in the
        // rows yet, and the catch-up runs again.
        let mut tries = 0;
        loop {
            tries += 1;
            let tail = self.catch_up_stored(src)?;
            match self.value_at(src, &tail, plugin, scope, at) {
                Err(Error::Log(LogError::UnknownEntry(_))) if at.is_none() && tries < 5 => {
                    continue;
                }
                r => {
                    let (parent, current) = r?;
                    return Ok(StoredDecision {
                        tail,
                        parent,
                        current,
                    });
                }
            }
        }
    }

    fn value_at(
        &mut self,
        src: &dyn StoredLines,
        tail: &StoredTail,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> Result<(Option<String>, ReadValue)> {
        let (key, label) = (src.key(), src.label());
        let parent = match at {
            Some(a) => Some(a.to_owned()),
            None => tail.last_entry_id.clone(),
        };
        if let Some(p) = &parent
            && self.stored_node(&key, p)?.is_none()
        {
            return Err(UnknownEntry {
                path: label,
                id: p.clone(),
            }
            .into());
        }
        let read = |p: &Projection| {
            read_value(
                &p.conn,
                &p.path,
                &label,
                &key,
                plugin,
                scope,
                parent.as_deref(),
            )
        };
        let value = match read(self) {
            Err(Error::Projection(ProjectionError::Database { source, .. }))
                if source.is_corrupt() =>
            {
                self.reopen_rebuilt(&format!("corrupt ({source})"))?;
                self.catch_up_stored(src)?;
                read(self)?
            }
            Err(e @ Error::Projection(ProjectionError::CorruptProjection { .. })) => {
                tracing::warn!(error = %e, "rebuilding the stored session's rows");
                self.catch_up_stored_with(src, true)?;
                read(self)?
            }
            r => r?,
        };
        Ok((parent, value))
    }

    fn stored_node(&self, key: &str, id: &str) -> Result<Option<i64>> {
        self.conn
            .prepare_cached("SELECT idx FROM nodes WHERE file = ?1 AND entry_id = ?2")
            .and_then(|mut q| q.query_row(params![key, id], |r| r.get(0)).optional())
            .map_err(db_err(&self.path, "reading the projection"))
    }

    /// The last of `ids` that is an entry of the stored session (rows caught up), if any.
    pub(crate) fn stored_entries_among(
        &self,
        src: &dyn StoredLines,
        ids: &[String],
    ) -> Result<Option<String>> {
        let key = src.key();
        for id in ids.iter().rev() {
            if self.stored_node(&key, id)?.is_some() {
                return Ok(Some(id.clone()));
            }
        }
        Ok(None)
    }

    /// Whether `id` can name a new entry of the stored session: no entry of it, and not
    /// its id (the rows hold every entry id up to the tail).
    pub(crate) fn stored_id_is_free(
        &self,
        src: &dyn StoredLines,
        tail: &StoredTail,
        id: &str,
    ) -> Result<bool> {
        Ok(id != tail.session_id && self.stored_node(&src.key(), id)?.is_none())
    }

    /// After this process appended `line` at `tail.next_seq` (the store acknowledged
    /// it): the rows fold it, unless another process moved them on meanwhile (its next
    /// catch-up folds it then). The store holds the line first: the rows are never
    /// ahead of it.
    pub(crate) fn follow_own_stored(
        &mut self,
        src: &dyn StoredLines,
        tail: &StoredTail,
        line: &str,
    ) -> Result<CatchUp> {
        let (key, label) = (src.key(), src.label());
        let _turn = self.queue.turn(super::schema::BUSY_TIMEOUT);
        let path = &self.path;
        let caught = immediate_ending(
            &self.conn,
            |step, e| db_err(path, step.doing())(e),
            |conn| {
                if read_mark(conn, path, &key)?.as_ref() != Some(&tail.mark) {
                    return Ok((None, End::Rollback));
                }
                let mut folder = Folder::new(conn, path, &label, &key, tail.mark.clone());
                folder.line(tail.next_seq, line)?;
                // The segment the line made or extended is written before the watermark, as
                // every catch-up writes it: a fork left unwritten sends later reads up the
                // wrong branch.
                folder.sink.flush()?;
                write_mark(conn, path, &key, &folder.mark)?;
                let c = CatchUp {
                    rebuilt: false,
                    bytes_read: folder.bytes,
                    entries_added: 1,
                    verified_bytes: 0,
                };
                Ok((Some(c), End::Commit))
            },
        )?;
        match caught {
            Some(c) => {
                self.last_catch_up = Some(c);
                Ok(c)
            }
            None => Ok(CatchUp::default()),
        }
    }

    /// Drops a stored session's rows (they are rebuilt on the next read).
    pub(crate) fn forget_stored(&mut self, src: &dyn StoredLines) -> Result<()> {
        ensure_table(&self.conn, &self.path)?;
        let key = src.key();
        forget(&self.conn, &key).map_err(db_err(&self.path, "forgetting a session"))?;
        self.conn
            .execute("DELETE FROM stored_sessions WHERE key = ?1", [&key])
            .map_err(db_err(&self.path, "forgetting a session"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored session held in memory.
    struct Lines {
        header: String,
        lines: Vec<String>,
    }

    impl StoredLines for Lines {
        fn label(&self) -> PathBuf {
            PathBuf::from("mem#s")
        }
        fn key(&self) -> String {
            "store:mem#s".into()
        }
        fn header_line(&self) -> Result<String> {
            Ok(self.header.clone())
        }
        fn read_lines(
            &self,
            from: u64,
            visit: &mut dyn FnMut(u64, &str) -> ControlFlow<()>,
        ) -> Result<u64> {
            for (seq, line) in self.lines.iter().enumerate().skip(from as usize) {
                if visit(seq as u64, line).is_break() {
                    break;
                }
            }
            Ok(self.lines.len() as u64)
        }
    }

    fn session() -> Lines {
        let entry = |id: &str, parent: Option<&str>, n: u64| {
            let data = format!(r#"{{"v":1,"scope":"branch","op":"set","value":{n}}}"#);
            let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
            format!(
                r#"{{"type":"custom","id":"{id}","parentId":{parent},"timestamp":"2026-12-04T20:00:00.000Z","customType":"session-state/p","data":{data}}}"#
            )
        };
        Lines {
            header: r#"{"type":"session","version":3,"id":"0195f1d0-7c4e-7000-8000-00000000c0de","timestamp":"2026-12-04T20:00:00.000Z","cwd":"/w"}"#.into(),
            lines: vec![entry("aaaa0001", None, 1), entry("aaaa0002", Some("aaaa0001"), 2)],
        }
    }

    /// Two processes find no rows for a stored session at once: the one that starts the
    /// rows over second, after the first has folded them, leaves them alone (deleting
    /// them would take the tail from under the first one's read), and both read the value.
    #[test]
    fn rows_are_started_over_only_as_they_were_judged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("states.sqlite");
        let src = session();
        let mut first = Projection::open(&db).expect("open");
        let mut second = Projection::open(&db).expect("open");
        // The second judged "no rows" before the first built them.
        ensure_table(&second.conn, &second.path).expect("table");
        let seen = read_mark(&second.conn, &second.path, &src.key()).expect("mark");
        assert_eq!(seen, None);
        let tail = first.catch_up_stored(&src).expect("first");
        assert_eq!(tail.last_entry_id.as_deref(), Some("aaaa0002"));
        let (key, label) = (src.key(), src.label());
        assert!(
            !second
                .start_over(&src, &key, &label, seen.as_ref())
                .expect("start over"),
            "the rows changed since they were judged: left alone"
        );
        let read = |p: &mut Projection| p.read_stored(&src, "p", Scope::Branch, None);
        assert_eq!(read(&mut first).expect("first reads").value, Some(2.into()));
        assert_eq!(
            read(&mut second).expect("second reads").value,
            Some(2.into())
        );
        // Rows judged as they stand are started over.
        let now = read_mark(&second.conn, &second.path, &key).expect("mark");
        assert!(
            second
                .start_over(&src, &key, &label, now.as_ref())
                .expect("start over")
        );
        assert_eq!(read(&mut first).expect("rebuilt").value, Some(2.into()));
    }
}
