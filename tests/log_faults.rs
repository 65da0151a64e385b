//! Faults injected through the I/O seam: short writes, failed syncs, ENOSPC, at each phase
//! of an append, a create and a migration. Afterwards the writer is poisoned or the error
//! is returned, no partial line is visible, and the next open succeeds.
#![expect(clippy::unwrap_used)]

use serde_json::json;
use session_state::io::{AppendFile, FileIdentity, FileSystem, StdFileSystem};
use session_state::*;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// The next write writes only this many bytes.
    ShortWrite(usize),
    /// The next write fails with ENOSPC, writing nothing.
    NoSpace,
    /// The next sync_data fails (EIO).
    FailSync,
    /// The next directory sync fails.
    FailDirSync,
    /// The next rename fails.
    FailRename,
}

#[derive(Default)]
struct Faulty {
    fault: Mutex<Option<Fault>>,
    writes: AtomicU32,
    syncs: AtomicU32,
}

impl Faulty {
    fn arm(&self, f: Fault) {
        *self.fault.lock().unwrap() = Some(f);
    }
    fn take(&self, pred: impl Fn(Fault) -> bool) -> Option<Fault> {
        let mut g = self.fault.lock().unwrap();
        match *g {
            Some(f) if pred(f) => g.take(),
            _ => None,
        }
    }
}

struct FaultyFs(Arc<Faulty>);
struct FaultyFile {
    inner: Box<dyn AppendFile>,
    f: Arc<Faulty>,
}

impl AppendFile for FaultyFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.f.writes.fetch_add(1, Ordering::SeqCst);
        match self
            .f
            .take(|f| matches!(f, Fault::ShortWrite(_) | Fault::NoSpace))
        {
            Some(Fault::ShortWrite(n)) => self.inner.write(&buf[..n.min(buf.len())]),
            Some(Fault::NoSpace) => Err(io::Error::from_raw_os_error(28)),
            _ => self.inner.write(buf),
        }
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.f.syncs.fetch_add(1, Ordering::SeqCst);
        if self.f.take(|f| f == Fault::FailSync).is_some() {
            return Err(io::Error::from_raw_os_error(5));
        }
        self.inner.sync_data()
    }
    fn identity(&self) -> io::Result<FileIdentity> {
        self.inner.identity()
    }
    fn lock(&mut self, wait: std::time::Duration) -> io::Result<bool> {
        self.inner.lock(wait)
    }
    fn unlock(&mut self) -> io::Result<()> {
        self.inner.unlock()
    }
}

impl FileSystem for FaultyFs {
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        Ok(Box::new(FaultyFile {
            inner: StdFileSystem.open_append(path)?,
            f: self.0.clone(),
        }))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        Ok(Box::new(FaultyFile {
            inner: StdFileSystem.create_new(path)?,
            f: self.0.clone(),
        }))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.0.take(|f| f == Fault::FailDirSync).is_some() {
            return Err(io::Error::from_raw_os_error(5));
        }
        StdFileSystem.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if self.0.take(|f| f == Fault::FailRename).is_some() {
            return Err(io::Error::from_raw_os_error(28));
        }
        StdFileSystem.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        StdFileSystem.remove(path)
    }
    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFileSystem.link(from, to)
    }
}

fn user(text: &str) -> NewEntry {
    NewEntry::message(json!({"role": "user", "content": text}))
}

/// A materialized session with three entries, opened through the faulty file system.
fn session(dir: &Path) -> (SessionLog, Arc<Faulty>, Vec<String>) {
    let mut log = LogOptions::new()
        .materialize(Materialize::FirstAppend)
        .create(dir, "/proj")
        .unwrap();
    let ids: Vec<String> = (0..3)
        .map(|i| log.append(user(&format!("m{i}"))).unwrap())
        .collect();
    let faulty = Arc::new(Faulty::default());
    let log = LogOptions::new()
        .file_system(Arc::new(FaultyFs(faulty.clone())))
        .open(log.path())
        .unwrap();
    (log, faulty, ids)
}

