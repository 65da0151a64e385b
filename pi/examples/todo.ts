/**
 * Todo: Pi's `examples/extensions/todo.ts`, ported onto `@session-state/pi`.
 *
 * The same `todo` tool (actions `list`, `add` with `text`, `toggle` with `id`, `clear`),
 * the same `/todos` view, and the same text for the model (the tool results) and for the
 * user (the transcript rows, the view, the notifications).
 *
 * State: `{ todos, nextId }` in one state, plugin `todo`, **branch** scope. The list
 * belongs to the conversation at a point: /tree back shows the list as it was there,
 * /fork and /clone carry it, a sibling branch never sees another branch's items. The
 * tool writes it from its `execute` (the event lands between the model's call and its
 * result, so /tree to the call itself reads the list without it); everything else reads
 * it at Pi's leaf when it needs it. Nothing is rebuilt on session_start or session_tree
 * and nothing is kept in memory between calls. `clear` drops the state (absent reads as
 * no items, next id 1).
 *
 * The tool results still carry the list after the action in `details`, a copy, only for
 * drawing the transcript row as the original draws it.
 *
 * Skipped: nothing the user or the model sees. The view's key handling is kept (Escape
 * and ctrl+c close it) and tested through the kit's keys.
 *
 * Where it differs from the original (each shown by `todo.test.ts`, listed in
 * `pi/examples/README.md`): the original's in-memory list shares its item objects with
 * the earlier tool results' `details`, so a toggle changes the items those results hold
 * in Pi's memory: after /tree to before a toggle it still shows the item done, and the
 * model's `list` says `[x]`. Here each value is read fresh from the session.
 *
 *   pi -e ./pi -e ./pi/examples/todo.ts
 */
import { StringEnum } from "@earendil-works/pi-ai";
import type { ExtensionAPI, ExtensionContext, Theme } from "@earendil-works/pi-coding-agent";
import { matchesKey, Text, truncateToWidth } from "@earendil-works/pi-tui";
import { Type } from "typebox";
import { openSessionState } from "@session-state/pi";

interface Todo {
  id: number;
  text: string;
  done: boolean;
}

/** The state: the items and the id the next one gets. */
interface TodoList {
  todos: Todo[];
  nextId: number;
}

type Action = "list" | "add" | "toggle" | "clear";

/** What a tool result carries for the transcript: the action, the list after it, an error. */
interface TodoDetails extends TodoList {
  action: Action;
  error?: string;
}

const NO_TODOS: TodoList = { todos: [], nextId: 1 };

const Params = Type.Object({
  action: StringEnum(["list", "add", "toggle", "clear"] as const),
  text: Type.Optional(Type.String({ description: "Todo text (for add)" })),
  id: Type.Optional(Type.Number({ description: "Todo ID (for toggle)" })),
});

/** A tool answer: `text` for the model, the list after the action for the transcript row. */
function answer(text: string, action: Action, list: TodoList, error?: string) {
  const details: TodoDetails = { action, todos: list.todos.map((t) => ({ ...t })), nextId: list.nextId };
  if (error !== undefined) details.error = error;
  return { content: [{ type: "text" as const, text }], details };
}

/** The `/todos` view: the list as it was when the command ran; Escape or ctrl+c closes it. */
class TodoView {
  private readonly todos: Todo[];
  private readonly theme: Theme;
  private readonly close: () => void;

  constructor(todos: Todo[], theme: Theme, close: () => void) {
    this.todos = todos;
    this.theme = theme;
    this.close = close;
  }

  handleInput(data: string): void {
    if (matchesKey(data, "escape") || matchesKey(data, "ctrl+c")) this.close();
  }

