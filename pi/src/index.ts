/**
 * session-state for Pi extensions (SPEC §9): the API of pi-session-state, answered by the
 * Rust core through a native addon, with the state kept in Pi's own session log.
 *
 * ```ts
 * import { openSessionState, branchKey } from "@session-state/pi";
 * export default function (pi: ExtensionAPI) {
 *   const role = openSessionState<Role>(pi, { pluginId: "role", scope: "branch" });
 *   pi.registerCommand("role", { handler: async (args, ctx) => role.write(ctx, { name: args }) });
 * }
 * ```
 *
 * - Writes go through `pi.appendEntry` (Pi writes the line) with the §3 envelope, and are
 *   on disk (`fdatasync`) when `write` returns once the file exists. Before Pi has created
 *   the file, they stay in Pi's memory (visible to reads) and are synced when it does.
 * - Reads are always at Pi's in-memory leaf (`ctx.sessionManager.getLeafId()`).
 * - Bad input throws an `Error` with the Rust core's message; nothing is appended.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { loadAddon } from "./addon.ts";

/** The part of Pi's extension handle this package uses (`ExtensionAPI`). */
export interface PiHandle {
  appendEntry(customType: string, data?: unknown): void;
  on?(event: string, handler: (event: unknown, ctx: PiContext) => unknown): unknown;
}

/** The part of Pi's extension context this package reads (`ExtensionContext`). */
export interface PiContext {
  cwd: string;
  sessionManager: {
    getSessionId(): string;
    getSessionFile(): string | undefined;
    getLeafId(): string | null;
    getHeader(): unknown;
    getEntries(): unknown[];
  };
  isProjectTrusted?(): boolean;
}

export type Scope = "session" | "branch";

export interface SessionStateOptions {
  /** Lowercase letters, digits, `-` and `.`; the events' customType is `session-state/<pluginId>`. */
  pluginId: string;
  /** `"session"` (the default, as in pi-session-state) or `"branch"`. */
  scope?: Scope;
  /** The projection database (an absolute path); default: from settings (SPEC §4). */
  databasePath?: string;
}

/** One event of `history()`: the entry that holds it, the operation, what it wrote and the value after it. */
export interface HistoryEntry<T> {
  entryId: string;
  op: "set" | "patch" | "drop";
  argument?: unknown;
  value?: T;
}

export interface SessionState<T> {
  readonly pluginId: string;
  readonly scope: Scope;
  /** The value at Pi's current leaf; `undefined` when absent (a written `null` reads `null`). */
  read(ctx: PiContext): T | undefined;
  /** The value as if Pi's leaf were `entryId`. */
  readAt(ctx: PiContext, entryId: string): T | undefined;
  /** Sets the value; returns the new entry's id, or `undefined` when the value was already equal (nothing appended). */
  write(ctx: PiContext, value: T): string | undefined;
  /** Applies an RFC 7396 JSON Merge Patch (an absent value patches `{}`). */
  patch(ctx: PiContext, patch: unknown): string | undefined;
  /** Makes the value absent; `undefined` when it already was. */
  drop(ctx: PiContext): string | undefined;
  /** The events that made the value at Pi's leaf, oldest first. */
  history(ctx: PiContext): HistoryEntry<T>[];
}

// ---------------------------------------------------------------------------------------
// The addon
// ---------------------------------------------------------------------------------------

interface NativeStoreHandle {
  readonly databasePath: string;
  diagnostics(): string[];
  loadPending(bytes: Buffer): void;
  read(file: string | null, plugin: string, scope: string, at: string | null): string | null;
  prepare(file: string | null, plugin: string, scope: string, at: string | null, op: string, argument: string | null): string | null;
  history(file: string | null, plugin: string, scope: string, at: string | null): string;
  branchKey(file: string | null, at: string | null): string | null;
  status(sessionId: string): string;
  forceRefresh(sessionId: string, file: string | null): boolean;
  enterPresence(sessionId: string, file: string | null): void;
  leavePresence(sessionId: string): boolean;
  catchUp(file: string): void;
}

interface NativeModule {
  NativeStore: new (databasePath: string | null, cwd: string, trust: "trusted" | "untrusted" | "pi") => NativeStoreHandle;
  validatePlugin(id: string): void;
  validateScope(scope: string): void;
  checkValue(plugin: string, text: string): void;
  serializeError(plugin: string, detail: string): string;
  nonFiniteError(plugin: string, n: number): string;
}

/** @internal The addon (`addon.ts` finds it: `SESSION_STATE_PI_ADDON`, `native/`, the platform package). */
export const native: NativeModule = loadAddon<NativeModule>();

/** Calls the addon; its errors already carry the core's message. */
function call<R>(f: () => R): R {
  try {
    return f();
  } catch (e) {
    if (e instanceof Error) throw new Error(e.message);
    throw e;
  }
}

// ---------------------------------------------------------------------------------------
// Stores: one per (databasePath option, cwd, trust), shared by every state on it
// ---------------------------------------------------------------------------------------

