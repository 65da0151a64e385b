// The package in the real Pi 1.6.0 agent loop, through the package's own testing kit
// (`@session-state/pi/testing`: Pi's SDK, the faux model, no network).
// Every read the test extension makes is compared with a TypeScript fold over Pi's own
// getBranch() / getEntries(); the CLI (target/debug/session-state) reads the same file.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { openSessionState } from "@session-state/pi";
import { eventOf, native } from "@session-state/pi/internal";
import { startPi } from "@session-state/pi/testing";
import { checkReads, cli, customs, fold, last, probe, probeCmd, TEST_EXTENSION, tmpDir, toolTurn } from "./helpers.ts";

const extensions = [TEST_EXTENSION];

test("writes before the file exists stay in memory, are read back, and reach the file when Pi creates it", async () => {
  const pi = await startPi({ extensions });
  const from = probe.reads.length;
  await probeCmd(pi, { op: "write", value: ["early"] });
  await probeCmd(pi, { op: "write", scope: "session", value: 7 });
  const file = pi.file!;
  assert.equal(fs.existsSync(file), false, "no file before the first message");
  assert.deepEqual(last().branch, ["early"]);
  assert.equal(last().session, 7);
  await pi.prompt("hi");
  assert.ok(fs.existsSync(file), "Pi created the file");
  const text = fs.readFileSync(file, "utf8");
  assert.match(text, /"customType":"session-state\/todo"/);
  assert.match(text, /"customType":"session-state\/counter"/);
  await probeCmd(pi, { op: "read" });
  assert.deepEqual(last().branch, ["early"]);
  checkReads(from);
  await pi.shutdown();
});

test("a tool call's write, session and branch scope, navigateTree then a write forks", async () => {
  const pi = await startPi({ extensions });
  const from = probe.reads.length;
  await pi.prompt("start");
  await toolTurn(pi, ["a"]);
  const afterA = pi.leaf!;
  await toolTurn(pi, ["a", "b"]);
  await probeCmd(pi, { op: "read" });
  assert.deepEqual(last().branch, ["a", "b"]);
  assert.equal(last().session, 2, "the session counter counts both tool calls");
  const tools = probe.reads.slice(from).filter((r) => r.where === "tool:after");
  assert.equal(tools.length, 2);

  // Step back to the first tool turn: the branch value as of that point, the session value unchanged.
  await probeCmd(pi, { op: "navigate", target: afterA });
  assert.equal(pi.leaf, afterA, "navigateTree moved Pi's leaf");
  assert.deepEqual(last().branch, ["a"], "stepping back reads the value as of that point");
  assert.equal(last().session, 2, "session scope does not depend on the position");

  // A write there is a fork: a second child of the entry.
  const before = customs(pi.sessionManager, "todo").length;
  await probeCmd(pi, { op: "write", value: ["fork"] });
  const mine = customs(pi.sessionManager, "todo");
  assert.equal(mine.length, before + 1);
  const forked = mine[mine.length - 1];
  assert.equal(forked.parentId, afterA, "the event is a child of the navigated-to entry");
  assert.ok(pi.sessionManager.getChildren(afterA).length >= 2, "the entry now has two children");
  assert.deepEqual(last().branch, ["fork"]);
  assert.notEqual(last().key, probe.reads.find((r) => r.where === "cmd:read" && r.leaf !== afterA)?.key, "a new branch key");
  checkReads(from);

  // The CLI reads the same values at Pi's leaf, through the same projection.
  const db = pi.databasePath;
  const r = cli(["read", pi.file!, "--plugin", "todo", "--at", pi.leaf!, "--db", db], pi.dir);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), fold(pi.sessionManager, "todo", "branch"));
  const s = cli(["read", pi.file!, "--plugin", "counter", "--scope", "session", "--at", pi.leaf!, "--db", db], pi.dir);
  assert.equal(s.code, 0, s.stderr);
  assert.deepEqual(JSON.parse(s.stdout), fold(pi.sessionManager, "counter", "session"));

  // /state:history: the events that made the value at the leaf, oldest first, with ids.
  await pi.command("/state:history todo branch");
  const history = pi.notes[pi.notes.length - 1]!.message.split("\n");
  const path_ = pi.sessionManager.getBranch().filter((e: any) => e.customType === "session-state/todo").map((e: any) => e.id);
  assert.deepEqual(path_.length, 2, "two events on this branch: ['a'], then ['fork']");
  assert.match(history[0]!, new RegExp(`^todo \\(branch scope\\) at ${pi.leaf}: 2 events, oldest first$`));
  assert.match(history[1]!, new RegExp(`^  ${path_[0]}  set    \\["a"\\]$`));
  assert.match(history[2]!, new RegExp(`^  ${path_[1]}  set    \\["fork"\\]$`));
  assert.equal(history[3], `  value: ["fork"]`);
  assert.deepEqual(pi.history("todo", "branch").map((h) => h.entryId), path_, "the kit reads the same provenance");
  await pi.command("/state:history counter");
  assert.match(pi.notes[pi.notes.length - 1]!.message, /^counter \(session scope\) in this session: 2 events, oldest first\n.*set    1\n.*set    2\n  value: 2$/);
  await pi.command("/state:history Bad");
  assert.match(pi.notes[pi.notes.length - 1]!.message, /is not a valid plugin id/);
  assert.equal(pi.notes[pi.notes.length - 1]!.type, "error");
  await pi.command("/state:history");
  assert.match(pi.notes[pi.notes.length - 1]!.message, /^usage: \/state:history <plugin> \[branch\|session\] \(plugins with events here: (todo, counter|counter, todo)\)$/);
  await pi.shutdown();
});

