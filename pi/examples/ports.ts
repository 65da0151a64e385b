/**
 * What the tests of the ported examples share (`plan-mode.test.ts`, `preset.test.ts`,
 * `tic-tac-toe.test.ts`): where Pi's originals are, a snapshot of what the user and the
 * model see, a resume in a new process, and a differential run of one script on an
 * original and its port.
 *
 * Run as a script (`node ports.ts SPEC`), it is that new process: it resumes a session
 * with the testing kit, runs the steps of SPEC (JSON) and prints the snapshots as JSON.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { stripTerminalSequences } from "@earendil-works/pi-tui";
import { messageText, startPi, toolCall, toolCalls, type Note, type Reply, type StartOptions, type TestPi, type ToolArgs } from "@session-state/pi/testing";

const here = path.dirname(fileURLToPath(import.meta.url));

/** Pi's example extensions, in its installed package (`examples/extensions/`). */
export const ORIGINALS = path.join(path.dirname(fileURLToPath(import.meta.resolve("@earendil-works/pi-coding-agent"))), "..", "examples", "extensions");

/** Pi's original `name` (a file, or plan-mode's folder), loaded from the installed package. */
export function original(name: string): string {
  return path.join(ORIGINALS, name);
}

/** The port of `name` in this folder. */
export function port(name: string): string {
  return path.join(here, name === "plan-mode" ? "plan-mode/index.ts" : name);
}

/** One request the model got, as text: its system prompt, its tools, its messages (`role: text`). */
export interface SeenRequest {
  systemPrompt: string;
  tools: string[];
  messages: string[];
}

/** What the user and the model saw since the previous snapshot, and what the TUI shows now. */
export interface Seen {
  /** Notifications since the previous snapshot. */
  notes: Note[];
  /** Footer statuses now, by key (colours removed). */
  statuses: Record<string, string>;
  /** Widgets now, by key, as the TUI draws them. */
  widgets: Record<string, string[]>;
  /** The active tools now. */
  tools: string[];
  /** The model's requests since the previous snapshot. */
  requests: SeenRequest[];
  /** What components `ctx.ui.custom` showed since the previous snapshot drew last. */
  shown: string[][];
  /** The customTypes of the custom messages on Pi's branch now (what the transcript shows and the model is sent). */
  messages: string[];
  /** The customTypes of the custom entries on Pi's branch now (what extensions saved: a port's are `session-state/…`). */
  customs: string[];
  /** The error the step failed with (an extension's error fails the kit's call). */
  error?: string;
}

/** The kit's requests as text (a message as `role: text`). */
function requestText(r: ReturnType<TestPi["requests"]>[number]): SeenRequest {
  return { systemPrompt: r.systemPrompt, tools: r.tools, messages: r.messages.map((m) => `${m.role}: ${messageText(m)}`) };
}

/**
 * `text` with the folder `dir` written as `<dir>`, in each spelling Pi uses for it: the
 * native path, and on Windows also with forward slashes (Pi's system prompt writes its
 * working directory so: `C:/Users/…/project`). In JSON text (`json`) a backslash is escaped.
 */
export function withoutDir(text: string, dir: string, json = false): string {
  for (const form of new Set([dir, dir.replaceAll("\\", "/")])) {
    text = text.split(json ? JSON.stringify(form).slice(1, -1) : form).join("<dir>");
  }
  return text;
}

/** Takes snapshots of one Pi: each holds what happened since the previous one. */
export class Watcher {
  private notes = 0;
  private requests = 0;
  private shown = 0;
  readonly pi: TestPi;
  constructor(pi: TestPi) {
    this.pi = pi;
  }
  /** The folder paths in `value` as `<dir>`, so two Pis in two folders compare equal. */
  private norm<T>(value: T): T {
    return JSON.parse(withoutDir(JSON.stringify(value), this.pi.dir, true)) as T;
  }
  snap(error?: unknown): Seen {
    const pi = this.pi;
    const requests = pi.requests();
    const branch = pi.sessionManager.getBranch() as Array<{ type: string; customType?: string }>;
    const seen: Seen = {
      notes: pi.notes.slice(this.notes),
      statuses: pi.statuses(),
      widgets: pi.widgets(),
      tools: pi.session.getActiveToolNames(),
      requests: requests.slice(this.requests).map(requestText),
      shown: pi.shown.slice(this.shown).map((s) => s.frames.at(-1) ?? []),
      messages: branch.filter((e) => e.type === "custom_message").map((e) => e.customType!),
      customs: branch.filter((e) => e.type === "custom").map((e) => e.customType!),
    };
    if (error !== undefined) seen.error = error instanceof Error ? error.message : String(error);
    this.notes = pi.notes.length;
    this.requests = requests.length;
    this.shown = pi.shown.length;
    return this.norm(seen);
  }
}

