/**
 * Role: the smallest extension with branch state, and the subject of the testing kit's
 * first example (`role.test.ts`, `docs/pi-extension.md`).
 *
 * `/role <name>` sets the assistant's role on the current branch; stepping back with
 * /tree reads the role as of that point.
 *
 *   pi -e ./pi -e ./pi/examples/role.ts
 */
import { openSessionState } from "@session-state/pi";

export default function (pi: any) {
  const role = openSessionState<{ name: string }>(pi, { pluginId: "role", scope: "branch" });
  pi.registerCommand("role", {
    description: "Set the role on this branch: /role <name>",
    handler: async (args: string, ctx: any) => {
      role.write(ctx, { name: args.trim() });
      ctx.ui.notify(`role: ${role.read(ctx)?.name}`, "info");
    },
  });
}
