//! Branch-aware state (SPEC §3): events appended to the log, folded along the path.
//!
//! ```no_run
//! use session_state::{Options, Scope, SessionLog, SessionState};
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct Role { name: String }
//!
//! let mut log = SessionLog::open("session.jsonl")?;
//! let role = SessionState::<Role>::open(Options::new("role").scope(Scope::Branch))?;
//! role.write(&mut log, &Role { name: "reviewer".into() })?; // durable when it returns
//! assert_eq!(role.read(&log)?, Some(Role { name: "reviewer".into() }));
//! # Ok::<(), session_state::Error>(())
//! ```

mod depth;
pub mod envelope;
pub mod fold;

pub use depth::MAX_DEPTH;

use crate::error::{Error, Result};
use crate::log::{NewEntry, STATE_PREFIX, SessionLog};
use crate::projection::Projection;
use crate::settings::{LocationInputs, ProjectTrust, ResolvedLocation, SettingsDiagnostic};
use envelope::{Envelope, Op, Scope};
use fold::HistoryEntry;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Mutex;

/// Checks a plugin id: non-empty; lowercase ASCII letters, digits, `-` and `.`.
pub fn validate_plugin_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidOption {
            option: "plugin_id",
            detail: format!(
                "{id:?} is not a valid plugin id: use a non-empty name of lowercase letters, \
                 digits, '-' and '.' (for example \"role\" or \"my-ext.todo\")"
            ),
        })
    }
}

/// Options of a [`SessionState`], validated by [`SessionState::open`].
#[derive(Debug, Clone)]
pub struct Options {
    plugin_id: String,
    scope: Scope,
    database_path: Option<PathBuf>,
    cwd: Option<PathBuf>,
    trust: ProjectTrust,
}

impl Options {
    /// Options for the plugin `plugin_id`, branch scope, default database location.
    pub fn new(plugin_id: impl Into<String>) -> Options {
        Options {
            plugin_id: plugin_id.into(),
            scope: Scope::Branch,
            database_path: None,
            cwd: None,
            trust: ProjectTrust::default(),
        }
    }
    /// Branch (default) or session scope.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }
    /// Where the projection database lives (must be absolute). Default: resolved from
    /// settings files as SPEC §4 describes (see `docs/settings.md`).
    pub fn database_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.database_path = Some(path.into());
        self
    }
    /// The project directory for settings resolution (default: the process's cwd).
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
    /// Whether the project's `.pi/settings.json` may choose the database location.
    pub fn trust(mut self, trust: ProjectTrust) -> Self {
        self.trust = trust;
        self
    }
    /// The plugin id.
    pub fn plugin_id(&self) -> &str {
        &self.plugin_id
    }
}

/// One plugin's state in one scope.
///
/// Reads fold the plugin's events at the log's active leaf (or at an entry); writes
/// append one event as a child of the leaf, durably, under the session's write lock.
/// An instance reads and writes only its own `customType` (`session-state/<plugin>`).
pub struct SessionState<T> {
    plugin: String,
    custom_type: String,
    scope: Scope,
    location: ResolvedLocation,
    db: Mutex<Option<Projection>>,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for SessionState<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionState")
            .field("plugin", &self.plugin)
            .field("scope", &self.scope)
            .field("database", &self.location.path)
            .finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned> SessionState<T> {
    /// Validates the options and resolves the database location. An invalid option is an
    /// error, never a silent fallback.
    pub fn open(options: Options) -> Result<SessionState<T>> {
        validate_plugin_id(&options.plugin_id)?;
        if let Some(p) = &options.database_path
            && (p.as_os_str().is_empty() || !p.is_absolute())
        {
            return Err(Error::InvalidOption {
                option: "database_path",
                detail: format!("{} must be a non-empty absolute path", p.display()),
            });
        }
        let cwd = match &options.cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir().map_err(|source| Error::Io {
                action: "reading the current directory",
                path: PathBuf::from("."),
                source,
            })?,
        };
        let location = match &options.database_path {
            // An explicit path needs neither a home nor an agent directory.
            Some(p) => LocationInputs::new(&cwd, "/").database_path(p).resolve()?,
            None => LocationInputs::from_env(cwd, options.trust)?.resolve()?,
        };
        Ok(SessionState {
            custom_type: format!("{STATE_PREFIX}{}", options.plugin_id),
            plugin: options.plugin_id,
            scope: options.scope,
            location,
            db: Mutex::new(None),
            _t: PhantomData,
        })
    }

