//! Where the sessions a command names are: Pi JSONL files, or a store (`--store URL`, or
//! `$SESSION_STATE_STORE` when `--store` is not given; `--store none` means files).
//!
//! The grammar has one positional per command; after parsing, [`Sessions::target`]
//! turns it into a [`Target`]: a file, or a stored session whose id (or unique prefix,
//! [`crate::persistence::resolve_session`]) it is. A message caused by the store says which
//! of `--store` and the variable chose it, except a server that stayed unavailable
//! through the library's retries: that is the server's message.
//!
//! `read`, `write`, `patch` and `drop` go through [`SessionState`] on a stored session
//! (`crate::On::Stored`), which reads the store's lines through the
//! projection: no local copy of the session is kept. `list` lists the store's headers.
//! `history` reads the store's lines ([`StoredSession::read_log`]); `status` and `verify`
//! do too, and name the session `<store>#<session id>` ([`StoredSession::label`]). `tree`, `replay` and
//! `force-refresh` run as on a file, on a temporary export of the stored session that is
//! removed when the command ends ([`Sessions::local_file`]).

use super::{Failure, fail};
use crate::persistence::RedactedUrl;
use crate::{SessionStore, StoredSession};
use std::path::{Path, PathBuf};

/// The environment variable that names the store when `--store` is not given.
pub(crate) const STORE_ENV: &str = "SESSION_STATE_STORE";

/// The `--store` value that means session files.
const NONE: &str = "none";

/// Who chose the store: the option or the environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Flag,
    Env,
}

/// Where the sessions are, as the command line chose.
pub(crate) enum Sessions {
    /// Pi JSONL files: no `--store` and no variable, an empty variable, or `none`.
    Files,
    /// A store URL, and who gave it.
    Store { url: String, origin: Origin },
}

/// A store, opened.
pub(crate) struct Opened {
    backend: Box<dyn SessionStore>,
    /// The URL with its password replaced: for messages and the local cache's key.
    key: String,
    origin: Origin,
}

/// What a command's positional names.
pub(crate) enum Target {
    File(PathBuf),
    Stored(Stored),
}

/// A session of a store: the store and the session's whole id.
pub(crate) struct Stored {
    store: Opened,
    id: String,
}

impl Stored {
    /// The session, for the library's `*_stored` calls.
    pub(crate) fn session(&self) -> StoredSession<'_> {
        StoredSession::new(&*self.store.backend, &self.store.key, &self.id)
    }
}

impl Origin {
    /// How a message names the store.
    fn name(self, key: &str) -> String {
        match self {
            Origin::Flag => key.to_owned(),
            Origin::Env => format!("{key} (from ${STORE_ENV})"),
        }
    }
}

impl Sessions {
    /// The choice of `--store` / `$SESSION_STATE_STORE`. An empty variable is unset; an
    /// empty `--store` is an error.
    pub(crate) fn choose(store: Option<String>, origin: Origin) -> Result<Sessions, Failure> {
        match store {
            None => Ok(Sessions::Files),
            Some(url) if url == NONE => Ok(Sessions::Files),
            Some(url) if url.is_empty() => match origin {
                Origin::Env => Ok(Sessions::Files),
                Origin::Flag => Err(fail(format_args!(
                    "--store is empty: give a store URL (sqlite:///abs/path, \
                     postgres://user@host/db), or `none` for session files"
                ))),
            },
            Some(url) => Ok(Sessions::Store { url, origin }),
        }
    }

    /// Opens the store, if one was chosen. An error names who chose the store, except
    /// a server that stayed unavailable through the library's retries: that message is
    /// the server's (how long, how many attempts, that a rerun is safe). Never a
    /// password.
    fn open(&self) -> Result<Option<Opened>, Failure> {
        let Sessions::Store { url, origin } = self else {
            return Ok(None);
        };
        let key = RedactedUrl::new(url.as_str()).redacted();
        let backend = crate::persistence::open_store_url(url).map_err(|e| {
            let bad_url = !matches!(e, crate::Error::StoreUnavailable { .. });
            fail(match (origin, bad_url) {
                (Origin::Flag, true) => format!("--store: {e}"),
                (Origin::Flag, false) => e.to_string(),
                (Origin::Env, true) => format!(
                    "${STORE_ENV}: {e}\n(the store comes from ${STORE_ENV}; --store none uses \
                     session files)"
                ),
                (Origin::Env, false) => format!(
                    "{e}\n(the store comes from ${STORE_ENV}; --store none uses session files)"
                ),
            })
        })?;
        Ok(Some(Opened {
            backend,
            key,
            origin: *origin,
        }))
    }

