// The preset port (`preset.ts`) in Pi's real agent loop, and the same script on Pi's own
// preset.ts (loaded from its installed package): they agree at every step but those where
// the original's state is stale or lost (after /tree to before /preset, a turn there, a
// reload or resume after clearing, a resume after a preset with no turn since, a resume on
// another branch, "(none)" after a resume), where the test asserts the original's wrong
// answer and the port's right one.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { key, startPi } from "@session-state/pi/testing";
import { original, port, resumeInNewProcess, step, surface, visible, Watcher, STATE, type Seen } from "./ports.ts";

const ORIGINAL = original("preset.ts");
const PORT = port("preset.ts");

const PLANNING = "You are in PLANNING MODE. Do not change files.";
const IMPLEMENTING = "You are in IMPLEMENTATION MODE.";
const REVIEWING = "Review only.";
/** Pi's `defaultTools` for these sessions: what was active before any preset. */
const START_TOOLS = ["read", "grep"];
const SETTINGS = { defaultTools: START_TOOLS, compaction: { keepRecentTokens: 1 } };

/** A folder in the kit's layout with presets in the agent directory and in the project. */
function presetsDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "preset-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.mkdirSync(path.join(dir, "agent"), { recursive: true });
  fs.mkdirSync(path.join(dir, "project", ".pi"), { recursive: true });
  fs.writeFileSync(
    path.join(dir, "agent", "presets.json"),
    JSON.stringify({
      plan: { thinkingLevel: "high", tools: ["read", "grep", "find", "ls"], instructions: PLANNING },
      implement: { tools: ["read", "bash", "edit", "write"], instructions: IMPLEMENTING },
      // The project's file wins on a name both define.
      review: { instructions: "never seen" },
    }),
  );
  fs.writeFileSync(
    path.join(dir, "project", ".pi", "presets.json"),
    JSON.stringify({ review: { provider: "faux", model: "faux-1", tools: ["read", "nosuch"], instructions: REVIEWING }, broken: { provider: "nowhere", model: "x" } }),
  );
  return dir;
}

/** The instructions of a preset the model got at the end of its system prompt, in each request of `s`. */
const instructions = (s: Seen) =>
  s.requests.map((r) => [PLANNING, IMPLEMENTING, REVIEWING].find((i) => r.systemPrompt.endsWith(`\n\n${i}`)) ?? null);
const noteTexts = (s: Seen) => s.notes.map((n) => n.message);
const presetEntries = (s: Seen) => s.customs.filter((c) => c === "preset-state" || c === `${STATE}preset`).length;
const SELECTOR = [
  "plan (active)                   thinking:high | tools:read,grep,find,ls | \"You are in PLANNING M",
  "implement                       tools:read,bash,edit,write | \"You are in IMPLEMENTATION M...\"",
  "review                          faux/faux-1 | tools:read,nosuch | \"Review only.\"",
  "broken                          nowhere/x",
  "(none)                          Clear active preset, restore defaults",
];

async function script(extension: string, dir: string): Promise<{ steps: Record<string, Seen>; file: string; offered: ReturnType<typeof surface> }> {
  const pi = await startPi({ dir, builtinTools: true, settings: SETTINGS, extensions: [extension] });
  const offered = surface(pi);
  const w = new Watcher(pi);
  const steps: Record<string, Seen> = { start: w.snap() };
  const at = async (name: string, f: () => Promise<unknown>) => void (steps[name] = await step(w, f));

  await at("hi", () => pi.prompt("hi"));
  const beforePreset = pi.leaf!;
  await at("/preset plan", () => pi.command("/preset plan"));
  await at("plan it", () => pi.prompt("plan it"));
  const planned = pi.leaf!;
  await at("tree to before /preset", () => pi.navigate(beforePreset));
  await at("a turn on the new branch", () => pi.prompt("other"));
  await at("tree to after /preset", () => pi.navigate(planned));
  pi.keys(key.down, key.enter);
  await at("the selector", () => pi.command("/preset"));
  await at("the shortcut", () => pi.shortcut("ctrl+shift+u"));
  await at("/preset nope", () => pi.command("/preset nope"));
  await at("/preset broken", () => pi.command("/preset broken"));
  await at("/preset review", () => pi.command("/preset review"));
  await at("review it", () => pi.prompt("review it"));
  const reviewed = pi.leaf!;
  pi.keys(key.down, key.down, key.down, key.down, key.enter);
  await at("(none)", () => pi.command("/preset"));
  await at("a plain turn", () => pi.prompt("plain"));
  pi.reply("the summary");
  await at("compact", () => pi.compact());
  await at("after compact", () => pi.prompt("still plain"));
  await at("reload", () => pi.reload());
  await at("a turn after the reload", () => pi.prompt("again"));
  await at("tree to the review", () => pi.navigate(reviewed));
  await at("clone", () => pi.clone());
  await at("a turn in the clone", () => pi.prompt("in the clone"));
  await at("fork before /preset", () => pi.fork(beforePreset));
  await at("/preset implement", () => pi.command("/preset implement"));
  const file = pi.file!;
  await pi.shutdown();
  return { steps, file, offered };
}

