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
//! A write's event is decided by the core ([`StateKey::decide`]) in one call
//! ([`NativeStore::decide`]): on the value after the state's last event, when the core's
//! memo of it ([`LastEvent`]) finds Pi's leaf standing on it with nothing of that state
//! appended since, else on the value where it lands, read as a read reads it. The package
//! hands the memo Pi's leaf and the entries Pi appended since; the core decides.
//!
//! State versions and validation: a state is opened at a version of its shape
//! (`openSessionState`'s `version`, 1 by default), and its key is the core's
//! [`StateKey::versioned`] at that version, [`StateKey::validated`] when the state has a
//! `validate`; the key's `migrate` and validation call the extension's JavaScript functions
//! (`hooks.rs`). Every read ([`StateKey::resolve`]) and every write ([`StateKey::decide`])
//! runs them in the core's order.
//!
//! Errors are thrown as JavaScript `Error`s whose message is the core's own
//! (`session_state::Error`'s `Display`); the refusals the package has classes for carry
//! their fields too (`hooks::thrown`).

use napi::Env;
use napi::bindgen_prelude::{Buffer, Either};
use napi_derive::napi;
use serde_json::Value;
use session_state::{
    Appended, Decided, HistoryEntry, LastEvent, LogOptions, On, Op, ReadMode, Scope, SessionLog,
    StateKey, Store, StoreOptions, StoredValue, Unwritable, format::STATE_PREFIX, inspect, json,
    settings::ProjectTrust,
};
use std::fmt::Display;
use std::rc::Rc;

mod hooks;
use hooks::{Hooks, MigrateFn, PrintFn, Running, ValidateFn};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The session file's log, parsed on a background thread after the first read (which the
/// projection answers at once); from then on reads fold in memory and follow Pi's appends
/// by reading only the file's new bytes.
type Background = Arc<Mutex<Option<(PathBuf, SessionLog)>>>;

fn js_err(e: impl Display) -> napi::Error {
    napi::Error::from_reason(e.to_string())
}

/// A record as the package hands it to TypeScript: JSON text of its `Serialize`, the one
/// shape the command line's `--json` prints too, with every value printed by the core's
/// lossless printer (as Pi's `JSON.stringify` prints it).
fn record_text(record: &impl serde::Serialize) -> napi::Result<String> {
    serde_json::to_value(record)
        .map(|v| json::to_string(&v))
        .map_err(js_err)
}

/// `historyReport`'s answer: the events and the strict reader's refusal.
#[derive(serde::Serialize)]
struct HistoryReport {
    events: Vec<HistoryEntry>,
    refused: Option<String>,
}

/// `eventCounts`'s answer: the rows and the strict reader's refusal.
#[derive(serde::Serialize)]
struct EventCountReport {
    rows: Vec<inspect::EventCount>,
    refused: Option<String>,
}

/// The state key of `plugin_id` in `scope` (a scope name), checked as the core checks it.
fn key_of(plugin_id: &str, scope: &str) -> napi::Result<StateKey> {
    StateKey::named(plugin_id, scope).map_err(js_err)
}

/// The `customType` prefix of state events (`session-state/`).
#[napi]
pub fn state_prefix() -> String {
    STATE_PREFIX.to_owned()
}

/// Checks a plugin id and a scope name as the core does and returns the `customType` of
/// the state's events; throws the core's message.
#[napi]
pub fn state_key(plugin_id: String, scope: String) -> napi::Result<String> {
    Ok(key_of(&plugin_id, &scope)?.custom_type().to_owned())
}

/// The core's refusal of a value that only JavaScript could find wrong, before it could
/// hand it over as JSON text: `kind` `"not-json"` (`undefined`, a cycle, a BigInt;
/// `detail` says what), `"non-finite"` (`detail`: `NaN`, `Infinity` or `-Infinity`) or
/// `"too-deep"` (deeper than JavaScript's own stack). The message `write` refuses it with.
#[napi]
pub fn value_error(plugin_id: String, kind: String, detail: String) -> napi::Result<String> {
    let key = StateKey::<Value>::new(&plugin_id, Scope::Branch).map_err(js_err)?;
    let why = match kind.as_str() {
        "not-json" => Unwritable::NotJson(detail),
        "non-finite" => match detail.parse::<f64>() {
            Ok(n) if !n.is_finite() => Unwritable::NonFinite(n),
            _ => return Err(js_err(format!("{detail:?} is not NaN or ±Infinity"))),
        },
        "too-deep" => Unwritable::TooDeep,
        other => return Err(js_err(format!("no such refusal: {other:?}"))),
    };
    Ok(key.refusal(why).to_string())
}

