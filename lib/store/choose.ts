// The codec of a put (docs/store.md "Codec policy"). Floating data: TT cores, the prediction
// codec's stream, or an exact entry. Others: the integer coder or deflate (losslessPayload, at
// the end). Every lossy candidate is decoded and measured before it is kept:
// its relative Frobenius error and its largest element error over the values a serve gives
// back (float16/bfloat16 rounded to their type), so the bounds a caller asked for are checked,
// not trusted. `auto` tries TT first under a high min_ratio (a smooth field ends there), then
// estimates the prediction codec's ratio from samples and runs TT again under a min_ratio near
// that estimate: TT's sampled rank bounds give up early where no TT within the tolerance could
// reach it, so data that are not low-rank cost a few samples of TT, not a TT-SVD.
import { TT_CLEAR_WIN, TT_FIRST_RATIO, TT_SHARE_OF_ESTIMATE } from "../auto-codec.js";
import { ValidationError } from "../errors.js";
import { itemsize, type Dtype } from "../fields.js";
import type { CodecChoice } from "../schemas.js";
import { asBytes, deflateEstimate, deflateMayPay, fromWorkingFloat, intCoded, intPredDecode, intPredEncode, losslessEncode, toWorkingFloat } from "./codec.js";
import type { StoreConfig } from "./context.js";
import { pacedScan, sameBytesPaced } from "./pace.js";
import { loadPred, type PredApi } from "./predapi.js";
import { loadTT, type TT, type TTApi } from "./ttapi.js";
import { value } from "../scaled.js";
import type { PayloadLayout, TtInfo, Verdict } from "./types.js";

/** A floating put to encode: the data as float32/float64 (half types widened) and the caller's bounds. */
export interface FloatJob {
  work: Float32Array | Float64Array;
  dtype: Dtype;
  shape: number[];
  bytesIn: number;
  /** Relative Frobenius bound; undefined where only max_abs_error was asked for. */
  tolerance: number | undefined;
  /** L∞ bound; undefined where none was asked for. */
  maxAbs: number | undefined;
  codec: CodecChoice;
  maxRank: number;
  /** The caller gave max_rank: a TT above the tolerance under that cap is kept as `weak`. */
  capped: boolean;
  config: StoreConfig;
  /**
   * The data's Frobenius norm and largest magnitude (computed once, where a route needs them);
   * `rms` is the norm / (max · √n), which stays a float64 where the norm itself does not.
   */
  stats(): Promise<{ norm: number; max: number; rms: number }>;
}

/** A lossy or exact encoding that met the bounds, with what was measured on its decoded values. */
export interface Encoded {
  payload: Uint8Array;
  verdict: Verdict;
  relative_error: number;
  max_abs_error: number;
  /** Frobenius norm of the values a serve gives back; null where it exceeds float64's range. */
  norm: number | null;
  codec: "tt" | "pred" | "lossless";
  tt: TtInfo | null;
  layout: PayloadLayout;
}

/** A norm as a fingerprint holds it: null where it exceeds float64's range (docs/store.md). */
export const finiteNorm = (n: number): number | null => (Number.isFinite(n) ? n : null);

/** Whether a zero bound asks for an exact entry. */
export const exactAsked = (j: Pick<FloatJob, "tolerance" | "maxAbs" | "codec">): boolean => j.codec === "lossless" || j.tolerance === 0 || j.maxAbs === 0;

/** Half a unit in the last place of the served type, relative: the rounding a serve adds. */
const unitOf = (dtype: Dtype): number => (dtype === "float16" ? 2 ** -11 : dtype === "bfloat16" ? 2 ** -8 : 0);

interface Measured {
  relative_error: number;
  max_abs_error: number;
  norm: number | null;
}

// The two passes of measure() keep their running values in locals of plain functions: a
// closure over `let` variables kept them in a context object, 10-20 times slower (262,144
// float32 values: 3 ms against 22-94 ms at load 10).

/** m = [max |x - dec|, max |dec|, max |x|] over [a, b), continued from m. */
function maxima(x: ArrayLike<number>, dec: ArrayLike<number>, a: number, b: number, m: Float64Array): void {
  let m0 = m[0]!,
    m1 = m[1]!,
    m2 = m[2]!;
  for (let i = a; i < b; i++) {
    const xi = x[i]!,
      di = dec[i]!;
    const e = Math.abs(xi - di),
      v = Math.abs(di),
      u = Math.abs(xi);
    if (e > m0) m0 = e;
    if (v > m1) m1 = v;
    if (u > m2) m2 = u;
  }
  m[0] = m0;
  m[1] = m1;
  m[2] = m2;
}

