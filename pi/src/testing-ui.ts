/**
 * The UI the testing kit gives Pi, as Pi's interactive TUI gives it: Pi's theme and
 * keybindings, statuses and widgets kept and drawn, components shown with `ctx.ui.custom`
 * driven by the keys a test queued, and the dialogs answered as the test said.
 */
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { initTheme } from "@earendil-works/pi-coding-agent";
import {
  Container,
  setKeybindings,
  stripTerminalSequences,
  Text,
  TuiMainScreen,
  type Component,
  type Terminal,
} from "@earendil-works/pi-tui";
import type { Note, Shown, StartOptions, UICall } from "./testing-types.ts";

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

/** What is drawn, as a person reads it: no escape sequences, no trailing spaces. */
export function plain(lines: readonly string[]): string[] {
  return lines.map((l) => stripTerminalSequences(l).trimEnd());
}

/** Pi's theme, as its TUI sets it up (`initTheme`, shared through `globalThis` as Pi shares it). */
const THEME_KEY = Symbol.for("@earendil-works/pi-coding-agent:theme");
export function piTheme(): any {
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
export async function piKeybindings(agentDir: string): Promise<any> {
  const sdk = fileURLToPath(import.meta.resolve("@earendil-works/pi-coding-agent"));
  const mod = await import(pathToFileURL(path.join(path.dirname(sdk), "core", "keybindings.js")).href);
  const km = mod.KeybindingsManager.create(agentDir);
  setKeybindings(km);
  return km;
}

/** Everything the UI of a TUI keeps that a test reads: statuses, widgets, shown components, queued keys. */
export class TuiRecord {
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
export function uiContext(o: StartOptions, notes: Note[], confirms: string[], rec: TuiRecord) {
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
