/**
 * The event Pi appends and keeps, as an object: the core's printed `data`, built around
 * the caller's own text when the core printed exactly its envelope, from a fresh copy of
 * the caller's value when that prints as the text.
 */
import type { Scope } from "./types.ts";

/**
 * @internal The event object Pi appends for `data`, the core's answer: `true` when the
 * core's data is exactly the envelope of the caller's own text (`argument`, the usual
 * case: the core compared its print with the text), and the object is built around
 * `argument` alone ([`envelopeOf`]), which spares parsing the envelope; otherwise `data` is
 * the core's JSON text, parsed whole. The package holds no printed form of the envelope:
 * the core's print is the only one. A fresh object either way: Pi keeps it, and the caller
 * may change its value afterwards. `version`: the state's (an event of version N > 1 is
 * `{v: 2, stateVersion: N, …}`). `original`: the value (or patch) `argument` was printed
 * from, copied rather than parsed when it can be; `fresh`: a copy made for this event.
 */
export function eventOf(
  data: string | true,
  scope: Scope,
  op: "set" | "patch" | "drop",
  argument: string | null,
  version = 1,
  original?: unknown,
  fresh = false,
): unknown {
  if (data === true && argument !== null) return envelopeOf(scope, op, argument, version, original, fresh);
  return JSON.parse(String(data));
}

/**
 * The event object of `op` with the caller's text `argument` (`null` for a drop): the
 * envelope the core prints for it, as an object whose value is `original` itself when
 * `fresh` (a copy made for this event, whose print is `argument`: {@link freshCopy}), else
 * a fresh copy of `original` when that prints as `argument` ([`copyPrinting`]), else a
 * parse of `argument`.
 */
export function envelopeOf(scope: Scope, op: "set" | "patch" | "drop", argument: string | null, version: number, original?: unknown, fresh = false): unknown {
  const of = (text: string) => (fresh ? original : (copyPrinting(original, text) ?? JSON.parse(text)));
  if (version > 1) {
    if (op === "drop" || argument === null) return { v: 2, stateVersion: version, scope, op };
    return op === "set" ? { v: 2, stateVersion: version, scope, op, value: of(argument) } : { v: 2, stateVersion: version, scope, op, patch: of(argument) };
  }
  if (op === "drop" || argument === null) return { v: 1, scope, op };
  return op === "set" ? { v: 1, scope, op, value: of(argument) } : { v: 1, scope, op, patch: of(argument) };
}

const NOT_PLAIN = Symbol("not plain");

/**
 * A fresh copy of `value` made of plain objects, arrays and JSON's primitives (finite
 * numbers, `-0` as `0`), when it is such a value itself, nested at most 64 levels; else
 * `undefined`. Its print is what the event carries: the write prints the copy, not the
 * caller's value, so the text the core decides on and the object Pi keeps and prints are
 * the same value, whatever a getter or a proxy answers, with one print and no check.
 */
export function freshCopy(value: unknown): unknown {
  if (value === undefined) return undefined;
  const copy = plainCopy(value, 0);
  return copy === NOT_PLAIN ? undefined : copy;
}

/**
 * A fresh copy of `value` made of plain objects, arrays and JSON's primitives, when it is
 * such a value itself and the copy prints as `text` (what `JSON.stringify(value)` printed);
 * else `undefined`, and the caller parses `text`. It spares that parse, which costs more
 * than the copy when the caches are cold, as they are after Pi's `fdatasync`. Anything
 * `JSON.stringify` would print otherwise than it is (a `toJSON`, an instance of a class,
 * an `undefined` or a function in an array) is not copied; the check against `text`
 * catches the rest (a getter that answers differently, a proxy).
 */
function copyPrinting(value: unknown, text: string): unknown {
  if (value === undefined) return undefined;
  const copy = plainCopy(value, 0);
  if (copy === NOT_PLAIN || JSON.stringify(copy) !== text) return undefined;
  return copy;
}

/** `copyPrinting`'s walk: the copy of `v` at `depth`, or `NOT_PLAIN`. */
function plainCopy(v: unknown, depth: number): unknown {
  switch (typeof v) {
    case "string":
    case "boolean":
      return v;
    case "number":
      // -0 prints as 0.
      return Number.isFinite(v) ? (v === 0 ? 0 : v) : NOT_PLAIN;
    case "object": {
      if (v === null) return null;
      if (depth > 64 || typeof (v as { toJSON?: unknown }).toJSON === "function") return NOT_PLAIN;
      if (Array.isArray(v)) {
        if (Object.getPrototypeOf(v) !== Array.prototype) return NOT_PLAIN;
        const out: unknown[] = new Array(v.length);
        for (let i = 0; i < v.length; i++) {
          const m = v[i];
          if (m === undefined || typeof m === "function" || typeof m === "symbol") return NOT_PLAIN;
          const c = plainCopy(m, depth + 1);
          if (c === NOT_PLAIN) return NOT_PLAIN;
          out[i] = c;
        }
        return out;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) return NOT_PLAIN;
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(v)) {
        const m = (v as Record<string, unknown>)[k];
        // JSON.stringify leaves these members out.
        if (m === undefined || typeof m === "function" || typeof m === "symbol") continue;
        const c = plainCopy(m, depth + 1);
        if (c === NOT_PLAIN) return NOT_PLAIN;
        out[k] = c;
      }
      return out;
    }
    default:
      return NOT_PLAIN;
  }
}