/** s += the squares of (x - dec), dec and x over [a, b), each divided by its maximum in m. */
function scaledSquares(x: ArrayLike<number>, dec: ArrayLike<number>, a: number, b: number, m: Float64Array, s: Float64Array): void {
  // divided, not multiplied by a reciprocal: 1 / a subnormal maximum overflows
  const md = m[0]! || 1,
    mh = m[1]! || 1,
    mx = m[2]! || 1;
  let s0 = s[0]!,
    s1 = s[1]!,
    s2 = s[2]!;
  for (let i = a; i < b; i++) {
    const xi = x[i]!,
      di = dec[i]!;
    const e = (xi - di) / md,
      v = di / mh,
      u = xi / mx;
    s0 += e * e;
    s1 += v * v;
    s2 += u * u;
  }
  s[0] = s0;
  s[1] = s1;
  s[2] = s2;
}

/**
 * Errors of `dec` against `x` and the norm of `dec`, in float64 with scaling (two passes: the
 * largest magnitudes, then the scaled sums of squares), in slices of the event loop. The
 * relative error of zero data is 0 where `dec` is zero too, else 1.
 */
async function measure(x: ArrayLike<number>, dec: ArrayLike<number>): Promise<Measured> {
  const m = new Float64Array(3);
  const s = new Float64Array(3);
  await pacedScan(x.length, (a, b) => maxima(x, dec, a, b, m));
  await pacedScan(x.length, (a, b) => scaledSquares(x, dec, a, b, m, s));
  // the ratio of the two norms from their scaled parts: either norm may exceed float64's range
  // (float64 data near 1e308) while their ratio does not
  const relative_error = m[2]! > 0 ? (m[0]! / m[2]!) * Math.sqrt(s[0]! / s[2]!) : m[0]! > 0 ? 1 : 0;
  const norm = m[1]! * Math.sqrt(s[1]!);
  return { relative_error, max_abs_error: m[0]!, norm: Number.isFinite(norm) ? norm : null };
}

/** Decoded working floats as a serve gives them back: rounded to float16/bfloat16, widened again. */
async function asServed(dec: Float32Array | Float64Array, dtype: Dtype): Promise<Float32Array | Float64Array> {
  if (dtype !== "float16" && dtype !== "bfloat16") return dec;
  const out = new Float32Array(dec.length);
  await pacedScan(dec.length, (a, b) => {
    out.set(toWorkingFloat(fromWorkingFloat(dec.subarray(a, b), dtype), dtype), a);
  });
  return out;
}

/** Whether measured errors meet the caller's bounds. */
const meets = (m: Measured, j: FloatJob): boolean =>
  (j.tolerance === undefined || m.relative_error <= j.tolerance) && (j.maxAbs === undefined || m.max_abs_error <= j.maxAbs);

/** Bounds handed to an encoder: a float16/bfloat16 entry keeps the serve's rounding share free. */
async function encoderBounds(j: FloatJob): Promise<{ tolerance?: number; max_abs_error?: number } | null> {
  const unit = unitOf(j.dtype);
  const out: { tolerance?: number; max_abs_error?: number } = {};
  if (j.tolerance !== undefined) {
    const t = j.tolerance - unit * (1 + j.tolerance);
    if (t < j.tolerance / 4) return null;
    out.tolerance = t;
  }
  if (j.maxAbs !== undefined) {
    const e = unit === 0 ? j.maxAbs : j.maxAbs - unit * (await j.stats()).max * 1.01;
    if (e < j.maxAbs / 4) return null;
    out.max_abs_error = e;
  }
  return out;
}

/** max over [a, b) of |x - v| + k·A + unit·(|v| + k·A), continued from m[0]. */
function worstServed(x: ArrayLike<number>, v: ArrayLike<number>, A: ArrayLike<number>, k: number, unit: number, a: number, b: number, m: Float64Array): void {
  let w = m[0]!;
  for (let i = a; i < b; i++) {
    const slack = k * A[i]!;
    const e = Math.abs(x[i]! - v[i]!) + slack + unit * (Math.abs(v[i]!) + slack);
    if (!(e <= w)) w = e; // NaN too
  }
  m[0] = w;
}

/**
 * The largest distance from the data that a serve of this TT can give, slices included (the
 * TT is kept under max_abs_error where it is within the bound). A slice is contracted in another order than the whole reconstruction (other
 * splits, merged factor cores), so its values may differ from the measured ones in their last
 * bits: an element measured just under the bound came back above it. The difference between
 * two evaluations of the same chain of products is at most 2·γ_m·(|G_1|···|G_d|)_i, with
 * γ_m = m·u / (1 − m·u) and m the products and sums along the chain (the inner ranks plus one
 * per core); (|G_1|···|G_d|) is the reconstruction of the TT of absolute values. For float16
 * and bfloat16 the rounding to the served type is added on top.
 */
