//! Every command with a store (`--store URL` or `$SESSION_STATE_STORE`, SPEC §7): the
//! session is named by its id and kept by a §8 backend.
//!
//! `read`, `write`, `patch` and `drop` go through [`SessionState`]'s backend calls
//! (`read_stored`, `write_stored`, …), which read the store's lines through the
//! projection. `list` lists the store's headers. `tree`, `replay`, `status`,
//! `force-refresh` and `verify` run as on a file, on a temporary export of the stored
//! session that is removed when the command ends (the library reads a stored session as
//! a log without it: `StoredSession::read_log`).

use super::{
    Cli, CmdResult, DbArgs, Failure, ScopeArg, emit, emit_json, emit_text, fail, run_command,
};
use clap::Parser;
use serde::Serialize;
use serde_json::Value;
use session_state::{RedactedUrl, Scope, SessionState, SessionStore, Store, StoredSession};
use std::ffi::OsString;
use std::io::{IsTerminal, Read};

/// The environment variable that names the store when `--store` is not given.
pub(crate) const STORE_ENV: &str = "SESSION_STATE_STORE";

/// Opens the store a URL names; the second value is the URL redacted (for messages and
/// the cache key). An error never shows the password.
pub(crate) fn open_url(url: &str) -> Result<(Box<dyn SessionStore>, String), Failure> {
    let redacted = RedactedUrl::new(url).redacted();
    let store =
        session_state::open_store_url(url).map_err(|e| fail(format_args!("--store: {e}")))?;
    Ok((store, redacted))
}

/// The grammar of the commands with a store: as without one, with a session id in place
/// of the file.
#[derive(Debug, Parser)]
#[command(name = "session-state")]
struct StoreCli {
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(Debug, clap::Subcommand)]
enum StoreCommand {
    Read(Target),
    Write(WriteArgs),
    Patch(PatchArgs),
    Drop(Target),
    List(ListArgs),
    Tree(Pass),
    Replay(Pass),
    Status(Pass),
    ForceRefresh(Pass),
    Verify(Pass),
}

#[derive(Debug, clap::Args)]
struct Target {
    /// The session id
    session: String,
    #[arg(long, value_name = "ID")]
    plugin: String,
    #[arg(long, value_enum, default_value_t = ScopeArg::Branch)]
    scope: ScopeArg,
    #[arg(long, value_name = "ENTRY")]
    at: Option<String>,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, clap::Args)]
struct WriteArgs {
    #[command(flatten)]
    target: Target,
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    value: Option<String>,
}

#[derive(Debug, clap::Args)]
struct PatchArgs {
    #[command(flatten)]
    target: Target,
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    merge: String,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    #[arg(long)]
    json: bool,
}