test("drop and null, an unchanged write appends nothing", async () => {
  const pi = await startPi({ extensions });
  const from = probe.reads.length;
  await pi.prompt("hi");
  await probeCmd(pi, { op: "write", value: null });
  assert.equal(last().branch, null, "a written null reads null");
  await probeCmd(pi, { op: "drop" });
  assert.equal(last().branch, undefined, "a drop makes it absent");
  const n0 = pi.sessionManager.getEntries().length;
  await probeCmd(pi, { op: "drop" });
  assert.equal(pi.sessionManager.getEntries().length, n0, "dropping an absent value appends nothing");
  await probeCmd(pi, { op: "write", value: { b: 1, a: [1, 2] } });
  const n1 = pi.sessionManager.getEntries().length;
  await probeCmd(pi, { op: "write", value: { a: [1.0, 2], b: 1 } });
  assert.equal(pi.sessionManager.getEntries().length, n1, "an equal value (key order, 1 = 1.0) appends nothing");
  await probeCmd(pi, { op: "patch", value: { b: null, c: "x" } });
  assert.deepEqual(last().branch, { a: [1, 2], c: "x" });
  checkReads(from);

  // The transcript: one quiet line per event; expanded, the whole value (after a patch too).
  const [set, drop, obj, patch] = pi.events("todo").slice(-4).map((e) => e.id);
  assert.deepEqual(pi.render(set!), [" state todo · set · branch · null"]);
  assert.deepEqual(pi.render(drop!), [" state todo · drop · branch"]);
  assert.deepEqual(pi.render(obj!), [' state todo · set · branch · {"b":1,"a":[1,2]}']);
  assert.deepEqual(pi.render(patch!), [' state todo · patch · branch · {"b":null,"c":"x"}']);
  assert.deepEqual(pi.render(patch!, { expanded: true }), [
    ` state todo · patch · branch · entry ${patch}`,
    " patch:",
    " {",
    '   "b": null,',
    '   "c": "x"',
    " }",
    " value after it:",
    " {",
    '   "a": [',
    "     1,",
    "     2",
    "   ],",
    '   "c": "x"',
    " }",
  ]);
  const narrow = pi.render(obj!, { width: 30 })!;
  assert.ok(narrow[0]!.length <= 30 && narrow[0]!.endsWith("..."), `cut to the terminal's width: ${JSON.stringify(narrow)}`);
  assert.ok(narrow[0]!.startsWith(" state todo · set · branch"), narrow[0]);
  await pi.shutdown();
});

