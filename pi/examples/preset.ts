/**
 * Presets, on `@session-state/pi`: a port of Pi's example `examples/extensions/preset.ts`
 * with the same flag, command, shortcut, notifications and system prompt.
 *
 *   pi -e ./pi -e ./pi/examples/preset.ts --preset plan
 *
 * A preset names a model (`provider` + `model`), a `thinkingLevel`, the `tools` to
 * activate and `instructions` appended to the system prompt. Presets are read at session
 * start (and on reload) from `presets.json` in Pi's agent directory and from
 * `.pi/presets.json` in the project, the project's winning on a name both define.
 * `--preset NAME` activates one at session start; `/preset NAME` activates one, `/preset`
 * opens a selector (with "(none)" to clear), Ctrl+Shift+U cycles (none) → presets in name
 * order. The footer shows `preset:NAME`.
 *
 * State (`openSessionState`, plugin `preset`): the active preset, **branch** scope, `{ name,
 * before }`; absent when none is active. Which preset is active is part of the
 * conversation it was chosen in, as the instructions it puts in the system prompt are:
 * `/tree` back to before `/preset` has no preset, a sibling branch keeps its own, a fork or
 * clone carries the preset of the path it copies, and a resume is on the preset of the
 * branch it opens on. `before` holds the model, thinking level and tools from before the
 * first preset on this branch, so "(none)" restores them also after a resume. The presets
 * themselves are configuration (files), read at session start, not state. Every handler
 * reads the value at Pi's leaf when it runs (the system prompt at each prompt, the footer at
 * session start and after a tree move); nothing is kept in memory.
 *
 * As the original does when it restores a preset, a tree move or a resume does not apply
 * the preset's model, thinking level or tools again: Pi keeps the model and thinking level
 * across a tree move and restores them on resume from the session, and restores the tools
 * recorded on the branch.
 *
 * Differences from the original, each shown by `preset.test.ts`: the original saves the
 * name at every turn's start and restores the last name saved anywhere in the file, only
 * at session start, so after `/tree` to before `/preset` (or on a resume of a branch that
 * never had it) the preset is still active and its instructions still in the system
 * prompt, and the next turn writes it into that branch; a preset activated and never
 * followed by a turn is lost on resume; a cleared preset is restored on resume (clearing
 * writes nothing); and "(none)" after a resume restores only the four built-in tools.
 * One difference is a choice: `--preset` naming no defined preset warns in both, and the
 * original then leaves the branch's preset out for the whole run (any flag skips its
 * restore); the port keeps it, since nothing replaced it.
 *
 * TUI-only behaviour: the selector is the same pi-tui `SelectList` in a `ctx.ui.custom`
 * component (keys: arrows, Enter, Escape); the footer status is `ctx.ui.setStatus`.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { CONFIG_DIR_NAME, DynamicBorder, getAgentDir } from "@earendil-works/pi-coding-agent";
import { Container, Key, SelectList, Text, type SelectItem } from "@earendil-works/pi-tui";
import { openSessionState } from "@session-state/pi";

type ThinkingLevel = "off" | "minimal" | "low" | "medium" | "high" | "xhigh" | "max";

interface Preset {
  provider?: string;
  model?: string;
  thinkingLevel?: ThinkingLevel;
  /** The tools to activate (replacing the active set). */
  tools?: string[];
  /** Appended to the system prompt. */
  instructions?: string;
}

type Presets = Record<string, Preset>;

/** What "(none)" restores: the settings before the first preset on the branch. */
interface Before {
  model?: { provider: string; id: string };
  thinkingLevel: ThinkingLevel;
  tools: string[];
}

/** The stored value. */
interface Active {
  name: string;
  before?: Before;
}

const NONE = "(none)";

function readPresets(file: string, which: string): Presets {
  if (!existsSync(file)) return {};
  try {
    return JSON.parse(readFileSync(file, "utf-8")) as Presets;
  } catch (err) {
    console.error(`Failed to load ${which} presets from ${file}: ${err}`);
    return {};
  }
}

