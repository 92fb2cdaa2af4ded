// Similarity on the stored form: TT·TT with cores, TT·dense without densifying the TT,
// dense·dense directly, and a prediction-codec stream against the other side's dense form
// block by block (the stream is never decoded whole); norms come from put time. l2 is computed as
// sqrt(‖a‖² + ‖b‖² − 2⟨a,b⟩) and, where that cancels badly (near-equal tensors), exactly
// from the difference (a TT of summed ranks, or dense arithmetic). Inner products, norms and
// scores are kept scaled (lib/scaled.ts) where they leave float64's range, so data of any
// finite magnitude score and rank correctly; ordinary values take the plain float64 path.
import type { Metric } from "../schemas.js";
import { fromWorkingFloat, toWorkingFloat } from "./codec.js";
import { call, native } from "../native.js";
import { clampCosine, compare, cosine, denseNormScaled, l2, unpack, type Scaled } from "../scaled.js";
import { loadPred } from "./predapi.js";
import { loadTT, type TT, type FloatArray } from "./ttapi.js";

/**
 * A prediction-codec entry held as its stream: `round` is the 2-byte type its values are served
 * in (0 none, 1 float16, 2 bfloat16), `f64` whether the stream holds float64.
 */
export type PredOperand = { kind: "pred"; stream: Uint8Array; norm: Scaled; round: 0 | 1 | 2; f64: boolean };

/** An operand with its Frobenius norm (scaled, lib/scaled.ts; a fingerprint's norm is { m: norm, e: 0 }). */
export type Operand =
  { kind: "tt"; tt: TT; norm: Scaled; coreDtype: "float32" | "float64" } | { kind: "dense"; x: Float32Array | Float64Array; norm: Scaled } | PredOperand;

/** Dense forms of TT and pred operands met against a stream, one per operand (a query is densified once, not per candidate). */
const denseForms = new WeakMap<Operand, Promise<FloatArray>>();

/**
 * The values of an operand as a dense array (TT reconstructed, a stream decoded and rounded as
 * served); with `keep`, kept for the operand's lifetime (a query met by many candidates).
 */
function denseForm(o: Operand, keep = true): Promise<FloatArray> {
  if (o.kind === "dense") return Promise.resolve(o.x);
  let p = denseForms.get(o);
  if (!p) {
    p =
      o.kind === "tt"
        ? loadTT().then((tt) => tt.reconstruct(o.tt))
        : loadPred().then(async (pred) => {
            const x = await pred.decompress(o.stream);
            if (o.round === 0) return x;
            const dtype = o.round === 1 ? "float16" : "bfloat16";
            return toWorkingFloat(fromWorkingFloat(x, dtype), dtype);
          });
    if (keep) denseForms.set(o, p);
  }
  return p;
}

/** ⟨stream, x⟩ (and ‖stream − x‖) for pred operands, decoded block by block in one native call. */
async function predDots(cands: PredOperand[], x: FloatArray, distance: boolean): Promise<{ dot: Scaled[]; distance: Scaled[] | null }> {
  const r = await call(() =>
    native().predDot(
      cands.map((c) => c.stream),
      cands.map((c) => c.round),
      x,
      distance,
    ),
  );
  return { dot: unpack(r.dot), distance: r.distance ? unpack(r.distance) : null };
}

const sameModes = (a: TT, b: TT): boolean => a.modes.length === b.modes.length && a.modes.every((m, i) => m === b.modes[i]);

/** Cores converted to one float type (the engine contracts cores of one type). */
function withCoreType(t: TT, f64: boolean): TT {
  const want = f64 ? Float64Array : Float32Array;
  if (t.cores.every((c) => c instanceof want)) return t;
  return { ...t, cores: t.cores.map((c) => (c instanceof want ? c : want.from(c))) };
}

const asType = (x: Float32Array | Float64Array, f64: boolean): FloatArray =>
  f64 ? (x instanceof Float64Array ? x : Float64Array.from(x)) : x instanceof Float32Array ? x : Float32Array.from(x);

const isF64 = (o: Operand): boolean => (o.kind === "tt" ? o.coreDtype === "float64" : o.kind === "pred" ? o.f64 : o.x instanceof Float64Array);