/// One state (a plugin id in a scope, at a version of its shape) as `openSessionState`
/// holds it: the key, checked once and calling the state's `migrate` and `validate`
/// (`hooks.rs`), and the core's memo of the state's last decided event, for the next write.
#[napi]
pub struct NativeState {
    key: StateKey,
    hooks: Option<Rc<Hooks>>,
    last: LastEvent,
    /// The session file of the last decided event (the file a write looks at when handed
    /// none).
    file: PathBuf,
    /// How the last write was decided: on top of the last event (`memo`) or as a read
    /// reads (`store`); for tests.
    way: Option<&'static str>,
}

/// What [`NativeStore::decide`] is handed in one string (one string crosses into the addon
/// for a fraction of the cost of an array of them): fields separated by NUL, each optional
/// id written `-` (none) or `+` and the id. First the entry Pi appended for the last
/// decided event and its parent (both `-` once told), then Pi's leaf, then one field per
/// entry Pi appended since, from the leaf up: `c` when it is of the state's `customType`,
/// else `o`, and its parent's id. Or, when the memo is not to be asked, `=` and the leaf
/// alone (`-`, or `+` and the id, which may then hold a NUL). The package puts no id
/// holding a NUL in a walk of the first form.
struct Walk<'a> {
    /// Whether the memo is asked (the first form).
    memo: bool,
    told: Option<&'a str>,
    told_parent: Option<&'a str>,
    leaf: Option<&'a str>,
    /// Per entry from the leaf up: of this state's `customType`, its parent's id.
    since: Vec<(bool, Option<&'a str>)>,
}

impl<'a> Walk<'a> {
    fn parse(text: &'a str) -> napi::Result<Walk<'a>> {
        let bad = || js_err(format!("a malformed walk of Pi's entries: {text:?}"));
        let id = |f: Option<&'a str>| match f {
            Some("-") => Ok(None),
            Some(f) if f.starts_with('+') => Ok(Some(&f[1..])),
            _ => Err(bad()),
        };
        if let Some(leaf) = text.strip_prefix('=') {
            return Ok(Walk {
                memo: false,
                told: None,
                told_parent: None,
                leaf: id(Some(leaf))?,
                since: Vec::new(),
            });
        }
        let mut fields = text.split('\0');
        let (told, told_parent, leaf) =
            (id(fields.next())?, id(fields.next())?, id(fields.next())?);
        let since = fields
            .map(|f| match f.as_bytes().first() {
                Some(b'c') => Ok((true, id(Some(&f[1..]))?)),
                Some(b'o') => Ok((false, id(Some(&f[1..]))?)),
                _ => Err(bad()),
            })
            .collect::<napi::Result<_>>()?;
        Ok(Walk {
            memo: true,
            told,
            told_parent,
            leaf,
            since,
        })
    }