test("the event Pi keeps is the one in the file, a copy that the caller's later changes do not reach", async () => {
  const pi = await startPi({ extensions });
  await pi.prompt("hi");
  const todo = (globalThis as any).__stateCell.todo;
  const sm = pi.sessionManager;
  const inFile = (id: string) =>
    fs.readFileSync(pi.file!, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)).find((e) => e.id === id);
  const value: any = { b: 1, "2": "x", "1": [-0, 1e21, 1.5e-7, "\ud83d", "é"], when: new Date(0), gone: undefined };
  const writes: [string, () => string | undefined][] = [
    ["set", () => todo.write(pi.context(), value)],
    ["patch", () => todo.patch(pi.context(), { b: null, n: { deep: [true] } })],
    ["drop", () => todo.drop(pi.context())],
    ["set", () => todo.write(pi.context(), "text")],
  ];
  for (const [op, write] of writes) {
    const id = write();
    assert.ok(id, `${op} appended`);
    const kept = (sm.getEntry(id) as { data?: any } | undefined)?.data;
    assert.deepEqual(kept, inFile(id).data, `${op}: Pi's entry is the file's`);
    assert.equal(kept.op, op);
  }
  const first = customs(sm, "todo").at(-4)!;
  const before = JSON.stringify(first.data);
  assert.equal(JSON.parse(before).value.when, "1970-01-01T00:00:00.000Z");
  value.b = 99;
  value["1"].push(5);
  value.when.setTime(1);
  assert.equal(JSON.stringify(first.data), before, "the caller's changes do not reach Pi's entry");
  // A plain value is copied once and the copy printed: the text the core decided on, Pi's
  // entry and the file's line are one answer of a getter, asked once.
  let asks = 0;
  const asking = todo.write(pi.context(), {
    get n() {
      return ++asks;
    },
  });
  assert.equal(asks, 1, "the getter is asked once");
  assert.deepEqual(inFile(asking).data.value, { n: 1 });
  assert.deepEqual((sm.getEntry(asking!) as { data?: unknown } | undefined)?.data, inFile(asking!).data);
  await pi.shutdown();

  // Built around the caller's text when the core confirmed its envelope (`true`), else the
  // core's text parsed.
  const fast = eventOf(true, "branch", "set", '{"a":[1]}');
  assert.deepEqual(fast, { v: 1, scope: "branch", op: "set", value: { a: [1] } });
  assert.deepEqual(Object.keys(fast as object), ["v", "scope", "op", "value"]);
  const other = eventOf('{"v":1,"scope":"branch","op":"set","value":{"a":[2]}}', "branch", "set", '{"a":[1]}');
  assert.deepEqual(other, { v: 1, scope: "branch", op: "set", value: { a: [2] } });
  assert.deepEqual(eventOf(true, "session", "patch", "null"), { v: 1, scope: "session", op: "patch", patch: null });
  assert.deepEqual(eventOf('{"v":2,"scope":"session","op":"drop"}', "session", "drop", null), { v: 2, scope: "session", op: "drop" });

  // Given the value the text was printed from, a fresh copy of it when it prints as the
  // text (-0 prints as 0), else a parse of the text.
  const plain = { a: [1, { b: "x" }], z: -0, gone: undefined };
  const plainText = JSON.stringify(plain);
  const copied = eventOf(true, "branch", "set", plainText, 1, plain) as { value: typeof plain };
  assert.deepEqual(copied.value, JSON.parse(plainText));
  assert.ok(copied.value !== plain && copied.value.a !== plain.a && copied.value.a[1] !== plain.a[1], "a copy");
  assert.ok(Object.is(copied.value.z, 0) && !("gone" in copied.value));
  let asked = 0;
  const changing = {
    get n() {
      return ++asked;
    },
  };
  const changingText = JSON.stringify(changing);
  const reparsed = eventOf(true, "branch", "set", changingText, 1, changing) as { value: unknown };
  assert.deepEqual(reparsed.value, { n: 1 }, "a getter that answers otherwise the second time: the text's value");
  const dated = { when: new Date(0), list: [1, undefined] };
  const datedText = JSON.stringify(dated);
  assert.deepEqual((eventOf(true, "branch", "set", datedText, 1, dated) as { value: unknown }).value, JSON.parse(datedText));
  // A copy made for the event is taken as it is.
  const made = { k: 1 };
  assert.equal((eventOf(true, "branch", "set", '{"k":1}', 1, made, true) as { value: unknown }).value, made);
  const v3 = eventOf(true, "branch", "patch", '{"k":1}', 3, { k: 1 });
  assert.deepEqual(v3, { v: 2, stateVersion: 3, scope: "branch", op: "patch", patch: { k: 1 } });
});

test("in the real Pi, a write on top of the state's own last event is answered by the core's memo", async () => {
  // Every answer of the addon's one write decision, with the way it was decided: `memo`
  // (on top of the state's last event) or `store` (as a read reads). The package must tell
  // the memo which entry Pi appended.
  const proto = native.NativeStore.prototype as unknown as { decide: (...args: unknown[]) => unknown };
  const original = proto.decide;
  const answers: unknown[] = [];
  proto.decide = function (this: unknown, ...args: unknown[]) {
    const answer = original.apply(this, args);
    answers.push([answer, (args[0] as { way: unknown }).way]);
    return answer;
  };
  try {
    const pi = await startPi({ extensions });
    await pi.prompt("hi");
    await probeCmd(pi, { op: "write", value: { a: 1 } });
    await pi.prompt("more");
    await probeCmd(pi, { op: "write", value: { a: 2 } });
    await probeCmd(pi, { op: "write", value: { a: 2 } });
    await probeCmd(pi, { op: "write", value: { a: 3 } });
    assert.deepEqual(
      answers,
      [
        [true, "store"],
        [true, "memo"],
        [null, "memo"],
        [true, "memo"],
      ],
      "one call per write; the second, third and fourth writes start from the value after the last event (the core confirms the envelope of the package's text)",
    );
    assert.deepEqual(last().branch, { a: 3 });
  } finally {
    proto.decide = original;
  }
});

