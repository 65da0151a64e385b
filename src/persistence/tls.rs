//! TLS for PostgreSQL connections, over rustls: libpq's `sslmode` and `sslrootcert`.
//!
//! The `postgres` driver parses `sslmode=disable|prefer|require` and nothing else of TLS,
//! and brings no TLS stack of its own. So a connection string goes through [`parse`]:
//! `sslrootcert` is taken out of it, `sslmode=verify-ca|verify-full` is handed to the
//! driver as `require` (TLS or no connection) and the verification is done here, in the
//! rustls verifier, as libpq does it:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (the default) | when the server offers it | not checked |
//! | `require` | always | not checked; with `sslrootcert`, its chain is (as `verify-ca`) |
//! | `verify-ca` | always | signed by a CA of `sslrootcert` |
//! | `verify-full` | always | signed by a CA of `sslrootcert`, and names the host |
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the system's trust
//! store. Without it, `verify-ca` and `verify-full` use libpq's default file,
//! `~/.postgresql/root.crt`, and refuse to connect when there is none.
//!
//! See `docs/postgres.md`, "URLs" and "TLS".

use crate::error::{BackendError, Error, Result, StoreError};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres::Config;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Where a connection string that cannot be used is named: not at all, since it may hold
/// a password that a failed parse cannot tell apart from the rest.
const UNPARSED: &str = "(a PostgreSQL URL that does not parse; not shown, it may hold a password)";

/// libpq's `sslmode` values this crate accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// What a connection string says of TLS, once the driver's part is taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TlsOptions {
    mode: SslMode,
    root_cert: Option<String>,
}

/// How a store connects: without TLS, or through rustls with the verifier `sslmode`
/// asks for. Built once per store; each connection reuses it.
#[derive(Clone)]
pub(crate) struct Tls(Option<MakeRustlsConnect>);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Tls(rustls)"
        } else {
            "Tls(none)"
        })
    }
}

impl Tls {
    /// The rustls connector, or `None` for connections without TLS.
    pub(crate) fn rustls(&self) -> Option<&MakeRustlsConnect> {
        self.0.as_ref()
    }
}

