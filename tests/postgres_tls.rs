//! TLS to PostgreSQL (`docs/postgres.md`, "TLS"): a real server started with `ssl = on`
//! and a certificate these tests make (a CA of their own, and a server certificate it
//! signs for `localhost` and 127.0.0.1). Whether a connection is encrypted is asked of
//! the server itself (`pg_stat_ssl`), over a separate plain connection.
#![expect(clippy::unwrap_used)]

use crate::common;
use common::pg::{Server, ServerTls};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use session_state::{PostgresStore, SessionStore};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A CA: its certificate (PEM) and what signs with it.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    Ca {
        pem,
        issuer: Issuer::new(params, key),
    }
}

/// The TLS server of this test binary, its CA's certificate file, and another CA's (one
/// that did not sign the server's certificate).
struct World {
    server: Server,
    ca_file: PathBuf,
    other_ca_file: PathBuf,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let ca = ca("session-state test CA");
        let other = ca_pem("another CA");
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        let server = Server::start_tls(&ServerTls {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        });
        // Beside the cluster: removed with it.
        let dir = server.data().parent().unwrap().to_path_buf();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &ca.pem).unwrap();
        let other_ca_file = dir.join("other-ca.pem");
        std::fs::write(&other_ca_file, other).unwrap();
        World {
            server,
            ca_file,
            other_ca_file,
        }
    })
}

fn ca_pem(name: &str) -> String {
    ca(name).pem
}

/// A URL to the TLS server's `postgres` database with `query` (its application name
/// `app`, so the server can say whether that connection is encrypted).
fn url(w: &World, host: &str, app: &str, query: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/postgres?application_name={app}&{query}",
        w.server.port()
    )
}

/// Whether the server's connection named `app` is encrypted (`None`: no such
/// connection).
fn encrypted(w: &World, app: &str) -> Option<bool> {
    let mut admin = w.server.admin("postgres");
    admin
        .query_opt(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1",
            &[&app],
        )
        .unwrap()
        .map(|r| r.get(0))
}

fn file(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn sslmode_require_encrypts_and_disable_does_not() {
    let w = world();
    let store = PostgresStore::connect(&url(w, "127.0.0.1", "tls-require", "sslmode=require"))
        .expect("connects with TLS");
    store.list().unwrap();
    assert_eq!(encrypted(w, "tls-require"), Some(true));
    let plain = PostgresStore::connect(&url(w, "127.0.0.1", "tls-disable", "sslmode=disable"))
        .expect("connects without TLS");
    plain.list().unwrap();
    assert_eq!(encrypted(w, "tls-disable"), Some(false));
}

#[test]
fn verify_full_accepts_the_servers_ca_and_checks_the_host_name() {
    let w = world();
    let query = format!("sslmode=verify-full&sslrootcert={}", file(&w.ca_file));
    let store = PostgresStore::connect(&url(w, "127.0.0.1", "tls-full", &query))
        .expect("the certificate names 127.0.0.1 and is signed by the CA");
    store.list().unwrap();
    assert_eq!(encrypted(w, "tls-full"), Some(true));
    // The same server under a name its certificate does not hold: refused by verify-full,
    // accepted by verify-ca (which checks the chain only).
    let wrong_name = |mode: &str, app: &str| {
        format!(
            "postgres://postgres@db.example:{}/postgres?hostaddr=127.0.0.1&application_name={app}\
             &sslmode={mode}&sslrootcert={}",
            w.server.port(),
            file(&w.ca_file)
        )
    };
    let e = PostgresStore::connect(&wrong_name("verify-full", "tls-name"))
        .expect_err("a certificate for another name is refused");
    let text = e.to_string();
    assert!(text.contains("certificate"), "{text}");
    assert_eq!(encrypted(w, "tls-name"), None);
    let ca_only = PostgresStore::connect(&wrong_name("verify-ca", "tls-ca"))
        .expect("verify-ca does not compare the name");
    ca_only.list().unwrap();
    assert_eq!(encrypted(w, "tls-ca"), Some(true));
}

#[test]
fn a_wrong_root_certificate_is_refused() {
    let w = world();
    for mode in ["verify-full", "verify-ca", "require"] {
        let app = format!("tls-wrong-{mode}");
        let query = format!("sslmode={mode}&sslrootcert={}", file(&w.other_ca_file));
        let t = std::time::Instant::now();
        let e = PostgresStore::connect(&url(w, "127.0.0.1", &app, &query))
            .err()
            .unwrap_or_else(|| panic!("{mode}: a server certificate from another CA is refused"));
        // Refused at once: a certificate is no transient trouble to wait out.
        assert!(
            matches!(
                e,
                session_state::Error::Store(session_state::StoreError::Database { .. })
            ) && t.elapsed() < std::time::Duration::from_secs(2),
            "{mode}: {e:?} after {:?}",
            t.elapsed()
        );
        let text = e.to_string();
        assert!(
            text.contains("connecting") && text.contains("certificate"),
            "{mode}: {text}"
        );
        assert_eq!(encrypted(w, &app), None, "{mode}");
    }
    // A root certificate file that is not there says so, before connecting.
    let missing = w.other_ca_file.with_file_name("missing.pem");
    let query = format!("sslmode=verify-full&sslrootcert={}", file(&missing));
    let e =
        PostgresStore::connect(&url(w, "127.0.0.1", "tls-missing", &query)).expect_err("refused");
    let text = e.to_string();
    assert!(
        text.contains("sslrootcert") && text.contains("missing.pem"),
        "{text}"
    );
}

#[test]
fn sslmode_require_refuses_a_server_without_tls() {
    let (plain, _guard) = common::pg::fresh_database();
    let e = PostgresStore::connect(&format!("{plain}?sslmode=require"))
        .expect_err("the shared test server has no TLS");
    assert!(e.to_string().contains("TLS"), "{e}");
}

#[test]
fn the_cli_connects_with_verify_full_and_refuses_a_wrong_root() {
    let w = world();
    let agent = tempfile::tempdir().unwrap();
    let run = |ca: &Path| {
        let query = format!("sslmode=verify-full&sslrootcert={}", file(ca));
        common::cli()
            .args(["list", "--store", &url(w, "127.0.0.1", "tls-cli", &query)])
            .env("PI_CODING_AGENT_DIR", agent.path())
            .output()
            .unwrap()
    };
    let ok = run(&w.ca_file);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = run(&w.other_ca_file);
    assert_eq!(refused.status.code(), Some(2));
    let text = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(text.matches("error:").count(), 1, "{text}");
    assert!(
        text.contains("--store") && text.contains("certificate"),
        "{text}"
    );
}
