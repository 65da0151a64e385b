//! The session as a tree: the petgraph view of a log's entries ([`graph`]: parent links,
//! children, paths, forks, branch keys) and [`SessionLog`] (the open session: header,
//! tree, active leaf and durable append). Above `log`, below the fold.

pub(crate) mod graph;
mod session;

pub use session::{EntryRef, LogOptions, Materialize, SessionLog};