/** ⟨a, b⟩ on the stored forms. */
export async function dotOf(a: Operand, b: Operand): Promise<Scaled> {
  if (b.kind === "pred") return (await predDots([b], await denseForm(a), false)).dot[0]!;
  if (a.kind === "pred") return (await predDots([a], await denseForm(b), false)).dot[0]!;
  const tt = await loadTT();
  const f64 = isF64(a) || isF64(b);
  if (a.kind === "tt" && b.kind === "tt") {
    if (sameModes(a.tt, b.tt)) return tt.dotScaled(withCoreType(a.tt, f64), withCoreType(b.tt, f64));
    // different factorisations of the same dense shape: densify one side
    const xb = await tt.reconstruct(b.tt);
    return tt.dotDenseScaled(withCoreType(a.tt, f64), asType(xb, f64));
  }
  if (a.kind === "tt" && b.kind === "dense") return tt.dotDenseScaled(withCoreType(a.tt, f64), asType(b.x, f64));
  if (a.kind === "dense" && b.kind === "tt") return tt.dotDenseScaled(withCoreType(b.tt, f64), asType(a.x, f64));
  const da = a as Extract<Operand, { kind: "dense" }>;
  const db = b as Extract<Operand, { kind: "dense" }>;
  return tt.denseDotScaled(asType(da.x, f64), asType(db.x, f64));
}

/** The TT of a − b (same modes): block cores of summed ranks. */
export function ttDifference(a: TT, b: TT, f64: boolean): TT {
  const d = a.modes.length;
  const Arr = f64 ? Float64Array : Float32Array;
  const cores: FloatArray[] = [];
  const ranks: number[] = [1];
  for (let k = 0; k < d; k++) {
    const n = a.modes[k]!;
    const ra0 = a.ranks[k]!,
      ra1 = a.ranks[k + 1]!,
      rb0 = b.ranks[k]!,
      rb1 = b.ranks[k + 1]!;
    const first = k === 0,
      last = k === d - 1;
    const r0 = first ? 1 : ra0 + rb0;
    const r1 = last ? 1 : ra1 + rb1;
    const out = new Arr(r0 * n * r1);
    const A = a.cores[k]!,
      B = b.cores[k]!;
    if (first && last) {
      for (let j = 0; j < n; j++) out[j] = A[j]! - B[j]!;
    } else {
      // A occupies the top-left block, B the bottom-right; the first core is [A, -B] (side by side),
      // the last is [A; B] (stacked), middle ones block-diagonal.
      const bRow = first ? 0 : ra0;
      const bCol = last ? 0 : ra1;
      const sign = first ? -1 : 1;
      for (let i = 0; i < ra0; i++) for (let j = 0; j < n; j++) for (let l = 0; l < ra1; l++) out[(i * n + j) * r1 + l] = A[(i * n + j) * ra1 + l]!;
      for (let i = 0; i < rb0; i++)
        for (let j = 0; j < n; j++) for (let l = 0; l < rb1; l++) out[((bRow + i) * n + j) * r1 + (bCol + l)] = sign * B[(i * n + j) * rb1 + l]!;
    }
    cores.push(out);
    ranks.push(r1);
  }
  return { modes: [...a.modes], ranks, cores, ...(a.shape ? { shape: [...a.shape] } : {}) };
}

/** ‖a − b‖ computed without cancellation. */
export async function exactDistance(a: Operand, b: Operand): Promise<Scaled> {
  if (b.kind === "pred") return (await predDots([b], await denseForm(a), true)).distance![0]!;
  if (a.kind === "pred") return (await predDots([a], await denseForm(b), true)).distance![0]!;
  const tt = await loadTT();
  const f64 = isF64(a) || isF64(b);
  if (a.kind === "tt" && b.kind === "tt" && sameModes(a.tt, b.tt)) return tt.normScaled(ttDifference(withCoreType(a.tt, f64), withCoreType(b.tt, f64), f64));
  const xa = await denseForm(a, false);
  const xb = await denseForm(b, false);
  // halved differences (exact but for subnormals), which cannot overflow: ‖a − b‖ = 2 ‖a/2 − b/2‖
  const diff = new Float64Array(xa.length);
  for (let i = 0; i < diff.length; i++) diff[i] = 0.5 * xa[i]! - 0.5 * xb[i]!;
  const n = denseNormScaled(diff);
  return { m: n.m, e: n.e + 1 };
}

const CANCEL = 1e-3;

/** Dense candidate data a top-K scan holds at once before it scores them and lets them go. */
export const RANK_DENSE_CHUNK_BYTES = 64 * 1024 * 1024;

// Norms between these bounds (or 0) square and multiply within float64's normal range.
const PLAIN_MAX = 2 ** 500;
const PLAIN_MIN = 2 ** -500;
const plainNorm = (n: Scaled): boolean => n.e === 0 && (n.m === 0 || (n.m > PLAIN_MIN && n.m < PLAIN_MAX));
/** Whether the plain float64 formulas are exact enough for these parts (every ordinary tensor). */
const plain = (dot: Scaled, na: Scaled, nb: Scaled): boolean => dot.e === 0 && Number.isFinite(dot.m) && plainNorm(na) && plainNorm(nb);

