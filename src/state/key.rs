//! A plugin's state key (docs/spec.md §3): the plugin id, the scope and the `customType` of
//! its events, validated without opening anything, as redb's `TableDefinition` is a value
//! that needs no `Database`. A [`crate::Store`] turns a key into a
//! [`crate::SessionState`] that reads and writes; a host that appends events itself (the
//! Pi package, through `pi.appendEntry`) uses the key alone: it checks the caller's value
//! and [`StateKey::decide`]s the event to append, with the core's errors.
//!
//! ```
//! use session_state::{Op, Scope, StateKey};
//! use serde_json::json;
//!
//! let todo = StateKey::<Vec<String>>::new("todo", Scope::Branch)?;
//! assert_eq!(todo.custom_type(), "session-state/todo");
//! let value = todo.check_value(&vec!["review".to_string()])?;
//! // On an absent value (written under version 1: there is no event).
//! let decided = todo.decide(None, 1, || None, Op::Set(value.clone()))?.expect("a change");
//! assert_eq!(decided.event.to_data(), json!({"v": 1, "scope": "branch", "op": "set", "value": ["review"]}));
//! assert_eq!(decided.after(), Some(&value));
//! assert!(todo.decide(Some(&value), 1, || None, Op::Set(value.clone()))?.is_none()); // unchanged
//! assert!(StateKey::<()>::new("Todo", Scope::Branch).is_err());
//! # Ok::<(), session_state::Error>(())
//! ```

use super::decide::{Decided, TooDeepResult, check_result, decide_versioned};
use super::depth::{self, MAX_DEPTH};
use super::envelope::{Op, STATE_PREFIX, Scope};
use crate::error::{Error, Result, StateError};
use serde::Serialize;
use serde_json::Value;
use std::marker::PhantomData;

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

/// A scope named by text (`"branch"` or `"session"`), as an option of a host is checked.
pub fn parse_scope(name: &str) -> Result<Scope> {
    match name {
        "branch" => Ok(Scope::Branch),
        "session" => Ok(Scope::Session),
        other => Err(Error::InvalidOption {
            option: "scope",
            detail: format!("{other:?} is not a scope: use \"session\" or \"branch\""),
        }),
    }
}

/// What a host found wrong with a value before it could hand it over as JSON (the Pi
/// package: what only JavaScript can hold), for [`StateKey::refusal`] to word as the core
/// refuses it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Unwritable {
    /// Not a JSON value (`undefined`, a cycle, a BigInt, a function…): what and why.
    NotJson(String),
    /// NaN or ±Infinity, which JSON cannot carry.
    NonFinite(f64),
    /// Nested deeper than [`MAX_DEPTH`] levels of arrays and objects.
    TooDeep,
}

/// One plugin's state in one scope, as a value: the plugin id (checked by
/// [`validate_plugin_id`]), the scope and the `customType` of its events
/// (`session-state/<plugin>`). `T` is the type of the value; building a key opens
/// nothing, so a key can be made once and used on any [`crate::Store`]
/// ([`crate::Store::state_of`]). Cloning copies one short string.
pub struct StateKey<T = Value> {
    /// `session-state/<plugin>`; the plugin id is what follows the prefix.
    /// Shared with every entry a write builds (`NewEntry::custom_printed`).
    custom_type: std::sync::Arc<str>,
    scope: Scope,
    /// The version of the state's shape this key reads and writes (1 by default).
    version: u32,
    /// Turns a value written under an older version into this version's shape.
    migrate: Option<std::sync::Arc<Migrate>>,
    /// The state's own rules for a value ([`StateKey::validated`]).
    validate: Option<std::sync::Arc<Validate>>,
    _t: PhantomData<fn() -> T>,
}

/// A key's migration ([`StateKey::versioned`]): the value as written under version
/// `from` (older than the key's) in, the value in the key's shape out, or why not.
pub type Migrate = dyn Fn(Value, u32) -> std::result::Result<Value, String> + Send + Sync;

/// A key's validation ([`StateKey::validated`]): `Ok` for a valid value, else where and what.
type Validate = dyn Fn(&Value) -> std::result::Result<(), Invalid> + Send + Sync;

/// What a key's validation ([`StateKey::validated`]) found wrong with a value: where
/// (`path`, a JSON Pointer; `""` for the value itself) and what (`detail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The first failing place, as a JSON Pointer (`"/items/0/done"`; `""`: the value itself).
    pub path: String,
    /// What is wrong there.
    pub detail: String,
}

