/**
 * How a state event looks in Pi's TUI transcript (`pi.registerEntryRenderer`).
 *
 * Collapsed (the default), one quiet line: `state <plugin> · <op> · <scope> · <value or
 * patch>`, dimmed and cut to the terminal's width. Expanded (Pi's "expand" key, ctrl+o by
 * default), the entry id and the whole value, pretty-printed; for a patch, the patch and
 * the value after it.
 *
 * The renderer shows what the entry holds; it decides nothing about it (an event the core
 * would refuse is still shown as it is written). Text that comes from the session file is
 * escaped as the CLI escapes it, so a file cannot drive the terminal.
 */
import { Container, Text, TruncatedText } from "@earendil-works/pi-tui";

/** The part of Pi's theme the renderer uses. */
export interface ThemeLike {
  fg(color: string, text: string): string;
  bold?(text: string): string;
}

/** A `custom` entry as Pi hands it to an entry renderer. */
export interface CustomEntryLike {
  id: string;
  customType: string;
  data?: unknown;
}

/** Longest value text the collapsed line is built from (it is cut to the width anyway). */
const SHORT = 200;

/**
 * Whether a character must not reach a terminal raw (as the CLI's `term_safe`): C0
 * controls except the newline, DEL, C1 controls, and the bidirectional overrides and
 * isolates.
 */
function unsafe(c: number): boolean {
  return (
    (c < 0x20 && c !== 0x0a) ||
    (c >= 0x7f && c <= 0x9f) ||
    c === 0x200e ||
    c === 0x200f ||
    (c >= 0x202a && c <= 0x202e) ||
    (c >= 0x2066 && c <= 0x2069)
  );
}

/** `text` with every character a session file could drive a terminal with written as `\uXXXX`. */
export function termSafe(text: string): string {
  let out = "";
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    out += unsafe(c) ? `\\u${c.toString(16).padStart(4, "0")}` : ch;
  }
  return out;
}

/** JSON text of `v` on one line, cut to `max` characters with `…`. */
export function shortJson(v: unknown, max = SHORT): string {
  const s = termSafe(JSON.stringify(v) ?? String(v));
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

function pretty(v: unknown): string {
  return termSafe(JSON.stringify(v, null, 2) ?? String(v));
}

interface Parts {
  plugin: string;
  op: string;
  scope: string;
  /** What the event carries: the value of a `set`, the patch of a `patch`. */
  argument?: { label: "value" | "patch"; value: unknown };
}

function parts(entry: CustomEntryLike, prefix: string): Parts {
  const plugin = termSafe(entry.customType.slice(prefix.length));
  const d = entry.data;
  if (d === null || typeof d !== "object" || Array.isArray(d)) {
    return { plugin, op: "?", scope: "?", argument: { label: "value", value: d } };
  }
  const data = d as Record<string, unknown>;
  const word = (v: unknown) => (typeof v === "string" ? termSafe(v) : shortJson(v, 20));
  const p: Parts = { plugin, op: word(data.op), scope: word(data.scope) };
  if (data.op === "set" && "value" in data) p.argument = { label: "value", value: data.value };
  else if (data.op === "patch" && "patch" in data) p.argument = { label: "patch", value: data.patch };
  return p;
}

/** The collapsed line's text (without colours): `state role · set · branch · {"name":"x"}`. */
export function summaryLine(entry: CustomEntryLike, prefix: string): string {
  const p = parts(entry, prefix);
  const head = `state ${p.plugin} · ${p.op} · ${p.scope}`;
  return p.argument ? `${head} · ${shortJson(p.argument.value)}` : head;
}

/**
 * The expanded text: the summary's head with the entry id, then the whole value (a `set`),
 * the patch and, when `valueAfter` can tell, the value after it (a `patch`), or that the
 * value is absent after a `drop`.
 */
export function detailText(entry: CustomEntryLike, prefix: string, valueAfter?: () => { value: unknown } | undefined): string {
  const p = parts(entry, prefix);
  const lines = [`state ${p.plugin} · ${p.op} · ${p.scope} · entry ${termSafe(entry.id)}`];
  if (p.argument) lines.push(`${p.argument.label}:`, pretty(p.argument.value));
  if (p.op === "patch") {
    const after = valueAfter?.();
    if (after) lines.push("value after it:", after.value === undefined ? "(absent)" : pretty(after.value));
  } else if (p.op === "drop") {
    lines.push("the value is absent after this entry");
  }
  return lines.join("\n");
}

export interface RendererOptions {
  /** The customType prefix of state events (the core's, through the addon). */
  prefix: string;
  /** Whether state events are shown at all (the `sessionState.transcript` setting). */
  enabled(): boolean;
  /** The value after the event `entry`, when the current session can answer it. */
  valueAfter?(entry: CustomEntryLike): { value: unknown } | undefined;
}

/** Pi's `EntryRenderer` for state events. */
export function stateEntryRenderer(o: RendererOptions) {
  return (entry: CustomEntryLike, options: { expanded: boolean }, theme: ThemeLike) => {
    if (!o.enabled()) return undefined;
    const dim = (s: string) => theme.fg("dim", s);
    if (!options.expanded) return new TruncatedText(dim(summaryLine(entry, o.prefix)), 1, 0);
    const box = new Container();
    const text = detailText(entry, o.prefix, o.valueAfter ? () => o.valueAfter!(entry) : undefined);
    const [head, ...rest] = text.split("\n");
    box.addChild(new TruncatedText(theme.fg("muted", head!), 1, 0));
    if (rest.length > 0) box.addChild(new Text(dim(rest.join("\n")), 1, 0));
    return box;
  };
}
