/**
 * A state's handle: `openSessionState` and its calls (read, write, patch, drop, history),
 * each a plain function over the opened state ({@link StateCore}), and `branchKey`. The
 * write (`commit`) runs as named steps: the core's one decision (on the state's last event
 * or as a read reads; `migrate` and `validate` run inside it), the append through Pi, the
 * entry Pi appended kept for the memo, the sync.
 */
import { eventOf } from "./event.ts";
import { call, leafWalk, native, OP_CODE, walkField, type NativeStateHandle } from "./native.ts";
import { sessionFile, syncAppended, syncIfNew, syncSession } from "./session-file.ts";
import { shared, type StoreEntry } from "./shared.ts";
import { entryCount, storeFor, view, type View } from "./stores.ts";
import { registerRenderer } from "./transcript.ts";
import type { HistoryEntry, OpenedState, PiContext, PiHandle, Scope, SessionState, SessionStateOptions } from "./types.ts";
import { encodeForEvent, hooksOf, parse, refuseInHook } from "./values.ts";

type Op = "set" | "patch" | "drop";
type SessionManager = PiContext["sessionManager"];

/**
 * The last read's answer, which stands while Pi's session is unchanged (the same session
 * manager, leaf and entry count, no force-refresh since) and, for a branch-scope state,
 * after Pi appended entries none of which is the state's on the way up from Pi's leaf to
 * the last read's ({@link sameBranchValue}). Not a fold memo (the core
 * memoizes every fold, at any leaf): it spares the call into the addon and the addon's
 * look at the file, which a read at an unchanged leaf would otherwise pay (0.3–0.7 µs
 * against 4–8 µs, measured). The text is the value as returned: migrated and validated.
 */
interface LastRead {
  sm: unknown;
  leaf: string | null;
  count: number;
  gen: number;
  text: string | null;
  /** How many entries Pi appended that reads answered from it since the addon last read (its log has not read them yet). */
  deferred: number;
}

/**
 * At most this many of Pi's entries are answered from the previous read before a read
 * goes through the addon again: each is read from the file by the next read that does
 * (about 9 µs for a message of Pi's usual 6.6 KB), so this bounds what that read pays.
 */
const MAX_DEFERRED = 3;

/**
 * Pi's side of the core's memo of a state's last event (`nstate`): the session manager and
 * the generation it was appended under (a different one, or a force-refresh since, makes
 * the core forget it) and Pi's entry count after it, which bounds the entries handed to the
 * core (`appendedSince`), and the entry Pi appended for it with its parent until the core
 * is told (with the next write's `decide`: one call into the addon per write, not two). When
 * the core finds Pi's leaf standing on that event, the next write starts from the value
 * after it and does not read what Pi appended since (a 6.6 KB message
 * costs 15–25 µs to read); the next read does.
 */
interface LastEvent {
  sm: unknown;
  gen: number;
  count: number;
  told: boolean;
  id: string;
  parent: string | null;
  /** The session file it was appended to (the core's memo keeps it: not handed again while it is the same). */
  file: string;
}

/** An opened state: its options as checked, the core's key of it (`nstate`, which calls its `migrate` and `validate`) and the two memos its calls keep. */
interface StateCore {
  readonly pi: PiHandle;
  readonly pluginId: string;
  readonly scope: Scope;
  readonly version: number;
  readonly customType: string;
  readonly nstate: NativeStateHandle;
  readonly databasePath: string | undefined;
  hot: LastRead | undefined;
  last: LastEvent | undefined;
}

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
  const hooks = hooksOf(String(pluginId ?? ""), migrate, options.validate);
  // The core checks the plugin id, the scope and the version, names the events' customType,
  // and calls `migrate` and `validate` in its order on every read and write.
  const nstate = call(
    () => new native.NativeState(String(pluginId ?? ""), String(scope), version, hooks?.migrate, hooks?.validate, hooks?.schema, hooks?.print),
  );
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
  const s: StateCore = { pi, pluginId, scope, version, customType, nstate, databasePath, hot: undefined, last: undefined };

  // Pi creates the file at the first user or assistant message: entries that waited in
  // memory are synced then (and its directory, once).
  for (const ev of ["message_end", "turn_end", "agent_end"]) pi.on?.(ev, (_e, ctx) => syncSession(ctx, true));
  pi.on?.("session_shutdown", (_e, ctx) => {
    syncSession(ctx, true);
    s.hot = undefined;
    s.last = undefined;
    nstate.forget();
    shared.opened.delete(opened);
  });

  return {
    pluginId,
    scope,
    version,
    read(ctx) {
      refuseInHook(pluginId);
      return read<T>(s, ctx);
    },
    readAt(ctx, entryId) {
      refuseInHook(pluginId);
      const entry = storeFor(ctx, databasePath);
      const v = view(entry, ctx);
      return parse<T>(answer(s, entry, v, String(entryId)));
    },
    write(ctx, value) {
      refuseInHook(pluginId);
      const e = encodeForEvent(pluginId, value);
      return commit(s, ctx, "set", e.text, e.value, e.fresh);
    },
    patch(ctx, patch) {
      refuseInHook(pluginId);
      const e = encodeForEvent(pluginId, patch);
      return commit(s, ctx, "patch", e.text, e.value, e.fresh);
    },
    drop(ctx) {
      refuseInHook(pluginId);
      return commit(s, ctx, "drop", null);
    },
    history(ctx) {
      refuseInHook(pluginId);
      const entry = storeFor(ctx, databasePath);
      const v = view(entry, ctx);
      return JSON.parse(call(() => entry.store.history(v.file, pluginId, scope, v.leaf))) as HistoryEntry<T>[];
    },
  };
}

