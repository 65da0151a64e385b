// The Pi package's benchmark (SPEC §10, issue 13), all in one run on a 10k-entry session
// that Pi's own SessionManager writes:
//   - read(ctx) at an unchanged leaf            (target <= 5 us)
//   - read(ctx) after one appended entry         (target <= 50 us)
//   - first read after Pi opens the session, warm projection (target <= 5 ms)
//   each beside a TypeScript fold over getBranch() at the same leaf;
//   - write(ctx) beside Pi's appendEntry + fdatasync of the file (target <= 1.5x).
//
// Run (after `npm ci && npm run build` in pi/):
//   node bench/read-write.ts [entries=10000] [samples=2000]
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { SessionManager } from "@earendil-works/pi-coding-agent";
import { openSessionState } from "../src/index.ts";

const N = Number(process.argv[2] ?? 10000);
const SAMPLES = Number(process.argv[3] ?? 2000);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pi-state-bench-"));
const cwd = path.join(dir, "project");
fs.mkdirSync(cwd);
const sessionDir = path.join(dir, "sessions");
const db = path.join(dir, "states.sqlite");
const PLUGIN = "bench";
const CT = `session-state/${PLUGIN}`;

// --- the session: user / assistant messages of a few KB, a state event every 50 entries
const filler = "lorem ipsum dolor sit amet ".repeat(80);
let sm = SessionManager.create(cwd, sessionDir);
for (let i = 0; i < N; i++) {
  if (i % 50 === 25) {
    sm.appendCustomEntry(CT, { v: 1, scope: "branch", op: "set", value: { step: i, items: [i, i + 1] } });
  } else if (i % 2 === 0) {
    sm.appendMessage({ role: "user", content: [{ type: "text", text: `q${i} ${filler}` }], timestamp: Date.now() } as any);
  } else {
    sm.appendMessage({
      role: "assistant",
      content: [{ type: "text", text: `a${i} ${filler}` }],
      api: "faux",
      provider: "faux",
      model: "faux",
      usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
      stopReason: "stop",
      timestamp: Date.now(),
    } as any);
  }
}
const file = sm.getSessionFile()!;
const size = fs.statSync(file).size;

const shared = (globalThis as any)[Symbol.for("session-state/pi")];
function ctxOf(s: any) {
  return { cwd, sessionManager: s, isProjectTrusted: () => false };
}
function piOf(s: any) {
  // What Pi's pi.appendEntry does: sessionManager.appendCustomEntry.
  return { appendEntry: (ct: string, data: unknown) => s.appendCustomEntry(ct, data) };
}
function tsFold(s: any): unknown {
  let v: unknown;
  for (const e of s.getBranch()) {
    if (e.type === "custom" && e.customType === CT && e.data?.scope === "branch") {
      v = e.data.op === "set" ? e.data.value : e.data.op === "drop" ? undefined : v;
    }
  }
  return v;
}
const ns = () => process.hrtime.bigint();
function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}
function fmt(ns: number): string {
  return ns >= 1e6 ? `${(ns / 1e6).toFixed(2)} ms` : `${(ns / 1e3).toFixed(2)} µs`;
}

// --- warm the projection (a previous Pi process read this session)
{
  const st = openSessionState(piOf(sm), { pluginId: PLUGIN, scope: "branch", databasePath: db });
  st.read(ctxOf(sm));
}

// --- first read after Pi opens the session (new SessionManager, new store handle)
const first: number[] = [];
const firstFold: number[] = [];
for (let i = 0; i < 20; i++) {
  // As in a new Pi process: no store handle, no file seen yet, and no background parse of
  // the previous iteration's handle still running on the other core.
  await new Promise((r) => setTimeout(r, 400));
  shared.stores.clear();
  shared.existing.clear();
  shared.dirSynced.clear();
  shared.missing.clear();
  const opened = SessionManager.open(file, sessionDir);
  const st = openSessionState(piOf(opened), { pluginId: PLUGIN, scope: "branch", databasePath: db });
  const t0 = ns();
  const v = st.read(ctxOf(opened));
  const t1 = ns();
  const f = tsFold(opened);
  const t2 = ns();
  first.push(Number(t1 - t0));
  firstFold.push(Number(t2 - t1));
  if (JSON.stringify(v) !== JSON.stringify(f)) throw new Error(`first read ${JSON.stringify(v)} != fold ${JSON.stringify(f)}`);
  sm = opened;
}

