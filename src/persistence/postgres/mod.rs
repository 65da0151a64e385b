//! [`PostgresStore`], the PostgreSQL backend of [`SessionStore`](super::SessionStore): sessions shared by
//! many machines, kept on one PostgreSQL server.
//!
//! The header line and every entry line are rows, kept byte for byte (`text`, not
//! `jsonb`), so the crate's reader, the folds and `export` see exactly what Pi wrote. One
//! writer per session is enforced by the database: an append locks the session's row,
//! checks the stored next sequence number and inserts the lines under the
//! `(session_id, seq)` primary key, committed before it returns. Large batches (an
//! import) are streamed with `COPY`. See `docs/postgres.md`.

pub(crate) mod client;
mod errors;
mod sql;
mod store;
mod wire;

use super::lines::line_ids;
use super::redact::redact_config;
use crate::error::{BackendError, Result, StoreError};
use client::{Client, PgError};
use postgres::error::SqlState;
use std::sync::Mutex;
use std::time::Duration;
use tokio_postgres::Config;

use crate::sync::lock;
use errors::classify;
use sql::{HOLDER, SCHEMA, SCHEMA_LOCK_KEY};
use wire::{application_name, copy_escape, seq_from_db, seq_to_db, set_lock_timeout};

/// The version of the tables this build reads and writes (`session_state_schema`).
pub const POSTGRES_SCHEMA_VERSION: i32 = 1;

/// How long an append waits for another writer's transaction on the same session before
/// it is refused with [`StoreError::Busy`], unless [`PostgresStore::with_lock_wait`] says
/// otherwise; also how long the crate retries a server that is unavailable
/// ([`SessionStore::retry_window`](super::SessionStore::retry_window)).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// How long one host's connection may take (TCP, TLS, the startup, the authentication,
/// and the check of `target_session_attrs`) when the URL gives no `connect_timeout`.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The PostgreSQL backend of [`SessionStore`](super::SessionStore): many sessions, many machines, one server.
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
    conn: Mutex<Option<Conn>>,
    /// The append statement prepared on the current connection, once it has appended
    /// before (a process that appends once does not pay the prepare's round trip).
    append_stmt: Mutex<Prepared>,
}

/// The store's connection, and whether its session has been set up (the lock wait, the
/// commit setting, the tables checked): every statement but the append needs that first;
/// the append carries all three itself (`docs/postgres.md`, "A connection's first
/// statement").
struct Conn {
    client: Client,
    set_up: bool,
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
    /// `key=value` form of libpq). The first call that uses the tables creates them if
    /// they are missing, or checks their version (`docs/postgres.md`, "The schema"). TLS follows
    /// libpq's `sslmode` (`disable`, `prefer` (the default), `require`, `verify-ca`,
    /// `verify-full`) and `sslrootcert` (a PEM file of CA certificates, or `system`):
    /// see `docs/postgres.md`, "TLS".
    ///
    /// A server that cannot be reached yet, or is starting, shutting down or out of
    /// connection slots ([`StoreError::Unavailable`]) is tried again with backoff for the
    /// retry window (the lock wait, 5 s unless [`PostgresStore::with_lock_wait`] says
    /// otherwise), as every later call is: a server restart or
    /// a failover shorter than that is waited out. With several hosts
    /// (`postgres://a:5432,b:5432/db?target_session_attrs=read-write`), each attempt
    /// tries them in turn.
    ///
    /// Errors: an unparsable URL is [`Error::StoreUrl`](crate::Error::StoreUrl); a server still
    /// unavailable at the end of the window is
    /// [`Error::StoreUnavailable`](crate::Error::StoreUnavailable) (how long, how many
    /// attempts, the last failure); a server that refuses otherwise (a wrong password) is
    /// [`StoreError::Database`] at once. Each names the URL without its password. Tables of a
    /// newer session-state are refused by the first call that uses them, as
    /// [`StoreError::Database`], before it writes anything.
    pub fn connect(url: &str) -> Result<PostgresStore> {
        let (mut config, tls) = super::tls::parse(url, redact_config)?;
        if config.get_application_name().is_none() {
            config.application_name(application_name());
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let store = PostgresStore {
            url: redact_config(&config),
            config,
            tls,
            lock_wait: DEFAULT_LOCK_WAIT,
            conn: Mutex::new(None),
            append_stmt: Mutex::default(),
        };
        super::retry::Retry::new(&store).transient(|| store.run_on(false, |_| Ok(())))?;
        Ok(store)
    }

    /// The same store, waiting at most `wait` for another writer's transaction on a
    /// session before refusing an append with [`StoreError::Busy`] (at least 1 ms).
    pub fn with_lock_wait(mut self, wait: Duration) -> PostgresStore {
        self.lock_wait = wait.max(Duration::from_millis(1));
        let reply = self.reply_wait();
        if let Some(conn) = lock(&self.conn).as_mut() {
            conn.client.set_reply_wait(reply);
        }
        if let Some(conn) = lock(&self.conn).as_mut().filter(|c| c.set_up) {
            // Applied on the next connection if this fails.
            if let Err(e) = set_lock_timeout(&mut conn.client, self.lock_wait) {
                tracing::debug!(error = %e, "lock wait not set on the open connection; the next one sets it");
            }
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
    ) -> impl FnOnce(PgError) -> StoreError + '_ {
        let action = action.into();
        move |e| classify(&self.url, action, phase, e)
    }

    /// Runs `f` on the connection, set up first (the lock wait, the commit setting, the
    /// tables), connecting first when there is none or it closed. A lost connection is
    /// dropped, so the next call connects again.
    fn run<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run_on(true, f)
    }

