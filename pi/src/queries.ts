/**
 * What the package's extension (`/state:*`), the transcript and the testing kit read of
 * any plugin's state, as stored (not migrated, whatever its version), and of the session's
 * state events.
 */
import { call, native } from "./native.ts";
import { shared } from "./shared.ts";
import { storeFor, view } from "./stores.ts";
import type { EventCount, HistoryEntry, NewerState, PiContext, Scope, StoredValue } from "./types.ts";
import { parse } from "./values.ts";

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

/**
 * @internal Any plugin's value at Pi's leaf (or as if it were `at`) as stored, with its
 * state version and entry (the testing kit's `stored`, `/state:status`).
 */
export function storedAt(ctx: PiContext, pluginId: string, scope: Scope, at?: string): StoredValue {
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  return JSON.parse(call(() => entry.store.readStored(v.file, pluginId, scope, at ?? v.leaf))) as StoredValue;
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
      seen.set(k, { pluginId: o.pluginId, scope: o.scope, storedVersion: s.stateVersion, knownVersion: o.version, entryId: s.entryId });
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
