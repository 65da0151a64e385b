// A stand-in `write` tool for the example's test (the built-in tools are off): it only
// says what it would write.
import { Type } from "typebox";

export default function (pi: any) {
  pi.registerTool({
    name: "write",
    label: "write",
    description: "Writes a file (test stand-in)",
    parameters: Type.Object({ path: Type.String(), content: Type.String() }),
    async execute(_id: string, p: { path: string }) {
      return { content: [{ type: "text", text: `wrote ${p.path}` }], details: {} };
    },
  });
}
