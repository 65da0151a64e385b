//! `read`, `write`, `patch`, `drop`: one plugin's state in one session, a file or a
//! stored session.
//!
//! On a file, `read` goes through the projection, so a cold read of an unchanged file does
//! not scan it. The writes are the library's file write ([`SessionState::apply_file`]):
//! decided from the projection's rows when they can, else through the opened log with its
//! leaf at `--at`, under the session's write lock. On a stored session, the `*_stored`
//! calls of [`SessionState`].

use super::store::{Sessions, Stored, Target};
use super::{
    CmdResult, DbArgs, Failure, ScopeArg, emit, emit_text, fail, require_regular, strict_error,
};
use serde_json::Value;
use session_state::{FileWriteStep, Op, Scope, SessionState, Store, validate_plugin_id};
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

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
pub(crate) struct StateArgs {
    /// The session: a Pi JSONL file, or with a store a session id or a unique prefix of one
    #[arg(value_name = "SESSION")]
    session: PathBuf,
    /// The plugin id: lowercase letters, digits, '-' and '.'
    #[arg(long, value_name = "ID")]
    plugin: String,
    /// Which value: `branch`, the plugin's value along the current branch (forks inherit
    /// it, siblings are isolated), or `session`, one value over the whole file in append
    /// order
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
    target: StateArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct WriteArgs {
    #[command(flatten)]
    target: StateArgs,
    /// The new value as JSON, any JSON text (`--value -1` works) [default: read from stdin]
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    value: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PatchArgs {
    #[command(flatten)]
    target: StateArgs,
    /// An RFC 7396 JSON Merge Patch, any JSON text (`--merge -5` works; an absent value
    /// patches {})
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    merge: String,
}

#[derive(Debug, clap::Args)]
pub(crate) struct DropArgs {
    #[command(flatten)]
    target: StateArgs,
}

/// The library's refusal, word for word, after the option it names.
fn check_plugin(t: &StateArgs) -> Result<(), Failure> {
    validate_plugin_id(&t.plugin).map_err(|e| match e {
        session_state::Error::InvalidOption { detail, .. } => {
            fail(format_args!("--plugin: {detail}"))
        }
        e => fail(format_args!("--plugin: {e}")),
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

pub(crate) fn read(args: ReadArgs, sessions: &Sessions) -> CmdResult {
    let t = args.target;
    check_plugin(&t)?;
    let db = t.db.resolve()?;
    let at = t.at.as_deref();
    let value = match sessions.target(&t.session)? {
        Target::File(file) => {
            require_regular(&file)?;
            state_key(&t, db)?
                .read_file_value(&file, at)
                .map_err(fail)?
        }
        Target::Stored(stored) => state_key(&t, db)?
            .read_stored_value(&stored.session(), at)
            .map_err(fail)?,
    };
    match value {
        Some(v) => {
            emit(&format!("{}\n", session_state::json::to_string(&v)))?;
            Ok(0)
        }
        None => Ok(1),
    }
}

pub(crate) fn write(args: WriteArgs, sessions: &Sessions) -> CmdResult {
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
    apply(&args.target, Op::Set(value), sessions)
}

pub(crate) fn patch(args: PatchArgs, sessions: &Sessions) -> CmdResult {
    check_plugin(&args.target)?;
    let merge = parse_json(&args.merge, "--merge")?;
    apply(&args.target, Op::Patch(merge), sessions)
}

pub(crate) fn drop(args: DropArgs, sessions: &Sessions) -> CmdResult {
    check_plugin(&args.target)?;
    apply(&args.target, Op::Drop, sessions)
}

/// The plugin's state on the projection at `db`.
fn state_key(t: &StateArgs, db: PathBuf) -> Result<SessionState<Value>, Failure> {
    Store::at(db)
        .and_then(|store| store.state(&t.plugin, Scope::from(t.scope)))
        .map_err(fail)
}

/// A write, on a file or a stored session; prints the new entry's id.
fn apply(t: &StateArgs, op: Op, sessions: &Sessions) -> CmdResult {
    let db = t.db.resolve()?;
    let id = match sessions.target(&t.session)? {
        Target::File(file) => apply_file(t, &file, db, op)?,
        Target::Stored(stored) => apply_stored(t, &stored, db, op)?,
    };
    if let Some(id) = id {
        emit_text(&format!("{id}\n"))?;
    }
    Ok(0)
}

/// On a file: the library's file write ([`SessionState::apply_file`]), from the
/// projection's rows and the file's tail when they answer (no parse of the log: the cost
/// does not grow with the session), else through the opened log; its errors worded as the
/// other commands word them.
fn apply_file(t: &StateArgs, file: &Path, db: PathBuf, op: Op) -> Result<Option<String>, Failure> {
    require_regular(file)?;
    state_key(t, db)?.apply_file(file, t.at.as_deref(), op, |step, e| match step {
        FileWriteStep::Open => fail(strict_error(&e)),
        FileWriteStep::At => fail(format_args!("--at: {e}")),
        _ => fail(e),
    })
}

/// On a stored session: through the store, at its last entry or at `--at`.
fn apply_stored(
    t: &StateArgs,
    stored: &Stored,
    db: PathBuf,
    op: Op,
) -> Result<Option<String>, Failure> {
    let state = state_key(t, db)?;
    let session = stored.session();
    let at = t.at.as_deref();
    let changed = match op {
        Op::Set(value) => state.write_stored(&session, at, &value),
        Op::Patch(merge) => state.patch_stored(&session, at, &merge),
        Op::Drop => state.drop_stored(&session, at),
    };
    changed.map_err(|e| match (&e, at) {
        (session_state::Error::UnknownEntry { .. }, Some(_)) => fail(format_args!("--at: {e}")),
        _ => fail(e),
    })
}
