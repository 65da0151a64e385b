// The testing kit's own tests (`@session-state/pi/testing`): what an extension author
// relies on it for, each checked against Pi's own session manager or the file system.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Type } from "typebox";
import { openSessionState } from "@session-state/pi";
import { startPi, toolCall, toolCalls } from "@session-state/pi/testing";

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

test("extension errors fail the call that caused them; an unknown command is refused", async () => {
  const pi = await startPi({ extensions: [notes] });
  await assert.rejects(pi.command("/note boom"), /\/note boom: an extension reported an error:\ncommand:note \(command\): the handler failed/);
  await assert.rejects(pi.command("/nope"), /no command \/nope is registered \(registered: .*\/state:status.*\/note/);
  await assert.rejects(pi.command("note"), /a command starts with "\/"/);
  await pi.shutdown();
  await assert.rejects(
    startPi({ extensions: [() => { throw new Error("cannot load"); }] }),
    /extensions failed to load: .*cannot load/,
  );
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
