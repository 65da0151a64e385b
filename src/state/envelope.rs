//! The event envelope of docs/spec.md §3:
//! `{"type":"custom","customType":"session-state/<plugin>","data":{"v":1,"scope":…,"op":…}}`.

use serde_json::{Map, Value};

/// The `customType` prefix of this crate's state events.
pub const STATE_PREFIX: &str = "session-state/";

/// The envelope version this crate writes and reads.
pub const ENVELOPE_VERSION: u64 = 1;

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
}

/// Why an event could not be decoded. The scope is known when the envelope names a
/// valid one: then the error affects only that scope's fold.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DecodeError {
    pub scope: Option<Scope>,
    pub detail: String,
}

impl Envelope {
    /// The `data` object as this crate writes it.
    pub fn to_data(&self) -> Value {
        let mut m = Map::new();
        m.insert("v".into(), ENVELOPE_VERSION.into());
        m.insert("scope".into(), self.scope.as_str().into());
        m.insert("op".into(), self.op.name().into());
        match &self.op {
            Op::Set(v) => {
                m.insert("value".into(), crate::json::clone_value(v));
            }
            Op::Patch(p) => {
                m.insert("patch".into(), crate::json::clone_value(p));
            }
            Op::Drop => {}
        }
        Value::Object(m)
    }

    /// [`Envelope::to_data`] printed as [`crate::json::to_string_exact`] prints it,
    /// without building the object first.
    pub(crate) fn data_text(&self) -> String {
        let (op, arg) = match &self.op {
            Op::Set(v) => ("set", Some(("value", v))),
            Op::Patch(p) => ("patch", Some(("patch", p))),
            Op::Drop => ("drop", None),
        };
        let mut s = String::with_capacity(256);
        s.push_str("{\"v\":");
        s.push_str(itoa::Buffer::new().format(ENVELOPE_VERSION));
        s.push_str(",\"scope\":\"");
        s.push_str(self.scope.as_str());
        s.push_str("\",\"op\":\"");
        s.push_str(op);
        s.push('"');
        if let Some((key, v)) = arg {
            s.push_str(",\"");
            s.push_str(key);
            s.push_str("\":");
            crate::json::push_exact(&mut s, v);
        }
        s.push('}');
        s
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
        match m.get("v") {
            Some(Value::Number(n)) if n.as_u64() == Some(ENVELOPE_VERSION) => {}
            Some(other) => {
                return Err(err(
                    Some(scope),
                    format!("unknown envelope version v={other} (this crate reads v=1)"),
                ));
            }
            None => return Err(err(Some(scope), "`v` is missing".into())),
        }
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
        Ok(Envelope { scope, op })
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
                let env = Envelope { scope, op };
                assert_eq!(
                    env.data_text(),
                    crate::json::to_string_exact(&env.to_data())
                );
            }
        }
    }
}
