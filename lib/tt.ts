// The tensor-train toolkit: TT-SVD compression, block reconstruction, inner products and
// rounding over typed arrays. Validation, defaults and error messages live here; the math
// runs in the native addon (lib/native.ts), off the event loop.
import { constants as bufferConstants } from "node:buffer";
import { totalmem } from "node:os";
import { z } from "zod";
import { ValidationError } from "./errors.js";
import { parseFieldOrThrow, shapeSchema } from "./fields.js";
import { call, native } from "./native.js";
import { sqrt as scaledSqrt, unpack, value, type Scaled } from "./scaled.js";

export type FloatArray = Float32Array | Float64Array;

/** A tensor in TT form. Core k holds ranks[k]*modes[k]*ranks[k+1] numbers, C order [r_prev][n_k][r_next]. */
export interface TT {
  /** TT mode sizes n_1..n_d; their product is the product of the dense shape. */
  modes: number[];
  /** Length d+1, ranks[0] = ranks[d] = 1. */
  ranks: number[];
  /** One core per mode, all of the same type. */
  cores: FloatArray[];
  /** The dense shape when it differs from modes (quantized factorisation); default = modes. */
  shape?: number[];
}

export interface CompressOptions {
  /** Relative Frobenius tolerance: ‖A − Â‖_F ≤ tolerance·‖A‖_F unless max_rank binds. Default 1e-3. */
  tolerance?: number;
  /** Cap on every TT rank. Without it the tolerance holds: ranks go as high as the data need
   *  (up to NO_CAP_RANK_LIMIT; a result that would need more is refused with a ValidationError
   *  naming the rank). With it, a result may miss the tolerance where the cap binds ("weak"). */
  max_rank?: number;
  /** TT modes (product = product of shape); default chooseModes(shape), and the plain shape when
   *  that result misses the tolerance (max_rank binds) and the plain one does not. "auto" tries
   *  both and keeps the smaller result within the tolerance. */
  modes?: number[] | "auto";
  /** Resolve null instead of the result when the data cannot be stored at this dense/TT size
   *  ratio: no TT within the tolerance reaches it, or the result (max_rank included) does not.
   *  Gives up as soon as rank lower bounds prove either (sampled before any decomposition, then
   *  the true ranks and discarded energy after each step). The result, when there is one, is the
   *  same as without min_ratio (a capped, "weak" result is returned when it reaches the ratio
   *  and the data are not provably incompressible at the tolerance). */
  min_ratio?: number;
}

export interface CompressResult extends TT {
  /** Measured ‖A − Â‖_F / ‖A‖_F, accumulated in float64. */
  relative_error: number;
}

export interface RoundOptions {
  tolerance?: number;
  max_rank?: number;
}

export interface Backend {
  /** Instruction set of the kernels in use: avx512, avx2 or scalar. */
  isa: string;
  /** Worker threads of the native pool. */
  threads: number;
  /** Whether CUDA code was compiled into the addon. */
  cuda_compiled: boolean;
  /** The CUDA device found, or null. */
  cuda_device: string | null;
  /** Why no CUDA device is used, or null when one is. */
  reason: string | null;
  /** Why the instruction set differs from SVC_TT_ISA, or null. */
  isa_note: string | null;
}

export const DEFAULT_TOLERANCE = 1e-3;
export const DEFAULT_MAX_RANK = 256;
/** Smallest tolerances the types can honour: float32 holds about 7 significant digits (its cores
 *  and its reconstruction round at 6e-8 per element), float64 about 16; compress and round reach
 *  these on an accurate route (QR + one-sided Jacobi in float64) where the fast ones cannot. */
