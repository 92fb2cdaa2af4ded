// Local compression of a large floating put by createClient and the CLI, with the codecs the
// engine runs and its rules for choosing between them (lib/store/choose.ts): TT cores
// (lib/tt.ts), sent with put_cores, or a stream of the prediction codec (lib/pred.ts), sent as a
// put with encoding pred, so that a tensor past the upload limit travels at a fraction of its
// size. Every candidate is measured here against the caller's data before it is kept: its
// relative Frobenius error and its largest element error, both in float64 over the whole tensor.
import { TT_CLEAR_WIN, TT_FIRST_RATIO, TT_SHARE_OF_ESTIMATE } from "./auto-codec.js";
import { ValidationError } from "./errors.js";
import type { Dtype } from "./fields.js";
import type { CodecChoice } from "./schemas.js";

/** The engine's defaults (SVC_ENGINE_DEFAULT_TOLERANCE, _MAX_RANK, _MIN_COMPRESSION_RATIO, _MIN_COMPRESS_BYTES). */
export const LOCAL_DEFAULT_TOLERANCE = 1e-3;
export const LOCAL_DEFAULT_MAX_RANK = 256;
export const LOCAL_MIN_RATIO = 1.2;
export const LOCAL_MIN_COMPRESS_BYTES = 4096;

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

export interface LocalPred {
  stream: Uint8Array;
  relative_error: number;
  max_abs_error: number;
  lossless: boolean;
}

/** What a put compresses to here: TT cores, a pred stream, or nothing that meets the bounds at the minimum ratio. */
export type LocalChoice = { kind: "tt"; tt: LocalTT } | { kind: "pred"; pred: LocalPred } | null;

/** The options of a put that decide the local compression (the put's own, checked). */
export interface LocalOptions {
  codec?: CodecChoice;
  tolerance?: number;
  max_abs_error?: number;
  max_rank?: number;
}

/** Whether a put of `dtype` data with these options can be compressed locally as the engine would. */
export function locallyCompressible(dtype: Dtype, opts: Record<string, unknown>): boolean {
  if (dtype !== "float32" && dtype !== "float64") return false;
  const known = new Set(["shape", "dtype", "metadata", "tolerance", "max_abs_error", "codec", "max_rank", "if_version"]);
  return !Object.keys(opts).some((k) => opts[k] !== undefined && !known.has(k));
}

/** Errors of `dec` against `x` in float64, scaled so that no square overflows. */
export function measureErrors(x: ArrayLike<number>, dec: ArrayLike<number>): { relative_error: number; max_abs_error: number } {
  let md = 0;
  let mx = 0;
  for (let i = 0; i < x.length; i++) {
    const e = Math.abs(x[i]! - dec[i]!);
    const u = Math.abs(x[i]!);
    if (e > md) md = e;
    if (u > mx) mx = u;
  }
  const sd = md || 1;
  const sx = mx || 1;
  let se = 0;
  let su = 0;
  for (let i = 0; i < x.length; i++) {
    const e = (x[i]! - dec[i]!) / sd;
    const u = x[i]! / sx;
    se += e * e;
    su += u * u;
  }
  const diff = md * Math.sqrt(se);
  const norm = mx * Math.sqrt(su);
  return { relative_error: norm > 0 ? diff / norm : diff > 0 ? 1 : 0, max_abs_error: md };
}

function frobenius(x: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i]!));
  if (m === 0) return 0;
  let s = 0;
  for (let i = 0; i < x.length; i++) s += (x[i]! / m) ** 2;
  return m * Math.sqrt(s);
}

/**
 * TT-SVD under `minRatio` (dense / core bytes) with the engine's rules; `tt` is null where no TT
 * within the bounds reaches the ratio, and `final` says that another ratio would not change that.
 */
