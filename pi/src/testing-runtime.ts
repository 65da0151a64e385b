/**
 * The testing kit's running Pi: Pi's SDK runtime (`AgentSessionRuntime`) started on the
 * kit's folder, UI and scripted model, and the handle a test drives it with (`TestPi`).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import {
  createAgentSessionFromServices,
  createAgentSessionRuntime,
  createAgentSessionServices,
  SessionManager,
  type AgentSession,
  type ExtensionFactory,
} from "@earendil-works/pi-coding-agent";
import { fauxAssistantMessage } from "@earendil-works/pi-ai";
import { stripTerminalSequences } from "@earendil-works/pi-tui";
import { STATE_PREFIX, type HistoryEntry, type PiContext, type Scope, type StoredValue } from "./index.ts";
import { forgetStoresUnder, historyOf, shared, storedAt, storeFor } from "./internal.ts";
import { removeNow } from "./testing-folder.ts";
import { scriptedModel } from "./testing-model.ts";
import type { Note, StartOptions, TestPi } from "./testing-types.ts";
import { piKeybindings, piTheme, plain, TuiRecord, uiContext } from "./testing-ui.ts";

/** A registered command's handler, as Pi calls it. */
type CommandHandler = (args: string, ctx: unknown) => unknown;

const here = path.dirname(fileURLToPath(import.meta.url));
/** The package folder: Pi loads what its package.json lists under `pi.extensions`. */
const PACKAGE_DIR = path.resolve(here, "..");

/** An extension as `pi -e` takes it: a `file:` URL's path, or a path against the current directory. */
function extensionPath(e: string | URL): string {
  return e instanceof URL ? fileURLToPath(e) : path.resolve(e);
}

