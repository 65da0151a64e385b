//! Removing the rows of one session whose file is gone (`Store::prune`): the SQL.
//!
//! A session's rows are deleted in bounded chunks, each its own `BEGIN IMMEDIATE`
//! transaction, so a session of a million entries never holds the database's write lock
//! for long (as a build commits in chunks). The first chunk's transaction checks again,
//! under the write lock, that the file is still gone, and marks the watermark as
//! matching no file (identity `-1`, length `i64::MAX`): from then on a reader of that
//! path, should the file come back, rebuilds from the log instead of trusting half-deleted
//! rows (a rebuild clears the old rows first). Every later chunk checks that the mark is
//! still there, so rows a rebuild wrote since are never touched. The last chunk deletes
//! the watermark, the session values and, when asked, the session's lock and presence
//! rows (exactly the rows that were judged, and only when no other file of the projection
//! has the same session id). A prune interrupted between chunks leaves a marked
//! watermark, which the next prune finishes.

use super::db_err;
use crate::error::Result;
use crate::sqlite::Step;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

/// Rows of one table deleted per transaction.
const CHUNK_ROWS: i64 = 20_000;

/// The watermark's identity while a session's rows are being deleted: no file has it.
const MARK: i64 = -1;

/// A session the projection holds rows of.
#[derive(Debug, Clone)]
pub(crate) struct SessionRows {
    /// The key: the session file's canonical path.
    pub file: String,
    pub session_id: String,
    /// Entries and state events folded.
    pub entries: u64,
    pub events: u64,
}

/// Every session the projection holds rows of, in path order.
pub(crate) fn sessions(conn: &Connection, db: &Path) -> Result<Vec<SessionRows>> {
    let mut q = conn
        .prepare(
            "SELECT s.file, s.session_id, s.entry_count, \
                    (SELECT count(*) FROM events e WHERE e.file = s.file) \
             FROM sessions s ORDER BY s.file",
        )
        .map_err(db_err(db, "listing the projected sessions"))?;
    let rows = q
        .query_map([], |r| {
            Ok(SessionRows {
                file: r.get(0)?,
                session_id: r.get(1)?,
                entries: r.get::<_, i64>(2)?.max(0) as u64,
                events: r.get::<_, i64>(3)?.max(0) as u64,
            })
        })
        .and_then(Iterator::collect)
        .map_err(db_err(db, "listing the projected sessions"))?;
    Ok(rows)
}

/// A row of the lock or presence table, as judged before the removal: deleted only if it
/// is still exactly this row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hold {
    pub holder: String,
    /// `acquired_at` (lock) or `since` (presence), ms since the Unix epoch.
    pub at_ms: i64,
}

/// What [`remove`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Removed {
    /// `false`: nothing was deleted, because the file was there again when checked under
    /// the write lock, or its rows were rebuilt meanwhile.
    pub rows: bool,
    pub lock: bool,
    pub presence: bool,
}

fn table_exists(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [name],
        |r| r.get(0),
    )
}

/// Runs `f` in one `BEGIN IMMEDIATE` transaction: committed when it returns `Ok`,
/// rolled back otherwise.
fn in_transaction<R>(
    conn: &Connection,
    db: &Path,
    f: impl FnOnce() -> rusqlite::Result<R>,
) -> Result<R> {
    crate::sqlite::immediate(
        conn,
        |step, e| match step {
            Step::Begin => db_err(db, step.doing())(e),
            Step::Commit => db_err(db, "committing the removal")(e),
        },
        |_| f().map_err(db_err(db, "removing a session's rows")),
    )
}

/// Deletes up to [`CHUNK_ROWS`] rows of `file` from `nodes` and from `events`; `true`
/// when none is left in either.
fn delete_chunk(conn: &Connection, file: &str, chunk: i64) -> rusqlite::Result<bool> {
    let mut left = false;
    for table in ["nodes", "events"] {
        let n = conn.execute(
            &format!(
                "DELETE FROM {table} WHERE file = ?1 AND idx IN \
                 (SELECT idx FROM {table} WHERE file = ?1 ORDER BY idx LIMIT ?2)"
            ),
            params![file, chunk],
        )?;
        left |= n as i64 == chunk;
    }
    if left {
        return Ok(false);
    }
    let more: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM nodes WHERE file = ?1) \
             OR EXISTS (SELECT 1 FROM events WHERE file = ?1)",
        [file],
        |r| r.get(0),
    )?;
    Ok(!more)
}

/// Whether the watermark of `file` carries the removal's mark.
fn marked(conn: &Connection, file: &str) -> rusqlite::Result<bool> {
    Ok(conn
        .query_row(
            "SELECT dev = ?2 AND ino = ?2 FROM sessions WHERE file = ?1",
            params![file, MARK],
            |r| r.get::<_, bool>(0),
        )
        .optional()?
        .unwrap_or(false))
}

/// Removes the rows of the session keyed `file` (see the module docs). `still_gone` is
/// asked under the write lock, before anything is deleted; `lock` and `presence` are the
/// judged rows of `session_id` to delete with the last chunk.
pub(crate) fn remove(
    conn: &Connection,
    db: &Path,
    file: &str,
    session_id: &str,
    still_gone: impl FnOnce() -> bool,
    lock: Option<&Hold>,
    presence: Option<&Hold>,
) -> Result<Removed> {
    remove_in_chunks(
        conn,
        db,
        file,
        session_id,
        still_gone,
        (lock, presence),
        CHUNK_ROWS,
    )
}

