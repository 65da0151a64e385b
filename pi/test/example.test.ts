// Pi's protected-paths example with its block list per branch (pi/examples/), in the real
// Pi agent loop: the model's `write` calls are blocked by the list of the branch it is on.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { startPi, toolCall, type TestPi } from "@session-state/pi/testing";
import { fold } from "./fold.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
const EXAMPLE = path.join(here, "..", "examples", "protected-paths.ts");
const WRITE_TOOL = path.join(here, "write-tool.ts");

async function tryWrite(pi: TestPi, p: string): Promise<boolean> {
  await pi.prompt(`write ${p}`, toolCall("write", { path: p, content: "x" }), "ok");
  const results = pi.sessionManager.getEntries().filter((e: any) => e.type === "message" && e.message.role === "toolResult");
  const r = (results[results.length - 1] as any).message;
  return r.isError === true && /is protected/.test(JSON.stringify(r.content));
}

test("the protected-paths example keeps its block list per branch", async () => {
  const pi = await startPi({ extensions: [EXAMPLE, WRITE_TOOL] });
  assert.equal(await tryWrite(pi, ".env"), true, "the default list blocks .env");
  assert.equal(await tryWrite(pi, "secrets/key"), false, "secrets/ is not protected yet");
  const before = pi.leaf!;
  await pi.command("/protect secrets/");
  assert.deepEqual(fold(pi.sessionManager, "protected-paths", "branch"), [".env", ".git/", "node_modules/", "secrets/"]);
  assert.equal(await tryWrite(pi, "secrets/key"), true, "protected on this branch");
  await pi.navigate(before);
  assert.equal(await tryWrite(pi, "secrets/key"), false, "back before /protect: the list as of that point");
  await pi.shutdown();
});