export const MIN_TOLERANCE_F32 = 1e-6;
export const MIN_TOLERANCE_F64 = 1e-12;
/** round's floor for float64 cores (the same as compress's). */
export const MIN_ROUND_TOLERANCE_F64 = MIN_TOLERANCE_F64;
/** Largest max_rank accepted: beyond it the factorisations would need gigabytes and minutes. */
export const MAX_RANK_LIMIT = 1024;
/** compress without max_rank raises its ranks as far as the tolerance needs, up to this (an
 *  unfolding's Gram matrix of this side is 32 MiB and its eigensolve takes seconds); data that
 *  need more are refused. */
export const NO_CAP_RANK_LIMIT = 2048;

const int = (what: string) => z.number({ error: `${what} must be a number` }).int(`${what} must be an integer`);

const toleranceSchema = z
  .number({ error: "tolerance must be a finite number" })
  .refine(Number.isFinite, "tolerance must be finite")
  .refine((t) => t > 0 && t < 1, "tolerance must be greater than 0 and less than 1");
const maxRankSchema = int("max_rank").min(1, "max_rank must be at least 1").max(MAX_RANK_LIMIT, `max_rank must be at most ${MAX_RANK_LIMIT}`);
const modesSchema = z
  .array(
    int("modes entries")
      .min(1, "modes entries must be at least 1")
      .max(2 ** 31 - 1, "modes entries are too large"),
    {
      error: "modes must be an array of integers",
    },
  )
  .min(1, "modes must have at least one entry")
  .max(128, "modes must have at most 128 entries");

const compressOptionsSchema = z
  .strictObject(
    {
      tolerance: toleranceSchema.optional(),
      max_rank: maxRankSchema.optional(),
      modes: z.union([z.literal("auto"), modesSchema]).optional(),
      min_ratio: z
        .number({ error: "min_ratio must be a number" })
        .refine(Number.isFinite, "min_ratio must be finite")
        .refine((r) => r > 0, "min_ratio must be greater than 0")
        .optional(),
    },
    { error: (iss) => (iss.code === "unrecognized_keys" ? `unknown option ${iss.keys.join(", ")}` : "options must be an object") },
  )
  .optional();

const roundOptionsSchema = z
  .strictObject(
    { tolerance: toleranceSchema.optional(), max_rank: maxRankSchema.optional() },
    { error: (iss) => (iss.code === "unrecognized_keys" ? `unknown option ${iss.keys.join(", ")}` : "options must be an object") },
  )
  .optional();

const product = (xs: readonly number[]): number => xs.reduce((a, b) => a * b, 1);

function floatArray(x: unknown, field: string): FloatArray {
  if (!(x instanceof Float32Array || x instanceof Float64Array)) {
    throw new ValidationError(`${field} must be a Float32Array or Float64Array.`, field);
  }
  return x;
}

/**
 * Cores of more elements than this are checked for NaN and infinities by the addon on its
 * worker thread (native/addon.cc kFiniteInJs, same message): no large scan on the event loop.
 */
const FINITE_IN_JS = 1 << 16;

function checkFinite(x: FloatArray, field: string): void {
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i]!)) throw new ValidationError(`${field} must contain only finite numbers (found ${x[i]} at index ${i}).`, field);
  }
}

function checkTolerance(tol: number, f64: boolean): void {
  const min = f64 ? MIN_TOLERANCE_F64 : MIN_TOLERANCE_F32;
  if (tol < min) {
    const digits = f64 ? "float64 carries about 16 significant digits" : "float32 carries about 7 significant digits";
    throw new ValidationError(`tolerance must be at least ${min.toExponential()} for ${f64 ? "float64" : "float32"} data (${digits}).`, "tolerance");
  }
}

/** Splits modes into consecutive groups whose products are the dense dimensions. */
function groupsOf(modes: readonly number[], shape: readonly number[], field: string): number[] {
  const groups: number[] = [];
  let mi = 0;
  for (const n of shape) {
    let p = 1;
    let g = 0;
    while (p < n && mi < modes.length) {
      p *= modes[mi++]!;
      g++;
    }
    if (p !== n) throw new ValidationError(`${field} must split into consecutive groups of modes whose products are the dense dimensions.`, field);
    groups.push(g);
  }
  // Trailing modes of size 1 belong to the last dimension.
  while (mi < modes.length && modes[mi] === 1) {
    groups[groups.length - 1]!++;
    mi++;
  }
  if (mi !== modes.length) throw new ValidationError(`${field} must split into consecutive groups of modes whose products are the dense dimensions.`, field);
  return groups;
}

