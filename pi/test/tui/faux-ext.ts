// For the terminal test (tests/pi_tui.rs): the scripted faux model, so the interactive
// Pi answers without a network, and `/remember <text>`, which writes branch state.
import { fauxAssistantMessage, fauxProvider } from "@earendil-works/pi-ai/providers/faux";
import { openSessionState } from "@session-state/pi";

export default function (pi: any) {
  const faux = fauxProvider();
  faux.setResponses(Array.from({ length: 50 }, () => () => fauxAssistantMessage("noted")));
  pi.registerProvider(faux.provider);
  const note = openSessionState<{ text: string }>(pi, { pluginId: "note", scope: "branch" });
  pi.registerCommand("remember", {
    description: "test: remember a note on this branch",
    handler: async (args: string, ctx: any) => {
      note.write(ctx, { text: args.trim() });
    },
  });
}
