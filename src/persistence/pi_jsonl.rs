//! [`PiJsonlStore`], the Pi JSONL backend of [`SessionStore`]: Pi 1.x's session
//! directory layout, one file per session, read through [`SessionLog`] and written by
//! the log's durable routines.

use super::lines::line_id;
use super::pi_names::{pi_session_dir_name, pi_session_file_name};
use super::{LineVisitor, ListProblem, ListedSession, Listing, SessionStore};
use crate::error::{
    AppendError, IoContext, IoFailure, Location, LogResult, OpenError, RuleError, StoreError,
};
use crate::log::entry::Header;
use crate::log::header::{parse_header, read_header_line};
use crate::log::io::{Place, create_durably};
use crate::log::reader::{self, FindingKind, ReadMode};
use crate::log::writer::append_if_unchanged;
use crate::sync::lock;
use crate::tree::{LogOptions, SessionLog};
use std::collections::HashMap;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The Pi JSONL backend of [`SessionStore`]: one file per session under Pi's sessions
/// directory, `<root>/--<cwd>--/<timestamp>_<id>.jsonl` (Pi's folder name for the
/// `cwd`, see [`PiJsonlStore::locate`]).
///
/// - `create` writes the whole file through the log's one durable-create routine
///   (temporary file, one write, `fdatasync`, a hard link that never replaces a file,
///   the folder fsynced).
/// - `read_lines` reads a session's entries through the log's strict reader
///   ([`SessionLog`]), so sequence numbers are entries in file order (blank lines and
///   torn records are not entries); the store keeps each session it touched open and
///   reads only what was appended since.
/// - `append_lines` checks the file's length first and reads a foreign tail, refuses a
///   file whose last complete line does not parse, closes a torn tail with `\n`, then
///   writes the lines with one `write()` and one `fdatasync`.
///
/// It does not take the write lock of the state layer: a host that owns its sessions
/// through the store is their only writer, and each append still checks the file's
/// length and reads a foreign tail first. A file of format version 1 or 2 is read, not
/// appended to (open it once with [`SessionLog`], whose first append migrates it).
#[derive(Debug)]
pub struct PiJsonlStore {
    root: PathBuf,
    options: LogOptions,
    sessions: Mutex<HashMap<String, Arc<Mutex<Option<SessionLog>>>>>,
}

impl PiJsonlStore {
    /// A store on `root`, the agent's sessions directory (Pi's default is
    /// `~/.pi/agent/sessions`). Nothing is read or created until needed.
    pub fn new(root: impl Into<PathBuf>) -> PiJsonlStore {
        PiJsonlStore::with_options(root, LogOptions::new())
    }

    /// A store that reads session files with `options` (its file-system seam is the
    /// one every write goes through). Reads are always strict.
    pub fn with_options(root: impl Into<PathBuf>, options: LogOptions) -> PiJsonlStore {
        PiJsonlStore {
            root: root.into(),
            options: options.mode(ReadMode::Strict),
            sessions: Mutex::default(),
        }
    }

    /// The sessions directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the session of `header` lives, computed from the header alone (no I/O).
    /// `None` for a header that cannot name a file (no `cwd` or `timestamp`, or a path
    /// separator in the id).
    pub fn locate(&self, header: &Header) -> Option<PathBuf> {
        let cwd = header.cwd()?;
        let name = pi_session_file_name(header)?;
        Some(self.root.join(pi_session_dir_name(cwd)).join(name))
    }

    /// The file of a stored session: among the files Pi's naming points at
    /// (`…_<id>.jsonl`) first, then by reading every header.
    pub fn file_of(&self, session_id: &str) -> Result<PathBuf, StoreError> {
        if let Some(log) = lock_slot(&self.slot(session_id)).as_ref() {
            return Ok(log.path().to_path_buf());
        }
        self.find(session_id)
    }

