//! Faults at every phase of an append, a create and a migration, found by enumeration
//! rather than picked by hand (after redb's crash tests): each scenario runs once on a
//! recording file system to list its seam calls, then once per call N and per fault that
//! call can suffer (ENOSPC, a short write of 0 bytes / half / all but the newline, EIO from
//! a sync, a rename, a link, an open, a stat; or a crash: call N and every later one fail).
//!
//! After every faulty run:
//! - every call that returned `Ok` had made its bytes and its file name durable first
//!   (the model below tracks what `sync_data` and `sync_dir` covered);
//! - after a failed write or sync the writer refuses further appends (poisoned);
//! - the file as left on disk (a process crash) and the file cut back to its durable
//!   length (a power loss) both load strictly, with no partial line visible and every
//!   acknowledged entry present; at most one unacknowledged entry is there (the one in
//!   doubt); no byte that was in the file before is gone;
//! - no temporary file of a migration is left behind (except by a crash);
//! - the next open succeeds and the next append works.
//!
//! In a clean run, every write to an existing session file happens under its advisory
//! lock, taken before its length is checked (`docs/lock.md`, "The one lock").
//!
//! `tests/log_faults.rs` holds the hand-picked cases; this file enumerates.
#![expect(clippy::unwrap_used)]

use crate::common;
use serde_json::{Value, json};
use session_state::io::{AppendFile, FileIdentity, FileSystem, StdFileSystem};
use session_state::*;
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A seam call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    OpenAppend,
    CreateNew,
    SyncDir,
    Rename,
    Link,
    Remove,
    Len,
    Write,
    SyncData,
    Identity,
    Lock,
    Unlock,
}

/// What happens to the call that is failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The write fails with ENOSPC, writing nothing.
    NoSpace,
    /// The call fails with EIO (a failed sync, open, stat, rename...).
    Eio,
    /// The write returns `Ok(0)`.
    ShortNone,
    /// The write writes half of the buffer.
    ShortHalf,
    /// The write writes all but the last byte (for a line: all but its newline).
    ShortAllButOne,
    /// The process dies here: this call and every later one fail with EIO.
    Crash,
}

fn faults_for(call: Call) -> &'static [Fault] {
    match call {
        Call::Write => &[
            Fault::NoSpace,
            Fault::ShortNone,
            Fault::ShortHalf,
            Fault::ShortAllButOne,
            Fault::Crash,
        ],
        Call::CreateNew => &[Fault::NoSpace, Fault::Crash],
        _ => &[Fault::Eio, Fault::Crash],
    }
}

/// Records calls, injects the fault, and models what is durable: the synced length of
/// each file, and which names a directory fsync has not covered yet.
#[derive(Default)]
struct Seam {
    calls: AtomicUsize,
    /// Each call, and whether it was on a migration's temporary file.
    trace: Mutex<Vec<(Call, bool)>>,
    fail: Option<(usize, Fault)>,
    model: Mutex<Model>,
}

#[derive(Default, Debug)]
struct Model {
    /// Durable length per path (bytes a power loss keeps).
    durable: HashMap<PathBuf, u64>,
    /// Names created or renamed into place whose directory was not fsynced since.
    pending_names: HashSet<PathBuf>,
}

enum Verdict {
    Pass,
    Fail(Fault),
}

impl Seam {
    fn new(fail: Option<(usize, Fault)>) -> Arc<Seam> {
        Arc::new(Seam {
            fail,
            ..Seam::default()
        })
    }

    fn enter(&self, call: Call, path: Option<&Path>) -> Verdict {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let temp = path.is_some_and(is_temp);
        self.trace.lock().unwrap().push((call, temp));
        match self.fail {
            Some((at, Fault::Crash)) if n >= at => Verdict::Fail(Fault::Crash),
            Some((at, f)) if n == at => Verdict::Fail(f),
            _ => Verdict::Pass,
        }
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }
}

