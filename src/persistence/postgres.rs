//! [`PostgresStore`], the PostgreSQL backend of [`SessionStore`] (SPEC §8): sessions
//! shared by many machines, kept on one PostgreSQL server.
//!
//! The header and every entry's JSON text are rows, kept byte for byte (`text`, not
//! `jsonb`): a load renders them as the lines of a Pi JSONL file and reads them with the
//! crate's one reader, so the tree, the folds and `export` see exactly what Pi wrote.
//! One writer per session is enforced by the database: an append is one statement that
//! locks the session's row, checks the stored next sequence number and inserts the
//! entries under the `(session_id, seq)` primary key, committed before it returns.
//! See `docs/postgres.md`.

use super::interrupted::missing_tool_results;
use super::lines::{LineFacts, check_ids, check_line, to_new_entry};
use super::{Loaded, SessionStore};
use crate::error::{BackendError, Error, Result};
use crate::lock::LockError;
use crate::log::NewEntry;
use crate::log::entry::Header;
use crate::log::header::parse_header;
use crate::log::reader::ReadMode;
use crate::tree::{LogOptions, SessionLog};
use postgres::config::Host;
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::{Client, Config};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The version of the tables this build reads and writes (`session_state_schema`).
pub const POSTGRES_SCHEMA_VERSION: i32 = 1;

/// How long an append waits for another writer's transaction on the same session before
/// it is refused with [`LockError::Busy`], unless [`PostgresStore::with_lock_wait`] says
/// otherwise.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// How many times an append draws new entry ids after one collided with a stored id of
/// the session (8 hex digits, as Pi draws them: a collision is rare, several are not).
const ID_ATTEMPTS: usize = 8;

/// The key of the transaction-scoped advisory lock that serializes schema creation
/// between processes ("SessStat" in ASCII).
const SCHEMA_LOCK_KEY: i64 = 0x5365_7373_5374_6174;

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
/// and inserts the entries and advances `next_seq` only when the stored next sequence
/// number is `$2` and the stored last entry is `$3` (the parent of the first entry).
/// It returns what it found, so a refused append tells the caller the stored state.
const APPEND: &str = "
WITH s AS MATERIALIZED (
    SELECT next_seq, last_id FROM session_state_sessions WHERE session_id = $1 FOR UPDATE
), ok AS MATERIALIZED (
    SELECT 1 FROM s WHERE next_seq = $2 AND last_id IS NOT DISTINCT FROM $3
), ins AS (
    INSERT INTO session_state_entries (session_id, seq, entry_id, line)
    SELECT $1, e.seq, e.id, e.line
    FROM unnest($4::bigint[], $5::text[], $6::text[]) AS e (seq, id, line)
    WHERE EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), upd AS (
    UPDATE session_state_sessions SET next_seq = $7, last_id = $8, updated_at = now()
    WHERE session_id = $1 AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
)
SELECT (SELECT next_seq FROM s), (SELECT last_id FROM s), (SELECT count(*) FROM upd)
";

/// The first append of a created session: its row and its entries, one statement.
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
/// use session_state::{Header, PostgresStore, SessionStore};
/// let store = PostgresStore::connect("postgres://agent:secret@db.internal/sessions")?;
/// println!("{store:?}"); // PostgresStore { url: "postgres://agent:***@db.internal:5432/sessions" }
/// let header = Header::new("0195f1d0-7c4e-7000-8000-000000000001", "/home/me/project");
/// store.create(header.clone())?;
/// let user = serde_json::json!({"type": "message",
///                               "message": {"role": "user", "content": "hi", "timestamp": 0}});
/// assert_eq!(store.append(header.id(), 0, &[user])?, 1); // committed when it returns
/// # Ok::<(), session_state::Error>(())
/// ```
///
/// One connection per store, behind a mutex (calls from several threads take turns); a
/// lost connection is [`Error::Backend`] with `connection_lost`, and the next call
/// connects again. The password of the URL is never shown: [`PostgresStore::url`] and
/// `Debug` give the URL with `***` in its place.
pub struct PostgresStore {
    config: Config,
    /// How connections are made: without TLS or through rustls (`sslmode`).
    tls: super::tls::Tls,
    url: String,
    lock_wait: Duration,
    conn: Mutex<Option<Client>>,
    /// The append statement prepared on the current connection (cleared with it).
    append_stmt: Mutex<Option<postgres::Statement>>,
    /// Created sessions not appended to yet (lazy creation: nothing is stored).
    pending: Mutex<HashMap<String, Header>>,
    /// What this store last saw of each session: `(next_seq, last entry id)`. Only a
    /// hint: every append checks both against the row, under its lock.
    tails: Mutex<HashMap<String, (u64, Option<String>)>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// What [`PostgresStore::import`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// The session was stored: its header and this many entries.
    Stored {
        /// The header.
        header: Header,
        /// The number of entries (the session's next sequence number).
        entries: u64,
    },
    /// The same session (same header line, same entry count, same last entry) was
    /// already stored; nothing changed.
    Unchanged {
        /// The header.
        header: Header,
        /// The number of entries.
        entries: u64,
    },
}

impl Imported {
    /// The imported session's header.
    pub fn header(&self) -> &Header {
        match self {
            Imported::Stored { header, .. } | Imported::Unchanged { header, .. } => header,
        }
    }
}

