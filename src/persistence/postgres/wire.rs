//! Small helpers of the PostgreSQL store: `COPY`'s escaping, the session settings, the
//! printed URL, sequence numbers as the database stores them.

use postgres::config::Host;
use postgres::{Client, Config};
use std::time::Duration;

/// COPY's text format: a backslash, tab, newline or carriage return is escaped.
pub(super) fn copy_escape(bytes: &[u8], out: &mut Vec<u8>) {
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

pub(super) fn set_lock_timeout(
    client: &mut Client,
    wait: Duration,
) -> std::result::Result<(), postgres::Error> {
    let ms = format!("{}ms", wait.as_millis().max(1));
    client
        .execute("SELECT set_config('lock_timeout', $1, false)", &[&ms])
        .map(|_| ())
}

/// `session-state pid:<pid>@<host>`: what a refused writer is told about the holder.
pub(super) fn application_name() -> String {
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
pub(super) fn redact(config: &Config) -> String {
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

pub(super) fn seq_to_db(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

pub(super) fn seq_from_db(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
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