/** A step's outcome: `f` run, then a snapshot (with the error, when `f` failed). */
export async function step(w: Watcher, f: () => Promise<unknown>): Promise<Seen> {
  try {
    await f();
  } catch (e) {
    return w.snap(e);
  }
  return w.snap();
}

/** The state events' customType prefix: a port's customs are `session-state/<plugin>`. */
export const STATE = "session-state/";

/** What the user and the model see, without what the extension saved (where an original and its port differ by design). */
export function visible(s: Seen): Omit<Seen, "customs"> {
  const { customs: _saved, ...rest } = s;
  return rest;
}

// ---------------------------------------------------------------------------------------
// What an extension offers, and how the transcript draws it
// ---------------------------------------------------------------------------------------

interface Runner {
  getRegisteredCommands(): Array<{ name: string; description?: string; extensionPath?: string }>;
  getAllRegisteredTools(): Array<{ definition: Record<string, any> }>;
  getFlags(): Map<string, { name: string; description?: string; type: string; default?: unknown }>;
  getShortcuts(bindings: unknown): Map<string, { description?: string }>;
  getMessageRenderer(customType: string): ((message: unknown, options: unknown, theme: unknown) => { render(w: number): string[] } | undefined) | undefined;
  getToolDefinition(name: string): Record<string, any> | undefined;
}
const runner = (pi: TestPi) => pi.session.extensionRunner as unknown as Runner;
const theme = (pi: TestPi) => (pi.context() as unknown as { ui: { theme: unknown } }).ui.theme;

/**
 * What an extension offers the user and the model: its commands (name, description),
 * tools (everything the model is told: name, label, description, snippet, guidelines, the
 * parameters' schema, and how calls run), flags and shortcuts. The package's own
 * `/state:*` commands are left out.
 */
export function surface(pi: TestPi) {
  const r = runner(pi);
  return {
    commands: r
      .getRegisteredCommands()
      .filter((c) => !c.name.startsWith("state:"))
      .map((c) => ({ name: c.name, description: c.description })),
    tools: r.getAllRegisteredTools().map(({ definition: d }) => ({
      name: d.name,
      label: d.label,
      description: d.description,
      promptSnippet: d.promptSnippet,
      promptGuidelines: d.promptGuidelines,
      parameters: JSON.parse(JSON.stringify(d.parameters)),
      executionMode: d.executionMode,
    })),
    flags: [...r.getFlags().values()].map((f) => ({ name: f.name, description: f.description, type: f.type, default: f.default })),
    shortcuts: [...r.getShortcuts({}).entries()].map(([k, s]) => ({ key: k, description: s.description })),
  };
}

const plainLines = (lines: string[]) => lines.map((l) => stripTerminalSequences(l).trimEnd());

