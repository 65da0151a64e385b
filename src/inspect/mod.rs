//! Read-only views for tools, straight from a [`SessionLog`](crate::SessionLog) with no
//! projection database: a state's value at an entry ([`value_at`]), the state events per
//! plugin and scope ([`event_counts`]), and the report of a session's lock and presence
//! rows ([`status_report`]) that `session-state status --json` and the Pi package's
//! `/state:status` print. Each report derives `serde::Serialize`; a tool prints it with
//! [`crate::json::to_string_pretty`] of `serde_json::to_value(&report)`, which keeps the
//! lone surrogates and JavaScript number forms that `serde_json::to_string` would not.
//! The command line's own reports (`replay`, `verify`) are built here too, for the
//! command line only ([`crate::cli`]).
//!
//! ```no_run
//! use session_state::{Scope, SessionLog, inspect};
//! let log = SessionLog::open("session.jsonl")?;
//! for tip in log.tips() {
//!     let role = inspect::value_at(&log, "role", Scope::Branch, tip)?;
//!     println!("{tip}: {role:?}");
//! }
//! # Ok::<(), session_state::Error>(())
//! ```

mod counts;
// The command line's reports (`replay`, `verify`), for it, the crate's tests and the test
// seam (`crate::__internal`).
#[cfg(any(feature = "cli", feature = "__internal", test))]
pub(crate) mod report;
mod status;
pub(crate) mod walk;

pub use counts::{EventCount, EventCounts};
#[cfg(feature = "cli")]
pub(crate) use report::{
    Integrity, Replay, ReplayValue, TipReplay, TipReplays, integrity, replay_tips,
};
#[cfg(test)]
pub(crate) use report::{IntegrityKind, replay};
#[cfg(feature = "cli")]
pub(crate) use status::LockReport;
pub use status::{StatusReport, status_report};
#[cfg(feature = "cli")]
pub(crate) use walk::state_event;
pub use walk::{event_counts, value_at};
#[cfg(test)]
use {counts::PluginEvents, walk::fold_tips};

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests;
