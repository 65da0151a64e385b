//! [`PostgresStore`], the PostgreSQL backend of [`SessionStore`]: sessions shared by
//! many machines, kept on one PostgreSQL server.
//!
//! The header line and every entry line are rows, kept byte for byte (`text`, not
//! `jsonb`), so the crate's reader, the folds and `export` see exactly what Pi wrote. One
//! writer per session is enforced by the database: an append locks the session's row,
//! checks the stored next sequence number and inserts the lines under the
//! `(session_id, seq)` primary key, committed before it returns. Large batches (an
//! import) are streamed with `COPY`. See `docs/postgres.md`.

use super::lines::line_ids;
use super::{LineVisitor, SessionStore};
use crate::error::{BackendError, Error, Result, StoreError};
use crate::log::entry::Header;
use postgres::config::Host;
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Client, Config};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The version of the tables this build reads and writes (`session_state_schema`).
pub const POSTGRES_SCHEMA_VERSION: i32 = 1;

/// How long an append waits for another writer's transaction on the same session before
/// it is refused with [`StoreError::Busy`], unless [`PostgresStore::with_lock_wait`] says
/// otherwise; also how long the crate retries a server that is unavailable
/// ([`SessionStore::retry_window`]).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// The key of the transaction-scoped advisory lock that serializes schema creation
/// between processes ("SessStat" in ASCII).
const SCHEMA_LOCK_KEY: i64 = 0x5365_7373_5374_6174;

/// `read_lines` fetches rows this many at a time.
const READ_PAGE: i32 = 512;

/// One page of `read_lines`: the session's `next_seq` with the rows from `$2`, below
/// `$3`, at most `$4` (no row: no such session; a row without `seq`: no entries there).
const READ_PAGE_SQL: &str = "
SELECT s.next_seq, e.seq, e.line
FROM session_state_sessions s
LEFT JOIN LATERAL (
    SELECT seq, line FROM session_state_entries
    WHERE session_id = s.session_id AND seq >= $2 AND seq < least($3, s.next_seq)
    ORDER BY seq LIMIT $4
) e ON true
WHERE s.session_id = $1
ORDER BY e.seq
";

