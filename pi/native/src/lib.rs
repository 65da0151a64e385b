//! The native addon of the Pi package (`pi/`, docs/spec.md §9): the store handle of
//! `session-state`, used from inside a running Pi.
//!
//! Pi writes the session file itself (`pi.appendEntry`); this addon only reads, folds and
//! projects. Every read is at an entry id the caller gives (Pi's in-memory leaf):
//! - a session file that exists is read through the projection ([`Store::read_value`]),
//!   which reads only what was appended since its watermark;
//! - before Pi has created the file, the entries Pi holds in memory are handed over as
//!   JSONL bytes ([`NativeStore::load_pending`]) and folded from a detached log.
//!
//! Errors are thrown as JavaScript `Error`s whose message is the core's own
//! (`session_state::Error`'s `Display`).

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use serde_json::Value;
use session_state::{
    Envelope, Error, LogOptions, Op, ProjectTrust, Scope, SessionLog, Store, StoreOptions, json,
    validate_plugin_id,
};
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The session file's log, parsed on a background thread after the first read (which the
/// projection answers at once); from then on reads fold in memory and follow Pi's appends
/// by reading only the file's new bytes.
type Background = Arc<Mutex<Option<(PathBuf, SessionLog)>>>;

fn js_err(e: impl Display) -> napi::Error {
    napi::Error::from_reason(e.to_string())
}

fn scope_of(scope: &str) -> napi::Result<Scope> {
    match scope {
        "branch" => Ok(Scope::Branch),
        "session" => Ok(Scope::Session),
        other => Err(js_err(Error::InvalidOption {
            option: "scope",
            detail: format!("{other:?} is not a scope: use \"session\" or \"branch\""),
        })),
    }
}

/// Checks a plugin id as the core does; throws the core's message.
#[napi]
pub fn validate_plugin(plugin_id: String) -> napi::Result<()> {
    validate_plugin_id(&plugin_id).map_err(js_err)
}

/// Checks a scope name (`"session"` or `"branch"`); throws the core's message.
#[napi]
pub fn validate_scope(scope: String) -> napi::Result<()> {
    scope_of(&scope).map(|_| ())
}

/// Checks JSON text as a value `plugin_id` could write; throws the core's message.
#[napi]
pub fn check_value(plugin_id: String, text: String) -> napi::Result<()> {
    let store = Store::at("/nonexistent/never-opened.sqlite").map_err(js_err)?;
    let st = store
        .state::<Value>(&plugin_id, Scope::Branch)
        .map_err(js_err)?;
    let v = json::from_str(&text).map_err(|e| {
        js_err(Error::Serialize {
            plugin: plugin_id.clone(),
            source: <serde_json::Error as serde::ser::Error>::custom(e),
        })
    })?;
    st.check_value(&v).map(|_| ()).map_err(js_err)
}

/// The core's message for a value that cannot be serialized (`Error::Serialize`), for
/// what only JavaScript can hold: `undefined`, a cycle, a BigInt.
#[napi]
pub fn serialize_error(plugin_id: String, detail: String) -> String {
    Error::Serialize {
        plugin: plugin_id,
        source: <serde_json::Error as serde::ser::Error>::custom(detail),
    }
    .to_string()
}

/// The core's message for a number JSON cannot carry (NaN, ±Infinity): what
/// `SessionState::write` refuses it with.
#[napi]
pub fn non_finite_error(plugin_id: String, n: f64) -> napi::Result<String> {
    let store = Store::at("/nonexistent/never-opened.sqlite").map_err(js_err)?;
    let st = store
        .state::<Value>(&plugin_id, Scope::Branch)
        .map_err(js_err)?;
    match st.check_value(&n) {
        Err(e) => Ok(e.to_string()),
        Ok(_) => Err(js_err(format!("{n} is a finite number"))),
    }
}

