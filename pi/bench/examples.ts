// Pi's example extensions against their ports in pi/examples/, on one session of 10k
// entries written by Pi's own SessionManager, all in one run: for each example, the time
// the original takes to rebuild its state (its session_start and session_tree handlers,
// which scan the branch or the file) against the time the port takes to have its state
// after the same event (its own handler for the event, if it has one, plus one read of
// each of its states at Pi's leaf right after it: the port's first read when its handler
// reads nothing, a read of what its handler already read otherwise).
//
// Each run starts a Pi through the testing kit on the session (session_start, reason
// "startup"), then moves with /tree to the entry in the middle of the session
// (session_tree). The originals and the ports run in turn, `runs` times each (the first
// run of a port fills the projection database, as the first Pi to open a session does:
// reported apart as "cold"); the figures are medians.
//
// Run (after `npm ci && npm run build` in pi/):
//   node_modules/.bin/node bench/examples.ts [entries=10000] [runs=7]
//
// Adding an example: append an `Example` to EXAMPLES.
//   name      the name in the table (the port's file name without .ts; the folder's for plan-mode)
//   original  the original's path under Pi's examples/extensions/
//   port      the port's path under pi/examples/
//   states    the port's states ({ pluginId, scope }) read after each event
//   every     how many filler entries between two of the example's steps (default 50)
//   step(b, i) appends one step of the example's own entries while the session is built,
//             in both forms: the original's (b.sm, Pi's SessionManager: appendMessage,
//             appendCustomEntry) and the port's (b.write(pluginId, scope, value), through
//             openSessionState, as the port writes); `i` counts the steps from 0
//   start?    more startPi options (flags, settings) for both
//   prepare?  (dir) => void: files the extension reads (presets.json under dir/agent/)
//   observe?  (pi) => what the user sees at the leaf (a command's frame, a notification):
//             checked equal for the original and the port right after session_start, at
//             the session's last entry (no /tree yet), so both found the same state in
//             the big session
// An original with no handler for an event (plan-mode and preset do not rebuild on
// session_tree) shows "none" there.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { SessionManager } from "@earendil-works/pi-coding-agent";
import { openSessionState, type Scope } from "../src/index.ts";
import { key, startPi, type StartOptions, type TestPi } from "../src/testing.ts";
// @ts-ignore: plain JavaScript, the interop tests' message helpers.
import { assistant, prose, rng, user } from "../../tests/interop/lib.mjs";

interface Builder {
  /** Pi's SessionManager writing the session. */
  sm: SessionManager;
  /** Writes a port's state at the session's leaf, as the port does (openSessionState). */
  write(pluginId: string, scope: Scope, value: unknown): void;
  /** Prose of about `bytes` characters. */
  text(bytes: number): string;
}

interface Example {
  name: string;
  original: string;
  port: string;
  states: Array<{ pluginId: string; scope: Scope }>;
  every?: number;
  step(b: Builder, i: number): void;
  start?: Pick<StartOptions, "flags" | "settings">;
  prepare?(dir: string): void;
  observe?(pi: TestPi): Promise<unknown>;
}

const here = path.dirname(fileURLToPath(import.meta.url));
const PI_EXAMPLES = path.join(path.dirname(fileURLToPath(import.meta.resolve("@earendil-works/pi-coding-agent"))), "..", "examples", "extensions");
const PORTS = path.resolve(here, "..", "examples");

/** A tool result as Pi writes it, with `details`. */
function toolResultOf(toolCallId: string, toolName: string, text: string, details: unknown) {
  return { role: "toolResult", toolCallId, toolName, content: [{ type: "text", text }], details, isError: false, timestamp: Date.now() };
}

/** The first frame of the component a command shows, closed with Escape. */
async function frameOf(pi: TestPi, command: string): Promise<string[]> {
  pi.keys(key.escape);
  await pi.command(command);
  return pi.shown.at(-1)!.frames[0]!;
}