    /// [`run`](Self::run), but on a connection that may not be set up yet (`set_up`
    /// false): for the append, whose statement sets the lock wait and the commit setting
    /// for its own transaction and checks the tables' version.
    fn run_on<T>(
        &self,
        set_up: bool,
        f: impl FnOnce(&mut Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = lock(&self.conn);
        let conn = match guard.take().filter(|c| !c.client.is_closed()) {
            Some(conn) => conn,
            None => {
                *lock(&self.append_stmt) = Prepared::Unused;
                Conn {
                    client: self.open()?,
                    set_up: false,
                }
            }
        };
        let conn = guard.insert(conn);
        let result = if set_up && !conn.set_up {
            self.set_up(&mut conn.client)
                .inspect(|()| conn.set_up = true)
                .and_then(|()| f(&mut conn.client))
        } else {
            f(&mut conn.client)
        };
        let lost = matches!(
            &result,
            Err(StoreError::Unavailable { .. } | StoreError::Indeterminate { .. })
        );
        if lost || conn.client.is_closed() {
            *guard = None;
            *lock(&self.append_stmt) = Prepared::Unused;
        }
        result
    }

    /// The next [`run`](Self::run) sets the connection up again: its append found the
    /// tables of another version.
    fn set_up_again(&self) {
        if let Some(conn) = lock(&self.conn).as_mut() {
            conn.set_up = false;
        }
    }

    fn open(&self) -> Result<Client, StoreError> {
        let (connect, reply) = (self.connect_timeout(), self.reply_wait());
        match self.tls.rustls() {
            None => Client::connect(&self.config, tokio_postgres::NoTls, connect, reply),
            Some(tls) => Client::connect(&self.config, tls.clone(), connect, reply),
        }
        .map_err(self.failed("connecting", Phase::Before))
    }

    /// How long one host's connection (TCP, TLS, the startup, the authentication) may
    /// take: the URL's `connect_timeout`, or [`DEFAULT_CONNECT_TIMEOUT`].
    fn connect_timeout(&self) -> Duration {
        self.config
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT)
    }

    /// How long a statement's answer is awaited: the lock wait (the server's own wait
    /// for another writer) plus the connect timeout.
    fn reply_wait(&self) -> Duration {
        self.lock_wait + self.connect_timeout()
    }

