// values.mjs — state values as the real Pi writes, reads and folds them: numbers beyond
// 2^53 and beyond the double range, values nested as deep as Pi can write, many plugins.
//
//   node values.mjs deep <major> <out.jsonl>
//   node values.mjs gen <major> <out.jsonl> <seed>
//   node values.mjs more <major> <file> <seed>
//   node values.mjs fold <major> <file> [--leaf]
//
// `deep` finds, by bisection, the deepest value {"k": [[…]]} that Pi's own
// appendCustomEntry writes (JSON.stringify runs out of stack beyond it), then writes
// <out.jsonl>: a user and an assistant message, `session-state/deep` set to that value,
// `session-state/d300` set to one 300 levels deep, and a patch {"n":1} of `deep`.
// Prints {"file", "ids", "maxDepth"}: maxDepth counts the value's levels ({"k":…} is one).
//
// `gen` creates <out.jsonl> with Pi's SessionManager (a fresh file): about 200 entries of
// messages, forks and state events of 24 plugins, both scopes, set/patch/drop, whose
// values hold numbers beyond 2^53 and near the ends of the double range (as JavaScript
// holds and JSON.stringify prints them) and values 100 to 400 levels deep.
// `more` opens an existing <file> (whatever was appended to it since) and appends about
// 60 more entries of the same kinds at Pi's leaf, patches on top of what is there.
// Both print {"file", "ids"}.
//
// `fold` opens <file> and folds every `session-state/<plugin>` it holds, as Pi's
// JavaScript sees the events (RFC 7396 for patches, lib.mjs's merge): branch scope along
// getBranch(id) for every entry id, session scope over getEntries(). Prints
// {"leafId", "plugins", "branch": {id: {plugin: text|null}}, "session": {plugin: text|null}}
// where text is JSON.stringify(value) (Infinity prints as null) and null means absent.
// `--leaf` folds the branch scope at the leaf only.

import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { assistant, dropEv, loadPi, main, merge, patchEv, prose, rng, setEv, usageError, user } from "./lib.mjs";

const USAGE = "values.mjs deep <1|0> <out> | gen <1|0> <out> <seed> | more <1|0> <file> <seed> | fold <1|0> <file> [--leaf]";
const CWD = "/home/dev/acme-api";

/** `{"k": [[…[0]…]]}`: `depth` levels of objects and arrays. */
function nested(depth) {
  let v = 0;
  for (let i = 1; i < depth; i++) v = [v];
  return { k: v };
}

function deep(SessionManager, path) {
  const scratch = mkdtempSync(join(tmpdir(), "values-deep-"));
  const writes = (depth) => {
    const f = join(scratch, `d${depth}.jsonl`);
    const sm = SessionManager.open(f, undefined, CWD);
    sm.appendMessage(user("How deep can a value go?"));
    sm.appendMessage(assistant("Let us find out."));
    try {
      sm.appendCustomEntry("session-state/deep", setEv("branch", nested(depth)));
    } catch {
      return false; // RangeError: Maximum call stack size exceeded
    }
    return readFileSync(f, "utf8").split("\n").filter((l) => l).length === 4;
  };
  let lo = 1;
  let hi = 100000;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (writes(mid)) lo = mid;
    else hi = mid - 1;
  }
  rmSync(scratch, { recursive: true, force: true });
  if (existsSync(path)) rmSync(path);
  const sm = SessionManager.open(path, undefined, CWD);
  const ids = [
    sm.appendMessage(user("How deep can a value go?")),
    sm.appendMessage(assistant("Let us find out.")),
    sm.appendCustomEntry("session-state/deep", setEv("branch", nested(lo))),
    sm.appendCustomEntry("session-state/d300", setEv("branch", nested(300))),
    sm.appendCustomEntry("session-state/deep", patchEv("branch", { n: 1 })),
  ];
  return { file: path, ids, maxDepth: lo };
}

const PLUGINS = Array.from({ length: 24 }, (_, i) => `p${i}`);

/** Numbers JavaScript holds that a JSON reader may get wrong, as JSON.stringify prints them. */
const NUMBERS = [
  2 ** 53, 2 ** 53 + 2, -(2 ** 53) - 2, 2 ** 60, -(2 ** 63), 2 ** 64, 123456789012345680,
  1e21, 1.2345678901234568e29, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324,
  2.2250738585072014e-308, 0.1, -0, 1e-7,
];

