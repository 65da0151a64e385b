//! The store's connection: the asynchronous driver run on a runtime of its own, every
//! wait on the server under a bound.
//!
//! - **Connecting** (TCP, TLS, the startup, the password exchange, and for
//!   `target_session_attrs=read-write` the check that the server takes writes) is bounded
//!   per host by the connect timeout: the hosts of a multi-host URL are tried one by one,
//!   in order (shuffled with `load_balance_hosts=random`), each for at most that long, so
//!   a host that accepts and never answers is passed over like one that is down.
//! - **Each statement's answer** is awaited at most the lock wait (the server's own wait
//!   for another writer, `lock_timeout`) plus the connect timeout.
//!
//! A wait that reaches its bound is [`PgError::TimedOut`]: the connection is given up (the
//! next call connects again), and the store reads it as a connection lost.

use bytes::Bytes;
use futures_util::SinkExt;
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Row, SimpleQueryMessage, Statement, ToStatement};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio_postgres::config::{Host, LoadBalanceHosts};
use tokio_postgres::{Config, CopyInSink};

/// A failure of the connection: the driver's, or a wait that reached its bound.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PgError {
    /// The driver's error, or the server's.
    #[error(transparent)]
    Driver(#[from] tokio_postgres::Error),
    /// No answer within the bound.
    #[error("no answer from the server within {after} while {what}")]
    TimedOut {
        /// What was awaited.
        what: String,
        /// The bound, as printed.
        after: String,
    },
    /// The connection could not be set up on this side (its runtime).
    #[error("starting the connection's runtime: {0}")]
    Runtime(std::io::Error),
}

impl PgError {
    /// The server's SQLSTATE, if it answered with an error.
    pub(crate) fn code(&self) -> Option<&SqlState> {
        match self {
            PgError::Driver(e) => e.code(),
            _ => None,
        }
    }
}

/// A connection to one server.
pub(crate) struct Client {
    rt: Runtime,
    inner: Option<tokio_postgres::Client>,
    connection: Option<tokio::task::JoinHandle<()>>,
    /// How long a statement's answer is awaited.
    reply: Duration,
    /// A wait reached its bound: the connection is given up.
    timed_out: std::cell::Cell<bool>,
}

/// `d` as printed in messages (`5s`, `1s 500ms`).
pub(crate) fn shown(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// The hosts of `config`, one [`Config`] each, in the order they are tried.
fn per_host(config: &Config) -> Vec<(Config, String)> {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let n = hosts.len().max(addrs.len());
    let ports = config.get_ports();
    let mut order: Vec<usize> = (0..n).collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        for i in (1..order.len()).rev() {
            let r = (uuid::Uuid::new_v4().as_u128() % (i as u128 + 1)) as usize;
            order.swap(i, r);
        }
    }
    order
        .into_iter()
        .map(|i| {
            let mut c = Config::new();
            if let Some(u) = config.get_user() {
                c.user(u);
            }
            if let Some(p) = config.get_password() {
                c.password(p);
            }
            if let Some(d) = config.get_dbname() {
                c.dbname(d);
            }
            if let Some(o) = config.get_options() {
                c.options(o);
            }
            if let Some(a) = config.get_application_name() {
                c.application_name(a);
            }
            c.ssl_mode(config.get_ssl_mode())
                .ssl_negotiation(config.get_ssl_negotiation())
                .keepalives(config.get_keepalives())
                .keepalives_idle(config.get_keepalives_idle())
                .target_session_attrs(config.get_target_session_attrs())
                .channel_binding(config.get_channel_binding());
            if let Some(t) = config.get_connect_timeout() {
                c.connect_timeout(*t);
            }
            if let Some(t) = config.get_tcp_user_timeout() {
                c.tcp_user_timeout(*t);
            }
            if let Some(t) = config.get_keepalives_interval() {
                c.keepalives_interval(t);
            }
            if let Some(r) = config.get_keepalives_retries() {
                c.keepalives_retries(r);
            }
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            c.port(port);
            let mut name = String::new();
            match hosts.get(i) {
                Some(Host::Tcp(h)) => {
                    c.host(h);
                    name = format!("{h}:{port}");
                }
                #[cfg(unix)]
                Some(Host::Unix(p)) => {
                    c.host_path(p);
                    name = format!("{}:{port}", p.display());
                }
                None => {}
            }
            if let Some(a) = addrs.get(i) {
                c.hostaddr(*a);
                if name.is_empty() {
                    name = format!("{a}:{port}");
                }
            }
            (c, name)
        })
        .collect()
}

