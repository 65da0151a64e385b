//! The floor of a whole-process write, and sessions to measure it on
//! (`bench/compare/cli_write.py`, SPEC §10: a whole-process `write` ≤ 3× a whole-process
//! raw `O_APPEND` write + `fdatasync` of the same line).
//!
//! ```text
//! write_floor raw <FILE> <LINE>   open FILE with O_APPEND, one write() of LINE + "\n", fdatasync, exit
//! write_floor gen <FILE> <N>      write a Pi-format session of N entries (benches/common's generator)
//! ```
//!
//! `raw` is what any durable appender must do at least, in a process of its own: start,
//! open, write, sync, exit. It creates FILE if needed.

#[path = "../benches/common/mod.rs"]
mod common;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["raw", file, line] => {
            let mut f = match std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(file)
            {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("write_floor: opening {file}: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut bytes = line.as_bytes().to_vec();
            bytes.push(b'\n');
            match f.write(&bytes).and_then(|n| {
                if n == bytes.len() {
                    f.sync_data()
                } else {
                    Err(std::io::Error::other("short write"))
                }
            }) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("write_floor: appending to {file}: {e}");
                    ExitCode::from(2)
                }
            }
        }
        ["gen", file, n] => {
            let Ok(n) = n.parse::<usize>() else {
                eprintln!("write_floor gen: {n:?} is not a number of entries");
                return ExitCode::from(2);
            };
            let g = common::write_session(Path::new(file), n, 42);
            println!("{}", g.bytes);
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: write_floor raw <FILE> <LINE> | write_floor gen <FILE> <N>");
            ExitCode::from(2)
        }
    }
}
