/**
 * The testing kit's types: what `startPi` takes (`StartOptions`), the running Pi it
 * returns (`TestPi`) and the records a test reads from it.
 */
import type { AgentSession, AgentSessionRuntime, ExtensionFactory, SessionManager } from "@earendil-works/pi-coding-agent";
import type { AssistantMessage, fauxToolCall, Message } from "@earendil-works/pi-ai";
import type { HistoryEntry, PiContext, Scope, StoredValue } from "./index.ts";

/** A tool call's arguments (JSON). */
export type ToolArgs = Parameters<typeof fauxToolCall>[1];

/** One scripted model reply: a text answer, or a whole assistant message (see [`toolCall`]). */
export type Reply = string | AssistantMessage;

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
