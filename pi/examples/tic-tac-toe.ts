/**
 * Tic-tac-toe against the model, on `@session-state/pi`: a port of Pi's example
 * `examples/extensions/tic-tac-toe.ts` with the same command, tools, parameters, messages
 * and system prompt.
 *
 *   pi -e ./pi -e ./pi/examples/tic-tac-toe.ts          # then /tic-tac-toe
 *
 * The human is X and plays in the terminal (`/tic-tac-toe`: arrows, Enter, Escape); the
 * model is O and plays through the `tic_tac_toe` tool, one action per call (`move_up`,
 * `move_down`, `move_left`, `move_right`, `play`), all of a turn's calls in one answer.
 * The tool runs its calls one after another (`executionMode: "sequential"`), each move
 * taking 300 ms as in the original, so a `play` never overtakes the moves before it.
 * `tic_tac_toe_see_board` restates the board and the model's cursor. While the game is
 * open, each prompt's system prompt carries the rules; after the human's move the model
 * gets a `tic-tac-toe-move` message with the board, and a finished game a
 * `tic-tac-toe-game-over` message.
 *
 * State (`openSessionState`, plugin `tic-tac-toe`): the game, **branch** scope, `{ board,
 * agentCursorRow, agentCursorCol, status, currentTurn }` (what tool results carry as
 * `details`, and the model sees as text). A game is part of the conversation it was played
 * in: `/tree` back to before a move shows the board without it, a sibling branch plays its
 * own game, a fork or clone carries the board of the path it copies, a resume opens on the
 * branch's board. The tools and the human's move read and write it at Pi's leaf, so a
 * failed `play` (a taken cell) changes nothing and writes nothing. Where the branch has no
 * game, it is a new one (X to play); `/tic-tac-toe` on a finished game writes a new one.
 * The terminal's alone, in memory: the human's cursor (from the centre at each
 * `/tic-tac-toe`, never shown to the model) and whether the game is open (which decides
 * whether the system prompt carries the rules).
 *
 * Differences from the original, each shown by `tic-tac-toe.test.ts`: the original rebuilds
 * its game from the `details` of the tools' results on the branch (at session start, on
 * `/tree` and at `/tic-tac-toe`). A failed `play` leaves a result without a board (Pi
 * gives a thrown error `details: {}`), so from then on that rebuild throws (on `/tree`,
 * reload, `/fork`, `/clone`, resume and `/tic-tac-toe`) and leaves the game as it was
 * before that result (the later moves of both players lost); the expanded view of that
 * result throws too. And the human's move is saved in entries the rebuild never reads, so
 * a resume before the model has played loses it.
 *
 * TUI-only behaviour: the human's move is driven by keys in the `ctx.ui.custom` component
 * (`/tic-tac-toe` refuses to run outside the TUI, as the original does); the board, the
 * banners and the tool rows are drawn with the same characters and colours. Nothing
 * animates.
 */
import { StringEnum } from "@earendil-works/pi-ai";
import type { ExtensionAPI, ExtensionContext, Theme, ToolExecutionMode } from "@earendil-works/pi-coding-agent";
import { matchesKey, Text, truncateToWidth, visibleWidth, type Component } from "@earendil-works/pi-tui";
import { Type } from "typebox";
import { openSessionState } from "@session-state/pi";

const SAVE = "tic-tac-toe";
const MOVE_MESSAGE = "tic-tac-toe-move";
const GAME_OVER_MESSAGE = "tic-tac-toe-game-over";
/** Where the model's cursor goes back to after each of its plays. */
const HOME = { row: 0, col: 0 };
/** How long a cursor move takes (the original's pace, which shows why the calls run one at a time). */
const MOVE_MS = 300;

type Action = "move_up" | "move_down" | "move_left" | "move_right" | "play";

/** A tool error the model sees (Pi turns a thrown error into an error result). */
class TicTacToeError extends Error {
  override name = "TicTacToeError";
}

function newGame(): Game {
  return {
    board: [0, 1, 2].map(() => [" ", " ", " "] as Cell[]),
    agentCursorRow: HOME.row,
    agentCursorCol: HOME.col,
    status: "playing",
    currentTurn: "X",
  };
}

