/**
 * The package's implementation: `openSessionState` and what the package's extension and
 * testing kit share with it. Its public names are exported by `index.ts` (the package's
 * main entry), the rest by `internal.ts` (`@session-state/pi/internal`).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { TSchema } from "typebox";
import { Compile } from "typebox/compile";
import { loadAddon } from "./addon.ts";
import { stateEntryRenderer, type CustomEntryLike } from "./render.ts";

/** The part of Pi's extension handle this package uses (`ExtensionAPI`). */
export interface PiHandle {
  appendEntry(customType: string, data?: unknown): void;
  on?(event: string, handler: (event: unknown, ctx: PiContext) => unknown): unknown;
  /** Pi's TUI transcript: how entries of a customType are drawn. */
  registerEntryRenderer?(customType: string, renderer: (entry: any, options: any, theme: any) => unknown): void;
  /** The effective settings (for `sessionState.transcript`). */
  getSettings?(): unknown;
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
    getEntry?(id: string): unknown;
    getEntryCount?(): number;
  };
  isProjectTrusted?(): boolean;
}

export type Scope = "session" | "branch";

/**
 * A check of a state's values: a TypeBox schema (checked with TypeBox's compiled checker,
 * `Compile` from `typebox/compile`), or a function that says whether a value is valid (a
 * type guard `(value: unknown) => value is T`).
 */
export type Validate<T> = TSchema | ((value: unknown) => value is T) | ((value: unknown) => boolean);

export interface SessionStateOptions<T = unknown> {
  /** Lowercase letters, digits, `-` and `.`; the events' customType is `session-state/<pluginId>`. */
  pluginId: string;
  /** `"session"` (the default, as in pi-session-state) or `"branch"`. */
  scope?: Scope;
  /** The projection database (an absolute path); default: from settings (docs/spec.md §4). */
  databasePath?: string;
  /**
   * The version of the value's shape, a whole number ≥ 1 (default 1), recorded in every
   * event this state writes (`"stateVersion"` when above 1). A value written under a newer
   * version is refused by every call ({@link StateVersionError}).
   */
  version?: number;
  /**
   * Turns a value written under an older version (`fromVersion`, 1 for an event without
   * one) into this version's shape. Required when `version` is above 1. Called on reads, in
   * memory only (nothing is written); the next write is a whole `set` at `version`.
   */
  migrate?: (value: unknown, fromVersion: number) => T;
  /**
   * Checks values: on a write, the value it leaves (refused with
   * {@link StateValidationError}, nothing appended); on a read, the value read (after
   * `migrate` for an older one).
   */
  validate?: Validate<T>;
}

/** One event of `history()`: the entry that holds it, the operation, what it wrote, the value after it (as stored) and the state version it was written under. */
export interface HistoryEntry<T> {
  entryId: string;
  op: "set" | "patch" | "drop";
  /** The state version the event was written under (1: an event without one). */
  stateVersion: number;
  argument?: unknown;
  value?: T;
}

/**
 * A state written under a newer version of its shape than the state's `version`: every
 * read, write, patch and drop of it is refused, and nothing is appended. The message is the
 * Rust core's (`StateError::NewerStateVersion`).
 */
export class StateVersionError extends Error {
  override readonly name = "StateVersionError";
  /** The plugin id. */
  readonly pluginId: string;
  /** The version the value was written under. */
  readonly storedVersion: number;
  /** The state's `version`: the newest this code knows. */
  readonly knownVersion: number;
  /** The entry of the event that wrote it. */
  readonly entryId: string | undefined;
  constructor(pluginId: string, storedVersion: number, knownVersion: number, entryId: string | undefined, message?: string) {
    super(
      message ??
        `plugin '${pluginId}': the state${entryId === undefined ? "" : ` (entry '${entryId}')`} was written under stateVersion ${storedVersion}, newer than version ${knownVersion} that this code knows; it is neither read nor written over (upgrade the extension that reads it)`,
    );
    this.pluginId = pluginId;
    this.storedVersion = storedVersion;
    this.knownVersion = knownVersion;
    this.entryId = entryId;
  }
}

/**
 * A value that does not pass the state's `validate`: a stored one on a read (`entryId`: the
 * event that set it), or the value a write would leave (`entryId` `undefined`; nothing is
 * appended). `path` is the first failing place as a JSON Pointer (`"/items/0/done"`; `""`:
 * the value itself, always so for a type-guard function), `detail` what is wrong there.
 */
export class StateValidationError extends Error {
  override readonly name = "StateValidationError";
  readonly pluginId: string;
  readonly entryId: string | undefined;
  readonly path: string;
  readonly detail: string;
  constructor(pluginId: string, entryId: string | undefined, path: string, detail: string, message: string) {
    super(message);
    this.pluginId = pluginId;
    this.entryId = entryId;
    this.path = path;
    this.detail = detail;
  }
}

/**
 * The state's `migrate` failed on a value written under an older version (it threw, or
 * returned what JSON cannot carry). The message names the plugin, the entry and the versions
 * as the Rust core's `StateError::Migrate` does.
 */
export class StateMigrationError extends Error {
  override readonly name = "StateMigrationError";
  readonly pluginId: string;
  readonly fromVersion: number;
  readonly toVersion: number;
  readonly entryId: string | undefined;
  readonly detail: string;
  constructor(
    pluginId: string,
    fromVersion: number,
    toVersion: number,
    entryId: string | undefined,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(
      `plugin '${pluginId}': migrating the state${entryId === undefined ? "" : ` (entry '${entryId}')`} from version ${fromVersion} to ${toVersion} failed: ${detail}`,
      options,
    );
    this.pluginId = pluginId;
    this.fromVersion = fromVersion;
    this.toVersion = toVersion;
    this.entryId = entryId;
    this.detail = detail;
  }
}

