// pred: a property test of the error bounds: 500 seeded random cases over ranks 1-6, both
// dtypes, several kinds of data (smooth, noisy, steps, sparse spikes, wide range) and both error
// models. Every case decodes the stream and checks the requested bounds in float64.
import test from "tape";
import { pred } from "../../lib/index.js";
import { errors, gaussian, prod, rng } from "./helpers.js";

function randomShape(r: () => number): number[] {
  const rank = 1 + Math.floor(r() * 6);
  const budget = 200 + Math.floor(r() * 30000);
  const side = Math.max(1, Math.round(Math.pow(budget, 1 / rank)));
  return Array.from({ length: rank }, () => (r() < 0.1 ? 1 : Math.max(1, Math.round(side * (0.5 + r())))));
}

function randomData(shape: number[], f64: boolean, seed: number, kind: number): Float32Array | Float64Array {
  const n = prod(shape);
  const a = f64 ? new Float64Array(n) : new Float32Array(n);
  const g = gaussian(seed);
  const r = rng(seed + 1);
  const scale = Math.pow(10, Math.floor(r() * 12) - 6);
  let walk = 0;
  for (let i = 0; i < n; i++) {
    let v: number;
    switch (kind) {
      case 0:
        v = Math.sin(i * 0.01) + Math.cos(i * 0.003);
        break; // smooth along the C order
      case 1:
        v = g();
        break; // white noise
      case 2:
        walk += g() * 0.1;
        v = walk;
        break; // random walk
      case 3:
        v = Math.floor(i / 97) % 2 ? 5 : -3;
        break; // steps
      case 4:
        v = r() < 0.01 ? g() * 100 : 0;
        break; // sparse spikes
      default:
        v = g() * Math.pow(10, Math.floor(r() * 10) - 5); // wide range
    }
    a[i] = v * scale;
  }
  return a;
}

test("pred: 500 random cases honour every requested bound", async (t) => {
  const r = rng(20260601);
  let worst = 0;
  let failures = 0;
  for (let c = 0; c < 500; c++) {
    const shape = randomShape(r);
    const f64 = r() < 0.5;
    const kind = Math.floor(r() * 6);
    const x = randomData(shape, f64, 1000 + c, kind);
    const model = Math.floor(r() * 3);
    const tol = [1e-2, 1e-3, 1e-4, 1e-5][Math.floor(r() * 4)]!;
    let peak = 0;
    for (let i = 0; i < x.length; i++) peak = Math.max(peak, Math.abs(x[i]!));
    const abs = peak * [1e-1, 1e-2, 1e-3, 1e-5][Math.floor(r() * 4)]!;
    const opts = model === 0 ? { tolerance: tol } : model === 1 ? { max_abs_error: abs } : { tolerance: tol, max_abs_error: abs };
    const res = await pred.compress(x, { shape, ...opts });
    const y = await pred.decompress(res.stream);
    const e = errors(x, y);
    const okAbs = opts.max_abs_error === undefined || e.maxAbs <= opts.max_abs_error;
    const okRel = opts.tolerance === undefined || e.rel <= opts.tolerance;
    if (opts.tolerance !== undefined) worst = Math.max(worst, e.rel / opts.tolerance);
    if (!okAbs || !okRel || res.max_abs_error !== e.maxAbs) {
      failures++;
      t.fail(`case ${c}: shape ${JSON.stringify(shape)} ${f64 ? "f64" : "f32"} kind ${kind} ${JSON.stringify(opts)}: max ${e.maxAbs} rel ${e.rel}`);
    }
  }
  t.equal(failures, 0, `500 cases, worst achieved/tolerance ${worst.toFixed(3)}`);
});
