// Pi's protected-paths example with its block list per branch (pi/examples/), in the real
// Pi agent loop: the model's `write` calls are blocked by the list of the branch it is on.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { EXTENSION, fauxAssistantMessage, fauxToolCall, fold, PKG, startPi } from "./harness.ts";

const EXAMPLE = path.join(PKG, "examples", "protected-paths.ts");
const WRITE_TOOL = path.join(path.dirname(new URL(import.meta.url).pathname), "write-tool.ts");

async function tryWrite(pi: any, p: string): Promise<boolean> {
  pi.faux.setResponses([
    fauxAssistantMessage(fauxToolCall("write", { path: p, content: "x" }), { stopReason: "toolUse" }),
    fauxAssistantMessage("ok"),
  ]);
  await pi.session.prompt(`write ${p}`);
  const results = pi.sm.getEntries().filter((e: any) => e.type === "message" && e.message.role === "toolResult");
  const r = results[results.length - 1].message;
  return r.isError === true && /is protected/.test(JSON.stringify(r.content));
}

test("the protected-paths example keeps its block list per branch", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pi-guard-"));
  const pi = await startPi({ dir, extensions: [EXTENSION, EXAMPLE, WRITE_TOOL], hasUI: true });
  assert.equal(await tryWrite(pi, ".env"), true, "the default list blocks .env");
  assert.equal(await tryWrite(pi, "secrets/key"), false, "secrets/ is not protected yet");
  const before = pi.sm.getLeafId();
  await pi.command("/protect secrets/");
  assert.deepEqual(fold(pi.sm, "protected-paths", "branch"), [".env", ".git/", "node_modules/", "secrets/"]);
  assert.equal(await tryWrite(pi, "secrets/key"), true, "protected on this branch");
  await pi.session.navigateTree(before, { summarize: false });
  assert.equal(await tryWrite(pi, "secrets/key"), false, "back before /protect: the list as of that point");
  await pi.dispose();
});
