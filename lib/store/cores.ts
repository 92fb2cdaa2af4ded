// The checks of a TT core chain given to put_cores: one implementation, used by the store and
// by createClient before it sends anything, so both refuse the same input with the same
// ValidationError (field and message), in the same order.
import { z } from "zod";
import { ValidationError } from "../errors.js";
import { parseOrThrow } from "../fields.js";
import { coreDtypeSchema } from "../schemas.js";
import { asBytes, hasNonFinite, typedView } from "./codec.js";

/** One TT core as put_cores takes it. */
export interface CoreInput {
  /** [r_prev, n_k, r_next] */
  shape: [number, number, number];
  data: Float32Array | Float64Array | Uint8Array | ArrayBuffer;
  dtype?: "float32" | "float64";
}

/** A core that passed the checks: its values in a copy of their own. */
export interface CheckedCore {
  shape: [number, number, number];
  dtype: "float32" | "float64";
  values: Float32Array | Float64Array;
}

const dim = z
  .number()
  .int("core shape entries must be integers")
  .min(1, "core shape entries must be at least 1")
  .max(1 << 20, "core shape entries are too large");
const coreShapeSchema = z.tuple([dim, dim, dim], "core shape must be [r_prev, n_k, r_next]");

/**
 * Checks a chain of 1 to 64 cores: each an object with a [r_prev, n_k, r_next] shape, a dtype
 * that matches its data and every other core's, data of exactly that many bytes, ranks that
 * start and end with 1 and agree between neighbours, finite values. `where` prefixes fields.
 */
export function checkCores(cores: unknown, where: string): CheckedCore[] {
  if (!Array.isArray(cores) || cores.length < 1 || cores.length > 64) throw new ValidationError(`${where} must be a list of 1 to 64 cores.`, where);
  let coreDtype: "float32" | "float64" | undefined;
  let rank = 1;
  return cores.map((c: CoreInput | null, k) => {
    const here = `${where}.${k}`;
    if (c === null || typeof c !== "object") throw new ValidationError(`${here} must be an object.`, here);
    const shape = parseOrThrow(coreShapeSchema, c.shape, `${here}.shape`);
    const natural = c.data instanceof Float32Array ? "float32" : c.data instanceof Float64Array ? "float64" : undefined;
    const dt = c.dtype === undefined ? (natural ?? "float32") : parseOrThrow(coreDtypeSchema, c.dtype, `${here}.dtype`);
    if (natural && natural !== dt) throw new ValidationError(`${here}.dtype ${dt} does not match its ${natural} data.`, `${here}.dtype`);
    if (!(c.data instanceof ArrayBuffer) && !ArrayBuffer.isView(c.data))
      throw new ValidationError(`${here}.data must be a Float32Array, a Float64Array or bytes.`, `${here}.data`);
    if (coreDtype && coreDtype !== dt) throw new ValidationError(`${here}.dtype: all cores must have the same dtype.`, `${here}.dtype`);
    coreDtype = dt;
    const bytes = asBytes(c.data);
    const need = shape[0] * shape[1] * shape[2] * (dt === "float64" ? 8 : 4);
    if (bytes.byteLength !== need)
      throw new ValidationError(`${here}.data has ${bytes.byteLength} bytes but shape [${shape.join(", ")}] of ${dt} needs ${need}.`, `${here}.data`);
    if (k === 0 && shape[0] !== 1) throw new ValidationError(`${here}.shape: the first core must start with rank 1.`, `${here}.shape`);
    if (k > 0 && shape[0] !== rank) throw new ValidationError(`${here}.shape: rank ${shape[0]} does not match the previous core's ${rank}.`, `${here}.shape`);
    if (k === cores.length - 1 && shape[2] !== 1) throw new ValidationError(`${here}.shape: the last core must end with rank 1.`, `${here}.shape`);
    rank = shape[2];
    // an aligned copy of its own: the caller may reuse its buffer
    const values = typedView(new Uint8Array(bytes), dt) as Float32Array | Float64Array;
    if (hasNonFinite(values)) throw new ValidationError(`${here}.data contains NaN or infinite values.`, `${here}.data`);
    return { shape, dtype: dt, values };
  });
}
