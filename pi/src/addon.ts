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

/** glibc or musl, the way napi-rs's own loader decides it (glibc reports its version). */
function linuxLibc(): "gnu" | "musl" {
  const report = process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
  return report?.header?.glibcVersionRuntime ? "gnu" : "musl";
}

/**
 * This machine's platform as napi-rs names it (`linux-x64-gnu`, `darwin-arm64`,
 * `win32-x64-msvc`, …): the suffix of the platform package and of the addon's file name.
 */
export function platformId(): string {
  const { platform, arch } = process;
  if (platform === "linux") {
    const libc = linuxLibc();
    return arch === "arm" ? `linux-arm-${libc}eabihf` : `linux-${arch}-${libc}`;
  }
  if (platform === "win32") return `win32-${arch}-msvc`;
  return `${platform}-${arch}`;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message.split("\n")[0] : String(e);
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
    try {
      return require(fromEnv) as T;
    } catch (e) {
      throw new Error(`session-state: cannot load the addon ${fromEnv} named by ${ADDON_ENV}: ${message(e)}`);
    }
  }

  const tried: string[] = [];
  const local = path.join(root, "native", `${binary}.node`);
  if (fs.existsSync(local)) {
    try {
      return require(local) as T;
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
    if ((e as NodeJS.ErrnoException).code !== "MODULE_NOT_FOUND") throw e;
    tried.push(`${platformPackage}: not installed`);
  }
  if (version !== undefined) {
    if (version !== manifest.version) {
      throw new Error(
        `session-state: the addon package ${platformPackage} is version ${version}, but ${manifest.name} is ${manifest.version}: ` +
          `reinstall ${manifest.name} (\`pi install npm:${manifest.name}@${manifest.version}\`, or \`npm install ${manifest.name}@${manifest.version}\`) so both match`,
      );
    }
    try {
      return require(platformPackage) as T;
    } catch (e) {
      throw new Error(`session-state: cannot load the addon of ${platformPackage} (${id}): ${message(e)}`);
    }
  }

  const prebuilt = Object.keys(manifest.optionalDependencies ?? {})
    .filter((dep) => dep.startsWith(`${manifest.name}-`))
    .map((dep) => dep.slice(manifest.name.length + 1));
  const fix = prebuilt.includes(id)
    ? `npm skipped the optional dependency ${platformPackage}: reinstall the package with optional dependencies ` +
      `(\`pi install npm:${manifest.name}@${manifest.version}\` again, or \`npm install\` without --omit=optional / --no-optional)`
    : prebuilt.length > 0
      ? `there is no prebuilt addon for ${id} (prebuilt: ${prebuilt.join(", ")}): build it from a checkout of the ` +
        `repository with \`npm ci && npm run build\` in pi/ (Rust 1.89 or newer), then install that directory`
      : `build it with \`npm ci && npm run build\` in pi/ (Rust 1.89 or newer), or set ${ADDON_ENV} to the absolute path of a built addon`;
  throw new Error(
    `session-state: no native addon for this platform, ${id} (Node ${process.version}). Tried: ${tried.join("; ")}. Fix: ${fix}.`,
  );
}
