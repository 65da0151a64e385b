// How the todo extensions (todo-v1.ts, todo-v2.ts, todo-v3.ts) show the list: a
// notification where there is a UI, else a line on stdout (`pi -p "/todo show"`, whose
// `process.stdout` Pi sends to stderr).
import * as fs from "node:fs";

export function show(ctx: { hasUI: boolean; ui: { notify(m: string, t?: "info"): void } }, value: unknown): void {
  const text = JSON.stringify(value ?? null);
  if (ctx.hasUI) ctx.ui.notify(text, "info");
  else fs.writeSync(1, `${text}\n`);
}
