// The testing kit's own tests (`@session-state/pi/testing`): what an extension author
// relies on it for, each checked against Pi's own session manager or the file system.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Type } from "typebox";
import { openSessionState, StateValidationError } from "@session-state/pi";
import { key, messageText, startPi, toolCall, toolCalls } from "@session-state/pi/testing";

/** An inline extension: a `remember` tool and a `/note` command on branch state. */
function notes(pi: any) {
  const note = openSessionState<string[]>(pi, { pluginId: "notes", scope: "branch" });
  pi.registerTool({
    name: "remember",
    label: "remember",
    description: "adds a note",
    parameters: Type.Object({ text: Type.String() }),
    async execute(_id: string, p: { text: string }, _s: unknown, _u: unknown, ctx: any) {
      note.write(ctx, [...(note.read(ctx) ?? []), p.text]);
      return { content: [{ type: "text", text: "ok" }], details: {} };
    },
  });
  pi.registerCommand("note", {
    handler: async (args: string, ctx: any) => {
      if (args === "boom") throw new Error("the handler failed");
      note.write(ctx, [...(note.read(ctx) ?? []), args]);
      ctx.ui.notify(`notes: ${note.read(ctx)!.join(", ")}`, "info");
    },
  });
}

test("a session in a temporary folder: scripted replies and tool calls, commands, state, history; shutdown removes the folder", async () => {
  const pi = await startPi({ extensions: [notes] });
  assert.ok(fs.existsSync(pi.dir) && pi.dir.startsWith(fs.realpathSync(path.dirname(pi.dir))));
  await pi.prompt("hello", "hi there");
  const assistant = pi.sessionManager.getEntries().filter((e: any) => e.type === "message" && e.message.role === "assistant");
  assert.deepEqual(assistant.map((e: any) => e.message.content[0].text), ["hi there"], "the scripted reply");
  await pi.prompt("remember", toolCalls([["remember", { text: "a" }], ["remember", { text: "b" }]]), "done");
  assert.deepEqual(pi.state("notes", "branch"), ["a", "b"], "two tool calls ran in the agent loop");
  await pi.prompt("once more", toolCall("remember", { text: "c" })); // the final answer: the default "ok"
  const last = pi.sessionManager.getEntries().at(-1) as any;
  assert.equal(last.message.content[0].text, "ok");
  await pi.command("/note d");
  assert.deepEqual(pi.notes.at(-1), { message: "notes: a, b, c, d", type: "info" });
  assert.deepEqual(
    pi.history<string[]>("notes", "branch").map((h) => h.value),
    [["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"]],
  );
  assert.deepEqual(pi.events("notes").map((e) => e.id), pi.history("notes", "branch").map((h) => h.entryId));
  assert.ok(pi.file && fs.existsSync(pi.file) && pi.file.startsWith(pi.agentDir), "Pi's session file, in the kit's agent folder");
  const dir = pi.dir;
  await pi.shutdown();
  assert.equal(fs.existsSync(dir), false, "the folder is gone");
  await pi.shutdown(); // twice is fine
});

test("navigate, fork, reopen and a new session, as /tree, /fork, /resume and /new do", async () => {
  const pi = await startPi({ extensions: [notes] });
  await pi.prompt("hi");
  await pi.command("/note one");
  const one = pi.leaf!;
  await pi.command("/note two");
  await pi.navigate(one);
  assert.deepEqual(pi.state("notes", "branch"), ["one"], "the value as of that point");
  await pi.command("/note other");
  assert.deepEqual(pi.state("notes", "branch"), ["one", "other"], "a sibling branch");
  const first = pi.file!;
  await pi.fork();
  assert.notEqual(pi.file, first);
  assert.deepEqual(pi.state("notes", "branch"), ["one", "other"], "the fork carries the state");
  await pi.prompt("in the fork");
  const forked = pi.file!;
  await pi.reopen();
  assert.equal(pi.file, forked);
  assert.deepEqual(pi.state("notes", "branch"), ["one", "other"], "read back from the file");
  await pi.newSession();
  assert.equal(pi.state("notes", "branch"), undefined, "a new session starts empty");
  assert.equal(pi.events().length, 0);
  await pi.shutdown();
});

