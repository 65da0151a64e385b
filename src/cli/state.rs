//! `read`, `write`, `patch`, `drop`, `history`: one plugin's state in one session, a file
//! or a stored session.
//!
//! On a file, `read` goes through the projection, so a cold read of an unchanged file does
//! not scan it. The writes are the library's write of an op ([`SessionState::apply`]) on
//! the file ([`On::File`]): decided from the projection's rows when they can, else through
//! the opened log with its leaf at `--at`, under the session's write lock; on a stored
//! session, the same on [`On::Stored`]. `history` folds the opened log
//! (`StateKey::history`).
//!
//! State versions: the command line has no schema, so it never migrates. `read` shows the
//! value as stored ([`Store::read_versioned`]), whatever version it was written under;
//! `--json` says which. A write is decided by a key at one version: `--version N` as
//! given, else the version the stored value was written under (1 where there is none), so
//! `patch`, `drop` and a `write` without `--version` keep it. A stored value of a newer
//! version than `--version` is refused by the library ([`StateError::NewerStateVersion`]),
//! nothing written.

use super::store::{Sessions, Stored, Target};
use super::{
    CmdResult, DbArgs, Failure, ScopeArg, emit, emit_json, emit_text, fail, is_refusal, open_log,
    require_regular, short_json, strict_error, term_safe,
};
use crate::{
    AppendError, Error, HistoryEntry, LogError, On, Op, OpenError, ReadMode, Scope, SessionState,
    StateError, StateKey, Store, StoredValue, state::validate_plugin_id,
};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

pub(crate) const READ_EXAMPLES: &str = "\
Examples:
  session-state read s.jsonl --plugin role
  session-state read s.jsonl --plugin role --at 1a2b3c4d
  session-state read s.jsonl --plugin counter --scope session --db /tmp/states.sqlite
  session-state read s.jsonl --plugin role --json

