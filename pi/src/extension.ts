/**
 * The Pi extension of the package (listed in package.json's `pi.extensions`):
 *
 * - `/state:status`: the projection database, the session's write-lock holder (alive /
 *   not alive / unknown), the Pi process holding the session, the state events per
 *   plugin in this session, and the states an extension here opened whose value at Pi's
 *   leaf was written under a newer version than it knows (every call of theirs refuses).
 * - `/state:force-refresh`: clears the session's lock row and this process's caches and
 *   re-reads the file; asks through `ctx.ui.confirm` when the holder may be alive, and
 *   with no UI leaves the lock alone and says so.
 * - `/state:history <plugin> [branch|session]`: the events that made the plugin's value
 *   at Pi's leaf, oldest first, with their entry ids.
 * - The commands answer in every mode: through `ctx.ui.notify` in the TUI and in RPC
 *   mode, on stdout in print mode (`pi -p "/state:status"`), on stderr in JSON mode
 *   (whose stdout is Pi's event stream).
 * - The transcript: at `session_start` it registers the renderer of every state
 *   customType already in the session, so a resumed session shows its old events even
 *   when the extension that wrote them is not loaded (`openSessionState` registers its
 *   own). The `sessionState.transcript` setting (`false`) hides them.
 * - The presence row (`docs/pi-extension.md`): from `session_start` to
 *   `session_shutdown`, this Pi process is recorded as holding the session, so the CLI's
 *   `write`/`patch`/`drop` refuse it (four-element error, file untouched) and
 *   `session-state status` shows it. A killed Pi's row is judged dead by the lock's
 *   liveness test and never seals the session.
 */
import { STATE_PREFIX, type PiContext, type PiHandle, type Scope } from "./index.ts";
import {
  closeSession,
  eventCountReport,
  eventCountsOf,
  historyReportOf,
  invalidateAll,
  newerStatesOf,
  registerRenderer,
  shared,
  storeFor,
  syncSession,
  writeOut,
  type EventCount,
  type StatusReport,
} from "./internal.ts";
import { shortJson, termSafe } from "./render.ts";
import { existsSync as fileExists } from "node:fs";

interface UiContext extends PiContext {
  hasUI: boolean;
  /** `"tui"`, `"rpc"`, `"json"` or `"print"` (Pi 1.6). */
  mode?: string;
  ui: {
    notify(message: string, type?: "info" | "warning" | "error"): void;
    confirm(title: string, message: string): Promise<boolean>;
  };
}

interface ExtensionApiLike extends PiHandle {
  on(event: string, handler: (event: unknown, ctx: UiContext) => unknown): unknown;
  registerCommand(
    name: string,
    options: {
      description?: string;
      getArgumentCompletions?: (prefix: string) => Array<{ value: string; label: string }> | null;
      handler: (args: string, ctx: UiContext) => Promise<void> | void;
    },
  ): void;
}

type Level = "info" | "warning" | "error";

/**
 * A command's answer, in every mode: the UI's notification where there is a UI (TUI,
 * RPC); stdout in print mode (errors on stderr); stderr in JSON mode, whose stdout
 * carries Pi's event stream.
 */
export function say(ctx: UiContext, text: string, level: Level = "info"): void {
  const mode = ctx.mode ?? (ctx.hasUI ? "tui" : "print");
  if (mode === "print") writeOut(level === "error" ? "stderr" : "stdout", text);
  else if (mode === "json") writeOut("stderr", text);
  else ctx.ui.notify(text, level);
}

/**
 * State events per plugin and scope in this session, as the core counts them (`session-state
 * status`). On a file the strict reader refuses, the counts come from a salvage read, as
 * `session-state status` counts them; `/state:status` and `/state:history` say so.
 */
export function eventCounts(ctx: PiContext): Map<string, Map<string, number>> {
  return countsOf(eventCountsOf(ctx));
}

function countsOf(rows: EventCount[]): Map<string, Map<string, number>> {
  const counts = new Map<string, Map<string, number>>();
  for (const row of rows) {
    const per = counts.get(row.plugin) ?? new Map<string, number>();
    per.set(row.scope, row.events);
    counts.set(row.plugin, per);
  }
  return counts;
}

