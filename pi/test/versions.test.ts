// State versions (`openSessionState`'s `version`, `migrate` and `validate`) in the real Pi
// 1.6.0 agent loop: an extension at version 2 opens a session written at version 1, reads
// the value migrated (the file untouched), writes it as a whole `set` at stateVersion 2,
// and a new Pi process resumes it; an extension at version 1 then refuses that state on
// every call and writes nothing. Validation refuses bad writes and names the first
// failing path of a bad stored value.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { fileURLToPath } from "node:url";
import { Type } from "typebox";
import {
  branchKey,
  openSessionState,
  StateMigrationError,
  StateValidationError,
  StateVersionError,
  type SessionState,
  type SessionStateOptions,
} from "@session-state/pi";
import { storeFor } from "@session-state/pi/internal";
import { startPi, type TestPi } from "@session-state/pi/testing";
import { cli, fold, piCommand, tmpDir } from "./helpers.ts";

// A file path on every platform (a URL's pathname is `/C:/…` on Windows).
const TODO_V1 = fileURLToPath(new URL("./todo-v1.ts", import.meta.url));
const TODO_V2 = fileURLToPath(new URL("./todo-v2.ts", import.meta.url));

/** An inline extension that opens one state with `options` and hands it (and `pi`) to the test. */
function opener<T>(options: SessionStateOptions<T>) {
  const cell: { state?: SessionState<T>; api?: any } = {};
  const factory = (api: any) => {
    cell.api = api;
    cell.state = openSessionState<T>(api, options);
  };
  return { factory, cell };
}

/** The session file's lines. */
function lines(file: string): string[] {
  return fs.readFileSync(file, "utf8").trimEnd().split("\n");
}

/** `f` throws a `StateVersionError` naming these facts, and its message names them too. */
function refusesNewer(what: string, f: () => unknown, facts: { stored: number; known: number; entry: string }) {
  assert.throws(
    f,
    (e: unknown) => {
      assert.ok(e instanceof StateVersionError, `${what}: ${String(e)}`);
      assert.equal(e.name, "StateVersionError");
      assert.equal(e.pluginId, "todo");
      assert.equal(e.storedVersion, facts.stored);
      assert.equal(e.knownVersion, facts.known);
      assert.equal(e.entryId, facts.entry);
      assert.equal(
        e.message,
        `plugin 'todo': the state (entry '${facts.entry}') was written under stateVersion ${facts.stored}, newer than version ${facts.known} that this code knows; it is neither read nor written over (upgrade the extension that reads it)`,
      );
      return true;
    },
    what,
  );
}

