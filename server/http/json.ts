// Strict JSON (I-JSON, RFC 7493) for every JSON text the project reads: one scanner, two rules
// for numbers. JSON.parse keeps the last of two members with one name silently (two readers of
// the same text could see different values), turns a lone surrogate escape into U+FFFD further
// on, reads 1e400 as Infinity (then null) and 9007199254740993 as 9007199254740992. The scanner
// finds those cases in the text itself, in one pass with no recursion and no values built
// (JSON.parse builds them natively, several times faster than a reader here), and says where.
//
// Two faces:
// - parseStrictJson: the servers' request bodies and headers. Also refuses a member named
//   "__proto__" (JavaScript objects and zod drop it silently as it passes through them) and
//   nesting deeper than MAX_JSON_DEPTH; numbers follow the float64 rule by default (refused
//   when a float64 cannot hold them), or the RFC 8785 rule on request. A ValidationError (400)
//   with one sentence naming the member.
// - readJson / parseIJson: the provenance appliance and its offline verifiers, which sign the
//   RFC 8785 form. "__proto__" is an ordinary member there (kept and signed), numbers follow
//   the RFC 8785 rule, and the values are counted instead of the depth. It reports the first
//   problem with its path; the caller chooses the sentence.
import { ValidationError } from "../../lib/errors.js";

/** Deepest nesting of objects and arrays a request body may have, by default. */
export const MAX_JSON_DEPTH = 64;

/**
 * The most values (members and elements, counted by their separators and containers) one
 * text may hold in readJson: a receipt holds at most about 33,000 (claims of 64 KiB), and
 * reading costs time in proportion to the values, so a body of millions of tiny values is
 * refused at once.
 */
export const MAX_JSON_VALUES = 100_000;

/**
 * Which numbers are taken. "float64": any a float64 holds (not 1e400, which overflows, nor
 * 1e-400, a non-zero number that would read as 0). "rfc8785": only those whose RFC 8785 form
 * has the same decimal value as the number as written (not 9007199254740993 either).
 */
export type NumberRule = "float64" | "rfc8785";

/** Where a problem sits: member names and array indexes from the top. */
export type JsonPath = Array<string | number>;

/** The first problem of a text, and where it is. */
export interface JsonProblem {
  kind: "duplicate_name" | "inexact_number" | "lone_surrogate" | "proto_member" | "too_deep";
  /**
   * Path of the object with the repeated, "__proto__" or ill-formed name; of the number; of
   * the string; of the container one level too deep.
   */
  path: JsonPath;
  /** One clause, no capital, no full stop: "the member name "claims" appears twice in one object". */
  message: string;
  /** The member name (duplicate_name, proto_member) or the number as written (inexact_number). */
  subject?: string;
  /** lone_surrogate: in a member name rather than a string value. */
  inName?: boolean;
}