impl<T> Clone for StateKey<T> {
    fn clone(&self) -> Self {
        StateKey {
            custom_type: self.custom_type.clone(),
            scope: self.scope,
            version: self.version,
            migrate: self.migrate.clone(),
            validate: self.validate.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> PartialEq for StateKey<T> {
    fn eq(&self, other: &Self) -> bool {
        *self.custom_type == *other.custom_type
            && self.scope == other.scope
            && self.version == other.version
    }
}

impl<T> Eq for StateKey<T> {}

impl<T> std::fmt::Debug for StateKey<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateKey")
            .field("plugin", &self.plugin_id())
            .field("scope", &self.scope)
            .field("version", &self.version)
            .finish()
    }
}

impl<T> StateKey<T> {
    /// The key of `plugin_id` in `scope`; the plugin id is checked here
    /// ([`validate_plugin_id`]: `Error::InvalidOption`).
    pub fn new(plugin_id: impl AsRef<str>, scope: Scope) -> Result<StateKey<T>> {
        let plugin_id = plugin_id.as_ref();
        validate_plugin_id(plugin_id)?;
        Ok(StateKey::checked(plugin_id, scope))
    }

    /// [`StateKey::new`] with the scope named by text (`"branch"` or `"session"`), for hosts whose
    /// options arrive as strings.
    pub fn named(plugin_id: impl AsRef<str>, scope: &str) -> Result<StateKey<T>> {
        let plugin_id = plugin_id.as_ref();
        validate_plugin_id(plugin_id)?;
        Ok(StateKey::checked(plugin_id, parse_scope(scope)?))
    }

    /// A key of a plugin id already checked.
    fn checked(plugin_id: &str, scope: Scope) -> StateKey<T> {
        StateKey {
            custom_type: format!("{STATE_PREFIX}{plugin_id}").into(),
            scope,
            version: 1,
            migrate: None,
            validate: None,
            _t: PhantomData,
        }
    }

    /// The plugin id.
    pub fn plugin_id(&self) -> &str {
        &self.custom_type[STATE_PREFIX.len()..]
    }

    /// The scope.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The `customType` of this state's events (`session-state/<plugin>`).
    pub fn custom_type(&self) -> &str {
        &self.custom_type
    }

    /// [`StateKey::custom_type`], shared.
    pub(crate) fn custom_type_shared(&self) -> std::sync::Arc<str> {
        self.custom_type.clone()
    }

    /// The same plugin, scope and version for values of another type.
    pub fn cast<U>(&self) -> StateKey<U> {
        StateKey {
            custom_type: self.custom_type.clone(),
            scope: self.scope,
            version: self.version,
            migrate: self.migrate.clone(),
            validate: self.validate.clone(),
            _t: PhantomData,
        }
    }

    /// This key at version `version` of the state's shape, with the function that turns
    /// a value written under an older version (`from`, 1 for an event without a
    /// version) into this version's shape. Every write records `version` in its event
    /// (`"stateVersion"`, when above 1); a read of an older value returns `migrate`'s
    /// result, in memory only (nothing is written, and the projection keeps the stored
    /// value); the next write is a whole `set` of the migrated value at this version. A
    /// state written under a newer version is refused by every read and write
    /// ([`StateError::NewerStateVersion`]). Version 0 is refused ([`Error::InvalidOption`]).
    ///
    /// ```
    /// use session_state::{Scope, StateKey};
    /// use serde_json::{json, Value};
    /// // Version 1 stored a name; version 2 stores {"name", "since"}.
    /// let role = StateKey::<Value>::new("role", Scope::Branch)?.versioned(2, |old, from| {
    ///     assert_eq!(from, 1);
    ///     Ok(json!({"name": old, "since": null}))
    /// })?;
    /// assert_eq!(role.version(), 2);
    /// # Ok::<(), session_state::Error>(())
    /// ```
    pub fn versioned(
        mut self,
        version: u32,
        migrate: impl Fn(Value, u32) -> std::result::Result<Value, String> + Send + Sync + 'static,
    ) -> Result<StateKey<T>> {
        if version == 0 {
            return Err(Error::InvalidOption {
                option: "version",
                detail: "0 is not a state version: versions start at 1".into(),
            });
        }
        self.version = version;
        self.migrate = Some(std::sync::Arc::new(migrate));
        Ok(self)
    }