function copy(g: Game): Game {
  return { ...g, board: g.board.map((r) => [...r]) };
}

const RULES = `

## Tic-Tac-Toe (you are Player O)

A tic-tac-toe game is in progress. The human is Player X. You are Player O.
The human plays through a TUI; you play through the \`tic_tac_toe\` tool.

### Turn protocol

When the human plays, you receive a message that contains the cell X marked,
the full board, and YOUR cursor position (Player O's cursor). The message is
the source of truth for the board.

Player O's cursor persists between O turns. It is reset to (row=${HOME.row}, col=${HOME.col})
only after a successful \`play\`. If a \`play\` fails (cell already taken), the
cursor stays where it was, so you can move and retry.

You may also call \`tic_tac_toe_see_board\` if you want the current board and
your cursor position restated at any point. The user's cursor is private and
is never shown to you.

### The tool

\`tic_tac_toe\` takes ONE action per call:
- \`move_up\` / \`move_down\` / \`move_left\` / \`move_right\`: move YOUR cursor one cell (clamped at edges)
- \`play\`: place O on the cell under YOUR cursor. Errors if the cell is not empty.

There is no batched form. One call = one action.

### CRITICAL: emit the whole turn in a single response

To play at (r, c) from your cursor (r0, c0) emit, in order:
- \`move_down\` (r - r0) times (or \`move_up\` (r0 - r) times if r < r0)
- \`move_right\` (c - c0) times (or \`move_left\` (c0 - c) times if c < c0)
- one call of \`play\`

All of these tool calls MUST be emitted in the SAME assistant response, as
separate tool_use blocks, before you stop. Do not:
- split the sequence across multiple assistant responses,
- wait for a move result before emitting the next move or \`play\`,
- write any explanation or text between the tool calls,
- call any other tool during your turn (except \`tic_tac_toe_see_board\` when you
  explicitly need the state restated).

Decide the target cell first, then dump every action for the turn in one go.

### Examples (cursor starts at (${HOME.row}, ${HOME.col}))

- Target (0,0): one call, \`play\`.
- Target (0,2): \`move_right\`, \`move_right\`, \`play\`. Three calls, one response.
- Target (1,1): \`move_down\`, \`move_right\`, \`play\`. Three calls, one response.
- Target (2,2): \`move_down\`, \`move_down\`, \`move_right\`, \`move_right\`, \`play\`. Five calls, one response.

### Strategy

1. If you have two O's in a line with the third cell empty, win by playing there.
2. Otherwise, if X has two in a line with the third cell empty, block there.
3. Otherwise, prefer center, then corners, then edges.
`;

/** The open game in the terminal: the stored game plus the human's cursor. */
class GameView implements Component {
  private view: View;
  private cache: { width: number; lines: string[] } | undefined;
  private readonly tui: { requestRender(): void };
  private readonly close: () => void;
  private readonly play: (row: number, col: number) => void;
  constructor(game: Game, tui: { requestRender(): void }, close: () => void, play: (row: number, col: number) => void) {
    this.view = { game, userRow: 1, userCol: 1 };
    this.tui = tui;
    this.close = close;
    this.play = play;
  }
  show(game: Game): void {
    this.view = { ...this.view, game };
    this.redraw();
  }
  private redraw(): void {
    this.cache = undefined;
    this.tui.requestRender();
  }
  handleInput(data: string): boolean {
    const { game } = this.view;
    if (matchesKey(data, "escape") || data.toLowerCase() === "q") {
      this.close();
      return true;
    }
    if (game.status !== "playing") {
      if (data.toLowerCase() === "r") this.close();
      return true;
    }
    if (game.currentTurn !== "X") return true;
    const steps: Array<[key: "up" | "down" | "left" | "right", dr: number, dc: number]> = [
      ["up", -1, 0],
      ["down", 1, 0],
      ["left", 0, -1],
      ["right", 0, 1],
    ];
    for (const [key, dr, dc] of steps) {
      if (!matchesKey(data, key)) continue;
      const row = this.view.userRow + dr;
      const col = this.view.userCol + dc;
      if (row >= 0 && row <= 2 && col >= 0 && col <= 2) {
        this.view = { ...this.view, userRow: row, userCol: col };
        this.redraw();
      }
      return true;
    }
    if (matchesKey(data, "return") || data === " ") {
      const { userRow, userCol } = this.view;
      if (game.board[userRow]![userCol] === " ") this.play(userRow, userCol);
    }
    return true;
  }
  invalidate(): void {
    this.cache = undefined;
  }
  render(width: number): string[] {
    if (this.cache?.width !== width) this.cache = { width, lines: drawGame(this.view, width) };
    return this.cache.lines;
  }
}

