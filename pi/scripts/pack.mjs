// `npm run pack`: every tarball to publish, in pi/packed/ (napi-rs's platform-package layout).
//
//   npm run pack [-- --out DIR] [--prebuilt FILE] [--artifacts DIR] [--target TRIPLE]
//
// 1. The addon: a release build for this machine (`napi build --platform --release`,
//    stripped by the workspace's release profile), or `--target TRIPLE` for another one
//    (its toolchain must be installed), or `--prebuilt FILE`, an addon already built for
//    this machine (no Rust build: what `cargo test` packs). `--artifacts DIR` adds addons
//    built elsewhere, named as napi-rs names them (`session-state.<platform>.node`, e.g. from
//    a CI job per platform).
// 2. One platform package per addon, `@session-state/pi-<platform>`: `napi create-npm-dirs`
//    writes its package.json (`os`, `cpu`, `libc`, `main`) for every target in
//    package.json's `napi.targets`; those with an addon are packed.
// 3. The package: the TypeScript compiled to dist/ (JavaScript and declarations: Node does
//    not strip types under node_modules), README.md, CHANGELOG.md, the repository's two
//    license texts (LICENSE-MIT, LICENSE-APACHE), and a package.json whose
//    `exports` and `pi.extensions` point into dist/ and whose `optionalDependencies` name
//    every target's platform package (npm installs the one that matches the machine and
//    skips the rest).
// 4. `npm pack` of each into DIR (default pi/packed/), with packed.json listing them
//    (platform packages first: publish in that order). A tarball over 15 MB fails the run.
//
// Nothing outside DIR and a temporary directory is written; in DIR only this package's
// tarballs of earlier runs are replaced.
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { platformId } from "../src/addon.ts";

const MAX_TARBALL = 15 * 1000 * 1000;
const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name) => path.join(pkgDir, "node_modules", ".bin", name);

const { values: opts } = parseArgs({
  options: {
    out: { type: "string", default: path.join(pkgDir, "packed") },
    prebuilt: { type: "string" },
    artifacts: { type: "string" },
    target: { type: "string" },
  },
});
const out = path.resolve(opts.out);

