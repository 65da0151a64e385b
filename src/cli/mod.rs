//! The `session-state` command line (`docs/cli.md`), with the `cli` feature (on by
//! default): [`main`] is the whole of it. Each subcommand lives in its own file and is a
//! thin layer over the library; this file holds the argument grammar,
//! the options shared by several commands, and the exit-code convention.
//!
//! One grammar, parsed once (as jj's global `-R`): `--store` is a global option (or
//! `$SESSION_STATE_STORE`), and every command's one positional is resolved after parsing
//! into a `store::Target`: a session file, or a session of a store (`store.rs`).
//!
//! Exit codes: 0 success; 1 a negative answer (`read`: absent; `history`: no events;
//! `verify`: the strict reader refuses the file; `force-refresh`: the lock was left alone; `prune`: not
//! confirmed, nothing removed; `replay`: some values or files could not be read); 2 an
//! error (bad arguments included).

mod import;
mod list;
mod prune;
mod replay;
mod state;
mod status;
mod store;
mod tree;
mod verify;

use crate::persistence::{ListProblem, session_files};
use crate::settings::{LocationInputs, ResolvedLocation};
use crate::{
    Error, InvalidLog, LogOptions, OpenError, ReadMode, Scope, SessionLog, StoredSession,
    settings::ProjectTrust,
};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::fmt::Display;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A command that could not do its job: printed as `error: …` on stderr.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: u8,
    pub message: String,
}

/// Exit code of a command that ran (0 or 1), or why it failed.
pub(crate) type CmdResult = Result<u8, Failure>;

/// An error that means "could not run" (exit 2).
pub(crate) fn fail(message: impl Display) -> Failure {
    Failure {
        code: 2,
        message: message.to_string(),
    }
}

const MAIN_EXAMPLES: &str = "\
Examples:
  session-state replay fixtures/example.jsonl
  session-state write s.jsonl --plugin role --value '{\"name\":\"reviewer\"}'
  session-state read s.jsonl --plugin role
  session-state history s.jsonl --plugin role
  session-state tree s.jsonl
  session-state verify s.jsonl --json
  session-state list
  session-state import s.jsonl --store sqlite:///srv/sessions.sqlite
  session-state read 0195f1d0 --plugin role --store sqlite:///srv/sessions.sqlite

Exit codes: 0 success; 1 a negative answer (read: absent; history: no events; verify:
refused by the strict reader; force-refresh: lock left alone; prune: not confirmed,
nothing removed; replay: something could not be read); 2 error.

<SESSION> is a Pi JSONL session file. With a store (--store URL, or $SESSION_STATE_STORE
when --store is not given) it is a session id in that store, or a unique prefix of one;
--store none means files even when $SESSION_STATE_STORE is set. Store URLs:
sqlite:///abs/path/sessions.sqlite, postgres://user@host:port/db (or postgresql://…; TLS
with ?sslmode=require or ?sslmode=verify-full&sslrootcert=/path/ca.pem).

The projection database is --db, else `sessionState.databasePath` in the project's
.pi/settings.json (when trusted) or in $PI_CODING_AGENT_DIR/settings.json, else
$PI_CODING_AGENT_DIR/sessions/states.sqlite ($PI_CODING_AGENT_DIR defaults to ~/.pi/agent).

Each command's own options, outputs and exit codes: session-state <command> --help. The
rest (stores, settings, the file format) is in the session-state crate's documentation.";

/// Durable, branch-aware state stored inside Pi coding agent session logs: read, write,
/// inspect and verify it.
#[derive(Debug, Parser)]
#[command(name = "session-state", version, after_help = MAIN_EXAMPLES)]
pub(crate) struct Cli {
    /// More diagnostics on stderr: -v also reports what the library does (info), -vv
    /// debugging detail. Without it only warnings (lock takeovers, rebuilds) are shown
    #[arg(
        short,
        long,
        action = clap::ArgAction::Count,
        global = true,
        help_heading = GLOBAL
    )]
    verbose: u8,
    /// Where the sessions are: a store URL (sqlite:///abs/path, postgres://…,
    /// postgresql://…), or `none` for Pi JSONL files (the default). Each command's --help
    /// says what it means there
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        value_name = "URL",
        env = store::STORE_ENV,
        hide_env_values = true
    )]
    store: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// The heading of the options every command takes (`-v`, `--store`), apart from each
