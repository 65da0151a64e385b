//! A real PostgreSQL 15 server for the tests (and the benchmark): started on loopback in a
//! temporary directory, stopped and removed when done.
//!
//! - The binaries come from `pg_config --bindir` (Debian: `/usr/lib/postgresql/15/bin`).
//! - As root, the cluster belongs to the `postgres` user (`runuser -u postgres --`):
//!   PostgreSQL refuses to run as root. As any other user, it runs as that user.
//! - `initdb` in a fresh temporary directory, `pg_ctl start` on a random free loopback
//!   port with the unix socket in that directory, then `pg_isready` polled (bounded) until
//!   the server accepts connections.
//! - Cleanup never depends on destructors of statics (they do not run): every server has a
//!   watcher process holding the read end of a pipe whose write end this process keeps.
//!   When the server is dropped, or this process exits or is killed, the pipe closes and
//!   the watcher runs `pg_ctl stop -m fast` and removes the directory it was given (one
//!   this module created).
//!
//! [`fresh_database`] gives each test its own database on the one shared server of the
//! test binary; [`Server::start`] a dedicated server for tests that restart or stop it;
//! [`Server::start_primary`] and [`Server::standby_of`] a primary and a streaming hot
//! standby (`pg_basebackup`), for the failover tests ([`Server::kill_hard`],
//! [`Server::promote`]).
//! It panics with a clear message when a server cannot be started: a test that needs
//! PostgreSQL never passes without one.
#![expect(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A running PostgreSQL server of our own.
pub struct Server {
    dir: PathBuf,
    bindir: PathBuf,
    port: u16,
    password: Option<String>,
    ssl: bool,
    run_as_postgres: bool,
    /// More `-c name=value` settings of the server's command line.
    settings: Vec<String>,
    watcher: Mutex<Option<(Child, ChildStdin)>>,
}

/// How a server is started.
#[derive(Default, Clone)]
pub struct ServerOptions {
    /// Require this password (scram-sha-256) from every connection, local and TCP.
    pub password: Option<String>,
}

/// The certificate (with its chain, if any) and private key, PEM, of a server that serves
/// TLS ([`Server::start_tls`]).
#[derive(Clone)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
}

fn bindir() -> PathBuf {
    let out = Command::new("pg_config").arg("--bindir").output();
    let dir = match out {
        Ok(o) if o.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_owned())
        }
        _ => PathBuf::from("/usr/lib/postgresql/15/bin"),
    };
    assert!(
        dir.join("initdb").is_file() && dir.join("pg_ctl").is_file(),
        "PostgreSQL's server binaries are not installed (no initdb/pg_ctl in {}, from \
         `pg_config --bindir`): install the server package, e.g. \
         `apt-get install -y postgresql-15`; the PostgreSQL tests need a real server",
        dir.display()
    );
    dir
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("local address").port()
}

impl Server {
    /// Starts a dedicated server; panics with the server's log if it cannot.
    pub fn start(options: ServerOptions) -> Server {
        Server::launch(options, None)
    }

    /// Starts a dedicated server that serves TLS (`ssl = on`) with `tls`; plain
    /// connections are still accepted.
    pub fn start_tls(tls: &ServerTls) -> Server {
        Server::launch(ServerOptions::default(), Some(tls))
    }

    /// A server that streaming standbys can follow ([`Server::standby_of`]). PostgreSQL
    /// 15's defaults already have `wal_level = replica`, WAL senders and, from initdb, a
    /// `replication` line for 127.0.0.1 in `pg_hba.conf`.
    pub fn start_primary() -> Server {
        Server::launch_with(
            ServerOptions::default(),
            None,
            vec!["wal_keep_size=256MB".into()],
        )
    }

