// The "pred" codec toolkit: error-bounded, prediction-based compression of float32/float64
// arrays of any rank (docs/codecs.md). Validation and messages live here; the coding runs in
// the native addon (native/pred*.cc) off the event loop, which also scans the data for NaN and
// infinities so no large pass runs here.
import { constants as bufferConstants } from "node:buffer";
import { totalmem } from "node:os";
import { z } from "zod";
import { ValidationError } from "./errors.js";
import { parseFieldOrThrow, shapeSchema } from "./fields.js";
import { call, fromNative, native } from "./native.js";
import { unpack, value } from "./scaled.js";

export type PredArray = Float32Array | Float64Array;
export type PredDtype = "float32" | "float64";

export interface PredOptions {
  /** Element counts per dimension, C order; their product is data.length. */
  shape: number[];
  /** Relative Frobenius bound: ‖x − x̂‖_F ≤ tolerance·‖x‖_F. 0 means lossless. */
  tolerance?: number;
  /** Pointwise bound: |x_i − x̂_i| ≤ max_abs_error for every element. 0 means lossless. */
  max_abs_error?: number;
}

export interface PredResult {
  stream: Uint8Array;
  dtype: PredDtype;
  shape: number[];
  /** ‖x − x̂‖_F / ‖x‖_F of the reconstruction the decoder reproduces bit for bit, in float64. */
  relative_error: number;
  /** max |x_i − x̂_i| of that reconstruction. */
  max_abs_error: number;
  /** Data bytes / stream bytes. */
  compression_ratio: number;
}

export interface PredInfo {
  dtype: PredDtype;
  shape: number[];
  /** Block shape over the internal shape (dimensions of size 1 dropped, leading ones merged to rank 5 at most). */
  block_shape: number[];
  blocks: number;
  /** The pointwise bound every decoded element honours (0 when lossless). */
  max_abs_error: number;
  lossless: boolean;
}

const boundSchema = (name: string) =>
  z
    .number({ error: `${name} must be a number` })
    .refine(Number.isFinite, `${name} must be finite`)
    .refine((t) => t >= 0, `${name} must not be negative`);

const optionsSchema = z.strictObject(
  {
    shape: shapeSchema,
    tolerance: boundSchema("tolerance")
      .refine((t) => t < 1, "tolerance must be less than 1")
      .optional(),
    max_abs_error: boundSchema("max_abs_error").optional(),
  },
  { error: (iss) => (iss.code === "unrecognized_keys" ? `unknown option ${iss.keys.join(", ")}` : "options must be an object") },
);

const decompressOptionsSchema = z
  .strictObject(
    {
      slice: z
        .array(z.tuple([z.number().int().min(0), z.number().int().min(0)], { error: "slice entries must be [start, stop) pairs of integers" }), {
          error: "slice must be an array of [start, stop) pairs",
        })
        .optional(),
    },
    { error: (iss) => (iss.code === "unrecognized_keys" ? `unknown option ${iss.keys.join(", ")}` : "options must be an object") },
  )
  .optional();

interface Checked {
  data: PredArray;
  shape: number[];
  tolerance: number;
  maxAbs: number;
}

function check(data: unknown, opts: unknown): Checked {
  if (!(data instanceof Float32Array || data instanceof Float64Array)) {
    throw new ValidationError("data must be a Float32Array or Float64Array.", "data");
  }
  const o = parseFieldOrThrow(optionsSchema, opts, "");
  if (o.tolerance === undefined && o.max_abs_error === undefined) {
    throw new ValidationError("options need tolerance or max_abs_error (or both).", "tolerance");
  }
  const n = o.shape.reduce((a, b) => a * b, 1);
  if (n !== data.length) {
    throw new ValidationError(`shape [${o.shape.join(", ")}] holds ${n} elements but data has ${data.length}.`, "shape");
  }
  return { data, shape: o.shape, tolerance: o.tolerance ?? -1, maxAbs: o.max_abs_error ?? -1 };
}

function checkStream(stream: unknown): Uint8Array {
  if (!(stream instanceof Uint8Array)) throw new ValidationError("stream must be a Uint8Array.", "stream");
  return stream;
}

/**
 * Compresses data so that every requested bound holds (measured on the reconstruction the decoder reproduces).
 * @example
 * const r = await pred.compress(field, { shape: [64, 64, 64], tolerance: 1e-3 });
 */
export async function compress(data: PredArray, opts: PredOptions): Promise<PredResult> {
  const c = check(data, opts);
  const r = await call(() => native().predCompress(c.data, c.shape, c.tolerance, c.maxAbs));
  return {
    stream: r.stream,
    dtype: c.data instanceof Float64Array ? "float64" : "float32",
    shape: [...c.shape],
    relative_error: r.relative_error,
    max_abs_error: r.max_abs_error,
    compression_ratio: c.data.byteLength / r.stream.byteLength,
  };
}