const EXAMPLES: Example[] = [
  {
    name: "todo",
    original: "todo.ts",
    port: "todo.ts",
    states: [{ pluginId: "todo", scope: "branch" }],
    // The model adds an item (a toggle every third step, a clear every 40th), as the tool's
    // calls and results: the original's state is the details of the last result.
    step: (() => {
      let list = { todos: [] as Array<{ id: number; text: string; done: boolean }>, nextId: 1 };
      return (b: Builder, i: number) => {
        const id = `todo_${i}`;
        let args: Record<string, unknown>;
        let text: string;
        if (i % 40 === 39) {
          args = { action: "clear" };
          text = `Cleared ${list.todos.length} todos`;
          list = { todos: [], nextId: 1 };
        } else if (i % 3 === 2 && list.todos.length > 0) {
          const t = list.todos[i % list.todos.length]!;
          args = { action: "toggle", id: t.id };
          list = { ...list, todos: list.todos.map((x) => (x.id === t.id ? { ...x, done: !x.done } : x)) };
          text = `Todo #${t.id} ${t.done ? "uncompleted" : "completed"}`;
        } else {
          const item = { id: list.nextId, text: b.text(40), done: false };
          args = { action: "add", text: item.text };
          list = { todos: [...list.todos, item], nextId: list.nextId + 1 };
          text = `Added todo #${item.id}: ${item.text}`;
        }
        b.sm.appendMessage(assistant(b.text(200), { id, name: "todo", arguments: args }) as never);
        if (args.action === "clear") b.write("todo", "branch", undefined);
        else b.write("todo", "branch", list);
        b.sm.appendMessage(toolResultOf(id, "todo", text, { action: args.action, todos: list.todos, nextId: list.nextId }) as never);
      };
    })(),
    observe: (pi) => frameOf(pi, "/todos"),
  },
  {
    name: "tools",
    original: "tools.ts",
    port: "tools.ts",
    states: [{ pluginId: "tools", scope: "branch" }],
    // /tools switches a built-in tool on or off: the original's `tools-config` entry, the port's state.
    step: (b: Builder, i: number) => {
      const builtins = ["read", "bash", "edit", "write", "grep", "find", "ls"];
      const enabledTools = builtins.filter((_, j) => (i >> j) % 2 === 1);
      b.sm.appendCustomEntry("tools-config", { enabledTools });
      b.write("tools", "branch", { enabledTools });
    },
    observe: (pi) => frameOf(pi, "/tools"),
  },
  {
    name: "plan-mode",
    original: "plan-mode/index.ts",
    port: "plan-mode/index.ts",
    states: [{ pluginId: "plan-mode", scope: "branch" }],
    // A plan's life in four steps: /plan on, the plan's steps, "Execute the plan" (its
    // message, which the original's resume scan starts after), a [DONE:n] at a turn's end.
    step: (b: Builder, i: number) => {
      const todos = [1, 2, 3].map((step) => ({ step, text: `Step ${step} of plan ${Math.floor(i / 4)}`, completed: false }));
      const tools = ["read", "bash", "edit", "write"];
      let value: Record<string, unknown>;
      if (i % 4 === 0) value = { enabled: true, todos: [], executing: false, toolsBeforePlanMode: tools };
      else if (i % 4 === 1) value = { enabled: true, todos, executing: false, toolsBeforePlanMode: tools };
      else if (i % 4 === 2) {
        value = { enabled: false, todos, executing: true };
        b.sm.appendCustomMessageEntry("plan-mode-execute", `Execute the plan.\n\n${b.text(200)}`, true);
      } else {
        b.sm.appendMessage(assistant(`${b.text(300)} [DONE:1]`) as never);
        value = { enabled: false, todos: todos.map((t) => ({ ...t, completed: t.step === 1 })), executing: true };
      }
      b.sm.appendCustomEntry("plan-mode", value);
      // The port also keeps the tools turning plan mode off set, until a run records them.
      b.write("plan-mode", "branch", i % 4 === 2 ? { ...value, toolsAfterPlanMode: tools } : value);
    },
    observe: async (pi) => {
      await pi.command("/todos");
      return [pi.notes.at(-1), pi.statuses()];
    },
  },
  {
    name: "preset",
    original: "preset.ts",
    port: "preset.ts",
    states: [{ pluginId: "preset", scope: "branch" }],
    // A preset chosen: the original saves its name at the next turn's start, the port when chosen.
    step: (b: Builder, i: number) => {
      const name = i % 2 === 0 ? "plan" : "implement";
      b.sm.appendCustomEntry("preset-state", { name });
      b.write("preset", "branch", { name, before: { thinkingLevel: "off", tools: ["read", "bash", "edit", "write"] } });
    },
    prepare: (dir: string) => {
      fs.mkdirSync(path.join(dir, "agent"), { recursive: true });
      fs.writeFileSync(
        path.join(dir, "agent", "presets.json"),
        JSON.stringify({ plan: { tools: ["read", "grep"], instructions: "Plan only." }, implement: { tools: ["read", "bash", "edit", "write"], instructions: "Implement." } }),
      );
    },
    observe: async (pi) => pi.statuses(),
  },
  {
    name: "tic-tac-toe",
    original: "tic-tac-toe.ts",
    port: "tic-tac-toe.ts",
    states: [{ pluginId: "tic-tac-toe", scope: "branch" }],
    // One round per step: the human's X (the original's save entry and the move message),
    // then the model's O (its tool call and result, the board in `details`); a game of
    // four rounds that nobody wins, then a new one.
    step: (() => {
      const X = [[0, 0], [0, 1], [2, 0], [1, 2]];
      const O = [[1, 1], [0, 2], [1, 0], [2, 1]];
      let board: string[][] = [];
      return (b: Builder, i: number) => {
        const round = i % 4;
        if (round === 0) board = [0, 1, 2].map(() => [" ", " ", " "]);
        const game = (turn: string) => ({ board: board.map((r) => [...r]), agentCursorRow: 0, agentCursorCol: 0, status: "playing", currentTurn: turn });
        board[X[round]![0]!]![X[round]![1]!] = "X";
        b.sm.appendCustomEntry("tic-tac-toe-save", game("O"));
        b.sm.appendCustomMessageEntry("tic-tac-toe-move", `Player X played. ${b.text(300)}`, true, game("O"));
        b.write("tic-tac-toe", "branch", game("O"));
        const id = `ttt_${i}`;
        b.sm.appendMessage(assistant(b.text(100), { id, name: "tic_tac_toe", arguments: { action: "play" } }) as never);
        board[O[round]![0]!]![O[round]![1]!] = "O";
        b.write("tic-tac-toe", "branch", game("X"));
        b.sm.appendMessage(toolResultOf(id, "tic_tac_toe", "Placed O.", game("X")) as never);
      };
    })(),
    // The board as `tic_tac_toe_see_board` tells the model, called directly: /tic-tac-toe
    // would name the session (an entry appended) and the next run would read that too.
    observe: async (pi) => {
      const see = (pi.session.extensionRunner as unknown as { getToolDefinition(n: string): any }).getToolDefinition("tic_tac_toe_see_board");
      return (await see.execute("bench", {}, undefined, undefined, pi.context())).content;
    },
  },
];