fn is_temp(path: &Path) -> bool {
    path.to_string_lossy().contains(".migrating-")
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

struct SeamFs(Arc<Seam>);

struct SeamFile {
    inner: Box<dyn AppendFile>,
    path: PathBuf,
    seam: Arc<Seam>,
}

impl AppendFile for SeamFile {
    fn len(&self) -> io::Result<u64> {
        match self.seam.enter(Call::Len, Some(&self.path)) {
            Verdict::Pass => self.inner.len(),
            Verdict::Fail(_) => Err(eio()),
        }
    }
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let part = match self.seam.enter(Call::Write, Some(&self.path)) {
            Verdict::Pass => buf.len(),
            Verdict::Fail(Fault::NoSpace) => return Err(enospc()),
            Verdict::Fail(Fault::ShortNone) => return Ok(0),
            Verdict::Fail(Fault::ShortHalf) => buf.len() / 2,
            Verdict::Fail(Fault::ShortAllButOne) => buf.len().saturating_sub(1),
            Verdict::Fail(_) => return Err(eio()),
        };
        self.inner.write(&buf[..part])
    }
    fn sync_data(&mut self) -> io::Result<()> {
        match self.seam.enter(Call::SyncData, Some(&self.path)) {
            Verdict::Pass => {
                self.inner.sync_data()?;
                let len = self.inner.len()?;
                self.seam.model().durable.insert(self.path.clone(), len);
                Ok(())
            }
            Verdict::Fail(_) => Err(eio()),
        }
    }
    fn identity(&self) -> io::Result<FileIdentity> {
        match self.seam.enter(Call::Identity, Some(&self.path)) {
            Verdict::Pass => self.inner.identity(),
            Verdict::Fail(_) => Err(eio()),
        }
    }
    fn lock(&mut self, wait: std::time::Duration) -> io::Result<bool> {
        match self.seam.enter(Call::Lock, Some(&self.path)) {
            Verdict::Pass => self.inner.lock(wait),
            Verdict::Fail(_) => Err(eio()),
        }
    }
    fn unlock(&mut self) -> io::Result<()> {
        match self.seam.enter(Call::Unlock, Some(&self.path)) {
            Verdict::Pass => self.inner.unlock(),
            Verdict::Fail(_) => Err(eio()),
        }
    }
}

impl FileSystem for SeamFs {
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        if let Verdict::Fail(_) = self.0.enter(Call::OpenAppend, Some(path)) {
            return Err(eio());
        }
        let inner = StdFileSystem.open_append(path)?;
        // A file this seam did not write was made durable by the test's setup.
        let len = inner.len()?;
        self.0.model().durable.entry(path.into()).or_insert(len);
        Ok(Box::new(SeamFile {
            inner,
            path: path.into(),
            seam: self.0.clone(),
        }))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        if let Verdict::Fail(_) = self.0.enter(Call::CreateNew, Some(path)) {
            return Err(enospc());
        }
        let inner = StdFileSystem.create_new(path)?;
        let mut m = self.0.model();
        m.durable.insert(path.into(), 0);
        m.pending_names.insert(path.into());
        Ok(Box::new(SeamFile {
            inner,
            path: path.into(),
            seam: self.0.clone(),
        }))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if let Verdict::Fail(_) = self.0.enter(Call::SyncDir, None) {
            return Err(eio());
        }
        StdFileSystem.sync_dir(dir)?;
        self.0
            .model()
            .pending_names
            .retain(|p| p.parent() != Some(dir));
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if let Verdict::Fail(_) = self.0.enter(Call::Rename, Some(from)) {
            return Err(eio());
        }
        StdFileSystem.rename(from, to)?;
        let mut m = self.0.model();
        let len = m.durable.remove(from).unwrap_or(0);
        m.durable.insert(to.into(), len);
        m.pending_names.remove(from);
        m.pending_names.insert(to.into());
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        if let Verdict::Fail(_) = self.0.enter(Call::Remove, Some(path)) {
            return Err(eio());
        }
        StdFileSystem.remove(path)
    }
    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        if let Verdict::Fail(_) = self.0.enter(Call::Link, Some(from)) {
            return Err(eio());
        }
        StdFileSystem.link(from, to)?;
        // A second name for the same bytes: as durable as they are, the name not yet.
        let mut m = self.0.model();
        let len = m.durable.get(from).copied().unwrap_or(0);
        m.durable.insert(to.into(), len);
        m.pending_names.insert(to.into());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------

