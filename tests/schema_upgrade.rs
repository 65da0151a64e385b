//! Projection databases across versions (docs/spec.md §4): a database of every schema
//! session-state has shipped (`fixtures/projection/v1.sqlite` .. `v5.sqlite`, made by
//! `fixtures/projection/generate.sh`) is opened by this version with a live process
//! holding its lock row (and, from version 3 on, a running Pi's presence row): the rows
//! survive the upgrade and keep refusing other writers. A database of a newer schema is
//! refused by every command and left byte for byte; a corrupt one holding a live holder's
//! row is refused, never deleted. An unstamped one whose tables are still in its `-wal` is
//! the version they are; one stamped this version over schema 4's tables is refused naming
//! both versions while a live holder has a row, and rebuilt once none has.
#![expect(clippy::unwrap_used)]

use crate::common::{self, holders::Proc, now_ms, raw_db};
use session_state::Header;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The schema version this session-state writes.
const CURRENT: &str = "6";

fn fixture(n: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/projection/v{n}.sqlite"))
}

/// A session file of `session_id` with one user message.
fn session(dir: &Path, session_id: &str) -> PathBuf {
    let file = dir.join(format!("{session_id}.jsonl"));
    let header = Header::new(session_id, "/home/me/project")
        .with_timestamp("2026-01-05T10:00:00.000Z")
        .to_line();
    let user = r#"{"type":"message","id":"a0000001","parentId":null,"timestamp":"2026-01-05T10:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#;
    std::fs::write(&file, format!("{header}{user}\n")).unwrap();
    file
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    common::cli().args(args).output().unwrap()
}

fn write(file: &Path, db: &Path) -> Output {
    run(&[
        "write".as_ref(),
        file.as_os_str(),
        "--plugin".as_ref(),
        "p".as_ref(),
        "--value".as_ref(),
        "1".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
    ])
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn meta_version(db: &Path) -> String {
    raw_db(db)
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// The holder of `session`'s row in `table` (`write_lock` or `pi_presence`), if any.
fn holder_in(db: &Path, table: &str, session: &str) -> Option<String> {
    use rusqlite::OptionalExtension;
    raw_db(db)
        .query_row(
            &format!("SELECT holder FROM {table} WHERE session_id = ?1"),
            [session],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
}

#[test]
fn every_earlier_schema_upgrades_keeping_a_live_holders_lock_and_presence_rows() {
    for n in 1..=5u32 {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("states.sqlite");
        std::fs::copy(fixture(n), &db).unwrap();
        let (locked, held_by_pi) = (
            session(dir.path(), "sess-lock"),
            session(dir.path(), "sess-pi"),
        );
        // A live process of this test holds the fixture's rows.
        let live = Proc::sleep();
        let holder = live.holder().to_string();
        let conn = raw_db(&db);
        conn.execute(
            "UPDATE write_lock SET holder = ?1, acquired_at = ?2",
            rusqlite::params![holder, now_ms()],
        )
        .unwrap();
        let has_presence = n >= 3;
        if has_presence {
            conn.execute(
                "UPDATE pi_presence SET holder = ?1, since = ?2, session_file = ?3",
                rusqlite::params![holder, now_ms(), held_by_pi.to_string_lossy()],
            )
            .unwrap();
        }
        drop(conn);

        // The lock row refuses a writer, with the usual four elements.
        let out = write(&locked, &db);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "v{n}: {err}");
        for part in ["sess-lock", &holder, "write refused", "write_lock"] {
            assert!(err.contains(part), "v{n}: {part:?} in {err}");
        }
        assert_eq!(meta_version(&db), CURRENT, "v{n}: upgraded");
        assert_eq!(
            holder_in(&db, "write_lock", "sess-lock"),
            Some(holder.clone()),
            "v{n}"
        );
        // The running Pi's row refuses a writer too.
        let out = write(&held_by_pi, &db);
        if has_presence {
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "v{n}: {err}");
            assert!(
                err.contains("running Pi") && err.contains("pi_presence"),
                "v{n}: {err}"
            );
            assert_eq!(
                holder_in(&db, "pi_presence", "sess-pi"),
                Some(holder.clone())
            );
        } else {
            assert_eq!(out.status.code(), Some(0), "v{n}: {}", stderr(&out));
        }
        // `status` sees the lock row the upgrade kept.
        let out = run(&[
            "status".as_ref(),
            locked.as_os_str(),
            "--db".as_ref(),
            db.as_os_str(),
            "--json".as_ref(),
        ]);
        assert_eq!(out.status.code(), Some(0), "v{n}: {}", stderr(&out));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(status["lock"]["holder"], holder.as_str(), "v{n}: {status}");

        // Once the holder has exited, writers go in.
        live.end();
        let out = write(&locked, &db);
        assert_eq!(out.status.code(), Some(0), "v{n}: {}", stderr(&out));
        let out = write(&held_by_pi, &db);
        assert_eq!(out.status.code(), Some(0), "v{n}: {}", stderr(&out));
    }
}

#[test]
fn a_newer_schema_is_refused_by_every_command_and_left_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("states.sqlite");
    std::fs::copy(fixture(4), &db).unwrap();
    raw_db(&db)
        .execute(
            "UPDATE meta SET value = '7' WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    raw_db(&db)
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let before = std::fs::read(&db).unwrap();
    let file = session(dir.path(), "sess-new");
    let len = std::fs::metadata(&file).unwrap().len();
    let (f, d) = (file.as_os_str(), db.as_os_str());
    let p = ["--plugin".as_ref(), "p".as_ref()];
    let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["read".as_ref(), f, p[0], p[1], "--db".as_ref(), d],
        vec![
            "write".as_ref(),
            f,
            p[0],
            p[1],
            "--value".as_ref(),
            "1".as_ref(),
            "--db".as_ref(),
            d,
        ],
        vec!["drop".as_ref(), f, p[0], p[1], "--db".as_ref(), d],
        vec!["status".as_ref(), f, "--db".as_ref(), d],
        vec![
            "force-refresh".as_ref(),
            f,
            "--yes".as_ref(),
            "--db".as_ref(),
            d,
        ],
        vec!["prune".as_ref(), "--db".as_ref(), d],
    ];
    for args in commands {
        let out = run(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("made by a newer session-state (schema version 7")
                && err.contains(&*db.to_string_lossy())
                && err.contains("left untouched"),
            "{args:?}: {err}"
        );
        assert_eq!(std::fs::read(&db).unwrap(), before, "{args:?}: untouched");
    }
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        len,
        "nothing written"
    );
    let err = common::open_store(&db).unwrap_err();
    assert!(
        matches!(&err, session_state::Error::Projection(session_state::ProjectionError::NewerDatabase { version, known: 6, .. }) if version == "7"),
        "{err:?}"
    );
}