/// A batch of at least this many lines goes in with `COPY`, not one statement.
const COPY_LINES: usize = 64;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS session_state_sessions (
    session_id  text PRIMARY KEY,
    header      text NOT NULL,
    next_seq    bigint NOT NULL CHECK (next_seq >= 0),
    last_id     text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS session_state_entries (
    session_id  text NOT NULL,
    seq         bigint NOT NULL CHECK (seq >= 0),
    entry_id    text NOT NULL,
    line        text NOT NULL,
    PRIMARY KEY (session_id, seq),
    CONSTRAINT session_state_entries_id_unique UNIQUE (session_id, entry_id)
);
";

/// The steady-state append: one statement, so one round trip and one commit. It locks
/// the session's row (waiting at most `lock_timeout` for another writer's transaction),
/// and inserts the lines and advances `next_seq` only when the stored next sequence
/// number is `$2`. It returns what it found, so a refused append tells the stored state.
const APPEND: &str = "
WITH s AS MATERIALIZED (
    SELECT next_seq FROM session_state_sessions WHERE session_id = $1 FOR UPDATE
), ok AS MATERIALIZED (
    SELECT 1 FROM s WHERE next_seq = $2
), ins AS (
    INSERT INTO session_state_entries (session_id, seq, entry_id, line)
    SELECT $1, e.seq, e.id, e.line
    FROM unnest($3::bigint[], $4::text[], $5::text[]) AS e (seq, id, line)
    WHERE EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), upd AS (
    UPDATE session_state_sessions SET next_seq = $6, last_id = $7, updated_at = now()
    WHERE session_id = $1 AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
)
SELECT (SELECT next_seq FROM s), (SELECT count(*) FROM upd)
";

/// A new session: its row and its first lines, one statement.
const CREATE_WITH_ENTRIES: &str = "
WITH s AS (
    INSERT INTO session_state_sessions (session_id, header, next_seq, last_id)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (session_id) DO NOTHING
    RETURNING 1
), ins AS (
    INSERT INTO session_state_entries (session_id, seq, entry_id, line)
    SELECT $1, e.seq, e.id, e.line
    FROM unnest($5::bigint[], $6::text[], $7::text[]) AS e (seq, id, line)
    WHERE EXISTS (SELECT 1 FROM s)
    RETURNING 1
)
SELECT (SELECT count(*) FROM s)
";

/// Who holds the session's row lock: the transaction whose id is the row's `xmax`.
const HOLDER: &str = "
SELECT a.application_name, a.pid, host(a.client_addr),
       to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
FROM session_state_sessions s
JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = s.xmax
                AND l.granted AND l.mode = 'ExclusiveLock'
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE s.session_id = $1
";

/// The PostgreSQL backend of [`SessionStore`]: many sessions, many machines, one server.
///
/// ```no_run
/// use session_state::{Header, PostgresStore, Sessions};
/// let store = PostgresStore::connect("postgres://agent:secret@db.internal/sessions")?;
/// println!("{store:?}"); // PostgresStore { url: "postgres://agent:***@db.internal:5432/sessions" }
/// let sessions = Sessions::new(store);
/// let header = Header::new("0195f1d0-7c4e-7000-8000-000000000001", "/home/me/project");
/// sessions.create(header.clone())?;
/// let user = serde_json::json!({"type": "message",
///                               "message": {"role": "user", "content": "hi", "timestamp": 0}});
/// assert_eq!(sessions.append(header.id(), 0, &[user])?, 1); // committed when it returns
/// # Ok::<(), session_state::Error>(())
/// ```
///
/// One connection per store, behind a mutex (calls from several threads take turns); a
/// lost connection is dropped and the next call connects again. Failures are told
/// apart for the crate's retries: a server that cannot be reached or is restarting,
/// shutting down or out of connection slots is [`StoreError::Unavailable`]; a
/// connection that broke while an append was in flight is
/// [`StoreError::Indeterminate`]. The password of the URL is never shown:
/// [`PostgresStore::url`] and `Debug` give the URL with `***` in its place.
pub struct PostgresStore {
    config: Config,
    /// How connections are made: without TLS or through rustls (`sslmode`).
    tls: super::tls::Tls,
    url: String,
    lock_wait: Duration,
    conn: Mutex<Option<Client>>,
    /// The append statement prepared on the current connection, once it has appended
    /// before (a process that appends once does not pay the prepare's round trip).
    append_stmt: Mutex<Prepared>,
}

/// The append statement on the current connection.
#[derive(Default)]
enum Prepared {
    #[default]
    Unused,
    /// Used once, unprepared.
    Once,
    Ready(postgres::Statement),
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// Where a driver error happened, for what the crate may conclude from it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before anything was written (connecting, reading, starting a transaction).
    Before,
    /// While a write was in flight: a broken connection leaves its outcome unknown.
    Writing,
}

impl PostgresStore {
    /// Connects to the server at `url` (`postgres://user:password@host:port/db?…` or the
    /// `key=value` form of libpq) and creates the tables if they are missing. TLS follows
    /// libpq's `sslmode` (`disable`, `prefer` (the default), `require`, `verify-ca`,
    /// `verify-full`) and `sslrootcert` (a PEM file of CA certificates, or `system`):
    /// see `docs/postgres.md`, "TLS".
    ///
    /// Errors: an unparsable URL is [`Error::StoreUrl`]; an unreachable or refusing server
    /// is [`StoreError::Unavailable`] or [`StoreError::Database`] naming the URL without
    /// its password; tables of a newer session-state are refused the same way.
    pub fn connect(url: &str) -> Result<PostgresStore> {
        let (mut config, tls) = super::tls::parse(url, redact)?;
        if config.get_application_name().is_none() {
            config.application_name(&application_name());
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let store = PostgresStore {
            url: redact(&config),
            config,
            tls,
            lock_wait: DEFAULT_LOCK_WAIT,
            conn: Mutex::new(None),
            append_stmt: Mutex::default(),
        };
        store.run(|_| Ok(()))?;
        Ok(store)
    }

    /// The same store, waiting at most `wait` for another writer's transaction on a
    /// session before refusing an append with [`StoreError::Busy`] (at least 1 ms).
    pub fn with_lock_wait(mut self, wait: Duration) -> PostgresStore {
        self.lock_wait = wait.max(Duration::from_millis(1));
        if let Some(client) = lock(&self.conn).as_mut() {
            // Applied on the next connection if this fails.
            let _ = set_lock_timeout(client, self.lock_wait);
        }
        self
    }

    /// The URL, with the password (if any) replaced by `***`: safe to print.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The store's error for a driver error met while doing `action`.
    fn failed(
        &self,
        action: impl Into<String>,
        phase: Phase,
    ) -> impl FnOnce(postgres::Error) -> StoreError + '_ {
        let action = action.into();
        move |e| classify(&self.url, action, phase, e)
    }

    /// Runs `f` on the connection, connecting first when there is none or it closed. A
    /// lost connection is dropped, so the next call connects again.
    fn run<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = lock(&self.conn);
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = None;
            *lock(&self.append_stmt) = Prepared::Unused;
            *guard = Some(self.open()?);
        }
        let Some(client) = guard.as_mut() else {
            return Err(StoreError::File(Box::new(Error::Internal {
                what: format!("{}: no connection after connecting", self.url),
            })));
        };
        let result = f(client);
        let lost = matches!(
            &result,
            Err(StoreError::Unavailable { .. } | StoreError::Indeterminate { .. })
        );
        if lost || client.is_closed() {
            *guard = None;
            *lock(&self.append_stmt) = Prepared::Unused;
        }
        result
    }

    fn open(&self) -> Result<Client, StoreError> {
        let fail = |a: &'static str| self.failed(a, Phase::Before);
        let mut client = self.tls.connect(&self.config).map_err(fail("connecting"))?;
        // One round trip when the tables are there: the lock wait, the commit setting and
        // the schema's version.
        let ms = self.lock_wait.as_millis().max(1);
        let fast = client.simple_query(&format!(
            "SET lock_timeout = '{ms}ms'; SELECT current_setting('synchronous_commit'), \
             (SELECT max(version) FROM session_state_schema)::text"
        ));
        let (sync, version) = match fast {
            Ok(messages) => {
                let row = messages.iter().find_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(r) => Some(r),
                    _ => None,
                });
                match row {
                    Some(r) => (
                        r.get(0).unwrap_or("on").to_owned(),
                        r.get(1).and_then(|v| v.parse::<i32>().ok()),
                    ),
                    None => ("on".to_owned(), None),
                }
            }
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                // A new database: the statements ran as one transaction, rolled back.
                set_lock_timeout(&mut client, self.lock_wait).map_err(fail("configuring"))?;
                let sync: String = client
                    .query_one("SELECT current_setting('synchronous_commit')", &[])
                    .and_then(|r| r.try_get(0))
                    .map_err(fail("configuring"))?;
                (sync, None)
            }
            Err(e) => return Err(fail("configuring")(e)),
        };
        // Durable when it returns: never run with commits that return before the WAL is
        // flushed. A stronger server setting (remote_write, remote_apply) is kept.
        if sync == "off" {
            client
                .batch_execute("SET synchronous_commit = on")
                .map_err(fail("configuring"))?;
        }
        if version != Some(POSTGRES_SCHEMA_VERSION) {
            self.ensure_schema(&mut client)?;
        }
        Ok(client)
    }

    /// Creates the tables if they are missing, serialized between processes by an
    /// advisory lock; refuses tables of a newer version. One query when they are there.
    fn ensure_schema(&self, client: &mut Client) -> Result<(), StoreError> {
        let fail = || self.failed("creating the tables", Phase::Before);
        let newer = |v: i32| StoreError::Database {
            store: self.url.clone(),
            action: "checking the tables".into(),
            source: BackendError {
                source: format!(
                    "the tables are of session-state schema version {v}; this build reads \
                     version {POSTGRES_SCHEMA_VERSION}: upgrade session-state"
                )
                .into(),
                sql_state: None,
            },
        };
        let current: Option<i32> =
            match client.query_one("SELECT max(version) FROM session_state_schema", &[]) {
                Ok(row) => row.try_get(0).map_err(fail())?,
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => None,
                Err(e) => return Err(fail()(e)),
            };
        match current {
            Some(v) if v > POSTGRES_SCHEMA_VERSION => return Err(newer(v)),
            Some(v) if v == POSTGRES_SCHEMA_VERSION => return Ok(()),
            _ => {}
        }
        let mut tx = client.transaction().map_err(fail())?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])
            .map_err(fail())?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS session_state_schema (
                 version    integer PRIMARY KEY,
                 created_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .map_err(fail())?;
        let found: Option<i32> = tx
            .query_one("SELECT max(version) FROM session_state_schema", &[])
            .and_then(|r| r.try_get(0))
            .map_err(fail())?;
        if let Some(v) = found
            && v > POSTGRES_SCHEMA_VERSION
        {
            return Err(newer(v));
        }
        tx.batch_execute(SCHEMA).map_err(fail())?;
        tx.execute(
            "INSERT INTO session_state_schema (version) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&POSTGRES_SCHEMA_VERSION],
        )
        .map_err(fail())?;
        tx.commit().map_err(fail())
    }

    fn not_found(&self, session_id: &str) -> StoreError {
        StoreError::NotFound {
            store: self.url.clone(),
            session_id: session_id.into(),
        }
    }

    /// The refusal when another writer's transaction holds the session past the wait.
    fn busy(&self, client: &mut Client, session_id: &str) -> StoreError {
        let holder = client
            .query_opt(HOLDER, &[&session_id])
            .ok()
            .flatten()
            .and_then(|r| {
                let app: Option<String> = r.try_get(0).ok()?;
                let pid: i32 = r.try_get(1).ok()?;
                let addr: Option<String> = r.try_get(2).ok()?;
                let since: Option<String> = r.try_get(3).ok()?;
                Some((app, pid, addr, since))
            });
        let wait = humantime::format_duration(self.lock_wait);
        let (initiator, reason) = match holder {
            Some((app, pid, addr, since)) => (
                format!(
                    "{} (server backend pid {pid}{})",
                    app.filter(|a| !a.is_empty())
                        .unwrap_or_else(|| "a client without application_name".into()),
                    addr.map(|a| format!(", client {a}")).unwrap_or_default()
                ),
                format!(
                    "its transaction on the session{} is still open after the lock wait of \
                     {wait}",
                    since
                        .map(|s| format!(", open since {s},"))
                        .unwrap_or_default()
                ),
            ),
            None => (
                "another writer".into(),
                format!("a transaction on the session is still open after the lock wait of {wait}"),
            ),
        };
        StoreError::Busy {
            initiator,
            action: "append".into(),
            session_id: session_id.into(),
            reason,
        }
    }

    /// The ids of `lines`, which the crate checked (each has one).
    fn ids(&self, session_id: &str, lines: &[String]) -> Result<Vec<String>, StoreError> {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                line_ids(l).0.ok_or_else(|| StoreError::Corrupt {
                    store: self.url.clone(),
                    session_id: session_id.into(),
                    detail: format!("line {i} of an append has no string `id`"),
                })
            })
            .collect()
    }

    /// Streams `lines` into the entries of `session_id` from `first_seq` on, inside
    /// `tx`, with `COPY` (the text format, escaped).
    fn copy_lines(
        &self,
        tx: &mut postgres::Transaction<'_>,
        session_id: &str,
        first_seq: u64,
        ids: &[String],
        lines: &[String],
    ) -> Result<(), StoreError> {
        use std::io::Write;
        let action = format!("storing entries of session {session_id}");
        let mut copy = tx
            .copy_in("COPY session_state_entries (session_id, seq, entry_id, line) FROM STDIN")
            .map_err(self.failed(action.clone(), Phase::Writing))?;
        let mut prefix = Vec::new();
        copy_escape(session_id.as_bytes(), &mut prefix);
        prefix.push(b'\t');
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
        let broken = |e: std::io::Error| StoreError::Indeterminate {
            store: self.url.clone(),
            session_id: session_id.into(),
            first_seq,
            source: BackendError {
                source: Box::new(e),
                sql_state: None,
            },
        };
        for (i, (id, line)) in ids.iter().zip(lines).enumerate() {
            buf.extend_from_slice(&prefix);
            buf.extend_from_slice((first_seq + i as u64).to_string().as_bytes());
            buf.push(b'\t');
            copy_escape(id.as_bytes(), &mut buf);
            buf.push(b'\t');
            copy_escape(line.as_bytes(), &mut buf);
            buf.push(b'\n');
            if buf.len() >= 1 << 20 {
                copy.write_all(&buf).map_err(broken)?;
                buf.clear();
            }
        }
        copy.write_all(&buf).map_err(broken)?;
        copy.finish()
            .map_err(self.failed(action, Phase::Writing))
            .map_err(|e| self.id_taken_or(e, session_id))?;
        Ok(())
    }

    /// A unique violation on the entry ids as [`StoreError::IdTaken`].
    fn id_taken_or(&self, e: StoreError, session_id: &str) -> StoreError {
        match &e {
            StoreError::Database { source, .. }
                if source.sql_state.as_deref() == Some(SqlState::UNIQUE_VIOLATION.code())
                    && source
                        .to_string()
                        .contains("session_state_entries_id_unique") =>
            {
                StoreError::IdTaken {
                    session_id: session_id.into(),
                    id: "(an id of the batch)".into(),
                }
            }
            _ => e,
        }
    }

    /// A large append: one transaction that locks the session's row, checks the
    /// sequence number and streams the lines with `COPY`.
    fn append_copy(
        &self,
        client: &mut Client,
        session_id: &str,
        first_seq: u64,
        ids: &[String],
        lines: &[String],
    ) -> Result<u64, StoreError> {
        let action = format!("appending to session {session_id}");
        let mut tx = client
            .transaction()
            .map_err(self.failed(action.clone(), Phase::Before))?;
        let row = match tx.query_opt(
            "SELECT next_seq FROM session_state_sessions WHERE session_id = $1 FOR UPDATE",
            &[&session_id],
        ) {
            Ok(row) => row,
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                drop(tx);
                return Err(self.busy(client, session_id));
            }
            Err(e) => return Err(self.failed(action, Phase::Before)(e)),
        };
        let Some(row) = row else {
            return Err(self.not_found(session_id));
        };
        let next = seq_from_db(
            row.try_get(0)
                .map_err(self.failed(action.clone(), Phase::Before))?,
        );
        if next != first_seq {
            return Err(StoreError::SequenceMismatch {
                session_id: session_id.into(),
                expected: next,
                got: first_seq,
            });
        }
        self.copy_lines(&mut tx, session_id, first_seq, ids, lines)?;
        let new_next = first_seq + lines.len() as u64;
        tx.execute(
            "UPDATE session_state_sessions SET next_seq = $2, last_id = $3, updated_at = now() \
             WHERE session_id = $1",
            &[&session_id, &seq_to_db(new_next), &ids.last()],
        )
        .map_err(self.failed(action.clone(), Phase::Writing))?;
        tx.commit().map_err(self.failed(action, Phase::Writing))?;
        Ok(new_next)
    }
}

