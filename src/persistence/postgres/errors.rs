//! Driver errors as the store's errors: what may be retried, and what leaves a write in
//! flight undecided.

use super::Phase;
use super::client::PgError;
use crate::error::{BackendError, StoreError};

/// A driver error as the store's error: a server that went away or refuses for now is
/// [`StoreError::Unavailable`]; a connection that broke while a write was in flight
/// ([`Phase::Writing`]: no answer, or the server ending the connection) is
/// [`StoreError::Indeterminate`].
pub(super) fn classify(url: &str, action: String, phase: Phase, e: PgError) -> StoreError {
    let no_answer = e.code().is_none() && is_connection_lost(&e);
    let source = backend_error(e);
    let connection = no_answer || source.sql_state.as_deref().is_some_and(is_connection_state);
    // A write in flight when the connection went (no answer, or the server ending the
    // session: a fast shutdown can commit it and then send 57P01 in place of the
    // result) may have committed.
    if connection && phase == Phase::Writing {
        return StoreError::Indeterminate {
            store: url.to_owned(),
            session_id: String::new(),
            first_seq: 0,
            source,
        };
    }
    if no_answer || source.sql_state.as_deref().is_some_and(is_transient_state) {
        return StoreError::Unavailable {
            store: url.to_owned(),
            action,
            source,
        };
    }
    StoreError::Database {
        store: url.to_owned(),
        action,
        source,
    }
}

/// An append of unknown outcome, named by its session and first sequence number.
pub(super) fn name_append(e: StoreError, session_id: &str, first_seq: u64) -> StoreError {
    match e {
        StoreError::Indeterminate { store, source, .. } => StoreError::Indeterminate {
            store,
            session_id: session_id.into(),
            first_seq,
            source,
        },
        e => e,
    }
}

/// SQLSTATEs after which the same call may succeed later: a connection exception (class
/// 08), the server shutting down, crashed or starting up (57P01, 57P02, 57P03), too many
/// connections (53300). Nothing was done, unless a write was in flight
/// ([`is_connection_state`]).
pub(super) fn is_transient_state(code: &str) -> bool {
    is_connection_state(code) || code == "53300"
}

/// SQLSTATEs that end the connection: a write in flight may or may not have committed.
pub(super) fn is_connection_state(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
}

fn backend_error(e: PgError) -> BackendError {
    BackendError {
        sql_state: e.code().map(|c| c.code().to_owned()),
        source: Box::new(e),
    }
}

/// The server went away (shut down, restarted, terminated this backend) or the socket
/// broke: the connection is gone, the next call connects again.
fn is_connection_lost(e: &PgError) -> bool {
    let e = match e {
        PgError::Driver(e) => e,
        // No answer within the bound: the connection is given up.
        PgError::TimedOut { .. } => return true,
        PgError::Runtime(_) => return false,
    };
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || c.starts_with("57P")
        }
        // No answer from the server: an I/O error (refused, reset, a server that does not
        // accept writes) or a timeout. Not a certificate or TLS message this side
        // refuses (rustls says `InvalidData`): no retry mends that.
        None => match std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>())
        {
            Some(io) => !matches!(
                io.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
            ),
            None => e.to_string().starts_with("timeout"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that ends the connection may have committed the write in flight (a fast
    /// shutdown commits, then sends 57P01 in place of the result); "too many clients"
    /// refuses before anything runs; a wrong password is no transient trouble.
    #[test]
    fn connection_ending_states_leave_a_write_in_flight_undecided() {
        for code in ["08006", "08003", "57P01", "57P02", "57P03"] {
            assert!(
                is_connection_state(code) && is_transient_state(code),
                "{code}"
            );
        }
        assert!(is_transient_state("53300") && !is_connection_state("53300"));
        for code in ["28P01", "23505", "55P03", "42P01"] {
            assert!(!is_transient_state(code), "{code}");
        }
    }
}