/// command's own.
const GLOBAL: &str = "Global options";

/// `--store` in each command's own terms. The option is global (one definition, parsed
/// once, allowed anywhere on the line); each command gets a copy with its own text, which
/// clap then does not replace with the top-level one.
fn store_help(command: &str) -> &'static str {
    match command {
        "read" | "write" | "patch" | "drop" | "history" | "tree" | "status" | "force-refresh"
        | "verify" => {
            "The store that holds <SESSION>: a store URL (sqlite:///abs/path, postgres://…, \
             postgresql://…); <SESSION> is then a session id in it, or a unique prefix of one. \
             `none` (the default): <SESSION> is a Pi JSONL file"
        }
        "replay" => {
            "The store that holds the session: a store URL (sqlite:///abs/path, \
             postgres://…, postgresql://…); <SESSION|DIR> is then a session id in it, or a \
             unique prefix of one. `none` (the default): a Pi JSONL file or a directory"
        }
        "list" => {
            "List the sessions of this store instead of a folder's files: a store URL \
             (sqlite:///abs/path, postgres://…, postgresql://…); there is then no [DIR]. \
             `none` (the default): the *.jsonl files below [DIR]"
        }
        "import" => {
            "The store to copy the file into (required: here or $SESSION_STATE_STORE): a store \
             URL (sqlite:///abs/path, postgres://…, postgresql://…)"
        }
        "export" => {
            "The store that holds <SESSION> (required: here or $SESSION_STATE_STORE): a store \
             URL (sqlite:///abs/path, postgres://…, postgresql://…)"
        }
        "prune" => {
            "Not used by prune: it works on the projection database, whatever the sessions \
             are kept in"
        }
        _ => "Where the sessions are: a store URL, or `none` for Pi JSONL files (the default)",
    }
}

/// The grammar: [`Cli`], with `--store` described per command ([`store_help`]).
fn command() -> clap::Command {
    let cli = Cli::command();
    let Some(store) = cli.get_arguments().find(|a| a.get_id() == "store").cloned() else {
        return cli;
    };
    cli.mut_subcommands(|sub| {
        let help = store_help(sub.get_name());
        sub.arg(store.clone().help(help))
    })
}

/// Sends the library's `tracing` events to stderr: warnings by default, `-v` info, `-vv`
/// debug, `-vvv` trace. One line each, `warning: …` style, escaped like every message.
fn install_diagnostics(verbose: u8) {
    use tracing_subscriber::filter::LevelFilter;
    let level = match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let installed = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .with_target(verbose >= 2)
        .try_init();
    if let Err(e) = installed {
        tracing::debug!(error = %e, "diagnostics not installed: the subscriber already set gets the events");
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print a plugin's value as one line of JSON (exit 1, no output, when absent)
    #[command(after_help = state::READ_EXAMPLES)]
    Read(state::ReadArgs),
    /// Set a plugin's value (from --value or stdin); prints the new entry id
    #[command(after_help = state::WRITE_EXAMPLES)]
    Write(state::WriteArgs),
    /// Apply an RFC 7396 JSON Merge Patch to a plugin's value; prints the new entry id
    #[command(after_help = state::PATCH_EXAMPLES)]
    Patch(state::PatchArgs),
    /// Make a plugin's value absent; prints the new entry id
    #[command(after_help = state::DROP_EXAMPLES)]
    Drop(state::DropArgs),
    /// A plugin's events along the branch: entry, op, state version, the value after each
    #[command(after_help = state::HISTORY_EXAMPLES)]
    History(state::HistoryArgs),
    /// The state of every plugin (and every extension's custom entries) at every branch tip
    #[command(after_help = replay::EXAMPLES)]
    Replay(replay::ReplayArgs),
    /// Draw the session tree: branches, forks, state events, the leaf
    #[command(after_help = tree::EXAMPLES)]
    Tree(tree::TreeArgs),
    /// The projection database, the write lock's holder and the events per plugin
    #[command(after_help = status::STATUS_EXAMPLES)]
    Status(status::StatusArgs),
    /// Clear the session's lock row and cached rows, then re-read the file
    #[command(after_help = status::FORCE_REFRESH_EXAMPLES)]
    ForceRefresh(status::ForceRefreshArgs),
    /// Integrity report: 0 readable, 1 refused by the strict reader, 2 could not run
    #[command(after_help = verify::EXAMPLES)]
    Verify(verify::VerifyArgs),
    /// Sessions in a directory, from their header lines only
    #[command(after_help = list::EXAMPLES)]
    List(list::ListArgs),
    /// Copy a Pi session file into a store (--store); prints its session id
    #[command(after_help = import::IMPORT_EXAMPLES)]
    Import(import::ImportArgs),
    /// Write a stored session (--store) back out as a Pi JSONL file
    #[command(after_help = import::EXPORT_EXAMPLES)]
    Export(import::ExportArgs),
    /// Remove the projection's rows of sessions whose file no longer exists
    #[command(after_help = prune::EXAMPLES)]
    Prune(prune::PruneArgs),
}

/// `--scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ScopeArg {
    /// The value along the current branch (the default): a fork inherits it, sibling
    /// branches do not see each other's
    Branch,
    /// One value for the whole session: every write in the file, in append order, whatever
    /// its branch
    Session,
}

