//! The protected-paths guard from Pi's extension docs (`examples/extensions/
//! protected-paths.ts`), rewritten against session-state: its block list is branch-scoped
//! state in the session log, so it survives restarts and follows `/tree` navigation and
//! forks instead of living in a hard-coded array.
//!
//! ```text
//! cargo run --example guard -- <session.jsonl> [--db <abs path>] [--at <entry>] block <path>
//! cargo run --example guard -- <session.jsonl> [--db <abs path>] [--at <entry>] unblock <path>
//! cargo run --example guard -- <session.jsonl> [--db <abs path>] [--at <entry>] check <path>
//! cargo run --example guard -- <session.jsonl> [--db <abs path>] [--at <entry>] list
//! ```
//!
//! `check` exits 0 when a write to the path is allowed and 3 when the guard blocks it
//! (Pi's `{ block: true, reason }`). `block`/`unblock` print the new entry id, if any.

use serde::{Deserialize, Serialize};
use session_state::{Scope, SessionLog, Store, StoreOptions};
use std::process::ExitCode;

/// The guard's state: path fragments that writes and edits may not touch.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct BlockList {
    paths: Vec<String>,
}

impl BlockList {
    /// Pi's rule: a path is protected when it contains a blocked fragment.
    fn blocks(&self, path: &str) -> Option<&str> {
        self.paths
            .iter()
            .map(String::as_str)
            .find(|p| path.contains(p))
    }
}

fn run() -> Result<ExitCode, String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut take_flag = |name: &str| -> Option<String> {
        let i = args.iter().position(|a| a == name)?;
        args.remove(i);
        (i < args.len()).then(|| args.remove(i))
    };
    let db = take_flag("--db");
    let at = take_flag("--at");
    let [file, cmd, rest @ ..] = args.as_slice() else {
        return Err(
            "usage: guard <session.jsonl> [--db PATH] [--at ENTRY] block|unblock|check|list [path]"
                .into(),
        );
    };
    let mut options = StoreOptions::new();
    if let Some(db) = db {
        options = options.database_path(db);
    }
    let guard = Store::open(options)
        .and_then(|store| store.state::<BlockList>("guard", Scope::Branch))
        .map_err(|e| e.to_string())?;
    let mut log = SessionLog::open(file).map_err(|e| e.to_string())?;
    if let Some(at) = at {
        log.navigate(&at).map_err(|e| e.to_string())?;
    }
    let mut list = guard
        .read(&log)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    let path = rest.first().cloned().unwrap_or_default();
    match cmd.as_str() {
        "block" | "unblock" => {
            if cmd == "block" && !list.paths.contains(&path) {
                list.paths.push(path);
            } else if cmd == "unblock" {
                list.paths.retain(|p| *p != path);
            }
            if let Some(id) = guard.write(&mut log, &list).map_err(|e| e.to_string())? {
                println!("{id}");
            }
            Ok(ExitCode::SUCCESS)
        }
        "check" => match list.blocks(&path) {
            Some(p) => {
                println!("blocked: Path \"{path}\" is protected (matches {p:?})");
                Ok(ExitCode::from(3))
            }
            None => {
                println!("allowed: {path}");
                Ok(ExitCode::SUCCESS)
            }
        },
        "list" => {
            for p in &list.paths {
                println!("{p}");
            }
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!("unknown command {other:?}")),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("guard: {e}");
            ExitCode::from(2)
        }
    }
}