/** docs/spec.md §3's branch key at Pi's leaf: from the leaf, climb while the parent has exactly one child. */
export function branchKey(ctx: PiContext): string | undefined {
  refuseInHook();
  const entry = storeFor(ctx);
  const v = view(entry, ctx);
  return call(() => entry.store.branchKey(v.file, v.leaf)) ?? undefined;
}

// ---------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------

/**
 * The value at Pi's leaf: the last read's answer while Pi's session is unchanged, or (a
 * branch-scope state) while Pi's leaf stands on the last read's leaf with none of the
 * state's events in between ({@link sameBranchValue}); else the addon's.
 */
function read<T>(s: StateCore, ctx: PiContext): T | undefined {
  const sm = ctx.sessionManager;
  const leaf = sm.getLeafId();
  const count = entryCount(sm);
  const hot = s.hot;
  if (hot && hot.sm === sm && hot.gen === shared.generation) {
    if (hot.leaf === leaf && hot.count === count) return parse<T>(hot.text);
    if (s.scope === "branch" && sameBranchValue(s, sm, hot, leaf, count)) {
      // Pi's side of a read that reaches the addon: the file Pi created is synced once.
      shared.lastCtx = ctx;
      const file = sessionFile(sm);
      if (file) syncIfNew(file);
      hot.deferred += count - hot.count;
      hot.leaf = leaf;
      hot.count = count;
      return parse<T>(hot.text);
    }
  }
  const entry = storeFor(ctx, s.databasePath);
  const v = view(entry, ctx);
  const text = answer(s, entry, v, v.leaf);
  s.hot = { sm, leaf, count, gen: shared.generation, text, deferred: 0 };
  return parse<T>(text);
}

/**
 * Whether a branch-scope state's value at Pi's `leaf` is the last read's (`hot`): Pi
 * appended entries since (`count` grew), and from `leaf` up, within as many entries as Pi
 * appended, its entries reach the last read's leaf with none of the state's `customType`
 * in between (an event of either scope, even one the core would ignore, or any other
 * entry that names it). The branch from
 * `leaf` is then those entries and the branch the last read folded, so the fold, its
 * version, its migration and its validation are the same. It looks at Pi's entries in
 * memory only, as the unchanged-leaf answer does: after a message Pi appended, a read
 * calls nothing and reads no file. The addon's log reads those entries at its next read
 * instead, so at most {@link MAX_DEFERRED} of them wait: a read after more goes through
 * the addon.
 */
function sameBranchValue(s: StateCore, sm: SessionManager, hot: LastRead, leaf: string | null, count: number): boolean {
  if (count <= hot.count || hot.deferred + count - hot.count > MAX_DEFERRED || typeof sm.getEntry !== "function") return false;
  let id = leaf;
  for (let k = count - hot.count; k > 0; k--) {
    if (id === hot.leaf) return true;
    if (id === null) return false;
    const e = sm.getEntry(id) as { parentId?: string | null; customType?: unknown } | undefined;
    if (!e || e.customType === s.customType) return false;
    id = e.parentId ?? null;
  }
  return id === hot.leaf;
}

/** What a read at `at` returns, as JSON text (`null`: absent): the value as the core resolves it (its version checked, an older one migrated, validated). */
function answer(s: StateCore, entry: StoreEntry, v: View, at: string | null): string | null {
  return call(() => entry.store.readState(s.nstate, v.file, at));
}

// ---------------------------------------------------------------------------------------
// The write: commit and its steps
// ---------------------------------------------------------------------------------------

