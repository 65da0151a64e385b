//! The skip-parse floor of SPEC §10, as a whole process: reads a session file through a
//! 1 MiB buffer, splits lines with memchr and parses each into a struct of borrowed
//! `&str` that keeps only `type`, `id` and `parentId` (what a tree needs). The same
//! floor as `benches/replay.rs`; `bench/compare/run` times it beside `session-state
//! replay` on the same file, in the same run.
//!
//! ```text
//! skip_parse <FILE>      prints {"lines": N, "checksum": N}
//! ```

use serde::Deserialize;
use std::io::Read;
use std::path::Path;

/// Only what a tree needs, borrowed from the line.
#[derive(Deserialize)]
struct Skip<'a> {
    #[serde(rename = "type", borrow)]
    t: &'a str,
    #[serde(borrow, default)]
    id: Option<&'a str>,
    #[serde(rename = "parentId", borrow, default)]
    parent_id: Option<&'a str>,
}

/// The number of lines and a checksum of what was kept, so nothing is optimized away.
fn skip_parse(path: &Path) -> std::io::Result<(usize, usize)> {
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut filled, mut lines, mut sum) = (0usize, 0usize, 0usize);
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = f.read(&mut buf[filled..])?;
        if n == 0 {
            return Ok((lines, sum));
        }
        let mut start = 0;
        let mut search = filled;
        filled += n;
        while let Some(pos) = memchr::memchr(b'\n', &buf[search..filled]) {
            let end = search + pos;
            let e: Skip<'_> = serde_json::from_slice(&buf[start..end])
                .map_err(|e| std::io::Error::other(format!("line {}: {e}", lines + 1)))?;
            sum += e.t.len() + e.id.map_or(0, str::len) + e.parent_id.map_or(0, str::len);
            lines += 1;
            start = end + 1;
            search = start;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
    }
}

fn main() -> std::process::ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: skip_parse <FILE>");
        return std::process::ExitCode::from(2);
    };
    match skip_parse(Path::new(&path)) {
        Ok((lines, sum)) => {
            println!("{{\"lines\": {lines}, \"checksum\": {sum}}}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {e}", Path::new(&path).display());
            std::process::ExitCode::FAILURE
        }
    }
}
