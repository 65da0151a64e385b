/**
 * The testing kit's temporary folders: each `startPi` without `dir` works in a new one,
 * removed at `shutdown()`, or at the latest when the process exits.
 */
import * as fs from "node:fs";
import { forgetStoresUnder } from "./internal.ts";

/** Folders to remove if the process exits before `shutdown()` (a failed test). */
const leftovers = new Set<string>();
let exitHook = false;
/** Removes `dir` when the process exits, unless `removeNow` removed it before. */
export function removeAtExit(dir: string): void {
  leftovers.add(dir);
  if (exitHook) return;
  exitHook = true;
  process.on("exit", () => {
    for (const d of leftovers) {
      // The stores' databases there are closed first: Windows refuses to delete an open file.
      forgetStoresUnder(d);
      fs.rmSync(d, { recursive: true, force: true });
    }
  });
}

/** Removes a folder of the kit's now; it is no longer left for the exit. */
export function removeNow(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
  leftovers.delete(dir);
}
