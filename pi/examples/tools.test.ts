// The tools port (pi/examples/tools.ts) in Pi's real agent loop, through the testing kit:
// /tools driven with keys, what the model is offered and what its calls get, then /tree,
// /fork, /clone, /reload, /compact and a resume in a new process; then the same script on
// Pi's own tools.ts, loaded from Pi's installed package.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { key, messageText, startPi, toolCall, type TestPi } from "@session-state/pi/testing";
import { inNewProcess } from "./new-process.ts";

const PORT = fileURLToPath(new URL("./tools.ts", import.meta.url));
/** Pi's own tools.ts, where Pi's package installs it (not copied). */
const ORIGINAL = path.join(path.dirname(fileURLToPath(import.meta.resolve("@earendil-works/pi-coding-agent"))), "..", "examples", "extensions", "tools.ts");
/** Two tools to switch: `alpha` and `beta`. */
const GREEK = fileURLToPath(new URL("./fixtures/greek.ts", import.meta.url));

function tmp(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pi-tools-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The /tools list as the user reads it: `name value`, the selected row marked `→`. */
async function view(pi: TestPi): Promise<string[]> {
  pi.keys(key.escape);
  await pi.command("/tools");
  const frame = pi.shown.at(-1)!.frames[0]!;
  assert.deepEqual(frame.slice(0, 2), ["Tool Configuration", ""]);
  assert.equal(frame.at(-1), "  Enter/Space to change · Esc to cancel");
  return frame.slice(2, -2).map((l) => l.replace(/\s+/g, " ").trim());
}

/** The enabled tools as /tools shows them. */
async function enabled(pi: TestPi): Promise<string[]> {
  return (await view(pi)).filter((l) => l.endsWith(" enabled")).map((l) => l.replace(/^→ /, "").split(" ")[0]!);
}

/** Switches `name` in /tools: down to its row, Enter, Escape. */
async function toggle(pi: TestPi, name: string): Promise<void> {
  const rows = await view(pi);
  const at = rows.findIndex((l) => l.replace(/^→ /, "").startsWith(`${name} `));
  assert.ok(at >= 0, `${name} is listed`);
  pi.keys(...Array<string>(at).fill(key.down), key.enter, key.escape);
  await pi.command("/tools");
  const shown = pi.shown.at(-1)!;
  assert.equal(shown.closed, true);
  assert.match(shown.frames.at(-1)!.join("\n"), new RegExp(`→ ${name} +(enabled|disabled)`), "the switched row, selected");
}

/** A turn: the tools the model is offered, and what its call of `name` gets back. */
async function call(pi: TestPi, name: string): Promise<{ offered: string[]; result: string }> {
  await pi.prompt(`call ${name}`, toolCall(name, {}), "ok");
  const [first, second] = pi.requests().slice(-2);
  return { offered: first!.tools, result: messageText(second!.messages.at(-1)!) };
}

const SETTINGS = { compaction: { keepRecentTokens: 1 } };

test("/tools: the list, switching with keys, what the model is offered and what its calls get", async () => {
  const pi = await startPi({ extensions: [PORT, GREEK] });
  assert.deepEqual(await view(pi), [
    "→ read disabled",
    "bash disabled",
    "powershell disabled",
    "edit disabled",
    "write disabled",
    "grep disabled",
    "find disabled",
    "ls disabled",
    "alpha enabled",
    "beta enabled",
  ]);
  assert.deepEqual(await call(pi, "alpha"), { offered: ["alpha", "beta"], result: "alpha here" });
  await toggle(pi, "alpha");
  assert.deepEqual(pi.state("tools", "branch"), { enabledTools: ["beta"] });
  assert.deepEqual(await call(pi, "alpha"), { offered: ["beta"], result: "Tool alpha not found" });
  await toggle(pi, "ls");
  assert.deepEqual(await enabled(pi), ["ls", "beta"]);
  assert.deepEqual((await call(pi, "beta")).offered, ["beta", "ls"]);
  assert.deepEqual(pi.state("tools", "branch"), { enabledTools: ["beta", "ls"] });
  const events = pi.events("tools").length;
  pi.keys(key.escape);
  await pi.command("/tools");
  assert.equal(pi.events("tools").length, events, "closing without a change writes nothing");
  await pi.shutdown();

  const rpc = await startPi({ mode: "rpc", extensions: [PORT, GREEK] });
  await rpc.command("/tools");
  assert.deepEqual(rpc.notes, [{ message: "/tools requires TUI mode", type: "error" }]);
  await rpc.shutdown();
});

test("/tree before and after a change, /fork, /clone, /reload, /compact, and a resume in a new process", async (t) => {
  const dir = tmp(t);
  const pi = await startPi({ dir, settings: SETTINGS, extensions: [PORT, GREEK] });
  await pi.prompt("hello");
  const before = pi.leaf!;
  await toggle(pi, "alpha");
  await pi.prompt("alpha is off");
  const after = pi.leaf!;

  await pi.navigate(before);
  assert.deepEqual(await enabled(pi), ["alpha", "beta"], "/tree to before the change");
  assert.deepEqual(await call(pi, "alpha"), { offered: ["alpha", "beta"], result: "alpha here" });
  await pi.navigate(after);
  assert.deepEqual(await enabled(pi), ["beta"], "/tree to after it");
  assert.deepEqual(await call(pi, "alpha"), { offered: ["beta"], result: "Tool alpha not found" });

  await pi.fork(before);
  assert.deepEqual(await enabled(pi), ["alpha", "beta"], "/fork at the point before the change");
  assert.deepEqual((await call(pi, "beta")).offered, ["alpha", "beta"]);
  await toggle(pi, "beta");
  await pi.clone();
  assert.deepEqual(await enabled(pi), ["alpha"], "/clone carries the set");
  assert.deepEqual((await call(pi, "alpha")).offered, ["alpha"]);
  await pi.reload();
  assert.deepEqual(await enabled(pi), ["alpha"], "/reload");
  assert.deepEqual(await call(pi, "beta"), { offered: ["alpha"], result: "Tool beta not found" });

  await pi.prompt("more");
  pi.reply("Summary: tools were switched.");
  await pi.compact();
  assert.ok(pi.sessionManager.getBranch().some((e: any) => e.type === "compaction"));
  assert.deepEqual(await enabled(pi), ["alpha"], "/compact");
  assert.deepEqual((await call(pi, "alpha")).offered, ["alpha"]);

  // Where Pi's transcript has not recorded the change yet (no turn since), the saved set is what applies it.
  await pi.prompt("unrecorded");
  const base = pi.leaf!;
  await toggle(pi, "beta");
  const unrecorded = pi.leaf!;
  assert.equal(pi.sessionManager.getEntry(unrecorded)?.type, "custom", "the leaf is the state event");
  await pi.navigate(base);
  await pi.navigate(unrecorded);
  assert.deepEqual(await enabled(pi), ["alpha", "beta"], "/tree to the change itself");
  assert.deepEqual((await call(pi, "beta")).offered, ["alpha", "beta"]);
  await pi.navigate(base);
  await toggle(pi, "beta");
  await pi.clone();
  assert.deepEqual((await call(pi, "beta")).offered, ["alpha", "beta"], "/clone right after the change");
  await toggle(pi, "alpha");

  const file = pi.file!;
  await pi.shutdown();
  const [tools, turn] = inNewProcess({
    dir,
    session: file,
    extensions: [PORT, GREEK],
    steps: [
      { command: "/tools", keys: [key.escape] },
      { prompt: "call alpha", replies: [toolCall("alpha", {}), "ok"] },
    ],
  });
  const rows = tools!.shown[0]!.frames[0]!.map((l) => l.replace(/\s+/g, " ").trim());
  assert.ok(rows.includes("alpha disabled") && rows.includes("beta enabled"), `resumed in a new process: ${rows.join(" | ")}`);
  assert.deepEqual(turn!.request!.tools, ["beta"]);
  assert.equal(turn!.request!.messages.at(-1), "toolResult: Tool alpha not found");
});

/** The same script for Pi's tools.ts and the port; what the user and the model saw at each step. */
async function script(t: TestContext, extension: string): Promise<Array<{ step: string; seen: unknown }>> {
  const out: Array<{ step: string; seen: unknown }> = [];
  const note = (step: string, seen: unknown) => void out.push({ step, seen });
  const dir = tmp(t);
  const pi = await startPi({ dir, settings: SETTINGS, extensions: [extension, GREEK] });
  note("start: /tools", await view(pi));
  note("start: a call of alpha", await call(pi, "alpha"));
  const before = pi.leaf!;
  await toggle(pi, "alpha");
  note("alpha off: /tools", await view(pi));
  note("alpha off: a call of alpha", await call(pi, "alpha"));
  const after = pi.leaf!;
  await toggle(pi, "bash");
  note("bash on: a call of beta", await call(pi, "beta"));
  const bash = pi.leaf!;
  await pi.navigate(before);
  note("/tree to before the changes: /tools", await view(pi));
  note("/tree to before the changes: a call of alpha", await call(pi, "alpha"));
  await pi.navigate(after);
  note("/tree to after alpha off: /tools", await view(pi));
  note("/tree to after alpha off: a call of beta", await call(pi, "beta"));
  await pi.navigate(bash);
  note("/tree to after bash on: a call of beta", await call(pi, "beta"));
  await pi.fork(after);
  note("/fork after alpha off: /tools", await view(pi));
  note("/fork: a call of beta", await call(pi, "beta"));
  await toggle(pi, "alpha");
  await pi.clone();
  note("/clone: /tools", await view(pi));
  note("/clone: a call of alpha", await call(pi, "alpha"));
  await pi.reload();
  note("/reload: /tools", await view(pi));
  note("/reload: a call of alpha", await call(pi, "alpha"));
  pi.reply("Summary: tools were switched.");
  await pi.compact();
  note("/compact: /tools", await view(pi));
  note("/compact: a call of beta", await call(pi, "beta"));
  const base = pi.leaf!;
  await toggle(pi, "beta");
  const unrecorded = pi.leaf!;
  await pi.navigate(base);
  await pi.navigate(unrecorded);
  note("/tree to a change no turn recorded yet: /tools", await view(pi));
  note("/tree to a change no turn recorded yet: a call of alpha", await call(pi, "alpha"));
  await toggle(pi, "ls");
  await pi.clone();
  note("/clone right after a change: a call of alpha", await call(pi, "alpha"));
  const file = pi.file!;
  await pi.shutdown();
  const [tools, turn] = inNewProcess({
    dir,
    session: file,
    extensions: [extension, GREEK],
    steps: [
      { command: "/tools", keys: [key.escape] },
      { prompt: "call alpha", replies: [toolCall("alpha", {}), "ok"] },
    ],
  });
  note("resumed in a new process: /tools", tools!.shown[0]!.frames[0]);
  note("resumed in a new process: the model's tools and the call's result", [turn!.request!.tools, turn!.request!.messages.at(-1)]);
  return out;
}

test("differential: Pi's tools.ts and the port run the same script and agree at every step", async (t) => {
  const original = await script(t, ORIGINAL);
  const port = await script(t, PORT);
  assert.deepEqual(original.map((o) => o.step), port.map((o) => o.step));
  for (const [i, o] of original.entries()) assert.deepEqual(port[i]!.seen, o.seen, `${o.step}: the two agree`);
  // The values they agree on are the right ones.
  const at = (step: string) => port.find((o) => o.step === step)!.seen;
  assert.deepEqual(at("/tree to before the changes: a call of alpha"), { offered: ["alpha", "beta"], result: "alpha here" });
  assert.deepEqual(at("/tree to after bash on: a call of beta"), { offered: ["beta", "bash"], result: "beta here" });
  assert.deepEqual(at("/reload: a call of alpha"), { offered: ["beta", "alpha"], result: "alpha here" }, "the fork was made before bash was switched on");
  assert.deepEqual(at("/tree to a change no turn recorded yet: a call of alpha"), { offered: ["alpha"], result: "alpha here" });
  assert.deepEqual(at("/clone right after a change: a call of alpha"), { offered: ["alpha", "ls"], result: "alpha here" });
  assert.deepEqual(at("resumed in a new process: the model's tools and the call's result"), [["alpha", "ls"], "toolResult: alpha here"]);
});