function value(r, depth = 0) {
  const k = r.int(depth >= 2 ? 5 : 8);
  switch (k) {
    case 0: return null;
    case 1: return r.pick(NUMBERS);
    case 2: return r.int(2000) - 1000;
    case 3: return r.pick(["", "a", "naïve ✓", "line\nbreak"]);
    case 4: return r.chance(0.5);
    case 5: return Array.from({ length: r.int(4) }, () => value(r, depth + 1));
    case 6: {
      // A deep value: 100 to 400 levels.
      let v = { k: value(r, 2) };
      for (let i = 100 + r.int(300); i > 0; i--) v = r.chance(0.5) ? [v] : { d: v };
      return v;
    }
    default: {
      const o = {};
      for (let i = r.int(4); i > 0; i--) o[r.pick(["a", "b", "c", "n", "7"])] = value(r, depth + 1);
      return o;
    }
  }
}

function patch(r) {
  const p = {};
  for (let i = 1 + r.int(3); i > 0; i--) {
    p[r.pick(["a", "b", "c", "n", "7"])] = r.chance(0.25) ? null : value(r, 1);
  }
  return p;
}

function events(sm, path, r, n, fresh) {
  const ids = [];
  const add = (id) => ids.push(typeof id === "string" ? id : id.id);
  if (fresh) {
    add(sm.appendMessage(user("Values scenario.")));
    add(sm.appendMessage(assistant("Ready.")));
  }
  const known = () => sm.getEntries().map((e) => e.id);
  while (ids.length < n) {
    const x = r.next();
    if (x < 0.12) {
      add(sm.appendMessage(r.chance(0.5) ? user(prose(r, 24)) : assistant(prose(r, 48))));
    } else if (x < 0.2) {
      sm.branch(r.pick(known()));
    } else {
      const scope = r.chance(0.75) ? "branch" : "session";
      const y = r.next();
      const data = y < 0.45 ? setEv(scope, value(r)) : y < 0.55 ? dropEv(scope) : patchEv(scope, patch(r));
      add(sm.appendCustomEntry(`session-state/${r.pick(PLUGINS)}`, data));
    }
  }
  return { file: path, ids };
}

function fold(sm, leafOnly) {
  const entries = sm.getEntries();
  const plugins = [...new Set(entries
    .filter((e) => e.type === "custom" && typeof e.customType === "string" && e.customType.startsWith("session-state/"))
    .map((e) => e.customType.slice("session-state/".length)))].sort();
  const foldOf = (list, plugin, scope) => {
    const ct = `session-state/${plugin}`;
    let v;
    for (const e of list) {
      if (e.type !== "custom" || e.customType !== ct || !e.data || e.data.scope !== scope) continue;
      const d = e.data;
      if (d.op === "set") v = d.value;
      else if (d.op === "drop") v = undefined;
      else if (d.op === "patch") v = merge(v, d.patch);
    }
    return v === undefined ? null : JSON.stringify(v);
  };
  const branch = {};
  for (const e of leafOnly ? [sm.getEntry(sm.getLeafId())] : entries) {
    const path = sm.getBranch(e.id);
    branch[e.id] = Object.fromEntries(plugins.map((p) => [p, foldOf(path, p, "branch")]));
  }
  const session = Object.fromEntries(plugins.map((p) => [p, foldOf(entries, p, "session")]));
  return { leafId: sm.getLeafId(), plugins, branch, session };
}

await main(USAGE, async ([cmd, major, file, seedArg]) => {
  if (!cmd || !major || !file) throw usageError("missing arguments");
  const SessionManager = await loadPi(major);
  const path = resolve(file);
  switch (cmd) {
    case "deep": return deep(SessionManager, path);
    case "gen": {
      if (existsSync(path)) rmSync(path);
      return events(SessionManager.open(path, undefined, CWD), path, rng(Number(seedArg ?? 1)), 200, true);
    }
    case "more": return events(SessionManager.open(path), path, rng(1000 + Number(seedArg ?? 1)), 60, false);
    case "fold": return fold(SessionManager.open(path), seedArg === "--leaf");
    default: throw usageError(`unknown command ${JSON.stringify(cmd)}`);
  }
});
