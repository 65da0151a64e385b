// The commands in Pi's non-interactive modes, through the real `pi` command line
// (`pi -p "/state:status"`): the answer is on stdout in print mode, and on stderr in JSON
// mode, whose stdout stays Pi's event stream.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startPi } from "@session-state/pi/testing";
import { piCommand as pi, TEST_EXTENSION, probeCmd, tmpDir, toolTurn } from "./helpers.ts";

test("pi -p /state:status prints the report on stdout", (t) => {
  const dir = tmpDir(t);
  const r = pi(dir, ["-p", "/state:status"]);
  assert.equal(r.code, 0, r.stderr);
  // The database's path with the platform's separator (`\` on Windows).
  assert.match(r.stdout, /^session   [0-9a-f-]+ \(.*\.jsonl\)\ndatabase  .*[\\/]agent[\\/]sessions[\\/]states\.sqlite.*\nlock      none\npi        this Pi: pid:\d+.*\nevents    none\n$/);
});

test("pi -p --session FILE /state:history and /state:status report a saved session; JSON mode keeps stdout for events", async (t) => {
  const dir = tmpDir(t);
  const kit = await startPi({ dir, extensions: [TEST_EXTENSION] });
  await kit.prompt("hi");
  await toolTurn(kit, ["a"]);
  await probeCmd(kit, { op: "patch", value: { done: true } });
  const file = kit.file!;
  const ids = kit.events("todo").map((e) => e.id);
  await kit.shutdown();

  const h = pi(dir, ["-p", "--session", file, "/state:history todo"]);
  assert.equal(h.code, 0, h.stderr);
  assert.equal(
    h.stdout,
    [
      `todo (branch scope) at ${ids[1]}: 2 events, oldest first`,
      `  ${ids[0]}  set    ["a"]`,
      `  ${ids[1]}  patch  {"done":true}  -> {"done":true}`,
      `  value: {"done":true}`,
      // Then Pi itself prints the session's last assistant message, as print mode does.
      "done",
      "",
    ].join("\n"),
  );
  const s = pi(dir, ["-p", "--session", file, "/state:status"]);
  assert.equal(s.code, 0, s.stderr);
  // Plugins in name order, as `session-state status` lists them (the core counts both).
  assert.match(s.stdout, /\nevents    counter: 1 session\n          todo: 2 branch\ndone\n$/);
  const bad = pi(dir, ["-p", "--session", file, "/state:history todo sideways"]);
  assert.equal(bad.stdout, "done\n", "nothing of ours on stdout (only Pi's last message)");
  assert.match(bad.stderr, /usage: \/state:history <plugin> \[branch\|session\]: "sideways" is not a scope/);

  const j = pi(dir, ["--mode", "json", "--session", file, "/state:status"]);
  assert.equal(j.code, 0, j.stderr);
  for (const line of j.stdout.trim().split("\n")) JSON.parse(line); // only Pi's event stream
  assert.match(j.stderr, /events    counter: 1 session\n          todo: 2 branch\n/);
});
