//! The fold layer (docs/spec.md §3): the event envelope, the state index over a log, the fold
//! step (one event applied, and how the projection stores the result), and the fold of
//! a plugin's events at a position, the state key and the one decision of a write. Pure:
//! no database, no lock; the store and the projection above use it.

pub(crate) mod decide;
pub(crate) mod depth;
pub mod envelope;
pub mod fold;
pub(crate) mod index;
pub mod key;
pub(crate) mod step;

pub use decide::Decided;
pub use depth::MAX_DEPTH;
pub use key::{Invalid, Migrate, StateKey, Unwritable, validate_plugin_id};
