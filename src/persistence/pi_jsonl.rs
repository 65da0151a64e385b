//! [`PiJsonlStore`], the Pi JSONL backend of [`SessionStore`]: Pi 1.x's session
//! directory layout, one file per session, read and written through [`SessionLog`].

use super::interrupted::close_interrupted_turn;
use super::lines::{check_ids, check_line, check_new_header, to_new_entry};
use super::{ListProblem, ListedSession, Listing, Loaded, SessionStore};
use crate::error::{Error, IoContext, Result};
use crate::log::entry::Header;
use crate::log::{NewEntry, header, reader};
use crate::tree::{LogOptions, SessionLog};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How many bytes [`PiJsonlStore::list`] reads at most to find a file's first line
/// (Pi 1.x's `MAX_SESSION_HEADER_SCAN_BYTES`).
pub const HEADER_SCAN_LIMIT: usize = reader::MAX_HEADER_LINE;

/// Pi's session directory name for `cwd`, exactly as Pi 1.x's
/// `getDefaultSessionDirPath` builds it: strip one leading `/` or `\`, replace every
/// `/`, `\` and `:` with `-`, and wrap the result in `--…--`.
///
/// ```
/// use session_state::pi_session_dir_name;
/// assert_eq!(pi_session_dir_name("/home/me/project"), "--home-me-project--");
/// assert_eq!(pi_session_dir_name(r"C:\Users\me"), "--C--Users-me--");
/// ```
pub fn pi_session_dir_name(cwd: &str) -> String {
    let rest = cwd
        .strip_prefix('/')
        .or_else(|| cwd.strip_prefix('\\'))
        .unwrap_or(cwd);
    format!("--{}--", rest.replace(['/', '\\', ':'], "-"))
}

/// Pi's file name for a session: `<timestamp>_<id>.jsonl`, where the timestamp is the
/// header's with `:` and `.` replaced by `-`. `None` when the header has no timestamp or
/// the name would contain a path separator.
pub fn pi_session_file_name(header: &Header) -> Option<String> {
    let stamp = header.timestamp()?.replace([':', '.'], "-");
    let name = format!("{stamp}_{}.jsonl", header.id());
    if name.contains(['/', '\\', '\0']) {
        return None;
    }
    Some(name)
}

/// The state of one session in a store.
#[derive(Debug)]
enum Slot {
    /// Not touched yet by this store (or evicted after an error): open from disk.
    Unopened,
    /// Created, never appended: only in memory.
    Pending(Header),
    /// The file exists; its log is open.
    Open(Box<SessionLog>),
}

/// The Pi JSONL backend of [`SessionStore`]: one file per session under Pi's sessions
/// directory, `<root>/--<cwd>--/<timestamp>_<id>.jsonl` (see [`pi_session_dir_name`]).
///
/// Files are read and written through [`SessionLog`], so every rule of SPEC §2 holds:
/// one `write()` and one `fdatasync` per entry, a directory fsync when a file is created,
/// strict reading, torn tails closed before appending.
///
/// The store keeps the sessions it has touched open (one [`SessionLog`] each, behind its
/// own mutex), so appends to different sessions proceed in parallel and appends to one
/// session are serialized. It does not take the write lock of SPEC §6: a host that owns
/// its sessions through the store is their only writer, and each append still checks the
/// file's length and reads a foreign tail first.
#[derive(Debug)]
pub struct PiJsonlStore {
    root: PathBuf,
    options: LogOptions,
    sessions: Mutex<HashMap<String, Arc<Mutex<Slot>>>>,
}

impl PiJsonlStore {
    /// A store on `root`, the agent's sessions directory (Pi's default is
    /// `~/.pi/agent/sessions`). Nothing is read or created until needed.
    pub fn new(root: impl Into<PathBuf>) -> PiJsonlStore {
        PiJsonlStore::with_options(root, LogOptions::new())
    }

    /// A store that opens session files with `options` (read mode, file-system seam).
    /// Their materialization setting does not matter: a new session is always written on
    /// its first append.
    pub fn with_options(root: impl Into<PathBuf>, options: LogOptions) -> PiJsonlStore {
        PiJsonlStore {
            root: root.into(),
            options,
            sessions: Mutex::default(),
        }
    }