    /// The store a command that needs one (`import`, `export`) works on.
    pub(crate) fn require(&self, command: &str) -> Result<Opened, Failure> {
        self.open()?.ok_or_else(|| {
            fail(format_args!(
                "{command} needs a store: --store URL or ${STORE_ENV} (`--store none` means \
                 session files)"
            ))
        })
    }

    /// What the positional `arg` names: the file, or the stored session whose id or
    /// unique id prefix it is.
    pub(crate) fn target(&self, arg: &Path) -> Result<Target, Failure> {
        match self.open()? {
            None => Ok(Target::File(arg.to_path_buf())),
            Some(store) => {
                let id = store.resolve(arg)?;
                Ok(Target::Stored(Stored { store, id }))
            }
        }
    }

    /// A file the file commands can read for `arg`: the file itself, or a temporary
    /// export of the stored session, removed when the returned [`LocalFile`] is dropped.
    pub(crate) fn local_file(&self, arg: &Path) -> Result<LocalFile, Failure> {
        match self.target(arg)? {
            Target::File(file) => Ok(LocalFile {
                path: file,
                _export: None,
                stored: None,
            }),
            Target::Stored(stored) => {
                let export = TempExport::new(stored.store.backend(), &stored.id)?;
                Ok(LocalFile {
                    path: export.file.clone(),
                    _export: Some(export),
                    stored: Some(stored),
                })
            }
        }
    }
}

/// A session as a file: the user's own, or a temporary export of a stored one.
pub(crate) struct LocalFile {
    /// The file to read.
    pub(crate) path: PathBuf,
    /// The export behind `path`, removed on drop.
    _export: Option<TempExport>,
    /// The stored session exported, if it is one.
    pub(crate) stored: Option<Stored>,
}

impl Opened {
    /// The whole id of the session `arg` names (an id, or a unique prefix of one).
    pub(crate) fn resolve(&self, arg: &Path) -> Result<String, Failure> {
        let Some(given) = arg.to_str() else {
            return Err(fail(format_args!(
                "{}: {} is not a session id (ids are UTF-8 text)",
                self.origin.name(&self.key),
                arg.display()
            )));
        };
        crate::persistence::resolve_session(&*self.backend, given).map_err(|e| {
            let mut message = e.to_string();
            let not_found = matches!(e, crate::persistence::ResolveError::NotFound { .. });
            let looks_like_a_file = given.contains('/') || given.ends_with(".jsonl");
            match self.origin {
                Origin::Env => message.push_str(&format!(
                    "\n(the store comes from ${STORE_ENV}; --store none uses session files)"
                )),
                Origin::Flag if not_found && looks_like_a_file => message.push_str(
                    "\n(with --store, a session is named by its id; without it, by its file)",
                ),
                Origin::Flag => {}
            }
            fail(message)
        })
    }

    /// The backend.
    pub(crate) fn backend(&self) -> &dyn SessionStore {
        &*self.backend
    }

    /// How messages name this store, and who chose it.
    pub(crate) fn name(&self) -> String {
        self.origin.name(&self.key)
    }
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
        crate::persistence::export_session(backend, id, &mut out).map_err(fail)?;
        std::io::Write::flush(&mut out)
            .map_err(|e| fail(format_args!("writing {}: {e}", export.file.display())))?;
        Ok(export)
    }
}

impl Drop for TempExport {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.file) {
            if e.kind() == std::io::ErrorKind::NotFound {
                tracing::debug!(error = %e, file = %self.file.display(), "no temporary export to remove");
            } else {
                tracing::warn!(error = %e, file = %self.file.display(), "the temporary export was not removed; it is left in place");
            }
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            tracing::debug!(error = %e, dir = %self.dir.display(), "the temporary export's directory was not removed; it is left in place");
        }
    }
}