    /// This key with the state's own rules for a value: `validate` answers `Ok` for a
    /// valid value, else where and what fails ([`Invalid`]). Every read, on every target,
    /// runs it on the value it resolves (after the version check, the migration and the
    /// value rules a migrated value keeps: [`StateKey::resolve`]), and every write on the
    /// value it leaves (after the core's merge: [`StateKey::decide`]; a `drop` leaves none
    /// and a write that changes nothing writes nothing). A refusal is
    /// [`StateError::Invalid`]: on a read naming the entry that set the value, on a write
    /// with nothing written.
    ///
    /// ```
    /// use session_state::{Invalid, Op, Scope, StateKey};
    /// use serde_json::{json, Value};
    /// let count = StateKey::<Value>::new("count", Scope::Branch)?.validated(|v| match v {
    ///     Value::Number(_) => Ok(()),
    ///     _ => Err(Invalid { path: String::new(), detail: "not a number".into() }),
    /// });
    /// assert!(count.decide(None, 1, || None, Op::Set(json!(2)))?.is_some());
    /// let e = count.decide(None, 1, || None, Op::Set(json!("two"))).expect_err("refused");
    /// assert!(e.to_string().ends_with("does not pass validate at the root (the value itself): not a number; nothing was written"), "{e}");
    /// # Ok::<(), session_state::Error>(())
    /// ```
    pub fn validated(
        mut self,
        validate: impl Fn(&Value) -> std::result::Result<(), Invalid> + Send + Sync + 'static,
    ) -> StateKey<T> {
        self.validate = Some(std::sync::Arc::new(validate));
        self
    }

    /// The version of the state's shape this key reads and writes (1 unless
    /// [`StateKey::versioned`]).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The value a read returns for `value`, written under `stored` (the version of the
    /// event that made it; 1 when there is none), in the core's order: refused when
    /// `stored` is newer than the key's version ([`StateError::NewerStateVersion`]);
    /// migrated when it is older (an absent value stays absent), the migrated value kept
    /// to the value rules every write keeps (nesting, numbers: [`StateError::Migrate`]
    /// when it breaks one); then checked by the key's validation, when it has one
    /// ([`StateKey::validated`]: [`StateError::Invalid`]). `entry` names the event, for
    /// the errors.
    pub fn resolve(
        &self,
        value: Option<Value>,
        stored: u32,
        entry: impl FnOnce() -> Option<String>,
    ) -> Result<Option<Value>> {
        if stored == self.version && self.validate.is_none() {
            return Ok(value);
        }
        // One error at most is made, so the entry is named at most once.
        let mut entry = Some(entry);
        let mut named = || entry.take().and_then(|f| f());
        let value = self.migrated(value, stored, &mut named)?;
        if let (Some(v), Some(validate)) = (&value, &self.validate) {
            validate(v).map_err(|Invalid { path, detail }| StateError::Invalid {
                plugin: self.plugin_id().to_owned(),
                write: false,
                entry_id: named(),
                migrated_from: (stored != self.version).then_some(stored),
                to: self.version,
                path,
                detail,
            })?;
        }
        Ok(value)
    }

    /// [`StateKey::resolve`] without the key's validation: the version check, and the
    /// migration of an older value kept to the value rules.
    fn migrated(
        &self,
        value: Option<Value>,
        stored: u32,
        named: &mut dyn FnMut() -> Option<String>,
    ) -> Result<Option<Value>> {
        if stored == self.version {
            return Ok(value);
        }
        self.check_version(stored, &mut *named)?;
        let failed = |detail: String, named: &mut dyn FnMut() -> Option<String>| {
            Error::State(StateError::Migrate {
                plugin: self.plugin_id().to_owned(),
                from: stored,
                to: self.version,
                entry_id: named(),
                detail,
            })
        };
        match (value, &self.migrate) {
            (Some(v), Some(migrate)) => {
                let out = migrate(v, stored).map_err(|detail| failed(detail, named))?;
                // The value rules every write keeps, on what the migration returned: a
                // migration that breaks one is refused here, naming the entry, not later
                // as a write's refusal of a value the caller never gave.
                let (depth, numbers) = crate::json::depth_and_numbers(&out);
                let why = if depth > MAX_DEPTH {
                    Some(format!(
                        "it is nested {depth} levels deep, deeper than {MAX_DEPTH} levels of \
                         arrays and objects"
                    ))
                } else {
                    numbers.err().map(|e| e.to_string())
                };
                match why {
                    Some(why) => Err(failed(
                        format!("migrate returned a value that cannot be written: {why}"),
                        named,
                    )),
                    None => Ok(Some(out)),
                }
            }
            // Absent stays absent; and a key without `migrate` is of version 1, below
            // which nothing is written.
            (value, _) => Ok(value),
        }
    }

    /// Refuses a state written under a newer version than the key's.
    pub fn check_version(&self, stored: u32, entry: impl FnOnce() -> Option<String>) -> Result<()> {
        if stored > self.version {
            return Err(StateError::NewerStateVersion {
                plugin: self.plugin_id().to_owned(),
                stored,
                known: self.version,
                entry_id: entry(),
            }
            .into());
        }
        Ok(())
    }