impl SessionStore for PostgresStore {
    fn create(
        &self,
        header: &Header,
        header_line: &str,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        let session_id = header.id();
        let ids = self.ids(session_id, lines)?;
        let next = lines.len() as u64;
        let last = ids.last().cloned();
        let action = format!("storing the new session {session_id}");
        self.run(|client| {
            if lines.len() < COPY_LINES {
                let seqs: Vec<i64> = (0..next).map(seq_to_db).collect();
                let params: [&(dyn ToSql + Sync); 7] = [
                    &session_id,
                    &header_line,
                    &seq_to_db(next),
                    &last,
                    &seqs,
                    &ids,
                    &lines,
                ];
                let created: i64 = client
                    .query_one(CREATE_WITH_ENTRIES, &params)
                    .and_then(|r| r.try_get(0))
                    .map_err(self.failed(action.clone(), Phase::Writing))
                    .map_err(|e| self.id_taken_or(e, session_id))?;
                if created == 0 {
                    return Err(StoreError::AlreadyExists {
                        store: self.url.clone(),
                        session_id: session_id.into(),
                    });
                }
                return Ok(next);
            }
            let mut tx = client
                .transaction()
                .map_err(self.failed(action.clone(), Phase::Before))?;
            let inserted = tx
                .execute(
                    "INSERT INTO session_state_sessions (session_id, header, next_seq, last_id) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (session_id) DO NOTHING",
                    &[&session_id, &header_line, &seq_to_db(next), &last],
                )
                .map_err(self.failed(action.clone(), Phase::Writing))?;
            if inserted == 0 {
                return Err(StoreError::AlreadyExists {
                    store: self.url.clone(),
                    session_id: session_id.into(),
                });
            }
            self.copy_lines(&mut tx, session_id, 0, &ids, lines)?;
            tx.commit().map_err(self.failed(action, Phase::Writing))?;
            Ok(next)
        })
        .map_err(|e| name_append(e, session_id, 0))
    }