fn reopen_ids(path: &Path) -> (Vec<String>, Vec<Finding>) {
    let log = SessionLog::open(path).unwrap();
    (
        log.entries().map(|e| e.id().to_owned()).collect(),
        log.findings(),
    )
}

#[test]
fn failed_sync_poisons_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, faulty, ids) = session(dir.path());
    faulty.arm(Fault::FailSync);
    let err = log.append(user("lost?")).unwrap_err();
    assert!(matches!(err, AppendError::Poisoned { .. }), "{err}");
    assert!(err.to_string().contains("fdatasync failed"), "{err}");
    // No retry after a failed fsync: every later append is refused.
    let again = log.append(user("after")).unwrap_err();
    assert!(matches!(again, AppendError::Poisoned { .. }), "{again}");
    // The in-memory log did not take the unacknowledged entry.
    assert_eq!(log.len(), 3);
    // A fresh strict reader sees only complete lines; the in-doubt line was written whole
    // (only its sync failed), so it may be there, but nothing partial is.
    let (after, findings) = reopen_ids(log.path());
    assert_eq!(&after[..3], &ids[..]);
    assert!(after.len() <= 4);
    assert!(findings.is_empty(), "{findings:?}");
}

#[test]
fn short_write_leaves_only_an_invisible_tail_and_next_writer_closes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, faulty, ids) = session(dir.path());
    faulty.arm(Fault::ShortWrite(17));
    let err = log.append(user("torn")).unwrap_err();
    assert!(err.to_string().contains("short write: 17 of"), "{err}");
    assert!(matches!(
        log.append(user("x")).unwrap_err(),
        AppendError::Poisoned { .. }
    ));
    let path = log.path().to_path_buf();
    let (after, findings) = reopen_ids(&path);
    assert_eq!(after, ids, "a partial line must not be visible");
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].kind, FindingKind::TornTail);
    // The next writer closes the torn tail with a newline before appending: the torn
    // bytes stay as a torn record, and the two records never fuse.
    let mut log2 = SessionLog::open(&path).unwrap();
    let id = log2.append(user("next")).unwrap();
    let (after, findings) = reopen_ids(&path);
    assert_eq!(after.len(), 4);
    assert_eq!(after[3], id);
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].kind, FindingKind::TornRecord);
    assert_eq!(findings[0].at.line, 5);
}

#[test]
fn enospc_on_append_returns_the_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, faulty, ids) = session(dir.path());
    let before = std::fs::metadata(log.path()).unwrap().len();
    faulty.arm(Fault::NoSpace);
    let err = log.append(user("full")).unwrap_err();
    assert!(err.to_string().contains("write failed"), "{err}");
    assert_eq!(std::fs::metadata(log.path()).unwrap().len(), before);
    assert_eq!(reopen_ids(log.path()).0, ids);
}

#[test]
fn faults_while_creating_a_session() {
    for fault in [
        Fault::ShortWrite(10),
        Fault::NoSpace,
        Fault::FailSync,
        Fault::FailDirSync,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let faulty = Arc::new(Faulty::default());
        let mut log = LogOptions::new()
            .file_system(Arc::new(FaultyFs(faulty.clone())))
            .materialize(Materialize::FirstAppend)
            .create(dir.path(), "/proj")
            .unwrap();
        faulty.arm(fault);
        let err = log.append(user("first")).unwrap_err();
        assert!(!err.to_string().is_empty());
        // The half-made file is never appended to again through this log.
        let again = log.append(user("second")).unwrap_err();
        assert!(
            matches!(again, AppendError::Poisoned { .. }),
            "{fault:?}: {again}"
        );
        // Whatever reached the disk, no reader sees a partial line: either the file
        // has no complete header yet (refused as not a session), or it reads cleanly.
        let path = log.path().to_path_buf();
        if path.exists() {
            match SessionLog::open(&path) {
                Ok(l) => assert!(l.len() <= 1, "{fault:?}"),
                Err(OpenError::Invalid(InvalidLog::MissingHeader { .. })) => {
                    assert!(
                        matches!(fault, Fault::ShortWrite(_) | Fault::NoSpace),
                        "{fault:?}"
                    )
                }
                Err(e) => panic!("{fault:?}: {e}"),
            }
        }
    }
}

