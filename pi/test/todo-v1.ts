// The todo list of docs/pi-extension.md ("Changing your state's shape"), version 1: the
// state is the list of texts, `["milk", "bread"]`.
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import { openSessionState } from "@session-state/pi";
import { show } from "./todo-show.ts";

export default function (pi: ExtensionAPI) {
  const todo = openSessionState<string[]>(pi, { pluginId: "todo", scope: "branch" });
  pi.registerCommand("todo", {
    description: "/todo add <text> | /todo show",
    handler: async (args, ctx) => {
      const [verb, ...rest] = args.trim().split(/\s+/);
      if (verb === "add") todo.write(ctx, [...(todo.read(ctx) ?? []), rest.join(" ")]);
      else show(ctx, todo.read(ctx));
    },
  });
}