impl PostgresStore {
    /// Connects to the server at `url` (`postgres://user:password@host:port/db?…` or the
    /// `key=value` form of libpq) and creates the tables if they are missing. TLS follows
    /// libpq's `sslmode` (`disable`, `prefer` (the default), `require`, `verify-ca`,
    /// `verify-full`) and `sslrootcert` (a PEM file of CA certificates, or `system`):
    /// see `docs/postgres.md`, "TLS".
    ///
    /// Errors: an unparsable URL or an unreachable or refusing server is
    /// [`Error::Backend`] naming the URL without its password; tables of a newer
    /// session-state are refused the same way.
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
            append_stmt: Mutex::new(None),
            pending: Mutex::default(),
            tails: Mutex::default(),
        };
        store.run(|_| Ok(()))?;
        Ok(store)
    }

    /// The same store, waiting at most `wait` for another writer's transaction on a
    /// session before refusing an append with [`LockError::Busy`] (at least 1 ms).
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

    /// The label a session's rows are read under: it names the session in the reader's
    /// errors (`postgres://user:***@host:5432/db#<session id>`).
    fn label(&self, session_id: &str) -> PathBuf {
        PathBuf::from(format!("{}#{session_id}", self.url))
    }

    fn failed(&self, action: impl Into<String>) -> impl FnOnce(postgres::Error) -> Error + '_ {
        let action = action.into();
        move |e| Error::Backend {
            store: self.url.clone(),
            action,
            connection_lost: is_connection_lost(&e),
            source: backend_error(e),
        }
    }

    /// Runs `f` on the connection, connecting first when there is none or it closed. A
    /// lost connection is dropped, so the next call connects again.
    fn run<T>(&self, f: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let mut guard = lock(&self.conn);
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = None;
            *lock(&self.append_stmt) = None;
            *guard = Some(self.open()?);
        }
        let Some(client) = guard.as_mut() else {
            return Err(Error::Internal {
                what: format!("{}: no connection after connecting", self.url),
            });
        };
        let result = f(client);
        let lost = matches!(
            &result,
            Err(Error::Backend {
                connection_lost: true,
                ..
            })
        );
        if lost || client.is_closed() {
            *guard = None;
            *lock(&self.append_stmt) = None;
        }
        result
    }

    fn open(&self) -> Result<Client> {
        let mut client = self
            .tls
            .connect(&self.config)
            .map_err(self.failed("connecting"))?;
        set_lock_timeout(&mut client, self.lock_wait).map_err(self.failed("configuring"))?;
        // Durable when it returns: never run with commits that return before the WAL is
        // flushed. A stronger server setting (remote_write, remote_apply) is kept.
        let sync: String = client
            .query_one("SELECT current_setting('synchronous_commit')", &[])
            .and_then(|r| r.try_get(0))
            .map_err(self.failed("configuring"))?;
        if sync == "off" {
            client
                .execute("SELECT set_config('synchronous_commit', 'on', false)", &[])
                .map_err(self.failed("configuring"))?;
        }
        self.ensure_schema(&mut client)?;
        Ok(client)
    }

    /// Creates the tables if they are missing, once per connection, serialized between
    /// processes by an advisory lock; refuses tables of a newer version.
    fn ensure_schema(&self, client: &mut Client) -> Result<()> {
        let fail = || self.failed("creating the tables");
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
            return Err(Error::Backend {
                store: self.url.clone(),
                action: "checking the tables".into(),
                connection_lost: false,
                source: BackendError {
                    source: format!(
                        "the tables are of session-state schema version {v}; this build \
                         reads version {POSTGRES_SCHEMA_VERSION}: upgrade session-state"
                    )
                    .into(),
                    sql_state: None,
                },
            });
        }
        tx.batch_execute(SCHEMA).map_err(fail())?;
        tx.execute(
            "INSERT INTO session_state_schema (version) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&POSTGRES_SCHEMA_VERSION],
        )
        .map_err(fail())?;
        tx.commit().map_err(fail())
    }

    fn tail(&self, session_id: &str) -> Option<(u64, Option<String>)> {
        lock(&self.tails).get(session_id).cloned()
    }

    fn set_tail(&self, session_id: &str, next: u64, last: Option<String>) {
        lock(&self.tails).insert(session_id.to_owned(), (next, last));
    }

    /// The stored `(next_seq, last_id)` of a session; `None` when no row holds it.
    fn stored_tail(
        &self,
        client: &mut Client,
        session_id: &str,
    ) -> Result<Option<(u64, Option<String>)>> {
        let row = client
            .query_opt(
                "SELECT next_seq, last_id FROM session_state_sessions WHERE session_id = $1",
                &[&session_id],
            )
            .map_err(self.failed(format!("reading session {session_id}")))?;
        row.map(|r| -> Result<_> {
            let next: i64 = r
                .try_get(0)
                .map_err(self.failed(format!("reading session {session_id}")))?;
            let last: Option<String> = r
                .try_get(1)
                .map_err(self.failed(format!("reading session {session_id}")))?;
            Ok((seq_from_db(next), last))
        })
        .transpose()
    }

    fn not_found(&self, session_id: &str) -> Error {
        if lock(&self.pending).contains_key(session_id) {
            return Error::NotMaterialized {
                session_id: session_id.into(),
            };
        }
        Error::SessionNotFound {
            session_id: session_id.into(),
            root: PathBuf::from(&self.url),
        }
    }

    /// The refusal when another writer's transaction holds the session past the wait.
    fn busy(&self, client: &mut Client, session_id: &str) -> Error {
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
        Error::from(LockError::Busy {
            initiator,
            action: "append".into(),
            object: session_id.into(),
            reason,
        })
    }

    /// Renders `entries` as lines, children one of the other, the first a child of
    /// `parent`, with fresh ids (8 hex digits, unique in the batch and not the session
    /// id; the unique constraint catches a collision with a stored id).
    fn render(
        session_id: &str,
        parent: Option<&str>,
        entries: &[NewEntry],
    ) -> (Vec<String>, Vec<String>) {
        let mut ids: Vec<String> = Vec::with_capacity(entries.len());
        let mut lines = Vec::with_capacity(entries.len());
        let mut parent = parent.map(str::to_owned);
        for entry in entries {
            let id = loop {
                let u = uuid::Uuid::new_v4().simple().to_string();
                let id = &u[..8];
                if id != session_id && !ids.iter().any(|i| i == id) && parent.as_deref() != Some(id)
                {
                    break id.to_owned();
                }
            };
            let mut line = entry.to_line(&id, parent.as_deref());
            if line.ends_with('\n') {
                line.pop();
            }
            lines.push(line);
            parent = Some(id.clone());
            ids.push(id);
        }
        (ids, lines)
    }

    fn append_entries(
        &self,
        session_id: &str,
        first_seq: u64,
        entries: &[NewEntry],
    ) -> Result<u64> {
        let pending = lock(&self.pending).get(session_id).cloned();
        self.run(|client| {
            if let Some(header) = pending {
                check_seq(session_id, 0, first_seq)?;
                if entries.is_empty() {
                    return Ok(0);
                }
                return self.create_with(client, &header, entries);
            }
            let (mut next, mut last) = match self.tail(session_id) {
                Some(t) => t,
                None => match self.stored_tail(client, session_id)? {
                    Some(t) => t,
                    None => return Err(self.not_found(session_id)),
                },
            };
            if entries.is_empty() {
                // Nothing to write: the check alone, against the row.
                let Some((stored, last)) = self.stored_tail(client, session_id)? else {
                    return Err(self.not_found(session_id));
                };
                self.set_tail(session_id, stored, last);
                check_seq(session_id, stored, first_seq)?;
                return Ok(stored);
            }
            let mut attempts = 0;
            loop {
                attempts += 1;
                // A stale hint (another machine appended): the row tells the truth.
                if next != first_seq {
                    match self.stored_tail(client, session_id)? {
                        Some((n, l)) if n != next || l != last => {
                            (next, last) = (n, l);
                            self.set_tail(session_id, next, last.clone());
                            continue;
                        }
                        Some(_) => {}
                        None => return Err(self.not_found(session_id)),
                    }
                    return Err(Error::SequenceMismatch {
                        session_id: session_id.into(),
                        expected: next,
                        got: first_seq,
                    });
                }
                let (ids, lines) = PostgresStore::render(session_id, last.as_deref(), entries);
                let seqs: Vec<i64> = (0..entries.len() as u64)
                    .map(|i| seq_to_db(first_seq + i))
                    .collect();
                let new_next = first_seq + entries.len() as u64;
                let new_last = ids.last().cloned();
                let params: [&(dyn ToSql + Sync); 8] = [
                    &session_id,
                    &seq_to_db(first_seq),
                    &last,
                    &seqs,
                    &ids,
                    &lines,
                    &seq_to_db(new_next),
                    &new_last,
                ];
                let stmt = match self.append_statement(client) {
                    Ok(stmt) => stmt,
                    Err(e) => return Err(self.failed("preparing the append")(e)),
                };
                let row = match client.query_one(&stmt, &params) {
                    Ok(row) => row,
                    Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                        return Err(self.busy(client, session_id));
                    }
                    Err(e) if is_id_collision(&e) && attempts < ID_ATTEMPTS => continue,
                    Err(e) => {
                        lock(&self.tails).remove(session_id);
                        return Err(self.failed(format!(
                            "appending to session {session_id} at seq {first_seq} (if the \
                             connection was lost, whether the append committed is unknown: \
                             load the session; a retry at the same first_seq is refused if \
                             it did)"
                        ))(e));
                    }
                };
                let fail = || self.failed(format!("appending to session {session_id}"));
                let stored: Option<i64> = row.try_get(0).map_err(fail())?;
                let stored_last: Option<String> = row.try_get(1).map_err(fail())?;
                let updated: i64 = row.try_get(2).map_err(fail())?;
                let Some(stored) = stored.map(seq_from_db) else {
                    lock(&self.tails).remove(session_id);
                    return Err(self.not_found(session_id));
                };
                if updated == 1 {
                    self.set_tail(session_id, new_next, new_last);
                    return Ok(new_next);
                }
                // Refused by the row: another writer got there first.
                (next, last) = (stored, stored_last);
                self.set_tail(session_id, next, last.clone());
                if next != first_seq || attempts >= ID_ATTEMPTS {
                    return Err(Error::SequenceMismatch {
                        session_id: session_id.into(),
                        expected: next,
                        got: first_seq,
                    });
                }
            }
        })
    }

    /// The append statement, prepared once per connection (a statement text would be
    /// parsed and planned on every append: a second round trip).
    fn append_statement(
        &self,
        client: &mut Client,
    ) -> std::result::Result<postgres::Statement, postgres::Error> {
        let mut cached = lock(&self.append_stmt);
        if let Some(stmt) = cached.as_ref() {
            return Ok(stmt.clone());
        }
        let stmt = client.prepare(APPEND)?;
        *cached = Some(stmt.clone());
        Ok(stmt)
    }

    /// The first append of a created session: the row and the entries, all or nothing.
    fn create_with(
        &self,
        client: &mut Client,
        header: &Header,
        entries: &[NewEntry],
    ) -> Result<u64> {
        let session_id = header.id();
        let mut header_line = header.to_line();
        if header_line.ends_with('\n') {
            header_line.pop();
        }
        for _ in 0..ID_ATTEMPTS {
            let (ids, lines) = PostgresStore::render(session_id, None, entries);
            let seqs: Vec<i64> = (0..entries.len() as u64).map(seq_to_db).collect();
            let next = entries.len() as u64;
            let last = ids.last().cloned();
            let params: [&(dyn ToSql + Sync); 7] = [
                &session_id,
                &header_line,
                &seq_to_db(next),
                &last,
                &seqs,
                &ids,
                &lines,
            ];
            let created: i64 = match client
                .query_one(CREATE_WITH_ENTRIES, &params)
                .and_then(|r| r.try_get(0))
            {
                Ok(n) => n,
                Err(e) if is_id_collision(&e) => continue,
                Err(e) => {
                    return Err(self.failed(format!(
                        "storing the new session {session_id} (if the connection was lost, \
                         whether it was stored is unknown: load it)"
                    ))(e));
                }
            };
            lock(&self.pending).remove(session_id);
            if created == 0 {
                return Err(Error::AlreadyExists {
                    path: self.label(session_id),
                });
            }
            self.set_tail(session_id, next, last);
            return Ok(next);
        }
        Err(Error::Internal {
            what: format!("{}: no fresh entry ids after {ID_ATTEMPTS} draws", self.url),
        })
    }

    /// Reads a session's rows (one consistent snapshot) with the crate's reader.
    fn read(&self, session_id: &str) -> Result<SessionLog> {
        let label = self.label(session_id);
        self.run(|client| {
            let fail = || self.failed(format!("reading session {session_id}"));
            let mut tx = snapshot(client).map_err(fail())?;
            let Some(row) = tx
                .query_opt(
                    "SELECT header, next_seq FROM session_state_sessions WHERE session_id = $1",
                    &[&session_id],
                )
                .map_err(fail())?
            else {
                return Err(self.not_found(session_id));
            };
            let header: String = row.try_get(0).map_err(fail())?;
            let next_seq = seq_from_db(row.try_get(1).map_err(fail())?);
            let rows = tx
                .query_raw(
                    "SELECT seq, line FROM session_state_entries WHERE session_id = $1 \
                     ORDER BY seq",
                    [&session_id],
                )
                .map_err(fail())?;
            let mut pending = header.into_bytes();
            pending.push(b'\n');
            let mut reader = RowsReader {
                rows,
                pending,
                pos: 0,
                seq: 0,
                failure: None,
                done: false,
            };
            let result = LogOptions::new().read(label.clone(), &mut reader);
            if let Some(failure) = reader.failure.take() {
                return Err(match failure {
                    Failure::Driver(e) => fail()(e),
                    Failure::Gap { expected, found } => Error::Corrupt {
                        path: label.clone(),
                        at: crate::error::Location {
                            line: expected + 2,
                            offset: 0,
                        },
                        detail: format!(
                            "the stored entries skip from seq {} to seq {found}",
                            expected.wrapping_sub(1) as i64
                        ),
                    },
                });
            }
            let rows_read = reader.seq;
            drop(reader);
            let log = result?;
            tx.commit().map_err(fail())?;
            check_complete(&label, &log, rows_read, next_seq)?;
            self.set_tail(
                session_id,
                next_seq,
                log.entries().last().map(|e| e.id().to_owned()),
            );
            Ok(log)
        })
    }

    /// Stores a Pi JSONL session read from `source` (a file's bytes), its lines byte for
    /// byte, in one transaction streamed with `COPY`: memory stays small whatever the
    /// session's size. `label` names the source in errors.
    ///
    /// The header must be version 3 (convert older files with Pi first). A torn final
    /// record is left out, as the reader does; a line that is not a JSON object with a
    /// string `id`, a duplicate id or a `parentId` naming no earlier entry is refused
    /// ([`Error::Corrupt`], [`Error::InvalidEntry`], [`Error::DuplicateId`],
    /// [`Error::DanglingParent`], naming the line). Importing a session that is already
    /// stored with the same header line, entry count and last entry changes nothing
    /// ([`Imported::Unchanged`]); another session under its id is
    /// [`Error::AlreadyExists`].
    pub fn import(&self, label: impl Into<PathBuf>, source: impl BufRead) -> Result<Imported> {
        let label = label.into();
        let mut lines = LineReader::new(source, label.clone());
        let Some((header_line, _)) = lines.next_line()? else {
            return Err(Error::MissingHeader {
                path: label,
                detail: "the file is empty".into(),
            });
        };
        let header = parse_header(&label, header_line.as_bytes(), ReadMode::Strict)?;
        if header.version() != 3 {
            return Err(Error::UnsupportedNewVersion {
                session_id: header.id().to_owned(),
                version: header.version(),
            });
        }
        let header_text = header_line.clone();
        let session_id = header.id().to_owned();
        self.run(|client| {
            let fail = || self.failed(format!("importing session {session_id}"));
            let existing = client
                .query_opt(
                    "SELECT header, next_seq, last_id FROM session_state_sessions \
                     WHERE session_id = $1",
                    &[&session_id],
                )
                .map_err(fail())?;
            if let Some(row) = existing {
                let stored_header: String = row.try_get(0).map_err(fail())?;
                let stored_next = seq_from_db(row.try_get(1).map_err(fail())?);
                let stored_last: Option<String> = row.try_get(2).map_err(fail())?;
                let mut checker = Checker::new(&label);
                while let Some((line, at)) = lines.next_line()? {
                    checker.check(&line, at)?;
                }
                if stored_header == header_text
                    && stored_next == checker.count
                    && stored_last == checker.last
                {
                    return Ok(Imported::Unchanged {
                        header: header.clone(),
                        entries: stored_next,
                    });
                }
                return Err(Error::AlreadyExists {
                    path: self.label(&session_id),
                });
            }
            let mut tx = client.transaction().map_err(fail())?;
            let inserted = tx
                .execute(
                    "INSERT INTO session_state_sessions (session_id, header, next_seq) \
                     VALUES ($1, $2, 0) ON CONFLICT (session_id) DO NOTHING",
                    &[&session_id, &header_text],
                )
                .map_err(fail())?;
            if inserted == 0 {
                return Err(Error::AlreadyExists {
                    path: self.label(&session_id),
                });
            }
            let mut checker = Checker::new(&label);
            {
                use std::io::Write;
                let mut copy = tx
                    .copy_in(
                        "COPY session_state_entries (session_id, seq, entry_id, line) \
                         FROM STDIN",
                    )
                    .map_err(fail())?;
                let mut prefix = Vec::new();
                copy_escape(session_id.as_bytes(), &mut prefix);
                prefix.push(b'\t');
                let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
                while let Some((line, at)) = lines.next_line()? {
                    let Some(id) = checker.check(&line, at)? else {
                        continue;
                    };
                    buf.extend_from_slice(&prefix);
                    buf.extend_from_slice((checker.count - 1).to_string().as_bytes());
                    buf.push(b'\t');
                    copy_escape(id.as_bytes(), &mut buf);
                    buf.push(b'\t');
                    copy_escape(line.as_bytes(), &mut buf);
                    buf.push(b'\n');
                    if buf.len() >= 1 << 20 {
                        copy.write_all(&buf)
                            .map_err(|e| copy_failed(self, &session_id, e))?;
                        buf.clear();
                    }
                }
                copy.write_all(&buf)
                    .map_err(|e| copy_failed(self, &session_id, e))?;
                copy.finish().map_err(fail())?;
            }
            if checker.count == 0 {
                return Err(Error::NotMaterialized {
                    session_id: session_id.clone(),
                });
            }
            tx.execute(
                "UPDATE session_state_sessions SET next_seq = $2, last_id = $3 \
                 WHERE session_id = $1",
                &[&session_id, &seq_to_db(checker.count), &checker.last],
            )
            .map_err(fail())?;
            tx.commit().map_err(self.failed(format!(
                "committing the import of session {session_id} (if the connection was lost, \
                 whether it was stored is unknown: import it again, which changes nothing if \
                 it was)"
            )))?;
            self.set_tail(&session_id, checker.count, checker.last.clone());
            Ok(Imported::Stored {
                header: header.clone(),
                entries: checker.count,
            })
        })
    }

    /// Writes a stored session as a Pi JSONL file's bytes: the header line and every
    /// entry's line, byte for byte as stored, each ending in `\n`. Streams the rows (one
    /// consistent snapshot); returns the number of entries.
    pub fn export(&self, session_id: &str, out: &mut dyn std::io::Write) -> Result<u64> {
        let label = self.label(session_id);
        self.run(|client| {
            let fail = || self.failed(format!("exporting session {session_id}"));
            let mut tx = snapshot(client).map_err(fail())?;
            let Some(row) = tx
                .query_opt(
                    "SELECT header FROM session_state_sessions WHERE session_id = $1",
                    &[&session_id],
                )
                .map_err(fail())?
            else {
                return Err(self.not_found(session_id));
            };
            let header: String = row.try_get(0).map_err(fail())?;
            let write = |out: &mut dyn std::io::Write, s: &str| {
                out.write_all(s.as_bytes())
                    .and_then(|()| out.write_all(b"\n"))
                    .map_err(|source| Error::Io {
                        action: "writing the export of",
                        path: label.clone(),
                        source,
                    })
            };
            write(out, &header)?;
            let mut rows = tx
                .query_raw(
                    "SELECT line FROM session_state_entries WHERE session_id = $1 ORDER BY seq",
                    [&session_id],
                )
                .map_err(fail())?;
            let mut n = 0;
            while let Some(row) = rows.next().map_err(fail())? {
                let line: &str = row.try_get(0).map_err(fail())?;
                write(out, line)?;
                n += 1;
            }
            drop(rows);
            tx.commit().map_err(fail())?;
            Ok(n)
        })
    }
}

