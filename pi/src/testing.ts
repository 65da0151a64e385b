/**
 * A testing kit for Pi extensions (`@session-state/pi/testing`): runs extensions inside
 * the real Pi agent loop (Pi's SDK, `AgentSessionRuntime`) with pi-ai's scripted `faux`
 * model, so a test needs no network, no API key and no mocks.
 *
 * ```ts
 * import { test } from "node:test";
 * import assert from "node:assert/strict";
 * import { startPi, toolCall } from "@session-state/pi/testing";
 *
 * test("/role sets the role on this branch", async () => {
 *   const pi = await startPi({ extensions: [new URL("./role.ts", import.meta.url)] });
 *   await pi.command("/role reviewer");
 *   assert.deepEqual(pi.state("role", "branch"), { name: "reviewer" });
 *   await pi.prompt("go on", toolCall("remember", { items: ["a"] }), "done");
 *   await pi.shutdown();
 * });
 * ```
 *
 * - Each `startPi` works in a new temporary folder (Pi's agent directory, a project
 *   folder, the session files and the projection database), removed at `shutdown()`, or
 *   at the latest when the process exits.
 * - The package's own extension (`/state:*`, the presence row, the transcript renderers)
 *   is loaded first, as `pi install` loads it; Pi's built-in tools are off.
 * - An error an extension reports (a command or event handler that throws, a failed
 *   load) fails the call that caused it.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import {
  createAgentSessionFromServices,
  createAgentSessionRuntime,
  createAgentSessionServices,
  ModelRuntime,
  SessionManager,
  type AgentSession,
  type AgentSessionRuntime,
  type ExtensionFactory,
} from "@earendil-works/pi-coding-agent";
import { fauxAssistantMessage, fauxProvider, fauxToolCall, type AssistantMessage } from "@earendil-works/pi-ai";
import {
  forgetStoresUnder,
  historyOf,
  shared,
  STATE_PREFIX,
  storeFor,
  storedAt,
  type HistoryEntry,
  type PiContext,
  type Scope,
  type StoredValue,
} from "./index.ts";

export { fauxAssistantMessage, fauxToolCall };

/** A tool call's arguments (JSON). */
export type ToolArgs = Parameters<typeof fauxToolCall>[1];

/** One scripted model reply: a text answer, or a whole assistant message (see [`toolCall`]). */
export type Reply = string | AssistantMessage;

/** A model reply that calls `name` with `args` (Pi runs the tool, then asks the model again). */
export function toolCall(name: string, args: ToolArgs): AssistantMessage {
  return fauxAssistantMessage(fauxToolCall(name, args), { stopReason: "toolUse" });
}

/** A model reply that calls several tools at once. */
export function toolCalls(calls: Array<[name: string, args: ToolArgs]>): AssistantMessage {
  return fauxAssistantMessage(
    calls.map(([n, a]) => fauxToolCall(n, a)),
    { stopReason: "toolUse" },
  );
}

export interface StartOptions {
  /**
   * The extensions to load: files or package folders (resolved against the current
   * directory, as `pi -e` resolves them), `file:` URLs, or inline factories.
   */
  extensions?: Array<string | URL | ExtensionFactory>;
  /** Load the package's own extension first (default `true`). */
  packageExtension?: boolean;
  /** Open this session file (else a new session). */
  session?: string;
  /** Work in this folder and keep it (default: a new temporary folder, removed at `shutdown`). */
  dir?: string;
  /**
   * `true` (default): a UI that records notifications and answers dialogs (`ctx.hasUI`,
   * Pi's RPC mode). `false`: print mode (`pi -p`): no UI, and what commands print is
   * collected in `printed`.
   */
  ui?: boolean;
  /** How the UI answers `ctx.ui.confirm` (default: no), `select` and `input` (default: nothing). */
  answers?: {
    confirm?: boolean | ((title: string, message: string) => boolean | Promise<boolean>);
    select?: (title: string, options: string[]) => string | undefined;
    input?: (title: string) => string | undefined;
  };
  /** The agent's `settings.json` (for example `{ sessionState: { databasePath: "…" } }`). */
  settings?: Record<string, unknown>;
  /** What the model answers once the scripted replies are used up (default `"ok"`). */
  defaultReply?: string;
  /** Keep Pi's built-in tools (read, bash, edit, write) on (default: off). */
  builtinTools?: boolean;
}

