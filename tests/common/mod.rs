#![expect(dead_code)]

pub mod backend;
pub mod cargo_env;
pub mod cli;
pub mod examples;
pub mod holders;
#[cfg(feature = "postgres")]
pub mod pg;
pub mod pi;
pub mod pi_addon;
pub mod reference;
pub mod registry;
pub mod seams;

use session_state::Store;
use std::path::Path;

/// A store on `db`, opened now (as `Projection::open` was): a refused location fails here.
pub fn open_store(db: &Path) -> session_state::Result<Store> {
    let store = Store::at(db)?;
    store.connect()?;
    Ok(store)
}

/// The database file opened by another program (raw SQL: planting rows, reading pragmas).
pub fn raw_db(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).expect("open the database file");
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .expect("busy timeout");
    conn
}

/// Milliseconds since the Unix epoch: the unit of the lock's `acquired_at`.
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_millis()).expect("ms since the epoch fit in i64")
}

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_session-state");

/// The one way tests launch the binary: in a scrubbed environment (only `PATH`), so the
/// developer's `HOME`, `PI_CODING_AGENT_DIR` or `RUST_LOG` never leak into a test; a
/// test adds what it means to set.
pub fn cli() -> std::process::Command {
    let mut c = std::process::Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    c
}
