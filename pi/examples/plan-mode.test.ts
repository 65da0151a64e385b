// The plan-mode port (`plan-mode/index.ts`) in Pi's real agent loop, and the same script on
// Pi's own plan-mode (loaded from its installed package): they agree at every step but
// those where the original's state is stale (after /tree, a reload after /tree, a resume on
// another branch), where the test asserts the original's wrong answer and the port's right one.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createJiti } from "jiti";
import { startPi, toolCall, type TestPi } from "@session-state/pi/testing";
import { original, port, resumeInNewProcess, step, surface, visible, Watcher, STATE, type Seen } from "./ports.ts";
import { allStepsComplete, extractTodoItems, isSafeCommand, markCompletedSteps } from "./plan-mode/rules.ts";

const ORIGINAL = original("plan-mode");
const PORT = port("plan-mode");

const PLAN = "Plan:\n1. Read the config file\n2. Update `the parser` module\n";
const PROGRESS_NONE = "Plan Progress:\n1. ○ Config file\n2. ○ Parser module";
const PROGRESS_ONE = "Plan Progress:\n1. ✓ Config file\n2. ○ Parser module";
const NO_TODOS = "No todos. Create a plan first with /plan";
const PLAN_TOOLS = ["read", "bash", "grep", "find", "ls"];
const NORMAL_TOOLS = ["read", "bash", "edit", "write"];
const ASK = "Plan mode - what next? Execute the plan (track progress) / Stay in plan mode / Refine the plan";
const EXECUTING_WIDGET = [" ☑ Config file", " ☐ Parser module"];