/// The store handle, as one Pi extension instance uses it.
#[napi]
pub struct NativeStore {
    store: Store,
    /// The entries Pi holds in memory before it has created the file.
    pending: Option<SessionLog>,
    /// The session file, opened on first use by `history` and `branchKey` (which need
    /// the tree), following Pi's appends from then on.
    file_log: Option<SessionLog>,
    /// The log being parsed (or parsed) in the background, and for which file.
    background: Background,
    background_for: Option<PathBuf>,
}

#[napi]
impl NativeStore {
    /// Resolves the projection database's location (docs/spec.md §4): `database_path` when given
    /// (absolute, else the core's error), else the settings of `cwd` and of the agent
    /// directory, else the default. `trust` says whether the project's settings count:
    /// `"trusted"` / `"untrusted"` (what Pi decided, `ctx.isProjectTrusted()`), or `"pi"`
    /// (read Pi's saved decisions in `{agent_dir}/trust.json`).
    #[napi(constructor)]
    pub fn new(database_path: Option<String>, cwd: String, trust: String) -> napi::Result<Self> {
        let trust = match trust.as_str() {
            "trusted" => ProjectTrust::Trusted,
            "untrusted" => ProjectTrust::Untrusted,
            "pi" => ProjectTrust::FromPiDecisions,
            other => return Err(js_err(format!("no such trust: {other:?}"))),
        };
        let mut options = StoreOptions::new().cwd(cwd).trust(trust);
        if let Some(p) = database_path {
            options = options.database_path(p);
        }
        let store = Store::open(options).map_err(js_err)?;
        Ok(NativeStore {
            store,
            pending: None,
            file_log: None,
            background: Arc::new(Mutex::new(None)),
            background_for: None,
        })
    }

    /// The projection database's path.
    #[napi(getter)]
    pub fn database_path(&self) -> String {
        self.store.database_path().to_string_lossy().into_owned()
    }

