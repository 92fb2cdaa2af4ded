// What a server does with a JSON request body before its route runs, in one place: parse it
// strictly (server/http/json.ts), check it against the route's schema (lib/schemas.ts) and, on
// the engine, decode its base64 payloads. Pure functions of the body's bytes, so they run the
// same on the event loop (small bodies) and in a worker thread (large ones, server/http/offload.ts).
import { createHash } from "node:crypto";
import type { z } from "zod";
import { ValidationError } from "../../lib/errors.js";
import { parseOrThrow, validationErrorFrom } from "../../lib/fields.js";
import { putBodySchema, putCoresBatchBodySchema, putCoresBodySchema, putCoresItemSchema, vectorBodySchema } from "../../lib/schemas.js";
import { validateJsonBody } from "./routes.js";
import type { Operation } from "./operations.js";
import { parseStrictJson } from "./json.js";

/** A core of put_cores with its payload decoded. */
export interface PreparedCore {
  shape: [number, number, number];
  data: Uint8Array;
  dtype: "float32" | "float64";
}

type PutBody = z.output<typeof putBodySchema>;
type CoresItem = z.output<typeof putCoresItemSchema>;
type VectorBody = z.output<typeof vectorBodySchema>;

/** The JSON put with its payload decoded (data_b64 replaced by data). */
export type PreparedPut = Omit<PutBody, "data_b64"> & { data: Uint8Array };
/** One put_cores item (or the put_cores body without its namespace) with decoded cores. */
export type PreparedCoresItem = Omit<CoresItem, "cores"> & { cores: PreparedCore[] };
export type PreparedPutCores = PreparedCoresItem & { namespace: string };
export interface PreparedPutCoresBatch {
  namespace: string;
  items: PreparedCoresItem[];
}
/**
 * query/vector with its vector as the typed array the store builds from it: vector_b64 decoded
 * (float64 with dtype float64, float32 otherwise), a list of numbers as float32 with dtype
 * float32 and float64 otherwise.
 */
export type PreparedVector = Omit<VectorBody, "vector_b64" | "vector"> & { vector: Float32Array<ArrayBuffer> | Float64Array<ArrayBuffer> };

/** Bytes of a base64 text that own their memory (a large decoded payload is then moved, not copied, between threads). */
function decode64(s: string): Uint8Array<ArrayBuffer> {
  const b = Buffer.from(s, "base64");
  return b.byteOffset === 0 && b.buffer instanceof ArrayBuffer && b.byteLength === b.buffer.byteLength ? (b as Uint8Array<ArrayBuffer>) : new Uint8Array(b);
}

const decodeCores = (cores: CoresItem["cores"]): PreparedCore[] => cores.map((c) => ({ shape: c.shape, data: decode64(c.data_b64), dtype: c.dtype }));

function prepareVector(body: unknown): PreparedVector {
  const { vector_b64, vector, ...rest } = parseOrThrow(vectorBodySchema, body, "body");
  if (vector_b64 !== undefined) {
    const width = rest.dtype === "float64" ? 8 : 4;
    const bytes = decode64(vector_b64);
    if (bytes.byteLength === 0 || bytes.byteLength % width !== 0)
      throw new ValidationError(`vector_b64 has ${bytes.byteLength} bytes, not a whole number of ${rest.dtype ?? "float32"} values.`, "vector_b64");
    const own = bytes.byteOffset % width === 0 ? bytes : new Uint8Array(bytes); // aligned
    const v = width === 8 ? new Float64Array(own.buffer, own.byteOffset, own.byteLength / 8) : new Float32Array(own.buffer, own.byteOffset, own.byteLength / 4);
    return { ...rest, vector: v };
  }
  return { ...rest, vector: rest.dtype === "float32" ? Float32Array.from(vector!) : Float64Array.from(vector!) };
}

function prepareCoresBatch(body: unknown): PreparedPutCoresBatch {
  const b = parseOrThrow(putCoresBatchBodySchema, body, "body");
  // every item is validated before anything is stored; the store commits them in one transaction
  const items = b.items.map((it, i) => {
    const r = putCoresItemSchema.safeParse(it);
    if (!r.success) {
      const e = validationErrorFrom(r.error);
      throw new ValidationError(`items.${i}: ${e.message}`, `items.${i}${e.field ? `.${e.field}` : ""}`);
    }
    return { ...r.data, cores: decodeCores(r.data.cores) };
  });
  return { namespace: b.namespace, items };
}

/**
 * The engine's form of a JSON body at `path`: for put, put_cores, put_cores_batch and
 * query/vector the validated body with its payloads decoded; for every other route the parsed
 * JSON (its handler validates it). Throws the ValidationError the route would answer.
 */
export function prepareEngineJson(path: string, raw: Uint8Array): unknown {
  // an empty body is undefined, which the route's schema refuses as a missing body
  const body = raw.byteLength > 0 ? parseStrictJson(raw) : undefined;
  switch (path) {
    case "/v1/put": {
      const { data_b64, ...rest } = parseOrThrow(putBodySchema, body, "body");
      return { ...rest, data: decode64(data_b64) } satisfies PreparedPut;
    }
    case "/v1/put_cores": {
      const b = parseOrThrow(putCoresBodySchema, body, "body");
      return { ...b, cores: decodeCores(b.cores) } satisfies PreparedPutCores;
    }
    case "/v1/put_cores_batch":
      return prepareCoresBatch(body);
    case "/v1/query/vector":
      return prepareVector(body);
    default:
      return body;
  }
}

/** The gateway's reading of a JSON body of `op`: checked against the engine's schema; the namespaces it names and serve's device. */
export function prepareGatewayJson(op: Operation, raw: Uint8Array): { namespaces: string[]; device?: string } {
  return validateJsonBody(op, parseStrictJson(raw));
}

/**
 * The request hash of an idempotent write: SHA-256 over `prefix` (method, path and query,
 * content type and X-SVC-Metadata, each followed by a newline) and the body's bytes, in hex.
 */
export function requestHash(prefix: string, body: Uint8Array | undefined): string {
  const h = createHash("sha256").update(prefix);
  if (body) h.update(body);
  return h.digest("hex");
}