function run(cmd, args, cwd = pkgDir) {
  const r = spawnSync(cmd, args, { cwd, stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (exit ${r.status}) in ${cwd}\n${r.stdout}`);
  return r.stdout;
}

const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
const binary = pkg.napi.binaryName;

/** `./src/x.ts` → `./dist/x.js` (and `.d.ts`): what the published manifest points at. */
function toDist(p, ext = ".js") {
  const m = /^\.\/src\/([\w.-]+)\.ts$/.exec(p);
  if (!m) throw new Error(`package.json: ${JSON.stringify(p)} is not a ./src/*.ts file, which pack.mjs can map to dist/`);
  return `./dist/${m[1]}${ext}`;
}

const stage = fs.mkdtempSync(path.join(os.tmpdir(), "session-state-pack-"));
try {
  // --- the published manifest, and the platform packages' directories --------------------
  const main = path.join(stage, "package");
  fs.mkdirSync(main);
  const exports = Object.fromEntries(
    Object.entries(pkg.exports).map(([k, v]) => [k, { types: toDist(v, ".d.ts"), default: toDist(v) }]),
  );
  const manifest = {
    name: pkg.name,
    version: pkg.version,
    description: pkg.description,
    keywords: pkg.keywords,
    license: pkg.license,
    repository: pkg.repository,
    homepage: pkg.homepage,
    type: pkg.type,
    main: toDist(pkg.main),
    types: toDist(pkg.main, ".d.ts"),
    exports,
    files: ["dist", "README.md", "CHANGELOG.md", "LICENSE-MIT", "LICENSE-APACHE"],
    pi: { ...pkg.pi, extensions: pkg.pi.extensions.map((e) => toDist(e)) },
    napi: pkg.napi,
    engines: pkg.engines,
    dependencies: pkg.dependencies,
    peerDependencies: pkg.peerDependencies,
    peerDependenciesMeta: pkg.peerDependenciesMeta,
  };
  fs.writeFileSync(path.join(main, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
  // napi-rs keeps the platform packages inside the package's directory (`npm/<platform>/`);
  // `files` leaves them out of the package's own tarball.
  const npmDir = path.join(main, "npm");
  run(bin("napi"), ["create-npm-dirs", "--cwd", main, "--npm-dir", "npm"]);
  const platforms = fs.readdirSync(npmDir).sort();
  manifest.optionalDependencies = Object.fromEntries(platforms.map((id) => [`${pkg.name}-${id}`, pkg.version]));
  fs.writeFileSync(path.join(main, "package.json"), JSON.stringify(manifest, null, 2) + "\n");

  // --- the addons -------------------------------------------------------------------------
  const built = path.join(stage, "artifacts");
  fs.mkdirSync(built);
  if (opts.prebuilt) {
    fs.copyFileSync(path.resolve(opts.prebuilt), path.join(built, `${binary}.${platformId()}.node`));
  } else {
    console.error(`pack: napi build --platform --release${opts.target ? ` --target ${opts.target}` : ""}`);
    const args = ["build", "--platform", "--release", "--no-js", "--manifest-path", "native/Cargo.toml", "--output-dir", built];
    if (opts.target) args.push("--target", opts.target);
    const r = spawnSync(bin("napi"), args, { cwd: pkgDir, stdio: "inherit" });
    if (r.status !== 0) throw new Error(`napi ${args.join(" ")} failed (exit ${r.status})`);
  }
  const addons = [built, ...(opts.artifacts ? [path.resolve(opts.artifacts)] : [])].flatMap((dir) =>
    fs
      .readdirSync(dir)
      .filter((f) => f.startsWith(`${binary}.`) && f.endsWith(".node"))
      .map((f) => ({ file: path.join(dir, f), id: f.slice(binary.length + 1, -".node".length) })),
  );
  if (addons.length === 0) throw new Error(`no addon to pack (${binary}.<platform>.node)`);
  for (const { file, id } of addons) {
    if (!platforms.includes(id)) {
      throw new Error(`${file}: platform ${id} is not in package.json's napi.targets (${platforms.join(", ")})`);
    }
    fs.copyFileSync(file, path.join(npmDir, id, `${binary}.${id}.node`));
  }

  // --- the package's JavaScript and declarations -------------------------------------------
  const sources = fs
    .readdirSync(path.join(pkgDir, "src"))
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))
    .map((f) => path.join("src", f));
  console.error(`pack: tsc ${sources.join(" ")} -> dist/`);
  run(bin("tsc"), [
    "--outDir", path.join(main, "dist"), "--rootDir", "src", "--declaration", "--rewriteRelativeImportExtensions",
    "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--strict", "--skipLibCheck",
    "--types", "node", ...sources,
  ]);
  for (const doc of ["README.md", "CHANGELOG.md"]) fs.copyFileSync(path.join(pkgDir, doc), path.join(main, doc));
  // The license texts are the repository's (the crate ships the same two).
  for (const text of ["LICENSE-MIT", "LICENSE-APACHE"]) fs.copyFileSync(path.join(pkgDir, "..", text), path.join(main, text));

  // --- the tarballs -----------------------------------------------------------------------
  fs.mkdirSync(out, { recursive: true });
  const prefix = pkg.name.replace(/^@/, "").replace("/", "-");
  for (const f of fs.readdirSync(out)) {
    if (f.startsWith(`${prefix}-`) && f.endsWith(".tgz")) fs.rmSync(path.join(out, f));
  }
  const dirs = [...new Set(addons.map((a) => a.id))].sort().map((id) => path.join(npmDir, id));
  const packed = [];
  for (const dir of [...dirs, main]) {
    const [r] = JSON.parse(run("npm", ["pack", dir, "--pack-destination", out, "--json", "--loglevel=error"], stage));
    packed.push({ name: r.name, version: r.version, file: r.filename, size: r.size, unpackedSize: r.unpackedSize, files: r.files.map((f) => f.path) });
  }
  fs.writeFileSync(path.join(out, "packed.json"), JSON.stringify(packed, null, 2) + "\n");
  const mb = (n) => `${(n / 1e6).toFixed(2)} MB`;
  for (const p of packed) console.log(`${path.join(out, p.file)}  ${mb(p.size)} (unpacked ${mb(p.unpackedSize)})`);
  const big = packed.filter((p) => p.size > MAX_TARBALL);
  if (big.length > 0) throw new Error(`over ${mb(MAX_TARBALL)}: ${big.map((p) => `${p.file} ${mb(p.size)}`).join(", ")}`);
} finally {
  fs.rmSync(stage, { recursive: true, force: true });
}
