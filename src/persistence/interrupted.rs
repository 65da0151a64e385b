//! Closing an interrupted final turn on load (SPEC §8): a complete assistant message
//! whose tool calls never returned gets one error tool result per missing result, so the
//! provider accepts the resumed conversation.

use crate::error::{Error, Result};
use crate::log::NewEntry;
use crate::log::entry::{EntryType, Role};
use crate::tree::SessionLog;
use serde_json::Value;

/// The text of the error tool result that
/// [`SessionStore::load`](super::SessionStore::load) appends for a tool call that never
/// returned.
pub const INTERRUPTED_TOOL_RESULT: &str =
    "interrupted: the session ended before this tool call returned";

/// A tool call of an assistant message.
struct ToolCall {
    id: String,
    name: String,
}

/// Closes a complete interrupted final turn; returns the tool call ids it closed.
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
pub(super) fn close_interrupted_turn(log: &mut SessionLog) -> Result<Vec<String>> {
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
    let mut closed = Vec::new();
    for call in calls {
        if answered.contains(&call.id) || closed.contains(&call.id) {
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
        // Durable when it returns (one write + fdatasync).
        log.append(NewEntry::message(result))?;
        closed.push(call.id);
    }
    Ok(closed)
}

fn parse_line(log: &SessionLog, id: &str) -> Result<Value> {
    let entry = log.entry(id).ok_or_else(|| Error::UnknownEntry {
        path: log.path().to_path_buf(),
        id: id.to_owned(),
    })?;
    let line = log.raw_line(id)?;
    crate::json::from_str(&line).map_err(|e| Error::InvalidEntry {
        path: log.path().to_path_buf(),
        at: entry.location(),
        id: Some(id.to_owned()),
        detail: e.to_string(),
    })
}
