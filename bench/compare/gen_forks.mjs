// gen_forks.mjs — write a pathologically shaped benchmark session with Pi 1.6.0's own
// SessionManager: one deep chain with a fork at every 10th entry.
//
//   node gen_forks.mjs <out.jsonl> <entries> [seed]
//
// The chain is the mixture of gen.mjs (user prompts, assistant replies with thinking, tool
// calls with their results, a state event about every twelfth entry); after every 10th
// chain entry one side entry is appended as its child (a `session-state/side` event, or
// now and then another extension's `custom` entry), which is a tip, and the chain goes on
// from the fork point (`sm.branch`). So about 1 in 11 entries is a tip (9k tips at 100k),
// each on a path as long as the chain so far: a replay that walks every tip's path is
// quadratic here, one walk of the tree is linear. Every byte is written by Pi.
//
// Prints {"file", "entries", "bytes", "tips", "ms"} as one JSON line.

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
  process.stderr.write("usage: node gen_forks.mjs <out.jsonl> <entries> [seed]\n");
  process.exit(2);
}
const started = performance.now();
const file = resolve(out);
if (existsSync(file)) rmSync(file);
const r = rng(seedArg === undefined ? 1 : Number(seedArg));
const sm = SessionManager.open(file, undefined, CWD);
let written = 0;
let chain = 0;
let tips = 0;
let call = 0;
const add = () => { written += 1; chain += 1; };
add(sm.appendMessage(user("Benchmark session: a deep chain with a fork at every 10th entry.")));
while (written < n - 1) {
  if (chain % 10 === 0) {
    // The side tip: a child of the chain's last entry, then back to that entry.
    const at = sm.getLeafId();
    if (r.chance(0.8)) {
      sm.appendCustomEntry("session-state/side", setEv("branch", { tip: tips, note: prose(r, 40) }));
    } else {
      sm.appendCustomEntry("other.ext", { tip: tips });
    }
    written += 1;
    tips += 1;
    sm.branch(at);
    chain += 1;
    continue;
  }
  const x = r.next();
  if (x < 0.09) {
    add(sm.appendCustomEntry(`session-state/${r.pick(["alpha", "beta", "bench"])}`,
      r.chance(0.8) ? setEv(r.chance(0.8) ? "branch" : "session", { step: written, note: prose(r, 60) })
                    : patchEv("branch", { step: written })));
  } else if (x < 0.3) {
    add(sm.appendMessage(user(text(r, 80 + r.int(400)))));
  } else if (x < 0.7 || written + 2 > n) {
    add(sm.appendMessage(assistant(text(r, 2000 + r.int(4000)), undefined, text(r, 300 + r.int(1200)))));
  } else {
    const id = `toolu_${++call}`;
    add(sm.appendMessage(assistant(text(r, 300), { id, name: "read", arguments: { path: `src/mod${call}.rs` } })));
    add(sm.appendMessage(toolResult(id, "read", text(r, 1000 + r.int(2000)))));
  }
}
// The last entry in file order is the leaf on load: end on a state event of the chain.
sm.appendCustomEntry("session-state/bench", setEv("branch", { step: written, note: "final" }));
written += 1;
process.stdout.write(JSON.stringify({
  file, entries: written, bytes: statSync(file).size, tips: tips + 1, ms: Math.round(performance.now() - started),
}) + "\n");
