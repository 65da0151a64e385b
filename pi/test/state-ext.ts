// The test extension: uses the package's API from a tool's execute and from commands,
// and records what it read so the tests can compare it with a fold over Pi's entries.
import { Type } from "typebox";
import { branchKey, openSessionState } from "@session-state/pi";
import { fold } from "./fold.ts";

type Probe = { reads: Array<{ where: string; leaf: string | null; branch: unknown; session: unknown; foldBranch: unknown; foldSession: unknown; key: string | undefined }>; errors: string[] };
const probe: Probe = ((globalThis as any).__stateProbe ??= { reads: [], errors: [] });

export default function (pi: any) {
  const todo = openSessionState<unknown>(pi, { pluginId: "todo", scope: "branch" });
  const counter = openSessionState<unknown>(pi, { pluginId: "counter" }); // scope defaults to session
  const cell = (globalThis as any).__stateCell ?? ((globalThis as any).__stateCell = {});
  cell.todo = todo;
  cell.counter = counter;

  const record = (where: string, ctx: any) => {
    probe.reads.push({
      where,
      leaf: ctx.sessionManager.getLeafId(),
      branch: todo.read(ctx),
      session: counter.read(ctx),
      foldBranch: fold(ctx.sessionManager, "todo", "branch"),
      foldSession: fold(ctx.sessionManager, "counter", "session"),
      key: branchKey(ctx),
    });
  };

  pi.registerTool({
    name: "remember",
    label: "remember",
    description: "Stores a todo list in branch state and bumps a session counter",
    parameters: Type.Object({ items: Type.Array(Type.String()) }),
    async execute(_id: string, params: { items: string[] }, _signal: unknown, _onUpdate: unknown, ctx: any) {
      record("tool:before", ctx);
      todo.write(ctx, params.items);
      const n = (counter.read(ctx) as number | undefined) ?? 0;
      counter.write(ctx, n + 1);
      record("tool:after", ctx);
      return { content: [{ type: "text", text: `remembered ${params.items.length}` }], details: {} };
    },
  });

  // /probe <json>: runs one scripted action against the API; the tests read the results.
  pi.registerCommand("probe", {
    description: "test hook",
    handler: async (args: string, ctx: any) => {
      const a = JSON.parse(args);
      try {
        switch (a.op) {
          case "write": (a.scope === "session" ? counter : todo).write(ctx, a.value); break;
          case "patch": todo.patch(ctx, a.value); break;
          case "drop": (a.scope === "session" ? counter : todo).drop(ctx); break;
          case "navigate": await ctx.navigateTree(a.target, { summarize: false }); break;
          case "read": break;
          // An entry as another writer (or another version) could have written it.
          case "raw": pi.appendEntry(a.customType, a.data); break;
        }
      } catch (e) {
        probe.errors.push((e as Error).message);
      }
      record(`cmd:${a.op}`, ctx);
    },
  });
}