export interface SessionState<T> {
  readonly pluginId: string;
  readonly scope: Scope;
  /** The version of the value's shape this state reads and writes. */
  readonly version: number;
  /**
   * The value at Pi's current leaf; `undefined` when absent (a written `null` reads `null`).
   * A value written under an older version is `migrate`d (in memory only); one written under
   * a newer version throws {@link StateVersionError}; with `validate`, an invalid one throws
   * {@link StateValidationError}.
   */
  read(ctx: PiContext): T | undefined;
  /** The value as if Pi's leaf were `entryId`. */
  readAt(ctx: PiContext, entryId: string): T | undefined;
  /**
   * Sets the value; returns the new entry's id, or `undefined` when the value was already
   * equal (nothing appended). On a value written under an older version, the event is a
   * whole `set` at this version; on a newer one, {@link StateVersionError} and nothing
   * appended (so for `patch` and `drop`); with `validate`, a value the write would leave
   * invalid throws {@link StateValidationError} and nothing is appended.
   */
  write(ctx: PiContext, value: T): string | undefined;
  /** Applies an RFC 7396 JSON Merge Patch (an absent value patches `{}`). */
  patch(ctx: PiContext, patch: unknown): string | undefined;
  /** Makes the value absent; `undefined` when it already was. */
  drop(ctx: PiContext): string | undefined;
  /** The events that made the value at Pi's leaf, oldest first, as stored (not migrated), each with its state version. */
  history(ctx: PiContext): HistoryEntry<T>[];
}

// ---------------------------------------------------------------------------------------
// The addon
// ---------------------------------------------------------------------------------------

/** A value stored under another version than the state's (the addon's `StoredState`). */
interface NativeStored {
  /** The value as stored (JSON text); missing when absent, and for a newer version (not read). */
  value?: string | null;
  stateVersion: number;
  entry?: string | null;
  /** The core's refusal, for a version newer than the state's. */
  refusal?: string | null;
}

interface NativeStoreHandle {
  readonly databasePath: string;
  diagnostics(): string[];
  /** Closes the database and every file the handle holds; later calls throw. */
  close(): void;
  loadPending(bytes: Buffer): void;
  /** Any plugin's value as stored, whatever its version. */
  read(file: string | null, plugin: string, scope: string, at: string | null): string | null;
  /** A state's value: JSON text or `null` at the state's version, else what is stored. */
  readState(state: NativeStateHandle, file: string | null, at: string | null): string | null | NativeStored;
  /** JSON text `{value?, stateVersion, entry}`: the value as stored, its version and the entry that set it. */
  readStored(file: string | null, plugin: string, scope: string, at: string | null): string;
  prepare(
    state: NativeStateHandle,
    file: string | null,
    at: string | null,
    op: string,
    argument: string | null,
    migrated: string | null,
  ): string | null | NativeStored;
  history(file: string | null, plugin: string, scope: string, at: string | null): string;
  historyReport(file: string | null, plugin: string, scope: string, at: string | null): string;
  eventCounts(file: string | null): string;
  branchKey(file: string | null, at: string | null): string | null;
  status(sessionId: string): string;
  forceRefresh(sessionId: string, file: string | null): boolean;
  enterPresence(sessionId: string, file: string | null): void;
  leavePresence(sessionId: string): boolean;
  catchUp(file: string): void;
}

/** One state (plugin id, scope and version, checked by the core) and the core's memo of its last decided event. */
interface NativeStateHandle {
  readonly customType: string;
  readonly version: number;
  /**
   * `prepare` on top of the state's last event, when the core finds Pi's leaf standing on
   * it. `since`: Pi's entries from the leaf up, newest first, as many as Pi appended after
   * it, two values each: its `parentId` and its `customType` (`undefined` when absent; the
   * first pair is the leaf's, each next one its parent's). `appended`: the entry Pi
   * appended for the last decided event, under `appendedParent`, told once (`null` when
   * told already); the memo keeps the event only when that is where it was decided. The
   * data, `true` when it is the envelope of `argument` itself (its value printed as
   * `argument`), `null` (unchanged) or `false` (cannot answer so).
   */
  prepareOnLast(
    file: string,
    leaf: string | null,
    since: (string | undefined)[],
    op: string,
    argument: string | null,
    appended: string | null,
    appendedParent: string | null,
  ): string | boolean | null;
  /** Forgets the last event. */
  forget(): void;
  /** The value the last decided patch leaves (JSON text), kept when the state was made with `keepAfter`. */
  takeAfter(): string | null;
}

interface NativeModule {
  NativeStore: new (databasePath: string | null, cwd: string, trust: "trusted" | "untrusted" | "pi") => NativeStoreHandle;
  NativeState: new (plugin: string, scope: string, version: number, keepAfter: boolean) => NativeStateHandle;
  /** The customType prefix of state events. */
  statePrefix(): string;
  /** Checks a plugin id and a scope name; returns the state's customType. */
  stateKey(plugin: string, scope: string): string;
  /** The core's refusal of a value JavaScript found unwritable: `kind` `not-json`, `non-finite` or `too-deep`. */
  valueError(plugin: string, kind: "not-json" | "non-finite" | "too-deep", detail: string): string;
}