const V2: &str = concat!(
    r#"{"type":"session","version":2,"id":"5e55-v2","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
    "\n",
    r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi"}}"#,
    "\n",
    r#"{"type":"message","id":"a2","parentId":"a1","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"hookMessage","content":"x"}}"#,
    "\n",
    r#"{"type":"message","id":"a3","parentId":"a2","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"assistant","content":"ok"}}"#,
    "\n",
);

const V1: &str = concat!(
    r#"{"type":"session","id":"5e55-v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#,
    "\n",
    r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"one"}}"#,
    "\n",
    r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":"two"}}"#,
    "\n",
    r#"{"type":"compaction","timestamp":"2025-01-01T00:00:03.000Z","summary":"s","firstKeptEntryIndex":2}"#,
    "\n",
);

/// A torn tail as a crash leaves it: a line cut before its newline.
const TORN: &str = r#"{"type":"message","id":"deadbeef","parentId":"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Appends to an existing version-3 file.
    Append,
    /// Appends to a file that ends in a torn tail (closed first).
    AppendAfterTornTail,
    /// `SessionState::write` (lock, refresh, append, projection).
    StateWrite,
    /// A new session: the first append creates the file.
    Create,
    /// A version-2 file, migrated before the first append.
    MigrateV2,
    /// A version-1 file, migrated before the first append.
    MigrateV1,
}

const KINDS: [Kind; 6] = [
    Kind::Append,
    Kind::AppendAfterTornTail,
    Kind::StateWrite,
    Kind::Create,
    Kind::MigrateV2,
    Kind::MigrateV1,
];

const STEPS: usize = 2;

struct Setup {
    /// The session file, when it exists before the run.
    path: Option<PathBuf>,
    /// Its bytes before the run.
    original: Vec<u8>,
    /// Its entry ids before the run, in file order.
    base_ids: Vec<String>,
}

fn user(text: &str) -> NewEntry {
    NewEntry::message(json!({"role": "user", "content": text}))
}

fn write_durably(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
    StdFileSystem.sync_dir(path.parent().unwrap()).unwrap();
}

fn setup(kind: Kind, dir: &Path) -> Setup {
    let v3 = || {
        let mut log = LogOptions::new()
            .materialize(Materialize::FirstAppend)
            .create(dir, "/proj")
            .unwrap();
        for i in 0..3 {
            log.append(user(&format!("m{i}"))).unwrap();
        }
        log.path().to_path_buf()
    };
    let path = match kind {
        Kind::Create => None,
        Kind::Append | Kind::StateWrite => Some(v3()),
        Kind::AppendAfterTornTail => {
            let p = v3();
            let mut bytes = std::fs::read(&p).unwrap();
            bytes.extend_from_slice(TORN.as_bytes());
            write_durably(&p, &bytes);
            Some(p)
        }
        Kind::MigrateV2 | Kind::MigrateV1 => {
            let p = dir.join("old.jsonl");
            write_durably(&p, if kind == Kind::MigrateV2 { V2 } else { V1 }.as_bytes());
            Some(p)
        }
    };
    match path {
        None => Setup {
            path: None,
            original: Vec::new(),
            base_ids: Vec::new(),
        },
        Some(p) => {
            let log = SessionLog::open(&p).unwrap();
            Setup {
                base_ids: log.entries().map(|e| e.id().to_owned()).collect(),
                original: std::fs::read(&p).unwrap(),
                path: Some(p),
            }
        }
    }
}

/// What a run did.
struct Run {
    path: PathBuf,
    /// One result per step: the acknowledged id, or the error.
    results: Vec<Result<String, Error>>,
    session_id: String,
}

fn db_path(dir: &Path) -> PathBuf {
    dir.join("states.sqlite")
}

