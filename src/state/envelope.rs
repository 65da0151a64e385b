//! The event envelope of docs/spec.md §3:
//! `{"type":"custom","customType":"session-state/<plugin>","data":{"v":1,"scope":…,"op":…}}`.

use serde_json::{Map, Value};

/// The `customType` prefix of this crate's state events.
pub const STATE_PREFIX: &str = "session-state/";

/// The envelope version of an event written under state version 1 (an unversioned
/// event): every reader of this crate reads it.
pub const ENVELOPE_VERSION: u64 = 1;

/// The envelope version of an event that carries a `stateVersion` (a state written under
/// version 2 or later). A reader that knows only [`ENVELOPE_VERSION`] refuses it as an
/// unknown envelope version, so it can never misread a value of a shape it does not know.
pub const VERSIONED_ENVELOPE: u64 = 2;

/// Which fold a state belongs to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Folded along the path root → position: a fork inherits the fork point's value and
    /// siblings never see each other's writes.
    #[default]
    Branch,
    /// Folded over the whole file in append order, whatever the position.
    Session,
}

impl Scope {
    /// `"branch"` or `"session"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Branch => "branch",
            Scope::Session => "session",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Scope, String> {
        match s {
            "branch" => Ok(Scope::Branch),
            "session" => Ok(Scope::Session),
            _ => Err(format!(
                "unknown scope {s:?} (expected \"branch\" or \"session\")"
            )),
        }
    }
}

/// What an event does to the current value.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Replace the value (a written `null` is a value, not an absence).
    Set(Value),
    /// Make the value absent.
    Drop,
    /// Apply an RFC 7396 JSON Merge Patch; an absent value patches `{}`.
    Patch(Value),
}

impl Op {
    /// `"set"`, `"drop"` or `"patch"`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Set(_) => "set",
            Op::Drop => "drop",
            Op::Patch(_) => "patch",
        }
    }
}

/// A decoded event.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Its scope.
    pub scope: Scope,
    /// Its op.
    pub op: Op,
    /// The version of the state's shape the event was written under: 1 for an event
    /// without `stateVersion` (envelope `v: 1`), N for `"v": 2, "stateVersion": N`.
    pub state_version: u32,
}

/// Why an event could not be decoded. The scope is known when the envelope names a
/// valid one: then the error affects only that scope's fold.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DecodeError {
    pub scope: Option<Scope>,
    pub detail: String,
}

/// A member's key in an envelope's `data` ([`Envelope::members`]): its name, and its
/// printed start (the separator before it, the quoted key, the colon, and a name's
/// opening quote), so that a printer writes each member with one copy before its value.
struct Key {
    name: &'static str,
    printed: &'static str,
}

const V: Key = Key {
    name: "v",
    printed: "{\"v\":",
};
const STATE_VERSION: Key = Key {
    name: "stateVersion",
    printed: ",\"stateVersion\":",
};
const SCOPE: Key = Key {
    name: "scope",
    printed: ",\"scope\":\"",
};
const OP: Key = Key {
    name: "op",
    printed: ",\"op\":\"",
};
const VALUE: Key = Key {
    name: "value",
    printed: ",\"value\":",
};
const PATCH: Key = Key {
    name: "patch",
    printed: ",\"patch\":",
};

