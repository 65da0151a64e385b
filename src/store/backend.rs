//! State on a session kept by a [`SessionStore`] backend (SPEC §8: "state folds, `--at`,
//! history and the projection's guarantees hold on every backend").
//!
//! - **Writes** load the session through the trait (a detached [`SessionLog`]), fold at
//!   the leaf (or at `--at`), and append one event through the trait with the sequence
//!   number the load saw: the backend refuses it when another writer came first
//!   ([`Error::SequenceMismatch`]), and the write is then folded again on what that
//!   writer stored, a few times, before the refusal is returned. Nothing is ever lost or
//!   applied twice: an event is stored once, at the sequence number it was folded for.
//! - **Cold reads** go through the projection, as for a file: the projection's rows are
//!   built from a local *mirror* of the stored session (`<database>.stores/<store>/<id>.jsonl`,
//!   next to the projection database), which holds only lines read back from the
//!   backend, so the cache is never ahead of the store. A read asks the backend for the
//!   lines from the mirror's last one on (one query for an unchanged session), checks
//!   that the mirror's last line is still the stored one (else the mirror is rebuilt),
//!   appends what is new, and answers from the projection: its cost does not grow with
//!   the session.
//!
//! ```no_run
//! use session_state::{Scope, SqliteStore, Store, StoredSession};
//! let backend = SqliteStore::open("/srv/sessions.sqlite")?;
//! let store = Store::at("/var/cache/states.sqlite")?;
//! let role = store.state::<String>("role", Scope::Branch)?;
//! let session = StoredSession::new(&backend, "sqlite:///srv/sessions.sqlite", "0195f1d0");
//! role.write_stored(&session, None, &"reviewer".to_string())?;
//! assert_eq!(role.read_stored(&session, None)?, Some("reviewer".to_string()));
//! # Ok::<(), session_state::Error>(())
//! ```

use super::Store;
use super::state::SessionState;
use crate::error::{Error, IoContext, Result};
use crate::persistence::{SessionStore, check_session_id, event_lines};
use crate::state::depth;
use crate::state::envelope::{Envelope, Op};
use crate::tree::SessionLog;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How many times a write folds again after another writer stored first.
const RETRIES: usize = 32;

/// One session of a backend, named for the local cache: the store, a key that names it
/// among stores (its URL, redacted: the key is part of a file name's hash and of
/// messages, so it must never hold a password), and the session id.
#[derive(Clone, Copy)]
pub struct StoredSession<'a> {
    store: &'a dyn SessionStore,
    store_key: &'a str,
    session_id: &'a str,
}

impl std::fmt::Debug for StoredSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSession")
            .field("store", &self.store_key)
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl<'a> StoredSession<'a> {
    /// The session `session_id` of `store`, whose redacted URL (or another stable name
    /// without secrets) is `store_key` ([`crate::RedactedUrl::redacted`]).
    pub fn new(
        store: &'a dyn SessionStore,
        store_key: &'a str,
        session_id: &'a str,
    ) -> StoredSession<'a> {
        StoredSession {
            store,
            store_key,
            session_id,
        }
    }

    /// The backend.
    pub fn store(&self) -> &'a dyn SessionStore {
        self.store
    }

    /// The session id.
    pub fn session_id(&self) -> &'a str {
        self.session_id
    }

    /// Loads the session through the backend (closing an interrupted final turn, SPEC
    /// §8): a detached log, for reads at any entry, [`SessionState::read_at`],
    /// [`SessionState::history`] and [`crate::branch_key`].
    pub fn load(&self) -> Result<SessionLog> {
        Ok(self.store.load(self.session_id)?.into_log())
    }
}

impl<T: Serialize + DeserializeOwned> SessionState<T> {
    /// The value of a backend's session at its last entry (or as if the leaf were `at`),
    /// answered by the projection from the local mirror (see the module docs): flat in
    /// the session's size once the cache is warm.
    pub fn read_stored(&self, session: &StoredSession<'_>, at: Option<&str>) -> Result<Option<T>> {
        match self.read_stored_value(session, at)? {
            None => Ok(None),
            Some(v) => T::deserialize(&v)
                .map(Some)
                .map_err(|source| Error::Deserialize {
                    plugin: self.plugin_id().to_owned(),
                    entry_id: None,
                    source,
                }),
        }
    }