/// A TLS option the crate cannot use.
#[derive(Debug, thiserror::Error)]
enum TlsError {
    #[error(
        "sslmode={0:?} is not a mode this client knows: use disable, prefer, require, \
         verify-ca or verify-full"
    )]
    Mode(String),
    #[error(
        "sslmode={mode} needs the certificate of the CA that signed the server's: add \
         sslrootcert=/path/to/ca.pem (or sslrootcert=system for the system's trust store); \
         libpq's default {default} does not exist"
    )]
    NoRootCert { mode: &'static str, default: String },
    #[error("sslrootcert {path}: {detail}")]
    RootCert { path: String, detail: String },
    #[error("setting up TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Parses a connection string (a `postgres://` / `postgresql://` URL, or libpq's
/// `key=value` form) into the driver's [`Config`] and the [`Tls`] to connect with.
/// `redact` names the parsed URL in errors (never with its password).
pub(crate) fn parse(url: &str, redact: fn(&Config) -> String) -> Result<(Config, Tls)> {
    let unparsed = |source: BackendError| {
        Error::from(StoreError::Database {
            store: UNPARSED.into(),
            action: "parsing the URL".into(),
            source,
        })
    };
    let (driver_url, options) =
        split(&super::redact::for_driver(url)).map_err(|e| unparsed(backend(e)))?;
    let config: Config = driver_url.parse().map_err(|e: tokio_postgres::Error| {
        unparsed(BackendError {
            sql_state: None,
            source: Box::new(e),
        })
    })?;
    let tls = connector(&options).map_err(|e| {
        Error::from(StoreError::Database {
            store: redact(&config),
            action: "setting up TLS".into(),
            source: backend(e),
        })
    })?;
    Ok((config, tls))
}

fn backend(e: TlsError) -> BackendError {
    BackendError {
        sql_state: None,
        source: Box::new(e),
    }
}

/// Takes `sslrootcert` out of a connection string and hands `verify-ca`/`verify-full` to
/// the driver as `require`; everything else is left as written, for the driver to parse.
fn split(url: &str) -> std::result::Result<(String, TlsOptions), TlsError> {
    let mut options = TlsOptions {
        mode: SslMode::Prefer,
        root_cert: None,
    };
    let mut rewrite = |p: &Param| -> std::result::Result<Rewrite, TlsError> {
        match p.key.as_str() {
            "sslmode" => {
                options.mode =
                    SslMode::parse(&p.value).ok_or_else(|| TlsError::Mode(p.value.clone()))?;
                Ok(match options.mode {
                    SslMode::VerifyCa | SslMode::VerifyFull => Rewrite::Replace("sslmode=require"),
                    _ => Rewrite::Keep,
                })
            }
            "sslrootcert" => {
                options.root_cert = Some(p.value.clone());
                Ok(Rewrite::Remove)
            }
            _ => Ok(Rewrite::Keep),
        }
    };
    let is_url = ["postgres://", "postgresql://"]
        .iter()
        .any(|p| url.starts_with(*p));
    let out = if is_url {
        match url_query(url) {
            None => url.to_owned(),
            Some(q) => {
                let mut kept: Vec<&str> = Vec::new();
                for p in url_params(url, q) {
                    match rewrite(&p)? {
                        Rewrite::Keep => kept.push(&url[p.span.0..p.span.1]),
                        Rewrite::Replace(r) => kept.push(r),
                        Rewrite::Remove => {}
                    }
                }
                let base = &url[..q - 1];
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut out = String::with_capacity(url.len());
        let mut copied = 0;
        for p in keyword_params(url) {
            let r = match rewrite(&p)? {
                Rewrite::Keep => continue,
                Rewrite::Replace(r) => r,
                Rewrite::Remove => "",
            };
            out.push_str(&url[copied..p.span.0]);
            out.push_str(r);
            copied = p.span.1;
        }
        out.push_str(&url[copied..]);
        out
    };
    Ok((out, options))
}

/// What a parameter becomes in the driver's string.
enum Rewrite {
    /// Kept as written.
    Keep,
    /// Replaced by this `key=value`.
    Replace(&'static str),
    /// Left out (a parameter only this crate reads).
    Remove,
}

/// One `key=value` of a connection string: its key and decoded value, and the bytes it
/// spans in the string.
struct Param {
    key: String,
    value: String,
    span: (usize, usize),
}

/// Where a URL's query starts (after its `?`), found as the driver finds it in a URL
/// [`for_driver`](super::redact::for_driver) gave: the credentials end at the first `@`,
/// the query starts at the first `?` after them.
fn url_query(url: &str) -> Option<usize> {
    let after_creds = url.find('@').map_or(0, |at| at + 1);
    url[after_creds..].find('?').map(|q| after_creds + q + 1)
}

/// The `key=value` pieces of a URL's query, which starts at `q`. A piece without `=` is
/// kept as it is, for the driver to refuse.
fn url_params(url: &str, q: usize) -> Vec<Param> {
    let mut params = Vec::new();
    let mut start = q;
    for piece in url[q..].split('&') {
        let end = start + piece.len();
        let (k, v) = piece.split_once('=').unwrap_or((piece, ""));
        params.push(Param {
            key: decode(k),
            value: decode(v),
            span: (start, end),
        });
        start = end + 1;
    }
    params
}

/// Percent-decoding, as the driver does it (invalid escapes are kept as written).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.extend(u8::try_from(h * 16 + l).ok());
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The parameters of libpq's `key=value` form (`host=/run/postgresql dbname='my db'`),
/// read by the driver's rules: whitespace between pairs and around `=`, a value bare or
/// in single quotes, `\` escaping the next character. A string that does not follow them
/// yields the pairs before the fault; the driver then reports it.
fn keyword_params(s: &str) -> Vec<Param> {
    let b = s.as_bytes();
    let mut params = Vec::new();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'=' {
            i += 1;
        }
        if i == start {
            break;
        }
        let key = s[start..i].to_owned();
        skip_ws(&mut i);
        if b.get(i) != Some(&b'=') {
            break;
        }
        i += 1;
        skip_ws(&mut i);
        let mut value = Vec::new();
        if b.get(i) == Some(&b'\'') {
            i += 1;
            loop {
                match b.get(i) {
                    None => return params,
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < b.len() => {
                        value.push(b[i + 1]);
                        i += 2;
                    }
                    Some(c) => {
                        value.push(*c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i]);
                i += 1;
            }
            if value.is_empty() {
                break;
            }
        }
        params.push(Param {
            key,
            value: String::from_utf8_lossy(&value).into_owned(),
            span: (start, i),
        });
    }
    params
}

/// The connector `options` ask for.
fn connector(options: &TlsOptions) -> std::result::Result<Tls, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match (options.mode, &options.root_cert) {
        (SslMode::Disable, _) => return Ok(Tls(None)),
        (SslMode::Prefer, _) | (SslMode::Require, None) => Arc::new(NameUnchecked {
            chain: None,
            algorithms: provider.signature_verification_algorithms,
        }),
        (SslMode::Require | SslMode::VerifyCa, root) => Arc::new(NameUnchecked {
            chain: Some(webpki(&roots(root.as_deref(), "verify-ca")?, &provider)?),
            algorithms: provider.signature_verification_algorithms,
        }),
        (SslMode::VerifyFull, root) => webpki(&roots(root.as_deref(), "verify-full")?, &provider)?,
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Tls(Some(MakeRustlsConnect::new(config))))
}

fn webpki(
    roots: &RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> std::result::Result<Arc<WebPkiServerVerifier>, TlsError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots.clone()), Arc::clone(provider))
        .build()
        .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))
}

