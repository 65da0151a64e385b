//! A naive reference fold, written independently of the crate under test: RFC 7396 by
//! hand, and the envelope read straight from JSON.

use serde_json::{Map, Value};

/// RFC 7396 JSON Merge Patch.
pub fn merge_patch(target: Option<&Value>, patch: &Value) -> Value {
    let Value::Object(p) = patch else {
        return patch.clone();
    };
    let mut out = match target {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for (k, v) in p {
        if v.is_null() {
            out.remove(k);
        } else {
            let merged = merge_patch(out.get(k), v);
            out.insert(k.clone(), merged);
        }
    }
    Value::Object(out)
}

/// Folds the `session-state/<plugin>` events of `scope` among `entries` (full entry
/// objects, in order).
pub fn fold<'a>(
    entries: impl IntoIterator<Item = &'a Value>,
    plugin: &str,
    scope: &str,
) -> Option<Value> {
    let ct = format!("session-state/{plugin}");
    let mut v: Option<Value> = None;
    for e in entries {
        if e["type"] != "custom" || e["customType"] != ct.as_str() || e["data"]["scope"] != scope {
            continue;
        }
        let d = &e["data"];
        v = match d["op"].as_str() {
            Some("set") => Some(d["value"].clone()),
            Some("drop") => None,
            Some("patch") => Some(merge_patch(v.as_ref(), &d["patch"])),
            other => panic!("reference fold: unexpected op {other:?}"),
        };
    }
    v
}

/// A value as JavaScript holds it after `JSON.parse`: every number a double (so an
/// integer beyond 2^53 is the nearest double and `1e400` is Infinity), object keys in
/// insertion order. Independent of the crate's codec.
#[derive(Clone, Debug, PartialEq)]
pub enum Js {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Js>),
    Obj(Vec<(String, Js)>),
}

/// A JSON value as written in a file, with its number literals as text: what the
/// generators below produce. `Deep(n, v)` is `v` inside `n` arrays.
#[derive(Clone, Debug)]
pub enum Lit {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<Lit>),
    Obj(Vec<(String, Lit)>),
    Deep(usize, Box<Lit>),
}

impl Lit {
    /// The JSON text (no recursion into `Deep`'s arrays).
    pub fn text(&self) -> String {
        match self {
            Lit::Null => "null".into(),
            Lit::Bool(b) => b.to_string(),
            Lit::Num(n) => n.clone(),
            Lit::Str(s) => serde_json::to_string(s).unwrap(),
            Lit::Arr(a) => format!(
                "[{}]",
                a.iter().map(Lit::text).collect::<Vec<_>>().join(",")
            ),
            Lit::Obj(o) => format!(
                "{{{}}}",
                o.iter()
                    .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), v.text()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Lit::Deep(n, v) => format!("{}{}{}", "[".repeat(*n), v.text(), "]".repeat(*n)),
        }
    }

    /// What JavaScript's `JSON.parse` makes of it: Rust's `f64` parsing is correctly
    /// rounded, as JavaScript's is (overflow gives ±Infinity, underflow 0).
    pub fn js(&self) -> Js {
        match self {
            Lit::Null => Js::Null,
            Lit::Bool(b) => Js::Bool(*b),
            Lit::Num(n) => Js::Num(n.parse().unwrap()),
            Lit::Str(s) => Js::Str(s.clone()),
            Lit::Arr(a) => Js::Arr(a.iter().map(Lit::js).collect()),
            Lit::Obj(o) => Js::Obj(o.iter().map(|(k, v)| (k.clone(), v.js())).collect()),
            Lit::Deep(n, v) => {
                let mut out = v.js();
                for _ in 0..*n {
                    out = Js::Arr(vec![out]);
                }
                out
            }
        }
    }
}

/// RFC 7396 as JavaScript runs it on [`Js`] values (`{...target}`, `delete`, assignment;
/// an absent or non-object target patches `{}`).
pub fn js_merge(target: Option<&Js>, patch: &Js) -> Js {
    let Js::Obj(p) = patch else {
        return patch.clone();
    };
    let mut out = match target {
        Some(Js::Obj(m)) => m.clone(),
        _ => Vec::new(),
    };
    for (k, v) in p {
        let at = out.iter().position(|(key, _)| key == k);
        if *v == Js::Null {
            if let Some(i) = at {
                out.remove(i);
            }
        } else {
            let merged = js_merge(at.map(|i| &out[i].1), v);
            match at {
                Some(i) => out[i].1 = merged,
                None => out.push((k.clone(), merged)),
            }
        }
    }
    Js::Obj(out)
}

/// Does the crate's `Value` hold what JavaScript holds? Numbers compare as doubles
/// (`-0` is `0`, as `===` has it), ±Infinity is the crate's reserved string, keys in
/// order.
pub fn same_as_js(ours: &Value, js: &Js) -> bool {
    match (ours, js) {
        (Value::Null, Js::Null) => true,
        (Value::Bool(a), Js::Bool(b)) => a == b,
        (Value::Number(n), Js::Num(f)) => n.as_f64() == Some(*f),
        (Value::String(_), Js::Num(f)) if f.is_infinite() => {
            session_state::json::infinity(ours) == Some(*f < 0.0)
        }
        (Value::String(a), Js::Str(b)) => a == b,
        (Value::Array(a), Js::Arr(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_as_js(x, y))
        }
        (Value::Object(a), Js::Obj(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((ka, va), (kb, vb))| ka == kb && same_as_js(va, vb))
        }
        _ => false,
    }
}