test("a command's error reaches the test as thrown: its class, its fields, its cause", async () => {
  const pi = await startPi({
    extensions: [
      (api: any) => {
        const role = openSessionState<{ name: string }>(api, {
          pluginId: "role",
          scope: "branch",
          validate: Type.Object({ name: Type.String({ minLength: 1 }) }),
        });
        api.registerCommand("role", {
          handler: async (args: string, ctx: any) => {
            role.write(ctx, { name: args.trim() });
          },
        });
        api.registerCommand("wrapped", {
          handler: async () => {
            const inner = new RangeError("the inner failure");
            throw new Error("the outer failure", { cause: inner });
          },
        });
      },
    ],
  });
  await pi.command("/role reviewer");
  const refused = await pi.command("/role  ").then(
    () => assert.fail("an empty name is refused by validate"),
    (e: unknown) => e,
  );
  assert.ok(refused instanceof StateValidationError, String(refused));
  assert.equal(refused.pluginId, "role");
  assert.equal(refused.path, "/name");
  assert.match(refused.detail, /\S/);
  // Nothing was appended: the state is the last valid one.
  assert.deepEqual(pi.state("role", "branch"), { name: "reviewer" });
  const wrapped = await pi.command("/wrapped").then(
    () => assert.fail("/wrapped throws"),
    (e: unknown) => e,
  );
  assert.ok(wrapped instanceof Error && wrapped.message === "the outer failure", String(wrapped));
  assert.ok(wrapped.cause instanceof RangeError && wrapped.cause.message === "the inner failure", String(wrapped.cause));
  // The kit puts back the command's own handler: it runs again, and fails again as thrown.
  await assert.rejects(pi.command("/role  "), StateValidationError);
  await pi.command("/role writer");
  assert.deepEqual(pi.state("role", "branch"), { name: "writer" });
  await pi.shutdown();
});