export default function ticTacToe(pi: ExtensionAPI): void {
  const saved = openSessionState<Game>(pi, { pluginId: SAVE, scope: "branch" });
  /** The branch's game at Pi's leaf (a new one where there is none). */
  const gameAt = (ctx: ExtensionContext): Game => saved.read(ctx) ?? newGame();

  /** The open game (the terminal's), if any. */
  let open: GameView | undefined;
  /** Whether the system prompt carries the rules: from `/tic-tac-toe` to the game's end or close. */
  let inGame = false;

  const gameOver = (g: Game): void => {
    const label =
      g.status === "win_X" ? "Player X (human) wins" : g.status === "win_O" ? "Player O (agent) wins" : g.status === "draw" ? "Draw" : "Game over";
    pi.sendMessage({ customType: GAME_OVER_MESSAGE, content: `Game over: ${label}.`, display: true, details: copy(g) });
    inGame = false;
  };

  pi.registerMessageRenderer<Game>(MOVE_MESSAGE, (message, { expanded }, theme) => {
    const next =
      message.details?.currentTurn === "O"
        ? `${theme.fg("warning", theme.bold("O"))} (Agent)`
        : `${theme.fg("accent", theme.bold("X"))} (You)`;
    return new Banner(`${theme.fg("accent", theme.bold("Player X played"))}  ${theme.fg("dim", "\u2192")}  next: ${next}`, message.details, expanded, theme);
  });

  pi.registerMessageRenderer<Game>(GAME_OVER_MESSAGE, (message, _options, theme) => new GameOver(message.details?.status, message.details, theme));

  pi.on("before_agent_start", async (event) => {
    if (inGame) return { systemPrompt: event.systemPrompt + RULES };
  });

  pi.registerCommand("tic-tac-toe", {
    description: "Play tic-tac-toe against the agent",
    handler: async (_args, ctx) => {
      if (ctx.mode !== "tui") {
        ctx.ui.notify("Tic-tac-toe requires interactive mode", "error");
        return;
      }
      let game = gameAt(ctx);
      if (game.status !== "playing") {
        game = newGame();
        saved.write(ctx, game);
      }
      inGame = true;
      pi.setSessionName("Tic-Tac-Toe");
      await ctx.ui.custom<void>((tui, _theme, _keybindings, done) => {
        const humanPlays = (row: number, col: number) => {
          const g = copy(gameAt(ctx));
          g.board[row]![col] = "X";
          g.status = statusOf(g.board);
          if (g.status === "playing") g.currentTurn = "O";
          open?.show(g);
          saved.write(ctx, g);
          if (g.status !== "playing") {
            gameOver(g);
            return;
          }
          pi.sendMessage(
            {
              customType: MOVE_MESSAGE,
              content:
                `Player X played at (row=${row}, col=${col}). It is now Player O's turn.\n\n` +
                `Board (your cursor marked with <>):\n${asciiBoard(g.board, g.agentCursorRow, g.agentCursorCol)}\n\n` +
                `Your cursor is at (row=${g.agentCursorRow}, col=${g.agentCursorCol}). ` +
                `Decide your target cell, then emit every move_* and the final play ` +
                `as separate tic_tac_toe tool calls in THIS response.`,
              display: true,
              details: copy(g),
            },
            { triggerTurn: true },
          );
        };
        open = new GameView(
          game,
          tui,
          () => {
            open = undefined;
            inGame = false;
            done(undefined);
          },
          humanPlays,
        );
        return open;
      });
    },
  });

  pi.registerTool({
    name: "tic_tac_toe",
    label: "Tic-Tac-Toe",
    description:
      "Execute ONE tic-tac-toe action as Player O. `action` is exactly one of: move_up, move_down, move_left, move_right (move YOUR cursor one cell, clamped at edges), or play (place O under YOUR cursor; errors if the cell is not empty). There is no batched form. To play at (r, c) from your current cursor (r0, c0), emit the required move_down/move_up and move_right/move_left calls, then play, all as separate tool_use blocks in the SAME assistant response. Do not split the sequence across responses and do not wait for a result before emitting the next call. Your cursor position persists between turns and is reset to (0,0) only after a successful play.",
    promptSnippet: "Play a tic-tac-toe action (move_up/down/left/right or play) as Player O",
    promptGuidelines: [
      "When it is your tic-tac-toe turn, decide the target cell first, then emit every move_* plus the final play as separate tic_tac_toe tool calls in a SINGLE assistant response. Never split them across responses or wait for intermediate results.",
      "Never ask the user for the board. The board and your cursor position are included in the user's move message; use tic_tac_toe_see_board if you need them restated.",
    ],
    parameters: Type.Object({
      action: StringEnum(["move_up", "move_down", "move_left", "move_right", "play"] as const, {
        description: "The single action to perform this call. Emit multiple tic_tac_toe calls in one response to string actions together.",
      }),
    }),
    executionMode: "sequential" as ToolExecutionMode,

    async execute(_id, params, _signal, _onUpdate, ctx) {
      const action = params.action as Action;
      if (action !== "play") await new Promise((resolve) => setTimeout(resolve, MOVE_MS));
      const g = copy(gameAt(ctx));
      let text: string;
      if (action === "play") {
        if (g.status !== "playing") throw new TicTacToeError(`Game is over (${g.status}).`);
        if (g.currentTurn !== "O") throw new TicTacToeError("It is not your turn.");
        const [r, c] = [g.agentCursorRow, g.agentCursorCol];
        const there = g.board[r]![c]!;
        if (there !== " ") {
          // The cursor stays, so the model can move from here and retry; nothing changed.
          throw new TicTacToeError(`Cell (${r},${c}) is already ${there}. Your cursor is still at (${r},${c}). Move to an empty cell and retry play.`);
        }
        g.board[r]![c] = "O";
        g.status = statusOf(g.board);
        g.agentCursorRow = HOME.row;
        g.agentCursorCol = HOME.col;
        if (g.status === "playing") {
          g.currentTurn = "X";
          text = `Placed O at (${r},${c}). Cursor reset to (${HOME.row},${HOME.col}). Your turn, X!`;
        } else {
          text = g.status === "win_O" ? `Placed O at (${r},${c}). Player O wins!` : g.status === "draw" ? `Placed O at (${r},${c}). It's a draw!` : `Placed O at (${r},${c}).`;
          if (g.status === "win_O" || g.status === "draw") gameOver(g);
        }
      } else {
        const [dr, dc, word] = { move_up: [-1, 0, "up"], move_down: [1, 0, "down"], move_left: [0, -1, "left"], move_right: [0, 1, "right"] }[action] as [number, number, string];
        g.agentCursorRow = Math.min(2, Math.max(0, g.agentCursorRow + dr));
        g.agentCursorCol = Math.min(2, Math.max(0, g.agentCursorCol + dc));
        text = `Moved ${word}. Cursor: (${g.agentCursorRow}, ${g.agentCursorCol})`;
      }
      saved.write(ctx, g);
      open?.show(g);
      return { content: [{ type: "text", text }], details: copy(g) };
    },

    renderCall(args, theme) {
      const action = typeof args.action === "string" ? args.action : "";
      return new Text(theme.fg("toolTitle", theme.bold("tic_tac_toe ")) + theme.fg("muted", action), 0, 0);
    },

    renderResult(result, { expanded }, theme, context) {
      const first = result.content[0];
      const summary =
        (context?.isError ? theme.fg("error", "\u2717 ") : theme.fg("success", "\u2713 ")) + theme.fg("muted", first?.type === "text" ? first.text : "");
      const details = result.details as Partial<Game> | undefined;
      return expanded && details ? new Banner(summary, details, true, theme) : new Text(summary, 0, 0);
    },
  });

  pi.registerTool({
    name: "tic_tac_toe_see_board",
    label: "See Board",
    description:
      "Return the current tic-tac-toe board state and YOUR cursor position (Player O). Takes no arguments. Use this if you need the current state restated mid-turn (for example after a failed play). The user's cursor is never exposed.",
    promptSnippet: "Inspect the tic-tac-toe board and your cursor",
    parameters: Type.Object({}),

    async execute(_id, _params, _signal, _onUpdate, ctx) {
      const g = gameAt(ctx);
      const text =
        `Board (your cursor marked with <>):\n${asciiBoard(g.board, g.agentCursorRow, g.agentCursorCol)}\n\n` +
        `Your cursor: (row=${g.agentCursorRow}, col=${g.agentCursorCol})\n` +
        `Status: ${g.status}\n` +
        `Turn: ${g.currentTurn === "O" ? "Player O (you)" : "Player X"}`;
      return { content: [{ type: "text", text }], details: copy(g) };
    },

    renderCall(_args, theme) {
      return new Text(theme.fg("toolTitle", theme.bold("tic_tac_toe_see_board")), 0, 0);
    },

    renderResult(result, { expanded }, theme) {
      const details = result.details as Partial<Game> | undefined;
      const summary = theme.fg("success", "\u2713 ") + theme.fg("muted", `cursor (${details?.agentCursorRow ?? 0},${details?.agentCursorCol ?? 0})`);
      return expanded && details ? new Banner(summary, details, true, theme) : new Text(summary, 0, 0);
    },
  });

  // A new session, resume or fork starts with the game closed.
  pi.on("session_start", async () => {
    open = undefined;
    inGame = false;
  });
}