    /// The JSON value a write would store for `value` (or a patch apply), refused before
    /// anything is written: a value that cannot be serialized, is nested deeper than
    /// [`MAX_DEPTH`] or holds NaN or ±Infinity ([`StateError::Serialize`]: JSON has no such
    /// number; serde_json and Pi's `JSON.stringify` would write `null`), and an integer
    /// that Pi's JavaScript would not read back as written, such as one beyond 2^53
    /// ([`StateError::UnrepresentableValue`]; store it as a string).
    pub fn check_value<V: Serialize + ?Sized>(&self, value: &V) -> Result<Value> {
        let v = depth::to_value_limited(value).map_err(|source| self.serialize_error(source))?;
        self.check_json(&v)?;
        Ok(v)
    }

    /// [`StateKey::check_value`] for JSON text (in [`crate::json`]'s lossless reading):
    /// text that does not parse is refused as a value that cannot be serialized.
    pub fn check_text(&self, text: &str) -> Result<Value> {
        let v = crate::json::from_str(text)
            .map_err(|e| self.refusal(Unwritable::NotJson(e.to_string())))?;
        self.check_json(&v)?;
        Ok(v)
    }

    /// [`StateKey::check_value`] on the value or patch an op carries (a `drop` carries
    /// none), already JSON: for callers that build the [`Op`] themselves.
    pub fn check_op(&self, op: &Op) -> Result<()> {
        match op {
            Op::Set(v) | Op::Patch(v) => self.check_json(v),
            Op::Drop => Ok(()),
        }
    }

    /// The one decision of every write: the event to append for `op` on top of
    /// `current` (the plugin's folded value where the write lands; `None`: absent), with
    /// the value after it ([`Decided::after`]), or `Ok(None)` when it changes nothing: the
    /// value after it equals `current` as Pi's JavaScript sees it (`1` is `1.0`, key order
    /// aside). Every write of this crate decides here (the write pipeline's decision
    /// step), and so does a host that appends the event itself (its `data` is
    /// [`Envelope::to_data`](super::envelope::Envelope::to_data), its `customType` [`StateKey::custom_type`]).
    ///
    /// `stored` is the version `current` was written under (the version of the event
    /// that made it; 1 when there is none), and `entry` names that event for the errors.
    /// A newer version than the key's is refused ([`StateError::NewerStateVersion`]); an
    /// older value is migrated first and the event is a whole `set` (or a `drop`) at the
    /// key's version, so that a chain of patches never mixes versions. The event always
    /// records the key's version.
    ///
    /// Refused ([`StateError::Serialize`]) when the value it would leave could not be read
    /// back by this crate: one nested [`crate::json::MAX_READ_DEPTH`] levels or deeper.
    /// The op's own value or patch is not checked here ([`StateKey::check_op`] does, and
    /// the writers call it first, before anything is opened); what the value inherits
    /// from the session (a value Pi wrote thousands of levels deep, ±Infinity, an integer
    /// beyond 2^53) passes, so that writes on top of it keep working.
    ///
    /// The key's validation ([`StateKey::validated`]) runs last, on the value the event
    /// leaves ([`StateError::Invalid`], nothing to append); the value where the write
    /// lands is not validated (a write may replace an invalid value).
    pub fn decide(
        &self,
        current: Option<&Value>,
        stored: u32,
        entry: impl FnOnce() -> Option<String>,
        op: Op,
    ) -> Result<Option<Decided>> {
        let decided = if stored == self.version {
            decide_versioned(self.scope, current, op, self.version, true)
        } else {
            let mut entry = Some(entry);
            let mut named = || entry.take().and_then(|f| f());
            let migrated =
                self.migrated(current.map(crate::json::clone_value), stored, &mut named)?;
            decide_versioned(self.scope, migrated.as_ref(), op, self.version, false)
        }
        .map_err(|e| self.too_deep_result(e))?;
        // The key's validation, last, on the value the write leaves.
        if let (Some(validate), Some(after)) =
            (&self.validate, decided.as_ref().and_then(Decided::after))
        {
            validate(after).map_err(|Invalid { path, detail }| StateError::Invalid {
                plugin: self.plugin_id().to_owned(),
                write: true,
                entry_id: None,
                migrated_from: None,
                to: self.version,
                path,
                detail,
            })?;
        }
        Ok(decided)
    }

    /// The events that made this state's value at the log's active leaf, oldest first,
    /// folded for this call alone (no [`crate::Store`], no database: for tools that look
    /// at a log once; [`crate::SessionState::history`] keeps its fold memo). Each entry
    /// names its event's `state_version`; values are as stored, never migrated.
    pub fn history(&self, log: &crate::tree::SessionLog) -> Result<Vec<super::fold::HistoryEntry>> {
        let mut folds = super::fold::Folds::of(log);
        super::fold::history(
            &mut folds,
            log,
            self.plugin_id(),
            self.scope,
            log.tree().leaf_index(),
        )
    }

