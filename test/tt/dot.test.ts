// tt.dot, tt.norm, tt.dotDense and the batched forms against dense float64 dots.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { ValidationError } from "../../lib/errors.js";
import { denseOf, dotF64, noise, randomTT, smoothField } from "./helpers.js";

const close = (a: number, b: number, rel: number) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-300);

test("dot: TT.TT equals the dense dot to 1e-5 relative, for each type pairing", async (t) => {
  const modes = [6, 5, 7, 4];
  for (const [fa, fb] of [
    [true, true],
    [false, false],
    [true, false],
    [false, true],
  ]) {
    const a = randomTT(modes, [1, 3, 4, 2, 1], 1, fa);
    const b = randomTT(modes, [1, 2, 5, 3, 1], 2, fb);
    const want = dotF64(denseOf(a), denseOf(b));
    const got = await tt.dot(a, b);
    t.ok(close(got, want, 1e-5), `${fa ? "f64" : "f32"}.${fb ? "f64" : "f32"}: ${got} vs ${want}`);
  }
});

test("norm: equals the dense Frobenius norm", async (t) => {
  const a = randomTT([8, 9, 10], [1, 4, 5, 1], 3);
  const d = denseOf(a);
  t.ok(close(await tt.norm(a), Math.sqrt(dotF64(d, d)), 1e-10), "norm");
});

test("dotDense: TT.dense equals the dense dot to 1e-5 relative, plain and quantized", async (t) => {
  const a = randomTT([6, 5, 7, 4], [1, 3, 4, 2, 1], 4);
  const x = noise(6 * 5 * 7 * 4, 5, true);
  t.ok(close(await tt.dotDense(a, x), dotF64(denseOf(a), x), 1e-10), "plain float64");
  const y = smoothField(64, 32, 80);
  const q = (await tt.compress(y, [64, 32, 80], { tolerance: 1e-3 }))!;
  const z = noise(y.length, 6);
  const dense = await tt.reconstruct(q);
  t.ok(close(await tt.dotDense(q, z), dotF64(dense, z), 1e-5), "quantized float32 against its reconstruction");
  t.ok(close(await tt.dotDense(q, y), dotF64(dense, y), 1e-5), "with the original field");
});

test("dotBatch and dotDenseBatch score every candidate like the single calls", async (t) => {
  const modes = [5, 6, 7];
  const q = randomTT(modes, [1, 2, 3, 1], 7);
  const cands = [1, 2, 3, 4, 5].map((s) => randomTT(modes, [1, s, 2, 1], 10 + s, s % 2 === 0));
  const scores = await tt.dotBatch(q, cands);
  t.ok(scores instanceof Float64Array && scores.length === 5, "one float64 score per candidate");
  for (let i = 0; i < cands.length; i++) t.ok(close(scores[i]!, dotF64(denseOf(q), denseOf(cands[i]!)), 1e-5), `candidate ${i}`);
  const x = noise(5 * 6 * 7, 8, true);
  const ds = await tt.dotDenseBatch(x, cands);
  for (let i = 0; i < cands.length; i++) t.ok(close(ds[i]!, dotF64(x, denseOf(cands[i]!)), 1e-5), `dense candidate ${i}`);
  t.equal((await tt.dotBatch(q, [])).length, 0, "no candidates, no scores");
  t.equal((await tt.dotDenseBatch(x, [])).length, 0, "no dense candidates, no scores");
});

test("denseDot accumulates in float64", async (t) => {
  const a = noise(100003, 1);
  const b = noise(100003, 2, true);
  t.ok(close(await tt.denseDot(a, b), dotF64(a, b), 1e-12), "mixed types");
  const ones = new Float32Array(1 << 20).fill(1 + 2 ** -20);
  t.ok(close(await tt.denseDot(ones, ones), (1 << 20) * (1 + 2 ** -20) ** 2, 1e-12), "no float32 accumulation loss");
});

test("dotBatch: a NaN or infinity in a candidate's small core is refused naming that core and index; finite cores whose score overflows give Infinity", async (t) => {
  const modes = [6, 5, 7, 4],
    ranks = [1, 3, 3, 3, 1];
  const q = randomTT(modes, ranks, 71, false);
  for (const [bad, cand, core, index] of [
    [NaN, 3, 2, 7],
    [-Infinity, 0, 0, 0],
    [Infinity, 4, 3, 11],
  ] as const) {
    const cands = Array.from({ length: 5 }, (_, i) => randomTT(modes, ranks, 80 + i, false));
    cands[cand]!.cores[core]![index] = bad;
    try {
      await tt.dotBatch(q, cands);
      t.fail(`${bad} in candidates[${cand}].cores[${core}]: should have been rejected`);
    } catch (e) {
      t.ok(e instanceof ValidationError, `${bad}: ValidationError (${(e as Error).message})`);
      t.equal((e as ValidationError).field, `candidates[${cand}].cores[${core}]`, `${bad}: names candidates[${cand}].cores[${core}]`);
      t.ok((e as Error).message.includes(`at index ${index}`), `${bad}: gives index ${index}`);
    }
  }
  const huge = { modes: [2, 2], ranks: [1, 1, 1], cores: [new Float64Array([1e200, 1e200]), new Float64Array([1e200, 1e200])] };
  const tiny = { modes: [2, 2], ranks: [1, 1, 1], cores: [new Float64Array([1e-200, 2e-200]), new Float64Array([1e-200, 3e-200])] };
  const scores = await tt.dotBatch(huge, [huge, tiny]);
  t.equal(scores[0], Infinity, "finite entries whose dot overflows float64: Infinity, not an error");
  t.ok(Math.abs(scores[1]! - 12) < 1e-12, `a candidate of tiny entries scores (1 + 2)(1 + 3) = 12: ${scores[1]}`);
});
