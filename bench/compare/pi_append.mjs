// pi_append.mjs — Pi 1.6.0's appendCustomEntry, timed per call.
//
//   node pi_append.mjs <file.jsonl> <n>
//
// Pi appends each entry with appendFileSync (open, write, close): no fsync, so an
// acknowledged entry can be lost in a power failure. Prints {append_us (median), n}.

import { SessionManager } from "pi1";

const [file, nArg] = process.argv.slice(2);
const n = Number(nArg);
const sm = SessionManager.open(file);
const times = [];
for (let i = 1; i <= n; i++) {
  const a = performance.now();
  sm.appendCustomEntry("session-state/bench", {
    v: 1, scope: "branch", op: "set", value: { step: i, note: "the session log keeps every entry" },
  });
  times.push((performance.now() - a) * 1000);
}
times.sort((x, y) => x - y);
process.stdout.write(JSON.stringify({ n, append_us: times[Math.floor(n / 2)] }) + "\n");
