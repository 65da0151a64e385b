// `npm run pack`: every tarball to publish, in pi/packed/ (napi-rs's platform-package layout).
//
//   npm run pack [-- --out DIR] [--all | --target TRIPLE …] [--prebuilt FILE] [--artifacts DIR]
//
// 1. The addons:
//    - with no option, a release build for this machine (`napi build --platform --release`,
//      stripped by the workspace's release profile), with the machine's own toolchain;
//    - `--all`, every target of package.json's `napi.targets`, or `--target TRIPLE` (one or
//      more of them), built from this machine through napi-rs's cross-compile path
//      (`napi build --cross-compile`: cargo-zigbuild, with zig as the C compiler and
//      linker). A Linux glibc target is built against glibc 2.17 (`<triple>.2.17`), so the
//      addon loads on any glibc from 2.17 on; a macOS target for macOS 11.0 and newer
//      (`MACOSX_DEPLOYMENT_TARGET`). Both floors are package.json's `prebuilt`. What the cross build needs is installed the
//      first time it is needed: the Rust targets (`rustup target add`), and zig and
//      cargo-zigbuild pinned by scripts/cross-requirements.txt, from PyPI into a virtual
//      environment of this script's own (<cargo target dir>/pi-cross/venv). A Windows
//      target (`x86_64-pc-windows-gnu`, `aarch64-pc-windows-gnullvm`) is built by
//      `cargo zigbuild` itself, which napi-rs's `--cross-compile` refuses for non-MSVC
//      Windows targets: zig links it with its own MinGW-w64 runtime, statically, against
//      Windows' own DLLs (the Universal C Runtime among them), and the addon looks Node's
//      N-API functions up in the process that loads it (see buildWindows below);
//    - `--prebuilt FILE`, an addon already built for this machine (no Rust build: what
//      `cargo test` packs).
//    `--artifacts DIR` adds addons built elsewhere, named as napi-rs names them
//    (`session-state.<platform>.node`).
// 2. One platform package per addon, `@session-state/pi-<platform>`: `napi create-npm-dirs`
//    writes its package.json (`os`, `cpu`, `libc`, `main`) for every target in
//    package.json's `napi.targets`, without `engines` (npm would skip the addon silently on
//    an older Node) and with `libc` on Linux only; those with an addon are packed.
// 3. The package: the TypeScript compiled to dist/ (JavaScript and declarations: Node does
//    not strip types under node_modules), README.md, CHANGELOG.md, the repository's two
//    license texts (LICENSE-MIT, LICENSE-APACHE), and a package.json whose
//    `exports` and `pi.extensions` point into dist/ and whose `optionalDependencies` name
//    every target's platform package (npm installs the one that matches the machine and
//    skips the rest).
// 4. `npm pack` of each into DIR (default pi/packed/), with packed.json listing them
//    (platform packages first: publish in that order). A tarball over 15 MB fails the run.
//    Each tarball's size and each build's time are printed.
//
// What the artifacts must be (format, architecture, exported symbol, linked libraries, the
// glibc floor) is checked by tests/pi_platforms.rs, not here.
//
// Nothing outside DIR, a temporary directory and <cargo target dir> is written; in DIR only
// this package's tarballs of earlier runs are replaced.
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
    target: { type: "string", multiple: true },
    all: { type: "boolean", default: false },
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

/** The glibc every Linux glibc addon is linked against (package.json's `prebuilt.glibcFloor`). */
const GLIBC_FLOOR = pkg.prebuilt.glibcFloor;
/** The oldest macOS a macOS addon loads on (`prebuilt.macosFloor`; Node 22's own floor). */
const MACOS_FLOOR = pkg.prebuilt.macosFloor;

const targets = opts.all ? [...pkg.napi.targets] : (opts.target ?? []);
if (opts.all && opts.target) throw new Error("pack: give --all or --target, not both");
if (opts.prebuilt && targets.length > 0) throw new Error("pack: --prebuilt packs this machine's addon; it does not go with --all or --target");
for (const t of targets) {
  if (!pkg.napi.targets.includes(t)) {
    throw new Error(`pack: --target ${t} is not in package.json's napi.targets (${pkg.napi.targets.join(", ")})`);
  }
}

/** The cargo target directory (the workspace's `target/` unless CARGO_TARGET_DIR says otherwise). */
function cargoTargetDir() {
  const dir = process.env.CARGO_TARGET_DIR;
  return dir ? path.resolve(dir) : path.join(pkgDir, "..", "target");
}

/**
 * What a cross build needs, installed when missing: the Rust targets, and zig and
 * cargo-zigbuild (pinned by scripts/cross-requirements.txt) in a virtual environment of
 * this script's own. Returns the environment the builds run in.
 */
