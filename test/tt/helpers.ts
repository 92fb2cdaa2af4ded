// Test oracles in plain TypeScript: dense arithmetic that the native TT code is checked against.
import type { FloatArray, TT } from "../../lib/tt.js";

/** Deterministic uniform [0, 1) generator (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Standard normal samples (Box-Muller). */
export function gaussian(seed: number): () => number {
  const u = rng(seed);
  return () => Math.sqrt(-2 * Math.log(1 - u())) * Math.cos(2 * Math.PI * u());
}

export const prod = (xs: number[]): number => xs.reduce((a, b) => a * b, 1);

/** A random TT with the given modes and ranks. */
export function randomTT(modes: number[], ranks: number[], seed: number, f64 = true): TT {
  const g = gaussian(seed);
  const cores = modes.map((n, k) => {
    const c = f64 ? new Float64Array(ranks[k]! * n * ranks[k + 1]!) : new Float32Array(ranks[k]! * n * ranks[k + 1]!);
    for (let i = 0; i < c.length; i++) c[i] = g();
    return c;
  });
  return { modes, ranks, cores };
}

/** Dense C-order contraction of a TT, in float64, by the definition. */
export function denseOf(t: TT): Float64Array {
  let cur = new Float64Array([1]);
  let rows = 1;
  for (let k = 0; k < t.modes.length; k++) {
    const n = t.modes[k]!,
      r0 = t.ranks[k]!,
      r1 = t.ranks[k + 1]!;
    const c = t.cores[k]!;
    const next = new Float64Array(rows * n * r1);
    for (let p = 0; p < rows; p++)
      for (let a = 0; a < r0; a++) {
        const v = cur[p * r0 + a]!;
        if (v === 0) continue;
        for (let i = 0; i < n; i++) for (let b = 0; b < r1; b++) next[(p * n + i) * r1 + b]! += v * c[(a * n + i) * r1 + b]!;
      }
    cur = next;
    rows *= n;
  }
  return cur;
}

export function dotF64(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

/** ‖a − b‖/‖a‖ accumulated in float64. */
export function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0,
    den = 0;
  for (let i = 0; i < a.length; i++) {
    const d = a[i]! - b[i]!;
    num += d * d;
    den += a[i]! * a[i]!;
  }
  return Math.sqrt(num / den);
}

/** ‖a − b‖/‖a‖ in float64 with both scaled by max|a| first, so no square overflows or underflows. */
export function scaledRelErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s = Math.max(s, Math.abs(a[i]!));
  let num = 0,
    den = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]! / s,
      y = b[i]! / s;
    num += (x - y) ** 2;
    den += x * x;
  }
  return Math.sqrt(num / den);
}

/** A smooth 3-D field: a mixture of Gaussians on [0,1]^3. */
export function smoothField(n0: number, n1: number, n2: number, f64 = false, seed = 1): FloatArray {
  const u = rng(seed);
  const centers = Array.from({ length: 5 }, () => [u(), u(), u(), 0.05 + 0.2 * u(), u() - 0.3]);
  const out = f64 ? new Float64Array(n0 * n1 * n2) : new Float32Array(n0 * n1 * n2);
  for (let i = 0; i < n0; i++)
    for (let j = 0; j < n1; j++)
      for (let k = 0; k < n2; k++) {
        const x = i / n0,
          y = j / n1,
          z = k / n2;
        let v = 0;
        for (const [cx, cy, cz, s, w] of centers) {
          const r2 = (x - cx!) ** 2 + (y - cy!) ** 2 + (z - cz!) ** 2;
          v += w! * Math.exp(-r2 / (2 * s! * s!));
        }
        out[(i * n1 + j) * n2 + k] = v;
      }
  return out;
}

export function noise(n: number, seed: number, f64 = false): FloatArray {
  const g = gaussian(seed);
  const out = f64 ? new Float64Array(n) : new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = g();
  return out;
}

export const ttSize = (t: TT): number => t.cores.reduce((a, c) => a + c.length, 0);

/**
 * Dense tensor over `shape`, in float64, from a TT with ranks R (capped by the unfoldings) whose
 * cores are Gaussian and whose bond k is weighted by `bond(r_k, u)(i)` (u: the seeded uniform
 * generator), plus Gaussian noise of relative size `floor` when it is above 0. Built left to
 * right. The seeded inputs of the error-bound test and bench/tt-sweep.ts.
 */
export function denseFromTT(shape: number[], R: number, seed: number, bond: (r: number, u: () => number) => (i: number) => number, floor = 0): Float64Array {
  const u = rng(seed),
    g = gaussian(seed + 1);
  const d = shape.length,
    n = prod(shape);
  const ranks = [1];
  for (let k = 1; k < d; k++) ranks.push(Math.max(1, Math.min(R, prod(shape.slice(0, k)), prod(shape.slice(k)))));
  ranks.push(1);
  let cur = new Float64Array([1]);
  let rows = 1;
  for (let k = 0; k < d; k++) {
    const r0 = ranks[k]!,
      nk = shape[k]!,
      r1 = ranks[k + 1]!;
    const w = bond(r1, u);
    const core = new Float64Array(r0 * nk * r1);
    for (let i = 0; i < core.length; i++) core[i] = (g() * w(i % r1)) / Math.sqrt(nk * r0);
    const next = new Float64Array(rows * nk * r1);
    for (let p = 0; p < rows; p++)
      for (let a = 0; a < r0; a++) {
        const v = cur[p * r0 + a]!;
        if (v === 0) continue;
        const off = a * nk * r1,
          out = p * nk * r1;
        for (let j = 0; j < nk * r1; j++) next[out + j]! += v * core[off + j]!;
      }
    cur = next;
    rows *= nk;
  }
  if (floor > 0) {
    let s = 0;
    for (let i = 0; i < n; i++) s += cur[i]! * cur[i]!;
    const amp = floor * Math.sqrt(s / n);
    for (let i = 0; i < n; i++) cur[i]! += amp * g();
  }
  return cur;
}
