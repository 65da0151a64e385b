/**
 * Plan mode's text rules, pure functions: which bash commands plan mode lets through, how a
 * plan's steps are read from the model's answer, and how the model marks a step done. They
 * decide the same as Pi's example (`examples/extensions/plan-mode/utils.ts`); the
 * differential test (`plan-mode.test.ts`) runs both on the same answers.
 */

/** One step of a plan: its number (from 1), its text, and whether the model said it is done. */
export interface TodoItem {
  step: number;
  text: string;
  completed: boolean;
}

// ---------------------------------------------------------------------------------------
// Bash in plan mode: a command runs when it starts with a read-only program and contains
// nothing that writes.
// ---------------------------------------------------------------------------------------

/** Programs that change files, processes or the system, wherever they appear (any case). */
const WRITING_PROGRAMS = [
  "rm", "rmdir", "mv", "cp", "mkdir", "touch", "chmod", "chown", "chgrp", "ln", "tee", "truncate", "dd", "shred",
  "sudo", "su", "kill", "pkill", "killall", "reboot", "shutdown",
  "vi", "vim", "nano", "emacs", "code", "subl",
];

/** A program followed by one of its writing subcommands, wherever it appears (any case). */
const WRITING_SUBCOMMANDS: Array<[program: string, subcommands: string]> = [
  ["npm", "install|uninstall|update|ci|link|publish"],
  ["yarn", "add|remove|install|publish"],
  ["pnpm", "add|remove|install|publish"],
  ["pip", "install|uninstall"],
  ["apt(?:-get)?", "install|remove|purge|update|upgrade"],
  ["brew", "install|uninstall|upgrade"],
  ["git", "add|commit|push|pull|merge|rebase|reset|checkout|branch\\s+-[dD]|stash|cherry-pick|revert|tag|init|clone"],
  ["systemctl", "start|stop|restart|enable|disable"],
  ["service\\s+\\S+", "start|stop|restart"],
];

const WRITES: RegExp[] = [
  new RegExp(`\\b(?:${WRITING_PROGRAMS.join("|")})\\b`, "i"),
  // Output redirection: `>` or `>>`, but not the `<>` of a read-write open.
  />>|(?:^|[^<])>(?!>)/,
  ...WRITING_SUBCOMMANDS.map(([program, subs]) => new RegExp(`\\b${program}\\s+(?:${subs})`, "i")),
];

/** Programs a command may start with (as written: lowercase). */
const READING_PROGRAMS = [
  "cat", "head", "tail", "less", "more", "grep", "find", "ls", "pwd", "echo", "printf", "wc", "sort", "uniq",
  "diff", "file", "stat", "du", "df", "tree", "which", "whereis", "type", "env", "printenv", "uname", "whoami",
  "id", "date", "cal", "uptime", "ps", "top", "htop", "free", "jq", "awk", "rg", "fd", "bat", "eza",
];

/** Read-only beginnings with arguments (any case). */
const READING_PREFIXES = [
  "git\\s+(?:status|log|diff|show|branch|remote|config\\s+--get)",
  "git\\s+ls-",
  "npm\\s+(?:list|ls|view|info|search|outdated|audit)",
  "yarn\\s+(?:list|info|why|audit)",
  "node\\s+--version",
  "python\\s+--version",
  "curl\\s",
  "wget\\s+-O\\s*-",
  "sed\\s+-n",
];

const READS: RegExp[] = [
  new RegExp(`^\\s*(?:${READING_PROGRAMS.join("|")})\\b`),
  new RegExp(`^\\s*(?:${READING_PREFIXES.join("|")})`, "i"),
];

/** Whether plan mode lets `command` run: it starts read-only and writes nothing. */
export function isSafeCommand(command: string): boolean {
  return READS.some((r) => r.test(command)) && !WRITES.some((w) => w.test(command));
}

// ---------------------------------------------------------------------------------------
// Plans and steps
// ---------------------------------------------------------------------------------------

const LEADING_VERB = /^(?:Use|Run|Execute|Create|Write|Read|Check|Verify|Update|Modify|Add|Remove|Delete|Install)\s+(?:the\s+)?/i;

/** A step's text as shown: markdown emphasis and code marks removed, a leading verb dropped, capitalised. */
export function cleanStepText(text: string): string {
  const plain = text
    .replace(/\*{1,2}([^*]+)\*{1,2}/g, (_m, inner: string) => inner)
    .replace(/`([^`]+)`/g, (_m, inner: string) => inner)
    .replace(LEADING_VERB, "")
    .replace(/\s+/g, " ")
    .trim();
  return plain === "" ? plain : plain[0]!.toUpperCase() + plain.slice(1);
}

/**
 * The numbered steps under the last `Plan:` header of `answer` (the model's text, thinking
 * included: a draft in the thinking comes before the plan it shows). A step is a line
 * `N.` or `N)` with more than five characters of text that does not start with `/` or `-`,
 * and is kept when more than three characters remain once cleaned.
 */
export function extractTodoItems(answer: string): TodoItem[] {
  let start = -1;
  for (const m of answer.matchAll(/\*{0,2}Plan:\*{0,2}\s*\n/gi)) start = m.index! + m[0].length;
  if (start < 0) return [];
  const steps: TodoItem[] = [];
  for (const m of answer.slice(start).matchAll(/^\s*\d+[.)]\s+(.+)$/gm)) {
    const raw = m[1]!.trim().replace(/\*{1,2}$/, "").trim();
    if (raw.length <= 5 || raw.startsWith("/") || raw.startsWith("-")) continue;
    const text = cleanStepText(raw);
    if (text.length > 3) steps.push({ step: steps.length + 1, text, completed: false });
  }
  return steps;
}

/** The ways an answer says step N is done: `[DONE:N]` (and `[DONE N]`, any case), `Done: N`, `Step N is done/complete/finished`. */
const DONE_MARKS = [
  /\[DONE\s*:?\s*(\d+)\]/gi,
  /\bDone\s*:\s*(\d+)\b/gi,
  /\bStep\s*(\d+)\s+(?:is\s+)?(?:done|complete|completed|finished)\b/gi,
];

/** The step numbers `answer` marks done, each once. */
export function extractDoneSteps(answer: string): number[] {
  const done = new Set<number>();
  for (const mark of DONE_MARKS) for (const m of answer.matchAll(mark)) done.add(Number(m[1]));
  return [...done];
}

/** `items` with the steps `answer` marks done completed (a new array; `items` is left as it is). */
export function markCompletedSteps(answer: string, items: readonly TodoItem[]): TodoItem[] {
  const done = new Set(extractDoneSteps(answer));
  return items.map((t) => (done.has(t.step) && !t.completed ? { ...t, completed: true } : { ...t }));
}

/** Whether `answer` says the whole plan is done ("all steps complete", "the plan is done"). */
export function allStepsComplete(answer: string): boolean {
  return (
    /(?:all|every)\s+steps?\s+(?:are|is\s+)?(?:done|complete|completed|finished)/i.test(answer) ||
    /\b(?:the\s+)?plan\s+(?:is\s+)?(?:complete|completed|done)\b/i.test(answer)
  );
}