function crossToolchain(wanted) {
  const rustup = spawnSync("rustup", ["target", "list", "--installed"], { encoding: "utf8" });
  if (rustup.error || rustup.status !== 0) {
    throw new Error(
      `pack: the cross build adds the Rust targets with rustup, which did not run (${rustup.error?.message ?? rustup.stderr.trim()}). ` +
        `Install Rust with rustup, or add the standard library of ${wanted.join(", ")} another way`,
    );
  }
  const installed = new Set(rustup.stdout.split("\n").map((l) => l.trim()));
  const missing = wanted.filter((t) => !installed.has(t));
  if (missing.length > 0) {
    console.error(`pack: rustup target add ${missing.join(" ")}`);
    run("rustup", ["target", "add", ...missing]);
  }

  const requirements = fs.readFileSync(path.join(pkgDir, "scripts", "cross-requirements.txt"), "utf8");
  const venv = path.join(cargoTargetDir(), "pi-cross", "venv");
  const marker = path.join(venv, ".session-state-pack");
  const bin = path.join(venv, "bin");
  const ready = fs.existsSync(marker) && fs.readFileSync(marker, "utf8") === requirements && fs.existsSync(path.join(bin, "cargo-zigbuild"));
  if (!ready) {
    if (fs.existsSync(venv) && !fs.existsSync(marker)) {
      throw new Error(`pack: ${venv} exists but was not made by this script (no ${path.basename(marker)}): move it away, then run again`);
    }
    console.error(`pack: installing zig and cargo-zigbuild (scripts/cross-requirements.txt) into ${venv}`);
    fs.rmSync(venv, { recursive: true, force: true });
    const python = process.env.PYTHON ?? "python3";
    const made = spawnSync(python, ["-m", "venv", venv], { stdio: ["ignore", "inherit", "inherit"] });
    if (made.error || made.status !== 0) {
      throw new Error(
        `pack: \`${python} -m venv\` failed (${made.error?.message ?? `exit ${made.status}`}): the cross build installs zig and ` +
          `cargo-zigbuild from PyPI and needs Python 3 with its venv module (Debian: apt-get install python3-venv; or set PYTHON)`,
      );
    }
    run(path.join(bin, "python"), ["-m", "pip", "install", "--disable-pip-version-check", "--quiet", "-r", path.join(pkgDir, "scripts", "cross-requirements.txt")]);
    fs.writeFileSync(marker, requirements);
  }
  return {
    ...process.env,
    PATH: [bin, path.join(pkgDir, "node_modules", ".bin"), process.env.PATH ?? ""].join(path.delimiter),
    // cargo-zigbuild runs zig as `python -m ziglang` with this Python (the venv's).
    CARGO_ZIGBUILD_PYTHON_PATH: path.join(bin, "python"),
  };
}

/** What `zig`/cargo-zigbuild is asked to build: a glibc target pinned to the floor. */
function zigTarget(triple) {
  return triple.endsWith("-linux-gnu") ? `${triple}.${GLIBC_FLOOR}` : triple;
}

/** A Windows target: built with cargo-zigbuild directly (napi-rs's `--cross-compile` only builds MSVC). */
function isWindows(triple) {
  return triple.endsWith("-pc-windows-gnu") || triple.endsWith("-pc-windows-gnullvm");
}

/** napi-rs's platform id of a target triple (`x86_64-pc-windows-gnu` → `win32-x64-gnu`). */
function tripleId(triple) {
  const [cpu, , sys, abi] = triple.split("-");
  const arch = { x86_64: "x64", aarch64: "arm64" }[cpu] ?? cpu;
  const platform = { windows: "win32", darwin: "darwin", linux: "linux" }[sys] ?? sys;
  return abi ? `${platform}-${arch}-${abi}` : `${platform}-${arch}`;
}

/**
 * A Windows addon, from this machine: `cargo zigbuild --release --target TRIPLE -p
 * session-state-pi` (zig links it, with zig's own MinGW-w64 runtime, statically: the DLL
 * imports only Windows' own DLLs), copied to `session-state.<platform>.node` in `built`.
 *
 * The addon imports nothing from node.exe: on Windows it finds Node's N-API functions in
 * the process that loads it (napi-rs's `dyn-symbols`, native/Cargo.toml). napi-build's
 * windows-gnu link line still asks for `-lnode` from a folder holding `libnode.dll`
 * (`LIBNODE_PATH`): that folder is <cargo target dir>/pi-cross/libnode/, made here with an
 * empty `libnode.dll` and an empty archive `libnode.a`, both built, never committed, and
 * neither linked into anything.
 */
