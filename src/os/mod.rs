//! The operating system's calls that std does not offer: the Windows file identity, open
//! file status, byte-range locks and process creation times, and the macOS process start
//! time (`docs/lock.md`, `docs/durability.md`, "Where it holds"). The only modules of the
//! crate with `unsafe` code: each call is a plain system call on a handle or a local
//! buffer, and its result is checked.

#[cfg(target_os = "macos")]
pub(crate) mod macos;
#[cfg(windows)]
pub(crate) mod windows;

/// What the operating system says of a process, for the holder's liveness
/// (`crate::lock::Holder`).
#[cfg(any(windows, target_os = "macos"))]
#[derive(Debug)]
pub(crate) enum Process {
    /// It runs; its start time (Windows: its creation time in 100 ns since 1601; macOS:
    /// microseconds since the Unix epoch).
    Running(u64),
    /// No process has this pid.
    Gone,
    /// It has exited (its handle or its zombie still stands).
    Exited,
    /// It cannot be told (the reason).
    Unreadable(std::io::Error),
}
