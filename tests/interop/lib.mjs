// Shared helpers for the interop scripts (gen.mjs, dump.mjs, append.mjs).
//
// - loadPi(major): imports SessionManager from the real Pi package of that major
//   ("1" -> pi1 = @earendil-works/pi-coding-agent 1.6.0,
//    "0" -> pi0 = @mariozechner/pi-coding-agent 0.73.1; both export it from the package root).
// - mulberry32(seed): small seeded PRNG.
// - user()/assistant()/toolResult()/...: realistic AgentMessage objects.
// - main(fn): runs fn, prints its result as one JSON line on stdout; on error prints the
//   stack to stderr and exits non-zero.

export async function loadPi(major) {
  if (major === "1") return (await import("pi1")).SessionManager;
  if (major === "0") return (await import("pi0")).SessionManager;
  throw new Error(`major must be 1 or 0, got ${JSON.stringify(major)}`);
}

export function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Helpers over a PRNG: int in [0, n), pick from array, boolean with probability p. */
export function rng(seed) {
  const next = mulberry32(seed);
  return {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (arr) => arr[Math.floor(next() * arr.length)],
    chance: (p) => next() < p,
  };
}

let clock = Date.now();
/** Message timestamps (ms), strictly increasing. */
function now() {
  clock = Math.max(clock + 1, Date.now());
  return clock;
}

export const MODEL = { api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5" };

function usage(input, output) {
  const cost = { input: input * 3e-6, output: output * 15e-6, cacheRead: 0, cacheWrite: 0 };
  cost.total = cost.input + cost.output;
  return { input, output, cacheRead: 0, cacheWrite: 0, totalTokens: input + output, cost };
}

export function system(text) {
  return {
    role: "system",
    content: "",
    sections: { preamble: text, cwd: "Current working directory: (see header)" },
    toolsAdded: [
      { name: "read", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } } } },
      { name: "bash", description: "Run a shell command", parameters: { type: "object", properties: { command: { type: "string" } } } },
    ],
    timestamp: now(),
  };
}

export function user(text) {
  return { role: "user", content: [{ type: "text", text }], timestamp: now() };
}

/** Assistant message; `toolCall` = {id, name, arguments} adds a toolCall block (stopReason toolUse). */
export function assistant(text, toolCall, thinking) {
  const content = [];
  if (thinking) content.push({ type: "thinking", thinking, thinkingSignature: "sig-" + text.length });
  content.push({ type: "text", text });
  if (toolCall) content.push({ type: "toolCall", ...toolCall });
  return {
    role: "assistant",
    content,
    ...MODEL,
    usage: usage(1200 + text.length, 40 + Math.ceil(text.length / 4)),
    stopReason: toolCall ? "toolUse" : "stop",
    timestamp: now(),
  };
}

export function toolResult(toolCallId, toolName, text, isError = false) {
  return { role: "toolResult", toolCallId, toolName, content: [{ type: "text", text }], isError, timestamp: now() };
}

export function bashExecution(command, output, exitCode = 0) {
  return { role: "bashExecution", command, output, exitCode, cancelled: false, truncated: false, timestamp: now() };
}

/** A state event envelope (docs/spec.md §3) for a `session-state/<plugin>` custom entry. */
export function setEv(scope, value) {
  return { v: 1, scope, op: "set", value };
}
export function dropEv(scope) {
  return { v: 1, scope, op: "drop" };
}
export function patchEv(scope, patch) {
  return { v: 1, scope, op: "patch", patch };
}

const WORDS = (
  "the session log keeps every entry as one line and branches form a tree so state follows the path " +
  "from root to leaf while siblings never see writes of each other compaction summarises older turns " +
  "tool calls read files run commands and return results that the model uses to continue its work"
).split(" ");

/** Pseudo-random prose of about `bytes` characters. */
export function prose(r, bytes) {
  const out = [];
  let len = 0;
  while (len < bytes) {
    const w = r.pick(WORDS);
    out.push(w);
    len += w.length + 1;
    if (r.chance(0.06)) out.push("\n\n");
  }
  return out.join(" ");
}

/**
 * Runs `fn(argv)` and prints its result as JSON on stdout; errors go to stderr, exit code 1.
 * Under serve.mjs (one Node process that loads Pi once and runs many scripts), the script's
 * arguments come from the request and the result or the error goes back to it instead.
 */
export async function main(usageText, fn) {
  const served = globalThis.__interopRequest;
  if (served) {
    globalThis.__interopRequest = undefined;
    try {
      served.resolve(await fn(served.args));
    } catch (err) {
      const usage = err && err.usage ? `\nusage: ${usageText}` : "";
      served.reject(`${err && err.stack ? err.stack : String(err)}${usage}`);
    }
    return;
  }
  try {
    const result = await fn(process.argv.slice(2));
    process.stdout.write(JSON.stringify(result) + "\n");
  } catch (err) {
    process.stderr.write(`${err && err.stack ? err.stack : String(err)}\n`);
    if (err && err.usage) process.stderr.write(`usage: ${usageText}\n`);
    process.exitCode = 1;
  }
}

export function usageError(msg) {
  const e = new Error(msg);
  e.usage = true;
  return e;
}

/** RFC 7396 JSON Merge Patch, as a Pi extension folds a patch event (an absent value patches `{}`). */
export function merge(target, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const out = target !== null && typeof target === "object" && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = merge(out[k], v);
  }
  return out;
}