/// Garbage over the page of `meta` (the first table every open reads): the database is
/// corrupt, and its lock table still reads.
fn corrupt_meta(db: &Path) {
    let conn = raw_db(db);
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let (root, size): (i64, i64) = conn
        .query_row(
            "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master \
             WHERE name = 'meta'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    drop(conn);
    let mut bytes = std::fs::read(db).unwrap();
    let start = ((root - 1) * size) as usize;
    for (i, b) in bytes[start..start + size as usize].iter_mut().enumerate() {
        *b = (i * 7919 % 251) as u8;
    }
    std::fs::write(db, bytes).unwrap();
}

#[test]
fn a_corrupt_database_holding_a_live_holders_row_is_refused_not_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("states.sqlite");
    let file = session(dir.path(), "sess-lock");
    let other = session(dir.path(), "sess-other");
    let out = write(&other, &db);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let live = Proc::sleep();
    let holder = live.holder().to_string();
    raw_db(&db)
        .execute(
            "INSERT INTO write_lock(session_id, holder, acquired_at, action) \
             VALUES ('sess-lock', ?1, ?2, 'write')",
            rusqlite::params![holder, now_ms()],
        )
        .unwrap();
    corrupt_meta(&db);
    let before = std::fs::read(&db).unwrap();
    let len = std::fs::metadata(&file).unwrap().len();

    for target in [&other, &file] {
        let out = write(target, &db);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        for part in [
            "sess-lock",
            &holder,
            "rebuilding the projection database refused",
            "corrupt",
            "write_lock",
        ] {
            assert!(err.contains(part), "{part:?} in {err}");
        }
        assert_eq!(std::fs::read(&db).unwrap(), before, "not deleted");
    }
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        len,
        "nothing written"
    );

    // Once the holder has exited, the database is rebuilt and the write goes in.
    live.end();
    let out = write(&file, &db);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(meta_version(&db), CURRENT);
}