/** The agent directory's presets, then the project's over them. */
function loadPresets(cwd: string): Presets {
  return {
    ...readPresets(join(getAgentDir(), "presets.json"), "global"),
    ...readPresets(join(cwd, CONFIG_DIR_NAME, "presets.json"), "project"),
  };
}

/** The selector's line for a preset: model, thinking, tools, the instructions' start. */
function describe(p: Preset): string {
  const parts: string[] = [];
  if (p.provider && p.model) parts.push(`${p.provider}/${p.model}`);
  if (p.thinkingLevel) parts.push(`thinking:${p.thinkingLevel}`);
  if (p.tools) parts.push(`tools:${p.tools.join(",")}`);
  if (p.instructions) parts.push(`"${p.instructions.length > 30 ? `${p.instructions.slice(0, 27)}...` : p.instructions}"`);
  return parts.join(" | ");
}

export default function presets(pi: ExtensionAPI): void {
  const active = openSessionState<Active>(pi, { pluginId: "preset", scope: "branch" });
  /** The presets defined in the files (read at session start). */
  let defined: Presets = {};

  pi.registerFlag("preset", { description: "Preset configuration to use", type: "string" });

  /** The preset active at Pi's leaf, when it is still defined. */
  function activeAt(ctx: ExtensionContext): { name: string; preset: Preset } | undefined {
    const a = active.read(ctx);
    const preset = a && defined[a.name];
    return a && preset ? { name: a.name, preset } : undefined;
  }

  function show(ctx: ExtensionContext): void {
    const a = activeAt(ctx);
    ctx.ui.setStatus("preset", a ? ctx.ui.theme.fg("accent", `preset:${a.name}`) : undefined);
  }

  function noPresets(ctx: ExtensionContext): void {
    ctx.ui.notify(
      `No presets defined. Add presets to ${join(getAgentDir(), "presets.json")} or ${join(ctx.cwd, CONFIG_DIR_NAME, "presets.json")}`,
      "warning",
    );
  }

  /** Applies `preset`'s model, thinking level and tools, and makes it the branch's preset. */
  async function activate(ctx: ExtensionContext, name: string, preset: Preset): Promise<void> {
    const was = active.read(ctx);
    const before: Before = was?.before ?? {
      ...(ctx.model ? { model: { provider: ctx.model.provider, id: ctx.model.id } } : {}),
      thinkingLevel: pi.getThinkingLevel() as ThinkingLevel,
      tools: pi.getActiveTools(),
    };

    if (preset.provider && preset.model) {
      const model = ctx.modelRegistry.find(preset.provider, preset.model);
      if (!model) ctx.ui.notify(`Preset "${name}": Model ${preset.provider}/${preset.model} not found`, "warning");
      else if (!(await pi.setModel(model))) ctx.ui.notify(`Preset "${name}": No API key for ${preset.provider}/${preset.model}`, "warning");
    }
    if (preset.thinkingLevel) pi.setThinkingLevel(preset.thinkingLevel);
    if (preset.tools && preset.tools.length > 0) {
      const known = new Set(pi.getAllTools().map((t) => t.name));
      const unknown = preset.tools.filter((t) => !known.has(t));
      if (unknown.length > 0) ctx.ui.notify(`Preset "${name}": Unknown tools: ${unknown.join(", ")}`, "warning");
      const tools = preset.tools.filter((t) => known.has(t));
      if (tools.length > 0) pi.setActiveTools(tools);
    }
    active.write(ctx, { name, before });
  }

  /** Clears the branch's preset and restores what was there before it. */
  async function clear(ctx: ExtensionContext): Promise<void> {
    const before = active.read(ctx)?.before;
    active.drop(ctx);
    if (before) {
      const model = before.model && ctx.modelRegistry.find(before.model.provider, before.model.id);
      if (model) await pi.setModel(model);
      pi.setThinkingLevel(before.thinkingLevel);
      pi.setActiveTools(before.tools);
    } else {
      pi.setActiveTools(["read", "bash", "edit", "write"]);
    }
    ctx.ui.notify("Preset cleared, defaults restored", "info");
    show(ctx);
  }

  async function choose(ctx: ExtensionContext, name: string): Promise<void> {
    if (name === NONE) return clear(ctx);
    const preset = defined[name];
    if (!preset) return;
    await activate(ctx, name, preset);
    ctx.ui.notify(`Preset "${name}" activated`, "info");
    show(ctx);
  }

  async function select(ctx: ExtensionContext): Promise<void> {
    const names = Object.keys(defined);
    if (names.length === 0) return noPresets(ctx);
    const current = activeAt(ctx)?.name;
    const items: SelectItem[] = [
      ...names.map((name) => ({ value: name, label: name === current ? `${name} (active)` : name, description: describe(defined[name]!) })),
      { value: NONE, label: NONE, description: "Clear active preset, restore defaults" },
    ];
    const picked = await ctx.ui.custom<string | null>((tui, theme, _keybindings, done) => {
      const list = new SelectList(items, Math.min(items.length, 10), {
        selectedPrefix: (t) => theme.fg("accent", t),
        selectedText: (t) => theme.fg("accent", t),
        description: (t) => theme.fg("muted", t),
        scrollInfo: (t) => theme.fg("dim", t),
        noMatch: (t) => theme.fg("warning", t),
      });
      list.onSelect = (item) => done(item.value);
      list.onCancel = () => done(null);
      const box = new Container();
      const border = () => new DynamicBorder((s: string) => theme.fg("accent", s));
      box.addChild(border());
      box.addChild(new Text(theme.fg("accent", theme.bold("Select Preset"))));
      box.addChild(list);
      box.addChild(new Text(theme.fg("dim", "↑↓ navigate • enter select • esc cancel")));
      box.addChild(border());
      return {
        capturesViewportInput: list.capturesViewportInput,
        render: (width: number) => box.render(width),
        invalidate: () => box.invalidate(),
        handleInput: (data: string) => {
          list.handleInput(data);
          tui.requestRender();
        },
      };
    });
    if (picked) await choose(ctx, picked);
  }

  async function cycle(ctx: ExtensionContext): Promise<void> {
    const names = Object.keys(defined).sort();
    if (names.length === 0) return noPresets(ctx);
    const order = [NONE, ...names];
    const i = order.indexOf(activeAt(ctx)?.name ?? NONE);
    await choose(ctx, order[i < 0 ? 0 : (i + 1) % order.length]!);
  }

  pi.registerShortcut(Key.ctrlShift("u"), { description: "Cycle presets", handler: (ctx) => cycle(ctx) });

  pi.registerCommand("preset", {
    description: "Switch preset configuration",
    handler: async (args, ctx) => {
      const name = args?.trim();
      if (!name) return select(ctx);
      if (!defined[name]) {
        ctx.ui.notify(`Unknown preset "${name}". Available: ${Object.keys(defined).join(", ") || "(none defined)"}`, "error");
        return;
      }
      await choose(ctx, name);
    },
  });

  pi.on("before_agent_start", async (event, ctx) => {
    const instructions = activeAt(ctx)?.preset.instructions;
    if (instructions) return { systemPrompt: `${event.systemPrompt}\n\n${instructions}` };
  });

  pi.on("session_start", async (_event, ctx) => {
    defined = loadPresets(ctx.cwd);
    const flag = pi.getFlag("preset");
    if (typeof flag === "string" && flag) {
      const preset = defined[flag];
      if (preset) {
        await activate(ctx, flag, preset);
        ctx.ui.notify(`Preset "${flag}" activated`, "info");
      } else {
        ctx.ui.notify(`Unknown preset "${flag}". Available: ${Object.keys(defined).join(", ") || "(none defined)"}`, "warning");
      }
    }
    show(ctx);
  });

  pi.on("session_tree", async (_event, ctx) => show(ctx));
}