    fn list(&self) -> Result<Vec<(String, String)>, StoreError> {
        let rows = self.run(|client| {
            client
                .query("SELECT session_id, header FROM session_state_sessions", &[])
                .map_err(self.failed("listing sessions", Phase::Before))
        })?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<_, String>(0)
                        .map_err(self.failed("listing sessions", Phase::Before))?,
                    row.try_get::<_, String>(1)
                        .map_err(self.failed("listing sessions", Phase::Before))?,
                ))
            })
            .collect()
    }

    fn header_line(&self, session_id: &str) -> Result<String, StoreError> {
        let action = format!("reading session {session_id}");
        let row = self.run(|client| {
            client
                .query_typed_opt(
                    "SELECT header FROM session_state_sessions WHERE session_id = $1",
                    &[(&session_id, Type::TEXT)],
                )
                .map_err(self.failed(action.clone(), Phase::Before))
        })?;
        match row {
            Some(r) => r.try_get(0).map_err(self.failed(action, Phase::Before)),
            None => Err(self.not_found(session_id)),
        }
    }

    /// Only the rows asked for, a page at a time: each page is one statement (its own
    /// snapshot) that returns the session's `next_seq` with the rows; the first page's
    /// `next_seq` bounds the later ones, whose rows an append-only session never changes.
    fn read_lines(
        &self,
        session_id: &str,
        from_seq: u64,
        visit: &mut LineVisitor<'_>,
    ) -> Result<u64, StoreError> {
        let action = format!("reading session {session_id}");
        self.run(|client| {
            let fail = || self.failed(action.clone(), Phase::Before);
            let mut from = seq_to_db(from_seq);
            let mut end = i64::MAX;
            let mut next: Option<u64> = None;
            loop {
                let params: [(&(dyn ToSql + Sync), Type); 4] = [
                    (&session_id, Type::TEXT),
                    (&from, Type::INT8),
                    (&end, Type::INT8),
                    (&READ_PAGE, Type::INT4),
                ];
                let rows = client.query_typed(READ_PAGE_SQL, &params).map_err(fail())?;
                let Some(first) = rows.first() else {
                    return Err(self.not_found(session_id));
                };
                let stored = seq_from_db(first.try_get(0).map_err(fail())?);
                let n = *next.get_or_insert(stored);
                end = seq_to_db(n);
                let mut got = 0;
                for r in &rows {
                    let Some(seq) = r.try_get::<_, Option<i64>>(1).map_err(fail())? else {
                        break;
                    };
                    got += 1;
                    let line: &str = r.try_get(2).map_err(fail())?;
                    if visit(seq_from_db(seq), line).is_break() {
                        return Ok(n);
                    }
                    from = seq + 1;
                }
                if got < READ_PAGE {
                    return Ok(n);
                }
            }
        })
    }

    fn append_lines(
        &self,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
    ) -> Result<u64, StoreError> {
        let ids = self.ids(session_id, lines)?;
        let r = self.run(|client| {
            if lines.len() >= COPY_LINES {
                return self.append_copy(client, session_id, first_seq, &ids, lines);
            }
            let action = format!("appending to session {session_id} at seq {first_seq}");
            let seqs: Vec<i64> = (0..lines.len() as u64)
                .map(|i| seq_to_db(first_seq + i))
                .collect();
            let new_next = first_seq + lines.len() as u64;
            let new_last = ids.last().cloned();
            let (first, new_next_db) = (seq_to_db(first_seq), seq_to_db(new_next));
            let params: [(&(dyn ToSql + Sync), Type); 7] = [
                (&session_id, Type::TEXT),
                (&first, Type::INT8),
                (&seqs, Type::INT8_ARRAY),
                (&ids, Type::TEXT_ARRAY),
                (&lines, Type::TEXT_ARRAY),
                (&new_next_db, Type::INT8),
                (&new_last, Type::TEXT),
            ];
            // One round trip: the first append of a connection is parsed, bound and run
            // together (typed parameters); from the second on the statement is prepared.
            let stmt = {
                let mut p = lock(&self.append_stmt);
                match &*p {
                    Prepared::Ready(stmt) => Some(stmt.clone()),
                    Prepared::Unused => {
                        *p = Prepared::Once;
                        None
                    }
                    Prepared::Once => {
                        let types = [
                            Type::TEXT,
                            Type::INT8,
                            Type::INT8_ARRAY,
                            Type::TEXT_ARRAY,
                            Type::TEXT_ARRAY,
                            Type::INT8,
                            Type::TEXT,
                        ];
                        let stmt = client
                            .prepare_typed(APPEND, &types)
                            .map_err(self.failed(action.clone(), Phase::Before))?;
                        *p = Prepared::Ready(stmt.clone());
                        Some(stmt)
                    }
                }
            };
            let sent = match &stmt {
                Some(stmt) => {
                    let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                    client.query_one(stmt, &values)
                }
                None => client.query_typed_one(APPEND, &params),
            };
            let row = match sent {
                Ok(row) => row,
                Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                    return Err(self.busy(client, session_id));
                }
                Err(e) => {
                    return Err(self.id_taken_or(
                        classify_append(&self.url, action, session_id, first_seq, e),
                        session_id,
                    ));
                }
            };
            let fail = || self.failed(action.clone(), Phase::Before);
            let stored: Option<i64> = row.try_get(0).map_err(fail())?;
            let updated: i64 = row.try_get(1).map_err(fail())?;
            let Some(stored) = stored.map(seq_from_db) else {
                return Err(self.not_found(session_id));
            };
            if updated == 1 {
                return Ok(new_next);
            }
            Err(StoreError::SequenceMismatch {
                session_id: session_id.into(),
                expected: stored,
                got: first_seq,
            })
        });
        r.map_err(|e| name_append(e, session_id, first_seq))
    }

    fn describe(&self) -> String {
        self.url.clone()
    }

    fn retry_window(&self) -> Duration {
        self.lock_wait
    }
}