impl From<ScopeArg> for Scope {
    fn from(s: ScopeArg) -> Scope {
        match s {
            ScopeArg::Branch => Scope::Branch,
            ScopeArg::Session => Scope::Session,
        }
    }
}

/// Where the projection database is (`docs/settings.md`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct DbArgs {
    /// The projection database file (an absolute path). Default: from the settings files,
    /// else $PI_CODING_AGENT_DIR/sessions/states.sqlite
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// The project folder whose .pi/settings.json may choose the database [default: the
    /// current directory]
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Trust the project: let its .pi/settings.json choose the database. Without it, Pi's
    /// saved trust decisions ($PI_CODING_AGENT_DIR/trust.json) decide
    #[arg(long)]
    trust_project: bool,
}

impl DbArgs {
    /// The database path; settings diagnostics go to stderr, once.
    pub(crate) fn resolve(&self) -> Result<PathBuf, Failure> {
        if let Some(p) = &self.db {
            // The library's one rule for an explicit database path.
            return ResolvedLocation::explicit(p.clone())
                .map(|location| location.path)
                .map_err(|e| fail(format_args!("--db: {e}")));
        }
        let cwd = match &self.cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir()
                .map_err(|e| fail(format_args!("reading the current directory: {e}")))?,
        };
        let trust = if self.trust_project {
            ProjectTrust::Trusted
        } else {
            ProjectTrust::FromPiDecisions
        };
        let location = LocationInputs::from_env(cwd, trust)
            .and_then(|i| i.resolve())
            .map_err(|e| fail(format_args!("locating the projection database: {e}")))?;
        for d in &location.diagnostics {
            warn(d);
        }
        Ok(location.path)
    }
}

/// Opens a session file with the strict reader; an error names the file and says how to
/// look closer.
pub(crate) fn open_log(file: &Path) -> Result<SessionLog, Failure> {
    require_regular(file)?;
    SessionLog::open(file).map_err(|e| fail(strict_error(&e.into())))
}

/// The strict reader's error, with a pointer to `verify` when the file itself is bad.
pub(crate) fn strict_error(e: &Error) -> String {
    match e {
        e if e.is_log_io() => e.to_string(),
        _ => {
            let text = e.to_string();
            if text.contains("session-state verify") {
                text
            } else {
                format!(
                    "{text}\n(run `session-state verify --salvage` on the file for a full report)"
                )
            }
        }
    }
}

/// Opens a session file strictly, else in salvage mode (for commands that only need the
/// header and a best-effort view). The second value is the strict error, if any.
pub(crate) fn open_log_lenient(file: &Path) -> Result<(SessionLog, Option<String>), Failure> {
    require_regular(file)?;
    match SessionLog::open(file).map_err(Error::from) {
        Ok(log) => Ok((log, None)),
        Err(e) if e.is_log_io() => Err(fail(e)),
        Err(strict) => match LogOptions::new().mode(ReadMode::Salvage).open(file) {
            Ok(log) => Ok((log, Some(strict.to_string()))),
            Err(salvage) => {
                tracing::debug!(error = %salvage, file = %file.display(), "the salvage reader refused it too; the strict reader's error is shown");
                Err(fail(strict_error(&strict)))
            }
        },
    }
}

