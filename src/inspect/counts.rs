//! How many state events a file has, per plugin and scope.

#[cfg(any(feature = "cli", test))]
use crate::state::envelope::Scope;
use serde::Serialize;
use std::collections::BTreeMap;

/// Where a state event applies, as [`event_counts`](super::event_counts) counts it: the
/// scope its envelope declares, or `Invalid` when the envelope cannot be decoded (unknown
/// `v`, op or scope...). Serialized as `"branch"`, `"invalid"`, `"session"`; ordered by
/// that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventScope {
    /// `scope: "branch"`.
    Branch,
    /// An envelope that cannot be decoded.
    Invalid,
    /// `scope: "session"`.
    Session,
}

impl EventScope {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventScope::Branch => "branch",
            EventScope::Invalid => "invalid",
            EventScope::Session => "session",
        }
    }
}

impl std::fmt::Display for EventScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many state events one plugin has in the file, by [`EventScope`]. Serialized as an
/// object of the non-zero counts, in name order (`{"branch":2,"invalid":1}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PluginEvents {
    /// Events declaring branch scope.
    #[serde(skip_serializing_if = "is_zero")]
    pub branch: u64,
    /// Events that cannot be decoded.
    #[serde(skip_serializing_if = "is_zero")]
    pub invalid: u64,
    /// Events declaring session scope.
    #[serde(skip_serializing_if = "is_zero")]
    pub session: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl PluginEvents {
    /// The count in one scope.
    pub fn get(&self, scope: EventScope) -> u64 {
        match scope {
            EventScope::Branch => self.branch,
            EventScope::Invalid => self.invalid,
            EventScope::Session => self.session,
        }
    }

    /// The scopes with events, in name order, with their counts.
    pub fn scopes(&self) -> impl Iterator<Item = (EventScope, u64)> + '_ {
        [EventScope::Branch, EventScope::Invalid, EventScope::Session]
            .into_iter()
            .map(|s| (s, self.get(s)))
            .filter(|&(_, n)| n > 0)
    }

    /// Whether some event may set the plugin's value in `scope`: one declaring it, or one
    /// that cannot be decoded (a read in either scope may fail on it). When not, the value
    /// there is trivially absent.
    #[cfg(any(feature = "cli", test))]
    pub fn may_set(&self, scope: Scope) -> bool {
        self.invalid > 0
            || match scope {
                Scope::Branch => self.branch > 0,
                Scope::Session => self.session > 0,
            }
    }
}

/// The state events in a file, per plugin (in name order) and scope: what
/// [`event_counts`](super::event_counts) gives. Serialized as
/// `{"<plugin>": {"branch": n, ...}, ...}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct EventCounts {
    /// Every plugin with at least one event.
    pub(crate) plugins: BTreeMap<String, PluginEvents>,
}

/// One (plugin, scope) row of [`EventCounts::rows`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventCount {
    /// The plugin id.
    pub plugin: String,
    /// The scope.
    pub(crate) scope: EventScope,
    /// How many events (at least one).
    pub events: u64,
}

impl EventCounts {
    /// Whether the file has no state events.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// One plugin's counts (all zero when it has no events).
    #[cfg(any(feature = "cli", test))]
    pub(crate) fn of(&self, plugin: &str) -> PluginEvents {
        self.plugins.get(plugin).copied().unwrap_or_default()
    }

    /// One row per (plugin, scope) with events, plugins in name order, then scopes.
    pub fn rows(&self) -> Vec<EventCount> {
        self.plugins
            .iter()
            .flat_map(|(p, c)| {
                c.scopes().map(move |(scope, events)| EventCount {
                    plugin: p.clone(),
                    scope,
                    events,
                })
            })
            .collect()
    }
}
