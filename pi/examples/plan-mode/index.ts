/**
 * Plan mode, on `@session-state/pi`: a port of Pi's example `examples/extensions/plan-mode/`
 * with the same flag, commands, shortcut, messages and tool restriction.
 *
 *   pi -e ./pi -e ./pi/examples/plan-mode            # `--plan` starts in plan mode
 *
 * - `/plan` and Ctrl+Alt+P turn plan mode on and off. On, the built-in `edit` and `write`
 *   tools are off, `grep`, `find`, `ls` and `questionnaire` join the active tools (when
 *   registered), bash runs only allowlisted read-only commands (`rules.ts`), and each user
 *   prompt carries the hidden `[PLAN MODE ACTIVE]` message. Off, the tools come back and
 *   the `[PLAN MODE ACTIVE]` messages are taken out of what the model is sent.
 * - At the end of a run in plan mode, the numbered steps under the answer's `Plan:` header
 *   become the plan; the user picks "Execute the plan (track progress)", "Stay in plan mode"
 *   or "Refine the plan". Executing, each prompt carries the remaining steps, the model's
 *   `[DONE:n]` marks complete them, and a finished plan is announced ("Plan Complete!").
 * - `/todos` shows the plan's progress; the footer shows `⏸ plan` or `📋 done/total`, and a
 *   widget lists the steps while they execute.
 *
 * State (`openSessionState`, plugin `plan-mode`): one value, **branch** scope, `{ enabled,
 * todos, executing, toolsBeforePlanMode?, toolsAfterPlanMode? }`. Plan mode, its plan and its progress belong to
 * the conversation they were made in: `/tree` back to before `/plan` is not in plan mode,
 * a sibling branch never sees another's plan, a fork or clone carries the state of the
 * path it copies, and a resumed session is in the mode of the branch it opens on. Every
 * handler reads the value at Pi's leaf when it runs (the bash filter, the context filter,
 * the prompt's hidden message, the progress at each turn's end), so nothing is kept in
 * memory that a tree move or a resume could leave stale; `session_start` and
 * `session_tree` only redraw the footer and the widget and set the tools for the branch.
 * With `--plan`, plan mode is on where the branch has no value yet (the flag is the
 * default, not a write), as the original turns it on at start unless a saved value says
 * otherwise. The tools active before plan mode (`toolsBeforePlanMode`) are kept in the
 * value, so turning plan mode off restores them also after a resume.
 *
 * The active tools are Pi's: it records them at each run (a system message) and restores
 * the branch's last record on a resume and a tree move. Where plan mode is on at the
 * leaf the port sets plan mode's tools; where it is off and Pi's record predates plan
 * mode's last change on the branch (turned off, no run since), it sets the tools turning
 * it off set (`toolsAfterPlanMode`), found by walking back from the leaf to the nearer of
 * Pi's last record and the state's last event.
 *
 * Differences from the original, each shown by `plan-mode.test.ts`: the original restores
 * the last value written anywhere in the file, only at session start, so after `/tree` to
 * before `/plan` it still reports plan mode and the plan's steps, and a resume on a branch
 * where plan mode was never on sends the model `[PLAN MODE ACTIVE]`; a run on another
 * branch writes that stale value into it. The original also writes its value at every
 * turn's end while executing; the port writes only a change. On resume the original
 * scans the messages after the last "Execute the plan" for `[DONE:n]` marks that its turn
 * ends already saved; the port's value has them. After plan mode is turned off with no
 * turn since, a resume or a tree move back there leaves the original with the tools Pi
 * restored, plan mode's, though plan mode is off.
 *
 * TUI-only behaviour kept as text: the footer status and the widget lines are set through
 * `ctx.ui.setStatus` / `ctx.ui.setWidget` with the same theme colours. The editor opened by
 * "Refine the plan" is `ctx.ui.editor`, whatever answers it.
 */
import type { AgentMessage } from "@earendil-works/pi-agent-core";
import type { AssistantMessage } from "@earendil-works/pi-ai";
import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { Key } from "@earendil-works/pi-tui";
import { openSessionState, STATE_PREFIX } from "@session-state/pi";
import { allStepsComplete, extractTodoItems, isSafeCommand, markCompletedSteps, type TodoItem } from "./rules.ts";

/** The stored value: as the original's `plan-mode` entries, on this branch. */
interface PlanState {
  enabled: boolean;
  todos: TodoItem[];
  executing: boolean;
  /** The active tools when plan mode was turned on: what turning it off restores. */
  toolsBeforePlanMode?: string[];
  /** The tools turning plan mode off set, until a run has recorded them (absent while it is on). */
  toolsAfterPlanMode?: string[];
}

