//! The state index: what the fold needs of a log, kept above it.
//!
//! The log publishes entries (ids, parents, types, and the `data` of `custom` entries);
//! this index picks out the state events (`session-state/<plugin>`) and, for every node,
//! its nearest state-event ancestor-or-self, so a branch read skips the messages in
//! between. It follows an append-only log incrementally: [`StateIndex::follow`] reads only
//! the entries added since the last call.

use super::envelope::STATE_PREFIX;
use crate::tree::{EntryRef, SessionLog};
use serde_json::value::RawValue;

/// One state event: its node and its plugin id.
#[derive(Debug, Clone)]
pub(crate) struct EventAt {
    pub node: u32,
    pub plugin: Box<str>,
}

/// State events of one log, in file order, and each node's nearest state event.
#[derive(Debug, Default)]
pub(crate) struct StateIndex {
    events: Vec<EventAt>,
    /// Per node: its event (index into `events`), if it is a state event.
    event_of: Vec<Option<u32>>,
    /// Per node: the nearest ancestor-or-self that is a state event.
    state_anc: Vec<Option<u32>>,
}

impl<'a> EntryRef<'a> {
    /// The plugin id of a state event (`session-state/<plugin>`); `None` for any other
    /// entry.
    pub fn state_plugin(&self) -> Option<&'a str> {
        if self.entry_type() != crate::EntryType::Custom {
            return None;
        }
        self.custom_type()?.strip_prefix(STATE_PREFIX)
    }
}

impl StateIndex {
    /// An index of `log` as it is now.
    pub(crate) fn of(log: &SessionLog) -> StateIndex {
        let mut index = StateIndex::default();
        index.follow(log);
        index
    }

    /// Indexes the entries `log` gained since the last call (entries are append-only;
    /// a log with fewer entries than indexed is another log: indexed afresh).
    pub(crate) fn follow(&mut self, log: &SessionLog) {
        if log.len() < self.event_of.len() {
            *self = StateIndex::default();
        }
        let tree = log.tree();
        for i in self.event_of.len()..log.len() {
            let node = i as u32;
            let e = log.entry_at(node);
            let event = e.state_plugin().map(|plugin| {
                self.events.push(EventAt {
                    node,
                    plugin: plugin.into(),
                });
                (self.events.len() - 1) as u32
            });
            self.event_of.push(event);
            let anc = match event {
                Some(_) => Some(node),
                None => tree
                    .node(node)
                    .parent
                    .and_then(|p| self.state_anc.get(p as usize).copied().flatten()),
            };
            self.state_anc.push(anc);
        }
    }

    /// Number of nodes indexed.
    pub(crate) fn len(&self) -> usize {
        self.event_of.len()
    }

    /// The state events in file order.
    pub(crate) fn events(&self) -> &[EventAt] {
        &self.events
    }

    /// The event at `node`, if it is a state event.
    pub(crate) fn event_of(&self, node: u32) -> Option<&EventAt> {
        self.event_of
            .get(node as usize)
            .copied()
            .flatten()
            .and_then(|e| self.events.get(e as usize))
    }

    /// The position in [`StateIndex::events`] of the event at `node`, if it is a state
    /// event.
    pub(crate) fn event_index(&self, node: u32) -> Option<usize> {
        self.event_of
            .get(node as usize)
            .copied()
            .flatten()
            .map(|e| e as usize)
    }

    /// The nearest ancestor-or-self of `node` that is a state event.
    pub(crate) fn state_anc(&self, node: u32) -> Option<u32> {
        self.state_anc.get(node as usize).copied().flatten()
    }
}

/// The raw `data` of the entry at `node`.
pub(crate) fn data_of(log: &SessionLog, node: u32) -> Option<&RawValue> {
    log.entry_at(node).custom_data()
}
