// tt.compress: the error bound on random, smooth and exactly low-rank tensors, recovery of
// known ranks, measured error reporting, dtypes, rank caps, min_ratio and modes choice.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { denseOf, noise, prod, randomTT, relErr, smoothField, ttSize } from "./helpers.js";

test("compress: random tensor keeps the bound at several tolerances, and relative_error is the true error", async (t) => {
  const x = noise(12 * 10 * 14, 7, true);
  for (const tol of [0.5, 0.2, 0.05, 1e-3]) {
    const r = (await tt.compress(x, [12, 10, 14], { tolerance: tol }))!;
    const err = relErr(x, await tt.reconstruct(r));
    t.ok(err <= tol, `tol ${tol}: error ${err.toExponential(3)} <= tol`);
    t.ok(Math.abs(err - r.relative_error) <= 1e-9 + 1e-6 * err, `tol ${tol}: reported error ${r.relative_error.toExponential(3)} matches`);
  }
});

test("compress: smooth float32 field keeps the bound at 1e-2, 1e-3, 1e-4 and compresses", async (t) => {
  const x = smoothField(32, 32, 32);
  for (const tol of [1e-2, 1e-3, 1e-4]) {
    for (const modes of [[32, 32, 32], undefined]) {
      const r = (await tt.compress(x, [32, 32, 32], { tolerance: tol, modes }))!;
      t.ok(
        r.cores.every((c) => c instanceof Float32Array),
        "float32 in, float32 cores out",
      );
      const err = relErr(x, await tt.reconstruct(r));
      t.ok(err <= tol, `tol ${tol} modes ${r.modes}: error ${err.toExponential(3)} <= tol`);
      t.ok(ttSize(r) < x.length / 4, `tol ${tol} modes ${r.modes}: ratio ${(x.length / ttSize(r)).toFixed(1)} > 4`);
    }
  }
});

test("compress: exact recovery of a known TT-rank tensor at tol 1e-6", async (t) => {
  const src = randomTT([6, 7, 8, 5], [1, 3, 4, 2, 1], 11);
  const x = denseOf(src);
  const r = (await tt.compress(x, [6, 7, 8, 5], { tolerance: 1e-6, modes: [6, 7, 8, 5] }))!;
  t.deepEqual(r.modes, [6, 7, 8, 5], "modes kept");
  t.ok(
    r.ranks.every((v, i) => v <= src.ranks[i]!),
    `ranks ${r.ranks} <= ${src.ranks}`,
  );
  t.ok(r.relative_error <= 1e-6, `error ${r.relative_error.toExponential(2)} <= 1e-6`);
  t.ok(relErr(x, denseOf(r)) <= 1e-6, "independent dense check agrees");
});

test("compress: exactly low-rank float32 tensor with quantized modes keeps the bound", async (t) => {
  const src = randomTT([64, 64], [1, 3, 1], 5, false);
  const x = Float32Array.from(denseOf(src));
  const r = (await tt.compress(x, [64, 64], { tolerance: 1e-4 }))!;
  t.deepEqual(r.modes, tt.chooseModes([64, 64]), "default modes come from chooseModes");
  t.deepEqual(r.shape, [64, 64], "dense shape is recorded when modes differ");
  t.ok(relErr(x, await tt.reconstruct(r)) <= 1e-4, "bound holds");
  t.ok(Math.max(...r.ranks) <= 8, `ranks stay small: ${r.ranks}`);
});

test("compress: max_rank caps every rank", async (t) => {
  const x = noise(16 * 16 * 16, 3);
  const r = (await tt.compress(x, [16, 16, 16], { tolerance: 1e-3, max_rank: 3, modes: [16, 16, 16] }))!;
  t.ok(
    r.ranks.every((v) => v <= 3),
    `ranks ${r.ranks} <= 3`,
  );
  t.ok(r.relative_error > 1e-3 && r.relative_error < 1, "the cap binds and the error is reported honestly");
  t.ok(Math.abs(relErr(x, await tt.reconstruct(r)) - r.relative_error) < 1e-6, "reported error is the true error");
});

test("compress: one-dimensional and size-1 dimensions", async (t) => {
  const x = noise(10, 9, true);
  const r = (await tt.compress(x, [10]))!;
  t.deepEqual(r.ranks, [1, 1], "a single core");
  t.deepEqual(Array.from(await tt.reconstruct(r)), Array.from(x), "exact");
  const y = smoothField(1, 8, 9, true);
  const s = (await tt.compress(y, [1, 8, 9], { tolerance: 1e-7 }))!;
  t.ok(relErr(y, await tt.reconstruct(s)) <= 1e-7, "shape with a 1 keeps the bound");
});