/** The text `/state:status` shows. */
export function statusText(ctx: PiContext): string {
  const { store } = storeFor(ctx);
  const sm = ctx.sessionManager;
  const st = JSON.parse(store.status(sm.getSessionId())) as StatusReport;
  const lines = [`session   ${sm.getSessionId()} (${sm.getSessionFile() ?? "in memory"})`];
  lines.push(`database  ${st.database.path}${st.database.exists ? "" : " (does not exist yet)"}`);
  if (st.lock) {
    const l = st.lock;
    lines.push(
      `lock      held by ${l.holder} (${l.liveness}: ${l.livenessReason})${l.action ? `, doing: ${l.action}` : ""}, taken ${Math.floor(l.ageMs / 1000)} s ago, lease ${l.leaseExpired ? "expired" : "running"}`,
    );
  } else {
    lines.push("lock      none");
  }
  if (st.pi) {
    const p = st.pi;
    lines.push(`pi        ${p.thisProcess ? "this Pi" : "another Pi"}: ${p.holder} (${p.liveness}: ${p.livenessReason})`);
  } else {
    lines.push("pi        no Pi holds the session");
  }
  const report = eventCountReport(ctx);
  if (report.refused !== null) {
    // As `session-state status` warns: the counts are a salvage read's.
    lines.push(
      `warning   the strict reader refuses this file; counts come from a salvage read (see \`session-state verify\`): ${termSafe(report.refused)}`,
    );
  }
  const counts = countsOf(report.rows);
  if (counts.size === 0) lines.push("events    none");
  let first = true;
  for (const [plugin, per] of counts) {
    const parts = [...per].map(([s, n]) => `${n} ${s}`);
    lines.push(`${first ? "events   " : "         "} ${termSafe(plugin)}: ${parts.map(termSafe).join(", ")}`);
    first = false;
  }
  // The states opened here that every call refuses: written under a newer version.
  let newer: ReturnType<typeof newerStatesOf> = [];
  try {
    newer = newerStatesOf(ctx);
  } catch {
    // A file the strict reader refuses: the warning above says so.
  }
  first = true;
  for (const n of newer) {
    lines.push(
      `${first ? "newer    " : "         "} ${termSafe(n.pluginId)} (${n.scope}): stored under stateVersion ${n.storedVersion}${n.entryId === null ? "" : ` (entry ${termSafe(n.entryId)})`}, newer than version ${n.knownVersion} that its extension here knows: its reads and writes are refused`,
    );
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
  const st = JSON.parse(store.status(sid)) as StatusReport;
  const lock = st.lock;
  if (lock?.mayBeAlive) {
    const question = `Session '${sid}' is locked by ${lock.holder} (${lock.liveness}: ${lock.livenessReason}). Clearing the lock lets another writer in while it may still be writing. Clear it?`;
    if (!ctx.hasUI) {
      say(
        ctx,
        `Left the lock on session '${sid}' alone: its holder ${lock.holder} may be alive (${lock.livenessReason}) and there is no UI to confirm. Nothing was changed.`,
        "warning",
      );
      return "left";
    }
    if (!(await ctx.ui.confirm("Clear the write lock?", question))) {
      say(ctx, `Left the lock on session '${sid}' alone. Nothing was changed.`);
      return "left";
    }
  }
  const file = sm.getSessionFile() ?? null;
  const cleared = store.forceRefresh(sid, file);
  invalidateAll();
  say(ctx, `${cleared && lock ? `Cleared the lock held by ${lock.holder}. ` : "No lock to clear. "}Dropped the caches and re-read the session.`);
  return "refreshed";
}

const HISTORY_USAGE = "usage: /state:history <plugin> [branch|session]";

/**
 * The text `/state:history` shows: the events that made the value of `plugin` at Pi's
 * leaf, oldest first, in each scope asked for (by default each scope the plugin has
 * events in). Throws the core's message for an invalid plugin id. On a file the strict
 * reader refuses, the events come from a salvage read, under a warning that says so.
 */
export function historyText(ctx: PiContext, args: string): string {
  const words = args.trim().split(/\s+/).filter((w) => w.length > 0);
  const report = eventCountReport(ctx);
  const counts = countsOf(report.rows);
  if (words.length === 0 || words.length > 2) {
    const present = [...counts.keys()].map(termSafe).join(", ");
    throw new Error(`${HISTORY_USAGE}${present ? ` (plugins with events here: ${present})` : ""}`);
  }
  const [plugin, scopeArg] = words as [string, string | undefined];
  if (scopeArg !== undefined && scopeArg !== "branch" && scopeArg !== "session") {
    throw new Error(`${HISTORY_USAGE}: ${JSON.stringify(termSafe(scopeArg))} is not a scope`);
  }
  const inFile = [...(counts.get(plugin)?.keys() ?? [])].filter((s): s is Scope => s === "branch" || s === "session");
  const scopes: Scope[] = scopeArg ? [scopeArg] : inFile.length > 0 ? inFile.sort() : ["session"];
  const leaf = ctx.sessionManager.getLeafId();
  const out: string[] = [];
  let refused = report.refused;
  for (const scope of scopes) {
    const r = historyReportOf(ctx, plugin, scope);
    const h = r.events;
    refused ??= r.refused;
    const where = scope === "branch" ? `at ${leaf ?? "the root"}` : "in this session";
    out.push(`${termSafe(plugin)} (${scope} scope) ${where}: ${h.length === 0 ? "no events" : `${h.length} event${h.length === 1 ? "" : "s"}, oldest first`}`);
    const opWidth = 5;
    for (const e of h) {
      const arg = e.op === "drop" ? "" : `  ${shortJson(e.argument, 80)}`;
      const after = e.op === "patch" ? `  -> ${e.value === undefined ? "(absent)" : shortJson(e.value, 80)}` : "";
      const sv = e.stateVersion > 1 ? `  (stateVersion ${e.stateVersion})` : "";
      out.push(`  ${termSafe(e.entryId)}  ${e.op.padEnd(opWidth)}${arg}${after}${sv}`);
    }
    const value = h.length === 0 ? undefined : h[h.length - 1]!.value;
    out.push(`  value: ${value === undefined ? "absent" : shortJson(value, 100_000)}`);
  }
  if (refused !== null) {
    // As `/state:status` and `session-state status` warn: a salvage read's events.
    out.unshift(
      `warning   the strict reader refuses this file; events come from a salvage read (see \`session-state verify\`): ${termSafe(refused)}`,
    );
  }
  return out.join("\n");
}

export default function sessionStateExtension(pi: ExtensionApiLike): void {
  // `fileHeld`: the presence holds the session file itself (the core's one lock); Pi
  // writes a new session's file only at its first message, so until then it is held from
  // the first message event that finds it.
  let held: { sessionId: string; ctx: UiContext; fileHeld: boolean } | undefined;
  const rendered = new Set<string>();

  const enter = (ctx: UiContext) => {
    shared.lastCtx = ctx;
    const sm = ctx.sessionManager;
    const entry = storeFor(ctx);
    if (!entry.reported) {
      // Settings problems that fell back to the default location, reported once.
      entry.reported = true;
      for (const d of entry.store.diagnostics()) ctx.ui?.notify?.(`session-state: ${d}`, "warning");
    }
    const file = sm.getSessionFile() ?? null;
    try {
      entry.store.enterPresence(sm.getSessionId(), file);
    } catch (e) {
      // Another process holds the session (a second Pi with it open): this Pi's state
      // writes still go through Pi, but the CLI and other processes stay out.
      ctx.ui?.notify?.(`session-state: ${(e as Error).message}`, "warning");
      return;
    }
    held = { sessionId: sm.getSessionId(), ctx, fileHeld: file !== null && fileExists(file) };
    // The renderer of every state customType in the session: its old events are drawn
    // whether or not the extension that wrote them is loaded.
    for (const e of sm.getEntries() as Array<{ type?: string; customType?: unknown }>) {
      if (e.type !== "custom" || typeof e.customType !== "string" || !e.customType.startsWith(STATE_PREFIX)) continue;
      if (rendered.has(e.customType)) continue;
      rendered.add(e.customType);
      registerRenderer(pi, e.customType);
    }
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
  pi.on("session_tree", (_e, ctx) => {
    shared.lastCtx = ctx;
  });
  pi.on("session_shutdown", (_e, ctx) => {
    syncSession(ctx, true);
    closeSession(ctx);
    leave();
    if (shared.lastCtx === ctx) shared.lastCtx = undefined;
  });
  // Pi creates the file at the first user or assistant message: entries written before
  // are synced then.
  for (const ev of ["message_end", "turn_end", "agent_end"]) {
    pi.on(ev, (_e, ctx) => {
      shared.lastCtx = ctx;
      syncSession(ctx, true);
      const file = ctx.sessionManager.getSessionFile();
      if (held && !held.fileHeld && file && fileExists(file)) {
        held.fileHeld = true;
        try {
          storeFor(ctx).store.enterPresence(held.sessionId, file);
        } catch (e) {
          ctx.ui?.notify?.(`session-state: ${(e as Error).message}`, "warning");
        }
      }
    });
  }

  pi.registerCommand("state:status", {
    description: "session-state: lock holder, the Pi holding this session, events per plugin",
    handler: async (_args, ctx) => {
      say(ctx, statusText(ctx));
    },
  });
  pi.registerCommand("state:force-refresh", {
    description: "session-state: clear this session's write lock and caches, re-read the file",
    handler: async (_args, ctx) => {
      await forceRefresh(ctx);
    },
  });
  pi.registerCommand("state:history", {
    description: "session-state: the events that made a plugin's value here: /state:history <plugin> [branch|session]",
    getArgumentCompletions: (prefix) => {
      const ctx = shared.lastCtx;
      if (!ctx || prefix.includes(" ")) return null;
      try {
        const items = [...eventCounts(ctx).keys()]
          .filter((p) => p.startsWith(prefix) && termSafe(p) === p)
          .map((p) => ({ value: p, label: p }));
        return items.length > 0 ? items : null;
      } catch {
        return null;
      }
    },
    handler: async (args, ctx) => {
      let text: string;
      try {
        text = historyText(ctx, args);
      } catch (e) {
        say(ctx, (e as Error).message, "error");
        return;
      }
      say(ctx, text);
    },
  });
}