    /// The plugin id.
    pub fn plugin_id(&self) -> &str {
        &self.plugin
    }
    /// The scope.
    pub fn scope(&self) -> Scope {
        self.scope
    }
    /// Where the projection database is, and why.
    pub fn location(&self) -> &ResolvedLocation {
        &self.location
    }
    /// Settings problems met while resolving the location (each reported once).
    pub fn diagnostics(&self) -> &[SettingsDiagnostic] {
        &self.location.diagnostics
    }

    /// The value at the log's active leaf: `None` when absent, `Some` (possibly of a
    /// JSON `null`) when written.
    pub fn read(&self, log: &SessionLog) -> Result<Option<T>> {
        let node = log.tree().leaf_index();
        self.decode(log, fold::value_at(log, &self.plugin, self.scope, node)?)
    }

    /// The value as if the active leaf were `entry_id`.
    pub fn read_at(&self, log: &SessionLog, entry_id: &str) -> Result<Option<T>> {
        let node = log.require(entry_id)?;
        self.decode(
            log,
            fold::value_at(log, &self.plugin, self.scope, Some(node))?,
        )
    }

    /// The raw JSON value at the active leaf, in [`crate::json`]'s lossless encoding:
    /// print it with [`crate::json::to_string`] to get the text Pi's `JSON.stringify`
    /// would print (lone surrogates included).
    pub fn read_value(&self, log: &SessionLog) -> Result<Option<Value>> {
        let node = log.tree().leaf_index();
        Ok(fold::value_at(log, &self.plugin, self.scope, node)?
            .value
            .map(|v| (*v).clone()))
    }

    /// The events that made the current value, oldest first, with their entry ids
    /// (branch scope: along the branch; session scope: the whole file).
    pub fn history(&self, log: &SessionLog) -> Result<Vec<HistoryEntry>> {
        fold::history(log, &self.plugin, self.scope, log.tree().leaf_index())
    }

    fn decode(&self, log: &SessionLog, f: fold::Folded) -> Result<Option<T>> {
        match f.value {
            None => Ok(None),
            Some(v) => T::deserialize(&*v)
                .map(Some)
                .map_err(|source| Error::Deserialize {
                    plugin: self.plugin.clone(),
                    entry_id: f
                        .last
                        .map(|l| log.entry_at(l).id().to_owned())
                        .unwrap_or_default(),
                    source,
                }),
        }
    }

    /// Sets the value. Returns the new entry's id, or `None` when the value was already
    /// equal (nothing is appended). Durable when it returns (once the session file
    /// exists; see [`crate::Materialize`]).
    ///
    /// Refused before anything is written: a value nested deeper than [`MAX_DEPTH`], NaN
    /// or ±Infinity ([`Error::Serialize`]: JSON has no such number; serde_json and Pi's
    /// `JSON.stringify` would write `null`), and an integer that Pi's JavaScript would not
    /// read back as written, such as one beyond 2^53 that a double cannot hold exactly
    /// ([`Error::UnrepresentableValue`]; store it as a string).
    pub fn write(&self, log: &mut SessionLog, value: &T) -> Result<Option<String>> {
        let value = self.to_json(value)?;
        self.apply(log, "write", Op::Set(value))
    }

    /// Applies an RFC 7396 JSON Merge Patch to the value (an absent value patches `{}`).
    /// The patch is any serializable value (usually a [`serde_json::Value`]); it is
    /// refused as [`SessionState::write`] refuses a value.
    pub fn patch<P: Serialize + ?Sized>(
        &self,
        log: &mut SessionLog,
        patch: &P,
    ) -> Result<Option<String>> {
        let patch = self.to_json(patch)?;
        self.apply(log, "patch", Op::Patch(patch))
    }

    fn to_json<V: Serialize + ?Sized>(&self, value: &V) -> Result<Value> {
        depth::to_value_limited(value).map_err(|source| Error::Serialize {
            plugin: self.plugin.clone(),
            source,
        })
    }

    /// Refuses numbers that Pi's JavaScript would not read back as written.
    fn check_numbers(&self, v: &Value) -> Result<()> {
        crate::json::check_numbers(v).map_err(|e| Error::UnrepresentableValue {
            plugin: self.plugin.clone(),
            detail: e.to_string(),
        })
    }

