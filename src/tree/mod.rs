//! The session as a tree: the petgraph view of a log's entries ([`graph`]: parent links,
//! children, paths, forks, branch keys) and [`SessionLog`] (the open session: header,
//! tree, active leaf and durable append). Above `log`, below the fold.
//!
//! - `session.rs`: the [`SessionLog`] type, opening and reading (with [`LogOptions`]'s
//!   constructors), accessors, tree queries, and [`EntryRef`];
//! - `index.rs`: the scanner's sink that builds the tree from the entries read;
//! - `append.rs`: append, materialize, refresh and the rules before a byte is written;
//! - `options.rs`: [`LogOptions`] and [`Materialize`].

mod append;
pub(crate) mod graph;
mod index;
mod options;
mod session;

pub use options::{LogOptions, Materialize};
pub use session::{EntryRef, SessionLog};