    /// A hot standby of `primary`, made with `pg_basebackup` and streaming from it as
    /// `name` (its `application_name`, which `synchronous_standby_names` names). It is
    /// running and has connected to the primary when this returns.
    pub fn standby_of(primary: &Server, name: &str) -> Server {
        let mut server = Server::empty(ServerOptions::default(), false);
        // The standby's own settings: streaming from the primary, and no synchronous
        // standby of its own once promoted (a commit would wait forever for one).
        server.settings = vec![
            format!(
                "primary_conninfo='host=127.0.0.1 port={} user=postgres application_name={name}'",
                primary.port
            ),
            "synchronous_standby_names=''".into(),
            "hot_standby=on".into(),
        ];
        let out = server
            .pg_command("pg_basebackup")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg("-D")
            .arg(server.data())
            .args(["-X", "stream", "-R", "--no-sync", "-c", "fast"])
            .output()
            .expect("run pg_basebackup");
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        server.start_on_a_free_port();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let streaming = primary
                .admin("postgres")
                .query_opt(
                    "SELECT 1 FROM pg_stat_replication WHERE application_name = $1 \
                     AND state = 'streaming'",
                    &[&name],
                )
                .is_ok_and(|r| r.is_some());
            if streaming {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "the standby {name} did not start streaming within 60 s:\n{}",
                std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's postmaster, as its `postmaster.pid` names it.
    pub fn postmaster_pid(&self) -> i32 {
        let pidfile = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .expect("read postmaster.pid");
        pidfile
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid on the first line of postmaster.pid")
    }

    /// The machine dies: SIGKILL to the postmaster and every backend at once (its
    /// process group: `pg_ctl` starts the postmaster in a session of its own), so no
    /// backend lingers to answer a client or send WAL.
    pub fn kill_hard(&self) {
        let pid = self.postmaster_pid();
        let pgid = Command::new("ps")
            .args(["-o", "pgid=", "-p", &pid.to_string()])
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .parse::<i32>()
                    .ok()
            })
            .expect("the postmaster's process group");
        assert_eq!(pgid, pid, "the postmaster leads its own process group");
        let ok = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -KILL -{pgid}");
        // Bounded: the postmaster is gone when its pid no longer answers signal 0.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                Instant::now() < deadline,
                "the postmaster {pid} outlived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `pg_ctl promote -w`: the standby becomes a primary and accepts writes.
    pub fn promote(&self) {
        let out = self
            .pg_command("pg_ctl")
            .arg("promote")
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-t", "60"])
            .output()
            .expect("run pg_ctl promote");
        assert!(
            out.status.success(),
            "pg_ctl promote failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Sets a server setting with `ALTER SYSTEM` and reloads the configuration (two
    /// statements: `ALTER SYSTEM` refuses to run in a transaction block).
    pub fn set(&self, name: &str, value: &str) {
        let mut admin = self.admin("postgres");
        for sql in [
            format!("ALTER SYSTEM SET {name} = '{value}'"),
            "SELECT pg_reload_conf()".into(),
        ] {
            admin
                .batch_execute(&sql)
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        }
    }

    fn launch(options: ServerOptions, ssl: Option<&ServerTls>) -> Server {
        Server::launch_with(options, ssl, Vec::new())
    }

    /// A fresh directory (owned by `postgres` when the tests run as root) and its
    /// watcher; no cluster in it yet.
    fn empty(options: ServerOptions, ssl: bool) -> Server {
        let bindir = bindir();
        let run_as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("session-state-pg-")
            .tempdir()
            .expect("create a temporary directory")
            .keep();
        let mut server = Server {
            dir,
            bindir,
            port: 0,
            password: options.password.clone(),
            ssl,
            run_as_postgres,
            settings: Vec::new(),
            watcher: Mutex::new(None),
        };
        server.start_watcher();
        if run_as_postgres {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&server.dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown {} to postgres failed", server.dir.display());
        }
        server
    }

    fn launch_with(
        options: ServerOptions,
        ssl: Option<&ServerTls>,
        settings: Vec<String>,
    ) -> Server {
        let mut server = Server::empty(options.clone(), ssl.is_some());
        server.settings = settings;
        if let Some(tls) = ssl {
            #[cfg(unix)]
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(server.dir.join("server.crt"), &tls.cert_pem).expect("write the cert");
            let key = server.dir.join("server.key");
            std::fs::write(&key, &tls.key_pem).expect("write the key");
            // The server refuses a key others can read.
            #[cfg(unix)]
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
                .expect("chmod the key");
        }
        if server.run_as_postgres {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&server.dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown {} to postgres failed", server.dir.display());
        }
        let mut initdb = vec![
            "-D".to_owned(),
            server.data().display().to_string(),
            "-U".into(),
            "postgres".into(),
            "-E".into(),
            "UTF8".into(),
            "--no-sync".into(),
            "--locale=C".into(),
        ];
        match &options.password {
            Some(pw) => {
                let pwfile = server.dir.join("pwfile");
                std::fs::write(&pwfile, format!("{pw}\n")).expect("write the password file");
                if server.run_as_postgres {
                    let _ = Command::new("chown")
                        .args(["postgres:postgres"])
                        .arg(&pwfile)
                        .status();
                }
                initdb.push("--auth=scram-sha-256".into());
                initdb.push(format!("--pwfile={}", pwfile.display()));
            }
            None => initdb.push("--auth=trust".into()),
        }
        let out = server
            .pg_command("initdb")
            .args(&initdb)
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        server.start_on_a_free_port();
        server
    }

    /// Starts the cluster in the directory on a random free port; another process may
    /// take the port first, so a few are tried.
    fn start_on_a_free_port(&mut self) {
        let mut last = String::new();
        for _ in 0..5 {
            self.port = free_port();
            match self.try_start() {
                Ok(()) => return,
                Err(e) => last = e,
            }
        }
        panic!("could not start PostgreSQL: {last}");
    }

    /// The cluster's data directory.
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn pg_command(&self, program: &str) -> Command {
        let path = self.bindir.join(program);
        if self.run_as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// The watcher: reads its stdin until EOF (this process dropped the server, exited or
    /// was killed), then stops the server and removes the directory.
    fn start_watcher(&mut self) {
        let stop = if self.run_as_postgres {
            format!(
                "runuser -u postgres -- {} stop -D \"$1\"/data -m fast -w -t 30",
                self.bindir.join("pg_ctl").display()
            )
        } else {
            format!(
                "{} stop -D \"$1\"/data -m fast -w -t 30",
                self.bindir.join("pg_ctl").display()
            )
        };
        let script = format!(
            "cat >/dev/null; if [ -f \"$1\"/data/postmaster.pid ]; then {stop} >/dev/null 2>&1; fi; \
             rm -rf -- \"$1\""
        );
        let mut child = Command::new("sh")
            .args(["-c", &script, "pg-watcher"])
            .arg(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server's watcher (sh)");
        let stdin = child.stdin.take().expect("the watcher's stdin");
        *self.watcher.lock().unwrap() = Some((child, stdin));
    }

    fn try_start(&self) -> Result<(), String> {
        let log = self.dir.join("server.log");
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on \
             -c max_connections=200 -c shared_buffers=32MB",
            self.port,
            self.dir.display()
        );
        for setting in &self.settings {
            opts.push_str(&format!(" -c {setting}"));
        }
        if self.ssl {
            opts.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
                self.dir.display()
            ));
        }
        let out = self
            .pg_command("pg_ctl")
            .arg("start")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(&log)
            .args(["-o", &opts, "-w", "-t", "60"])
            .output()
            .map_err(|e| format!("run pg_ctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_ctl start failed: {}{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            ));
        }
        self.wait_ready(Duration::from_secs(60))
    }

    /// Polls `pg_isready` until the server accepts connections, for at most `limit`.
    fn wait_ready(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let ready = Command::new(self.bindir.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-t", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                return Err(format!(
                    "the server on port {} did not become ready within {limit:?}:\n{log}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `pg_ctl stop -m fast`: every connection is closed.
    pub fn stop(&self) {
        let out = self
            .pg_command("pg_ctl")
            .arg("stop")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "-t", "60"])
            .output()
            .expect("run pg_ctl stop");
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the stopped server again on the same port.
    pub fn start_again(&self) {
        self.try_start()
            .unwrap_or_else(|e| panic!("could not restart PostgreSQL: {e}"));
    }

    /// Stops the server (fast: every connection is closed) and starts it again.
    pub fn restart(&self) {
        self.stop();
        self.start_again();
    }

    /// A URL to database `db` over TCP on loopback, as the superuser `postgres`.
    pub fn url(&self, db: &str) -> String {
        match &self.password {
            Some(pw) => format!("postgres://postgres:{pw}@127.0.0.1:{}/{db}", self.port),
            None => format!("postgres://postgres@127.0.0.1:{}/{db}", self.port),
        }
    }

    /// A connection to `db` for the test's own SQL.
    pub fn admin(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.url(db), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to the test server's {db}: {e}"))
    }

    /// Creates a new, empty database; returns its name.
    pub fn create_database(&self) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.admin("postgres")
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        name
    }

    /// Drops a database [`Server::create_database`] made (closing its connections).
    pub fn drop_database(&self, name: &str) {
        self.admin("postgres")
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .unwrap_or_else(|e| panic!("DROP DATABASE {name}: {e}"));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let watcher = self
            .watcher
            .get_mut()
            .map(Option::take)
            .unwrap_or_else(|p| p.into_inner().take());
        if let Some((mut child, stdin)) = watcher {
            drop(stdin); // EOF: the watcher stops the server and removes the directory
            let _ = child.wait();
        }
    }
}

/// The test binary's one shared server (trust authentication on loopback).
pub fn shared() -> &'static Server {
    static SHARED: OnceLock<Server> = OnceLock::new();
    SHARED.get_or_init(|| Server::start(ServerOptions::default()))
}

/// A database of its own on the shared server; dropped (with any connection still on it)
/// when the guard is.
pub struct Guard {
    server: &'static Server,
    name: String,
}

impl Guard {
    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server it lives on.
    pub fn server(&self) -> &'static Server {
        self.server
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.server.url("postgres"), postgres::NoTls)
        {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// A fresh database on the shared server: its URL and the guard that drops it.
pub fn fresh_database() -> (String, Guard) {
    let server = shared();
    let name = server.create_database();
    (server.url(&name), Guard { server, name })
}

/// Writes `text` to the file at `path` (a helper for tests that keep a server's log).
pub fn write_file(path: &Path, text: &str) {
    let mut f = std::fs::File::create(path).expect("create");
    f.write_all(text.as_bytes()).expect("write");
}

/// A loopback server that accepts every connection and never answers: a hung
/// postmaster as a client meets it. The connections are held until it is dropped.
pub struct Unanswering {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acceptor: Option<std::thread::JoinHandle<usize>>,
}

impl Unanswering {
    pub fn start() -> Unanswering {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let acceptor = std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    held.push(c);
                }
            }
            held.len()
        });
        Unanswering {
            port,
            stop,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops accepting, closes every connection held, and says how many were accepted.
    pub fn finish(mut self) -> usize {
        self.end()
    }

    fn end(&mut self) -> usize {
        let Some(acceptor) = self.acceptor.take() else {
            return 0;
        };
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the acceptor, which sees the flag and ends.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        acceptor.join().expect("the acceptor thread")
    }
}

impl Drop for Unanswering {
    fn drop(&mut self) {
        self.end();
    }
}

/// A process stopped with SIGSTOP; SIGCONT when dropped, so nothing is left stopped
/// whatever the test does.
pub struct Stopped(i32);

impl Stopped {
    pub fn stop(pid: i32) -> Stopped {
        let ok = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -STOP {pid}");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let ok = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("kill -CONT {} failed", self.0);
        }
    }
}