async function ttLocal(
  data: Float32Array | Float64Array,
  shape: number[],
  o: { tolerance?: number; max_abs_error?: number; max_rank?: number },
  minRatio: number,
): Promise<{ tt: LocalTT | null; final: boolean }> {
  const tt = await import("./tt.js");
  let zero = true;
  for (let i = 0; i < data.length && zero; i++) zero = data[i] === 0;
  if (zero) {
    // all zeros (an initialised array): the exact TT has rank 1 and zero cores, as the engine stores it
    const modes = tt.chooseModes(shape);
    const cores = modes.map((n) => (data instanceof Float64Array ? new Float64Array(n) : new Float32Array(n)));
    const stored = cores.reduce((s, c) => s + c.byteLength, 0);
    if (data.byteLength / stored < minRatio) return { tt: null, final: true };
    return { tt: { cores, modes, ranks: [1, ...modes.map(() => 1)], relative_error: 0, max_abs_error: 0, verdict: "compressed" }, final: true };
  }
  // TT bounds the relative Frobenius error only; with an element bound it aims at an RMS error a
  // quarter of that bound, and the decoded values are checked against it (as the engine does)
  const rms = o.max_abs_error === undefined ? Infinity : (o.max_abs_error * Math.sqrt(data.length)) / frobenius(data);
  let tol = o.tolerance ?? Math.min(0.5, rms / 4);
  if (o.tolerance !== undefined) tol = Math.min(tol, rms);
  if (tol < (data instanceof Float64Array ? tt.MIN_TOLERANCE_F64 : tt.MIN_TOLERANCE_F32)) return { tt: null, final: true };
  const res = await tt.compress(data, shape, { tolerance: tol, max_rank: o.max_rank ?? LOCAL_DEFAULT_MAX_RANK, min_ratio: minRatio });
  if (res === null) return { tt: null, final: false };
  const stored = res.cores.reduce((s, c) => s + c.byteLength, 0);
  if (data.byteLength / stored < minRatio) return { tt: null, final: false };
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
  const weak = o.tolerance !== undefined && res.relative_error > o.tolerance;
  // a TT above the tolerance is kept, as weak, only under the caller's own max_rank
  if ((weak && o.max_rank === undefined) || (o.max_abs_error !== undefined && maxAbs > o.max_abs_error)) return { tt: null, final: true };
  const out: LocalTT = {
    cores: res.cores,
    modes: [...res.modes],
    ranks: [...res.ranks],
    relative_error: res.relative_error,
    max_abs_error: maxAbs,
    verdict: weak ? "weak" : "compressed",
  };
  return { tt: out, final: true };
}

/** One prediction encode under the bounds, decoded and measured here; null where it misses the ratio or a bound. */
async function predLocal(data: Float32Array | Float64Array, shape: number[], o: { tolerance?: number; max_abs_error?: number }): Promise<LocalPred | null> {
  const pred = await import("./pred.js");
  const bounds = {
    ...(o.tolerance !== undefined ? { tolerance: o.tolerance } : {}),
    ...(o.max_abs_error !== undefined ? { max_abs_error: o.max_abs_error } : {}),
  };
  const r = await pred.compress(data, { shape, ...bounds });
  if (data.byteLength / r.stream.byteLength < LOCAL_MIN_RATIO) return null;
  const m = measureErrors(data, await pred.decompress(r.stream));
  if ((o.tolerance !== undefined && m.relative_error > o.tolerance) || (o.max_abs_error !== undefined && m.max_abs_error > o.max_abs_error)) return null;
  const lossless = pred.info(r.stream).lossless;
  // an exact stream must decode to the same values
  if (lossless && m.max_abs_error !== 0) return null;
  return { stream: r.stream, ...m, lossless };
}

const sizeOf = (c: Exclude<LocalChoice, null>): number => (c.kind === "tt" ? c.tt.cores.reduce((s, x) => s + x.byteLength, 0) : c.pred.stream.byteLength);

/**
 * The engine's choice of codec for a floating put, made here: `codec` tt or pred alone, auto the
 * smaller that meets the bounds (deciding from TT's sampled ranks and the prediction codec's
 * estimate first, so that data which are not low-rank cost a few samples of TT), lossless or a
 * zero bound the prediction codec's exact mode. Null where nothing meets the bounds at the
 * engine's minimum ratio: the put then goes as it is, and the engine decides.
 */
