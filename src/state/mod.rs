//! The fold layer (SPEC §3): the event envelope, the state index over a log, and the
//! fold of a plugin's events at a position. Pure: no database, no lock; the store and
//! the projection above use it.

pub(crate) mod depth;
pub mod envelope;
pub mod fold;
pub(crate) mod index;

pub use depth::MAX_DEPTH;