// ---------------------------------------------------------------------------------------

const N = Number(process.argv[2] ?? 10000);
const RUNS = Math.max(2, Number(process.argv[3] ?? 7));
const root = fs.mkdtempSync(path.join(os.tmpdir(), "pi-examples-bench-"));
process.on("exit", () => fs.rmSync(root, { recursive: true, force: true }));

// --- the session: Pi's SessionManager, filler turns of real size, each example's steps
const r = rng(7);
const text = (bytes: number) => prose(r, bytes);
const buildDir = path.join(root, "build");
const cwd = path.join(buildDir, "project");
fs.mkdirSync(cwd, { recursive: true });
const sm = SessionManager.create(cwd, path.join(buildDir, "sessions"));
const buildDb = path.join(buildDir, "states.sqlite");
const piOf = { appendEntry: (ct: string, data: unknown) => void sm.appendCustomEntry(ct, data) };
const ctx = { cwd, sessionManager: sm as never, isProjectTrusted: () => false };
const handles = new Map<string, ReturnType<typeof openSessionState<unknown>>>();
const builder: Builder = {
  sm,
  write(pluginId, scope, value) {
    const k = `${pluginId}/${scope}`;
    if (!handles.has(k)) handles.set(k, openSessionState<unknown>(piOf, { pluginId, scope, databasePath: buildDb }));
    const h = handles.get(k)!;
    if (value === undefined) h.drop(ctx);
    else h.write(ctx, value);
  },
  text,
};
sm.appendMessage(user("Benchmark session: the examples keep their state while we work.") as never);
sm.appendMessage(assistant(text(1500)) as never);
const steps = new Map(EXAMPLES.map((e) => [e.name, 0]));
let filler = 0;
let middle: string | undefined;
while (sm.getEntries().length < N) {
  if (filler % 2 === 0) sm.appendMessage(user(text(80 + r.int(400))) as never);
  else sm.appendMessage(assistant(text(1000 + r.int(2000))) as never);
  filler++;
  for (const e of EXAMPLES) {
    if (filler % (e.every ?? 50) === 0) {
      e.step(builder, steps.get(e.name)!);
      steps.set(e.name, steps.get(e.name)! + 1);
    }
  }
  if (!middle && sm.getEntries().length >= N / 2) middle = sm.getLeafId()!;
}
const file = sm.getSessionFile()!;
const entries = sm.getEntries().length;
const bytes = fs.statSync(file).size;