test("preset: the port and Pi's original through /preset, the selector, the shortcut, /tree, compact, reload, clone, fork and a resume in a new process", async (t) => {
  const dirs = { port: presetsDir(t), orig: presetsDir(t) };
  const ported = await script(PORT, dirs.port);
  const orig = await script(ORIGINAL, dirs.orig);
  const p = ported.steps;
  const o = orig.steps;
  assert.deepEqual(ported.offered, orig.offered, "the same command, flag and shortcut");
  assert.deepEqual(ported.offered.shortcuts, [{ key: "ctrl+shift+u", description: "Cycle presets" }]);

  assert.deepEqual([p["start"]!.statuses, p["start"]!.tools], [{}, START_TOOLS]);
  assert.deepEqual(instructions(p["hi"]!), [null]);
  assert.deepEqual([noteTexts(p["/preset plan"]!), p["/preset plan"]!.statuses, p["/preset plan"]!.tools], [['Preset "plan" activated'], { preset: "preset:plan" }, ["read", "grep", "find", "ls"]]);
  assert.deepEqual([instructions(p["plan it"]!), p["plan it"]!.requests[0]!.tools], [[PLANNING], ["read", "grep", "find", "ls"]]);
  // /tree to before /preset: no preset, and a turn there has no instructions (Pi itself restores that point's tools).
  assert.deepEqual(p["tree to before /preset"]!.statuses, {});
  assert.deepEqual([instructions(p["a turn on the new branch"]!), presetEntries(p["a turn on the new branch"]!)], [[null], 0]);
  assert.deepEqual(p["tree to after /preset"]!.statuses, { preset: "preset:plan" });
  // The selector: the presets (the project's "review"), the active one marked, "(none)"; Enter on "implement".
  const selector = p["the selector"]!.shown[0]!;
  assert.equal(selector[2], " Select Preset");
  assert.deepEqual(selector.slice(4, 9).map((l) => l.slice(2)), SELECTOR);
  assert.equal(selector[12 - 2], " ↑↓ navigate • enter select • esc cancel");
  assert.deepEqual([noteTexts(p["the selector"]!), p["the selector"]!.statuses], [['Preset "implement" activated'], { preset: "preset:implement" }]);
  assert.deepEqual(noteTexts(p["the shortcut"]!), ['Preset "plan" activated'], "(none) → broken → implement → plan → review: after implement, plan");
  assert.deepEqual(p["/preset nope"]!.notes, [{ message: 'Unknown preset "nope". Available: plan, implement, review, broken', type: "error" }]);
  assert.deepEqual(p["/preset broken"]!.notes, [
    { message: 'Preset "broken": Model nowhere/x not found', type: "warning" },
    { message: 'Preset "broken" activated', type: "info" },
  ]);
  assert.deepEqual(noteTexts(p["/preset review"]!), ['Preset "review": Unknown tools: nosuch', 'Preset "review" activated']);
  assert.deepEqual([instructions(p["review it"]!), p["review it"]!.requests[0]!.tools], [[REVIEWING], ["read"]]);
  // "(none)": the tools from before the first preset come back.
  assert.deepEqual([noteTexts(p["(none)"]!), p["(none)"]!.statuses, p["(none)"]!.tools], [["Preset cleared, defaults restored"], {}, START_TOOLS]);
  assert.deepEqual(instructions(p["a plain turn"]!), [null]);
  assert.deepEqual(instructions(p["after compact"]!), [null]);
  assert.match(p["after compact"]!.requests[0]!.messages[0]!, /the summary/);
  assert.deepEqual([p["reload"]!.statuses, instructions(p["a turn after the reload"]!)], [{}, [null]], "a reload keeps the preset cleared");
  assert.deepEqual(p["tree to the review"]!.statuses, { preset: "preset:review" }, "/tree back to the review: its preset");
  assert.deepEqual([p["clone"]!.statuses, instructions(p["a turn in the clone"]!)], [{ preset: "preset:review" }, [REVIEWING]]);
  assert.deepEqual(p["fork before /preset"]!.statuses, {});
  assert.deepEqual(p["/preset implement"]!.statuses, { preset: "preset:implement" });

  const differ = new Set(["tree to before /preset", "a turn on the new branch", "reload", "a turn after the reload"]);
  for (const name of Object.keys(p)) {
    if (differ.has(name)) continue;
    assert.deepEqual(visible(o[name]!), visible(p[name]!), `step "${name}": the original and the port agree`);
  }
  // The original after /tree to before /preset: still active, its instructions still sent, and written into the new branch.
  assert.deepEqual(o["tree to before /preset"]!.statuses, { preset: "preset:plan" });
  assert.deepEqual([instructions(o["a turn on the new branch"]!), presetEntries(o["a turn on the new branch"]!)], [[PLANNING], 1]);
  // Clearing writes nothing: a reload restores the preset cleared before it.
  assert.deepEqual([o["reload"]!.statuses, instructions(o["a turn after the reload"]!)], [{ preset: "preset:review" }, [REVIEWING]]);

  // A resume in a new process, right after "/preset implement" (no turn since): the
  // original has lost it. With --preset, both activate the flag's preset.
  const resume = (dir: string, file: string, extension: string) => [
    ...resumeInNewProcess({ dir, session: file, extension, builtinTools: true, steps: [{ prompt: "resumed" }] }),
    ...resumeInNewProcess({ dir, session: file, extension, builtinTools: true, flags: { preset: "review" }, steps: [{ prompt: "flagged" }] }),
    ...resumeInNewProcess({ dir, session: file, extension, builtinTools: true, flags: { preset: "nope" }, steps: [] }),
  ];
  const pr = resume(dirs.port, ported.file, PORT);
  const or = resume(dirs.orig, orig.file, ORIGINAL);
  assert.deepEqual([pr[0]!.statuses, instructions(pr[1]!)], [{ preset: "preset:implement" }, [IMPLEMENTING]]);
  assert.deepEqual([or[0]!.statuses, instructions(or[1]!)], [{}, [null]], "the original lost the preset chosen after the last turn");
  assert.deepEqual([noteTexts(pr[2]!), pr[2]!.statuses, instructions(pr[3]!)], [['Preset "review": Unknown tools: nosuch', 'Preset "review" activated'], { preset: "preset:review" }, [REVIEWING]]);
  assert.deepEqual(or.slice(2, 4).map(visible), pr.slice(2, 4).map(visible));
  // --preset naming no preset: both warn; the original then leaves out the branch's
  // preset for the whole run (a flag, even an unknown one, skips its restore), the port
  // keeps it (nothing replaced it).
  const unknown = { message: 'Unknown preset "nope". Available: plan, implement, review, broken', type: "warning" };
  assert.deepEqual([pr[4]!.notes, pr[4]!.statuses], [[unknown], { preset: "preset:review" }]);
  assert.deepEqual([or[4]!.notes, or[4]!.statuses], [[unknown], {}]);
});

