// pi_read.mjs — Pi's way to read extension state: SessionManager.open, then the
// getBranch() scan its docs recommend ("Rebuild from getBranch()", docs/extensions.md),
// folding the plugin's `session-state/<plugin>` custom entries (set / patch / drop,
// branch scope) into the value session-state reads.
//
//   node pi_read.mjs <1|0> <file.jsonl> <plugin> [repeats]
//
// Prints one JSON line: {ok, value, import_ms, open_ms, scan_ms, first_ms, median_ms,
// peak_rss_kib} or {ok: false, error} when Pi cannot open the file. `first_ms` is the
// first open + scan of the process (what a fresh `pi` pays); `median_ms` the median over
// `repeats` more, with the JIT warm.

const [major, file, plugin, repeatsArg] = process.argv.slice(2);
const repeats = Number(repeatsArg ?? 3);
const customType = `session-state/${plugin}`;

function merge(target, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const out = target !== null && typeof target === "object" && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = merge(out[k], v);
  }
  return out;
}

function fold(branch) {
  let value;
  for (const e of branch) {
    if (e.type !== "custom" || e.customType !== customType) continue;
    const d = e.data;
    if (!d || d.scope !== "branch") continue;
    if (d.op === "set") value = d.value;
    else if (d.op === "drop") value = undefined;
    else if (d.op === "patch") value = merge(value === undefined ? {} : value, d.patch);
  }
  return value;
}

const rss = () => process.resourceUsage().maxRSS;
const t0 = performance.now();
let result;
try {
  const { SessionManager } = await import(major === "1" ? "pi1" : "pi0");
  const importMs = performance.now() - t0;
  const once = () => {
    const a = performance.now();
    const sm = SessionManager.open(file);
    const b = performance.now();
    const value = fold(sm.getBranch());
    const c = performance.now();
    return { value, open: b - a, scan: c - b, total: c - a };
  };
  const first = once();
  const more = [];
  for (let i = 0; i < repeats; i++) more.push(once().total);
  more.sort((x, y) => x - y);
  result = {
    ok: true,
    value: first.value ?? null,
    import_ms: importMs,
    open_ms: first.open,
    scan_ms: first.scan,
    first_ms: first.total,
    median_ms: more.length ? more[Math.floor(more.length / 2)] : first.total,
    peak_rss_kib: rss(),
  };
} catch (err) {
  result = { ok: false, error: String(err && err.message ? err.message : err).slice(0, 300), peak_rss_kib: rss() };
}
process.stdout.write(JSON.stringify(result) + "\n");