/// Runs the scenario through `seam`; after each `Ok`, checks that the file's bytes and
/// name are durable.
fn run(kind: Kind, dir: &Path, s: &Setup, seam: &Arc<Seam>) -> Run {
    let opts = LogOptions::new()
        .file_system(Arc::new(SeamFs(seam.clone())))
        .materialize(Materialize::FirstAppend);
    let mut log = match &s.path {
        Some(p) => opts.open(p).unwrap(),
        None => opts.create(dir, "/proj").unwrap(),
    };
    let state = (kind == Kind::StateWrite).then(|| {
        Store::at(db_path(dir))
            .and_then(|store| store.state::<Value>("seam", Scope::Branch))
            .unwrap()
    });
    let mut results = Vec::new();
    for step in 0..STEPS {
        let r = match &state {
            Some(st) => st
                .write(&mut log, &json!({"step": step}))
                .map(|id| id.expect("every step changes the value")),
            None => log
                .append(user(&format!("step {step}")))
                .map_err(Error::from),
        };
        if r.is_ok() {
            let path = log.path();
            let m = seam.model();
            let len = std::fs::metadata(path).unwrap().len();
            assert_eq!(
                m.durable.get(path),
                Some(&len),
                "{kind:?} step {step}: acknowledged before the file's bytes were synced"
            );
            assert!(
                !m.pending_names.contains(path),
                "{kind:?} step {step}: acknowledged before the directory was synced"
            );
        }
        results.push(r);
    }
    Run {
        path: log.path().to_path_buf(),
        session_id: log.session_id().to_owned(),
        results,
    }
}

/// Ids in file order, after a strict open that must succeed with warnings only.
fn strict_ids(path: &Path, what: &str) -> Vec<String> {
    let log = SessionLog::open(path).unwrap_or_else(|e| panic!("{what}: strict open: {e}"));
    for f in log.findings() {
        assert_eq!(f.severity, Severity::Warning, "{what}: {f}");
    }
    log.entries().map(|e| e.id().to_owned()).collect()
}

/// `ids` holds `base` then `acked` in order, with at most one entry in doubt anywhere
/// after the base.
fn assert_holds(ids: &[String], base: &[String], acked: &[String], what: &str) {
    assert!(
        ids.starts_with(base),
        "{what}: {ids:?} lost base entries {base:?}"
    );
    let rest = &ids[base.len()..];
    let extra: Vec<&String> = rest.iter().filter(|id| !acked.contains(id)).collect();
    assert!(extra.len() <= 1, "{what}: unacknowledged entries {extra:?}");
    let seen: Vec<&String> = rest.iter().filter(|id| acked.contains(id)).collect();
    assert_eq!(
        seen,
        acked.iter().collect::<Vec<_>>(),
        "{what}: acknowledged entries"
    );
}

#[derive(Default, Debug)]
struct Counts {
    runs: usize,
    errors: usize,
    poisoned: usize,
    in_doubt_present: usize,
    power_cuts: usize,
    crash_litter: usize,
}

/// The fault to inject: at call N (counted from 0), of this kind, on the session file
/// (`false`) or on a migration's temporary file (`true`).
type Injected = (usize, (Call, bool), Fault);