/// Whether an error is the log's reader refusing what it read (a salvage read may then
/// keep part of it), not a failure to read at all (I/O, a store that failed).
pub(crate) fn is_refusal(e: &Error) -> bool {
    !(e.is_log_io() || matches!(e, Error::Store(_) | Error::StoreUnavailable { .. }))
}

/// [`open_log_lenient`] on a stored session, read from the store's lines (no local copy):
/// errors and findings name it `<store>#<session id>` ([`StoredSession::label`]).
pub(crate) fn open_stored_lenient(
    session: &StoredSession<'_>,
) -> Result<(SessionLog, Option<String>), Failure> {
    match session.read_log(ReadMode::Strict) {
        Ok(log) => Ok((log, None)),
        Err(e) if !is_refusal(&e) => Err(fail(e)),
        Err(strict) => match session.read_log(ReadMode::Salvage) {
            Ok(log) => Ok((log, Some(strict.to_string()))),
            Err(_) => Err(fail(strict_error(&strict))),
        },
    }
}

/// Whether a character must not reach a terminal raw: C0 controls except the newline, DEL,
/// C1 controls, and the bidirectional overrides and isolates (which reorder what follows).
fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text for a terminal: every character a session file could use to drive it (escape
/// sequences, cursor moves, title changes, bidi reordering) is written as `\uXXXX`, the
/// JSON escape, so the output stays readable and a JSON text stays the same JSON value.
/// Newlines are kept. Used for every human output and every message on stderr.
pub(crate) fn term_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Human output on stdout, through [`term_safe`].
pub(crate) fn emit_text(text: &str) -> Result<(), Failure> {
    emit(&term_safe(text))
}

/// A warning on stderr, through [`term_safe`].
pub(crate) fn warn(message: impl Display) {
    eprintln!("warning: {}", term_safe(&message.to_string()));
}

/// Writes command output to stdout as is (JSON output, already escaped by serde). A
/// closed pipe (`| head`) ends the output quietly.
pub(crate) fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(fail(format_args!("writing to stdout: {e}"))),
    }
}

/// A report as pretty JSON plus a newline, printed by the library's lossless printer
/// (`serde_json::to_string` would print lone surrogates and numbers differently).
pub(crate) fn emit_json(report: &impl serde::Serialize) -> Result<(), Failure> {
    let value = serde_json::to_value(report)
        .map_err(|e| fail(format_args!("printing the report as JSON: {e}")))?;
    let mut s = crate::json::to_string_pretty(&value);
    s.push('\n');
    emit(&s)
}

