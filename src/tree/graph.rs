//! The session tree on petgraph: nodes in file order, edges parent → child, an IndexMap
//! from id to node, the active leaf, paths, forks and branch keys.
//!
//! Node index *i* is the *i*-th entry in file order, in the graph and in the id map
//! alike, because both are append-only.

use crate::error::Location;
use crate::log::entry::{EntryType, Role};
use indexmap::IndexSet;
use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};

/// What the tree keeps of one entry: no message bodies, a few dozen bytes.
#[derive(Debug, Clone)]
pub(crate) struct NodeData {
    pub parent: Option<u32>,
    pub ty: EntryType,
    /// Interned `customType` for `custom` and `custom_message` entries.
    pub custom: Option<u32>,
    pub role: Option<Role>,
    pub at: Location,
    pub len: u64,
    /// Index into the log's table of `custom` entries' `data` (kept for the layers above,
    /// which decide what an extension's data means).
    pub data: Option<u32>,
}

/// The entry tree of one session.
#[derive(Debug, Default, Clone)]
pub struct Tree {
    graph: DiGraph<NodeData, ()>,
    ids: IndexSet<Box<str>>,
    leaf: Option<u32>,
}

impl Tree {
    pub(crate) fn index_of(&self, id: &str) -> Option<u32> {
        self.ids.get_index_of(id).map(|i| i as u32)
    }

    /// The node at index `i`. Every index comes from this tree (`push`, `index_of`, a
    /// node's parent or children, the leaf), so one it does not have is a bug: it panics.
    pub(crate) fn node(&self, i: u32) -> &NodeData {
        &self.graph[NodeIndex::new(i as usize)]
    }

    /// The id of node `i`; panics on an index the tree does not have, as [`Tree::node`]
    /// does (an empty id would name no entry, silently).
    pub(crate) fn id(&self, i: u32) -> &str {
        &self.ids[i as usize]
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when the session has no entries (a header-only file).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether an id is used by an entry.
    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    pub(crate) fn push(&mut self, id: &str, data: NodeData) -> u32 {
        let parent = data.parent;
        let n = self.graph.add_node(data);
        self.ids.insert(id.into());
        if let Some(p) = parent {
            self.graph.add_edge(NodeIndex::new(p as usize), n, ());
        }
        n.index() as u32
    }

    pub(crate) fn leaf_index(&self) -> Option<u32> {
        self.leaf
    }

    pub(crate) fn set_leaf(&mut self, leaf: Option<u32>) {
        self.leaf = leaf;
    }

    pub(crate) fn last_index(&self) -> Option<u32> {
        self.ids.len().checked_sub(1).map(|i| i as u32)
    }

    /// Children of a node in file order.
    pub(crate) fn children_of(&self, i: u32) -> Vec<u32> {
        let mut c: Vec<u32> = self
            .graph
            .neighbors_directed(NodeIndex::new(i as usize), Direction::Outgoing)
            .map(|n| n.index() as u32)
            .collect();
        c.sort_unstable();
        c
    }

    pub(crate) fn child_count(&self, i: u32) -> usize {
        self.graph
            .neighbors_directed(NodeIndex::new(i as usize), Direction::Outgoing)
            .count()
    }

    /// Node indexes from a root down to `i` (inclusive), in path order.
    pub(crate) fn path_indexes(&self, i: u32) -> Vec<u32> {
        let mut path = vec![i];
        let mut cur = i;
        while let Some(p) = self.node(cur).parent {
            path.push(p);
            cur = p;
        }
        path.reverse();
        path
    }

    /// The branch key of a node: climb while the parent has exactly one child.
    pub(crate) fn branch_key_of(&self, i: u32) -> u32 {
        let mut cur = i;
        while let Some(p) = self.node(cur).parent {
            if self.child_count(p) != 1 {
                break;
            }
            cur = p;
        }
        cur
    }

    /// The leaves of the tree (entries with no children), in file order.
    pub(crate) fn tips(&self) -> Vec<u32> {
        (0..self.len() as u32)
            .filter(|&i| self.child_count(i) == 0)
            .collect()
    }

    /// The roots of the tree, in file order.
    pub(crate) fn roots(&self) -> Vec<u32> {
        (0..self.len() as u32)
            .filter(|&i| self.node(i).parent.is_none())
            .collect()
    }
}
