// The fields of docs/api.md (names and data types): names, dtypes, shapes and metadata, as zod schemas shared by
// the library and the servers, plus the helper that turns a zod failure into a ValidationError.
import { z } from "zod";
import { keyProblem, namespaceProblem, tenantIdProblem } from "./client-names.js";
import { DTYPES, FLOAT_DTYPES, isFloatDtype, itemsize, type Dtype } from "./dtypes.js";
import { ValidationError } from "./errors.js";
import { jsonProblem } from "./json-problem.js";

export const namespaceSchema = z
  .string()
  .min(1, "namespace must not be empty")
  .max(255, "namespace must be at most 255 characters")
  .regex(/^[A-Za-z0-9_-]+$/, "namespace may contain only A-Z, a-z, 0-9, - and _");

export const keySchema = z
  .string()
  .min(1, "key must not be empty")
  .max(512, "key must be at most 512 characters")
  .regex(/^[A-Za-z0-9_\-.:/@=]+$/, "key may contain only A-Z a-z 0-9 - _ . : / @ =")
  .refine((k) => k.split("/").every((s) => s !== "" && s !== "." && s !== ".."), "key must not have an empty, '.' or '..' path segment");

export const tenantIdSchema = z
  .string()
  .min(1, "tenant_id must not be empty")
  .max(64, "tenant_id must be at most 64 characters")
  .regex(/^[a-z0-9_-]+$/, "tenant_id may contain only a-z, 0-9, - and _");

// The request paths check names on every request: the quick checks of lib/client-names.ts (no
// zod; each accepts exactly what its schema accepts) first, the schema for a refusal's sentence.
/** `v` as a namespace; a ValidationError naming `what` when namespaceSchema refuses it. */
export const namespaceOf = (v: unknown, what = "namespace"): string => (namespaceProblem(v) === null ? (v as string) : parseOrThrow(namespaceSchema, v, what));
/** `v` as a key; a ValidationError naming `what` when keySchema refuses it. */
export const keyOf = (v: unknown, what = "key"): string => (keyProblem(v) === null ? (v as string) : parseOrThrow(keySchema, v, what));
/** Whether tenantIdSchema accepts `v`. */
export const isTenantId = (v: unknown): v is string => tenantIdProblem(v) === null;

export { DTYPES, FLOAT_DTYPES, isFloatDtype, itemsize, type Dtype };
export const dtypeSchema = z.enum(DTYPES);

export const shapeSchema = z
  .array(
    z
      .number()
      .int("shape entries must be integers")
      .min(1, "shape entries must be at least 1")
      .max(2 ** 31 - 1),
  )
  .min(1, "shape must have at least one dimension")
  .max(32, "shape must have at most 32 dimensions");

export const METADATA_MAX_BYTES = 64 * 1024;
export const METADATA_MAX_DEPTH = 8;

function depthOf(v: unknown): number {
  if (v === null || typeof v !== "object") return 0;
  let d = 0;
  for (const x of Object.values(v as object)) d = Math.max(d, depthOf(x));
  return d + 1;
}

/** An own member named "__proto__" at any depth: objects and zod would drop it silently, so it is refused. */
function hasProtoMember(v: unknown, depth = 0): boolean {
  if (v === null || typeof v !== "object" || depth > 64) return false;
  if (!Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, "__proto__")) return true;
  return Object.values(v as object).some((x) => hasProtoMember(x, depth + 1));
}

function jsonable(v: unknown): boolean {
  try {
    JSON.stringify(v);
    return true;
  } catch {
    return false;
  }
}

export const metadataSchema = z
  .custom<Record<string, unknown>>((m) => !hasProtoMember(m), 'metadata must not have a member named "__proto__"')
  .pipe(z.record(z.string(), z.unknown()))
  .refine(jsonable, { error: (iss) => jsonProblem("metadata", iss.input), abort: true })
  .refine((m) => Buffer.byteLength(JSON.stringify(m)) <= METADATA_MAX_BYTES, "metadata must be at most 64 KiB serialised")
  .refine((m) => depthOf(m) <= METADATA_MAX_DEPTH, "metadata must be nested at most 8 levels deep")
  // kept as its JSON form (NaN -> null, a Date -> its ISO string, undefined fields dropped), as
  // it travels over HTTP: the embedded store and createClient then store the same metadata
  .transform((m) => JSON.parse(JSON.stringify(m)) as Record<string, unknown>);

/**
 * Parses `value` with `schema`; on failure throws a ValidationError whose message is one
 * sentence naming the first bad field (`what` prefixes the path, e.g. "body").
 */
export function parseOrThrow<S extends z.ZodType>(schema: S, value: unknown, what?: string): z.output<S> {
  const r = schema.safeParse(value, { reportInput: true });
  if (r.success) return r.data;
  throw validationErrorFrom(r.error, what, value);
}

/**
 * Parses an argument of the codec toolkits (tt, pred) with `schema`; a failure is one sentence
 * naming `field` plus the path inside it (e.g. "shape.0"), or `fallback` for the whole value.
 */
