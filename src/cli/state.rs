//! `read`, `write`, `patch`, `drop`: one plugin's state in one session file.
//!
//! `read` goes through the projection, so a cold read of an unchanged file does not scan
//! it. The writes open the log, move the leaf for `--at`, and go through
//! [`SessionState`], which takes the session's write lock.

use super::{CmdResult, DbArgs, Failure, ScopeArg, emit, fail, open_log, require_regular};
use serde_json::Value;
use session_state::{Op, Scope, SessionState, Store, validate_plugin_id};
use std::io::{IsTerminal, Read};
use std::path::PathBuf;

pub(crate) const READ_EXAMPLES: &str = "\
Examples:
  session-state read s.jsonl --plugin role
  session-state read s.jsonl --plugin role --at 1a2b3c4d
  session-state read s.jsonl --plugin counter --scope session --db /tmp/states.sqlite

Exit codes: 0 the value was printed; 1 absent (no output); 2 error (message on stderr).";

pub(crate) const WRITE_EXAMPLES: &str = "\
Examples:
  session-state write s.jsonl --plugin role --value '{\"name\":\"reviewer\"}'
  echo '[1,2,3]' | session-state write s.jsonl --plugin todo
  session-state write s.jsonl --plugin counter --value -1
  session-state write s.jsonl --plugin role --value '\"planner\"' --at 1a2b3c4d
      (a child of 1a2b3c4d: it extends that branch at a tip, forks anywhere else)

Prints the new entry's id, or nothing when the value was already equal.
Exit codes: 0 done; 2 error (invalid JSON, unknown entry, lock held by another process...).";

pub(crate) const PATCH_EXAMPLES: &str = "\
Examples:
  session-state patch s.jsonl --plugin role --merge '{\"model\":\"fast\"}'
  session-state patch s.jsonl --plugin role --merge '{\"model\":null}'   # removes `model`

Prints the new entry's id, or nothing when the patch changed nothing.
Exit codes: 0 done; 2 error.";

pub(crate) const DROP_EXAMPLES: &str = "\
Examples:
  session-state drop s.jsonl --plugin role
  session-state drop s.jsonl --plugin counter --scope session

Prints the new entry's id, or nothing when the value was already absent.
Exit codes: 0 done; 2 error.";

/// Which state, where.
#[derive(Debug, clap::Args)]
pub(crate) struct Target {
    /// The session file (.jsonl)
    file: PathBuf,
    /// The plugin id: lowercase letters, digits, '-' and '.'
    #[arg(long, value_name = "ID")]
    plugin: String,
    /// Which fold
    #[arg(long, value_enum, default_value_t = ScopeArg::Branch)]
    scope: ScopeArg,
    /// Act as if the active leaf were this entry: reads fold up to it, writes append a
    /// child of it (a fork when it already has children)
    #[arg(long, value_name = "ENTRY")]
    at: Option<String>,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ReadArgs {
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, clap::Args)]
pub(crate) struct WriteArgs {
    #[command(flatten)]
    target: Target,
    /// The new value as JSON, any JSON text (`--value -1` works) [default: read from stdin]
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    value: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PatchArgs {
    #[command(flatten)]
    target: Target,
    /// An RFC 7396 JSON Merge Patch, any JSON text (`--merge -5` works; an absent value
    /// patches {})
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    merge: String,
}

#[derive(Debug, clap::Args)]
pub(crate) struct DropArgs {
    #[command(flatten)]
    target: Target,
}

fn check_plugin(t: &Target) -> Result<(), Failure> {
    validate_plugin_id(&t.plugin).map_err(|_| {
        fail(format_args!(
            "--plugin {:?}: not a valid plugin id; use a non-empty name of lowercase letters, \
             digits, '-' and '.' (for example \"role\" or \"my-ext.todo\")",
            t.plugin
        ))
    })
}

fn parse_json(text: &str, source: &str) -> Result<Value, Failure> {
    use session_state::json::{JsonError, from_str_exact};
    from_str_exact(text).map_err(|e| match e {
        JsonError::InexactNumber { .. } => fail(format_args!("{source}: {e}")),
        _ => fail(format_args!(
            "{source} is not valid JSON: {e} (strings need quotes: '\"text\"')"
        )),
    })
}

pub(crate) fn read(args: ReadArgs) -> CmdResult {
    let t = args.target;
    check_plugin(&t)?;
    let db = t.db.resolve()?;
    require_regular(&t.file)?;
    let value = state_key(&t, db)?
        .read_file_value(&t.file, t.at.as_deref())
        .map_err(fail)?;
    match value {
        Some(v) => {
            emit(&format!("{}\n", session_state::json::to_string(&v)))?;
            Ok(0)
        }
        None => Ok(1),
    }
}

pub(crate) fn write(args: WriteArgs) -> CmdResult {
    check_plugin(&args.target)?;
    let value = match &args.value {
        Some(v) => parse_json(v, "--value")?,
        None => {
            if std::io::stdin().is_terminal() {
                eprintln!("reading the value from stdin… (Ctrl-D to end)");
            }
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| fail(format_args!("reading the value from stdin: {e}")))?;
            parse_json(&text, "the value on stdin")?
        }
    };
    apply(&args.target, Op::Set(value))
}

pub(crate) fn patch(args: PatchArgs) -> CmdResult {
    check_plugin(&args.target)?;
    let merge = parse_json(&args.merge, "--merge")?;
    apply(&args.target, Op::Patch(merge))
}

pub(crate) fn drop(args: DropArgs) -> CmdResult {
    check_plugin(&args.target)?;
    apply(&args.target, Op::Drop)
}

/// The plugin's state on the store at `db`.
fn state_key(t: &Target, db: std::path::PathBuf) -> Result<SessionState<Value>, Failure> {
    Store::at(db)
        .and_then(|store| store.state(&t.plugin, Scope::from(t.scope)))
        .map_err(fail)
}

/// A write: from the projection's rows and the file's tail when they answer (no parse of
/// the log: the cost does not grow with the session), else through the opened log.
fn apply(t: &Target, op: Op) -> CmdResult {
    let db = t.db.resolve()?;
    require_regular(&t.file)?;
    let state = state_key(t, db)?;
    let id = match state
        .apply_at_tail(&t.file, t.at.as_deref(), op.clone())
        .map_err(fail)?
    {
        Some(id) => id,
        None => {
            let mut log = open_log(&t.file)?;
            if let Some(at) = &t.at {
                log.navigate(at)
                    .map_err(|e| fail(format_args!("--at: {e}")))?;
            }
            let changed = match op {
                Op::Set(value) => state.write(&mut log, &value),
                Op::Patch(merge) => state.patch(&mut log, &merge),
                Op::Drop => state.drop(&mut log),
            };
            changed.map_err(fail)?
        }
    };
    if let Some(id) = id {
        emit(&format!("{id}\n"))?;
    }
    Ok(0)
}