interface CheckedTT {
  modes: number[];
  ranks: number[];
  cores: FloatArray[];
  shape: number[];
  groups: number[];
  f64: boolean;
}

const ranksSchema = z.array(
  int("ranks entries")
    .min(1, "ranks entries must be at least 1")
    .max(1 << 20, "ranks entries are too large"),
  {
    error: "ranks must be an array of integers",
  },
);

/** Validates a TT given by a caller; `name` prefixes field names (e.g. "a.cores[2]"). */
/** scanFinite false: the cores' entries are left for the caller to check (dotBatch, after the products). */
function checkTT(t: unknown, name: string, scanFinite = true): CheckedTT {
  const p = (f: string) => (name ? `${name}.${f}` : f);
  if (t === null || typeof t !== "object") throw new ValidationError(`${name || "t"} must be a TT object.`, name || "t");
  const o = t as Record<string, unknown>;
  const modes = parseFieldOrThrow(modesSchema, o.modes, p("modes"));
  const d = modes.length;
  const ranks = parseFieldOrThrow(ranksSchema, o.ranks, p("ranks"));
  if (ranks.length !== d + 1) throw new ValidationError(`${p("ranks")} must have ${d + 1} entries (one more than modes).`, p("ranks"));
  if (ranks[0] !== 1 || ranks[d] !== 1) throw new ValidationError(`${p("ranks")} must start and end with 1.`, p("ranks"));
  if (!Array.isArray(o.cores) || o.cores.length !== d) {
    throw new ValidationError(`${p("cores")} must be an array with one core per mode (${d}).`, p("cores"));
  }
  const cores: FloatArray[] = [];
  let f64 = false;
  for (let k = 0; k < d; k++) {
    const field = p(`cores[${k}]`);
    const c = floatArray(o.cores[k], field);
    if (k === 0) f64 = c instanceof Float64Array;
    else if (c instanceof Float64Array !== f64) throw new ValidationError(`${field} must have the same type as cores[0].`, field);
    const want = ranks[k]! * modes[k]! * ranks[k + 1]!;
    if (c.length !== want) {
      throw new ValidationError(`${field} must have ranks[${k}]*modes[${k}]*ranks[${k + 1}] = ${want} elements, not ${c.length}.`, field);
    }
    if (scanFinite && c.length <= FINITE_IN_JS) checkFinite(c, field);
    cores.push(c);
  }
  let shape = modes;
  if (o.shape !== undefined) shape = parseFieldOrThrow(shapeSchema, o.shape, p("shape"));
  if (!Number.isSafeInteger(product(modes))) throw new ValidationError(`${p("modes")} describe a tensor too large to address.`, p("modes"));
  const groups = groupsOf(modes, shape, o.shape !== undefined ? p("shape") : p("modes"));
  return { modes, ranks, cores, shape, groups, f64 };
}

/**
 * The TT modes the store uses for a dense shape; a pure function of the shape.
 * Dimensions of at least QUANTIZE_MIN are split into factors of at most 8 (first-fit
 * decreasing over the prime factors; a prime above 8 stays a factor of its own), most
 * significant first, so the mode order is the dense C order. Smaller dimensions stay whole.
 * @example chooseModes([256, 256, 256]) // [8, 8, 4, 8, 8, 4, 8, 8, 4]
 */
export function chooseModes(shape: number[]): number[] {
  const s = parseFieldOrThrow(shapeSchema, shape, "shape");
  const out: number[] = [];
  for (const n of s) out.push(...quantize(n));
  return out;
}

