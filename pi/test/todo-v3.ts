// The todo list of docs/pi-extension.md ("Changing your state's shape"), version 3: the
// items and when they last changed, `{ items: [{ text: "milk", done: false }], updatedAt: 0 }`.
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import { Type, type Static } from "typebox";
import { openSessionState } from "@session-state/pi";
import { show } from "./todo-show.ts";

const Item = Type.Object({ text: Type.String(), done: Type.Boolean() });
const Todo = Type.Object({ items: Type.Array(Item), updatedAt: Type.Number() });
type Item = Static<typeof Item>;
type Todo = Static<typeof Todo>;

export default function (pi: ExtensionAPI) {
  const todo = openSessionState<Todo>(pi, {
    pluginId: "todo",
    scope: "branch",
    version: 3,
    // From any older version: version 1 stored the texts, version 2 the items.
    migrate(value, fromVersion) {
      const items = fromVersion === 1 ? (value as string[]).map((text) => ({ text, done: false })) : (value as Item[]);
      return { items, updatedAt: 0 };
    },
    validate: Todo,
  });
  pi.registerCommand("todo", {
    description: "/todo add <text> | /todo done <n> | /todo show",
    handler: async (args, ctx) => {
      const [verb, ...rest] = args.trim().split(/\s+/);
      const { items } = todo.read(ctx) ?? { items: [] };
      if (verb === "add") todo.patch(ctx, { items: [...items, { text: rest.join(" "), done: false }], updatedAt: Date.now() });
      else if (verb === "done") todo.patch(ctx, { items: items.map((it, i) => (i === Number(rest[0]) ? { ...it, done: true } : it)), updatedAt: Date.now() });
      else show(ctx, todo.read(ctx));
    },
  });
}
