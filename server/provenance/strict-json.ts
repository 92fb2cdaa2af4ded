// JSON text as RFC 8785 needs it: I-JSON (RFC 7493). JSON.parse keeps the last of two
// members with one name, turns 9007199254740993 into 9007199254740992 and accepts lone
// surrogate escapes, so a signed receipt could read one way to this code and another way
// to a reader that keeps the first member or parses numbers exactly. This reader finds those
// cases in the text itself. It has no dependencies and opens nothing: the offline verifiers
// use it too.

/** Where a problem sits: member names and array indexes from the top. */
export type JsonPath = Array<string | number>;

/** The first I-JSON problem of a text, and where it is. */
export interface JsonProblem {
  kind: "duplicate_name" | "inexact_number" | "lone_surrogate";
  /** Path of the object with the repeated name, of the number, or of the string. */
  path: JsonPath;
  /** One clause, no capital, no full stop: "the member name "claims" appears twice". */
  message: string;
}

/** The text is not JSON at all. */
export class JsonSyntaxError extends Error {
  constructor(readonly offset: number) {
    super(`not valid JSON (at character ${offset})`);
    this.name = "JsonSyntaxError";
  }
}

/** The text holds more values than the reader takes (checked before any value is built). */
export class JsonTooManyValuesError extends Error {
  constructor(readonly limit: number) {
    super(`more than ${limit.toLocaleString("en-US")} JSON values`);
    this.name = "JsonTooManyValuesError";
  }
}

/**
 * The most values (members and elements, counted by their separators and containers) one
 * text may hold: a receipt holds at most about 33,000 (claims of 64 KiB), and reading costs
 * time in proportion to the values, so a body of millions of tiny values is refused at once.
 */
export const MAX_JSON_VALUES = 100_000;

/** The text is JSON but not I-JSON (thrown by parseStrictJson). */
export class JsonProblemError extends Error {
  constructor(readonly problem: JsonProblem) {
    super(problem.message);
    this.name = "JsonProblemError";
  }
}

/**
 * The rule for numbers, in one place. RFC 8785 writes a number as ECMAScript writes the
 * nearest double; a number is taken only when that form has the same decimal value as the
 * number as written, so a signed receipt never states a different number than was sent.
 */
export const NUMBER_RULE =
  "a number must keep its exact decimal value in its RFC 8785 form (the shortest ECMAScript form of the nearest double)";