/** A notification an extension showed through `ctx.ui.notify`. */
export interface Note {
  message: string;
  type: "info" | "warning" | "error";
}

/** A running Pi. */
export interface TestPi {
  /** The folder it works in: `agent/` (Pi's agent directory) and `project/` (the cwd). */
  readonly dir: string;
  readonly agentDir: string;
  readonly cwd: string;
  /** Pi's runtime and current session (replaced by `fork`, `reopen` and `newSession`). */
  readonly runtime: AgentSessionRuntime;
  readonly session: AgentSession;
  readonly sessionManager: SessionManager;
  /** The session file (Pi creates it at the first message). */
  readonly file: string | undefined;
  /** Pi's current leaf. */
  readonly leaf: string | null;
  /** The projection database the package's extension uses. */
  readonly databasePath: string;
  /** What `ctx.ui.notify` showed, oldest first. */
  readonly notes: Note[];
  /** The questions `ctx.ui.confirm` asked. */
  readonly confirms: string[];
  /** What commands wrote in print mode (`ui: false`): stdout's text, oldest first. */
  readonly printed: string[];
  /** What commands wrote to stderr in print mode (their errors). */
  readonly stderr: string[];
  /** Errors extensions reported (each also fails the call that caused it). */
  readonly errors: string[];
  /** Queues model replies for the next turns. */
  reply(...replies: Reply[]): void;
  /** Sends a user message; `replies` are queued first. Resolves when the run is over. */
  prompt(text: string, ...replies: Reply[]): Promise<void>;
  /** Runs a registered slash command (`"/name args"`); an unknown command throws. */
  command(line: string): Promise<void>;
  /** Moves Pi's leaf to `entryId`, as `/tree` does (no summary). */
  navigate(entryId: string): Promise<void>;
  /** `/fork`: a new session file holding the path to `entryId` (default: the leaf); the extensions restart. */
  fork(entryId?: string): Promise<void>;
  /** `/resume` of this session's file: the extensions restart on the file as it is on disk. */
  reopen(): Promise<void>;
  /** `/new`: a new, empty session. */
  newSession(): Promise<void>;
  /**
   * The value of a plugin's state at Pi's leaf, as stored (scope default `"session"`):
   * whatever the state version it was written under, not migrated.
   */
  state<T = unknown>(pluginId: string, scope?: Scope): T | undefined;
  /** That value with the state version it was written under and the entry that set it. */
  stored<T = unknown>(pluginId: string, scope?: Scope): StoredValue<T>;
  /** The events that made that value, oldest first. */
  history<T = unknown>(pluginId: string, scope?: Scope): HistoryEntry<T>[];
  /** The state events in the session (of one plugin when given), in file order. */
  events(pluginId?: string): Array<{ id: string; parentId: string | null; customType: string; data: unknown }>;
  /**
   * How Pi's TUI transcript draws the custom entry `entryId` (through the registered entry
   * renderer, without colours, trailing spaces trimmed); `undefined` when nothing is drawn.
   */
  render(entryId: string, options?: { expanded?: boolean; width?: number }): string[] | undefined;
  /** A context as extensions get it (for calling an API directly from the test). */
  context(): PiContext;
  /** `session_shutdown`, then disposes Pi and removes the temporary folder. */
  shutdown(): Promise<void>;
}

const here = path.dirname(fileURLToPath(import.meta.url));
/** The package folder: Pi loads what its package.json lists under `pi.extensions`. */
const PACKAGE_DIR = path.resolve(here, "..");

/** Folders to remove if the process exits before `shutdown()` (a failed test). */
const leftovers = new Set<string>();
let exitHook = false;
function removeAtExit(dir: string): void {
  leftovers.add(dir);
  if (exitHook) return;
  exitHook = true;
  process.on("exit", () => {
    for (const d of leftovers) fs.rmSync(d, { recursive: true, force: true });
  });
}