    /// Refuses the value a write would leave when this crate could not read it back, as
    /// [`StateKey::decide`] refuses it: for hosts that compute the next value themselves.
    pub fn check_result(&self, next: &Value) -> Result<()> {
        check_result(next).map_err(|e| self.too_deep_result(e))
    }

    fn too_deep_result(&self, _: TooDeepResult) -> Error {
        self.serialize_error(<serde_json::Error as serde::ser::Error>::custom(format!(
            "the value would be nested deeper than {} levels of arrays and objects, \
             which this crate reads at most (with the event's data object)",
            crate::json::MAX_READ_DEPTH - 1
        )))
    }

    /// The error the core refuses `why` with, naming this key's plugin: for hosts that
    /// find a value unwritable before they can hand it over as JSON.
    pub fn refusal(&self, why: Unwritable) -> Error {
        let detail = match why {
            Unwritable::NotJson(detail) => detail,
            Unwritable::NonFinite(n) => depth::non_finite_message(n),
            Unwritable::TooDeep => depth::too_deep_message(),
        };
        self.serialize_error(<serde_json::Error as serde::ser::Error>::custom(detail))
    }

    /// The caller's value or patch, already JSON: no deeper than [`MAX_DEPTH`], and every
    /// number one Pi's JavaScript reads back as written.
    fn check_json(&self, v: &Value) -> Result<()> {
        let (depth, numbers) = crate::json::depth_and_numbers(v);
        if depth > MAX_DEPTH {
            return Err(self.refusal(Unwritable::TooDeep));
        }
        numbers.map_err(|e| {
            Error::State(StateError::UnrepresentableValue {
                plugin: self.plugin_id().to_owned(),
                detail: e.to_string(),
            })
        })
    }

