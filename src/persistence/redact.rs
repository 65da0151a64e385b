//! How a store URL is printed, in errors, log lines, `Debug` output and a store's name:
//! with `***` for its password. [`printed`] writes every such URL, whether it was taken
//! apart from the text given ([`redact`], for [`super::RedactedUrl`]) or rebuilt from
//! the PostgreSQL driver's parsed configuration (`redact_config`, for the PostgreSQL
//! store).

#[cfg(feature = "postgres")]
use tokio_postgres::{Config, config::Host};

/// The URL schemes [`super::open_store_url`] opens.
const SCHEMES: [&str; 3] = ["sqlite://", "postgres://", "postgresql://"];

/// A URL as printed: `scheme`, then, with `userinfo`, `user:***@` (when it had a
/// password) or `user@`, then `rest`. It is given no password, so it cannot show one.
fn printed(scheme: &str, userinfo: Option<(&str, bool)>, rest: &str) -> String {
    let mut out = String::with_capacity(scheme.len() + rest.len() + 16);
    out.push_str(scheme);
    if let Some((user, password)) = userinfo {
        out.push_str(user);
        if password {
            out.push_str(":***");
        }
        out.push('@');
    }
    out.push_str(rest);
    out
}

/// The connection parameters a PostgreSQL URL's query may name: the driver's, and
/// `sslrootcert`. A `?` followed by one of them and `=` starts the query.
const PARAMS: [&str; 20] = [
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslnegotiation",
    "sslrootcert",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// A PostgreSQL URL taken apart after its scheme, as libpq reads it: the userinfo ends at
/// the last `@` before the query, so a password may hold a raw `@`, `:`, `/`, `?` or `#`.
/// The query starts at the first `?` followed by a parameter's name and `=`
/// (`?sslmode=`, `?password=`, …); an `@` after it is part of a value.
pub(super) struct PgUrl<'a> {
    /// Everything between `://` and the `@` that ends it (`user` or `user:password`).
    pub(super) userinfo: Option<&'a str>,
    /// The hosts, the database and the query, after the userinfo's `@`.
    pub(super) rest: &'a str,
    /// Where the query starts in `rest` (at its `?`), if it has one.
    pub(super) query: Option<usize>,
}

/// Takes apart `rest`, a PostgreSQL URL after its `scheme://`.
pub(super) fn pg_url(rest: &str) -> PgUrl<'_> {
    let query = query_start(rest);
    let before = &rest[..query.unwrap_or(rest.len())];
    match before.rfind('@') {
        Some(at) => PgUrl {
            userinfo: Some(&rest[..at]),
            rest: &rest[at + 1..],
            query: query.map(|q| q - at - 1),
        },
        None => PgUrl {
            userinfo: None,
            rest,
            query,
        },
    }
}

/// The first `?` of `s` followed by a parameter's name and `=`.
fn query_start(s: &str) -> Option<usize> {
    s.match_indices('?').map(|(i, _)| i).find(|&i| {
        let after = &s[i + 1..];
        PARAMS
            .iter()
            .any(|p| after.strip_prefix(p).is_some_and(|r| r.starts_with('=')))
    })
}

/// A PostgreSQL URL as the driver reads it, which ends the userinfo at the first `@`:
/// the user and the password percent-encoded, and every `@` of the query too (the
/// driver decodes both). The same connection as `url`, which libpq's reading gives.
#[cfg(feature = "postgres")]
pub(crate) fn for_driver(url: &str) -> String {
    let Some(scheme) = ["postgres://", "postgresql://"]
        .into_iter()
        .find(|s| url.starts_with(*s))
    else {
        return url.to_owned();
    };
    let parts = pg_url(&url[scheme.len()..]);
    let mut out = String::with_capacity(url.len() + 16);
    out.push_str(scheme);
    if let Some(userinfo) = parts.userinfo {
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (userinfo, None),
        };
        encode_into(user, &mut out);
        if let Some(p) = password {
            out.push(':');
            encode_into(p, &mut out);
        }
        out.push('@');
    }
    match parts.query {
        Some(q) => {
            out.push_str(&parts.rest[..q]);
            out.push_str(&parts.rest[q..].replace('@', "%40"));
        }
        None => out.push_str(parts.rest),
    }
    out
}

