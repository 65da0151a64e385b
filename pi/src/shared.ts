/**
 * What every copy of this package's modules in one process shares, kept on `globalThis`:
 * the stores, the session files' sync bookkeeping, the force-refresh generation, the
 * latest context, the print-mode capture and the states the running extensions opened.
 */
import type { NativeStoreHandle } from "./native.ts";
import type { OpenedState, PiContext } from "./types.ts";

/** A store of the addon, shared by every state on it (one per databasePath option, cwd and trust). */
export interface StoreEntry {
  store: NativeStoreHandle;
  /** Whether the settings diagnostics were reported (once per store). */
  reported?: boolean;
  /** What the store's pending log holds: `${sessionId}\0${entryCount}`. */
  pendingKey?: string;
}

/**
 * Per-process state, on `globalThis`: Pi loads each extension with its own module
 * instance, and every copy of the package's modules must share it.
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
  /** The plugin whose `migrate` or `validate` is running (inside a call into the addon), else `undefined`. */
  inHook?: string;
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
// A copy of the package from before `opened` shares the object.
shared.opened ??= new Set();
/** @internal */
export { shared };