impl Client {
    /// Connects to the first host of `config` that answers within `connect` (each host
    /// its own bound) and suits `target_session_attrs`; statements are then awaited at
    /// most `reply`. The error is the last host's.
    pub(crate) fn connect<T>(
        config: &Config,
        tls: T,
        connect: Duration,
        reply: Duration,
    ) -> Result<Client, PgError>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Send + 'static,
        T::Stream: Send + 'static,
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(PgError::Runtime)?;
        let mut hosts = per_host(config);
        if hosts.is_empty() {
            // No host: the driver says what is missing.
            hosts.push((config.clone(), String::new()));
        }
        let mut last = PgError::Runtime(std::io::Error::other("no host was tried"));
        for (host, name) in hosts {
            let attempt = rt
                .block_on(async { tokio::time::timeout(connect, host.connect(tls.clone())).await });
            match attempt {
                Ok(Ok((client, connection))) => {
                    let connection = rt.spawn(async move {
                        if let Err(e) = connection.await {
                            tracing::debug!(error = %e, "the PostgreSQL connection ended");
                        }
                    });
                    return Ok(Client {
                        rt,
                        inner: Some(client),
                        connection: Some(connection),
                        reply,
                        timed_out: std::cell::Cell::new(false),
                    });
                }
                Ok(Err(e)) => last = PgError::Driver(e),
                Err(_) => {
                    last = PgError::TimedOut {
                        what: format!(
                            "connecting to {name} (the connection, TLS, the startup and the \
                             authentication: the connect timeout)"
                        ),
                        after: shown(connect),
                    };
                }
            }
        }
        Err(last)
    }

    fn inner(&self) -> &tokio_postgres::Client {
        // Taken only by `Drop`.
        self.inner.as_ref().expect("a client until dropped")
    }

    /// Runs `f` on the runtime, awaiting its answer at most the reply bound.
    fn wait<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PgError> {
        match self
            .rt
            .block_on(async { tokio::time::timeout(self.reply, f).await })
        {
            Ok(r) => r.map_err(PgError::Driver),
            Err(_) => {
                self.timed_out.set(true);
                Err(PgError::TimedOut {
                    what: what.to_owned(),
                    after: shown(self.reply),
                })
            }
        }
    }

    /// Awaits each later statement's answer at most `reply`.
    pub(crate) fn set_reply_wait(&mut self, reply: Duration) {
        self.reply = reply;
    }

    /// Whether the connection is gone (closed by the server, broken, or given up after a
    /// wait reached its bound).
    pub(crate) fn is_closed(&self) -> bool {
        self.timed_out.get() || self.inner().is_closed()
    }

    pub(crate) fn simple_query(&self, q: &str) -> Result<Vec<SimpleQueryMessage>, PgError> {
        self.wait(STATEMENT, self.inner().simple_query(q))
    }

    pub(crate) fn batch_execute(&self, q: &str) -> Result<(), PgError> {
        self.wait(STATEMENT, self.inner().batch_execute(q))
    }

    pub(crate) fn execute(&self, q: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, PgError> {
        self.wait(STATEMENT, self.inner().execute(q, params))
    }

    pub(crate) fn query(
        &self,
        q: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, PgError> {
        self.wait(STATEMENT, self.inner().query(q, params))
    }

    pub(crate) fn query_one<Q: ToStatement + ?Sized>(
        &self,
        q: &Q,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, PgError> {
        self.wait(STATEMENT, self.inner().query_one(q, params))
    }

    pub(crate) fn query_opt(
        &self,
        q: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, PgError> {
        self.wait(STATEMENT, self.inner().query_opt(q, params))
    }

    pub(crate) fn query_typed(
        &self,
        q: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, PgError> {
        self.wait(STATEMENT, self.inner().query_typed(q, params))
    }

    pub(crate) fn query_typed_one(
        &self,
        q: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Row, PgError> {
        self.wait(STATEMENT, self.inner().query_typed_one(q, params))
    }

    pub(crate) fn query_typed_opt(
        &self,
        q: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<Row>, PgError> {
        self.wait(STATEMENT, self.inner().query_typed_opt(q, params))
    }

    pub(crate) fn prepare_typed(&self, q: &str, types: &[Type]) -> Result<Statement, PgError> {
        self.wait(STATEMENT, self.inner().prepare_typed(q, types))
    }

    /// Starts a transaction: rolled back when the returned guard is dropped without
    /// [`Tx::commit`].
    pub(crate) fn transaction(&mut self) -> Result<Tx<'_>, PgError> {
        self.batch_execute("BEGIN")?;
        Ok(Tx {
            client: self,
            done: false,
        })
    }
}

/// What a statement's wait is named in a timeout.
const STATEMENT: &str = "awaiting a statement's answer (the lock wait plus the connect timeout)";

impl Drop for Client {
    /// Ends the connection: the driver says goodbye to the server, and the runtime is
    /// given a short while to send it.
    fn drop(&mut self) {
        drop(self.inner.take());
        if let Some(connection) = self.connection.take()
            && !self.timed_out.get()
            && self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(1), connection).await })
                .is_err()
        {
            tracing::debug!("the PostgreSQL connection did not end within 1s; dropped");
        }
    }
}

/// A transaction on a [`Client`]: `ROLLBACK` when dropped before [`Tx::commit`].
pub(crate) struct Tx<'c> {
    client: &'c mut Client,
    done: bool,
}

impl std::ops::Deref for Tx<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client
    }
}

impl std::ops::DerefMut for Tx<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client
    }
}

impl Tx<'_> {
    pub(crate) fn commit(mut self) -> Result<(), PgError> {
        self.done = true;
        self.client.batch_execute("COMMIT")
    }

    /// `COPY … FROM STDIN`: the rows are sent by [`CopyIn::write_all`].
    pub(crate) fn copy_in(&self, q: &str) -> Result<CopyIn<'_>, PgError> {
        let sink: CopyInSink<Bytes> = self
            .client
            .wait(STATEMENT, self.client.inner().copy_in(q))?;
        Ok(CopyIn {
            client: self.client,
            sink: Box::pin(sink),
        })
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done
            && !self.client.is_closed()
            && let Err(e) = self.client.batch_execute("ROLLBACK")
        {
            tracing::debug!(error = %e, "the rollback ends with the connection");
        }
    }
}

/// A `COPY … FROM STDIN` in progress.
pub(crate) struct CopyIn<'c> {
    client: &'c Client,
    sink: Pin<Box<CopyInSink<Bytes>>>,
}

impl CopyIn<'_> {
    pub(crate) fn write_all(&mut self, buf: &[u8]) -> Result<(), PgError> {
        let data = Bytes::copy_from_slice(buf);
        self.client.wait("sending COPY data", self.sink.send(data))
    }

    pub(crate) fn finish(mut self) -> Result<u64, PgError> {
        self.client
            .wait("awaiting COPY's answer", self.sink.as_mut().finish())
    }
}
