//! Why the write lock could not be taken or kept, and the recovery commands a refusal
//! prints.

use super::{LEASE, Liveness};
use std::path::{Path, PathBuf};

/// The row that refuses a writer in [`LockError::Held`]: what its hint clears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockRow {
    /// A row of the `write_lock` table: a [`crate::Store::lock`] of another process.
    WriteLock,
    /// A row of the `pi_presence` table: a running Pi has the session open
    /// (`docs/pi-extension.md`).
    PiPresence,
}

impl LockRow {
    /// The table the row is in.
    pub fn table(self) -> &'static str {
        match self {
            LockRow::WriteLock => "write_lock",
            LockRow::PiPresence => "pi_presence",
        }
    }
}

/// Why the write lock could not be taken or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another holder has the lock: alive, or of unknown liveness, within its lease (a
    /// `write_lock` row), or a running Pi has the session open (a `pi_presence` row).
    /// The message ends with two commands that clear that row.
    #[error(
        "session '{object}' is locked by {initiator} ({liveness}): {action} refused because \
         {reason}. {}",
        row_recovery(*.row, .database.as_deref(), .session_file.as_deref(), .object)
    )]
    Held {
        /// The holder of the lock, as stored (see [`Holder`](super::Holder)).
        initiator: String,
        /// What was refused ("write", "patch", "drop", ...).
        action: String,
        /// The session id.
        object: String,
        /// Why the holder is respected, e.g. "holder pid 1234 is alive and its lease
        /// expires in 41 s".
        reason: String,
        /// The holder's liveness.
        liveness: Liveness,
        /// When the holder took the lock, ms since the Unix epoch.
        acquired_at_ms: i64,
        /// The projection database file, when the connection has one.
        database: Option<Box<Path>>,
        /// The row that refuses: in `write_lock` or in `pi_presence`.
        row: LockRow,
        /// The session file that was to be written, when the writer knows it.
        session_file: Option<Box<Path>>,
    },

    /// Another writer holds the advisory lock on the session file itself
    /// (`docs/lock.md`, "The one lock") and did not release it within the wait
    /// (10 s): a writer of this crate between its check of the file's end and its append,
    /// perhaps through another projection database, or a process that is stuck there.
    /// Nothing was written. The message ends with the command that ends the holder, or
    /// how to find it.
    #[error(
        "session file '{}' is locked by {initiator}: {action} refused because {reason}. {}",
        .object.display(),
        file_recovery(*.pid, .object)
    )]
    FileHeld {
        /// The process holding the lock, as a [`Holder`](super::Holder) string, or "another process"
        /// when it cannot be told (no `/proc/locks`).
        initiator: String,
        /// What was refused ("append", "write", "patch", "drop").
        action: String,
        /// The session file.
        object: PathBuf,
        /// Why, e.g. "holder pid 1234 is alive; it holds the advisory lock on the session
        /// file (…) and did not release it within 10 s".
        reason: String,
        /// The holder's pid, when `/proc/locks` names it.
        pid: Option<u32>,
    },

    /// The lock was taken over (lease expiry) or cleared while this guard held it.
    #[error(
        "write lock on session '{session_id}' was lost: {}; the lease is {} s, so an \
         operation holding the lock must renew it or finish sooner",
        lost_to(.now_held_by.as_deref()),
        LEASE.as_secs()
    )]
    Lost {
        /// The session id.
        session_id: String,
        /// Who holds it now, if anyone.
        now_held_by: Option<String>,
    },

    /// A holder taking a row could not tell the writers on the fast path
    /// (`docs/lock.md`, "The fast path"): the writers' queue file failed, or a write
    /// already on the fast path did not end its append within the wait (10 s). The row
    /// was not taken.
    #[error(
        "write lock on session '{session_id}': could not {operation}: the writers of the \
         database were not told of the row ({}): {source}. Nothing was taken; try again. If \
         it fails again, a writer is stuck in its append: find it with `fuser -v {}` (or \
         `lslocks`) and end it",
        .queue.display(),
        .queue.display()
    )]
    Writers {
        /// What was being done ("acquire the lock", "record the Pi presence row").
        operation: &'static str,
        /// The session id.
        session_id: String,
        /// The writers' queue file (`<database>-queue`).
        queue: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },

    /// The projection database failed.
    #[error("write lock on session '{session_id}': could not {operation}: {source}")]
    Database {
        /// What was being done ("acquire the lock", "release the lock", ...).
        operation: &'static str,
        /// The session id.
        session_id: String,
        /// The SQLite error.
        #[source]
        source: crate::sqlite::DatabaseError,
    },
}

