// The loader's choice of platform package (`@session-state/pi/addon`), for every platform,
// architecture and C library Node reports, and what it says where no addon exists.
import assert from "node:assert/strict";
import { test } from "node:test";
import { detectLibc, missingAddonFix, nodeMeetsFloor, platformId, type LibcProbes } from "@session-state/pi/addon";

const manifest = {
  name: "@session-state/pi",
  version: "0.1.0",
  optionalDependencies: Object.fromEntries(
    ["linux-x64-gnu", "linux-arm64-gnu", "linux-x64-musl", "linux-arm64-musl", "darwin-x64", "darwin-arm64", "win32-x64-gnu"].map((id) => [
      `@session-state/pi-${id}`,
      "0.1.0",
    ]),
  ),
};

test("each platform, architecture and C library picks its own package", () => {
  const cases: Array<[Parameters<typeof platformId>[0], string]> = [
    [{ platform: "linux", arch: "x64", libc: "gnu" }, "linux-x64-gnu"],
    [{ platform: "linux", arch: "x64", libc: "musl" }, "linux-x64-musl"],
    [{ platform: "linux", arch: "arm64", libc: "gnu" }, "linux-arm64-gnu"],
    [{ platform: "linux", arch: "arm64", libc: "musl" }, "linux-arm64-musl"],
    [{ platform: "linux", arch: "arm", libc: "gnu" }, "linux-arm-gnueabihf"],
    [{ platform: "linux", arch: "arm", libc: "musl" }, "linux-arm-musleabihf"],
    [{ platform: "darwin", arch: "x64" }, "darwin-x64"],
    [{ platform: "darwin", arch: "arm64" }, "darwin-arm64"],
    [{ platform: "win32", arch: "x64" }, "win32-x64-gnu"],
    [{ platform: "win32", arch: "arm64" }, "win32-arm64-gnullvm"],
    [{ platform: "freebsd", arch: "x64" }, "freebsd-x64"],
  ];
  for (const [machine, id] of cases) {
    assert.equal(platformId(machine), id, JSON.stringify(machine));
  }
  // Every published package is one of these, and each of them is published.
  const published = Object.keys(manifest.optionalDependencies).map((d) => d.slice("@session-state/pi-".length));
  for (const id of published) assert.ok(cases.some(([, c]) => c === id), id);
});

function probes(p: Partial<{ lddFile: string | null; report: ReturnType<LibcProbes["report"]>; lddVersion: string | null }>): LibcProbes & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    lddFile: () => (asked.push("lddFile"), p.lddFile ?? null),
    report: () => (asked.push("report"), p.report ?? null),
    lddVersion: () => (asked.push("lddVersion"), p.lddVersion ?? null),
  };
}

test("the C library is detected as napi-rs detects it, in its order", () => {
  // 1. /usr/bin/ldd decides when it can be read.
  const glibcLdd = probes({ lddFile: "#! /bin/bash\n# This file is part of the GNU C Library.\n", report: { sharedObjects: ["/lib/ld-musl-x86_64.so.1"] } });
  assert.equal(detectLibc(glibcLdd), "gnu");
  assert.deepEqual(glibcLdd.asked, ["lddFile"]);
  const alpine = probes({ lddFile: "#!/bin/sh\nexec /lib/ld-musl-aarch64.so.1 --list \"$@\"\n" });
  assert.equal(detectLibc(alpine), "musl");
  // 2. Else the process report: glibc reports its version; a musl loader among the shared objects.
  assert.equal(detectLibc(probes({ report: { header: { glibcVersionRuntime: "2.36" } } })), "gnu");
  assert.equal(detectLibc(probes({ report: { header: {}, sharedObjects: ["/usr/lib/libc.musl-x86_64.so.1"] } })), "musl");
  assert.equal(detectLibc(probes({ report: { header: {}, sharedObjects: ["/lib/ld-musl-x86_64.so.1"] } })), "musl");
  const report = probes({ report: { header: {}, sharedObjects: ["/lib/x86_64-linux-gnu/libc.so.6"] }, lddVersion: "musl libc" });
  assert.equal(detectLibc(report), "gnu");
  assert.deepEqual(report.asked, ["lddFile", "report"]);
  // 3. Else `ldd --version`; glibc when nothing tells.
  assert.equal(detectLibc(probes({ lddVersion: "musl libc (x86_64)\nVersion 1.2.5\n" })), "musl");
  assert.equal(detectLibc(probes({ lddVersion: "ldd (Debian GLIBC 2.36-9) 2.36\n" })), "gnu");
  assert.equal(detectLibc(probes({})), "gnu");
});

test("this machine's platform id is its own", () => {
  const id = platformId();
  assert.ok(id.startsWith(`${process.platform}-${process.arch}`), id);
  if (process.platform === "linux") {
    const glibc = (process.report.getReport() as { header: { glibcVersionRuntime?: string } }).header.glibcVersionRuntime;
    assert.equal(id.endsWith("-gnu"), glibc !== undefined, `${id} (glibc ${glibc})`);
  }
});

test("with no addon, the fix fits the platform", () => {
  // A published platform whose package npm skipped: reinstall.
  for (const id of ["linux-x64-gnu", "linux-arm64-musl", "darwin-arm64", "win32-x64-gnu"]) {
    const fix = missingAddonFix(id, manifest, "22.19.0");
    assert.match(fix, new RegExp(`npm skipped the optional dependency @session-state/pi-${id}`));
    assert.match(fix, /pi install npm:@session-state\/pi@0\.1\.0/);
    // On a Node below Pi's floor the advice is the Node to install, never "reinstall with
    // optional dependencies" (which would not help).
    const old = missingAddonFix(id, manifest, "20.20.2");
    assert.match(old, /this is Node 20\.20\.2, and the package needs Node 22\.19\.0 or newer/);
    assert.doesNotMatch(old, /optional/);
  }
  // Windows on an architecture with no package: what Windows has, and how to build one.
  for (const id of ["win32-arm64-gnullvm", "win32-ia32-gnu"]) {
    const fix = missingAddonFix(id, manifest);
    assert.match(fix, new RegExp(`no prebuilt addon for Windows on this architecture \\(${id}; prebuilt for Windows: win32-x64-gnu\\)`));
    assert.match(fix, /npm ci && npm run build/);
    assert.match(fix, /MSVC/);
    assert.doesNotMatch(fix, /not.*yet/);
  }
  // Another platform: what is prebuilt, and the build from a checkout.
  const fix = missingAddonFix("freebsd-x64", manifest);
  assert.match(fix, /there is no prebuilt addon for freebsd-x64 \(prebuilt: linux-x64-gnu, linux-arm64-gnu, /);
  assert.match(fix, /npm ci && npm run build/);
  // A checkout with nothing published: build it, or name an addon.
  assert.match(missingAddonFix("linux-x64-gnu", { name: "@session-state/pi", version: "0.1.0" }), /SESSION_STATE_PI_ADDON/);
});

test("Node's version against Pi's floor, 22.19", () => {
  for (const v of ["22.19.0", "v22.19.0", "22.23.3", "23.0.0", "24.1.0"]) assert.equal(nodeMeetsFloor(v), true, v);
  for (const v of ["20.20.2", "v20.19.0", "22.18.9", "22.9.0", "21.99.0"]) assert.equal(nodeMeetsFloor(v), false, v);
});