/// The CA certificates `sslrootcert` names (libpq's default file when it names none).
fn roots(
    root_cert: Option<&str>,
    mode: &'static str,
) -> std::result::Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    let path = match root_cert {
        Some("system") => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError::RootCert {
                    path: "system".into(),
                    detail: format!(
                        "no CA certificate found in the system's trust store{}",
                        found
                            .errors
                            .first()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default()
                    ),
                });
            }
            return Ok(store);
        }
        Some(p) => PathBuf::from(p),
        None => {
            let default = std::env::var_os("HOME")
                .map(|h| Path::new(&h).join(".postgresql/root.crt"))
                .unwrap_or_else(|| PathBuf::from("~/.postgresql/root.crt"));
            if !default.is_file() {
                return Err(TlsError::NoRootCert {
                    mode,
                    default: default.display().to_string(),
                });
            }
            default
        }
    };
    let shown = path.display().to_string();
    let bad = |detail: String| TlsError::RootCert {
        path: shown.clone(),
        detail,
    };
    let certs = CertificateDer::pem_file_iter(&path)
        .map_err(|e| bad(format!("cannot be read: {e}")))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("is not a PEM file of certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    for cert in certs {
        store.add(cert).map_err(|e| {
            bad(format!(
                "holds a certificate that cannot be used as a CA: {e}"
            ))
        })?;
    }
    Ok(store)
}

/// The checks of the modes that do not compare the server's name with the host, as in
/// libpq: `prefer` and `require` without a root certificate check no certificate (the
/// connection is encrypted, and the handshake's signatures are still checked, so the
/// server holds the key of the certificate it shows); `verify-ca` checks that the chain
/// leads to a trusted CA (`chain`), and not the name in it.
#[derive(Debug)]
struct NameUnchecked {
    /// The `verify-ca` chain check; `None`: no certificate check.
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for NameUnchecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_ok(url: &str) -> (String, TlsOptions) {
        split(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn tls_options_are_taken_out_of_both_forms() {
        for (url, driver, mode, root) in [
            (
                "postgres://u:p@h/db",
                "postgres://u:p@h/db",
                SslMode::Prefer,
                None,
            ),
            (
                "postgres://u@h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
                "postgres://u@h/db?sslmode=require",
                SslMode::VerifyFull,
                Some("/etc/ca.pem"),
            ),
            (
                "postgresql://h/db?sslrootcert=%2Fa%20b%2Fca.pem&application_name=x&sslmode=require",
                "postgresql://h/db?application_name=x&sslmode=require",
                SslMode::Require,
                Some("/a b/ca.pem"),
            ),
            (
                "postgres://h/db?application_name=x&sslrootcert=system",
                "postgres://h/db?application_name=x",
                SslMode::Prefer,
                Some("system"),
            ),
            (
                // A raw `?` in the password: the query starts after the credentials.
                "postgres://u:a?b@h/db?sslmode=disable",
                "postgres://u:a?b@h/db?sslmode=disable",
                SslMode::Disable,
                None,
            ),
            (
                "host=/tmp sslmode = verify-ca  sslrootcert='/my ca.pem' dbname=x",
                "host=/tmp sslmode=require   dbname=x",
                SslMode::VerifyCa,
                Some("/my ca.pem"),
            ),
        ] {
            let (d, o) = split_ok(url);
            assert_eq!(d, driver, "{url}");
            assert_eq!(o.mode, mode, "{url}");
            assert_eq!(o.root_cert.as_deref(), root, "{url}");
            d.parse::<Config>()
                .unwrap_or_else(|e| panic!("the driver parses {d}: {e}"));
        }
    }

    #[test]
    fn an_unknown_mode_is_refused_and_names_the_modes() {
        let e = split("postgres://u:s3cret@h/db?sslmode=allow").expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("\"allow\"") && text.contains("verify-full"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[test]
    fn verify_modes_need_a_readable_root_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("ca.pem");
        let e = roots(Some(missing.to_str().expect("utf-8")), "verify-full").expect_err("refused");
        assert!(e.to_string().contains("cannot be read"), "{e}");
        std::fs::write(&missing, "not a certificate\n").expect("write");
        let e = roots(Some(missing.to_str().expect("utf-8")), "verify-full").expect_err("refused");
        assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
    }
}