    /// Settings problems met while resolving the location, one message each.
    #[napi]
    pub fn diagnostics(&self) -> Vec<String> {
        self.store
            .diagnostics()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Hands over the entries Pi holds in memory (header first, one JSON line each)
    /// before the session file exists; reads with no file fold these.
    #[napi]
    pub fn load_pending(&mut self, bytes: Buffer) -> napi::Result<()> {
        let log = LogOptions::new()
            .read("<pi memory>", &bytes[..])
            .map_err(js_err)?;
        self.pending = Some(log);
        Ok(())
    }

    /// The value of `plugin` in `scope` as if the leaf were `at` (`null`: no entry yet),
    /// as JSON text (the text Pi's `JSON.stringify` prints), or `null` when absent.
    #[napi]
    pub fn read(
        &mut self,
        file: Option<String>,
        plugin: String,
        scope: String,
        at: Option<String>,
    ) -> napi::Result<Option<String>> {
        let v = self.value(file.as_deref(), &plugin, scope_of(&scope)?, at.as_deref())?;
        if let Some(f) = &file {
            self.parse_in_background(f);
        }
        Ok(v.as_ref().map(json::to_string))
    }

    /// The `data` of the event that `op` (`set`, `patch`, `drop`) with `argument` (JSON
    /// text) would append at `at`, as JSON text; `null` when it would change nothing.
    /// Refused with the core's errors (and nothing to append) for a value it refuses.
    #[napi]
    pub fn prepare(
        &self,
        file: Option<String>,
        plugin: String,
        scope: String,
        at: Option<String>,
        op: String,
        argument: Option<String>,
    ) -> napi::Result<Option<String>> {
        let scope = scope_of(&scope)?;
        let st = self.store.state::<Value>(&plugin, scope).map_err(js_err)?;
        let arg = match &argument {
            Some(text) => {
                let v = json::from_str(text).map_err(|e| {
                    js_err(Error::Serialize {
                        plugin: plugin.clone(),
                        source: <serde_json::Error as serde::ser::Error>::custom(e),
                    })
                })?;
                Some(st.check_value(&v).map_err(js_err)?)
            }
            None => None,
        };
        let op = match (op.as_str(), arg) {
            ("set", Some(v)) => Op::Set(v),
            ("patch", Some(v)) => Op::Patch(v),
            ("drop", None) => Op::Drop,
            (other, _) => return Err(js_err(format!("no such operation: {other:?}"))),
        };
        let current = self.value(file.as_deref(), &plugin, scope, at.as_deref())?;
        let next = op.apply(current.as_ref());
        if json::js_eq_opt(next.as_ref(), current.as_ref()) {
            return Ok(None);
        }
        if let Some(next) = &next {
            st.check_result(next).map_err(js_err)?;
        }
        Ok(Some(json::to_string(&Envelope { scope, op }.to_data())))
    }

    /// The events that made the value at `at`, oldest first, as JSON text:
    /// `[{entryId, op, argument?, value?}]`.
    #[napi]
    pub fn history(
        &mut self,
        file: Option<String>,
        plugin: String,
        scope: String,
        at: Option<String>,
    ) -> napi::Result<String> {
        let st = self
            .store
            .state::<Value>(&plugin, scope_of(&scope)?)
            .map_err(js_err)?;
        let log = self.log_at(file.as_deref(), at.as_deref())?;
        let h = st.history(log).map_err(js_err)?;
        let rows: Vec<Value> = h
            .into_iter()
            .map(|e| {
                let mut m = serde_json::Map::new();
                m.insert("entryId".into(), Value::String(e.entry_id));
                m.insert("op".into(), Value::String(e.op.into()));
                if let Some(a) = e.argument {
                    m.insert("argument".into(), a);
                }
                if let Some(v) = e.value {
                    m.insert("value".into(), v);
                }
                Value::Object(m)
            })
            .collect();
        Ok(json::to_string(&Value::Array(rows)))
    }

    /// docs/spec.md §3's branch key at `at` (`null` for an empty session).
    #[napi]
    pub fn branch_key(
        &mut self,
        file: Option<String>,
        at: Option<String>,
    ) -> napi::Result<Option<String>> {
        let Some(at) = at else { return Ok(None) };
        let log = self.log_at(file.as_deref(), None)?;
        log.branch_key_of(&at)
            .map(|k| Some(k.to_owned()))
            .map_err(js_err)
    }

    /// `/state:status`: the lock row and the presence row of `session_id`, as JSON text
    /// (`{database, exists, lock, presence}`), without creating anything.
    #[napi]
    pub fn status(&self, session_id: String) -> napi::Result<String> {
        let lock = self.store.peek_lock_status(&session_id).map_err(js_err)?;
        let presence = self.store.peek_presence(&session_id).map_err(js_err)?;
        let lock = lock.row().map(|l| {
            serde_json::json!({
                "holder": l.holder,
                "action": l.action,
                "ageMs": u64::try_from(l.age.as_millis()).unwrap_or(u64::MAX),
                "liveness": l.liveness.to_string(),
                "livenessReason": l.liveness_reason,
                "leaseExpired": l.lease_expired,
                "blocksWriters": l.blocks_writers(),
            })
        });
        let presence = presence.row().map(|p| {
            serde_json::json!({
                "holder": p.holder,
                "sinceMs": p.since_ms,
                "sessionFile": p.session_file,
                "liveness": p.liveness.to_string(),
                "livenessReason": p.liveness_reason,
                "thisProcess": p.holder == session_state::Holder::current().to_string(),
            })
        });
        Ok(serde_json::json!({
            "database": self.database_path(),
            "exists": self.store.database_path().exists(),
            "lock": lock,
            "presence": presence,
        })
        .to_string())
    }

    /// `/state:force-refresh`: clears the session's lock row, drops the cached rows of
    /// `file` (when it exists) and every fold this handle holds, and re-reads the file.
    /// Returns whether there was a lock row.
    #[napi]
    pub fn force_refresh(
        &mut self,
        session_id: String,
        file: Option<String>,
    ) -> napi::Result<bool> {
        let cleared = self.store.clear_lock(&session_id).map_err(js_err)?;
        self.file_log = None;
        if let Some(f) = file.filter(|f| Path::new(f).exists()) {
            self.store.forget(&f).map_err(js_err)?;
            self.store.catch_up(&f).map_err(js_err)?;
        }
        Ok(cleared)
    }

    /// Records that this Pi process holds `session_id` (docs/spec.md §9).
    #[napi]
    pub fn enter_presence(&self, session_id: String, file: Option<String>) -> napi::Result<()> {
        self.store
            .enter_presence(&session_id, file.as_deref())
            .map_err(js_err)
    }

    /// Removes this process's presence row of `session_id`.
    #[napi]
    pub fn leave_presence(&self, session_id: String) -> napi::Result<bool> {
        self.store.leave_presence(&session_id).map_err(js_err)
    }

    /// Brings the projection of `file` up to date (after Pi created or appended to it).
    #[napi]
    pub fn catch_up(&self, file: String) -> napi::Result<()> {
        self.store.catch_up(&file).map(|_| ()).map_err(js_err)
    }
}

impl NativeStore {
    /// Starts parsing `file` on a background thread, once per file.
    fn parse_in_background(&mut self, file: &str) {
        let path = PathBuf::from(file);
        if self.background_for.as_ref() == Some(&path) {
            return;
        }
        self.background_for = Some(path.clone());
        let slot = Arc::clone(&self.background);
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = None;
        std::thread::spawn(move || {
            // A file the strict reader refuses stays with the projection (which reports it).
            if let Ok(log) = SessionLog::open(&path) {
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some((path, log));
            }
        });
    }