async function worstSliceError(j: FloatJob, res: TT, full: Float32Array | Float64Array, tt: TTApi): Promise<number> {
  const u = full instanceof Float64Array ? 2 ** -53 : 2 ** -24;
  const chain = res.ranks.slice(1, -1).reduce((a, r) => a + r, 0) + res.cores.length;
  const gamma = (chain * u) / (1 - chain * u);
  // 2·γ for the two evaluations, a little more for the rounding of A itself
  const k = 2 * gamma * (1 + 4 * gamma) + 4 * u;
  const absCores = [];
  for (const c of res.cores) {
    const a = c instanceof Float64Array ? new Float64Array(c.length) : new Float32Array(c.length);
    await pacedScan(c.length, (from, to) => {
      for (let i = from; i < to; i++) a[i] = Math.abs(c[i]!);
    });
    absCores.push(a);
  }
  const A = await tt.reconstruct({ ...res, cores: absCores } as TT);
  const m = new Float64Array(1);
  const unit = unitOf(j.dtype);
  await pacedScan(full.length, (a, b) => worstServed(j.work, full, A, k, unit, a, b, m));
  return m[0]!;
}

/** TT-SVD runs of a put under max_abs_error: the first at the RMS aim, then at smaller tolerances. */
const TT_MAX_ABS_TRIES = 6;
/** The tolerance of a retry: the last one times 0.8·bound/worst error, within these factors. */
const TT_RETRY_MIN_STEP = 1 / 16;
const TT_RETRY_MAX_STEP = 1 / 2;

/**
 * The TT route: TT-SVD under `minRatio` (dense/stored bytes), decoded and measured. `enc` is
 * null where TT cannot store the data at that ratio or misses a bound (a relative error above
 * the tolerance is kept, as `weak`, only under the caller's max_rank); `final` says that
 * another min_ratio would not change that (TT decomposed the data, or cannot run at these
 * bounds): only a TT that gave up on the ratio is worth asking again at a lower one.
 */
async function ttRoute(j: FloatJob, minRatio: number): Promise<{ enc: Encoded | null; final: boolean }> {
  const tt = await loadTT();
  const f64 = j.work instanceof Float64Array;
  const b = await encoderBounds(j);
  if (!b) return { enc: null, final: true };
  // TT bounds the relative Frobenius error only; with an L∞ bound alone it aims at an RMS
  // error a quarter of that bound and the decoded values are checked against it
  const rms =
    b.max_abs_error === undefined
      ? Infinity
      : await (async () => {
          const st = await j.stats();
          return b.max_abs_error! / st.max / st.rms;
        })();
  let tol = b.tolerance ?? Math.min(0.5, rms / 4);
  if (b.tolerance !== undefined) tol = Math.min(tol, rms);
  const floor = f64 ? tt.MIN_TOLERANCE_F64 : tt.MIN_TOLERANCE_F32;
  if (tol < floor) {
    if (j.codec === "tt" && j.tolerance !== undefined && j.tolerance < floor)
      throw new ValidationError(
        `tolerance ${j.tolerance} is below the TT engine's floor of ${floor} for ${f64 ? "float64" : "float32"} data; use codec auto or pred.`,
        "tolerance",
      );
    return { enc: null, final: true };
  }
  // cores are float32 (float64 for float64 data): the ratio is measured against them
  const coreBytes = f64 ? 8 : 4;
  // The RMS aim is a guess at the L∞ bound: where the decoded values (or their slices) miss
  // it, TT-SVD runs again at a smaller tolerance, scaled by how far they missed, so that a
  // looser bound is not left without the TT that a tighter one finds.
  let res: TT;
  let full: Float32Array | Float64Array;
  let m: Measured;
  let weak: boolean;
  for (let attempt = 1; ; attempt++) {
    const r = await tt.compress(j.work, j.shape, { tolerance: tol, max_rank: j.maxRank, min_ratio: minRatio * (coreBytes / itemsize(j.dtype)) });
    if (r === null) return { enc: null, final: false };
    const stored = r.cores.reduce((s, c) => s + c.byteLength, 0);
    if (j.bytesIn / stored < minRatio) return { enc: null, final: false };
    res = r;
    full = await tt.reconstruct(res);
    m = await measure(j.work, await asServed(full, j.dtype));
    weak = j.tolerance !== undefined && m.relative_error > j.tolerance;
    if (weak && !j.capped) return { enc: null, final: true };
    if (j.maxAbs === undefined) break;
    const worst = m.max_abs_error > j.maxAbs ? m.max_abs_error : await worstSliceError(j, res, full, tt);
    if (worst <= j.maxAbs) break;
    const next = tol * Math.min(TT_RETRY_MAX_STEP, Math.max(TT_RETRY_MIN_STEP, (0.8 * j.maxAbs) / worst));
    // no tries left, below what TT can reach, the ranks held at the caller's max_rank, or the
    // slices' rounding margin alone beyond the bound (a smaller tolerance only raises it)
    const capped = j.maxRank !== undefined && res.ranks.every((q, i) => i === 0 || i === res.ranks.length - 1 || q >= j.maxRank!);
    if (attempt >= TT_MAX_ABS_TRIES || next < floor || capped || worst - m.max_abs_error > j.maxAbs) return { enc: null, final: true };
    tol = next;
  }
  const stored = res.cores.reduce((s, c) => s + c.byteLength, 0);
  const info = { modes: [...res.modes], ranks: [...res.ranks] };
  const payload = new Uint8Array(stored);
  let off = 0;
  for (const c of res.cores) {
    payload.set(asBytes(c), off);
    off += c.byteLength;
  }
  const enc: Encoded = {
    payload,
    verdict: weak ? "weak" : "compressed",
    relative_error: m.relative_error,
    max_abs_error: m.max_abs_error,
    // the norm on the cores, as similarity contracts them; null beyond float64's range
    norm: finiteNorm(value(await tt.normScaled(res))),
    codec: "tt",
    tt: info,
    layout: { codec: "tt", core_dtype: f64 ? "float64" : "float32", ...info },
  };
  return { enc, final: true };
}

