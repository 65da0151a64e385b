//! A writer process on the PostgreSQL backend, for the fault and concurrency tests (a
//! stand-in for an agent on another machine): appends `count` custom events to one
//! session through [`Sessions`] (the crate's rules), one per append, and prints a line
//! for every outcome:
//!
//! - `ack <seq> <writer> <i>`: the append of event `i` at `seq` committed (printed only
//!   after `append` returned `Ok`, and flushed at once). The library waits out a server
//!   that restarts and resolves an append whose connection broke by reading the store
//!   back, so this is the usual line even across a restart;
//! - `mismatch <expected>`: another writer got there first (`SequenceMismatch`); the next
//!   try is at `expected`;
//! - `busy <message>`: another writer held the session past the lock wait and the
//!   library gave up retrying (`StoreUnavailable` over `StoreError::Busy`); tried again;
//! - `lost <message>`: the store stayed unavailable past the library's retries
//!   (`StoreUnavailable`): the append's outcome is checked by loading the session: if the
//!   event is at the sequence number it was sent for, it committed (`ack <seq> <writer>
//!   <i> recovered`); otherwise it is sent again at the stored next number.
//!
//! Anything else is printed as `error <message>` and ends the process with status 2.
//!
//! ```text
//! pg_writer <URL> <SESSION> <WRITER> <COUNT> [--create] [--lock-wait-ms N]
//! ```

use serde_json::json;
use session_state::{Error, Header, PostgresStore, Sessions, StoreError};
use std::io::Write;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!(
            "usage: pg_writer <URL> <SESSION> <WRITER> <COUNT> [--create] [--lock-wait-ms N]"
        );
        std::process::exit(2);
    }
    let (url, session, writer) = (&args[1], &args[2], &args[3]);
    let count: u64 = args[4].parse().unwrap_or(0);
    let create = args.iter().any(|a| a == "--create");
    let wait = args
        .iter()
        .position(|a| a == "--lock-wait-ms")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis);
    let out = std::io::stdout();
    let say = |line: String| {
        let mut o = out.lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    };
    let fail = |e: Error| -> ! {
        say(format!("error {e}"));
        std::process::exit(2);
    };
    let store = loop {
        match PostgresStore::connect(url) {
            Ok(s) => {
                break Sessions::new(match wait {
                    Some(w) => s.with_lock_wait(w),
                    None => s,
                });
            }
            Err(e @ Error::StoreUnavailable { .. }) => {
                say(format!("lost {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => fail(e),
        }
    };
    let mut next = if create {
        let header = Header::new(session.as_str(), "/work/project")
            .with_timestamp("2026-12-01T12:00:00.000Z");
        store.create(header).unwrap_or_else(|e| fail(e));
        0
    } else {
        next_seq(&store, session, &say)
    };
    say("ready".into());
    let mut i = 0;
    while i < count {
        let event = json!({"type": "custom", "customType": "pg-writer",
                           "data": {"writer": writer, "i": i}});
        match store.append(session, next, &[event]) {
            Ok(n) => {
                say(format!("ack {next} {writer} {i}"));
                next = n;
                i += 1;
            }
            Err(Error::Store(StoreError::SequenceMismatch { expected, .. })) => {
                say(format!("mismatch {expected}"));
                next = expected;
            }
            Err(e @ Error::StoreUnavailable { .. })
                if matches!(&e, Error::StoreUnavailable { source, .. }
                    if matches!(**source, StoreError::Busy { .. })) =>
            {
                say(format!("busy {e}"));
            }
            Err(e @ Error::StoreUnavailable { .. }) => {
                // The outcome may be unknown: the store tells whether the event got in (it
                // is then at `next`), so it is neither lost nor sent twice.
                say(format!("lost {e}"));
                let (n, at_next) = reload(&store, session, next, &say);
                if at_next == Some(json!({"writer": writer, "i": i})) {
                    say(format!("ack {next} {writer} {i} recovered"));
                    i += 1;
                }
                next = n;
            }
            Err(e) => fail(e),
        }
    }
    say("done".into());
}

/// The session's next sequence number, read again from the store (retrying while the
/// server is away).
fn next_seq(store: &Sessions, session: &str, say: &dyn Fn(String)) -> u64 {
    reload(store, session, u64::MAX, say).0
}

/// The session's next sequence number and the `data` of the event at `seq`, if any.
fn reload(
    store: &Sessions,
    session: &str,
    seq: u64,
    say: &dyn Fn(String),
) -> (u64, Option<serde_json::Value>) {
    loop {
        match store.load(session) {
            Ok(l) => {
                let data = l.event(seq).ok().map(|e| e["data"].clone());
                return (l.next_seq(), data);
            }
            Err(e @ Error::StoreUnavailable { .. }) => {
                say(format!("lost {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                say(format!("error {e}"));
                std::process::exit(2);
            }
        }
    }
}
