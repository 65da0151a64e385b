//! Closing an interrupted final turn on load: a complete assistant message
//! whose tool calls never returned gets one error tool result per missing result, so the
//! provider accepts the resumed conversation.

use crate::error::{Error, InvalidLog, Result, UnknownEntry};
use crate::log::entry::{EntryType, Role};
use crate::tree::SessionLog;
use serde_json::Value;

/// The text of the error tool result that
/// [`Sessions::load`](super::Sessions::load) appends for a tool call that never
/// returned.
pub const INTERRUPTED_TOOL_RESULT: &str =
    "interrupted: the session ended before this tool call returned";

/// A tool call of an assistant message.
struct ToolCall {
    id: String,
    name: String,
}

/// The error tool results that close a complete interrupted final turn of `log`, each
/// with its `toolCallId`, in the order of the calls: the `message` of each entry to
/// append at the leaf. Reads only: [`super::Sessions::load`] appends them through the
/// store.
///
/// Walks the active branch back from the leaf. Tool results, system messages and
/// entries that are not messages (custom, label, model change, …) are passed over; the
/// first other message decides:
/// - an assistant message whose `stopReason` is not `error` or `aborted`: each of its
///   `toolCall` blocks without a tool result after it gets one, an error;
/// - anything else (a user message, a custom or bash message, a compaction, a branch
///   summary), or an errored or aborted assistant message: the turn is over, nothing is
///   appended. Pi's `transformMessages` already gives the model a result for the calls of
///   such a turn, and drops errored and aborted messages; a result appended after them
///   would be an orphan the provider rejects.
pub(super) fn missing_tool_results(log: &SessionLog) -> Result<Vec<(String, Value)>> {
    let branch: Vec<String> = log.branch().into_iter().map(str::to_owned).collect();
    let mut answered: Vec<String> = Vec::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    for id in branch.iter().rev() {
        let Some(entry) = log.entry(id) else { break };
        match entry.entry_type() {
            EntryType::Message => {}
            EntryType::Compaction | EntryType::BranchSummary => return Ok(Vec::new()),
            _ => continue,
        }
        match entry.role() {
            Some(Role::ToolResult) => {
                let line = parse_line(log, id)?;
                if let Some(call) = line.pointer("/message/toolCallId").and_then(Value::as_str) {
                    answered.push(call.to_owned());
                }
            }
            Some(Role::Assistant) => {
                let line = parse_line(log, id)?;
                let message = line.get("message").unwrap_or(&Value::Null);
                let stop = message.get("stopReason").and_then(Value::as_str);
                if matches!(stop, Some("error" | "aborted")) {
                    return Ok(Vec::new());
                }
                calls = message
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("toolCall"))
                    .filter_map(|b| {
                        Some(ToolCall {
                            id: b.get("id")?.as_str()?.to_owned(),
                            name: b
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        })
                    })
                    .collect();
                break;
            }
            Some(Role::Other) => {
                let line = parse_line(log, id)?;
                if line.pointer("/message/role").and_then(Value::as_str) == Some("system") {
                    continue;
                }
                return Ok(Vec::new());
            }
            Some(Role::User) | None => return Ok(Vec::new()),
        }
    }
    let mut results: Vec<(String, Value)> = Vec::new();
    for call in calls {
        if answered.contains(&call.id) || results.iter().any(|(id, _)| *id == call.id) {
            continue;
        }
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        let result = serde_json::json!({
            "role": "toolResult",
            "toolCallId": call.id,
            "toolName": call.name,
            "content": [{"type": "text", "text": INTERRUPTED_TOOL_RESULT}],
            "isError": true,
            "timestamp": timestamp,
        });
        results.push((call.id, result));
    }
    Ok(results)
}

fn parse_line(log: &SessionLog, id: &str) -> Result<Value> {
    let entry = log.entry(id).ok_or_else(|| {
        Error::from(UnknownEntry {
            path: log.path().to_path_buf(),
            id: id.to_owned(),
        })
    })?;
    let line = log.raw_line(id)?;
    crate::json::from_str(&line).map_err(|e| {
        Error::from(InvalidLog::InvalidEntry {
            path: log.path().to_path_buf(),
            at: entry.location(),
            id: Some(id.to_owned()),
            detail: e.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::LogOptions;
    use serde_json::json;

    fn session(entries: &[Value]) -> String {
        let mut lines = String::from(
            r#"{"type":"session","version":3,"id":"s","timestamp":"2024-12-03T14:00:00.000Z","cwd":"/p"}"#,
        );
        lines.push('\n');
        let mut parent = Value::Null;
        for (i, e) in entries.iter().enumerate() {
            let id = format!("a000000{i}");
            let mut e = e.clone();
            e["id"] = json!(id);
            e["parentId"] = parent;
            e["timestamp"] = json!("2024-12-03T14:00:01.000Z");
            lines.push_str(&e.to_string());
            lines.push('\n');
            parent = json!(id);
        }
        lines
    }

    fn message(m: Value) -> Value {
        json!({"type": "message", "message": m})
    }

    #[test]
    fn the_missing_results_are_found_without_writing_on_a_detached_log() {
        let calls = message(
            json!({"role": "assistant", "stopReason": "toolUse", "content": [
            {"type": "toolCall", "id": "call_1", "name": "read"},
            {"type": "toolCall", "id": "call_2", "name": "grep"}]}),
        );
        let answered = message(json!({"role": "toolResult", "toolCallId": "call_1"}));
        let user = message(json!({"role": "user", "content": "hi"}));
        let lines = session(&[user.clone(), calls.clone(), answered]);
        let log = LogOptions::new()
            .read("rows:s", lines.as_bytes())
            .expect("read");
        let missing = missing_tool_results(&log).expect("read only");
        assert_eq!(missing.len(), 1);
        let (id, result) = &missing[0];
        assert_eq!(id, "call_2");
        assert_eq!(
            (&result["role"], &result["toolName"], &result["isError"]),
            (&json!("toolResult"), &json!("grep"), &json!(true))
        );
        assert_eq!(
            result.pointer("/content/0/text"),
            Some(&json!(INTERRUPTED_TOOL_RESULT))
        );
        // A turn that a user message ended has nothing to close.
        let lines = session(&[calls, user]);
        let log = LogOptions::new()
            .read("rows:s", lines.as_bytes())
            .expect("read");
        assert!(missing_tool_results(&log).expect("read only").is_empty());
    }
}