/** Answers every UI call Pi may make; records notifications and questions. */
function uiContext(o: StartOptions, notes: Note[], confirms: string[]) {
  const none = () => {};
  return {
    notify: (message: string, type: Note["type"] = "info") => void notes.push({ message, type }),
    confirm: async (title: string, message: string) => {
      confirms.push(message);
      const a = o.answers?.confirm;
      return typeof a === "function" ? await a(title, message) : (a ?? false);
    },
    select: async (title: string, options: string[]) => o.answers?.select?.(title, options),
    input: async (title: string) => o.answers?.input?.(title),
    editor: async () => undefined,
    custom: async () => undefined,
    onTerminalInput: () => none,
    setStatus: none,
    setWorkingMessage: none,
    setWorkingVisible: none,
    setWorkingIndicator: none,
    setHiddenThinkingLabel: none,
    setWidget: none,
    setFooter: none,
    setHeader: none,
    setTitle: none,
    pasteToEditor: none,
    setEditorText: none,
    getEditorText: () => "",
    addAutocompleteProvider: none,
    setEditorComponent: none,
    getEditorComponent: () => undefined,
    getAllThemes: () => [],
    getTheme: () => undefined,
    setTheme: () => ({ success: false, error: "no UI theme in tests" }),
    getToolsExpanded: () => false,
    setToolsExpanded: none,
  };
}

/** A theme that draws text as it is (no colours). */
const plainTheme = new Proxy(
  {},
  { get: () => (...args: unknown[]) => args[args.length - 1] },
);

function extensionPath(e: string | URL): string {
  return e instanceof URL ? fileURLToPath(e) : path.resolve(e);
}

/** Starts Pi with `options.extensions` in a new temporary folder (see the module docs). */
export async function startPi(options: StartOptions = {}): Promise<TestPi> {
  const owned = options.dir === undefined;
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "pi-test-"));
  if (owned) removeAtExit(dir);
  try {
    return await start(options, dir, owned);
  } catch (e) {
    if (owned) {
      fs.rmSync(dir, { recursive: true, force: true });
      leftovers.delete(dir);
    }
    throw e;
  }
}

