//! Where the sessions a command names are: Pi JSONL files, or a store (`--store URL`, or
//! `$SESSION_STATE_STORE` when `--store` is not given; `--store none` means files).
//!
//! The grammar has one positional per command; after parsing, [`Sessions::target`]
//! turns it into a [`Target`]: a file, or a stored session whose id (or unique prefix,
//! [`session_state::resolve_session`]) it is. A message caused by the store says which
//! of `--store` and the variable chose it.
//!
//! `read`, `write`, `patch` and `drop` act on a stored session through [`SessionState`]'s
//! backend calls (`state.rs`); `list` lists a store's headers (here). `tree`, `replay`,
//! `status`, `force-refresh` and `verify` run as on a file, on the local mirror of the
//! stored session ([`Sessions::local_file`]: the cache the projection reads, next to the
//! projection database, holding exactly the lines the store holds).

use super::{CmdResult, DbArgs, Failure, emit_json, emit_text, fail};
use serde::Serialize;
use session_state::{RedactedUrl, SessionStore, Store, StoredSession};
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

    /// Opens the store, if one was chosen. An error names who chose it and never shows a
    /// password.
    fn open(&self) -> Result<Option<Opened>, Failure> {
        let Sessions::Store { url, origin } = self else {
            return Ok(None);
        };
        let key = RedactedUrl::new(url.as_str()).redacted();
        let backend = session_state::open_store_url(url).map_err(|e| {
            fail(match origin {
                Origin::Flag => format!("--store: {e}"),
                Origin::Env => format!(
                    "${STORE_ENV}: {e}\n(the store comes from ${STORE_ENV}; --store none uses \
                     session files)"
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

    /// A file the file commands can read for `arg`: the file itself, or the local mirror
    /// of the stored session (beside the projection database `db` names).
    pub(crate) fn local_file(&self, arg: &Path, db: &DbArgs) -> Result<PathBuf, Failure> {
        match self.target(arg)? {
            Target::File(file) => Ok(file),
            Target::Stored(stored) => {
                let store = Store::at(db.resolve()?).map_err(fail)?;
                store.sync_mirror(&stored.session()).map_err(fail)
            }
        }
    }
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
        session_state::resolve_session(&*self.backend, given).map_err(|e| {
            let mut message = e.to_string();
            let not_found = matches!(e, session_state::ResolveError::NotFound { .. });
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

/// `list --json` with a store: one session.
#[derive(Serialize)]
struct Row {
    id: String,
    cwd: Option<String>,
    timestamp: Option<String>,
    version: u32,
    parent_session: Option<String>,
}

/// `list` with a store: its sessions, from their headers only.
pub(crate) fn list(store: &Opened, json: bool) -> CmdResult {
    let headers = store.backend.list().map_err(fail)?;
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
    if json {
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