    /// The connection's session: the lock wait, the commit setting and the tables (made
    /// when missing, refused when newer). One round trip when the tables are there.
    fn set_up(&self, client: &mut Client) -> Result<(), StoreError> {
        let fail = |a: &'static str| self.failed(a, Phase::Before);
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
                set_lock_timeout(client, self.lock_wait).map_err(fail("configuring"))?;
                let sync: String = client
                    .query_one("SELECT current_setting('synchronous_commit')", &[])
                    .and_then(|r| Ok(r.try_get(0)?))
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
            self.ensure_schema(client)?;
        }
        Ok(())
    }

    /// The refusal of tables made by a newer session-state, of version `v`.
    fn newer(&self, v: i32) -> StoreError {
        StoreError::Database {
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
        }
    }

    /// Creates the tables if they are missing, serialized between processes by an
    /// advisory lock; refuses tables of a newer version. One query when they are there.
    fn ensure_schema(&self, client: &mut Client) -> Result<(), StoreError> {
        let fail = || self.failed("creating the tables", Phase::Before);
        let current: Option<i32> =
            match client.query_one("SELECT max(version) FROM session_state_schema", &[]) {
                Ok(row) => row.try_get(0).map_err(PgError::from).map_err(fail())?,
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => None,
                Err(e) => return Err(fail()(e)),
            };
        match current {
            Some(v) if v > POSTGRES_SCHEMA_VERSION => return Err(self.newer(v)),
            Some(v) if v == POSTGRES_SCHEMA_VERSION => return Ok(()),
            _ => {}
        }
        let tx = client.transaction().map_err(fail())?;
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
            .and_then(|r| Ok(r.try_get(0)?))
            .map_err(fail())?;
        if let Some(v) = found
            && v > POSTGRES_SCHEMA_VERSION
        {
            return Err(self.newer(v));
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

    /// The refusal when another writer holds the session past the wait: the writer in
    /// its turn, or the transaction holding the session's row, named from what the server
    /// knows of it ([`HOLDER`]).
    fn busy(&self, client: &mut Client, session_id: &str) -> StoreError {
        let holder = client
            .query_opt(HOLDER, &[&session_id])
            .ok()
            .flatten()
            .and_then(|r| {
                Some(Holder {
                    app: r.try_get(0).ok()?,
                    pid: r.try_get(1).ok()?,
                    addr: r.try_get(2).ok()?,
                    since: r.try_get(3).ok()?,
                    connected: r.try_get(4).ok()?,
                    state: r.try_get(5).ok()?,
                    turn: r.try_get(6).ok()?,
                })
            });
        let wait = humantime::format_duration(self.lock_wait);
        let (initiator, reason) = match holder {
            Some(h) => (h.initiator(), h.reason(&wait.to_string())),
            None => (
                "another writer".into(),
                format!("it holds the session (its turn or its row) after the lock wait of {wait}"),
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
        tx: &mut client::Tx<'_>,
        session_id: &str,
        first_seq: u64,
        ids: &[String],
        lines: &[String],
    ) -> Result<(), StoreError> {
        let action = format!("storing entries of session {session_id}");
        let mut copy = tx
            .copy_in("COPY session_state_entries (session_id, seq, entry_id, line) FROM STDIN")
            .map_err(self.failed(action.clone(), Phase::Writing))?;
        let mut prefix = Vec::new();
        copy_escape(session_id.as_bytes(), &mut prefix);
        prefix.push(b'\t');
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
        let broken = |e: PgError| StoreError::Indeterminate {
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
                .map_err(PgError::from)
                .map_err(self.failed(action.clone(), Phase::Before))?,
        );
        StoreError::check_next(session_id, next, first_seq)?;
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

/// The holder of a session, as the server knows it ([`HOLDER`]).
struct Holder {
    app: Option<String>,
    pid: i32,
    addr: Option<String>,
    since: Option<String>,
    connected: Option<String>,
    state: Option<String>,
    /// It holds the session's turn (else its transaction holds the session's row).
    turn: bool,
}

impl Holder {
    /// `pid:N@host` of an `application_name` a session-state connection sets
    /// (`session-state pid:N@host`).
    fn process(&self) -> Option<(&str, &str)> {
        let app = self.app.as_deref()?;
        let rest = app.strip_prefix("session-state pid:")?;
        let (pid, host) = rest.split_once('@')?;
        (!pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())).then_some((pid, host))
    }

    fn initiator(&self) -> String {
        let name = self
            .app
            .clone()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "a client without application_name".into());
        let process = self
            .process()
            .map(|(pid, host)| format!("process {pid} on {host}; "))
            .unwrap_or_default();
        let client = self
            .addr
            .as_deref()
            .map(|a| format!(", client {a}"))
            .unwrap_or_default();
        format!("{name} ({process}server backend pid {}{client})", self.pid)
    }

    fn reason(&self, wait: &str) -> String {
        let since = |label: &str, t: &Option<String>| {
            t.as_deref()
                .map(|t| format!(", {label} {t}"))
                .unwrap_or_default()
        };
        let end = match self.process() {
            Some((pid, host)) => format!(
                "if it is stopped or hung, kill process {pid} on {host}, or end its server \
                 backend with SELECT pg_terminate_backend({})",
                self.pid
            ),
            None => format!(
                "if it is stopped or hung, end it, or its server backend with SELECT \
                 pg_terminate_backend({})",
                self.pid
            ),
        };
        if self.turn {
            let state = self.state.as_deref().unwrap_or("unknown");
            let idle = if state == "idle" {
                "idle".to_owned()
            } else {
                format!("in state {state}")
            };
            format!(
                "it holds the session's turn (a PostgreSQL advisory lock its connection \
                 holds){}{}, and the lock wait of {wait} ran out; the turn ends when that \
                 writer ends it or its connection closes: {end}",
                since(&format!("its connection {idle} since"), &self.since),
                since("connected since", &self.connected),
            )
        } else {
            format!(
                "its transaction on the session{}{} is still open after the lock wait of \
                 {wait}; the row lock ends with that transaction: {end}",
                since("open since", &self.since),
                since("connected since", &self.connected),
            )
        }
    }
}
