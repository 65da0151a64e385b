// The todo list of docs/pi-extension.md ("Changing your state's shape"), version 2: each
// item has a `done` flag, `[{ text: "milk", done: false }]`.
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import { Type, type Static } from "typebox";
import { openSessionState } from "@session-state/pi";
import { show } from "./todo-show.ts";

const Item = Type.Object({ text: Type.String(), done: Type.Boolean() });
type Item = Static<typeof Item>;

export default function (pi: ExtensionAPI) {
  const todo = openSessionState<Item[]>(pi, {
    pluginId: "todo",
    scope: "branch",
    version: 2,
    // Version 1 stored the texts alone.
    migrate: (value) => (value as string[]).map((text) => ({ text, done: false })),
    validate: Type.Array(Item),
  });
  pi.registerCommand("todo", {
    description: "/todo add <text> | /todo done <n> | /todo show",
    handler: async (args, ctx) => {
      const [verb, ...rest] = args.trim().split(/\s+/);
      const items = todo.read(ctx) ?? [];
      if (verb === "add") todo.write(ctx, [...items, { text: rest.join(" "), done: false }]);
      else if (verb === "done") todo.write(ctx, items.map((it, i) => (i === Number(rest[0]) ? { ...it, done: true } : it)));
      else show(ctx, items);
    },
  });
}
