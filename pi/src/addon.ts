/**
 * Finds and loads the package's native addon (napi-rs), in this order:
 *
 * 1. `SESSION_STATE_PI_ADDON`: the absolute path of a `.node` file. `cargo test` builds the
 *    addon under `target/` and points here, so a test run never touches `native/`.
 * 2. `native/session-state.node` in the package: what `npm run build` makes in a checkout.
 * 3. The platform package `@session-state/pi-<platform>` (napi-rs's layout: one npm package
 *    per platform, each an `optionalDependencies` entry of the published package, npm
 *    installs the one whose `os`/`cpu`/`libc` match): what `pi install npm:@session-state/pi`
 *    gets.
 *
 * When none loads, the error names this machine's platform, what was tried and the fix.
 */
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

/** The environment variable that names the addon to load (an absolute path). */
export const ADDON_ENV = "SESSION_STATE_PI_ADDON";

const require = createRequire(import.meta.url);
/** The package root: this file is `src/addon.ts` in a checkout, `dist/addon.js` when published. */
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

interface Manifest {
  name: string;
  version: string;
  napi?: { binaryName?: string };
  optionalDependencies?: Record<string, string>;
}

/** The C library of a Linux machine, as napi-rs names it in platform ids. */
export type Libc = "gnu" | "musl";

/** What the libc detection looks at; each probe returns `null` when it cannot tell. */
export interface LibcProbes {
  /** The text of `/usr/bin/ldd` (glibc's is a script, musl's names the musl loader). */
  lddFile(): string | null;
  /** `process.report.getReport()`: glibc reports its version; musl's loader is among the shared objects. */
  report(): { header?: { glibcVersionRuntime?: string }; sharedObjects?: string[] } | null;
  /** The output of `ldd --version`. */
  lddVersion(): string | null;
}

