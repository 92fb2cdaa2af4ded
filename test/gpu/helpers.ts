// Shared by the GPU tests: seeded random TT cores and a relative-difference measure.
import type { CoreInput } from "../../lib/store/index.js";
import type { TT } from "../../lib/store/ttapi.js";

/** A deterministic generator (mulberry32) so every run sees the same numbers. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296 - 0.5;
  };
}

/** A random TT with the given modes and inner ranks (float32 cores). */
export function randomTT(modes: number[], inner: number[], seed: number, shape?: number[]): TT {
  const r = rng(seed);
  const ranks = [1, ...inner, 1];
  const cores = modes.map((n, k) => Float32Array.from({ length: ranks[k]! * n * ranks[k + 1]! }, r));
  return shape ? { modes, ranks, cores, shape } : { modes, ranks, cores };
}

export const coresOf = (t: TT): CoreInput[] =>
  t.cores.map((c, k) => ({ shape: [t.ranks[k]!, t.modes[k]!, t.ranks[k + 1]!] as [number, number, number], data: Float32Array.from(c) }));

/** ‖a − b‖ / ‖b‖ (Frobenius), in float64. */
export function relDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return Infinity;
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num) / Math.max(Math.sqrt(den), Number.MIN_VALUE);
}

/** |a − b| / max(|b|, tiny). */
export const relErr = (a: number, b: number): number => Math.abs(a - b) / Math.max(Math.abs(b), 1e-30);
