// gen.mjs — write a real Pi session file with Pi's own SessionManager.
//
//   node gen.mjs <major> <out.jsonl> <scenario> [seed|n] [seed]
//
//   major     1 (pi1 = @earendil-works/pi-coding-agent 1.6.0) or 0 (pi0 = @mariozechner/... 0.73.1)
//   scenario  basic | torn | state [seed] | big <n> [seed] | example | reflush (major 0 only)
//
// The file is written by `SessionManager.open(out, undefined, CWD)` on a fresh path (an
// existing out file is removed first), so every byte comes from Pi. Entry ids are Pi's
// random ids; the seed only drives the shape and the values.
//
// Prints {"file": <out>, "ids": [<every entry id Pi appended, in append order>], ...}.
// `torn` adds {"tornId", "tornOffset", "appendedIds", "unreadableIds"} (see scenarioTorn).
// `reflush` adds {"firstIds"} (see scenarioReflush).

import { closeSync, existsSync, ftruncateSync, openSync, readFileSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import {
  assistant, bashExecution, dropEv, loadPi, main, patchEv, prose, rng, setEv, system, toolResult, usageError, user,
} from "./lib.mjs";

const USAGE = "gen.mjs <1|0> <out.jsonl> <basic|torn|state [seed]|big <n> [seed]|example|reflush>";
const CWD = "/home/dev/acme-api";

await main(USAGE, async (argv) => {
  const [major, out, scenario, a3, a4] = argv;
  if (!major || !out || !scenario) throw usageError("missing arguments");
  if (!["basic", "torn", "state", "big", "example", "reflush"].includes(scenario)) throw usageError(`unknown scenario ${JSON.stringify(scenario)}`);
  const SessionManager = await loadPi(major);
  const file = resolve(out);
  if (existsSync(file)) rmSync(file);
  const ctx = { SessionManager, major, file, ids: [] };
  switch (scenario) {
    case "basic": return scenarioBasic(ctx);
    case "torn": return scenarioTorn(ctx);
    case "state": return scenarioState(ctx, a3 === undefined ? 1 : Number(a3));
    case "big": {
      const n = Number(a3);
      if (!Number.isInteger(n) || n < 2) throw usageError("big needs <n> >= 2");
      return scenarioBig(ctx, n, a4 === undefined ? 1 : Number(a4));
    }
    case "reflush": return scenarioReflush(ctx);
    default: return scenarioExample(ctx);
  }
});

function open(ctx) {
  const sm = ctx.SessionManager.open(ctx.file, undefined, CWD);
  const add = (id) => {
    ctx.ids.push(typeof id === "string" ? id : id.id); // appendUsage (1.x) returns the entry
    return ctx.ids[ctx.ids.length - 1];
  };
  return { sm, add };
}

/** Every entry type and navigation the major offers. */
function scenarioBasic(ctx) {
  const { sm, add } = open(ctx);
  add(sm.appendModelChange("anthropic", "claude-sonnet-4-5"));
  add(sm.appendThinkingLevelChange("medium"));
  if (ctx.major === "1") add(sm.appendMessage(system("You are an expert coding assistant.")));
  const u1 = add(sm.appendMessage(user("List the files in src/ and tell me what main.rs does.")));
  add(sm.appendMessage(assistant("I'll list the directory first.",
    { id: "toolu_01", name: "bash", arguments: { command: "ls src" } }, "The user wants an overview.")));
  const t1 = add(sm.appendMessage(toolResult("toolu_01", "bash", "lib.rs\nmain.rs\n")));
  const a2 = add(sm.appendMessage(assistant("src/ holds lib.rs and main.rs; main.rs parses the CLI and calls the library.")));
  add(sm.appendCustomEntry("session-state/role", setEv("branch", { name: "reviewer" })));
  add(sm.appendCustomEntry("session-state/todo", setEv("session", { items: ["read main.rs"] })));
  add(sm.appendCustomEntry("my-extension", { count: 1 }));
  add(sm.appendLabelChange(u1, "start"));
  add(sm.appendSessionInfo("Explore src/"));
  add(sm.appendCustomMessageEntry("my-extension", "Reminder: run the tests.", true, { source: "gen" }));
  add(sm.appendMessage(bashExecution("cargo test", "test result: ok. 3 passed; 0 failed")));
  if (typeof sm.appendUsage === "function") {
    add(sm.appendUsage("cache_warm", "anthropic", "claude-sonnet-4-5",
      { input: 0, output: 0, cacheRead: 5000, cacheWrite: 0, totalTokens: 5000,
        cost: { input: 0, output: 0, cacheRead: 0.0015, cacheWrite: 0, total: 0.0015 } }));
  }
  add(sm.appendMessage(user("Now check lib.rs.")));
  add(sm.appendMessage(assistant("lib.rs re-exports the session and state modules.")));
  add(sm.appendCustomEntry("session-state/role", patchEv("branch", { focus: "lib" })));
  add(sm.appendLabelChange(u1, undefined)); // clears the label: no "label" field

  // A fork: back to a2, then append (the new entries are siblings of the custom entry above).
  sm.branch(a2);
  add(sm.appendMessage(user("Actually, look at Cargo.toml instead.")));
  add(sm.appendMessage(assistant("Cargo.toml declares serde, rusqlite and petgraph.")));
  add(sm.appendCustomEntry("session-state/role", setEv("branch", { name: "architect" })));
  add(sm.appendCustomEntry("session-state/todo", patchEv("session", { items: ["read main.rs", "read Cargo.toml"], done: 1 })));

  // branchWithSummary to the tool result, then a compaction on that branch.
  add(sm.branchWithSummary(t1, "Explored Cargo.toml; the dependencies look fine.", { readFiles: ["Cargo.toml"], modifiedFiles: [] }));
  const u3 = add(sm.appendMessage(user("Back to the listing: what else belongs in src?")));
  add(sm.appendMessage(assistant("A log module for reading and writing the JSONL file.")));
  add(sm.appendCustomEntry("session-state/role", dropEv("branch")));
  add(sm.appendCompaction("User explored src/ and Cargo.toml and planned a log module.", u3, 18000,
    { readFiles: ["src/main.rs", "Cargo.toml"], modifiedFiles: [] }, false));
  const u4 = add(sm.appendMessage(user("Write the log module.")));
  add(sm.appendMessage(assistant("Done: src/log/mod.rs reads lines and splits on \\n.")));
  if (typeof sm.appendContextEdit === "function") add(sm.appendContextEdit(u4, { content: "Write the log module (edited)." }));

  // A second root (resetLeaf) and a third one (branchWithSummary(null, ...)).
  sm.resetLeaf();
  add(sm.appendMessage(user("New topic: draft a README.")));
  add(sm.appendMessage(assistant("# acme-api\n\nA small HTTP API.")));
  add(sm.appendCustomEntry("session-state/role", setEv("branch", { name: "writer" })));
  add(sm.branchWithSummary(null, "Abandoned the README draft."));
  add(sm.appendMessage(user("Start over: what is this repo?")));
  add(sm.appendMessage(assistant("An HTTP API written in Rust.")));
  return { file: ctx.file, ids: ctx.ids };
}

/**
 * A crash mid-write: write a short session, cut the file in the middle of its final line,
 * then reopen it with Pi and append three entries. Pi 1.x terminates the torn line with "\n"
 * on open, so the torn record stays inside the file. Pi 0.73 does not: its first append is
 * fused onto the torn bytes (both unreadable) and later entries name a parent that no
 * reader can see. `unreadableIds` lists the ids Pi appended that no longer parse.
 */
function scenarioTorn(ctx) {
  const { sm, add } = open(ctx);
  add(sm.appendMessage(user("Run the migrations.")));
  add(sm.appendMessage(assistant("Running them now.", { id: "toolu_m1", name: "bash", arguments: { command: "make migrate" } })));
  add(sm.appendMessage(toolResult("toolu_m1", "bash", "applied 3 migrations")));
  add(sm.appendCustomEntry("session-state/role", setEv("branch", { name: "operator" })));
  add(sm.appendMessage(assistant("All three migrations applied.")));
  const tornId = add(sm.appendCustomEntry("session-state/todo", setEv("session", { migrate: "done" })));

  const before = readFileSync(ctx.file);
  const lastStart = before.lastIndexOf(0x0a, before.length - 2) + 1;
  const tornOffset = lastStart + Math.floor((before.length - 1 - lastStart) / 2);
  const fd = openSync(ctx.file, "r+");
  ftruncateSync(fd, tornOffset);
  closeSync(fd);

  const again = ctx.SessionManager.open(ctx.file, undefined, CWD);
  const appendedIds = [
    again.appendMessage(user("Did the migrations finish?")),
    again.appendCustomEntry("session-state/role", setEv("branch", { name: "verifier" })),
    again.appendMessage(assistant("Yes; the last log line was cut off by a crash, but the schema is current.")),
  ];
  const ids = ctx.ids.filter((id) => id !== tornId).concat(appendedIds);
  const readable = new Set();
  for (const line of readFileSync(ctx.file, "utf8").split("\n")) {
    try { readable.add(JSON.parse(line).id); } catch { /* torn or fused line */ }
  }
  return { file: ctx.file, ids, tornId, tornOffset, appendedIds, unreadableIds: ids.filter((id) => !readable.has(id)) };
}

function randJson(r, depth = 0) {
  const k = r.int(depth >= 2 ? 5 : 7);
  switch (k) {
    case 0: return null;
    case 1: return r.chance(0.5);
    case 2: return r.int(2000) - 1000;
    case 3: return Math.round(r.next() * 1e6) / 100;
    case 4: return r.pick(["", "a", "reviewer", "naïve ✓", "line\nbreak", "quote \" and \\"]);
    case 5: return Array.from({ length: r.int(4) }, () => randJson(r, depth + 1));
    default: {
      const o = {};
      for (let i = r.int(4); i > 0; i--) o[r.pick(["a", "b", "c", "name", "n"])] = randJson(r, depth + 1);
      return o;
    }
  }
}

function randPatch(r) {
  const p = {};
  for (let i = 1 + r.int(3); i > 0; i--) {
    const key = r.pick(["a", "b", "c", "name", "n"]);
    p[key] = r.chance(0.25) ? null : r.chance(0.3) ? { x: randJson(r, 2), y: r.chance(0.5) ? null : 1 } : randJson(r, 1);
  }
  return p;
}

/** ~200 seeded entries: messages, forks, state events for alpha/beta, unrelated custom types. */
function scenarioState(ctx, seed) {
  const r = rng(seed);
  const { sm, add } = open(ctx);
  add(sm.appendMessage(user(`State scenario, seed ${seed}.`)));
  add(sm.appendMessage(assistant("Ready.")));
  while (ctx.ids.length < 200) {
    const x = r.next();
    if (x < 0.2) {
      add(sm.appendMessage(r.chance(0.5) ? user(prose(r, 24)) : assistant(prose(r, 48))));
    } else if (x < 0.33) {
      sm.branch(r.pick(ctx.ids));
    } else if (x < 0.335) {
      sm.resetLeaf();
    } else if (x < 0.36) {
      add(sm.appendLabelChange(r.pick(ctx.ids), r.chance(0.7) ? `mark-${r.int(100)}` : undefined));
    } else if (x < 0.92) {
      const plugin = r.chance(0.5) ? "alpha" : "beta";
      const scope = r.chance(0.7) ? "branch" : "session";
      const y = r.next();
      const data = y < 0.5 ? setEv(scope, randJson(r)) : y < 0.65 ? dropEv(scope) : patchEv(scope, randPatch(r));
      add(sm.appendCustomEntry(`session-state/${plugin}`, data));
    } else {
      const type = r.pick(["my-extension", "pi.virtual-model-state", "session-statex/alpha", "session-state"]);
      add(sm.appendCustomEntry(type, type === "session-statex/alpha" ? setEv("branch", "not alpha") : { n: r.int(10) }));
    }
  }
  return { file: ctx.file, ids: ctx.ids };
}

/** n entries of realistic size (assistant text 2-6 KB), occasional forks, for benchmarks. */
function scenarioBig(ctx, n, seed) {
  const r = rng(seed);
  const { sm, add } = open(ctx);
  let call = 0;
  add(sm.appendMessage(user("Benchmark session: refactor the storage layer.")));
  while (ctx.ids.length < n) {
    const x = r.next();
    if (x < 0.02 && ctx.ids.length > 10) {
      sm.branch(ctx.ids[ctx.ids.length - 1 - r.int(Math.min(ctx.ids.length, 500))]);
    } else if (x < 0.12) {
      add(sm.appendCustomEntry(`session-state/${r.pick(["alpha", "beta", "bench"])}`,
        r.chance(0.8) ? setEv(r.chance(0.8) ? "branch" : "session", { step: ctx.ids.length, note: prose(r, 60) })
                      : patchEv("branch", { step: ctx.ids.length })));
    } else if (x < 0.35) {
      add(sm.appendMessage(user(prose(r, 80 + r.int(400)))));
    } else if (x < 0.7 || ctx.ids.length + 2 > n) {
      add(sm.appendMessage(assistant(prose(r, 2000 + r.int(4000)))));
    } else {
      const id = `toolu_${++call}`;
      add(sm.appendMessage(assistant(prose(r, 300), { id, name: "read", arguments: { path: `src/mod${call}.rs` } })));
      add(sm.appendMessage(toolResult(id, "read", prose(r, 1000 + r.int(2000)))));
    }
  }
  return { file: ctx.file, ids: ctx.ids };
}

/** A short, readable PR review with role/todo state and one fork (README walk-through). */
function scenarioExample(ctx) {
  const { sm, add } = open(ctx);
  add(sm.appendModelChange("anthropic", "claude-sonnet-4-5"));
  const u1 = add(sm.appendMessage(user("Please review PR #42: it adds retry logic to the HTTP client.")));
  add(sm.appendCustomEntry("session-state/role", setEv("branch", { name: "reviewer" })));
  add(sm.appendMessage(assistant("I'll read the diff first.",
    { id: "toolu_diff", name: "bash", arguments: { command: "gh pr diff 42" } })));
  add(sm.appendMessage(toolResult("toolu_diff", "bash",
    "+    for attempt in 0..3 {\n+        match send(&req) {\n+            Ok(r) => return Ok(r),\n+            Err(_) => continue,\n+        }\n+    }\n+    Ok(Response::empty())")));
  const verdict = add(sm.appendMessage(assistant(
    "Two problems: the loop retries immediately with no backoff, and the error of the last attempt is swallowed (it returns an empty response).")));
  add(sm.appendCustomEntry("session-state/todo", patchEv("session", { backoff: "open", "last-error": "open" })));
  add(sm.appendMessage(user("Good catch. Suggest a fix for the backoff.")));
  add(sm.appendMessage(assistant("Sleep 100ms * 2^attempt with jitter between attempts, and return the last error instead of an empty response.")));
  add(sm.appendCustomEntry("session-state/todo", patchEv("session", { backoff: "done" })));
  add(sm.appendLabelChange(u1, "pr-42"));

  // Fork: back to the verdict, switch role.
  sm.branch(verdict);
  add(sm.appendMessage(user("Forget the fix for now; draft the release notes for this PR instead.")));
  add(sm.appendCustomEntry("session-state/role", setEv("branch", { name: "writer" })));
  add(sm.appendMessage(assistant("Release notes: the HTTP client now retries failed requests up to three times.")));
  return { file: ctx.file, ids: ctx.ids };
}

/**
 * Pi 0.73 re-flushing a file it did not write: Pi 1.x creates the file at the first user
 * message (here: a user message and a state event, then the process ends before any reply).
 * Pi 0.73 reopens it; its first append (not an assistant message) marks the session
 * unflushed, and the assistant message that follows makes it append the WHOLE session
 * again: a second header line, then every earlier entry with the same id, then the new ones.
 */
async function scenarioReflush(ctx) {
  if (ctx.major !== "0") throw usageError("reflush is a Pi 0.73 scenario: use major 0");
  const Pi1 = await loadPi("1");
  const first = Pi1.open(ctx.file, undefined, CWD);
  const firstIds = [
    first.appendMessage(user("Rename the crate to session-state.")),
    first.appendCustomEntry("session-state/role", setEv("branch", { name: "refactorer" })),
  ];
  const { sm, add } = open(ctx);
  add(sm.appendMessage(user("Are you there?")));
  add(sm.appendMessage(assistant("Yes: renaming the crate now.")));
  return { file: ctx.file, ids: firstIds.concat(ctx.ids), firstIds };
}