// --- timing: each extension loaded through a wrapper whose `pi.on` times the handlers
type Timed = { event: string; ms: number };
const times: Timed[] = [];
const HOOK = Symbol.for("session-state/bench-examples");
(globalThis as any)[HOOK] = (pi: any, factory: (pi: any) => unknown, states: Example["states"] | undefined) => {
  const timed = new Proxy(pi, {
    get(target, prop) {
      if (prop !== "on") {
        const v = target[prop];
        return typeof v === "function" ? v.bind(target) : v;
      }
      return (event: string, handler: (e: unknown, c: unknown) => unknown) =>
        target.on(event, async (e: unknown, c: unknown) => {
          const t0 = performance.now();
          try {
            return await handler(e, c);
          } finally {
            times.push({ event, ms: performance.now() - t0 });
          }
        });
    },
  });
  const result = factory(timed);
  // The port: one read of each state right after the port's own handlers for the event.
  for (const s of states ?? []) {
    const h = openSessionState<unknown>(pi, s);
    for (const event of ["session_start", "session_tree"]) {
      pi.on(event, (_e: unknown, c: any) => {
        const t0 = performance.now();
        h.read(c);
        times.push({ event, ms: performance.now() - t0 });
      });
    }
  }
  return result;
};

/** A file Pi loads as the extension: the original or the port, through the timing wrapper. */
function wrapper(e: Example, which: "original" | "port"): string {
  const target = which === "original" ? path.join(PI_EXAMPLES, e.original) : path.join(PORTS, e.port);
  const states = which === "port" ? JSON.stringify(e.states) : "undefined";
  const w = path.join(root, `${e.name.replace(/\W/g, "-")}-${which}.ts`);
  fs.writeFileSync(
    w,
    `import ext from ${JSON.stringify(target)};\n` +
      `export default (pi: any) => (globalThis as any)[Symbol.for("session-state/bench-examples")](pi, ext, ${states});\n`,
  );
  return w;
}