    /// Every session under the root, with the files that could not be listed.
    ///
    /// Reads only the first line (at most [`crate::format::MAX_HEADER_LINE`] bytes, Pi 1.x's
    /// `MAX_SESSION_HEADER_SCAN_BYTES`) of each file
    /// of the walk of the root and its folders finds (Pi's layout: `*.jsonl`, one level
    /// down), with the strict header parser. A missing root lists
    /// nothing.
    pub fn scan(&self) -> Result<Listing, OpenError> {
        let mut listing = Listing::default();
        let files = match session_files(&self.root) {
            Ok(f) => f,
            Err(OpenError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(listing);
            }
            Err(e) => return Err(e),
        };
        for file in files {
            let path = match file {
                Ok(path) => path,
                Err(problem) => {
                    listing.problems.push(problem);
                    continue;
                }
            };
            match header_of(&path) {
                Ok((header, header_line)) => listing.sessions.push(ListedSession {
                    header,
                    header_line,
                    path,
                }),
                Err(error) => listing.problems.push(ListProblem { path, error }),
            }
        }
        listing.sessions.sort_by(|a, b| {
            (a.header.timestamp(), a.header.id(), &a.path).cmp(&(
                b.header.timestamp(),
                b.header.id(),
                &b.path,
            ))
        });
        Ok(listing)
    }

    fn slot(&self, session_id: &str) -> Arc<Mutex<Option<SessionLog>>> {
        lock(&self.sessions)
            .entry(session_id.to_owned())
            .or_default()
            .clone()
    }

    fn not_found(&self, session_id: &str) -> StoreError {
        StoreError::NotFound {
            store: self.describe(),
            session_id: session_id.into(),
        }
    }

    /// The file of a session that is not open: among the files Pi's naming points at
    /// (`…_<id>.jsonl`) first, then by reading every header.
    fn find(&self, session_id: &str) -> Result<PathBuf, StoreError> {
        let suffix = format!("_{session_id}.jsonl");
        let named = |p: &Path| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(&suffix))
        };
        let by_name: Vec<PathBuf> = session_files(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|p| named(p) && header_of(p).is_ok_and(|(h, _)| h.id() == session_id))
            .collect();
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
                    return Err(p.error.into());
                }
                Err(self.not_found(session_id))
            }
            many => Err(StoreError::Ambiguous {
                session_id: session_id.into(),
                paths: many.iter().map(|s| s.path.clone()).collect(),
            }),
        }
    }

    /// Runs `f` on the session's open log, opened (or followed: what others appended is
    /// read) first. A log that fails is dropped: the next call reopens the file, so the
    /// reader shows what reached the disk.
    fn with_log<T>(
        &self,
        session_id: &str,
        f: impl FnOnce(&mut SessionLog) -> LogResult<T>,
    ) -> Result<T, StoreError> {
        let slot = self.slot(session_id);
        let mut slot = lock_slot(&slot);
        let fresh = match slot.take() {
            Some(mut log) => match log.refresh() {
                Ok(()) => log,
                // Replaced or shrunk: read it again.
                Err(_) => self.options.open(log.path())?,
            },
            None => {
                let path = self.find(session_id)?;
                let log = self.options.open(&path)?;
                if log.session_id() != session_id {
                    return Err(AppendError::ChangedOnDisk {
                        path,
                        detail: format!(
                            "the header names session {}, not {session_id}",
                            log.session_id()
                        ),
                    }
                    .into());
                }
                log
            }
        };
        let log = slot.insert(fresh);
        match f(log) {
            Ok(v) => Ok(v),
            Err(e) => {
                *slot = None;
                Err(e.into())
            }
        }
    }
}

/// The `*.jsonl` files where Pi keeps sessions under `dir`, in path order: those in `dir`
/// itself and those in each of its folders, one level down (Pi's layout is
/// `<sessions>/<cwd folder>/<file>.jsonl`, so `dir` may be the sessions directory or one
/// cwd's folder). Symlinked folders and files are followed; deeper folders are not
/// entered. The one walk behind [`PiJsonlStore::scan`] and the CLI's `list` and `replay
/// DIR`.
///
/// Nothing is opened: a `*.jsonl` that is not a regular file (a FIFO, a device, a folder,
/// a dangling link) and a folder that cannot be read are [`ListProblem`]s in their place,
/// so a walk never blocks. A `dir` that cannot be read is the error.
pub fn session_files(dir: &Path) -> Result<Vec<Result<PathBuf, ListProblem>>, OpenError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).ctx("listing", dir)? {
        let path = match entry {
            Ok(e) => e.path(),
            Err(e) => {
                out.push(Err(problem_io(dir, e)));
                continue;
            }
        };
        if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
            let files = match std::fs::read_dir(&path) {
                Ok(f) => f,
                Err(e) => {
                    out.push(Err(problem_io(&path, e)));
                    continue;
                }
            };
            for file in files {
                match file {
                    Ok(f) if is_jsonl(&f.path()) => push_regular(&mut out, f.path()),
                    Ok(_) => {}
                    Err(e) => out.push(Err(problem_io(&path, e))),
                }
            }
        } else if is_jsonl(&path) {
            push_regular(&mut out, path);
        }
    }
    out.sort_by(|a, b| {
        let path = |r: &std::result::Result<PathBuf, ListProblem>| match r {
            Ok(p) => p.clone(),
            Err(p) => p.path.clone(),
        };
        path(a).cmp(&path(b))
    });
    Ok(out)
}

