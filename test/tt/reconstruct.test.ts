// tt.reconstruct: the full tensor equals the definition, and a block equals the same block of
// the full reconstruction, for plain and quantized modes and both float types.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { denseOf, randomTT, rng, smoothField } from "./helpers.js";

function block(full: ArrayLike<number>, shape: number[], slice: [number, number][]): number[] {
  const out: number[] = [];
  const strides = shape.map((_, j) => shape.slice(j + 1).reduce((a, b) => a * b, 1));
  const rec = (j: number, off: number) => {
    if (j === shape.length) {
      out.push(full[off]!);
      return;
    }
    for (let i = slice[j]![0]; i < slice[j]![1]; i++) rec(j + 1, off + i * strides[j]!);
  };
  rec(0, 0);
  return out;
}

test("reconstruct: full reconstruction equals the dense contraction of the cores", async (t) => {
  for (const f64 of [true, false]) {
    const src = randomTT([5, 6, 7, 4], [1, 3, 5, 2, 1], 21, f64);
    const got = await tt.reconstruct(src);
    const want = denseOf(src);
    t.equal(got.length, want.length, "length");
    t.ok(got instanceof (f64 ? Float64Array : Float32Array), "output type follows the cores");
    let m = 0;
    for (let i = 0; i < want.length; i++) m = Math.max(m, Math.abs(got[i]! - want[i]!) / (1 + Math.abs(want[i]!)));
    t.ok(m < (f64 ? 1e-12 : 1e-5), `${f64 ? "float64" : "float32"}: max deviation ${m.toExponential(2)}`);
  }
});

test("reconstruct: blocks equal the same block of the full reconstruction (plain modes)", async (t) => {
  const src = randomTT([9, 8, 10], [1, 4, 3, 1], 3);
  const full = await tt.reconstruct(src);
  const u = rng(9);
  for (let trial = 0; trial < 8; trial++) {
    const slice = src.modes.map((n) => {
      const a = Math.floor(u() * n);
      const b = a + 1 + Math.floor(u() * (n - a));
      return [a, b] as [number, number];
    });
    const got = Array.from(await tt.reconstruct(src, { slice }));
    const want = block(full, src.modes, slice);
    t.deepEqual(got.length, want.length, `slice ${JSON.stringify(slice)}: size`);
    t.ok(got.every((v, i) => Math.abs(v - want[i]!) <= 1e-12 * (1 + Math.abs(want[i]!))), `slice ${JSON.stringify(slice)}: values`);
  }
});

test("reconstruct: blocks in dense coordinates with quantized modes", async (t) => {
  const shape = [64, 48, 80];
  const x = smoothField(64, 48, 80, true);
  const r = (await tt.compress(x, shape, { tolerance: 1e-6 }))!;
  t.deepEqual(r.modes, tt.chooseModes(shape), "quantized modes");
  t.ok(r.modes.length > shape.length, "more modes than dense dimensions");
  const full = await tt.reconstruct(r);
  const slices: [number, number][][] = [
    [[0, 64], [0, 48], [0, 80]],
    [[3, 4], [0, 48], [0, 80]],
    [[10, 37], [5, 6], [17, 79]],
    [[63, 64], [47, 48], [79, 80]],
    [[0, 64], [20, 30], [1, 2]],
  ];
  for (const slice of slices) {
    const got = Array.from(await tt.reconstruct(r, { slice }));
    const want = block(full, shape, slice);
    t.equal(got.length, want.length, `slice ${JSON.stringify(slice)}: size`);
    t.ok(got.every((v, i) => Math.abs(v - want[i]!) <= 1e-10 * (1 + Math.abs(want[i]!))), `slice ${JSON.stringify(slice)}: values`);
  }
});

test("reconstruct: float32 quantized blocks match the full float32 reconstruction", async (t) => {
  const shape = [128, 96];
  const x = smoothField(1, 128, 96).subarray(0, 128 * 96) as Float32Array;
  const r = (await tt.compress(x, shape, { tolerance: 1e-4 }))!;
  const full = await tt.reconstruct(r);
  const slice: [number, number][] = [[17, 100], [3, 95]];
  const got = Array.from(await tt.reconstruct(r, { slice }));
  const want = block(full, shape, slice);
  t.ok(got.every((v, i) => Math.abs(v - want[i]!) <= 1e-5 * (1 + Math.abs(want[i]!))), "values agree to float32 precision");
});
