// serve.mjs — runs the other interop scripts in one Node process, so Pi's modules load once
// per test process instead of once per call (loading Pi costs more than most calls).
//
//   node serve.mjs
//
// Reads one JSON request per line on stdin, {"script": "dump.mjs", "args": [...]}, runs
// the script as `node <script> <args...>` would (each call imports a fresh copy of the
// script; lib.mjs and Pi stay loaded) and writes one JSON line per request on stdout:
// {"ok": <the script's result>} or {"error": "<stack>"}. Requests run one at a time.

import { createInterface } from "node:readline";

let n = 0;
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.trim() === "") continue;
  let reply;
  try {
    const { script, args } = JSON.parse(line);
    if (!/^[a-z]+\.mjs$/.test(script) || script === "serve.mjs") throw new Error(`no script ${script}`);
    const done = new Promise((resolve, reject) => {
      globalThis.__interopRequest = { args, resolve, reject };
    });
    n += 1;
    await import(`./${script}?call=${n}`);
    if (globalThis.__interopRequest) {
      globalThis.__interopRequest = undefined;
      throw new Error(`${script} did not run main()`);
    }
    reply = { ok: await done };
  } catch (err) {
    reply = { error: typeof err === "string" ? err : err && err.stack ? err.stack : String(err) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
