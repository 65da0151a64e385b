//! `session-state`: the command line, `session_state::cli::main`.
//! See `docs/cli.md` for every command, its flags, outputs and exit codes.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used)]

fn main() -> std::process::ExitCode {
    session_state::cli::main()
}
