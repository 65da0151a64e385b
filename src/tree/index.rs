//! The index of a session's entries: [`Index`], the scanner's sink that builds the tree
//! from the entries the log's reader hands it (docs/spec.md §2's structural rules: duplicate ids,
//! dangling parents, self-parents; v1 ids), and [`EntryRef`], the read-only view of one
//! entry.

use super::SessionLog;
use super::graph::{NodeData, Tree};
use crate::error::{Error, Location, Result};
use crate::log::entry::{EntryType, Role, raw_str};
use crate::log::migrate;
use crate::log::reader::{
    EntrySink, Finding, FindingKind, ReadMode, ScanState, ScannedEntry, Severity,
};
use indexmap::IndexSet;
use serde_json::value::RawValue;
use std::path::PathBuf;

/// A read-only view of one entry.
#[derive(Debug, Clone, Copy)]
pub struct EntryRef<'a> {
    pub(super) log: &'a SessionLog,
    pub(super) idx: u32,
}

impl<'a> EntryRef<'a> {
    fn node(&self) -> &'a NodeData {
        self.log.index.tree.node(self.idx)
    }
    /// The entry's id.
    pub fn id(&self) -> &'a str {
        self.log.index.tree.id(self.idx)
    }
    /// The parent's id; `None` for a root.
    pub fn parent_id(&self) -> Option<&'a str> {
        self.node().parent.map(|p| self.log.index.tree.id(p))
    }
    /// The entry's type.
    pub fn entry_type(&self) -> EntryType {
        self.node().ty
    }
    /// The `customType` of a `custom` or `custom_message` entry.
    pub fn custom_type(&self) -> Option<&'a str> {
        self.node()
            .custom
            .and_then(|c| self.log.index.custom_types.get_index(c as usize))
            .map(|s| &**s)
    }
    /// The role of a `message` entry.
    pub fn role(&self) -> Option<Role> {
        self.node().role
    }
    /// Where its line starts.
    pub fn location(&self) -> Location {
        self.node().at
    }
    /// Length of its line in bytes, newline included.
    pub fn line_len(&self) -> u64 {
        self.node().len
    }
    /// Its index in file order (0 = first entry after the header).
    pub fn index(&self) -> usize {
        self.idx as usize
    }
    /// Ids of its children, in file order.
    pub fn children(&self) -> Vec<&'a str> {
        self.log
            .index
            .tree
            .children_of(self.idx)
            .into_iter()
            .map(|c| self.log.index.tree.id(c))
            .collect()
    }
    /// The `data` of a `custom` entry, as written (`None`: another type, or no `data`).
    pub(crate) fn custom_data(&self) -> Option<&'a RawValue> {
        self.node()
            .data
            .and_then(|d| self.log.index.custom_data.get(d as usize))
            .map(|d| &**d)
    }
}

/// The index built from a session's lines; the sink of the scanner.
pub(super) struct Index {
    pub(super) path: PathBuf,
    pub(super) session_id: String,
    pub(super) mode: ReadMode,
    pub(super) tree: Tree,
    pub(super) custom_types: IndexSet<Box<str>>,
    /// The `data` of every `custom` entry (an extension's state; usually small).
    pub(super) custom_data: Vec<Box<RawValue>>,
    pub(super) findings: Vec<Finding>,
}

impl Index {
    /// An empty index of the session `session_id`, read from `path` in `mode`.
    pub(super) fn new(path: PathBuf, session_id: String, mode: ReadMode) -> Index {
        Index {
            path,
            session_id,
            mode,
            tree: Tree::default(),
            custom_types: IndexSet::new(),
            custom_data: Vec::new(),
            findings: Vec::new(),
        }
    }
}

impl EntrySink for Index {
    fn entry(&mut self, e: ScannedEntry<'_, '_>, _state: &ScanState) -> Result<()> {
        let id = &*e.id;
        if let Some(first) = self.tree.index_of(id) {
            let first_line = self.tree.node(first).at.line;
            if self.mode == ReadMode::Strict {
                return Err(Error::DuplicateId {
                    path: self.path.clone(),
                    at: e.at,
                    id: id.into(),
                    first_line: Some(first_line),
                });
            }
            self.findings.push(Finding {
                severity: Severity::Error,
                kind: FindingKind::DuplicateId,
                at: e.at,
                entry_id: Some(id.into()),
                message: format!("skipped: id already used on line {first_line}"),
            });
            return Ok(());
        }
        let parent = match e.parent.as_deref() {
            None => None,
            Some(p) => match self.tree.index_of(p) {
                Some(pi) => Some(pi),
                None => {
                    let (kind, err) = if p == id {
                        (
                            FindingKind::Cycle,
                            Error::Cycle {
                                path: self.path.clone(),
                                at: e.at,
                                id: id.into(),
                            },
                        )
                    } else {
                        (
                            FindingKind::DanglingParent,
                            Error::DanglingParent {
                                path: self.path.clone(),
                                at: e.at,
                                id: id.into(),
                                parent: p.into(),
                            },
                        )
                    };
                    if self.mode == ReadMode::Strict {
                        return Err(err);
                    }
                    self.findings.push(Finding {
                        severity: Severity::Error,
                        kind,
                        at: e.at,
                        entry_id: Some(id.into()),
                        message: format!("parentId '{p}' names no earlier entry; read as a root"),
                    });
                    None
                }
            },
        };
        let ty = EntryType::from_name(&e.raw.ty.0);
        let mut custom = None;
        let mut data = None;
        if matches!(ty, EntryType::Custom | EntryType::CustomMessage)
            && let Some(ct) = e.raw.custom_type.and_then(raw_str)
        {
            let (ci, _) = self.custom_types.insert_full(ct.into());
            custom = Some(ci as u32);
        }
        if ty == EntryType::Custom
            && let Some(d) = e.raw.data
        {
            data = Some(self.custom_data.len() as u32);
            self.custom_data.push(d.to_owned());
        }
        let role = e
            .raw
            .message
            .as_ref()
            .and_then(|m| m.role.as_ref())
            .map(|r| Role::from_name(&r.0))
            .filter(|_| ty == EntryType::Message);
        self.tree.push(
            id,
            NodeData {
                parent,
                ty,
                custom,
                role,
                at: e.at,
                len: e.len,
                data,
            },
        );
        Ok(())
    }

    fn finding(&mut self, f: Finding) {
        self.findings.push(f);
    }

    fn assign_id(&mut self, ordinal: u64) -> String {
        let mut attempt = 0;
        loop {
            let id = migrate::v1_id(&self.session_id, ordinal, attempt);
            if !self.tree.contains(&id) {
                return id;
            }
            attempt += 1;
        }
    }

    fn last_id(&self) -> Option<String> {
        self.tree.last_index().map(|i| self.tree.id(i).to_owned())
    }
}
