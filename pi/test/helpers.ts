// What the package's tests share: the test extension's probe, the reference fold, the CLI,
// and temporary folders that are removed when the test ends.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { TestContext } from "node:test";
import { toolCall, type TestPi } from "@session-state/pi/testing";

export { fold, customs } from "./fold.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
/** The test extension: the API from a tool's execute and from the `/probe` command. */
export const TEST_EXTENSION = path.join(here, "state-ext.ts");

export const CLI = process.env.SESSION_STATE_BIN ?? path.resolve(here, "..", "..", "target", "debug", "session-state");
assert.ok(fs.existsSync(CLI), `the CLI is missing: ${CLI} (build it with cargo build, or set SESSION_STATE_BIN)`);

export interface Read {
  where: string;
  leaf: string | null;
  branch: unknown;
  session: unknown;
  foldBranch: unknown;
  foldSession: unknown;
  key: string | undefined;
}
/** What the test extension read, with the reference fold at the same moment. */
export const probe: { reads: Read[]; errors: string[] } = ((globalThis as any).__stateProbe ??= { reads: [], errors: [] });

/**
 * Removes a test's temporary folder. On Windows a folder whose files this process still
 * holds open (the store's SQLite database stays open until the process exits) cannot be
 * removed: EBUSY there leaves the folder in the temporary directory instead of failing a
 * test whose checks all passed.
 */
export function removeTmpDir(dir: string): void {
  try {
    fs.rmSync(dir, { recursive: true, force: true });
  } catch (e) {
    if (process.platform !== "win32" || (e as NodeJS.ErrnoException).code !== "EBUSY") throw e;
  }
}

/** A folder for one test (shared by the Pis it starts), removed when the test ends ({@link removeTmpDir}). */
export function tmpDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pi-state-"));
  t.after(() => removeTmpDir(dir));
  return dir;
}

/** The CLI with only PATH, HOME and the agent directory of `dir` (as the kit lays it out). */
export function cli(args: string[], dir: string) {
  const r = spawnSync(CLI, args, {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", PI_CODING_AGENT_DIR: path.join(dir, "agent"), HOME: dir },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Every read recorded since `from` equals the fold over Pi's entries at that moment. */
export function checkReads(from = 0) {
  const reads = probe.reads.slice(from);
  assert.ok(reads.length > 0, "the extension read something");
  for (const r of reads) {
    assert.deepEqual(r.branch, r.foldBranch, `branch read at ${r.where} (leaf ${r.leaf})`);
    assert.deepEqual(r.session, r.foldSession, `session read at ${r.where} (leaf ${r.leaf})`);
  }
}

export function last(): Read {
  return probe.reads[probe.reads.length - 1]!;
}

/** One scripted action of the test extension (`/probe <json>`). */
export async function probeCmd(pi: TestPi, action: object) {
  await pi.command(`/probe ${JSON.stringify(action)}`);
}

/** The model calls the `remember` tool, then answers. */
export async function toolTurn(pi: TestPi, items: string[]) {
  await pi.prompt(`remember ${items.join(",")}`, toolCall("remember", { items }), "done");
}

// The package under test, as Node resolves its name (this checkout, or an installed copy).
const PKG = path.resolve(path.dirname(fileURLToPath(import.meta.resolve("@session-state/pi"))), "..");
/** Pi's `pi` command (package.json `bin`), next to the SDK's entry point `dist/index.js`. */
const PI_BIN = path.join(path.dirname(fileURLToPath(import.meta.resolve("@earendil-works/pi-coding-agent"))), "bundle", "cli.js");

/** `pi <args>` with the package loaded, in the kit's layout of `dir` (agent/, project/). */
export function piCommand(dir: string, args: string[]) {
  fs.mkdirSync(path.join(dir, "project"), { recursive: true });
  const r = spawnSync(process.execPath, [PI_BIN, "--offline", "-e", PKG, ...args], {
    cwd: path.join(dir, "project"),
    encoding: "utf8",
    env: {
      PATH: process.env.PATH ?? "",
      HOME: dir,
      PI_CODING_AGENT_DIR: path.join(dir, "agent"),
      // The addon the tests were given (cargo test builds it outside pi/native/).
      ...(process.env.SESSION_STATE_PI_ADDON ? { SESSION_STATE_PI_ADDON: process.env.SESSION_STATE_PI_ADDON } : {}),
      // Where qemu-user finds the C libraries, when these tests run emulated (tests/pi_arm64.rs).
      ...(process.env.QEMU_LD_PREFIX ? { QEMU_LD_PREFIX: process.env.QEMU_LD_PREFIX } : {}),
    },
    timeout: 120_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