#[test]
fn faults_while_migrating_leave_the_original_intact() {
    let v2 = concat!(
        r#"{"type":"session","version":2,"id":"s-v2","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
        "\n",
        r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi"}}"#,
        "\n",
        r#"{"type":"message","id":"a2","parentId":"a1","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"hookMessage","content":"x"}}"#,
        "\n",
    );
    for fault in [
        Fault::ShortWrite(5),
        Fault::NoSpace,
        Fault::FailSync,
        Fault::FailRename,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, v2).unwrap();
        let faulty = Arc::new(Faulty::default());
        let mut log = LogOptions::new()
            .file_system(Arc::new(FaultyFs(faulty.clone())))
            .open(&path)
            .unwrap();
        faulty.arm(fault);
        let err = log.append(user("x"));
        assert!(err.is_err(), "{fault:?}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), v2, "{fault:?}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "{fault:?}: temporary file left behind");
        // The next open (without faults) migrates and appends.
        let mut log = SessionLog::open(&path).unwrap();
        log.append(user("y")).unwrap();
        let log = SessionLog::open(&path).unwrap();
        assert_eq!(log.header().version(), 3);
        assert_eq!(log.len(), 3);
    }
}

/// a line whose content must change in the migration (a v1 compaction's
/// `firstKeptEntryIndex`, a `hookMessage` role) but that serde_json's `Value` cannot hold
/// is refused before the file is touched, with the file and line named.
#[test]
fn a_migration_that_cannot_transform_a_line_refuses_before_touching_the_file() {
    // Deeper than any JSON reader of this crate goes: a line that must change but cannot be
    // parsed. (Lone surrogates and 200 levels are read and migrated: see
    // `a_line_that_must_change_keeps_its_lone_surrogates_through_migration`.)
    let deep = format!(
        "{}{}",
        "[".repeat(session_state::json::MAX_READ_DEPTH + 10),
        "]".repeat(session_state::json::MAX_READ_DEPTH + 10)
    );
    let cases = [
        (
            "v1 compaction",
            [
                r#"{"type":"session","id":"s-v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#.to_owned(),
                r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi"}}"#.to_owned(),
                format!(r#"{{"type":"compaction","timestamp":"2025-01-01T00:00:02.000Z","summary":"cut \ud83d","details":{deep},"firstKeptEntryIndex":1,"tokensBefore":5}}"#),
            ]
            .join("\n")
                + "\n",
        ),
        (
            "v2 hookMessage",
            [
                r#"{"type":"session","version":2,"id":"s-v2","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#.to_owned(),
                r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi"}}"#.to_owned(),
                format!(
                    r#"{{"type":"message","id":"a2","parentId":"a1","timestamp":"2025-01-01T00:00:02.000Z","message":{{"role":"hookMessage","content":{deep}}}}}"#
                ),
            ]
            .join("\n")
                + "\n",
        ),
    ];
    for (what, text) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, &text).unwrap();
        let mut log = SessionLog::open(&path).unwrap();
        let err = log.append(user("x")).unwrap_err();
        match &err {
            AppendError::MigrationRefused { path: p, at, .. } => {
                assert_eq!(p, &path, "{what}");
                assert_eq!(at.line, 3, "{what}: {err}");
            }
            e => panic!("{what}: {e}"),
        }
        assert!(err.to_string().contains("not changed"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{what}");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{what}: temporary file left behind");
    }
}

