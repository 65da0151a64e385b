//! Small helpers of the PostgreSQL store: `COPY`'s escaping, the session settings,
//! sequence numbers as the database stores them.

use super::client::{Client, PgError};
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
) -> std::result::Result<(), PgError> {
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
    fn copy_text_escapes_what_copy_would_read_as_structure() {
        let mut out = Vec::new();
        copy_escape(br#"{"a":"x\ny	z"}"#, &mut out);
        assert_eq!(out, br#"{"a":"x\\ny\tz"}"#.to_vec());
    }
}
