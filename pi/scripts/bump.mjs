// `npm run bump -- X.Y.Z`: sets the release's version everywhere it is written, in one step.
//
//   npm run bump -- X.Y.Z [--root DIR]
//
// - Cargo.toml (the crate) and pi/native/Cargo.toml (the addon), and their entries in
//   Cargo.lock;
// - pi/package.json and pi/package-lock.json (the package; `npm run pack` gives each
//   platform package the same version, and the loader refuses a platform package of
//   another one);
// - the install commands in README.md, pi/README.md, pi/RELEASING.md and docs/pi-extension.md
//   (`@session-state/pi@X.Y.Z`).
// Each file must hold the current version where it is expected, or nothing is written.
// `--root` names another checkout (the default: the one this script is in).
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const { values: opts, positionals } = parseArgs({
  options: { root: { type: "string" } },
  allowPositionals: true,
});
const next = positionals[0];
if (positionals.length !== 1 || !/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(next)) {
  throw new Error("usage: npm run bump -- X.Y.Z (a semver version, e.g. 0.2.0 or 0.2.0-rc.1)");
}
const root = path.resolve(opts.root ?? path.join(path.dirname(fileURLToPath(import.meta.url)), "..", ".."));
const read = (f) => fs.readFileSync(path.join(root, f), "utf8");
const current = JSON.parse(read("pi/package.json")).version;
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Replaces `pattern` (a RegExp with one group around the version) in `file`, `count` times at least. */
const edits = [];
function edit(file, pattern, count = 1) {
  const text = read(file);
  let n = 0;
  const out = text.replace(pattern, (m, ...groups) => {
    n += 1;
    return m.replace(groups[0], next);
  });
  if (n < count) throw new Error(`bump: ${file}: found ${n} of the ${count} places that hold version ${current} (${pattern})`);
  edits.push({ file, out, n });
}

const v = esc(current);
edit("Cargo.toml", new RegExp(`^\\[package\\]\\nname = "session-state"\\nversion = "(${v})"`, "m"));
edit("pi/native/Cargo.toml", new RegExp(`^\\[package\\]\\nname = "session-state-pi"\\nversion = "(${v})"`, "m"));
edit("Cargo.lock", new RegExp(`^name = "session-state(?:-pi)?"\\nversion = "(${v})"`, "gm"), 2);
edit("pi/package.json", new RegExp(`^  "version": "(${v})"`, "m"));
edit("pi/package-lock.json", new RegExp(`"name": "@session-state/pi",\\n\\s*"version": "(${v})"`, "g"), 2);
for (const doc of ["README.md", "pi/README.md", "pi/RELEASING.md", "docs/pi-extension.md"]) {
  edit(doc, new RegExp(`@session-state/pi@(${v})`, "g"));
}

for (const { file, out, n } of edits) {
  fs.writeFileSync(path.join(root, file), out);
  console.log(`${file}: ${current} -> ${next} (${n}x)`);
}
console.log("Now add the release's section to pi/CHANGELOG.md (pi/RELEASING.md).");
