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