/** Dimensions below this size are kept as one mode. */
export const QUANTIZE_MIN = 64;

function quantize(n: number): number[] {
  if (n < QUANTIZE_MIN) return [n];
  const primes: number[] = [];
  let x = n;
  for (let p = 2; p * p <= x; p++) {
    while (x % p === 0) {
      primes.push(p);
      x /= p;
    }
  }
  if (x > 1) primes.push(x);
  if (primes.length === 1) return [n];
  primes.sort((a, b) => b - a);
  // First-fit decreasing into factors of at most 8 fixes how many factors there are ...
  const ffd: number[] = [];
  for (const p of primes) {
    const i = ffd.findIndex((b) => b * p <= 8);
    if (i >= 0) ffd[i]! *= p;
    else ffd.push(p);
  }
  // ... then the primes are dealt to the smallest factor so far, which balances them
  // (1024 -> 8,8,4,4 rather than 8,8,8,2), unless that breaks the cap.
  const cap = Math.max(8, primes[0]!);
  const bal: number[] = new Array<number>(ffd.length).fill(1);
  for (const p of primes) {
    let i = 0;
    for (let j = 1; j < bal.length; j++) if (bal[j]! < bal[i]!) i = j;
    bal[i]! *= p;
  }
  const bins = bal.every((b) => b <= cap) ? bal : ffd;
  return bins.sort((a, b) => b - a);
}

/**
 * TT-SVD of a dense C-order array. Resolves null only when min_ratio is given and unreachable.
 * @example const t = await tt.compress(new Float32Array(64 ** 3), [64, 64, 64], { tolerance: 1e-3 });
 */
export async function compress(data: FloatArray, shape: number[], opts?: CompressOptions): Promise<CompressResult | null> {
  const x = floatArray(data, "data");
  if (x.length === 0) throw new ValidationError("data must not be empty.", "data");
  const s = parseFieldOrThrow(shapeSchema, shape, "shape");
  if (product(s) !== x.length) {
    throw new ValidationError(`shape multiplies to ${product(s)} but data has ${x.length} elements.`, "shape");
  }
  const o = parseFieldOrThrow(compressOptionsSchema, opts, "") ?? {};
  const f64 = x instanceof Float64Array;
  const tolerance = o.tolerance ?? DEFAULT_TOLERANCE;
  checkTolerance(tolerance, f64);
  // A caller's cap may bind (a "weak" result); without one the tolerance holds, so every
  // decomposition may keep the full rank of its unfoldings, up to NO_CAP_RANK_LIMIT.
  const capped = o.max_rank !== undefined;
  const capFor = (modes: number[]) => (capped ? o.max_rank! : Math.min(fullRank(modes), NO_CAP_RANK_LIMIT));
  const minRatio = o.min_ratio ?? 0;
  const plain = [...s];
  const candidates: number[][] = [];
  let fallbackPlain = false;
  if (o.modes === "auto") {
    const q = chooseModes(s);
    candidates.push(q);
    if (q.length !== s.length) candidates.push(plain);
  } else if (o.modes !== undefined) {
    if (product(o.modes) !== x.length) {
      throw new ValidationError(`modes multiply to ${product(o.modes)} but data has ${x.length} elements.`, "modes");
    }
    groupsOf(o.modes, s, "modes");
    candidates.push(o.modes);
  } else {
    const q = chooseModes(s);
    candidates.push(q);
    fallbackPlain = q.length !== s.length;
  }
  // A result within the tolerance always wins over one that misses it (max_rank bound); among
  // those within it the smallest, among those missing it the most accurate.
  const better = (a: CompressResult, sa: number, b: CompressResult | null, sb: number): boolean => {
    if (!b) return true;
    const aok = a.relative_error <= tolerance,
      bok = b.relative_error <= tolerance;
    if (aok !== bok) return aok;
    return aok ? sa < sb : a.relative_error < b.relative_error;
  };
  let best: CompressResult | null = null;
  let bestSize = Infinity;
  const run = async (modes: number[]) => {
    const cap = capFor(modes);
    const r = await call(() => native().compress(x, modes, tolerance, cap, minRatio));
    if (!r) return;
    const size = r.cores.reduce((a, c) => a + c.length, 0);
    const res: CompressResult = { modes: [...modes], ranks: r.ranks, cores: r.cores, relative_error: r.relative_error };
    if (modes.length !== s.length || modes.some((m, i) => m !== s[i])) res.shape = [...s];
    if (better(res, size, best, bestSize)) {
      best = res;
      bestSize = size;
    }
  };
  for (const modes of candidates) await run(modes);
  // The quantized modes can need ranks above max_rank where the plain ones do not (their middle
  // unfoldings are larger): then the plain factorisation is tried too.
  const first = best as CompressResult | null;
  if (fallbackPlain && first && first.relative_error > tolerance) await run(plain);
  const res = best as CompressResult | null;
  if (!capped && res && res.relative_error > tolerance) {
    // Only NO_CAP_RANK_LIMIT can bind here: name the unfolding that reached it.
    const k = res.ranks.findIndex((r) => r >= NO_CAP_RANK_LIMIT);
    const full = k > 0 ? Math.min(product(res.modes.slice(0, k)), product(res.modes.slice(k))) : NO_CAP_RANK_LIMIT;
    throw new ValidationError(
      `tolerance ${tolerance} needs a TT rank above ${NO_CAP_RANK_LIMIT} at unfolding ${k} (whose full rank is ${full}), more than compress computes without max_rank; pass max_rank (at most ${MAX_RANK_LIMIT}) to accept a result above the tolerance, or a larger tolerance.`,
      "tolerance",
    );
  }
  return res;
}

