// Strict JSON (I-JSON, RFC 7493) for every JSON text a server reads: valid UTF-8, no member
// name twice in one object (JSON.parse keeps the last one silently, so two readers of the same
// text could see different values), and no member named "__proto__" (JavaScript objects and
// zod drop it silently as it passes through them, so it is refused rather than lost). Nesting
// is bounded so that no recursive walk further on can overflow the stack.
import { ValidationError } from "../../lib/errors.js";

/** Deepest nesting of objects and arrays a JSON text may have, by default. */
export const MAX_JSON_DEPTH = 64;

export interface StrictJsonOptions {
  /** What the text is, to start the error sentence: "The request body" by default. */
  what?: string;
  /** Deepest nesting of objects and arrays accepted; MAX_JSON_DEPTH by default. */
  maxDepth?: number;
  /** The `field` of the ValidationError thrown; "body" by default. */
  field?: string;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Parses a JSON text strictly: a ValidationError (HTTP 400) with one sentence when the text is
 * not valid UTF-8 or not valid JSON, when one object names a member twice (at any depth, names
 * compared after unescaping), when a member is named "__proto__", or when the nesting is deeper
 * than `maxDepth`.
 * @example parseStrictJson('{"a":1}') // { a: 1 }
 * @example parseStrictJson('{"a":1,"a":2}') // throws: The request body names the member "a" twice in one object.
 */
export function parseStrictJson(input: string | Uint8Array, opts: StrictJsonOptions = {}): unknown {
  const what = opts.what ?? "The request body";
  const field = opts.field ?? "body";
  let text: string;
  if (typeof input === "string") text = input;
  else {
    try {
      text = utf8.decode(input);
    } catch {
      throw new ValidationError(`${what} is not valid UTF-8.`, field);
    }
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ValidationError(`${what} is not valid JSON.`, field);
  }
  checkMembers(text, what, field, opts.maxDepth ?? MAX_JSON_DEPTH);
  return value;
}

/** Index of the quote that ends the string whose opening quote is at `open` (the text is valid JSON). */
function stringEnd(text: string, open: number): number {
  let j = open + 1;
  for (;;) {
    const k = text.indexOf('"', j);
    let slashes = 0;
    for (let b = k - 1; b > open && text.charCodeAt(b) === BACKSLASH; b--) slashes++;
    if (slashes % 2 === 0) return k;
    j = k + 1;
  }
}

/**
 * One pass over a text JSON.parse accepted: a Set of member names per open object, null per
 * open array. String contents are skipped with indexOf, so a long base64 string costs little.
 */
function checkMembers(text: string, what: string, field: string, maxDepth: number): void {
  const stack: (Set<string> | null)[] = [];
  let expectName = false;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      const top = stack.length > 0 ? stack[stack.length - 1] : null;
      if (expectName && top) {
        const raw = text.slice(i + 1, end);
        const name = raw.includes("\\") ? (JSON.parse(text.slice(i, end + 1)) as string) : raw;
        if (name === "__proto__")
          throw new ValidationError(`${what} has a member named "__proto__", which is not accepted.`, field);
        if (top.has(name))
          throw new ValidationError(`${what} names the member ${JSON.stringify(shorten(name))} twice in one object.`, field);
        top.add(name);
        expectName = false;
      }
      i = end;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (stack.length >= maxDepth)
        throw new ValidationError(`${what} is nested more than ${maxDepth} levels deep.`, field);
      const obj = c === 0x7b;
      stack.push(obj ? new Set() : null);
      expectName = obj;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
      expectName = false;
    } else if (c === 0x2c /* , */) {
      expectName = stack.length > 0 && stack[stack.length - 1] !== null;
    }
  }
}

const shorten = (s: string): string => (s.length > 64 ? `${s.slice(0, 64)}...` : s);