// ---------------------------------------------------------------------------------------
// Drawing
// ---------------------------------------------------------------------------------------
type Cell = " " | "X" | "O";
type GameStatus = "playing" | "win_X" | "win_O" | "draw";

/** A game as stored and as tool results' `details` carry it: no user cursor (the model never sees it). */
interface Game {
  board: Cell[][];
  agentCursorRow: number;
  agentCursorCol: number;
  status: GameStatus;
  currentTurn: Cell;
}

/** The eight lines of three. */
const LINES: Array<Array<[number, number]>> = [
  ...[0, 1, 2].map((r) => [0, 1, 2].map((c): [number, number] => [r, c])),
  ...[0, 1, 2].map((c) => [0, 1, 2].map((r): [number, number] => [r, c])),
  [[0, 0], [1, 1], [2, 2]],
  [[0, 2], [1, 1], [2, 0]],
];

/** The first line a player holds, if any. */
function winningLine(board: Cell[][]): Array<[number, number]> | undefined {
  return LINES.find((line) => {
    const [a, b, c] = line.map(([r, k]) => board[r]![k]!);
    return a !== " " && a === b && b === c;
  });
}

function statusOf(board: Cell[][]): GameStatus {
  const line = winningLine(board);
  if (line) return board[line[0]![0]]![line[0]![1]] === "X" ? "win_X" : "win_O";
  return board.every((row) => row.every((c) => c !== " ")) ? "draw" : "playing";
}

