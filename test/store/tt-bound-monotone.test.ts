// Under codec "tt" and max_abs_error, a looser bound never stores a smaller TT ratio than a
// tighter one: TT-SVD aims at an RMS error from the bound, and where the decoded values (or the
// slices' rounding margin) miss the bound it runs again at a smaller tolerance instead of
// giving up (a sum of 20 waves stored TT at 1e-2 of its largest magnitude and raw at 3e-2).
// The bound holds for every result.
import test from "tape";
import { createStore } from "../../lib/store/index.js";

function rng(seed: number) {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s / 2 ** 32);
}

/** n^3 sum of `count` separable products of sines, amplitudes exp(-t/6) (bench/tt.ts's waves). */
function waves(n: number, count: number, seed: number): Float32Array {
  const u = rng(seed);
  const x = new Float32Array(n * n * n);
  for (let t = 0; t < count; t++) {
    const k = [1 + 8 * u(), 1 + 8 * u(), 1 + 8 * u()];
    const p = [6 * u(), 6 * u(), 6 * u()];
    const a = Math.exp(-t / 6);
    const f = (d: number) => Array.from({ length: n }, (_, i) => Math.sin(k[d]! * Math.PI * (i / n) + p[d]!));
    const [fx, fy, fz] = [f(0), f(1), f(2)];
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) for (let l = 0; l < n; l++) x[(i * n + j) * n + l]! += a * fx[i]! * fy[j]! * fz[l]!;
  }
  return x;
}

/** n x n sum of `count` Gaussian bumps of random centres and widths. */
function bumps(n: number, count: number, seed: number): Float32Array {
  const u = rng(seed);
  const x = new Float32Array(n * n);
  for (let q = 0; q < count; q++) {
    const [cx, cy, w, a] = [u() * n, u() * n, 4 + u() * n * 0.2, Math.exp(-q / 8)];
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) x[i * n + j]! += a * Math.exp(-((i - cx) ** 2 + (j - cy) ** 2) / (2 * w * w));
  }
  return x;
}

const fields: [string, number[], () => Float32Array][] = [
  ["64^3, 20 waves, seed 2", [64, 64, 64], () => waves(64, 20, 2)],
  ["64^3, 20 waves, seed 3", [64, 64, 64], () => waves(64, 20, 3)],
  ["64^3, 20 waves, seed 5", [64, 64, 64], () => waves(64, 20, 5)],
  ["256^2, 40 bumps", [256, 256], () => bumps(256, 40, 4)],
];
const BOUNDS = [1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1];

test("codec tt under max_abs_error: the ratio does not drop as the bound loosens; the bound holds", async (t) => {
  const s = await createStore({ path: ":memory:" });
  try {
    for (const [name, shape, make] of fields) {
      const d = make();
      let max = 0;
      for (const v of d) max = Math.max(max, Math.abs(v));
      let last = 0;
      let lastBound = 0;
      for (const [i, f] of BOUNDS.entries()) {
        const bound = f * max;
        const r = await s.put("ns", `k${i}`, d, { shape, codec: "tt", max_abs_error: bound });
        t.ok(
          r.compression_ratio >= last,
          `${name}, ${f} of the largest magnitude: ratio ${r.compression_ratio.toFixed(2)} (${r.verdict}), at ${lastBound}: ${last.toFixed(2)}`,
        );
        if (BOUNDS[i]! >= 1e-3) t.equal(r.verdict, "compressed", `${name}, ${f}: stored as TT`);
        const served = (await s.serve("ns", `k${i}`)).data as Float32Array;
        let worst = 0;
        for (let q = 0; q < d.length; q++) worst = Math.max(worst, Math.abs(served[q]! - d[q]!));
        t.ok(worst <= bound, `${name}, ${f}: served within the bound (${worst.toExponential(3)} <= ${bound.toExponential(3)})`);
        last = r.compression_ratio;
        lastBound = f;
      }
    }
  } finally {
    await s.close();
  }
});
