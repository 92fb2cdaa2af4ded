// Request and option schemas of docs/api.md (data plane), shared by the library (options of
// each store method) and the servers (JSON bodies and query strings). Built on lib/fields.ts.
import { z } from "zod";
import { namespaceSchema, keySchema, dtypeSchema, shapeSchema, metadataSchema } from "./fields.js";
import { keyProblem, namespaceProblem } from "./client-names.js";

const B64_BAD = /[^A-Za-z0-9+/=]/;
/**
 * The language of /^[A-Za-z0-9+/]*={0,2}$/ with a length that is a multiple of 4, checked with
 * one unanchored scan for a bad character plus a look at the padding: the anchored regex costs
 * about 0.5 ms per 64 KiB payload, this about a fifth of that.
 */
function isBase64(s: string): boolean {
  if (s.length % 4 !== 0 || B64_BAD.test(s)) return false;
  const i = s.indexOf("=");
  return i === -1 || i === s.length - 1 || (i === s.length - 2 && s.charCodeAt(s.length - 1) === 61);
}
/** Standard base64 text (RFC 4648 section 4, padded). */
export const base64Schema = z.string().refine(isBase64, "must be standard base64 text");

/**
 * Most numbers in the JSON list `vector` of query/vector: each costs tens of bytes once parsed
 * and checked, so a list as long as the body limit allows would take gigabytes; `vector_b64`
 * carries any length at 4 or 8 bytes a value.
 */
export const MAX_JSON_VECTOR = 1 << 20;

export const versionSchema = z.number().int("version must be an integer").min(1, "version must be at least 1").max(Number.MAX_SAFE_INTEGER);
export const ifVersionSchema = z.number().int("if_version must be an integer").min(0, "if_version must be at least 0").max(Number.MAX_SAFE_INTEGER);
export const toleranceSchema = z.number().gt(0, "tolerance must be greater than 0").lt(1, "tolerance must be less than 1");
/** tolerance of a put: 0 asks for an exact (lossless) entry. */
export const putToleranceSchema = z
  .number({ error: "tolerance must be a finite number" })
  .min(0, "tolerance must be at least 0")
  .lt(1, "tolerance must be less than 1");
/** The L-infinity bound of a put: every element within it; 0 asks for an exact (lossless) entry. */
export const maxAbsErrorSchema = z.number({ error: "max_abs_error must be a finite number" }).min(0, "max_abs_error must be at least 0");
/** Which codec a put of floating data uses: `auto` picks the smallest that meets the bounds. */
export const codecSchema = z.enum(["auto", "tt", "pred", "lossless"], { error: "codec must be one of auto, tt, pred, lossless" });
export type CodecChoice = z.infer<typeof codecSchema>;
// The largest rank tt.compress computes (lib/tt.ts MAX_RANK_LIMIT): a larger max_rank passed
// this check and was then refused by the codec (test/tt/limits-agree.test.ts checks they agree).
export const maxRankSchema = z.number().int("max_rank must be an integer").min(1, "max_rank must be at least 1").max(1024, "max_rank must be at most 1024");
export const metricSchema = z.enum(["cosine", "dot", "l2"]);
export type Metric = z.infer<typeof metricSchema>;
export const coreDtypeSchema = z.enum(["float32", "float64"]);
export const floatDtypeSchema = z.enum(["float32", "float64", "float16", "bfloat16"]);
/** A key prefix: the key alphabet, possibly empty, possibly ending mid-segment. */
export const prefixSchema = z
  .string()
  .max(512, "prefix must be at most 512 characters")
  .regex(/^[A-Za-z0-9_\-.:/@=]*$/, "prefix may contain only A-Z a-z 0-9 - _ . : / @ =");
export const filterSchema = z.record(z.string(), z.unknown());
export const sliceSchema = z
  .array(z.tuple([z.number().int().min(0), z.number().int().min(0)]).refine(([a, b]) => a < b, "each slice pair must be [start, stop] with start < stop"))
  .min(1, "slice must have one [start, stop] pair per dimension");

// ---- library options (snake_case, as on the wire) ----

export const putOptionsSchema = z.strictObject({
  shape: shapeSchema.optional(),
  dtype: dtypeSchema.optional(),
  metadata: metadataSchema.optional(),
  tolerance: putToleranceSchema.optional(),
  max_abs_error: maxAbsErrorSchema.optional(),
  codec: codecSchema.optional(),
  max_rank: maxRankSchema.optional(),
  if_version: ifVersionSchema.optional(),
});
export type PutOptions = z.input<typeof putOptionsSchema>;

