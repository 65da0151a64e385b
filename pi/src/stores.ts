/**
 * The addon's stores, one per (databasePath option, cwd, trust), shared by every state on
 * it, and where a call stands in Pi's session: the file, or the entries Pi holds in memory
 * handed over, and Pi's leaf.
 */
import * as path from "node:path";
import { call, native } from "./native.ts";
import { closeSyncDescriptors, forgetFilesUnder, sessionFile, syncIfNew } from "./session-file.ts";
import { shared, type StoreEntry } from "./shared.ts";
import type { PiContext } from "./types.ts";

const { stores } = shared;

/** @internal The store a call of `ctx` uses (with `databasePath`: that database's), opened the first time. */
export function storeFor(ctx: PiContext, databasePath?: string): StoreEntry {
  // The project's settings count when Pi trusts the project (docs/spec.md §4).
  const trust =
    databasePath !== undefined
      ? "untrusted"
      : typeof ctx.isProjectTrusted === "function"
        ? ctx.isProjectTrusted()
          ? "trusted"
          : "untrusted"
        : "pi";
  const key = `${databasePath ?? ""}\0${databasePath === undefined ? ctx.cwd : ""}\0${trust}`;
  let entry = stores.get(key);
  if (!entry) {
    entry = { store: call(() => new native.NativeStore(databasePath ?? null, ctx.cwd, trust)) };
    stores.set(key, entry);
  }
  return entry;
}

/** @internal Forgets the last reads and the entries handed over (after force-refresh). */
export function invalidateAll(): void {
  shared.generation++;
  for (const e of stores.values()) e.pendingKey = undefined;
  closeSyncDescriptors();
}

/** How many entries Pi holds. */
export function entryCount(sm: PiContext["sessionManager"]): number {
  return typeof sm.getEntryCount === "function" ? sm.getEntryCount() : sm.getEntries().length;
}

/** The entries Pi holds in memory, as the JSONL it would write. */
function pendingBytes(sm: PiContext["sessionManager"]): Buffer {
  const lines = [sm.getHeader(), ...sm.getEntries()].filter((e) => e != null).map((e) => JSON.stringify(e));
  return Buffer.from(lines.join("\n") + "\n");
}

/** Where a call stands in Pi's session: the file (`null`: the entries handed over) and Pi's leaf. */
export interface View {
  file: string | null;
  leaf: string | null;
}

/** Where a read stands: the file (or the pending entries handed over) and Pi's leaf. */
export function view(entry: StoreEntry, ctx: PiContext): View {
  shared.lastCtx = ctx;
  const sm = ctx.sessionManager;
  const file = sessionFile(sm);
  const leaf = sm.getLeafId();
  if (file) {
    syncIfNew(file);
  } else {
    const pk = `${sm.getSessionId()}\0${entryCount(sm)}`;
    if (entry.pendingKey !== pk) {
      call(() => entry.store.loadPending(pendingBytes(sm)));
      entry.pendingKey = pk;
    }
  }
  return { file, leaf };
}

/** @internal Forgets and closes the stores whose database lies under `dir` (the testing kit removes it). */
export function forgetStoresUnder(dir: string): void {
  const prefix = dir.endsWith(path.sep) ? dir : dir + path.sep;
  for (const [key, e] of stores) {
    let db: string;
    try {
      db = e.store.databasePath;
    } catch {
      continue;
    }
    if (db.startsWith(prefix)) {
      stores.delete(key);
      // At once, not when the handle is collected: Windows refuses to delete an open file.
      e.store.close();
    }
  }
  forgetFilesUnder(prefix);
  try {
    if (shared.lastCtx?.cwd?.startsWith(prefix)) shared.lastCtx = undefined;
  } catch {
    shared.lastCtx = undefined; // a stale context (its session was replaced)
  }
}
