// pred: round trips for ranks 1-6 and both float types under both error models, lossless
// bit-exactness, header info, and slices equal to the same box of the full decode.
import test from "tape";
import { pred } from "../../lib/index.js";
import { bitEqual, errors, field, sliceOf } from "./helpers.js";

const SHAPES = [[3000], [120, 130], [33, 40, 37], [9, 10, 11, 12], [5, 6, 7, 8, 9], [3, 4, 5, 6, 7, 2]];

test("pred: every rank and dtype honours max_abs_error, tolerance and both", async (t) => {
  for (const shape of SHAPES) {
    for (const f64 of [false, true]) {
      const x = field(shape, f64, shape.length);
      for (const opts of [{ max_abs_error: 1e-3 }, { tolerance: 1e-3 }, { tolerance: 1e-2, max_abs_error: 5e-3 }]) {
        const label = `${shape.join("x")} ${f64 ? "float64" : "float32"} ${JSON.stringify(opts)}`;
        const r = await pred.compress(x, { shape, ...opts });
        const y = await pred.decompress(r.stream);
        t.ok(y instanceof (f64 ? Float64Array : Float32Array), `${label}: output type`);
        t.equal(y.length, x.length, `${label}: length`);
        const e = errors(x, y);
        if ("max_abs_error" in opts) t.ok(e.maxAbs <= opts.max_abs_error!, `${label}: max error ${e.maxAbs.toExponential(3)}`);
        if ("tolerance" in opts) t.ok(e.rel <= opts.tolerance!, `${label}: relative error ${e.rel.toExponential(3)}`);
        t.equal(r.max_abs_error, e.maxAbs, `${label}: reported max_abs_error is the measured one`);
        t.ok(Math.abs(r.relative_error - e.rel) <= 1e-9 * Math.max(e.rel, 1e-300) + 1e-15, `${label}: reported relative_error is the measured one`);
        t.ok(r.compression_ratio > 1.5, `${label}: ratio ${r.compression_ratio.toFixed(2)}`);
        t.equal(r.compression_ratio, x.byteLength / r.stream.byteLength, `${label}: ratio is data bytes / stream bytes`);
        t.equal(r.dtype, f64 ? "float64" : "float32");
        t.deepEqual(r.shape, shape);
        const h = pred.info(r.stream);
        t.deepEqual(h.shape, shape, `${label}: info shape`);
        t.equal(h.dtype, r.dtype, `${label}: info dtype`);
        t.equal(h.lossless, false);
        t.ok(h.max_abs_error > 0 && h.blocks >= 1, `${label}: info bound ${h.max_abs_error} blocks ${h.blocks}`);
      }
    }
  }
});

test("pred: max_abs_error 0 and tolerance 0 are lossless and bit-exact", async (t) => {
  for (const shape of SHAPES) {
    for (const f64 of [false, true]) {
      const x = field(shape, f64, 3, 0.3);
      for (const opts of [{ max_abs_error: 0 }, { tolerance: 0 }]) {
        const r = await pred.compress(x, { shape, ...opts });
        const y = await pred.decompress(r.stream);
        t.ok(bitEqual(x, y), `${shape.join("x")} ${f64 ? "float64" : "float32"} ${JSON.stringify(opts)}: bit-exact`);
        t.equal(r.max_abs_error, 0);
        t.equal(r.relative_error, 0);
        t.equal(pred.info(r.stream).lossless, true);
      }
    }
  }
});

test("pred: a slice equals the same box of the full decode (and decodes across blocks)", async (t) => {
  const cases: { shape: number[]; slices: [number, number][][] }[] = [
    { shape: [300000], slices: [[[0, 1]], [[262000, 262300]], [[299999, 300000]]] },
    {
      shape: [700, 600],
      slices: [
        [
          [0, 700],
          [0, 600],
        ],
        [
          [500, 530],
          [10, 590],
        ],
        [
          [699, 700],
          [599, 600],
        ],
      ],
    },
    {
      shape: [70, 80, 90],
      slices: [
        [
          [60, 70],
          [0, 80],
          [63, 66],
        ],
        [
          [0, 1],
          [0, 1],
          [0, 1],
        ],
      ],
    },
    {
      shape: [1, 40, 1, 50, 1],
      slices: [
        [
          [0, 1],
          [3, 39],
          [0, 1],
          [10, 11],
          [0, 1],
        ],
      ],
    },
    {
      shape: [3, 4, 5, 6, 7, 8, 9],
      slices: [
        [
          [1, 3],
          [1, 3],
          [0, 5],
          [2, 4],
          [0, 7],
          [7, 8],
          [0, 9],
        ],
        [
          [2, 3],
          [3, 4],
          [4, 5],
          [5, 6],
          [6, 7],
          [7, 8],
          [8, 9],
        ],
      ],
    },
  ];
  for (const { shape, slices } of cases) {
    for (const f64 of [false, true]) {
      const x = field(shape, f64, 5, 0.05);
      for (const opts of [{ max_abs_error: 1e-2 }, { max_abs_error: 0 }]) {
        const r = await pred.compress(x, { shape, ...opts });
        const full = await pred.decompress(r.stream);
        for (const slice of slices) {
          const part = await pred.decompress(r.stream, { slice });
          t.deepEqual(
            Array.from(part),
            sliceOf(full, shape, slice),
            `${shape.join("x")} ${f64 ? "f64" : "f32"} ${JSON.stringify(opts)} slice ${JSON.stringify(slice)}`,
          );
        }
      }
    }
  }
});

