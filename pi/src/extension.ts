/**
 * The Pi extension of the package (listed in package.json's `pi.extensions`):
 *
 * - `/state:status`: the projection database, the session's write-lock holder (alive /
 *   not alive / unknown), the Pi process holding the session, and the state events per
 *   plugin in this session.
 * - `/state:force-refresh`: clears the session's lock row and this process's caches and
 *   re-reads the file; asks through `ctx.ui.confirm` when the holder may be alive, and
 *   with no UI leaves the lock alone and says so.
 * - The presence row (SPEC §9): from `session_start` to `session_shutdown`, this Pi
 *   process is recorded as holding the session, so the CLI's `write`/`patch`/`drop`
 *   refuse it (four-element error, file untouched) and `session-state status` shows it.
 *   A killed Pi's row is judged dead by the §6 liveness test and never seals the session.
 */
import { closeSession, invalidateAll, storeFor, syncSession, type PiContext } from "./index.ts";

interface UiContext extends PiContext {
  hasUI: boolean;
  ui: {
    notify(message: string, type?: "info" | "warning" | "error"): void;
    confirm(title: string, message: string): Promise<boolean>;
  };
}

interface ExtensionApiLike {
  on(event: string, handler: (event: unknown, ctx: UiContext) => unknown): unknown;
  registerCommand(
    name: string,
    options: { description?: string; handler: (args: string, ctx: UiContext) => Promise<void> | void },
  ): void;
}

interface LockJson {
  holder: string;
  action: string | null;
  ageMs: number;
  liveness: string;
  livenessReason: string;
  leaseExpired: boolean;
  blocksWriters: boolean;
}

interface PresenceJson {
  holder: string;
  sinceMs: number;
  sessionFile: string | null;
  liveness: string;
  livenessReason: string;
  thisProcess: boolean;
}

interface StatusJson {
  database: string;
  exists: boolean;
  lock: LockJson | null;
  presence: PresenceJson | null;
}

/** State events per plugin and scope in this session, from Pi's own entries. */
export function eventCounts(ctx: PiContext): Map<string, Map<string, number>> {
  const counts = new Map<string, Map<string, number>>();
  for (const e of ctx.sessionManager.getEntries() as Array<{ type?: string; customType?: string; data?: { scope?: unknown } }>) {
    if (e.type !== "custom" || typeof e.customType !== "string" || !e.customType.startsWith("session-state/")) continue;
    const plugin = e.customType.slice("session-state/".length);
    const scope = typeof e.data?.scope === "string" ? e.data.scope : "invalid";
    const per = counts.get(plugin) ?? new Map<string, number>();
    per.set(scope, (per.get(scope) ?? 0) + 1);
    counts.set(plugin, per);
  }
  return counts;
}

/** The text `/state:status` shows. */
export function statusText(ctx: PiContext): string {
  const { store } = storeFor(ctx);
  const sm = ctx.sessionManager;
  const st = JSON.parse(store.status(sm.getSessionId())) as StatusJson;
  const lines = [`session   ${sm.getSessionId()} (${sm.getSessionFile() ?? "in memory"})`];
  lines.push(`database  ${st.database}${st.exists ? "" : " (does not exist yet)"}`);
  if (st.lock) {
    const l = st.lock;
    lines.push(
      `lock      held by ${l.holder} (${l.liveness}: ${l.livenessReason})${l.action ? `, doing: ${l.action}` : ""}, taken ${Math.floor(l.ageMs / 1000)} s ago, lease ${l.leaseExpired ? "expired" : "running"}`,
    );
  } else {
    lines.push("lock      none");
  }
  if (st.presence) {
    const p = st.presence;
    lines.push(`pi        ${p.thisProcess ? "this Pi" : "another Pi"}: ${p.holder} (${p.liveness}: ${p.livenessReason})`);
  } else {
    lines.push("pi        no Pi holds the session");
  }
  const counts = eventCounts(ctx);
  if (counts.size === 0) lines.push("events    none");
  let first = true;
  for (const [plugin, per] of counts) {
    const parts = [...per].map(([s, n]) => `${n} ${s}`);
    lines.push(`${first ? "events   " : "         "} ${plugin}: ${parts.join(", ")}`);
    first = false;
  }
  return lines.join("\n");
}

/**
 * `/state:force-refresh`. Returns what it did: `"refreshed"`, or `"left"` when the lock's
 * holder may be alive and it was not confirmed (no UI, or the user said no).
 */
export async function forceRefresh(ctx: UiContext): Promise<"refreshed" | "left"> {
  const { store } = storeFor(ctx);
  const sm = ctx.sessionManager;
  const sid = sm.getSessionId();
  const st = JSON.parse(store.status(sid)) as StatusJson;
  const lock = st.lock;
  if (lock && lock.liveness !== "not alive") {
    const question = `Session '${sid}' is locked by ${lock.holder} (${lock.liveness}: ${lock.livenessReason}). Clearing the lock lets another writer in while it may still be writing. Clear it?`;
    if (!ctx.hasUI) {
      ctx.ui.notify?.(
        `Left the lock on session '${sid}' alone: its holder ${lock.holder} may be alive (${lock.livenessReason}) and there is no UI to confirm. Nothing was changed.`,
        "warning",
      );
      return "left";
    }
    if (!(await ctx.ui.confirm("Clear the write lock?", question))) {
      ctx.ui.notify(`Left the lock on session '${sid}' alone. Nothing was changed.`, "info");
      return "left";
    }
  }
  const file = sm.getSessionFile() ?? null;
  const cleared = store.forceRefresh(sid, file);
  invalidateAll();
  ctx.ui.notify(
    `${cleared && lock ? `Cleared the lock held by ${lock.holder}. ` : "No lock to clear. "}Dropped the caches and re-read the session.`,
    "info",
  );
  return "refreshed";
}

export default function sessionStateExtension(pi: ExtensionApiLike): void {
  let held: { sessionId: string; ctx: UiContext } | undefined;

  const enter = (ctx: UiContext) => {
    const sm = ctx.sessionManager;
    const entry = storeFor(ctx);
    if (!entry.reported) {
      // Settings problems that fell back to the default location, reported once (SPEC §4).
      entry.reported = true;
      for (const d of entry.store.diagnostics()) ctx.ui?.notify?.(`session-state: ${d}`, "warning");
    }
    entry.store.enterPresence(sm.getSessionId(), sm.getSessionFile() ?? null);
    held = { sessionId: sm.getSessionId(), ctx };
  };
  const leave = () => {
    if (!held) return;
    const h = held;
    held = undefined;
    try {
      storeFor(h.ctx).store.leavePresence(h.sessionId);
    } catch {
      /* a row left behind is judged dead once this process is gone */
    }
  };

  pi.on("session_start", (_e, ctx) => {
    leave();
    enter(ctx);
  });
  pi.on("session_shutdown", (_e, ctx) => {
    syncSession(ctx, true);
    closeSession(ctx);
    leave();
  });
  // Pi creates the file at the first user or assistant message: entries written before
  // are synced then.
  for (const ev of ["message_end", "turn_end", "agent_end"]) {
    pi.on(ev, (_e, ctx) => {
      syncSession(ctx, true);
    });
  }

  pi.registerCommand("state:status", {
    description: "session-state: lock holder, the Pi holding this session, events per plugin",
    handler: async (_args, ctx) => {
      ctx.ui.notify(statusText(ctx), "info");
    },
  });
  pi.registerCommand("state:force-refresh", {
    description: "session-state: clear this session's write lock and caches, re-read the file",
    handler: async (_args, ctx) => {
      await forceRefresh(ctx);
    },
  });
}
