//! `import` and `export` (`docs/cli.md`): a Pi session file into a store, and back out.

use super::store::Sessions;
use super::{CmdResult, Failure, emit_text, fail, require_regular};
use std::path::{Path, PathBuf};

pub(crate) const IMPORT_EXAMPLES: &str = "\
Examples:
  session-state import s.jsonl --store sqlite:///srv/sessions.sqlite
  SESSION_STATE_STORE=postgres://me@db/sessions session-state import s.jsonl

Prints the session's id (its whole id; later commands may name it by a unique prefix).
Importing the same file again changes nothing; after Pi appended to the file, only the new
entries are added. A file that disagrees with what the store holds for that session is
refused.
Exit codes: 0 imported; 2 error.";

pub(crate) const EXPORT_EXAMPLES: &str = "\
Examples:
  session-state export 0195f1d0 --store sqlite:///srv/sessions.sqlite --output s.jsonl
  session-state export 0195f1d0 --store sqlite:///srv/sessions.sqlite > s.jsonl

The header and every entry line exactly as stored: a Pi JSONL file that Pi opens.
<SESSION> is the session's id or a unique prefix of one. --output never replaces an
existing file.
Exit codes: 0 written; 2 error.";

#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    /// The Pi session file to copy into the store (.jsonl)
    file: PathBuf,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// The stored session: its id, or a unique prefix of one
    #[arg(value_name = "SESSION")]
    session: PathBuf,
    /// Write to this new file (durably; never over an existing file) [default: stdout]
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub(crate) fn import(args: ImportArgs, sessions: &Sessions) -> CmdResult {
    let store = sessions.require("import")?;
    require_regular(&args.file)?;
    let report = crate::persistence::import_file(store.backend(), &args.file).map_err(|e| {
        fail(format_args!(
            "importing {} into {}: {e}",
            args.file.display(),
            store.name()
        ))
    })?;
    // The id comes from the file: escaped, as every name from a file is.
    emit_text(&format!("{}\n", report.session_id))?;
    Ok(0)
}

pub(crate) fn export(args: ExportArgs, sessions: &Sessions) -> CmdResult {
    let store = sessions.require("export")?;
    let id = store.resolve(&args.session)?;
    let backend = store.backend();
    match &args.output {
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match crate::persistence::export_session(backend, &id, &mut out) {
                Ok(_) => Ok(0),
                Err(crate::Error::Log(crate::LogError::Append(crate::AppendError::Io {
                    source,
                    ..
                })))
                | Err(crate::Error::Log(crate::LogError::Open(crate::OpenError::Io {
                    source,
                    ..
                }))) if source.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
                Err(e) => Err(fail(e)),
            }
        }
        Some(path) => {
            export_to_file(backend, &id, path)?;
            Ok(0)
        }
    }
}

/// Writes the export to a hidden temporary file beside `path`, syncs it, and links it to
/// `path` (which fails if a file is there: nothing is ever replaced), then syncs the
/// folder.
fn export_to_file(
    backend: &dyn crate::SessionStore,
    session: &str,
    path: &Path,
) -> Result<(), Failure> {
    use std::io::Write;
    if path.exists() {
        return Err(fail(format_args!(
            "--output {}: a file is already there; it was left untouched",
            path.display()
        )));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = dir.join(format!(
        ".session-state-export-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let written = (|| -> Result<(), Failure> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| fail(format_args!("creating {}: {e}", tmp.display())))?;
        let mut out = std::io::BufWriter::new(file);
        crate::persistence::export_session(backend, session, &mut out).map_err(fail)?;
        out.flush()
            .map_err(|e| fail(format_args!("writing the export: {e}")))?;
        out.get_ref()
            .sync_all()
            .map_err(|e| fail(format_args!("syncing the export: {e}")))?;
        // A hard link fails if the name exists: nothing is ever replaced.
        std::fs::hard_link(&tmp, path).map_err(|e| {
            fail(format_args!(
                "--output {}: {e} (nothing was replaced)",
                path.display()
            ))
        })
    })();
    // The temporary file is ours (created above with create_new).
    if let Err(e) = std::fs::remove_file(&tmp) {
        if e.kind() == std::io::ErrorKind::NotFound {
            tracing::debug!(error = %e, file = %tmp.display(), "no temporary export to remove");
        } else {
            tracing::warn!(error = %e, file = %tmp.display(), "the temporary export was not removed; it is left in place");
        }
    }
    written?;
    if let Err(e) = std::fs::File::open(&dir).and_then(|d| d.sync_all()) {
        tracing::debug!(error = %e, dir = %dir.display(), "the output's directory was not synced; the new name is durable once the system writes it back");
    }
    Ok(())
}
