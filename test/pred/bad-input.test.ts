// pred: hostile and awkward inputs. Options are refused with the option's name; data with NaN
// or infinities is refused; constant, zero, denormal and huge-range data round-trip within the
// bound; corrupt streams (truncations, byte flips, forged headers) give ValidationError or a
// valid decode, never a crash, hang or huge allocation.
import test from "tape";
import { pred, ValidationError } from "../../lib/index.js";
import { bitEqual, errors, field, rng } from "./helpers.js";

async function rejects(t: test.Test, p: () => Promise<unknown> | unknown, field: string, label: string): Promise<void> {
  try {
    await p();
    t.fail(`${label}: expected a ValidationError`);
  } catch (e) {
    t.ok(e instanceof ValidationError, `${label}: ValidationError (${(e as Error).message})`);
    t.equal((e as ValidationError).field, field, `${label}: names ${field}`);
  }
}

test("pred: bad options name the option", async (t) => {
  const x = new Float32Array(16);
  const shape = [4, 4];
  for (const v of [-1, -1e-9, NaN, Infinity, -Infinity, "1e-3" as unknown as number]) {
    await rejects(t, () => pred.compress(x, { shape, tolerance: v }), "tolerance", `tolerance ${String(v)}`);
    await rejects(t, () => pred.compress(x, { shape, max_abs_error: v }), "max_abs_error", `max_abs_error ${String(v)}`);
    await rejects(t, () => pred.estimate(x, { shape, max_abs_error: v }), "max_abs_error", `estimate max_abs_error ${String(v)}`);
  }
  await rejects(t, () => pred.compress(x, { shape, tolerance: 1 }), "tolerance", "tolerance 1");
  await rejects(t, () => pred.compress(x, { shape }), "tolerance", "neither bound");
  await rejects(t, () => pred.compress(x, { shape: [4, 5], tolerance: 1e-3 }), "shape", "shape does not match");
  await rejects(t, () => pred.compress(x, { shape: [4, 0, 4], tolerance: 1e-3 }), "shape.1", "zero dimension");
  await rejects(t, () => pred.compress(x, { shape: [-16], tolerance: 1e-3 }), "shape.0", "negative dimension");
  await rejects(t, () => pred.compress(x, { shape: [16.5], tolerance: 1e-3 }), "shape.0", "fractional dimension");
  await rejects(t, () => pred.compress(x, { shape, tolerance: 1e-3, bogus: 1 } as never), "options", "unknown option");
  await rejects(t, () => pred.compress([1, 2, 3] as unknown as Float32Array, { shape: [3], tolerance: 1e-3 }), "data", "plain array");
  await rejects(t, () => pred.compress(new Int32Array(4) as unknown as Float32Array, { shape: [4], tolerance: 1e-3 }), "data", "Int32Array");
});

test("pred: NaN and infinities in data are refused, small and large arrays alike", async (t) => {
  for (const n of [5, 300000]) {
    for (const bad of [NaN, Infinity, -Infinity]) {
      for (const f64 of [false, true]) {
        const x = f64 ? new Float64Array(n) : new Float32Array(n);
        x[n - 1] = bad;
        await rejects(t, () => pred.compress(x, { shape: [n], max_abs_error: 0.1 }), "data", `${n} ${bad} ${f64}`);
        await rejects(t, () => pred.estimate(x, { shape: [n], tolerance: 0.1 }), "data", `estimate ${n} ${bad} ${f64}`);
      }
    }
  }
});

