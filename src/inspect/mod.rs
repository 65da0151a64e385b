//! Read-only views for inspection tools (the `session-state` CLI): state values and
//! decoded events straight from a [`SessionLog`](crate::SessionLog), with no projection database, and the
//! typed reports the CLI prints ([`Replay`], [`EventCounts`], [`Integrity`], [`StatusReport`]). Every report derives `serde::Serialize`; a tool prints it with
//! [`crate::json::to_string_pretty`] of `serde_json::to_value(&report)`, which keeps the
//! lone surrogates and JavaScript number forms that `serde_json::to_string` would not.
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
mod report;
mod status;
mod walk;

pub use counts::{EventCount, EventCounts, EventScope, PluginEvents};
pub use report::{
    CustomReplay, Integrity, IntegrityFinding, IntegrityKind, Replay, ReplayValue, TipReplay,
    TipReplays, integrity, replay, replay_tips,
};
pub use status::{DatabaseReport, LockReport, PresenceReport, StatusReport, status_report};
pub use walk::{StateEvent, TipFold, event_counts, fold_tips, state_event, value_at};

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests;