/** A write of `op` with the caller's text `argument` (printed from `original`): the new entry's id, `undefined` when nothing is appended. */
function commit(s: StateCore, ctx: PiContext, op: Op, argument: string | null, original?: unknown, fresh = false): string | undefined {
  const sm = ctx.sessionManager;
  const entry = storeFor(ctx, s.databasePath);
  const v = view(entry, ctx);
  const file = v.file;
  // On top of the state's last event when the core's memo can answer so, else as a read reads: one call.
  const walk = (file !== null ? walkSince(s, sm, v.leaf) : undefined) ?? leafWalk(v.leaf);
  const last = s.last;
  if (last && walk[0] !== "=") last.told = true;
  const memoFile = last && walk[0] !== "=" && file === last.file ? null : file;
  const data = call(() => entry.store.decide(s.nstate, memoFile, walk, OP_CODE[op], argument));
  if (data === null) return undefined; // nothing appended: the last event stands
  // Until this event is known to be in Pi's session (`appended`, told with the next
  // write's walk), the core's value after it is not the value at any entry.
  s.last = undefined;
  const event = append(s, op, argument, data, original, fresh);
  const id = sm.getLeafId() ?? undefined;
  // Looked at before the sync, while it is at hand; kept once the event is on disk.
  const appended = file !== null ? appendedEntry(s, sm, id, event, file) : undefined;
  if (file !== null) syncAppended(file);
  else syncSession(ctx);
  s.last = appended;
  // After a `set` whose event carries the caller's text (the core printed the value as
  // that text, and validated it) or a `drop`, the value at the new leaf is known: the next
  // read there answers it without the addon, whose log has not read the event yet.
  s.hot =
    id !== undefined && (op === "drop" || (op === "set" && data === true))
      ? { sm, leaf: id, count: entryCount(sm), gen: shared.generation, text: op === "drop" ? null : argument, deferred: MAX_DEFERRED }
      : undefined;
  return id;
}

/**
 * The walk `decide` reads (`walkField`): the entry Pi appended for the last event
 * with its parent until the core is told, Pi's leaf, and Pi's entries from the leaf up,
 * as many as Pi appended after the last event (fewer at the root or an entry Pi does not
 * hold), for the core to judge; `undefined` when the last event was appended in another
 * session manager or before a force-refresh (the core then forgets it), when Pi cannot be
 * asked, or when an id cannot be carried.
 */
function walkSince(s: StateCore, sm: SessionManager, leaf: string | null): string | undefined {
  const last = s.last;
  if (!last) return undefined;
  if (last.sm !== sm || last.gen !== shared.generation) {
    s.last = undefined;
    s.nstate.forget();
    return undefined;
  }
  if (typeof sm.getEntry !== "function") return undefined;
  let head = "-\0-";
  if (!last.told) {
    const told = walkField(last.id);
    const parent = walkField(last.parent);
    if (told === undefined || parent === undefined) return undefined;
    head = `${told}\0${parent}`;
  }
  const at = walkField(leaf);
  if (at === undefined) return undefined;
  let walk = `${head}\0${at}`;
  let id = leaf;
  for (let k = entryCount(sm) - last.count; k > 0 && id !== null; k--) {
    const e = sm.getEntry(id) as { parentId?: string | null; customType?: unknown } | undefined;
    if (!e) break;
    id = e.parentId ?? null;
    const parent = walkField(id);
    if (parent === undefined) return undefined;
    walk += (e.customType === s.customType ? "\0c" : "\0o") + parent;
  }
  return walk;
}

/** Appends the decided event through Pi (`appendEntry`); returns the object Pi keeps. */
function append(s: StateCore, op: Op, argument: string | null, data: string | true, original: unknown, fresh: boolean): unknown {
  // `true`: the core confirmed that its data is the envelope of `argument`.
  const event = eventOf(data, s.scope, op, argument, s.version, original, fresh);
  s.pi.appendEntry(s.customType, event);
  return event;
}

/** The entry Pi appended at its leaf for this very event, as the core's memo keeps it when that is a child of where it was decided (branch scope). */
function appendedEntry(s: StateCore, sm: SessionManager, id: string | undefined, event: unknown, file: string): LastEvent | undefined {
  if (id === undefined || s.scope !== "branch" || typeof sm.getEntry !== "function") return undefined;
  const e = sm.getEntry(id) as { parentId?: string | null; data?: unknown } | undefined;
  if (e === undefined || e.data !== event) return undefined;
  return { sm, gen: shared.generation, count: entryCount(sm), told: false, id, parent: e.parentId ?? null, file };
}