The value is printed as stored, whatever state version it was written under (the command
line has no migration). --json adds which: {\"value\": …, \"stateVersion\": N, \"entryId\":
\"<id of the event that set it>\"}; an absent value has no \"value\" (a written null is
\"value\": null), and \"entryId\" is null when no event set it.
Exit codes: 0 the value was printed; 1 absent (no output; with --json, the object without
\"value\"); 2 error (message on stderr).";

pub(crate) const WRITE_EXAMPLES: &str = "\
Examples:
  session-state write s.jsonl --plugin role --value '{\"name\":\"reviewer\"}'
  echo '[1,2,3]' | session-state write s.jsonl --plugin todo
  session-state write s.jsonl --plugin counter --value -1
  session-state write s.jsonl --plugin role --value '\"planner\"' --at 1a2b3c4d
      (a child of 1a2b3c4d: it extends that branch at a tip, forks anywhere else)
  session-state write s.jsonl --plugin role --value '{\"name\":\"reviewer\"}' --version 2

Prints the new entry's id alone on stdout, or nothing when the value was already equal (a
write at a new --version is always recorded). On a terminal, a hint on stderr shows how to
read the state there: `history --at <new id>` (the state at the --at entry itself does not
include the new entry, which is its child). Without --version the value keeps the state
version of the stored one (1 where there is none). A stored value written under a newer
version than --version is refused, as an extension at that version refuses it: nothing is
written.

The command line does not know an extension's `validate` (its schema or type guard lives
in the extension's code): it writes any JSON value, and the extension's next read refuses
one its `validate` rejects (StateValidationError). Check a value first with the extension
itself, for example in a test through @session-state/pi/testing.
Exit codes: 0 done; 2 error (invalid JSON, unknown entry, lock held by another process, a
newer stored version...).";

pub(crate) const PATCH_EXAMPLES: &str = "\
Examples:
  session-state patch s.jsonl --plugin role --merge '{\"model\":\"fast\"}'
  session-state patch s.jsonl --plugin role --merge '{\"model\":null}'   # removes `model`

Prints the new entry's id, or nothing when the patch changed nothing. The patch keeps the
state version of the stored value.
Exit codes: 0 done; 2 error.";

pub(crate) const DROP_EXAMPLES: &str = "\
Examples:
  session-state drop s.jsonl --plugin role
  session-state drop s.jsonl --plugin counter --scope session

Prints the new entry's id, or nothing when the value was already absent. The drop keeps
the state version of the stored value.
Exit codes: 0 done; 2 error.";

pub(crate) const HISTORY_EXAMPLES: &str = "\
Examples:
  session-state history s.jsonl --plugin role
  session-state history s.jsonl --plugin role --at 1a2b3c4d --json
  session-state history s.jsonl --plugin todo --scope session

One line per event of the plugin, oldest first: its entry id, its line in the file, the
op, the state version it was written under, and the value after it (as stored: the
command line has no migration). Branch scope: the events on the path from the root to the
leaf (the last entry, or --at); session scope: every event of the file in append order.
--json: {\"plugin\", \"scope\", \"leaf\", \"events\": [{\"entryId\", \"line\", \"op\",
\"stateVersion\", \"argument\", \"value\"}, …]}; a drop has no \"argument\", an absent
value no \"value\" (a written null is \"value\": null).
Exit codes: 0 events were listed; 1 the plugin has no events there (no output; with
--json, the document with no events); 2 error (message on stderr).";

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
    /// Print {"value": …, "stateVersion": N, "entryId": "<id>"}: the value with the state
    /// version it was written under and the event that set it
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct WriteArgs {
    #[command(flatten)]
    target: StateArgs,
    /// The new value as JSON, any JSON text (`--value -1` works) [default: read from stdin]
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    value: Option<String>,
    /// The state version to record the value under (1 or more), as given [default: the
    /// stored value's version, 1 where there is none]. A stored value of a newer version
    /// is refused: nothing is written
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    version: Option<u32>,
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

#[derive(Debug, clap::Args)]
pub(crate) struct HistoryArgs {
    /// The session: a Pi JSONL file, or with a store a session id or a unique prefix of one
    #[arg(value_name = "SESSION")]
    session: PathBuf,
    /// The plugin id: lowercase letters, digits, '-' and '.'
    #[arg(long, value_name = "ID")]
    plugin: String,
    /// Which events: `branch`, the plugin's events along the current branch (those a fork
    /// inherits; a sibling's are not on it), or `session`, every event of the file in
    /// append order
    #[arg(long, value_enum, default_value_t = ScopeArg::Branch)]
    scope: ScopeArg,
    /// Act as if the active leaf were this entry: the events on the path to it
    #[arg(long, value_name = "ENTRY")]
    at: Option<String>,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

/// The library's refusal, word for word, after the option it names.
fn check_plugin(t: &StateArgs) -> Result<(), Failure> {
    check_plugin_id(&t.plugin)
}

fn check_plugin_id(plugin: &str) -> Result<(), Failure> {
    validate_plugin_id(plugin).map_err(|e| match e {
        crate::Error::InvalidOption { detail, .. } => fail(format_args!("--plugin: {detail}")),
        e => fail(format_args!("--plugin: {e}")),
    })
}

fn parse_json(text: &str, source: &str) -> Result<Value, Failure> {
    use crate::json::{JsonError, from_str_exact};
    from_str_exact(text).map_err(|e| match e {
        JsonError::InexactNumber { .. } => fail(format_args!("{source}: {e}")),
        _ => fail(format_args!(
            "{source} is not valid JSON: {e} (strings need quotes: '\"text\"')"
        )),
    })
}

/// The stored value of `t`'s plugin in `target`, as if the leaf were `--at`: as stored
/// (not migrated), with the state version it was written under and the entry of the
/// event that set it (`read --json` prints it as it serializes).
fn read_versioned(t: &StateArgs, store: &Store, target: &Target) -> crate::Result<StoredValue> {
    let (plugin, scope, at) = (t.plugin.as_str(), Scope::from(t.scope), t.at.as_deref());
    match target {
        Target::File(file) => store.read_versioned(file, plugin, scope, at),
        Target::Stored(stored) => store.read_stored_versioned(&stored.session(), plugin, scope, at),
    }
}

pub(crate) fn read(args: ReadArgs, sessions: &Sessions) -> CmdResult {
    let t = args.target;
    check_plugin(&t)?;
    let store = open_store(&t)?;
    let target = target_opening(&store, sessions, &t.session)?;
    if let Target::File(file) = &target {
        require_regular(file)?;
    }
    let read = read_versioned(&t, &store, &target).map_err(fail)?;
    let present = read.value.is_some();
    if args.json {
        emit_json(&read)?;
    } else if let Some(v) = &read.value {
        emit(&format!("{}\n", crate::json::to_string(v)))?;
    }
    Ok(if present { 0 } else { 1 })
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
    apply(&args.target, Op::Set(value), args.version, sessions)
}

pub(crate) fn patch(args: PatchArgs, sessions: &Sessions) -> CmdResult {
    check_plugin(&args.target)?;
    let merge = parse_json(&args.merge, "--merge")?;
    apply(&args.target, Op::Patch(merge), None, sessions)
}

pub(crate) fn drop(args: DropArgs, sessions: &Sessions) -> CmdResult {
    check_plugin(&args.target)?;
    apply(&args.target, Op::Drop, None, sessions)
}

/// The projection database `t` names.
fn open_store(t: &StateArgs) -> Result<Store, Failure> {
    Store::at(t.db.resolve()?).map_err(fail)
}

/// What `arg` names ([`Sessions::target`]); for a session in a store, with the projection
/// opened meanwhile on a thread of its own. Connecting to the store and naming the session
/// wait on the network, while opening the projection (SQLite, its schema, its WAL) is most
/// of a one-command process's own work: done side by side, the command takes the longer
/// of the two, not their sum. The opening's error is left to its first use, which
/// reports it as before (a failed opening leaves nothing open).
fn target_opening(store: &Store, sessions: &Sessions, arg: &Path) -> Result<Target, Failure> {
    if matches!(sessions, Sessions::Files) {
        return sessions.target(arg);
    }
    std::thread::scope(|s| {
        let opening = s.spawn(|| store.connect());
        let target = sessions.target(arg);
        match opening.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the projection did not open; its first use says why");
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
        target
    })
}

/// The plugin's state at state version `version`. The command line has no schema: a
/// value written under an older version is taken as it is (a `set` replaces it anyway).
fn state_at(t: &StateArgs, store: &Store, version: u32) -> Result<SessionState<Value>, Failure> {
    StateKey::new(&t.plugin, Scope::from(t.scope))
        .and_then(|key| key.versioned(version, |v, _| Ok(v)))
        .map(|key| store.state_of(&key))
        .map_err(fail)
}

/// A write, on a file or a stored session; prints the new entry's id. `version`: the
/// state version to record (`write --version`), else the stored value's.
fn apply(t: &StateArgs, op: Op, version: Option<u32>, sessions: &Sessions) -> CmdResult {
    let store = open_store(t)?;
    let target = target_opening(&store, sessions, &t.session)?;
    if let Target::File(file) = &target {
        require_regular(file)?;
    }
    let kept = match version {
        Some(n) => n,
        // Decided again under the write lock: a value written meanwhile under a newer
        // version is refused, one under an older version is replaced as a whole.
        None => {
            read_versioned(t, &store, &target)
                .map_err(|e| at_error(t, e))?
                .state_version
        }
    };
    let state = state_at(t, &store, kept)?;
    let id = match &target {
        Target::File(file) => apply_file(t, &state, file, op, version)?,
        Target::Stored(stored) => apply_stored(t, &state, stored, op, version)?,
    };
    if let Some(id) = id {
        emit_text(&format!("{id}\n"))?;
        if std::io::stderr().is_terminal() {
            eprintln!("{}", term_safe(&history_hint(t, &id)));
        }
    }
    Ok(0)
}

/// The hint a write shows on a terminal: the command that reads the state through the new
/// entry `id` (stdout keeps the id alone, for scripts).
fn history_hint(t: &StateArgs, id: &str) -> String {
    let scope = match Scope::from(t.scope) {
        Scope::Session => " --scope session",
        Scope::Branch => "",
    };
    let mut hint = format!(
        "appended {id}; its state: session-state history {} --plugin {}{scope} --at {id}",
        t.session.display(),
        t.plugin
    );
    if let Some(at) = &t.at {
        hint.push_str(&format!(
            " (--at {at} shows the state before it: the new entry is a child of {at})"
        ));
    }
    hint
}

/// An error naming `--at` when it is the unknown entry.
fn at_error(t: &StateArgs, e: Error) -> Failure {
    match (&e, &t.at) {
        (Error::Log(LogError::UnknownEntry(_)), Some(_)) => fail(format_args!("--at: {e}")),
        _ => fail(e),
    }
}

/// A write's error. One refused because the stored value is of a newer version than
/// `--version` (`version`) is the library's message, then what to pass instead.
fn write_error(e: Error, version: Option<u32>) -> Failure {
    match (&e, version) {
        (Error::State(StateError::NewerStateVersion { stored, .. }), Some(n)) => {
            fail(format_args!(
                "{e}\n(--version {n} is older than the stored value's stateVersion {stored}: nothing \
             was written; pass --version {stored} or more, or leave --version out to keep \
             {stored})"
            ))
        }
        _ => fail(e),
    }
}

/// On a file: the library's write ([`SessionState::apply`] on [`On::File`]), from the
/// projection's rows and the file's tail when they answer (no parse of the log: the cost
/// does not grow with the session), else through the opened log; its errors worded as the
/// other commands word them.
fn apply_file(
    t: &StateArgs,
    state: &SessionState<Value>,
    file: &Path,
    op: Op,
    version: Option<u32>,
) -> Result<Option<String>, Failure> {
    state
        .apply(On::file(file, t.at.as_deref()), op)
        .map_err(|e| match &e {
            // The strict reader's refusal of the file (the rows could not answer and the
            // log did not open), with a pointer to `verify`.
            Error::Log(
                LogError::Open(OpenError::Invalid(_) | OpenError::NotARegularFile { .. })
                | LogError::Append(
                    AppendError::Invalid(_)
                    | AppendError::NotARegularFile { .. }
                    | AppendError::TrailingGarbage { .. }
                    | AppendError::MigrationRefused { .. },
                ),
            ) => fail(strict_error(&e)),
            _ => applied_error(t, e, version),
        })
}

/// On a stored session: through the store, at its last entry or at `--at`.
fn apply_stored(
    t: &StateArgs,
    state: &SessionState<Value>,
    stored: &Stored,
    op: Op,
    version: Option<u32>,
) -> Result<Option<String>, Failure> {
    let session = stored.session();
    state
        .apply(On::stored(&session, t.at.as_deref()), op)
        .map_err(|e| applied_error(t, e, version))
}

/// A write's error: `--at` named when it is the unknown entry, else [`write_error`].
fn applied_error(t: &StateArgs, e: Error, version: Option<u32>) -> Failure {
    match (&e, &t.at) {
        (Error::Log(LogError::UnknownEntry(_)), Some(_)) => fail(format_args!("--at: {e}")),
        _ => write_error(e, version),
    }
}

pub(crate) fn history(args: HistoryArgs, sessions: &Sessions) -> CmdResult {
    check_plugin_id(&args.plugin)?;
    let mut log = match sessions.target(&args.session)? {
        Target::File(file) => open_log(&file)?,
        Target::Stored(stored) => stored.session().read_log(ReadMode::Strict).map_err(|e| {
            if is_refusal(&e) {
                fail(strict_error(&e))
            } else {
                fail(e)
            }
        })?,
    };
    if let Some(at) = &args.at {
        log.navigate(at).map_err(fail)?;
    }
    let scope = Scope::from(args.scope);
    // Folded from the opened log, in memory: no database is opened or created.
    let events = StateKey::<Value>::new(&args.plugin, scope)
        .and_then(|key| key.history(&log))
        .map_err(fail)?;
    let found = !events.is_empty();
    if args.json {
        emit_json(&HistoryDoc {
            plugin: &args.plugin,
            scope: scope.to_string(),
            leaf: log.leaf_id(),
            events,
        })?;
    } else if found {
        emit_text(&history_text(&events))?;
    }
    Ok(if found { 0 } else { 1 })
}

/// `history --json`'s document: the plugin, the scope, the leaf the branch ends at, and
/// each event as it serializes ([`HistoryEntry`]).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct HistoryDoc<'a> {
    plugin: &'a str,
    scope: String,
    leaf: Option<&'a str>,
    events: Vec<HistoryEntry>,
}

/// `history`'s text: a table of the events, oldest first, with the value after each.
fn history_text(events: &[HistoryEntry]) -> String {
    let id_width = events
        .iter()
        .map(|e| e.entry_id.chars().count())
        .chain([5])
        .max()
        .unwrap_or(5);
    let line_width = events
        .iter()
        .map(|e| e.line.to_string().len())
        .chain([4])
        .max()
        .unwrap_or(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<id_width$}  {:>line_width$}  {:<5}  {:>7}  VALUE AFTER",
        "ENTRY", "LINE", "OP", "VERSION"
    );
    for e in events {
        let value = match &e.value {
            Some(v) => short_json(v, 200),
            None => "(absent)".into(),
        };
        let _ = writeln!(
            out,
            "{:<id_width$}  {:>line_width$}  {:<5}  {:>7}  {value}",
            e.entry_id, e.line, e.op, e.state_version
        );
    }
    out
}
