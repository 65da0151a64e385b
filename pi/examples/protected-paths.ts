/**
 * Protected Paths, with its block list kept per branch by session-state.
 *
 * Pi's protected-paths example (docs/extensions.md: "Path protection") blocks `write`
 * and `edit` calls to sensitive paths. Here the list lives in the session log, in branch
 * scope: `/protect <path>` and `/unprotect <path>` change it on the current branch only;
 * stepping back with /tree reads the list as of that point, and /fork carries it into
 * the new session file.
 *
 *   pi -e ./pi/examples/protected-paths.ts
 */
import { openSessionState } from "@session-state/pi";

const DEFAULT = [".env", ".git/", "node_modules/"];

export default function (pi: any) {
  const blocked = openSessionState<string[]>(pi, { pluginId: "protected-paths", scope: "branch" });
  const list = (ctx: any) => blocked.read(ctx) ?? DEFAULT;

  pi.on("tool_call", async (event: any, ctx: any) => {
    if (event.toolName !== "write" && event.toolName !== "edit") return undefined;
    const path = String(event.input?.path ?? "");
    if (list(ctx).some((p) => path.includes(p))) {
      if (ctx.hasUI) ctx.ui.notify(`Blocked write to protected path: ${path}`, "warning");
      return { block: true, reason: `Path "${path}" is protected` };
    }
    return undefined;
  });

  pi.registerCommand("protect", {
    description: "Protect a path on this branch: /protect <path>",
    handler: async (args: string, ctx: any) => {
      const p = args.trim();
      if (!p) return ctx.ui.notify(`Protected on this branch: ${list(ctx).join(", ")}`, "info");
      const cur = list(ctx);
      if (!cur.includes(p)) blocked.write(ctx, [...cur, p]);
      ctx.ui.notify(`Protected on this branch: ${list(ctx).join(", ")}`, "info");
    },
  });

  pi.registerCommand("unprotect", {
    description: "Stop protecting a path on this branch: /unprotect <path>",
    handler: async (args: string, ctx: any) => {
      const p = args.trim();
      blocked.write(ctx, list(ctx).filter((x) => x !== p));
      ctx.ui.notify(`Protected on this branch: ${list(ctx).join(", ")}`, "info");
    },
  });
}
