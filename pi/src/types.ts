/**
 * The package's types: the parts of Pi it uses, a state's options and handle, and the
 * records its reads return. `index.ts` exports the public ones, `internal.ts` the rest.
 */
import type { TSchema } from "typebox";

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

/**
 * One event of `history()`: the entry that holds it, its line in the session file, the
 * operation, the state version it was written under, what it wrote and the value after it
 * (as stored). The core's record, as `session-state history --json` prints its `events`.
 */
export interface HistoryEntry<T> {
  entryId: string;
  /** The entry's line in the session file (the header is line 1). */
  line: number;
  op: "set" | "patch" | "drop";
  /** The state version the event was written under (1: an event without one). */
  stateVersion: number;
  /** The value written (`set`) or the patch (`patch`); missing for a `drop`. */
  argument?: unknown;
  /** The value after the event; missing when absent (a written `null` is `null`). */
  value?: T;
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

/**
 * A plugin's value as stored, with the state version it was written under and the event
 * that set it. The core's record, as `session-state read --json` prints it.
 */
export interface StoredValue<T = unknown> {
  /** The value as stored (not migrated); missing when absent. */
  value?: T;
  /** The state version of the event that set it (1 for an event without one, and when there is none). */
  stateVersion: number;
  /** The entry of that event; `null` when no event set it. */
  entryId: string | null;
}

/** A state an extension opened: what `/state:status` compares the stored version with. */
export interface OpenedState {
  pluginId: string;
  scope: Scope;
  version: number;
}

/** A state opened in this process whose value at Pi's leaf was written under a newer version than it knows. */
export interface NewerState {
  pluginId: string;
  scope: Scope;
  storedVersion: number;
  knownVersion: number;
  entryId: string | null;
}

/** One row of the core's count of state events (what `session-state status --json` lists as `events`). */
export interface EventCount {
  plugin: string;
  /** `"invalid"`: an envelope the core cannot decode (unknown `v`, op or scope). */
  scope: "branch" | "invalid" | "session";
  events: number;
}

/**
 * The session's rows as the core reads and judges them (`store.status()`, `/state:status`):
 * the core's `inspect::StatusReport`, the members `database`, `lock` and `pi` of
 * `session-state status --json` (`pi` left out when no Pi holds the session).
 */
export interface StatusReport {
  database: { path: string; exists: boolean };
  lock: {
    holder: string;
    action: string | null;
    acquiredAtMs: number;
    ageMs: number;
    liveness: string;
    livenessReason: string;
    leaseExpired: boolean;
    /** Whether a writer in another process would be refused now. */
    blocksWriters: boolean;
    /** The core's answer: the holder is not known to be gone. */
    mayBeAlive: boolean;
  } | null;
  pi?: {
    holder: string;
    sinceMs: number;
    sessionFile: string | null;
    liveness: string;
    livenessReason: string;
    blocksWriters: boolean;
    thisProcess: boolean;
  };
}