interface StoreEntry {
  store: NativeStoreHandle;
  /** Whether the settings diagnostics were reported (once per store). */
  reported?: boolean;
  /** What the store's pending log holds: `${sessionId}\0${entryCount}`. */
  pendingKey?: string;
}

/**
 * Per-process state, on `globalThis`: Pi loads each extension with its own module
 * instance, and every copy of this module must share it.
 */
interface Shared {
  stores: Map<string, StoreEntry>;
  /** Bumped by force-refresh: every memo keyed before it is stale. */
  generation: number;
  /** Files whose directory was synced once, after Pi created them. */
  dirSynced: Set<string>;
  /** Files known to exist (they never go away under a running Pi). */
  existing: Set<string>;
  /** Files seen missing: Pi created them in this process, after entries waited in memory. */
  missing: Set<string>;
  /** An open descriptor per session file, for `fdatasync`. */
  syncFds: Map<string, number>;
}
const SHARED = Symbol.for("session-state/pi");
const shared: Shared = ((globalThis as Record<symbol, unknown>)[SHARED] as Shared | undefined) ??
  ((globalThis as Record<symbol, unknown>)[SHARED] = {
    stores: new Map(),
    generation: 0,
    dirSynced: new Set(),
    existing: new Set(),
    missing: new Set(),
    syncFds: new Map(),
  } satisfies Shared) as Shared;
const { stores, dirSynced, existing, missing, syncFds } = shared;