/// The tables of the file alone, read without its WAL (`immutable`).
fn tables_in_the_file_alone(db: &Path) -> Vec<String> {
    let uri = format!("file:{}?immutable=1", db.display());
    let conn = rusqlite::Connection::open_with_flags(
        uri,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// A database of schema 1 or 2 (no stamp in its header: `meta.app` tells it ours) whose
/// tables are all still in its `-wal` (the process that made them is still connected, so
/// nothing was checkpointed), holding a live holder's lock row, is recognised as the version
/// it is: never called an empty database to remove, but upgraded in place, the row kept and
/// refusing writers until its holder exits.
#[test]
fn an_older_database_whose_tables_are_in_its_wal_is_recognised_as_its_version() {
    for n in [1u32, 2] {
        let dir = tempfile::tempdir().unwrap();
        let live = Proc::sleep();
        let holder = live.holder().to_string();
        // Made as that version made it; copied while its maker is connected.
        let made = dir.path().join("made.sqlite");
        let maker = rusqlite::Connection::open(&made).unwrap();
        maker
            .query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .unwrap();
        let sql = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("fixtures/projection/schema-{n}.sql")),
        )
        .unwrap();
        maker.execute_batch(&sql).unwrap();
        maker
            .execute(
                "INSERT INTO meta(key, value) VALUES ('app', 'session-state'), \
                 ('schema_version', ?1)",
                [n.to_string()],
            )
            .unwrap();
        maker
            .execute(
                "INSERT INTO write_lock(session_id, holder, acquired_at, action) \
                 VALUES ('sess-lock', ?1, ?2, 'write')",
                rusqlite::params![holder, now_ms()],
            )
            .unwrap();
        let db = dir.path().join("states.sqlite");
        std::fs::copy(&made, &db).unwrap();
        std::fs::copy(
            dir.path().join("made.sqlite-wal"),
            dir.path().join("states.sqlite-wal"),
        )
        .unwrap();
        drop(maker);
        assert!(
            tables_in_the_file_alone(&db).is_empty(),
            "v{n}: tables in the WAL only"
        );
        let locked = session(dir.path(), "sess-lock");

        let out = write(&locked, &db);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "v{n}: {err}");
        assert!(
            !err.contains("remove it") && !err.contains("empty"),
            "v{n}: {err}"
        );
        for part in ["sess-lock", &holder, "write refused", "write_lock"] {
            assert!(err.contains(part), "v{n}: {part:?} in {err}");
        }
        assert_eq!(meta_version(&db), CURRENT, "v{n}: upgraded");
        assert_eq!(
            holder_in(&db, "write_lock", "sess-lock"),
            Some(holder),
            "v{n}"
        );

        live.end();
        let out = write(&locked, &db);
        assert_eq!(out.status.code(), Some(0), "v{n}: {}", stderr(&out));
    }
}

/// A database whose `meta` says this version's schema over the tables of schema 4 (the
/// stamp moved on, the tables did not) is never used as it is (every command failed on raw
/// SQL, `table events has no column named sv`): while a live holder has a row in it, every
/// command refuses with the lock's four elements and a reason naming both versions, and
/// nothing is deleted; once no live holder could be hurt, it is rebuilt and commands work.
#[test]
fn a_stamp_that_does_not_match_the_tables_is_refused_naming_both_then_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("states.sqlite");
    std::fs::copy(fixture(4), &db).unwrap();
    let locked = session(dir.path(), "sess-lock");
    let other = session(dir.path(), "sess-other");
    let live = Proc::sleep();
    let holder = live.holder().to_string();
    let conn = raw_db(&db);
    conn.execute(
        "UPDATE write_lock SET holder = ?1, acquired_at = ?2",
        rusqlite::params![holder, now_ms()],
    )
    .unwrap();
    conn.execute(
        "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
        [CURRENT],
    )
    .unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    let before = std::fs::read(&db).unwrap();

    let p = ["--plugin".as_ref(), "p".as_ref()];
    let (o, d) = (other.as_os_str(), db.as_os_str());
    let read: Vec<&std::ffi::OsStr> = vec!["read".as_ref(), o, p[0], p[1], "--db".as_ref(), d];
    for out in [write(&other, &db), write(&locked, &db), run(&read)] {
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(!err.contains("no column named"), "{err}");
        for part in [
            "schema version 6",
            "schema version 4",
            &holder,
            "sess-lock",
            "rebuilding the projection database refused",
            "write_lock",
        ] {
            assert!(err.contains(part), "{part:?} in {err}");
        }
        assert_eq!(
            std::fs::read(&db).unwrap(),
            before,
            "nothing deleted or written"
        );
    }

    // Once its holder has exited, nobody can be hurt: rebuilt, and commands work.
    live.end();
    let out = write(&other, &db);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(meta_version(&db), CURRENT);
    let sv: i64 = raw_db(&db)
        .query_row(
            "SELECT count(*) FROM pragma_table_info('events') WHERE name = 'sv'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sv, 1, "this version's tables");
    let out = run(&read);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
}