interface Run {
  /** The handlers' time for the event; `undefined` when the extension has no handler for it. */
  start: number | undefined;
  tree: number | undefined;
  seen: unknown;
}

/** The time of the handlers that ran for `event` since `times` was emptied. */
function spent(event: string): number | undefined {
  const ts = times.filter((t) => t.event === event);
  return ts.length === 0 ? undefined : ts.reduce((a, t) => a + t.ms, 0);
}

async function run(e: Example, which: "original" | "port", dir: string): Promise<Run> {
  times.length = 0;
  const pi = await startPi({ dir, session: file, extensions: [wrapper(e, which)], ...e.start });
  const start = spent("session_start");
  const seen = e.observe ? await e.observe(pi) : undefined;
  times.length = 0;
  await pi.navigate(middle!);
  const tree = spent("session_tree");
  await pi.shutdown();
  return { start, tree, seen };
}

const median = (xs: Array<number | undefined>) =>
  xs.some((x) => x === undefined) ? undefined : [...(xs as number[])].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
/** A time, or "none" where no handler ran for the event (the original does not rebuild there). */
const ms = (x: number | undefined) => (x === undefined ? "none" : x >= 1 ? `${x.toFixed(2)} ms` : `${(x * 1000).toFixed(0)} µs`);
const lines = (p: string) => fs.readFileSync(p, "utf8").split("\n").length - (fs.readFileSync(p, "utf8").endsWith("\n") ? 1 : 0);

console.log(`session: ${entries} entries, ${(bytes / 1048576).toFixed(1)} MiB, written by Pi's SessionManager; /tree target: entry ${sm.getEntries().findIndex((x) => x.id === middle) + 1}`);
console.log(`runs: ${RUNS} each, medians; node ${process.version}, ${os.cpus()[0]?.model ?? "?"} (${os.cpus().length} cores)\n`);
console.log("| extension | original lines | port lines | original rebuild: session_start | port read: session_start | original rebuild: /tree | port read: /tree | port, cold database: session_start |");
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const e of EXAMPLES) {
  const dir = path.join(root, e.name.replace(/\W/g, "-"));
  fs.mkdirSync(dir, { recursive: true });
  e.prepare?.(dir);
  const cold = await run(e, "port", dir); // fills the projection database
  const original: Run[] = [];
  const port: Run[] = [];
  for (let i = 0; i < RUNS; i++) {
    original.push(await run(e, "original", dir));
    port.push(await run(e, "port", dir));
  }
  for (const [i, o] of original.entries()) {
    if (JSON.stringify(o.seen) !== JSON.stringify(port[i]!.seen)) {
      throw new Error(`${e.name}: the original and the port show different things on this session:\n${JSON.stringify(o.seen)}\n${JSON.stringify(port[i]!.seen)}`);
    }
  }
  const portLines = e.port.endsWith("index.ts") ? fs.readdirSync(path.dirname(path.join(PORTS, e.port))).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts")).reduce((a, f) => a + lines(path.join(PORTS, path.dirname(e.port), f)), 0) : lines(path.join(PORTS, e.port));
  const origLines = e.original.endsWith("index.ts") ? fs.readdirSync(path.dirname(path.join(PI_EXAMPLES, e.original))).filter((f) => f.endsWith(".ts")).reduce((a, f) => a + lines(path.join(PI_EXAMPLES, path.dirname(e.original), f)), 0) : lines(path.join(PI_EXAMPLES, e.original));
  console.log(
    `| ${e.name} | ${origLines} | ${portLines} | ${ms(median(original.map((x) => x.start)))} | ${ms(median(port.map((x) => x.start)))} | ${ms(median(original.map((x) => x.tree)))} | ${ms(median(port.map((x) => x.tree)))} | ${ms(cold.start)} |`,
  );
}