/** The board for the model: coordinates in empty cells, the agent's cursor in angle brackets. */
function asciiBoard(board: Cell[][], row: number, col: number): string {
  return board
    .map((cells, r) =>
      cells
        .map((mark, c) => {
          const here = r === row && c === col;
          if (mark === " ") return here ? `<[${r},${c}]>` : ` [${r},${c}] `;
          return here ? `   <${mark}>   ` : `    ${mark}    `;
        })
        .join("|"),
    )
    .join("\n---------+---------+---------\n");
}

// ---------------------------------------------------------------------------------------
// The board in the terminal
// ---------------------------------------------------------------------------------------

const CELL_W = 7;
const CELL_H = 3;
const SGR = (code: string, s: string) => `\x1b[${code}m${s}\x1b[0m`;
const dimmed = (s: string) => `\x1b[2m${s}\x1b[22m`;
const GLYPH: Record<"X" | "O", string> = { X: "\u2573", O: "\u25ef" };
/** Bright foreground codes: X blue, O yellow, the winning line green. */
const COLOUR = { X: "34", O: "33", win: "32" };

function centred(line: string, width: number): string {
  const w = visibleWidth(line);
  if (w >= width) return truncateToWidth(line, width);
  const left = Math.floor((width - w) / 2);
  return " ".repeat(left) + line + " ".repeat(width - w - left);
}