test("preset: after a resume, the original's \"(none)\" restores only the four built-in tools and a cleared preset comes back; the port restores the tools from before the preset and keeps it cleared", async (t) => {
  const run = async (extension: string) => {
    const dir = presetsDir(t);
    const pi = await startPi({ dir, builtinTools: true, settings: SETTINGS, extensions: [extension] });
    await pi.command("/preset implement");
    await pi.prompt("work");
    const file = pi.file!;
    await pi.shutdown();
    return resumeInNewProcess({
      dir,
      session: file,
      extension,
      builtinTools: true,
      steps: [{ keys: [key.down, key.down, key.down, key.down, key.enter], command: "/preset" }, { prompt: "plain" }],
    }).concat(resumeInNewProcess({ dir, session: file, extension, builtinTools: true, steps: [{ prompt: "later" }] }));
  };
  const p = await run(PORT);
  const o = await run(ORIGINAL);
  assert.deepEqual([p[0]!.statuses, o[0]!.statuses], [{ preset: "preset:implement" }, { preset: "preset:implement" }], "both resume the preset");
  assert.deepEqual([noteTexts(p[1]!), noteTexts(o[1]!)], [["Preset cleared, defaults restored"], ["Preset cleared, defaults restored"]]);
  assert.deepEqual(p[1]!.tools, START_TOOLS, "the port: the tools from before the preset");
  assert.deepEqual(o[1]!.tools, ["read", "bash", "edit", "write"], "the original: the four built-in tools");
  assert.deepEqual([instructions(p[2]!), instructions(o[2]!)], [[null], [null]]);
  // The next resume: the port's preset stays cleared; the original's comes back (clearing wrote nothing).
  assert.deepEqual([p[3]!.statuses, instructions(p[4]!)], [{}, [null]]);
  assert.deepEqual([o[3]!.statuses, instructions(o[4]!)], [{ preset: "preset:implement" }, [IMPLEMENTING]]);
});

test("preset: a resume on a branch that never had the preset (a new process): the original puts its instructions in the system prompt and writes it into that branch; the port does not", async (t) => {
  const run = async (extension: string) => {
    const dir = presetsDir(t);
    const pi = await startPi({ dir, builtinTools: true, settings: SETTINGS, extensions: [extension] });
    await pi.prompt("one");
    const one = pi.leaf!;
    await pi.prompt("two");
    const two = pi.leaf!;
    await pi.navigate(one);
    await pi.command("/preset plan");
    await pi.prompt("plan it");
    const r = await pi.session.navigateTree(two, { summarize: false, label: "no preset here" });
    assert.equal(r.cancelled, false);
    const file = pi.file!;
    await pi.shutdown();
    return resumeInNewProcess({ dir, session: file, extension, builtinTools: true, steps: [{ prompt: "three" }] });
  };
  const p = await run(PORT);
  const o = await run(ORIGINAL);
  assert.deepEqual([p[0]!.statuses, instructions(p[1]!), presetEntries(p[1]!)], [{}, [null], 0]);
  assert.deepEqual([o[0]!.statuses, instructions(o[1]!), presetEntries(o[1]!)], [{ preset: "preset:plan" }, [PLANNING], 1]);
});