const quote = (s: string): string => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}…` : s);

/** `receipt.claims[3].x`, at most 8 segments shown. */
export function formatPath(path: JsonPath): string {
  if (path.length === 0) return "the top level";
  const segs = path.length > 8 ? [...path.slice(0, 4), "…", ...path.slice(-3)] : path;
  let out = "";
  for (const s of segs) {
    if (typeof s === "number") out += `[${s}]`;
    else if (s === "…") out += ".…";
    else out += /^[A-Za-z_][A-Za-z0-9_]*$/.test(s) ? (out ? `.${s}` : s) : `[${quote(s)}]`;
  }
  return out;
}

/** The decimal value of a JSON number text as sign, significant digits and exponent. */
function decimalKey(text: string): string {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!m) return text;
  const frac = m[3] ?? "";
  let digits = (m[2]! + frac).replace(/^0+/, "");
  if (digits === "") return "0"; // every zero, -0 included, is zero
  let exp = Number(m[4] ?? "0") - frac.length;
  const tz = /0+$/.exec(digits);
  if (tz) {
    exp += tz[0].length;
    digits = digits.slice(0, digits.length - tz[0].length);
  }
  return `${m[1]}${digits}e${exp}`;
}

/** The RFC 8785 text of a finite number (JSON.stringify writes ECMAScript's form, -0 as 0). */
const jcsNumber = (n: number): string => JSON.stringify(n);

/** Why a JSON number text changes value in RFC 8785 form, or null. */
export function numberProblem(text: string): string | null {
  const n = Number(text);
  if (!Number.isFinite(n)) return `the number ${quote(text)} is beyond the range of a double, so RFC 8785 cannot write it`;
  // up to 15 significant digits, integers are exact; the common case costs one test
  if (text.length <= 15 && /^-?\d+$/.test(text)) return null;
  const canonical = jcsNumber(n);
  if (decimalKey(text) === decimalKey(canonical)) return null;
  return `the number ${quote(text)} would be signed as ${canonical}; ${NUMBER_RULE}`;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

interface Frame {
  isArray: boolean;
  /** Array: elements so far. */
  index: number;
  /** Object: the member being read. */
  key: string;
  /** Object: member names so far (a Set once there are many). */
  names: string[] | Set<string>;
}

/**
 * Parses JSON text as JSON.parse does (which keeps a member named `__proto__` as an ordinary
 * member), and reports the first I-JSON problem instead of hiding it: a member name twice in
 * one object (the later value is kept), a number whose RFC 8785 form has another value (the
 * nearest double is kept), a lone surrogate. Throws JsonSyntaxError for text that is not JSON
 * and JsonTooManyValuesError past `maxValues`, before building any value.
 */
export function readJson(text: string, maxValues = MAX_JSON_VALUES): { value: unknown; problem: JsonProblem | null } {
  let problem: JsonProblem | null;
  try {
    problem = findProblem(text, maxValues);
  } catch (e) {
    if (e instanceof JsonTooManyValuesError) throw e;
    problem = null; // text the scan cannot follow is not JSON: JSON.parse says where
  }
  try {
    return { value: JSON.parse(text), problem };
  } catch (e) {
    const at = /position (\d+)/.exec((e as Error).message)?.[1];
    throw new JsonSyntaxError(at === undefined ? 0 : Number(at));
  }
}

/**
 * The first I-JSON problem of `text`: one pass, no recursion, no values built (JSON.parse
 * builds them natively, several times faster than a reader here). It counts the values as it
 * goes and throws JsonTooManyValuesError past `maxValues`; on text that is not JSON it may
 * throw anything or return anything, so JSON.parse must accept the text as well.
 */
export function findProblem(text: string, maxValues = MAX_JSON_VALUES): JsonProblem | null {
  const n = text.length;
  const stack: Frame[] = [];
  const pathTo = (depth: number): JsonPath =>
    stack.slice(0, depth).map((f) => (f.isArray ? f.index : f.key));
  let i = 0;
  let escaped = false;
  let values = 0; // a container counts at its opening, every later element or member at its comma
  let problem: JsonProblem | null = null;
  const found = (p: JsonProblem): void => {
    problem ??= p;
  };
  // the string starting at the quote at i, decoded; i ends after its closing quote, and
  // `escaped` says whether it held an escape
  const readString = (): string => {
    const start = i + 1;
    let end = text.indexOf('"', start);
    if (end < 0) throw new JsonSyntaxError(i);
    escaped = true;
    if (text.charCodeAt(end - 1) !== 0x5c) {
      // no backslash right before the quote: the common case holds no escape at all
      const raw = text.slice(start, end);
      if (raw.indexOf("\\") < 0) {
        i = end + 1;
        escaped = false;
        return raw;
      }
    }
    for (;;) {
      let k = end - 1;
      while (text.charCodeAt(k) === 0x5c) k--;
      if ((end - 1 - k) % 2 === 0) break;
      end = text.indexOf('"', end + 1);
      if (end < 0) throw new JsonSyntaxError(i);
    }
    const s = JSON.parse(text.slice(i, end + 1)) as string;
    i = end + 1;
    return s;
  };
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09 || c === 0x3a) {
      i++;
    } else if (c === 0x7b || c === 0x5b) {
      if (++values > maxValues) throw new JsonTooManyValuesError(maxValues);
      stack.push({ isArray: c === 0x5b, index: 0, key: "", names: [] });
      i++;
    } else if (c === 0x7d || c === 0x5d) {
      stack.pop();
      i++;
    } else if (c === 0x2c) {
      if (++values > maxValues) throw new JsonTooManyValuesError(maxValues);
      const top = stack[stack.length - 1]!;
      if (top.isArray) top.index++;
      i++;
    } else if (c === 0x22) {
      const top = stack[stack.length - 1];
      // a member name when in an object and no name has been read since the last comma
      const isName = top !== undefined && !top.isArray && expectingName(text, i);
      const s = readString();
      if (problem === null && escaped && LONE_SURROGATE.test(s)) {
        found({ kind: "lone_surrogate", path: isName ? pathTo(stack.length - 1) : pathTo(stack.length), message: "a string holds a lone surrogate, which has no UTF-8 form" });
      }
      if (isName) {
        const names = top!.names;
        const seen = Array.isArray(names) ? names.includes(s) : names.has(s);
        if (seen) found({ kind: "duplicate_name", path: pathTo(stack.length - 1), message: `the member name ${quote(s)} appears twice in one object` });
        if (Array.isArray(names)) {
          names.push(s);
          if (names.length > 16) top!.names = new Set(names);
        } else names.add(s);
        top!.key = s;
      }
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      const start = i;
      let plain = true;
      for (i++; i < n; i++) {
        const d = text.charCodeAt(i);
        if (d >= 0x30 && d <= 0x39) continue;
        if (d === 0x2e || d === 0x65 || d === 0x45 || d === 0x2b || d === 0x2d) plain = false;
        else break;
      }
      // integers of up to 15 digits, and text as ECMAScript writes it, keep their value
      if (problem === null && !(plain && i - start <= 15)) {
        const t = text.slice(start, i);
        if (String(Number(t)) !== t) {
          const why = numberProblem(t);
          if (why) found({ kind: "inexact_number", path: pathTo(stack.length), message: why });
        }
      }
    } else {
      i++; // true, false, null: letters only
    }
  }
  return problem;
}

/** Whether the quote at `i` opens a member name: the previous token is `{` or `,`. */
function expectingName(text: string, i: number): boolean {
  for (let k = i - 1; k >= 0; k--) {
    const c = text.charCodeAt(k);
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue;
    return c === 0x7b || c === 0x2c;
  }
  return false;
}

/** Parses I-JSON text: JsonSyntaxError when not JSON, JsonProblemError on the first I-JSON problem. */
export function parseStrictJson(text: string): unknown {
  const { value, problem } = readJson(text);
  if (problem) throw new JsonProblemError(problem);
  return value;
}

/** The one sentence for an I-JSON problem, the same at issuance and at verification. */
export function problemSentence(what: string, p: JsonProblem): string {
  return `${what} is not I-JSON (RFC 8785 needs it): at ${formatPath(p.path)}, ${p.message}.`;
}
