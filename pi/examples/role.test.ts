// The testing kit's first example: Pi's real agent loop, the faux model, the role example.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startPi } from "@session-state/pi/testing";

test("/role keeps the role per branch", async () => {
  const pi = await startPi({ extensions: [new URL("./role.ts", import.meta.url)] });
  await pi.prompt("hi"); // the faux model answers "ok"
  const before = pi.leaf!;
  await pi.command("/role reviewer");
  assert.deepEqual(pi.state("role", "branch"), { name: "reviewer" });
  await pi.navigate(before); // back before /role, as /tree does
  assert.equal(pi.state("role", "branch"), undefined);
  await pi.shutdown();
});