/// Runs `cmd` to its end, or kills it after `limit` and panics: a command that hangs is
/// the failure these tests look for, told apart from a slow one by a limit far above
/// every bound the command documents.
pub fn output_within(mut cmd: Command, limit: Duration) -> std::process::Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for the command"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("the command was still running after {limit:?}: it hung");
        }
    }
}

/// A loopback relay to a server that cuts a connection at its `COMMIT`, once armed: it
/// passes the `COMMIT` to the server, lets the server commit, and closes the client's
/// connection in place of the answer. The client cannot tell whether it committed. For
/// URLs with `sslmode=disable` (it reads the server's messages).
pub struct CutAtCommit {
    port: u16,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cuts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CutAtCommit {
    /// Relays to 127.0.0.1:`upstream`.
    pub fn start(upstream: u16) -> CutAtCommit {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let armed = std::sync::Arc::new(AtomicBool::new(false));
        let cuts = std::sync::Arc::new(AtomicUsize::new(0));
        let (a, c) = (armed.clone(), cuts.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (a, c) = (a.clone(), c.clone());
                std::thread::spawn(move || relay(client, server, &a, &c));
            }
        });
        CutAtCommit { port, armed, cuts }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next `COMMIT` answered by the server is cut.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// How many connections were cut at a `COMMIT`.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

/// Client to server: bytes as they come. Server to client: message by message, until an
/// armed cut meets a `CommandComplete` of `COMMIT`.
fn relay(
    client: std::net::TcpStream,
    server: std::net::TcpStream,
    armed: &std::sync::atomic::AtomicBool,
    cuts: &std::sync::atomic::AtomicUsize,
) {
    use std::io::Read;
    let (Ok(mut up), Ok(mut from_client)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut up);
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    let (mut from_server, mut to_client) = (server, client);
    loop {
        let mut head = [0u8; 5];
        if from_server.read_exact(&mut head).is_err() {
            break;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if from_server.read_exact(&mut body).is_err() {
            break;
        }
        if head[0] == b'C' && body == b"COMMIT\0" && armed.swap(false, Ordering::SeqCst) {
            cuts.fetch_add(1, Ordering::SeqCst);
            let _ = to_client.shutdown(std::net::Shutdown::Both);
            let _ = from_server.shutdown(std::net::Shutdown::Both);
            return;
        }
        if to_client.write_all(&head).is_err() || to_client.write_all(&body).is_err() {
            break;
        }
    }
    let _ = to_client.shutdown(std::net::Shutdown::Both);
}
