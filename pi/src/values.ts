/**
 * What only JavaScript knows of a value: what JSON can carry (`encode`, worded by the
 * core), the caller's value as the event holds it (`encodeForEvent`), and a state's
 * `migrate` and `validate` as the core calls them (`hooksOf`).
 */
import type { TSchema } from "typebox";
import { Compile } from "typebox/compile";
import { freshCopy } from "./event.ts";
import { call, native } from "./native.ts";
import { shared } from "./shared.ts";

const NON_FINITE = Symbol("non-finite");

/**
 * The JSON text Pi's `JSON.stringify` would write for `value`, or the core's refusal of
 * what only JavaScript can hold (the core checks the text itself when it decides the event).
 */
export function encode(plugin: string, value: unknown): string {
  const refuse = (kind: "not-json" | "non-finite" | "too-deep", detail: string) =>
    new Error(call(() => native.valueError(plugin, kind, detail)));
  if (value === undefined) {
    throw refuse("not-json", "undefined is not a JSON value: write null, or drop() to make the value absent");
  }
  let bad = 0;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
    // JSON.stringify prints a non-finite number as `null`: a text without `null` held
    // none, and only one with it is walked again to find one (a replacer called for every
    // member costs more than the printing).
    if (text?.includes("null")) {
      JSON.stringify(value, (_k, v) => {
        if (typeof v === "number" && !Number.isFinite(v)) {
          bad = v;
          throw NON_FINITE;
        }
        return v;
      });
    }
  } catch (e) {
    if (e === NON_FINITE) throw refuse("non-finite", String(bad));
    // Deeper than JavaScript's own stack.
    if (e instanceof RangeError) throw refuse("too-deep", "");
    const why = e instanceof TypeError && /circular/i.test(e.message) ? "the value refers to itself (a cycle)" : String((e as Error)?.message ?? e);
    throw refuse("not-json", `${why}; JSON cannot carry it`);
  }
  if (text === undefined) throw refuse("not-json", `a ${typeof value} is not a JSON value`);
  return text;
}

/**
 * What a write or a patch carries: the caller's value printed as {@link encode} prints
 * it (`text`) and the value the event holds. For a plain value (`freshCopy`), that value
 * is a fresh copy and the text is the copy's print (`fresh`: the event takes the copy as
 * it is); else it is the caller's value, and the event copies or parses it.
 */
export function encodeForEvent(plugin: string, value: unknown): { text: string; value: unknown; fresh: boolean } {
  const copy = freshCopy(value);
  // A plain copy holds no non-finite number, no `undefined` and no cycle: its print is
  // the text `encode` would give, without `encode`'s second walk for a non-finite number.
  if (copy !== undefined) return { text: JSON.stringify(copy), value: copy, fresh: true };
  return { text: encode(plugin, value), value, fresh: false };
}

/** A JSON text as a value (`null`, absent: `undefined`). */
export function parse<T>(text: string | null): T | undefined {
  return text === null ? undefined : (JSON.parse(text) as T);
}

/** What `validate` found first: where (a JSON Pointer, `""` for the value itself) and what. */
interface Failure {
  path: string;
  detail: string;
}

/** A JSON Pointer reference token (RFC 6901). */
function pointerToken(name: string): string {
  return name.replace(/~/g, "~0").replace(/\//g, "~1");
}

/**
 * A state's `migrate` and `validate` as the addon's key calls them (`new NativeState`):
 * the extension's own functions, each wrapped only to take the value as JSON text, and the
 * printer of what `migrate` returns. The core calls them, in its order, on every read and
 * write; it refuses a Promise, a throw, a value JSON cannot carry or one that breaks a value
 * rule, and what `validate` refuses.
 */
export interface Hooks {
  migrate: ((text: string, fromVersion: number) => unknown) | null;
  /** A type guard's answer, or (`schema`) the compiled schema's first failure or `undefined`. */
  validate: ((text: string) => unknown) | null;
  schema: boolean;
  print: (value: unknown) => string;
}

/**
 * The hooks of a state of `pluginId` (see {@link Hooks}): `validate` a TypeBox schema,
 * compiled once (TypeBox's compiled checker, `Compile`), or a function; `undefined` when
 * the state has neither `migrate` nor `validate`. Throws for a `validate` it cannot use.
 */
/**
 * Runs the extension's code `f` (its `migrate`, its `validate`, or a `toJSON` met printing
 * `migrate`'s result) marked as running inside a call into the addon, which holds the state
 * and its store while it runs: a state read or written from there is refused
 * ({@link refuseInHook}).
 */
function marked<R>(pluginId: string, f: () => R): R {
  const outer = shared.inHook;
  shared.inHook = pluginId;
  try {
    return f();
  } finally {
    shared.inHook = outer;
  }
}

/**
 * Throws when a state of `pluginId` (or, without one, the session's branch key) is read or
 * written from inside a `migrate` or `validate` (the call into the addon that runs it holds
 * the state and its store): the
 * hook's error then refuses the read or write that ran it, and nothing is written.
 */
export function refuseInHook(pluginId?: string): void {
  const running = shared.inHook;
  if (running === undefined) return;
  const what = pluginId === undefined ? "the session" : `plugin '${pluginId}': a state`;
  throw new Error(
    `${what} cannot be read or written from inside plugin '${running}''s migrate or validate (they run inside the read or write that resolves its value); nothing was read or written`,
  );
}

export function hooksOf(
  pluginId: string,
  migrate: ((value: unknown, fromVersion: number) => unknown) | undefined,
  validate: unknown,
): Hooks | undefined {
  const print = (value: unknown) => marked(pluginId, () => encode(pluginId, value));
  const wrappedMigrate = migrate === undefined ? null : (text: string, from: number) => marked(pluginId, () => migrate(JSON.parse(text), from));
  if (validate === undefined) return migrate === undefined ? undefined : { migrate: wrappedMigrate, validate: null, schema: false, print };
  if (typeof validate === "function") {
    const guard = validate as (value: unknown) => unknown;
    return { migrate: wrappedMigrate, validate: (text) => marked(pluginId, () => guard(JSON.parse(text))), schema: false, print };
  }
  if (validate === null || typeof validate !== "object") {
    throw new Error("openSessionState: validate must be a TypeBox schema or a function (value: unknown) => boolean");
  }
  let compiled: ReturnType<typeof Compile>;
  try {
    compiled = Compile(validate as TSchema);
  } catch (e) {
    throw new Error(`openSessionState: validate is not a schema TypeBox can compile: ${(e as Error)?.message ?? String(e)}`);
  }
  const check = (text: string): Failure | undefined => {
    const value: unknown = JSON.parse(text);
    if (compiled.Check(value)) return undefined;
    const first = compiled.Errors(value)[0];
    if (!first) return { path: "", detail: "the value does not match the schema" };
    let at = first.instancePath;
    // A missing property is reported on its object: name the property itself.
    const missing = (first.params as { requiredProperties?: unknown }).requiredProperties;
    if (first.keyword === "required" && Array.isArray(missing) && typeof missing[0] === "string") {
      at += `/${pointerToken(missing[0])}`;
    }
    return { path: at, detail: first.message };
  };
  return { migrate: wrappedMigrate, validate: check, schema: true, print };
}