impl LockError {
    /// The same refusal, naming `action` as what was refused: a file-lock refusal of a
    /// log's append names the state write it was part of.
    pub(crate) fn for_action(self, action: &str) -> LockError {
        match self {
            LockError::FileHeld {
                initiator,
                object,
                reason,
                pid,
                ..
            } => LockError::FileHeld {
                initiator,
                action: action.to_owned(),
                object,
                reason,
                pid,
            },
            other => other,
        }
    }

    pub(super) fn database(
        operation: &'static str,
        session_id: &str,
    ) -> impl FnOnce(rusqlite::Error) -> Refused {
        move |source| {
            Box::new(LockError::Database {
                operation,
                session_id: session_id.to_owned(),
                source: crate::sqlite::DatabaseError(source),
            })
        }
    }
}

/// A [`LockError`] as the lock's functions return it: boxed, as [`crate::Error`] holds it.
pub(crate) type Refused = Box<LockError>;

fn lost_to(now_held_by: Option<&str>) -> String {
    match now_held_by {
        Some(holder) => format!("it is now held by {holder}"),
        None => "it was cleared".to_owned(),
    }
}

/// The hint of [`LockError::Held`]: the row that refuses, and two commands that delete
/// it (`force-refresh --yes` and `sqlite3`), quoted for a POSIX shell.
fn row_recovery(
    row: LockRow,
    database: Option<&Path>,
    session_file: Option<&Path>,
    session_id: &str,
) -> String {
    let who = match row {
        LockRow::WriteLock => "If that process is gone or stuck",
        LockRow::PiPresence => "If that Pi has exited or is stuck",
    };
    let database = database.filter(|p| !p.as_os_str().is_empty());
    let db_arg = database
        .map(|p| format!(" --db {}", shell_word(&p.to_string_lossy())))
        .unwrap_or_default();
    let file = session_file.map_or_else(
        || "<session file>".to_owned(),
        |f| shell_word(&f.to_string_lossy()),
    );
    format!(
        "{who}, delete its row in the table {}: session-state force-refresh --yes{db_arg} \
         {file}  or  {}",
        row.table(),
        manual_recovery(row, database, session_id)
    )
}

/// The hint of [`LockError::FileHeld`]: the command that ends the holder, or how to find it.
fn file_recovery(pid: Option<u32>, file: &Path) -> String {
    match pid {
        Some(pid) if cfg!(windows) => format!(
            "If that process is stuck, end it (Windows releases its lock when it exits): \
             taskkill /F /PID {pid}"
        ),
        Some(pid) => format!(
            "If that process is stuck, end it (the kernel releases its lock when it exits): \
             kill {pid}"
        ),
        None if cfg!(windows) => format!(
            "Find the process that has {} open with Resource Monitor (CPU, Associated \
             Handles) or Sysinternals' handle.exe, and end it if it is stuck (Windows \
             releases its lock when it exits)",
            file.display()
        ),
        None => format!(
            "Find the process that holds it with: fuser -v {}  (or lslocks), and end it if \
             it is stuck (the kernel releases its lock when it exits)",
            shell_word(&file.to_string_lossy())
        ),
    }
}

/// The `sqlite3` command that deletes the row, quoted for a POSIX shell.
fn manual_recovery(row: LockRow, database: Option<&Path>, session_id: &str) -> String {
    let db = match database {
        Some(path) if !path.as_os_str().is_empty() => shell_word(&path.to_string_lossy()),
        _ => "states.sqlite".to_owned(),
    };
    let sql = format!(
        "DELETE FROM {} WHERE session_id = '{}';",
        row.table(),
        session_id.replace('\'', "''")
    );
    let mut quoted = String::with_capacity(sql.len() + 2);
    quoted.push('"');
    for c in sql.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    format!("sqlite3 {db} {quoted}")
}

fn shell_word(s: &str) -> String {
    let plain = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_command_is_quoted() {
        assert_eq!(
            manual_recovery(LockRow::WriteLock, None, "abc"),
            r#"sqlite3 states.sqlite "DELETE FROM write_lock WHERE session_id = 'abc';""#
        );
        assert_eq!(
            manual_recovery(LockRow::PiPresence, Some(Path::new("/a b/s.db")), "o'$x"),
            r#"sqlite3 '/a b/s.db' "DELETE FROM pi_presence WHERE session_id = 'o''\$x';""#
        );
        assert_eq!(
            row_recovery(
                LockRow::PiPresence,
                Some(Path::new("/d/s.db")),
                Some(Path::new("/s/it's.jsonl")),
                "x"
            ),
            r#"If that Pi has exited or is stuck, delete its row in the table pi_presence: session-state force-refresh --yes --db /d/s.db '/s/it'\''s.jsonl'  or  sqlite3 /d/s.db "DELETE FROM pi_presence WHERE session_id = 'x';""#
        );
        assert!(
            row_recovery(LockRow::WriteLock, None, None, "x")
                .contains("force-refresh --yes <session file>  or  sqlite3 states.sqlite")
        );
    }
}