/// A driver error as the store's error: a server that went away or refuses for now is
/// [`StoreError::Unavailable`]; a connection that broke while a write was in flight
/// ([`Phase::Writing`]: no answer, or the server ending the connection) is
/// [`StoreError::Indeterminate`].
fn classify(url: &str, action: String, phase: Phase, e: postgres::Error) -> StoreError {
    let no_answer = e.code().is_none() && is_connection_lost(&e);
    let source = backend_error(e);
    let connection = no_answer || source.sql_state.as_deref().is_some_and(is_connection_state);
    // A write in flight when the connection went (no answer, or the server ending the
    // session: a fast shutdown can commit it and then send 57P01 in place of the
    // result) may have committed.
    if connection && phase == Phase::Writing {
        return StoreError::Indeterminate {
            store: url.to_owned(),
            session_id: String::new(),
            first_seq: 0,
            source,
        };
    }
    if no_answer || source.sql_state.as_deref().is_some_and(is_transient_state) {
        return StoreError::Unavailable {
            store: url.to_owned(),
            action,
            source,
        };
    }
    StoreError::Database {
        store: url.to_owned(),
        action,
        source,
    }
}

/// [`classify`] for the append statement, naming the session and sequence number.
fn classify_append(
    url: &str,
    action: String,
    session_id: &str,
    first_seq: u64,
    e: postgres::Error,
) -> StoreError {
    match classify(url, action, Phase::Writing, e) {
        StoreError::Indeterminate { store, source, .. } => StoreError::Indeterminate {
            store,
            session_id: session_id.into(),
            first_seq,
            source,
        },
        e => e,
    }
}

