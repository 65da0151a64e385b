//! The state index: what the fold needs of a log, kept above it.
//!
//! The log publishes entries (ids, parents, types, and the `data` of `custom` entries);
//! this index picks out the state events (`session-state/<plugin>`), keeps each plugin's
//! events apart, and cuts the tree into *segments*: maximal runs in which every node is
//! the first child of the one before (a second child starts a new segment, which forks
//! from its parent). A node's path to the root crosses one segment per fork above it, so
//! a plugin's nearest event above a node is found segment by segment, each by a binary
//! search in that plugin's events of the segment, without looking at any other plugin's
//! events or at the messages in between ([`StateIndex::events_above`]). It follows an
//! append-only log incrementally: [`StateIndex::follow`] reads only the entries added
//! since the last call.

use super::envelope::STATE_PREFIX;
use crate::sync::FastMap as HashMap;
use crate::tree::{EntryRef, SessionLog};
use std::sync::Arc;

/// One state event: its node and its plugin id.
#[derive(Debug, Clone)]
pub(crate) struct EventAt {
    pub node: u32,
    /// Shared with the plugin's other events ([`PluginEvents::name`]).
    pub plugin: Arc<str>,
}

/// A segment: the node its first node is a child of (`None`: it starts at a root), and
/// its last node so far (a node extends the segment of its parent when the parent is that
/// segment's last node, i.e. has no child yet).
#[derive(Debug, Clone, Copy)]
struct Segment {
    fork: Option<u32>,
    tail: u32,
}

/// One plugin's events.
#[derive(Debug, Default)]
struct PluginEvents {
    /// The plugin id, shared by its events.
    name: Arc<str>,
    /// Positions in [`StateIndex::events`], in file order.
    all: Vec<u32>,
    /// Per segment: the nodes of this plugin's events in it, ascending (file order is
    /// path order inside a segment).
    by_segment: HashMap<u32, Vec<u32>>,
}

/// State events of one log, in file order, each plugin's events, and the segments.
#[derive(Debug, Default)]
pub(crate) struct StateIndex {
    events: Vec<EventAt>,
    /// Per node: its event (index into `events`), if it is a state event.
    event_of: Vec<Option<u32>>,
    /// Per node: its segment (index into `segments`).
    segment_of: Vec<u32>,
    segments: Vec<Segment>,
    plugins: HashMap<Box<str>, PluginEvents>,
}

impl<'a> EntryRef<'a> {
    /// The plugin id of a state event (`session-state/<plugin>`); `None` for any other
    /// entry.
    pub fn state_plugin(&self) -> Option<&'a str> {
        if self.entry_type() != crate::log::entry::EntryType::Custom {
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
            let parent = tree.node(node).parent;
            let segment = match parent.map(|p| (p, self.segment_of[p as usize])) {
                Some((p, s)) if self.segments[s as usize].tail == p => {
                    self.segments[s as usize].tail = node;
                    s
                }
                fork => {
                    self.segments.push(Segment {
                        fork: fork.map(|(p, _)| p),
                        tail: node,
                    });
                    (self.segments.len() - 1) as u32
                }
            };
            self.segment_of.push(segment);
            let e = log.entry_at(node);
            let event = e.state_plugin().map(|plugin| {
                let position = self.events.len() as u32;
                // The plugin's name is copied once, at its first event.
                if !self.plugins.contains_key(plugin) {
                    let name = Arc::from(plugin);
                    self.plugins.insert(
                        plugin.into(),
                        PluginEvents {
                            name,
                            ..PluginEvents::default()
                        },
                    );
                }
                let mine = self.plugins.get_mut(plugin).expect("inserted above");
                self.events.push(EventAt {
                    node,
                    plugin: mine.name.clone(),
                });
                mine.all.push(position);
                mine.by_segment.entry(segment).or_default().push(node);
                position
            });
            self.event_of.push(event);
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

    /// The events of `plugin`, in file order, as positions in [`StateIndex::events`].
    pub(crate) fn plugin_events(&self, plugin: &str) -> &[u32] {
        self.plugins.get(plugin).map_or(&[], |p| &p.all)
    }

    /// The events of `plugin` on the path from the root to `node` (`node` included),
    /// nearest first.
    pub(crate) fn events_above(&self, plugin: &str, node: u32) -> EventsAbove<'_> {
        EventsAbove {
            index: self,
            plugin: self.plugins.get(plugin),
            at: self.segment_of.get(node as usize).map(|&s| (s, node)),
            pending: &[],
            steps: 0,
        }
    }
}

/// The iterator of [`StateIndex::events_above`]: segment by segment up to the root, in each
/// the plugin's events at or above the bound (a binary search).
#[derive(Debug)]
pub(crate) struct EventsAbove<'a> {
    index: &'a StateIndex,
    plugin: Option<&'a PluginEvents>,
    /// The segment still to look at, and the last node of the path in it.
    at: Option<(u32, u32)>,
    /// Events of the segment looked at last, not yet returned (the nearest last).
    pending: &'a [u32],
    /// Segments and events looked at so far (the work, for tests).
    pub steps: u64,
}

impl Iterator for EventsAbove<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let plugin = self.plugin?;
        loop {
            if let Some((&nearest, rest)) = self.pending.split_last() {
                self.pending = rest;
                self.steps += 1;
                return Some(nearest);
            }
            let (segment, bound) = self.at?;
            self.steps += 1;
            if let Some(nodes) = plugin.by_segment.get(&segment) {
                self.pending = &nodes[..nodes.partition_point(|&n| n <= bound)];
            }
            self.at = self.index.segments[segment as usize]
                .fork
                .map(|f| (self.index.segment_of[f as usize], f));
        }
    }
}

/// The raw `data` of the entry at `node`.
pub(crate) fn data_of(log: &SessionLog, node: u32) -> Option<&str> {
    log.entry_at(node).custom_data()
}