/** The largest rank any TT over `modes` can need: the largest shorter side of its unfoldings. */
function fullRank(modes: readonly number[]): number {
  let left = 1,
    best = 1;
  const total = product(modes);
  for (let k = 0; k + 1 < modes.length; k++) {
    left *= modes[k]!;
    best = Math.max(best, Math.min(left, total / left));
  }
  return best;
}

const sliceSchema = z.array(
  z.tuple([int("slice start").min(0, "slice start must be at least 0"), int("slice stop")], { error: "slice entries must be [start, stop) pairs" }),
  { error: "slice must be an array of [start, stop) pairs" },
);
const reconstructOptionsSchema = z.strictObject({ slice: sliceSchema.optional() }, { error: "options must be an object" }).optional();

/**
 * The dense C-order array over t.shape ?? t.modes, or the block given by one [start, stop) per
 * dense dimension, computed without building the rest.
 * @example const block = await tt.reconstruct(t, { slice: [[0, 1], [0, 256], [10, 20]] });
 */
export async function reconstruct(t: TT, opts?: { slice?: [number, number][] }): Promise<FloatArray> {
  const c = checkTT(t, "");
  const o = parseFieldOrThrow(reconstructOptionsSchema, opts, "") ?? {};
  let flat: number[] | null = null;
  if (o.slice) {
    if (o.slice.length !== c.shape.length) {
      throw new ValidationError(`slice must have one [start, stop) pair per dense dimension (${c.shape.length}).`, "slice");
    }
    flat = [];
    for (let j = 0; j < c.shape.length; j++) {
      const [a, b] = o.slice[j]!;
      if (!(a < b && b <= c.shape[j]!)) {
        throw new ValidationError(`slice[${j}] must satisfy 0 <= start < stop <= ${c.shape[j]}.`, `slice[${j}]`);
      }
      flat.push(a, b);
    }
  }
  const elements = flat ? c.shape.reduce((a, _, j) => a * (flat![2 * j + 1]! - flat![2 * j]!), 1) : product(c.shape);
  checkResultSize(elements * (c.f64 ? 8 : 4), flat ? "slice" : "shape");
  return call(() => native().reconstruct(c.cores, c.ranks, c.modes, c.shape, c.groups, flat));
}