/// An append of unknown outcome, named by its session and first sequence number.
fn name_append(e: StoreError, session_id: &str, first_seq: u64) -> StoreError {
    match e {
        StoreError::Indeterminate { store, source, .. } => StoreError::Indeterminate {
            store,
            session_id: session_id.into(),
            first_seq,
            source,
        },
        e => e,
    }
}

/// SQLSTATEs after which the same call may succeed later: a connection exception (class
/// 08), the server shutting down, crashed or starting up (57P01, 57P02, 57P03), too many
/// connections (53300). Nothing was done, unless a write was in flight
/// ([`is_connection_state`]).
fn is_transient_state(code: &str) -> bool {
    is_connection_state(code) || code == "53300"
}

/// SQLSTATEs that end the connection: a write in flight may or may not have committed.
fn is_connection_state(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
}

/// COPY's text format: a backslash, tab, newline or carriage return is escaped.
fn copy_escape(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

fn set_lock_timeout(
    client: &mut Client,
    wait: Duration,
) -> std::result::Result<(), postgres::Error> {
    let ms = format!("{}ms", wait.as_millis().max(1));
    client
        .execute("SELECT set_config('lock_timeout', $1, false)", &[&ms])
        .map(|_| ())
}

/// `session-state pid:<pid>@<host>`: what a refused writer is told about the holder.
fn application_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".into());
    let mut name = format!("session-state pid:{}@{host}", std::process::id());
    // PostgreSQL keeps 63 bytes of it.
    while name.len() > 63 {
        name.pop();
    }
    name
}