/** Turns a dot product and the two norms into the metric's score (scaled: l2 and dot can leave float64's range). */
export function scoreOf(metric: Metric, dot: Scaled, na: Scaled, nb: Scaled): Scaled {
  if (metric === "dot") return dot;
  if (plain(dot, na, nb)) {
    const a = na.m,
      b = nb.m,
      d = dot.m;
    if (metric === "cosine") return { m: a === 0 || b === 0 ? 0 : clampCosine(d / (a * b)), e: 0 };
    return { m: Math.sqrt(Math.max(0, a * a + b * b - 2 * d)), e: 0 };
  }
  if (metric === "cosine") return { m: cosine(dot, na, nb), e: 0 };
  return l2(dot, na, nb, CANCEL).distance;
}

/** True when the l2 formula lost too many digits and the exact distance is needed. */
export function l2NeedsExact(dot: Scaled, na: Scaled, nb: Scaled): boolean {
  if (!plain(dot, na, nb)) return l2(dot, na, nb, CANCEL).cancelled;
  const a = na.m,
    b = nb.m;
  return a * a + b * b - 2 * dot.m < CANCEL * (a * a + b * b);
}

/** Orders two scores, the best first: highest cosine and dot, lowest l2. */
export function better(metric: Metric, a: Scaled, b: Scaled): number {
  const c = a.e === 0 && b.e === 0 ? Math.sign(a.m - b.m) : compare(a, b);
  return metric === "l2" ? c : -c;
}

export async function similarity(metric: Metric, a: Operand, b: Operand): Promise<Scaled> {
  const dot = await dotOf(a, b);
  if (metric === "l2" && l2NeedsExact(dot, a.norm, b.norm)) return exactDistance(a, b);
  return scoreOf(metric, dot, a.norm, b.norm);
}

/**
 * Scores one query against many candidates: TT candidates sharing the query's modes go
 * through one batched native call (dotBatch or dotDenseBatch), pred candidates through one
 * predDot call against the query's dense form, the rest pair by pair.
 */
export async function scoreBatch(metric: Metric, q: Operand, cands: Operand[]): Promise<Scaled[]> {
  const dots = new Array<Scaled>(cands.length);
  const batched = new Set<number>();
  const preds: number[] = [];
  for (let i = 0; i < cands.length; i++) if (cands[i]!.kind === "pred") preds.push(i);
  if (preds.length > 0) {
    const r = await predDots(
      preds.map((i) => cands[i] as PredOperand),
      await denseForm(q),
      false,
    );
    preds.forEach((i, j) => {
      dots[i] = r.dot[j]!;
      batched.add(i);
    });
  }
  const f64 = isF64(q) || cands.some((c) => c.kind === "tt" && c.coreDtype === "float64");
  // TT candidates grouped by modes: a TT query batches the group with its own modes, a dense
  // query batches every group; everything else goes pair by pair.
  const groups = new Map<string, number[]>();
  let last: { modes: number[]; group: number[] } | undefined;
  for (let i = 0; i < cands.length; i++) {
    const c = cands[i]!;
    if (c.kind !== "tt" || (q.kind === "tt" && !sameModes(q.tt, c.tt))) continue;
    // consecutive candidates nearly always share modes: compare before building a key
    if (!last || !sameModes({ modes: last.modes } as TT, c.tt)) {
      const key = c.tt.modes.join(",");
      let g = groups.get(key);
      if (!g) groups.set(key, (g = []));
      last = { modes: c.tt.modes, group: g };
    }
    last.group.push(i);
  }
  const qDense = q.kind === "tt" || groups.size === 0 ? null : await denseForm(q);
  for (const idx of groups.values()) {
    const batch = idx.map((i) => withCoreType((cands[i] as Extract<Operand, { kind: "tt" }>).tt, f64));
    // Stored cores were validated (chain, sizes, finiteness) when they were put, so the
    // batch goes to the addon's one multithreaded call without tt.ts re-validating every
    // candidate, which costs several times the arithmetic at 10,000 candidates.
    const modes = batch[0]!.modes;
    const res =
      q.kind === "tt"
        ? await call(() =>
            native().dotBatch(
              withCoreType(q.tt, f64).cores,
              q.tt.ranks,
              batch.map((c) => c.cores),
              batch.map((c) => c.ranks),
              modes,
            ),
          )
        : await call(() =>
            native().dotDenseBatch(
              asType(qDense!, f64),
              batch.map((c) => c.cores),
              batch.map((c) => c.ranks),
              modes,
            ),
          );
    const n = res.length / 2;
    idx.forEach((i, j) => {
      dots[i] = { m: res[j]!, e: res[n + j]! };
      batched.add(i);
    });
  }
  for (let i = 0; i < cands.length; i++) if (!batched.has(i)) dots[i] = await dotOf(q, cands[i]!);
  const scores = new Array<Scaled>(cands.length);
  for (let i = 0; i < cands.length; i++) {
    const c = cands[i]!;
    scores[i] = metric === "l2" && l2NeedsExact(dots[i]!, q.norm, c.norm) ? await exactDistance(q, c) : scoreOf(metric, dots[i]!, q.norm, c.norm);
  }
  return scores;
}