/** The prediction route: one encode under the bounds, decoded and measured. Null where it misses the ratio or a bound. */
async function predRoute(p: PredApi, j: FloatJob, minRatio: number): Promise<Encoded | null> {
  const b = await encoderBounds(j);
  if (!b) return null;
  const r = await p.compress(j.work, { shape: j.shape, ...b });
  if (j.bytesIn / r.stream.byteLength < minRatio) return null;
  const m = await measure(j.work, await asServed(await p.decompress(r.stream), j.dtype));
  if (!meets(m, j)) return null;
  return { payload: r.stream, verdict: "compressed", ...m, codec: "pred", tt: null, layout: { codec: "pred", lossless: false } };
}

/**
 * An exact entry of floating data: the prediction codec's lossless mode (float32/float64)
 * where it is smaller than byte shuffle + deflate, else deflate; null where neither reaches
 * `minRatio` (the put stores the bytes raw).
 */
export async function exactRoute(
  j: Pick<FloatJob, "work" | "dtype" | "shape" | "bytesIn">,
  deflated: { payload: Uint8Array; shuffle: number },
  minRatio: number,
  norm: number | null,
): Promise<Encoded | null> {
  let best: Encoded | null = null;
  const p = j.dtype === "float32" || j.dtype === "float64" ? await loadPred() : null;
  if (p) {
    const r = await p.compress(j.work, { shape: j.shape, max_abs_error: 0 });
    if (r.stream.byteLength < deflated.payload.byteLength) {
      // kept only when it decodes to the same bits
      const dec = await p.decompress(r.stream);
      if (await sameBytesPaced(asBytes(dec), asBytes(j.work)))
        best = {
          payload: r.stream,
          verdict: "lossless",
          relative_error: 0,
          max_abs_error: 0,
          norm,
          codec: "pred",
          tt: null,
          layout: { codec: "pred", lossless: true },
        };
    }
  }
  best ??= {
    payload: deflated.payload,
    verdict: "lossless",
    relative_error: 0,
    max_abs_error: 0,
    norm,
    codec: "lossless",
    tt: null,
    layout: { codec: "lossless", shuffle: deflated.shuffle },
  };
  return j.bytesIn / best.payload.byteLength >= minRatio ? best : null;
}

/**
 * The lossy codec of a floating put that meets the bounds, by `j.codec`: `tt` or `pred` that
 * codec alone, `auto` the smaller of the two (deciding from estimates first). Null where none
 * does: the put then stores the data exactly.
 */
