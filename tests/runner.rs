//! The one integration-test binary (as jj-lib's `tests/runner.rs`): each behaviour's tests
//! live in their own file beside this one and are declared here, so the suite links once.
#![expect(clippy::unwrap_used)]

mod common;

mod architecture;
mod bad_input;
mod cli;
mod concurrency;
mod conformance;
mod corruption;
mod crash_loop;
mod differential;
mod fixtures;
mod fork_inheritance;
mod guard_example;
mod interop;
mod log_faults;
mod persistence;
mod pi_install;
mod pi_package;
mod pi_tui;
mod plugins;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_tls;
mod projection;
mod prune;
mod readme_walkthrough;
mod replay;
mod seam_faults;
mod settings_location;
mod store;
mod torn_cuts;
mod write_lock;
mod write_path;
