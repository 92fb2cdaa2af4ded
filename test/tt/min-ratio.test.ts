// tt.compress with min_ratio: null when the result's dense/TT size ratio is below min_ratio
// (max_rank included) or when no TT within the tolerance reaches it; the same result as without
// min_ratio otherwise, on smooth, heat-equation-like and exactly low-rank fields at three
// tolerances and on noise.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { gaussian, noise, randomTT, smoothField, ttSize } from "./helpers.js";

/** Sum of separable sine products with 1/k^2 decay (a heat-equation-like field), n^3, float32. */
function heatLike(n: number): Float32Array {
  const g = gaussian(7);
  const x = new Float32Array(n * n * n);
  for (let a = 1; a <= 5; a++)
    for (let b = 1; b <= 5; b++)
      for (let c = 1; c <= 5; c++) {
        const amp = (g() / (a * a + b * b + c * c)) * Math.exp(-(a * a + b * b + c * c) * 0.02);
        for (let i = 0; i < n; i++) {
          const fi = amp * Math.sin((a * Math.PI * (i + 0.5)) / n);
          for (let j = 0; j < n; j++) {
            const fij = fi * Math.sin((b * Math.PI * (j + 0.5)) / n);
            const base = (i * n + j) * n;
            for (let k = 0; k < n; k++) x[base + k]! += fij * Math.sin((c * Math.PI * (k + 0.5)) / n);
          }
        }
      }
  return x;
}

async function lowRank(n: number): Promise<Float32Array> {
  const t = randomTT([n, n, n], [1, 5, 5, 1], 3, false);
  return (await tt.reconstruct(t)) as Float32Array;
}

const same = (a: tt.CompressResult, b: tt.CompressResult) =>
  a.ranks.join() === b.ranks.join() &&
  a.relative_error === b.relative_error &&
  a.cores.every((c, k) => c.length === b.cores[k]!.length && c.every((v, i) => v === b.cores[k]![i]));

test("min_ratio: no false give-ups on compressible fields; null exactly above the reached ratio", async (t) => {
  const fields: [string, Float32Array | Float64Array][] = [
    ["smooth", smoothField(64, 64, 64)],
    ["heat", heatLike(64)],
    ["low-rank", await lowRank(64)],
  ];
  for (const [name, x] of fields) {
    for (const tol of [1e-2, 1e-3, 1e-4]) {
      const full = (await tt.compress(x, [64, 64, 64], { tolerance: tol }))!;
      const ratio = x.length / ttSize(full);
      const below = await tt.compress(x, [64, 64, 64], { tolerance: tol, min_ratio: ratio * 0.999 });
      t.ok(below !== null && same(below, full), `${name} tol ${tol}: min_ratio just below ${ratio.toFixed(1)} returns the same result`);
      const store = await tt.compress(x, [64, 64, 64], { tolerance: tol, max_rank: 256, min_ratio: 1.2 });
      t.ok(store !== null && same(store, full), `${name} tol ${tol}: the store's min_ratio 1.2 returns the same result`);
      t.equal(
        await tt.compress(x, [64, 64, 64], { tolerance: tol, min_ratio: ratio * 1.001 }),
        null,
        `${name} tol ${tol}: min_ratio just above ${ratio.toFixed(1)} gives null`,
      );
    }
  }
});

test("min_ratio: a binding max_rank that still reaches the ratio returns the capped (weak) result", async (t) => {
  const x = smoothField(64, 64, 64);
  const uncapped = (await tt.compress(x, [64, 64, 64], { tolerance: 1e-4 }))!;
  const reachable = x.length / ttSize(uncapped);
  for (const cap of [1, 2, 3]) {
    const capped = (await tt.compress(x, [64, 64, 64], { tolerance: 1e-4, max_rank: cap }))!;
    t.ok(capped.relative_error > 1e-4, `max_rank ${cap} binds (error ${capped.relative_error.toExponential(2)})`);
    const ratio = x.length / ttSize(capped);
    // a ratio that a TT within the tolerance reaches too (the uncapped one)
    const min = Math.min(ratio, reachable) / 2;
    const r = await tt.compress(x, [64, 64, 64], { tolerance: 1e-4, max_rank: cap, min_ratio: min });
    t.ok(r !== null && same(r, capped), `max_rank ${cap}: min_ratio ${min.toFixed(0)} returns the capped result`);
    t.equal(await tt.compress(x, [64, 64, 64], { tolerance: 1e-4, max_rank: cap, min_ratio: ratio * 1.01 }), null, `max_rank ${cap}: above its ratio -> null`);
  }
});

