// The package in the real Pi 1.6.0 agent loop (SDK, faux provider, no network).
// Every read the test extension makes is compared with a TypeScript fold over Pi's own
// getBranch() / getEntries(); the CLI (target/debug/session-state) reads the same file.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { spawn, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { customs, databasePath, fauxAssistantMessage, fauxToolCall, fold, PKG, probe, startPi, type Pi } from "./harness.ts";
import { openSessionState } from "../src/index.ts";

const CLI = process.env.SESSION_STATE_BIN ?? path.resolve(PKG, "..", "target", "debug", "session-state");
assert.ok(fs.existsSync(CLI), `the CLI is missing: ${CLI} (build it with cargo build, or set SESSION_STATE_BIN)`);

function tmp(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "pi-state-"));
}

function cli(args: string[], dir: string) {
  const r = spawnSync(CLI, args, {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", PI_CODING_AGENT_DIR: path.join(dir, "agent"), HOME: dir },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Every read recorded since `from` equals the fold over Pi's entries at that moment. */
function checkReads(from = 0) {
  const reads = probe.reads.slice(from);
  assert.ok(reads.length > 0, "the extension read something");
  for (const r of reads) {
    assert.deepEqual(r.branch, r.foldBranch, `branch read at ${r.where} (leaf ${r.leaf})`);
    assert.deepEqual(r.session, r.foldSession, `session read at ${r.where} (leaf ${r.leaf})`);
  }
}

function last() {
  return probe.reads[probe.reads.length - 1];
}

async function probeCmd(pi: Pi, action: object) {
  await pi.command(`/probe ${JSON.stringify(action)}`);
}

/** Pi answers a prompt with one text message (this creates the file at the first one). */
async function chat(pi: Pi, text = "hi") {
  pi.faux.setResponses([fauxAssistantMessage(`re: ${text}`)]);
  await pi.session.prompt(text);
}

/** The model calls the `remember` tool, then answers. */
async function toolTurn(pi: Pi, items: string[]) {
  pi.faux.setResponses([
    fauxAssistantMessage(fauxToolCall("remember", { items }), { stopReason: "toolUse" }),
    fauxAssistantMessage("done"),
  ]);
  await pi.session.prompt(`remember ${items.join(",")}`);
}

test("writes before the file exists stay in memory, are read back, and reach the file when Pi creates it", async () => {
  const dir = tmp();
  const pi = await startPi({ dir });
  const from = probe.reads.length;
  await probeCmd(pi, { op: "write", value: ["early"] });
  await probeCmd(pi, { op: "write", scope: "session", value: 7 });
  const file = pi.sm.getSessionFile();
  assert.equal(fs.existsSync(file), false, "no file before the first message");
  assert.deepEqual(last().branch, ["early"]);
  assert.equal(last().session, 7);
  await chat(pi);
  assert.ok(fs.existsSync(file), "Pi created the file");
  const text = fs.readFileSync(file, "utf8");
  assert.match(text, /"customType":"session-state\/todo"/);
  assert.match(text, /"customType":"session-state\/counter"/);
  await probeCmd(pi, { op: "read" });
  assert.deepEqual(last().branch, ["early"]);
  checkReads(from);
  await pi.dispose();
});

test("a tool call's write, session and branch scope, navigateTree then a write forks", async () => {
  const dir = tmp();
  const pi = await startPi({ dir });
  const from = probe.reads.length;
  await chat(pi, "start");
  await toolTurn(pi, ["a"]);
  const afterA = pi.sm.getLeafId();
  await toolTurn(pi, ["a", "b"]);
  await probeCmd(pi, { op: "read" });
  assert.deepEqual(last().branch, ["a", "b"]);
  assert.equal(last().session, 2, "the session counter counts both tool calls");
  const tools = probe.reads.slice(from).filter((r) => r.where === "tool:after");
  assert.equal(tools.length, 2);

  // Step back to the first tool turn: the branch value as of that point, the session value unchanged.
  await probeCmd(pi, { op: "navigate", target: afterA });
  assert.equal(pi.sm.getLeafId(), afterA, "navigateTree moved Pi's leaf");
  assert.deepEqual(last().branch, ["a"], "stepping back reads the value as of that point");
  assert.equal(last().session, 2, "session scope does not depend on the position");

  // A write there is a fork: a second child of the entry.
  const before = customs(pi.sm, "todo").length;
  await probeCmd(pi, { op: "write", value: ["fork"] });
  const mine = customs(pi.sm, "todo");
  assert.equal(mine.length, before + 1);
  const forked = mine[mine.length - 1];
  assert.equal(forked.parentId, afterA, "the event is a child of the navigated-to entry");
  assert.ok(pi.sm.getChildren(afterA).length >= 2, "the entry now has two children");
  assert.deepEqual(last().branch, ["fork"]);
  assert.notEqual(last().key, probe.reads.find((r) => r.where === "cmd:read" && r.leaf !== afterA)?.key, "a new branch key");
  checkReads(from);

  // The CLI reads the same values at Pi's leaf, through the same projection.
  const file = pi.sm.getSessionFile();
  const db = databasePath(dir);
  const leaf = pi.sm.getLeafId();
  const r = cli(["read", file, "--plugin", "todo", "--at", leaf, "--db", db], dir);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), fold(pi.sm, "todo", "branch"));
  const s = cli(["read", file, "--plugin", "counter", "--scope", "session", "--at", leaf, "--db", db], dir);
  assert.equal(s.code, 0, s.stderr);
  assert.deepEqual(JSON.parse(s.stdout), fold(pi.sm, "counter", "session"));
  await pi.dispose();
});

test("drop and null, an unchanged write appends nothing", async () => {
  const dir = tmp();
  const pi = await startPi({ dir });
  const from = probe.reads.length;
  await chat(pi);
  await probeCmd(pi, { op: "write", value: null });
  assert.equal(last().branch, null, "a written null reads null");
  await probeCmd(pi, { op: "drop" });
  assert.equal(last().branch, undefined, "a drop makes it absent");
  const n0 = pi.sm.getEntries().length;
  await probeCmd(pi, { op: "drop" });
  assert.equal(pi.sm.getEntries().length, n0, "dropping an absent value appends nothing");
  await probeCmd(pi, { op: "write", value: { b: 1, a: [1, 2] } });
  const n1 = pi.sm.getEntries().length;
  await probeCmd(pi, { op: "write", value: { a: [1.0, 2], b: 1 } });
  assert.equal(pi.sm.getEntries().length, n1, "an equal value (key order, 1 = 1.0) appends nothing");
  await probeCmd(pi, { op: "patch", value: { b: null, c: "x" } });
  assert.deepEqual(last().branch, { a: [1, 2], c: "x" });
  checkReads(from);
  await pi.dispose();
});

test("bad input throws the core's message and appends nothing", async () => {
  const dir = tmp();
  const pi = await startPi({ dir });
  await chat(pi);
  const fakePi = { appendEntry: () => assert.fail("nothing may be appended") };
  const ctx = () => (pi.session.extensionRunner as any).createContext();
  const todo = (globalThis as any).__stateCell.todo;
  const n = pi.sm.getEntries().length;
  const file = pi.sm.getSessionFile();
  const db = databasePath(dir);

  // Invalid plugin id: session_state::Error::InvalidOption, word for word.
  let msg = "";
  assert.throws(() => openSessionState(fakePi, { pluginId: "Bad Id" }), (e: Error) => ((msg = e.message), e instanceof Error));
  assert.equal(
    msg,
    `invalid option plugin_id: "Bad Id" is not a valid plugin id: use a non-empty name of lowercase letters, digits, '-' and '.' (for example "role" or "my-ext.todo")`,
  );

  assert.throws(() => openSessionState(fakePi, { pluginId: "ok", databasePath: "relative/states.sqlite" }), /absolute/);
  assert.throws(() => openSessionState(fakePi, { pluginId: "ok", scope: "tree" as any }), /not a scope/);

  assert.throws(() => todo.write(ctx(), undefined), (e: Error) => e instanceof Error && /^plugin 'todo': the value cannot be serialized to JSON: undefined/.test(e.message));
  const cyclic: any = { a: 1 };
  cyclic.self = cyclic;
  assert.throws(() => todo.write(ctx(), cyclic), /plugin 'todo': the value cannot be serialized to JSON: the value refers to itself \(a cycle\)/);
  assert.throws(() => todo.write(ctx(), { x: NaN }), /plugin 'todo': the value cannot be serialized to JSON: the value holds the number NaN, which JSON cannot carry/);
  assert.throws(() => todo.write(ctx(), [Infinity]), /holds the number inf/i);

  // Too deep: the message the CLI prints for the same value.
  let deep: unknown = 1;
  for (let i = 0; i < 101; i++) deep = [deep];
  assert.throws(() => todo.write(ctx(), deep), (e: Error) => ((msg = e.message), /nested deeper than 100 levels/.test(e.message)));
  const d = cli(["write", file, "--plugin", "todo", "--value", JSON.stringify(deep), "--db", db], dir);
  assert.equal(d.code, 2);
  assert.ok(d.stderr.includes(msg), `core's message ${JSON.stringify(msg)} in CLI's ${JSON.stringify(d.stderr)}`);

  assert.equal(pi.sm.getEntries().length, n, "nothing appended");
  await pi.dispose();
});

test("reopening the file in a new session reads at its last entry; a fork into a new file carries the state", async () => {
  const dir = tmp();
  let pi = await startPi({ dir });
  await chat(pi);
  await toolTurn(pi, ["kept"]);
  const file = pi.sm.getSessionFile();
  await pi.dispose();

  pi = await startPi({ dir, open: file });
  const from = probe.reads.length;
  await probeCmd(pi, { op: "read" });
  const entries = pi.sm.getEntries();
  assert.equal(last().leaf, entries[entries.length - 1].id, "Pi's leaf on open is the file's last entry");
  assert.deepEqual(last().branch, ["kept"]);
  assert.equal(last().session, 1);
  checkReads(from);
  const leaf = pi.sm.getLeafId();
  await pi.dispose();

  // Pi's /fork: a new session file holding the path to the entry.
  const { SessionManager } = await import("@earendil-works/pi-coding-agent");
  const sm = SessionManager.open(file, path.join(dir, "sessions"));
  const forkFile = sm.createBranchedSession(leaf);
  assert.ok(forkFile && forkFile !== file);
  pi = await startPi({ dir, open: forkFile });
  assert.notEqual(pi.sm.getSessionId(), JSON.parse(fs.readFileSync(file, "utf8").split("\n")[0]).id);
  await probeCmd(pi, { op: "read" });
  assert.deepEqual(last().branch, ["kept"], "the state followed the fork");
  checkReads(from);
  await pi.dispose();
});

test("the CLI is refused while Pi holds the session and allowed after it shuts down; status shows that Pi", async () => {
  const dir = tmp();
  const pi = await startPi({ dir });
  await chat(pi);
  await probeCmd(pi, { op: "write", value: ["pi"] });
  const file = pi.sm.getSessionFile();
  const db = databasePath(dir);
  const bytes = fs.readFileSync(file);
  const w = cli(["write", file, "--plugin", "todo", "--value", '["cli"]', "--db", db], dir);
  assert.equal(w.code, 2, w.stderr);
  assert.match(w.stderr, /locked by a running Pi \(pid:\d+/, "initiator");
  assert.match(w.stderr, /write refused/, "action");
  assert.ok(w.stderr.includes(pi.sm.getSessionId()), "object");
  assert.match(w.stderr, /that Pi has the session open/, "reason");
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
  const ui = await startPi({ dir: tmp(), hasUI: true });
  await ui.command("/state:status");
  assert.match(ui.notes.join("\n"), /pi        this Pi: pid:\d+/);
  await ui.dispose();

  await pi.dispose();
  const ok = cli(["write", file, "--plugin", "todo", "--value", '["cli"]', "--db", db], dir);
  assert.equal(ok.code, 0, ok.stderr);
  const st2 = JSON.parse(cli(["status", file, "--db", db, "--json"], dir).stdout);
  assert.equal(st2.pi, undefined, "the row is gone after session_shutdown");
});

test("/state:force-refresh confirms through the UI when the holder may be alive, and without UI leaves the lock", async () => {
  const dir = tmp();
  const noUi = await startPi({ dir });
  await chat(noUi);
  const sid = noUi.sm.getSessionId();
  const db = databasePath(dir);
  // A live holder's lock row (this test's own parent process stands in for a writer).
  const { DatabaseSync } = await import("node:sqlite").catch(() => ({ DatabaseSync: undefined as any }));
  assert.ok(DatabaseSync, "node:sqlite is needed to plant a lock row");
  const conn = new DatabaseSync(db);
  const holder = `pid:${process.ppid}`;
  conn.prepare("INSERT OR REPLACE INTO write_lock (session_id, holder, acquired_at, action) VALUES (?, ?, ?, 'write')").run(sid, holder, Date.now());
  const rows = () => conn.prepare("SELECT holder FROM write_lock WHERE session_id = ?").all(sid);
  await noUi.command("/state:force-refresh");
  assert.equal(rows().length, 1, "no UI: the lock is left alone");
  await noUi.dispose();

  const ui = await startPi({ dir, open: noUi.sm.getSessionFile(), hasUI: true, confirm: false });
  await ui.command("/state:force-refresh");
  assert.equal(ui.confirms.length, 1, "asked");
  assert.equal(rows().length, 1, "declined: left alone");
  await ui.dispose();
  const yes = await startPi({ dir, open: noUi.sm.getSessionFile(), hasUI: true, confirm: true });
  await yes.command("/state:force-refresh");
  assert.equal(rows().length, 0, "confirmed: cleared");
  assert.match(yes.notes.join("\n"), /Cleared the lock held by/);
  await yes.dispose();
  conn.close();
});

test("a killed Pi process does not seal the session", async () => {
  const dir = tmp();
  const script = fileURLToPath(new URL("./hold.ts", import.meta.url));
  const child = spawn(process.execPath, [script, dir], { stdio: ["ignore", "pipe", "inherit"] });
  const file: string = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (b) => {
      out += b;
      const line = out.split("\n").find((l) => l.startsWith("READY "));
      if (line) resolve(line.slice(6).trim());
    });
    child.on("exit", (code) => reject(new Error(`the Pi child exited early (${code}): ${out}`)));
  });
  const db = databasePath(dir);
  const held = cli(["write", file, "--plugin", "todo", "--value", "1", "--db", db], dir);
  assert.equal(held.code, 2, "refused while that Pi runs");
  assert.match(held.stderr, /running Pi/);
  const exited = new Promise((r) => child.on("exit", r));
  child.kill("SIGKILL");
  await exited;
  const after = cli(["write", file, "--plugin", "todo", "--value", "1", "--db", db], dir);
  assert.equal(after.code, 0, `a killed Pi's row is judged dead: ${after.stderr}`);
  const st = JSON.parse(cli(["status", file, "--db", db, "--json"], dir).stdout);
  assert.equal(st.pi, undefined, "the dead Pi's row was deleted by the writer");
});

test("the database location comes from Pi's settings (SPEC §4), as the CLI resolves it", async () => {
  const dir = tmp();
  const custom = path.join(dir, "elsewhere", "states.sqlite");
  fs.mkdirSync(path.join(dir, "agent"), { recursive: true });
  fs.writeFileSync(path.join(dir, "agent", "settings.json"), JSON.stringify({ sessionState: { databasePath: custom } }));
  const pi = await startPi({ dir, hasUI: true });
  await chat(pi);
  await probeCmd(pi, { op: "write", value: ["here"] });
  await pi.command("/state:status");
  assert.match(pi.notes.join("\n"), new RegExp(`database  ${custom.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`));
  assert.ok(fs.existsSync(custom), "the projection and the presence row are there");
  // The CLI, with the same agent directory and no --db, resolves the same database: refused.
  const w = cli(["write", pi.sm.getSessionFile(), "--plugin", "todo", "--value", "1"], dir);
  assert.equal(w.code, 2, w.stderr);
  assert.match(w.stderr, /running Pi/);
  await pi.dispose();
});