    /// Refuses values nested deeper than [`MAX_DEPTH`]: serde_json could not read them
    /// back, and deeper still they would overflow the stack.
    fn check_depth(&self, v: &Value) -> Result<()> {
        if depth::depth_of(v) > MAX_DEPTH {
            return Err(Error::Serialize {
                plugin: self.plugin.clone(),
                source: <serde_json::Error as serde::ser::Error>::custom(format!(
                    "the value is nested deeper than {MAX_DEPTH} levels of arrays and objects"
                )),
            });
        }
        Ok(())
    }

    /// Makes the value absent. `None` when it already was.
    pub fn drop(&self, log: &mut SessionLog) -> Result<Option<String>> {
        self.apply(log, "drop", Op::Drop)
    }

    /// Appends `op` under the write lock unless it changes nothing.
    pub fn apply(&self, log: &mut SessionLog, action: &str, op: Op) -> Result<Option<String>> {
        if let Op::Set(v) | Op::Patch(v) = &op {
            self.check_depth(v)?;
            self.check_numbers(v)?;
        }
        if !log.is_materialized() {
            // Only this process can see a session that is not on disk yet. The database is
            // opened first: one that is refused (not ours, SPEC §4) refuses before this
            // append can create the session file (SPEC §2, decide before touching).
            return self.with_db(|db| {
                let id = self.append_if_changed(log, op)?;
                if id.is_some() && log.is_materialized() {
                    db.sync(log)?;
                }
                Ok(id)
            });
        }
        self.with_db(|db| {
            let db_path = db.path().to_path_buf();
            let guard = crate::lock::acquire(db.connection(), log.session_id(), action)?;
            let result = (|| {
                log.refresh()?;
                self.append_if_changed(log, op)
            })();
            let id = match result {
                Ok(Some(id)) => id,
                other => {
                    guard.release()?;
                    return other;
                }
            };
            // The log is durable first; the projection never gets ahead of it. Its
            // catch-up and the lock's release commit together: one SQLite transaction on
            // the write path instead of two (the release joins the open transaction).
            let caught = guard.execute_batch("BEGIN IMMEDIATE").ok().and_then(|()| {
                match crate::projection::catch_up_in_transaction(&guard, &db_path, log.path()) {
                    Ok(c) => Some(c),
                    Err(_) => {
                        let _ = guard.execute_batch("ROLLBACK");
                        None
                    }
                }
            });
            let released = guard.release();
            let Some(caught) = caught else {
                // The slow path: the release committed alone; `sync` retries the catch-up
                // and handles a corrupt or failing projection.
                released?;
                db.sync(log)?;
                return Ok(Some(id));
            };
            let committed = released.map_err(Error::from).and_then(|_| {
                db.connection()
                    .execute_batch("COMMIT")
                    .map_err(|source| Error::Database {
                        path: db_path.clone(),
                        action: "committing",
                        source,
                    })
            });
            match committed {
                Ok(()) => db.record_catch_up(caught),
                Err(e) => {
                    // Nothing of the transaction stands, the lock row included: release
                    // it on its own (this process holds it, so it takes it back at once).
                    let _ = db.connection().execute_batch("ROLLBACK");
                    crate::lock::acquire(db.connection(), log.session_id(), action)?.release()?;
                    if matches!(e, Error::Lock(_)) {
                        return Err(e);
                    }
                    db.sync(log)?;
                }
            }
            Ok(Some(id))
        })
    }

    fn append_if_changed(&self, log: &mut SessionLog, op: Op) -> Result<Option<String>> {
        let current = fold::value_at(log, &self.plugin, self.scope, log.tree().leaf_index())?;
        let next = op.apply(current.value.as_deref());
        // Equal as Pi's JavaScript sees it (`1` is `1.0`, key order aside): nothing to do.
        if crate::json::js_eq_opt(next.as_ref(), current.value.as_deref()) {
            return Ok(None);
        }
        if let Some(next) = &next {
            self.check_depth(next)?;
        }
        let env = Envelope {
            scope: self.scope,
            op,
        };
        let id = log.append(NewEntry::custom(
            self.custom_type.clone(),
            Some(env.to_data()),
        ))?;
        Ok(Some(id))
    }

    fn with_db<R>(&self, f: impl FnOnce(&mut Projection) -> Result<R>) -> Result<R> {
        let mut slot = self
            .db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(Projection::open(&self.location.path)?);
        }
        match slot.as_mut() {
            Some(db) => f(db),
            None => Err(Error::InvalidInput {
                detail: "projection database unavailable".into(),
            }),
        }
    }
}