function tmp(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plan-mode-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Whether any request of `s` sent the model plan mode's hidden message. */
const sentPlanMode = (s: Seen) => s.requests.some((r) => r.messages.some((m) => m.includes("[PLAN MODE ACTIVE]")));
const noteTexts = (s: Seen) => s.notes.map((n) => n.message);
/** The plan-mode entries on the branch: the port's state events, the original's entries. */
const planEntries = (s: Seen) => s.customs.filter((c) => c === "plan-mode" || c === `${STATE}plan-mode`).length;

type Steps = Record<string, Seen & { asked: string[] }>;

/** The whole script, on `extension`: commands, the model's tool calls, /tree, execution, compact, reload, clone, fork, the shortcut. */
async function script(extension: string, dir: string): Promise<{ steps: Steps; file: string; offered: ReturnType<typeof surface> }> {
  const choices: string[] = [];
  const asked: string[] = [];
  const pi = await startPi({
    dir,
    builtinTools: true,
    extensions: [extension],
    settings: { compaction: { keepRecentTokens: 1 } },
    answers: {
      select: (title, options) => {
        asked.push(`${title} ${options.join(" / ")}`);
        return choices.shift();
      },
      editor: () => "Also cover the tests",
    },
  });
  const offered = surface(pi);
  const w = new Watcher(pi);
  const steps: Steps = {};
  const at = async (name: string, f: () => Promise<unknown>) => {
    const from = asked.length;
    steps[name] = { ...(await step(w, f)), asked: asked.slice(from) };
  };
  const user = (text: string) =>
    (pi.sessionManager.getBranch() as any[]).find((e) => e.type === "message" && e.message.role === "user" && e.message.content?.[0]?.text === text)!.id as string;

  await at("hi", () => pi.prompt("hi"));
  const beforePlan = pi.leaf!;
  await at("/plan", () => pi.command("/plan"));
  choices.push("Stay in plan mode");
  await at("explore", () =>
    pi.prompt("explore", toolCall("bash", { command: "rm -rf build" }), toolCall("bash", { command: "ls" }), PLAN),
  );
  const afterPlan = pi.leaf!;
  await at("/todos", () => pi.command("/todos"));
  await at("tree to before /plan", () => pi.navigate(beforePlan));
  await at("/todos before /plan", () => pi.command("/todos"));
  await at("a turn on the new branch", () => pi.prompt("other", "ok"));
  await at("tree to after the plan", () => pi.navigate(afterPlan));
  await at("/todos after the plan", () => pi.command("/todos"));
  choices.push("Execute the plan (track progress)");
  await at("execute", () => pi.prompt("make it so", PLAN, "Read it. [DONE:1]", "ok"));
  const executing = pi.leaf!;
  await at("/todos executing", () => pi.command("/todos"));
  pi.reply("the summary");
  await at("compact", () => pi.compact());
  await at("finish", () => pi.prompt("continue", "Step 2 is done"));
  await at("after the plan", () => pi.prompt("next"));
  await at("tree to while executing", () => pi.navigate(executing));
  await at("/todos while executing", () => pi.command("/todos"));
  await at("reload", () => pi.reload());
  await at("clone", () => pi.clone());
  await at("/todos in the clone", () => pi.command("/todos"));
  await at("fork before explore", () => pi.fork(user("explore"), { position: "before" }));
  await at("/todos in the fork", () => pi.command("/todos"));
  await at("fork before /plan", () => pi.fork(beforePlan));
  await at("shortcut on", () => pi.shortcut("ctrl+alt+p"));
  choices.push("Refine the plan", "Stay in plan mode");
  await at("refine", () => pi.prompt("look", toolCall("bash", { command: "git commit -am x" }), "Plan:\n1. Write the changelog entry\n", "Noted.", "Plan:\n1. Write the changelog entry\n2. Check the tests pass\n"));
  await at("/todos refined", () => pi.command("/todos"));
  await at("shortcut off", () => pi.shortcut("ctrl+alt+p"));
  await at("a turn out of plan mode", () => pi.prompt("go on"));
  const file = pi.file!;
  await pi.shutdown();
  return { steps, file, offered };
}

test("plan-mode: the port and Pi's original through commands, tool calls, /tree, execution, compact, reload, clone, fork, the shortcut and a resume in a new process", async (t) => {
  const dirs = { port: tmp(t), orig: tmp(t) };
  const ported = await script(PORT, dirs.port);
  const orig = await script(ORIGINAL, dirs.orig);
  const p = ported.steps;
  const o = orig.steps;
  assert.deepEqual(ported.offered, orig.offered, "the same commands, flag and shortcut");
  assert.deepEqual(ported.offered.flags, [{ name: "plan", description: "Start in plan mode (read-only exploration)", type: "boolean", default: false }]);
  assert.deepEqual(ported.offered.shortcuts, [{ key: "ctrl+alt+p", description: "Toggle plan mode" }]);

  // The port, step by step: what the user and the model see.
  assert.deepEqual([p["hi"]!.statuses, p["hi"]!.tools, sentPlanMode(p["hi"]!)], [{}, NORMAL_TOOLS, false]);
  assert.deepEqual(noteTexts(p["/plan"]!), ["Plan mode enabled. Built-in write tools disabled."]);
  assert.deepEqual([p["/plan"]!.statuses, p["/plan"]!.tools], [{ "plan-mode": "⏸ plan" }, PLAN_TOOLS]);
  const explore = p["explore"]!;
  assert.equal(explore.requests.length, 3);
  assert.ok(explore.requests.every((r) => r.messages.some((m) => m.startsWith("user: [PLAN MODE ACTIVE]\nYou are in plan mode"))), "every request of the prompt carries the hidden message");
  assert.deepEqual(explore.requests[0]!.tools, PLAN_TOOLS, "edit and write are not declared to the model");
  assert.equal(
    explore.requests[1]!.messages.at(-1),
    "toolResult: Plan mode: command blocked (not allowlisted). Use /plan to disable plan mode first.\nCommand: rm -rf build",
  );
  assert.equal(explore.requests[2]!.messages.at(-1), "toolResult: (no output)", "ls is allowed");
  assert.deepEqual(explore.asked, [ASK]);
  assert.deepEqual(noteTexts(p["/todos"]!), [PROGRESS_NONE]);

  // /tree to before /plan: no plan mode, no plan; the turn there is a normal one.
  assert.deepEqual([p["tree to before /plan"]!.statuses, p["tree to before /plan"]!.tools], [{}, NORMAL_TOOLS]);
  assert.deepEqual(noteTexts(p["/todos before /plan"]!), [NO_TODOS]);
  const other = p["a turn on the new branch"]!;
  assert.deepEqual([sentPlanMode(other), other.asked, planEntries(other)], [false, [], 0]);
  // /tree back after the plan: plan mode and its steps again.
  assert.deepEqual([p["tree to after the plan"]!.statuses, p["tree to after the plan"]!.tools], [{ "plan-mode": "⏸ plan" }, PLAN_TOOLS]);
  assert.deepEqual(noteTexts(p["/todos after the plan"]!), [PROGRESS_NONE]);

  // Execution: the steps go to the model, [DONE:1] completes the first, the footer and widget follow.
  const exec = p["execute"]!;
  assert.deepEqual(exec.asked, [ASK]);
  assert.deepEqual(exec.statuses, { "plan-mode": "📋 1/2" });
  assert.deepEqual(exec.widgets, { "plan-todos": EXECUTING_WIDGET });
  assert.deepEqual(exec.tools, NORMAL_TOOLS, "full access while executing");
  const execMessages = exec.requests.at(-1)!.messages;
  assert.ok(execMessages.includes("user: **Plan Steps (2):**\n\n1. ☐ Config file\n2. ☐ Parser module"));
  assert.ok(
    execMessages.includes(
      "user: Execute the plan.\n\nRemaining steps:\n1. Config file\n2. Parser module\n\nStart with: Config file\nAfter completing a step, include a [DONE:n] tag in your response.",
    ),
  );
  assert.deepEqual(noteTexts(p["/todos executing"]!), [PROGRESS_ONE]);
  // Compaction keeps the state; the next prompt carries the remaining step; "Step 2 is done" completes the plan.
  assert.deepEqual(p["compact"]!.statuses, { "plan-mode": "📋 1/2" });
  const finish = p["finish"]!;
  assert.match(finish.requests[0]!.messages[0]!, /the summary/);
  assert.ok(
    finish.requests[0]!.messages.includes(
      "user: [EXECUTING PLAN - Full tool access enabled]\n\nRemaining steps:\n2. Parser module\n\nExecute each step in order.\nAfter completing a step, include a [DONE:n] tag in your response.",
    ),
  );
  assert.deepEqual([finish.statuses, finish.widgets], [{}, {}]);
  assert.ok(p["after the plan"]!.requests[0]!.messages.includes("user: **Plan Complete!** ✓\n\n~~Config file~~\n~~Parser module~~"));
  // /tree back to while it executed: the progress of that point.
  assert.deepEqual([p["tree to while executing"]!.statuses, p["tree to while executing"]!.widgets], [{ "plan-mode": "📋 1/2" }, { "plan-todos": EXECUTING_WIDGET }]);
  assert.deepEqual(noteTexts(p["/todos while executing"]!), [PROGRESS_ONE]);
  assert.deepEqual(p["reload"]!.statuses, { "plan-mode": "📋 1/2" }, "a reload reads the same point");
  assert.deepEqual(p["clone"]!.statuses, { "plan-mode": "📋 1/2" }, "a clone carries the state of its path");
  assert.deepEqual(noteTexts(p["/todos in the clone"]!), [PROGRESS_ONE]);
  assert.deepEqual([p["fork before explore"]!.statuses, p["fork before explore"]!.tools], [{ "plan-mode": "⏸ plan" }, PLAN_TOOLS]);
  assert.deepEqual(noteTexts(p["/todos in the fork"]!), [NO_TODOS], "plan mode on, no plan yet");
  assert.deepEqual([p["fork before /plan"]!.statuses, p["fork before /plan"]!.tools], [{}, NORMAL_TOOLS]);
  // Ctrl+Alt+P, a blocked git commit, "Refine the plan" (the editor's text goes to the model as a user message).
  assert.deepEqual([noteTexts(p["shortcut on"]!), p["shortcut on"]!.statuses], [["Plan mode enabled. Built-in write tools disabled."], { "plan-mode": "⏸ plan" }]);
  const refine = p["refine"]!;
  assert.match(refine.requests[1]!.messages.at(-1)!, /^toolResult: Plan mode: command blocked .*\nCommand: git commit -am x$/s);
  assert.ok(refine.requests[2]!.messages.includes("user: **Plan Steps (1):**\n\n1. ☐ Changelog entry"));
  assert.equal(refine.requests[3]!.messages.at(-1), "user: Also cover the tests");
  assert.deepEqual(refine.asked, [ASK, ASK]);
  assert.deepEqual(noteTexts(p["/todos refined"]!), ["Plan Progress:\n1. ○ Changelog entry\n2. ○ Tests pass"]);
  assert.deepEqual([noteTexts(p["shortcut off"]!), p["shortcut off"]!.statuses, p["shortcut off"]!.tools], [["Plan mode disabled. Full access restored."], {}, NORMAL_TOOLS]);
  const after = p["a turn out of plan mode"]!;
  assert.equal(sentPlanMode(after), false, "plan mode's messages are taken out of what the model is sent");
  assert.ok(after.requests[0]!.messages.includes("user: look"), "the rest of the conversation stays");

  // The original: the same at every step where its state is right.
  const differ = new Set(["tree to before /plan", "/todos before /plan", "a turn on the new branch", "tree to while executing", "/todos while executing", "reload"]);
  for (const name of Object.keys(p)) {
    if (differ.has(name)) continue;
    assert.deepEqual({ ...visible(o[name]!), asked: o[name]!.asked }, { ...visible(p[name]!), asked: p[name]!.asked }, `step "${name}": the original and the port agree`);
  }
  // Where it is stale: /tree to before /plan still shows plan mode (Pi restores the
  // tools of that point itself) and its plan; the turn there sends [PLAN MODE ACTIVE],
  // asks about the plan again and writes plan mode into the new branch.
  assert.deepEqual(o["tree to before /plan"]!.statuses, { "plan-mode": "⏸ plan" });
  assert.deepEqual(noteTexts(o["/todos before /plan"]!), [PROGRESS_NONE]);
  const staleTurn = o["a turn on the new branch"]!;
  assert.deepEqual([sentPlanMode(staleTurn), staleTurn.asked, planEntries(staleTurn)], [true, [ASK], 1]);
  // /tree back to while the plan executed: the original keeps "plan complete" (no footer, no widget, no todos).
  assert.deepEqual([o["tree to while executing"]!.statuses, o["tree to while executing"]!.widgets], [{}, {}]);
  assert.deepEqual(noteTexts(o["/todos while executing"]!), [NO_TODOS]);
  // A reload there reads the last entry of the whole file: the finished plan.
  assert.deepEqual([o["reload"]!.statuses, o["reload"]!.widgets], [{}, {}]);

  // A resume in a new process (the fork's file, plan mode off): both agree.
  const resume = (dir: string, file: string, extension: string) =>
    resumeInNewProcess({ dir, session: file, extension, builtinTools: true, steps: [{ command: "/todos" }, { shortcut: "ctrl+alt+p" }, { prompt: "resumed" }] });
  const pr = resume(dirs.port, ported.file, PORT);
  const or = resume(dirs.orig, orig.file, ORIGINAL);
  assert.deepEqual(noteTexts(pr[1]!), [NO_TODOS], "turning plan mode off dropped its plan");
  assert.deepEqual([pr[2]!.statuses, pr[2]!.tools], [{ "plan-mode": "⏸ plan" }, PLAN_TOOLS]);
  assert.equal(sentPlanMode(pr[3]!), true);
  assert.deepEqual(or.map(visible), pr.map(visible));
});

test("plan-mode: a resume on a branch where plan mode was never on (a new process): the original sends [PLAN MODE ACTIVE] and writes plan mode into that branch; the port does not", async (t) => {
  const run = async (extension: string) => {
    const dir = tmp(t);
    const pi = await startPi({ dir, builtinTools: true, extensions: [extension], answers: { select: () => "Stay in plan mode" } });
    await pi.prompt("one");
    const one = pi.leaf!;
    await pi.prompt("two");
    const two = pi.leaf!;
    await pi.navigate(one);
    await pi.command("/plan");
    await pi.prompt("explore", PLAN);
    // /tree back to "two", labelling it: the label is the file's last entry, where a resume opens.
    const r = await pi.session.navigateTree(two, { summarize: false, label: "no plan here" });
    assert.equal(r.cancelled, false);
    const file = pi.file!;
    await pi.shutdown();
    return resumeInNewProcess({ dir, session: file, extension, builtinTools: true, steps: [{ command: "/todos" }, { prompt: "three" }] });
  };
  const p = await run(PORT);
  const o = await run(ORIGINAL);
  assert.deepEqual([p[0]!.statuses, p[0]!.tools], [{}, NORMAL_TOOLS]);
  assert.deepEqual(noteTexts(p[1]!), [NO_TODOS]);
  assert.deepEqual([sentPlanMode(p[2]!), p[2]!.requests[0]!.tools, planEntries(p[2]!)], [false, NORMAL_TOOLS, 0]);
  assert.deepEqual([o[0]!.statuses, o[0]!.tools], [{ "plan-mode": "⏸ plan" }, PLAN_TOOLS]);
  assert.deepEqual(noteTexts(o[1]!), [PROGRESS_NONE]);
  assert.deepEqual([sentPlanMode(o[2]!), o[2]!.requests[0]!.tools, planEntries(o[2]!)], [true, PLAN_TOOLS, 1]);
});

test("plan-mode: plan mode turned off with no turn since: after a resume (a new process) and a /tree back, Pi restores the tools of the last run, plan mode's; the port gives the tools from before plan mode back, the original leaves the model plan mode's tools", async (t) => {
  const run = async (extension: string) => {
    const dir = tmp(t);
    const offNoTurn = async (pi: TestPi) => {
      await pi.prompt("hi");
      const hi = pi.leaf!;
      await pi.command("/plan");
      await pi.prompt("look"); // this run records plan mode's tools
      await pi.command("/plan"); // off: no run records that yet
      return { hi, off: pi.leaf! };
    };
    let pi = await startPi({ dir, builtinTools: true, extensions: [extension] });
    await offNoTurn(pi);
    const file = pi.file!;
    await pi.shutdown();
    // The file's last entry is the off event: the resume opens there.
    const resumed = resumeInNewProcess({ dir, session: file, extension, builtinTools: true, steps: [{ prompt: "resumed" }] });
    pi = await startPi({ builtinTools: true, extensions: [extension] });
    const w = new Watcher(pi);
    const { hi, off } = await offNoTurn(pi);
    const seen = { off: w.snap(), back: await step(w, () => pi.navigate(hi)), again: await step(w, () => pi.navigate(off)), turn: await step(w, () => pi.prompt("edit it")) };
    await pi.shutdown();
    return { ...seen, resumed: resumed[0]!, resumedTurn: resumed[1]! };
  };
  const p = await run(PORT);
  const o = await run(ORIGINAL);
  for (const s of [p, o]) assert.deepEqual([s.off.tools, s.off.statuses, s.back.tools], [NORMAL_TOOLS, {}, NORMAL_TOOLS]);
  assert.deepEqual([p.again.tools, p.turn.requests[0]!.tools, sentPlanMode(p.turn)], [NORMAL_TOOLS, NORMAL_TOOLS, false]);
  assert.deepEqual([o.again.tools, o.turn.requests[0]!.tools, sentPlanMode(o.turn)], [PLAN_TOOLS, PLAN_TOOLS, false]);
  assert.deepEqual([p.resumed.tools, p.resumedTurn.requests[0]!.tools], [NORMAL_TOOLS, NORMAL_TOOLS]);
  assert.deepEqual([o.resumed.tools, o.resumedTurn.requests[0]!.tools], [PLAN_TOOLS, PLAN_TOOLS]);
  assert.deepEqual([p.resumed.statuses, o.resumed.statuses], [{}, {}], "plan mode is off in both");
});

test("plan-mode: --plan turns plan mode on where the branch has none; /plan's off stays off on resume; both agree", async (t) => {
  const run = async (extension: string) => {
    const dir = tmp(t);
    const pi = await startPi({ dir, builtinTools: true, flags: { plan: true }, extensions: [extension] });
    const w = new Watcher(pi);
    const seen = [w.snap(), await step(w, () => pi.prompt("look")), await step(w, () => pi.command("/plan")), await step(w, () => pi.prompt("work"))];
    const file = pi.file!;
    await pi.shutdown();
    seen.push(...resumeInNewProcess({ dir, session: file, extension, builtinTools: true, flags: { plan: true }, steps: [{ prompt: "again" }] }));
    return seen;
  };
  const p = await run(PORT);
  assert.deepEqual([p[0]!.statuses, p[0]!.tools], [{ "plan-mode": "⏸ plan" }, PLAN_TOOLS]);
  assert.equal(sentPlanMode(p[1]!), true);
  assert.deepEqual([p[2]!.statuses, p[2]!.tools], [{}, NORMAL_TOOLS]);
  assert.equal(sentPlanMode(p[3]!), false);
  assert.deepEqual([p[4]!.statuses, sentPlanMode(p[5]!)], [{}, false], "resumed with --plan: the branch says off");
  assert.deepEqual((await run(ORIGINAL)).map(visible), p.map(visible));
});

test("plan-mode rules decide as the original's: the bash allowlist, a plan's steps, done marks", async () => {
  // Pi's own loader for TypeScript under node_modules (Node strips types only outside it).
  const utils = (await createJiti(import.meta.url).import(path.join(ORIGINAL, "utils.ts"))) as typeof import("./plan-mode/rules.ts");
  const commands = [
    "ls -la", "cat a.txt", "  grep -r foo .", "git status", "git log --oneline", "GIT diff", "git branch -D x", "git commit -m x",
    "npm list", "npm install x", "yarn why x", "curl https://x", "wget -O - x", "wget x", "sed -n 1p f", "sed -i s/a/b/ f",
    "echo hi > f", "echo hi >> f", "cat <> f", "ls | tee f", "rm -rf /", "find . -name x", "sudo ls", "Cat a", "node --version",
    "python --version", "jq . f", "awk 1 f", "vim f", "ls && mkdir x", "ps aux", "service x restart", "systemctl start x",
    "rg foo", "fd x", "bat f", "eza", "true", "", "uname -a", "env", "git ls-files", "git config --get user.name", "git stash",
  ];
  for (const c of commands) assert.equal(isSafeCommand(c), utils.isSafeCommand(c), `isSafeCommand(${JSON.stringify(c)})`);
  const answers = [
    PLAN,
    "Draft\n**Plan:**\n1. Use the `cli` flag\n\nPlan:\n1) **Run** tests now\n2. /skip this\n3. - nope\n4. short\n5. Check the *docs* page**\n6. abc de",
    "no plan here\n1. Something long enough",
    "plan:\n   12. Install dependencies first\n",
  ];
  for (const a of answers) assert.deepEqual(extractTodoItems(a), utils.extractTodoItems(a), `extractTodoItems(${JSON.stringify(a)})`);
  const marks = ["[DONE:1] and [done 2]", "Done: 3", "Step 1 is complete, step 2 finished", "Step 3 is not done", "[DONE: 2]"];
  for (const m of marks) {
    const items = [1, 2, 3].map((step) => ({ step, text: `step ${step}`, completed: step === 2 }));
    const theirs = items.map((i) => ({ ...i }));
    utils.markCompletedSteps(m, theirs);
    assert.deepEqual(markCompletedSteps(m, items), theirs, `markCompletedSteps(${JSON.stringify(m)})`);
    assert.equal(items[0]!.completed, false, "the port leaves its input as it was");
  }
  for (const m of ["All steps are done.", "every step completed", "The plan is complete", "plan done", "not all of it", "the planet is done"]) {
    assert.equal(allStepsComplete(m), utils.allStepsComplete(m), `allStepsComplete(${JSON.stringify(m)})`);
  }
});