fn remove_in_chunks(
    conn: &Connection,
    db: &Path,
    file: &str,
    session_id: &str,
    still_gone: impl FnOnce() -> bool,
    (lock, presence): (Option<&Hold>, Option<&Hold>),
    chunk: i64,
) -> Result<Removed> {
    let started = in_transaction(conn, db, || {
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE file = ?1)",
            [file],
            |r| r.get(0),
        )?;
        if !exists || !still_gone() {
            return Ok(false);
        }
        // IMPORTANT: from here on no reader trusts these rows (identity matches no file).
        conn.execute(
            "UPDATE sessions SET dev = ?2, ino = ?2, file_len = ?3 WHERE file = ?1",
            params![file, MARK, i64::MAX],
        )?;
        Ok(true)
    })?;
    // A prune interrupted earlier left the mark: this one goes on.
    if !started && !in_transaction(conn, db, || marked(conn, file))? {
        return Ok(Removed::default());
    }
    loop {
        let step = in_transaction(conn, db, || {
            if !marked(conn, file)? {
                // Rebuilt meanwhile (the file came back): those rows are not ours to delete.
                return Ok(None);
            }
            if !delete_chunk(conn, file, chunk)? {
                return Ok(Some(None));
            }
            conn.execute("DELETE FROM session_values WHERE file = ?1", [file])?;
            conn.execute("DELETE FROM sessions WHERE file = ?1", [file])?;
            let shared: bool = conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1)",
                [session_id],
                |r| r.get(0),
            )?;
            let mut done = Removed {
                rows: true,
                ..Removed::default()
            };
            if shared {
                return Ok(Some(Some(done)));
            }
            if let Some(h) = lock.filter(|_| table_exists(conn, "write_lock").unwrap_or(false)) {
                done.lock = conn.execute(
                    "DELETE FROM write_lock WHERE session_id = ?1 AND holder = ?2 AND acquired_at = ?3",
                    params![session_id, h.holder, h.at_ms],
                )? > 0;
            }
            if let Some(h) = presence.filter(|_| table_exists(conn, "pi_presence").unwrap_or(false))
            {
                done.presence = conn.execute(
                    "DELETE FROM pi_presence WHERE session_id = ?1 AND holder = ?2 AND since = ?3",
                    params![session_id, h.holder, h.at_ms],
                )? > 0;
            }
            Ok(Some(Some(done)))
        })?;
        match step {
            None => return Ok(Removed::default()),
            Some(None) => continue,
            Some(Some(done)) => return Ok(done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::Projection;

    fn count(conn: &Connection, table: &str, file: &str) -> i64 {
        conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE file = ?1"),
            [file],
            |r| r.get(0),
        )
        .expect("count")
    }

    fn session(dir: &Path, name: &str, events: usize) -> std::path::PathBuf {
        let path = dir.join(name);
        let mut text = format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"{name}\",\"timestamp\":\"t\",\"cwd\":\"/\"}}\n"
        );
        let mut parent = "null".to_string();
        for i in 0..events {
            let id = format!("{i:08x}");
            text.push_str(&format!(
                "{{\"type\":\"custom\",\"customType\":\"session-state/n\",\"data\":{{\"v\":1,\"scope\":\"branch\",\"op\":\"set\",\"value\":{i}}},\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"t\"}}\n"
            ));
            parent = format!("\"{id}\"");
        }
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn rows_go_in_chunks_and_a_rebuild_in_between_is_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("states.sqlite");
        let mut p = Projection::open(&db).expect("open");
        let a = session(dir.path(), "a.jsonl", 7);
        let b = session(dir.path(), "b.jsonl", 3);
        p.catch_up(&a).expect("a");
        p.catch_up(&b).expect("b");
        let (ka, kb) = (
            super::super::file_key(&a).expect("a"),
            super::super::file_key(&b).expect("b"),
        );
        let listed = sessions(p.connection(), &db).expect("list");
        assert_eq!(
            listed
                .iter()
                .map(|s| (s.entries, s.events))
                .collect::<Vec<_>>(),
            [(7, 7), (3, 3)]
        );

        // Chunks of 2 rows: four transactions for a's 7 nodes and 7 events.
        let conn = p.connection();
        let r =
            remove_in_chunks(conn, &db, &ka, "a.jsonl", || true, (None, None), 2).expect("remove");
        assert!(r.rows);
        for t in ["sessions", "nodes", "events", "session_values"] {
            assert_eq!(count(conn, t, &ka), 0, "{t} of a");
        }
        assert_eq!(count(conn, "nodes", &kb), 3, "b untouched");

        // The file is back when checked under the lock: nothing is deleted.
        let r =
            remove_in_chunks(conn, &db, &kb, "b.jsonl", || false, (None, None), 2).expect("remove");
        assert_eq!(r, Removed::default());
        assert_eq!(count(conn, "nodes", &kb), 3);

        // Interrupted after the mark: a rebuild (the file came back) replaces the rows,
        // and the interrupted removal then leaves them alone.
        conn.execute(
            "UPDATE sessions SET dev = -1, ino = -1 WHERE file = ?1",
            [&kb],
        )
        .expect("mark");
        p.catch_up(&b).expect("rebuilt");
        assert!(
            p.last_catch_up().expect("caught up").rebuilt,
            "a marked watermark is rebuilt"
        );
        let conn = p.connection();
        let r =
            remove_in_chunks(conn, &db, &kb, "b.jsonl", || false, (None, None), 2).expect("remove");
        assert_eq!(r, Removed::default());
        assert_eq!(count(conn, "nodes", &kb), 3, "the rebuilt rows stand");
    }
}