/** Starts Pi in `dir` (the kit's own folder when `owned`): see `startPi`. */
export async function start(o: StartOptions, dir: string, owned: boolean): Promise<TestPi> {
  const agentDir = path.join(dir, "agent");
  const cwd = path.join(dir, "project");
  fs.mkdirSync(agentDir, { recursive: true });
  fs.mkdirSync(cwd, { recursive: true });
  if (o.settings) fs.writeFileSync(path.join(agentDir, "settings.json"), JSON.stringify(o.settings, null, 2));
  // Pi and the package both find the agent directory here (sessions, settings, database).
  const previousAgentDir = process.env.PI_CODING_AGENT_DIR;
  process.env.PI_CODING_AGENT_DIR = agentDir;

  const { faux, queue, requests, refill, modelRuntime } = await scriptedModel(agentDir, o);

  const paths: string[] = [];
  const factories: ExtensionFactory[] = [];
  if (o.packageExtension !== false) paths.push(PACKAGE_DIR);
  for (const e of o.extensions ?? []) {
    if (typeof e === "function") factories.push(e);
    else paths.push(extensionPath(e));
  }

  const notes: Note[] = [];
  const confirms: string[] = [];
  const printed: string[] = [];
  const stderr: string[] = [];
  const errors: string[] = [];
  const width = o.width ?? 100;
  piTheme();
  const keybindings = await piKeybindings(agentDir);
  const rec = new TuiRecord(width, keybindings);
  const ui = o.ui === false ? undefined : uiContext(o, notes, confirms, rec);
  const mode = o.mode ?? "tui";
  const flagValues = o.flags ? new Map(Object.entries(o.flags)) : undefined;

  const runtime = await createAgentSessionRuntime(
    async ({ cwd, agentDir, sessionManager, sessionStartEvent }) => {
      const services = await createAgentSessionServices({
        cwd,
        agentDir,
        modelRuntime,
        ...(flagValues ? { extensionFlagValues: flagValues } : {}),
        resourceLoaderOptions: {
          additionalExtensionPaths: paths,
          extensionFactories: factories,
          noSkills: true,
          noPromptTemplates: true,
          noThemes: true,
          noContextFiles: true,
        },
      });
      const failed = services.resourceLoader.getExtensions().errors;
      if (failed.length > 0) throw new Error(`extensions failed to load: ${JSON.stringify(failed)}`);
      const flagErrors = services.diagnostics.filter((d) => d.type === "error");
      if (flagErrors.length > 0) throw new Error(`starting Pi: ${flagErrors.map((d) => d.message).join("; ")}`);
      const created = await createAgentSessionFromServices({
        services,
        sessionManager,
        sessionStartEvent,
        model: faux.getModel(),
        ...(o.builtinTools ? {} : { noTools: "builtin" as const }),
      });
      return { ...created, services, diagnostics: services.diagnostics };
    },
    {
      cwd,
      agentDir,
      sessionManager: o.session ? SessionManager.open(o.session) : SessionManager.create(cwd),
    },
  );

  const bind = async (session: AgentSession) => {
    await session.bindExtensions({
      ...(ui ? { uiContext: ui as never, mode } : { mode: "print" as const }),
      commandContextActions: {
        waitForIdle: () => runtime.session.waitForIdle(),
        newSession: (opts) => runtime.newSession(opts),
        fork: async (entryId, opts) => ({ cancelled: (await runtime.fork(entryId, opts)).cancelled }),
        navigateTree: async (targetId, opts) => {
          const r = await runtime.session.navigateTree(targetId, {
            summarize: opts?.summarize ?? false,
            customInstructions: opts?.customInstructions,
            replaceInstructions: opts?.replaceInstructions,
            label: opts?.label,
          });
          return { cancelled: r.cancelled };
        },
        switchSession: (p, opts) => runtime.switchSession(p, opts),
        reload: async () => {
          rec.reset();
          await runtime.session.reload();
        },
      },
      onError: (err) => {
        errors.push(`${err.extensionPath} (${err.event}): ${err.error}`);
      },
    });
  };
  runtime.setRebindSession(bind);
  // As Pi's TUI: a replaced session's statuses and widgets go with it.
  runtime.setBeforeSessionInvalidate(() => rec.reset());
  try {
    await bind(runtime.session);
  } catch (e) {
    await runtime.dispose().catch(() => undefined);
    throw e;
  }

  const runner = () =>
    runtime.session.extensionRunner as unknown as {
      createContext(): PiContext;
      getCommand(n: string): unknown;
      getRegisteredCommands(): Array<{ invocationName?: string; name: string }>;
      getShortcuts(bindings: unknown): Map<string, { handler(ctx: unknown): unknown; extensionPath: string }>;
      getEntryRenderer(t: string): Function | undefined;
    };
  const context = () => runner().createContext();

  /** Runs `f` as the current Pi (its print-mode capture, fresh replies); fails on a new extension error. */
  const run = async (what: string, f: () => Promise<unknown>) => {
    refill();
    const before = errors.length;
    shared.printSink = (stream, text) => {
      (stream === "stdout" ? printed : stderr).push(text);
    };
    try {
      await f();
      if (errors.length > before) throw new Error(`${what}: an extension reported an error:\n${errors.slice(before).join("\n")}`);
    } catch (e) {
      // The keys queued for a component this call would have opened are dropped with it.
      rec.queued.length = 0;
      throw e;
    }
  };
  // An extension that failed at start (a throwing session_start) fails startPi, and the
  // Pi it started is shut down: there is no handle for the test to do it.
  if (errors.length > 0) {
    await runtime.dispose().catch(() => undefined);
    rec.reset();
    throw new Error(`starting Pi: an extension reported an error:\n${errors.join("\n")}`);
  }

  /** A tool result's row: the tool's renderCall with the call's arguments, then its renderResult. */
  const renderToolRow = (msg: any, parentId: string | null, w: number, expanded: boolean): string[] | undefined => {
    const tool = (runner() as unknown as { getToolDefinition(n: string): any }).getToolDefinition(msg.toolName);
    if (!tool?.renderCall && !tool?.renderResult) return undefined;
    // The call: in the assistant message above the result (Pi may put state events between them).
    let args: unknown = {};
    for (let id = parentId; id; ) {
      const e = runtime.session.sessionManager.getEntry(id) as any;
      const call = e?.type === "message" && e.message.role === "assistant" ? e.message.content.find((c: any) => c.type === "toolCall" && c.id === msg.toolCallId) : undefined;
      if (call) {
        args = call.arguments;
        break;
      }
      id = e?.parentId ?? null;
    }
    const context = {
      args,
      toolCallId: msg.toolCallId,
      invalidate: () => {},
      lastComponent: undefined,
      state: {},
      cwd,
      executionStarted: true,
      argsComplete: true,
      isPartial: false,
      expanded,
      showImages: false,
      isError: msg.isError,
      durationMs: msg.durationMs,
      outputPad: 0,
      keyText: () => "",
      keyHint: () => "",
      rawKeyHint: () => "",
    };
    const lines: string[] = [];
    if (tool.renderCall) lines.push(...plain(tool.renderCall(args, piTheme(), context).render(w)));
    if (tool.renderResult) {
      const result = { content: msg.content, details: msg.details, isError: msg.isError };
      lines.push(...plain(tool.renderResult(result, { expanded, isPartial: false }, piTheme(), context).render(w)));
    }
    return lines;
  };

  let down = false;
  const pi: TestPi = {
    dir,
    agentDir,
    cwd,
    get runtime() {
      return runtime;
    },
    get session() {
      return runtime.session;
    },
    get sessionManager() {
      return runtime.session.sessionManager;
    },
    get file() {
      return runtime.session.sessionManager.getSessionFile();
    },
    get leaf() {
      return runtime.session.sessionManager.getLeafId();
    },
    get databasePath() {
      return storeFor(context()).store.databasePath;
    },
    notes,
    confirms,
    printed,
    stderr,
    errors,
    uiCalls: rec.uiCalls,
    shown: rec.shown,
    reply(...replies) {
      for (const r of replies) queue.push(typeof r === "string" ? fauxAssistantMessage(r) : r);
    },
    async prompt(text, ...replies) {
      pi.reply(...replies);
      await run(`prompt ${JSON.stringify(text)}`, () => runtime.session.prompt(text));
    },
    async command(line) {
      const name = /^\/(\S+)/.exec(line)?.[1];
      if (!name) throw new Error(`command ${JSON.stringify(line)}: a command starts with "/"`);
      if (!runner().getCommand(name)) {
        const known = runner().getRegisteredCommands().map((c) => `/${c.invocationName ?? c.name}`);
        throw new Error(`no command /${name} is registered (registered: ${known.join(", ") || "none"})`);
      }
      // Pi reports a command's error by its message only; the kit keeps the error itself
      // (its class, its fields, its `cause`) by wrapping the registered handler for this call.
      const resolved = runner().getCommand(name) as { handler: CommandHandler };
      const registered = (runner() as unknown as { extensions: Array<{ commands: Map<string, { handler: CommandHandler }> }> }).extensions
        .flatMap((e) => [...e.commands.values()])
        .find((c) => c.handler === resolved.handler);
      let thrown: { error: unknown } | undefined;
      if (registered) {
        const handler = registered.handler;
        registered.handler = async (args, ctx) => {
          try {
            return await handler(args, ctx);
          } catch (e) {
            thrown = { error: e };
            throw e;
          }
        };
        try {
          await run(line, () => runtime.session.prompt(line));
        } catch (e) {
          throw thrown ? thrown.error : e;
        } finally {
          registered.handler = handler;
        }
      } else {
        await run(line, () => runtime.session.prompt(line));
      }
    },
    async shortcut(keyId) {
      const shortcuts = runner().getShortcuts(keybindings.getEffectiveConfig());
      const s = shortcuts.get(keyId.toLowerCase());
      if (!s) throw new Error(`no shortcut ${keyId} is registered (registered: ${[...shortcuts.keys()].join(", ") || "none"})`);
      await run(`shortcut ${keyId}`, async () => {
        try {
          await s.handler(context());
        } catch (e) {
          errors.push(`${s.extensionPath} (shortcut ${keyId}): ${e instanceof Error ? e.message : String(e)}`);
        }
      });
    },
    keys(...keys) {
      rec.queued.push(...keys);
    },
    async navigate(entryId) {
      await run(`navigate ${entryId}`, async () => {
        const r = await runtime.session.navigateTree(entryId, { summarize: false });
        if (r.cancelled) throw new Error(`navigate ${entryId}: cancelled by an extension`);
      });
    },
    async fork(entryId, opts) {
      const at = entryId ?? pi.leaf;
      if (!at) throw new Error("fork: the session has no entry yet");
      const position = opts?.position ?? "at";
      await run(`fork ${at}`, async () => {
        const r = await runtime.fork(at, { position });
        if (r.cancelled) throw new Error(`fork ${at}: cancelled by an extension`);
      });
    },
    async clone() {
      await pi.fork();
    },
    async reopen() {
      const file = pi.file;
      if (!file || !fs.existsSync(file)) throw new Error("reopen: Pi has not created the session file yet (send a message first)");
      await run(`reopen ${file}`, async () => {
        const r = await runtime.switchSession(file);
        if (r.cancelled) throw new Error(`reopen ${file}: cancelled by an extension`);
      });
    },
    async newSession() {
      await run("new session", async () => {
        const r = await runtime.newSession();
        if (r.cancelled) throw new Error("new session: cancelled by an extension");
      });
    },
    async reload() {
      await run("reload", async () => {
        rec.reset();
        await runtime.session.reload();
      });
    },
    async compact(customInstructions) {
      await run("compact", () => runtime.session.compact(customInstructions));
    },
    state<T>(pluginId: string, scope: Scope) {
      return storedAt(context(), pluginId, needScope("state", scope)).value as T | undefined;
    },
    stored<T>(pluginId: string, scope: Scope) {
      return storedAt(context(), pluginId, needScope("stored", scope)) as StoredValue<T>;
    },
    history<T>(pluginId: string, scope: Scope) {
      return historyOf(context(), pluginId, needScope("history", scope)) as HistoryEntry<T>[];
    },
    events(pluginId) {
      const want = pluginId === undefined ? undefined : `${STATE_PREFIX}${pluginId}`;
      return (runtime.session.sessionManager.getEntries() as unknown as Array<Record<string, unknown>>)
        .filter((e) => e.type === "custom" && typeof e.customType === "string" && e.customType.startsWith(STATE_PREFIX))
        .filter((e) => want === undefined || e.customType === want)
        .map((e) => ({ id: e.id as string, parentId: (e.parentId as string | null) ?? null, customType: e.customType as string, data: e.data }));
    },
    statuses() {
      return Object.fromEntries([...rec.statuses].map(([k, v]) => [k, stripTerminalSequences(v)]));
    },
    widgets() {
      return Object.fromEntries([...rec.widgets.keys()].map((k) => [k, rec.widget(k)!]));
    },
    widget(k) {
      return rec.widget(k);
    },
    requests() {
      return [...requests];
    },
    lastRequest() {
      return requests.at(-1);
    },
    render(entryId, opts = {}) {
      const sm = runtime.session.sessionManager;
      const entry = sm.getEntry(entryId) as { type?: string; customType?: string; message?: any; parentId?: string | null } | undefined;
      const w = opts.width ?? width;
      const expanded = opts.expanded ?? false;
      if (entry?.type === "message" && entry.message?.role === "toolResult") return renderToolRow(entry.message, entry.parentId ?? null, w, expanded);
      if (!entry || entry.type !== "custom" || typeof entry.customType !== "string") {
        throw new Error(`render ${entryId}: no custom entry or tool result with that id`);
      }
      const renderer = runner().getEntryRenderer(entry.customType);
      if (!renderer) return undefined;
      const component = renderer(entry, { expanded, keyText: () => "", keyHint: () => "" }, piTheme());
      if (!component) return undefined;
      return plain(component.render(w) as string[]);
    },
    context,
    async shutdown() {
      if (down) return;
      down = true;
      try {
        await runtime.dispose();
      } finally {
        rec.reset();
        if (shared.printSink) shared.printSink = undefined;
        forgetStoresUnder(dir);
        if (process.env.PI_CODING_AGENT_DIR === agentDir) {
          if (previousAgentDir === undefined) delete process.env.PI_CODING_AGENT_DIR;
          else process.env.PI_CODING_AGENT_DIR = previousAgentDir;
        }
        if (owned) removeNow(dir);
      }
    },
  };
  return pi;
}

/** The kit reads a state in the scope the test names: there is no default (see docs/pi-extension.md). */
function needScope(what: string, scope: Scope): Scope {
  if (scope !== "branch" && scope !== "session") {
    throw new Error(`pi.${what}(pluginId, scope): name the scope, "branch" or "session", as the extension opened the state (got ${JSON.stringify(scope)})`);
  }
  return scope;
}