test("compress: min_ratio gives up on noise and keeps compressible data", async (t) => {
  const x = noise(64 * 64 * 64, 4);
  t.equal(await tt.compress(x, [64, 64, 64], { tolerance: 1e-2, min_ratio: 4 }), null, "noise with min_ratio 4 -> null");
  const y = smoothField(64, 64, 64);
  const r = await tt.compress(y, [64, 64, 64], { tolerance: 1e-3, min_ratio: 4 });
  t.ok(r !== null && y.length / ttSize(r) >= 4, "smooth field reaches the ratio");
  const capped = await tt.compress(y, [64, 64, 64], { tolerance: 1e-3, max_rank: 2 });
  t.ok(capped !== null && capped.relative_error > 1e-3, "without min_ratio the capped result is returned with its error");
  const cappedMin = await tt.compress(y, [64, 64, 64], { tolerance: 1e-3, min_ratio: 1.5, max_rank: 2 });
  t.deepEqual(cappedMin?.ranks, capped?.ranks, "with min_ratio the capped result is the same when it reaches the ratio");
  const tiny = noise(20, 1);
  t.equal(await tt.compress(tiny, [20], { min_ratio: 2 }), null, "a 1-D tensor cannot reach a ratio above 1");
});

test("compress: modes 'auto' keeps the smaller of plain and quantized", async (t) => {
  const y = smoothField(64, 64, 64);
  const auto = (await tt.compress(y, [64, 64, 64], { tolerance: 1e-2, modes: "auto" }))!;
  const plain = (await tt.compress(y, [64, 64, 64], { tolerance: 1e-2, modes: [64, 64, 64] }))!;
  const quant = (await tt.compress(y, [64, 64, 64], { tolerance: 1e-2 }))!;
  t.equal(ttSize(auto), Math.min(ttSize(plain), ttSize(quant)), "auto is the better of the two");
  t.ok(auto.relative_error <= 1e-2, "bound holds");
});

test("compress: runs off the event loop", async (t) => {
  const y = smoothField(96, 96, 96);
  // The call hands the work to the native pool and returns: its answer can only come back
  // through a later turn of the event loop, never within the microtasks of this one (work done
  // on the main thread would have settled the promise by then). A count of loop turns during
  // the call depended on the machine's load and is not asserted.
  let settled = false;
  const p = tt.compress(y, [96, 96, 96], { tolerance: 1e-4, modes: [96, 96, 96] });
  t.ok(p instanceof Promise, "returns a promise");
  void p.then(() => (settled = true));
  for (let i = 0; i < 10; i++) await Promise.resolve();
  t.notOk(settled, "not settled within the microtasks of the turn that called it");
  await p;
  t.ok(settled, "settled later");
  t.equal(prod([96, 96, 96]), y.length, "sanity");
});

test("compress: large unfoldings (randomized range finder) keep the bound and find the rank", async (t) => {
  const m = 1500,
    n = 1200,
    r = 5;
  const u = noise(m * r, 21, true),
    v = noise(r * n, 22, true);
  const x = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let k = 0; k < r; k++) {
      const a = u[i * r + k]! / (k + 1) ** 3;
      for (let j = 0; j < n; j++) x[i * n + j]! += a * v[k * n + j]!;
    }
  const e = (await tt.compress(x, [m, n], { tolerance: 1e-6, modes: [m, n] }))!;
  t.deepEqual(e.ranks, [1, r, 1], "exact rank found");
  t.ok(e.relative_error <= 1e-6, `error ${e.relative_error.toExponential(2)}`);
  const y = noise(600 * 700, 23);
  for (const tol of [0.5, 0.2]) {
    const c = (await tt.compress(y, [600, 700], { tolerance: tol, modes: [600, 700], max_rank: 600 }))!;
    t.ok(c.relative_error <= tol, `noise tol ${tol}: error ${c.relative_error.toFixed(4)} with rank ${c.ranks[1]}`);
    t.ok(Math.abs(relErr(y, await tt.reconstruct(c)) - c.relative_error) < 1e-6, "reported error is the true error");
  }
});

test("compress: concurrent calls share the native pool and give the same results as sequential ones", async (t) => {
  const inputs = [1, 2, 3, 4, 5, 6].map((s) => smoothField(24, 20, 28, s % 2 === 0, s));
  const seq = [];
  for (const x of inputs) seq.push((await tt.compress(x, [24, 20, 28], { tolerance: 1e-4, modes: [24, 20, 28] }))!);
  const par = await Promise.all(inputs.map((x) => tt.compress(x, [24, 20, 28], { tolerance: 1e-4, modes: [24, 20, 28] })));
  for (let i = 0; i < inputs.length; i++) {
    t.deepEqual(par[i]!.ranks, seq[i]!.ranks, `input ${i}: same ranks`);
    t.ok(Math.abs(par[i]!.relative_error - seq[i]!.relative_error) <= 1e-12 + 1e-9 * seq[i]!.relative_error, `input ${i}: same error`);
  }
  const dots = await Promise.all(par.map((r) => tt.dot(r!, r!)));
  const norms = await Promise.all(par.map((r) => tt.norm(r!)));
  t.ok(
    dots.every((d, i) => Math.abs(Math.sqrt(d) - norms[i]!) <= 1e-9 * norms[i]!),
    "concurrent dots and norms agree",
  );
});
