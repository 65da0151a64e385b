//! SQLite's error, wrapped so that no rusqlite type is part of the public API. A leaf:
//! it imports nothing of the crate, and `error`, `lock` and `projection` use it.

/// An error of SQLite, under the projection database and the write lock.
///
/// Opaque on purpose: the SQLite binding behind it can change without breaking callers.
/// `Display` is SQLite's message; [`std::error::Error::source`] goes on to its cause, if
/// any. Ask it what a caller can act on with [`DatabaseError::is_busy`] and
/// [`DatabaseError::is_corrupt`].
#[derive(Debug)]
pub struct DatabaseError(pub(crate) rusqlite::Error);

impl DatabaseError {
    /// Another connection held the database (`SQLITE_BUSY` or `SQLITE_LOCKED`) for longer
    /// than the busy timeout: nothing is wrong with it, and a retry later may succeed.
    pub fn is_busy(&self) -> bool {
        matches!(
            self.0.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }

    /// SQLite found the file damaged or not a database (`SQLITE_CORRUPT`,
    /// `SQLITE_NOTADB`). The projection is a cache of the logs: a database of
    /// session-state's can be deleted and is rebuilt on the next read.
    pub fn is_corrupt(&self) -> bool {
        is_corrupt(&self.0)
    }
}

/// Whether SQLite's error says the file is damaged or not a database.
pub(crate) fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
    )
}

impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

// Transparent, like `#[error(transparent)]`: the message is SQLite's own, so the chain
// goes on with its cause rather than repeating it.
impl std::error::Error for DatabaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
