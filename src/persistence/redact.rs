//! How a store URL is printed, in errors, log lines, `Debug` output and a store's name:
//! with `***` for its password. [`printed`] writes every such URL, whether it was taken
//! apart from the text given ([`redact`], for [`super::RedactedUrl`]) or rebuilt from
//! the PostgreSQL driver's parsed configuration (`redact_config`, for the PostgreSQL
//! store).

#[cfg(feature = "postgres")]
use postgres::{Config, config::Host};

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

/// `scheme://user:password@host/…?password=…` → `scheme://user:***@host/…?password=***`,
/// for the schemes [`super::open_store_url`] knows. Anything else is not one of the URL
/// forms, so nothing tells where a password in it would be: only its scheme is shown
/// (`mysql:…`, `postgres:…` for `postgres:/u:pw@h/db`), or nothing (`…`).
pub(super) fn redact(url: &str) -> String {
    let Some(scheme) = SCHEMES.iter().find(|s| url.starts_with(*s)) else {
        return match url.split_once(':') {
            Some((scheme, _)) if is_scheme(scheme) => format!("{scheme}:…"),
            _ => "…".to_owned(),
        };
    };
    let rest = &url[scheme.len()..];
    // The credentials end at the last `@`: a password may hold a raw `/`, `?` or `@`, and
    // hiding too much is better than showing any of it.
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = match userinfo.split_once(':') {
                Some((user, _)) => (user, true),
                None => (userinfo, false),
            };
            (Some(user), &rest[at + 1..])
        }
        None => (None, rest),
    };
    let (head, query) = match rest.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (rest, None),
    };
    let mut tail = head.to_owned();
    if let Some(q) = query {
        tail.push('?');
        let parts: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        tail.push_str(&parts.join("&"));
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
                "postgres://agent:***@/x?host=/tmp/pg&port=5433",
            ),
        ] {
            let config: Config = url.parse().expect("parses");
            assert_eq!(redact_config(&config), shown);
        }
    }
}