test("in the real Pi, a branch-scope read after Pi appended none of the state's events answers from memory, for at most three entries; an event of the state, a navigation or a session scope reads", async () => {
  // The addon's reads of each state, counted by its customType.
  const proto = native.NativeStore.prototype as unknown as { readState: (...args: unknown[]) => unknown };
  const original = proto.readState;
  const calls: Record<string, number> = {};
  proto.readState = function (this: unknown, ...args: unknown[]) {
    const ct = (args[0] as { customType: string }).customType;
    calls[ct] = (calls[ct] ?? 0) + 1;
    return original.apply(this, args);
  };
  const addonReads = (plugin: string) => calls[`session-state/${plugin}`] ?? 0;
  try {
    const pi = await startPi({ extensions });
    const sm = pi.sessionManager as any;
    const { todo, counter } = (globalThis as any).__stateCell;
    const reads = (plugin: "todo" | "counter") => {
      const before = addonReads(plugin);
      const state = plugin === "todo" ? todo : counter;
      const value = state.read(pi.context());
      assert.deepEqual(value, fold(sm, plugin, plugin === "todo" ? "branch" : "session"), `${plugin} at ${pi.leaf}`);
      return { value, addon: addonReads(plugin) - before };
    };
    await pi.prompt("hi");
    await probeCmd(pi, { op: "write", value: { a: 1 } });
    await probeCmd(pi, { op: "write", scope: "session", value: 1 });
    assert.deepEqual(reads("todo").value, { a: 1 });
    assert.deepEqual(reads("counter").value, 1);
    const l = pi.leaf!;

    // Pi's messages on top: the branch-scope read answers without the addon, the session
    // scope's reads it (an event of it may be anywhere in the session).
    await pi.prompt("more");
    assert.deepEqual(reads("todo"), { value: { a: 1 }, addon: 0 });
    assert.deepEqual(reads("counter"), { value: 1, addon: 1 });
    // Another plugin's event (the third entry since the addon last read, when the test
    // extension read after the counter's write); then the state's own (another writer's).
    sm.appendCustomEntry("session-state/counter", { v: 1, scope: "session", op: "set", value: 5 });
    assert.deepEqual(reads("todo"), { value: { a: 1 }, addon: 0 });
    sm.appendCustomEntry("session-state/todo", { v: 1, scope: "branch", op: "set", value: ["z"] });
    await pi.prompt("again");
    assert.deepEqual(reads("todo"), { value: ["z"], addon: 1 }, "the state's event two entries up");
    assert.deepEqual(reads("todo"), { value: ["z"], addon: 0 });

    // At most three of Pi's entries wait for the addon's log: the fourth since its last
    // read is read through it.
    await pi.prompt("one");
    assert.deepEqual(reads("todo"), { value: ["z"], addon: 0 }, "two entries wait");
    sm.appendCustomEntry("session-state/counter", { v: 1, scope: "session", op: "set", value: 5 });
    assert.deepEqual(reads("todo"), { value: ["z"], addon: 0 }, "three wait");
    sm.appendCustomEntry("session-state/counter", { v: 1, scope: "session", op: "set", value: 5 });
    assert.deepEqual(reads("todo"), { value: ["z"], addon: 1 }, "a fourth: read through the addon");
    await pi.prompt("two");
    assert.deepEqual(reads("todo"), { value: ["z"], addon: 0 }, "counted again from there");

    // The state's own write: after a `set` (the event carries the caller's text) or a
    // `drop`, the next read at the new leaf knows the value; after a `patch`, the addon reads.
    const ctx = () => pi.context();
    todo.write(ctx(), { w: 1 });
    assert.deepEqual(reads("todo"), { value: { w: 1 }, addon: 0 });
    todo.patch(ctx(), { p: 1 });
    assert.deepEqual(reads("todo"), { value: { w: 1, p: 1 }, addon: 1 });
    todo.drop(ctx());
    assert.deepEqual(reads("todo"), { value: undefined, addon: 0 });
    counter.write(ctx(), 7);
    assert.deepEqual(reads("counter"), { value: 7, addon: 0 });
    todo.write(ctx(), ["z"]);
    assert.deepEqual(reads("todo"), { value: ["z"], addon: 0 });
    await pi.prompt("after the writes");
    assert.deepEqual(reads("todo"), { value: ["z"], addon: 1 }, "the addon's log has the writes to read");

    // Pi's leaf moved (no entry appended): the addon reads. A message appended there: not.
    await pi.navigate(l);
    assert.deepEqual(reads("todo"), { value: { a: 1 }, addon: 1 });
    await pi.prompt("on the old branch");
    assert.deepEqual(reads("todo"), { value: { a: 1 }, addon: 0 });

    // An entry appended elsewhere, then Pi's leaf moved to an older child of the last read's
    // leaf: one entry more and a leaf one step below, but the new entry is not on the way.
    // The branch's value is still the last read's; the session's is not.
    const child = pi.leaf!;
    await pi.navigate(l);
    assert.deepEqual(reads("todo"), { value: { a: 1 }, addon: 1 });
    assert.deepEqual(reads("counter"), { value: 7, addon: 1 });
    await pi.navigate(sm.getEntry(l).parentId);
    sm.appendCustomEntry("session-state/counter", { v: 1, scope: "session", op: "set", value: 9 });
    sm.appendCustomEntry("session-state/todo", { v: 1, scope: "branch", op: "set", value: ["elsewhere"] });
    await pi.navigate(child);
    assert.deepEqual(reads("todo"), { value: { a: 1 }, addon: 0 });
    assert.deepEqual(reads("counter"), { value: 9, addon: 1 });
    await pi.shutdown();
  } finally {
    proto.readState = original;
  }
});