async function start(o: StartOptions, dir: string, owned: boolean): Promise<TestPi> {
  const agentDir = path.join(dir, "agent");
  const cwd = path.join(dir, "project");
  fs.mkdirSync(agentDir, { recursive: true });
  fs.mkdirSync(cwd, { recursive: true });
  if (o.settings) fs.writeFileSync(path.join(agentDir, "settings.json"), JSON.stringify(o.settings, null, 2));
  // Pi and the package both find the agent directory here (sessions, settings, database).
  const previousAgentDir = process.env.PI_CODING_AGENT_DIR;
  process.env.PI_CODING_AGENT_DIR = agentDir;

  const faux = fauxProvider();
  const queue: AssistantMessage[] = [];
  const next = () => queue.shift() ?? fauxAssistantMessage(o.defaultReply ?? "ok");
  const refill = () => {
    if (faux.getPendingResponseCount() < 16) faux.appendResponses(Array.from({ length: 64 }, () => next));
  };
  refill();
  const modelRuntime = await ModelRuntime.create({
    authPath: path.join(agentDir, "auth.json"),
    modelsPath: null,
    allowModelNetwork: false,
    refreshOnCreate: false,
  });
  modelRuntime.registerNativeProvider(faux.provider);

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
  const ui = o.ui === false ? undefined : uiContext(o, notes, confirms);

  const runtime = await createAgentSessionRuntime(
    async ({ cwd, agentDir, sessionManager, sessionStartEvent }) => {
      const services = await createAgentSessionServices({
        cwd,
        agentDir,
        modelRuntime,
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
      ...(ui ? { uiContext: ui as never, mode: "rpc" as const } : { mode: "print" as const }),
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
          await runtime.session.reload();
        },
      },
      onError: (err) => {
        errors.push(`${err.extensionPath} (${err.event}): ${err.error}`);
      },
    });
  };
  runtime.setRebindSession(bind);
  await bind(runtime.session);

  const context = () => (runtime.session.extensionRunner as unknown as { createContext(): PiContext }).createContext();

  /** Runs `f` as the current Pi (its print-mode capture, fresh replies); fails on a new extension error. */
  const run = async (what: string, f: () => Promise<unknown>) => {
    refill();
    const before = errors.length;
    shared.printSink = (stream, text) => {
      (stream === "stdout" ? printed : stderr).push(text);
    };
    await f();
    if (errors.length > before) throw new Error(`${what}: an extension reported an error:\n${errors.slice(before).join("\n")}`);
  };
  const loadErrors = () => {
    if (errors.length > 0) throw new Error(`starting Pi: an extension reported an error:\n${errors.join("\n")}`);
  };
  loadErrors();

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
      const runner = runtime.session.extensionRunner as unknown as {
        getCommand(n: string): unknown;
        getRegisteredCommands(): Array<{ invocationName?: string; name: string }>;
      };
      if (!runner.getCommand(name)) {
        const known = runner.getRegisteredCommands().map((c) => `/${c.invocationName ?? c.name}`);
        throw new Error(`no command /${name} is registered (registered: ${known.join(", ") || "none"})`);
      }
      await run(line, () => runtime.session.prompt(line));
    },
    async navigate(entryId) {
      await run(`navigate ${entryId}`, async () => {
        const r = await runtime.session.navigateTree(entryId, { summarize: false });
        if (r.cancelled) throw new Error(`navigate ${entryId}: cancelled by an extension`);
      });
    },
    async fork(entryId) {
      const at = entryId ?? pi.leaf;
      if (!at) throw new Error("fork: the session has no entry yet");
      await run(`fork ${at}`, async () => {
        const r = await runtime.fork(at, { position: "at" });
        if (r.cancelled) throw new Error(`fork ${at}: cancelled by an extension`);
      });
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
    state<T>(pluginId: string, scope: Scope = "session") {
      return storedAt(context(), pluginId, scope).value as T | undefined;
    },
    stored<T>(pluginId: string, scope: Scope = "session") {
      return storedAt(context(), pluginId, scope) as StoredValue<T>;
    },
    history<T>(pluginId: string, scope: Scope = "session") {
      return historyOf(context(), pluginId, scope) as HistoryEntry<T>[];
    },
    events(pluginId) {
      const want = pluginId === undefined ? undefined : `${STATE_PREFIX}${pluginId}`;
      return (runtime.session.sessionManager.getEntries() as unknown as Array<Record<string, unknown>>)
        .filter((e) => e.type === "custom" && typeof e.customType === "string" && e.customType.startsWith(STATE_PREFIX))
        .filter((e) => want === undefined || e.customType === want)
        .map((e) => ({ id: e.id as string, parentId: (e.parentId as string | null) ?? null, customType: e.customType as string, data: e.data }));
    },
    render(entryId, opts = {}) {
      const entry = runtime.session.sessionManager.getEntry(entryId) as { type?: string; customType?: string } | undefined;
      if (!entry || entry.type !== "custom" || typeof entry.customType !== "string") {
        throw new Error(`render ${entryId}: no custom entry with that id`);
      }
      const renderer = (runtime.session.extensionRunner as unknown as { getEntryRenderer(t: string): Function | undefined }).getEntryRenderer(entry.customType);
      if (!renderer) return undefined;
      const component = renderer(entry, { expanded: opts.expanded ?? false, keyText: () => "", keyHint: () => "" }, plainTheme);
      if (!component) return undefined;
      // eslint-disable-next-line no-control-regex
      const sgr = /\x1b\[[0-9;]*m/g;
      return (component.render(opts.width ?? 100) as string[]).map((l) => l.replace(sgr, "").trimEnd());
    },
    context,
    async shutdown() {
      if (down) return;
      down = true;
      try {
        await runtime.dispose();
      } finally {
        if (shared.printSink) shared.printSink = undefined;
        forgetStoresUnder(dir);
        if (process.env.PI_CODING_AGENT_DIR === agentDir) {
          if (previousAgentDir === undefined) delete process.env.PI_CODING_AGENT_DIR;
          else process.env.PI_CODING_AGENT_DIR = previousAgentDir;
        }
        if (owned) {
          fs.rmSync(dir, { recursive: true, force: true });
          leftovers.delete(dir);
        }
      }
    },
  };
  return pi;
}