/** Tools plan mode turns on, and the built-in ones it turns off. */
const PLAN_TOOLS = ["read", "bash", "grep", "find", "ls", "questionnaire"];
const WRITE_TOOLS = ["edit", "write"];
/** The built-in tools a normal session has. */
const NORMAL_TOOLS = ["read", "bash", "edit", "write"];
/** Every tool whose activity plan mode decides. */
const MANAGED = new Set([...PLAN_TOOLS, ...NORMAL_TOOLS]);

const PLAN_MODE_CONTEXT = `[PLAN MODE ACTIVE]
You are in plan mode - a read-only exploration mode for safe code analysis.

Restrictions:
- Built-in edit and write tools are disabled
- Other currently active tools remain available
- Bash is restricted to an allowlist of read-only commands

Ask clarifying questions using the questionnaire tool.
Use brave-search skill via bash for web research.

Create a detailed numbered plan under a "Plan:" header:

Plan:
1. First step description
2. Second step description
...

Do NOT attempt to make changes - just describe what you would do.`;

/** The customType of this state's events (entries on Pi's branch). */
const EVENTS = `${STATE_PREFIX}plan-mode`;

const CHOICES = ["Execute the plan (track progress)", "Stay in plan mode", "Refine the plan"] as const;

function isAssistant(m: AgentMessage): m is AssistantMessage {
  return m.role === "assistant" && Array.isArray((m as AssistantMessage).content);
}

/** The text of an answer, thinking included (a reasoning model often writes its plan and its marks there). */
function answerText(m: AssistantMessage): string {
  return m.content
    .map((b) => (b.type === "text" ? b.text : b.type === "thinking" ? ((b as { thinking?: string }).thinking ?? "") : ""))
    .join("\n");
}

function lastAnswer(messages: AgentMessage[]): AssistantMessage | undefined {
  for (let i = messages.length - 1; i >= 0; i--) if (isAssistant(messages[i]!)) return messages[i] as AssistantMessage;
  return undefined;
}

/** Whether a message the model would be sent belongs to plan mode (its hidden message, or a user message quoting it). */
function isPlanModeMessage(m: AgentMessage): boolean {
  if ((m as { customType?: string }).customType === "plan-mode-context") return true;
  if (m.role !== "user") return false;
  const content = m.content;
  if (typeof content === "string") return content.includes("[PLAN MODE ACTIVE]");
  return Array.isArray(content) && content.some((c) => c.type === "text" && (c as { text?: string }).text?.includes("[PLAN MODE ACTIVE]"));
}

