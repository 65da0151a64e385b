/**
 * The addon as this package calls it: its classes and functions, loaded once
 * (`addon.ts` finds the file), and the one way its errors are rethrown.
 */
import { loadAddon } from "./addon.ts";

/** A value stored under another version than the state's (the addon's `StoredState`). */
export interface NativeStored {
  /** The value as stored (JSON text); missing when absent, and for a newer version (not read). */
  value?: string | null;
  stateVersion: number;
  /** The entry of the event that set it. */
  entryId?: string | null;
  /** The core's refusal, for a version newer than the state's. */
  refusal?: string | null;
}

export interface NativeStoreHandle {
  readonly databasePath: string;
  diagnostics(): string[];
  /** Closes the database and every file the handle holds; later calls throw. */
  close(): void;
  loadPending(bytes: Buffer): void;
  /** Any plugin's value as stored, whatever its version. */
  read(file: string | null, plugin: string, scope: string, at: string | null): string | null;
  /** A state's value: JSON text or `null` at the state's version, else what is stored. */
  readState(state: NativeStateHandle, file: string | null, at: string | null): string | null | NativeStored;
  /** JSON text of a `StoredValue` `{value?, stateVersion, entryId}`: the value as stored, its version and the entry that set it. */
  readStored(file: string | null, plugin: string, scope: string, at: string | null): string;
  /** `op`: {@link OP_CODE}. */
  prepare(
    state: NativeStateHandle,
    file: string | null,
    at: string | null,
    op: number,
    argument: string | null,
    migrated: string | null,
  ): string | boolean | null | NativeStored;
  /** JSON text of an array of `HistoryEntry` `{entryId, line, op, stateVersion, argument?, value?}`. */
  history(file: string | null, plugin: string, scope: string, at: string | null): string;
  /** JSON text `{events, refused}`: `events` as `history` gives them. */
  historyReport(file: string | null, plugin: string, scope: string, at: string | null): string;
  /** JSON text `{rows, refused}`: `rows` an array of `EventCount`. */
  eventCounts(file: string | null): string;
  branchKey(file: string | null, at: string | null): string | null;
  /** JSON text of a `StatusReport`. */
  status(sessionId: string): string;
  forceRefresh(sessionId: string, file: string | null): boolean;
  enterPresence(sessionId: string, file: string | null): void;
  leavePresence(sessionId: string): boolean;
  catchUp(file: string): void;
}

/** One state (plugin id, scope and version, checked by the core) and the core's memo of its last decided event. */
export interface NativeStateHandle {
  readonly customType: string;
  readonly version: number;
  /**
   * `prepare` on top of the state's last event, when the core finds Pi's leaf standing on
   * it, in `file` (`null`: the file of the last decided event). `walk` ({@link walkField}):
   * the entry Pi appended for the last decided event and its parent (told once), Pi's
   * leaf, and Pi's entries from the leaf up, as many as Pi appended after the event. `op`:
   * {@link OP_CODE}. The data, `true` when it is the envelope of `argument` itself (its
   * value printed as `argument`), `null` (unchanged) or `false` (cannot answer so).
   */
  prepareOnLast(file: string | null, walk: string, op: number, argument: string | null): string | boolean | null;
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

/** The addon's code of each operation. */
export const OP_CODE = { set: 0, patch: 1, drop: 2 } as const;

/**
 * One field of the walk `prepareOnLast` reads: fields are separated by NUL; an id is `-`
 * (none) or `+` and the id; an entry appended since is `c` (of the state's `customType`)
 * or `o`, then its parent's id. `undefined` for an id holding a NUL, which the walk
 * cannot carry (the write then reads the file).
 */
export function walkField(id: string | null | undefined): string | undefined {
  if (id === null || id === undefined) return "-";
  return id.includes("\0") ? undefined : `+${id}`;
}

/** @internal The addon (`addon.ts` finds it: `SESSION_STATE_PI_ADDON`, `native/`, the platform package). */
export const native: NativeModule = loadAddon<NativeModule>();

/** Calls the addon; its errors already carry the core's message. */
export function call<R>(f: () => R): R {
  try {
    return f();
  } catch (e) {
    rethrow(e);
  }
}

/** An addon's error as a plain `Error` with its message (the core's). */
export function rethrow(e: unknown): never {
  if (e instanceof Error) throw new Error(e.message);
  throw e;
}

/** The customType prefix of state events (`session-state/`), from the core. */
export const STATE_PREFIX: string = native.statePrefix();
