//! [`Sessions`]: the crate's rules for a host, on top of any backend's primitives.

use super::interrupted::missing_tool_results;
use super::lines::{self, LineFacts, check_ids, check_line, check_new_header, to_new_entry};
use super::read::{read_stored_log, stored_label};
use super::retry::{Mark, Retry, Unsettled, append_until_known};
use super::{ImportReport, Loaded, SessionStore};
use crate::error::{Error, Result, RuleError, StoreError};
use crate::log::NewEntry;
use crate::log::entry::Header;
use crate::log::header::parse_header;
use crate::log::reader::ReadMode;
use crate::sync::lock;
use crate::tree::SessionLog;
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Mutex;

/// What this handle knows of a session it appended to: enough to check a batch's ids
/// and parents and to pick fresh ids without asking the store for more than what is new.
/// Built from one read of the session's lines on first use, then followed.
#[derive(Debug)]
struct Known {
    next: u64,
    last_id: Option<String>,
    ids: HashSet<String>,
}

/// Sessions kept by a backend, with the crate's rules on top (see the module docs of
/// [`SessionStore`]): a host's handle on its store.
///
/// - **Lazy creation.** [`Sessions::create`] only registers the header: nothing is
///   stored until the first non-empty append, which stores the header and the first
///   entries together, all or nothing. A session that is never appended to is absent
///   from [`Sessions::list`], and a process that ends first leaves nothing behind.
/// - **Events and ids.** [`Sessions::append`] turns events into entry lines, each a
///   child of the one before, with fresh 8-hex-digit ids unique in the session.
/// - **Sequence numbers.** Every append states the sequence number of its first entry
///   and is refused unless that is the stored next one, so two writers (or a retry) can
///   never interleave or duplicate entries unnoticed.
/// - **Resuming.** [`Sessions::load`] closes an interrupted final turn.
///
/// `Send + Sync`; appends to one session from several threads take turns on the store.
/// What the handle caches of a session (its ids) is read once, on its first append, and
/// then followed: only what others appended since is read.
pub struct Sessions {
    backend: Box<dyn SessionStore>,
    pending: Mutex<HashMap<String, (Header, String)>>,
    known: Mutex<HashMap<String, Known>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("store", &self.backend.describe())
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// The sessions of `backend`.
    pub fn new(backend: impl SessionStore + 'static) -> Sessions {
        Sessions::from_box(Box::new(backend))
    }

    /// The sessions of a backend already boxed.
    pub fn from_box(backend: Box<dyn SessionStore>) -> Sessions {
        Sessions {
            backend,
            pending: Mutex::default(),
            known: Mutex::default(),
        }
    }

    /// The sessions of the store a URL names: `sqlite:///abs/path`, or `postgres://…` /
    /// `postgresql://…` (with the `postgres` feature); its password never reaches an
    /// error, a log line or a `Debug` output.
    pub fn open_url(url: &str) -> Result<Sessions> {
        Ok(Sessions::from_box(super::open_store_url(url)?))
    }

    /// The backend: for state on its sessions ([`crate::StoredSession`]) and the
    /// primitives themselves.
    pub fn backend(&self) -> &dyn SessionStore {
        &*self.backend
    }

    /// The backend itself, for a host that wraps it (sessions created through this
    /// handle and not appended to are forgotten).
    pub fn into_backend(self) -> Box<dyn SessionStore> {
        self.backend
    }

