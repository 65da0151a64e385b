// lone.mjs — lone surrogates, as the real Pi writes and reads them.
//
//   node lone.mjs write <major> <out.jsonl>
//   node lone.mjs fold <major> <file> <plugin>
//
// `write` creates <out.jsonl> with Pi's own SessionManager: a user message and an
// assistant message holding a cut emoji ("\ud83d", a lone surrogate, which
// JSON.stringify writes as the escape `\ud83d`), state events of `session-state/role`
// (a set whose value holds lone surrogates in strings and keys, then a patch), and an
// interrupted turn: an assistant message with two tool calls, then only the first
// call's tool result, whose text holds a lone surrogate (the file's last line).
// Prints {"file", "ids", "sessionId"}.
//
// `fold` opens <file> with SessionManager.open and folds the branch-scope events of
// `session-state/<plugin>` along getBranch() (RFC 7396 for patches), as Pi's JavaScript
// sees them. Prints {"fold": JSON.stringify(value) or null, "entries": n,
// "lastToolResult": JSON.stringify(the last toolResult message) or null}: the JSON
// texts are strings, so this script's own output holds no lone surrogate.

import { existsSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { assistant, loadPi, main, merge, patchEv, setEv, toolResult, usageError, user } from "./lib.mjs";

const USAGE = "lone.mjs write <1|0> <out.jsonl> | lone.mjs fold <1|0> <file> <plugin>";
const CWD = "/home/dev/acme-api";

await main(USAGE, async ([cmd, major, file, plugin]) => {
  if (!cmd || !major || !file) throw usageError("missing arguments");
  const SessionManager = await loadPi(major);
  if (cmd === "write") {
    const out = resolve(file);
    if (existsSync(out)) rmSync(out);
    const sm = SessionManager.open(out, undefined, CWD);
    const ids = [];
    const add = (id) => ids.push(typeof id === "string" ? id : id.id);
    add(sm.appendMessage(user("cut \ud83d here")));
    add(sm.appendMessage(assistant("the emoji was cut: \udc00")));
    add(sm.appendCustomEntry("session-state/role", setEv("branch", { name: "x\ud83d", "\ud83dk": ["\ude00", 1] })));
    add(sm.appendCustomEntry("session-state/role", patchEv("branch", { tag: "\udbff" })));
    // One assistant message with two tool calls; only the first gets a result.
    const calls = assistant("reading two files", { id: "call_1", name: "read", arguments: { path: "a\ud83d.txt" } });
    calls.content.push({ type: "toolCall", id: "call_2", name: "grep", arguments: { q: "x" } });
    add(sm.appendMessage(calls));
    add(sm.appendMessage(toolResult("call_1", "read", "half an emoji: \ud83d")));
    return { file: out, ids, sessionId: sm.getHeader().id };
  }
  if (cmd === "fold") {
    if (!plugin) throw usageError("missing plugin");
    const sm = SessionManager.open(resolve(file));
    const ct = `session-state/${plugin}`;
    let value;
    let lastToolResult = null;
    for (const e of sm.getBranch()) {
      if (e.type === "message" && e.message.role === "toolResult") lastToolResult = JSON.stringify(e.message);
      if (e.type !== "custom" || e.customType !== ct || e.data.scope !== "branch") continue;
      const d = e.data;
      if (d.op === "set") value = d.value;
      else if (d.op === "drop") value = undefined;
      else if (d.op === "patch") value = merge(value, d.patch);
    }
    return {
      fold: value === undefined ? null : JSON.stringify(value),
      entries: sm.getEntries().length,
      lastToolResult,
    };
  }
  throw usageError(`unknown command ${JSON.stringify(cmd)}`);
});