function buildWindows(triple, env, built) {
  const libnode = path.join(cargoTargetDir(), "pi-cross", "libnode");
  fs.mkdirSync(libnode, { recursive: true });
  fs.writeFileSync(path.join(libnode, "libnode.a"), "!<arch>\n");
  fs.writeFileSync(path.join(libnode, "libnode.dll"), "");
  const args = ["zigbuild", "--release", "--target", triple, "-p", "session-state-pi"];
  console.error(`pack: cargo ${args.join(" ")} (LIBNODE_PATH=${libnode})`);
  const started = Date.now();
  const r = spawnSync("cargo", args, { cwd: pkgDir, stdio: "inherit", env: { ...env, LIBNODE_PATH: libnode } });
  if (r.error || r.status !== 0) throw new Error(`pack: cargo ${args.join(" ")} failed (${r.error?.message ?? `exit ${r.status}`})`);
  const dll = path.join(cargoTargetDir(), triple, "release", "session_state_pi.dll");
  fs.copyFileSync(dll, path.join(built, `${binary}.${tripleId(triple)}.node`));
  return { target: triple, seconds: (Date.now() - started) / 1000 };
}

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
  // napi-rs copies the package's `engines` into each platform package. npm drops an optional
  // dependency whose engine check fails, silently: on an older Node the package would then
  // install without its addon. The platform packages carry no `engines`; the package's own
  // (Pi's floor) is what npm names at install time.
  for (const id of platforms) {
    const file = path.join(npmDir, id, "package.json");
    const platformManifest = JSON.parse(fs.readFileSync(file, "utf8"));
    delete platformManifest.engines;
    // napi-rs writes `libc: ["glibc"]` for a `-gnu` Windows target too. npm checks `libc`
    // on Linux only and refuses a package that names one anywhere else: on Windows the
    // addon would never install.
    if (!platformManifest.os?.includes("linux")) delete platformManifest.libc;
    fs.writeFileSync(file, JSON.stringify(platformManifest, null, 2) + "\n");
  }
  manifest.optionalDependencies = Object.fromEntries(platforms.map((id) => [`${pkg.name}-${id}`, pkg.version]));
  fs.writeFileSync(path.join(main, "package.json"), JSON.stringify(manifest, null, 2) + "\n");

  // --- the package's JavaScript and declarations (first: a type error fails before the builds)
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

  // --- the addons -------------------------------------------------------------------------
  const built = path.join(stage, "artifacts");
  fs.mkdirSync(built);
  const timings = [];
  if (opts.prebuilt) {
    fs.copyFileSync(path.resolve(opts.prebuilt), path.join(built, `${binary}.${platformId()}.node`));
  } else if (targets.length === 0) {
    console.error("pack: napi build --platform --release (this machine)");
    const args = ["build", "--platform", "--release", "--no-js", "--manifest-path", "native/Cargo.toml", "--output-dir", built];
    const started = Date.now();
    const r = spawnSync(bin("napi"), args, { cwd: pkgDir, stdio: "inherit" });
    if (r.status !== 0) throw new Error(`napi ${args.join(" ")} failed (exit ${r.status})`);
    timings.push({ target: "this machine", seconds: (Date.now() - started) / 1000 });
  } else {
    const env = crossToolchain(targets);
    for (const t of targets) {
      if (isWindows(t)) {
        timings.push(buildWindows(t, env, built));
        continue;
      }
      const args = ["build", "--platform", "--release", "--no-js", "--cross-compile", "--target", zigTarget(t), "--manifest-path", "native/Cargo.toml", "--output-dir", built];
      console.error(`pack: napi ${args.join(" ")}`);
      const started = Date.now();
      // zig would otherwise build for its newest macOS, and the addon would not load on older ones.
      const targetEnv = t.endsWith("-apple-darwin") ? { ...env, MACOSX_DEPLOYMENT_TARGET: MACOS_FLOOR } : env;
      const r = spawnSync(bin("napi"), args, { cwd: pkgDir, stdio: "inherit", env: targetEnv });
      if (r.error || r.status !== 0) throw new Error(`pack: napi ${args.join(" ")} failed (${r.error?.message ?? `exit ${r.status}`})`);
      timings.push({ target: t, seconds: (Date.now() - started) / 1000 });
    }
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
  for (const { target, seconds } of timings) console.log(`built ${target} in ${seconds.toFixed(0)} s`);
  for (const p of packed) console.log(`${path.join(out, p.file)}  ${mb(p.size)} (unpacked ${mb(p.unpackedSize)})`);
  const big = packed.filter((p) => p.size > MAX_TARBALL);
  if (big.length > 0) throw new Error(`over ${mb(MAX_TARBALL)}: ${big.map((p) => `${p.file} ${mb(p.size)}`).join(", ")}`);
} finally {
  fs.rmSync(stage, { recursive: true, force: true });
}