/** @internal The addon (`addon.ts` finds it: `SESSION_STATE_PI_ADDON`, `native/`, the platform package). */
export const native: NativeModule = loadAddon<NativeModule>();

/** Calls the addon; its errors already carry the core's message. */
function call<R>(f: () => R): R {
  try {
    return f();
  } catch (e) {
    rethrow(e);
  }
}

/** An addon's error as a plain `Error` with its message (the core's). */
function rethrow(e: unknown): never {
  if (e instanceof Error) throw new Error(e.message);
  throw e;
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
  /** Bumped by force-refresh: a last read remembered before it is stale. */
  generation: number;
  /** Files whose directory was synced once, after Pi created them. */
  dirSynced: Set<string>;
  /** Files known to exist (they never go away under a running Pi). */
  existing: Set<string>;
  /** Files seen missing: Pi created them in this process, after entries waited in memory. */
  missing: Set<string>;
  /** An open descriptor per session file, for `fdatasync`. */
  syncFds: Map<string, number>;
  /** The context of the latest call or event: what the transcript renderers read with. */
  lastCtx?: PiContext;
  /** Where commands' print-mode output goes instead of fd 1 / fd 2 (the testing kit's capture). */
  printSink?: (stream: "stdout" | "stderr", text: string) => void;
  /** The states opened by the extensions running in this process, until their `session_shutdown` (`/state:status`). */
  opened: Set<OpenedState>;
}

/** A state an extension opened: what `/state:status` compares the stored version with. */
export interface OpenedState {
  pluginId: string;
  scope: Scope;
  version: number;
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
    opened: new Set(),
  } satisfies Shared) as Shared;
// A copy of this module from before `opened` shares the object.
shared.opened ??= new Set();
/** @internal */
export { shared };
const { stores, dirSynced, existing, missing, syncFds } = shared;

/** @internal */
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
  // The descriptors kept for `fdatasync` are opened again at the next sync, on the file
  // then at the path (which may be another one now).
  for (const fd of syncFds.values()) {
    try {
      fs.closeSync(fd);
    } catch {
      /* already closed */
    }
  }
  syncFds.clear();
}

function entryCount(sm: PiContext["sessionManager"]): number {
  return typeof sm.getEntryCount === "function" ? sm.getEntryCount() : sm.getEntries().length;
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
}