export async function chooseLocally(data: Float32Array | Float64Array, shape: number[], opts: LocalOptions): Promise<LocalChoice> {
  const codec = opts.codec ?? "auto";
  if (codec === "lossless" || opts.tolerance === 0 || opts.max_abs_error === 0) {
    const p = await predLocal(data, shape, { max_abs_error: 0 });
    return p ? { kind: "pred", pred: p } : null;
  }
  // a tolerance applies where given, or by default where no max_abs_error was given either
  const b = {
    tolerance: opts.tolerance ?? (opts.max_abs_error === undefined ? LOCAL_DEFAULT_TOLERANCE : undefined),
    max_abs_error: opts.max_abs_error,
    max_rank: opts.max_rank,
  };
  const asTT = (tt: LocalTT | null): LocalChoice => (tt ? { kind: "tt", tt } : null);
  const asPred = (p: LocalPred | null): LocalChoice => (p ? { kind: "pred", pred: p } : null);
  if (codec === "tt") {
    const floor = data instanceof Float64Array ? 1e-12 : 1e-6;
    if (b.tolerance !== undefined && b.tolerance < floor)
      throw new ValidationError(
        `tolerance ${b.tolerance} is below the TT engine's floor of ${floor} for ${data instanceof Float64Array ? "float64" : "float32"} data; use codec auto or pred.`,
        "tolerance",
      );
    return asTT((await ttLocal(data, shape, b, LOCAL_MIN_RATIO)).tt);
  }
  if (codec === "pred") return asPred(await predLocal(data, shape, b));
  const first = await ttLocal(data, shape, b, Math.max(LOCAL_MIN_RATIO, TT_FIRST_RATIO));
  if (first.tt?.verdict === "compressed") return asTT(first.tt);
  const pred = await import("./pred.js");
  const bounds = {
    ...(b.tolerance !== undefined ? { tolerance: b.tolerance } : {}),
    ...(b.max_abs_error !== undefined ? { max_abs_error: b.max_abs_error } : {}),
  };
  const estimate = (await pred.estimate(data, { shape, ...bounds })).ratio;
  let tt = first.tt;
  const bar = Math.max(LOCAL_MIN_RATIO, TT_SHARE_OF_ESTIMATE * estimate);
  if (!first.final && bar < TT_FIRST_RATIO) tt = (await ttLocal(data, shape, b, bar)).tt;
  if (tt && tt.verdict === "compressed" && data.byteLength / sizeOf({ kind: "tt", tt }) >= TT_CLEAR_WIN * estimate) return asTT(tt);
  const p = asPred(await predLocal(data, shape, b));
  if (!tt || !p) return asTT(tt) ?? p;
  // a weak TT (under the caller's cap) loses to any entry that meets the bounds
  if (tt.verdict === "weak") return p;
  return sizeOf(p) < sizeOf({ kind: "tt", tt }) ? p : asTT(tt);
}

/**
 * TT-SVD of `data` with the engine's rules: null when no TT within the tolerance reaches the
 * engine's minimum ratio.
 */
export async function compressLocally(
  data: Float32Array | Float64Array,
  shape: number[],
  tolerance = LOCAL_DEFAULT_TOLERANCE,
  maxRank?: number,
): Promise<LocalTT | null> {
  return (await ttLocal(data, shape, { tolerance, max_rank: maxRank }, LOCAL_MIN_RATIO)).tt;
}

/** The dtype and shape in a pred stream's header (docs/codecs.md, stream format), or null where it is not one. */
export function predHeader(stream: Uint8Array): { dtype: "float32" | "float64"; shape: number[] } | null {
  if (stream.byteLength < 16 || stream[0] !== 0x53 || stream[1] !== 0x56 || stream[2] !== 0x43 || stream[3] !== 0x50) return null;
  const dtype = stream[5] === 1 ? "float32" : stream[5] === 2 ? "float64" : null;
  const rank = stream[7]!;
  if (!dtype || rank < 1 || rank > 32 || stream.byteLength < 16 + 8 * rank) return null;
  const view = new DataView(stream.buffer, stream.byteOffset, stream.byteLength);
  const shape: number[] = [];
  for (let i = 0; i < rank; i++) {
    const n = view.getBigUint64(16 + 8 * i, true);
    if (n < 1n || n > BigInt(Number.MAX_SAFE_INTEGER)) return null;
    shape.push(Number(n));
  }
  return { dtype, shape };
}
