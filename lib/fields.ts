// The fields of docs/api.md (names and data types): names, dtypes, shapes and metadata, as zod schemas shared by
// the library and the servers, plus the helper that turns a zod failure into a ValidationError.
import { z } from "zod";
import { keyProblem, namespaceProblem, tenantIdProblem } from "./client-names.js";
import { DTYPES, FLOAT_DTYPES, isFloatDtype, itemsize, type Dtype } from "./dtypes.js";
import { ValidationError } from "./errors.js";

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

/**
 * Why `v` cannot be written as JSON, as a sentence's words: JSON.stringify throws a TypeError
 * for a cycle or a BigInt, and a RangeError where the value is nested too deeply for the stack
 * (or its text would exceed the longest string).
 */
export function jsonProblem(what: string, v: unknown): string {
  try {
    JSON.stringify(v);
    return `${what} must be a JSON object`;
  } catch (e) {
    if (!(e instanceof RangeError)) return `${what} must be a JSON object (no cycles, no BigInt)`;
    return /call stack/i.test(e.message) ? `${what} is nested too deeply to be read as JSON` : `${what} is too large to be written as JSON`;
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
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  throw validationErrorFrom(r.error, what);
}

/**
 * Parses an argument of the codec toolkits (tt, pred) with `schema`; a failure is one sentence
 * naming `field` plus the path inside it (e.g. "shape.0"), or `fallback` for the whole value.
 */
export function parseFieldOrThrow<S extends z.ZodType>(schema: S, value: unknown, field: string, fallback = "options"): z.output<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const path = [field, ...issue.path.map(String)].filter((x) => x !== "").join(".") || fallback;
  let msg = issue.message;
  if (issue.code === "invalid_type" && /received undefined/.test(msg)) msg = "is required";
  const sentence = msg.startsWith(path) ? msg : `${path}: ${msg}`;
  throw new ValidationError(sentence.endsWith(".") ? sentence : `${sentence}.`, path);
}

export function validationErrorFrom(err: z.ZodError, what?: string): ValidationError {
  const issue = err.issues[0]!;
  const path = issue.path.map(String).join(".");
  const field = path || what || undefined;
  let msg = issue.message;
  if (issue.code === "unrecognized_keys") msg = `unknown field ${issue.keys.map((k) => `'${k}'`).join(", ")}`;
  else if (issue.code === "invalid_type" && /received undefined/.test(msg)) msg = "is required";
  const sentence = field && !msg.startsWith(field) ? `${field}: ${msg}` : msg;
  return new ValidationError(sentence.endsWith(".") ? sentence : `${sentence}.`, field);
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