/** Where a read stands: the file (or the pending entries handed over) and Pi's leaf. */
function view(entry: StoreEntry, ctx: PiContext): View {
  shared.lastCtx = ctx;
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
  return { file, leaf };
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
function syncIfNew(file: string): boolean {
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
function syncAppended(file: string): void {
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

// ---------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------

const NON_FINITE = Symbol("non-finite");

/**
 * The JSON text Pi's `JSON.stringify` would write for `value`, or the core's refusal of
 * what only JavaScript can hold (the core checks the text itself when it decides the event).
 */
function encode(plugin: string, value: unknown): string {
  const refuse = (kind: "not-json" | "non-finite" | "too-deep", detail: string) =>
    new Error(call(() => native.valueError(plugin, kind, detail)));
  if (value === undefined) {
    throw refuse("not-json", "undefined is not a JSON value: write null, or drop() to make the value absent");
  }
  let bad = 0;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
    // JSON.stringify prints a non-finite number as `null`: a text without `null` held
    // none, and only one with it is walked again to find one (a replacer called for every
    // member costs more than the printing).
    if (text?.includes("null")) {
      JSON.stringify(value, (_k, v) => {
        if (typeof v === "number" && !Number.isFinite(v)) {
          bad = v;
          throw NON_FINITE;
        }
        return v;
      });
    }
  } catch (e) {
    if (e === NON_FINITE) throw refuse("non-finite", String(bad));
    // Deeper than JavaScript's own stack.
    if (e instanceof RangeError) throw refuse("too-deep", "");
    const why = e instanceof TypeError && /circular/i.test(e.message) ? "the value refers to itself (a cycle)" : String((e as Error)?.message ?? e);
    throw refuse("not-json", `${why}; JSON cannot carry it`);
  }
  if (text === undefined) throw refuse("not-json", `a ${typeof value} is not a JSON value`);
  return text;
}

/**
 * @internal The event object Pi appends, for `data`, the core's JSON text of it. When that text is
 * exactly the envelope of the caller's own text (`argument`, what `encode` printed: the
 * usual case), the object is built around `argument` alone ([`envelopeOf`]), which spares
 * parsing the envelope; otherwise `data` is parsed whole. A fresh object either way: Pi
 * keeps it, and the caller may change its value afterwards. `version`: the state's
 * (an event of version N > 1 is `{"v":2,"stateVersion":N,…}`). `original`: the value (or
 * patch) `argument` was printed from, copied rather than parsed when it can be.
 */
export function eventOf(
  data: string,
  scope: Scope,
  op: "set" | "patch" | "drop",
  argument: string | null,
  version = 1,
  original?: unknown,
): unknown {
  const head = version > 1 ? `{"v":2,"stateVersion":${version},"scope":"${scope}","op":"` : `{"v":1,"scope":"${scope}","op":"`;
  if (op === "drop") {
    if (data === `${head}drop"}`) return envelopeOf(scope, op, null, version);
  } else if (argument !== null && data === `${head}${op}","${op === "set" ? "value" : "patch"}":${argument}}`) {
    return envelopeOf(scope, op, argument, version, original);
  }
  return JSON.parse(data);
}

/**
 * The event object of `op` with the caller's text `argument` (`null` for a drop): the
 * envelope the core prints for it, as an object whose value is a fresh copy of `original`
 * when that prints as `argument` ([`copyPrinting`]), else a parse of `argument`.
 */
function envelopeOf(scope: Scope, op: "set" | "patch" | "drop", argument: string | null, version: number, original?: unknown): unknown {
  const of = (text: string) => copyPrinting(original, text) ?? JSON.parse(text);
  if (version > 1) {
    if (op === "drop" || argument === null) return { v: 2, stateVersion: version, scope, op };
    return op === "set" ? { v: 2, stateVersion: version, scope, op, value: of(argument) } : { v: 2, stateVersion: version, scope, op, patch: of(argument) };
  }
  if (op === "drop" || argument === null) return { v: 1, scope, op };
  return op === "set" ? { v: 1, scope, op, value: of(argument) } : { v: 1, scope, op, patch: of(argument) };
}

const NOT_PLAIN = Symbol("not plain");

/**
 * A fresh copy of `value` made of plain objects, arrays and JSON's primitives, when it is
 * such a value itself and the copy prints as `text` (what `JSON.stringify(value)` printed);
 * else `undefined`, and the caller parses `text`. It spares that parse, which costs more
 * than the copy when the caches are cold, as they are after Pi's `fdatasync`. Anything
 * `JSON.stringify` would print otherwise than it is (a `toJSON`, an instance of a class,
 * an `undefined` or a function in an array) is not copied; the check against `text`
 * catches the rest (a getter that answers differently, a proxy).
 */
function copyPrinting(value: unknown, text: string): unknown {
  if (value === undefined) return undefined;
  const copy = plainCopy(value, 0);
  if (copy === NOT_PLAIN || JSON.stringify(copy) !== text) return undefined;
  return copy;
}

function plainCopy(v: unknown, depth: number): unknown {
  switch (typeof v) {
    case "string":
    case "boolean":
      return v;
    case "number":
      // -0 prints as 0.
      return Number.isFinite(v) ? (v === 0 ? 0 : v) : NOT_PLAIN;
    case "object": {
      if (v === null) return null;
      if (depth > 64 || typeof (v as { toJSON?: unknown }).toJSON === "function") return NOT_PLAIN;
      if (Array.isArray(v)) {
        if (Object.getPrototypeOf(v) !== Array.prototype) return NOT_PLAIN;
        const out: unknown[] = new Array(v.length);
        for (let i = 0; i < v.length; i++) {
          const m = v[i];
          if (m === undefined || typeof m === "function" || typeof m === "symbol") return NOT_PLAIN;
          const c = plainCopy(m, depth + 1);
          if (c === NOT_PLAIN) return NOT_PLAIN;
          out[i] = c;
        }
        return out;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) return NOT_PLAIN;
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(v)) {
        const m = (v as Record<string, unknown>)[k];
        // JSON.stringify leaves these members out.
        if (m === undefined || typeof m === "function" || typeof m === "symbol") continue;
        const c = plainCopy(m, depth + 1);
        if (c === NOT_PLAIN) return NOT_PLAIN;
        out[k] = c;
      }
      return out;
    }
    default:
      return NOT_PLAIN;
  }
}

function parse<T>(text: string | null): T | undefined {
  return text === null ? undefined : (JSON.parse(text) as T);
}

/** The deepest nesting a value may have: arrays and objects, as the core counts them. */
const MAX_DEPTH = 100;

/** Whether `v` is a Promise or another thenable (what an async function returns). */
function isThenable(v: unknown): boolean {
  return (typeof v === "object" || typeof v === "function") && v !== null && typeof (v as { then?: unknown }).then === "function";
}

/** The nesting depth of arrays and objects in a JSON text (0 for a scalar). */
function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) max = Math.max(max, ++depth);
    else if (c === 0x5d || c === 0x7d) depth--;
  }
  return max;
}

/** What `validate` found first: where (a JSON Pointer, `""` for the value itself) and what. */
interface Failure {
  path: string;
  detail: string;
}