/// A command run on the local mirror: its arguments as given.
#[derive(Debug, clap::Args)]
struct Pass {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

/// Only the database options, picked out of a passed-through command's arguments.
#[derive(Debug, Parser)]
struct DbOnly {
    #[command(flatten)]
    db: DbArgs,
}

/// Runs the command line with the store at `url`.
pub(crate) fn run(url: &str) -> CmdResult {
    let cli = StoreCli::try_parse_from(std::env::args_os()).map_err(|e| fail(e.to_string()))?;
    let (backend, key) = open_url(url)?;
    let backend = &*backend;
    match cli.command {
        StoreCommand::Read(t) => read(backend, &key, &t),
        StoreCommand::Write(a) => {
            let value = match &a.value {
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
            change(backend, &key, &a.target, &|s, session, at| {
                s.write_stored(session, at, &value)
            })
        }
        StoreCommand::Patch(a) => {
            let merge = parse_json(&a.merge, "--merge")?;
            change(backend, &key, &a.target, &|s, session, at| {
                s.patch_stored(session, at, &merge)
            })
        }
        StoreCommand::Drop(t) => change(backend, &key, &t, &|s, session, at| {
            s.drop_stored(session, at)
        }),
        StoreCommand::List(a) => list(backend, &a),
        StoreCommand::Tree(p) => pass("tree", backend, &key, p),
        StoreCommand::Replay(p) => pass("replay", backend, &key, p),
        StoreCommand::Status(p) => pass("status", backend, &key, p),
        StoreCommand::ForceRefresh(p) => pass("force-refresh", backend, &key, p),
        StoreCommand::Verify(p) => pass("verify", backend, &key, p),
    }
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

fn state_of(t: &Target) -> Result<SessionState<Value>, Failure> {
    session_state::validate_plugin_id(&t.plugin).map_err(|_| {
        fail(format_args!(
            "--plugin {:?}: not a valid plugin id; use a non-empty name of lowercase letters, \
             digits, '-' and '.' (for example \"role\" or \"my-ext.todo\")",
            t.plugin
        ))
    })?;
    let db = t.db.resolve()?;
    Store::at(db)
        .and_then(|store| store.state(&t.plugin, Scope::from(t.scope)))
        .map_err(fail)
}

fn read(backend: &dyn SessionStore, key: &str, t: &Target) -> CmdResult {
    let state = state_of(t)?;
    let session = StoredSession::new(backend, key, &t.session);
    match state
        .read_stored_value(&session, t.at.as_deref())
        .map_err(fail)?
    {
        Some(v) => {
            emit(&format!("{}\n", session_state::json::to_string(&v)))?;
            Ok(0)
        }
        None => Ok(1),
    }
}

type Change<'a> = dyn Fn(
        &SessionState<Value>,
        &StoredSession<'_>,
        Option<&str>,
    ) -> session_state::Result<Option<String>>
    + 'a;

fn change(backend: &dyn SessionStore, key: &str, t: &Target, f: &Change<'_>) -> CmdResult {
    let state = state_of(t)?;
    let session = StoredSession::new(backend, key, &t.session);
    let at = t.at.as_deref();
    let id = f(&state, &session, at).map_err(|e| match (&e, at) {
        (session_state::Error::UnknownEntry { .. }, Some(_)) => fail(format_args!("--at: {e}")),
        _ => fail(e),
    })?;
    if let Some(id) = id {
        emit(&format!("{id}\n"))?;
    }
    Ok(0)
}

#[derive(Serialize)]
struct Row {
    id: String,
    cwd: Option<String>,
    timestamp: Option<String>,
    version: u32,
    parent_session: Option<String>,
}

fn list(backend: &dyn SessionStore, a: &ListArgs) -> CmdResult {
    let headers = session_state::list_sessions(backend).map_err(fail)?;
    let rows: Vec<Row> = headers
        .iter()
        .map(|h| Row {
            id: h.id().to_owned(),
            cwd: h.cwd().map(str::to_owned),
            timestamp: h.timestamp().map(str::to_owned),
            version: h.version(),
            parent_session: h.parent_session().map(str::to_owned),
        })
        .collect();
    if a.json {
        emit_json(&serde_json::json!({ "sessions": rows }))?;
        return Ok(0);
    }
    if rows.is_empty() {
        emit_text("no sessions in this store\n")?;
        return Ok(0);
    }
    let mut text = String::new();
    for r in &rows {
        text.push_str(&format!(
            "{}  {}  {}\n",
            r.id,
            r.timestamp.as_deref().unwrap_or("-"),
            r.cwd.as_deref().unwrap_or("-")
        ));
    }
    emit_text(&text)?;
    Ok(0)
}

/// Options of the passed-through commands that take a value.
const VALUED: [&str; 2] = ["--db", "--cwd"];

/// Runs a file command on the local mirror of the session its arguments name.
fn pass(command: &str, backend: &dyn SessionStore, key: &str, p: Pass) -> CmdResult {
    // The arguments without the store and verbosity (already handled).
    let mut args: Vec<String> = Vec::new();
    let mut it = p.args.into_iter();
    while let Some(a) = it.next() {
        if a == "--store" {
            it.next();
        } else if !(a.starts_with("--store=")
            || a == "--verbose"
            || (a.starts_with('-') && !a.starts_with("--") && a[1..].chars().all(|c| c == 'v')))
        {
            args.push(a);
        }
    }
    let mut db_args: Vec<String> = vec!["db".into()];
    let mut session: Option<usize> = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if VALUED.contains(&a.as_str()) {
            db_args.extend(args[i..(i + 2).min(args.len())].iter().cloned());
            i += 2;
            continue;
        }
        if VALUED.iter().any(|v| a.starts_with(&format!("{v}="))) || a == "--trust-project" {
            db_args.push(a.clone());
        } else if !a.starts_with('-') && session.is_none() {
            session = Some(i);
        }
        i += 1;
    }
    let Some(at) = session else {
        return Err(fail(format_args!(
            "{command}: name the session (its id in the store)"
        )));
    };
    let db = DbOnly::try_parse_from(&db_args)
        .map_err(|e| fail(e.to_string()))?
        .db
        .resolve()?;
    let _ = (db, key);
    let id = args[at].clone();
    let export = TempExport::new(backend, &id)?;
    let mut argv: Vec<OsString> = vec!["session-state".into(), command.into()];
    for (j, a) in args.iter().enumerate() {
        if j == at {
            argv.push(export.file.clone().into_os_string());
        } else {
            argv.push(a.into());
        }
    }
    let cli = Cli::try_parse_from(argv).map_err(|e| fail(e.to_string()))?;
    run_command(cli.command)
}

/// The stored session exported to a file in a new private temporary directory, both
/// removed when dropped (they are ours: created here under a fresh random name).
struct TempExport {
    dir: std::path::PathBuf,
    file: std::path::PathBuf,
}

impl TempExport {
    fn new(backend: &dyn SessionStore, id: &str) -> Result<TempExport, Failure> {
        let dir =
            std::env::temp_dir().join(format!("session-state-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir)
            .map_err(|e| fail(format_args!("creating {}: {e}", dir.display())))?;
        let export = TempExport {
            file: dir.join("session.jsonl"),
            dir,
        };
        let file = std::fs::File::create_new(&export.file)
            .map_err(|e| fail(format_args!("creating {}: {e}", export.file.display())))?;
        let mut out = std::io::BufWriter::new(file);
        session_state::export_session(backend, id, &mut out).map_err(fail)?;
        std::io::Write::flush(&mut out)
            .map_err(|e| fail(format_args!("writing {}: {e}", export.file.display())))?;
        Ok(export)
    }
}

impl Drop for TempExport {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}
