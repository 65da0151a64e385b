// The reference: a TypeScript fold of state events over Pi's own getBranch() / getEntries().
/** A TypeScript fold of `session-state/<plugin>` events over Pi's own entries (docs/spec.md §3). */
export function fold(sm: any, plugin: string, scope: "branch" | "session", at?: string | null): unknown {
  const ct = `session-state/${plugin}`;
  const leaf = at === undefined ? sm.getLeafId() : at;
  const entries: any[] = scope === "branch" ? (leaf ? sm.getBranch(leaf) : []) : sm.getEntries();
  let value: unknown = undefined;
  for (const e of entries) {
    if (e.type !== "custom" || e.customType !== ct || e.data?.scope !== scope) continue;
    if (e.data.op === "set") value = e.data.value;
    else if (e.data.op === "drop") value = undefined;
    else if (e.data.op === "patch") value = mergePatch(value === undefined ? {} : value, e.data.patch);
  }
  return value;
}

function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    target !== null && typeof target === "object" && !Array.isArray(target) ? { ...(target as object) } : {};
  for (const [k, v] of Object.entries(patch as object)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** The entries of `sm` of one customType. */
export function customs(sm: any, plugin: string): any[] {
  return sm.getEntries().filter((e: any) => e.type === "custom" && e.customType === `session-state/${plugin}`);
}