    /// The sessions directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every session under the root, with the files that could not be listed.
    ///
    /// Reads only the first line of each `*.jsonl` file in each subdirectory of the root
    /// (at most [`HEADER_SCAN_LIMIT`] bytes), as Pi's session list does, and parses it
    /// with the strict header parser. A missing root lists nothing.
    pub fn scan(&self) -> Result<Listing> {
        let mut listing = Listing::default();
        let dirs = match std::fs::read_dir(&self.root) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(listing),
            Err(e) => return Err(e).ctx("listing", &self.root),
        };
        for dir in dirs {
            let dir = dir.ctx("listing", &self.root)?.path();
            // Pi's layout: session files live one level down; follow symlinked folders.
            if !dir.is_dir() {
                continue;
            }
            let files = match std::fs::read_dir(&dir) {
                Ok(f) => f,
                Err(e) => {
                    listing.problems.push(problem_io(&dir, e));
                    continue;
                }
            };
            for file in files {
                let path = match file {
                    Ok(f) => f.path(),
                    Err(e) => {
                        listing.problems.push(problem_io(&dir, e));
                        continue;
                    }
                };
                if path.extension().is_none_or(|x| x != "jsonl") {
                    continue;
                }
                // A FIFO, a device or a folder named `*.jsonl` is reported, never opened
                // (reading a FIFO would block, a link to /dev/zero would never end).
                match header::read_header(&path, HEADER_SCAN_LIMIT) {
                    Ok(header) => listing.sessions.push(ListedSession { header, path }),
                    Err(error) => listing.problems.push(ListProblem { path, error }),
                }
            }
        }
        listing.sessions.sort_by(|a, b| {
            (a.header.timestamp(), a.header.id(), &a.path).cmp(&(
                b.header.timestamp(),
                b.header.id(),
                &b.path,
            ))
        });
        listing.problems.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(listing)
    }

    fn slot(&self, session_id: &str) -> Arc<Mutex<Slot>> {
        lock(&self.sessions)
            .entry(session_id.to_owned())
            .or_insert_with(|| Arc::new(Mutex::new(Slot::Unopened)))
            .clone()
    }

    /// The file of a session that is not open: among the files Pi's naming points at
    /// (`…_<id>.jsonl`) first, then by reading every header.
    fn find(&self, session_id: &str) -> Result<PathBuf> {
        let suffix = format!("_{session_id}.jsonl");
        let named = |p: &Path| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(&suffix))
        };
        let mut by_name = Vec::new();
        if let Ok(dirs) = std::fs::read_dir(&self.root) {
            for dir in dirs.flatten() {
                let Ok(files) = std::fs::read_dir(dir.path()) else {
                    continue;
                };
                for file in files.flatten() {
                    let path = file.path();
                    if named(&path)
                        && header::read_header(&path, HEADER_SCAN_LIMIT)
                            .is_ok_and(|h| h.id() == session_id)
                    {
                        by_name.push(path);
                    }
                }
            }
        }
        if let [one] = by_name.as_slice() {
            return Ok(one.clone());
        }
        let listing = self.scan()?;
        let found: Vec<&ListedSession> = listing
            .sessions
            .iter()
            .filter(|s| s.header.id() == session_id)
            .collect();
        match found.as_slice() {
            [one] => Ok(one.path.clone()),
            [] => {
                // A file named for the session whose header cannot be read: say why.
                if let Some(p) = listing.problems.into_iter().find(|p| named(&p.path)) {
                    return Err(p.error);
                }
                Err(Error::SessionNotFound {
                    session_id: session_id.into(),
                    root: self.root.clone(),
                })
            }
            many => Err(Error::AmbiguousSession {
                session_id: session_id.into(),
                paths: many.iter().map(|s| s.path.clone()).collect(),
            }),
        }
    }

    /// Writes a new session's file with its first events, all or nothing, through the
    /// log's one durable-create routine ([`SessionLog::materialize`], on the file-system
    /// seam): the header and the events go to a hidden temporary file with a random name in
    /// the session's folder (one write, one sync), which is hard-linked to its final name
    /// (failing if that exists: a session that appeared meanwhile is never overwritten),
    /// removed, and the folder fsynced. Readers and Pi never see a session without its
    /// events.
    fn materialize(&self, header: &Header, entries: Vec<NewEntry>) -> Result<SessionLog> {
        let path = self.require_location(header)?;
        let mut log =
            SessionLog::in_memory(path, header.clone(), self.options.clone()).hold_in_memory();
        for entry in entries {
            log.append(entry)?;
        }
        log.materialize()?;
        Ok(log)
    }

    fn require_location(&self, header: &Header) -> Result<PathBuf> {
        self.locate(header).ok_or_else(|| Error::UnlocatableHeader {
            session_id: header.id().to_owned(),
        })
    }
}

