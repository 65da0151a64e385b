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
//! A write's event is decided by the core ([`StateKey::decide`]) on the value where it
//! lands, read as a read reads it ([`NativeStore::prepare`]), or, when the core's memo of
//! the state's last event ([`LastEvent`]) finds Pi's leaf standing on it with nothing of
//! that state appended since, the value after that event
//! ([`NativeState::prepare_on_last`]). The package hands the memo Pi's leaf and the entries
//! Pi appended since; the core decides.
//!
//! State versions: a state is opened at a version of its shape (`openSessionState`'s
//! `version`, 1 by default), and its key is the core's [`StateKey::versioned`] at that
//! version. A value stored under that version is answered as before (JSON text); one
//! stored under another version is answered with its version and the entry that set it
//! ([`StoredState`]): the TypeScript refuses a newer one and migrates an older one with
//! the extension's own `migrate` (JavaScript, which the core cannot call), and a write on
//! top of an older value is decided by the core's [`StateKey::decide`] on the
//! migrated value (a whole `set` at the state's version).
//!
//! Errors are thrown as JavaScript `Error`s whose message is the core's own
//! (`session_state::Error`'s `Display`).

use napi::bindgen_prelude::{Buffer, Either, Either3};
use napi_derive::napi;
use serde_json::Value;
use session_state::{
    Appended, Decided, HistoryEntry, LastEvent, LogOptions, On, Op, ReadMode, Scope, SessionLog,
    StateKey, Store, StoreOptions, StoredValue, Unwritable, format::STATE_PREFIX, inspect, json,
    settings::ProjectTrust,
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

/// The state key of `plugin_id` in `scope` at `version`. Above version 1 a key needs a
/// `migrate`; the package's is JavaScript, run by the package on the value the addon reads
/// as stored ([`session_state::SessionState::read_as_stored`]) and handed back to
/// [`StateKey::decide_migrated`], so the key's own is never called: it refuses, naming
/// why, should a future read reach it.
fn state_key_at(plugin_id: &str, scope: &str, version: u32) -> napi::Result<StateKey> {
    let key = key_of(plugin_id, scope)?;
    if version == 1 {
        return Ok(key);
    }
    key.versioned(version, |_, _| {
        Err("the Pi package migrates this state's values itself (in JavaScript)".to_owned())
    })
    .map_err(js_err)
}

/// A state's value stored under another version than the state's, as the package hands it
/// to TypeScript.
#[napi(object)]
pub struct StoredState {
    /// The value as stored (JSON text; `None`: absent, or not read: a newer version).
    pub value: Option<String>,
    /// The state version it was written under.
    pub state_version: u32,
    /// The entry of the event that set it (`entryId` in JavaScript, as in every record).
    pub entry_id: Option<String>,
    /// The core's refusal when the version is newer than the state's
    /// ([`session_state::StateError::NewerStateVersion`]'s message); `None` for an older one.
    pub refusal: Option<String>,
}

/// The value where a state's read or write lands.
enum Stored {
    /// At the state's version (or absent): the value.
    Same(Option<Value>),
    /// Stored under another version: the value as stored, for an older one.
    Other {
        value: Option<Value>,
        version: u32,
        entry: Option<String>,
        refusal: Option<String>,
    },
}

impl Stored {
    /// The value where a read or write of `key` lands, read as stored ([`StoredValue`]),
    /// sorted by its version against the key's: a newer one is refused (the core's
    /// [`StateKey::check_version`] message, typed, not matched on), an absent value is
    /// absent whatever version dropped it, an older one is handed to the package's
    /// `migrate`.
    fn of(stored: StoredValue, key: &StateKey) -> Stored {
        let StoredValue {
            value,
            state_version: version,
            entry,
        } = stored;
        if let Err(refusal) = key.check_version(version, || entry.clone()) {
            return Stored::Other {
                value: None,
                version,
                entry,
                refusal: Some(refusal.to_string()),
            };
        }
        if value.is_none() || version == key.version() {
            return Stored::Same(value);
        }
        Stored::Other {
            value,
            version,
            entry,
            refusal: None,
        }
    }
}

/// A [`Stored::Other`] as TypeScript gets it.
fn stored_state(
    value: Option<&Value>,
    version: u32,
    entry: Option<String>,
    refusal: Option<String>,
) -> StoredState {
    StoredState {
        value: value.map(json::to_string),
        state_version: version,
        entry_id: entry,
        refusal,
    }
}

/// One state (a plugin id in a scope, at a version of its shape) as `openSessionState`
/// holds it: the key, checked once, the core's memo of the state's last decided event,
/// for the next write, and the value a patch left, for `validate`.
#[napi]
pub struct NativeState {
    key: StateKey,
    last: LastEvent,
    /// The session file of the last decided event (the file `prepare_on_last` looks at
    /// when handed none).
    file: PathBuf,
    /// Whether a patch keeps the value it leaves as JSON text in `after` (the state has a
    /// `validate`).
    keep_after: bool,
    after: Option<String>,
}

/// What [`NativeState::prepare_on_last`] is handed in one string (one string crosses into
/// the addon for a fraction of the cost of an array of them): fields separated by NUL, each
/// optional id written `-` (none) or `+` and the id. First the entry Pi appended for the
/// last decided event and its parent (both `-` once told), then Pi's leaf, then one field
/// per entry Pi appended since, from the leaf up: `c` when it is of the state's
/// `customType`, else `o`, and its parent's id. The package hands no walk holding an id
/// with a NUL in it (the memo then does not answer).
struct Walk<'a> {
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

/// The core's decision of `op` on `current` (the value where the write lands, at the
/// key's version) for `key`: the event's `data` as JSON text, the value after it (the
/// core's fold step) and whether the data carries the caller's own text `argument` as
/// the op asked ([`session_state::format::Envelope::carries_text`]: the package then builds the event around its
/// text), or `None` when it changes nothing.
fn decide(
    key: &StateKey,
    current: Option<&Value>,
    op: Op,
    argument: Option<&str>,
) -> napi::Result<Option<Emitted>> {
    let asked = op.name();
    let decided = key.decide(current, key.version(), || None, op);
    Ok(decided.map_err(js_err)?.map(|d| emit(d, asked, argument)))
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
    /// checked as the core checks them (its message otherwise). `keep_after`: a patch keeps
    /// the value it leaves for [`NativeState::take_after`].
    #[napi(constructor)]
    pub fn new(
        plugin_id: String,
        scope: String,
        version: Option<u32>,
        keep_after: Option<bool>,
    ) -> napi::Result<Self> {
        let key = state_key_at(&plugin_id, &scope, version.unwrap_or(1))?;
        let last = LastEvent::new(&key);
        Ok(NativeState {
            key,
            last,
            file: PathBuf::new(),
            keep_after: keep_after.unwrap_or(false),
            after: None,
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

    /// The value the last decided patch leaves, as JSON text (taken: a second call gives
    /// `null`); kept only with `keep_after`.
    #[napi]
    pub fn take_after(&mut self) -> Option<String> {
        self.after.take()
    }

    /// [`NativeStore::prepare`] on top of the state's last event, when the core's memo
    /// ([`LastEvent::value_at`]) finds Pi's leaf in `file` (`None`: the file of the last
    /// decided event) standing on it. `walk` ([`Walk`]) holds Pi's leaf and its entries
    /// from the leaf up, as many as Pi appended after the event (the package reads them from
    /// Pi's memory). The value where the write lands is then the value after that event:
    /// what Pi appended since is not read (the next read reads it). That value is at the
    /// state's own version (its own write left it), so no version is checked. `op`: 0
    /// `set`, 1 `patch`, 2 `drop`. Returns the `data` (JSON text), `true` when that data is
    /// the envelope of `argument` itself (the caller's value printed as the core prints
    /// it: the package builds the event around its own text, [`session_state::format::Envelope::carries_text`]), `null` when
    /// the write changes nothing, or `false` when the memo cannot answer (a session-scope
    /// state, no appended last event, another file or one replaced or rewritten, a leaf
    /// off the event's path, an event of this state since): then `NativeStore.prepare`
    /// reads the file. The value is checked first, so a refusal is the same either way.
    ///
    /// The walk's first two fields, when given, are the entry Pi appended for the event
    /// the last `prepare` or `prepareOnLast` decided and its parent. The memo keeps that
    /// event only when this is the entry it was decided at ([`LastEvent::appended`]); it is
    /// told here, with the next write, and not in a call of its own after each append: a
    /// call into the addon costs a few microseconds when the caches are cold, as they are
    /// after Pi's `fdatasync`. Four arguments, one of them the walk's one string: each
    /// argument's conversion costs as much again cold.
    #[napi]
    pub fn prepare_on_last(
        &mut self,
        file: Option<String>,
        walk: String,
        op: u32,
        argument: Option<String>,
    ) -> napi::Result<Either<Option<String>, bool>> {
        let NativeState {
            key,
            last,
            file: last_file,
            keep_after,
            after: kept,
            ..
        } = self;
        let walk = Walk::parse(&walk)?;
        let kept_it = walk
            .told
            .is_none_or(|id| last.appended(id, walk.told_parent));
        let op = op_of(key, op, argument.as_deref())?;
        if !kept_it {
            return Ok(Either::B(false));
        }
        if let Some(f) = file {
            *last_file = PathBuf::from(f);
        }
        let since = walk.path_up(key.custom_type());
        let Some(current) = last.value_at(&*last_file, walk.leaf, since) else {
            return Ok(Either::B(false));
        };
        let patch = matches!(op, Op::Patch(_));
        let Some((data, after, own)) = decide(key, current, op, argument.as_deref())? else {
            return Ok(Either::A(None));
        };
        if *keep_after && patch {
            *kept = after.as_ref().map(json::to_string);
        }
        last.decided(Some(&*last_file), walk.leaf, after);
        if own {
            return Ok(Either::B(true));
        }
        Ok(Either::A(Some(data)))
    }

    /// Forgets the last event (another session manager, or a force-refresh).
    #[napi]
    pub fn forget(&mut self) {
        self.last.forget();
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

    /// The value of `state` as if the leaf were `at` (`null`: no entry yet). Stored under
    /// the state's version (or absent): its JSON text (the text Pi's `JSON.stringify`
    /// prints), or `null` when absent. Stored under another version: a [`StoredState`],
    /// the value as stored with its version and entry (an older one, which the caller
    /// migrates), or the core's refusal (a newer one).
    #[napi]
    pub fn read_state(
        &mut self,
        state: &NativeState,
        file: Option<String>,
        at: Option<String>,
    ) -> napi::Result<Either<Option<String>, StoredState>> {
        let read = self.resolved(file.as_deref(), &state.key, at.as_deref())?;
        if let Some(f) = &file {
            self.parse_in_background(f);
        }
        Ok(match Stored::of(read, &state.key) {
            Stored::Same(v) => Either::A(v.as_ref().map(json::to_string)),
            Stored::Other {
                value,
                version,
                entry,
                refusal,
            } => Either::B(stored_state(value.as_ref(), version, entry, refusal)),
        })
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

    /// The `data` of the event that `op` (0 `set`, 1 `patch`, 2 `drop`) with `argument` (JSON
    /// text) would append for `state` at `at`, as JSON text; `true` when that data is the
    /// envelope of `argument` itself (as [`NativeState::prepare_on_last`] answers); `null`
    /// when it would change nothing. Refused with the core's errors (and nothing to append) for a value it
    /// refuses. The core decides ([`StateKey::decide`]) on the value at `at`, read as
    /// `read_state` reads it; the state's memo keeps the value after the event for the
    /// next write ([`LastEvent::decided`], [`NativeState::prepare_on_last`]).
    ///
    /// When the value there is stored under another version than the state's, the answer
    /// is the [`StoredState`] `read_state` gives, and nothing is decided: a newer one is
    /// refused; for an older one the caller migrates the value and asks again with the
    /// result as `migrated` (JSON text). The event is then the core's decision on the
    /// migrated value ([`StateKey::decide`], from the version it was stored under): a whole `set` of the value after `op` (or
    /// a `drop`), at the state's version.
    #[napi]
    pub fn prepare(
        &mut self,
        state: &mut NativeState,
        file: Option<String>,
        at: Option<String>,
        op: u32,
        argument: Option<String>,
        migrated: Option<String>,
    ) -> napi::Result<Either3<Option<String>, bool, StoredState>> {
        let NativeState {
            key,
            last,
            file: last_file,
            keep_after,
            after: kept,
        } = state;
        let op = op_of(key, op, argument.as_deref())?;
        let patch = matches!(op, Op::Patch(_));
        let read = self.resolved(file.as_deref(), key, at.as_deref())?;
        // The envelope of the caller's text is confirmed only for the op as asked: on a
        // migrated value the event is a whole `set` of the value after it.
        let decided = match Stored::of(read, key) {
            Stored::Same(current) => decide(key, current.as_ref(), op, argument.as_deref())?,
            Stored::Other {
                value,
                version,
                entry,
                refusal,
            } => {
                let Some(text) = migrated.filter(|_| refusal.is_none()) else {
                    return Ok(Either3::C(stored_state(
                        value.as_ref(),
                        version,
                        entry,
                        refusal,
                    )));
                };
                // The caller's migration of exactly this value: the core checks it as a
                // value (a refusal names the entry) and decides a whole `set` on it.
                let migrated = json::from_str(&text).map_err(js_err)?;
                let asked = op.name();
                key.decide_migrated(Some(&migrated), version, || entry, op)
                    .map_err(js_err)?
                    .map(|d| emit(d, asked, argument.as_deref()))
            }
        };
        let Some((data, after, own)) = decided else {
            return Ok(Either3::A(None));
        };
        if *keep_after && patch {
            *kept = after.as_ref().map(json::to_string);
        }
        if let Some(f) = &file {
            *last_file = PathBuf::from(f);
        }
        last.decided(file.as_deref(), at.as_deref(), after);
        if own {
            return Ok(Either3::B(true));
        }
        Ok(Either3::A(Some(data)))
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