/** Header of a stream (synchronous; throws ValidationError on a stream that is not one). */
export function info(stream: Uint8Array): PredInfo {
  const s = checkStream(stream);
  try {
    return native().predInfo(s);
  } catch (err) {
    throw fromNative(err);
  }
}

/**
 * Decodes a stream, or the slice of it given as half-open [start, stop) per dimension (C order
 * result); a slice decodes only the blocks it touches.
 */
export async function decompress(stream: Uint8Array, opts?: { slice?: Array<[number, number]> }): Promise<PredArray> {
  const s = checkStream(stream);
  const o = parseFieldOrThrow(decompressOptionsSchema, opts, "") ?? {};
  const h = info(s);
  let flat: number[] | null = null;
  let elements = h.shape.reduce((a, b) => a * b, 1);
  if (o.slice) {
    if (o.slice.length !== h.shape.length) {
      throw new ValidationError(`slice must have one [start, stop) pair per dimension (${h.shape.length}).`, "slice");
    }
    flat = [];
    elements = 1;
    for (let j = 0; j < h.shape.length; j++) {
      const [a, b] = o.slice[j]!;
      if (!(a < b && b <= h.shape[j]!)) throw new ValidationError(`slice[${j}] must satisfy 0 <= start < stop <= ${h.shape[j]}.`, `slice[${j}]`);
      flat.push(a, b);
      elements *= b - a;
    }
  }
  const bytes = elements * (h.dtype === "float64" ? 8 : 4);
  const limit = Math.min(bufferConstants.MAX_LENGTH, totalmem() / 2);
  if (bytes > limit) {
    const field = flat ? "slice" : "stream";
    throw new ValidationError(
      `${field} asks for a result of ${bytes} bytes, more than the ${Math.floor(limit)} bytes allowed here; request a smaller slice.`,
      field,
    );
  }
  return call(() => native().predDecompress(s, flat));
}

export interface PredDotOptions {
  /** Round each decoded value to this 2-byte float first (float32 streams), as entries of that dtype are served. */
  round?: "float16" | "bfloat16";
  /** Also compute ‖decoded − x‖ (scaled against overflow). */
  distance?: boolean;
}

const dotOptionsSchema = z
  .strictObject(
    { round: z.enum(["float16", "bfloat16"], { error: "round must be float16 or bfloat16" }).optional(), distance: z.boolean().optional() },
    { error: (iss) => (iss.code === "unrecognized_keys" ? `unknown option ${iss.keys.join(", ")}` : "options must be an object") },
  )
  .optional();

const ROUND_CODE = { float16: 1, bfloat16: 2 } as const;

/**
 * ⟨decoded stream, x⟩ for each stream, with x in C order over the stream's shape, decoded
 * block by block on the addon's threads: memory is one block per thread, never the array. With
 * `distance`, ‖decoded − x‖ too. x must be finite (checked off the event loop); a corrupt stream
 * is a ValidationError (field `stream`). Sums are scaled where they would overflow, so a result
 * is finite wherever it is a float64, else ±Infinity.
 * @example
 * const [{ dot }] = await pred.dot([r.stream], query);
 */
export async function dot(streams: Uint8Array[], x: PredArray, opts?: PredDotOptions): Promise<{ dot: number; distance?: number }[]> {
  if (!Array.isArray(streams)) throw new ValidationError("streams must be an array of Uint8Array.", "streams");
  streams.forEach(checkStream);
  if (!(x instanceof Float32Array || x instanceof Float64Array)) throw new ValidationError("x must be a Float32Array or Float64Array.", "x");
  const o = parseFieldOrThrow(dotOptionsSchema, opts, "") ?? {};
  const rounds = streams.map(() => (o.round ? ROUND_CODE[o.round] : 0));
  const r = await call(() => native().predDot(streams, rounds, x, o.distance === true));
  const dots = unpack(r.dot);
  const dist = r.distance ? unpack(r.distance) : null;
  return dots.map((d, i) => (dist ? { dot: value(d), distance: value(dist[i]!) } : { dot: value(d) }));
}

/**
 * A cheap estimate of the compression ratio from a few sampled blocks (no bound is verified).
 * @example
 * const { ratio } = await pred.estimate(field, { shape: [64, 64, 64], tolerance: 1e-3 });
 */
export async function estimate(data: PredArray, opts: PredOptions): Promise<{ ratio: number }> {
  const c = check(data, opts);
  const ratio = await call(() => native().predEstimate(c.data, c.shape, c.tolerance, c.maxAbs));
  return { ratio };
}