fn check(kind: Kind, fault: Option<Injected>, counts: &mut Counts) {
    let what = format!("{kind:?} with {fault:?}");
    let dir = tempfile::tempdir().unwrap();
    let s = setup(kind, dir.path());
    let seam = Seam::new(fault.map(|(n, _, f)| (n, f)));
    let r = run(kind, dir.path(), &s, &seam);
    counts.runs += 1;

    let acked: Vec<String> = r
        .results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .cloned()
        .collect();
    let first_err = r.results.iter().position(Result::is_err);
    if let Some(i) = first_err {
        counts.errors += 1;
        let e = r.results[i].as_ref().unwrap_err();
        assert!(!e.to_string().is_empty(), "{what}");
        // A failed write or sync of the session file poisons the writer: no later append
        // is acknowledged. (A failed write to a migration's temporary file only fails that
        // migration: the original is intact and the next append migrates again.)
        let wrote = matches!(
            fault,
            Some((_, (Call::Write | Call::SyncData, false), f)) if f != Fault::Crash
        );
        if wrote {
            assert!(
                matches!(
                    e,
                    Error::Log(LogError::Append(AppendError::Poisoned { .. }))
                ),
                "{what}: {e}"
            );
            for later in &r.results[i + 1..] {
                let later = later.as_ref().err();
                assert!(
                    matches!(
                        later,
                        Some(Error::Log(LogError::Append(AppendError::Poisoned { .. })))
                    ),
                    "{what}: the append after a failed write was not refused: {later:?}"
                );
            }
            counts.poisoned += 1;
        }
    } else {
        assert_eq!(acked.len(), STEPS, "{what}");
    }

    // Litter: a migration's temporary file never stays behind, unless the process died.
    let litter: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".migrating-"))
        .collect();
    if matches!(fault, Some((_, _, Fault::Crash))) {
        // A later process has another pid, so another temporary name: remove the litter
        // as if this one had died, so that this process can stand for the next one.
        counts.crash_litter += litter.len();
        for p in &litter {
            std::fs::remove_file(p).unwrap();
        }
    } else {
        assert!(litter.is_empty(), "{what}: left behind {litter:?}");
    }

    // The file as the process left it (a process crash keeps the page cache).
    if !r.path.exists() {
        assert!(
            acked.is_empty(),
            "{what}: acknowledged, but the file does not exist"
        );
        return;
    }
    let bytes = std::fs::read(&r.path).unwrap();
    let ids = strict_ids(&r.path, &format!("{what}, as left"));
    assert_holds(&ids, &s.base_ids, &acked, &what);
    if ids.len() > s.base_ids.len() + acked.len() {
        counts.in_doubt_present += 1;
    }
    match kind {
        Kind::MigrateV1 | Kind::MigrateV2 => {
            let migrated = SessionLog::open(&r.path).unwrap().header().version() == 3;
            if !migrated {
                assert_eq!(bytes, s.original, "{what}: the unmigrated original changed");
            }
        }
        // No byte of the original is ever destroyed.
        _ => assert!(
            bytes.starts_with(&s.original),
            "{what}: original bytes changed"
        ),
    }

    // A power loss keeps only the durable length (the name is durable: checked above for
    // acknowledged calls; an unsynced new name may vanish, which loses nothing acked).
    let durable = seam.model().durable.get(&r.path).copied();
    if let Some(len) = durable.filter(|&l| l < bytes.len() as u64) {
        let cut = dir.path().join("power-cut.jsonl");
        std::fs::write(&cut, &bytes[..len as usize]).unwrap();
        if len > 0 {
            let cut_ids = strict_ids(&cut, &format!("{what}, after a power cut"));
            assert_holds(&cut_ids, &s.base_ids, &acked, &format!("{what}, power cut"));
        } else {
            assert!(
                acked.is_empty(),
                "{what}: acknowledged, but nothing is durable"
            );
        }
        counts.power_cuts += 1;
    }

    // State writes: the lock is released on every path, and the projection after
    // catch-up equals the fold of the file.
    if kind == Kind::StateWrite && db_path(dir.path()).exists() {
        let db = common::open_store(&db_path(dir.path())).unwrap();
        assert!(
            db.lock_status(&r.session_id).unwrap().is_none(),
            "{what}: the lock row stayed behind"
        );
        let log = SessionLog::open(&r.path).unwrap();
        let st = Store::at(db_path(dir.path()))
            .and_then(|store| store.state::<Value>("seam", Scope::Branch))
            .unwrap();
        assert_eq!(
            db.read_value(&r.path, "seam", Scope::Branch, None).unwrap(),
            st.read(&log).unwrap(),
            "{what}: projection"
        );
    }

    // The next open succeeds, and so does the next append.
    let mut next = SessionLog::open(&r.path).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let id = next
        .append(user("after the fault"))
        .unwrap_or_else(|e| panic!("{what}: append after reopen: {e}"));
    let after = strict_ids(&r.path, &format!("{what}, after recovery"));
    assert_eq!(after.last(), Some(&id), "{what}");
    assert!(after.starts_with(&ids), "{what}: recovery lost entries");
    assert_eq!(
        SessionLog::open(&r.path).unwrap().header().version(),
        3,
        "{what}"
    );
}

/// The calls a clean run of `kind` makes, in order.
fn clean_trace(kind: Kind) -> Vec<(Call, bool)> {
    let dir = tempfile::tempdir().unwrap();
    let s = setup(kind, dir.path());
    let seam = Seam::new(None);
    let r = run(kind, dir.path(), &s, &seam);
    for res in &r.results {
        assert!(res.is_ok(), "{kind:?}: clean run failed: {res:?}");
    }
    seam.trace.lock().unwrap().clone()
}