test("extension errors fail the call that caused them; an unknown command is refused", async () => {
  const pi = await startPi({ extensions: [notes] });
  await assert.rejects(pi.command("/note boom"), (e: unknown) => e instanceof Error && e.message === "the handler failed");
  await assert.rejects(pi.command("/nope"), /no command \/nope is registered \(registered: .*\/state:status.*\/note/);
  await assert.rejects(pi.command("note"), /a command starts with "\/"/);
  await pi.shutdown();
  await assert.rejects(
    startPi({ extensions: [() => { throw new Error("cannot load"); }] }),
    /extensions failed to load: .*cannot load/,
  );
});

test("an extension that throws at session_start fails startPi, and that Pi is shut down and its folder removed", async () => {
  const events: string[] = [];
  const before = process.env.PI_CODING_AGENT_DIR;
  let agentDir = "";
  await assert.rejects(
    startPi({
      extensions: [
        (p: any) => {
          p.on("session_start", async () => {
            agentDir = process.env.PI_CODING_AGENT_DIR!;
            throw new Error("cannot start");
          });
          p.on("session_shutdown", async () => void events.push("shutdown"));
        },
      ],
    }),
    /starting Pi: an extension reported an error:\n.*cannot start/,
  );
  assert.deepEqual(events, ["shutdown"], "the Pi that failed to start was shut down");
  assert.ok(agentDir !== "" && !fs.existsSync(path.dirname(agentDir)), "its folder is removed");
  assert.equal(process.env.PI_CODING_AGENT_DIR, before, "the agent directory is the process's again");
});

test("a call that fails drops the keys queued for it", async () => {
  const pi = await startPi({
    extensions: [
      (p: any) => {
        p.registerCommand("boom", {
          handler: async () => {
            throw new Error("no component today");
          },
        });
        p.registerCommand("key", {
          handler: async (_a: string, ctx: any) => {
            const k = await ctx.ui.custom((_t: any, _th: any, _kb: any, done: (v: string) => void) => ({
              render: () => ["press a key"],
              invalidate() {},
              handleInput(data: string) {
                void Promise.resolve().then(() => done(data));
              },
            }));
            ctx.ui.notify(`key ${k}`);
          },
        });
      },
    ],
  });
  pi.keys("a");
  await assert.rejects(pi.command("/boom"), /no component today/);
  pi.keys("b");
  await pi.command("/key");
  assert.deepEqual(pi.notes.at(-1), { message: "key b", type: "info" }, "not the key queued for the failed call");
  await pi.shutdown();
});

test("print mode: no UI, and what commands print is captured", async () => {
  const pi = await startPi({ ui: false, extensions: [notes] });
  await pi.command("/state:status");
  assert.match(pi.printed.join(""), /^session   .* \(.*\.jsonl\)\ndatabase  .*states\.sqlite.*\nlock      none\npi        this Pi: pid:\d+.*\nevents    none\n$/);
  await pi.command("/state:history Nope");
  assert.match(pi.stderr.join(""), /is not a valid plugin id/, "an error goes to stderr");
  assert.equal(pi.notes.length, 0, "no UI");
  await pi.shutdown();
});

test("a folder of a Pi that was never shut down is removed when the process exits", () => {
  const script = `
    import { startPi } from "@session-state/pi/testing";
    const pi = await startPi();
    await pi.prompt("hi");
    console.log(pi.dir);
  `;
  const here = path.dirname(fileURLToPath(import.meta.url));
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { cwd: here, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const dir = r.stdout.trim().split("\n").at(-1)!;
  assert.ok(dir.length > 0 && path.isAbsolute(dir), r.stdout);
  assert.equal(fs.existsSync(dir), false, `${dir} was removed at exit`);
});

// Pi's own example extensions, loaded from its installed package (not copied).
const EXAMPLES = path.join(path.dirname(fileURLToPath(import.meta.resolve("@earendil-works/pi-coding-agent"))), "..", "examples", "extensions");

test("a stock extension runs as in the TUI: /todos draws its list and closes on Escape", async () => {
  const pi = await startPi({ extensions: [path.join(EXAMPLES, "todo.ts")] });
  await pi.prompt("plan", toolCalls([["todo", { action: "add", text: "milk" }], ["todo", { action: "add", text: "bread" }]]), toolCall("todo", { action: "toggle", id: 1 }), "done");
  pi.keys(key.escape);
  await pi.command("/todos");
  assert.equal(pi.notes.length, 0, "no '/todos requires interactive mode'");
  const shown = pi.shown.at(-1)!;
  assert.deepEqual(shown.frames, [
    ["", `─── Todos ${"─".repeat(90)}`, "", "  1/2 completed", "", "  ✓ #1 milk", "  ○ #2 bread", "", "  Press Escape to close", ""],
  ]);
  assert.deepEqual(shown.keys, [key.escape]);
  assert.equal(shown.closed, true);
  // The component is left open when the keys run out: the command fails and says so.
  pi.keys(key.down);
  await assert.rejects(pi.command("/todos"), /the component is still open after the keys \["\\u001b\[B"\]; queue the keys that close it[\s\S]*1\/2 completed/);
  await pi.shutdown();
});

test("the model's requests: system prompt, tools and messages, as the faux model received them", async () => {
  const pi = await startPi({
    extensions: [
      (p: any) => {
        p.on("before_agent_start", async (e: any) => ({ systemPrompt: `${e.systemPrompt}\nAlways answer in French.` }));
        p.registerTool({
          name: "clock",
          label: "clock",
          description: "the time",
          parameters: Type.Object({}),
          async execute() {
            return { content: [{ type: "text", text: "noon" }], details: {} };
          },
        });
      },
    ],
  });
  assert.equal(pi.lastRequest(), undefined);
  await pi.prompt("what time is it?", toolCall("clock", {}), "midi");
  const [first, second] = pi.requests();
  assert.equal(pi.requests().length, 2, "one request per model call");
  assert.match(first!.systemPrompt, /\nAlways answer in French\.$/);
  assert.deepEqual(first!.tools, ["clock"]);
  assert.deepEqual(first!.messages.map(messageText), ["what time is it?"]);
  assert.deepEqual(second!.messages.map((m) => [m.role, messageText(m)]), [
    ["user", "what time is it?"],
    ["assistant", "clock({})"],
    ["toolResult", "noon"],
  ]);
  assert.deepEqual(pi.lastRequest(), second);
  await pi.shutdown();
});

test("setStatus and setWidget are kept as the TUI shows them; a stock extension's themed status works; a session switch clears them", async () => {
  const pi = await startPi({
    flags: { plan: true },
    extensions: [
      path.join(EXAMPLES, "plan-mode", "index.ts"),
      (p: any) => {
        p.registerCommand("board", {
          handler: async (args: string, ctx: any) => {
            ctx.ui.setStatus("moves", args || undefined);
            if (args === "lines") ctx.ui.setWidget("board", ["x o .", ". x ."], { placement: "belowEditor" });
            else if (args === "component")
              ctx.ui.setWidget("board", (_tui: unknown, theme: any) => ({ render: (w: number) => [theme.fg("accent", `width ${w}`)], invalidate() {} }));
            else ctx.ui.setWidget("board", undefined);
          },
        });
      },
    ],
  });
  assert.deepEqual(pi.statuses(), { "plan-mode": "⏸ plan" }, "--plan: plan mode's status, drawn with ctx.ui.theme");
  await pi.prompt("look around");
  assert.match(pi.lastRequest()!.messages.map(messageText).join("\n"), /\[PLAN MODE ACTIVE\]/, "what plan mode sends the model");
  await pi.shortcut("ctrl+alt+p");
  assert.deepEqual(pi.statuses(), {}, "the shortcut turned plan mode off");
  assert.deepEqual(pi.notes.at(-1), { message: "Plan mode disabled. Full access restored.", type: "info" });
  await pi.command("/board lines");
  assert.deepEqual(pi.widget("board"), [" x o .", " . x ."], "Pi's padding of a line widget");
  await pi.command("/board component");
  assert.deepEqual(pi.widgets(), { board: ["width 100"] });
  await pi.command("/board");
  assert.equal(pi.widget("board"), undefined);
  assert.deepEqual(
    pi.uiCalls.filter((c) => c.key === "board"),
    [
      { method: "setWidget", key: "board", lines: [" x o .", " . x ."], placement: "belowEditor" },
      { method: "setWidget", key: "board", lines: ["width 100"], placement: "aboveEditor" },
      { method: "setWidget", key: "board", lines: undefined, placement: "aboveEditor" },
    ],
  );
  assert.deepEqual(pi.uiCalls.filter((c) => c.key === "plan-mode").map((c) => c.method === "setStatus" && c.text), ["⏸ plan", undefined]);
  await pi.command("/board lines");
  assert.deepEqual(pi.statuses(), { moves: "lines" });
  await pi.newSession();
  assert.deepEqual([pi.statuses(), pi.widgets()], [{ "plan-mode": "⏸ plan" }, {}], "/new: the old session's status and widget are gone; --plan turns plan mode on again");
  await assert.rejects(pi.shortcut("ctrl+x"), /no shortcut ctrl\+x is registered \(registered: ctrl\+alt\+p\)/);
  await pi.shutdown();
});

test("ctx.mode is tui, ctx.ui.theme is Pi's theme, a component's done value is returned, keys not taken stay queued", async () => {
  const seen: unknown[] = [];
  const pi = await startPi({
    width: 40,
    extensions: [
      (p: any) => {
        p.registerCommand("pick", {
          handler: async (_a: string, ctx: any) => {
            seen.push(ctx.mode, ctx.hasUI, ctx.ui.theme.fg("accent", "x") !== "x");
            const choice = await ctx.ui.custom((_tui: any, theme: any, kb: any, done: (v: string) => void) => {
              let i = 0;
              const items = ["red", "green", "blue"];
              return {
                render: (w: number) => items.map((it, j) => (j === i ? theme.fg("accent", `> ${it}`) : `  ${it}`).padEnd(w)),
                invalidate() {},
                handleInput(data: string) {
                  if (kb.matches(data, "tui.select.down")) i = Math.min(i + 1, items.length - 1);
                  else if (kb.matches(data, "tui.select.confirm")) void Promise.resolve().then(() => done(items[i]!));
                },
              };
            });
            ctx.ui.notify(`picked ${choice}`);
          },
        });
      },
    ],
  });
  pi.keys(key.down, key.down, key.enter, "q");
  await pi.command("/pick");
  assert.deepEqual(seen, ["tui", true, true]);
  assert.deepEqual(pi.notes.at(-1), { message: "picked blue", type: "info" }, "done's value, given from a promise");
  const s = pi.shown.at(-1)!;
  assert.deepEqual(s.frames.map((f) => f.find((l) => l.startsWith(">"))), ["> red", "> green", "> blue"]);
  assert.deepEqual([s.keys.length, s.result, s.overlay], [3, "blue", false]);
  pi.keys(key.enter);
  await pi.command("/pick");
  assert.equal(pi.shown.at(-1)!.keys[0], "q", "the key the first component left is the next one's");
  await pi.shutdown();
  const rpc = await startPi({ mode: "rpc", extensions: [(p: any) => p.registerCommand("mode", { handler: async (_a: string, ctx: any) => ctx.ui.notify(ctx.mode) })] });
  await rpc.command("/mode");
  assert.deepEqual(rpc.notes.at(-1)!.message, "rpc");
  await rpc.shutdown();
});

test("clone, /fork before a user message, reload and compact, as Pi's commands do them", async () => {
  const starts: string[] = [];
  const pi = await startPi({
    settings: { compaction: { keepRecentTokens: 1 } },
    extensions: [notes, (p: any) => p.on("session_start", async (e: any) => void starts.push(e.reason))],
  });
  await pi.prompt("first");
  const firstUser = pi.sessionManager.getBranch().find((e: any) => e.type === "message" && e.message.role === "user")!.id;
  await pi.command("/note a");
  await pi.prompt("second");
  await pi.command("/note b");
  const before = pi.file;
  await pi.clone();
  assert.notEqual(pi.file, before);
  assert.deepEqual(pi.state("notes", "branch"), ["a", "b"], "a clone holds the whole branch");
  await pi.fork(pi.sessionManager.getBranch().find((e: any) => e.type === "message" && e.message.content?.[0]?.text === "second")!.id, { position: "before" });
  assert.deepEqual(pi.state("notes", "branch"), ["a"], "/fork on 'second' stops before it");
  assert.ok(pi.sessionManager.getEntry(firstUser), "the fork keeps the path up to there");
  await pi.reload();
  assert.deepEqual(pi.state("notes", "branch"), ["a"]);
  await pi.prompt("third");
  await pi.prompt("fourth");
  pi.reply("the summary");
  await pi.compact();
  const compaction = pi.sessionManager.getBranch().find((e: any) => e.type === "compaction") as any;
  assert.equal(compaction?.summary.includes("the summary"), true, "the model's summary");
  await pi.prompt("after");
  assert.match(messageText(pi.lastRequest()!.messages[0]!), /the summary/, "the model now sees the summary first");
  assert.deepEqual(starts, ["startup", "fork", "fork", "reload"]);
  await pi.shutdown();
});

test("the kit reads a state in the scope the test names", async () => {
  const pi = await startPi({ extensions: [notes] });
  await pi.command("/note a");
  assert.deepEqual(pi.state("notes", "branch"), ["a"]);
  assert.throws(() => (pi.state as any)("notes"), /pi\.state\(pluginId, scope\): name the scope, "branch" or "session"/);
  assert.throws(() => (pi.history as any)("notes"), /pi\.history\(pluginId, scope\)/);
  await pi.shutdown();
});