test("pred: estimate gives a positive ratio near the real one on a smooth field", async (t) => {
  const shape = [256, 256, 64];
  const x = field(shape, false, 2, 0.001);
  const est = await pred.estimate(x, { shape, tolerance: 1e-3 });
  const r = await pred.compress(x, { shape, tolerance: 1e-3 });
  t.ok(est.ratio > 0 && Number.isFinite(est.ratio), `estimate ${est.ratio.toFixed(2)}`);
  t.ok(
    est.ratio > r.compression_ratio / 3 && est.ratio < r.compression_ratio * 3,
    `estimate ${est.ratio.toFixed(2)} vs real ${r.compression_ratio.toFixed(2)}`,
  );
});

test("pred: the lossless mode is smaller than deflate of the raw bytes on float fields", async (t) => {
  const { deflateSync } = await import("node:zlib");
  for (const f64 of [false, true]) {
    for (const [shape, noise] of [
      [[64, 64, 64], 0.01],
      [[512, 512], 0.1],
      [[100000], 0],
    ] as [number[], number][]) {
      const x = field(shape, f64, 11, noise);
      const r = await pred.compress(x, { shape, max_abs_error: 0 });
      const z = deflateSync(x, { level: 9 });
      t.ok(bitEqual(x, await pred.decompress(r.stream)), "bit-exact");
      t.ok(r.stream.byteLength < z.byteLength, `${shape.join("x")} ${f64 ? "f64" : "f32"}: pred ${r.stream.byteLength} B < deflate -9 ${z.byteLength} B`);
    }
  }
});

test("pred: a slice decodes only the blocks it touches (a damaged block elsewhere does not matter)", async (t) => {
  const shape = [700, 600];
  const x = field(shape, false, 12, 0.05);
  const r = await pred.compress(x, { shape, max_abs_error: 1e-3 });
  const h = pred.info(r.stream);
  t.ok(h.blocks >= 2, `${h.blocks} blocks of ${JSON.stringify(h.block_shape)}`);
  const full = await pred.decompress(r.stream);
  // The block table: after the fixed header (16 bytes), the shape and the block shape.
  const table = 16 + 8 * shape.length + 4 * h.block_shape.length;
  const view = new DataView(r.stream.buffer, r.stream.byteOffset);
  const lastLen = view.getUint32(table + 4 * (h.blocks - 1), true);
  const damaged = r.stream.slice();
  for (let i = damaged.length - lastLen + 8; i < damaged.length; i += 7) damaged[i] = damaged[i]! ^ 0x5a;
  const slice: [number, number][] = [
    [0, 10],
    [0, 10],
  ];
  const part = await pred.decompress(damaged, { slice });
  t.deepEqual(Array.from(part), sliceOf(full, shape, slice), "the slice in the first block decodes as before");
  try {
    await pred.decompress(damaged);
    t.fail("the full decode should meet the damaged block");
  } catch (e) {
    t.equal((e as { code?: string }).code, "bad_request", `full decode refused: ${(e as Error).message}`);
  }
});

test("pred: streams are deterministic under concurrency and readable from inside a larger buffer", async (t) => {
  const inputs = [
    { shape: [300, 400], x: field([300, 400], false, 21, 0.05), opts: { tolerance: 1e-3 } },
    { shape: [40, 50, 60], x: field([40, 50, 60], true, 22, 0.05), opts: { max_abs_error: 1e-4 } },
    { shape: [20000], x: field([20000], false, 23, 0.5), opts: { max_abs_error: 0 } },
  ];
  const serial: Uint8Array[] = [];
  for (const i of inputs) serial.push((await pred.compress(i.x, { shape: i.shape, ...i.opts })).stream);
  const together = await Promise.all([...inputs, ...inputs].map((i) => pred.compress(i.x, { shape: i.shape, ...i.opts })));
  together.forEach((r, k) => t.deepEqual(Buffer.from(r.stream), Buffer.from(serial[k % inputs.length]!), `stream ${k} equals the serial one`));
  for (let k = 0; k < inputs.length; k++) {
    const s = serial[k]!;
    const host = new Uint8Array(s.length + 13);
    host.set(s, 7);
    const inner = host.subarray(7, 7 + s.length);
    t.deepEqual(pred.info(inner), pred.info(s), `info of a stream at byte offset 7 (${k})`);
    t.deepEqual(Array.from(await pred.decompress(inner)), Array.from(await pred.decompress(s)), `decode of a stream at byte offset 7 (${k})`);
  }
});

test("pred: estimate works for both error models and the lossless mode", async (t) => {
  const shape = [200, 300];
  for (const f64 of [false, true]) {
    const x = field(shape, f64, 31, 0.02);
    for (const opts of [{ max_abs_error: 1e-3 }, { tolerance: 1e-4 }, { tolerance: 1e-2, max_abs_error: 1e-3 }, { max_abs_error: 0 }]) {
      const { ratio } = await pred.estimate(x, { shape, ...opts });
      const real = (await pred.compress(x, { shape, ...opts })).compression_ratio;
      t.ok(ratio > real / 3 && ratio < real * 3, `${f64 ? "f64" : "f32"} ${JSON.stringify(opts)}: estimate ${ratio.toFixed(2)}, real ${real.toFixed(2)}`);
    }
  }
});
