//! A state's `migrate` and `validate` (JavaScript, the extension's own) as the core's
//! key calls them: [`StateKey::versioned`]'s and [`StateKey::validated`]'s closures call
//! the JavaScript functions synchronously, through the `Env` of the addon call that is
//! running ([`Running`], set on entry to each call that can resolve or decide a value of
//! the state, cleared on exit); outside one, they refuse. The core runs them in its order
//! (version check, migrate, the value rules, validate), on every read and every write.
//!
//! The core's refusals that the package turns into its own error classes
//! (`StateVersionError`, `StateMigrationError`, `StateValidationError`) are thrown as
//! JavaScript `Error`s carrying their fields ([`thrown`], the one place they are mapped).

use napi::bindgen_prelude::{
    FnArgs, FunctionRef, JsObjectValue, JsValue, Object, Unknown, ValueType,
};
use napi::{Env, JsError};
use serde_json::Value;
use session_state::{Error, Invalid, StateError, StateKey, json};
use std::cell::RefCell;
use std::rc::Rc;

/// `migrate` as handed over: the stored value as JSON text and the version it was written
/// under in, the extension's answer out (the package's wrapper parses the text and calls
/// the extension's function; nothing else).
pub type MigrateFn = FunctionRef<FnArgs<(String, u32)>, Unknown<'static>>;
/// `validate` as handed over: the value as JSON text in, the extension's answer out (a
/// type guard's, or the compiled schema's `undefined` / `{path, detail}`).
pub type ValidateFn = FunctionRef<String, Unknown<'static>>;
/// The package's printer of a value (`encode`): its JSON text, or a throw worded by the core.
pub type PrintFn = FunctionRef<Unknown<'static>, String>;

/// The JavaScript a state's key calls, kept as references for the state's life.
pub struct Hooks {
    migrate: Option<MigrateFn>,
    validate: Option<ValidateFn>,
    /// `validate` is a compiled schema's check (`undefined` or `{path, detail}`), not a guard.
    schema: bool,
    print: Option<PrintFn>,
    /// What `migrate` (or the printer of its result) threw in this call: the refusal's `cause`.
    thrown: RefCell<Option<napi::Error>>,
}

thread_local! {
    /// The addon call that is running and the hooks of the state it serves.
    static RUNNING: RefCell<Option<(Env, Rc<Hooks>)>> = const { RefCell::new(None) };
}

/// The hooks of one state, set for the length of one addon call (the previous ones back on
/// drop, for a hook that calls into the addon again).
pub struct Running(Option<(Env, Rc<Hooks>)>);

impl Drop for Running {
    fn drop(&mut self) {
        let previous = self.0.take();
        RUNNING.with(|r| *r.borrow_mut() = previous);
    }
}

impl Hooks {
    /// The hooks handed to `new NativeState`; `None` when there are none to call.
    pub fn new(
        migrate: Option<MigrateFn>,
        validate: Option<ValidateFn>,
        schema: bool,
        print: Option<PrintFn>,
    ) -> Option<Rc<Hooks>> {
        if migrate.is_none() && validate.is_none() {
            return None;
        }
        Some(Rc::new(Hooks {
            migrate,
            validate,
            schema,
            print,
            thrown: RefCell::new(None),
        }))
    }

    /// `key` calling these hooks: versioned at `version` (above 1) and validated when the
    /// state has a `validate`.
    pub fn keyed(
        hooks: Option<&Hooks>,
        key: StateKey,
        version: u32,
    ) -> session_state::Result<StateKey> {
        let key = if version == 1 {
            key
        } else {
            key.versioned(version, migrate)?
        };
        Ok(match hooks {
            Some(h) if h.validate.is_some() => key.validated(validate),
            _ => key,
        })
    }

    /// Sets `hooks` as the running call's, with `env`, until the guard drops.
    pub fn running(env: &Env, hooks: &Rc<Hooks>) -> Running {
        hooks.thrown.borrow_mut().take();
        let previous = RUNNING.with(|r| r.borrow_mut().replace((*env, Rc::clone(hooks))));
        Running(previous)
    }
}

/// The running call's `Env` and hooks, for `f`; `None` outside an addon call.
fn with_running<R>(f: impl FnOnce(&Env, &Hooks) -> R) -> Option<R> {
    let running = RUNNING.with(|r| r.borrow().clone());
    running.map(|(env, hooks)| f(&env, &hooks))
}

const NOT_RUNNING: &str = "the Pi package's hooks run only inside a call into its addon";

/// Whether `v` is a Promise or a thenable: an object or function with a callable `then`.
fn thenable(v: &Unknown) -> napi::Result<bool> {
    if !matches!(v.get_type()?, ValueType::Object | ValueType::Function) {
        return Ok(false);
    }
    let then = v
        .coerce_to_object()?
        .get_named_property::<Unknown>("then")?;
    Ok(then.get_type()? == ValueType::Function)
}

/// What a JavaScript throw says: an object's `message` (an `Error`'s), else the value as text.
fn message_of(env: &Env, e: &napi::Error) -> String {
    let said = e.try_clone().ok().and_then(|e| {
        let thrown = JsError::from(e).into_unknown(*env);
        let message = match thrown.get_type().ok()? {
            ValueType::Object => thrown
                .coerce_to_object()
                .ok()?
                .get_named_property::<Unknown>("message")
                .ok()?,
            _ => return None,
        };
        (message.get_type().ok()? == ValueType::String)
            .then(|| {
                message
                    .coerce_to_string()
                    .ok()?
                    .into_utf8()
                    .ok()?
                    .into_owned()
                    .ok()
            })
            .flatten()
    });
    said.unwrap_or_else(|| e.reason.clone())
}