test("a write on top of the state's own last event decides as the core does on what Pi appended since", async () => {
  const pi = await startPi({ extensions });
  const from = probe.reads.length;
  const errors = probe.errors.length;
  const events = () => customs(pi.sessionManager, "todo").length;
  await pi.prompt("hi");
  await probeCmd(pi, { op: "write", value: { a: 1 } });
  // Pi's messages on top of it: an equal value appends nothing, a patch builds on it.
  await pi.prompt("more");
  const afterMore = pi.leaf!;
  let n = events();
  await probeCmd(pi, { op: "write", value: { a: 1.0 } });
  assert.equal(events(), n, "an equal value on top of Pi's messages appends nothing");
  await probeCmd(pi, { op: "patch", value: { b: 2 } });
  assert.equal(events(), n + 1);
  await pi.prompt("again");
  n = events();
  await probeCmd(pi, { op: "patch", value: { b: 2 } });
  assert.equal(events(), n, "the value after the patch is known: the same patch appends nothing");
  await probeCmd(pi, { op: "patch", value: { a: null } });
  assert.deepEqual(last().branch, { b: 2 });

  // Another writer's event of this plugin in between: its value is where the write lands.
  await probeCmd(pi, { op: "raw", customType: "session-state/todo", data: { v: 1, scope: "branch", op: "set", value: ["z"] } });
  await pi.prompt("and more");
  n = events();
  await probeCmd(pi, { op: "write", value: ["z"] });
  assert.equal(events(), n, "the other writer's value is the current one");

  // Right after a write, Pi's leaf moved back to before the patches: the value there.
  await probeCmd(pi, { op: "write", value: ["q"] });
  await probeCmd(pi, { op: "navigate", target: afterMore });
  n = events();
  await probeCmd(pi, { op: "write", value: ["q"] });
  assert.equal(events(), n + 1, "where Pi's leaf is now, the value is { a: 1 }: appended");
  await probeCmd(pi, { op: "write", value: ["q"] });
  assert.equal(events(), n + 1, "and now it is [\"q\"]");
  assert.deepEqual(probe.errors.slice(errors), []);
  checkReads(from);
  const r = cli(["read", pi.file!, "--plugin", "todo", "--at", pi.leaf!, "--db", pi.databasePath], pi.dir);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), ["q"]);

  // Another file now at the path, whose last event holds another value: the write does not
  // go by the value it kept, it reads the file (which the core refuses as changed on disk,
  // or reads the other value from).
  const file = pi.file!;
  const text = fs.readFileSync(file, "utf8");
  const i = text.lastIndexOf('"value":["q"]');
  assert.ok(i > 0);
  fs.writeFileSync(`${file}.tmp`, text.slice(0, i) + '"value":["y"]' + text.slice(i + '"value":["q"]'.length));
  if (process.platform === "win32") {
    // Windows replaces no file that a process holds open (Node's rename is `MoveFileExW`,
    // which refuses with EPERM), and the package holds the session file open while Pi has
    // it: no other file can come to the path behind this Pi.
    assert.throws(() => fs.renameSync(`${file}.tmp`, file), { code: "EPERM" });
    fs.rmSync(`${file}.tmp`);
    assert.equal(fs.readFileSync(file, "utf8"), text, "the session file is the one Pi holds");
    await pi.shutdown();
    return;
  }
  fs.renameSync(`${file}.tmp`, file);
  n = events();
  let refusal = "";
  try {
    (globalThis as any).__stateCell.todo.write(pi.context(), ["q"]);
  } catch (e) {
    refusal = (e as Error).message;
  }
  assert.match(refusal, /changed behind this process's back/);
  assert.equal(events(), n, "refused: nothing appended");

  // /state:force-refresh drops what was read of the old file: reads and writes go to the
  // one now at the path, and a write is synced through a descriptor of that file.
  await pi.command("/state:force-refresh");
  const todo = (globalThis as any).__stateCell.todo;
  assert.deepEqual(todo.read(pi.context()), ["y"], "the value in the file now at the path");
  assert.ok(todo.write(pi.context(), ["q"]), "appended after the refresh");
  const inFile = fs.readFileSync(file, "utf8").trimEnd().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(inFile.at(-1).data.value, ["q"], "appended to the file now at the path");
  const syncFd = (globalThis as any)[Symbol.for("session-state/pi")].syncFds.get(file);
  assert.equal(fs.fstatSync(syncFd).ino, fs.statSync(file).ino, "synced through a descriptor of the new file");
  assert.deepEqual(todo.read(pi.context()), ["q"]);
  await pi.shutdown();
});

