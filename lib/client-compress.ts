// Local compression of a large floating put by createClient: the same native TT-SVD the engine
// runs (lib/tt.ts), so that a tensor past the upload limit travels as its cores (put_cores) at a
// few percent of its size. The tolerance guarantee is the engine's: the relative Frobenius error
// is measured here on the whole tensor, and so is the largest element error.
import type { Dtype } from "./fields.js";

/** The engine's defaults (SVC_ENGINE_DEFAULT_TOLERANCE, _MAX_RANK, _MIN_COMPRESSION_RATIO). */
export const LOCAL_DEFAULT_TOLERANCE = 1e-3;
export const LOCAL_DEFAULT_MAX_RANK = 256;
export const LOCAL_MIN_RATIO = 1.2;

/** Floating data of this many bytes or more is compressed by the client (64 MiB). */
export const DEFAULT_LOCAL_COMPRESS_BYTES = 64 * 1024 * 1024;

export interface LocalTT {
  cores: Array<Float32Array | Float64Array>;
  modes: number[];
  ranks: number[];
  relative_error: number;
  max_abs_error: number;
  verdict: "compressed" | "weak";
}

/** Whether a put of `dtype` data with these options can be compressed locally as the engine would. */
export function locallyCompressible(dtype: Dtype, opts: Record<string, unknown>): boolean {
  if (dtype !== "float32" && dtype !== "float64") return false;
  // options only the engine understands (a codec choice, an element bound, tolerance 0 for an
  // exact entry) keep the put on the server
  const known = new Set(["shape", "dtype", "metadata", "tolerance", "max_rank", "if_version"]);
  if (Object.keys(opts).some((k) => opts[k] !== undefined && !known.has(k))) return false;
  return opts.tolerance === undefined || (typeof opts.tolerance === "number" && opts.tolerance > 0);
}

/**
 * TT-SVD of `data` with the engine's rules: null when no TT within the tolerance reaches the
 * engine's minimum ratio (the data then go as they are).
 */
export async function compressLocally(
  data: Float32Array | Float64Array,
  shape: number[],
  tolerance = LOCAL_DEFAULT_TOLERANCE,
  maxRank = LOCAL_DEFAULT_MAX_RANK,
): Promise<LocalTT | null> {
  const tt = await import("./tt.js");
  let zero = true;
  for (let i = 0; i < data.length && zero; i++) zero = data[i] === 0;
  if (zero) {
    // all zeros (an initialised array): the exact TT has rank 1 and zero cores, as the engine stores it
    const modes = tt.chooseModes(shape);
    const cores = modes.map((n) => (data instanceof Float64Array ? new Float64Array(n) : new Float32Array(n)));
    return { cores, modes, ranks: [1, ...modes.map(() => 1)], relative_error: 0, max_abs_error: 0, verdict: "compressed" };
  }
  const res = await tt.compress(data, shape, { tolerance, max_rank: maxRank, min_ratio: LOCAL_MIN_RATIO });
  if (res === null) return null;
  const stored = res.cores.reduce((s, c) => s + c.byteLength, 0);
  if (data.byteLength / stored < LOCAL_MIN_RATIO) return null;
  // the largest element error, one block of leading indices at a time so the reconstruction
  // never holds a second copy of a large tensor
  let maxAbs = 0;
  const lead = shape[0]!;
  const rowElems = data.length / lead;
  const step = Math.max(1, Math.floor((8 * 1024 * 1024) / rowElems));
  for (let a = 0; a < lead; a += step) {
    const b = Math.min(lead, a + step);
    const slice: Array<[number, number]> = shape.map((n, i) => (i === 0 ? [a, b] : [0, n]));
    const block = await tt.reconstruct({ modes: res.modes, ranks: res.ranks, cores: res.cores, shape }, { slice });
    const off = a * rowElems;
    for (let i = 0; i < block.length; i++) {
      const d = Math.abs(block[i]! - data[off + i]!);
      if (d > maxAbs) maxAbs = d;
    }
  }
  return {
    cores: res.cores,
    modes: [...res.modes],
    ranks: [...res.ranks],
    relative_error: res.relative_error,
    max_abs_error: maxAbs,
    verdict: res.relative_error <= tolerance ? "compressed" : "weak",
  };
}