test("pred: awkward data round-trips within the bound", async (t) => {
  const r = rng(7);
  const cases: { name: string; shape: number[]; make: (f64: boolean) => Float32Array | Float64Array }[] = [
    { name: "all zero", shape: [64, 64], make: (f) => (f ? new Float64Array(4096) : new Float32Array(4096)) },
    { name: "all constant", shape: [10, 10, 10], make: (f) => (f ? new Float64Array(1000).fill(3.25) : new Float32Array(1000).fill(3.25)) },
    { name: "one element", shape: [1], make: (f) => (f ? Float64Array.of(-2.5) : Float32Array.of(-2.5)) },
    { name: "one element, rank 4", shape: [1, 1, 1, 1], make: (f) => (f ? Float64Array.of(1e-20) : Float32Array.of(1e-20)) },
    { name: "dimensions of 1", shape: [1, 50, 1, 40, 1], make: (f) => field([1, 50, 1, 40, 1], f, 9) },
    {
      name: "denormals",
      shape: [2000],
      make: (f) => {
        const a = f ? new Float64Array(2000) : new Float32Array(2000);
        const tiny = f ? 5e-324 : 1.4e-45;
        for (let i = 0; i < a.length; i++) a[i] = tiny * Math.floor(r() * 1000) * (i % 2 ? 1 : -1);
        return a;
      },
    },
    {
      name: "huge dynamic range",
      shape: [50, 40],
      make: (f) => {
        const a = f ? new Float64Array(2000) : new Float32Array(2000);
        for (let i = 0; i < a.length; i++) a[i] = (i % 3 === 0 ? 1e30 : i % 3 === 1 ? 1e-30 : -1e15) * (1 + r());
        return a;
      },
    },
    {
      name: "blocks of zeros beside noise",
      shape: [600, 600],
      make: (f) => {
        const a = f ? new Float64Array(360000) : new Float32Array(360000);
        for (let i = 180000; i < a.length; i++) a[i] = r() - 0.5;
        return a;
      },
    },
  ];
  for (const c of cases) {
    for (const f64 of [false, true]) {
      const x = c.make(f64);
      for (const opts of [{ max_abs_error: 1e-3 }, { tolerance: 1e-4 }, { max_abs_error: 0 }, { tolerance: 1e-2, max_abs_error: 1e-25 }]) {
        const label = `${c.name} ${f64 ? "float64" : "float32"} ${JSON.stringify(opts)}`;
        const res = await pred.compress(x, { shape: c.shape, ...opts });
        const y = await pred.decompress(res.stream);
        const e = errors(x, y);
        if (opts.max_abs_error === 0) t.ok(bitEqual(x, y), `${label}: bit-exact`);
        if (opts.max_abs_error !== undefined) t.ok(e.maxAbs <= opts.max_abs_error, `${label}: max error ${e.maxAbs}`);
        if (opts.tolerance !== undefined) t.ok(e.rel <= opts.tolerance, `${label}: relative error ${e.rel}`);
        t.equal(res.max_abs_error, e.maxAbs, `${label}: reported max error`);
      }
    }
  }
});

test("pred: non-streams and bad slices are refused", async (t) => {
  const x = field([30, 40], false, 1);
  const { stream } = await pred.compress(x, { shape: [30, 40], max_abs_error: 1e-3 });
  await rejects(t, () => pred.decompress(Array.from(stream) as unknown as Uint8Array), "stream", "plain array");
  await rejects(t, () => pred.decompress(new Uint8Array(0)), "stream", "empty stream");
  await rejects(t, () => pred.decompress(new TextEncoder().encode("not a stream at all")), "stream", "text");
  await rejects(t, () => pred.info(new Uint8Array(3)), "stream", "info of 3 bytes");
  await rejects(t, () => pred.decompress(stream, { slice: [[0, 30]] }), "slice", "too few ranges");
  await rejects(
    t,
    () =>
      pred.decompress(stream, {
        slice: [
          [0, 31],
          [0, 40],
        ],
      }),
    "slice[0]",
    "beyond the end",
  );
  await rejects(
    t,
    () =>
      pred.decompress(stream, {
        slice: [
          [5, 5],
          [0, 40],
        ],
      }),
    "slice[0]",
    "empty range",
  );
  await rejects(
    t,
    () =>
      pred.decompress(stream, {
        slice: [
          [6, 5],
          [0, 40],
        ],
      }),
    "slice[0]",
    "reversed range",
  );
  await rejects(
    t,
    () =>
      pred.decompress(stream, {
        slice: [
          [0, 1.5],
          [0, 40],
        ],
      }),
    "slice.0.1",
    "fractional",
  );
  await rejects(
    t,
    () =>
      pred.decompress(stream, {
        slice: [
          [-1, 3],
          [0, 40],
        ],
      }),
    "slice.0.0",
    "negative",
  );
});