export const putCoresOptionsSchema = z.strictObject({
  shape: shapeSchema.optional(),
  metadata: metadataSchema.optional(),
  if_version: ifVersionSchema.optional(),
});
export type PutCoresOptions = z.input<typeof putCoresOptionsSchema>;

export const getOptionsSchema = z.strictObject({ version: versionSchema.optional() });
export type GetOptions = z.input<typeof getOptionsSchema>;

export const listOptionsSchema = z.strictObject({
  prefix: prefixSchema.default(""),
  limit: z.number().int("limit must be an integer").min(1, "limit must be at least 1").max(1000, "limit must be at most 1000").default(1000),
  offset: z.number().int("offset must be an integer").min(0, "offset must be at least 0").default(0),
});
export type ListOptions = z.input<typeof listOptionsSchema>;

export const searchOptionsSchema = listOptionsSchema.extend({
  limit: z.number().int("limit must be an integer").min(1, "limit must be at least 1").max(1000, "limit must be at most 1000").default(100),
});
export type SearchOptions = z.input<typeof searchOptionsSchema>;

export const serveOptionsSchema = z.strictObject({
  version: versionSchema.optional(),
  slice: sliceSchema.optional(),
  dtype: floatDtypeSchema.optional(),
});
export type ServeOptions = z.input<typeof serveOptionsSchema>;

export const similarityOptionsSchema = z.strictObject({
  namespace_b: namespaceSchema.optional(),
  version_a: versionSchema.optional(),
  version_b: versionSchema.optional(),
  metric: metricSchema.default("cosine"),
});
export type SimilarityOptions = z.input<typeof similarityOptionsSchema>;

const kSchema = z.number().int("k must be an integer").min(1, "k must be at least 1").max(1000, "k must be at most 1000").default(10);

export const topkOptionsSchema = z.strictObject({
  key: keySchema,
  version: versionSchema.optional(),
  k: kSchema,
  metric: metricSchema.default("cosine"),
  filter: filterSchema.optional(),
  include_self: z.boolean().default(false),
});
export type TopkOptions = z.input<typeof topkOptionsSchema>;

/** query.vector in the library: the vector is a typed array or a list of numbers. */
export const vectorOptionsSchema = z.strictObject({
  vector: z.union([
    // an empty typed array is refused as the empty list is (and as the wire refuses an empty vector_b64)
    z.instanceof(Float32Array).refine((v) => v.length > 0, "vector must not be empty"),
    z.instanceof(Float64Array).refine((v) => v.length > 0, "vector must not be empty"),
    z.array(z.number().refine(Number.isFinite, "vector entries must be finite numbers")).min(1, "vector must not be empty"),
  ]),
  shape: shapeSchema.optional(),
  dtype: coreDtypeSchema.optional(),
  k: kSchema,
  metric: metricSchema.default("cosine"),
  filter: filterSchema.optional(),
});
export type VectorOptions = z.input<typeof vectorOptionsSchema>;

// ---- HTTP bodies ----

/** How the payload of a put is encoded: `pred`, a stream of the prediction codec (docs/api.md, "put of a pred stream"). */
export const encodingSchema = z.enum(["pred"], { error: "encoding must be pred" });
/** An error the client measured on its own data and declares with a pred stream: finite, at least 0. */
const declaredErrorSchema = (name: string) =>
  z
    .number({ error: (iss) => (iss.input === undefined ? `${name} is required` : `${name} must be a finite number`) })
    .refine(Number.isFinite, `${name} must be a finite number`)
    .refine((v) => v >= 0, `${name} must be at least 0`);

/** Options of a put of a given pred stream (Store.putPred, SvcClient.putPred). */
export const putPredOptionsSchema = z.strictObject({
  shape: shapeSchema.optional(),
  dtype: z.enum(["float32", "float64"], { error: "dtype must be float32 or float64 (the dtypes of a pred stream)" }).optional(),
  /** ‖x − x̂‖_F / ‖x‖_F measured by the writer against its own data. */
  relative_error: declaredErrorSchema("relative_error"),
  /** max |x_i − x̂_i| measured by the writer against its own data. */
  max_abs_error: declaredErrorSchema("max_abs_error"),
  metadata: metadataSchema.optional(),
  if_version: ifVersionSchema.optional(),
});
export type PutPredOptions = z.input<typeof putPredOptionsSchema>;

/** The fields a put of a pred stream refuses: the stream carries its own coding and bounds. */
const NOT_WITH_PRED = ["tolerance", "max_abs_error", "codec", "max_rank"] as const;
const DECLARED = ["declared_relative_error", "declared_max_abs_error"] as const;

/**
 * The rules that tie a put's fields to `encoding`: with `encoding` pred, dtype (float32 or
 * float64), shape and both declared errors are required and the compression options refused;
 * without it, the declared errors are refused.
 */