/// The session's row was held by another writer past the lock wait.
struct Busy;

impl PostgresStore {
    /// One transaction of [`SessionStore::append_lines`]: the session's row locked, the
    /// sequence and the ids checked against the rows, the lines inserted byte for byte.
    fn append_lines_once(
        &self,
        client: &mut Client,
        session_id: &str,
        first_seq: u64,
        lines: &[String],
        facts: &[LineFacts],
        pending: Option<&Header>,
    ) -> Result<std::result::Result<u64, Busy>> {
        let fail = || {
            self.failed(format!(
                "appending to session {session_id} at seq {first_seq} (if the connection was \
                 lost, whether the append committed is unknown: load the session; a retry at \
                 the same first_seq is refused if it did)"
            ))
        };
        let mut tx = client.transaction().map_err(fail())?;
        let next = if let Some(header) = pending {
            check_seq(session_id, 0, first_seq)?;
            if lines.is_empty() {
                return Ok(Ok(0));
            }
            let mut header_line = header.to_line();
            if header_line.ends_with('\n') {
                header_line.pop();
            }
            let created = tx
                .execute(
                    "INSERT INTO session_state_sessions (session_id, header, next_seq, last_id) \
                     VALUES ($1, $2, 0, NULL) ON CONFLICT (session_id) DO NOTHING",
                    &[&session_id, &header_line],
                )
                .map_err(fail())?;
            if created == 0 {
                return Err(Error::AlreadyExists {
                    path: self.label(session_id),
                });
            }
            0
        } else {
            let row = match tx.query_opt(
                "SELECT next_seq FROM session_state_sessions WHERE session_id = $1 FOR UPDATE",
                &[&session_id],
            ) {
                Ok(row) => row,
                Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => return Ok(Err(Busy)),
                Err(e) => return Err(fail()(e)),
            };
            let Some(row) = row else {
                return Err(self.not_found(session_id));
            };
            seq_from_db(row.try_get(0).map_err(fail())?)
        };
        check_seq(session_id, next, first_seq)?;
        if lines.is_empty() {
            return Ok(Ok(next));
        }
        // Which of the batch's ids and parents the session already holds.
        let mut asked: Vec<&str> = Vec::with_capacity(facts.len() * 2);
        for f in facts {
            asked.push(&f.id);
            if let Some(p) = &f.parent {
                asked.push(p);
            }
        }
        let known: HashSet<String> = tx
            .query(
                "SELECT entry_id FROM session_state_entries \
                 WHERE session_id = $1 AND entry_id = ANY($2)",
                &[&session_id, &asked],
            )
            .map_err(fail())?
            .iter()
            .filter_map(|r| r.try_get::<_, String>(0).ok())
            .collect();
        check_ids(session_id, first_seq, facts, |id| known.contains(id))?;
        let seqs: Vec<i64> = (0..lines.len() as u64)
            .map(|i| seq_to_db(first_seq + i))
            .collect();
        let ids: Vec<&str> = facts.iter().map(|f| f.id.as_str()).collect();
        let new_next = first_seq + lines.len() as u64;
        let last = facts.last().map(|f| f.id.clone());
        tx.execute(
            "INSERT INTO session_state_entries (session_id, seq, entry_id, line) \
             SELECT $1, e.seq, e.id, e.line \
             FROM unnest($2::bigint[], $3::text[], $4::text[]) AS e (seq, id, line)",
            &[&session_id, &seqs, &ids, &lines],
        )
        .map_err(fail())?;
        tx.execute(
            "UPDATE session_state_sessions SET next_seq = $2, last_id = $3, updated_at = now() \
             WHERE session_id = $1",
            &[&session_id, &seq_to_db(new_next), &last],
        )
        .map_err(fail())?;
        tx.commit().map_err(fail())?;
        lock(&self.pending).remove(session_id);
        self.set_tail(session_id, new_next, last);
        Ok(Ok(new_next))
    }
}