    fn value(
        &self,
        file: Option<&str>,
        plugin: &str,
        scope: Scope,
        at: Option<&str>,
    ) -> napi::Result<Option<Value>> {
        match file {
            // No entry yet: nothing can have been written.
            Some(_) if at.is_none() => Ok(None),
            Some(f) => {
                let at = at.unwrap_or_default();
                let mut slot = self
                    .background
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some((_, log)) = slot.as_mut().filter(|(p, _)| p == Path::new(f)) {
                    log.refresh().map_err(js_err)?;
                    if log.entry(at).is_some() {
                        let st = self.store.state::<Value>(plugin, scope).map_err(js_err)?;
                        return st.read_at(log, at).map_err(js_err);
                    }
                }
                drop(slot);
                self.store
                    .read_value(Path::new(f), plugin, scope, Some(at))
                    .map_err(js_err)
            }
            None => {
                let log = self.pending.as_ref().ok_or_else(|| {
                    js_err("no session file and no entries handed over (loadPending)")
                })?;
                let st = self.store.state::<Value>(plugin, scope).map_err(js_err)?;
                match at {
                    Some(at) => st.read_at(log, at),
                    None => Ok(None),
                }
                .map_err(js_err)
            }
        }
    }

    /// The session's tree with its leaf at `at` (when given): the file's log, opened on
    /// first use and refreshed, or the pending entries.
    fn log_at(&mut self, file: Option<&str>, at: Option<&str>) -> napi::Result<&mut SessionLog> {
        let log = match file {
            Some(f) => {
                let path = PathBuf::from(f);
                let stale = self.file_log.as_ref().is_none_or(|l| l.path() != path);
                if stale {
                    self.file_log = Some(SessionLog::open(&path).map_err(js_err)?);
                }
                let log = self.file_log.as_mut().expect("opened above");
                log.refresh().map_err(js_err)?;
                log
            }
            None => self.pending.as_mut().ok_or_else(|| {
                js_err("no session file and no entries handed over (loadPending)")
            })?,
        };
        match at {
            Some(at) => log.navigate(at).map_err(js_err)?,
            None => log.reset_leaf(),
        }
        Ok(log)
    }
}
