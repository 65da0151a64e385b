/**
 * The addon as this package calls it: its classes and functions, loaded once
 * (`addon.ts` finds the file), and the one way its errors are rethrown.
 */
import { loadAddon } from "./addon.ts";
import { StateMigrationError, StateValidationError, StateVersionError } from "./errors.ts";
import type { Hooks } from "./values.ts";

export interface NativeStoreHandle {
  readonly databasePath: string;
  diagnostics(): string[];
  /** Closes the database and every file the handle holds; later calls throw. */
  close(): void;
  loadPending(bytes: Buffer): void;
  /** Any plugin's value as stored, whatever its version. */
  read(file: string | null, plugin: string, scope: string, at: string | null): string | null;
  /** A state's value as the core resolves it (version check, `migrate`, value rules, `validate`): JSON text, or `null` when absent. */
  readState(state: NativeStateHandle, file: string | null, at: string | null): string | null;
  /** JSON text of a `StoredValue` `{value?, stateVersion, entryId}`: the value as stored, its version and the entry that set it. */
  readStored(file: string | null, plugin: string, scope: string, at: string | null): string;
  /**
   * The one write decision, by the core: on top of the state's last event when the walk
   * ({@link walkField}) asks the memo and it finds Pi's leaf standing on it in `file`
   * (`null`: the last event's file), else as a read reads, in `file` (`null` with a `=`
   * walk: the entries handed over). `op`: {@link OP_CODE}. The data, `true` when it is the
   * envelope of `argument` itself (its value printed as `argument`), or `null` (unchanged).
   */
  decide(state: NativeStateHandle, file: string | null, walk: string, op: number, argument: string | null): string | true | null;
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
  /** How the last write was decided: on top of the last event (`memo`) or as a read reads (`store`). */
  readonly way: "memo" | "store" | null;
  /** Forgets the last event. */
  forget(): void;
}

interface NativeModule {
  NativeStore: new (databasePath: string | null, cwd: string, trust: "trusted" | "untrusted" | "pi") => NativeStoreHandle;
  NativeState: new (
    plugin: string,
    scope: string,
    version: number,
    migrate?: Hooks["migrate"],
    validate?: Hooks["validate"],
    schema?: boolean,
    print?: Hooks["print"] | null,
  ) => NativeStateHandle;
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
 * One field of the walk `decide` reads: fields are separated by NUL; an id is `-` (none)
 * or `+` and the id; an entry appended since is `c` (of the state's `customType`) or `o`,
 * then its parent's id. `undefined` for an id holding a NUL, which that walk cannot carry
 * (the write then hands the walk of the `=` form, {@link leafWalk}, and reads as a read reads).
 */
export function walkField(id: string | null | undefined): string | undefined {
  if (id === null || id === undefined) return "-";
  return id.includes("\0") ? undefined : `+${id}`;
}

/** The walk that does not ask the memo: `=` and Pi's leaf alone (the id may hold a NUL). */
export function leafWalk(leaf: string | null): string {
  return leaf === null ? "=-" : `=+${leaf}`;
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

/** The fields the addon gives a refusal of the core's that the package has a class for. */
interface Refusal {
  refusal?: "newer" | "migrate" | "invalid";
  pluginId: string;
  entryId?: string | null;
  storedVersion: number;
  knownVersion: number;
  fromVersion: number;
  toVersion: number;
  path: string;
  detail: string;
  cause?: unknown;
}

/**
 * An addon's error as the package throws it, the one place the core's refusals are mapped:
 * a newer version, a failed migration and a value `validate` refuses as their classes
 * (`errors.ts`), with the core's fields and message; anything else as a plain `Error`
 * with the core's message.
 */
export function rethrow(e: unknown): never {
  if (!(e instanceof Error)) throw e;
  const r = e as Error & Refusal;
  const entryId = r.entryId ?? undefined;
  switch (r.refusal) {
    case "newer":
      throw new StateVersionError(r.pluginId, r.storedVersion, r.knownVersion, entryId, r.message);
    case "migrate":
      throw new StateMigrationError(r.pluginId, r.fromVersion, r.toVersion, entryId, r.detail, "cause" in r ? { cause: r.cause } : undefined);
    case "invalid":
      throw new StateValidationError(r.pluginId, entryId, r.path, r.detail, r.message);
  }
  throw new Error(e.message);
}

/** The customType prefix of state events (`session-state/`), from the core. */
export const STATE_PREFIX: string = native.statePrefix();