impl SessionStore for PostgresStore {
    /// Always `None`: sessions are rows, not files.
    fn locate(&self, _header: &Header) -> Option<PathBuf> {
        None
    }

    fn create(&self, header: Header) -> Result<()> {
        if header.version() != 3 {
            return Err(Error::UnsupportedNewVersion {
                session_id: header.id().to_owned(),
                version: header.version(),
            });
        }
        // The file backend's rule, so that every stored session can be exported as a
        // Pi file (`<timestamp>_<id>.jsonl` under its cwd's folder).
        if header.id().is_empty() || header.id().contains(['/', '\\', '\n', '\0']) {
            return Err(Error::InvalidSessionId {
                session_id: header.id().to_owned(),
            });
        }
        if header.cwd().is_none() || header.timestamp().is_none() {
            return Err(Error::UnlocatableHeader {
                session_id: header.id().to_owned(),
            });
        }
        let id = header.id().to_owned();
        if lock(&self.pending).contains_key(&id) {
            return Err(Error::AlreadyCreated { session_id: id });
        }
        let stored = self.run(|client| self.stored_tail(client, &id))?;
        if stored.is_some() {
            return Err(Error::AlreadyExists {
                path: self.label(&id),
            });
        }
        let mut pending = lock(&self.pending);
        if pending.contains_key(&id) {
            return Err(Error::AlreadyCreated { session_id: id });
        }
        pending.insert(id, header);
        Ok(())
    }