    /// The entries from the leaf up as the core's memo reads them ([`LastEvent::value_at`]):
    /// the first the leaf, each next one the previous one's parent.
    fn path_up(&self, custom_type: &'a str) -> impl Iterator<Item = Appended<'_>> {
        let ids = std::iter::once(self.leaf).chain(self.since.iter().map(|e| e.1));
        ids.zip(self.since.iter())
            .map(move |(id, &(ours, parent_id))| Appended {
                id: id.unwrap_or_default(),
                parent_id,
                custom_type: ours.then_some(custom_type),
            })
    }
}

/// The core's decision of `op` on `current` (the value where the write lands, written
/// under state version `stored` by the event `entry`) for `key` ([`StateKey::decide`]:
/// the version check, `migrate`, the value rules, the decision, `validate`): the event's
/// `data` as JSON text, the value after it (the core's fold step) and whether the data
/// carries the caller's own text `argument` as the op asked
/// ([`session_state::format::Envelope::carries_text`]: the package then builds the event
/// around its text), or `None` when it changes nothing.
fn decide(
    key: &StateKey,
    current: Option<&Value>,
    stored: u32,
    entry: impl FnOnce() -> Option<String>,
    op: Op,
    argument: Option<&str>,
) -> session_state::Result<Option<Emitted>> {
    let asked = op.name();
    let decided = key.decide(current, stored, entry, op)?;
    Ok(decided.map(|d| emit(d, asked, argument)))
}

/// A decided event as the package gets it: its `data`, the value after it, and whether
/// the data carries the caller's text for the op asked.
type Emitted = (String, Option<Value>, bool);

fn emit(decided: Decided, asked: &str, argument: Option<&str>) -> Emitted {
    let data = decided.event.data_text_js();
    let own = decided.event.op.name() == asked
        && argument.is_some_and(|a| decided.event.carries_text(&data, a));
    (data, decided.into_parts().1, own)
}

#[napi]
impl NativeState {
    /// The state of `plugin_id` in `scope` at state version `version` (default 1), all
    /// checked as the core checks them (its message otherwise). `migrate` and `validate`
    /// are the state's own, wrapped by the package to take JSON text (`migrate(text,
    /// fromVersion)`, `validate(text)`; `schema`: `validate` answers `undefined` or
    /// `{path, detail}`, else it is a type guard); `print` is the package's printer of a
    /// value `migrate` returns. The key calls them (`hooks.rs`).
    #[napi(constructor)]
    pub fn new(
        plugin_id: String,
        scope: String,
        version: Option<u32>,
        migrate: Option<MigrateFn>,
        validate: Option<ValidateFn>,
        schema: Option<bool>,
        print: Option<PrintFn>,
    ) -> napi::Result<Self> {
        let hooks = Hooks::new(migrate, validate, schema.unwrap_or(false), print);
        let key = Hooks::keyed(
            hooks.as_deref(),
            key_of(&plugin_id, &scope)?,
            version.unwrap_or(1),
        )
        .map_err(js_err)?;
        let last = LastEvent::new(&key);
        Ok(NativeState {
            key,
            hooks,
            last,
            file: PathBuf::new(),
            way: None,
        })
    }

    /// The `customType` of the state's events.
    #[napi(getter)]
    pub fn custom_type(&self) -> String {
        self.key.custom_type().to_owned()
    }

    /// The state version the state reads and writes.
    #[napi(getter)]
    pub fn version(&self) -> u32 {
        self.key.version()
    }

    /// How the last write was decided: `"memo"` (on top of the state's last event),
    /// `"store"` (as a read reads), `null` before any.
    #[napi(getter)]
    pub fn way(&self) -> Option<&'static str> {
        self.way
    }

    /// Forgets the last event (another session manager, or a force-refresh).
    #[napi]
    pub fn forget(&mut self) {
        self.last.forget();
    }
}

impl NativeState {
    /// Sets the state's hooks as the running call's, when it has any.
    fn running(&self, env: &Env) -> Option<Running> {
        self.hooks.as_ref().map(|h| Hooks::running(env, h))
    }

    /// The core's error, as JavaScript gets it (`hooks::thrown`).
    fn thrown(&self, env: &Env, e: session_state::Error) -> napi::Error {
        hooks::thrown(env, self.hooks.as_deref(), e)
    }
}

/// `op` (0 `set`, 1 `patch`, 2 `drop`) with `argument` (JSON text), checked as the core
/// checks a value for `key`.
fn op_of(key: &StateKey, op: u32, argument: Option<&str>) -> napi::Result<Op> {
    let arg = argument
        .map(|text| key.check_text(text).map_err(js_err))
        .transpose()?;
    match (op, arg) {
        (0, Some(v)) => Ok(Op::Set(v)),
        (1, Some(v)) => Ok(Op::Patch(v)),
        (2, None) => Ok(Op::Drop),
        (other, _) => Err(js_err(format!("no such operation: {other}"))),
    }
}