fn enumerate(kind: Kind) -> Counts {
    let trace = clean_trace(kind);
    let mut counts = Counts::default();
    let mut failures = Vec::new();
    let mut attempt = |fault: Option<Injected>, counts: &mut Counts| {
        let r =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(kind, fault, counts)));
        if let Err(p) = r {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(msg);
        }
    };
    attempt(None, &mut counts);
    for (n, &call) in trace.iter().enumerate() {
        for &fault in faults_for(call.0) {
            attempt(Some((n, call, fault)), &mut counts);
        }
    }
    let calls: Vec<String> = trace
        .iter()
        .map(|(c, temp)| format!("{c:?}{}", if *temp { "(temp)" } else { "" }))
        .collect();
    println!(
        "{kind:?}: {} seam calls in a clean run [{}]; {counts:?}",
        trace.len(),
        calls.join(" ")
    );
    assert!(
        failures.is_empty(),
        "{kind:?}: {} of {} faulty runs broke a guarantee:\n{}",
        failures.len(),
        counts.runs,
        failures.join("\n")
    );
    counts
}

#[test]
fn faults_at_every_seam_call_of_an_append() {
    for kind in [Kind::Append, Kind::AppendAfterTornTail] {
        let c = enumerate(kind);
        assert!(c.poisoned > 0 && c.power_cuts > 0, "{kind:?}: {c:?}");
    }
}

#[test]
fn faults_at_every_seam_call_of_a_state_write() {
    let c = enumerate(Kind::StateWrite);
    assert!(c.errors > 0, "{c:?}");
}

#[test]
fn faults_at_every_seam_call_of_a_create() {
    let c = enumerate(Kind::Create);
    assert!(c.errors > 0, "{c:?}");
}

#[test]
fn faults_at_every_seam_call_of_a_migration() {
    for kind in [Kind::MigrateV2, Kind::MigrateV1] {
        let c = enumerate(kind);
        assert!(c.errors > 0, "{kind:?}: {c:?}");
    }
}

#[test]
fn every_scenario_goes_through_the_seam() {
    // The enumeration only means something if every phase goes through the seam.
    for kind in KINDS {
        let trace: Vec<Call> = clean_trace(kind).into_iter().map(|(c, _)| c).collect();
        assert!(
            trace.contains(&Call::Write) && trace.contains(&Call::SyncData),
            "{kind:?}"
        );
        if matches!(kind, Kind::Create | Kind::MigrateV1 | Kind::MigrateV2) {
            assert!(trace.contains(&Call::SyncDir), "{kind:?}: {trace:?}");
        }
        if kind == Kind::Create {
            assert!(trace.contains(&Call::Link), "{kind:?}: {trace:?}");
        }
        if matches!(kind, Kind::MigrateV1 | Kind::MigrateV2) {
            assert!(trace.contains(&Call::Rename), "{kind:?}: {trace:?}");
        }
    }
}

#[test]
fn every_append_to_an_existing_file_checks_and_writes_under_the_file_lock() {
    for kind in KINDS {
        let trace = clean_trace(kind);
        // A create writes its new file under a temporary name nobody else knows; the
        // appends begin with the first open of the file at its real name.
        let start = match kind {
            Kind::Create => trace
                .iter()
                .position(|&(c, _)| c == Call::OpenAppend)
                .unwrap(),
            _ => 0,
        };
        let mut locked = false;
        let mut writes = 0;
        for (i, &(call, temp)) in trace.iter().enumerate().skip(start) {
            match call {
                Call::Lock => locked = true,
                // A new handle holds no lock; closing the old one released its lock.
                Call::Unlock | Call::OpenAppend => locked = false,
                Call::Len | Call::Write if !temp => {
                    assert!(
                        locked,
                        "{kind:?}: call {i} ({call:?}) without the lock: {trace:?}"
                    );
                    writes += usize::from(call == Call::Write);
                }
                _ => {}
            }
        }
        assert!(
            !locked,
            "{kind:?}: the lock is held after the run: {trace:?}"
        );
        assert!(
            writes >= STEPS - usize::from(kind == Kind::Create),
            "{kind:?}: {trace:?}"
        );
    }
}