export function parseFieldOrThrow<S extends z.ZodType>(schema: S, value: unknown, field: string, fallback = "options"): z.output<S> {
  const r = schema.safeParse(value, { reportInput: true });
  if (r.success) return r.data;
  const issue = firstIssue(r.error);
  const path = [field, ...issue.path.map(String)].filter((x) => x !== "").join(".") || fallback;
  throw new ValidationError(sentenceOf(issue, path, value), path);
}

/**
 * The ValidationError of a zod failure: one sentence about its first issue, naming the field
 * (the issue's path, else `what`). `root` is the value parsed, where known: a prototype-less
 * object is a query string (node's querystring and server/http/query.ts make them), where an
 * array in place of a single value is a parameter given more than once.
 */
export function validationErrorFrom(err: z.ZodError, what?: string, root?: unknown): ValidationError {
  const issue = firstIssue(err);
  const path = issue.path.map(String).join(".");
  const field = path || what || undefined;
  return new ValidationError(sentenceOf(issue, field, root), field);
}

type Issue = z.core.$ZodIssue;

/**
 * The issue a sentence is made of: the first, except that a number beyond the safe integers
 * fails `.int()` (origin "int") before the schema's own bound, whose words are the better ones.
 */
function firstIssue(err: z.ZodError): Issue {
  const first = err.issues[0]!;
  if ((first.code !== "too_big" && first.code !== "too_small") || first.origin !== "int") return first;
  const same = (i: Issue) => i.code === first.code && i.origin === "number" && i.path.join("\0") === first.path.join("\0");
  return err.issues.find(same) ?? first;
}

// zod's own English (its en locale): any message a schema did not set itself starts so
const ZOD_WORDING = /^(Invalid\b|Too big: |Too small: |Unrecognized key)/;

const TYPE_WORDS: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "an integer",
  bigint: "a BigInt",
  boolean: "true or false",
  array: "a list",
  tuple: "a list",
  object: "an object",
  record: "an object",
  map: "a Map",
  set: "a Set",
  date: "a date",
  null: "null",
  symbol: "a symbol",
  function: "a function",
  file: "a file",
};

const FORMAT_WORDS: Record<string, string> = {
  email: "an email address",
  url: "a URL",
  uuid: "a UUID",
  guid: "a GUID",
  datetime: "an ISO 8601 date and time",
  date: "an ISO 8601 date",
  time: "an ISO 8601 time",
  duration: "an ISO 8601 duration",
  ipv4: "an IPv4 address",
  ipv6: "an IPv6 address",
  base64: "base64 text",
  base64url: "base64url text",
  json_string: "JSON text",
};

/** What kind of value `v` is, in words: "a list", "NaN", "a string". */
function kindOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "a list";
  if (typeof v === "number") return Number.isNaN(v) ? "NaN" : Number.isFinite(v) ? "a number" : String(v);
  if (typeof v === "object") return "an object";
  return TYPE_WORDS[typeof v] ?? typeof v;
}

const plainValue = (v: unknown): string => (typeof v === "string" ? v : typeof v === "bigint" ? `${v}` : (JSON.stringify(v) ?? String(v)));

/** The bound of a too_big / too_small issue in words ("at most 2147483647", "at least 1 character"). */
function boundWords(issue: Extract<Issue, { code: "too_big" | "too_small" }>): string {
  const big = issue.code === "too_big";
  const bound = big ? (issue as { maximum: number | bigint }).maximum : (issue as { minimum: number | bigint }).minimum;
  const n = typeof bound === "bigint" ? `${bound}` : String(bound);
  const exact = (issue as { exact?: boolean }).exact === true;
  const unit = (word: string) => ` ${word}${Number(bound) === 1 ? "" : "s"}`;
  const count =
    issue.origin === "string"
      ? unit("character")
      : issue.origin === "file"
        ? unit("byte")
        : issue.origin === "number" || issue.origin === "int" || issue.origin === "bigint" || issue.origin === "date"
          ? ""
          : unit("entry").replace(/entrys$/, "entries");
  if (count !== "") {
    if (exact) return `must have exactly ${n}${count}`;
    if (!big && Number(bound) === 1 && issue.inclusive !== false) return "must not be empty";
    return `must have ${big ? (issue.inclusive === false ? "fewer than" : "at most") : issue.inclusive === false ? "more than" : "at least"} ${n}${count}`;
  }
  if (issue.origin === "date") return `must be ${big ? "on or before" : "on or after"} ${new Date(Number(bound)).toISOString()}`;
  return `must be ${big ? (issue.inclusive === false ? "less than" : "at most") : issue.inclusive === false ? "greater than" : "at least"} ${n}`;
}

/**
 * The words after the field for an issue in zod's own wording (or a range issue of `.int()`,
 * whose message is about being an integer), or null where the schema's message stands.
 */
