// Strict JSON (I-JSON, RFC 7493) for every JSON text a server reads: valid UTF-8, no member
// name twice in one object (JSON.parse keeps the last one silently, so two readers of the same
// text could see different values), no member named "__proto__" (JavaScript objects and zod
// drop it silently as it passes through them, so it is refused rather than lost), no lone
// surrogate escape (it would be stored as U+FFFD) and no number a float64 cannot hold (1e400
// would become Infinity, then null; 1e-400 would become 0). Nesting is bounded so that no
// recursive walk further on can overflow the stack.
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
 * compared after unescaping), when a member is named "__proto__", when a string holds a lone
 * surrogate, when a number is beyond what a float64 holds (overflow, or a non-zero number that
 * would read as 0), or when the nesting is deeper than `maxDepth`. The sentence names the member.
 * @example parseStrictJson('{"a":1}') // { a: 1 }
 * @example parseStrictJson('{"a":1,"a":2}') // throws: The request body names the member "a" twice in one object.
 */
export function parseStrictJson(input: string | Uint8Array, opts: StrictJsonOptions = {}): unknown {
  const what = opts.what ?? "The request body";
  const field = opts.field ?? "body";
  let text: string;
  if (typeof input === "string") {
    // (bytes decoded above cannot hold one; a string given as it is can)
    if (!input.isWellFormed()) throw new ValidationError(`${what} holds a lone surrogate, which is not accepted.`, field);
    text = input;
  } else {
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

/** An object being read: its member names so far, and the last one (for error sentences). */
interface Frame {
  names: Set<string> | null;
  last: string;
}

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
const inNumber = (c: number): boolean => isDigit(c) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;

/**
 * One pass over a text JSON.parse accepted: a Set of member names per open object, null per
 * open array. String contents are skipped with indexOf, so a long base64 string costs little;
 * only strings with a \u escape are decoded (lone surrogates), and only numbers with an
 * exponent or more than 300 characters (a float64 overflows past 309 digits) are read again.
 */
function checkMembers(text: string, what: string, field: string, maxDepth: number): void {
  const stack: Frame[] = [];
  let expectName = false;
  const n = text.length;
  // Where the next \u escape is: found once per escape, not once per string.
  let nextEscape = text.indexOf("\\u");
  const where = (): string => {
    for (let k = stack.length - 1; k >= 0; k--) if (stack[k]!.last !== "") return ` in the member ${JSON.stringify(shorten(stack[k]!.last))}`;
    return "";
  };
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      const top = stack.length > 0 ? stack[stack.length - 1]! : null;
      if (nextEscape !== -1 && nextEscape < i) nextEscape = text.indexOf("\\u", i);
      const escaped = nextEscape !== -1 && nextEscape < end;
      if (expectName && top?.names) {
        const raw = text.slice(i + 1, end);
        const name = raw.includes("\\") ? (JSON.parse(text.slice(i, end + 1)) as string) : raw;
        if (escaped && !name.isWellFormed())
          throw new ValidationError(`${what} has a member name with a lone surrogate, which is not accepted.`, field);
        if (name === "__proto__")
          throw new ValidationError(`${what} has a member named "__proto__", which is not accepted.`, field);
        if (top.names.has(name))
          throw new ValidationError(`${what} names the member ${JSON.stringify(shorten(name))} twice in one object.`, field);
        top.names.add(name);
        top.last = name;
        expectName = false;
      } else if (escaped && !(JSON.parse(text.slice(i, end + 1)) as string).isWellFormed()) {
        throw new ValidationError(`${what} has a string with a lone surrogate${where()}, which is not accepted.`, field);
      }
      i = end;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (stack.length >= maxDepth)
        throw new ValidationError(`${what} is nested more than ${maxDepth} levels deep.`, field);
      const obj = c === 0x7b;
      stack.push({ names: obj ? new Set() : null, last: "" });
      expectName = obj;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
      expectName = false;
    } else if (c === 0x2c /* , */) {
      expectName = stack.length > 0 && stack[stack.length - 1]!.names !== null;
    } else if (isDigit(c) || c === 0x2d /* - */) {
      let j = i + 1;
      let exp = false;
      while (j < n && inNumber(text.charCodeAt(j))) {
        if ((text.charCodeAt(j) | 0x20) === 0x65) exp = true;
        j++;
      }
      if (exp || j - i > 300) {
        const token = text.slice(i, j);
        const v = Number(token);
        const mantissa = token.split(/[eE]/)[0]!;
        if (!Number.isFinite(v) || (v === 0 && /[1-9]/.test(mantissa)))
          throw new ValidationError(`${what} has the number ${shorten(token)}${where()}, which a float64 cannot hold.`, field);
      }
      i = j - 1;
    }
  }
}

const shorten = (s: string): string => (s.length > 64 ? `${s.slice(0, 64)}...` : s);