impl SessionStore for PiJsonlStore {
    fn locate(&self, header: &Header) -> Option<PathBuf> {
        let cwd = header.cwd()?;
        let name = pi_session_file_name(header)?;
        Some(self.root.join(pi_session_dir_name(cwd)).join(name))
    }

    fn create(&self, header: Header) -> Result<()> {
        check_new_header(&header)?;
        let path = self.require_location(&header)?;
        let slot = self.slot(header.id());
        let mut slot = lock_slot(&slot);
        match &*slot {
            Slot::Unopened => {}
            Slot::Pending(_) => {
                return Err(Error::AlreadyCreated {
                    session_id: header.id().to_owned(),
                });
            }
            Slot::Open(log) => {
                return Err(Error::AlreadyExists {
                    path: log.path().to_path_buf(),
                });
            }
        }
        if path.exists() {
            return Err(Error::AlreadyExists { path });
        }
        *slot = Slot::Pending(header);
        Ok(())
    }

    fn append(&self, session_id: &str, first_seq: u64, events: &[Value]) -> Result<u64> {
        let entries = events
            .iter()
            .enumerate()
            .map(|(i, e)| to_new_entry(session_id, first_seq + i as u64, i, e))
            .collect::<Result<Vec<_>>>()?;
        let slot = self.slot(session_id);
        let mut slot = lock_slot(&slot);
        if let Slot::Pending(header) = &*slot {
            check_seq(session_id, 0, first_seq)?;
            if entries.is_empty() {
                return Ok(0);
            }
            let log = self.materialize(header, entries)?;
            let next = log.len() as u64;
            *slot = Slot::Open(Box::new(log));
            return Ok(next);
        }
        if let Slot::Unopened = &*slot {
            let path = self.find(session_id)?;
            *slot = Slot::Open(Box::new(self.options.open(&path)?));
        }
        let Slot::Open(log) = &mut *slot else {
            return Err(Error::NotMaterialized {
                session_id: session_id.into(),
            });
        };
        let result = append_to(log, session_id, first_seq, entries);
        if matches!(
            result,
            Err(Error::Io { .. } | Error::Poisoned { .. } | Error::ChangedOnDisk { .. })
        ) {
            // Reopen from disk next time: the reader shows what reached the disk.
            *slot = Slot::Unopened;
        }
        result
    }

    fn load(&self, session_id: &str) -> Result<Loaded> {
        let slot = self.slot(session_id);
        let slot = lock_slot(&slot);
        let path = match &*slot {
            Slot::Pending(_) => {
                return Err(Error::NotMaterialized {
                    session_id: session_id.into(),
                });
            }
            Slot::Open(log) => log.path().to_path_buf(),
            Slot::Unopened => self.find(session_id)?,
        };
        let mut log = self.options.open(&path)?;
        if log.session_id() != session_id {
            return Err(Error::ChangedOnDisk {
                path,
                detail: format!(
                    "the header names session {}, not {session_id}",
                    log.session_id()
                ),
            });
        }
        let closed_tool_calls = close_interrupted_turn(&mut log)?;
        Ok(Loaded::new(log, closed_tool_calls))
    }