interface Cursor {
  row: number;
  col: number;
  owner: "user" | "agent";
}

/**
 * The board as lines `width` wide (centred). A border takes the colour of the marks beside
 * it when they agree (dim otherwise); the cursor's cell is outlined, green for the user,
 * yellow for the agent.
 */
function drawBoard(board: Cell[][], width: number, cursor?: Cursor): string[] {
  const win = new Set((winningLine(board) ?? []).map(([r, c]) => r * 3 + c));
  const colourAt = (r: number, c: number): string | undefined => {
    if (r < 0 || r > 2 || c < 0 || c > 2) return undefined;
    const mark = board[r]![c]!;
    if (mark === " ") return undefined;
    return win.has(r * 3 + c) ? COLOUR.win : COLOUR[mark];
  };
  const inRange = (r: number, c: number) => r >= 0 && r <= 2 && c >= 0 && c <= 2;
  /** The colour shared by the marked cells among `cells` (undefined when none, or when they differ). */
  const shared = (cells: Array<[number, number]>): string | undefined => {
    const colours = cells.filter(([r, c]) => inRange(r, c)).map(([r, c]) => colourAt(r, c)).filter((x): x is string => x !== undefined);
    return colours.length > 0 && colours.every((x) => x === colours[0]) ? colours[0] : undefined;
  };
  const cursorCode = cursor?.owner === "agent" ? "33;1" : "32;1";
  const near = (lo: number, v: number) => cursor !== undefined && (v === lo || v === lo + 1);
  const paint = (s: string, outlined: boolean, colour: string | undefined) =>
    outlined ? SGR(cursorCode, s) : colour ? SGR(`${colour};1`, s) : dimmed(s);
  const corner = (gr: number, gc: number) => {
    const top = gr === 0, bottom = gr === 3, left = gc === 0, right = gc === 3;
    if (top) return left ? "\u250c" : right ? "\u2510" : "\u252c";
    if (bottom) return left ? "\u2514" : right ? "\u2518" : "\u2534";
    return left ? "\u251c" : right ? "\u2524" : "\u253c";
  };

  const out: string[] = [];
  for (let gr = 0; gr <= 3; gr++) {
    let rule = "";
    for (let gc = 0; gc <= 3; gc++) {
      const around: Array<[number, number]> = [[gr - 1, gc - 1], [gr - 1, gc], [gr, gc - 1], [gr, gc]];
      rule += paint(corner(gr, gc), near(cursor?.row ?? -9, gr) && near(cursor?.col ?? -9, gc), shared(around));
      if (gc < 3) rule += paint("\u2500".repeat(CELL_W), near(cursor?.row ?? -9, gr) && cursor?.col === gc, shared([[gr - 1, gc], [gr, gc]]));
    }
    out.push(centred(rule, width));
    if (gr === 3) break;
    for (let line = 0; line < CELL_H; line++) {
      let row = "";
      for (let gc = 0; gc <= 3; gc++) {
        row += paint("\u2502", cursor?.row === gr && near(cursor?.col ?? -9, gc), shared([[gr, gc - 1], [gr, gc]]));
        if (gc === 3) break;
        const mark = board[gr]![gc]!;
        if (mark === " " || line !== Math.floor(CELL_H / 2)) {
          row += " ".repeat(CELL_W);
        } else {
          const pad = CELL_W - visibleWidth(GLYPH[mark]);
          row += " ".repeat(Math.floor(pad / 2)) + SGR(`${colourAt(gr, gc)};1`, GLYPH[mark]) + " ".repeat(pad - Math.floor(pad / 2));
        }
      }
      out.push(centred(row, width));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// The game component and the transcript's banners
// ---------------------------------------------------------------------------------------

/** What the open game shows: the stored game and the user's cursor (the terminal's alone). */
interface View {
  game: Game;
  userRow: number;
  userCol: number;
}

/** The game as `/tic-tac-toe` draws it: title, whose turn, the board with the cursor of the player to move, the keys. */
function drawGame(v: View, width: number): string[] {
  const bold = (s: string) => SGR("1", s);
  const dim = (s: string) => SGR("2", s);
  const blue = (s: string) => SGR("34", s);
  const yellow = (s: string) => SGR("33", s);
  const green = (s: string) => SGR("32", s);
  const { game } = v;
  const title = " Tic-Tac-Toe ";
  const fill = Math.max(0, width - visibleWidth(title));
  const out = [dim("\u2500".repeat(Math.floor(fill / 2))) + bold(blue(title)) + dim("\u2500".repeat(fill - Math.floor(fill / 2))), ""];
  const users = game.currentTurn === "X";
  if (game.status === "draw") out.push(centred(bold(yellow("Draw!")), width));
  else if (game.status === "win_X") out.push(centred(bold(green("X wins!")), width));
  else if (game.status === "win_O") out.push(centred(bold(yellow("O wins!")), width));
  else if (users) out.push(centred(`Turn: ${bold(blue("X"))} (You)  ${dim("|")}  ${bold(yellow("O"))} (Agent)`, width));
  else out.push(centred(`${blue("X")} (You)  ${dim("|")}  Turn: ${bold(yellow("O"))} (Agent)`, width));
  out.push("", "");
  const cursor: Cursor | undefined =
    game.status !== "playing"
      ? undefined
      : users
        ? { row: v.userRow, col: v.userCol, owner: "user" }
        : { row: game.agentCursorRow, col: game.agentCursorCol, owner: "agent" };
  out.push(...drawBoard(game.board, width, cursor), "", "");
  const keys =
    game.status !== "playing"
      ? `${bold("R")} restart  ${dim("|")}  ${bold("Q")}/${bold("ESC")} quit`
      : !users
        ? dim("Agent is thinking...")
        : `${bold("\u2190\u2191\u2193\u2192")} move  ${dim("|")}  ${bold("ENTER")} play  ${dim("|")}  ${bold("ESC")} quit`;
  out.push(centred(keys, width), "", dim("\u2500".repeat(width)));
  return out;
}

/** A one-line banner (`title` centred between dim rules), with the board under it when expanded. */
class Banner implements Component {
  private readonly title: string;
  private readonly game: Partial<Game> | undefined;
  private readonly expanded: boolean;
  private readonly theme: Theme;
  constructor(title: string, game: Partial<Game> | undefined, expanded: boolean, theme: Theme) {
    this.title = title;
    this.game = game;
    this.expanded = expanded;
    this.theme = theme;
  }
  invalidate(): void {}
  render(width: number): string[] {
    const rule = (n: number) => this.theme.fg("dim", "\u2500".repeat(n));
    const fill = Math.max(0, width - visibleWidth(this.title) - 2);
    const out = [`${rule(Math.floor(fill / 2))} ${this.title} ${rule(fill - Math.floor(fill / 2))}`];
    if (this.expanded && Array.isArray(this.game?.board)) out.push("", ...drawBoard(this.game.board, width));
    return out;
  }
}

/** The end of a game in the transcript: who won, and the final board. */
class GameOver implements Component {
  private readonly status: GameStatus | undefined;
  private readonly game: Partial<Game> | undefined;
  private readonly theme: Theme;
  constructor(status: GameStatus | undefined, game: Partial<Game> | undefined, theme: Theme) {
    this.status = status;
    this.game = game;
    this.theme = theme;
  }
  invalidate(): void {}
  render(width: number): string[] {
    const t = this.theme;
    const words: Record<GameStatus, [string, string]> = {
      win_X: [t.fg("accent", "\u2605 Player X wins \u2605"), "You beat the agent."],
      win_O: [t.fg("warning", "\u2605 Player O wins \u2605"), "The agent beat you."],
      draw: [t.fg("muted", "\u2014 Draw \u2014"), "No winner."],
      playing: ["Game over", ""],
    };
    const [title, sub] = words[this.status ?? "draw"] ?? words.playing;
    const hr = t.fg("dim", "\u2500".repeat(width));
    const out = [hr, ""];
    for (const line of [t.bold(title), t.fg("dim", sub)]) out.push(" ".repeat(Math.floor(Math.max(0, width - visibleWidth(line)) / 2)) + line);
    out.push("");
    if (Array.isArray(this.game?.board)) out.push(...drawBoard(this.game.board, width), "");
    out.push(hr);
    return out;
  }
}
