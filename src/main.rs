//! `session-state`: the command line, a thin layer over the library.
//! See `docs/cli.md` for every command, its flags, outputs and exit codes.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
