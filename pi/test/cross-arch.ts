// One session, folded on two machines: tests/pi_arm64.rs runs this script on arm64 (under
// qemu-user, with the installed package's arm64 addon) and compares what it prints with
// what the x86-64 command-line tool reads from the same file.
//
//   node test/cross-arch.ts write DIR    Pi (the testing kit) writes state of both scopes,
//                                        with a fork, into a new session under DIR.
//   node test/cross-arch.ts read FILE DIR
//                                        Pi resumes FILE (its agent folder in DIR).
//
// Either way it prints one JSON line: {"arch", "file", "points": [{"at", "branch",
// "session"}]}, the values of plugin `xarch` read at every entry of the session through the
// package's `readAt` (`{"absent": true}` for an absent value).
import * as fs from "node:fs";
import * as path from "node:path";
import { openSessionState, type SessionState } from "@session-state/pi";
import { startPi, type TestPi } from "@session-state/pi/testing";

const PLUGIN = "xarch";
let branch: SessionState<unknown> | undefined;
let session: SessionState<unknown> | undefined;
function extension(pi: any) {
  branch = openSessionState(pi, { pluginId: PLUGIN, scope: "branch" });
  session = openSessionState(pi, { pluginId: PLUGIN, scope: "session" });
}

function points(pi: TestPi) {
  const ctx = pi.context();
  const shown = (v: unknown) => (v === undefined ? { absent: true } : { value: v });
  return pi.sessionManager.getEntries().map((e: { id: string }) => ({
    at: e.id,
    branch: shown(branch!.readAt(ctx, e.id)),
    session: shown(session!.readAt(ctx, e.id)),
  }));
}

const [mode, a, b] = process.argv.slice(2);
let out: object;
if (mode === "write" && a) {
  const dir = path.resolve(a);
  fs.mkdirSync(dir, { recursive: true });
  const pi = await startPi({ extensions: [extension], dir, packageExtension: false });
  const ctx = () => pi.context();
  await pi.prompt("one");
  branch!.write(ctx(), { n: 1, arch: process.arch, text: "é😀\u2028", big: 1e21, small: -0.5, deep: [[[{}]]] });
  session!.write(ctx(), ["a"]);
  await pi.prompt("two");
  const fork = pi.leaf!;
  branch!.patch(ctx(), { n: 2, list: [1, 2], arch: null });
  session!.write(ctx(), ["a", "b"]);
  await pi.prompt("three");
  branch!.drop(ctx());
  await pi.navigate(fork);
  branch!.patch(ctx(), { n: 20, sibling: true });
  session!.patch(ctx(), { merged: 1 });
  await pi.prompt("four");
  out = { arch: process.arch, file: pi.file, points: points(pi) };
  await pi.shutdown();
} else if (mode === "read" && a && b) {
  const pi = await startPi({ extensions: [extension], dir: path.resolve(b), session: path.resolve(a), packageExtension: false });
  out = { arch: process.arch, file: pi.file, points: points(pi) };
  await pi.shutdown();
} else {
  throw new Error("usage: node test/cross-arch.ts write DIR | read FILE DIR");
}
process.stdout.write(`${JSON.stringify(out)}\n`);
