/**
 * The rules a value keeps: what JSON can carry (`encode`), its depth, what `validate`
 * checks, and the errors a state throws when a stored, migrated or written value breaks
 * them (`StateVersionError`, `StateMigrationError`, `StateValidationError`).
 */
import type { TSchema } from "typebox";
import { Compile } from "typebox/compile";
import { StateMigrationError, StateValidationError, StateVersionError } from "./errors.ts";
import { freshCopy } from "./event.ts";
import { call, native, type NativeStored } from "./native.ts";

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

/** The deepest nesting a value may have: arrays and objects, as the core counts them. */
const MAX_DEPTH = 100;

/** Whether `v` is a Promise or another thenable (what an async function returns). */
function isThenable(v: unknown): boolean {
  return (typeof v === "object" || typeof v === "function") && v !== null && typeof (v as { then?: unknown }).then === "function";
}

/** The nesting depth of arrays and objects in a JSON text (0 for a scalar). */
function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) max = Math.max(max, ++depth);
    else if (c === 0x5d || c === 0x7d) depth--;
  }
  return max;
}

/** What `validate` found first: where (a JSON Pointer, `""` for the value itself) and what. */
export interface Failure {
  path: string;
  detail: string;
}

/** A state's check of a value: the first failure, or `undefined` for a valid value. */
export type Checker = (value: unknown) => Failure | undefined;

/** A JSON Pointer reference token (RFC 6901). */
function pointerToken(name: string): string {
  return name.replace(/~/g, "~0").replace(/\//g, "~1");
}

/**
 * The check `validate` asks for: a TypeBox schema compiled once (TypeBox's compiled
 * checker, `Compile`), or a function. Returns the first failure, or `undefined` for a
 * valid value.
 */
export function checkerOf(validate: unknown): Checker | undefined {
  if (validate === undefined) return undefined;
  if (typeof validate === "function") {
    const guard = validate as (value: unknown) => unknown;
    return (value) => {
      let ok: unknown;
      try {
        ok = guard(value);
      } catch (e) {
        return { path: "", detail: `the validate function threw: ${(e as Error)?.message ?? String(e)}` };
      }
      // An async validate returns a Promise, which is truthy: it would pass every value.
      if (isThenable(ok)) {
        return { path: "", detail: "the validate function returned a Promise; it must answer true or false itself (an async function returns a Promise)" };
      }
      return ok ? undefined : { path: "", detail: "the validate function returned false" };
    };
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
  return (value) => {
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
}

/** A JSON Pointer as messages show it. */
function where(path: string): string {
  return path === "" ? "the root (the value itself)" : path;
}

/** The refusal of a value stored under a newer version than the state's `version`. */
export function newerError(pluginId: string, version: number, s: NativeStored): StateVersionError {
  return new StateVersionError(pluginId, s.stateVersion, version, s.entryId ?? undefined, s.refusal ?? undefined);
}

/** `migrate` on a value stored under an older version: its result as JSON text, or a {@link StateMigrationError} naming the entry. */
export function migratedText(
  pluginId: string,
  version: number,
  migrate: ((value: unknown, fromVersion: number) => unknown) | undefined,
  s: NativeStored,
): string {
  const entryId = s.entryId ?? undefined;
  let out: unknown;
  const failed = (detail: string, cause?: unknown) =>
    new StateMigrationError(pluginId, s.stateVersion, version, entryId, detail, cause === undefined ? undefined : { cause });
  try {
    out = migrate!(JSON.parse(s.value!), s.stateVersion);
  } catch (e) {
    throw failed((e as Error)?.message ?? String(e), e);
  }
  // An async migrate returns a Promise, which JSON would print as `{}`: the stored value
  // would read as `{}` and the next write would put `{}` over it for every later reader.
  if (isThenable(out)) {
    throw failed("migrate returned a Promise; it must return the value itself (an async function returns a Promise)");
  }
  let text: string;
  try {
    text = encode(pluginId, out);
  } catch (e) {
    throw failed(`migrate returned a value that cannot be written: ${(e as Error).message}`, e);
  }
  // The value rules every write keeps (the core refuses the same value at the write):
  // refused here, on the read, naming the entry, not later as a write's plain error.
  const depth = jsonDepth(text);
  if (depth > MAX_DEPTH) {
    throw failed(`migrate returned a value that cannot be written: it is nested ${depth} levels deep, deeper than ${MAX_DEPTH} levels of arrays and objects`);
  }
  return text;
}

/** A stored value `validate` refuses: `entryId` the event that set it, `from` the version it was migrated from. */
export function invalidStored(pluginId: string, version: number, f: Failure, entryId: string | undefined, from?: number): StateValidationError {
  return new StateValidationError(
    pluginId,
    entryId,
    f.path,
    f.detail,
    `plugin '${pluginId}': the stored value${entryId === undefined ? "" : ` (entry '${entryId}')`}${from === undefined ? "" : `, migrated from version ${from} to ${version},`} does not pass validate at ${where(f.path)}: ${f.detail}`,
  );
}

/** The value a write would leave, refused by `validate` (nothing is written). */
export function invalidWrite(pluginId: string, f: Failure): StateValidationError {
  return new StateValidationError(
    pluginId,
    undefined,
    f.path,
    f.detail,
    `plugin '${pluginId}': the value the write would leave does not pass validate at ${where(f.path)}: ${f.detail}; nothing was written`,
  );
}
