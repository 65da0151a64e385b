//! The index of a session's entries: [`Index`], the scanner's sink that builds the tree
//! from the entries the log's reader hands it (docs/spec.md §2's structural rules: duplicate ids,
//! dangling parents, self-parents; v1 ids).

use super::graph::{NodeData, Tree};
use crate::error::{InvalidLog, Location, ReadFailure};
use crate::log::entry::{EntryType, Role, raw_str};
use crate::log::migrate;
use crate::log::reader::{
    EntrySink, Finding, FindingKind, ReadMode, ScanState, ScannedEntry, Severity,
};
use indexmap::IndexSet;
use std::path::PathBuf;

/// The index built from a session's lines; the sink of the scanner.
pub(super) struct Index {
    pub(super) path: PathBuf,
    pub(super) session_id: String,
    pub(super) mode: ReadMode,
    pub(super) tree: Tree,
    pub(super) custom_types: IndexSet<Box<str>>,
    /// The customType interned last: a run of one extension's entries (a writer's state
    /// events) finds it without hashing.
    last_custom_type: Option<u32>,
    /// The `data` of every `custom` entry as written (an extension's state; usually small;
    /// valid JSON: read from a line that parsed, or printed by this crate).
    pub(super) custom_data: Vec<Box<str>>,
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
            last_custom_type: None,
            custom_data: Vec::new(),
            findings: Vec::new(),
        }
    }

    /// The number of `custom_type` in the interned customTypes: a known one is looked up,
    /// not copied again.
    fn intern_custom_type(&mut self, custom_type: &str) -> u32 {
        if let Some(last) = self.last_custom_type
            && self.custom_types.get_index(last as usize).map(|t| &**t) == Some(custom_type)
        {
            return last;
        }
        let ci = match self.custom_types.get_index_of(custom_type) {
            Some(ci) => ci,
            None => self.custom_types.insert_full(custom_type.into()).0,
        } as u32;
        self.last_custom_type = Some(ci);
        ci
    }

    /// A `custom` entry this log printed and appended as a child of `parent`, taken
    /// without reading its line back: the same node [`EntrySink::entry`] makes of that
    /// line (the id is fresh, the parent is in the tree, the data was printed as JSON).
    pub(super) fn push_own_custom(
        &mut self,
        id: &str,
        parent: Option<u32>,
        custom_type: &str,
        data: Box<str>,
        at: Location,
        len: u64,
    ) {
        let ci = self.intern_custom_type(custom_type);
        let d = self.custom_data.len() as u32;
        self.custom_data.push(data);
        self.tree.push(
            id,
            NodeData {
                parent,
                ty: EntryType::Custom,
                custom: Some(ci),
                role: None,
                at,
                len,
                data: Some(d),
            },
        );
    }
}

impl<E: ReadFailure> EntrySink<E> for Index {
    fn entry(&mut self, e: ScannedEntry<'_, '_>, _state: &ScanState) -> std::result::Result<(), E> {
        let id = &*e.id;
        if let Some(first) = self.tree.index_of(id) {
            let first_line = self.tree.node(first).at.line;
            if self.mode == ReadMode::Strict {
                return Err(InvalidLog::DuplicateId {
                    path: self.path.clone(),
                    at: e.at,
                    id: id.into(),
                    first_line: Some(first_line),
                }
                .into());
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
                            InvalidLog::Cycle {
                                path: self.path.clone(),
                                at: e.at,
                                id: id.into(),
                            },
                        )
                    } else {
                        (
                            FindingKind::DanglingParent,
                            InvalidLog::DanglingParent {
                                path: self.path.clone(),
                                at: e.at,
                                id: id.into(),
                                parent: p.into(),
                            },
                        )
                    };
                    if self.mode == ReadMode::Strict {
                        return Err(err.into());
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
            custom = Some(self.intern_custom_type(&ct));
        }
        if ty == EntryType::Custom
            && let Some(d) = e.raw.data
        {
            data = Some(self.custom_data.len() as u32);
            self.custom_data.push(d.get().into());
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