/// The store handle, as one Pi extension instance uses it.
#[napi]
pub struct NativeStore {
    /// `None` once [`NativeStore::close`]d.
    store: Option<Store>,
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
            store: Some(store),
            pending: None,
            file_log: None,
            background: Arc::new(Mutex::new(None)),
            background_for: None,
        })
    }

    /// The projection database's path.
    #[napi(getter)]
    pub fn database_path(&self) -> napi::Result<String> {
        Ok(self.store()?.database_path().to_string_lossy().into_owned())
    }

    /// Closes the handle: the database's connection, the logs read and every file they
    /// hold, at once rather than when JavaScript's garbage collector gets to the handle
    /// (Windows refuses to delete a file a process holds open: the testing kit closes the
    /// stores under a folder before it removes it). Every later call throws.
    #[napi]
    pub fn close(&mut self) {
        self.store = None;
        self.pending = None;
        self.file_log = None;
        self.background_for = None;
        *self
            .background
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Settings problems met while resolving the location, one message each.
    #[napi]
    pub fn diagnostics(&self) -> napi::Result<Vec<String>> {
        Ok(self
            .store()?
            .diagnostics()
            .iter()
            .map(ToString::to_string)
            .collect())
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
    /// as stored, whatever the state version it was written under (for tools and the
    /// transcript; a state reads with [`NativeStore::read_state`]), as JSON text (the text
    /// Pi's `JSON.stringify` prints), or `null` when absent.
    #[napi]
    pub fn read(
        &mut self,
        file: Option<String>,
        plugin: String,
        scope: String,
        at: Option<String>,
    ) -> napi::Result<Option<String>> {
        // Read as stored: no version is compared, none migrated.
        let stored = self.resolved(file.as_deref(), &key_of(&plugin, &scope)?, at.as_deref())?;
        if let Some(f) = &file {
            self.parse_in_background(f);
        }
        Ok(stored.value.as_ref().map(json::to_string))
    }

    /// The value of `state` as if the leaf were `at` (`null`: no entry yet), as the core
    /// resolves it ([`StateKey::resolve`]: refused when written under a newer version,
    /// migrated when older, kept to the value rules, validated): its JSON text (the text
    /// Pi's `JSON.stringify` prints), or `null` when absent. A refusal is thrown with its
    /// fields (`hooks::thrown`).
    #[napi]
    pub fn read_state(
        &mut self,
        env: Env,
        state: &NativeState,
        file: Option<String>,
        at: Option<String>,
    ) -> napi::Result<Option<String>> {
        let read = self.resolved(file.as_deref(), &state.key, at.as_deref())?;
        if let Some(f) = &file {
            self.parse_in_background(f);
        }
        let _running = state.running(&env);
        let StoredValue {
            value,
            state_version,
            entry,
        } = read;
        // The entry of a value at the state's version is looked up only for a refusal's message.
        let entry = || {
            entry.or_else(|| {
                let (f, at) = (file.as_deref()?, at.as_deref()?);
                let key = &state.key;
                let store = self.store().ok()?;
                store
                    .read_versioned(Path::new(f), key.plugin_id(), key.scope(), Some(at))
                    .ok()?
                    .entry
            })
        };
        let value = state
            .key
            .resolve(value, state_version, entry)
            .map_err(|e| state.thrown(&env, e))?;
        Ok(value.as_ref().map(json::to_string))
    }

    /// The value of `plugin` in `scope` as if the leaf were `at`, as stored, with the
    /// state version it was written under and the entry of the event that set it: JSON
    /// text of the core's [`StoredValue`], `{value?, stateVersion, entryId}` (`value`
    /// missing when absent, `entryId` `null` when no event set it; version 1 then), as
    /// `session-state read --json` prints it.
    #[napi]
    pub fn read_stored(
        &mut self,
        file: Option<String>,
        plugin: String,
        scope: String,
        at: Option<String>,
    ) -> napi::Result<String> {
        let key = key_of(&plugin, &scope)?;
        let (value, state_version, entry) = match (file.as_deref(), at.as_deref()) {
            (_, None) => (None, 1, None),
            (Some(f), Some(at)) => {
                let s = self
                    .store()?
                    .read_versioned(Path::new(f), key.plugin_id(), key.scope(), Some(at))
                    .map_err(js_err)?;
                (s.value, s.state_version, s.entry)
            }
            // The last event of the fold says all three.
            (None, Some(at)) => {
                let st = self.store()?.state_of(&key);
                let log = self.log_at(None, Some(at))?;
                let last = st.history(log).map_err(js_err)?.pop();
                match last {
                    Some(e) => (e.value, e.state_version, Some(e.entry_id)),
                    None => (None, 1, None),
                }
            }
        };
        record_text(&StoredValue {
            value,
            state_version,
            entry,
        })
    }

    /// The one write decision: the `data` of the event that `op` (0 `set`, 1 `patch`, 2
    /// `drop`) with `argument` (JSON text) appends for `state` at Pi's leaf, as JSON text;
    /// `true` when that data is the envelope of `argument` itself (the caller's value
    /// printed as the core prints it: the package builds the event around its own text,
    /// [`session_state::format::Envelope::carries_text`]); `null` when it changes nothing.
    /// The core decides ([`StateKey::decide`]: the version check, the state's `migrate`,
    /// the value rules, the decision, the state's `validate`); a refusal is thrown with its
    /// fields (`hooks::thrown`), and nothing is to be appended.
    ///
    /// `walk` (`Walk`) holds Pi's leaf and, when the package keeps the state's last event,
    /// Pi's entries from the leaf up, as many as Pi appended after it (the package reads
    /// them from Pi's memory), and, once, the entry Pi appended for it
    /// ([`LastEvent::appended`]). When the core's memo ([`LastEvent::value_at`]) finds the
    /// leaf in `file` (`null`: the file of the last decided event) standing on that event,
    /// the value where the write lands is the value after it: what Pi appended since is not
    /// read (the next read reads it), and no version is checked (the state's own write left
    /// it). Otherwise (a session-scope state, no appended last event, another file or one
    /// replaced or rewritten, a leaf off the event's path, an event of this state since, or
    /// a walk of the `=` form) the value is read as `read_state` reads it, in `file` (`null`
    /// with a `=` walk: the entries handed over). The value or patch is checked first, so a
    /// refusal is the same either way. The memo keeps the value after the event for the
    /// next write ([`LastEvent::decided`]).
    #[napi]
    pub fn decide(
        &mut self,
        env: Env,
        state: &mut NativeState,
        file: Option<String>,
        walk: String,
        op: u32,
        argument: Option<String>,
    ) -> napi::Result<Either<Option<String>, bool>> {
        let walk = Walk::parse(&walk)?;
        // Told before anything can refuse: the package tells the entry once.
        let on_last = walk.memo
            && walk
                .told
                .is_none_or(|id| state.last.appended(id, walk.told_parent));
        let op = op_of(&state.key, op, argument.as_deref())?;
        let _running = state.running(&env);
        if walk.memo
            && let Some(f) = &file
        {
            state.file = PathBuf::from(f);
        }
        let current = on_last
            .then(|| {
                let since = walk.path_up(state.key.custom_type());
                state.last.value_at(&state.file, walk.leaf, since)
            })
            .flatten();
        // `None`: decided on the memo, in the last event's file; else the file read (`None`
        // inside: the entries handed over).
        let (decided, read_in) = match current {
            Some(current) => {
                let decided = decide(
                    &state.key,
                    current,
                    state.key.version(),
                    || None,
                    op,
                    argument.as_deref(),
                );
                state.way = Some("memo");
                (decided, None)
            }
            None => {
                // As a read reads: in the file handed, else the last event's (a memo walk).
                let file =
                    file.or_else(|| walk.memo.then(|| state.file.to_string_lossy().into_owned()));
                let StoredValue {
                    value,
                    state_version,
                    entry,
                } = self.resolved(file.as_deref(), &state.key, walk.leaf)?;
                let decided = decide(
                    &state.key,
                    value.as_ref(),
                    state_version,
                    || entry,
                    op,
                    argument.as_deref(),
                );
                state.way = Some("store");
                (decided, Some(file))
            }
        };
        let Some((data, after, own)) = decided.map_err(|e| state.thrown(&env, e))? else {
            return Ok(Either::A(None));
        };
        let in_file = match read_in {
            None => true,
            Some(Some(f)) => {
                state.file = PathBuf::from(f);
                true
            }
            Some(None) => false,
        };
        state
            .last
            .decided(in_file.then_some(state.file.as_path()), walk.leaf, after);
        if own {
            return Ok(Either::B(true));
        }
        Ok(Either::A(Some(data)))
    }

    /// The events that made the value at `at`, oldest first, as JSON text: an array of the
    /// core's [`HistoryEntry`], `[{entryId, line, op, stateVersion, argument?, value?}]`,
    /// as `session-state history --json` prints its `events`. Read strictly, as `read`
    /// reads: a file the strict reader refuses is its error.
    #[napi]
    pub fn history(
        &mut self,
        file: Option<String>,
        plugin: String,
        scope: String,
        at: Option<String>,
    ) -> napi::Result<String> {
        let st = self.store()?.state_of(&key_of(&plugin, &scope)?);
        let log = self.log_at(file.as_deref(), at.as_deref())?;
        let h = st.history(log).map_err(js_err)?;
        record_text(&h)
    }

    /// `/state:history`: [`NativeStore::history`] as JSON text `{events, refused}`. When
    /// the strict reader refuses the file, the events come from a salvage read (what Pi
    /// reads), as `session-state status` counts events, and `refused` is the strict
    /// reader's message (else `null`); a file neither reads is the strict reader's error.
    #[napi]
    pub fn history_report(
        &mut self,
        file: Option<String>,
        plugin: String,
        scope: String,
        at: Option<String>,
    ) -> napi::Result<String> {
        let st = self.store()?.state_of(&key_of(&plugin, &scope)?);
        let (h, refused) = match self.log_at(file.as_deref(), at.as_deref()) {
            Ok(log) => (st.history(log).map_err(js_err)?, None),
            Err(strict) => {
                let Some(f) = file.as_deref() else {
                    return Err(strict);
                };
                let Ok(mut log) = LogOptions::new().mode(ReadMode::Salvage).open(f) else {
                    return Err(strict);
                };
                match at.as_deref() {
                    Some(at) => log.navigate(at).map_err(js_err)?,
                    None => log.reset_leaf(),
                }
                (
                    st.history(&log).map_err(js_err)?,
                    Some(strict.reason.clone()),
                )
            }
        };
        record_text(&HistoryReport { events: h, refused })
    }

    /// The state events of the session per plugin and scope, as the core counts them (what
    /// `session-state status` shows): JSON text `{rows, refused}`, `rows` being
    /// `[{plugin, scope, events}]`, plugins in name order, `scope` `"branch"`, `"invalid"`
    /// (an envelope the core cannot decode: unknown `v`, op or scope) or `"session"`. Over
    /// every entry of the session file, or of the entries handed over before it exists.
    /// When the strict reader refuses the file, the rows come from a salvage read, as
    /// `session-state status` counts them, and `refused` is the strict reader's message
    /// (else `null`); a file neither reads is the strict reader's error.
    #[napi]
    pub fn event_counts(&mut self, file: Option<String>) -> napi::Result<String> {
        let (rows, refused) = match self.log_at(file.as_deref(), None) {
            Ok(log) => (inspect::event_counts(log).rows(), None),
            Err(strict) => {
                let Some(f) = file.as_deref() else {
                    return Err(strict);
                };
                let Ok(log) = LogOptions::new().mode(ReadMode::Salvage).open(f) else {
                    return Err(strict);
                };
                (
                    inspect::event_counts(&log).rows(),
                    Some(strict.reason.clone()),
                )
            }
        };
        record_text(&EventCountReport { rows, refused })
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

    /// `/state:status`: the lock row and the presence row of `session_id`, as the core
    /// reads and judges them (`Store::session_status`), without creating anything: JSON
    /// text of the core's `inspect::StatusReport`, the members `database`, `lock` and `pi`
    /// of `session-state status --json` (`pi` left out when no Pi holds the session).
    #[napi]
    pub fn status(&self, session_id: String) -> napi::Result<String> {
        let st = self.store()?.session_status(&session_id).map_err(js_err)?;
        record_text(&inspect::status_report(&st))
    }

    /// `/state:force-refresh`: drops every log this handle holds, then the core's
    /// force-refresh of the session (`Store::force_refresh_session`): the lock row cleared,
    /// the cached rows of `file` (when it exists) dropped; then rebuilt from the file.
    /// Returns whether there was a lock row.
    #[napi]
    pub fn force_refresh(
        &mut self,
        session_id: String,
        file: Option<String>,
    ) -> napi::Result<bool> {
        // Every log read of a file is dropped, the background one too: the file at the
        // path may be another one now, and the next read parses whatever is there.
        self.file_log = None;
        self.background_for = None;
        *self
            .background
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        let file = file.filter(|f| Path::new(f).exists());
        let store = self.store()?;
        let cleared = store
            .force_refresh_session(&session_id, file.as_deref().map(Path::new))
            .map_err(js_err)?;
        // The rows rebuilt now, not at the next read.
        if let Some(f) = &file {
            store.catch_up(f).map_err(js_err)?;
        }
        Ok(cleared)
    }

    /// Records that this Pi process holds `session_id` (docs/spec.md §9).
    #[napi]
    pub fn enter_presence(&self, session_id: String, file: Option<String>) -> napi::Result<()> {
        self.store()?
            .enter_presence(&session_id, file.as_deref())
            .map_err(js_err)
    }

    /// Removes this process's presence row of `session_id`.
    #[napi]
    pub fn leave_presence(&self, session_id: String) -> napi::Result<bool> {
        self.store()?.leave_presence(&session_id).map_err(js_err)
    }

    /// Brings the projection of `file` up to date (after Pi created or appended to it).
    #[napi]
    pub fn catch_up(&self, file: String) -> napi::Result<()> {
        self.store()?.catch_up(&file).map(|_| ()).map_err(js_err)
    }
}

impl NativeStore {
    /// The store, unless [`NativeStore::close`]d.
    fn store(&self) -> napi::Result<&Store> {
        self.store
            .as_ref()
            .ok_or_else(|| js_err("this session-state store handle was closed"))
    }

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

    /// The value of `key`'s state as if the leaf were `at`, as stored, with the version
    /// it was written under and the entry that set it ([`session_state::SessionState::read_as_stored`]):
    /// from the background parse's log when it holds `at`, else the projection; before
    /// the file exists, the entries handed over.
    fn resolved(
        &mut self,
        file: Option<&str>,
        key: &StateKey,
        at: Option<&str>,
    ) -> napi::Result<StoredValue> {
        let nothing = StoredValue {
            value: None,
            state_version: 1,
            entry: None,
        };
        let store = self
            .store
            .as_ref()
            .ok_or_else(|| js_err("this session-state store handle was closed"))?;
        let state = store.state_of(key);
        match (file, at) {
            // No entry yet: nothing can have been written.
            (_, None) => Ok(nothing),
            (Some(f), Some(at)) => {
                let mut slot = self
                    .background
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some((_, log)) = slot.as_mut().filter(|(p, _)| p == Path::new(f)) {
                    log.refresh().map_err(js_err)?;
                    if log.entry(at).is_some() {
                        log.navigate(at).map_err(js_err)?;
                        return state.read_as_stored(&*log).map_err(js_err);
                    }
                }
                drop(slot);
                state.read_as_stored(On::file(f, Some(at))).map_err(js_err)
            }
            (None, Some(at)) => {
                let log = self.pending.as_mut().ok_or_else(|| {
                    js_err("no session file and no entries handed over (loadPending)")
                })?;
                log.navigate(at).map_err(js_err)?;
                state.read_as_stored(&*log).map_err(js_err)
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