test("bad input throws the core's message and appends nothing", async () => {
  const pi = await startPi({ extensions });
  await pi.prompt("hi");
  const fakePi = { appendEntry: () => assert.fail("nothing may be appended") };
  const todo = (globalThis as any).__stateCell.todo;
  const n = pi.sessionManager.getEntries().length;

  // Invalid plugin id: session_state::Error::InvalidOption, word for word.
  let msg = "";
  assert.throws(() => openSessionState(fakePi, { pluginId: "Bad Id" }), (e: Error) => ((msg = e.message), e instanceof Error));
  assert.equal(
    msg,
    `invalid option plugin_id: "Bad Id" is not a valid plugin id: use a non-empty name of lowercase letters, digits, '-' and '.' (for example "role" or "my-ext.todo")`,
  );

  assert.throws(() => openSessionState(fakePi, { pluginId: "ok", databasePath: "relative/states.sqlite" }), /absolute/);
  assert.throws(() => openSessionState(fakePi, { pluginId: "ok", scope: "tree" as any }), /not a scope/);

  const ctx = pi.context();
  assert.throws(() => todo.write(ctx, undefined), (e: Error) => e instanceof Error && /^plugin 'todo': the value cannot be serialized to JSON: undefined/.test(e.message));
  const cyclic: any = { a: 1 };
  cyclic.self = cyclic;
  assert.throws(() => todo.write(ctx, cyclic), /plugin 'todo': the value cannot be serialized to JSON: the value refers to itself \(a cycle\)/);
  assert.throws(() => todo.write(ctx, { x: NaN }), /plugin 'todo': the value cannot be serialized to JSON: the value holds the number NaN, which JSON cannot carry/);
  assert.throws(() => todo.write(ctx, [Infinity]), /holds the number inf/i);
  // Beside real nulls and "null" in strings, deep down, or from toJSON: still found.
  assert.throws(() => todo.write(ctx, { a: null, s: "null", b: [1, { c: -Infinity }] }), /holds the number -inf/i);
  assert.throws(() => todo.write(ctx, { at: { toJSON: () => NaN } }), /holds the number NaN/);

  // Too deep: the message the CLI prints for the same value.
  let deep: unknown = 1;
  for (let i = 0; i < 101; i++) deep = [deep];
  assert.throws(() => todo.write(ctx, deep), (e: Error) => ((msg = e.message), /nested deeper than 100 levels/.test(e.message)));
  const d = cli(["write", pi.file!, "--plugin", "todo", "--value", JSON.stringify(deep), "--db", pi.databasePath], pi.dir);
  assert.equal(d.code, 2);
  assert.ok(d.stderr.includes(msg), `core's message ${JSON.stringify(msg)} in CLI's ${JSON.stringify(d.stderr)}`);

  assert.equal(pi.sessionManager.getEntries().length, n, "nothing appended");
  await pi.shutdown();
});

test("a reopened session reads at its last entry and draws its old events without the extension; a fork carries the state", async (t) => {
  const dir = tmpDir(t);
  let pi = await startPi({ dir, extensions });
  await pi.prompt("hi");
  await toolTurn(pi, ["kept"]);
  const file = pi.file!;
  const event = pi.events("todo")[0]!.id;
  const from = probe.reads.length;
  await pi.reopen();
  await probeCmd(pi, { op: "read" });
  const entries = pi.sessionManager.getEntries();
  assert.equal(last().leaf, entries[entries.length - 1].id, "Pi's leaf on open is the file's last entry");
  assert.deepEqual(last().branch, ["kept"]);
  assert.equal(last().session, 1);
  checkReads(from);

  // /fork: a new session file holding the path to the entry; the state follows.
  const leaf = pi.leaf!;
  await pi.fork(leaf);
  assert.notEqual(pi.file, file, "a new file");
  assert.notEqual(pi.sessionManager.getSessionId(), JSON.parse(fs.readFileSync(file, "utf8").split("\n")[0]!).id);
  await probeCmd(pi, { op: "read" });
  assert.deepEqual(last().branch, ["kept"], "the state followed the fork");
  checkReads(from);
  await pi.shutdown();

  // The same file in a Pi that has only the package: the old events are drawn, and the
  // state reads the same.
  pi = await startPi({ dir, session: file });
  assert.deepEqual(pi.render(event), [' state todo · set · branch · ["kept"]']);
  assert.deepEqual(pi.state("todo", "branch"), ["kept"]);
  await pi.shutdown();
  // ... unless the setting hides them.
  pi = await startPi({ dir, session: file, settings: { sessionState: { transcript: false } } });
  assert.equal(pi.render(event), undefined, "sessionState.transcript: false hides state events");
  await pi.shutdown();
});

