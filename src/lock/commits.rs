//! Whether anyone has committed to the projection database since a judgement of its lock
//! rows, read without a transaction: the WAL-index header's transaction counter.
//!
//! In WAL mode every commit, of any connection of any process, rewrites the WAL-index
//! header in the database's shared-memory file `<database>-shm`, and its field `iChange`
//! (a native-endian 32-bit counter at byte 8, "incremented with each transaction" in
//! SQLite's documented WAL file format) moves on. One `pread` of those four bytes tells a
//! write on the fast path that nobody has committed since its connection judged the rows
//! (`docs/lock.md`, "The fast path"), where `PRAGMA data_version` would open a read
//! transaction (SQLite's shared-memory read lock taken and released) on every write.
//!
//! The file exists and stays the same file while a connection to the database is open
//! (SQLite removes it only when its last connection closes), and the projection that
//! reads it keeps its own connection open. It is opened read-only, never through a
//! symlink and never blocking; where it cannot be read, the caller asks SQLite instead.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The transaction counter of the database at a path ([`CommitStamp::read`]).
#[derive(Debug)]
#[cfg_attr(
    not(unix),
    expect(
        dead_code,
        reason = "read on Unix only: no fast path elsewhere (docs/lock.md)"
    )
)]
pub(crate) struct CommitStamp {
    path: PathBuf,
    file: OnceLock<Option<File>>,
}

impl CommitStamp {
    /// The counter of the database file `db` (`<db>-shm`). Nothing is opened yet.
    pub(crate) fn beside(db: &Path) -> CommitStamp {
        let mut path = db.as_os_str().to_owned();
        path.push("-shm");
        CommitStamp {
            path: PathBuf::from(path),
            file: OnceLock::new(),
        }
    }

    /// The counter now; `None` where the shared-memory file cannot be read (then the
    /// caller asks SQLite). Call it first while a connection has the database open in
    /// WAL mode (inside a transaction), so that the file is SQLite's.
    pub(crate) fn read(&self) -> Option<u32> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            let file = self.file.get_or_init(|| open(&self.path)).as_ref()?;
            let mut bytes = [0u8; 4];
            file.read_exact_at(&mut bytes, 8).ok()?;
            Some(u32::from_ne_bytes(bytes))
        }
        #[cfg(not(unix))]
        {
            None
        }
    }
}

#[cfg(unix)]
fn open(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// Every commit of another connection moves the counter on; reads do not.
    #[cfg(unix)]
    #[test]
    fn every_commit_of_any_connection_moves_the_counter_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("db.sqlite");
        let open = || {
            let c = rusqlite::Connection::open(&db).expect("open");
            c.pragma_update(None, "journal_mode", "WAL").expect("wal");
            c
        };
        let (mine, other) = (open(), open());
        mine.execute_batch("CREATE TABLE t(x); BEGIN; SELECT * FROM t; COMMIT;")
            .expect("create");
        let stamp = CommitStamp::beside(&db);
        let first = stamp.read().expect("the counter");
        other
            .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
            .expect("read");
        assert_eq!(stamp.read(), Some(first), "a read commits nothing");
        other
            .execute("INSERT INTO t VALUES (1)", [])
            .expect("insert");
        let second = stamp.read().expect("the counter");
        assert_ne!(second, first, "another connection's commit");
        mine.execute("INSERT INTO t VALUES (2)", [])
            .expect("insert");
        assert_ne!(stamp.read(), Some(second), "this connection's commit too");
        assert_eq!(CommitStamp::beside(&dir.path().join("none")).read(), None);
    }
}
