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

/** Rotates row pair (a, b) of `M` (rows of length `len`) by (c, s). */
function rotateRows(M: Float64Array, len: number, a: number, b: number, c: number, s: number): void {
  const oa = a * len,
    ob = b * len;
  for (let i = 0; i < len; i++) {
    const x = M[oa + i]!,
      y = M[ob + i]!;
    M[oa + i] = c * x - s * y;
    M[ob + i] = s * x + c * y;
  }
}

/**
 * One-sided Jacobi on the p rows (of length q) of M, in float64, until they are mutually
 * orthogonal (at most 60 sweeps); J (p x p), when given, receives the same rotations.
 */
function orthogonalizeRows(M: Float64Array, p: number, q: number, J?: Float64Array): void {
  for (let sweep = 0; sweep < 60; sweep++) {
    let rotated = false;
    for (let a = 0; a + 1 < p; a++)
      for (let b = a + 1; b < p; b++) {
        let al = 0,
          be = 0,
          ga = 0;
        const oa = a * q,
          ob = b * q;
        for (let i = 0; i < q; i++) {
          const x = M[oa + i]!,
            y = M[ob + i]!;
          al += x * x;
          be += y * y;
          ga += x * y;
        }
        if (ga === 0 || Math.abs(ga) <= 1e-15 * Math.sqrt(al * be)) continue;
        rotated = true;
        const zeta = (be - al) / (2 * ga);
        const t = Math.sign(zeta || 1) / (Math.abs(zeta) + Math.sqrt(1 + zeta * zeta));
        const c = 1 / Math.sqrt(1 + t * t),
          s = c * t;
        rotateRows(M, q, a, b, c, s);
        if (J) rotateRows(J, p, a, b, c, s);
      }
    if (!rotated) break;
  }
}

/** Singular values (descending) of the m x N row-major matrix by one-sided Jacobi (float64). */
function singularValues(A: Float64Array, m: number, N: number): { s: number[]; rows: Float64Array } {
  // Rotate the shorter side: work on the rows of A when m <= N, else on the columns (transpose).
  const wide = m <= N;
  const p = wide ? m : N,
    q = wide ? N : m;
  const V = new Float64Array(p * q);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < N; j++) {
      if (wide) V[i * q + j] = A[i * N + j]!;
      else V[j * q + i] = A[i * N + j]!;
    }
  orthogonalizeRows(V, p, q);
  const s: number[] = [];
  for (let a = 0; a < p; a++) {
    let x = 0;
    for (let i = 0; i < q; i++) x += V[a * q + i]! ** 2;
    s.push(Math.sqrt(x));
  }
  return { s: s.sort((x, y) => y - x), rows: V };
}

/**
 * Ranks of a plain TT-SVD over `modes`: at each step the smallest rank whose discarded energy is
 * ≤ δ² = tol²‖A‖²/(d−1), the remainder being the data projected on the kept left singular
 * subspace (its singular values are those kept, with the same right vectors, so the next
 * unfolding is formed from the kept singular triplets).
 */
function ttsvdRanks(x: Float64Array, modes: number[], tol: number): number[] {
  const d = modes.length;
  let norm2 = 0;
  for (const v of x) norm2 += v * v;
  const delta2 = (tol * tol * norm2) / (d - 1);
  const ranks = [1];
  let cur = x,
    rprev = 1,
    rest = x.length;
  for (let k = 0; k + 1 < d; k++) {
    const m = rprev * modes[k]!,
      N = rest / modes[k]!;
    const { s } = singularValues(cur, m, N);
    let r = s.length,
      tail = 0;
    while (r > 1 && tail + s[r - 1]! ** 2 <= delta2) {
      tail += s[r - 1]! ** 2;
      r--;
    }
    ranks.push(r);
    cur = remainder(cur, m, N, r);
    rprev = r;
    rest = N;
  }
  ranks.push(1);
  return ranks;
}

/** U_r^T A (r x N) for the m x N matrix A, by one-sided Jacobi in float64. */
function remainder(A: Float64Array, m: number, N: number, r: number): Float64Array {
  // Rows of A rotated by Jacobi: W = J^T A with orthogonal J, rows of W mutually orthogonal, so
  // W's rows sorted by norm are sigma_i v_i^T: exactly U^T A.
  if (m <= N) {
    const { rows } = singularValues(A, m, N);
    const order = Array.from({ length: m }, (_, i) => i);
    const nrm = order.map((i) => {
      let s = 0;
      for (let j = 0; j < N; j++) s += rows[i * N + j]! ** 2;
      return s;
    });
    order.sort((a, b) => nrm[b]! - nrm[a]!);
    const out = new Float64Array(r * N);
    for (let t = 0; t < r; t++) out.set(rows.subarray(order[t]! * N, order[t]! * N + N), t * N);
    return out;
  }
  // m > N: Jacobi on the rows of A^T (N rows of length m), accumulating the N x N rotation J:
  // J A^T = S U^T, so A = U S J and U^T A = S J (rows sigma_a v_a^T, v_a^T the rows of J).
  const At = new Float64Array(N * m);
  for (let i = 0; i < m; i++) for (let j = 0; j < N; j++) At[j * m + i] = A[i * N + j]!;
  // Rotate rows of A^T (N rows of length m) while accumulating the N x N rotation J.
  const J = new Float64Array(N * N);
  for (let i = 0; i < N; i++) J[i * N + i] = 1;
  orthogonalizeRows(At, N, m, J);
  // Row a of At is sigma_a u_a^T and row a of J is v_a^T: U^T A = S V^T, rows sigma_a v_a^T.
  const nrm = Array.from({ length: N }, (_, a) => {
    let s = 0;
    for (let i = 0; i < m; i++) s += At[a * m + i]! ** 2;
    return Math.sqrt(s);
  });
  const order = Array.from({ length: N }, (_, i) => i).sort((a, b) => nrm[b]! - nrm[a]!);
  const out = new Float64Array(r * N);
  for (let t = 0; t < r; t++) for (let j = 0; j < N; j++) out[t * N + j] = nrm[order[t]!]! * J[order[t]! * N + j]!;
  return out;
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
