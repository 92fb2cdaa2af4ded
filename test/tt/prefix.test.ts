// The leading TT-SVD steps taken from one Gram matrix of the data (modes whose leading product
// M_p is at most 128 with M_p² ≤ n, two steps or more before the last): the ranks equal those of a
// plain TT-SVD computed here in float64 (to within the rounding of the Gram route), the error
// measured here from reconstruct stays within the tolerance and agrees with the one reported,
// whether the first steps keep their whole row space (the frame stays the identity) or cut it
// (a frame built from the kept eigenvectors). Hostile values reach the same errors on this path
// as on the others.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { denseFromTT, gaussian, prod, relErr, scaledRelErr } from "./helpers.js";
import { ttsvdRanks } from "./reference.js";

/** A TT-built tensor with bond weights exp(-i / decay) and Gaussian noise of relative size floor. */
function field(shape: number[], R: number, decay: number, floor: number, seed: number): Float64Array {
  return denseFromTT(shape, R, seed, () => (i) => Math.exp(-i / decay), floor);
}

const cases: { modes: number[]; R: number; decay: number; floor: number; tol: number }[] = [
  // first step cut (rank 3 of 4): the frame of the later prefix steps is not the identity
  { modes: [4, 4, 4, 4, 4], R: 3, decay: 2, floor: 0, tol: 1e-3 },
  { modes: [4, 4, 4, 4, 4], R: 6, decay: 1.5, floor: 1e-5, tol: 1e-3 },
  // every prefix step keeps its whole row space
  { modes: [8, 8, 8, 8], R: 64, decay: 30, floor: 1e-3, tol: 1e-3 },
  // three prefix steps (2·3·4 = 24 rows, 24² ≤ 720), uneven modes, tight and loose tolerances
  { modes: [2, 3, 4, 5, 6], R: 5, decay: 1, floor: 1e-6, tol: 1e-4 },
  { modes: [2, 3, 4, 5, 6], R: 12, decay: 3, floor: 0, tol: 1e-2 },
  // the quantized 64³ modes (8·8·4 per dimension) with a noise floor: ranks near the short sides
  { modes: [8, 8, 4, 8, 4, 8], R: 40, decay: 8, floor: 3e-3, tol: 1e-3 },
];

test("prefix steps: ranks of a plain TT-SVD and the bound, float64 and float32", async (t) => {
  let seed = 1;
  for (const c of cases) {
    const x64 = field(c.modes, c.R, c.decay, c.floor, seed++);
    const ref = prod(c.modes) <= 4096 ? ttsvdRanks(x64, c.modes, c.tol) : null;
    for (const f64 of [true, false]) {
      const x = f64 ? x64 : Float32Array.from(x64);
      const r = (await tt.compress(x, [x.length], { tolerance: c.tol, modes: c.modes }))!;
      const err = relErr(x, await tt.reconstruct(r));
      const label = `${c.modes.join("·")} R ${c.R} ${f64 ? "float64" : "float32"} at ${c.tol}`;
      t.ok(err <= c.tol, `${label}: measured error ${err.toExponential(2)} <= ${c.tol} (ranks ${r.ranks})`);
      t.ok(Math.abs(err - r.relative_error) <= 1e-3 * err + 1e-9, `${label}: reported error ${r.relative_error.toExponential(3)} is the measured one`);
      if (ref) {
        // The Gram route resolves singular values down to about 1e-8 of the largest: equal ranks,
        // or one more where a singular value sits at the cut.
        const ok = r.ranks.every((k, i) => k >= ref[i]! - (f64 ? 0 : 1) && k <= ref[i]! + 1);
        t.ok(ok, `${label}: ranks ${r.ranks} against a plain TT-SVD's ${ref}`);
      }
    }
  }
});

test("prefix steps: a frame that cuts the first step reconstructs the data it kept", async (t) => {
  // Exactly rank 2 at every bond: the first step keeps 2 of 4 rows and the later prefix steps
  // work through that frame; the result is exact to rounding.
  const modes = [4, 4, 4, 4, 4, 4];
  const x = denseFromTT(modes, 2, 77, () => () => 1);
  const r = (await tt.compress(x, [x.length], { tolerance: 1e-6, modes }))!;
  t.deepEqual(r.ranks, [1, 2, 2, 2, 2, 2, 1], "ranks 2");
  t.ok(r.relative_error < 1e-12, `error ${r.relative_error.toExponential(2)} at rounding level`);
});

test("prefix steps: NaN, infinities and extreme magnitudes in float32 data", async (t) => {
  const modes = [8, 8, 8, 8];
  const g = gaussian(9);
  const base = Float32Array.from({ length: 4096 }, () => g());
  for (const [label, pos, v] of [
    ["NaN first", 0, NaN],
    ["NaN last", 4095, NaN],
    ["NaN in the middle", 2049, NaN],
    ["+Infinity", 17, Infinity],
    ["-Infinity", 4000, -Infinity],
  ] as const) {
    const x = base.slice();
    x[pos] = v;
    try {
      await tt.compress(x, [64, 64], { tolerance: 1e-3, modes });
      t.fail(`${label}: accepted`);
    } catch (e) {
      const err = e as Error & { field?: string };
      t.equal(err.name, "ValidationError", `${label}: ValidationError`);
      t.ok(/finite/.test(err.message), `${label}: ${err.message}`);
    }
  }
  // Magnitudes near float32's limits go through the scaled route and keep the bound.
  for (const scale of [3e38 / 8, 1e-40, 1e-30]) {
    const x = Float32Array.from(base, (v) => v * scale);
    const r = (await tt.compress(x, [64, 64], { tolerance: 1e-2, modes }))!;
    const err = scaledRelErr(x, await tt.reconstruct(r));
    t.ok(
      r.cores.every((c) => c.every(Number.isFinite)),
      `scale ${scale}: finite cores`,
    );
    t.ok(err <= 1e-2, `scale ${scale}: measured error ${err.toExponential(2)} <= 1e-2`);
  }
  // All zeros but one entry: rank 1 everywhere, exact.
  const one = new Float32Array(4096);
  one[1234] = 5;
  const r1 = (await tt.compress(one, [64, 64], { tolerance: 1e-3, modes }))!;
  t.deepEqual(r1.ranks, [1, 1, 1, 1, 1], "a single non-zero entry is rank 1");
  t.ok(r1.relative_error < 1e-6, "and exact");
});