/// The URL as the store prints it: rebuilt from the parsed parts, with `***` for a
/// password, so nothing of the password can leak through it.
fn redact(config: &Config) -> String {
    let user = config.get_user().unwrap_or("");
    let password = if config.get_password().is_some() {
        ":***"
    } else {
        ""
    };
    let ports = config.get_ports();
    let mut hosts = Vec::new();
    let mut sockets = Vec::new();
    for (i, host) in config.get_hosts().iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        match host {
            Host::Tcp(h) if h.contains(':') => hosts.push(format!("[{h}]:{port}")),
            Host::Tcp(h) => hosts.push(format!("{h}:{port}")),
            Host::Unix(p) => sockets.push(format!("host={}&port={port}", p.display())),
        }
    }
    let at = if user.is_empty() && password.is_empty() {
        String::new()
    } else {
        format!("{user}{password}@")
    };
    let db = config.get_dbname().unwrap_or("");
    let query = if sockets.is_empty() {
        String::new()
    } else {
        format!("?{}", sockets.join("&"))
    };
    format!("postgres://{at}{}/{db}{query}", hosts.join(","))
}

fn backend_error(e: postgres::Error) -> BackendError {
    BackendError {
        sql_state: e.code().map(|c| c.code().to_owned()),
        source: Box::new(e),
    }
}

