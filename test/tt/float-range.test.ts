// Any finite input within the type's range compresses within its tolerance and reconstructs
// right: float32 near its largest values and among its subnormals, float64 near 1e-200, 1e300
// and among its subnormals; errors measured in float64 (scaled, so the squares stay in range).
import test from "tape";
import * as tt from "../../lib/tt.js";
import { rng, scaledRelErr } from "./helpers.js";

/** A smooth, non-separable 12 x 20 x 24 field with values of magnitude about `scale`. */
function field(scale: number, f64: boolean, seed = 3): Float32Array | Float64Array {
  const u = rng(seed);
  const blobs = Array.from({ length: 6 }, () => [u(), u(), u(), 0.1 + 0.3 * u(), u() - 0.3]);
  const x = f64 ? new Float64Array(12 * 20 * 24) : new Float32Array(12 * 20 * 24);
  for (let i = 0; i < 12; i++)
    for (let j = 0; j < 20; j++)
      for (let k = 0; k < 24; k++) {
        let v = 0;
        for (const [a, b, c, s, w] of blobs)
          v += w! * Math.exp(-((i / 12 - a!) ** 2 + (j / 20 - b!) ** 2 + (k / 24 - c!) * (j / 20 - b!) + (k / 24 - c!) ** 2) / s! ** 2);
        x[(i * 20 + j) * 24 + k] = v * scale;
      }
  return x;
}

const cases: [string, boolean, number, number][] = [
  ["float32 near its largest values (3e38)", false, 3e38 / 2, 1e-3],
  ["float32 near 1e38 at 1e-6", false, 1e38, 1e-6],
  ["float32 at 1e-30", false, 1e-30, 1e-5],
  ["float32 subnormal (1e-40)", false, 1e-40, 1e-2],
  ["float64 near 1e-200", true, 1e-200, 1e-3],
  ["float64 near 1e-200 at 1e-12", true, 1e-200, 1e-12],
  ["float64 near 1e300", true, 1e300, 1e-9],
  ["float64 near its largest values (1.7e308)", true, 1.7e308 / 2, 1e-6],
  ["float64 subnormal (1e-310)", true, 1e-310, 1e-3],
];

test("compress: data far from 1 in magnitude keep the bound and reconstruct right", async (t) => {
  for (const [label, f64, scale, tol] of cases) {
    const x = field(scale, f64);
    let max = 0;
    for (const v of x) max = Math.max(max, Math.abs(v));
    t.ok(Number.isFinite(max) && max > 0, `${label}: data finite and non-zero (max ${max.toExponential(2)})`);
    const r = (await tt.compress(x, [12, 20, 24], { tolerance: tol }))!;
    t.ok(
      r.cores.every((c) => c.every(Number.isFinite)),
      `${label}: finite cores`,
    );
    const y = await tt.reconstruct(r);
    const err = scaledRelErr(x, y);
    t.ok(err <= tol, `${label}: measured error ${err.toExponential(2)} <= ${tol} (engine says ${r.relative_error.toExponential(2)}, ranks ${r.ranks})`);
    t.ok(r.relative_error <= tol, `${label}: reported error within the tolerance`);
  }
});

test("compress: a constant float32 array of the smallest subnormal (1e-45) is exact, not zeros", async (t) => {
  const x = new Float32Array(16 * 16 * 16).fill(1e-45);
  const r = (await tt.compress(x, [16, 16, 16], { tolerance: 1e-3 }))!;
  t.deepEqual(r.ranks, [1, 1, 1, 1], "rank 1");
  t.equal(r.relative_error, 0, "error 0");
  const y = await tt.reconstruct(r);
  t.ok(
    y.every((v) => v === x[0]),
    `every element reconstructs to ${x[0]}`,
  );
});

test("compress: a float64 array of 1e-200 is compressed, not refused as zeros", async (t) => {
  const x = new Float64Array(64).fill(1e-200);
  x[5] = 3e-200;
  const r = (await tt.compress(x, [8, 8], { tolerance: 1e-6 }))!;
  const y = await tt.reconstruct(r);
  t.ok(scaledRelErr(x, y) <= 1e-6, `error ${scaledRelErr(x, y).toExponential(2)}`);
  t.ok(Math.abs(y[5]! - 3e-200) < 1e-205, "the distinct element comes back");
});

test("tolerance floors: float32 to 1e-6, float64 to 1e-12, and the sentence names the limit", async (t) => {
  const x32 = field(1, false) as Float32Array,
    x64 = field(1, true) as Float64Array;
  t.equal(tt.MIN_TOLERANCE_F32, 1e-6, "float32 floor");
  t.equal(tt.MIN_TOLERANCE_F64, 1e-12, "float64 floor");
  for (const [x, tol] of [
    [x32, 1e-6],
    [x64, 1e-12],
  ] as const) {
    const r = (await tt.compress(x, [12, 20, 24], { tolerance: tol }))!;
    t.ok(scaledRelErr(x, await tt.reconstruct(r)) <= tol, `${x instanceof Float64Array ? "float64" : "float32"} at ${tol}`);
    const rr = await tt.round(r, { tolerance: tol });
    const er = scaledRelErr(await tt.reconstruct(r), await tt.reconstruct(rr));
    t.ok(er <= tol && rr.relative_error <= tol, `round at ${tol}: measured ${er.toExponential(2)}, reported ${rr.relative_error.toExponential(2)}`);
  }
  for (const [x, tol, want] of [
    [x32, 9e-7, /at least 1e-6 for float32 data \(float32 carries about 7 significant digits\)/],
    [x64, 9e-13, /at least 1e-12 for float64 data/],
  ] as const) {
    try {
      await tt.compress(x, [12, 20, 24], { tolerance: tol });
      t.fail(`tolerance ${tol} should be refused`);
    } catch (e) {
      t.ok(e instanceof Error && want.test(e.message) && (e as { field?: string }).field === "tolerance", `refused: ${(e as Error).message}`);
    }
  }
});
