//! [`StatusReport`]: a session's rows in the projection database as `status` prints them,
//! the one shape of the CLI's `status --json` and the Pi package's `/state:status`.

use crate::lock::{LockStatus, PresenceStatus};
use crate::store::SessionStatus;
use serde::Serialize;

/// A session's rows as `status` shows them (`session-state status --json` prints these
/// members among its own; the Pi package's addon prints exactly this): the database, the
/// write-lock row and the presence row of a running Pi, with the core's judgements of each
/// (`blocks_writers`, `may_be_alive`, `this_process`) so that no front end decides them.
///
/// ```no_run
/// use session_state::{Store, inspect};
/// let store = Store::at("/tmp/states.sqlite")?;
/// let report = inspect::status_report(&store.session_status("0195f1d0")?);
/// println!("{}", session_state::json::to_string(&serde_json::to_value(&report)?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StatusReport {
    /// The projection database.
    pub(crate) database: DatabaseReport,
    /// The session's write-lock row (`null` when there is none, or no database).
    pub(crate) lock: Option<LockReport>,
    /// The presence row of a running Pi that holds the session; left out when there is
    /// none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pi: Option<PresenceReport>,
}

/// [`StatusReport::database`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DatabaseReport {
    /// Its path (lossy where the path is not UTF-8).
    pub path: String,
    /// Whether there is a database at that path (`status` never creates one).
    pub exists: bool,
}

/// A session's write-lock row: a [`LockStatus`] with the judgements derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LockReport {
    /// The holder as stored.
    pub holder: String,
    /// What the holder said it was doing, when recorded.
    pub action: Option<String>,
    /// When the lock was taken, ms since the Unix epoch.
    pub acquired_at_ms: i64,
    /// How long ago that was, in ms.
    pub age_ms: u64,
    /// Whether the holder still runs: `"alive"`, `"not alive"` or `"unknown"`.
    pub liveness: String,
    /// Why `liveness` is what it is.
    pub liveness_reason: String,
    /// Whether the lease has run out.
    pub lease_expired: bool,
    /// Whether a writer in another process would be refused now
    /// ([`LockStatus::blocks_writers`]).
    pub blocks_writers: bool,
    /// Whether the holder is not known to be gone ([`crate::lock::Liveness::may_be_alive`]):
    /// `force-refresh` asks before clearing such a row.
    pub may_be_alive: bool,
}

/// The presence row of a running Pi: a [`PresenceStatus`] with the judgements derived
/// from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PresenceReport {
    /// The Pi process, as stored.
    pub holder: String,
    /// Since when, ms since the Unix epoch.
    pub since_ms: i64,
    /// The session file that Pi had open, when it had one.
    pub session_file: Option<String>,
    /// Whether that process still runs: `"alive"`, `"not alive"` or `"unknown"`.
    pub liveness: String,
    /// Why `liveness` is what it is.
    pub liveness_reason: String,
    /// Whether writers other than that Pi are refused ([`PresenceStatus::blocks_writers`]).
    pub blocks_writers: bool,
    /// Whether the row is the asking process's own ([`PresenceStatus::is_this_process`]):
    /// a Pi asking about the session it holds. Never true from the CLI.
    pub this_process: bool,
}

/// The report of `status` (see [`StatusReport`]) on the rows of
/// [`crate::Store::session_status`].
pub fn status_report(status: &SessionStatus) -> StatusReport {
    StatusReport {
        database: DatabaseReport {
            path: status.database.to_string_lossy().into_owned(),
            exists: status.exists,
        },
        lock: status.lock.as_ref().map(lock_report),
        pi: status.presence.as_ref().map(presence_report),
    }
}

fn lock_report(st: &LockStatus) -> LockReport {
    LockReport {
        holder: st.holder.clone(),
        action: st.action.clone(),
        acquired_at_ms: st.acquired_at_ms,
        age_ms: u64::try_from(st.age.as_millis()).unwrap_or(u64::MAX),
        liveness: st.liveness.to_string(),
        liveness_reason: st.liveness_reason.clone(),
        lease_expired: st.lease_expired,
        blocks_writers: st.blocks_writers(),
        may_be_alive: st.liveness.may_be_alive(),
    }
}

fn presence_report(p: &PresenceStatus) -> PresenceReport {
    PresenceReport {
        holder: p.holder.clone(),
        since_ms: p.since_ms,
        session_file: p.session_file.clone(),
        liveness: p.liveness.to_string(),
        liveness_reason: p.liveness_reason.clone(),
        blocks_writers: p.blocks_writers(),
        this_process: p.is_this_process(),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::lock::Liveness;
    use std::path::PathBuf;
    use std::time::Duration;

    fn printed(status: &SessionStatus) -> String {
        crate::json::to_string(&serde_json::to_value(status_report(status)).unwrap())
    }

    #[test]
    fn the_report_prints_the_rows_with_the_cores_judgements() {
        let mut status = SessionStatus {
            database: PathBuf::from("/db/states.sqlite"),
            exists: true,
            lock: Some(LockStatus {
                holder: "pid:1".into(),
                action: None,
                acquired_at_ms: 5,
                age: Duration::from_millis(2_500),
                liveness: Liveness::Unknown,
                liveness_reason: "another pid namespace".into(),
                lease_expired: true,
            }),
            presence: None,
        };
        // No Pi holds the session: `pi` is left out; `lock` says what the core judged.
        assert_eq!(
            printed(&status),
            r#"{"database":{"path":"/db/states.sqlite","exists":true},"lock":{"holder":"pid:1","action":null,"acquiredAtMs":5,"ageMs":2500,"liveness":"unknown","livenessReason":"another pid namespace","leaseExpired":true,"blocksWriters":false,"mayBeAlive":true}}"#
        );
        status.lock = None;
        status.presence = Some(PresenceStatus {
            holder: "pid:2".into(),
            since_ms: 7,
            session_file: Some("/s.jsonl".into()),
            liveness: Liveness::NotAlive,
            liveness_reason: "gone".into(),
        });
        assert_eq!(
            printed(&status),
            r#"{"database":{"path":"/db/states.sqlite","exists":true},"lock":null,"pi":{"holder":"pid:2","sinceMs":7,"sessionFile":"/s.jsonl","liveness":"not alive","livenessReason":"gone","blocksWriters":false,"thisProcess":false}}"#
        );
    }
}