export async function lossyRoute(j: FloatJob): Promise<Encoded | null> {
  const minRatio = j.config.min_compression_ratio;
  if (j.codec === "tt") return (await ttRoute(j, minRatio)).enc;
  const p = await loadPred();
  if (j.codec === "pred") return predRoute(p, j, minRatio);
  // a TT at TT_FIRST_RATIO or more within the bounds is kept at once; anything else gives up
  // after TT's rank samples, before the prediction estimate is paid for
  const first = await ttRoute(j, Math.max(minRatio, TT_FIRST_RATIO));
  if (first.enc?.verdict === "compressed") return first.enc;
  const b = await encoderBounds(j);
  const estimate = b ? (await p.estimate(j.work, { shape: j.shape, ...b })).ratio : 0;
  let tt = first.enc;
  const bar = Math.max(minRatio, TT_SHARE_OF_ESTIMATE * estimate);
  if (!first.final && bar < TT_FIRST_RATIO) tt = (await ttRoute(j, bar)).enc;
  if (tt && tt.verdict === "compressed" && j.bytesIn / tt.payload.byteLength >= TT_CLEAR_WIN * estimate) return tt;
  return smaller(tt, await predRoute(p, j, minRatio));
}

/** The smaller of a TT and a prediction encoding; a weak TT (under the caller's cap) loses to any entry that meets the tolerance. */
function smaller(tt: Encoded | null, pr: Encoded | null): Encoded | null {
  if (!tt || !pr) return tt ?? pr;
  if (tt.verdict === "weak") return pr;
  return pr.payload.byteLength < tt.payload.byteLength ? pr : tt;
}

// ---- data that are not floating ----

// From this size, deflate over the whole of integer data runs only where a sample of it says
// it may come within DEFLATE_MARGIN of the integer coder's stream (deflate is the slower of the two).
const DEFLATE_SAMPLED_FROM = 1 << 20;
const DEFLATE_MARGIN = 1.25;

// From DEFLATE_SAMPLED_FROM, integer data whose sample the integer coder shrinks less than
// this (random integers) are not coded whole by it.
const INT_SAMPLE_HOPELESS = 1.05;

/**
 * The ratio the integer coder reaches on four windows of whole rows (of the last dimension;
 * 16384 elements, or one row where a row is longer) spread over the data: a quick estimate,
 * low for volumes, whose windows lose the plane behind.
 */
async function intPredSampleRatio(bytes: Uint8Array, dtype: Dtype, shape: readonly number[]): Promise<number> {
  const size = itemsize(dtype);
  const count = bytes.byteLength / size;
  const row = Math.min(shape[shape.length - 1] ?? count, 16384);
  const rows = Math.max(1, Math.floor(16384 / row));
  const win = Math.min(count, rows * row);
  let coded = 0;
  for (let w = 0; w < 4; w++) {
    const at = Math.floor(((count - win) * w) / 3 / row) * row;
    coded += (await intPredEncode(bytes.subarray(at * size, (at + win) * size), dtype, [win / row, row])).byteLength;
  }
  return (4 * win * size) / coded;
}

/**
 * The lossless payload of data that are not floating: byte shuffle + deflate and, for integers,
 * the integer coder's stream (kept only when it decodes to the same bytes), whichever is smaller;
 * null when neither reaches `minRatio` (the put stores the bytes raw).
 */
export async function losslessPayload(
  bytes: Uint8Array,
  dtype: Dtype,
  shape: readonly number[],
  minRatio: number,
): Promise<{ payload: Uint8Array; layout: PayloadLayout } | null> {
  const n = bytes.byteLength;
  const coder = intCoded(dtype) && (n < DEFLATE_SAMPLED_FROM || (await intPredSampleRatio(bytes, dtype, shape)) >= INT_SAMPLE_HOPELESS);
  const [coded, estimate] = await Promise.all([
    coder ? intPredEncode(bytes, dtype, shape) : null,
    coder && n >= DEFLATE_SAMPLED_FROM ? deflateEstimate(bytes, dtype) : null,
  ]);
  const deflateWorthIt = !(coded && estimate !== null && n / coded.byteLength >= DEFLATE_MARGIN * estimate);
  const deflated = deflateWorthIt && deflateMayPay(bytes, dtype, minRatio) ? await losslessEncode(bytes, dtype) : null;
  let best: { payload: Uint8Array; layout: PayloadLayout } | null = deflated && {
    payload: deflated.payload,
    layout: { codec: "lossless", shuffle: deflated.shuffle },
  };
  const codedWins = coded !== null && n / coded.byteLength >= minRatio && (!best || coded.byteLength < best.payload.byteLength);
  if (codedWins && (await sameBytesPaced(await intPredDecode(coded, dtype, shape), bytes)))
    best = { payload: coded, layout: { codec: "lossless", shuffle: 1, coding: "intpred" } };
  return best && n / best.payload.byteLength >= minRatio ? best : null;
}