/** Decodes a possibly corrupt stream: a ValidationError or a valid array of the header's size is fine. */
async function tolerant(t: test.Test, s: Uint8Array, label: string): Promise<"ok" | "refused"> {
  try {
    const y = await pred.decompress(s);
    const h = pred.info(s);
    if (y.length !== h.shape.reduce((a, b) => a * b, 1)) t.fail(`${label}: decoded length ${y.length} is not the header's`);
    return "ok";
  } catch (e) {
    if (!(e instanceof ValidationError)) t.fail(`${label}: ${(e as Error).name}: ${(e as Error).message}`);
    return "refused";
  }
}

test("pred: fuzz: truncations and random byte flips never crash", async (t) => {
  const r = rng(2024);
  const inputs: { name: string; shape: number[]; x: Float32Array | Float64Array; opts: object }[] = [
    { name: "2-D f32 lossy", shape: [90, 70], x: field([90, 70], false, 4, 0.1), opts: { max_abs_error: 1e-3 } },
    { name: "3-D f64 lossy", shape: [20, 30, 25], x: field([20, 30, 25], true, 5, 0.1), opts: { tolerance: 1e-3 } },
    { name: "1-D f32 lossless", shape: [3000], x: field([3000], false, 6, 0.5), opts: { max_abs_error: 0 } },
    { name: "2-D f64 lossless, two blocks", shape: [600, 500], x: field([600, 500], true, 7, 0.5), opts: { max_abs_error: 0 } },
  ];
  let refused = 0,
    decoded = 0;
  for (const inp of inputs) {
    const { stream } = await pred.compress(inp.x, { shape: inp.shape, ...inp.opts });
    const cuts = [0, 1, 4, 8, 16, 24, 31, 40, stream.length >> 1, stream.length - 5, stream.length - 1];
    for (let k = 0; k < 20; k++) cuts.push(Math.floor(r() * stream.length));
    for (const c of cuts) {
      const res = await tolerant(t, stream.slice(0, c), `${inp.name} truncated to ${c}`);
      if (res === "refused") refused++;
      else t.fail(`${inp.name} truncated to ${c} decoded`);
    }
    for (let k = 0; k < 150; k++) {
      const s = stream.slice();
      const flips = 1 + Math.floor(r() * 4);
      for (let f = 0; f < flips; f++) {
        const at = k < 60 ? Math.floor(r() * Math.min(s.length, 64)) : Math.floor(r() * s.length);
        s[at] = s[at]! ^ (1 << Math.floor(r() * 8));
      }
      if ((await tolerant(t, s, `${inp.name} flip ${k}`)) === "refused") refused++;
      else decoded++;
    }
    // Forged header fields: a huge shape, a huge block table, a stream extended with garbage.
    const forged = stream.slice();
    new DataView(forged.buffer).setBigUint64(16, 1n << 40n, true);
    if ((await tolerant(t, forged, `${inp.name} huge shape`)) === "ok") t.fail("huge shape decoded");
    const longer = new Uint8Array(stream.length + 100);
    longer.set(stream);
    if ((await tolerant(t, longer, `${inp.name} trailing bytes`)) === "ok") t.fail("trailing bytes decoded");
  }
  t.ok(refused > 0, `${refused} corrupt streams refused, ${decoded} decoded to valid arrays`);
});

test("pred: random bytes behind a valid header never crash", async (t) => {
  const r = rng(99);
  const x = field([64, 64], false, 8, 0.1);
  const { stream } = await pred.compress(x, { shape: [64, 64], max_abs_error: 1e-2 });
  const header = 16 + 8 * 2 + 4 * 2 + 4; // fixed part, shape, block shape, one block length
  for (let k = 0; k < 200; k++) {
    const s = stream.slice();
    for (let i = header; i < s.length; i++) s[i] = Math.floor(r() * 256);
    await tolerant(t, s, `random payload ${k}`);
  }
  t.pass("200 random payloads handled");
});
