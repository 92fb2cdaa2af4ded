// pred.dot: the inner product (and distance) of decoded streams with a dense array, decoded
// block by block, equals decode-then-dot in float64 on seeded shapes and dtypes (one element,
// dimensions of 1, edge blocks, merged leading dimensions, lossless and lossy streams, several
// streams in one call, float16/bfloat16 rounding); hostile streams and arrays are refused with
// the field named, never a crash.
import test from "tape";
import { pred, ValidationError } from "../../lib/index.js";
import { bf16ToFloat, floatToBf16, floatToHalf, halfToFloat } from "../../lib/store/codec.js";
import { field, gaussian, prod } from "./helpers.js";

type Arr = Float32Array | Float64Array;

/** ⟨a, b⟩, ‖a − b‖ and Σ|a·b| in float64. */
function reference(a: ArrayLike<number>, b: ArrayLike<number>): { dot: number; dist: number; mag: number } {
  let dot = 0,
    dist = 0,
    mag = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    mag += Math.abs(a[i]! * b[i]!);
    const d = a[i]! - b[i]!;
    dist += d * d;
  }
  return { dot, dist: Math.sqrt(dist), mag };
}

function query(n: number, f64: boolean, seed: number): Arr {
  const g = gaussian(seed);
  const x = f64 ? new Float64Array(n) : new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = g();
  return x;
}

async function rejects(t: test.Test, p: () => Promise<unknown>, field: string, label: string): Promise<void> {
  try {
    await p();
    t.fail(`${label}: expected a ValidationError`);
  } catch (e) {
    t.ok(e instanceof ValidationError, `${label}: ValidationError (${(e as Error).message})`);
    t.equal((e as ValidationError).field, field, `${label}: names ${field}`);
  }
}

const SHAPES: number[][] = [
  [1],
  [1, 1, 1],
  [7],
  [1, 300, 1],
  [3, 1, 5],
  [513, 515], // 2 x 2 blocks, edge blocks of 1 and 3 columns/rows
  [37, 61, 129],
  [70, 3, 1, 1, 40, 33],
  [2, 3, 4, 5, 6, 7], // leading dimensions merged to rank 5
  [262145], // one element past a block
];

test("pred.dot: equals decode-then-dot on seeded shapes, dtypes and bounds", async (t) => {
  let seed = 1;
  for (const shape of SHAPES) {
    for (const f64 of [false, true]) {
      for (const bound of [{ tolerance: 1e-3 }, { max_abs_error: 0 }, { max_abs_error: 0.05 }]) {
        seed++;
        const n = prod(shape);
        const data = field(shape, f64, seed, 0.2);
        const r = await pred.compress(data, { shape, ...bound });
        const dec = await pred.decompress(r.stream);
        for (const qf64 of [false, true]) {
          const x = query(n, qf64, seed + 100);
          const [got] = await pred.dot([r.stream], x, { distance: true });
          const ref = reference(dec, x);
          const label = `[${shape.join("x")}] ${f64 ? "f64" : "f32"} ${JSON.stringify(bound)} query ${qf64 ? "f64" : "f32"}`;
          t.ok(Math.abs(got!.dot - ref.dot) <= 1e-12 * ref.mag + 1e-300, `${label}: dot ${got!.dot.toPrecision(8)} (reference ${ref.dot.toPrecision(8)})`);
          t.ok(Math.abs(got!.distance! - ref.dist) <= 1e-12 * (ref.dist + 1e-300), `${label}: distance ${got!.distance!.toPrecision(8)}`);
        }
      }
    }
  }
});

test("pred.dot: several streams in one call, each against the same array", async (t) => {
  const shape = [300, 900];
  const n = prod(shape);
  const streams: Uint8Array[] = [];
  const decoded: Arr[] = [];
  for (let s = 0; s < 5; s++) {
    const r = await pred.compress(field(shape, false, 40 + s, 0.5), { shape, tolerance: 10 ** -(2 + (s % 3)) });
    streams.push(r.stream);
    decoded.push(await pred.decompress(r.stream));
  }
  const x = query(n, false, 3);
  const got = await pred.dot(streams, x);
  t.equal(got.length, 5, "one result per stream");
  got.forEach((g, i) => {
    const ref = reference(decoded[i]!, x);
    t.ok(Math.abs(g.dot - ref.dot) <= 1e-12 * ref.mag, `stream ${i}: dot ${g.dot.toPrecision(8)}`);
    t.equal(g.distance, undefined, `stream ${i}: no distance unless asked`);
  });
  t.deepEqual(await pred.dot([], x), [], "no streams: no results");
});