/** @internal */
export function storeFor(ctx: PiContext, databasePath?: string): StoreEntry {
  // The project's settings count when Pi trusts the project (SPEC §4).
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

/** @internal Forgets every memo (after force-refresh). */
export function invalidateAll(): void {
  shared.generation++;
  for (const e of stores.values()) e.pendingKey = undefined;
}

function entryCount(sm: PiContext["sessionManager"]): number {
  const f = (sm as { getEntryCount?: () => number }).getEntryCount;
  return typeof f === "function" ? f.call(sm) : sm.getEntries().length;
}

/** The session file when Pi has created it, else `null`. */
function sessionFile(sm: PiContext["sessionManager"]): string | null {
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

/** The entries Pi holds in memory, as the JSONL it would write. */
function pendingBytes(sm: PiContext["sessionManager"]): Buffer {
  const lines = [sm.getHeader(), ...sm.getEntries()].filter((e) => e != null).map((e) => JSON.stringify(e));
  return Buffer.from(lines.join("\n") + "\n");
}

interface View {
  file: string | null;
  leaf: string | null;
  key: string;
}

/** Where a read stands: the file (or the pending entries handed over) and Pi's leaf. */
function view(entry: StoreEntry, ctx: PiContext): View {
  const sm = ctx.sessionManager;
  const file = sessionFile(sm);
  const leaf = sm.getLeafId();
  const count = entryCount(sm);
  const sid = sm.getSessionId();
  if (file) {
    syncIfNew(file);
  } else {
    const pk = `${sid}\0${count}`;
    if (entry.pendingKey !== pk) {
      call(() => entry.store.loadPending(pendingBytes(sm)));
      entry.pendingKey = pk;
    }
  }
  return { file, leaf, key: `${shared.generation}\0${sid}\0${file ? "f" : "m"}\0${count}\0${leaf ?? ""}` };
}

function fdFor(file: string): number {
  let fd = syncFds.get(file);
  if (fd === undefined) {
    fd = fs.openSync(file, "r");
    syncFds.set(file, fd);
  }
  return fd;
}

/**
 * The first time a file is seen on disk after it was seen missing (Pi created it, with the
 * entries that waited in memory): its data and its directory entry are synced. A file
 * that was there when first looked at needs neither (our writes sync themselves).
 */
function syncIfNew(file: string): boolean {
  if (dirSynced.has(file)) return false;
  if (!missing.has(file)) {
    dirSynced.add(file);
    return false;
  }
  fs.fdatasyncSync(fdFor(file));
  const dir = fs.openSync(path.dirname(file), "r");
  try {
    fs.fsyncSync(dir);
  } finally {
    fs.closeSync(dir);
  }
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

// ---------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------

const NON_FINITE = Symbol("non-finite");
const MAX_DEPTH = 100;

/** The JSON text Pi's `JSON.stringify` would write for `value`, or the core's refusal. */
function encode(plugin: string, value: unknown): string {
  if (value === undefined) {
    throw new Error(
      native.serializeError(plugin, "undefined is not a JSON value: write null, or drop() to make the value absent"),
    );
  }
  let bad = 0;
  let text: string | undefined;
  try {
    text = JSON.stringify(value, (_k, v) => {
      if (typeof v === "number" && !Number.isFinite(v)) {
        bad = v;
        throw NON_FINITE;
      }
      return v;
    });
  } catch (e) {
    if (e === NON_FINITE) throw new Error(native.nonFiniteError(plugin, bad));
    if (e instanceof RangeError) {
      // Deeper than JavaScript's own stack: the core's refusal of a too-deep value.
      call(() => native.checkValue(plugin, "[".repeat(MAX_DEPTH + 1) + "]".repeat(MAX_DEPTH + 1)));
    }
    const why = e instanceof TypeError && /circular/i.test(e.message) ? "the value refers to itself (a cycle)" : String((e as Error)?.message ?? e);
    throw new Error(native.serializeError(plugin, `${why}; JSON cannot carry it`));
  }
  if (text === undefined) {
    throw new Error(native.serializeError(plugin, `a ${typeof value} is not a JSON value`));
  }
  return text;
}

function parse<T>(text: string | null): T | undefined {
  return text === null ? undefined : (JSON.parse(text) as T);
}

// ---------------------------------------------------------------------------------------
// The API
// ---------------------------------------------------------------------------------------

/**
 * Opens the state of `pluginId`. Options are validated here (the core's messages):
 * `pluginId` of lowercase letters, digits, `-` and `.`; `scope` `"session"` (default) or
 * `"branch"`; `databasePath` absolute.
 */
export function openSessionState<T>(pi: PiHandle, options: SessionStateOptions): SessionState<T> {
  if (!pi || typeof pi.appendEntry !== "function") {
    throw new Error("openSessionState: the first argument must be Pi's extension handle (pi), whose appendEntry writes the events");
  }
  if (!options || typeof options !== "object") {
    throw new Error("openSessionState: options { pluginId, scope?, databasePath? } are required");
  }
  const pluginId = options.pluginId;
  call(() => native.validatePlugin(String(pluginId ?? "")));
  const scope: Scope = options.scope ?? "session";
  call(() => native.validateScope(String(scope)));
  const databasePath = options.databasePath;
  if (databasePath !== undefined) {
    // Checked now: the core's rule for an explicit path (non-empty, absolute).
    call(() => new native.NativeStore(String(databasePath), process.cwd(), "untrusted"));
  }
  const customType = `session-state/${pluginId}`;
  const memo = new Map<string, string | null>();
  /** The last read: at the same leaf, entry count and generation, its answer stands. */
  let hot: { sm: unknown; leaf: string | null; count: number; gen: number; text: string | null } | undefined;

  // Pi creates the file at the first user or assistant message: entries that waited in
  // memory are synced then (and its directory, once).
  for (const ev of ["message_end", "turn_end", "agent_end"]) pi.on?.(ev, (_e, ctx) => syncSession(ctx, true));
  pi.on?.("session_shutdown", (_e, ctx) => {
    syncSession(ctx, true);
    memo.clear();
    hot = undefined;
  });

  const read = (ctx: PiContext): T | undefined => {
    const sm = ctx.sessionManager;
    const leaf = sm.getLeafId();
    const count = entryCount(sm);
    if (hot && hot.sm === sm && hot.leaf === leaf && hot.count === count && hot.gen === shared.generation) {
      return parse<T>(hot.text);
    }
    const entry = storeFor(ctx, databasePath);
    const v = view(entry, ctx);
    let text = memo.get(v.key);
    if (text === undefined) {
      text = call(() => entry.store.read(v.file, pluginId, scope, v.leaf));
      if (memo.size > 64) memo.clear();
      memo.set(v.key, text);
    }
    hot = { sm, leaf, count, gen: shared.generation, text };
    return parse<T>(text);
  };

  const commit = (ctx: PiContext, op: "set" | "patch" | "drop", argument: string | null): string | undefined => {
    const entry = storeFor(ctx, databasePath);
    const v = view(entry, ctx);
    const data = call(() => entry.store.prepare(v.file, pluginId, scope, v.leaf, op, argument));
    if (data === null) return undefined;
    pi.appendEntry(customType, JSON.parse(data));
    const id = ctx.sessionManager.getLeafId() ?? undefined;
    syncSession(ctx);
    return id;
  };

  return {
    pluginId,
    scope,
    read,
    readAt(ctx, entryId) {
      const entry = storeFor(ctx, databasePath);
      const v = view(entry, ctx);
      return parse<T>(call(() => entry.store.read(v.file, pluginId, scope, String(entryId))));
    },
    write(ctx, value) {
      return commit(ctx, "set", encode(pluginId, value));
    },
    patch(ctx, patch) {
      return commit(ctx, "patch", encode(pluginId, patch));
    },
    drop(ctx) {
      return commit(ctx, "drop", null);
    },
    history(ctx) {
      const entry = storeFor(ctx, databasePath);
      const v = view(entry, ctx);
      return JSON.parse(call(() => entry.store.history(v.file, pluginId, scope, v.leaf))) as HistoryEntry<T>[];
    },
  };
}

/** SPEC §3's branch key at Pi's leaf: from the leaf, climb while the parent has exactly one child. */
export function branchKey(ctx: PiContext): string | undefined {
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  return call(() => entry.store.branchKey(v.file, v.leaf)) ?? undefined;
}