/** What findJsonProblem checks. */
export interface JsonRules {
  numbers: NumberRule;
  /** Whether a member named "__proto__" is a problem. */
  refuseProto: boolean;
  /** Deepest nesting accepted (Infinity: any). */
  maxDepth: number;
  /** Most values accepted (Infinity: any); past it, JsonTooManyValuesError. */
  maxValues: number;
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

/** The text is JSON but not I-JSON (thrown by parseIJson). */
export class JsonProblemError extends Error {
  constructor(readonly problem: JsonProblem) {
    super(problem.message);
    this.name = "JsonProblemError";
  }
}

/**
 * The RFC 8785 rule for numbers, in one place. RFC 8785 writes a number as ECMAScript writes
 * the nearest double; a number is taken only when that form has the same decimal value as the
 * number as written, so a signed receipt never states a different number than was sent.
 */
export const NUMBER_RULE = "a number must keep its exact decimal value in its RFC 8785 form (the shortest ECMAScript form of the nearest double)";

const quote = (s: string): string => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}…` : s);
const shorten = (s: string): string => (s.length > 64 ? `${s.slice(0, 64)}...` : s);

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

/** Why a JSON number text changes value in RFC 8785 form, or null. */
export function numberProblem(text: string): string | null {
  const n = Number(text);
  if (!Number.isFinite(n)) return `the number ${quote(text)} is beyond the range of a double, so RFC 8785 cannot write it`;
  // up to 15 significant digits, integers are exact; the common case costs one test
  if (text.length <= 15 && /^-?\d+$/.test(text)) return null;
  // JSON.stringify writes ECMAScript's form (-0 as 0), which is RFC 8785's
  const canonical = JSON.stringify(n);
  if (decimalKey(text) === decimalKey(canonical)) return null;
  return `the number ${quote(text)} would be signed as ${canonical}; ${NUMBER_RULE}`;
}

/** Why a JSON number text has no float64 (overflow, or non-zero but read as 0), or null. */
function float64Problem(text: string): string | null {
  const v = Number(text);
  const mantissa = text.split(/[eE]/)[0]!;
  if (Number.isFinite(v) && !(v === 0 && /[1-9]/.test(mantissa))) return null;
  return `the number ${quote(text)} is beyond what a float64 holds`;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Index of the quote that ends the string whose opening quote is at `open`. */
function stringEnd(text: string, open: number): number {
  let j = open + 1;
  for (;;) {
    const k = text.indexOf('"', j);
    if (k < 0) throw new JsonSyntaxError(open);
    let slashes = 0;
    for (let b = k - 1; b > open && text.charCodeAt(b) === BACKSLASH; b--) slashes++;
    if (slashes % 2 === 0) return k;
    j = k + 1;
  }
}

/** An open container: member names so far (null in an array), the member or index being read. */
interface Frame {
  names: Set<string> | null;
  key: string;
  index: number;
}

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
const inNumber = (c: number): boolean => isDigit(c) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;

/** The path down to `depth` open containers: member names and array indexes. */
function pathOf(stack: Frame[], depth: number): JsonPath {
  const out: JsonPath = [];
  for (let k = 0; k < depth; k++) out.push(stack[k]!.names === null ? stack[k]!.index : stack[k]!.key);
  return out;
}

/**
 * Counts the values of `text` (a container at its opening, every later element or member at
 * its comma), skipping strings, and throws JsonTooManyValuesError past `maxValues`.
 */
function countValues(text: string, maxValues: number): void {
  let values = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) i = stringEnd(text, i);
    else if ((c === 0x7b || c === 0x5b || c === 0x2c) && ++values > maxValues) throw new JsonTooManyValuesError(maxValues);
  }
}

/**
 * The first problem of `text` under `rules`, or null: one pass, no recursion, no values built.
 * String contents are skipped with indexOf, so a long base64 string costs little; only strings
 * with a \u escape are decoded (lone surrogates). Under the float64 rule only numbers with an
 * exponent or more than 300 characters (a float64 overflows past 309 digits) are read again;
 * under the RFC 8785 rule, every one not written as ECMAScript writes it. With a finite
 * `maxValues`, the values are counted first (whatever the problems), and JsonTooManyValuesError
 * is thrown past the limit. It always ends; on text that is not JSON it may throw or return
 * anything, so JSON.parse must accept the text as well.
 */
export function findJsonProblem(text: string, rules: JsonRules): JsonProblem | null {
  if (rules.maxValues !== Infinity) countValues(text, rules.maxValues);
  try {
    return scan(text, rules.numbers, rules.refuseProto, rules.maxDepth);
  } catch (e) {
    if (e instanceof Found) return e.problem;
    throw e;
  }
}

// The next \u escape is looked for inside the loop, at a string, never before it: Node 20's
// optimising compiler scheduled a loop-invariant text.indexOf("\\u") made before the loop
// into the loop's every turn, so that a long text without escapes cost one search of the rest
// of the text per character (37 s for 2 MB of small values once the function was optimised
// on small texts). test/http/json.test.ts scans large texts after such a warm-up.
function scan(text: string, numbers: NumberRule, refuseProto: boolean, maxDepth: number): null {
  const stack: Frame[] = [];
  let expectName = false;
  const n = text.length;
  // Where the next \u escape is (-2: not looked for yet): found once per escape, not once per string.
  let nextEscape = -2;
  const depthNow = (): number => stack.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      const top = stack.length > 0 ? stack[stack.length - 1]! : null;
      if (nextEscape === -2 || (nextEscape !== -1 && nextEscape < i)) nextEscape = text.indexOf("\\u", i);
      const escaped = nextEscape !== -1 && nextEscape < end;
      if (expectName && top?.names) {
        const raw = text.slice(i + 1, end);
        const name = raw.includes("\\") ? (JSON.parse(text.slice(i, end + 1)) as string) : raw;
        if (escaped && !name.isWellFormed()) throw found("lone_surrogate", stack, depthNow() - 1, "", numbers, true);
        if (refuseProto && name === "__proto__") throw found("proto_member", stack, stack.length - 1, name, numbers);
        if (top.names.has(name)) throw found("duplicate_name", stack, stack.length - 1, name, numbers);
        top.names.add(name);
        top.key = name;
        expectName = false;
      } else if (escaped && !(JSON.parse(text.slice(i, end + 1)) as string).isWellFormed()) {
        throw found("lone_surrogate", stack, stack.length, "", numbers);
      }
      i = end;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (stack.length >= maxDepth) throw found("too_deep", stack, stack.length, String(maxDepth), numbers);
      const obj = c === 0x7b;
      stack.push({ names: obj ? new Set() : null, key: "", index: 0 });
      expectName = obj;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
      expectName = false;
    } else if (c === 0x2c /* , */) {
      const top = stack.length > 0 ? stack[stack.length - 1]! : null;
      if (top !== null && top.names === null) top.index++;
      expectName = top !== null && top.names !== null;
    } else if (isDigit(c) || c === 0x2d /* - */) {
      let j = i + 1;
      let plain = true;
      let exp = false;
      while (j < n && inNumber(text.charCodeAt(j))) {
        const d = text.charCodeAt(j);
        if (!isDigit(d)) {
          plain = false;
          if ((d | 0x20) === 0x65) exp = true;
        }
        j++;
      }
      if (numbers === "float64" ? exp || j - i > 300 : !plain || j - i > 15) {
        const token = text.slice(i, j);
        if (numberWhy(token, numbers) !== null) throw found("inexact_number", stack, stack.length, token, numbers);
      }
      i = j - 1;
    }
  }
  return null;
}

/** Thrown by scan at the first problem (once per refused text) and caught in this file. */
class Found extends Error {
  constructor(readonly problem: JsonProblem) {
    super(problem.message);
  }
}

/** The problem of `kind` at `depth` open containers of `stack`. */
function found(kind: JsonProblem["kind"], stack: Frame[], depth: number, subject: string, numbers: NumberRule, inName = false): Found {
  const path = pathOf(stack, depth);
  switch (kind) {
    case "lone_surrogate":
      return new Found({ kind, path, inName, message: "a string holds a lone surrogate, which has no UTF-8 form" });
    case "proto_member":
      return new Found({ kind, path, subject, message: 'a member is named "__proto__", which is not accepted' });
    case "duplicate_name":
      return new Found({ kind, path, subject, message: `the member name ${quote(subject)} appears twice in one object` });
    case "too_deep":
      return new Found({ kind, path, message: `the text is nested more than ${subject} levels deep` });
    case "inexact_number":
      return new Found({ kind, path, subject, message: numberWhy(subject, numbers)! });
  }
}

/** Why a number token breaks the rule, or null. */
function numberWhy(token: string, numbers: NumberRule): string | null {
  if (numbers === "float64") return float64Problem(token);
  // text as ECMAScript writes it keeps its value
  return String(Number(token)) === token ? null : numberProblem(token);
}

export interface StrictJsonOptions {
  /** What the text is, to start the error sentence: "The request body" by default. */
  what?: string;
  /** Deepest nesting of objects and arrays accepted; MAX_JSON_DEPTH by default. */
  maxDepth?: number;
  /** The `field` of the ValidationError thrown; "body" by default. */
  field?: string;
  /** Which numbers are taken; "float64" by default. */
  numbers?: NumberRule;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Parses a request's JSON text strictly: a ValidationError (HTTP 400) with one sentence when
 * the text is not valid UTF-8 or not valid JSON, when one object names a member twice (at any
 * depth, names compared after unescaping), when a member is named "__proto__", when a string
 * holds a lone surrogate, when a number breaks the rule of `numbers` (by default: beyond what
 * a float64 holds), or when the nesting is deeper than `maxDepth`. The sentence names the member.
 * @example parseStrictJson('{"a":1}') // { a: 1 }
 * @example parseStrictJson('{"a":1,"a":2}') // throws: The request body names the member "a" twice in one object.
 */
export function parseStrictJson(input: string | Uint8Array, opts: StrictJsonOptions = {}): unknown {
  const what = opts.what ?? "The request body";
  const field = opts.field ?? "body";
  const maxDepth = opts.maxDepth ?? MAX_JSON_DEPTH;
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
  const numbers = opts.numbers ?? "float64";
  const problem = findJsonProblem(text, { numbers, refuseProto: true, maxDepth, maxValues: Infinity });
  if (problem !== null) throw new ValidationError(requestSentence(what, problem, numbers, maxDepth), field);
  return value;
}

/** ` in the member "label"`: the innermost member holding the problem, if any. */
function inMember(path: JsonPath): string {
  for (let k = path.length - 1; k >= 0; k--) {
    const s = path[k];
    if (typeof s === "string" && s !== "") return ` in the member ${JSON.stringify(shorten(s))}`;
  }
  return "";
}

/** parseStrictJson's sentence for a problem. */
function requestSentence(what: string, p: JsonProblem, numbers: NumberRule, maxDepth: number): string {
  switch (p.kind) {
    case "duplicate_name":
      return `${what} names the member ${JSON.stringify(shorten(p.subject!))} twice in one object.`;
    case "proto_member":
      return `${what} has a member named "__proto__", which is not accepted.`;
    case "lone_surrogate":
      return p.inName
        ? `${what} has a member name with a lone surrogate, which is not accepted.`
        : `${what} has a string with a lone surrogate${inMember(p.path)}, which is not accepted.`;
    case "inexact_number":
      return numbers === "float64"
        ? `${what} has the number ${shorten(p.subject!)}${inMember(p.path)}, which a float64 cannot hold.`
        : `${what} has the number ${shorten(p.subject!)}${inMember(p.path)}, which does not keep its exact value in its RFC 8785 form.`;
    case "too_deep":
      return `${what} is nested more than ${maxDepth} levels deep.`;
  }
}

const SIGNED_RULES: JsonRules = { numbers: "rfc8785", refuseProto: false, maxDepth: Infinity, maxValues: MAX_JSON_VALUES };

/**
 * Parses JSON text as JSON.parse does (which keeps a member named `__proto__` as an ordinary
 * member), and reports the first I-JSON problem under the RFC 8785 number rule instead of
 * hiding it: a member name twice in one object (the later value is kept), a number whose
 * RFC 8785 form has another value (the nearest double is kept), a lone surrogate. Throws
 * JsonSyntaxError for text that is not JSON and JsonTooManyValuesError past `maxValues`,
 * before building any value.
 */
export function readJson(text: string, maxValues = MAX_JSON_VALUES): { value: unknown; problem: JsonProblem | null } {
  let problem: JsonProblem | null;
  try {
    problem = findJsonProblem(text, maxValues === MAX_JSON_VALUES ? SIGNED_RULES : { ...SIGNED_RULES, maxValues });
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

/** Parses I-JSON text: JsonSyntaxError when not JSON, JsonProblemError on the first I-JSON problem. */
export function parseIJson(text: string): unknown {
  const { value, problem } = readJson(text);
  if (problem) throw new JsonProblemError(problem);
  return value;
}

/** The one sentence for an I-JSON problem of a signed text, the same at issuance and at verification. */
export function problemSentence(what: string, p: JsonProblem): string {
  return `${what} is not I-JSON (RFC 8785 needs it): at ${formatPath(p.path)}, ${p.message}.`;
}
