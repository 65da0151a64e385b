// The tic-tac-toe port (`tic-tac-toe.ts`) in Pi's real agent loop, and the same games on
// Pi's own tic-tac-toe.ts (loaded from its installed package). The human plays through the
// game component, driven by keys (`pi.keys`); the model plays through the tools (the faux
// model's scripted calls). They agree at every step but those after a failed `play`: its
// result carries no board, so the original's rebuild throws on /tree, reload, clone and a
// resume, and leaves a stale board; the test asserts that and the port's right answer.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { key, startPi, toolCall, toolCalls, type TestPi } from "@session-state/pi/testing";
import { original, port, resumeInNewProcess, step, surface, transcript, visible, Watcher, type Seen, type StepSpec } from "./ports.ts";

const ORIGINAL = original("tic-tac-toe.ts");
const PORT = port("tic-tac-toe.ts");
const T = "tic_tac_toe";
const SEE = "tic_tac_toe_see_board";
const RULES = "## Tic-Tac-Toe (you are Player O)";

function tmp(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tic-tac-toe-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The model's turn: these actions, as separate calls in one answer. */
const turn = (...actions: string[]) => toolCalls(actions.map((action) => [T, { action }]));

/** `see_board`'s answer in the last request of `s` (what the model was told). */
function board(s: Seen): string | undefined {
  const r = s.requests.at(-1);
  return r?.messages.filter((m) => m.startsWith("toolResult: Board (your cursor")).at(-1)?.slice("toolResult: ".length);
}

const EMPTY_BOARD = `Board (your cursor marked with <>):
<[0,0]>| [0,1] | [0,2] 
---------+---------+---------
 [1,0] | [1,1] | [1,2] 
---------+---------+---------
 [2,0] | [2,1] | [2,2] 

Your cursor: (row=0, col=0)
Status: playing
Turn: Player X`;

const AFTER_FIRST_MOVES = `Board (your cursor marked with <>):
   <O>   | [0,1] | [0,2] 
---------+---------+---------
 [1,0] |    X    | [1,2] 
---------+---------+---------
 [2,0] | [2,1] | [2,2] 

Your cursor: (row=0, col=0)
Status: playing
Turn: Player X`;

const AFTER_THE_BLOCK = `Board (your cursor marked with <>):
   <O>   | [0,1] | [0,2] 
---------+---------+---------
    O    |    X    |    X    
---------+---------+---------
 [2,0] | [2,1] | [2,2] 

Your cursor: (row=0, col=0)
Status: playing
Turn: Player X`;

/**
 * The human opens the game and plays with `keys` (then Escape); the model's replies are
 * queued first. The move's message starts the model's turn while the game is open; the
 * step ends when Pi is idle again.
 */
async function humanMoves(pi: TestPi, keys: string[], ...replies: Parameters<TestPi["reply"]>) {
  const before = pi.errors.length;
  pi.reply(...replies);
  pi.keys(...keys, key.escape);
  await pi.command("/tic-tac-toe");
  // The model's turn the move started may outlast the command.
  await pi.session.waitForIdle();
  assert.deepEqual(pi.errors.slice(before), [], "the model's turn reported no extension error");
}

async function script(extension: string, dir: string) {
  const pi = await startPi({ dir, width: 60, extensions: [extension], settings: { compaction: { keepRecentTokens: 1 } } });
  const w = new Watcher(pi);
  const steps: Record<string, Seen> = {};
  const drawings: Record<string, unknown> = {};
  const at = async (name: string, f: () => Promise<unknown>) => void (steps[name] = await step(w, f));
  const see = (name: string) => at(name, () => pi.prompt("show me the board", toolCall(SEE, {}), "ok"));

  const offered = surface(pi);
  await see("the board before any game");
  // X in the centre (Enter at the human's cursor, the centre); O plays at its cursor (0,0).
  await at("X at (1,1), O at (0,0)", () => humanMoves(pi, [key.enter], turn("play"), "your move"));
  const firstMoves = pi.leaf!;
  // X at (1,2); O's play at (0,0) fails (taken), then it moves down and blocks at (1,0).
  await at("X at (1,2), a failed play, O at (1,0)", () => humanMoves(pi, [key.right, key.enter], turn("play"), turn("move_down", "play"), "blocked"));
  const block = pi.leaf!;
  drawings["after the block"] = transcript(pi);
  await see("the board after the block");
  await at("tree to after the first moves", () => pi.navigate(firstMoves));
  await see("the board there");
  await at("tree to after the block", () => pi.navigate(block));
  await see("the board after the block, again");
  pi.reply("the summary");
  await at("compact", () => pi.compact());
  await at("reload", () => pi.reload());
  await see("the board after the reload");
  const withFailure = pi.file!;
  await at("clone", () => pi.clone());
  await see("the board in the clone");
  await at("fork after the first moves", () => pi.fork(firstMoves));
  await see("the board in the fork");
  // O wins along the top row: X (2,2), O (0,1); X (2,1), O (0,2).
  await at("X at (2,2), O at (0,1)", () => humanMoves(pi, [key.down, key.right, key.enter], turn("move_right", "play"), "your move"));
  await at("X at (2,1), O wins", () => humanMoves(pi, [key.down, key.enter], turn("move_right", "move_right", "play"), "I win"));
  drawings["the won game"] = transcript(pi);
  await see("the board after the game");
  await at("a new game", () => humanMoves(pi, []));
  await see("the new game's board");
  const file = pi.file!;
  // Back to the file with the failed play (/resume of it), and the game opened there: the
  // last step, since a game that never opens leaves its closing key queued.
  await at("resume the file with the failed play", async () => {
    const before = pi.errors.length;
    await pi.runtime.switchSession(withFailure);
    if (pi.errors.length > before) throw new Error(pi.errors.slice(before).join("\n"));
  });
  await at("the game after the block", () => humanMoves(pi, []));
  await pi.shutdown();
  return { steps, drawings, offered, file, withFailure };
}

test("tic-tac-toe: the port and Pi's original through the human's keys and the model's tool calls, /tree, compact, reload, clone, fork and resumes in a new process", async (t) => {
  const dirs = { port: tmp(t), orig: tmp(t) };
  const ported = await script(PORT, dirs.port);
  const orig = await script(ORIGINAL, dirs.orig);
  const p = ported.steps;
  const o = orig.steps;

  assert.deepEqual(ported.offered, orig.offered, "the same command, tools (names, descriptions, parameters, sequential calls)");
  assert.deepEqual(ported.offered.commands, [{ name: "tic-tac-toe", description: "Play tic-tac-toe against the agent" }]);
  assert.deepEqual(board(p["the board before any game"]!), EMPTY_BOARD);

  // The human's move: what the game shows, what the model is sent, and its answer.
  const first = p["X at (1,1), O at (0,0)"]!;
  const frames = first.shown[0]!;
  assert.equal(frames[0], "─".repeat(23) + " Tic-Tac-Toe " + "─".repeat(24));
  assert.ok(frames.includes("                Turn: X (You)  |  O (Agent)"));
  assert.ok(frames.includes("                 │       │   ╳   │       │"), "X drawn in the centre cell");
  assert.ok(first.requests[0]!.systemPrompt.includes(RULES), "the rules, while the game is open");
  assert.equal(
    first.requests[0]!.messages.at(-1),
    "user: Player X played at (row=1, col=1). It is now Player O's turn.\n\nBoard (your cursor marked with <>):\n<[0,0]>| [0,1] | [0,2] \n---------+---------+---------\n [1,0] |    X    | [1,2] \n---------+---------+---------\n [2,0] | [2,1] | [2,2] \n\nYour cursor is at (row=0, col=0). Decide your target cell, then emit every move_* and the final play as separate tic_tac_toe tool calls in THIS response.",
  );
  assert.equal(first.requests[1]!.messages.at(-1), "toolResult: Placed O at (0,0). Cursor reset to (0,0). Your turn, X!");
  assert.deepEqual(first.messages.filter((m) => m.startsWith("tic-tac-toe")), ["tic-tac-toe-move"]);
  const block = p["X at (1,2), a failed play, O at (1,0)"]!;
  assert.deepEqual(
    block.requests.slice(1).map((r) => r.messages.at(-1)),
    [
      "toolResult: Cell (0,0) is already O. Your cursor is still at (0,0). Move to an empty cell and retry play.",
      "toolResult: Placed O at (1,0). Cursor reset to (0,0). Your turn, X!",
    ],
  );
  assert.equal(block.requests[2]!.messages.at(-2), "toolResult: Moved down. Cursor: (1, 0)");
  assert.equal(board(p["the board after the block"]!), AFTER_THE_BLOCK);
  // /tree to after the first moves and back, compact, reload, clone: the board of each point.
  assert.equal(board(p["the board there"]!), AFTER_FIRST_MOVES);
  assert.equal(p["tree to after the block"]!.error, undefined);
  assert.equal(board(p["the board after the block, again"]!), AFTER_THE_BLOCK);
  assert.equal(board(p["the board after the reload"]!), AFTER_THE_BLOCK);
  assert.equal(board(p["the board in the clone"]!), AFTER_THE_BLOCK);
  assert.equal(board(p["the board in the fork"]!), AFTER_FIRST_MOVES);
  // O wins: the tool says so and a game-over message follows; /tic-tac-toe then opens a new game.
  const won = p["X at (2,1), O wins"]!;
  // The game-over message reaches the model in the same run (steered in after the tool's result).
  assert.deepEqual(won.requests.at(-1)!.messages.slice(-2), ["toolResult: Placed O at (0,2). Player O wins!", "user: Game over: Player O (agent) wins."]);
  assert.ok(won.messages.includes("tic-tac-toe-game-over"));
  assert.match(board(p["the board after the game"]!)!, /Status: win_O\nTurn: Player O \(you\)$/);
  assert.equal(board(p["the new game's board"]!), EMPTY_BOARD);
  assert.equal(p["resume the file with the failed play"]!.error, undefined);
  assert.ok(p["the game after the block"]!.shown[0]!.includes("                 │   ◯   │   ╳   │   ╳   │"), "the human sees the block");

  // The original: the same wherever no failed play lies on the branch it rebuilds from.
  const differ = new Set([
    "tree to after the block",
    "the board after the block, again",
    "resume the file with the failed play",
    "the game after the block",
    "compact",
    "reload",
    "the board after the reload",
    "clone",
    "the board in the clone",
  ]);
  for (const name of Object.keys(p)) {
    if (differ.has(name)) continue;
    assert.deepEqual(visible(o[name]!), visible(p[name]!), `step "${name}": the original and the port agree`);
  }
  // After the failed play: the rebuild throws on /tree, reload and clone, and the board
  // it leaves stops before the failed result (the human's X at (1,2) and O's block lost).
  const threw = /an extension reported an error:\n.*tic-tac-toe\.ts \(session_(tree|start)\): Cannot read properties of undefined \(reading 'map'\)/;
  assert.match(o["tree to after the block"]!.error!, threw);
  assert.equal(board(o["the board after the block, again"]!), AFTER_FIRST_MOVES);
  assert.match(o["resume the file with the failed play"]!.error!, /tic-tac-toe\.ts \(session_start\): Cannot read properties of undefined \(reading 'map'\)/);
  assert.match(o["the game after the block"]!.error!, /Cannot read properties of undefined \(reading 'map'\)/, "/tic-tac-toe rebuilds too, and throws");
  assert.match(o["reload"]!.error!, threw);
  assert.equal(board(o["the board after the reload"]!), AFTER_FIRST_MOVES);
  assert.match(o["clone"]!.error!, threw);
  assert.equal(board(o["the board in the clone"]!), AFTER_FIRST_MOVES);
  // Compacting rebuilds nothing: it works in both (what it summarizes differs by the stale board the original showed).
  assert.deepEqual([o["compact"]!.error, p["compact"]!.error], [undefined, undefined]);

  // The transcript: banners, the tools' rows and the final board, drawn the same; the
  // original's expanded row of the failed play throws (its result has no board).
  const failed = (d: unknown) => (d as Array<{ what: string; expanded: unknown }>).find((x) => x.what === `${T} (error)`)!.expanded;
  assert.deepEqual(failed(ported.drawings["after the block"]), [" ✗ Cell (0,0) is already O. Your cursor is still at (0,0). Move to an empty cell and retry play."]);
  assert.deepEqual(failed(orig.drawings["after the block"]), { error: "TypeError: Cannot read properties of undefined (reading '0')" });
  const withoutFailed = (d: unknown) => (d as Array<{ what: string }>).filter((x) => x.what !== `${T} (error)`);
  assert.deepEqual(withoutFailed(orig.drawings["after the block"]), withoutFailed(ported.drawings["after the block"]));
  assert.deepEqual(orig.drawings["the won game"], ported.drawings["the won game"]);
  const gameOver = (ported.drawings["the won game"] as Array<{ what: string; collapsed: string[] }>).find((x) => x.what === "tic-tac-toe-game-over")!;
  assert.deepEqual(gameOver.collapsed.slice(0, 8), [
    "─".repeat(60),
    "",
    "                     ★ Player O wins ★",
    "                    The agent beat you.",
    "",
    "                 ┌───────┬───────┬───────┐",
    "                 │       │       │       │",
    "                 │   ◯   │   ◯   │   ◯   │",
  ]);

  // Resumes in a new process. The fork's file has no failed play on its branch: both read
  // the new game, and both refuse the model's play out of turn (a failed play). Resumed
  // again, that failed play fails the original's start; the port reads the board. So does
  // the file with the first failed play.
  const resume = (dir: string, file: string, extension: string, steps: StepSpec[]) => resumeInNewProcess({ dir, session: file, extension, steps });
  const seeBoard: StepSpec = { prompt: "board?", replies: [{ call: SEE, args: {} }, "ok"] };
  const outOfTurn: StepSpec = { prompt: "play", replies: [{ calls: [[T, { action: "play" }]] }, "sorry"] };
  const pr = resume(dirs.port, ported.file, PORT, [seeBoard, outOfTurn]);
  const or = resume(dirs.orig, orig.file, ORIGINAL, [seeBoard, outOfTurn]);
  assert.equal(board(pr[1]!), EMPTY_BOARD);
  assert.equal(pr[2]!.requests.at(-1)!.messages.at(-1), "toolResult: It is not your turn.");
  assert.deepEqual(or.map(visible), pr.map(visible));
  const again = { port: resume(dirs.port, ported.file, PORT, [seeBoard]), orig: resume(dirs.orig, orig.file, ORIGINAL, [seeBoard]) };
  assert.equal(board(again.port[1]!), EMPTY_BOARD);
  assert.match(again.orig[0]!.error!, /tic-tac-toe\.ts \(session_start\): Cannot read properties of undefined \(reading 'map'\)/);
  const firstFailure = { port: resume(dirs.port, ported.withFailure, PORT, [seeBoard]), orig: resume(dirs.orig, orig.withFailure, ORIGINAL, [seeBoard]) };
  assert.equal(board(firstFailure.port[1]!), AFTER_THE_BLOCK);
  assert.match(firstFailure.orig[0]!.error!, /tic-tac-toe\.ts \(session_start\): Cannot read properties of undefined \(reading 'map'\)/);
});

test("tic-tac-toe: outside the TUI /tic-tac-toe refuses, as the original does", async () => {
  for (const extension of [PORT, ORIGINAL]) {
    const pi = await startPi({ mode: "rpc", extensions: [extension] });
    await pi.command("/tic-tac-toe");
    assert.deepEqual(pi.notes, [{ message: "Tic-tac-toe requires interactive mode", type: "error" }], extension);
    await pi.shutdown();
  }
});

test("tic-tac-toe: a resume (a new process) after the human's move, before the model played: the original has lost the move, the port has it", async (t) => {
  const run = async (extension: string) => {
    const dir = tmp(t);
    const pi = await startPi({ dir, width: 60, extensions: [extension] });
    await humanMoves(pi, [key.up, key.enter], "Let me think about it.");
    const file = pi.file!;
    await pi.shutdown();
    return resumeInNewProcess({ dir, session: file, extension, width: 60, steps: [{ prompt: "board?", replies: [{ call: SEE, args: {} }, "ok"] }, { keys: [key.escape], command: "/tic-tac-toe" }] });
  };
  const p = await run(PORT);
  const o = await run(ORIGINAL);
  const xOnTop = `Board (your cursor marked with <>):
<[0,0]>|    X    | [0,2] 
---------+---------+---------
 [1,0] | [1,1] | [1,2] 
---------+---------+---------
 [2,0] | [2,1] | [2,2] 

Your cursor: (row=0, col=0)
Status: playing
Turn: Player O (you)`;
  assert.equal(board(p[1]!), xOnTop);
  assert.ok(p[2]!.shown[0]!.includes("                 │       │   ╳   │       │"), "the game shows the X");
  assert.ok(p[2]!.shown[0]!.some((l) => l.includes("Agent is thinking...")), "and waits for the model");
  assert.equal(board(o[1]!), EMPTY_BOARD);
  assert.ok(o[2]!.shown[0]!.some((l) => l.includes("ENTER play")), "the original asks the human to play again");
});