    fn append_lines(&self, session_id: &str, first_seq: u64, lines: &[String]) -> Result<u64> {
        let facts = lines
            .iter()
            .enumerate()
            .map(|(i, l)| check_line(session_id, first_seq + i as u64, i, l))
            .collect::<Result<Vec<_>>>()?;
        let slot = self.slot(session_id);
        let mut slot = lock_slot(&slot);
        if let Slot::Pending(header) = &*slot {
            check_seq(session_id, 0, first_seq)?;
            check_ids(session_id, first_seq, &facts, |_| false)?;
            if lines.is_empty() {
                return Ok(0);
            }
            let path = self.require_location(header)?;
            let dir = reader::parent_dir(&path).to_path_buf();
            std::fs::create_dir_all(&dir).ctx("creating the directory", &dir)?;
            let mut bytes = header.to_line().into_bytes();
            for l in lines {
                bytes.extend_from_slice(l.as_bytes());
                bytes.push(b'\n');
            }
            // The one durable-create routine: all or nothing, never over an existing file.
            crate::log::io::create_durably(
                &crate::log::io::StdFileSystem,
                &path,
                "creating",
                crate::log::io::Place::Link,
                |tmp| tmp.write(&bytes),
            )
            .map_err(|f| f.error)?;
            let log = self.options.open(&path)?;
            let next = log.len() as u64;
            *slot = Slot::Open(Box::new(log));
            return Ok(next);
        }
        if let Slot::Unopened = &*slot {
            let path = self.find(session_id)?;
            *slot = Slot::Open(Box::new(self.options.open(&path)?));
        }
        let Slot::Open(log) = &mut *slot else {
            return Err(Error::NotMaterialized {
                session_id: session_id.into(),
            });
        };
        let result = append_lines_to(log, session_id, first_seq, lines, &facts);
        if result.is_err() {
            *slot = Slot::Unopened;
        }
        result
    }

    fn describe(&self) -> String {
        format!("pi-jsonl {}", self.root.display())
    }

    fn list(&self) -> Result<Vec<Header>> {
        let listing = self.scan()?;
        for p in &listing.problems {
            tracing::warn!(path = %p.path.display(), "not listed: {}", p.error);
        }
        Ok(listing.sessions.into_iter().map(|s| s.header).collect())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks a session's slot. A panic during an earlier operation leaves the in-memory log
/// in an unknown state, so the session is reopened from disk (a pending header is kept).
fn lock_slot(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => {
            let mut g = poisoned.into_inner();
            if let Slot::Open(_) = &*g {
                *g = Slot::Unopened;
            }
            m.clear_poison();
            g
        }
    }
}

fn check_seq(session_id: &str, next: u64, first_seq: u64) -> Result<()> {
    if first_seq == next {
        return Ok(());
    }
    Err(Error::SequenceMismatch {
        session_id: session_id.into(),
        expected: next,
        got: first_seq,
    })
}

fn append_to(
    log: &mut SessionLog,
    session_id: &str,
    first_seq: u64,
    entries: Vec<NewEntry>,
) -> Result<u64> {
    // Another writer may have appended since this store last looked.
    log.refresh()?;
    check_seq(session_id, log.len() as u64, first_seq)?;
    for entry in entries {
        log.append(entry)?;
    }
    Ok(log.len() as u64)
}

/// Appends complete lines to an open session file: one `write()` of the whole batch at
/// the length the log read, one `fdatasync`, then the log reads them back as a foreign
/// append.
fn append_lines_to(
    log: &mut SessionLog,
    session_id: &str,
    first_seq: u64,
    lines: &[String],
    facts: &[super::lines::LineFacts],
) -> Result<u64> {
    use std::io::Write;
    log.refresh()?;
    check_seq(session_id, log.len() as u64, first_seq)?;
    check_ids(session_id, first_seq, facts, |id| log.entry(id).is_some())?;
    if lines.is_empty() {
        return Ok(log.len() as u64);
    }
    let path = log.path().to_path_buf();
    if log.tail_bytes() != 0 {
        return Err(Error::ChangedOnDisk {
            path,
            detail: "the file ends in a torn record; append one entry through the log first, \
                     which closes it"
                .into(),
        });
    }
    let mut bytes = Vec::new();
    for l in lines {
        bytes.extend_from_slice(l.as_bytes());
        bytes.push(b'\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .ctx("opening", &path)?;
    let len = f.metadata().ctx("checking", &path)?.len();
    if len != log.consumed_bytes() {
        return Err(Error::ChangedOnDisk {
            path,
            detail: "it changed while appending".into(),
        });
    }
    f.write_all(&bytes).ctx("appending to", &path)?;
    // IMPORTANT: acknowledged only once on stable storage.
    f.sync_data().ctx("syncing", &path)?;
    log.refresh()?;
    Ok(log.len() as u64)
}

fn problem_io(path: &Path, source: std::io::Error) -> ListProblem {
    ListProblem {
        path: path.to_path_buf(),
        error: Error::Io {
            action: "listing",
            path: path.to_path_buf(),
            source,
        },
    }
}