    fn serialize_error(&self, source: serde_json::Error) -> Error {
        Error::State(StateError::Serialize {
            plugin: self.plugin_id().to_owned(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::envelope::Envelope;
    use serde_json::json;

    #[test]
    fn a_key_validates_its_plugin_id_and_scope_name_without_a_store() {
        let k = StateKey::<Value>::named("my-ext.todo", "session").expect("valid");
        assert_eq!(k.plugin_id(), "my-ext.todo");
        assert_eq!(k.scope(), Scope::Session);
        assert_eq!(k.custom_type(), "session-state/my-ext.todo");
        for bad in ["", "Todo", "a/b", "é"] {
            let e = StateKey::<Value>::new(bad, Scope::Branch).expect_err(bad);
            assert!(e.to_string().contains("is not a valid plugin id"), "{e}");
        }
        let e = StateKey::<Value>::named("todo", "sideways").expect_err("a scope");
        assert!(e.to_string().contains("\"sideways\" is not a scope"), "{e}");
        // The plugin id is checked before the scope.
        let e = StateKey::<Value>::named("Bad", "sideways").expect_err("both");
        assert!(e.to_string().contains("plugin id"), "{e}");
    }

    #[test]
    fn values_are_checked_the_same_from_rust_from_text_and_as_an_op() {
        let k = StateKey::<Value>::new("todo", Scope::Branch).expect("valid");
        let big = json!(9007199254740993u64);
        for (what, r) in [
            ("value", k.check_value(&big).map(|_| ())),
            ("op", k.check_op(&Op::Patch(big.clone()))),
        ] {
            assert!(
                matches!(r, Err(Error::State(StateError::UnrepresentableValue { ref plugin, .. })) if plugin == "todo"),
                "{what}: {r:?}"
            );
        }
        let mut deep = json!(0);
        for _ in 0..=MAX_DEPTH {
            deep = json!([deep]);
        }
        let too_deep = k.refusal(Unwritable::TooDeep).to_string();
        assert!(too_deep.contains("deeper than 100"), "{too_deep}");
        assert_eq!(
            k.check_value(&deep).expect_err("deep").to_string(),
            too_deep
        );
        assert_eq!(
            k.check_op(&Op::Set(deep.clone()))
                .expect_err("deep")
                .to_string(),
            too_deep
        );
        assert_eq!(
            k.check_value(&f64::NAN).expect_err("NaN").to_string(),
            k.refusal(Unwritable::NonFinite(f64::NAN)).to_string()
        );
        // Text is read as JavaScript's `JSON.parse` reads it: that number is already 2^53.
        assert_eq!(
            k.check_text("9007199254740993").expect("read as JS does"),
            json!(9007199254740992u64)
        );
        let deep_text = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(
            k.check_text(&deep_text).expect_err("deep").to_string(),
            too_deep
        );
        assert!(
            k.check_text("{")
                .expect_err("text")
                .to_string()
                .contains("plugin 'todo'")
        );
        assert!(k.check_op(&Op::Drop).is_ok());
    }

    /// A key at `version` whose `migrate` wraps the value with the version it came from.
    impl StateKey<Value> {
        /// The event [`StateKey::decide`] decides, alone.
        fn decide_on(
            &self,
            current: Option<&Value>,
            stored: u32,
            entry: impl FnOnce() -> Option<String>,
            op: Op,
        ) -> Result<Option<Envelope>> {
            self.decide(current, stored, entry, op)
                .map(|d| d.map(|d| d.event))
        }
    }

    fn tagging(version: u32) -> StateKey<Value> {
        StateKey::<Value>::new("todo", Scope::Branch)
            .expect("valid")
            .versioned(version, |v, from| Ok(json!({"from": from, "v": v})))
            .expect("a version")
    }

    /// An entry closure that counts its calls.
    fn counted(calls: &std::cell::Cell<u32>) -> impl FnOnce() -> Option<String> + '_ {
        move || {
            calls.set(calls.get() + 1);
            Some("e7".to_owned())
        }
    }

    /// A key at version 2 whose `migrate` nests the value `n` levels deep when it is a
    /// number `n`, and whose validation wants an object with a number `n`, counting its calls.
    fn validated(calls: &std::sync::Arc<std::sync::atomic::AtomicU32>) -> StateKey<Value> {
        let calls = calls.clone();
        StateKey::<Value>::new("counter", Scope::Branch)
            .expect("valid")
            .versioned(2, |v, _| match v.as_u64() {
                Some(n) if n > 1 => {
                    let mut deep = json!(0);
                    for _ in 0..n {
                        deep = json!([deep]);
                    }
                    Ok(deep)
                }
                _ => Ok(json!({"n": v})),
            })
            .expect("a version")
            .validated(move |v| {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                match v.get("n") {
                    Some(Value::Number(_)) => Ok(()),
                    Some(_) => Err(Invalid {
                        path: "/n".into(),
                        detail: "not a number".into(),
                    }),
                    None => Err(Invalid {
                        path: String::new(),
                        detail: "no n".into(),
                    }),
                }
            })
    }

    #[test]
    fn the_validation_hook_runs_last_on_what_a_read_resolves_and_what_a_write_leaves() {
        use std::sync::atomic::Ordering::SeqCst;
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let k = validated(&calls);
        let e7 = || Some("e7".to_owned());
        // A read: a valid value at the key's version, then one it refuses, naming the entry.
        assert_eq!(
            k.resolve(Some(json!({"n": 1})), 2, e7).expect("valid"),
            Some(json!({"n": 1}))
        );
        let e = k
            .resolve(Some(json!({"n": "x"})), 2, e7)
            .expect_err("invalid");
        assert_eq!(
            e.to_string(),
            "plugin 'counter': the stored value (entry 'e7') does not pass validate at /n: not a number"
        );
        // An older value: migrated, then validated, the message naming the migration.
        match k.resolve(Some(json!("x")), 1, e7) {
            Err(e @ Error::State(StateError::Invalid { .. })) => {
                assert_eq!(
                    e.to_string(),
                    "plugin 'counter': the stored value (entry 'e7'), migrated from version 1 to 2, does not pass validate at /n: not a number"
                );
                let Error::State(StateError::Invalid {
                    write,
                    entry_id,
                    migrated_from,
                    to,
                    ..
                }) = e
                else {
                    unreachable!()
                };
                assert_eq!(
                    (write, entry_id.as_deref(), migrated_from, to),
                    (false, Some("e7"), Some(1), 2)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(calls.load(SeqCst), 3);
        // Absent: nothing to validate. Newer: refused before anything runs. A migration
        // that breaks a value rule: `Migrate`, before the validation.
        assert_eq!(k.resolve(None, 2, e7).expect("absent"), None);
        assert!(matches!(
            k.resolve(Some(json!({"n": "x"})), 3, e7),
            Err(Error::State(StateError::NewerStateVersion { .. }))
        ));
        match k.resolve(Some(json!(150)), 1, e7) {
            Err(Error::State(StateError::Migrate {
                entry_id, detail, ..
            })) => {
                assert_eq!(entry_id.as_deref(), Some("e7"));
                assert!(
                    detail.ends_with(
                        "nested 150 levels deep, deeper than 100 levels of arrays and objects"
                    ),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
        for op in [Op::Set(json!(150)), Op::Drop] {
            assert!(matches!(
                k.decide(Some(&json!(150)), 1, e7, op),
                Err(Error::State(StateError::Migrate { .. }))
            ));
        }
        assert_eq!(
            calls.load(SeqCst),
            3,
            "the validation never ran on a refused value"
        );
        // A write: the value it leaves, after the merge; the value under it is not asked.
        let cur = json!({"n": "x"});
        assert!(
            k.decide(Some(&cur), 2, e7, Op::Set(json!({"n": 2})))
                .expect("valid")
                .is_some()
        );
        let e = k
            .decide(Some(&json!({"n": 1})), 2, e7, Op::Patch(json!({"n": "y"})))
            .expect_err("the merge leaves an invalid value");
        assert!(
            matches!(&e, Error::State(StateError::Invalid { write: true, entry_id: None, path, .. }) if path == "/n"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "plugin 'counter': the value the write would leave does not pass validate at /n: not a number; nothing was written"
        );
        let e = k.decide(None, 2, e7, Op::Set(json!(1))).expect_err("no n");
        assert!(
            e.to_string()
                .contains("at the root (the value itself): no n"),
            "{e}"
        );
        // An older value migrated for a write is not validated; what the write leaves is.
        assert!(
            k.decide(Some(&json!("x")), 1, e7, Op::Patch(json!({"n": 3})))
                .expect("valid")
                .is_some()
        );
        // A drop leaves nothing; a write that changes nothing writes nothing.
        let before = calls.load(SeqCst);
        assert!(
            k.decide(Some(&cur), 2, e7, Op::Drop)
                .expect("a drop")
                .is_some()
        );
        assert!(
            k.decide(Some(&cur), 2, e7, Op::Set(cur.clone()))
                .expect("unchanged")
                .is_none()
        );
        assert_eq!(calls.load(SeqCst), before);
    }

    #[test]
    fn version_0_is_refused_and_a_key_keeps_its_version_when_cast() {
        let e = StateKey::<Value>::new("todo", Scope::Branch)
            .expect("valid")
            .versioned(0, |v, _| Ok(v))
            .expect_err("version 0");
        assert!(
            matches!(&e, Error::InvalidOption { option: "version", detail } if detail.contains("0 is not a state version")),
            "{e}"
        );
        assert_eq!(
            StateKey::<Value>::new("todo", Scope::Branch)
                .expect("valid")
                .version(),
            1
        );
        let k = tagging(3).cast::<Vec<String>>();
        assert_eq!(k.version(), 3);
        // The migrate travels with the cast.
        assert_eq!(
            k.resolve(Some(json!(1)), 2, || None).expect("migrated"),
            Some(json!({"from": 2, "v": 1}))
        );
        assert_ne!(tagging(3), tagging(2));
    }

    #[test]
    fn resolve_keeps_its_own_version_migrates_older_and_refuses_newer() {
        let k = tagging(3);
        let calls = std::cell::Cell::new(0);
        // The key's version: the value as it is; the entry is not asked for.
        assert_eq!(
            k.resolve(Some(json!([1])), 3, counted(&calls))
                .expect("same"),
            Some(json!([1]))
        );
        // Older: migrated from the version it was written under; absent stays absent.
        assert_eq!(
            k.resolve(Some(json!([1])), 1, counted(&calls))
                .expect("older"),
            Some(json!({"from": 1, "v": [1]}))
        );
        assert_eq!(k.resolve(None, 2, counted(&calls)).expect("absent"), None);
        assert_eq!(calls.get(), 0, "no error, no entry asked for");
        // Newer: refused, present or absent, naming plugin, versions and entry, once.
        for value in [Some(json!([1])), None] {
            match k.resolve(value, 4, counted(&calls)) {
                Err(Error::State(StateError::NewerStateVersion {
                    plugin,
                    stored,
                    known,
                    entry_id,
                })) => assert_eq!(
                    (plugin.as_str(), stored, known, entry_id.as_deref()),
                    ("todo", 4, 3, Some("e7"))
                ),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(calls.get(), 2);
        assert!(k.check_version(3, || None).is_ok());
        assert!(k.check_version(4, || None).is_err());
        // A plain key is of version 1: anything above is newer.
        let plain = StateKey::<Value>::new("todo", Scope::Branch).expect("valid");
        assert!(matches!(
            plain.resolve(Some(json!(1)), 2, || None),
            Err(Error::State(StateError::NewerStateVersion {
                stored: 2,
                known: 1,
                entry_id: None,
                ..
            }))
        ));
    }

    #[test]
    fn a_failing_migrate_is_an_error_naming_versions_and_entry_on_read_and_write() {
        let k = StateKey::<Value>::new("todo", Scope::Session)
            .expect("valid")
            .versioned(4, |_, from| Err(format!("no way from {from}")))
            .expect("a version");
        let check = |r: Result<()>| match r {
            Err(e @ Error::State(StateError::Migrate { .. })) => {
                let text = e.to_string();
                let Error::State(StateError::Migrate {
                    plugin,
                    from,
                    to,
                    entry_id,
                    detail,
                }) = e
                else {
                    unreachable!()
                };
                assert_eq!(
                    (
                        plugin.as_str(),
                        from,
                        to,
                        entry_id.as_deref(),
                        detail.as_str()
                    ),
                    ("todo", 2, 4, Some("e7"), "no way from 2")
                );
                assert!(
                    text.contains("from version 2 to 4") && text.contains("e7"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        };
        let calls = std::cell::Cell::new(0);
        check(k.resolve(Some(json!(1)), 2, counted(&calls)).map(|_| ()));
        for op in [Op::Set(json!(2)), Op::Patch(json!({"a": 1}))] {
            check(
                k.decide_on(Some(&json!(1)), 2, counted(&calls), op)
                    .map(|_| ()),
            );
        }
        assert_eq!(calls.get(), 3, "the entry asked for once per error");
        // Nothing to migrate: an absent value of an older version.
        assert!(matches!(
            k.decide_on(None, 2, || None, Op::Set(json!(2))),
            Ok(Some(Envelope {
                state_version: 4,
                ..
            }))
        ));
    }

    #[test]
    fn decide_on_an_older_value_writes_a_whole_set_at_the_keys_version() {
        let k = tagging(3);
        let old = json!({"a": 1});
        let migrated = json!({"from": 2, "v": {"a": 1}});
        let set_at_3 = |v: Value| Envelope {
            scope: Scope::Branch,
            op: Op::Set(v),
            state_version: 3,
        };
        let decided = |op| k.decide_on(Some(&old), 2, || None, op).expect("decided");
        // A write that leaves the migrated value as it is still appends its set, which
        // records the version.
        assert_eq!(
            decided(Op::Set(migrated.clone())),
            Some(set_at_3(migrated.clone()))
        );
        // A patch is applied to the migrated value and written whole.
        assert_eq!(
            decided(Op::Patch(json!({"b": 2}))),
            Some(set_at_3(json!({"from": 2, "v": {"a": 1}, "b": 2})))
        );
        // Even a patch that changes nothing in the migrated value.
        assert_eq!(
            decided(Op::Patch(json!({"from": 2}))),
            Some(set_at_3(migrated))
        );
        assert_eq!(
            decided(Op::Drop),
            Some(Envelope {
                scope: Scope::Branch,
                op: Op::Drop,
                state_version: 3
            })
        );
        assert_eq!(
            set_at_3(json!(1)).data_text(),
            r#"{"v":2,"stateVersion":3,"scope":"branch","op":"set","value":1}"#
        );
    }

    #[test]
    fn decide_on_an_older_absent_value_decides_as_on_any_absent_value() {
        let k = tagging(3);
        // A drop over an older absent value changes nothing.
        assert_eq!(
            k.decide_on(None, 1, || None, Op::Drop).expect("decided"),
            None
        );
        assert_eq!(
            k.decide_on(None, 2, || None, Op::Drop).expect("decided"),
            None
        );
        // A patch on it stays a patch (nothing of another version under it), at 3.
        assert_eq!(
            k.decide_on(None, 1, || None, Op::Patch(json!({"a": 1})))
                .expect("decided"),
            Some(Envelope {
                scope: Scope::Branch,
                op: Op::Patch(json!({"a": 1})),
                state_version: 3
            })
        );
    }

    #[test]
    fn decide_on_a_value_of_the_keys_version_is_decide_at_that_version() {
        let k = tagging(3);
        let cur = json!({"a": 1});
        for op in [
            Op::Set(json!({"a": 1.0})),
            Op::Patch(json!({"a": 1})),
            Op::Set(json!(2)),
            Op::Patch(json!({"b": 2})),
            Op::Drop,
        ] {
            let on = k
                .decide_on(Some(&cur), 3, || None, op.clone())
                .expect("decided");
            let plain = decide_versioned(Scope::Branch, Some(&cur), op.clone(), 3, true)
                .expect("decided")
                .map(|d| d.event);
            assert_eq!(on, plain, "{op:?}");
            if let Some(env) = on {
                assert_eq!((env.op, env.state_version), (op, 3));
            }
        }
    }

    #[test]
    fn decide_on_a_newer_value_is_refused_for_every_op() {
        let k = tagging(2);
        for (cur, op) in [
            (Some(json!(1)), Op::Set(json!(2))),
            (Some(json!({})), Op::Patch(json!({"a": 1}))),
            (Some(json!(1)), Op::Drop),
            (None, Op::Drop),
            (None, Op::Set(json!(1))),
        ] {
            match k.decide_on(cur.as_ref(), 5, || Some("e9".into()), op.clone()) {
                Err(Error::State(StateError::NewerStateVersion {
                    stored: 5,
                    known: 2,
                    entry_id: Some(e),
                    ..
                })) if e == "e9" => {}
                other => panic!("{op:?} on {cur:?}: {other:?}"),
            }
        }
    }
}
