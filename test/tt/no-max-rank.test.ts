// tt.compress without max_rank: the tolerance holds whatever rank the data need (the internal
// cap follows the full rank of the unfoldings); a result above the tolerance ("weak") comes
// only under a cap the caller gave.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { gaussian, noise, relErr } from "./helpers.js";

/** rows x cols matrix with singular values (i + 1)^-p on random factors: a slowly decaying
 *  spectrum like a photograph's or a trained layer's, needing ranks far above 256 at 1e-2. */
async function powerLaw(rows: number, cols: number, p: number, seed: number, f64 = false) {
  const g = gaussian(seed),
    r = Math.min(rows, cols);
  const u = Float64Array.from({ length: rows * r }, (_, i) => g() * ((i % r) + 1) ** -p);
  const v = Float64Array.from({ length: r * cols }, () => g());
  const x = (await tt.reconstruct({ modes: [rows, cols], ranks: [1, r, 1], cores: [u, v] })) as Float64Array;
  return f64 ? x : Float32Array.from(x);
}

test("compress without max_rank: a 512 x 512 slowly decaying matrix meets 1e-2 and 1e-3 with ranks above 256", async (t) => {
  const x = await powerLaw(512, 512, 0.3, 41);
  for (const tol of [1e-2, 1e-3]) {
    const r = (await tt.compress(x, [512, 512], { tolerance: tol }))!;
    const err = relErr(x, await tt.reconstruct(r));
    t.ok(err <= tol, `tol ${tol}: measured error ${err.toExponential(3)} <= tol (ranks ${r.ranks})`);
    t.ok(r.relative_error <= tol, `tol ${tol}: reported error ${r.relative_error.toExponential(3)} <= tol`);
    t.ok(Math.max(...r.ranks) > tt.DEFAULT_MAX_RANK, `tol ${tol}: largest rank ${Math.max(...r.ranks)} above ${tt.DEFAULT_MAX_RANK}`);
  }
});

test("compress with a caller's max_rank: the same data come back weak, ranks at the cap", async (t) => {
  const x = await powerLaw(512, 512, 0.3, 41);
  const r = (await tt.compress(x, [512, 512], { tolerance: 1e-2, max_rank: 64 }))!;
  const err = relErr(x, await tt.reconstruct(r));
  t.ok(err > 1e-2, `error ${err.toExponential(3)} above the tolerance under the cap`);
  t.equal(Math.max(...r.ranks), 64, "the cap binds");
  t.ok(Math.abs(err - r.relative_error) <= 1e-6 * err + 1e-9, "relative_error is the measured error");
});

test("compress without max_rank: white noise meets the tolerance on the default, plain and auto modes", async (t) => {
  const x = noise(96 * 96 * 96, 43);
  for (const modes of [undefined, [96, 96, 96], "auto" as const]) {
    const r = (await tt.compress(x, [96, 96, 96], { tolerance: 1e-2, modes }))!;
    const err = relErr(x, await tt.reconstruct(r));
    t.ok(err <= 1e-2, `modes ${JSON.stringify(modes)} -> ${r.modes}: error ${err.toExponential(3)} <= 1e-2 (ranks ${r.ranks})`);
  }
});

test("compress without max_rank: float64 data, tolerance 1e-8, and max_rank: undefined reads as no cap", async (t) => {
  const x = (await powerLaw(300, 400, 0.5, 44, true)) as Float64Array;
  for (const opts of [{ tolerance: 1e-8 }, { tolerance: 1e-8, max_rank: undefined }]) {
    const r = (await tt.compress(x, [300, 400], opts))!;
    const err = relErr(x, await tt.reconstruct(r));
    t.ok(err <= 1e-8, `error ${err.toExponential(3)} <= 1e-8 (ranks ${r.ranks})`);
    t.ok(
      r.cores.every((c) => c instanceof Float64Array),
      "float64 cores",
    );
  }
});

test("compress without max_rank: min_ratio still gives up on incompressible data", async (t) => {
  const x = noise(64 * 64 * 64, 45);
  const r = await tt.compress(x, [64, 64, 64], { tolerance: 1e-3, min_ratio: 1.2 });
  t.equal(r, null, "null: no TT within 1e-3 reaches ratio 1.2");
});