function productWords(issue: Issue, root: unknown): string | null {
  const input = (issue as { input?: unknown }).input;
  const own = !ZOD_WORDING.test(issue.message);
  switch (issue.code) {
    case "too_big":
    case "too_small":
      return own && issue.origin !== "int" ? null : boundWords(issue);
    case "invalid_type": {
      if (own) return null;
      const received = "input" in issue ? kindOf(input) : (/received (\w+)$/.exec(issue.message)?.[1] ?? "");
      if (received === "undefined" || ("input" in issue && input === undefined)) return "is required";
      if (Array.isArray(input) && issue.expected !== "array" && root !== null && typeof root === "object" && Object.getPrototypeOf(root) === null)
        return "must be given once";
      const want = TYPE_WORDS[issue.expected] ?? `of type ${issue.expected}`;
      if (received === "NaN" || received === "null") return `must be ${want}, not ${received}`;
      if (received === "Infinity" || received === "-Infinity")
        return issue.expected === "number" || issue.expected === "int" ? "must be a finite number" : `must be ${want}, not ${received}`;
      return `must be ${want}`;
    }
    case "invalid_value":
      if (own) return null;
      return issue.values.length === 1 ? `must be ${plainValue(issue.values[0])}` : `must be one of ${issue.values.map(plainValue).join(", ")}`;
    case "invalid_format": {
      if (own) return null;
      const f = issue as { format: string; pattern?: string; prefix?: string; suffix?: string; includes?: string };
      if (f.format === "starts_with") return `must start with "${f.prefix}"`;
      if (f.format === "ends_with") return `must end with "${f.suffix}"`;
      if (f.format === "includes") return `must include "${f.includes}"`;
      if (f.format === "regex") return `must match the pattern ${f.pattern}`;
      return `must be ${FORMAT_WORDS[f.format] ?? `in the ${f.format} format`}`;
    }
    case "not_multiple_of":
      return own ? null : `must be a multiple of ${issue.divisor}`;
    case "unrecognized_keys":
      return null;
    case "invalid_key":
      return own ? null : "is not an allowed key";
    case "invalid_element":
      return own ? null : `has an entry that is not allowed`;
    default:
      return own ? null : "is not valid";
  }
}

const isDefaultCustom = (i: Issue): boolean => i.code === "custom" && ZOD_WORDING.test(i.message);

/**
 * The sentence of a union none of whose options took the value, in zod's wording: the issue of
 * the option that got furthest into the value (a list entry's), else the types the options
 * take ("vector must be a list."), else the one option's own refusal.
 */
function unionSentence(issue: Extract<Issue, { code: "invalid_union" }>, field: string | undefined, root: unknown): string {
  const firsts = issue.errors.map((e) => e[0]).filter((i): i is Issue => i !== undefined);
  const deepest = firsts.reduce<Issue | undefined>((a, b) => (a === undefined || b.path.length > a.path.length ? b : a), undefined);
  if (deepest && deepest.path.length > 0) return sentenceOf(deepest, [field ?? "", ...deepest.path.map(String)].filter((x) => x !== "").join("."), root);
  const types = [...new Set(firsts.flatMap((i) => (i.code === "invalid_type" ? [TYPE_WORDS[i.expected] ?? `of type ${i.expected}`] : [])))];
  if (types.length > 0) return `${field ?? "The value"} must be ${types.join(" or ")}.`;
  const own = firsts.find((i) => !isDefaultCustom(i));
  return own ? sentenceOf(own, field, root) : `${field ?? "The value"} is not valid.`;
}

/** One sentence for `issue` about `field` (undefined: the value as a whole). */
function sentenceOf(issue: Issue, field: string | undefined, root: unknown): string {
  if (issue.code === "invalid_union" && ZOD_WORDING.test(issue.message)) return unionSentence(issue, field, root);
  let msg: string;
  if (issue.code === "unrecognized_keys") msg = `unknown field ${issue.keys.map((k) => `'${k}'`).join(", ")}`;
  else {
    const words = productWords(issue, root) ?? (issue.message === "is required" ? "is required" : null);
    if (words !== null) return `${field ?? "The value"} ${words}.`;
    msg = issue.message;
  }
  const sentence = field && !msg.startsWith(field) ? `${field}: ${msg}` : msg;
  return sentence.endsWith(".") ? sentence : `${sentence}.`;
}

/**
 * The natural dtype of put data, as the store decides it: Buffer, ArrayBuffer and DataView are
 * raw bytes, each typed array its element type. Shared by the store and the HTTP client.
 */
export function naturalDtype(data: ArrayBuffer | ArrayBufferView): Dtype | "raw" {
  if (data instanceof ArrayBuffer || Buffer.isBuffer(data) || data instanceof DataView) return "raw";
  if (data instanceof Float32Array) return "float32";
  if (data instanceof Float64Array) return "float64";
  if (data instanceof Int8Array) return "int8";
  if (data instanceof Uint8Array || data instanceof Uint8ClampedArray) return "uint8";
  if (data instanceof Int16Array) return "int16";
  if (data instanceof Uint16Array) return "uint16";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof Uint32Array) return "uint32";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof BigUint64Array) return "uint64";
  throw new ValidationError("data must be a typed array, a Buffer or an ArrayBuffer.", "data");
}
