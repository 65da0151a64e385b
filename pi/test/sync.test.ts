// The package's writes inside a real Pi session, down to the file: the session file is
// synced after each append (fdatasync, FlushFileBuffers on Windows, which needs a handle
// with write access), and the events are in the file in the order written.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { startPi } from "@session-state/pi/testing";
import { TEST_EXTENSION, probeCmd, tmpDir, toolTurn } from "./helpers.ts";

test("writes in a Pi session reach the session file, synced after each append, and read back", async (t) => {
  const dir = tmpDir(t);
  const kit = await startPi({ dir, extensions: [TEST_EXTENSION] });
  // Before Pi creates the file, then a tool call's write (Pi creates the file: it is
  // synced, with its directory where there is a directory sync), then a command's patch.
  await kit.prompt("hi");
  await toolTurn(kit, ["a"]);
  await probeCmd(kit, { op: "patch", value: { done: true } });
  const ids = kit.events("todo").map((e) => e.id);
  assert.equal(ids.length, 2);
  const file = kit.file!;
  await kit.shutdown();
  const lines = fs
    .readFileSync(file, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { id?: string });
  const inFile = lines.map((e) => e.id).filter((id) => id !== undefined && ids.includes(id));
  assert.deepEqual(inFile, ids, "both events are in the file, in the order written");
});
