//! What a write needs from the rows, for a process that has not read the log (docs/spec.md §10:
//! a whole-process `write` costs the same at 1k and 100k entries). A write needs the
//! value at the leaf and the file's tail: the watermark says where the file ended when
//! the rows were folded (its identity, length and change stamp), the last entry there
//! (the leaf), and every entry id (to check `--at` and to pick a fresh id); the rows give
//! the folded value. When the file is exactly what the rows were folded from, and its
//! last line is complete and valid, that is the whole answer; in every other case the
//! caller reads the log (`src/store/tail.rs`).

use super::ingest::{ingest_resumed, up_to_date_row};
use super::read::{ReadValue, read_value};
use super::watermark::SessionRow;
use super::{CatchUp, Projection, db_err, file_key};
use crate::error::Result;
use crate::log::io::FileIdentity;
use crate::state::envelope::Scope;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

/// The session at the file's tail, as the rows know it, inside the write transaction.
#[derive(Debug)]
pub(crate) struct Tail {
    /// The entry the new one is a child of: `--at`, else the last entry in file order
    /// (`None`: a session without entries, whose next entry is a root).
    pub(crate) parent: Option<String>,
    /// The plugin's folded value at `parent`.
    pub(crate) current: ReadValue,
    /// The file's identity and length: the append must find the file so.
    pub(crate) identity: FileIdentity,
    pub(crate) len: u64,
    key: String,
    row: SessionRow,
}

/// Why the rows cannot answer for a write (the caller then reads the log).
pub(crate) type Fallback = &'static str;

impl Projection {
    /// Before the write transaction: the session id of `file` when the rows can answer
    /// for a write to it, after reading what others appended since the watermark (a
    /// catch-up of those bytes only, as a read does). `Ok(Err(why))` when they cannot:
    /// rows never built (a cold database), a file replaced or shrunk, a catch-up that
    /// fails (the log's reader then names the problem).
    pub(crate) fn tail_session(
        &mut self,
        file: &Path,
    ) -> Result<std::result::Result<String, Fallback>> {
        let key = file_key(file)?;
        let row = match up_to_date_row(&self.conn, &self.path, file, &key)? {
            Ok(row) => row,
            Err(true) => {
                // Others appended: read their bytes, as a reader would.
                if self.catch_up(file).is_err() {
                    return Ok(Err("the projection could not catch up"));
                }
                match up_to_date_row(&self.conn, &self.path, file, &key)? {
                    Ok(row) => row,
                    Err(_) => return Ok(Err("the file changed during the catch-up")),
                }
            }
            Err(false) => return Ok(Err("no rows for this file, or they are stale")),
        };
        Ok(Ok(row.session_id))
    }
}

/// Inside the caller's write transaction (`BEGIN IMMEDIATE` on `conn`): the tail of
/// `file` and the value of `plugin` in `scope` at `at` (default: the last entry), when
/// the rows answer for the file as it is now. `Ok(Err(why))` when they do not: the file
/// changed since [`Projection::tail_session`], it ends in a torn or unparsable line, it
/// is of an older version (the log migrates it first), `at` names an entry the rows do
/// not know, or the fold meets a bad event (the log's fold names it).
pub(crate) fn tail_in_transaction(
    conn: &Connection,
    db: &Path,
    file: &Path,
    at: Option<&str>,
    plugin: &str,
    scope: Scope,
) -> Result<std::result::Result<Tail, Fallback>> {
    let key = file_key(file)?;
    let row = match up_to_date_row(conn, db, file, &key)? {
        Ok(row) => row,
        Err(_) => return Ok(Err("the file changed before the write transaction")),
    };
    if row.consumed != row.file_len {
        return Ok(Err("the file ends in a torn or unparsable line"));
    }
    if row.version != 3 {
        return Ok(Err("the file is of an older version"));
    }
    let q = db_err(db, "reading the projection");
    let parent = match at {
        Some(at) => {
            if entry_idx(conn, &key, at).map_err(q)?.is_none() {
                return Ok(Err("--at names an entry the projection does not know"));
            }
            Some(at.to_owned())
        }
        None if row.entry_count == 0 => None,
        None => match &row.last_entry_id {
            Some(id) => Some(id.clone()),
            None => return Ok(Err("the watermark does not name the last entry")),
        },
    };
    let current = match read_value(conn, db, file, &key, plugin, scope, parent.as_deref()) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(error = %e, "the projection's fold cannot answer for a write");
            return Ok(Err("the projection's fold cannot answer"));
        }
    };
    Ok(Ok(Tail {
        parent,
        current,
        identity: FileIdentity {
            dev: row.dev as u64,
            ino: row.ino as u64,
        },
        len: row.file_len as u64,
        key,
        row,
    }))
}

impl Tail {
    /// The entry id of the event that set the current value, when there is one.
    pub(crate) fn current_entry(&self, conn: &Connection) -> Option<String> {
        let idx = self.current.event?;
        super::read::entry_id_at(conn, &self.key, idx)
            .ok()
            .flatten()
    }

    /// Whether `id` can name a new entry: no entry of the file and not the session id
    /// (docs/spec.md §2: new ids are unique against every id in the file).
    pub(crate) fn id_is_free(&self, conn: &Connection, db: &Path, id: &str) -> Result<bool> {
        if id == self.row.session_id {
            return Ok(false);
        }
        Ok(entry_idx(conn, &self.key, id)
            .map_err(db_err(db, "reading the projection"))?
            .is_none())
    }

    /// After the append, in the same transaction: the rows fold the new bytes, read from
    /// the watermark on (the consumed prefix was shown unchanged inside this transaction,
    /// so it is not read again).
    pub(crate) fn catch_up(self, conn: &Connection, db: &Path, file: &Path) -> Result<CatchUp> {
        ingest_resumed(conn, db, file, &self.key, self.row)
    }
}

fn entry_idx(conn: &Connection, key: &str, id: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT idx FROM nodes WHERE file = ?1 AND entry_id = ?2")?
        .query_row(params![key, id], |r| r.get(0))
        .optional()
}