fn is_jsonl(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "jsonl")
}

/// Adds `path` when it is (or links to) a regular file, else why not; never opened.
fn push_regular(out: &mut Vec<std::result::Result<PathBuf, ListProblem>>, path: PathBuf) {
    let error = match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => return out.push(Ok(path)),
        Ok(m) => OpenError::NotARegularFile {
            path: path.clone(),
            kind: reader::file_kind(&m.file_type()).into(),
        },
        Err(e) => IoFailure::new("opening", &path, e).into(),
    };
    out.push(Err(ListProblem { path, error }));
}

/// Line 1 of a file, parsed by the strict header parser, with its text.
fn header_of(path: &Path) -> Result<(Header, String), OpenError> {
    let line = read_header_line(path, reader::MAX_HEADER_LINE)?;
    let header = parse_header(path, &line, ReadMode::Strict)?;
    // The parser read it as UTF-8.
    Ok((header, String::from_utf8_lossy(&line).into_owned()))
}

impl SessionStore for PiJsonlStore {
    fn create(
        &self,
        header: &Header,
        header_line: &str,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        let Some(path) = self.locate(header) else {
            return Err(RuleError::UnlocatableHeader {
                session_id: header.id().to_owned(),
            }
            .into());
        };
        let slot = self.slot(header.id());
        let mut slot = lock_slot(&slot);
        let dir = reader::parent_dir(&path).to_path_buf();
        std::fs::create_dir_all(&dir).ctx("creating the directory", &dir)?;
        let mut bytes = Vec::with_capacity(header_line.len() + 1);
        bytes.extend_from_slice(header_line.as_bytes());
        bytes.push(b'\n');
        for l in lines {
            bytes.extend_from_slice(l.as_bytes());
            bytes.push(b'\n');
        }
        // IMPORTANT: the one durable-create routine: all or nothing, never over a file.
        let fs = self.options.file_system_ref();
        match create_durably(&**fs, &path, "creating", Place::Link, |tmp| {
            tmp.write(&bytes)
        }) {
            Ok(()) => {}
            Err(f) if matches!(f.error, AppendError::AlreadyExists { .. }) => {
                return Err(StoreError::AlreadyExists {
                    store: self.describe(),
                    session_id: header.id().to_owned(),
                });
            }
            Err(f) => return Err(f.error.into()),
        }
        let log = self.options.open(&path)?;
        let next = log.len() as u64;
        *slot = Some(log);
        Ok(next)
    }

    fn list(&self) -> Result<Vec<(String, String)>, StoreError> {
        let listing = self.scan()?;
        for p in &listing.problems {
            tracing::warn!(path = %p.path.display(), "not listed: {}", p.error);
        }
        Ok(listing
            .sessions
            .into_iter()
            .map(|s| (s.header.id().to_owned(), s.header_line))
            .collect())
    }

    fn header_line(&self, session_id: &str) -> Result<String, StoreError> {
        let path = self.file_of(session_id)?;
        Ok(header_of(&path)?.1)
    }

    fn read_lines(
        &self,
        session_id: &str,
        from_seq: u64,
        visit: &mut LineVisitor<'_>,
    ) -> Result<u64, StoreError> {
        self.with_log(session_id, |log| {
            let next = log.len() as u64;
            if from_seq >= next {
                return Ok(next);
            }
            let path = log.path().to_path_buf();
            let mut src = BufReader::with_capacity(1 << 20, reader::open_regular(&path)?);
            let mut pos = 0u64;
            let mut buf = Vec::new();
            for (seq, entry) in log.entries().enumerate().skip(from_seq as usize) {
                let (offset, len) = (entry.location().offset, entry.line_len() - 1);
                if pos != offset {
                    src.seek(SeekFrom::Start(offset)).ctx("reading", &path)?;
                }
                buf.resize(len as usize, 0);
                src.read_exact(&mut buf).ctx("reading", &path)?;
                pos = offset + len;
                let line = String::from_utf8_lossy(&buf);
                if visit(seq as u64, &line).is_break() {
                    break;
                }
            }
            Ok(next)
        })
    }

