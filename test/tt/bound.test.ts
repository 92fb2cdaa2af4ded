// Seeded property test of the error bound: for random tensors (2 to 6 dimensions, up to 16 MB),
// spectra that decay exponentially, by a power law, flat, exactly low-rank and low-rank over a
// noise floor, float32 and float64, quantized and plain modes, and tolerances from 1e-2 down to
// each type's floor, compress must return ‖A − Â‖_F ≤ tol·‖A‖_F (measured here in float64 from
// tt.reconstruct, not taken from the engine) whenever max_rank cannot bind. On tensors small
// enough for it, the ranks are compared with a plain TT-SVD computed here (one-sided Jacobi SVD
// of each remainder's unfolding in float64, the δ-rule of Oseledets' TT-SVD) over the same modes.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { denseFromTT, prod, relErr, rng } from "./helpers.js";
import { ttsvdRanks } from "./reference.js";

type Spectrum = "exponential" | "power" | "flat" | "lowrank" | "noisefloor";
const SPECTRA: Spectrum[] = ["exponential", "power", "flat", "lowrank", "noisefloor"];

/** Weights of the inner ranks of the generated TT. */
function weights(kind: Spectrum, R: number, u: () => number): number[] {
  const a = 0.3 + 1.5 * u(),
    p = 1 + 2 * u();
  return Array.from({ length: R }, (_, i) =>
    kind === "exponential" ? Math.exp(-a * i) : kind === "power" ? (i + 1) ** -p : kind === "lowrank" ? Math.exp(-0.5 * u() * i) : 1,
  );
}

/** The test's input: a TT-built tensor whose bond weights follow `kind` (weights() at each bond). */
function generate(shape: number[], kind: Spectrum, R: number, floor: number, seed: number): Float64Array {
  return denseFromTT(
    shape,
    R,
    seed,
    (r, u) => {
      const w = weights(kind, r, u);
      return (i) => w[i]!;
    },
    kind === "noisefloor" ? floor : 0,
  );
}

/** A random shape of d dimensions with about `elems` elements in all. */
function randomShape(d: number, elems: number, u: () => number): number[] {
  const logs = Array.from({ length: d }, () => 0.3 + u());
  const sum = logs.reduce((a, b) => a + b, 0);
  return logs.map((l) => Math.max(2, Math.round(Math.exp((Math.log(elems) * l) / sum))));
}

interface Case {
  shape: number[];
  f64: boolean;
  kind: Spectrum;
  R: number;
  floor: number;
  tol: number;
  modes: "plain" | "quantized";
  reference: boolean;
}

function cases(): Case[] {
  const u = rng(20261124);
  const out: Case[] = [];
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(u() * xs.length)]!;
  const tolFor = (f64: boolean) => {
    const lo = Math.log10(f64 ? tt.MIN_TOLERANCE_F64 : tt.MIN_TOLERANCE_F32);
    // a fifth of the cases exactly at the floor
    return u() < 0.2 ? 10 ** lo : 10 ** (lo + (-2 - lo) * u());
  };
  // Small tensors (up to 12,000 elements): checked against the TT-SVD computed here.
  for (let i = 0; i < 280; i++) {
    const d = 2 + Math.floor(u() * 5);
    const f64 = u() < 0.5;
    const quant = u() < 0.5;
    // a quantized case needs a dimension of at least 64 to differ from the plain modes
    let shape = randomShape(d, 200 + u() * 6000, u);
    if (quant) shape[Math.floor(u() * d)] = pick([64, 72, 96, 128]);
    while (prod(shape) > 12000) shape = shape.map((s) => Math.max(2, Math.floor(s * 0.8)));
    const kind = pick(SPECTRA);
    out.push({
      shape,
      f64,
      kind,
      R: kind === "lowrank" ? 1 + Math.floor(u() * 5) : 4 + Math.floor(u() * 20),
      floor: 10 ** (-3 - 5 * u()),
      tol: tolFor(f64),
      modes: quant ? "quantized" : "plain",
      reference: true,
    });
  }
  // Larger tensors (up to 16 MB) on the randomized range finder's sizes: the bound only.
  const large: [number[], boolean][] = [
    [[1024, 1024], false],
    [[2048, 512], false],
    [[512, 768], true],
    [[128, 128, 128], false],
    [[256, 256, 64], false],
    [[64, 64, 64, 16], true],
    [[96, 96, 96], true],
    [[16, 16, 16, 16, 16], false],
    [[8, 8, 8, 8, 8, 8], true],
    [[640, 640], false],
    [[1000, 600], true],
    [[2048, 1024], false],
    [[200, 200, 20], false],
    [[128, 64, 128], true],
    [[768, 768], false],
    [[4096, 1024], false],
    [[1024, 512], true],
    [[300, 300, 20], false],
    [[512, 512, 16], false],
    [[48, 48, 24, 24], true],
  ];
  for (const [shape, f64] of large) {
    const kind = pick(SPECTRA);
    out.push({
      shape,
      f64,
      kind,
      R: kind === "lowrank" ? 1 + Math.floor(u() * 5) : 6 + Math.floor(u() * 14),
      floor: 10 ** (-3 - 4 * u()),
      tol: Math.max(tolFor(f64), f64 ? 1e-9 : 1e-6),
      modes: u() < 0.5 ? "plain" : "quantized",
      reference: false,
    });
  }
  return out;
}

test("compress: measured error within the tolerance on every path (seeded, 300 cases)", async (t) => {
  const all = cases();
  let checked = 0,
    ranked = 0,
    violations = 0,
    rankExcess = 0;
  for (const [i, c] of all.entries()) {
    const x64 = generate(c.shape, c.kind, c.R, c.floor, 1000 + i);
    const data = c.f64 ? x64 : Float32Array.from(x64);
    const modes = c.modes === "plain" ? c.shape : tt.chooseModes(c.shape);
    // max_rank 1024 cannot bind: every unfolding here has a side of at most 1024 (checked)
    const sides = modes.slice(1).map((_, k) => Math.min(prod(modes.slice(0, k + 1)), prod(modes.slice(k + 1))));
    if (Math.max(...sides) > tt.MAX_RANK_LIMIT) throw new Error(`case ${i}: an unfolding larger than max_rank`);
    const r = await tt.compress(data, c.shape, { tolerance: c.tol, modes, max_rank: tt.MAX_RANK_LIMIT });
    if (!r) {
      t.fail(`case ${i}: no result`);
      continue;
    }
    const y = await tt.reconstruct(r);
    const err = relErr(data, y);
    checked++;
    const label = `case ${i} ${c.f64 ? "f64" : "f32"} [${c.shape}] ${c.modes} ${c.kind} tol ${c.tol.toExponential(1)}`;
    if (!(err <= c.tol)) {
      violations++;
      t.fail(`${label}: measured ${err.toExponential(3)} > tolerance (engine says ${r.relative_error.toExponential(3)}, ranks ${r.ranks})`);
    }
    if (c.reference) {
      const ref = ttsvdRanks(Float64Array.from(data), modes, c.tol);
      ranked++;
      const over = r.ranks.some((rk, k) => rk > ref[k]! + 2 + Math.ceil(0.1 * ref[k]!));
      if (over) {
        rankExcess++;
        t.fail(`${label}: ranks ${r.ranks} exceed the plain TT-SVD's ${ref} by more than the margin`);
      }
    }
  }
  t.ok(all.length >= 300, `${all.length} cases`);
  t.equal(violations, 0, `${checked} cases within the tolerance (measured in float64)`);
  t.equal(rankExcess, 0, `${ranked} cases with ranks at most the plain TT-SVD's + 2 + 10%`);
});