function encodingRules(b: Record<string, unknown>, ctx: z.RefinementCtx): void {
  const issue = (path: string, message: string) => ctx.addIssue({ code: "custom", path: [path], message });
  if (b.encoding !== "pred") {
    for (const f of DECLARED) if (b[f] !== undefined) issue(f, `${f} applies only to a put with encoding pred`);
    return;
  }
  for (const f of NOT_WITH_PRED)
    if (b[f] !== undefined) issue(f, `${f} does not apply to a put with encoding pred, whose stream carries its own coding and bounds`);
  if (b.dtype !== "float32" && b.dtype !== "float64") issue("dtype", "dtype must be float32 or float64 for a put with encoding pred");
  if (b.shape === undefined) issue("shape", "shape is required for a put with encoding pred");
  for (const f of DECLARED) if (b[f] === undefined) issue(f, `${f} is required for a put with encoding pred (the error measured against the original data)`);
}

export const putBodySchema = putOptionsSchema
  .extend({
    namespace: namespaceSchema,
    key: keySchema,
    data_b64: base64Schema,
    encoding: encodingSchema.optional(),
    declared_relative_error: declaredErrorSchema("declared_relative_error").optional(),
    declared_max_abs_error: declaredErrorSchema("declared_max_abs_error").optional(),
  })
  .superRefine(encodingRules);

// Numbers in query strings have one spelling: decimal digits, no sign, no spaces, no leading
// zero (so "1", never "01", "+1", " 1", "0x1" or "1e3"); a tolerance may have a fraction and an
// exponent as in JSON. Text that is not such a number is a 400 naming the parameter.
const queryWhole = (name: string) =>
  z
    .string()
    .regex(/^(0|[1-9][0-9]{0,15})$/, `${name} must be written in decimal digits, without sign, spaces or leading zeros`)
    .transform(Number);