test("min_ratio: null when no TT within the tolerance reaches it, even where the capped result would", async (t) => {
  // The smooth field at 1e-4 needs ranks far above 1; its rank-1 capped TT has a ratio no TT
  // within the tolerance reaches.
  const x = smoothField(64, 64, 64);
  const capped = (await tt.compress(x, [64, 64, 64], { tolerance: 1e-4, max_rank: 1 }))!;
  const ratio = x.length / ttSize(capped);
  t.equal(
    await tt.compress(x, [64, 64, 64], { tolerance: 1e-4, max_rank: 1, min_ratio: ratio / 2 }),
    null,
    `rank-1 ratio ${ratio.toFixed(0)}, min_ratio ${(ratio / 2).toFixed(0)}: null`,
  );
  // Noise 128^3 with max_rank 256: the capped TT has a ratio about 3 (relative error about 0.8),
  // but within the tolerance nothing comes near 2.
  const y = noise(128 ** 3, 11);
  const full = (await tt.compress(y, [128, 128, 128], { tolerance: 1e-3, max_rank: 256, modes: tt.chooseModes([128, 128, 128]) }))!;
  t.ok(
    y.length / ttSize(full) > 2 && full.relative_error > 0.5,
    `capped noise: ratio ${(y.length / ttSize(full)).toFixed(2)}, error ${full.relative_error.toFixed(2)}`,
  );
  // with the default modes the plain factorisation, which meets the tolerance, is kept instead
  const dflt = (await tt.compress(y, [128, 128, 128], { tolerance: 1e-3, max_rank: 256 }))!;
  t.ok(dflt.relative_error <= 1e-3 && dflt.modes.join() === "128,128,128", `default modes: plain, error ${dflt.relative_error.toExponential(2)}`);
  t.equal(await tt.compress(y, [128, 128, 128], { tolerance: 1e-3, max_rank: 256, min_ratio: 2 }), null, "noise 128^3, min_ratio 2: null");
  t.equal(await tt.compress(y, [128, 128, 128], { tolerance: 1e-3, max_rank: 256, min_ratio: 1.2 }), null, "noise 128^3, the store's min_ratio: null");
  // Noise 64^3 with max_rank 256: the capped result is larger than the input (ratio < 1.2).
  const z = noise(64 ** 3, 9);
  const zfull = (await tt.compress(z, [64, 64, 64], { max_rank: 256 }))!;
  t.ok(z.length / ttSize(zfull) < 1.2, `noise capped ratio ${(z.length / ttSize(zfull)).toFixed(2)} < 1.2`);
  t.equal(await tt.compress(z, [64, 64, 64], { max_rank: 256, min_ratio: 1.2 }), null, "noise 64^3 with the store's min_ratio -> null");
});

test("min_ratio: noise gives up; plain modes and float64 too", async (t) => {
  const x = noise(48 * 48 * 48, 5);
  t.equal(await tt.compress(x, [48, 48, 48], { tolerance: 1e-3, modes: [48, 48, 48], min_ratio: 1.5 }), null, "noise 48^3 plain");
  const y = noise(32 * 32 * 32, 6, true);
  t.equal(await tt.compress(y, [32, 32, 32], { tolerance: 1e-3, min_ratio: 1.5, max_rank: 1024 }), null, "float64 noise 32^3");
  const z = smoothField(32, 32, 32, true);
  const full = (await tt.compress(z, [32, 32, 32], { tolerance: 1e-6 }))!;
  const r = await tt.compress(z, [32, 32, 32], { tolerance: 1e-6, min_ratio: 1.2 });
  t.ok(r !== null && same(r, full), "float64 smooth at 1e-6: same result");
});