/** A JSON Pointer reference token (RFC 6901). */
function pointerToken(name: string): string {
  return name.replace(/~/g, "~0").replace(/\//g, "~1");
}

/**
 * The check `validate` asks for: a TypeBox schema compiled once (TypeBox's compiled
 * checker, `Compile`), or a function. Returns the first failure, or `undefined` for a
 * valid value.
 */
function checkerOf(validate: unknown): ((value: unknown) => Failure | undefined) | undefined {
  if (validate === undefined) return undefined;
  if (typeof validate === "function") {
    const guard = validate as (value: unknown) => unknown;
    return (value) => {
      let ok: unknown;
      try {
        ok = guard(value);
      } catch (e) {
        return { path: "", detail: `the validate function threw: ${(e as Error)?.message ?? String(e)}` };
      }
      // An async validate returns a Promise, which is truthy: it would pass every value.
      if (isThenable(ok)) {
        return { path: "", detail: "the validate function returned a Promise; it must answer true or false itself (an async function returns a Promise)" };
      }
      return ok ? undefined : { path: "", detail: "the validate function returned false" };
    };
  }
  if (validate === null || typeof validate !== "object") {
    throw new Error("openSessionState: validate must be a TypeBox schema or a function (value: unknown) => boolean");
  }
  let compiled: ReturnType<typeof Compile>;
  try {
    compiled = Compile(validate as TSchema);
  } catch (e) {
    throw new Error(`openSessionState: validate is not a schema TypeBox can compile: ${(e as Error)?.message ?? String(e)}`);
  }
  return (value) => {
    if (compiled.Check(value)) return undefined;
    const first = compiled.Errors(value)[0];
    if (!first) return { path: "", detail: "the value does not match the schema" };
    let at = first.instancePath;
    // A missing property is reported on its object: name the property itself.
    const missing = (first.params as { requiredProperties?: unknown }).requiredProperties;
    if (first.keyword === "required" && Array.isArray(missing) && typeof missing[0] === "string") {
      at += `/${pointerToken(missing[0])}`;
    }
    return { path: at, detail: first.message };
  };
}

/** A JSON Pointer as messages show it. */
function where(path: string): string {
  return path === "" ? "the root (the value itself)" : path;
}

// ---------------------------------------------------------------------------------------
// The API
// ---------------------------------------------------------------------------------------

/**
 * Opens the state of `pluginId`. Options are validated here (the core's messages):
 * `pluginId` of lowercase letters, digits, `-` and `.`; `scope` `"session"` (default) or
 * `"branch"`; `databasePath` absolute; `version` a whole number ≥ 1, with `migrate` when
 * above 1; `validate` a TypeBox schema or a function.
 */
export function openSessionState<T>(pi: PiHandle, options: SessionStateOptions<T>): SessionState<T> {
  if (!pi || typeof pi.appendEntry !== "function") {
    throw new Error("openSessionState: the first argument must be Pi's extension handle (pi), whose appendEntry writes the events");
  }
  if (!options || typeof options !== "object") {
    throw new Error("openSessionState: options { pluginId, scope?, databasePath?, version?, migrate?, validate? } are required");
  }
  const pluginId = options.pluginId;
  const scope: Scope = options.scope ?? "session";
  const version = options.version ?? 1;
  if (typeof version !== "number" || !Number.isInteger(version) || version < 1 || version > 0xffff_ffff) {
    throw new Error(`openSessionState: version must be a whole number ≥ 1 (the version of the value's shape), not ${String(version)}`);
  }
  const migrate = options.migrate;
  if (migrate !== undefined && typeof migrate !== "function") {
    throw new Error("openSessionState: migrate must be a function (value, fromVersion) => the value in this version's shape");
  }
  if (version > 1 && migrate === undefined) {
    throw new Error(
      `openSessionState: plugin '${String(pluginId)}' is at version ${version}, which needs migrate(value, fromVersion): the function that turns a value written under an older version into version ${version}'s shape`,
    );
  }
  const check = checkerOf(options.validate);
  // The core checks the plugin id, the scope and the version, and names the events' customType.
  const nstate = call(() => new native.NativeState(String(pluginId ?? ""), String(scope), version, check !== undefined));
  const customType = nstate.customType;
  const databasePath = options.databasePath;
  if (databasePath !== undefined) {
    // Checked now: the core's rule for an explicit path (non-empty, absolute).
    call(() => new native.NativeStore(String(databasePath), process.cwd(), "untrusted"));
  }
  registerRenderer(pi, customType);
  // `/state:status` lists the states stored under a newer version than this one knows:
  // this one, until its `session_shutdown` (a handle without `on` never says when).
  const opened: OpenedState = { pluginId, scope, version };
  if (typeof pi.on === "function") shared.opened.add(opened);
  /**
   * The last read's answer, which stands while Pi's session is unchanged (the same
   * session manager, leaf and entry count, no force-refresh since). Not a fold memo (the
   * core memoizes every fold, at any leaf): it spares the call into the addon and the
   * addon's look at the file, which a read at an unchanged leaf would otherwise pay
   * (0.3–0.7 µs against 4–8 µs, measured). The text is the value as returned: migrated
   * and validated.
   */
  let hot: { sm: unknown; leaf: string | null; count: number; gen: number; text: string | null } | undefined;
  /**
   * Pi's side of the core's memo of this state's last event (`nstate`): the session
   * manager and the generation it was appended under (a different one, or a force-refresh
   * since, makes the core forget it) and Pi's entry count after it, which bounds the
   * entries handed to the core (`appendedSince`), and the entry Pi appended for it with its
   * parent until the core is told (with the next `prepareOnLast`: one call into the addon
   * per write, not two). When the core finds Pi's leaf standing on
   * that event, the next write starts from the value after it (`prepareOnLast`) and does
   * not read what Pi appended since (a 6.6 KB message costs 15–25 µs to read); the next
   * read does.
   */
  let last: { sm: unknown; gen: number; count: number; told: boolean; id: string; parent: string | null } | undefined;

  // Pi creates the file at the first user or assistant message: entries that waited in
  // memory are synced then (and its directory, once).
  for (const ev of ["message_end", "turn_end", "agent_end"]) pi.on?.(ev, (_e, ctx) => syncSession(ctx, true));
  pi.on?.("session_shutdown", (_e, ctx) => {
    syncSession(ctx, true);
    hot = undefined;
    last = undefined;
    nstate.forget();
    shared.opened.delete(opened);
  });

  /** The refusal of a value stored under a newer version. */
  const newer = (s: NativeStored): StateVersionError =>
    new StateVersionError(pluginId, s.stateVersion, version, s.entry ?? undefined, s.refusal ?? undefined);

  /** `migrate` on a value stored under an older version: its result as JSON text. */
  const migrated = (s: NativeStored): string => {
    const entryId = s.entry ?? undefined;
    let out: unknown;
    const failed = (detail: string, cause?: unknown) =>
      new StateMigrationError(pluginId, s.stateVersion, version, entryId, detail, cause === undefined ? undefined : { cause });
    try {
      out = migrate!(JSON.parse(s.value!), s.stateVersion);
    } catch (e) {
      throw failed((e as Error)?.message ?? String(e), e);
    }
    // An async migrate returns a Promise, which JSON would print as `{}`: the stored value
    // would read as `{}` and the next write would put `{}` over it for every later reader.
    if (isThenable(out)) {
      throw failed("migrate returned a Promise; it must return the value itself (an async function returns a Promise)");
    }
    let text: string;
    try {
      text = encode(pluginId, out);
    } catch (e) {
      throw failed(`migrate returned a value that cannot be written: ${(e as Error).message}`, e);
    }
    // The value rules every write keeps (the core refuses the same value at the write):
    // refused here, on the read, naming the entry, not later as a write's plain error.
    const depth = jsonDepth(text);
    if (depth > MAX_DEPTH) {
      throw failed(`migrate returned a value that cannot be written: it is nested ${depth} levels deep, deeper than ${MAX_DEPTH} levels of arrays and objects`);
    }
    return text;
  };

  /**
   * What a read at `at` returns, as JSON text (`null`: absent): the value at this state's
   * version, or an older one migrated; validated. Throws for a newer one.
   */
  const answer = (entry: StoreEntry, v: View, at: string | null): string | null => {
    const r = call(() => entry.store.readState(nstate, v.file, at));
    if (r === null || r === undefined) return null;
    if (typeof r === "string") {
      if (check !== undefined) {
        const failed = check(JSON.parse(r));
        if (failed !== undefined) {
          // Which event set it: asked only now, for the message.
          const stored = JSON.parse(call(() => entry.store.readStored(v.file, pluginId, scope, at))) as { entry: string | null };
          throw invalidStored(failed, stored.entry ?? undefined);
        }
      }
      return r;
    }
    if (r.refusal != null) throw newer(r);
    if (r.value == null) return null;
    const text = migrated(r);
    if (check !== undefined) {
      const failed = check(JSON.parse(text));
      if (failed !== undefined) throw invalidStored(failed, r.entry ?? undefined, r.stateVersion);
    }
    return text;
  };

  const invalidStored = (f: Failure, entryId: string | undefined, from?: number): StateValidationError =>
    new StateValidationError(
      pluginId,
      entryId,
      f.path,
      f.detail,
      `plugin '${pluginId}': the stored value${entryId === undefined ? "" : ` (entry '${entryId}')`}${from === undefined ? "" : `, migrated from version ${from} to ${version},`} does not pass validate at ${where(f.path)}: ${f.detail}`,
    );

  const invalidWrite = (f: Failure): StateValidationError =>
    new StateValidationError(
      pluginId,
      undefined,
      f.path,
      f.detail,
      `plugin '${pluginId}': the value the write would leave does not pass validate at ${where(f.path)}: ${f.detail}; nothing was written`,
    );

  const read = (ctx: PiContext): T | undefined => {
    const sm = ctx.sessionManager;
    const leaf = sm.getLeafId();
    const count = entryCount(sm);
    if (hot && hot.sm === sm && hot.leaf === leaf && hot.count === count && hot.gen === shared.generation) {
      return parse<T>(hot.text);
    }
    const entry = storeFor(ctx, databasePath);
    const v = view(entry, ctx);
    const text = answer(entry, v, v.leaf);
    hot = { sm, leaf, count, gen: shared.generation, text };
    return parse<T>(text);
  };

  /**
   * Pi's entries from `leaf` up, newest first, as many as Pi appended after the last event
   * (fewer at the root or an entry Pi does not hold), for the core to judge; `undefined`
   * when the last event was appended in another session manager or before a
   * force-refresh (the core then forgets it), or when Pi cannot be asked.
   */
  const appendedSince = (sm: PiContext["sessionManager"], leaf: string | null): (string | undefined)[] | undefined => {
    if (!last) return undefined;
    if (last.sm !== sm || last.gen !== shared.generation) {
      last = undefined;
      nstate.forget();
      return undefined;
    }
    if (typeof sm.getEntry !== "function") return undefined;
    // Each entry's parent and customType (the ids follow from the leaf): an array of
    // strings crosses into the addon faster than objects.
    const since: (string | undefined)[] = [];
    let id = leaf;
    for (let k = entryCount(sm) - last.count; k > 0 && id !== null; k--) {
      const e = sm.getEntry(id) as { parentId?: string | null; customType?: unknown } | undefined;
      if (!e) break;
      since.push(e.parentId ?? undefined, typeof e.customType === "string" ? e.customType : undefined);
      id = e.parentId ?? null;
    }
    return since;
  };

  const commit = (ctx: PiContext, op: "set" | "patch" | "drop", argument: string | null, original?: unknown): string | undefined => {
    const sm = ctx.sessionManager;
    let file = sessionFile(sm);
    let leaf = sm.getLeafId();
    let data: string | boolean | null | NativeStored = false;
    const since = file !== null ? appendedSince(sm, leaf) : undefined;
    if (file !== null && since !== undefined) {
      // The file exists and was synced when the last event was written.
      shared.lastCtx = ctx;
      syncIfNew(file);
      try {
        // `since` is defined, so `last` is: the entry Pi appended for it is told once.
        const tell = last!.told ? undefined : last!;
        last!.told = true;
        data = nstate.prepareOnLast(file, leaf, since, op, argument, tell?.id ?? null, tell?.parent ?? null);
      } catch (e) {
        rethrow(e);
      }
    }
    if (data === false) {
      const entry = storeFor(ctx, databasePath);
      const v = view(entry, ctx);
      ({ file, leaf } = v);
      data = call(() => entry.store.prepare(nstate, v.file, v.leaf, op, argument, null));
      if (data !== null && data !== undefined && typeof data === "object") {
        // Stored under another version: refused when newer; an older value is migrated
        // here and the core decides on the result (a whole `set` at this version).
        const stored: NativeStored = data;
        if (stored.refusal != null) throw newer(stored);
        const text = migrated(stored);
        data = call(() => entry.store.prepare(nstate, v.file, v.leaf, op, argument, text));
        if (data !== null && data !== undefined && typeof data === "object") {
          throw new Error(`plugin '${pluginId}': the state changed version while a write was decided; nothing was written`);
        }
      }
    }
    if (data === undefined) data = null;
    // Until this event is known to be in Pi's session (`appended`, told with the next
    // `prepareOnLast`), the core's value after it is not the value at any entry.
    if (data !== null) last = undefined;
    if (check !== undefined) {
      // The value the write leaves: a set's own, a patch's from the core's merge (the
      // addon kept it); a drop leaves none, and a patch that changes nothing writes nothing.
      const after = op === "set" ? argument : op === "patch" && data !== null ? nstate.takeAfter() : null;
      if (after !== null) {
        const failed = check(JSON.parse(after));
        if (failed !== undefined) throw invalidWrite(failed);
      }
    }
    if (data === null) return undefined; // nothing appended: the last event stands
    // The core confirmed that its data is the envelope of `argument`, or eventOf compares.
    const event =
      data === true && argument !== null
        ? envelopeOf(scope, op, argument, version, original)
        : eventOf(String(data), scope, op, argument, version, original);
    pi.appendEntry(customType, event);
    const id = sm.getLeafId() ?? undefined;
    // Pi appended this very event at its leaf; the core keeps it when that is a child of
    // where it was decided. Looked at before the sync, while it is at hand; kept once the
    // event is on disk.
    let appended: typeof last;
    if (file !== null && id !== undefined && scope === "branch" && typeof sm.getEntry === "function") {
      const e = sm.getEntry(id) as { parentId?: string | null; data?: unknown } | undefined;
      if (e !== undefined && e.data === event) {
        appended = { sm, gen: shared.generation, count: entryCount(sm), told: false, id, parent: e.parentId ?? null };
      }
    }
    if (file !== null) syncAppended(file);
    else syncSession(ctx);
    last = appended;
    return id;
  };

  return {
    pluginId,
    scope,
    version,
    read,
    readAt(ctx, entryId) {
      const entry = storeFor(ctx, databasePath);
      const v = view(entry, ctx);
      return parse<T>(answer(entry, v, String(entryId)));
    },
    write(ctx, value) {
      return commit(ctx, "set", encode(pluginId, value), value);
    },
    patch(ctx, patch) {
      return commit(ctx, "patch", encode(pluginId, patch), patch);
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

/** docs/spec.md §3's branch key at Pi's leaf: from the leaf, climb while the parent has exactly one child. */
export function branchKey(ctx: PiContext): string | undefined {
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  return call(() => entry.store.branchKey(v.file, v.leaf)) ?? undefined;
}

// ---------------------------------------------------------------------------------------
// For the package's extension, the transcript and the testing kit
// ---------------------------------------------------------------------------------------

/** The customType prefix of state events (`session-state/`), from the core. */
export const STATE_PREFIX: string = native.statePrefix();

/**
 * @internal The value of any plugin as if Pi's leaf were `entryId` (`undefined` when
 * absent), as stored, whatever the state version it was written under. Throws the core's
 * message for an invalid plugin id, scope or entry.
 */
export function valueAt(ctx: PiContext, pluginId: string, scope: Scope, entryId: string): unknown {
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  return parse(call(() => entry.store.read(v.file, pluginId, scope, entryId)));
}

/** A plugin's value as stored, with the state version it was written under and the event that set it. */
export interface StoredValue<T = unknown> {
  /** The value as stored (not migrated); missing when absent. */
  value?: T;
  /** The state version of the event that set it (1 for an event without one, and when there is none). */
  stateVersion: number;
  /** The entry of that event; `null` when no event set it. */
  entry: string | null;
}

/**
 * @internal Any plugin's value at Pi's leaf (or as if it were `at`) as stored, with its
 * state version and entry (the testing kit's `stored`, `/state:status`).
 */
export function storedAt(ctx: PiContext, pluginId: string, scope: Scope, at?: string): StoredValue {
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  return JSON.parse(call(() => entry.store.readStored(v.file, pluginId, scope, at ?? v.leaf))) as StoredValue;
}

/** A state opened in this process whose value at Pi's leaf was written under a newer version than it knows. */
export interface NewerState {
  pluginId: string;
  scope: Scope;
  storedVersion: number;
  knownVersion: number;
  entryId: string | null;
}

/**
 * @internal The states the running extensions opened (until their `session_shutdown`)
 * whose value at Pi's leaf was written under a newer version than they know: what every
 * call of theirs refuses (`/state:status`). Plugins in name order, then scopes; one row
 * per known version.
 */
export function newerStatesOf(ctx: PiContext): NewerState[] {
  const seen = new Map<string, NewerState>();
  for (const o of shared.opened) {
    const k = `${o.pluginId}\0${o.scope}\0${o.version}`;
    if (seen.has(k)) continue;
    const s = storedAt(ctx, o.pluginId, o.scope);
    if (s.stateVersion > o.version) {
      seen.set(k, { pluginId: o.pluginId, scope: o.scope, storedVersion: s.stateVersion, knownVersion: o.version, entryId: s.entry });
    }
  }
  return [...seen.values()].sort((a, b) =>
    a.pluginId < b.pluginId ? -1 : a.pluginId > b.pluginId ? 1 : a.scope < b.scope ? -1 : a.scope > b.scope ? 1 : a.knownVersion - b.knownVersion,
  );
}

/** @internal The events that made any plugin's value at Pi's leaf, oldest first (`/state:history`). */
export function historyOf(ctx: PiContext, pluginId: string, scope: Scope): HistoryEntry<unknown>[] {
  call(() => native.stateKey(pluginId, scope));
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  if (v.leaf === null) return [];
  return JSON.parse(call(() => entry.store.history(v.file, pluginId, scope, v.leaf))) as HistoryEntry<unknown>[];
}

/**
 * @internal {@link historyOf} for `/state:history`: when the strict reader refuses the
 * session file, the events come from a salvage read (what Pi reads; `session-state status`
 * counts events so too) and `refused` is the strict reader's message, else `null`.
 */
export function historyReportOf(
  ctx: PiContext,
  pluginId: string,
  scope: Scope,
): { events: HistoryEntry<unknown>[]; refused: string | null } {
  call(() => native.stateKey(pluginId, scope));
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  if (v.leaf === null) return { events: [], refused: null };
  return JSON.parse(call(() => entry.store.historyReport(v.file, pluginId, scope, v.leaf))) as {
    events: HistoryEntry<unknown>[];
    refused: string | null;
  };
}

/** One row of the core's count of state events (what `session-state status --json` lists as `events`). */
export interface EventCount {
  plugin: string;
  /** `"invalid"`: an envelope the core cannot decode (unknown `v`, op or scope). */
  scope: "branch" | "invalid" | "session";
  events: number;
}

/**
 * @internal The state events of this session (every entry Pi holds, all branches) per
 * plugin and scope, as the core counts them: plugins in name order, then scopes. When
 * the strict reader refuses the session file, the rows come from a salvage read (as
 * `session-state status` counts them) and `refused` is the strict reader's message.
 */
export function eventCountReport(ctx: PiContext): { rows: EventCount[]; refused: string | null } {
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  return JSON.parse(call(() => entry.store.eventCounts(v.file))) as { rows: EventCount[]; refused: string | null };
}

/** @internal {@link eventCountReport}'s rows. */
export function eventCountsOf(ctx: PiContext): EventCount[] {
  return eventCountReport(ctx).rows;
}

/** Whether state events are drawn in the transcript: the `sessionState.transcript` setting (default `true`). */
export function transcriptEnabled(pi: PiHandle): boolean {
  try {
    const s = pi.getSettings?.() as { sessionState?: { transcript?: unknown } } | undefined;
    return s?.sessionState?.transcript !== false;
  } catch {
    return true;
  }
}

/** The value after a state event, from the latest context that holds the entry. */
function valueAfter(entry: CustomEntryLike): { value: unknown } | undefined {
  const ctx = shared.lastCtx;
  const scope = (entry.data as { scope?: unknown } | undefined)?.scope;
  if (!ctx || (scope !== "branch" && scope !== "session")) return undefined;
  try {
    const sm = ctx.sessionManager;
    if (typeof sm.getEntry === "function" && !sm.getEntry(entry.id)) return undefined;
    return { value: valueAt(ctx, entry.customType.slice(STATE_PREFIX.length), scope, entry.id) };
  } catch {
    // A stale context (the session was replaced) or an event the core refuses: the
    // expanded view shows the patch alone.
    return undefined;
  }
}

/**
 * @internal Registers the transcript renderer of state events of `customType` on `pi`
 * (when Pi has `registerEntryRenderer`): `openSessionState` for its own state, the
 * package's extension for every state event already in a session it opens.
 */
export function registerRenderer(pi: PiHandle, customType: string): void {
  if (typeof pi.registerEntryRenderer !== "function") return;
  pi.registerEntryRenderer(customType, stateEntryRenderer({ prefix: STATE_PREFIX, enabled: () => transcriptEnabled(pi), valueAfter }));
}

/**
 * @internal Writes a command's answer where print and JSON modes show it: `fd` 1 or 2
 * directly (Pi redirects `process.stdout` to stderr in those modes), or the testing kit's
 * capture.
 */
export function writeOut(stream: "stdout" | "stderr", text: string): void {
  const line = text.endsWith("\n") ? text : `${text}\n`;
  if (shared.printSink) return shared.printSink(stream, line);
  const buf = Buffer.from(line);
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(stream === "stdout" ? 1 : 2, buf, off);
    } catch (e) {
      // A non-blocking pipe that is full: wait for the reader.
      if ((e as NodeJS.ErrnoException).code !== "EAGAIN") throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
    }
  }
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
  try {
    if (shared.lastCtx?.cwd?.startsWith(prefix)) shared.lastCtx = undefined;
  } catch {
    shared.lastCtx = undefined; // a stale context (its session was replaced)
  }
}