    /// Registers a new session. Nothing is stored until its first non-empty append.
    ///
    /// Refused: a header no backend stores ([`RuleError::UnsupportedNewVersion`],
    /// [`RuleError::InvalidSessionId`], [`RuleError::UnlocatableHeader`]: no `cwd` or
    /// `timestamp`), a session already stored ([`StoreError::AlreadyExists`]) or already
    /// created through this handle ([`RuleError::AlreadyCreated`]).
    pub fn create(&self, header: Header) -> Result<()> {
        check_new_header(&header)?;
        let id = header.id().to_owned();
        if lock(&self.pending).contains_key(&id) {
            return Err(RuleError::AlreadyCreated { session_id: id }.into());
        }
        match self.backend.header_line(&id) {
            Ok(_) => {
                return Err(StoreError::AlreadyExists {
                    store: self.backend.describe(),
                    session_id: id,
                }
                .into());
            }
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let mut pending = lock(&self.pending);
        if pending.contains_key(&id) {
            return Err(RuleError::AlreadyCreated { session_id: id }.into());
        }
        let mut line = header.to_line();
        line.pop();
        pending.insert(id, (header, line));
        Ok(())
    }

    /// Appends `events` to the session, the first one with sequence number `first_seq`,
    /// each as a child of the previous one (the first as a child of the session's last
    /// entry). Returns the session's next sequence number.
    ///
    /// **Events** are JSON objects with a string `type`, laid out like a Pi entry without
    /// its `id`, `parentId` and `timestamp` (assigned here): for example
    /// `{"type":"message","message":{…}}` or `{"type":"custom","customType":"x","data":…}`.
    ///
    /// **Durability:** when this returns `Ok`, every event is on stable storage; an
    /// append is all or nothing.
    ///
    /// **Refusals** (nothing is written): `first_seq` is not the stored next sequence
    /// number ([`StoreError::SequenceMismatch`] names both), or an event is not
    /// acceptable ([`RuleError::InvalidEvent`] names it by its index and sequence number).
    pub fn append(&self, session_id: &str, first_seq: u64, events: &[Value]) -> Result<u64> {
        let entries = events
            .iter()
            .enumerate()
            .map(|(i, e)| to_new_entry(session_id, first_seq + i as u64, i, e))
            .collect::<Result<Vec<_>>>()?;
        self.append_entries(session_id, first_seq, &entries)
    }

    /// [`Sessions::append`] for events of any `Serialize` type. An event that cannot be
    /// serialized is refused with [`RuleError::EventNotSerializable`], naming its index and
    /// sequence number; then nothing is written.
    pub fn append_serialized<E: Serialize>(
        &self,
        session_id: &str,
        first_seq: u64,
        events: &[E],
    ) -> Result<u64> {
        let values = events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                serde_json::to_value(e).map_err(|source| {
                    Error::from(RuleError::EventNotSerializable {
                        session_id: session_id.into(),
                        index: i,
                        seq: first_seq + i as u64,
                        source,
                    })
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.append(session_id, first_seq, &values)
    }

    /// Appends complete entry lines (with their own `id`, `parentId` and `timestamp`),
    /// kept byte for byte: how a host forks (a parent that is any entry, not only the
    /// last). The rules of [`Sessions::append`] hold; besides, each line must be one JSON
    /// object with a string `type` other than `session`, a new `id`, a `parentId` that is
    /// null or names an entry of the session (or an earlier line of the batch) and a
    /// `timestamp` ([`RuleError::InvalidEvent`] names the line).
    pub fn append_lines(&self, session_id: &str, first_seq: u64, lines: &[String]) -> Result<u64> {
        let facts = lines
            .iter()
            .enumerate()
            .map(|(i, l)| check_line(session_id, first_seq + i as u64, i, l))
            .collect::<Result<Vec<_>>>()?;
        let checked: Vec<(String, LineFacts)> = lines.iter().cloned().zip(facts).collect();
        self.store_lines(session_id, first_seq, &checked, true)
    }

    fn append_entries(
        &self,
        session_id: &str,
        first_seq: u64,
        entries: &[NewEntry],
    ) -> Result<u64> {
        if self.is_pending(session_id) {
            let lines = lines::entry_lines(session_id, &mut None, entries, |_| false);
            return self.store_lines(session_id, first_seq, &lines, false);
        }
        // A few fresh draws if an id collides with one stored meanwhile.
        for _ in 0..8 {
            let (next, parent) = {
                let mut known = lock(&self.known);
                let k = self.known_at(&mut known, session_id, first_seq)?;
                (k.next, k.last_id.clone())
            };
            StoreError::check_next(session_id, next, first_seq)?;
            let lines = {
                let known = lock(&self.known);
                let ids = known.get(session_id).map(|k| &k.ids);
                lines::entry_lines(session_id, &mut parent.clone(), entries, |id| {
                    ids.is_some_and(|ids| ids.contains(id))
                })
            };
            match self.store_lines(session_id, first_seq, &lines, false) {
                Err(Error::Store(StoreError::IdTaken { .. })) => {
                    lock(&self.known).remove(session_id);
                }
                r => return r,
            }
        }
        Err(Error::Internal {
            what: format!("session {session_id}: no fresh entry ids after 8 draws"),
        })
    }

    fn is_pending(&self, session_id: &str) -> bool {
        lock(&self.pending).contains_key(session_id)
    }

    /// Stores checked lines at `first_seq`: the first append of a pending session creates
    /// it; otherwise, with `check`, the batch's ids and parents are checked against the
    /// session's.
    fn store_lines(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[(String, LineFacts)],
        check: bool,
    ) -> Result<u64> {
        let texts: Vec<String> = lines.iter().map(|(l, _)| l.clone()).collect();
        let facts: Vec<LineFacts> = lines.iter().map(|(_, f)| f.clone()).collect();
        let pending = lock(&self.pending).get(session_id).cloned();
        let mut retry = Retry::new(&*self.backend);
        if let Some((header, header_line)) = pending {
            StoreError::check_next(session_id, 0, first_seq)?;
            check_ids(session_id, 0, &facts, |_| false)?;
            if lines.is_empty() {
                return Ok(0);
            }
            // Whether it got in is told by the store itself; another writer's session
            // is the store's own AlreadyExists.
            let next = append_until_known(
                &*self.backend,
                &mut retry,
                session_id,
                0,
                Mark::Entry(&facts[0].id),
                lines.len() as u64,
                || self.backend.create(&header, &header_line, &texts),
            )?;
            lock(&self.pending).remove(session_id);
            lock(&self.known).insert(session_id.to_owned(), Known::of(0, None, &facts));
            return Ok(next);
        }
        let mut known = lock(&self.known);
        let k = self.known_at(&mut known, session_id, first_seq)?;
        StoreError::check_next(session_id, k.next, first_seq)?;
        if check {
            check_ids(session_id, first_seq, &facts, |id| k.ids.contains(id))?;
        }
        if lines.is_empty() {
            return Ok(first_seq);
        }
        let next = match append_until_known(
            &*self.backend,
            &mut retry,
            session_id,
            first_seq,
            Mark::Entry(&facts[0].id),
            first_seq + lines.len() as u64,
            || self.backend.append_lines(session_id, first_seq, &texts),
        ) {
            Ok(next) => next,
            Err(u) => {
                // Another writer's line: what this process knew of the session is stale.
                if let Error::Store(
                    StoreError::SequenceMismatch { .. } | StoreError::IdTaken { .. },
                ) = u.error
                {
                    known.remove(session_id);
                }
                return Err(u.error);
            }
        };
        if let Some(k) = known.get_mut(session_id) {
            k.next = next;
            k.last_id = facts.last().map(|f| f.id.clone());
            k.ids.extend(facts.into_iter().map(|f| f.id));
        }
        Ok(next)
    }

    /// What this handle knows of the session for an append at `first_seq`: as known
    /// when that is the next sequence number it knows (the append is conditional on it,
    /// so if it succeeds nobody appended meanwhile, and if another writer did, the store
    /// refuses it and the handle follows next time), else brought up to date first.
    fn known_at<'k>(
        &self,
        known: &'k mut HashMap<String, Known>,
        session_id: &str,
        first_seq: u64,
    ) -> Result<&'k mut Known> {
        if known.get(session_id).is_some_and(|k| k.next == first_seq) {
            return Ok(known.get_mut(session_id).expect("checked just above"));
        }
        self.follow(known, session_id)
    }

    /// What this handle knows of the session, brought up to date with what others
    /// appended (read from the known last entry on; rebuilt when that entry changed).
    fn follow<'k>(
        &self,
        known: &'k mut HashMap<String, Known>,
        session_id: &str,
    ) -> Result<&'k mut Known> {
        let mut retry = Retry::new(&*self.backend);
        let fresh = match known.remove(session_id) {
            Some(mut k) => {
                let from = k.next.saturating_sub(1);
                let mut agrees = k.next == 0;
                let mut new: Vec<Option<String>> = Vec::new();
                let next = retry.transient(|| {
                    new.clear();
                    agrees = k.next == 0;
                    self.backend.read_lines(session_id, from, &mut |seq, line| {
                        if seq + 1 == k.next {
                            agrees = lines::line_id(line) == k.last_id;
                        } else if agrees {
                            new.push(lines::line_id(line));
                        } else {
                            return ControlFlow::Break(());
                        }
                        ControlFlow::Continue(())
                    })
                })?;
                if agrees && next == k.next + new.len() as u64 && new.iter().all(Option::is_some) {
                    for id in new.into_iter().flatten() {
                        k.last_id = Some(id.clone());
                        k.ids.insert(id);
                    }
                    k.next = next;
                    k
                } else {
                    self.read_known(session_id, &mut retry)?
                }
            }
            None => self.read_known(session_id, &mut retry)?,
        };
        Ok(known.entry(session_id.to_owned()).or_insert(fresh))
    }

    fn read_known(&self, session_id: &str, retry: &mut Retry<'_>) -> Result<Known> {
        let header = retry.transient(|| self.backend.header_line(session_id))?;
        let label = stored_label(&*self.backend, session_id);
        let header = parse_header(&label, header.as_bytes(), ReadMode::Strict)?;
        if header.version() != 3 {
            return Err(RuleError::UnsupportedNewVersion {
                session_id: session_id.to_owned(),
                version: header.version(),
            }
            .into());
        }
        let mut ids = HashSet::new();
        let mut last = None;
        let mut missing = None;
        let next = retry.transient(|| {
            ids.clear();
            self.backend.read_lines(session_id, 0, &mut |seq, line| {
                match lines::line_id(line) {
                    Some(id) => {
                        last = Some(id.clone());
                        ids.insert(id);
                    }
                    None => missing = Some(seq),
                }
                ControlFlow::Continue(())
            })
        })?;
        if let Some(seq) = missing {
            return Err(StoreError::Corrupt {
                store: self.backend.describe(),
                session_id: session_id.to_owned(),
                detail: format!("the stored entry at seq {seq} has no string `id`"),
            }
            .into());
        }
        Ok(Known {
            next,
            last_id: last,
            ids,
        })
    }

    /// Reads a session for a host resuming it: its header and its whole log, read by the
    /// log's strict reader (a detached [`SessionLog`]).
    ///
    /// A complete interrupted final turn (the last assistant message on the active branch
    /// made tool calls that have no result) is kept, and closed: one error tool result
    /// per missing result is appended, durably, before this returns (see
    /// `docs/persistence.md`). Only a host resuming the session calls this: a state read
    /// or write never does (a live agent may be in the middle of a tool call). Corruption
    /// and an unknown format version are refused with the reader's error. An unknown
    /// session is [`StoreError::NotFound`]; one created but never appended to
    /// [`RuleError::NotMaterialized`].
    pub fn load(&self, session_id: &str) -> Result<Loaded> {
        if self.is_pending(session_id) {
            return Err(RuleError::NotMaterialized {
                session_id: session_id.into(),
            }
            .into());
        }
        let mut closed: Vec<String> = Vec::new();
        let mut retry = Retry::new(&*self.backend);
        // Closing the turn races with other writers only if they append meanwhile: then
        // read again and decide again (bounded: each round needs a foreign append).
        for _ in 0..8 {
            let log = self.read_log(session_id, ReadMode::Strict)?;
            let missing = missing_tool_results(&log)?;
            if missing.is_empty() {
                return Ok(Loaded::new(log, closed));
            }
            let entries: Vec<NewEntry> = missing
                .iter()
                .map(|(_, m)| NewEntry::message(m.clone()))
                .collect();
            let mut parent = log.leaf_id().map(str::to_owned);
            let lines = lines::entry_lines(session_id, &mut parent, &entries, |id| {
                log.entry(id).is_some()
            });
            let texts: Vec<String> = lines.iter().map(|(l, _)| l.clone()).collect();
            let seq = log.len() as u64;
            let sent = append_until_known(
                &*self.backend,
                &mut retry,
                session_id,
                seq,
                Mark::Entry(&lines[0].1.id),
                seq + lines.len() as u64,
                || self.backend.append_lines(session_id, seq, &texts),
            );
            match sent {
                Ok(_) => closed.extend(missing.into_iter().map(|(id, _)| id)),
                // Another writer appended meanwhile: read again and decide again.
                Err(u) => match *u {
                    Unsettled {
                        error:
                            Error::Store(
                                StoreError::SequenceMismatch { .. } | StoreError::IdTaken { .. },
                            ),
                        unknown: false,
                    } => {}
                    u => return Err(u.error),
                },
            }
            lock(&self.known).remove(session_id);
        }
        let log = self.read_log(session_id, ReadMode::Strict)?;
        Ok(Loaded::new(log, closed))
    }

    /// A stored session as a detached log, read without side effects
    /// ([`crate::StoredSession::read_log`]).
    pub fn read_log(&self, session_id: &str, mode: ReadMode) -> Result<SessionLog> {
        if self.is_pending(session_id) {
            return Err(RuleError::NotMaterialized {
                session_id: session_id.into(),
            }
            .into());
        }
        read_stored_log(&*self.backend, session_id, mode)
    }

    /// The headers of every stored session, ordered by timestamp, then id, read by the
    /// one header reader; a header that does not parse is left out (reported with
    /// `tracing`). Sessions created and not yet appended to are not listed.
    pub fn list(&self) -> Result<Vec<Header>> {
        list_sessions(&*self.backend)
    }

    /// Copies the Pi session file `file` into the store and says what it did (the session's
    /// id among it): the header line
    /// and every entry line byte for byte (unknown fields, number texts and a CRLF line's
    /// `\r` included), read by the log's strict reader, so a file imports exactly as
    /// `verify` reads it. A session without entries is stored too (its header alone).
    ///
    /// Idempotent: importing the same file again appends nothing; importing it after Pi
    /// appended to it appends only the new entries. Refused, with nothing written: a file the
    /// strict reader refuses (its error names line and byte offset), a format version other
    /// than 3 (open it with Pi or session-state once to migrate it), a header no backend
    /// stores for a new session (the session-id rule: [`RuleError::InvalidSessionId`]), and a
    /// file that disagrees with what the store holds for that session
    /// ([`Error::ImportConflict`]: a different header line, or a different line at some
    /// sequence number).
    ///
    /// A torn final record (a line cut by a crash) is not imported. The entries go in
    /// batches of at most 8 MiB, each durable and conditional on the sequence number (the
    /// first creates the session). Each batch is stored as a write stores its line: a store
    /// that is unavailable is waited out for its retry window, and a batch of unknown outcome
    /// (the connection lost at its commit) is settled by reading the store back. An import
    /// that fails midway leaves a prefix and says how much of the file it holds
    /// ([`Error::ImportIncomplete`]); the next import goes on from it. The file is read
    /// twice, sequentially: once by the strict reader, once for the lines.
    pub fn import_file(&self, file: &Path) -> Result<ImportReport> {
        lock(&self.known).clear();
        super::import_file(&*self.backend, file)
    }

    /// Writes the stored session `session_id` to `out` as a Pi JSONL file: its header line,
    /// then every entry line in sequence order, each as stored (byte for byte) and ended by a
    /// newline. Returns the number of entries written. Streams: one row at a time.
    pub fn export(&self, session_id: &str, out: &mut dyn std::io::Write) -> Result<u64> {
        super::export_session(&*self.backend, session_id, out)
    }
}

impl Known {
    fn of(next: u64, last: Option<String>, facts: &[LineFacts]) -> Known {
        let mut k = Known {
            next,
            last_id: last,
            ids: HashSet::new(),
        };
        for f in facts {
            k.ids.insert(f.id.clone());
            k.last_id = Some(f.id.clone());
            k.next += 1;
        }
        k
    }
}

/// The headers of every session of `store`, read by the one header reader, ordered by
/// timestamp, then id; a header that does not parse is left out (reported with
/// `tracing`). What `list --store` prints. A store that is unavailable is tried again
/// with backoff within its retry window.
pub fn list_sessions(store: &dyn SessionStore) -> Result<Vec<Header>> {
    let mut headers = Vec::new();
    for (id, line) in Retry::new(store).transient(|| store.list())? {
        match parse_header(&stored_label(store, &id), line.as_bytes(), ReadMode::Strict) {
            Ok(h) => headers.push(h),
            Err(e) => tracing::warn!(session = %id, "not listed: {e}"),
        }
    }
    headers.sort_by(|a, b| (a.timestamp(), a.id()).cmp(&(b.timestamp(), b.id())));
    Ok(headers)
}