const queryDecimal = (name: string) =>
  z
    .string()
    .max(40, `${name} must be a decimal number`)
    .regex(/^(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$/, `${name} must be a decimal number such as 0.001 or 1e-3`)
    .transform(Number);

/** Query string of the application/octet-stream form of put (values arrive as text). */
export const putQuerySchema = z
  .strictObject({
    namespace: namespaceSchema,
    key: keySchema,
    dtype: dtypeSchema.optional(),
    shape: z
      .string()
      .regex(/^(0|[1-9][0-9]{0,15})(,(0|[1-9][0-9]{0,15}))*$/, "shape must be a comma list of integers in decimal digits")
      .transform((s) => s.split(",").map(Number))
      .pipe(shapeSchema)
      .optional(),
    tolerance: queryDecimal("tolerance").pipe(putToleranceSchema).optional(),
    max_abs_error: queryDecimal("max_abs_error").pipe(maxAbsErrorSchema).optional(),
    codec: codecSchema.optional(),
    max_rank: queryWhole("max_rank").pipe(maxRankSchema).optional(),
    if_version: queryWhole("if_version").pipe(ifVersionSchema).optional(),
    encoding: encodingSchema.optional(),
    declared_relative_error: queryDecimal("declared_relative_error").pipe(declaredErrorSchema("declared_relative_error")).optional(),
    declared_max_abs_error: queryDecimal("declared_max_abs_error").pipe(declaredErrorSchema("declared_max_abs_error")).optional(),
  })
  .superRefine(encodingRules);

export const coreBodySchema = z.strictObject({
  shape: z.tuple([z.number().int().min(1), z.number().int().min(1), z.number().int().min(1)], "core shape must be [r_prev, n_k, r_next]"),
  data_b64: base64Schema,
  dtype: coreDtypeSchema.default("float32"),
});
export const coresListSchema = z.array(coreBodySchema).min(1, "cores must not be empty").max(64, "cores must have at most 64 entries");

export const putCoresItemSchema = putCoresOptionsSchema.extend({ key: keySchema, cores: coresListSchema });
export const putCoresBodySchema = putCoresItemSchema.extend({ namespace: namespaceSchema });
export const putCoresBatchBodySchema = z.strictObject({
  namespace: namespaceSchema,
  items: z.array(z.unknown()).min(1, "items must not be empty").max(1000, "items must have at most 1000 entries"),
});

export const getQuerySchema = z.strictObject({ version: queryWhole("version").pipe(versionSchema).optional() });

export const listQuerySchema = z.strictObject({
  prefix: prefixSchema.optional(),
  limit: queryWhole("limit")
    .pipe(z.number().int("limit must be an integer").min(1, "limit must be at least 1").max(1000, "limit must be at most 1000"))
    .optional(),
  offset: queryWhole("offset")
    .pipe(z.number().int("offset must be an integer").min(0, "offset must be at least 0").max(Number.MAX_SAFE_INTEGER, "offset is too large"))
    .optional(),
});

export const searchBodySchema = z.strictObject({
  namespace: namespaceSchema,
  filter: filterSchema.default({}),
  prefix: prefixSchema.optional(),
  limit: z.number().int("limit must be an integer").min(1, "limit must be at least 1").max(1000, "limit must be at most 1000").optional(),
  offset: z.number().int("offset must be an integer").min(0, "offset must be at least 0").optional(),
});

export const serveBodySchema = serveOptionsSchema.extend({
  namespace: namespaceSchema,
  key: keySchema,
  device: z.enum(["cpu", "gpu"]).default("cpu"),
});

export type ServeBody = z.output<typeof serveBodySchema>;

/** Whether `v` is a plain object (an object literal, JSON.parse's output, or one without a prototype). */
function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

/** The `version` option as given when it is absent or a whole number of at least 1 (else undefined, and `ok` false). */
function plainVersion(v: unknown): { ok: boolean; version?: number } {
  if (v === undefined) return { ok: true };
  return Number.isSafeInteger(v) && (v as number) >= 1 ? { ok: true, version: v as number } : { ok: false };
}

/**
 * The options of a read that names at most a version (get, serve and serveGpu, as the engine
 * passes them on every request), taken without the schema: a plain object with no member but a
 * whole `version` of at least 1. Null for anything else, which goes through the verb's schema
 * and gets its sentence. Each member is read once.
 */
export function plainVersionOptions(opts: unknown): { version?: number } | null {
  if (!isPlainObject(opts)) return null;
  const keys = Object.keys(opts);
  if (keys.length === 0) return {};
  if (keys.length !== 1 || keys[0] !== "version") return null;
  const { ok, version } = plainVersion(opts.version);
  if (!ok) return null;
  return version === undefined ? {} : { version };
}

const SERVE_PLAIN_MEMBERS = new Set(["namespace", "key", "version", "device"]);

/**
 * A serve body with no slice and no dtype (namespace, key, and optionally version and device),
 * checked as serveBodySchema checks it, without the schema; null for anything else (a slice, a
 * dtype, a member of another name, any value the schema would refuse), which goes through
 * serveBodySchema and gets its sentence. Each member is read once.
 */
export function plainServeBody(body: unknown): ServeBody | null {
  if (!isPlainObject(body)) return null;
  for (const k of Object.keys(body)) if (!SERVE_PLAIN_MEMBERS.has(k)) return null;
  const { namespace, key, device } = body;
  if (namespaceProblem(namespace) !== null || keyProblem(key) !== null) return null;
  if (device !== undefined && device !== "cpu" && device !== "gpu") return null;
  const { ok, version } = plainVersion(body.version);
  if (!ok) return null;
  // members in the schema's order
  const rest = { namespace: namespace as string, key: key as string, device: (device ?? "cpu") as ServeBody["device"] };
  return version === undefined ? rest : { version, ...rest };
}

export const similarityBodySchema = similarityOptionsSchema.extend({
  namespace: namespaceSchema,
  a: keySchema,
  b: keySchema,
});

export const topkBodySchema = topkOptionsSchema.extend({ namespace: namespaceSchema });

export const vectorBodySchema = z
  .strictObject({
    namespace: namespaceSchema,
    vector_b64: base64Schema.optional(),
    vector: z
      .array(z.number().refine(Number.isFinite, "vector entries must be finite numbers"))
      .min(1, "vector must not be empty")
      .max(MAX_JSON_VECTOR, `vector must have at most ${MAX_JSON_VECTOR} numbers; send a longer vector as vector_b64`)
      .optional(),
    dtype: coreDtypeSchema.optional(),
    shape: shapeSchema.optional(),
    k: kSchema,
    metric: metricSchema.default("cosine"),
    filter: filterSchema.optional(),
  })
  .refine((b) => (b.vector_b64 === undefined) !== (b.vector === undefined), {
    message: "exactly one of vector_b64 and vector is required",
    path: ["vector"],
  })
  .refine((b) => b.vector_b64 === undefined || (b.dtype !== undefined && b.shape !== undefined), {
    message: "vector_b64 needs dtype and shape",
    path: ["vector_b64"],
  });

/**
 * The Idempotency-Key header of writes: 1 to 255 printable ASCII characters without spaces
 * (a UUID fits), as Stripe's API takes it.
 */
export const idempotencyKeySchema = z
  .string()
  .min(1, "Idempotency-Key must not be empty")
  .max(255, "Idempotency-Key must be at most 255 characters")
  .regex(/^[\x21-\x7e]+$/, "Idempotency-Key must be printable ASCII without spaces");
