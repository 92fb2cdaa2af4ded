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
const SURROGATE = /[\uD800-\uDFFF]/;
const NEEDS_DECODING = /[\\\u0000-\u001f]/;

interface Frame {
  container: Record<string, unknown> | unknown[];
  isArray: boolean;
  key: string;
}

/**
 * Parses JSON text as JSON.parse does (objects and arrays at any depth, without recursion),
 * except that a member named `__proto__` is kept as an ordinary member, and reports the
 * first I-JSON problem instead of hiding it: a member name twice in one object (the later
 * value is kept), a number whose RFC 8785 form has another value (the nearest double is
 * kept), a lone surrogate. Throws JsonSyntaxError for text that is not JSON.
 */
export function readJson(text: string): { value: unknown; problem: JsonProblem | null } {
  let problem: JsonProblem | null = null;
  const stack: Frame[] = [];
  const n = text.length;
  let i = 0;

  const pathHere = (): JsonPath => stack.map((f) => (f.isArray ? (f.container as unknown[]).length : f.key));
  const report = (kind: JsonProblem["kind"], path: JsonPath, message: string): void => {
    if (problem === null) problem = { kind, path, message };
  };
  const ws = (): void => {
    for (; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return;
    }
  };
  const syntax = (): never => {
    throw new JsonSyntaxError(i);
  };
  const readString = (): string => {
    // i is at the opening quote
    const start = i + 1;
    let end = text.indexOf('"', start);
    if (end < 0) syntax();
    let s = text.slice(start, end);
    if (NEEDS_DECODING.test(s)) {
      // escapes: find the real closing quote (one not preceded by an odd run of backslashes)
      for (;;) {
        let k = end - 1;
        while (k >= start && text.charCodeAt(k) === 0x5c) k--;
        if ((end - 1 - k) % 2 === 0) break;
        end = text.indexOf('"', end + 1);
        if (end < 0) syntax();
      }
      try {
        s = JSON.parse(text.slice(i, end + 1)) as string; // validates escapes and control characters
      } catch {
        syntax();
      }
    }
    i = end + 1;
    if (SURROGATE.test(s) && LONE_SURROGATE.test(s)) report("lone_surrogate", pathHere(), "a string holds a lone surrogate, which has no UTF-8 form");
    return s;
  };
  const readKey = (frame: Frame): void => {
    ws();
    if (text.charCodeAt(i) !== 0x22) syntax();
    const key = readString();
    if (Object.hasOwn(frame.container, key)) {
      report("duplicate_name", stack.slice(0, -1).map((f) => (f.isArray ? (f.container as unknown[]).length : f.key)),
        `the member name ${quote(key)} appears twice in one object`);
    }
    frame.key = key;
    ws();
    if (text.charCodeAt(i) !== 0x3a) syntax();
    i++;
  };

  for (;;) {
    // a value starts here
    ws();
    const c = text.charCodeAt(i);
    let value: unknown;
    if (c === 0x7b) {
      i++;
      ws();
      const obj: Record<string, unknown> = {};
      if (text.charCodeAt(i) === 0x7d) {
        i++;
        value = obj;
      } else {
        const frame: Frame = { container: obj, isArray: false, key: "" };
        stack.push(frame);
        readKey(frame);
        continue;
      }
    } else if (c === 0x5b) {
      i++;
      ws();
      const arr: unknown[] = [];
      if (text.charCodeAt(i) === 0x5d) {
        i++;
        value = arr;
      } else {
        stack.push({ container: arr, isArray: true, key: "" });
        continue;
      }
    } else if (c === 0x22) {
      value = readString();
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      // -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?, scanned by hand (a sticky regex costs more)
      const start = i;
      let plain = true; // digits only so far
      if (c === 0x2d) i++;
      let d = text.charCodeAt(i);
      if (d === 0x30) i++;
      else if (d >= 0x31 && d <= 0x39) while (i < n && (d = text.charCodeAt(i)) >= 0x30 && d <= 0x39) i++;
      else syntax();
      if (text.charCodeAt(i) === 0x2e) {
        plain = false;
        const f = ++i;
        while (i < n && (d = text.charCodeAt(i)) >= 0x30 && d <= 0x39) i++;
        if (i === f) syntax();
      }
      d = text.charCodeAt(i);
      if (d === 0x65 || d === 0x45) {
        plain = false;
        d = text.charCodeAt(++i);
        if (d === 0x2b || d === 0x2d) i++;
        const e = i;
        while (i < n && (d = text.charCodeAt(i)) >= 0x30 && d <= 0x39) i++;
        if (i === e) syntax();
      }
      const t = text.slice(start, i);
      const num = Number(t);
      value = num;
      // integers of up to 15 digits, and text as ECMAScript writes it, keep their value
      if (!(plain && i - start <= 15) && String(num) !== t) {
        const why = numberProblem(t);
        if (why) report("inexact_number", pathHere(), why);
      }
    } else if (text.startsWith("true", i)) {
      i += 4;
      value = true;
    } else if (text.startsWith("false", i)) {
      i += 5;
      value = false;
    } else if (text.startsWith("null", i)) {
      i += 4;
      value = null;
    } else {
      syntax();
    }
    // the value is complete: hand it to its container, closing containers as they end
    for (;;) {
      const top = stack[stack.length - 1];
      if (top === undefined) {
        ws();
        if (i !== n) syntax();
        return { value, problem };
      }
      if (top.isArray) (top.container as unknown[]).push(value);
      else if (top.key === "__proto__") {
        // a data member like any other, not the prototype (JSON.parse does the same)
        Object.defineProperty(top.container, "__proto__", { value, enumerable: true, writable: true, configurable: true });
      } else (top.container as Record<string, unknown>)[top.key] = value;
      ws();
      const d = text.charCodeAt(i);
      if (d === 0x2c) {
        i++;
        if (!top.isArray) readKey(top);
        break;
      }
      if (d === (top.isArray ? 0x5d : 0x7d)) {
        i++;
        value = top.container;
        stack.pop();
        continue;
      }
      syntax();
    }
  }
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