/// The key's `migrate`: the extension's, once, on the stored value; its answer refused
/// when it is a Promise or cannot be printed as JSON (the package's printer says why).
fn migrate(value: Value, from: u32) -> Result<Value, String> {
    with_running(|env, hooks| {
        let f = hooks
            .migrate
            .as_ref()
            .ok_or("the state has no migrate")?
            .borrow_back(env)
            .map_err(|e| e.reason)?;
        let out = f
            .call(FnArgs::from((json::to_string(&value), from)))
            .map_err(|e| {
                let detail = message_of(env, &e);
                hooks.thrown.replace(Some(e));
                detail
            })?;
        if thenable(&out).map_err(|e| e.reason)? {
            return Err(
                "migrate returned a Promise; it must return the value itself (an async \
                        function returns a Promise)"
                    .to_owned(),
            );
        }
        let cannot =
            |why: String| format!("migrate returned a value that cannot be written: {why}");
        let print = hooks
            .print
            .as_ref()
            .ok_or("the state has no printer")?
            .borrow_back(env)
            .map_err(|e| e.reason)?;
        let text = print.call(out).map_err(|e| {
            let detail = cannot(message_of(env, &e));
            hooks.thrown.replace(Some(e));
            detail
        })?;
        json::from_str(&text).map_err(|e| cannot(e.to_string()))
    })
    .unwrap_or_else(|| Err(NOT_RUNNING.to_owned()))
}

/// The key's validation: the extension's `validate`, once, on the value.
fn validate(value: &Value) -> Result<(), Invalid> {
    let invalid = |detail: String| Invalid {
        path: String::new(),
        detail,
    };
    with_running(|env, hooks| {
        let f = hooks
            .validate
            .as_ref()
            .ok_or_else(|| invalid("the state has no validate".into()))?
            .borrow_back(env)
            .map_err(|e| invalid(e.reason))?;
        let out = f.call(json::to_string(value)).map_err(|e| {
            invalid(format!(
                "the validate function threw: {}",
                message_of(env, &e)
            ))
        })?;
        let plumbing = |e: napi::Error| invalid(e.reason);
        if hooks.schema {
            if out.get_type().map_err(plumbing)? == ValueType::Undefined {
                return Ok(());
            }
            let failure = out.coerce_to_object().map_err(plumbing)?;
            let field = |name: &str| -> Result<String, Invalid> {
                failure.get_named_property::<String>(name).map_err(plumbing)
            };
            return Err(Invalid {
                path: field("path")?,
                detail: field("detail")?,
            });
        }
        if thenable(&out).map_err(plumbing)? {
            return Err(invalid(
                "the validate function returned a Promise; it must answer true or false itself \
                 (an async function returns a Promise)"
                    .into(),
            ));
        }
        if out.coerce_to_bool().map_err(plumbing)? {
            Ok(())
        } else {
            Err(invalid("the validate function returned false".into()))
        }
    })
    .unwrap_or_else(|| Err(invalid(NOT_RUNNING.into())))
}

/// The core's error as JavaScript gets it: a refusal the package has a class for as an
/// `Error` with the core's message and its fields (`refusal`: `"newer"`, `"migrate"` or
/// `"invalid"`; `cause`: what `migrate` threw), anything else as a plain `Error` with the
/// core's message. The one place the core's typed refusals are matched.
pub fn thrown(env: &Env, hooks: Option<&Hooks>, e: Error) -> napi::Error {
    let message = e.to_string();
    let plain = || napi::Error::from_reason(message.clone());
    let Error::State(refusal) = e else {
        return plain();
    };
    let Ok(mut obj) = env.create_error(napi::Error::from_reason(message.clone())) else {
        return plain();
    };
    let set = |obj: &mut Object, refusal: StateError| -> napi::Result<()> {
        match refusal {
            StateError::NewerStateVersion {
                plugin,
                stored,
                known,
                entry_id,
            } => {
                obj.set_named_property("refusal", "newer")?;
                obj.set_named_property("pluginId", plugin)?;
                obj.set_named_property("storedVersion", stored)?;
                obj.set_named_property("knownVersion", known)?;
                obj.set_named_property("entryId", entry_id)?;
            }
            StateError::Migrate {
                plugin,
                from,
                to,
                entry_id,
                detail,
            } => {
                obj.set_named_property("refusal", "migrate")?;
                obj.set_named_property("pluginId", plugin)?;
                obj.set_named_property("fromVersion", from)?;
                obj.set_named_property("toVersion", to)?;
                obj.set_named_property("entryId", entry_id)?;
                obj.set_named_property("detail", detail)?;
                if let Some(cause) = hooks.and_then(|h| h.thrown.borrow_mut().take()) {
                    obj.set_named_property("cause", JsError::from(cause).into_unknown(*env))?;
                }
            }
            StateError::Invalid {
                plugin,
                entry_id,
                path,
                detail,
                ..
            } => {
                obj.set_named_property("refusal", "invalid")?;
                obj.set_named_property("pluginId", plugin)?;
                obj.set_named_property("entryId", entry_id)?;
                obj.set_named_property("path", path)?;
                obj.set_named_property("detail", detail)?;
            }
            _ => {}
        }
        Ok(())
    };
    match set(&mut obj, refusal) {
        Ok(()) => napi::Error::from(obj.to_unknown()),
        Err(_) => plain(),
    }
}
