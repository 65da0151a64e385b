// dump.mjs — what Pi itself reads from a session file.
//
//   node dump.mjs <major> <file> [--no-branches] [--links]
//
// Opens <file> with `SessionManager.open(file)` of Pi <major> (1 or 0) and prints
//   {"header": getHeader(), "entries": getEntries(), "leafId": getLeafId(),
//    "branch": getBranch().map(e => e.id),
//    "branches": {<id>: getBranch(id).map(e => e.id), ...for every entry id}}
// `--no-branches` leaves "branches" out (big files). `--links` reduces each entry to
// {type, id, parentId, message: JSON.stringify(entry.message)}: a message that Rust's JSON
// parser cannot hold (a lone surrogate, nesting deeper than 128) arrives as a plain string.
//
// Pi's getBranch() loops forever on a parent cycle; such ids map to null here.
// Note: open() is Pi's, with its side effects: it rewrites v1/v2 files as v3, 1.x appends
// "\n" to a torn final line, 0.73 overwrites a file whose header it cannot read, and 1.x
// throws on one (non-zero exit). Pass a copy.

import { main, loadPi, usageError } from "./lib.mjs";

const USAGE = "dump.mjs <1|0> <file> [--no-branches] [--links]";

await main(USAGE, async ([major, file, ...flags]) => {
  if (!major || !file) throw usageError("missing arguments");
  const SessionManager = await loadPi(major);
  const sm = SessionManager.open(file);
  const branchOf = (id) => {
    // Walk first with a visited set, as Pi's getBranch() has no cycle guard.
    const seen = new Set();
    for (let e = id ? sm.getEntry(id) : undefined; e; e = e.parentId ? sm.getEntry(e.parentId) : undefined) {
      if (seen.has(e.id)) return null;
      seen.add(e.id);
    }
    return (id === undefined ? sm.getBranch() : sm.getBranch(id)).map((e) => e.id);
  };
  const entries = sm.getEntries();
  const links = (e) => ({
    type: e.type,
    id: e.id,
    parentId: e.parentId,
    message: e.message === undefined ? undefined : JSON.stringify(e.message),
  });
  const out = {
    header: sm.getHeader(),
    entries: flags.includes("--links") ? entries.map(links) : entries,
    leafId: sm.getLeafId(),
    branch: branchOf(sm.getLeafId() ?? undefined),
  };
  if (!flags.includes("--no-branches")) {
    out.branches = {};
    for (const e of entries) {
      if (e && typeof e.id === "string") out.branches[e.id] = branchOf(e.id);
    }
  }
  return out;
});