/// Percent-encodes what the driver would read as structure in a userinfo part (`@`,
/// `:`, `/`, `?`, `#`, `%` not starting an escape, and anything not printable ASCII).
#[cfg(feature = "postgres")]
fn encode_into(s: &str, out: &mut String) {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        let escape = c == b'%'
            && b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if escape || (c.is_ascii_graphic() && !matches!(c, b'@' | b':' | b'/' | b'?' | b'#' | b'%'))
        {
            out.push(char::from(c));
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
}

/// `scheme://user:password@host/…?password=…` → `scheme://user:***@host/…?password=***`,
/// for the schemes [`super::open_store_url`] knows (a PostgreSQL URL taken apart as
/// [`pg_url`] does). Anything else is not one of the URL forms, so nothing tells where a
/// password in it would be: only its scheme is shown (`mysql:…`, `postgres:…` for
/// `postgres:/u:pw@h/db`), or nothing (`…`).
pub(super) fn redact(url: &str) -> String {
    let Some(scheme) = SCHEMES.iter().find(|s| url.starts_with(*s)) else {
        return match url.split_once(':') {
            Some((scheme, _)) if is_scheme(scheme) => format!("{scheme}:…"),
            _ => "…".to_owned(),
        };
    };
    let rest = &url[scheme.len()..];
    let parts = if *scheme == "sqlite://" {
        // A path, never a password: anything up to a last `@` is hidden all the same.
        let (userinfo, rest) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        PgUrl {
            userinfo,
            rest,
            query: rest.find('?'),
        }
    } else {
        pg_url(rest)
    };
    let userinfo = parts.userinfo.map(|u| match u.split_once(':') {
        Some((user, _)) => (user, true),
        None => (u, false),
    });
    let (head, query) = match parts.query {
        Some(q) => (&parts.rest[..q], Some(&parts.rest[q + 1..])),
        None => (parts.rest, None),
    };
    let mut tail = head.to_owned();
    if let Some(q) = query {
        tail.push('?');
        let pieces: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        tail.push_str(&pieces.join("&"));
    }
    printed(scheme, userinfo, &tail)
}

/// RFC 3986's scheme: a letter, then letters, digits, `+`, `-` and `.`.
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// The URL as the PostgreSQL store prints it: rebuilt from the parsed parts (a URL or
/// libpq's `key=value` form), with `***` for a password, so nothing of the password can
/// leak through it.
#[cfg(feature = "postgres")]
pub(super) fn redact_config(config: &Config) -> String {
    let user = config.get_user().unwrap_or("");
    let password = config.get_password().is_some();
    let ports = config.get_ports();
    let mut hosts: Vec<String> = Vec::new();
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut sockets: Vec<String> = Vec::new();
    for (i, host) in config.get_hosts().iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        match host {
            Host::Tcp(h) if h.contains(':') => hosts.push(format!("[{h}]:{port}")),
            Host::Tcp(h) => hosts.push(format!("{h}:{port}")),
            #[cfg(unix)]
            Host::Unix(p) => sockets.push(format!("host={}&port={port}", p.display())),
        }
    }
    let userinfo = (!user.is_empty() || password).then_some((user, password));
    let db = config.get_dbname().unwrap_or("");
    let query = if sockets.is_empty() {
        String::new()
    } else {
        format!("?{}", sockets.join("&"))
    };
    printed(
        "postgres://",
        userinfo,
        &format!("{}/{db}{query}", hosts.join(",")),
    )
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;

    /// libpq's reading: the userinfo ends at the last `@` before the query, so a raw `@`,
    /// `:`, `/`, `?` or `#` in a password is the password's, and the driver is given it
    /// encoded; a `password=` value keeps them too. Nothing of the password is printed.
    #[test]
    fn a_password_holding_url_delimiters_is_read_whole_and_never_printed() {
        let password = "Pw@S3:c/r?e#tTail";
        for (url, host, port, db) in [
            (
                format!("postgres://root:{password}@127.0.0.1:5999/sdb"),
                "127.0.0.1",
                5999,
                "sdb",
            ),
            (
                format!("postgresql://root:{password}@db.example/sdb?sslmode=disable"),
                "db.example",
                5432,
                "sdb",
            ),
            (
                format!("postgres://root:{password}@a:1,b:2/sdb?application_name=me@box"),
                "a",
                1,
                "sdb",
            ),
            (
                format!("postgres://root@h:7/sdb?password={password}&sslmode=disable"),
                "h",
                7,
                "sdb",
            ),
            (
                format!("postgres://h:7/sdb?sslmode=disable&password={password}"),
                "h",
                7,
                "sdb",
            ),
        ] {
            let config: Config = for_driver(&url).parse().expect("parses");
            assert_eq!(config.get_password(), Some(password.as_bytes()), "{url}");
            assert_eq!(
                config.get_hosts().first(),
                Some(&Host::Tcp(host.into())),
                "{url}"
            );
            assert_eq!(config.get_ports().first(), Some(&port), "{url}");
            assert_eq!(config.get_dbname(), Some(db), "{url}");
            for shown in [redact(&url), redact_config(&config)] {
                for part in ["Pw", "S3", "c/r", "e#t", "Tail"] {
                    assert!(!shown.contains(part), "{part} of the password in {shown}");
                }
                assert!(shown.contains(host), "{shown}");
            }
        }
        // A query value with an `@` is not taken for a userinfo.
        let url = "postgres://u@h/db?application_name=me@box";
        let config: Config = for_driver(url).parse().expect("parses");
        assert_eq!(config.get_user(), Some("u"));
        assert_eq!(config.get_application_name(), Some("me@box"));
        assert_eq!(redact(url), url);
        // An escape already in the userinfo stays one.
        let config: Config = for_driver("postgres://u:p%40ss@h/db")
            .parse()
            .expect("parses");
        assert_eq!(config.get_password(), Some(&b"p@ss"[..]));
    }

    #[test]
    fn the_printed_url_never_holds_the_password() {
        for url in [
            "postgres://agent:s3cr%3At@db.example:6543/sessions?sslmode=disable",
            "postgresql://agent:s3cr:t@db.example/sessions",
            "host=/tmp/pg port=5433 user=agent password=s3cr:t dbname=x",
            "postgres://agent@db.example/sessions?password=s3cr:t",
        ] {
            let config: Config = url.parse().expect("parses");
            let shown = redact_config(&config);
            assert!(!shown.contains("s3cr"), "{shown}");
            assert!(shown.contains("agent:***@"), "{shown}");
        }
        for (url, shown) in [
            ("postgres://a@h:1/d", "postgres://a@h:1/d"),
            (
                "postgresql://agent:s3cr:t@db.example/sessions",
                "postgres://agent:***@db.example:5432/sessions",
            ),
            (
                "host=/tmp/pg port=5433 user=agent password=s3cr:t dbname=x",
                // Windows has no Unix sockets: there `/tmp/pg` is a host name.
                if cfg!(unix) {
                    "postgres://agent:***@/x?host=/tmp/pg&port=5433"
                } else {
                    "postgres://agent:***@/tmp/pg:5433/x"
                },
            ),
        ] {
            let config: Config = url.parse().expect("parses");
            assert_eq!(redact_config(&config), shown);
        }
    }
}
