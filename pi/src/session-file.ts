/**
 * The session file Pi writes: whether Pi has created it, and its syncs (`fdatasync` of
 * the file after an append, and once, when Pi creates it, of the entries that waited in
 * memory and of its directory entry).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { shared } from "./shared.ts";
import type { PiContext } from "./types.ts";

const { dirSynced, existing, missing, syncFds } = shared;

/** The session file when Pi has created it, else `null`. */
export function sessionFile(sm: PiContext["sessionManager"]): string | null {
  const file = sm.getSessionFile();
  if (!file) return null;
  if (existing.has(file)) return file;
  if (fs.existsSync(file)) {
    existing.add(file);
    return file;
  }
  missing.add(file);
  return null;
}

/**
 * The descriptor the session file is synced through, opened once per file. It has write
 * access ("r+": read and write, no create, no truncate) on every platform, because on
 * Windows `fdatasync` is `FlushFileBuffers`, which refuses a handle without write access
 * (EPERM); nothing is ever written through it.
 */
function fdFor(file: string): number {
  let fd = syncFds.get(file);
  if (fd === undefined) {
    fd = fs.openSync(file, "r+");
    syncFds.set(file, fd);
  }
  return fd;
}

/**
 * The directory entry of a file Pi created, made durable: `fsync` of its directory. Not on
 * Windows, which has no directory sync (`FlushFileBuffers` needs write access, and a
 * directory cannot be opened for writing): there the file's own flush is all there is.
 */
function syncDir(file: string): void {
  if (process.platform === "win32") return;
  const dir = fs.openSync(path.dirname(file), "r");
  try {
    fs.fsyncSync(dir);
  } finally {
    fs.closeSync(dir);
  }
}

/**
 * The first time a file is seen on disk after it was seen missing (Pi created it, with the
 * entries that waited in memory): its data and its directory entry are synced. A file
 * that was there when first looked at needs neither (our writes sync themselves).
 */
export function syncIfNew(file: string): boolean {
  if (dirSynced.has(file)) return false;
  if (!missing.has(file)) {
    dirSynced.add(file);
    return false;
  }
  fs.fdatasyncSync(fdFor(file));
  syncDir(file);
  dirSynced.add(file);
  return true;
}

/**
 * Syncs what Pi wrote of this session once it has created the file: always (after an
 * append of ours), or with `onlyFirst` only the first time the file is seen (the entries
 * that waited in memory for Pi to create it).
 */
export function syncSession(ctx: PiContext, onlyFirst = false): void {
  const file = sessionFile(ctx.sessionManager);
  if (!file) return;
  const synced = syncIfNew(file);
  if (!onlyFirst && !synced) fs.fdatasyncSync(fdFor(file));
}

/** `syncSession(ctx)` after an append to `file`, which exists. */
export function syncAppended(file: string): void {
  if (!syncIfNew(file)) fs.fdatasyncSync(fdFor(file));
}

/** Closes the descriptors kept for `fdatasync` (at `session_shutdown`). */
export function closeSession(ctx: PiContext): void {
  const file = ctx.sessionManager.getSessionFile();
  if (!file) return;
  const fd = syncFds.get(file);
  if (fd !== undefined) {
    syncFds.delete(file);
    try {
      fs.closeSync(fd);
    } catch {
      /* already closed */
    }
  }
}

/**
 * Closes every descriptor kept for `fdatasync` (after force-refresh): each is opened again
 * at the next sync, on the file then at the path (which may be another one now).
 */
export function closeSyncDescriptors(): void {
  for (const fd of syncFds.values()) {
    try {
      fs.closeSync(fd);
    } catch {
      /* already closed */
    }
  }
  syncFds.clear();
}

/** Closes the descriptors of the files under `prefix` and forgets what was known of them. */
export function forgetFilesUnder(prefix: string): void {
  for (const [file, fd] of syncFds) {
    if (!file.startsWith(prefix)) continue;
    syncFds.delete(file);
    try {
      fs.closeSync(fd);
    } catch {
      /* already closed */
    }
  }
  for (const set of [dirSynced, existing, missing]) for (const f of set) if (f.startsWith(prefix)) set.delete(f);
}