/// a line that migration must rewrite (a v1 compaction's
/// `firstKeptEntryIndex`, a v2 `hookMessage`) keeps its lone surrogates and its deep nesting
/// byte for byte, through the lossless codec.
#[test]
fn a_line_that_must_change_keeps_its_lone_surrogates_through_migration() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let compaction = format!(
        r#"{{"type":"compaction","timestamp":"2025-01-01T00:00:02.000Z","summary":"cut \udc00","details":{deep},"firstKeptEntryIndex":1,"tokensBefore":5}}"#
    );
    let text = format!(
        "{}\n{}\n{compaction}\n",
        r#"{"type":"session","id":"s-v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"hookMessage","content":"cut \ud83d here"}}"#,
    );
    std::fs::write(&path, &text).unwrap();
    let mut log = SessionLog::open(&path).unwrap();
    log.append(user("x")).unwrap();
    let after = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = after.lines().collect();
    assert_eq!(lines.len(), 4, "{after}");
    assert!(lines[0].contains(r#""version":3"#), "{}", lines[0]);
    assert!(
        lines[1].contains(r#""content":"cut \ud83d here""#),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains(r#""role":"custom""#), "{}", lines[1]);
    assert!(
        lines[2].contains(r#""summary":"cut \udc00""#),
        "{}",
        lines[2]
    );
    assert!(lines[2].contains(&deep), "the nesting is kept");
    let first = SessionLog::open(&path).unwrap();
    let ids: Vec<&str> = first.entries().map(|e| e.id()).collect();
    assert_eq!(ids.len(), 3);
    assert!(
        lines[2].contains(&format!(r#""firstKeptEntryId":"{}""#, ids[0])),
        "{}",
        lines[2]
    );
}

/// a writer that will refuse
/// a file refuses before it writes a byte, whether the bad line is the last complete
/// line or a tail the closing newline would turn into one, and before a migration.
#[test]
fn a_refusing_writer_leaves_the_file_as_it_found_it() {
    let v3 = concat!(
        r#"{"type":"session","version":3,"id":"s3","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
        "\n",
        r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi"}}"#,
        "\n",
    );
    let v2 = v3.replace(r#""version":3"#, r#""version":2"#);
    for (name, base) in [("v3", v3.to_owned()), ("v2", v2)] {
        for (bad, what) in [
            (&b"{\"type\":\"x\"}}garbage"[..], "an unparsable tail"),
            (
                &b"{\"type\":\"x\"}}garbage\n"[..],
                "an unparsable last line",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.jsonl");
            let bytes = [base.as_bytes(), bad].concat();
            std::fs::write(&path, &bytes).unwrap();
            let mut log = SessionLog::open(&path).unwrap();
            let err = log.append(user("x")).unwrap_err();
            assert!(
                matches!(err, AppendError::TrailingGarbage { at, .. } if at.line == 3),
                "{name} {what}: {err}"
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                bytes,
                "{name} {what}: file changed"
            );
        }
    }
}

/// A file system whose `create_new` (the migration's temporary file) first shrinks the
/// session file, as if another program truncated it mid-migration.
struct ShrinkingFs(std::path::PathBuf);

impl FileSystem for ShrinkingFs {
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        StdFileSystem.open_append(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        let f = std::fs::OpenOptions::new().write(true).open(&self.0)?;
        f.set_len(f.metadata()?.len() / 2)?;
        StdFileSystem.create_new(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdFileSystem.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFileSystem.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        StdFileSystem.remove(path)
    }
    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFileSystem.link(from, to)
    }
}

/// a file that shrinks while it is migrated is an error (never a panic,
/// never a migrated copy of the wrong bytes), and the shrunk file is not replaced.
#[test]
fn a_file_that_shrinks_during_migration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let text = format!(
        "{}\n{}\n{}\n{}",
        r#"{"type":"session","id":"s-v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"one"}}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"user","content":"two"}}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:03.000Z","mess"#,
    );
    std::fs::write(&path, &text).unwrap();
    let mut log = LogOptions::new()
        .file_system(Arc::new(ShrinkingFs(path.clone())))
        .open(&path)
        .unwrap();
    let err = log.append(user("x")).unwrap_err();
    assert!(
        matches!(
            err,
            AppendError::ChangedOnDisk { .. } | AppendError::MigrationRefused { .. }
        ),
        "{err}"
    );
    let after = std::fs::read(&path).unwrap();
    assert_eq!(after, &text.as_bytes()[..text.len() / 2], "not replaced");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "temporary file left behind");
}