const ctx = ctxOf(sm);
const state = openSessionState<unknown>(piOf(sm), { pluginId: PLUGIN, scope: "branch", databasePath: db });
state.read(ctx);

// --- read at an unchanged leaf: batches of 100 reads (per read); then the fold, in its
// own loop (interleaving them would time each with the other's cache misses and GC)
const unchanged: number[] = [];
const unchangedFold: number[] = [];
for (let i = 0; i < SAMPLES / 100; i++) {
  const t0 = ns();
  for (let j = 0; j < 100; j++) state.read(ctx);
  unchanged.push(Number(ns() - t0) / 100);
}
for (let i = 0; i < SAMPLES / 100; i++) {
  const t0 = ns();
  tsFold(sm);
  unchangedFold.push(Number(ns() - t0));
}
if (JSON.stringify(state.read(ctx)) !== JSON.stringify(tsFold(sm))) throw new Error("read != fold");

// --- read after one appended entry (Pi appends a message; the next read follows it);
// the fold in its own loop, the same way
const appended: number[] = [];
const appendedFold: number[] = [];
const message = (i: number) => ({ role: "user", content: [{ type: "text", text: `more ${i}` }], timestamp: Date.now() }) as any;
for (let i = 0; i < 500; i++) {
  sm.appendMessage(message(i));
  const t0 = ns();
  const v = state.read(ctx);
  appended.push(Number(ns() - t0));
  if (i % 50 === 0 && JSON.stringify(v) !== JSON.stringify(tsFold(sm))) throw new Error("read after append != fold");
}
for (let i = 0; i < 500; i++) {
  sm.appendMessage(message(i));
  const t0 = ns();
  tsFold(sm);
  appendedFold.push(Number(ns() - t0));
}

// --- write(ctx) beside Pi's appendEntry + fdatasync of the file, interleaved
const writes: number[] = [];
const raw: number[] = [];
const fd = fs.openSync(file, "r");
for (let i = 0; i < 200; i++) {
  const t0 = ns();
  state.write(ctx, { step: `w${i}` });
  const t1 = ns();
  sm.appendCustomEntry("bench-raw", { v: 1, scope: "branch", op: "set", value: { step: `r${i}` } });
  fs.fdatasyncSync(fd);
  const t2 = ns();
  writes.push(Number(t1 - t0));
  raw.push(Number(t2 - t1));
}
fs.closeSync(fd);

const rows = [
  ["read(ctx), unchanged leaf", median(unchanged), median(unchangedFold), "≤ 5 µs"],
  ["read(ctx), after one appended entry", median(appended), median(appendedFold), "≤ 50 µs"],
  ["first read after Pi opens the session (warm projection)", median(first), median(firstFold), "≤ 5 ms"],
] as const;
console.log(`session: ${N} entries, ${(size / 1e6).toFixed(1)} MB (${file})`);
console.log("| operation | session-state (median) | TS fold over getBranch() (median) | target |");
console.log("|---|---|---|---|");
for (const [name, a, b, t] of rows) console.log(`| ${name} | ${fmt(a)} | ${fmt(b)} | ${t} |`);
const w = median(writes);
const r = median(raw);
console.log(`| write(ctx) | ${fmt(w)} | Pi's appendEntry + fdatasync: ${fmt(r)} (ratio ${(w / r).toFixed(2)}) | ≤ 1.5× |`);
fs.rmSync(dir, { recursive: true, force: true });
