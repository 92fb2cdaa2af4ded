// The exact route on unfoldings that keep a large part of their spectrum: matrices with known
// singular values (orthogonal Householder factors around a diagonal), where the ranks the
// delta rule gives are known exactly. Covers the kept-vector path (rank at most half the side),
// the complement path (the discarded vectors and their orthogonal complement), exactly equal
// singular values (inverse iteration inside one cluster) and the randomized route handing a
// slowly decaying 600 x 600 unfolding to the exact one.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { gaussian, relErr } from "./helpers.js";

/** n x n matrix H1 H2 diag(s) H3 H4 (Hk = I - 2 v v^T / v^T v, random v): singular values s. */
function withSpectrum(s: number[], seed: number): Float64Array {
  const n = s.length,
    g = gaussian(seed);
  const a = new Float64Array(n * n);
  for (let i = 0; i < n; i++) a[i * n + i] = s[i]!;
  const vec = () => Float64Array.from({ length: n }, () => g());
  for (let k = 0; k < 2; k++) {
    // a <- H a (rows mixed), then a <- a H (columns mixed)
    for (const left of [true, false]) {
      const v = vec();
      let vv = 0;
      for (const x of v) vv += x * x;
      const w = new Float64Array(n);
      if (left) {
        for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) w[j]! += v[i]! * a[i * n + j]!;
        for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) a[i * n + j]! -= (2 * v[i]! * w[j]!) / vv;
      } else {
        for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) w[i]! += a[i * n + j]! * v[j]!;
        for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) a[i * n + j]! -= (2 * w[i]! * v[j]!) / vv;
      }
    }
  }
  return a;
}

/** The rank TT-SVD's delta rule keeps on one unfolding (two modes) with singular values s. */
function deltaRank(s: number[], tol: number): number {
  let total = 0;
  for (const x of s) total += x * x;
  const delta2 = tol * tol * total;
  let r = s.length,
    tail = 0;
  while (r > 1 && tail + s[r - 1]! ** 2 <= delta2) {
    tail += s[r - 1]! ** 2;
    --r;
  }
  return r;
}

async function check(t: test.Test, label: string, s: number[], tol: number, seed: number) {
  const n = s.length,
    a64 = withSpectrum(s, seed);
  const want = deltaRank(s, tol);
  for (const x of [a64, Float32Array.from(a64)]) {
    const type = x instanceof Float64Array ? "float64" : "float32";
    const r = (await tt.compress(x, [n, n], { tolerance: tol, modes: [n, n] }))!;
    const err = relErr(x, await tt.reconstruct(r));
    t.equal(r.ranks[1], want, `${label}, ${type}: rank ${r.ranks[1]} is the delta rule's ${want}`);
    t.ok(err <= tol, `${label}, ${type}: error ${err.toExponential(3)} <= ${tol}`);
  }
}

test("exact route, kept vectors: 300 x 300, 100 equal singular values above a floor of 1e-4", async (t) => {
  const s = Array.from({ length: 300 }, (_, i) => (i < 100 ? 1 : 1e-4));
  t.equal(deltaRank(s, 1e-3), 100, "the delta rule keeps the 100 (the floor fits the budget)");
  await check(t, "100 of 300", s, 1e-3, 51);
});

test("exact route, complement: 300 x 300, 100 equal singular values above a floor of 1e-3 the budget keeps half of", async (t) => {
  const s = Array.from({ length: 300 }, (_, i) => (i < 100 ? 1 : 1e-3));
  t.equal(deltaRank(s, 1e-3), 200, "the delta rule keeps 200");
  await check(t, "200 of 300", s, 1e-3, 56);
});

test("exact route, complement: 300 x 300, 250 equal singular values above a floor of 1e-3", async (t) => {
  const s = Array.from({ length: 300 }, (_, i) => (i < 250 ? 1 : 1e-3));
  t.equal(deltaRank(s, 1e-3), 250, "the delta rule keeps the 250");
  await check(t, "250 of 300", s, 1e-3, 52);
});

test("exact route, graded spectra: 0.95^i and (i + 1)^-1.5 on 300 x 300 at 1e-2 and 1e-3 (ranks 63-272)", async (t) => {
  const graded = Array.from({ length: 300 }, (_, i) => 0.95 ** i);
  const power = Array.from({ length: 300 }, (_, i) => (i + 1) ** -1.5);
  for (const tol of [1e-2, 1e-3]) {
    await check(t, `0.95^i at ${tol}`, graded, tol, 53);
    await check(t, `(i + 1)^-1.5 at ${tol}`, power, tol, 54);
  }
});

test("randomized route handing over: 600 x 600 with (i + 1)^-0.5 at 0.1 keeps the delta rule's rank", async (t) => {
  const s = Array.from({ length: 600 }, (_, i) => (i + 1) ** -0.5);
  const r = deltaRank(s, 0.1);
  t.ok(r > 300 && r < 600, `the delta rule keeps ${r}: most, not all, of the side`);
  await check(t, "(i + 1)^-0.5 on 600", s, 0.1, 55);
});
