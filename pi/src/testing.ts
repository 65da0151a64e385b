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
 * - The extensions run as in Pi's TUI (`ctx.mode` is `"tui"`, `ctx.hasUI` is true) with
 *   Pi's own theme (`ctx.ui.theme`, "dark"): what they set with `setStatus` and
 *   `setWidget` is kept for the test to read, and a component shown with `ctx.ui.custom`
 *   is driven by the keys the test queued with `pi.keys(…)`.
 * - Every request the model gets is recorded: `pi.requests()` / `pi.lastRequest()` give
 *   its system prompt, its tools and its messages.
 * - The package's own extension (`/state:*`, the presence row, the transcript renderers)
 *   is loaded first, as `pi install` loads it; Pi's built-in tools are off.
 * - An error an extension reports (a command or event handler that throws, a failed
 *   load) fails the call that caused it; `pi.command()` rejects with the error the
 *   command's handler threw, as thrown (its class, fields and `cause`).
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  createAgentSessionFromServices,
  createAgentSessionRuntime,
  createAgentSessionServices,
  initTheme,
  ModelRuntime,
  SessionManager,
  type AgentSession,
  type AgentSessionRuntime,
  type ExtensionFactory,
} from "@earendil-works/pi-coding-agent";
import {
  fauxAssistantMessage,
  fauxProvider,
  fauxToolCall,
  getCurrentSystemPrompt,
  getCurrentTools,
  type AssistantMessage,
  type Message,
} from "@earendil-works/pi-ai";
import {
  Container,
  setKeybindings,
  stripTerminalSequences,
  Text,
  TuiMainScreen,
  type Component,
  type Terminal,
} from "@earendil-works/pi-tui";
import { STATE_PREFIX, type HistoryEntry, type PiContext, type Scope, type StoredValue } from "./index.ts";
import { forgetStoresUnder, historyOf, shared, storedAt, storeFor } from "./internal.ts";

export { fauxAssistantMessage, fauxToolCall };

/** A tool call's arguments (JSON). */
export type ToolArgs = Parameters<typeof fauxToolCall>[1];

/** One scripted model reply: a text answer, or a whole assistant message (see [`toolCall`]). */
export type Reply = string | AssistantMessage;

/** A registered command's handler, as Pi calls it. */
type CommandHandler = (args: string, ctx: unknown) => unknown;

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

/**
 * Keys as a terminal sends them (legacy sequences, which Pi's TUI reads when the Kitty
 * keyboard protocol is off), for `pi.keys(…)`. Any other string is typed as it is.
 */
export const key = {
  escape: "\x1b",
  enter: "\r",
  tab: "\t",
  space: " ",
  backspace: "\x7f",
  up: "\x1b[A",
  down: "\x1b[B",
  right: "\x1b[C",
  left: "\x1b[D",
  home: "\x1b[H",
  end: "\x1b[F",
  pageUp: "\x1b[5~",
  pageDown: "\x1b[6~",
  /** Ctrl plus a letter (`key.ctrl("c")`). */
  ctrl: (letter: string) => String.fromCharCode(letter.toLowerCase().charCodeAt(0) & 0x1f),
} as const;

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
   * `true` (default): a UI, as Pi's interactive TUI gives it (`ctx.hasUI`, `ctx.mode`
   * `"tui"`, or `"rpc"` with `mode`). `false`: print mode (`pi -p`): no UI, and what
   * commands print is collected in `printed`.
   */
  ui?: boolean;
  /** The mode the UI reports in `ctx.mode` (default `"tui"`; `"rpc"` as Pi's RPC mode). */
  mode?: "tui" | "rpc";
  /** How the UI answers `ctx.ui.confirm` (default: no), `select`, `input` and `editor` (default: nothing). */
  answers?: {
    confirm?: boolean | ((title: string, message: string) => boolean | Promise<boolean>);
    select?: (title: string, options: string[]) => string | undefined;
    input?: (title: string, placeholder?: string) => string | undefined;
    editor?: (title: string, prefill?: string) => string | undefined;
  };
  /** The terminal's width in columns: what components, widgets and entries are drawn at (default 100). */
  width?: number;
  /** Values of extension flags, as given on Pi's command line (`{ plan: true }` for `--plan`). */
  flags?: Record<string, boolean | string>;
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