/// What a non-regular file is, for messages.
fn kind_of(ty: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ty.is_fifo() {
            return "a FIFO";
        }
        if ty.is_char_device() || ty.is_block_device() {
            return "a device";
        }
        if ty.is_socket() {
            return "a socket";
        }
    }
    if ty.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Refuses, before anything opens it, a session path that is not a regular file (after
/// symlinks): a FIFO would block the open forever, a device such as /dev/zero would be
/// read without end. A path that cannot be examined is an `opening …` error.
pub(crate) fn require_regular(path: &Path) -> Result<(), Failure> {
    let meta = std::fs::metadata(path)
        .map_err(|e| fail(format_args!("opening {}: {e}", path.display())))?;
    if meta.is_file() {
        return Ok(());
    }
    Err(fail(format_args!(
        "{}: {}, not a regular file; a session log is a regular file, so it was not opened",
        path.display(),
        kind_of(meta.file_type())
    )))
}

/// The `*.jsonl` files of `dir` by the library's one walk ([`session_files`]: `dir`'s own
/// and those of its folders one level down, sorted). What is not a regular file (a FIFO,
/// a device, a dangling link...) and unreadable folders are reported on stderr and
/// skipped, so a scan never blocks or reads without end. A `dir` that cannot be read is
/// the error.
pub(crate) fn jsonl_files(dir: &Path) -> Result<Vec<PathBuf>, Failure> {
    let mut files = Vec::new();
    for f in session_files(dir).map_err(fail)? {
        match f {
            Ok(path) => files.push(path),
            Err(problem) => skipped(&problem),
        }
    }
    Ok(files)
}

/// `warning: skipped PATH: why` for a file a directory scan leaves out.
pub(crate) fn skipped(problem: &ListProblem) {
    let path = &problem.path;
    let why = match &problem.error {
        OpenError::Invalid(
            InvalidLog::MissingHeader { detail, .. } | InvalidLog::InvalidHeader { detail, .. },
        ) => detail.clone(),
        OpenError::Io { source, .. } => source.to_string(),
        OpenError::NotARegularFile { kind, .. } => format!("{kind}, not a regular file"),
        e => without_path(&e.to_string(), &path.display().to_string()).to_owned(),
    };
    warn(format_args!("skipped {}: {why}", path.display()));
}

/// A library error's message without its leading `PATH: `, for outputs that already
/// name the file.
pub(crate) fn without_path<'a>(message: &'a str, path: &str) -> &'a str {
    message
        .strip_prefix(path)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message)
}

/// Shortens a JSON value's text for one-line displays.
pub(crate) fn short_json(v: &serde_json::Value, max: usize) -> String {
    let s = crate::json::to_string(v);
    if s.chars().count() <= max {
        return s;
    }
    let cut: String = s.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// The `session-state` command: parses the process's arguments (once), runs the command
/// and maps the outcome to the exit code (`docs/cli.md`). The binary's `main` is this call.
pub fn main() -> ExitCode {
    let matches = command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    install_diagnostics(cli.verbose);
    let origin = match matches.value_source("store") {
        Some(ValueSource::EnvVariable) => store::Origin::Env,
        _ => store::Origin::Flag,
    };
    let result =
        store::Sessions::choose(cli.store, origin).and_then(|sessions| run(cli.command, &sessions));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("error: {}", term_safe(&f.message));
            ExitCode::from(f.code)
        }
    }
}

/// Runs a command on the sessions `--store` chose.
fn run(command: Command, sessions: &store::Sessions) -> CmdResult {
    match command {
        Command::Read(a) => state::read(a, sessions),
        Command::Write(a) => state::write(a, sessions),
        Command::Patch(a) => state::patch(a, sessions),
        Command::Drop(a) => state::drop(a, sessions),
        Command::History(a) => state::history(a, sessions),
        Command::Replay(mut a) => {
            let local = sessions.local_file(&a.path)?;
            a.path = local.path.clone();
            replay::run(a)
        }
        Command::Tree(mut a) => {
            let local = sessions.local_file(&a.file)?;
            a.file = local.path.clone();
            tree::run(a)
        }
        // Read from the store's lines directly, named `<store>#<session id>`.
        Command::Status(a) => match sessions.target(&a.file)? {
            store::Target::File(_) => status::status(a, None),
            store::Target::Stored(stored) => status::status(a, Some(&stored.session())),
        },
        Command::ForceRefresh(mut a) => {
            let local = sessions.local_file(&a.file)?;
            a.file = local.path.clone();
            let db = a.db.clone();
            let code = status::force_refresh(a)?;
            if let Some(stored) = &local.stored {
                // The rows of a stored session are keyed by store and session, not by
                // the export's path: drop those too.
                let db = db.resolve()?;
                if db.exists() {
                    crate::Store::at(&db)
                        .and_then(|s| s.forget_stored(&stored.session()))
                        .map_err(fail)?;
                }
            }
            Ok(code)
        }
        Command::Verify(a) => match sessions.target(&a.file)? {
            store::Target::File(_) => verify::run(a, None),
            store::Target::Stored(stored) => verify::run(a, Some(&stored.session())),
        },
        Command::List(a) => list::run(a, sessions),
        Command::Import(a) => import::import(a, sessions),
        Command::Export(a) => import::export(a, sessions),
        // The projection database, whatever the sessions are kept in.
        Command::Prune(a) => prune::run(a),
    }
}
