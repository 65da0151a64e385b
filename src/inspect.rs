//! Read-only views for inspection tools (the `session-state` CLI): state values and
//! decoded events straight from a [`SessionLog`], with no projection database.
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

use crate::error::Result;
use crate::log::SessionLog;
use crate::state::envelope::{Envelope, Scope};
use crate::state::fold;
use serde_json::Value;

/// The value of `plugin` in `scope` as if the active leaf were `entry_id` (session scope
/// ignores the position). `None` when absent.
///
/// Unlike [`crate::SessionState::read_at`] this needs no database location, so it suits
/// tools that only look. Errors: an unknown entry id, or a bad event of this plugin
/// ([`crate::Error::BadEvent`]).
pub fn value_at(
    log: &SessionLog,
    plugin: &str,
    scope: Scope,
    entry_id: &str,
) -> Result<Option<Value>> {
    let node = log.require(entry_id)?;
    Ok(fold::value_at(log, plugin, scope, Some(node))?
        .value
        .map(|v| (*v).clone()))
}

/// A state event as found in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct StateEvent<'a> {
    /// The plugin id (`session-state/<plugin>`).
    pub plugin: &'a str,
    /// The decoded envelope, or why it cannot be decoded (unknown `v`, op or scope...).
    pub envelope: std::result::Result<Envelope, String>,
}

/// The state event at `entry_id`, decoded; `None` when the entry is not a state event or
/// does not exist.
pub fn state_event<'a>(log: &'a SessionLog, entry_id: &str) -> Option<StateEvent<'a>> {
    let idx = log.tree().index_of(entry_id)?;
    let ev = log.tree().node(idx).event?;
    let data = log.event_data(ev);
    Some(StateEvent {
        plugin: &data.plugin,
        envelope: Envelope::decode(data.data.as_deref()).map_err(|e| e.detail),
    })
}