test("version 2 reads a version-1 session migrated and writes it as a set at stateVersion 2; a new process resumes it; version 1 then refuses every call and writes nothing", async (t) => {
  const dir = tmpDir(t);
  let pi: TestPi = await startPi({ dir, extensions: [TODO_V1] });
  await pi.prompt("hi");
  await pi.command("/todo add milk");
  await pi.command("/todo add bread");
  const file = pi.file!;
  assert.deepEqual(pi.stored("todo", "branch").stateVersion, 1);
  assert.doesNotMatch(fs.readFileSync(file, "utf8"), /stateVersion/, "version 1 writes v=1 events");
  await pi.shutdown();

  // Version 2 (with migrate) reads the migrated value; the read leaves the file as it was.
  const written = fs.readFileSync(file);
  const v2 = opener<Array<{ text: string; done: boolean }>>({
    pluginId: "todo",
    scope: "branch",
    version: 2,
    migrate: (value, from) => {
      assert.equal(from, 1);
      return (value as string[]).map((text) => ({ text, done: false }));
    },
  });
  pi = await startPi({ dir, session: file, extensions: [v2.factory] });
  const todo = v2.cell.state!;
  assert.equal(todo.version, 2);
  const migrated = [{ text: "milk", done: false }, { text: "bread", done: false }];
  assert.deepEqual(todo.read(pi.context()), migrated);
  assert.deepEqual(todo.read(pi.context()), migrated, "a second read, from the last read's answer");
  assert.deepEqual(todo.readAt(pi.context(), pi.leaf!), migrated);
  assert.deepEqual(pi.stored("todo", "branch").value, ["milk", "bread"], "the stored value is version 1's");
  assert.deepEqual(fs.readFileSync(file), written, "a read writes nothing");
  // The projection keeps the stored value: the CLI reads it as stored.
  assert.deepEqual(todo.history(pi.context()).map((h) => h.stateVersion), [1, 1]);

  // Its write: one line, a whole `set` of the value after the write, at stateVersion 2.
  const id = todo.write(pi.context(), [...migrated, { text: "eggs", done: false }])!;
  const added = lines(file).slice(written.toString().trimEnd().split("\n").length);
  assert.equal(added.length, 1, "one line appended");
  assert.match(added[0]!, /"data":\{"v":2,"stateVersion":2,"scope":"branch","op":"set","value":\[\{"text":"milk","done":false\},/);
  assert.equal(JSON.parse(added[0]!).id, id);
  assert.deepEqual(pi.stored("todo", "branch"), { value: [...migrated, { text: "eggs", done: false }], stateVersion: 2, entryId: id });
  // Later writes on top of it stay at version 2 (the write path that starts from the
  // state's own last event, and a patch, which is a patch now).
  todo.write(pi.context(), [{ text: "milk", done: true }]);
  todo.patch(pi.context(), [{ text: "milk", done: true }, { text: "tea", done: false }]);
  const events = pi.events("todo").slice(-3);
  assert.deepEqual(events.map((e) => [(e.data as any).stateVersion, (e.data as any).op]), [[2, "set"], [2, "set"], [2, "patch"]]);
  const value = [{ text: "milk", done: true }, { text: "tea", done: false }];
  assert.deepEqual(fold(pi.sessionManager, "todo", "branch"), value);
  assert.deepEqual(todo.read(pi.context()), value);
  // /state:history shows each event's version.
  await pi.command("/state:history todo branch");
  const history = pi.notes[pi.notes.length - 1]!.message.split("\n");
  assert.match(history[1]!, /  set    \["milk"\]$/);
  assert.match(history[3]!, /  set    .*  \(stateVersion 2\)$/);
  await pi.shutdown();

  // A new process resumes the session (the `pi` command, print mode) and reads the value.
  const resumed = piCommand(dir, ["-p", "--session", file, "-e", TODO_V2, "/todo show"]);
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.deepEqual(JSON.parse(resumed.stdout.split("\n")[0]!), value);

  // Version 1 refuses the state on every call: the typed error, and nothing written.
  const entry = pi.events("todo").slice(-1)[0]!.id;
  const bytes = fs.readFileSync(file);
  const v1 = opener<string[]>({ pluginId: "todo", scope: "branch" });
  pi = await startPi({ dir, session: file, extensions: [v1.factory] });
  const old = v1.cell.state!;
  const count = pi.sessionManager.getEntries().length;
  const facts = { stored: 2, known: 1, entry };
  for (let round = 0; round < 2; round++) {
    // Twice: a refusal leaves nothing behind, so the next call is refused alike.
    refusesNewer("read", () => old.read(pi.context()), facts);
    refusesNewer("readAt", () => old.readAt(pi.context(), pi.leaf!), facts);
    refusesNewer("write", () => old.write(pi.context(), ["milk"]), facts);
    refusesNewer("patch", () => old.patch(pi.context(), ["milk"]), facts);
    refusesNewer("drop", () => old.drop(pi.context()), facts);
  }
  assert.equal(pi.sessionManager.getEntries().length, count, "nothing appended");
  assert.deepEqual(fs.readFileSync(file), bytes, "the file is untouched");

  // /state:status lists the plugin whose state is newer than its extension here knows.
  await pi.command("/state:status");
  const status = pi.notes[pi.notes.length - 1]!.message;
  assert.match(
    status,
    new RegExp(`\\nnewer     todo \\(branch\\): stored under stateVersion 2 \\(entry ${entry}\\), newer than version 1 that its extension here knows: its reads and writes are refused$`),
  );
  await pi.shutdown();

  // With the version it knows, /state:status lists nothing newer.
  pi = await startPi({ dir, session: file, extensions: [TODO_V2] });
  await pi.command("/state:status");
  assert.doesNotMatch(pi.notes[pi.notes.length - 1]!.message, /newer/);
  await pi.shutdown();
});

test("before the file exists: a version-2 state's events in Pi's memory are migrated, refused and written by the same rules", async () => {
  const v1 = opener<string[]>({ pluginId: "todo", scope: "session" });
  const v2 = opener<{ items: string[] }>({
    pluginId: "todo",
    scope: "session",
    version: 2,
    migrate: (value) => ({ items: value as string[] }),
  });
  const pi = await startPi({ extensions: [v1.factory, v2.factory] });
  const [old, cur] = [v1.cell.state!, v2.cell.state!];
  old.write(pi.context(), ["a"]);
  assert.equal(fs.existsSync(pi.file!), false, "no file yet");
  assert.deepEqual(cur.read(pi.context()), { items: ["a"] });
  // A drop of an older value is a drop at version 2; a patch on an absent value a patch.
  cur.drop(pi.context());
  cur.patch(pi.context(), { items: ["b"] });
  const data = pi.events("todo").map((e) => e.data);
  assert.deepEqual(data.slice(1), [
    { v: 2, stateVersion: 2, scope: "session", op: "drop" },
    { v: 2, stateVersion: 2, scope: "session", op: "patch", patch: { items: ["b"] } },
  ]);
  const entry = pi.events("todo")[2]!.id;
  refusesNewer("read before the file exists", () => old.read(pi.context()), { stored: 2, known: 1, entry });
  refusesNewer("write before the file exists", () => old.write(pi.context(), ["c"]), { stored: 2, known: 1, entry });
  assert.equal(pi.events("todo").length, 3, "nothing appended");
  // Pi creates the file with those entries: the same answers from it.
  await pi.prompt("hi");
  assert.ok(fs.existsSync(pi.file!));
  assert.deepEqual(cur.read(pi.context()), { items: ["b"] });
  refusesNewer("read from the file", () => old.read(pi.context()), { stored: 2, known: 1, entry });
  await pi.shutdown();
});

test("validate: a TypeBox schema refuses a bad write or patch (nothing appended) and names the first failing path of a bad stored value", async () => {
  const Notes = Type.Object({ items: Type.Array(Type.String()), pinned: Type.Optional(Type.Boolean()) });
  const o = opener<{ items: string[]; pinned?: boolean }>({ pluginId: "notes", scope: "branch", validate: Notes });
  const pi = await startPi({ extensions: [o.factory] });
  await pi.prompt("hi");
  const notes = o.cell.state!;
  const ctx = () => pi.context();
  notes.write(ctx(), { items: ["a"] });
  const file = pi.file!;
  const size = () => fs.statSync(file).size;
  const before = size();
  const refused = (what: string, f: () => unknown, path: string, detail: RegExp) =>
    assert.throws(
      f,
      (e: unknown) => {
        assert.ok(e instanceof StateValidationError, `${what}: ${String(e)}`);
        assert.equal(e.pluginId, "notes");
        assert.equal(e.entryId, undefined, "a write names no entry");
        assert.equal(e.path, path);
        assert.match(e.detail, detail);
        assert.ok(e.message.startsWith(`plugin 'notes': the value the write would leave does not pass validate at ${path}: `), e.message);
        assert.match(e.message, /; nothing was written$/);
        return true;
      },
      what,
    );
  refused("a bad item", () => notes.write(ctx(), { items: ["a", 2] } as any), "/items/1", /string/);
  refused("a missing property", () => notes.write(ctx(), {} as any), "/items", /required/);
  // A patch: the value it leaves is checked (the core's merge), not the patch.
  refused("a patch that removes a required property", () => notes.patch(ctx(), { items: null }), "/items", /required/);
  refused("a patch that breaks a property", () => notes.patch(ctx(), { pinned: "yes" }), "/pinned", /boolean/);
  assert.equal(size(), before, "nothing appended");
  assert.ok(notes.patch(ctx(), { pinned: true }), "a patch that leaves a valid value is written");
  assert.deepEqual(notes.read(ctx()), { items: ["a"], pinned: true });

  // A bad value stored by another writer: the read names its entry and the first failing path.
  o.cell.api.appendEntry("session-state/notes", { v: 1, scope: "branch", op: "set", value: { items: ["a", 2, 3] } });
  const bad = pi.leaf!;
  for (const read of [() => notes.read(ctx()), () => notes.readAt(ctx(), bad)]) {
    assert.throws(read, (e: unknown) => {
      assert.ok(e instanceof StateValidationError, String(e));
      assert.equal(e.entryId, bad);
      assert.equal(e.path, "/items/1");
      assert.equal(e.message, `plugin 'notes': the stored value (entry '${bad}') does not pass validate at /items/1: ${e.detail}`);
      return true;
    });
  }
  // A write over it that leaves a valid value is allowed.
  assert.ok(notes.write(ctx(), { items: ["b"] }));
  assert.deepEqual(notes.read(ctx()), { items: ["b"] });
  await pi.shutdown();
});

test("validate: a type guard says only valid or not (path \"\"); a migrated value is validated after migration; a failing migrate is named", async (t) => {
  const dir = tmpDir(t);
  const counter = opener<number>({ pluginId: "counter", validate: (v): v is number => typeof v === "number" });
  const pi = await startPi({ dir, extensions: [counter.factory] });
  await pi.prompt("hi");
  const c = counter.cell.state!;
  const ctx = () => pi.context();
  c.write(ctx(), 1);
  const n = pi.events("counter").length;
  assert.throws(() => c.write(ctx(), "two" as any), (e: unknown) => e instanceof StateValidationError && e.path === "" && /at the root \(the value itself\): the validate function returned false; nothing was written$/.test(e.message));
  assert.equal(pi.events("counter").length, n, "nothing appended");
  counter.cell.api.appendEntry("session-state/counter", { v: 1, scope: "session", op: "set", value: "three" });
  const bad = pi.leaf!;
  assert.throws(() => c.read(ctx()), (e: unknown) => e instanceof StateValidationError && e.path === "" && e.entryId === bad);
  await pi.shutdown();

  // Version 2 validates what migrate returned; a migrate that throws is a StateMigrationError.
  const file = pi.file!;
  const failing = opener<{ n: number }>({
    pluginId: "counter",
    version: 2,
    migrate: (value) => {
      if (value === "three") throw new Error("not a number");
      return { n: value as number };
    },
    validate: Type.Object({ n: Type.Number() }),
  });
  const p2 = await startPi({ dir, session: file, extensions: [failing.factory] });
  assert.throws(
    () => failing.cell.state!.read(p2.context()),
    (e: unknown) =>
      e instanceof StateMigrationError &&
      e.pluginId === "counter" && e.fromVersion === 1 && e.toVersion === 2 && e.entryId === bad &&
      e.message === `plugin 'counter': migrating the state (entry '${bad}') from version 1 to 2 failed: not a number`,
  );
  const bytes = fs.readFileSync(file);
  assert.throws(() => failing.cell.state!.write(p2.context(), { n: 3 }), StateMigrationError, "a write needs the migrated value too");
  assert.deepEqual(fs.readFileSync(file), bytes, "nothing written");
  await p2.shutdown();

  const wrong = opener<{ n: number }>({
    pluginId: "counter",
    version: 2,
    migrate: (value) => ({ n: String(value) }) as any,
    validate: Type.Object({ n: Type.Number() }),
  });
  const p3 = await startPi({ dir, session: file, extensions: [wrong.factory] });
  assert.throws(
    () => wrong.cell.state!.read(p3.context()),
    (e: unknown) =>
      e instanceof StateValidationError && e.path === "/n" && e.entryId === bad &&
      e.message.startsWith(`plugin 'counter': the stored value (entry '${bad}'), migrated from version 1 to 2, does not pass validate at /n: `),
  );
  await p3.shutdown();
});

test("openSessionState refuses a version above 1 without migrate, a version that is not a whole number ≥ 1, and a validate it cannot use", () => {
  const pi = { appendEntry() {} };
  assert.throws(
    () => openSessionState(pi, { pluginId: "todo", version: 2 }),
    /^Error: openSessionState: plugin 'todo' is at version 2, which needs migrate\(value, fromVersion\)/,
  );
  for (const version of [0, -1, 1.5, Number.NaN, "2" as any, 2 ** 32]) {
    assert.throws(() => openSessionState(pi, { pluginId: "todo", version, migrate: (v) => v }), /version must be a whole number ≥ 1/, String(version));
  }
  assert.throws(() => openSessionState(pi, { pluginId: "todo", version: 2, migrate: 3 as any }), /migrate must be a function/);
  assert.throws(() => openSessionState(pi, { pluginId: "todo", validate: 42 as any }), /validate must be a TypeBox schema or a function/);
  // Version 1 needs no migrate; a given version and validate are kept.
  assert.equal(openSessionState(pi, { pluginId: "todo" }).version, 1);
  assert.equal(openSessionState(pi, { pluginId: "todo", version: 3, migrate: (v) => v, validate: Type.Array(Type.String()) }).version, 3);
});

/** A value nested `n` levels of arrays deep. */
function nested(n: number): unknown {
  let v: unknown = 0;
  for (let i = 0; i < n; i++) v = [v];
  return v;
}

/**
 * A version-1 value, then version 2 with `migrate`: every call is refused with a
 * `StateMigrationError` naming the entry and `detail`, nothing is written, and a `migrate`
 * that works reads the version-1 value afterwards.
 */
async function migrationRefused(
  t: any,
  what: string,
  migrate: (value: unknown) => any,
  detail: RegExp,
  cause?: unknown,
  opened?: (state: SessionState<{ items: unknown }>, ctx: () => any) => void,
) {
  const dir = tmpDir(t);
  const v1 = opener<{ items: string[] }>({ pluginId: "notes" });
  let pi = await startPi({ dir, extensions: [v1.factory] });
  await pi.prompt("hi");
  const setAt = v1.cell.state!.write(pi.context(), { items: ["keep me"] })!;
  const file = pi.file!;
  await pi.shutdown();
  const bytes = fs.readFileSync(file);

  const v2 = opener<{ items: unknown }>({ pluginId: "notes", version: 2, migrate });
  pi = await startPi({ dir, session: file, extensions: [v2.factory] });
  const notes = v2.cell.state!;
  opened?.(notes, () => pi.context());
  const refused = (e: unknown) => {
    assert.ok(e instanceof StateMigrationError, `${what}: ${String(e)}`);
    assert.equal(e.entryId, setAt, what);
    assert.equal(e.fromVersion, 1);
    assert.equal(e.toVersion, 2);
    assert.match(e.detail, detail, what);
    if (cause !== undefined) assert.equal(e.cause, cause, `${what}: the cause`);
    return true;
  };
  assert.throws(() => notes.read(pi.context()), refused, `${what}: read`);
  assert.throws(() => notes.patch(pi.context(), { more: 1 }), refused, `${what}: patch`);
  assert.throws(() => notes.write(pi.context(), { items: ["x"] }), refused, `${what}: write`);
  assert.throws(() => notes.drop(pi.context()), refused, `${what}: drop`);
  await pi.shutdown();
  assert.deepEqual(fs.readFileSync(file), bytes, `${what}: nothing written`);

  // The value written under version 1 is still there for a migrate that works.
  const good = opener<{ items: string[]; migrated: boolean }>({ pluginId: "notes", version: 2, migrate: (value) => ({ ...(value as object), migrated: true }) as any });
  pi = await startPi({ dir, session: file, extensions: [good.factory] });
  assert.deepEqual(good.cell.state!.read(pi.context()), { items: ["keep me"], migrated: true });
  await pi.shutdown();
}

test("a migrate that returns a Promise is a StateMigrationError naming the entry; nothing is written and the stored value stays for later readers", async (t) => {
  await migrationRefused(t, "an async migrate", async (value) => value, /migrate returned a Promise; it must return the value itself/);
});

test("a migrate that returns a value nested 150 levels deep is a StateMigrationError naming the entry, on the read and on every write; nothing is written", async (t) => {
  await migrationRefused(t, "a migrate returning 150 levels", () => ({ items: nested(150) }), /nested 151 levels deep, deeper than 100 levels of arrays and objects$/);
});

test("a validate that returns a Promise is a StateValidationError: nothing is written", async (t) => {
  const dir = tmpDir(t);
  const counter = opener<number>({ pluginId: "counter", validate: (async () => true) as any });
  const pi = await startPi({ dir, extensions: [counter.factory] });
  await pi.prompt("hi");
  const n = pi.events("counter").length;
  const before = fs.readFileSync(pi.file!);
  assert.throws(
    () => counter.cell.state!.write(pi.context(), 1),
    (e: unknown) => e instanceof StateValidationError && e.path === "" && /the validate function returned a Promise; it must answer true or false itself/.test(e.message) && /nothing was written$/.test(e.message),
  );
  assert.equal(pi.events("counter").length, n, "nothing appended");
  assert.deepEqual(fs.readFileSync(pi.file!), before, "the file as it was");
  // A stored value read through it is refused the same way, naming the entry that set it.
  counter.cell.api.appendEntry("session-state/counter", { v: 1, scope: "session", op: "set", value: 1 });
  const set = pi.leaf!;
  assert.throws(
    () => counter.cell.state!.read(pi.context()),
    (e: unknown) =>
      e instanceof StateValidationError && e.path === "" && e.entryId === set &&
      e.message === `plugin 'counter': the stored value (entry '${set}') does not pass validate at the root (the value itself): the validate function returned a Promise; it must answer true or false itself (an async function returns a Promise)`,
  );
  await pi.shutdown();
});

test("a migrate that throws is a StateMigrationError naming the entry, its detail the thrown message and its cause the thrown error; nothing is written", async (t) => {
  const thrown = new Error("no way from here");
  await migrationRefused(t, "a throwing migrate", () => { throw thrown; }, /^no way from here$/, thrown);
});

test("a migrate or validate that reads or writes a state is refused with the hook's error: nothing is written, and outside the hook the same calls work", async (t) => {
  const dir = tmpDir(t);
  let inside: (() => unknown) | undefined;
  const counter = opener<number>({
    pluginId: "counter",
    validate: (v: unknown) => {
      inside?.();
      return typeof v === "number";
    },
  });
  const other = opener<number>({ pluginId: "other" });
  const pi = await startPi({ dir, extensions: [counter.factory, other.factory] });
  await pi.prompt("hi");
  const before = fs.readFileSync(pi.file!);
  const reentrant: [string, () => unknown, string][] = [
    ["its own read", () => counter.cell.state!.read(pi.context()), "plugin 'counter': a state"],
    ["its own write", () => counter.cell.state!.write(pi.context(), 2), "plugin 'counter': a state"],
    ["another state's write", () => other.cell.state!.write(pi.context(), 1), "plugin 'other': a state"],
    ["another state's history", () => other.cell.state!.history(pi.context()), "plugin 'other': a state"],
    ["the branch key", () => branchKey(pi.context()), "the session"],
  ];
  for (const [what, call, subject] of reentrant) {
    inside = call;
    assert.throws(
      () => counter.cell.state!.write(pi.context(), 1),
      (e: unknown) =>
        e instanceof StateValidationError &&
        e.message.includes(`the validate function threw: ${subject} cannot be read or written from inside plugin 'counter''s migrate or validate`) &&
        /nothing was written$/.test(e.message),
      what,
    );
  }
  inside = undefined;
  assert.deepEqual(fs.readFileSync(pi.file!), before, "nothing written");
  // Outside the hook, the same calls work.
  assert.ok(counter.cell.state!.write(pi.context(), 1));
  assert.ok(other.cell.state!.write(pi.context(), 1));
  assert.equal(counter.cell.state!.read(pi.context()), 1);
  await pi.shutdown();
});

test("a migrate that reads its own state is refused as a StateMigrationError; nothing is written", async (t) => {
  const reader: { read?: () => unknown } = {};
  await migrationRefused(
    t,
    "a migrate that reads",
    (value) => {
      reader.read?.();
      return value;
    },
    /^plugin 'notes': a state cannot be read or written from inside plugin 'notes''s migrate or validate/,
    undefined,
    (state, ctx) => {
      reader.read = () => state.read(ctx());
    },
  );
});

test("migrate runs once per read of an older value and once per write on it, and not at all on the state's own version", async (t) => {
  const dir = tmpDir(t);
  const v1 = opener<{ items: string[] }>({ pluginId: "notes" });
  let pi = await startPi({ dir, extensions: [v1.factory] });
  await pi.prompt("hi");
  v1.cell.state!.write(pi.context(), { items: ["a"] });
  const file = pi.file!;
  await pi.shutdown();

  const calls: unknown[] = [];
  const v2 = opener<{ items: string[]; n?: number }>({
    pluginId: "notes",
    version: 2,
    migrate: (value, from) => {
      calls.push([value, from]);
      return value as { items: string[] };
    },
  });
  pi = await startPi({ dir, session: file, extensions: [v2.factory] });
  const notes = v2.cell.state!;
  assert.deepEqual(notes.read(pi.context()), { items: ["a"] });
  assert.deepEqual(calls, [[{ items: ["a"] }, 1]], "one call for the read");
  await pi.prompt("more"); // Pi's session changes: the next read asks the core again
  assert.deepEqual(notes.read(pi.context()), { items: ["a"] });
  assert.equal(calls.length, 2, "one call for the next read");
  assert.ok(notes.patch(pi.context(), { n: 1 }));
  assert.equal(calls.length, 3, "one call for the write on the older value");
  // Written at version 2 now: neither the reads nor the writes on it migrate.
  assert.deepEqual(notes.read(pi.context()), { items: ["a"], n: 1 });
  assert.ok(notes.patch(pi.context(), { n: 2 }));
  await pi.prompt("again");
  assert.deepEqual(notes.read(pi.context()), { items: ["a"], n: 2 });
  assert.equal(calls.length, 3, "no call on a value of the state's own version");
  await pi.shutdown();
});

/** The keys of `v` that are not camelCase, outside the data a session holds (`value`, `argument`). */
function snakeKeys(v: unknown, at = ""): string[] {
  if (Array.isArray(v)) return v.flatMap((x, i) => snakeKeys(x, `${at}[${i}]`));
  if (v === null || typeof v !== "object") return [];
  return Object.entries(v).flatMap(([k, x]) => [
    ...(/^[a-z][A-Za-z0-9]*$/.test(k) ? [] : [`${at}.${k}`]),
    ...(k === "value" || k === "argument" ? [] : snakeKeys(x, `${at}.${k}`)),
  ]);
}

test("one record, one shape: the addon's stored value, history, status and event counts are the CLI's --json records, byte for byte", async (t) => {
  const dir = tmpDir(t);
  const shape = opener<unknown>({ pluginId: "shape", scope: "branch", version: 2, migrate: (v) => v });
  const pi = await startPi({ dir, extensions: [shape.factory] });
  await pi.prompt("hi");
  const s = shape.cell.state!;
  const db = pi.databasePath;
  const file = pi.file!;
  // Values the printers could tell apart: a lone surrogate, exponents, array-index keys
  // after others, a negative zero, a null.
  const steps: Array<() => unknown> = [
    () => s.write(pi.context(), { text: "cut \ud83d here", big: 1e21, small: 1e-7, b: 1, "10": [null, -0, 0.1], "9": { deep: [[]] } }),
    () => s.patch(pi.context(), { text: null, b: { c: "x" } }),
    () => s.write(pi.context(), null),
    () => s.drop(pi.context()),
  ];
  const native = () => storeFor(pi.context()).store;
  for (const step of steps) {
    step();
    const at = pi.leaf!;
    // What the CLI prints, pretty, is the addon's compact text once JavaScript reads and prints it.
    const read = cli(["read", file, "--plugin", "shape", "--at", at, "--db", db, "--json"], dir);
    assert.ok(read.code === 0 || read.code === 1, read.stderr);
    const stored = native().readStored(file, "shape", "branch", at);
    assert.equal(stored, JSON.stringify(JSON.parse(read.stdout)), "read --json and readStored");
    assert.deepEqual(Object.keys(JSON.parse(stored)), [...(read.code === 0 ? ["value"] : []), "stateVersion", "entryId"]);
    assert.deepEqual(pi.stored("shape", "branch"), JSON.parse(stored), "the testing kit's stored");

    const history = cli(["history", file, "--plugin", "shape", "--at", at, "--json"], dir);
    assert.equal(history.code, 0, history.stderr);
    const rows = native().history(file, "shape", "branch", at);
    assert.equal(rows, JSON.stringify(JSON.parse(history.stdout).events), "history --json's events and history");
    assert.deepEqual(JSON.parse(rows).map((r: any) => Object.keys(r)), JSON.parse(rows).map((r: any) =>
      ["entryId", "line", "op", "stateVersion", ...(r.op === "drop" ? [] : ["argument"]), ...("value" in r ? ["value"] : [])]));
    assert.deepEqual(s.history(pi.context()), JSON.parse(rows), "the state's history");
    assert.deepEqual(JSON.parse(native().historyReport(file, "shape", "branch", at)), { events: JSON.parse(rows), refused: null });
    for (const text of [stored, rows]) assert.deepEqual(snakeKeys(JSON.parse(text)), [], text);
  }

  // status: this Pi's presence row. Its judgements are each process's own (`thisProcess`),
  // so the records are compared by their keys; the event counts byte for byte.
  const status = cli(["status", file, "--db", db, "--json"], dir);
  assert.equal(status.code, 0, status.stderr);
  const fromCli = JSON.parse(status.stdout);
  const fromAddon = JSON.parse(native().status(pi.sessionManager.getSessionId()));
  assert.ok(fromAddon.pi, "a Pi holds the session");
  for (const member of ["database", "lock", "pi"]) {
    assert.deepEqual(Object.keys(fromAddon[member] ?? {}), Object.keys(fromCli[member] ?? {}), member);
  }
  assert.equal(fromAddon.pi.thisProcess, true);
  assert.equal(fromCli.pi.thisProcess, false);
  const counts = JSON.parse(native().eventCounts(file));
  assert.equal(JSON.stringify(counts.rows), JSON.stringify(fromCli.events), "status --json's events and eventCounts");
  for (const v of [fromCli, fromAddon, counts]) assert.deepEqual(snakeKeys(v), [], JSON.stringify(v));
  await pi.shutdown();
});