/** Draws `f`'s component, or the error drawing it threw. */
function drawn(f: () => { render(w: number): string[] } | undefined, width: number): string[] | { error: string } {
  try {
    const c = f();
    return c ? plainLines(c.render(width)) : [];
  } catch (e) {
    return { error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
  }
}

/**
 * How Pi's TUI transcript draws what is on the branch through the extension's renderers,
 * collapsed and expanded, without colours: each custom message with a message renderer,
 * and each call and result of a tool with renderers. A renderer that throws gives
 * `{ error }` (Pi would show the error in its place).
 */
export function transcript(pi: TestPi, width = 60) {
  const r = runner(pi);
  const t = theme(pi);
  const calls = new Map<string, { name: string; arguments: unknown }>();
  const out: Array<{ what: string; collapsed: unknown; expanded: unknown }> = [];
  for (const e of pi.sessionManager.getBranch() as any[]) {
    if (e.type === "custom_message") {
      const render = r.getMessageRenderer(e.customType);
      if (!render) continue;
      const message = { role: "custom", customType: e.customType, content: e.content, display: e.display, details: e.details };
      out.push({
        what: e.customType,
        collapsed: drawn(() => render(message, { expanded: false }, t), width),
        expanded: drawn(() => render(message, { expanded: true }, t), width),
      });
      continue;
    }
    if (e.type !== "message") continue;
    const m = e.message;
    if (m.role === "assistant") for (const c of m.content) if (c.type === "toolCall") calls.set(c.id, c);
    if (m.role !== "toolResult") continue;
    const def = r.getToolDefinition(m.toolName);
    if (!def?.renderResult) continue;
    const call = calls.get(m.toolCallId);
    const context = { args: call?.arguments ?? {}, toolCallId: m.toolCallId, invalidate() {}, lastComponent: undefined, state: {}, cwd: pi.cwd, isError: m.isError };
    const result = { content: m.content, details: m.details };
    out.push({
      what: `${m.toolName}${m.isError ? " (error)" : ""}`,
      collapsed: [drawn(() => def.renderCall?.(call?.arguments ?? {}, t, context), width), drawn(() => def.renderResult(result, { expanded: false, isPartial: false }, t, context), width)],
      expanded: drawn(() => def.renderResult(result, { expanded: true, isPartial: false }, t, context), width),
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// A resume in a new process
// ---------------------------------------------------------------------------------------

/** A scripted reply as JSON: a text, a tool call, several tool calls. */
export type ReplySpec = string | { call: string; args: ToolArgs } | { calls: Array<[string, ToolArgs]> };

/** What the new process does after it resumed the session (a snapshot after each). */
export type StepSpec =
  | { command: string }
  | { prompt: string; replies?: ReplySpec[] }
  | { shortcut: string }
  | { keys: string[]; command: string };

export interface ResumeSpec {
  /** The kit's folder of the Pi that wrote the session (its agent directory holds the database). */
  dir: string;
  /** The session file. */
  session: string;
  /** The extension: a port or an original. */
  extension: string;
  flags?: Record<string, boolean | string>;
  builtinTools?: boolean;
  settings?: Record<string, unknown>;
  /** What `ctx.ui.select` answers (default: nothing). */
  select?: string;
  /** The terminal's width (default the kit's). */
  width?: number;
  steps: StepSpec[];
}

function reply(r: ReplySpec): Reply {
  if (typeof r === "string") return r;
  if ("call" in r) return toolCall(r.call, r.args);
  return toolCalls(r.calls);
}

/**
 * Resumes `spec.session` in a new Node process (the kit, `session` and `dir`: the same
 * agent directory), runs `spec.steps`, and returns a snapshot after the resume and one
 * after each step.
 */
export function resumeInNewProcess(spec: ResumeSpec): Seen[] {
  const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url), JSON.stringify(spec)], {
    encoding: "utf8",
    env: process.env,
    timeout: 180_000,
  });
  assert.equal(r.status, 0, `the resumed process failed (status ${r.status}, signal ${r.signal}):\n${r.stderr}\n${r.stdout}`);
  const line = r.stdout.split("\n").find((l) => l.startsWith("SEEN "));
  assert.ok(line, `the resumed process printed no snapshots:\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(line.slice("SEEN ".length)) as Seen[];
}

async function child(spec: ResumeSpec): Promise<void> {
  const options: StartOptions = {
    dir: spec.dir,
    session: spec.session,
    extensions: [spec.extension],
    ...(spec.flags ? { flags: spec.flags } : {}),
    ...(spec.builtinTools ? { builtinTools: true } : {}),
    ...(spec.settings ? { settings: spec.settings } : {}),
    ...(spec.width ? { width: spec.width } : {}),
    answers: { select: () => spec.select },
  };
  let pi: TestPi;
  try {
    pi = await startPi(options);
  } catch (e) {
    // An extension that throws while the session starts fails the kit's start.
    const error = withoutDir(e instanceof Error ? e.message : String(e), spec.dir);
    process.stdout.write(`SEEN ${JSON.stringify([{ error }])}\n`);
    // The kit left that Pi running (it failed to start): nothing else is to be done.
    process.exit(0);
  }
  const w = new Watcher(pi);
  const seen: Seen[] = [w.snap()];
  for (const s of spec.steps) {
    if ("keys" in s) {
      pi.keys(...s.keys);
      seen.push(await step(w, () => pi.command(s.command)));
    } else if ("command" in s) seen.push(await step(w, () => pi.command(s.command)));
    else if ("shortcut" in s) seen.push(await step(w, () => pi.shortcut(s.shortcut)));
    else seen.push(await step(w, () => pi.prompt(s.prompt, ...(s.replies ?? []).map(reply))));
  }
  await pi.shutdown();
  process.stdout.write(`SEEN ${JSON.stringify(seen)}\n`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await child(JSON.parse(process.argv[2]!) as ResumeSpec);
}