/** A `setStatus` or `setWidget` call, as the user would see it (colours removed). */
export type UICall =
  | { method: "setStatus"; key: string; text: string | undefined }
  | { method: "setWidget"; key: string; lines: string[] | undefined; placement: "aboveEditor" | "belowEditor" };

/** A component an extension showed with `ctx.ui.custom`, driven by the keys queued with `pi.keys`. */
export interface Shown {
  /** Shown as an overlay (`{ overlay: true }`). */
  overlay: boolean;
  /** What it drew (colours removed, trailing spaces trimmed): before the first key, then after each key that left it open. */
  frames: string[][];
  /** The keys it was given, in order. */
  keys: string[];
  /** Whether it called `done`. */
  closed: boolean;
  /** The value it passed to `done`. */
  result: unknown;
}

/** One request the model got: what it was sent. */
export interface ModelRequest {
  /** The system prompt in force (Pi's system messages replayed, as a provider sends it). */
  systemPrompt: string;
  /** The names of the tools it may call. */
  tools: string[];
  /** The conversation (user, assistant and tool-result messages; system messages left out), a copy. */
  messages: Message[];
}

/** A message's text as the model reads it: text parts, tool calls as `name(args)`, tool results' text. */
export function messageText(m: Message): string {
  if (typeof m.content === "string") return m.content;
  return m.content
    .map((c) => {
      if (c.type === "text") return c.text;
      if (c.type === "toolCall") return `${c.name}(${JSON.stringify(c.arguments)})`;
      if (c.type === "thinking") return "";
      return `[${c.type}]`;
    })
    .join("\n");
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
  /** Every `setStatus` and `setWidget` call, oldest first. */
  readonly uiCalls: UICall[];
  /** The components `ctx.ui.custom` showed, oldest first. */
  readonly shown: Shown[];
  /** Queues model replies for the next turns. */
  reply(...replies: Reply[]): void;
  /** Sends a user message; `replies` are queued first. Resolves when the run is over. */
  prompt(text: string, ...replies: Reply[]): Promise<void>;
  /**
   * Runs a registered slash command (`"/name args"`); an unknown command throws. An error
   * the command's handler throws rejects this call as thrown: the same object, so its
   * class (`instanceof StateValidationError`), its fields (`.path`) and its `cause` hold.
   */
  command(line: string): Promise<void>;
  /** Runs the handler of the shortcut an extension registered for `keyId` (`"ctrl+alt+p"`). */
  shortcut(keyId: string): Promise<void>;
  /**
   * Queues keys for the next components `ctx.ui.custom` shows (see [`key`]). A component
   * takes keys until it calls `done`; one still open when the keys run out fails the call
   * that showed it. Keys it did not take stay queued for the next one.
   */
  keys(...keys: string[]): void;
  /** Moves Pi's leaf to `entryId`, as `/tree` does (no summary). */
  navigate(entryId: string): Promise<void>;
  /**
   * A new session file holding the path to `entryId` (default: the leaf); the extensions
   * restart. `position: "at"` (the default) keeps `entryId` itself; `"before"` is
   * `/fork` on a user message: the new file stops at that message's parent.
   */
  fork(entryId?: string, options?: { position?: "at" | "before" }): Promise<void>;
  /** `/clone`: a new session file holding the whole current branch; the extensions restart. */
  clone(): Promise<void>;
  /** `/resume` of this session's file: the extensions restart on the file as it is on disk. */
  reopen(): Promise<void>;
  /** `/new`: a new, empty session. */
  newSession(): Promise<void>;
  /** `/reload`: the extensions are loaded again and get `session_start` (reason `"reload"`). */
  reload(): Promise<void>;
  /**
   * `/compact`: the model (the next scripted reply) summarizes the branch up to the kept
   * recent part. A short test session needs `settings: { compaction: { keepRecentTokens: 1 } }`
   * to have anything to compact.
   */
  compact(customInstructions?: string): Promise<void>;
  /**
   * The value of a plugin's state at Pi's leaf, as stored, in `scope` (required: the
   * events of a state are read with the scope the extension opened it with): whatever
   * the state version it was written under, not migrated.
   */
  state<T = unknown>(pluginId: string, scope: Scope): T | undefined;
  /** That value with the state version it was written under and the entry that set it. */
  stored<T = unknown>(pluginId: string, scope: Scope): StoredValue<T>;
  /** The events that made that value, oldest first. */
  history<T = unknown>(pluginId: string, scope: Scope): HistoryEntry<T>[];
  /** The state events in the session (of one plugin when given), in file order. */
  events(pluginId?: string): Array<{ id: string; parentId: string | null; customType: string; data: unknown }>;
  /** The statuses set with `ctx.ui.setStatus` now, by key (colours removed). */
  statuses(): Record<string, string>;
  /** The widgets set with `ctx.ui.setWidget` now, by key: the lines drawn, as [`widget`]. */
  widgets(): Record<string, string[]>;
  /**
   * How the TUI draws the widget `key` now (Pi's padding, colours removed, trailing spaces
   * trimmed); `undefined` when there is none.
   */
  widget(key: string): string[] | undefined;
  /** Every request the model got, oldest first. */
  requests(): ModelRequest[];
  /** The last request the model got. */
  lastRequest(): ModelRequest | undefined;
  /**
   * How Pi's TUI transcript draws the entry `entryId`, without colours, trailing spaces
   * trimmed: a custom entry through its registered entry renderer; a tool result through
   * its tool's `renderCall` (the call's arguments) and `renderResult`, the call's lines
   * first, as the tool's row shows them (without the row's frame). `undefined` when
   * nothing is registered to draw it.
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
    for (const d of leftovers) {
      // The stores' databases there are closed first: Windows refuses to delete an open file.
      forgetStoresUnder(d);
      fs.rmSync(d, { recursive: true, force: true });
    }
  });
}

/** What is drawn, as a person reads it: no escape sequences, no trailing spaces. */
function plain(lines: readonly string[]): string[] {
  return lines.map((l) => stripTerminalSequences(l).trimEnd());
}

/** Pi's theme, as its TUI sets it up (`initTheme`, shared through `globalThis` as Pi shares it). */
const THEME_KEY = Symbol.for("@earendil-works/pi-coding-agent:theme");
function piTheme(): any {
  const g = globalThis as Record<symbol, unknown>;
  if (!g[THEME_KEY]) initTheme("dark");
  return g[THEME_KEY];
}

/** A terminal that draws nothing and reads nothing: the components' TUI never starts. */
class SilentTerminal implements Terminal {
  readonly columns: number;
  readonly rows = 40;
  constructor(columns: number) {
    this.columns = columns;
  }
  get kittyProtocolActive() {
    return false;
  }
  start() {}
  stop() {}
  async drainInput() {}
  write() {}
  moveBy() {}
  hideCursor() {}
  showCursor() {}
  clearLine() {}
  clearFromCursor() {}
  clearScreen() {}
  setTitle() {}
  setProgress() {}
  setProgramStatus() {}
}

/** Pi's own keybindings manager (its interactive mode's), for `ctx.ui.custom`'s third argument. */
async function piKeybindings(agentDir: string): Promise<any> {
  const sdk = fileURLToPath(import.meta.resolve("@earendil-works/pi-coding-agent"));
  const mod = await import(pathToFileURL(path.join(path.dirname(sdk), "core", "keybindings.js")).href);
  const km = mod.KeybindingsManager.create(agentDir);
  setKeybindings(km);
  return km;
}

/** Everything the UI of a TUI keeps that a test reads: statuses, widgets, shown components, queued keys. */
class TuiRecord {
  readonly uiCalls: UICall[] = [];
  readonly shown: Shown[] = [];
  readonly queued: string[] = [];
  readonly statuses = new Map<string, string>();
  readonly widgets = new Map<string, { component: Component & { dispose?(): void }; placement: "aboveEditor" | "belowEditor" }>();
  readonly tui: TuiMainScreen;
  readonly width: number;
  readonly keybindings: unknown;

  constructor(width: number, keybindings: unknown) {
    this.width = width;
    this.keybindings = keybindings;
    this.tui = new TuiMainScreen(new SilentTerminal(width));
    // Never started: it never draws; components may still ask it to (requestRender).
    this.tui.stop();
  }

  setStatus(key: string, text: string | undefined) {
    if (text === undefined) this.statuses.delete(key);
    else this.statuses.set(key, text);
    this.uiCalls.push({ method: "setStatus", key, text: text === undefined ? undefined : stripTerminalSequences(text) });
  }

  /** As Pi's interactive mode: a string array becomes padded text lines (at most 10), a factory is called once. */
  setWidget(key: string, content: unknown, options?: { placement?: "aboveEditor" | "belowEditor" }) {
    const placement = options?.placement ?? "aboveEditor";
    this.widgets.get(key)?.component.dispose?.();
    this.widgets.delete(key);
    if (content === undefined) {
      this.uiCalls.push({ method: "setWidget", key, lines: undefined, placement });
      return;
    }
    let component: Component & { dispose?(): void };
    if (Array.isArray(content)) {
      const c = new Container();
      for (const line of content.slice(0, 10)) c.addChild(new Text(String(line), 1, 0));
      if (content.length > 10) c.addChild(new Text(piTheme().fg("muted", "... (widget truncated)"), 1, 0));
      component = c;
    } else {
      component = (content as (tui: unknown, theme: unknown) => Component)(this.tui, piTheme());
    }
    this.widgets.set(key, { component, placement });
    this.uiCalls.push({ method: "setWidget", key, lines: plain(component.render(this.width)), placement });
  }

  widget(key: string): string[] | undefined {
    const w = this.widgets.get(key);
    return w ? plain(w.component.render(this.width)) : undefined;
  }

  /** Shows the component, feeds it the queued keys until it calls `done`, records what it drew. */
  async custom(factory: (tui: unknown, theme: unknown, kb: unknown, done: (r: unknown) => void) => unknown, options?: { overlay?: boolean }) {
    const shown: Shown = { overlay: options?.overlay ?? false, frames: [], keys: [], closed: false, result: undefined };
    this.shown.push(shown);
    const done = (result: unknown) => {
      if (shown.closed) return;
      shown.closed = true;
      shown.result = result;
    };
    const component = (await factory(this.tui, piTheme(), this.keybindings, done)) as Component & { dispose?(): void };
    try {
      if (shown.closed) return shown.result;
      shown.frames.push(plain(component.render(this.width)));
      while (!shown.closed && this.queued.length > 0) {
        const k = this.queued.shift()!;
        shown.keys.push(k);
        component.handleInput?.(k);
        // One turn of the event loop: a `done` called from a promise the key started lands.
        await new Promise((r) => setImmediate(r));
        if (!shown.closed) shown.frames.push(plain(component.render(this.width)));
      }
      if (!shown.closed) {
        throw new Error(
          `ctx.ui.custom: the component is still open after the keys ${JSON.stringify(shown.keys)}; queue the keys that close it with pi.keys(…). It drew:\n${shown.frames.at(-1)!.join("\n")}`,
        );
      }
      return shown.result;
    } finally {
      component.dispose?.();
    }
  }

  /** What the TUI clears when a session is replaced or reloaded (Pi's `resetExtensionUI`). */
  reset() {
    for (const w of this.widgets.values()) w.component.dispose?.();
    this.widgets.clear();
    this.statuses.clear();
  }
}

/** Answers every UI call Pi may make; records notifications, questions, statuses, widgets and components. */
function uiContext(o: StartOptions, notes: Note[], confirms: string[], rec: TuiRecord) {
  const none = () => {};
  let editorText = "";
  return {
    notify: (message: string, type: Note["type"] = "info") => void notes.push({ message, type }),
    confirm: async (title: string, message: string) => {
      confirms.push(message);
      const a = o.answers?.confirm;
      return typeof a === "function" ? await a(title, message) : (a ?? false);
    },
    select: async (title: string, options: string[]) => o.answers?.select?.(title, options),
    input: async (title: string, placeholder?: string) => o.answers?.input?.(title, placeholder),
    editor: async (title: string, prefill?: string) => o.answers?.editor?.(title, prefill),
    custom: (factory: any, options?: { overlay?: boolean }) => rec.custom(factory, options),
    onTerminalInput: () => none,
    setStatus: (key: string, text: string | undefined) => rec.setStatus(key, text),
    setWorkingMessage: none,
    setWorkingVisible: none,
    setWorkingIndicator: none,
    setHiddenThinkingLabel: none,
    setWidget: (key: string, content: unknown, options?: { placement?: "aboveEditor" | "belowEditor" }) => rec.setWidget(key, content, options),
    setFooter: none,
    setHeader: none,
    setTitle: none,
    pasteToEditor: (text: string) => void (editorText += text),
    setEditorText: (text: string) => void (editorText = text),
    getEditorText: () => editorText,
    addAutocompleteProvider: none,
    setEditorComponent: none,
    getEditorComponent: () => undefined,
    get theme() {
      return piTheme();
    },
    getAllThemes: () => [],
    getTheme: () => undefined,
    setTheme: () => ({ success: false, error: "the testing kit keeps Pi's dark theme" }),
    getToolsExpanded: () => false,
    setToolsExpanded: none,
  };
}

function extensionPath(e: string | URL): string {
  return e instanceof URL ? fileURLToPath(e) : path.resolve(e);
}

/** A copy of what the model was sent (messages are JSON: Pi writes them to the session file). */
function requestOf(messages: Message[]): ModelRequest {
  return {
    systemPrompt: getCurrentSystemPrompt(messages),
    tools: getCurrentTools(messages).map((t) => t.name),
    messages: JSON.parse(JSON.stringify(messages.filter((m) => m.role !== "system"))) as Message[],
  };
}

/** Starts Pi with `options.extensions` in a new temporary folder (see the module docs). */
export async function startPi(options: StartOptions = {}): Promise<TestPi> {
  const owned = options.dir === undefined;
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "pi-test-"));
  if (owned) removeAtExit(dir);
  const previousAgentDir = process.env.PI_CODING_AGENT_DIR;
  try {
    return await start(options, dir, owned);
  } catch (e) {
    // A Pi that failed to start leaves nothing behind: its agent directory is no longer
    // the process's, and its folder is removed.
    if (process.env.PI_CODING_AGENT_DIR === path.join(dir, "agent")) {
      if (previousAgentDir === undefined) delete process.env.PI_CODING_AGENT_DIR;
      else process.env.PI_CODING_AGENT_DIR = previousAgentDir;
    }
    forgetStoresUnder(dir);
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
  const requests: ModelRequest[] = [];
  const next = (context: { messages: Message[] }) => {
    requests.push(requestOf(context.messages));
    return queue.shift() ?? fauxAssistantMessage(o.defaultReply ?? "ok");
  };
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
        if (owned) {
          fs.rmSync(dir, { recursive: true, force: true });
          leftovers.delete(dir);
        }
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