/// One member's value in an envelope's `data` ([`Envelope::members`]).
#[derive(Clone, Copy)]
enum Member<'a> {
    /// `v`, `stateVersion`.
    Number(u64),
    /// `scope`, `op`: a plain ASCII name.
    Name(&'static str),
    /// `value`, `patch`.
    Value(&'a Value),
}

/// What takes an envelope's members in order ([`Envelope::members`]): the object, a
/// printer.
trait Members<'a> {
    fn member(&mut self, key: &Key, member: Member<'a>);
}

impl<'a> Members<'a> for Map<String, Value> {
    fn member(&mut self, key: &Key, member: Member<'a>) {
        let v = match member {
            Member::Number(n) => n.into(),
            Member::Name(name) => name.into(),
            Member::Value(v) => crate::json::clone_value(v),
        };
        self.insert(key.name.into(), v);
    }
}

/// The printed `data`, member by member, with `push` printing a value.
struct Printer {
    s: String,
    push: fn(&mut String, &Value),
}

impl<'a> Members<'a> for Printer {
    // Inlined into the one caller, the members are straight-line copies, as by hand.
    #[inline(always)]
    fn member(&mut self, key: &Key, member: Member<'a>) {
        self.s.push_str(key.printed);
        match member {
            Member::Number(n) => self.s.push_str(itoa::Buffer::new().format(n)),
            // A name is plain ASCII, its opening quote printed with the key.
            Member::Name(name) => {
                self.s.push_str(name);
                self.s.push('"');
            }
            Member::Value(v) => (self.push)(&mut self.s, v),
        }
    }
}

impl Envelope {
    /// An event of state version 1 (no `stateVersion` written).
    pub fn new(scope: Scope, op: Op) -> Envelope {
        Envelope {
            scope,
            op,
            state_version: 1,
        }
    }

    /// The envelope version this event is written with.
    pub fn envelope_version(&self) -> u64 {
        if self.state_version > 1 {
            VERSIONED_ENVELOPE
        } else {
            ENVELOPE_VERSION
        }
    }

    /// The members of the `data` object in the order this crate writes them, each given
    /// to `f` with its key: `v`, `stateVersion` (above version 1 only), `scope`, `op`,
    /// then `value` (a `set`) or `patch` (a `patch`). The envelope's printed form is
    /// written here once: the object ([`Envelope::to_data`]) and both printers
    /// ([`Envelope::data_text`], [`Envelope::data_text_js`]) follow it.
    #[inline(always)]
    fn members<'a>(&'a self, to: &mut impl Members<'a>) {
        to.member(&V, Member::Number(self.envelope_version()));
        if self.state_version > 1 {
            to.member(&STATE_VERSION, Member::Number(self.state_version.into()));
        }
        to.member(&SCOPE, Member::Name(self.scope.as_str()));
        to.member(&OP, Member::Name(self.op.name()));
        match &self.op {
            Op::Set(v) => to.member(&VALUE, Member::Value(v)),
            Op::Patch(p) => to.member(&PATCH, Member::Value(p)),
            Op::Drop => {}
        }
    }

    /// The `data` object as this crate writes it.
    pub fn to_data(&self) -> Value {
        let mut m = Map::new();
        self.members(&mut m);
        Value::Object(m)
    }

    /// [`Envelope::to_data`] printed as [`crate::json::to_string_exact`] prints it,
    /// without building the object first.
    pub(crate) fn data_text(&self) -> String {
        self.print_data(crate::json::push_exact)
    }

    /// [`Envelope::to_data`] printed as [`crate::json::to_string`] prints it (as Pi's
    /// `JSON.stringify` writes the object JavaScript reads from it), without building the
    /// object first: the text a host that appends through Pi compares with its own.
    pub fn data_text_js(&self) -> String {
        self.print_data(crate::json::push_js)
    }

    /// Whether `data`, this envelope's [`Envelope::data_text_js`], holds its value (a
    /// `set`) or its patch (a `patch`) printed exactly as `text`: a host that printed the
    /// value itself (the Pi package, with `JSON.stringify`) then builds the event around
    /// its own text. The member's key ends the head only where the value begins, and no
    /// proper tail of a JSON value that starts after a `:` inside it is JSON itself, so
    /// the match is exact. A `drop` carries no text.
    pub fn carries_text(&self, data: &str, text: &str) -> bool {
        let key = match &self.op {
            Op::Set(_) => VALUE.printed,
            Op::Patch(_) => PATCH.printed,
            Op::Drop => return false,
        };
        data.strip_suffix('}')
            .and_then(|d| d.strip_suffix(text))
            .is_some_and(|head| head.ends_with(key))
    }

    fn print_data(&self, push: fn(&mut String, &Value)) -> String {
        let mut p = Printer {
            s: String::with_capacity(256),
            push,
        };
        self.members(&mut p);
        p.s.push('}');
        p.s
    }

    /// Decodes an event's `data`.
    pub(crate) fn decode(data: Option<&str>) -> Result<Envelope, DecodeError> {
        let err = |scope, detail: String| DecodeError { scope, detail };
        let Some(raw) = data else {
            return Err(err(None, "the entry has no `data`".into()));
        };
        let v: Value = crate::json::from_str(raw)
            .map_err(|e| err(None, format!("`data` does not parse: {e}")))?;
        let Value::Object(mut m) = v else {
            return Err(err(None, "`data` is not an object".into()));
        };
        let scope = match m.get("scope") {
            Some(Value::String(s)) => s.parse::<Scope>().map_err(|e| err(None, e))?,
            Some(other) => return Err(err(None, format!("`scope` is {other}, not a string"))),
            None => return Err(err(None, "`scope` is missing".into())),
        };
        let state_version = match m.get("v") {
            Some(Value::Number(n)) if n.as_u64() == Some(ENVELOPE_VERSION) => {
                if m.contains_key("stateVersion") {
                    return Err(err(
                        Some(scope),
                        "`stateVersion` in a v=1 envelope (an event with a state version is \
                         written as v=2)"
                            .into(),
                    ));
                }
                1
            }
            Some(Value::Number(n)) if n.as_u64() == Some(VERSIONED_ENVELOPE) => {
                match m.get("stateVersion") {
                    Some(Value::Number(n)) => match n.as_u64().map(u32::try_from) {
                        Some(Ok(sv)) if sv >= 1 => sv,
                        _ => {
                            return Err(err(
                                Some(scope),
                                format!(
                                    "`stateVersion` is {n}, not a whole number from 1 to {}",
                                    u32::MAX
                                ),
                            ));
                        }
                    },
                    Some(other) => {
                        return Err(err(
                            Some(scope),
                            format!("`stateVersion` is {other}, not a number"),
                        ));
                    }
                    None => {
                        return Err(err(
                            Some(scope),
                            "a v=2 envelope without `stateVersion`".into(),
                        ));
                    }
                }
            }
            Some(other) => {
                return Err(err(
                    Some(scope),
                    format!("unknown envelope version v={other} (this crate reads v=1 and v=2)"),
                ));
            }
            None => return Err(err(Some(scope), "`v` is missing".into())),
        };
        let op = match m.get("op").and_then(Value::as_str) {
            Some("set") => match m.remove("value") {
                Some(v) => Op::Set(v),
                None => return Err(err(Some(scope), "op \"set\" without `value`".into())),
            },
            Some("drop") => Op::Drop,
            Some("patch") => match m.remove("patch") {
                Some(p) => Op::Patch(p),
                None => return Err(err(Some(scope), "op \"patch\" without `patch`".into())),
            },
            Some(other) => {
                return Err(err(
                    Some(scope),
                    format!("unknown op {other:?} (expected set, drop or patch)"),
                ));
            }
            None => return Err(err(Some(scope), "`op` is missing or not a string".into())),
        };
        Ok(Envelope {
            scope,
            op,
            state_version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_printed_data_is_the_data_printed() {
        let tricky = crate::json::from_str(r#"{"z":[1e400,-0.0,1.0],"\ud800":"é","0":null}"#)
            .expect("parses");
        for scope in [Scope::Branch, Scope::Session] {
            for op in [
                Op::Set(tricky.clone()),
                Op::Set(json!(null)),
                Op::Patch(json!({"a": {"b": null}})),
                Op::Drop,
            ] {
                for state_version in [1, 2, 7, u32::MAX] {
                    let env = Envelope {
                        scope,
                        op: op.clone(),
                        state_version,
                    };
                    assert_eq!(
                        env.data_text(),
                        crate::json::to_string_exact(&env.to_data())
                    );
                    assert_eq!(env.data_text_js(), crate::json::to_string(&env.to_data()));
                    let back = Envelope::decode(Some(&env.data_text())).expect("decodes");
                    assert_eq!(back.state_version, state_version);
                }
            }
        }
    }

    #[test]
    fn a_state_version_is_written_only_above_1_and_in_a_v2_envelope() {
        let one = Envelope::new(Scope::Branch, Op::Drop);
        assert_eq!(one.data_text(), r#"{"v":1,"scope":"branch","op":"drop"}"#);
        let three = Envelope {
            state_version: 3,
            ..one
        };
        assert_eq!(
            three.data_text(),
            r#"{"v":2,"stateVersion":3,"scope":"branch","op":"drop"}"#
        );
        let refused = |data: &str| Envelope::decode(Some(data)).expect_err(data).detail;
        assert!(
            refused(r#"{"v":1,"stateVersion":2,"scope":"branch","op":"drop"}"#).contains("v=1")
        );
        assert!(
            refused(r#"{"v":2,"scope":"branch","op":"drop"}"#).contains("without `stateVersion`")
        );
        assert!(
            refused(r#"{"v":2,"stateVersion":0,"scope":"branch","op":"drop"}"#)
                .contains("whole number")
        );
        assert!(
            refused(r#"{"v":2,"stateVersion":1.5,"scope":"branch","op":"drop"}"#)
                .contains("whole number")
        );
        assert!(
            refused(r#"{"v":2,"stateVersion":"2","scope":"branch","op":"drop"}"#)
                .contains("not a number")
        );
        assert!(
            refused(r#"{"v":3,"stateVersion":2,"scope":"branch","op":"drop"}"#)
                .contains("unknown envelope version")
        );
    }

    #[test]
    fn a_state_version_out_of_range_is_refused_in_its_scope_only() {
        for sv in ["-1", "4294967296", "1e3", "null", "true"] {
            let data = format!(r#"{{"v":2,"stateVersion":{sv},"scope":"session","op":"drop"}}"#);
            let e = Envelope::decode(Some(&data)).expect_err(&data);
            // The scope is known: the error affects only that scope's fold.
            assert_eq!(e.scope, Some(Scope::Session), "{data}");
            assert!(e.detail.contains("stateVersion"), "{data}: {}", e.detail);
        }
        let top = format!(
            r#"{{"v":2,"stateVersion":{},"scope":"branch","op":"set","value":{{"a":[1]}}}}"#,
            u32::MAX
        );
        assert_eq!(
            Envelope::decode(Some(&top)).expect("the largest version"),
            Envelope {
                scope: Scope::Branch,
                op: Op::Set(json!({"a": [1]})),
                state_version: u32::MAX,
            }
        );
        // The version does not depend on the member order.
        let reordered =
            r#"{"op":"patch","patch":{"b":null},"scope":"branch","stateVersion":7,"v":2}"#;
        assert_eq!(
            Envelope::decode(Some(reordered)).expect("decodes"),
            Envelope {
                scope: Scope::Branch,
                op: Op::Patch(json!({"b": null})),
                state_version: 7,
            }
        );
    }

    #[test]
    fn an_envelope_carries_the_text_its_value_or_patch_prints_as() {
        let set = Envelope::new(Scope::Branch, Op::Set(json!({"a": [1]})));
        let data = set.data_text_js();
        assert!(set.carries_text(&data, r#"{"a":[1]}"#));
        assert!(
            !set.carries_text(&data, r#"{ "a": [1] }"#),
            "printed otherwise"
        );
        assert!(
            !set.carries_text(&data, "[1]}"),
            "a tail of the value is not the value"
        );
        assert!(!set.carries_text(&data, "1]"), "nor a tail of it");
        let patch = Envelope {
            scope: Scope::Session,
            op: Op::Patch(json!(null)),
            state_version: 3,
        };
        let data = patch.data_text_js();
        assert!(patch.carries_text(&data, "null"));
        // A set's data that happens to end in the patch's text is not a patch's.
        let set_null = Envelope::new(Scope::Session, Op::Set(json!(null)));
        assert!(!patch.carries_text(&set_null.data_text_js(), "null"));
        let drop = Envelope::new(Scope::Branch, Op::Drop);
        assert!(!drop.carries_text(&drop.data_text_js(), ""));
    }
}