test("the CLI is refused while Pi holds the session and allowed after it shuts down; status shows that Pi", async (t) => {
  const pi = await startPi({ dir: tmpDir(t), extensions });
  await pi.prompt("hi");
  await probeCmd(pi, { op: "write", value: ["pi"] });
  const file = pi.file!;
  const db = pi.databasePath;
  const dir = pi.dir;
  const bytes = fs.readFileSync(file);
  const w = cli(["write", file, "--plugin", "todo", "--value", '["cli"]', "--db", db], dir);
  assert.equal(w.code, 2, w.stderr);
  assert.match(w.stderr, /locked by a running Pi \(pid:\d+/, "initiator");
  assert.match(w.stderr, /write refused/, "action");
  assert.ok(w.stderr.includes(pi.sessionManager.getSessionId()), "object");
  assert.match(w.stderr, /that Pi has the session open/, "reason");
  assert.deepEqual(fs.readFileSync(file), bytes, "the file is untouched");
  // Through another database the presence row is not seen; the session file's own lock,
  // which the presence holds, is.
  const other = cli(["write", file, "--plugin", "todo", "--value", '["cli"]', "--db", `${dir}/other.sqlite`], dir);
  assert.equal(other.code, 2, other.stderr);
  assert.match(other.stderr, new RegExp(`locked by pid:${process.pid};`), "initiator");
  assert.match(other.stderr, /holds the session/, "reason");
  assert.deepEqual(fs.readFileSync(file), bytes, "the file is untouched");
  const st = cli(["status", file, "--db", db, "--json"], dir);
  assert.equal(st.code, 0, st.stderr);
  const report = JSON.parse(st.stdout);
  assert.equal(report.pi.holder.split(";")[0], `pid:${process.pid}`);
  assert.equal(report.pi.liveness, "alive");
  // force-refresh asks before clearing a live Pi's row: without a terminal and --yes it
  // leaves it (exit 1); with --yes it clears it.
  const fr = cli(["force-refresh", file, "--db", db], dir);
  assert.equal(fr.code, 1, fr.stderr);
  assert.match(fr.stderr, /left the presence row .* alone/);
  assert.ok(JSON.parse(cli(["status", file, "--db", db, "--json"], dir).stdout).pi, "still there");
  const fy = cli(["force-refresh", file, "--db", db, "--yes"], dir);
  assert.equal(fy.code, 0, fy.stderr);
  assert.match(fy.stdout, /cleared the presence row/);
  assert.equal(JSON.parse(cli(["status", file, "--db", db, "--json"], dir).stdout).pi, undefined, "cleared");
  // /state:status inside Pi says the same.
  const ui = await startPi({ dir: tmpDir(t) });
  await ui.command("/state:status");
  assert.match(ui.notes.map((n) => n.message).join("\n"), /pi        this Pi: pid:\d+/);
  await ui.shutdown();

  await pi.shutdown(); // session_shutdown, as Pi's quit does (the folder is the test's)
  const ok = cli(["write", file, "--plugin", "todo", "--value", '["cli"]', "--db", db], dir);
  assert.equal(ok.code, 0, ok.stderr);
  const st2 = JSON.parse(cli(["status", file, "--db", db, "--json"], dir).stdout);
  assert.equal(st2.pi, undefined, "the row is gone after session_shutdown");
});

test("/state:force-refresh confirms through the UI when the holder may be alive, and without UI leaves the lock", async (t) => {
  const dir = tmpDir(t);
  const noUi = await startPi({ dir, ui: false });
  await noUi.prompt("hi");
  const sid = noUi.sessionManager.getSessionId();
  const file = noUi.file!;
  const db = noUi.databasePath;
  // A live holder's lock row (this test's own parent process stands in for a writer).
  const { DatabaseSync } = await import("node:sqlite");
  const conn = new DatabaseSync(db);
  t.after(() => conn.close());
  const holder = `pid:${process.ppid}`;
  conn.prepare("INSERT OR REPLACE INTO write_lock (session_id, holder, acquired_at, action) VALUES (?, ?, ?, 'write')").run(sid, holder, Date.now());
  const rows = () => conn.prepare("SELECT holder FROM write_lock WHERE session_id = ?").all(sid);
  await noUi.command("/state:force-refresh");
  assert.equal(rows().length, 1, "no UI: the lock is left alone");
  assert.match(noUi.printed.join(""), /^Left the lock on session '.*' alone: its holder pid:\d+ may be alive .* no UI to confirm\. Nothing was changed\.\n$/, "print mode says so on stdout");
  await noUi.shutdown();

  const ui = await startPi({ dir, session: file, answers: { confirm: false } });
  await ui.command("/state:force-refresh");
  assert.equal(ui.confirms.length, 1, "asked");
  assert.equal(rows().length, 1, "declined: left alone");
  await ui.shutdown();
  const yes = await startPi({ dir, session: file, answers: { confirm: true } });
  await yes.command("/state:force-refresh");
  assert.equal(rows().length, 0, "confirmed: cleared");
  assert.match(yes.notes.map((n) => n.message).join("\n"), /Cleared the lock held by/);
  await yes.shutdown();
});

test("a killed Pi process does not seal the session", async (t) => {
  const dir = tmpDir(t);
  const script = fileURLToPath(new URL("./hold.ts", import.meta.url));
  const child = spawn(process.execPath, [script, dir], { stdio: ["ignore", "pipe", "inherit"] });
  // Whatever the test's outcome, the child goes with it (else it keeps this file's run alive).
  t.after(() => void child.kill("SIGKILL"));
  const ready: { file: string; db: string } = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (b) => {
      out += b;
      const line = out.split("\n").find((l) => l.startsWith("READY "));
      if (line) resolve(JSON.parse(line.slice(6)));
    });
    child.on("exit", (code) => reject(new Error(`the Pi child exited early (${code}): ${out}`)));
  });
  const held = cli(["write", ready.file, "--plugin", "todo", "--value", "1", "--db", ready.db], dir);
  assert.equal(held.code, 2, "refused while that Pi runs");
  assert.match(held.stderr, /running Pi/);
  const exited = new Promise((r) => child.on("exit", r));
  child.kill("SIGKILL");
  await exited;
  const after = cli(["write", ready.file, "--plugin", "todo", "--value", "1", "--db", ready.db], dir);
  assert.equal(after.code, 0, `a killed Pi's row is judged dead: ${after.stderr}`);
  const st = JSON.parse(cli(["status", ready.file, "--db", ready.db, "--json"], dir).stdout);
  assert.equal(st.pi, undefined, "the dead Pi's row was deleted by the writer");
});

