//! Store URLs (`--store`, `docs/cli.md`): `sqlite:///abs/path` and `postgres://…` /
//! `postgresql://…`, opened as a `Box<dyn SessionStore>`. A URL's password never reaches
//! an error, a log line or a `Debug` output: everything prints [`RedactedUrl`].

use super::SessionStore;
use super::redact::redact;
use super::sqlite_store::SqliteStore;
use crate::error::{Error, Result};
use std::path::PathBuf;

/// A store URL that displays (and debugs) with its password replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct RedactedUrl(String);

impl RedactedUrl {
    /// Wraps a URL.
    pub fn new(url: impl Into<String>) -> RedactedUrl {
        RedactedUrl(url.into())
    }

    /// The URL with its password (in the userinfo `user:password@`, and in a `password=`
    /// query parameter) replaced by `***`.
    pub fn redacted(&self) -> String {
        redact(&self.0)
    }
}

impl std::fmt::Display for RedactedUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl std::fmt::Debug for RedactedUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RedactedUrl")
            .field(&self.redacted())
            .finish()
    }
}

/// The accepted forms, for messages.
const FORMS: &str = "use sqlite:///abs/path/sessions.sqlite, postgres://user@host:port/db \
                     (or postgresql://…), or none for session files";

/// Opens the store a URL names:
/// - `sqlite:///abs/path/to/sessions.sqlite` — a [`SqliteStore`] (created when absent);
/// - `postgres://…` or `postgresql://…` — the PostgreSQL backend, in a build with the
///   `postgres` feature (otherwise a clear error).
///
/// Errors are [`Error::StoreUrl`] (or the backend's), and name the URL redacted.
pub fn open_store_url(url: &str) -> Result<Box<dyn SessionStore>> {
    let named = RedactedUrl::new(url);
    let bad = |detail: &str| Error::StoreUrl {
        url: named.redacted(),
        detail: detail.to_owned(),
    };
    if let Some(rest) = url.strip_prefix("sqlite://") {
        if !rest.starts_with('/') || rest.len() < 2 {
            return Err(bad(
                "a SQLite store URL names an absolute path: sqlite:///abs/path/sessions.sqlite",
            ));
        }
        if rest.contains(['?', '#']) {
            return Err(bad("a SQLite store URL takes no query or fragment"));
        }
        return Ok(Box::new(SqliteStore::open(PathBuf::from(rest))?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return open_postgres(url, &named);
    }
    let known = ["sqlite", "postgres", "postgresql"]
        .into_iter()
        .find(|s| url.strip_prefix(s).is_some_and(|r| r.starts_with(':')));
    Err(bad(&match known {
        Some(scheme) => format!(
            "a {scheme} URL starts with {scheme}:// (the rest of the URL is not shown: it may \
             hold a password); {FORMS}"
        ),
        None => {
            format!("not a store URL (only its scheme is shown: it may hold a password); {FORMS}")
        }
    }))
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str, _named: &RedactedUrl) -> Result<Box<dyn SessionStore>> {
    Ok(Box::new(super::postgres::PostgresStore::connect(url)?))
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(_url: &str, named: &RedactedUrl) -> Result<Box<dyn SessionStore>> {
    Err(Error::StoreUrl {
        url: named.redacted(),
        detail: "this build of session-state has no PostgreSQL backend: build it with \
                 `--features postgres`"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            (
                "postgres://me:s3cret@db.example:5432/app",
                "postgres://me:***@db.example:5432/app",
            ),
            (
                "postgresql://me:p%40ss@host/db?sslmode=require&password=s3cret",
                "postgresql://me:***@host/db?sslmode=require&password=***",
            ),
            ("postgres://me@host/db", "postgres://me@host/db"),
            ("sqlite:///tmp/s.sqlite", "sqlite:///tmp/s.sqlite"),
            ("postgres://me:a@b@host/db", "postgres://me:***@host/db"),
            ("postgres://me:s3/cret@host/db", "postgres://me:***@host/db"),
            ("postgres://me:s3?cret@host/db", "postgres://me:***@host/db"),
            ("sqlite:///srv/a@b.sqlite", "sqlite:///srv/a@b.sqlite"),
            // Not one of the URL forms: only a scheme, or nothing.
            ("postgres:/u:s3cret@h/db", "postgres:…"),
            ("postgresql:u:s3cret@h/db", "postgresql:…"),
            ("mysql://me:s3cret@host/db", "mysql:…"),
            ("me:s3cret@host/db", "me:…"),
            ("s3cret", "…"),
            ("/s3cret:x", "…"),
        ] {
            let r = RedactedUrl::new(url);
            assert_eq!(r.to_string(), shown);
            assert!(!format!("{r:?}").contains("s3cret"));
        }
        for url in [
            "mysql://me:s3cret@host/db",
            "postgres:/me:s3cret@host/db",
            "sqlite://me:s3cret@host/db",
            "s3cret",
        ] {
            let e = open_store_url(url).err().expect("refused");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
        let e = open_store_url("postgres:/me:s3cret@host/db")
            .err()
            .expect("refused");
        assert!(e.to_string().contains("starts with postgres://"), "{e}");
        #[cfg(not(feature = "postgres"))]
        {
            let e = open_store_url("postgres://me:s3cret@host/db")
                .err()
                .expect("no backend");
            let text = e.to_string();
            assert!(
                text.contains("--features postgres") && !text.contains("s3cret"),
                "{text}"
            );
        }
    }
}
