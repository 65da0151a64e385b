/**
 * A testing kit for Pi extensions (`@session-state/pi/testing`): runs extensions inside
 * the real Pi agent loop (Pi's SDK, `AgentSessionRuntime`) with pi-ai's scripted `faux`
 * model, so a test needs no network, no API key and no mocks.
 *
 * ```ts
 * import { test } from "node:test";
 * import assert from "node:assert/strict";
 * import { startPi, toolCall } from "@session-state/pi/testing";
 *
 * test("/role sets the role on this branch", async () => {
 *   const pi = await startPi({ extensions: [new URL("./role.ts", import.meta.url)] });
 *   await pi.command("/role reviewer");
 *   assert.deepEqual(pi.state("role", "branch"), { name: "reviewer" });
 *   await pi.prompt("go on", toolCall("remember", { items: ["a"] }), "done");
 *   await pi.shutdown();
 * });
 * ```
 *
 * - Each `startPi` works in a new temporary folder (Pi's agent directory, a project
 *   folder, the session files and the projection database), removed at `shutdown()`, or
 *   at the latest when the process exits.
 * - The extensions run as in Pi's TUI (`ctx.mode` is `"tui"`, `ctx.hasUI` is true) with
 *   Pi's own theme (`ctx.ui.theme`, "dark"): what they set with `setStatus` and
 *   `setWidget` is kept for the test to read, and a component shown with `ctx.ui.custom`
 *   is driven by the keys the test queued with `pi.keys(…)`.
 * - Every request the model gets is recorded: `pi.requests()` / `pi.lastRequest()` give
 *   its system prompt, its tools and its messages.
 * - The package's own extension (`/state:*`, the presence row, the transcript renderers)
 *   is loaded first, as `pi install` loads it; Pi's built-in tools are off.
 * - An error an extension reports (a command or event handler that throws, a failed
 *   load) fails the call that caused it; `pi.command()` rejects with the error the
 *   command's handler threw, as thrown (its class, fields and `cause`).
 *
 * The kit's parts: `testing-types.ts` (what a test reads), `testing-model.ts` (the
 * scripted model), `testing-ui.ts` (the TUI Pi is given), `testing-runtime.ts` (Pi's
 * runtime and the `TestPi` handle), `testing-folder.ts` (the temporary folders).
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { forgetStoresUnder } from "./internal.ts";
import { removeAtExit, removeNow } from "./testing-folder.ts";
import { start } from "./testing-runtime.ts";
import type { StartOptions, TestPi } from "./testing-types.ts";

export { fauxAssistantMessage, fauxToolCall } from "@earendil-works/pi-ai";
export { messageText, toolCall, toolCalls } from "./testing-model.ts";
export type { ModelRequest, Note, Reply, Shown, StartOptions, TestPi, ToolArgs, UICall } from "./testing-types.ts";
export { key } from "./testing-ui.ts";

/** Starts Pi with `options.extensions` in a new temporary folder (see the module docs). */
export async function startPi(options: StartOptions = {}): Promise<TestPi> {
  const owned = options.dir === undefined;
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "pi-test-"));
  if (owned) removeAtExit(dir);
  const previousAgentDir = process.env.PI_CODING_AGENT_DIR;
  try {
    return await start(options, dir, owned);
  } catch (e) {
    // A Pi that failed to start leaves nothing behind: its agent directory is no longer
    // the process's, and its folder is removed.
    if (process.env.PI_CODING_AGENT_DIR === path.join(dir, "agent")) {
      if (previousAgentDir === undefined) delete process.env.PI_CODING_AGENT_DIR;
      else process.env.PI_CODING_AGENT_DIR = previousAgentDir;
    }
    forgetStoresUnder(dir);
    if (owned) removeNow(dir);
    throw e;
  }
}
