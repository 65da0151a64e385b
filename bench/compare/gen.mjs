// gen.mjs — write a benchmark session with Pi 1.6.0's own SessionManager.
//
//   node gen.mjs <out.jsonl> <entries> [seed]
//
// The shape of `big` in tests/interop/gen.mjs (and the same message helpers from
// tests/interop/lib.mjs): user prompts, assistant replies with thinking, tool calls with
// their results, a state event (`session-state/{alpha,beta,bench}`) about every twelfth
// entry and a fork about every fiftieth step. Message bodies are SCALE times longer than
// in `big`, so that entries average 6.6 KB as in the sessions docs/spec.md §10's baselines were
// measured on (1k entries = 6.6 MB, 100k = 667 MB). Every byte is written by Pi
// (`appendFileSync`), so ids, field order and escaping are Pi's own.
//
// Prints {"file", "entries", "bytes", "ms"} as one JSON line.

import { existsSync, rmSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { SessionManager } from "pi1";
import { assistant, patchEv, prose, rng, setEv, toolResult, user } from "../../tests/interop/lib.mjs";

const CWD = "/home/dev/acme-api";
const SCALE = 3.08;
const text = (r, bytes) => prose(r, Math.round(bytes * SCALE));

const [out, nArg, seedArg] = process.argv.slice(2);
const n = Number(nArg);
if (!out || !Number.isInteger(n) || n < 2) {
  process.stderr.write("usage: node gen.mjs <out.jsonl> <entries> [seed]\n");
  process.exit(2);
}
const started = performance.now();
const file = resolve(out);
if (existsSync(file)) rmSync(file);
const r = rng(seedArg === undefined ? 1 : Number(seedArg));
const sm = SessionManager.open(file, undefined, CWD);
const ids = [];
const add = (id) => ids.push(id);
let call = 0;
add(sm.appendMessage(user("Benchmark session: refactor the storage layer.")));
while (ids.length < n - 1) {
  const x = r.next();
  if (x < 0.02 && ids.length > 10) {
    sm.branch(ids[ids.length - 1 - r.int(Math.min(ids.length, 500))]);
  } else if (x < 0.12) {
    add(sm.appendCustomEntry(`session-state/${r.pick(["alpha", "beta", "bench"])}`,
      r.chance(0.8) ? setEv(r.chance(0.8) ? "branch" : "session", { step: ids.length, note: prose(r, 60) })
                    : patchEv("branch", { step: ids.length })));
  } else if (x < 0.35) {
    add(sm.appendMessage(user(text(r, 80 + r.int(400)))));
  } else if (x < 0.7 || ids.length + 2 > n) {
    add(sm.appendMessage(assistant(text(r, 2000 + r.int(4000)), undefined, text(r, 300 + r.int(1200)))));
  } else {
    const id = `toolu_${++call}`;
    add(sm.appendMessage(assistant(text(r, 300), { id, name: "read", arguments: { path: `src/mod${call}.rs` } })));
    add(sm.appendMessage(toolResult(id, "read", text(r, 1000 + r.int(2000)))));
  }
}
// The last entry in file order is the leaf on load: end on a state event so that a read
// at the leaf has something to fold on every branch.
add(sm.appendCustomEntry("session-state/bench", setEv("branch", { step: ids.length, note: "final" })));
process.stdout.write(JSON.stringify({
  file, entries: ids.length, bytes: statSync(file).size, ms: Math.round(performance.now() - started),
}) + "\n");