    fn append_lines(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        let mut refused: Option<StoreError> = None;
        let r = self.with_log(session_id, |log| {
            let next = log.len() as u64;
            if let Err(e) = StoreError::check_next(session_id, next, first_seq) {
                refused = Some(e);
                return Ok(next);
            }
            if let Some(id) = lines
                .iter()
                .filter_map(|l| line_id(l))
                .find(|id| log.entry(id).is_some() || id == session_id)
            {
                refused = Some(StoreError::IdTaken {
                    session_id: session_id.into(),
                    id,
                });
                return Ok(next);
            }
            if lines.is_empty() {
                return Ok(next);
            }
            append_to_file(log, &self.options, lines)
        })?;
        match refused {
            Some(e) => Err(e),
            None => Ok(r),
        }
    }

    fn describe(&self) -> String {
        format!("pi-jsonl {}", self.root.display())
    }
}

/// Appends complete lines to an open session file: the rules of the log's writer (check
/// the length, refuse a last line that does not parse, close a torn tail), then one
/// `write()` of the batch at the length the log read and one `fdatasync`, then the log
/// reads them back.
fn append_to_file(log: &mut SessionLog, options: &LogOptions, lines: &[String]) -> LogResult<u64> {
    let path = log.path().to_path_buf();
    if log.header().version() != 3 {
        return Err(RuleError::UnsupportedNewVersion {
            session_id: log.session_id().to_owned(),
            version: log.header().version(),
        }
        .into());
    }
    // Decide before touching the file: a last complete line that does not parse would
    // turn into corruption in the middle of the file.
    if let Some(f) = log
        .findings()
        .into_iter()
        .find(|f| f.kind == FindingKind::UnparsableFinalLine)
    {
        return Err(AppendError::TrailingGarbage {
            path,
            at: f.at,
            detail: f.message,
        }
        .into());
    }
    if log.tail_bytes() != 0 {
        let mut f = reader::open_regular(&path)?;
        f.seek(SeekFrom::Start(log.consumed_bytes()))
            .ctx("reading", &path)?;
        let mut tail = Vec::new();
        f.take(log.tail_bytes())
            .read_to_end(&mut tail)
            .ctx("reading", &path)?;
        // Bytes a newline would turn into a corrupt line (not a torn record) are refused.
        if let reader::LineClass::Bad(detail) | reader::LineClass::Invalid(detail) =
            reader::classify(&tail)
        {
            return Err(AppendError::TrailingGarbage {
                path,
                at: Location {
                    line: 0,
                    offset: log.consumed_bytes(),
                },
                detail,
            }
            .into());
        }
    }
    let mut bytes = Vec::new();
    if log.tail_bytes() != 0 {
        // Close the torn tail so two records can never fuse; its bytes stay a torn
        // record that readers skip and report.
        bytes.push(b'\n');
    }
    for l in lines {
        bytes.extend_from_slice(l.as_bytes());
        bytes.push(b'\n');
    }
    let meta = crate::log::io::Meta::of_path(&path).ctx("checking", &path)?;
    let len = log.consumed_bytes() + log.tail_bytes();
    let fs = options.file_system_ref();
    // IMPORTANT: one write() and one fdatasync before the append is acknowledged.
    if !append_if_unchanged(
        &**fs,
        &path,
        meta.identity(),
        len,
        &bytes,
        "appending stored lines to",
    )? {
        return Err(AppendError::ChangedOnDisk {
            path,
            detail: "it changed while appending".into(),
        }
        .into());
    }
    log.refresh()?;
    Ok(log.len() as u64)
}

/// Locks a session's slot. A panic during an earlier operation leaves the in-memory log
/// in an unknown state, so the session is reopened from disk.
fn lock_slot(m: &Mutex<Option<SessionLog>>) -> MutexGuard<'_, Option<SessionLog>> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => {
            let mut g = poisoned.into_inner();
            *g = None;
            m.clear_poison();
            g
        }
    }
}

fn problem_io(path: &Path, source: std::io::Error) -> ListProblem {
    ListProblem {
        path: path.to_path_buf(),
        error: IoFailure::new("listing", path, source).into(),
    }
}