    fn append(&self, session_id: &str, first_seq: u64, events: &[Value]) -> Result<u64> {
        let entries = events
            .iter()
            .enumerate()
            .map(|(i, e)| to_new_entry(session_id, first_seq + i as u64, i, e))
            .collect::<Result<Vec<_>>>()?;
        self.append_entries(session_id, first_seq, &entries)
    }

    fn load(&self, session_id: &str) -> Result<Loaded> {
        let mut closed: Vec<String> = Vec::new();
        // Closing the turn races with other writers only if they append meanwhile: then
        // read again and decide again (bounded: each round needs a foreign append).
        for _ in 0..8 {
            let log = self.read(session_id)?;
            let missing = missing_tool_results(&log)?;
            if missing.is_empty() {
                return Ok(Loaded::new(log, closed));
            }
            let next = log.len() as u64;
            let entries: Vec<NewEntry> = missing
                .iter()
                .map(|(_, m)| NewEntry::message(m.clone()))
                .collect();
            match self.append_entries(session_id, next, &entries) {
                Ok(_) => closed.extend(missing.into_iter().map(|(id, _)| id)),
                Err(Error::SequenceMismatch { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let log = self.read(session_id)?;
        Ok(Loaded::new(log, closed))
    }

    fn header_line(&self, session_id: &str) -> Result<String> {
        let row = self.run(|client| {
            client
                .query_opt(
                    "SELECT header FROM session_state_sessions WHERE session_id = $1",
                    &[&session_id],
                )
                .map_err(self.failed(format!("reading session {session_id}")))
        })?;
        match row {
            Some(r) => r
                .try_get(0)
                .map_err(self.failed(format!("reading session {session_id}"))),
            None => Err(self.not_found(session_id)),
        }
    }

    /// Only the rows asked for, in one consistent snapshot with `next_seq`: how the local
    /// cache catches up with what other machines appended.
    fn read_lines(
        &self,
        session_id: &str,
        from_seq: u64,
        visit: &mut dyn FnMut(u64, &str) -> Result<()>,
    ) -> Result<u64> {
        self.run(|client| {
            let fail = || self.failed(format!("reading session {session_id}"));
            let mut tx = snapshot(client).map_err(fail())?;
            let Some(row) = tx
                .query_opt(
                    "SELECT next_seq FROM session_state_sessions WHERE session_id = $1",
                    &[&session_id],
                )
                .map_err(fail())?
            else {
                return Err(self.not_found(session_id));
            };
            let next = seq_from_db(row.try_get(0).map_err(fail())?);
            if from_seq < next {
                let from = seq_to_db(from_seq);
                let params: [&(dyn ToSql + Sync); 2] = [&session_id, &from];
                let mut rows = tx
                    .query_raw(
                        "SELECT seq, line FROM session_state_entries \
                         WHERE session_id = $1 AND seq >= $2 ORDER BY seq",
                        params,
                    )
                    .map_err(fail())?;
                while let Some(r) = rows.next().map_err(fail())? {
                    let seq = seq_from_db(r.try_get(0).map_err(fail())?);
                    let line: &str = r.try_get(1).map_err(fail())?;
                    visit(seq, line)?;
                }
            }
            tx.commit().map_err(fail())?;
            Ok(next)
        })
    }

    fn append_lines(&self, session_id: &str, first_seq: u64, lines: &[String]) -> Result<u64> {
        let facts = lines
            .iter()
            .enumerate()
            .map(|(i, l)| check_line(session_id, first_seq + i as u64, i, l))
            .collect::<Result<Vec<_>>>()?;
        let pending = lock(&self.pending).get(session_id).cloned();
        let outcome = self.run(|client| {
            self.append_lines_once(
                client,
                session_id,
                first_seq,
                lines,
                &facts,
                pending.as_ref(),
            )
        })?;
        match outcome {
            Ok(next) => Ok(next),
            Err(Busy) => Err(self.run(|client| Ok(self.busy(client, session_id)))?),
        }
    }

    fn describe(&self) -> String {
        self.url.clone()
    }

    fn list(&self) -> Result<Vec<Header>> {
        let rows = self.run(|client| {
            client
                .query(
                    "SELECT session_id, header FROM session_state_sessions WHERE next_seq > 0",
                    &[],
                )
                .map_err(self.failed("listing sessions"))
        })?;
        let mut headers = Vec::with_capacity(rows.len());
        for row in rows {
            let (Ok(id), Ok(text)) = (row.try_get::<_, String>(0), row.try_get::<_, String>(1))
            else {
                continue;
            };
            match parse_header(&self.label(&id), text.as_bytes(), ReadMode::Strict) {
                Ok(h) => headers.push(h),
                Err(e) => tracing::warn!(session = %id, "not listed: {e}"),
            }
        }
        headers.sort_by(|a, b| (a.timestamp(), a.id()).cmp(&(b.timestamp(), b.id())));
        Ok(headers)
    }
}

/// A database row is written whole or not at all: every stored row must be an entry of
/// the log. The reader discards a final line that does not parse (a torn write, in a
/// file); here it is corruption, refused.
fn check_complete(
    label: &std::path::Path,
    log: &SessionLog,
    rows: u64,
    next_seq: u64,
) -> Result<()> {
    if log.len() as u64 == rows && rows == next_seq {
        return Ok(());
    }
    if let Some(f) = log.findings().into_iter().next() {
        return Err(Error::Corrupt {
            path: label.to_path_buf(),
            at: f.at,
            detail: format!(
                "a stored entry is not a complete entry ({}); a database row cannot be torn",
                f.message
            ),
        });
    }
    Err(Error::Corrupt {
        path: label.to_path_buf(),
        at: crate::error::Location {
            line: rows + 2,
            offset: 0,
        },
        detail: format!(
            "the session's row says next_seq {next_seq}, but {rows} entries are stored"
        ),
    })
}

fn check_seq(session_id: &str, next: u64, first_seq: u64) -> Result<()> {
    if first_seq == next {
        return Ok(());
    }
    Err(Error::SequenceMismatch {
        session_id: session_id.into(),
        expected: next,
        got: first_seq,
    })
}

enum Failure {
    Driver(postgres::Error),
    Gap { expected: u64, found: i64 },
}

/// The rows of one session as the bytes of its file: the header line, then each entry's
/// line, each ending in `\n`. Checks that the sequence numbers are 0, 1, 2, …
struct RowsReader<'a> {
    rows: postgres::RowIter<'a>,
    pending: Vec<u8>,
    pos: usize,
    seq: u64,
    failure: Option<Failure>,
    done: bool,
}

impl std::io::Read for RowsReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.pending.len() {
            if self.done || self.failure.is_some() {
                return Ok(0);
            }
            self.pending.clear();
            self.pos = 0;
            let row = match self.rows.next() {
                Ok(Some(row)) => row,
                Ok(None) => {
                    self.done = true;
                    return Ok(0);
                }
                Err(e) => return Err(self.stop(Failure::Driver(e))),
            };
            let seq: i64 = match row.try_get(0) {
                Ok(s) => s,
                Err(e) => return Err(self.stop(Failure::Driver(e))),
            };
            if seq != seq_to_db(self.seq) {
                let expected = self.seq;
                return Err(self.stop(Failure::Gap {
                    expected,
                    found: seq,
                }));
            }
            self.seq += 1;
            match row.try_get::<_, &str>(1) {
                Ok(line) => self.pending.extend_from_slice(line.as_bytes()),
                Err(e) => return Err(self.stop(Failure::Driver(e))),
            }
            self.pending.push(b'\n');
        }
        let n = buf.len().min(self.pending.len() - self.pos);
        buf[..n].copy_from_slice(&self.pending[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl RowsReader<'_> {
    fn stop(&mut self, f: Failure) -> std::io::Error {
        self.failure = Some(f);
        std::io::Error::other("reading the session's rows failed")
    }
}

/// Reads lines of a JSONL source; a final record without its newline is torn, left out.
struct LineReader<R> {
    source: R,
    label: PathBuf,
    line: u64,
    offset: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> LineReader<R> {
    fn new(source: R, label: PathBuf) -> Self {
        LineReader {
            source,
            label,
            line: 0,
            offset: 0,
            buf: Vec::new(),
        }
    }

    /// The next complete line (without its `\n`) and where it starts.
    fn next_line(&mut self) -> Result<Option<(String, crate::error::Location)>> {
        self.buf.clear();
        let n = self
            .source
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| Error::Io {
                action: "reading",
                path: self.label.clone(),
                source,
            })?;
        if n == 0 || self.buf.last() != Some(&b'\n') {
            return Ok(None); // the end, or a torn final record
        }
        self.buf.pop();
        let at = crate::error::Location {
            line: self.line + 1,
            offset: self.offset,
        };
        self.line += 1;
        self.offset += n as u64;
        match String::from_utf8(std::mem::take(&mut self.buf)) {
            Ok(s) => Ok(Some((s, at))),
            Err(e) => Err(Error::Corrupt {
                path: self.label.clone(),
                at,
                detail: format!("not UTF-8: {e}"),
            }),
        }
    }
}

/// The structure checks of an import, line by line: a JSON object with a string `id`,
/// unique, whose `parentId` names an earlier entry. The last complete line that does
/// not parse is a torn final record (the reader's rule) and ends the import.
struct Checker<'a> {
    label: &'a std::path::Path,
    ids: HashSet<String>,
    count: u64,
    last: Option<String>,
    torn: Option<(crate::error::Location, String)>,
}

#[derive(serde::Deserialize)]
struct Ids {
    id: Option<Value>,
    #[serde(rename = "parentId")]
    parent_id: Option<Value>,
}

impl<'a> Checker<'a> {
    fn new(label: &'a std::path::Path) -> Self {
        Checker {
            label,
            ids: HashSet::new(),
            count: 0,
            last: None,
            torn: None,
        }
    }

    /// Checks one line; its id, or `None` for a line left out: a torn record (truncated
    /// JSON), or a final line that does not parse (another line after it makes it
    /// corruption), as the reader rules.
    fn check(&mut self, line: &str, at: crate::error::Location) -> Result<Option<String>> {
        if let Some((torn_at, detail)) = self.torn.take() {
            return Err(Error::Corrupt {
                path: self.label.to_path_buf(),
                at: torn_at,
                detail,
            });
        }
        let ids: Ids = match serde_json::from_str(line) {
            Ok(ids) => ids,
            // Truncated JSON is a torn record, which the reader skips wherever it is.
            Err(e) if e.is_eof() => return Ok(None),
            Err(e) => {
                self.torn = Some((at, e.to_string()));
                return Ok(None);
            }
        };
        let invalid = |detail: &str, id: Option<String>| Error::InvalidEntry {
            path: self.label.to_path_buf(),
            at,
            id,
            detail: detail.into(),
        };
        let Some(Value::String(id)) = ids.id else {
            return Err(invalid("no string `id`", None));
        };
        match ids.parent_id {
            None | Some(Value::Null) => {}
            Some(Value::String(p)) if self.ids.contains(&p) => {}
            Some(Value::String(p)) => {
                return Err(Error::DanglingParent {
                    path: self.label.to_path_buf(),
                    at,
                    id,
                    parent: p,
                });
            }
            Some(_) => return Err(invalid("`parentId` is not a string", Some(id))),
        }
        if !self.ids.insert(id.clone()) {
            return Err(Error::DuplicateId {
                path: self.label.to_path_buf(),
                at,
                id,
                first_line: None,
            });
        }
        self.count += 1;
        self.last = Some(id.clone());
        Ok(Some(id))
    }
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

fn copy_failed(store: &PostgresStore, session_id: &str, e: std::io::Error) -> Error {
    Error::Backend {
        store: store.url.clone(),
        action: format!("importing session {session_id}"),
        connection_lost: true,
        source: BackendError {
            source: Box::new(e),
            sql_state: None,
        },
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

fn is_id_collision(e: &postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        d.code() == &SqlState::UNIQUE_VIOLATION
            && d.constraint() == Some("session_state_entries_id_unique")
    })
}

/// A read-only `REPEATABLE READ` transaction: every query in it sees one snapshot, so a
/// session's header row, `next_seq` and entries agree.
fn snapshot(
    client: &mut Client,
) -> std::result::Result<postgres::Transaction<'_>, postgres::Error> {
    client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
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

    #[test]
    fn copy_text_escapes_what_copy_would_read_as_structure() {
        let mut out = Vec::new();
        copy_escape(br#"{"a":"x\ny	z"}"#, &mut out);
        assert_eq!(out, br#"{"a":"x\\ny\tz"}"#.to_vec());
    }
}
