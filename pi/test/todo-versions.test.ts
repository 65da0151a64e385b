// The worked example of docs/pi-extension.md ("Changing your state's shape"): the todo
// list's state from version 1 (texts) to 2 (items with `done`) to 3 (`{items, updatedAt}`),
// each version an extension of its own (todo-v1.ts, todo-v2.ts, todo-v3.ts), run on one
// session file in the real Pi agent loop through the testing kit.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { startPi, type TestPi } from "@session-state/pi/testing";
import { removeTmpDir } from "./helpers.ts";

const v1 = new URL("./todo-v1.ts", import.meta.url);
const v2 = new URL("./todo-v2.ts", import.meta.url);
const v3 = new URL("./todo-v3.ts", import.meta.url);

/** What `/todo show` showed. */
async function show(pi: TestPi): Promise<unknown> {
  await pi.command("/todo show");
  return JSON.parse(pi.notes[pi.notes.length - 1]!.message);
}

/** The session file's last line, as Pi wrote it. */
function lastLine(file: string): Record<string, any> {
  const lines = fs.readFileSync(file, "utf8").trimEnd().split("\n");
  return JSON.parse(lines[lines.length - 1]!);
}

test("the todo list's state from version 1 to 2 to 3", async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "todo-"));
  t.after(() => removeTmpDir(dir));

  // Version 1 writes a session.
  let pi = await startPi({ dir, extensions: [v1] });
  await pi.prompt("hi");
  await pi.command("/todo add milk");
  await pi.command("/todo add bread");
  const file = pi.file!;
  await pi.shutdown();

  // Version 2 reads it migrated, in memory: the file is untouched.
  const before = fs.readFileSync(file);
  pi = await startPi({ dir, session: file, extensions: [v2] });
  assert.deepEqual(await show(pi), [{ text: "milk", done: false }, { text: "bread", done: false }]);
  assert.deepEqual(fs.readFileSync(file), before);
  assert.deepEqual(pi.stored("todo", "branch").value, ["milk", "bread"], "stored as version 1 wrote it");

  // Its first write is a whole `set` of the migrated value, at version 2.
  await pi.command("/todo done 0");
  assert.deepEqual(lastLine(file).data, {
    v: 2,
    stateVersion: 2,
    scope: "branch",
    op: "set",
    value: [{ text: "milk", done: true }, { text: "bread", done: false }],
  });
  await pi.shutdown();

  // Version 3 migrates from 2; a patch on an older value is written as a `set` too.
  pi = await startPi({ dir, session: file, extensions: [v3] });
  assert.deepEqual(await show(pi), { items: [{ text: "milk", done: true }, { text: "bread", done: false }], updatedAt: 0 });
  await pi.command("/todo done 1");
  const event = lastLine(file).data;
  assert.equal(event.stateVersion, 3);
  assert.equal(event.op, "set");
  assert.deepEqual(event.value.items, [{ text: "milk", done: true }, { text: "bread", done: true }]);
  // From there on, writes are patches at version 3.
  await pi.command("/todo add eggs");
  assert.equal(lastLine(file).data.op, "patch");
  assert.equal(pi.stored("todo", "branch").stateVersion, 3);
  await pi.shutdown();

  // Version 2 again: the state is newer than it knows, and every call refuses it.
  pi = await startPi({ dir, session: file, extensions: [v2] });
  const bytes = fs.readFileSync(file);
  await assert.rejects(pi.command("/todo show"), /plugin 'todo': the state \(entry '\w+'\) was written under stateVersion 3, newer than version 2/);
  await assert.rejects(pi.command("/todo add tea"), /stateVersion 3, newer than version 2/);
  assert.deepEqual(fs.readFileSync(file), bytes, "nothing written");
  await pi.shutdown();
});
