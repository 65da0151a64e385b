/**
 * "Resume in a new process" for the examples' tests: `inNewProcess(…)` starts a new Node
 * process that opens a saved session with the testing kit (the same extensions, the
 * folder the first Pi worked in, so the same agent directory and database), runs a few
 * steps there and returns what the user and the model saw after each one.
 *
 * The first Pi must be shut down first (`startPi({ dir })` keeps `dir` at `shutdown()`),
 * as a person quits Pi before resuming the session in another one.
 *
 *   const seen = inNewProcess({ dir, session: file, extensions: [TODO], steps: [
 *     { command: "/todos", keys: [key.escape] },
 *     { prompt: "list", replies: [toolCall("todo", { action: "list" }), "ok"] },
 *   ] });
 */
import { spawnSync } from "node:child_process";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { messageText, startPi, type Note, type Reply, type Shown, type StartOptions, type TestPi } from "@session-state/pi/testing";

/** One step: a user message with the model's scripted replies, or a command (keys queued first). */
export type Step = { prompt: string; replies?: Reply[] } | { command: string; keys?: string[] };

/** What the user and the model saw after a step. */
export interface Seen {
  /** The notifications the step showed. */
  notes: Note[];
  /** The components the step showed. */
  shown: Shown[];
  statuses: Record<string, string>;
  widgets: Record<string, string[]>;
  /** The last request the model got during the step: the system prompt and each message as `role: text`. */
  request?: { systemPrompt: string; tools: string[]; messages: string[] };
}

export interface NewProcess {
  /** The folder the first Pi worked in (its `dir`). */
  dir: string;
  /** The session file to open. */
  session: string;
  /** The extensions, as paths (a `file:` URL is turned into its path). */
  extensions: Array<string | URL>;
  steps: Step[];
  /** More `startPi` options that JSON can carry (`flags`, `width`, `settings`, `mode`). */
  options?: Pick<StartOptions, "flags" | "width" | "settings" | "mode">;
}

const here = fileURLToPath(import.meta.url);

/** Runs `o.steps` in a new process on `o.session`; what was seen after each step. */
export function inNewProcess(o: NewProcess): Seen[] {
  const input = JSON.stringify({ ...o, extensions: o.extensions.map((e) => (e instanceof URL ? fileURLToPath(e) : path.resolve(e))) });
  const r = spawnSync(process.execPath, [here], { input, encoding: "utf8", cwd: path.dirname(here), timeout: 120_000 });
  if (r.status !== 0) throw new Error(`the new process failed (status ${r.status}, signal ${r.signal}):\n${r.stderr}\n${r.stdout}`);
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as Seen[];
}

/** Runs one step in `pi` and returns what was seen (the same record in this process as in a new one). */
export async function see(pi: TestPi, s: Step): Promise<Seen> {
  const notes = pi.notes.length;
  const shown = pi.shown.length;
  const requests = pi.requests().length;
  if ("prompt" in s) await pi.prompt(s.prompt, ...(s.replies ?? []));
  else {
    pi.keys(...(s.keys ?? []));
    await pi.command(s.command);
  }
  const req = pi.requests().length > requests ? pi.lastRequest() : undefined;
  return {
    notes: pi.notes.slice(notes),
    shown: pi.shown.slice(shown),
    statuses: pi.statuses(),
    widgets: pi.widgets(),
    ...(req ? { request: { systemPrompt: req.systemPrompt, tools: req.tools, messages: req.messages.map((m) => `${m.role}: ${messageText(m)}`) } } : {}),
  };
}

if (process.argv[1] && pathToFileURL(process.argv[1]).href === import.meta.url) {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  const o = JSON.parse(Buffer.concat(chunks).toString("utf8")) as NewProcess;
  const pi = await startPi({ ...o.options, dir: o.dir, session: o.session, extensions: o.extensions });
  const seen: Seen[] = [];
  try {
    for (const s of o.steps) seen.push(await see(pi, s));
  } finally {
    await pi.shutdown();
  }
  process.stdout.write(`${JSON.stringify(seen)}\n`);
}