    /// [`SessionState::read_stored`] as raw JSON, in [`crate::json`]'s lossless encoding.
    pub fn read_stored_value(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
    ) -> Result<Option<Value>> {
        let mirror = self.store().sync_mirror(session)?;
        self.store()
            .read_value(&mirror, self.plugin_id(), self.scope(), at)
    }

    /// Sets the value in a backend's session, as a child of its last entry (or of `at`:
    /// a fork when `at` already has children). Returns the new entry's id, `None` when
    /// the value was already equal. Durable when it returns (the backend's guarantee).
    pub fn write_stored(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
        value: &T,
    ) -> Result<Option<String>> {
        let value = self.limited(value)?;
        self.commit_stored(session, at, Op::Set(value))
    }

    /// Applies an RFC 7396 JSON Merge Patch in a backend's session (see
    /// [`SessionState::patch`]).
    pub fn patch_stored<P: Serialize + ?Sized>(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
        patch: &P,
    ) -> Result<Option<String>> {
        let patch = self.limited(patch)?;
        self.commit_stored(session, at, Op::Patch(patch))
    }

    /// Makes the value absent in a backend's session; `None` when it already was.
    pub fn drop_stored(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
    ) -> Result<Option<String>> {
        self.commit_stored(session, at, Op::Drop)
    }

    fn limited<V: Serialize + ?Sized>(&self, v: &V) -> Result<Value> {
        let v = depth::to_value_limited(v).map_err(|source| Error::Serialize {
            plugin: self.plugin_id().to_owned(),
            source,
        })?;
        self.check_depth(&v)?;
        crate::json::check_numbers(&v).map_err(|e| Error::UnrepresentableValue {
            plugin: self.plugin_id().to_owned(),
            detail: e.to_string(),
        })?;
        Ok(v)
    }