  render(width: number): string[] {
    const th = this.theme;
    const body: string[] = [];
    if (this.todos.length === 0) {
      body.push(`  ${th.fg("dim", "No todos yet. Ask the agent to add some!")}`);
    } else {
      const done = this.todos.filter((t) => t.done).length;
      body.push(`  ${th.fg("muted", `${done}/${this.todos.length} completed`)}`, "");
      for (const t of this.todos) {
        const mark = t.done ? th.fg("success", "✓") : th.fg("dim", "○");
        body.push(`  ${mark} ${th.fg("accent", `#${t.id}`)} ${th.fg(t.done ? "dim" : "text", t.text)}`);
      }
    }
    const rule = (n: number) => th.fg("borderMuted", "─".repeat(n));
    const lines = [
      "",
      rule(3) + th.fg("accent", " Todos ") + rule(Math.max(0, width - 10)),
      "",
      ...body,
      "",
      `  ${th.fg("dim", "Press Escape to close")}`,
      "",
    ];
    return lines.map((l) => (l === "" ? l : truncateToWidth(l, width)));
  }

  invalidate(): void {}
}

export default function todoExtension(pi: ExtensionAPI) {
  const state = openSessionState<TodoList>(pi, { pluginId: "todo", scope: "branch" });
  const listAt = (ctx: ExtensionContext): TodoList => state.read(ctx) ?? NO_TODOS;

  pi.registerTool({
    name: "todo",
    label: "Todo",
    description: "Manage a todo list. Actions: list, add (text), toggle (id), clear",
    parameters: Params,

    async execute(_toolCallId, params, _signal, _onUpdate, ctx) {
      const list = listAt(ctx);
      switch (params.action) {
        case "list": {
          const text = list.todos.map((t) => `[${t.done ? "x" : " "}] #${t.id}: ${t.text}`).join("\n");
          return answer(text || "No todos", "list", list);
        }
        case "add": {
          if (!params.text) return answer("Error: text required for add", "add", list, "text required");
          const added: Todo = { id: list.nextId, text: params.text, done: false };
          const next = { todos: [...list.todos, added], nextId: list.nextId + 1 };
          state.write(ctx, next);
          return answer(`Added todo #${added.id}: ${added.text}`, "add", next);
        }
        case "toggle": {
          if (params.id === undefined) return answer("Error: id required for toggle", "toggle", list, "id required");
          const target = list.todos.find((t) => t.id === params.id);
          if (!target) return answer(`Todo #${params.id} not found`, "toggle", list, `#${params.id} not found`);
          const done = !target.done;
          const next = { ...list, todos: list.todos.map((t) => (t.id === target.id ? { ...t, done } : t)) };
          state.write(ctx, next);
          return answer(`Todo #${target.id} ${done ? "completed" : "uncompleted"}`, "toggle", next);
        }
        case "clear": {
          state.drop(ctx);
          return answer(`Cleared ${list.todos.length} todos`, "clear", NO_TODOS);
        }
        default: {
          const action = (params as { action: string }).action;
          return answer(`Unknown action: ${action}`, "list", list, `unknown action: ${action}`);
        }
      }
    },

    renderCall(args, theme) {
      let text = theme.fg("toolTitle", theme.bold("todo ")) + theme.fg("muted", String(args.action));
      if (args.text) text += ` ${theme.fg("dim", `"${args.text}"`)}`;
      if (args.id !== undefined) text += ` ${theme.fg("accent", `#${args.id}`)}`;
      return new Text(text, 0, 0);
    },

    renderResult(result, { expanded }, theme) {
      const first = result.content[0];
      const resultText = first?.type === "text" ? first.text : "";
      const d = result.details as TodoDetails | undefined;
      if (!d) return new Text(resultText, 0, 0);
      if (d.error) return new Text(theme.fg("error", `Error: ${d.error}`), 0, 0);
      const ok = (msg: string) => new Text(theme.fg("success", "✓ ") + theme.fg("muted", msg), 0, 0);
      switch (d.action) {
        case "list": {
          if (d.todos.length === 0) return new Text(theme.fg("dim", "No todos"), 0, 0);
          const shown = expanded ? d.todos : d.todos.slice(0, 5);
          const rows = shown.map(
            (t) =>
              `${t.done ? theme.fg("success", "✓") : theme.fg("dim", "○")} ${theme.fg("accent", `#${t.id}`)} ${theme.fg(t.done ? "dim" : "muted", t.text)}`,
          );
          if (!expanded && d.todos.length > 5) rows.push(theme.fg("dim", `... ${d.todos.length - 5} more`));
          return new Text([theme.fg("muted", `${d.todos.length} todo(s):`), ...rows].join("\n"), 0, 0);
        }
        case "add": {
          const added = d.todos[d.todos.length - 1]!;
          return new Text(`${theme.fg("success", "✓ Added ")}${theme.fg("accent", `#${added.id}`)} ${theme.fg("muted", added.text)}`, 0, 0);
        }
        case "toggle":
          return ok(resultText);
        case "clear":
          return ok("Cleared all todos");
        default:
          return new Text(first?.type === "text" ? theme.fg("error", first.text) : "", 0, 0);
      }
    },
  });

  pi.registerCommand("todos", {
    description: "Show all todos on the current branch",
    handler: async (_args, ctx) => {
      if (ctx.mode !== "tui") {
        ctx.ui.notify("/todos requires interactive mode", "error");
        return;
      }
      const { todos } = listAt(ctx);
      await ctx.ui.custom<void>((_tui, theme, _keybindings, done) => new TodoView(todos, theme, () => done()));
    },
  });
}
