/**
 * State events in Pi's TUI transcript: the renderer registered per customType (drawn by
 * `render.ts`), with the value after each event read at the latest context.
 */
import { STATE_PREFIX } from "./native.ts";
import { valueAt } from "./queries.ts";
import { stateEntryRenderer, type CustomEntryLike } from "./render.ts";
import { shared } from "./shared.ts";
import type { PiHandle } from "./types.ts";

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