/** Refuses results that could not be allocated (typed-array limit, or half the machine's memory). */
function checkResultSize(bytes: number, field: string): void {
  const limit = Math.min(bufferConstants.MAX_LENGTH, totalmem() / 2);
  if (bytes > limit) {
    throw new ValidationError(
      `${field} asks for a dense result of ${bytes} bytes, more than the ${Math.floor(limit)} bytes allowed here; request a smaller slice.`,
      field,
    );
  }
}

function sameModes(a: CheckedTT, b: CheckedTT, field: string): void {
  if (a.modes.length !== b.modes.length || a.modes.some((m, i) => m !== b.modes[i])) {
    throw new ValidationError(`${field} must have the same modes as the first operand.`, field);
  }
}

/**
 * ⟨a, b⟩ computed on the cores (float64 accumulation, scaled where it would overflow or
 * underflow, lib/scaled.ts); a and b need equal modes.
 */
export async function dotScaled(a: TT, b: TT): Promise<Scaled> {
  const x = checkTT(a, "a");
  const y = checkTT(b, "b");
  sameModes(x, y, "b.modes");
  return unpack(await call(() => native().dot(x.cores, x.ranks, y.cores, y.ranks, x.modes)))[0]!;
}

/**
 * Inner product ⟨a, b⟩ computed on the cores (float64 accumulation, no overflow on the way);
 * a and b need equal modes. A product beyond float64's range (about 1.8e308) is ±Infinity.
 */
export async function dot(a: TT, b: TT): Promise<number> {
  return value(await dotScaled(a, b));
}

/** Frobenius norm computed on the cores, kept scaled (lib/scaled.ts): finite for any finite cores. */
export async function normScaled(a: TT): Promise<Scaled> {
  const x = checkTT(a, "a");
  const v = unpack(await call(() => native().dot(x.cores, x.ranks, x.cores, x.ranks, x.modes)))[0]!;
  return scaledSqrt({ m: Math.max(0, v.m), e: v.e });
}

/** Frobenius norm computed on the cores: finite wherever the norm is a float64, else Infinity. */
export async function norm(a: TT): Promise<number> {
  return value(await normScaled(a));
}

/** ⟨t, x⟩ with x dense C-order over t.shape ?? t.modes, without densifying t, kept scaled. */
export async function dotDenseScaled(t: TT, x: FloatArray): Promise<Scaled> {
  const c = checkTT(t, "t");
  const dense = floatArray(x, "x");
  if (dense.length !== product(c.modes)) {
    throw new ValidationError(`x must have ${product(c.modes)} elements (the dense size of t), not ${dense.length}.`, "x");
  }
  const v = unpack(await call(() => native().dotDense(c.cores, c.ranks, c.modes, dense)))[0]!;
  if (Number.isNaN(v.m)) throw new ValidationError("x must contain only finite numbers.", "x");
  return v;
}

/** ⟨t, x⟩ with x dense C-order over t.shape ?? t.modes, without densifying t (±Infinity beyond float64's range). */
export async function dotDense(t: TT, x: FloatArray): Promise<number> {
  return value(await dotDenseScaled(t, x));
}

/** TT rounding: recompression to a relative tolerance and rank cap; reports the measured error. */
export async function round(t: TT, opts?: RoundOptions): Promise<CompressResult> {
  const c = checkTT(t, "t");
  const o = parseFieldOrThrow(roundOptionsSchema, opts, "") ?? {};
  const tolerance = o.tolerance ?? DEFAULT_TOLERANCE;
  checkTolerance(tolerance, c.f64);
  const r = await call(() => native().round(c.cores, c.ranks, c.modes, tolerance, o.max_rank ?? DEFAULT_MAX_RANK));
  const out: CompressResult = { modes: [...c.modes], ranks: r.ranks, cores: r.cores, relative_error: r.relative_error };
  if (t.shape !== undefined) out.shape = [...c.shape];
  return out;
}

