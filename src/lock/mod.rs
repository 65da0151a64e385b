//! The per-session write lock (docs/spec.md §6): one writer per session at a time.
//!
//! The lock is a row in the `write_lock` table of the projection database:
//!
//! ```sql
//! CREATE TABLE write_lock (
//!     session_id  TEXT PRIMARY KEY,
//!     holder      TEXT NOT NULL,     -- see `Holder`: pid:<pid>;start:<ticks>;boot:<uuid>;pidns:<inode>
//!     acquired_at INTEGER NOT NULL,  -- ms since the Unix epoch
//!     action      TEXT               -- what the holder is doing ("write", "patch", ...); may be NULL
//! );
//! ```
//!
//! `acquire_at` takes the row over when there is none, when the holder is this process,
//! when the holder is provably gone ([`Liveness::NotAlive`]), or when the row is at least
//! [`LEASE`] old (even if its holder is alive); otherwise it refuses with
//! [`LockError::Held`]. A process that crashes while holding the lock therefore seals
//! the session for at most one lease, and usually not at all (its pid is gone).
//!
//! A write (`src/store/write.rs`) writes no row: `begin_write` opens its transaction
//! under SQLite's write lock and judges the row that stands, if any, by the same rules.
//! Because two writers of one file may use two databases, each append also holds the
//! advisory lock on the session file itself (`file`, taken in `src/log/writer.rs`).
//!
//! The module never opens a database: the projection owns the connection (WAL,
//! `busy_timeout`). `status` and `clear` never create the table.
//!
//! Every refusal names what blocks (a `write_lock` row, a running Pi's `pi_presence`
//! row, or the file lock) and a command that clears it, e.g.
//! `sqlite3 states.sqlite "DELETE FROM write_lock WHERE session_id = '…';"`.

mod acquire;
mod commits;
mod error;
pub(crate) mod file;
pub(crate) mod hold;
mod identity;
pub(crate) mod presence;
mod queue;
mod status;
mod table;

pub use error::{LockError, LockRow};
pub use identity::{Holder, Liveness};
pub use presence::PresenceStatus;
pub use status::LockStatus;
pub use table::LEASE;

pub(crate) use acquire::{
    ClearRows, acquire_at, begin_write, database_version, release_row, renew_row,
};
pub(crate) use commits::CommitStamp;
pub(crate) use error::Refused;
pub(crate) use queue::{FastPass, Turn, Turns, WriterQueue};
pub(crate) use status::{LiveRow, clear, live_rows, status, status_at};
pub(crate) use table::{ensure_schema, now_ms};