const machineProbes: LibcProbes = {
  lddFile: () => {
    try {
      return fs.readFileSync("/usr/bin/ldd", "utf8");
    } catch {
      return null;
    }
  },
  report: () => {
    if (typeof process.report?.getReport !== "function") return null;
    // As napi-rs does: the report then skips its network section (no DNS lookups).
    (process.report as { excludeNetwork?: boolean }).excludeNetwork = true;
    return process.report.getReport() as ReturnType<LibcProbes["report"]>;
  },
  lddVersion: () => {
    try {
      return execFileSync("ldd", ["--version"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    } catch (e) {
      // musl's ldd prints its version on stderr and exits 1.
      const err = e as { stdout?: string; stderr?: string };
      return typeof err.stderr === "string" || typeof err.stdout === "string" ? `${err.stdout ?? ""}${err.stderr ?? ""}` : null;
    }
  },
};

/**
 * glibc or musl, decided as napi-rs's own loader decides it, in the same order: the text of
 * `/usr/bin/ldd`, then the process report (glibc reports its version; a musl loader among
 * the shared objects), then `ldd --version`; glibc when nothing tells.
 */
export function detectLibc(probes: LibcProbes = machineProbes): Libc {
  const ldd = probes.lddFile();
  if (ldd !== null) return ldd.includes("musl") ? "musl" : "gnu";
  const report = probes.report();
  if (report) {
    if (report.header?.glibcVersionRuntime) return "gnu";
    const isMusl = (f: string) => f.includes("libc.musl-") || f.includes("ld-musl-");
    return Array.isArray(report.sharedObjects) && report.sharedObjects.some(isMusl) ? "musl" : "gnu";
  }
  return probes.lddVersion()?.includes("musl") ? "musl" : "gnu";
}

/** A machine as the loader sees it: Node's `process.platform` and `process.arch`, and on Linux the C library. */
export interface Machine {
  platform: string;
  arch: string;
  libc?: Libc;
}

/** This machine (the C library detected on Linux only). */
export function thisMachine(): Machine {
  const { platform, arch } = process;
  return platform === "linux" ? { platform, arch, libc: detectLibc() } : { platform, arch };
}

/**
 * A machine's platform as napi-rs names it (`linux-x64-gnu`, `linux-arm64-musl`,
 * `darwin-arm64`, `win32-x64-gnu`, …): the suffix of the platform package and of the
 * addon's file name. On Windows the ids are those of the targets the packages are built
 * for from Linux with zig: `win32-x64-gnu` (x86_64-pc-windows-gnu) and
 * `win32-arm64-gnullvm` (aarch64-pc-windows-gnullvm); either addon links only Windows' own
 * DLLs, whatever compiler built the Node that loads it.
 */
export function platformId(machine: Machine = thisMachine()): string {
  const { platform, arch } = machine;
  if (platform === "linux") {
    const libc = machine.libc ?? "gnu";
    return arch === "arm" ? `linux-arm-${libc}eabihf` : `linux-${arch}-${libc}`;
  }
  if (platform === "win32") return arch === "arm64" ? "win32-arm64-gnullvm" : `win32-${arch}-gnu`;
  return `${platform}-${arch}`;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message.split("\n")[0] : String(e);
}

const BUILD = "build it from a checkout of the repository with `npm ci && npm run build` in pi/ (Rust 1.89 or newer), then install that directory";

/** The oldest Node the package runs on: Pi's own floor (its `engines`). */
export const NODE_FLOOR = "22.19.0";

/** Whether Node `version` (`"22.19.0"`, `"v20.20.2"`) is at least {@link NODE_FLOOR}. */
export function nodeMeetsFloor(version: string): boolean {
  const [a, b, c] = version.replace(/^v/, "").split(".").map((n) => Number.parseInt(n, 10));
  const [x, y, z] = NODE_FLOOR.split(".").map((n) => Number.parseInt(n, 10));
  return a !== x ? a > x : b !== y ? b > y : c >= z;
}

/** A function every build of the addon exports: what tells the addon from another module. */
const ADDON_MARK = "statePrefix";

/**
 * `module` when it is the session-state addon (it exports {@link ADDON_MARK}); else why not,
 * for the error that names what was loaded.
 */
function notTheAddon(module: unknown): string | null {
  if (module !== null && typeof module === "object" && typeof (module as Record<string, unknown>)[ADDON_MARK] === "function") return null;
  const keys = module !== null && typeof module === "object" ? Object.keys(module).slice(0, 5) : [];
  return `it loaded, but it is not the session-state addon (no ${ADDON_MARK}() among its exports${keys.length > 0 ? `: ${keys.join(", ")}` : ""})`;
}

/**
 * What to do when no addon loads on the platform `id`, for a package described by
 * `manifest` (its `optionalDependencies` name the platform packages that were published).
 */
export function missingAddonFix(
  id: string,
  manifest: Pick<Manifest, "name" | "version" | "optionalDependencies">,
  nodeVersion: string = process.versions.node,
): string {
  const prebuilt = Object.keys(manifest.optionalDependencies ?? {})
    .filter((dep) => dep.startsWith(`${manifest.name}-`))
    .map((dep) => dep.slice(manifest.name.length + 1));
  if (prebuilt.includes(id)) {
    if (!nodeMeetsFloor(nodeVersion)) {
      return (
        `this is Node ${nodeVersion}, and the package needs Node ${NODE_FLOOR} or newer (Pi's own floor): install Node ${NODE_FLOOR} or newer, ` +
        `then reinstall the package with it (\`pi install npm:${manifest.name}@${manifest.version}\`, or \`npm install ${manifest.name}@${manifest.version}\`)`
      );
    }
    return (
      `npm skipped the optional dependency ${manifest.name}-${id}: reinstall the package with optional dependencies ` +
      `(\`pi install npm:${manifest.name}@${manifest.version}\` again, or \`npm install\` without --omit=optional / --no-optional)`
    );
  }
  if (id.startsWith("win32-")) {
    const windows = prebuilt.filter((p) => p.startsWith("win32-"));
    return (
      `there is no prebuilt addon for Windows on this architecture (${id}; prebuilt for Windows: ${windows.length > 0 ? windows.join(", ") : "none"}): ` +
      `${BUILD}, with Rust's MSVC toolchain (rustup's default on Windows, and Visual Studio's C++ build tools)`
    );
  }
  if (prebuilt.length > 0) return `there is no prebuilt addon for ${id} (prebuilt: ${prebuilt.join(", ")}): ${BUILD}`;
  return `${BUILD}, or set ${ADDON_ENV} to the absolute path of a built addon`;
}

/** Loads the addon, or throws an `Error` that names the platform and the fix. */
export function loadAddon<T>(): T {
  const manifest = require(path.join(root, "package.json")) as Manifest;
  const binary = manifest.napi?.binaryName ?? "session-state";
  const id = platformId();

  const fromEnv = process.env[ADDON_ENV];
  if (fromEnv) {
    if (!path.isAbsolute(fromEnv)) {
      throw new Error(`session-state: ${ADDON_ENV} must be the absolute path of the addon (a .node file), not ${JSON.stringify(fromEnv)}`);
    }
    const envFix =
      `Fix: set ${ADDON_ENV} to a session-state.node that \`npm run build\` made (pi/native/session-state.node in a checkout), ` +
      `built for ${id}, or unset it to load the package's own addon`;
    if (path.extname(fromEnv) !== ".node") {
      throw new Error(
        `session-state: ${ADDON_ENV} names ${fromEnv}, which is not an addon for ${id} (Node ${process.version}): an addon is a .node file. ${envFix}.`,
      );
    }
    let loaded: unknown;
    try {
      loaded = require(fromEnv);
    } catch (e) {
      throw new Error(`session-state: cannot load the addon ${fromEnv} named by ${ADDON_ENV} on ${id} (Node ${process.version}): ${message(e)}. ${envFix}.`);
    }
    const wrong = notTheAddon(loaded);
    if (wrong) throw new Error(`session-state: ${ADDON_ENV} names ${fromEnv} on ${id}: ${wrong}. ${envFix}.`);
    return loaded as T;
  }

  const tried: string[] = [];
  const local = path.join(root, "native", `${binary}.node`);
  if (fs.existsSync(local)) {
    try {
      const loaded: unknown = require(local);
      const wrong = notTheAddon(loaded);
      if (!wrong) return loaded as T;
      tried.push(`${local}: ${wrong}`);
    } catch (e) {
      tried.push(`${local}: ${message(e)}`);
    }
  } else {
    tried.push(`${local}: not built`);
  }

  const platformPackage = `${manifest.name}-${id}`;
  let version: string | undefined;
  try {
    version = (require(`${platformPackage}/package.json`) as Manifest).version;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "MODULE_NOT_FOUND") {
      // Node's own error ("Invalid package config", a JSON SyntaxError) names neither the
      // platform nor the fix.
      throw new Error(
        `session-state: the addon package ${platformPackage} for this platform, ${id}, is damaged: its package.json does not parse ` +
          `(${message(e).replace(/\.$/, "")}). Tried: ${[...tried, `${platformPackage}/package.json`].join("; ")}. Fix: reinstall ${manifest.name} ` +
          `(\`pi install npm:${manifest.name}@${manifest.version}\` again, or delete node_modules/${platformPackage} and \`npm install\`).`,
      );
    }
    tried.push(`${platformPackage}: not installed`);
  }
  if (version !== undefined) {
    if (version !== manifest.version) {
      throw new Error(
        `session-state: the addon package ${platformPackage} is version ${version}, but ${manifest.name} is ${manifest.version}: ` +
          `reinstall ${manifest.name} (\`pi install npm:${manifest.name}@${manifest.version}\`, or \`npm install ${manifest.name}@${manifest.version}\`) so both match`,
      );
    }
    let loaded: unknown;
    try {
      loaded = require(platformPackage);
    } catch (e) {
      throw new Error(`session-state: cannot load the addon of ${platformPackage} (${id}): ${message(e)}`);
    }
    const wrong = notTheAddon(loaded);
    if (wrong) {
      throw new Error(
        `session-state: the addon package ${platformPackage} (${id}): ${wrong}. Fix: reinstall ${manifest.name} (\`pi install npm:${manifest.name}@${manifest.version}\` again)`,
      );
    }
    return loaded as T;
  }

  throw new Error(
    `session-state: no native addon for this platform, ${id} (Node ${process.version}). Tried: ${tried.join("; ")}. Fix: ${missingAddonFix(id, manifest)}.`,
  );
}