test("the database location comes from Pi's settings, as the CLI resolves it", async (t) => {
  const custom = path.join(tmpDir(t), "elsewhere", "states.sqlite");
  const pi = await startPi({ extensions, settings: { sessionState: { databasePath: custom } } });
  await pi.prompt("hi");
  await probeCmd(pi, { op: "write", value: ["here"] });
  await pi.command("/state:status");
  assert.ok(pi.notes.some((n) => n.message.includes(`database  ${custom}`)), JSON.stringify(pi.notes));
  assert.equal(pi.databasePath, custom);
  assert.ok(fs.existsSync(custom), "the projection and the presence row are there");
  // The CLI, with the same agent directory and no --db, resolves the same database: refused.
  const w = cli(["write", pi.file!, "--plugin", "todo", "--value", "1"], pi.dir);
  assert.equal(w.code, 2, w.stderr);
  assert.match(w.stderr, /running Pi/);
  await pi.shutdown();
});

test("/state:status counts the events as `session-state status` does: an envelope the core cannot decode is invalid", async (t) => {
  const pi = await startPi({ dir: tmpDir(t), extensions });
  const errors = probe.errors.length;
  await pi.prompt("hi");
  await probeCmd(pi, { op: "write", value: ["a"] });
  await probeCmd(pi, { op: "write", scope: "session", value: 1 });
  // Envelopes whose scope is known but which the core cannot decode: an unknown op, and a
  // set without its value. Counting by the declared scope would say "1 branch, 1 session".
  await probeCmd(pi, { op: "raw", customType: "session-state/odd", data: { v: 1, scope: "branch", op: "frobnicate" } });
  await probeCmd(pi, { op: "raw", customType: "session-state/odd", data: { v: 1, scope: "session", op: "set" } });
  assert.deepEqual(probe.errors.slice(errors), [], "the probe's reads of the other plugins are unaffected");
  await pi.command("/state:status");
  const text = pi.notes[pi.notes.length - 1]!.message;
  const shown: Array<{ plugin: string; scope: string; events: number }> = [];
  for (const line of text.split("\n")) {
    const m = /^(?:events   |         ) (\S+): (.*)$/.exec(line);
    if (!m) continue;
    for (const part of m[2]!.split(", ")) {
      const [n, scope] = part.split(" ");
      shown.push({ plugin: m[1]!, scope: scope!, events: Number(n) });
    }
  }
  const r = cli(["status", pi.file!, "--db", pi.databasePath, "--json"], pi.dir);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(shown, JSON.parse(r.stdout).events, text);
  assert.deepEqual(
    shown.filter((e) => e.plugin === "odd"),
    [{ plugin: "odd", scope: "invalid", events: 2 }],
  );
  assert.ok(!/^warning/m.test(text), text);

  // A damaged line with entries after it: the strict reader refuses the file, and the
  // counts come from a salvage read, with the warning `session-state status` prints.
  fs.appendFileSync(pi.file!, "{not json\n");
  await pi.prompt("after the damage");
  pi.sessionManager.appendCustomEntry("session-state/late", { v: 1, scope: "branch", op: "set", value: 1 });
  await pi.command("/state:status");
  const damaged = pi.notes[pi.notes.length - 1]!.message;
  assert.match(damaged, /^warning   the strict reader refuses this file; counts come from a salvage read \(see `session-state verify`\): .+line \d+/m);
  const s = cli(["status", pi.file!, "--db", pi.databasePath, "--json"], pi.dir);
  assert.equal(s.code, 0, s.stderr);
  assert.match(s.stderr, /the strict reader refuses this file/);
  const cliEvents = JSON.parse(s.stdout).events;
  assert.deepEqual(cliEvents.filter((e: any) => e.plugin === "late"), [{ plugin: "late", scope: "branch", events: 1 }]);
  const salvaged = damaged
    .split("\n")
    .map((l) => /^(?:events   |         ) (\S+): (.*)$/.exec(l))
    .filter((m) => m !== null)
    .flatMap((m) => m![2]!.split(", ").map((part) => ({ plugin: m![1]!, scope: part.split(" ")[1]!, events: Number(part.split(" ")[0]) })));
  assert.deepEqual(salvaged, cliEvents, damaged);

  // /state:history on the same file: the events from a salvage read, under the same kind
  // of warning (it failed with the strict reader's message).
  await pi.command("/state:history late");
  const history = pi.notes[pi.notes.length - 1]!.message;
  assert.match(history, /^warning   the strict reader refuses this file; events come from a salvage read \(see `session-state verify`\): .+line \d+/m);
  assert.match(history, /^late \(branch scope\) at \S+: 1 event, oldest first$/m, history);
  assert.match(history, /^  value: 1$/m, history);
  await pi.shutdown();
});

test("the main entry exports what an extension uses; the package's own internals are at ./internal", async () => {
  const main = await import("@session-state/pi");
  assert.deepEqual(Object.keys(main).sort(), [
    "STATE_PREFIX",
    "StateMigrationError",
    "StateValidationError",
    "StateVersionError",
    "branchKey",
    "openSessionState",
  ]);
  const internal = await import("@session-state/pi/internal");
  for (const name of ["eventOf", "native", "shared", "storeFor", "syncSession", "writeOut"]) {
    assert.ok(name in internal, `${name} is in @session-state/pi/internal`);
    assert.ok(!(name in main), `${name} is not in the main entry`);
  }
  assert.equal(internal.eventOf, eventOf, "one module behind both entries");
});
