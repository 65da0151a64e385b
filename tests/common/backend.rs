//! The backends the conformance suite (`tests/conformance.rs`) runs against, each a real
//! one in a temporary directory of its own. A new backend is one factory here and one
//! `conformance!` line there.

use session_state::{PiJsonlStore, Sessions, SqliteStore};
use std::any::Any;
use std::path::PathBuf;

/// Replaces the stored line of `(session, seq)` with a text (to plant corruption).
pub type Corrupt = Box<dyn Fn(&str, u64, &str)>;

/// One backend under test.
pub struct TestBackend {
    /// The store, ready: the crate's rules on the backend (its primitives:
    /// `store.backend()`).
    pub store: Sessions,
    /// Its URL for `--store`, when the CLI can open it (`None`: the file backend).
    pub url: Option<String>,
    /// A second, independent handle on the same storage (another process would open this).
    pub reopen: Box<dyn Fn() -> Sessions>,
    /// Plants corruption in a stored entry, behind the store's back.
    pub corrupt: Corrupt,
    /// The name the projection keys the store by (the redacted URL, or the file root).
    pub key: String,
    /// A temporary directory for the test's other files (projection database, exports).
    pub scratch: PathBuf,
    /// Keeps the storage alive (temporary directories, a server) until the test ends.
    pub _guard: Box<dyn Any>,
}

/// The Pi JSONL file backend on a fresh sessions directory.
pub fn file() -> TestBackend {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("sessions");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let store = PiJsonlStore::new(&root);
    let reopen_root = root.clone();
    let corrupt_root = root.clone();
    TestBackend {
        store: Sessions::new(store),
        url: None,
        reopen: Box::new(move || Sessions::new(PiJsonlStore::new(&reopen_root))),
        corrupt: Box::new(move |session, seq, text| {
            let listing = PiJsonlStore::new(&corrupt_root).scan().expect("scan");
            let path = &listing
                .sessions
                .iter()
                .find(|s| s.header.id() == session)
                .expect("the session's file")
                .path;
            let body = std::fs::read_to_string(path).expect("read");
            let mut lines: Vec<&str> = body.lines().collect();
            lines[seq as usize + 1] = text;
            std::fs::write(path, lines.join("\n") + "\n").expect("write");
        }),
        key: format!("file://{}", root.display()),
        scratch,
        _guard: Box::new(dir),
    }
}

/// The SQLite backend on a fresh database file.
pub fn sqlite() -> TestBackend {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("sessions.sqlite");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let url = format!("sqlite://{}", db.display());
    let store = Sessions::open_url(&url).expect("open the SQLite store");
    let reopen_db = db.clone();
    let corrupt_db = db.clone();
    TestBackend {
        store,
        url: Some(url.clone()),
        reopen: Box::new(move || Sessions::new(SqliteStore::open(&reopen_db).expect("reopen"))),
        corrupt: Box::new(move |session, seq, text| {
            let conn = super::raw_db(&corrupt_db);
            let n = conn
                .execute(
                    "UPDATE entries SET line = ?3 WHERE session_id = ?1 AND seq = ?2",
                    rusqlite::params![session, seq as i64, text],
                )
                .expect("update");
            assert_eq!(n, 1, "no row ({session}, {seq})");
        }),
        key: url,
        scratch,
        _guard: Box::new(dir),
    }
}

/// The PostgreSQL backend on a fresh database of the test binary's own server
/// (`tests/common/pg.rs`: a real PostgreSQL 15 on loopback, started once).
#[cfg(feature = "postgres")]
pub fn postgres() -> TestBackend {
    use session_state::PostgresStore;
    let dir = tempfile::tempdir().expect("tempdir");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let (url, guard) = super::pg::fresh_database();
    let store = Sessions::open_url(&url).expect("open the PostgreSQL store");
    let key = store.backend().describe();
    let reopen_url = url.clone();
    let server = guard.server();
    let db = guard.name().to_owned();
    TestBackend {
        store,
        url: Some(url.clone()),
        reopen: Box::new(move || {
            Sessions::new(PostgresStore::connect(&reopen_url).expect("reconnect"))
        }),
        corrupt: Box::new(move |session, seq, text| {
            let mut admin = server.admin(&db);
            let n = admin
                .execute(
                    "UPDATE session_state_entries SET line = $3 WHERE session_id = $1 AND seq = $2",
                    &[&session, &(seq as i64), &text],
                )
                .expect("update");
            assert_eq!(n, 1, "no row ({session}, {seq})");
        }),
        key,
        scratch,
        _guard: Box::new((guard, dir)),
    }
}
