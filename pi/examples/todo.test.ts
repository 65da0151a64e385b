// The todo port (pi/examples/todo.ts) in Pi's real agent loop, through the testing kit:
// the model's tool calls and /todos, then /tree, /fork, /clone, /reload, /compact and a
// resume in a new process, checking what the user and the model see after each; then the
// same script on Pi's own todo.ts, loaded from Pi's installed package.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { key, messageText, startPi, toolCall, toolCalls, type TestPi, type ToolArgs } from "@session-state/pi/testing";
import { inNewProcess } from "./new-process.ts";

const PORT = fileURLToPath(new URL("./todo.ts", import.meta.url));
/** Pi's own todo.ts, where Pi's package installs it (not copied). */
const ORIGINAL = path.join(path.dirname(fileURLToPath(import.meta.resolve("@earendil-works/pi-coding-agent"))), "..", "examples", "extensions", "todo.ts");

function tmp(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pi-todo-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The lines of the /todos view below its title (the count, the items, the hint), as the user reads them. */
function body(frame: string[]): string[] {
  return frame.filter((l) => l.startsWith("  ")).map((l) => l.trim());
}

/** Opens /todos, reads it, closes it with Escape. */
async function view(pi: TestPi): Promise<string[]> {
  pi.keys(key.escape);
  await pi.command("/todos");
  const shown = pi.shown.at(-1)!;
  assert.deepEqual([shown.keys, shown.closed], [[key.escape], true], "Escape closes the view");
  return body(shown.frames[0]!);
}

/** A turn in which the model calls the todo tool (several calls at once when given several); the results' text as the model reads it next. */
async function turn(pi: TestPi, text: string, ...calls: ToolArgs[]): Promise<string[]> {
  const reply = calls.length === 1 ? toolCall("todo", calls[0]!) : toolCalls(calls.map((c) => ["todo", c]));
  await pi.prompt(text, reply, "ok");
  const sent = pi.lastRequest()!.messages;
  return sent.slice(-calls.length).map((m) => {
    assert.equal(m.role, "toolResult");
    return messageText(m);
  });
}

/** The model lists the todos: what the tool answered. */
async function modelList(pi: TestPi): Promise<string> {
  return (await turn(pi, "list the todos", { action: "list" }))[0]!;
}

/** The id of the last tool result on Pi's branch. */
function lastResult(pi: TestPi): string {
  return pi.sessionManager.getBranch().findLast((e: any) => e.type === "message" && e.message.role === "toolResult")!.id;
}

/** The user message `text` on Pi's branch. */
function userEntry(pi: TestPi, text: string): string {
  return pi.sessionManager.getBranch().find((e: any) => e.type === "message" && e.message.role === "user" && messageText(e.message) === text)!.id;
}

const SETTINGS = { compaction: { keepRecentTokens: 1 } };

test("the todo tool and /todos: what the model reads and the user sees, errors included", async () => {
  const pi = await startPi({ extensions: [PORT] });
  assert.deepEqual(await view(pi), ["No todos yet. Ask the agent to add some!", "Press Escape to close"]);
  assert.deepEqual(pi.shown.at(-1)!.frames[0]!.slice(0, 2), ["", `─── Todos ${"─".repeat(90)}`]);

  assert.deepEqual(await turn(pi, "add milk and bread", { action: "add", text: "milk" }, { action: "add", text: "bread" }), ["Added todo #1: milk", "Added todo #2: bread"]);
  assert.deepEqual(pi.state("todo", "branch"), { todos: [{ id: 1, text: "milk", done: false }, { id: 2, text: "bread", done: false }], nextId: 3 });
  assert.deepEqual(pi.render(lastResult(pi)), ['todo add "bread"', "✓ Added #2 bread"], "the transcript row");
  assert.deepEqual(await turn(pi, "milk is done", { action: "toggle", id: 1 }), ["Todo #1 completed"]);
  assert.deepEqual(pi.render(lastResult(pi)), ["todo toggle #1", "✓ Todo #1 completed"]);
  assert.deepEqual(await view(pi), ["1/2 completed", "✓ #1 milk", "○ #2 bread", "Press Escape to close"]);
  assert.equal(await modelList(pi), "[x] #1: milk\n[ ] #2: bread");
  assert.deepEqual(pi.render(lastResult(pi)), ["todo list", "2 todo(s):", "✓ #1 milk", "○ #2 bread"]);

  const events = pi.events("todo").length;
  assert.deepEqual(
    await turn(pi, "mistakes", { action: "add" }, { action: "toggle" }, { action: "toggle", id: 9 }),
    ["Error: text required for add", "Error: id required for toggle", "Todo #9 not found"],
  );
  assert.deepEqual(pi.render(lastResult(pi)), ["todo toggle #9", "Error: #9 not found"]);
  assert.equal(pi.events("todo").length, events, "an error writes nothing");

  for (let i = 3; i <= 7; i++) await turn(pi, `add ${i}`, { action: "add", text: `item ${i}` });
  await modelList(pi);
  assert.deepEqual(pi.render(lastResult(pi)), ["todo list", "7 todo(s):", "✓ #1 milk", "○ #2 bread", "○ #3 item 3", "○ #4 item 4", "○ #5 item 5", "... 2 more"]);
  assert.equal(pi.render(lastResult(pi), { expanded: true })!.length, 9, "expanded: every item");

  assert.deepEqual(await turn(pi, "start over", { action: "clear" }), ["Cleared 7 todos"]);
  assert.deepEqual(pi.render(lastResult(pi)), ["todo clear", "✓ Cleared all todos"]);
  assert.equal(pi.state("todo", "branch"), undefined, "clear drops the state");
  assert.equal(await modelList(pi), "No todos");
  assert.deepEqual(await turn(pi, "again", { action: "add", text: "tea" }), ["Added todo #1: tea"], "ids start over");
  pi.keys(key.ctrl("c"));
  await pi.command("/todos");
  assert.equal(pi.shown.at(-1)!.closed, true, "ctrl+c closes the view too");
  await pi.shutdown();

  const rpc = await startPi({ mode: "rpc", extensions: [PORT] });
  await rpc.command("/todos");
  assert.deepEqual(rpc.notes, [{ message: "/todos requires interactive mode", type: "error" }]);
  assert.equal(rpc.shown.length, 0);
  await rpc.shutdown();
});

test("/tree before and after a change, /fork, /clone, /reload, /compact, and a resume in a new process", async (t) => {
  const dir = tmp(t);
  const pi = await startPi({ dir, settings: SETTINGS, extensions: [PORT] });
  await turn(pi, "add milk and bread", { action: "add", text: "milk" }, { action: "add", text: "bread" });
  const added = pi.leaf!;
  await turn(pi, "toggle milk", { action: "toggle", id: 1 });
  const toggled = pi.leaf!;

  await pi.navigate(added);
  assert.deepEqual(await view(pi), ["0/2 completed", "○ #1 milk", "○ #2 bread", "Press Escape to close"], "/tree to before the toggle");
  assert.equal(await modelList(pi), "[ ] #1: milk\n[ ] #2: bread");
  await pi.navigate(toggled);
  assert.deepEqual(await view(pi), ["1/2 completed", "✓ #1 milk", "○ #2 bread", "Press Escape to close"], "/tree to after it");
  await pi.navigate(added);
  assert.deepEqual(await turn(pi, "add eggs", { action: "add", text: "eggs" }), ["Added todo #3: eggs"], "a sibling branch");
  assert.deepEqual(await view(pi), ["0/3 completed", "○ #1 milk", "○ #2 bread", "○ #3 eggs", "Press Escape to close"]);
  await pi.navigate(added);
  assert.deepEqual(await view(pi), ["0/2 completed", "○ #1 milk", "○ #2 bread", "Press Escape to close"], "the sibling's item is not here");

  await pi.navigate(toggled);
  const first = pi.file;
  await pi.fork(userEntry(pi, "toggle milk"), { position: "before" });
  assert.notEqual(pi.file, first);
  assert.deepEqual(await view(pi), ["0/2 completed", "○ #1 milk", "○ #2 bread", "Press Escape to close"], "/fork on 'toggle milk' stops before it");
  assert.deepEqual(await turn(pi, "bread is done", { action: "toggle", id: 2 }), ["Todo #2 completed"]);
  const forked = pi.file;
  await pi.clone();
  assert.notEqual(pi.file, forked);
  assert.deepEqual(await view(pi), ["1/2 completed", "○ #1 milk", "✓ #2 bread", "Press Escape to close"], "/clone carries the list");
  await pi.reload();
  assert.deepEqual(await view(pi), ["1/2 completed", "○ #1 milk", "✓ #2 bread", "Press Escape to close"], "/reload");

  await turn(pi, "add jam", { action: "add", text: "jam" });
  pi.reply("Summary: a shopping list.");
  await pi.compact();
  assert.ok(pi.sessionManager.getBranch().some((e: any) => e.type === "compaction"));
  assert.deepEqual(await view(pi), ["1/3 completed", "○ #1 milk", "✓ #2 bread", "○ #3 jam", "Press Escape to close"], "/compact");
  assert.equal(await modelList(pi), "[ ] #1: milk\n[x] #2: bread\n[ ] #3: jam");
  const sent = pi.lastRequest()!.messages.map(messageText);
  assert.match(sent[0]!, /Summary: a shopping list\./, "the model sees the summary first");
  assert.ok(!sent.some((m) => m.includes("Added todo #1: milk")), "and not the compacted tool results");

  const file = pi.file!;
  await pi.shutdown();
  const [todos, list] = inNewProcess({
    dir,
    session: file,
    extensions: [PORT],
    steps: [
      { command: "/todos", keys: [key.escape] },
      { prompt: "list the todos", replies: [toolCall("todo", { action: "list" }), "ok"] },
    ],
  });
  assert.deepEqual(body(todos!.shown[0]!.frames[0]!), ["1/3 completed", "○ #1 milk", "✓ #2 bread", "○ #3 jam", "Press Escape to close"], "resumed in a new process");
  assert.equal(list!.request!.messages.at(-1), "toolResult: [ ] #1: milk\n[x] #2: bread\n[ ] #3: jam");
});

/** One step of the differential: its name and what the user and the model saw. */
interface Observed {
  step: string;
  seen: unknown;
}

/** The same script for Pi's todo.ts and the port; what was seen at each step. */
async function script(t: TestContext, extension: string): Promise<Observed[]> {
  const out: Observed[] = [];
  const note = (step: string, seen: unknown) => void out.push({ step, seen });
  const dir = tmp(t);
  const pi = await startPi({ dir, settings: SETTINGS, extensions: [extension] });
  note("add milk and bread: the results", await turn(pi, "add milk and bread", { action: "add", text: "milk" }, { action: "add", text: "bread" }));
  const added = pi.leaf!;
  const addedBread = lastResult(pi);
  note("add: /todos", await view(pi));
  note("toggle milk: the result", await turn(pi, "toggle milk", { action: "toggle", id: 1 }));
  const toggled = pi.leaf!;
  note("toggle: /todos", await view(pi));
  await pi.navigate(added);
  note("/tree to before the toggle: /todos", await view(pi));
  note("/tree to before the toggle: the model's list", await modelList(pi));
  await pi.navigate(toggled);
  note("/tree to after the toggle: /todos", await view(pi));
  note("/tree to after the toggle: the model's list", await modelList(pi));
  await pi.navigate(added);
  note("add eggs on a sibling branch: the result", await turn(pi, "add eggs", { action: "add", text: "eggs" }));
  note("add eggs: /todos", await view(pi));
  await pi.navigate(added);
  note("/tree back to before eggs: /todos", await view(pi));
  note("/tree back to before eggs: the row that added bread", pi.render(addedBread));
  await pi.navigate(toggled);
  await pi.fork(userEntry(pi, "toggle milk"), { position: "before" });
  note("/fork before the toggle: /todos", await view(pi));
  note("the fork: toggle bread", await turn(pi, "toggle bread", { action: "toggle", id: 2 }));
  await pi.clone();
  note("/clone: /todos", await view(pi));
  await pi.reload();
  note("/reload: /todos", await view(pi));
  await turn(pi, "add jam", { action: "add", text: "jam" });
  pi.reply("Summary: a shopping list.");
  await pi.compact();
  note("/compact: /todos", await view(pi));
  note("/compact: the model's list", await modelList(pi));
  const file = pi.file!;
  await pi.shutdown();
  const [todos, list] = inNewProcess({
    dir,
    session: file,
    extensions: [extension],
    steps: [
      { command: "/todos", keys: [key.escape] },
      { prompt: "list the todos", replies: [toolCall("todo", { action: "list" }), "ok"] },
    ],
  });
  note("resumed in a new process: /todos", body(todos!.shown[0]!.frames[0]!));
  note("resumed in a new process: the model's list", list!.request!.messages.at(-1));
  return out;
}

/**
 * Where Pi's todo.ts is wrong: its list shares the item objects (and, after a rebuild, the
 * array) with earlier tool results' details in Pi's memory, so a toggle or an add changes
 * what those results hold. The original's answer, then the port's.
 */
const ORIGINAL_WRONG: Record<string, { original: unknown; port: unknown }> = {
  "/tree to before the toggle: /todos": {
    original: ["1/2 completed", "✓ #1 milk", "○ #2 bread", "Press Escape to close"],
    port: ["0/2 completed", "○ #1 milk", "○ #2 bread", "Press Escape to close"],
  },
  "/tree to before the toggle: the model's list": {
    original: "[x] #1: milk\n[ ] #2: bread",
    port: "[ ] #1: milk\n[ ] #2: bread",
  },
  "add eggs: /todos": {
    original: ["1/3 completed", "✓ #1 milk", "○ #2 bread", "○ #3 eggs", "Press Escape to close"],
    port: ["0/3 completed", "○ #1 milk", "○ #2 bread", "○ #3 eggs", "Press Escape to close"],
  },
  "/tree back to before eggs: /todos": {
    original: ["1/3 completed", "✓ #1 milk", "○ #2 bread", "○ #3 eggs", "Press Escape to close"],
    port: ["0/2 completed", "○ #1 milk", "○ #2 bread", "Press Escape to close"],
  },
  "/tree back to before eggs: the row that added bread": {
    original: ['todo add "bread"', "✓ Added #3 eggs"],
    port: ['todo add "bread"', "✓ Added #2 bread"],
  },
};

test("differential: Pi's todo.ts and the port run the same script; they agree except where the original's shared objects make it wrong", async (t) => {
  const original = await script(t, ORIGINAL);
  const port = await script(t, PORT);
  assert.deepEqual(original.map((o) => o.step), port.map((o) => o.step));
  for (const [i, o] of original.entries()) {
    const p = port[i]!;
    const wrong = ORIGINAL_WRONG[o.step];
    if (wrong) {
      assert.deepEqual(o.seen, wrong.original, `${o.step}: the original's wrong answer`);
      assert.deepEqual(p.seen, wrong.port, `${o.step}: the port's right one`);
    } else {
      assert.deepEqual(p.seen, o.seen, `${o.step}: the two agree`);
    }
  }
  assert.deepEqual(
    original.filter((o) => ORIGINAL_WRONG[o.step]).map((o) => o.step),
    Object.keys(ORIGINAL_WRONG),
    "every listed difference was reached",
  );
  // Where they agree, the values are the right ones (spot checks against the port's own test).
  const at = (step: string) => port.find((o) => o.step === step)!.seen;
  assert.deepEqual(at("/fork before the toggle: /todos"), ["0/2 completed", "○ #1 milk", "○ #2 bread", "Press Escape to close"]);
  assert.deepEqual(at("resumed in a new process: /todos"), ["1/3 completed", "○ #1 milk", "✓ #2 bread", "○ #3 jam", "Press Escape to close"]);
});