/// The server went away (shut down, restarted, terminated this backend) or the socket
/// broke: the connection is gone, the next call connects again.
fn is_connection_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || c.starts_with("57P")
        }
        // No answer from the server: an I/O error (refused, reset) or a timeout.
        None => {
            std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
                || e.to_string().starts_with("timeout")
        }
    }
}

fn seq_to_db(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

fn seq_from_db(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_url_never_holds_the_password() {
        for url in [
            "postgres://agent:s3cr%3At@db.example:6543/sessions?sslmode=disable",
            "postgresql://agent:s3cr:t@db.example/sessions",
            "host=/tmp/pg port=5433 user=agent password=s3cr:t dbname=x",
            "postgres://agent@db.example/sessions?password=s3cr:t",
        ] {
            let config: Config = url.parse().expect("parses");
            let shown = redact(&config);
            assert!(!shown.contains("s3cr"), "{shown}");
            assert!(shown.contains("agent:***@"), "{shown}");
        }
        let config: Config = "postgres://a@h:1/d".parse().expect("parses");
        assert_eq!(redact(&config), "postgres://a@h:1/d");
    }

    /// A server that ends the connection may have committed the write in flight (a fast
    /// shutdown commits, then sends 57P01 in place of the result); "too many clients"
    /// refuses before anything runs; a wrong password is no transient trouble.
    #[test]
    fn connection_ending_states_leave_a_write_in_flight_undecided() {
        for code in ["08006", "08003", "57P01", "57P02", "57P03"] {
            assert!(
                is_connection_state(code) && is_transient_state(code),
                "{code}"
            );
        }
        assert!(is_transient_state("53300") && !is_connection_state("53300"));
        for code in ["28P01", "23505", "55P03", "42P01"] {
            assert!(!is_transient_state(code), "{code}");
        }
    }

    #[test]
    fn copy_text_escapes_what_copy_would_read_as_structure() {
        let mut out = Vec::new();
        copy_escape(br#"{"a":"x\ny	z"}"#, &mut out);
        assert_eq!(out, br#"{"a":"x\\ny\tz"}"#.to_vec());
    }
}
