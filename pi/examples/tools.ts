/**
 * Tools: Pi's `examples/extensions/tools.ts`, ported onto `@session-state/pi`.
 *
 * The same `/tools` command: a list of every registered tool, enabled or disabled, where
 * Enter or Space switches the selected tool and Escape closes; each change applies at once
 * (`pi.setActiveTools`) and is kept. The same text for the user ("Tool Configuration",
 * the list, "/tools requires TUI mode" outside the TUI).
 *
 * State: `{ enabledTools }` in one state, plugin `tools`, **branch** scope: the tool set
 * belongs to the conversation at a point, as the original keeps it (its `tools-config`
 * entries, read along the branch). On session_start (start, resume, /fork, /clone,
 * /reload) and on session_tree the tools saved at Pi's leaf are applied again, less the
 * ones no longer registered; where nothing was saved, the tools stay as Pi has them.
 * `/tools` reads the saved set at the leaf (or, where none, the active tools) when it
 * opens. The original rebuilds its set by scanning the whole branch on each of those
 * events; here it is one read at the leaf.
 *
 * Pi 1.6 also records each change of the active tools in the transcript itself (a system
 * message) and restores it on /tree and on resume; the state here agrees with it.
 *
 * Skipped: nothing the user or the model sees. The list is pi-tui's `SettingsList` with
 * Pi's settings theme, driven in the tests by the kit's keys (Page Up/Down paging is the
 * list's own and not tested here).
 *
 * Differs from the original: nowhere the tests reach (`tools.test.ts`, the differential).
 * The saved sets are `session-state/tools` entries, drawn in the transcript as state
 * lines; the original's `tools-config` entries are not drawn.
 *
 *   pi -e ./pi -e ./pi/examples/tools.ts
 */
import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { getSettingsListTheme } from "@earendil-works/pi-coding-agent";
import { Container, SettingsList, type Component, type SettingItem } from "@earendil-works/pi-tui";
import { openSessionState } from "@session-state/pi";

interface ToolsConfig {
  enabledTools: string[];
}

/** The dialog's first two lines: its title and a blank line. */
class Heading implements Component {
  private readonly title: string;
  constructor(title: string) {
    this.title = title;
  }
  render(): string[] {
    return [this.title, ""];
  }
  invalidate(): void {}
}

export default function toolsExtension(pi: ExtensionAPI) {
  const saved = openSessionState<ToolsConfig>(pi, { pluginId: "tools", scope: "branch" });

  /** The saved set at Pi's leaf, less the tools not registered any more; `undefined` where none was saved. */
  const savedAt = (ctx: ExtensionContext): string[] | undefined => {
    const config = saved.read(ctx);
    if (!config) return undefined;
    const registered = new Set(pi.getAllTools().map((t) => t.name));
    return config.enabledTools.filter((name) => registered.has(name));
  };

  const applySaved = (_event: unknown, ctx: ExtensionContext) => {
    const tools = savedAt(ctx);
    if (tools) pi.setActiveTools(tools);
  };
  pi.on("session_start", applySaved);
  pi.on("session_tree", applySaved);

  pi.registerCommand("tools", {
    description: "Enable/disable tools",
    handler: async (_args, ctx) => {
      if (ctx.mode !== "tui") {
        ctx.ui.notify("/tools requires TUI mode", "error");
        return;
      }
      const enabled = new Set(savedAt(ctx) ?? pi.getActiveTools());
      const all = pi.getAllTools();
      await ctx.ui.custom<void>((tui, theme, _keybindings, done) => {
        const items: SettingItem[] = all.map(({ name }) => ({
          id: name,
          label: name,
          currentValue: enabled.has(name) ? "enabled" : "disabled",
          values: ["enabled", "disabled"],
        }));
        const onChange = (name: string, value: string) => {
          if (value === "enabled") enabled.add(name);
          else enabled.delete(name);
          pi.setActiveTools([...enabled]);
          saved.write(ctx, { enabledTools: [...enabled] });
        };
        const list = new SettingsList(items, Math.min(items.length + 2, 15), getSettingsListTheme(), onChange, () => done(undefined));
        const dialog = new Container();
        dialog.addChild(new Heading(theme.fg("accent", theme.bold("Tool Configuration"))));
        dialog.addChild(list);
        return {
          capturesViewportInput: list.capturesViewportInput,
          render: (width: number) => dialog.render(width),
          invalidate: () => dialog.invalidate(),
          handleInput: (data: string) => {
            list.handleInput?.(data);
            tui.requestRender();
          },
        };
      });
    },
  });
}
