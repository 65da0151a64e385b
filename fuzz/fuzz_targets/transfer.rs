//! Import and export (`Sessions::import_file`, `Sessions::export`) through both local session stores
//! (SQLite rows, and Pi's own layout of JSONL files), on generated sessions and, now and
//! then, on the fuzzer's raw bytes as a session file:
//! - a file the strict reader refuses is refused, and nothing is stored;
//! - an import stores every entry; the export is the file's header and entry lines byte
//!   for byte (no torn tail, no blank line), and reads as the same tree;
//! - importing again appends nothing; after more lines are appended to the file, an
//!   import appends exactly those; a file that disagrees with what is stored (one line
//!   changed) is refused and changes nothing;
//! - `load` gives the same entries, and the two stores export the same bytes.
//!
//! Proptest relatives: `tests/persistence.rs`, `tests/conformance.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use session_state::{
    LogOptions, PiJsonlStore, ReadMode, SessionLog, SessionStore, Sessions, SqliteStore,
    StoredSession,
};
use session_state_fuzz::{Input, Session, scratch_dir};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The stores for the next input: new ones every 256 inputs, so that tmpfs does not fill
/// up with sessions in a long run.
fn stores(n: u64) -> (PathBuf, Vec<Sessions>) {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(scratch_dir).path();
    let generation = n / 256;
    if n.is_multiple_of(256) && n > 0 {
        let old = dir.join(format!("store-{}", generation - 1));
        let _ = std::fs::remove_dir_all(old);
    }
    let root = dir.join(format!("store-{generation}"));
    std::fs::create_dir_all(&root).expect("a store directory");
    let sqlite = SqliteStore::open(root.join("store.sqlite")).expect("a store");
    let files = PiJsonlStore::new(root.join("sessions"));
    (
        dir.join("import.jsonl"),
        vec![Sessions::new(sqlite), Sessions::new(files)],
    )
}

/// The entries of a log: id, parent, line.
fn entries(log: &SessionLog) -> Vec<(String, Option<String>, String)> {
    log.entries()
        .map(|e| {
            let line = log.raw_line(e.id()).expect("a line");
            (e.id().to_owned(), e.parent_id().map(str::to_owned), line)
        })
        .collect()
}

fn stored_count(store: &dyn SessionStore, id: &str) -> Option<u64> {
    store
        .read_lines(
            id,
            u64::MAX,
            &mut |_, _| std::ops::ControlFlow::Continue(()),
        )
        .ok()
}

fn export(sessions: &Sessions, id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    sessions.export(id, &mut out).expect("export a stored session");
    out
}

/// The whole sequence on one store; the export, when something was stored.
fn exercise(
    sessions: &Sessions,
    file: &Path,
    first: &[u8],
    session: &Session,
    raw: bool,
    changed_at: usize,
) -> Option<Vec<u8>> {
    let store = sessions.backend();
    let what = store.describe();
    std::fs::write(file, first).expect("write the file");
    let strict = LogOptions::new().open(file);
    let imported = sessions.import_file(file);
    let log = match (strict, imported) {
        (Err(_), Err(_)) => return None,
        (Ok(_), Err(e)) => {
            // A format other than 3, a header that names a session stored before, a
            // session id that cannot name a file (a raw input).
            assert!(raw, "{what}: a generated session was refused: {e}");
            return None;
        }
        (Err(e), Ok(r)) => {
            panic!("{what}: imported {r:?} from a file the strict reader refuses: {e}")
        }
        (Ok(log), Ok(r)) => {
            if raw && r.already_stored > 0 {
                return None;
            }
            assert_eq!(
                (r.already_stored, r.appended),
                (0, log.len() as u64),
                "{what}: {r:?}"
            );
            log
        }
    };
    let id = log.session_id().to_owned();
    if log.is_empty() {
        // A header-only session is stored, with no entries, and listed.
        assert_eq!(stored_count(store, &id), Some(0), "{what}");
        assert!(
            store
                .list()
                .expect("list the store")
                .iter()
                .any(|(listed, _)| *listed == id),
            "{what}: a header-only session is not listed"
        );
        return None;
    }
    assert_eq!(stored_count(store, &id), Some(log.len() as u64), "{what}");

    // The export: the header and the entry lines, byte for byte.
    let out = export(sessions, &id);
    let back = LogOptions::new()
        .read("<export>", &out[..])
        .expect("the export reads strictly");
    assert_eq!(
        entries(&back),
        entries(&log),
        "{what}: the export is not the file"
    );
    let header_end = out.iter().position(|&b| b == b'\n').expect("a header line");
    let mut want = out[..=header_end].to_vec();
    for (_, _, line) in entries(&log) {
        want.extend_from_slice(line.as_bytes());
        want.push(b'\n');
    }
    assert!(out == want, "{what}: the export is not the stored lines");
    if !raw {
        assert_eq!(
            &out[..header_end],
            session_state_fuzz::header(3, &id).as_bytes(),
            "{what}: the header line"
        );
    }

    // Idempotent, then only what was appended.
    let again = sessions.import_file(file).expect("import again");
    assert_eq!(
        (again.already_stored, again.appended),
        (log.len() as u64, 0),
        "{what}"
    );
    if raw {
        return Some(out);
    }
    if session.torn.is_none() {
        let mut stages = session.stages.clone();
        stages.push(session.lines.len());
        let mut before = log.len() as u64;
        for w in stages.windows(2) {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(file)
                .expect("open");
            f.write_all(session.lines_text(w[0], w[1]).as_bytes())
                .expect("append");
            drop(f);
            let r = sessions.import_file(file).expect("import the appended lines");
            assert_eq!(
                (r.already_stored, r.appended),
                (before, (w[1] - w[0]) as u64),
                "{what}"
            );
            before += r.appended;
        }
    }
    let now = SessionLog::open(file).expect("reads strictly");
    let loaded = StoredSession::new(store, "fuzz", &id)
        .read_log(ReadMode::Strict)
        .expect("read the stored session");
    assert_eq!(
        entries(&loaded),
        entries(&now),
        "{what}: load gives other entries"
    );
    let out = export(sessions, &id);

    // A file that disagrees with the store at some line is refused, and nothing changes.
    let k = changed_at % now.len();
    let mut text = session_state_fuzz::header(3, &id);
    text.push('\n');
    for (i, (_, _, l)) in entries(&now).into_iter().enumerate() {
        if i == k {
            text.push_str(&l.replacen("\"timestamp\":\"2026", "\"timestamp\":\"2027", 1));
        } else {
            text.push_str(&l);
        }
        text.push('\n');
    }
    std::fs::write(file, text).expect("write the changed file");
    assert!(
        sessions.import_file(file).is_err(),
        "{what}: a changed line at {k} was imported"
    );
    assert!(
        export(sessions, &id) == out,
        "{what}: a refused import changed the store"
    );
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let (file, stores) = stores(n);
    let mut inp = Input::new(data);
    let raw = inp.chance(8);
    let session = Session::generate(&mut inp, 3, &format!("fuzz-{n}"), 40);
    let first = if raw {
        data.to_vec()
    } else {
        let mut t = session.text(
            session
                .stages
                .first()
                .copied()
                .unwrap_or(session.lines.len()),
        );
        if let Some(torn) = &session.torn {
            t.push_str(torn);
        }
        t.into_bytes()
    };
    let changed_at = inp.below(64);
    let exports: Vec<Option<Vec<u8>>> = stores
        .iter()
        .map(|s| exercise(s, &file, &first, &session, raw, changed_at))
        .collect();
    if !raw {
        assert!(
            exports[0] == exports[1],
            "the two stores export different bytes"
        );
    }
});