export default function planMode(pi: ExtensionAPI): void {
  const plan = openSessionState<PlanState>(pi, { pluginId: "plan-mode", scope: "branch" });

  pi.registerFlag("plan", {
    description: "Start in plan mode (read-only exploration)",
    type: "boolean",
    default: false,
  });

  /** Where the branch has no value: off, or on with `--plan`. */
  const initial = (): PlanState => ({ enabled: pi.getFlag("plan") === true, todos: [], executing: false });
  /** The value at Pi's leaf. */
  const current = (ctx: ExtensionContext): PlanState => plan.read(ctx) ?? initial();
  /** The value as if Pi's leaf were `at` (`null`: before the first entry). */
  const at = (ctx: ExtensionContext, id: string | null): PlanState => (id === null ? undefined : plan.readAt(ctx, id)) ?? initial();
  const save = (ctx: ExtensionContext, s: PlanState): void => {
    // JSON has no undefined: a tool list that is not there is left out.
    const { toolsBeforePlanMode, toolsAfterPlanMode, ...rest } = s;
    plan.write(ctx, {
      ...rest,
      ...(toolsBeforePlanMode === undefined ? {} : { toolsBeforePlanMode }),
      ...(toolsAfterPlanMode === undefined ? {} : { toolsAfterPlanMode }),
    });
  };

  /** The tools Pi had when `--plan` turned plan mode on at start (no value holds them yet). */
  let flagToolsBefore: string[] | undefined;

  const unique = (names: string[]) => [...new Set(names)];
  const planTools = (before: string[]) => unique([...before.filter((n) => !WRITE_TOOLS.includes(n)), ...PLAN_TOOLS]);
  const normalTools = (active: string[]) => unique([...NORMAL_TOOLS, ...active.filter((n) => !MANAGED.has(n))]);

  /** Turns plan mode's tools on; returns the tools to restore when it ends. */
  function enterPlanTools(s: PlanState): string[] {
    let before = s.toolsBeforePlanMode ?? flagToolsBefore;
    if (before === undefined) before = flagToolsBefore = pi.getActiveTools();
    pi.setActiveTools(planTools(before));
    return before;
  }

  /** Turns plan mode's tools off; returns the tools it set. */
  function leavePlanTools(s: PlanState): string[] {
    const tools = s.toolsBeforePlanMode ?? flagToolsBefore ?? normalTools(pi.getActiveTools());
    pi.setActiveTools(tools);
    flagToolsBefore = undefined;
    return tools;
  }

  function show(ctx: ExtensionContext, s: PlanState): void {
    const { theme } = ctx.ui;
    const executing = s.executing && s.todos.length > 0;
    if (executing) {
      const done = s.todos.filter((t) => t.completed).length;
      ctx.ui.setStatus("plan-mode", theme.fg("accent", `📋 ${done}/${s.todos.length}`));
      ctx.ui.setWidget(
        "plan-todos",
        s.todos.map((t) => {
          const text = t.text.length > 60 ? `${t.text.slice(0, 57)}...` : t.text;
          return t.completed ? theme.fg("success", "☑ ") + theme.fg("muted", theme.strikethrough(text)) : `${theme.fg("muted", "☐ ")}${text}`;
        }),
      );
      return;
    }
    ctx.ui.setStatus("plan-mode", s.enabled ? theme.fg("warning", "⏸ plan") : undefined);
    ctx.ui.setWidget("plan-todos", undefined);
  }

  function toggle(ctx: ExtensionContext): void {
    const s = current(ctx);
    let next: PlanState;
    if (!s.enabled) {
      const before = enterPlanTools(s);
      next = { enabled: true, todos: [], executing: false, toolsBeforePlanMode: before };
      ctx.ui.notify("Plan mode enabled. Built-in write tools disabled.");
    } else {
      next = { enabled: false, todos: [], executing: false, toolsAfterPlanMode: leavePlanTools(s) };
      ctx.ui.notify("Plan mode disabled. Full access restored.");
    }
    show(ctx, next);
    save(ctx, next);
  }

  pi.registerCommand("plan", {
    description: "Toggle plan mode (read-only exploration)",
    handler: async (_args, ctx) => toggle(ctx),
  });

  pi.registerCommand("todos", {
    description: "Show current plan todo list",
    handler: async (_args, ctx) => {
      const { todos } = current(ctx);
      if (todos.length === 0) {
        ctx.ui.notify("No todos. Create a plan first with /plan", "info");
        return;
      }
      ctx.ui.notify(`Plan Progress:\n${todos.map((t, i) => `${i + 1}. ${t.completed ? "✓" : "○"} ${t.text}`).join("\n")}`, "info");
    },
  });

  pi.registerShortcut(Key.ctrlAlt("p"), {
    description: "Toggle plan mode",
    handler: async (ctx) => toggle(ctx),
  });

  pi.on("tool_call", async (event, ctx) => {
    if (event.toolName !== "bash" || !current(ctx).enabled) return;
    const command = (event.input as { command: string }).command;
    if (isSafeCommand(command)) return;
    return {
      block: true,
      reason: `Plan mode: command blocked (not allowlisted). Use /plan to disable plan mode first.\nCommand: ${command}`,
    };
  });

  pi.on("context", async (event, ctx) => {
    if (current(ctx).enabled) return;
    return { messages: event.messages.filter((m) => !isPlanModeMessage(m)) };
  });

  // Each user prompt (not a run started by a custom message) carries plan mode's hidden message.
  pi.on("before_agent_start", async (event, ctx) => {
    if (event.messageType !== "user") return;
    const s = current(ctx);
    if (s.enabled) {
      return { message: { customType: "plan-mode-context", content: PLAN_MODE_CONTEXT, display: false } };
    }
    if (s.executing && s.todos.length > 0) {
      const remaining = s.todos.filter((t) => !t.completed).map((t) => `${t.step}. ${t.text}`);
      return {
        message: {
          customType: "plan-execution-context",
          content: `[EXECUTING PLAN - Full tool access enabled]

Remaining steps:
${remaining.join("\n")}

Execute each step in order.
After completing a step, include a [DONE:n] tag in your response.`,
          display: false,
        },
      };
    }
  });

  pi.on("turn_end", async (event, ctx) => {
    const s = current(ctx);
    if (!s.executing || s.todos.length === 0 || !isAssistant(event.message)) return;
    // Within a run, which recorded the tools turning plan mode off set: no need to keep them.
    const next = { ...s, todos: markCompletedSteps(answerText(event.message), s.todos), toolsAfterPlanMode: undefined };
    show(ctx, next);
    save(ctx, next);
  });

  pi.on("agent_end", async (event, ctx) => {
    const s = current(ctx);
    if (s.executing && s.todos.length > 0) {
      const answer = lastAnswer(event.messages);
      const todos = answer && allStepsComplete(answerText(answer)) ? s.todos.map((t) => ({ ...t, completed: true })) : s.todos;
      if (todos.every((t) => t.completed)) {
        pi.sendMessage(
          { customType: "plan-complete", content: `**Plan Complete!** ✓\n\n${todos.map((t) => `~~${t.text}~~`).join("\n")}`, display: true },
          { deliverAs: "nextTurn" },
        );
        const next = { ...s, executing: false, todos: [], toolsAfterPlanMode: undefined };
        show(ctx, next);
        save(ctx, next);
      }
      return;
    }
    if (!s.enabled || !ctx.hasUI) return;

    const answer = lastAnswer(event.messages);
    const extracted = answer ? extractTodoItems(answerText(answer)) : [];
    const todos = extracted.length > 0 ? extracted : s.todos;
    if (todos.length === 0) return;
    save(ctx, { ...s, todos });

    const stepsMessage = {
      customType: "plan-todo-list",
      content: `**Plan Steps (${todos.length}):**\n\n${todos.map((t, i) => `${i + 1}. ☐ ${t.text}`).join("\n")}`,
      display: true,
    };
    const choice = await ctx.ui.select("Plan mode - what next?", [...CHOICES]);
    if (choice?.startsWith("Execute")) {
      const first = todos[0]!;
      const next: PlanState = { enabled: false, todos, executing: true, toolsAfterPlanMode: leavePlanTools(s) };
      show(ctx, next);
      save(ctx, next);
      pi.sendMessage(stepsMessage, { deliverAs: "followUp" });
      pi.sendMessage(
        {
          customType: "plan-mode-execute",
          content: `Execute the plan.

Remaining steps:
${todos.map((t) => `${t.step}. ${t.text}`).join("\n")}

Start with: ${first.text}
After completing a step, include a [DONE:n] tag in your response.`,
          display: true,
        },
        { triggerTurn: true, deliverAs: "followUp" },
      );
    } else if (choice === "Refine the plan") {
      const refinement = (await ctx.ui.editor("Refine the plan:", ""))?.trim();
      if (refinement) {
        pi.sendMessage(stepsMessage, { deliverAs: "followUp" });
        pi.sendUserMessage(refinement, { deliverAs: "followUp" });
      }
    }
  });

  /**
   * Whether Pi's record of the tools (the system message a run writes when they changed)
   * on the path from Pi's leaf is newer than plan mode's last change there (its state's
   * last event): Pi restores the branch's last record on a resume and a tree move, and
   * keeps the tools it has where the branch holds none.
   */
  function recordIsNewer(ctx: ExtensionContext): boolean {
    const sm = ctx.sessionManager;
    for (let id = sm.getLeafId(); id !== null; ) {
      const e = sm.getEntry(id) as { type?: string; customType?: string; message?: { role?: string }; parentId?: string | null } | undefined;
      if (e?.type === "message" && e.message?.role === "system") return true;
      if (e?.type === "custom" && e.customType === EVENTS) return false;
      id = e?.parentId ?? null;
    }
    return false;
  }

  /** Tools, footer and widget for the branch at Pi's leaf; `from`: the leaf a tree move left. */
  function follow(ctx: ExtensionContext, from?: string | null): void {
    const s = current(ctx);
    if (s.enabled) enterPlanTools(s);
    else {
      // Off here, but the tools Pi restored (or kept) may be plan mode's: those of a run
      // made before plan mode was turned off on this branch, or, where the branch records
      // none, those of the plan-mode branch a tree move left.
      const left = from === undefined ? undefined : at(ctx, from);
      const after = s.toolsAfterPlanMode ?? (left?.enabled ? (left.toolsBeforePlanMode ?? flagToolsBefore ?? normalTools(pi.getActiveTools())) : undefined);
      if (after && !recordIsNewer(ctx)) pi.setActiveTools(after);
      if (left?.enabled) flagToolsBefore = undefined;
    }
    show(ctx, s);
  }

  pi.on("session_start", async (_event, ctx) => follow(ctx));
  pi.on("session_tree", async (event, ctx) => follow(ctx, event.oldLeafId));
}