/** ⟨q, c_i⟩ for every candidate, in one multithreaded native call; all need q's modes. */
export async function dotBatch(q: TT, candidates: TT[]): Promise<Float64Array> {
  const x = checkTT(q, "q");
  if (!Array.isArray(candidates)) throw new ValidationError("candidates must be an array of TT objects.", "candidates");
  // The candidates' entries are scanned only where a score comes back non-finite: every entry
  // of every core enters a product, so a NaN or infinity in one makes its candidate's score NaN
  // or infinite, and the scan then names it as the check before the call would have. (Scanning
  // every small core first cost about as much as the dot products themselves.)
  const cs = candidates.map((c, i) => {
    const y = checkTT(c, `candidates[${i}]`, false);
    sameModes(x, y, `candidates[${i}].modes`);
    return y;
  });
  const scaled = unpack(
    await call(() =>
      native().dotBatch(
        x.cores,
        x.ranks,
        cs.map((c) => c.cores),
        cs.map((c) => c.ranks),
        x.modes,
      ),
    ),
  );
  for (let i = 0; i < scaled.length; i++) {
    if (!Number.isNaN(scaled[i]!.m)) continue;
    cs[i]!.cores.forEach((core, k) => {
      if (core.length <= FINITE_IN_JS) checkFinite(core, `candidates[${i}].cores[${k}]`);
    });
  }
  return Float64Array.from(scaled, value);
}

/** ⟨x, c_i⟩ for every candidate, x dense over the candidates' dense shape. */
export async function dotDenseBatch(x: FloatArray, candidates: TT[]): Promise<Float64Array> {
  const dense = floatArray(x, "x");
  if (!Array.isArray(candidates)) throw new ValidationError("candidates must be an array of TT objects.", "candidates");
  if (candidates.length === 0) return new Float64Array(0);
  const cs = candidates.map((c, i) => checkTT(c, `candidates[${i}]`));
  const first = cs[0]!;
  cs.forEach((c, i) => sameModes(first, c, `candidates[${i}].modes`));
  if (dense.length !== product(first.modes)) {
    throw new ValidationError(`x must have ${product(first.modes)} elements (the candidates' dense size), not ${dense.length}.`, "x");
  }
  const v = unpack(
    await call(() =>
      native().dotDenseBatch(
        dense,
        cs.map((c) => c.cores),
        cs.map((c) => c.ranks),
        first.modes,
      ),
    ),
  );
  if (v.some((s) => Number.isNaN(s.m))) throw new ValidationError("x must contain only finite numbers.", "x");
  return Float64Array.from(v, value);
}

/** ⟨a, b⟩ of two dense arrays of the same length, accumulated in float64, kept scaled. */
export async function denseDotScaled(a: FloatArray, b: FloatArray): Promise<Scaled> {
  const x = floatArray(a, "a");
  const y = floatArray(b, "b");
  if (x.length !== y.length) throw new ValidationError(`b must have the same length as a (${x.length}), not ${y.length}.`, "b");
  const v = unpack(await call(() => native().denseDot(x, y)))[0]!;
  if (Number.isNaN(v.m)) throw new ValidationError("a and b must contain only finite numbers.", "a");
  return v;
}

/** ⟨a, b⟩ of two dense arrays of the same length, accumulated in float64 (±Infinity beyond float64's range). */
export async function denseDot(a: FloatArray, b: FloatArray): Promise<number> {
  return value(await denseDotScaled(a, b));
}

/** The native backend: instruction set, threads, CUDA build and device. */
export function backend(): Backend {
  const b = native().backend();
  return { isa: b.isa, threads: b.threads, cuda_compiled: b.cuda_compiled, cuda_device: b.cuda_device, reason: b.reason, isa_note: b.isa_note };
}
