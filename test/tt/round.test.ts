// tt.round: recompression keeps the error bound, reduces redundant ranks and reports its error.
import test from "tape";
import * as tt from "../../lib/tt.js";
import type { TT } from "../../lib/tt.js";
import { denseOf, randomTT, relErr, smoothField } from "./helpers.js";

/** a + b in TT form (block-diagonal cores): ranks add up, so rounding has work to do. */
function add(a: TT, b: TT): TT {
  const d = a.modes.length;
  const ranks = a.ranks.map((r, k) => (k === 0 || k === d ? 1 : r + b.ranks[k]!));
  const cores = a.modes.map((n, k) => {
    const r0 = ranks[k]!,
      r1 = ranks[k + 1]!;
    const c = new Float64Array(r0 * n * r1);
    const put = (src: ArrayLike<number>, s0: number, s1: number, o0: number, o1: number) => {
      for (let x = 0; x < s0; x++) for (let i = 0; i < n; i++) for (let y = 0; y < s1; y++) c[((x + o0) * n + i) * r1 + y + o1] = src[(x * n + i) * s1 + y]!;
    };
    const a0 = a.ranks[k]!,
      a1 = a.ranks[k + 1]!,
      b0 = b.ranks[k]!,
      b1 = b.ranks[k + 1]!;
    put(a.cores[k]!, a0, a1, 0, 0);
    put(b.cores[k]!, b0, b1, k === 0 ? 0 : a0, k === d - 1 ? 0 : a1);
    return c;
  });
  return { modes: a.modes, ranks, cores };
}

test("round: t + t rounds back to the ranks of t with a tiny error", async (t) => {
  const a = randomTT([6, 7, 8, 5], [1, 3, 4, 2, 1], 1);
  const s = add(a, a);
  t.deepEqual(s.ranks, [1, 6, 8, 4, 1], "ranks doubled by the sum");
  const r = await tt.round(s, { tolerance: 1e-10 });
  t.ok(
    r.ranks.every((v, i) => v <= a.ranks[i]!),
    `ranks ${r.ranks} back to <= ${a.ranks}`,
  );
  const err = relErr(denseOf(s), denseOf(r));
  t.ok(err <= 1e-10, `dense error ${err.toExponential(2)} <= tol`);
  t.ok(r.relative_error <= 1e-7, "reported error is small");
});

test("round: keeps the bound at looser tolerances and the reported error matches", async (t) => {
  const x = smoothField(16, 16, 16, true);
  const c = (await tt.compress(x, [16, 16, 16], { tolerance: 1e-7, modes: [16, 16, 16] }))!;
  const dense = denseOf(c);
  for (const tol of [1e-2, 1e-3, 1e-5]) {
    const r = await tt.round(c, { tolerance: tol });
    const err = relErr(dense, denseOf(r));
    t.ok(err <= tol, `tol ${tol}: error ${err.toExponential(2)} <= tol`);
    t.ok(Math.abs(err - r.relative_error) <= 1e-6 * tol + 1e-9, `tol ${tol}: reported ${r.relative_error.toExponential(2)}`);
    t.ok(
      r.ranks.every((v, i) => v <= c.ranks[i]!),
      "ranks do not grow",
    );
  }
  const capped = await tt.round(c, { tolerance: 1e-8, max_rank: 2 });
  t.ok(
    capped.ranks.every((v) => v <= 2),
    "max_rank caps the ranks",
  );
});

test("round: float32 cores stay float32 and shape is carried", async (t) => {
  const x = smoothField(64, 64, 1);
  const c = (await tt.compress(x, [64, 64, 1], { tolerance: 1e-4 }))!;
  const r = await tt.round(c, { tolerance: 1e-2 });
  t.ok(
    r.cores.every((k) => k instanceof Float32Array),
    "float32 cores",
  );
  t.deepEqual(r.shape, c.shape, "dense shape carried over");
  t.ok(relErr(await tt.reconstruct(c), await tt.reconstruct(r)) <= 1e-2, "bound against the input TT");
});