    fn commit_stored(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
        op: Op,
    ) -> Result<Option<String>> {
        let mut tries = 0;
        loop {
            match self.commit_once(session, at, op.clone()) {
                Err(Error::SequenceMismatch { .. }) if tries < RETRIES => tries += 1,
                Ok(id) => {
                    if id.is_some()
                        && let Err(e) = self.store().sync_mirror(session)
                    {
                        // The event is stored; the cache follows on the next read.
                        tracing::debug!(error = %e, "the local cache did not follow the write");
                    }
                    return Ok(id);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn commit_once(
        &self,
        session: &StoredSession<'_>,
        at: Option<&str>,
        op: Op,
    ) -> Result<Option<String>> {
        let (store, id) = (session.store, session.session_id);
        let mut log = session.load()?;
        if let Some(at) = at {
            log.navigate(at)?;
        }
        let current = self.folded(&log, log.tree().leaf_index())?;
        let next = op.apply(current.value.as_deref());
        if crate::json::js_eq_opt(next.as_ref(), current.value.as_deref()) {
            return Ok(None);
        }
        if let Some(next) = &next {
            self.check_depth(next)?;
        }
        let env = Envelope {
            scope: self.scope(),
            op,
        };
        let event = serde_json::json!({
            "type": "custom",
            "customType": self.custom_type(),
            "data": env.to_data(),
        });
        let seq = log.len() as u64;
        let leaf = log.leaf_id().map(str::to_owned);
        let last = log.entries().last().map(|e| e.id().to_owned());
        let lines = event_lines(id, seq, leaf.clone(), std::slice::from_ref(&event), |c| {
            c == id || log.entry(c).is_some()
        })?;
        let [(line, facts)] = lines.as_slice() else {
            return Err(Error::Internal {
                what: "one event gave other than one line".into(),
            });
        };
        match store.append_lines(id, seq, std::slice::from_ref(line)) {
            Ok(_) => Ok(Some(facts.id.clone())),
            // A backend without complete lines still takes a child of its last entry.
            Err(Error::Unsupported { .. }) if leaf == last => {
                store.append(id, seq, &[event])?;
                let mut new_id = None;
                store.read_lines(id, seq, &mut |s, line| {
                    if s == seq {
                        new_id = crate::json::from_str(line)
                            .ok()
                            .and_then(|v: Value| v.get("id")?.as_str().map(str::to_owned));
                    }
                    Ok(())
                })?;
                new_id.map(Some).ok_or_else(|| Error::Internal {
                    what: format!("session {id}: the appended event (seq {seq}) has no id"),
                })
            }
            Err(e) => Err(e),
        }
    }
}

impl Store {
    /// Brings the local mirror of a backend's session up to date (see the module docs)
    /// and returns its path: a Pi JSONL file holding exactly what the backend stored,
    /// which the projection and every file tool can read. A cache: never written by
    /// anything but this routine, rebuilt when it disagrees with the backend.
    pub fn sync_mirror(&self, session: &StoredSession<'_>) -> Result<PathBuf> {
        check_session_id(session.session_id)?;
        let dir = self.mirror_dir(session.store_key);
        std::fs::create_dir_all(&dir).ctx("creating the cache directory", &dir)?;
        let file = dir.join(format!("{}.jsonl", session.session_id));
        let count_file = dir.join(format!("{}.count", session.session_id));
        // One syncing process at a time per store (other sessions' syncs wait briefly).
        let lock_path = dir.join(".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .ctx("opening", &lock_path)?;
        lock.lock().ctx("locking", &lock_path)?;
        let r = sync_locked(session, &file, &count_file);
        let _ = lock.unlock();
        r.map(|()| file)
    }

    fn mirror_dir(&self, store_key: &str) -> PathBuf {
        let db = self.database_path();
        let mut name = db.file_name().unwrap_or_default().to_os_string();
        name.push(".stores");
        let parent = db.parent().unwrap_or(Path::new("/"));
        parent
            .join(name)
            .join(format!("{:016x}", fnv64(store_key.as_bytes())))
    }
}

fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The mirror's entry count (from its count file) and last line, when both are there and
/// agree with the file's length.
fn mirror_state(file: &Path, count_file: &Path) -> Option<(u64, String)> {
    let text = std::fs::read_to_string(count_file).ok()?;
    let (count, len) = text.trim().split_once(' ')?;
    let (count, len): (u64, u64) = (count.parse().ok()?, len.parse().ok()?);
    let mut f = std::fs::File::open(file).ok()?;
    if f.metadata().ok()?.len() != len || count == 0 {
        return None;
    }
    // The last line: read back from the end until the newline before it.
    let mut tail = Vec::new();
    let mut end = len;
    loop {
        let start = end.saturating_sub(64 << 10);
        let mut chunk = vec![0; (end - start) as usize];
        f.seek(SeekFrom::Start(start)).ok()?;
        f.read_exact(&mut chunk).ok()?;
        chunk.extend_from_slice(&tail);
        tail = chunk;
        let body = &tail[..tail.len().checked_sub(1)?];
        if let Some(nl) = memchr::memrchr(b'\n', body) {
            return Some((count, String::from_utf8(body[nl + 1..].to_vec()).ok()?));
        }
        if start == 0 {
            return None;
        }
        end = start;
    }
}

fn sync_locked(session: &StoredSession<'_>, file: &Path, count_file: &Path) -> Result<()> {
    let (store, id) = (session.store, session.session_id);
    if let Some((count, last)) = mirror_state(file, count_file) {
        let mut new = Vec::new();
        let mut agrees = false;
        let next = store.read_lines(id, count - 1, &mut |seq, line| {
            if seq == count - 1 {
                agrees = line == last;
            } else if agrees {
                new.extend_from_slice(line.as_bytes());
                new.push(b'\n');
            }
            Ok(())
        })?;
        if agrees && next >= count {
            if next == count {
                return Ok(());
            }
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(file)
                .ctx("appending to", file)?;
            f.write_all(&new).ctx("appending to", file)?;
            let len = f.metadata().ctx("reading", file)?.len();
            return write_count(count_file, next, len);
        }
        tracing::info!(
            session = id,
            "the local cache disagrees with the store: rebuilding it"
        );
    }
    // Rebuild: a new file in place of the old one (both ours: the cache directory).
    let tmp = file.with_extension("jsonl.tmp");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp).ctx("creating", &tmp)?);
    let header = store.header_line(id)?;
    let io = |e| Error::Io {
        action: "writing",
        path: tmp.clone(),
        source: e,
    };
    out.write_all(header.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    let next = store.read_lines(id, 0, &mut |_, line| {
        out.write_all(line.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)
    })?;
    let f = out.into_inner().map_err(|e| io(e.into_error()))?;
    let len = f.metadata().ctx("reading", &tmp)?.len();
    drop(f);
    std::fs::rename(&tmp, file).ctx("replacing", file)?;
    write_count(count_file, next, len)
}

fn write_count(count_file: &Path, count: u64, len: u64) -> Result<()> {
    std::fs::write(count_file, format!("{count} {len}\n")).ctx("writing", count_file)
}