test("pred.dot: round to float16 / bfloat16 as the store serves those dtypes", async (t) => {
  for (const [round, to, from] of [
    ["float16", floatToHalf, halfToFloat],
    ["bfloat16", floatToBf16, bf16ToFloat],
  ] as const) {
    for (const shape of [[1], [5, 1, 7], [600, 500]]) {
      const n = prod(shape);
      // values spanning float16's subnormals to near its largest (and past it for bfloat16)
      const g = gaussian(n);
      const data = Float32Array.from({ length: n }, (_, i) => g() * 10 ** ((i % 9) - 6) * (round === "float16" ? 1 : 1e6));
      const r = await pred.compress(data, { shape, max_abs_error: 0 });
      const dec = await pred.decompress(r.stream);
      const rounded = Float64Array.from(dec, (v) => from(to(v)));
      const x = query(n, true, 9);
      const [got] = await pred.dot([r.stream], x, { round, distance: true });
      const ref = reference(rounded, x);
      t.ok(
        Math.abs(got!.dot - ref.dot) <= 1e-12 * ref.mag,
        `${round} [${shape.join("x")}]: dot ${got!.dot.toPrecision(8)} (reference ${ref.dot.toPrecision(8)})`,
      );
      t.ok(Math.abs(got!.distance! - ref.dist) <= 1e-12 * ref.dist, `${round} [${shape.join("x")}]: distance`);
    }
  }
});

test("pred.dot: hostile streams and arrays are refused with the field named", async (t) => {
  const shape = [200, 300];
  const r = await pred.compress(field(shape, false, 5, 0.1), { shape, tolerance: 1e-3 });
  const x = query(prod(shape), false, 1);
  await rejects(t, () => pred.dot([r.stream], query(prod(shape) - 1, false, 1)), "x", "x one element short");
  await rejects(t, () => pred.dot([r.stream], new Float32Array(0)), "x", "empty x");
  const bad = Float64Array.from(x);
  bad[1234] = NaN;
  await rejects(t, () => pred.dot([r.stream], bad), "x", "x holding NaN");
  bad[1234] = -Infinity;
  await rejects(t, () => pred.dot([r.stream], bad), "x", "x holding an infinity");
  await rejects(t, () => pred.dot([r.stream], Array.from(x) as unknown as Float32Array), "x", "x a plain array");
  await rejects(t, () => pred.dot(r.stream as unknown as Uint8Array[], x), "streams", "streams not an array");
  await rejects(t, () => pred.dot(["abc" as unknown as Uint8Array], x), "stream", "a string for a stream");
  await rejects(t, () => pred.dot([r.stream], x, { round: "float8" as never }), "round", "unknown rounding");
  await rejects(t, () => pred.dot([r.stream], x, { bogus: true } as never), "options", "unknown option");
  const r64 = await pred.compress(field(shape, true, 5, 0.1), { shape, tolerance: 1e-3 });
  await rejects(t, () => pred.dot([r64.stream], x, { round: "float16" }), "round", "rounding a float64 stream");
  for (const cut of [0, 3, 9, 40, r.stream.length - 1]) {
    await rejects(t, () => pred.dot([r.stream, r.stream.subarray(0, cut)], x), "stream", `stream truncated to ${cut} bytes (second of two)`);
  }
  // byte flips anywhere: a ValidationError or a finite answer (a well-formed stream of other values), never a crash
  let refused = 0,
    answered = 0;
  for (let k = 0; k < 200; k++) {
    const s = Uint8Array.from(r.stream);
    const at = (k * 7919) % s.length;
    s[at] ^= 1 << (k % 8);
    try {
      const [g] = await pred.dot([s], x, { distance: true });
      if (typeof g!.dot === "number" && typeof g!.distance === "number") answered++;
    } catch (e) {
      if (e instanceof ValidationError && e.field === "stream") refused++;
      else t.fail(`flip at ${at}: ${(e as Error).message}`);
    }
  }
  t.equal(refused + answered, 200, `200 flipped streams: ${refused} refused, ${answered} decoded to some array`);
  const forged = Uint8Array.from(r.stream);
  forged[17] = 0x7f; // the first dimension: an array of another size than x
  await rejects(t, () => pred.dot([forged], x), "stream", "forged shape");
});
