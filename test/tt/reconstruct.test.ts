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
    t.ok(
      got.every((v, i) => Math.abs(v - want[i]!) <= 1e-12 * (1 + Math.abs(want[i]!))),
      `slice ${JSON.stringify(slice)}: values`,
    );
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
    [
      [0, 64],
      [0, 48],
      [0, 80],
    ],
    [
      [3, 4],
      [0, 48],
      [0, 80],
    ],
    [
      [10, 37],
      [5, 6],
      [17, 79],
    ],
    [
      [63, 64],
      [47, 48],
      [79, 80],
    ],
    [
      [0, 64],
      [20, 30],
      [1, 2],
    ],
  ];
  for (const slice of slices) {
    const got = Array.from(await tt.reconstruct(r, { slice }));
    const want = block(full, shape, slice);
    t.equal(got.length, want.length, `slice ${JSON.stringify(slice)}: size`);
    t.ok(
      got.every((v, i) => Math.abs(v - want[i]!) <= 1e-10 * (1 + Math.abs(want[i]!))),
      `slice ${JSON.stringify(slice)}: values`,
    );
  }
});

test("reconstruct: float32 quantized blocks match the full float32 reconstruction", async (t) => {
  const shape = [128, 96];
  const x = smoothField(1, 128, 96).subarray(0, 128 * 96) as Float32Array;
  const r = (await tt.compress(x, shape, { tolerance: 1e-4 }))!;
  const full = await tt.reconstruct(r);
  const slice: [number, number][] = [
    [17, 100],
    [3, 95],
  ];
  const got = Array.from(await tt.reconstruct(r, { slice }));
  const want = block(full, shape, slice);
  t.ok(
    got.every((v, i) => Math.abs(v - want[i]!) <= 1e-5 * (1 + Math.abs(want[i]!))),
    "values agree to float32 precision",
  );
});

test("reconstruct: large results reuse freed native blocks and hold only their own values", async (t) => {
  // Results of 4 MiB and more come from a cache of freed blocks (native/tt.cc alloc_buffer):
  // a reused block still holds the previous tensor's values, so each result must overwrite all
  // of it. Collect between calls so the previous result's block is back in the cache.
  const { setFlagsFromString } = await import("node:v8");
  const { runInNewContext } = await import("node:vm");
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  const shape = [128, 128, 128];
  const check = (got: ArrayLike<number>, want: ArrayLike<number>, what: string) => {
    let m = 0;
    for (let i = 0; i < want.length; i++) m = Math.max(m, Math.abs(got[i]! - want[i]!) / (1 + Math.abs(want[i]!)));
    t.ok(got.length === want.length && m < 1e-5, `${what}: max deviation ${m.toExponential(2)}`);
  };
  for (let seed = 1; seed <= 3; seed++) {
    const src = randomTT(shape, [1, 3, 2, 1], 100 + seed, false);
    const want = denseOf(src);
    check(await tt.reconstruct(src), want, `8 MiB result, tensor ${seed}`);
    gc();
    await new Promise((r) => setImmediate(r));
    // a block of 7/8 of the size fits in the freed 8 MiB block
    const slice: [number, number][] = [
      [0, 112],
      [0, 128],
      [0, 128],
    ];
    check(await tt.reconstruct(src, { slice }), block(want, shape, slice), `7 MiB block, tensor ${seed}`);
    gc();
    await new Promise((r) => setImmediate(r));
  }
});
