// Shared by the GPU tests: seeded random TT cores, a relative-difference measure, and the
// store-level top-K comparison that runs on the in-memory device and on a CUDA device.
import type test from "tape";
import { createStore, type CoreInput } from "../../lib/store/index.js";
import type { GpuServing } from "../../lib/store/gpu-cache.js";
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

/** The TT with every core multiplied by 2^p (its norm and entries scaled by 2^(p · cores)). */
export const scaledTT = (t: TT, p: number): TT => ({ ...t, cores: t.cores.map((c) => Float32Array.from(c, (v) => v * 2 ** p)) });

/**
 * query.topk through `serving` (queries on the device) against a CPU-only store, on the same
 * entries, for every metric: the same keys in the same order and the same scores. Namespace
 * "plain" holds ordinary entries, which must be scored on the device (the cache gains them);
 * "far" adds entries whose norms lie 2^±90 from 1, which the device's unscaled products would
 * overflow or flush: the CPU scores that namespace (the cache gains nothing there).
 */
export async function deviceTopkMatchesCpu(t: test.Test, serving: GpuServing): Promise<void> {
  if (!("cache" in serving)) return void t.fail(`serving unavailable: ${serving.unavailable}`);
  const g = await createStore({ path: ":memory:", gpu: serving });
  const c = await createStore({ path: ":memory:", gpu: { unavailable: "cpu only" } });
  const q = randomTT([12, 10, 8], [4, 3], 90);
  const plain = Array.from({ length: 20 }, (_, i) => randomTT([12, 10, 8], [1 + (i % 5), 1 + (i % 3)], 100 + i));
  const far = [scaledTT(plain[0]!, 30), scaledTT(plain[1]!, -30), plain[2]!, scaledTT(plain[3]!, 29)];
  for (const s of [g, c]) {
    for (const ns of ["plain", "far"]) await s.putCores(ns, "q", coresOf(q));
    for (let i = 0; i < plain.length; i++) await s.putCores("plain", `c${i}`, coresOf(plain[i]!));
    for (let i = 0; i < far.length; i++) await s.putCores("far", `f${i}`, coresOf(far[i]!));
  }
  const compare = async (ns: string) => {
    for (const metric of ["cosine", "dot", "l2"] as const) {
      const a = await g.query.topk(ns, { key: "q", k: 6, metric });
      const b = await c.query.topk(ns, { key: "q", k: 6, metric });
      t.deepEqual(
        a.results.map((r) => r.key),
        b.results.map((r) => r.key),
        `${ns}, ${metric}: same keys in the same order`,
      );
      const worst = Math.max(...a.results.map((r, i) => relErr(r.score, b.results[i]!.score)));
      t.ok(worst <= 1e-5 && a.results.every((r) => Number.isFinite(r.score)), `${ns}, ${metric}: same finite scores (worst ${worst.toExponential(2)})`);
    }
  };
  await compare("plain");
  const afterPlain = serving.cache.stats().entries;
  t.equal(afterPlain, 1 + plain.length, "plain: the query and every candidate became resident (scored on the device)");
  await compare("far");
  t.equal(serving.cache.stats().entries, afterPlain, "far: nothing more became resident (scored on the CPU)");
  t.equal(serving.cache.stats().pinned, 0, "no pins left");
  await g.close();
  await c.close();
}
