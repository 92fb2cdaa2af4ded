// Integer data under the lossless codec: the integer coder (native/pred_int.cc, prediction and
// rANS) round-trips every integer dtype bit for bit across its slabs, edges and extreme values,
// refuses corrupt streams in one sentence without reading past them, and the store keeps it
// where it is smaller than byte shuffle + deflate (images, elevation grids, volumes), on every
// backend and over HTTP, with serve, slices and queries agreeing with the data put.
import test from "tape";
import { deflateRawSync } from "node:zlib";
import { native } from "../../lib/native.js";
import { extractBlock, shuffle } from "../../lib/store/codec.js";
import type { Dtype } from "../../lib/fields.js";
import { storeSuite } from "./harness.js";

/** A seeded generator of uint32s (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return (x ^ (x >>> 14)) >>> 0;
  };
}

type IntArray = Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array;
const TYPES: { code: number; dtype: Dtype; make: (n: number) => IntArray; min: bigint; max: bigint }[] = [
  { code: 1, dtype: "int8", make: (n) => new Int8Array(n), min: -128n, max: 127n },
  { code: 2, dtype: "uint8", make: (n) => new Uint8Array(n), min: 0n, max: 255n },
  { code: 3, dtype: "int16", make: (n) => new Int16Array(n), min: -32768n, max: 32767n },
  { code: 4, dtype: "uint16", make: (n) => new Uint16Array(n), min: 0n, max: 65535n },
  { code: 5, dtype: "int32", make: (n) => new Int32Array(n), min: -(2n ** 31n), max: 2n ** 31n - 1n },
  { code: 6, dtype: "uint32", make: (n) => new Uint32Array(n), min: 0n, max: 2n ** 32n - 1n },
  { code: 7, dtype: "int64", make: (n) => new BigInt64Array(n), min: -(2n ** 63n), max: 2n ** 63n - 1n },
  { code: 8, dtype: "uint64", make: (n) => new BigUint64Array(n), min: 0n, max: 2n ** 64n - 1n },
];

/** Sets a[i] = v (a number or bigint), wrapped into the type as a typed array does. */
function set(a: IntArray, i: number, v: bigint): void {
  if (a instanceof BigInt64Array) a[i] = BigInt.asIntN(64, v);
  else if (a instanceof BigUint64Array) a[i] = BigInt.asUintN(64, v);
  else a[i] = Number(v);
}

/** A smooth field over `shape` (a terrain or an image) with small noise, around `base`. */
function smooth(make: (n: number) => IntArray, shape: number[], base: bigint, amp: number, seed: number): IntArray {
  const n = shape.reduce((a, b) => a * b, 1);
  const a = make(n);
  const r = rng(seed);
  const last = shape[shape.length - 1]!;
  for (let i = 0; i < n; i++) {
    const x = i % last,
      y = Math.floor(i / last);
    const v = amp * (Math.sin(x / 9 + y / 31) + Math.cos(y / 13)) + (r() % 5) - 2;
    set(a, i, base + BigInt(Math.round(v)));
  }
  return a;
}

const bytesOf = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

async function roundTrip(t: test.Test, code: number, a: IntArray, shape: number[], what: string): Promise<Uint8Array> {
  const stream = await native().intEncode(bytesOf(a), code, shape);
  const back = await native().intDecode(stream, code, shape);
  t.ok(bytesOf(back).equals(bytesOf(a)), `${what}: decodes to the same bytes (${a.byteLength} bytes, stream ${stream.byteLength})`);
  return stream;
}

test("the integer coder round-trips every integer dtype bit for bit", async (t) => {
  for (const ty of TYPES) {
    const mid = ty.min + (ty.max - ty.min) / 2n;
    // a smooth 3-D field near the middle of the range, and one against each end (wrapping residuals)
    await roundTrip(t, ty.code, smooth(ty.make, [5, 37, 41], mid, 20, 1), [5, 37, 41], `${ty.dtype} smooth 5x37x41`);
    await roundTrip(t, ty.code, smooth(ty.make, [37, 41], ty.max - 10n, 20, 2), [37, 41], `${ty.dtype} smooth past the top`);
    await roundTrip(t, ty.code, smooth(ty.make, [37, 41], ty.min + 10n, 20, 3), [37, 41], `${ty.dtype} smooth past the bottom`);
    // random over the whole range: most values are kept as they are
    const r = rng(ty.code);
    const full = ty.make(5000);
    for (let i = 0; i < full.length; i++) set(full, i, (BigInt(r()) << 32n) | BigInt(r()));
    await roundTrip(t, ty.code, full, [5000], `${ty.dtype} random over the whole range`);
    // the extremes side by side, every jump the largest there is
    const ext = ty.make(12);
    [ty.min, ty.max, ty.min, ty.max, 0n, ty.max, ty.min, 1n, ty.max, ty.max, ty.min, ty.min].forEach((v, i) => set(ext, i, v));
    await roundTrip(t, ty.code, ext, [2, 2, 3], `${ty.dtype} extremes`);
    const one = ty.make(1);
    set(one, 0, ty.max);
    await roundTrip(t, ty.code, one, [1, 1], `${ty.dtype} one element`);
  }
});

test("the integer coder across slabs: volumes, long rows and size-1 dimensions", async (t) => {
  const u8 = (n: number) => new Uint8Array(n);
  // 24 planes of 256x256: two slabs of whole planes
  await roundTrip(t, 2, smooth(u8, [24, 256, 256], 100n, 40, 4), [24, 256, 256], "uint8 24x256x256");
  // a vector of 1.3 million: slabs of 2^20 elements
  await roundTrip(
    t,
    3,
    smooth((n) => new Int16Array(n), [1_300_000], 0n, 900, 5),
    [1_300_000],
    "int16 vector of 1.3 million",
  );
  // rows longer than a slab: slabs start inside a row
  await roundTrip(t, 2, smooth(u8, [2, 1_100_000], 100n, 40, 6), [2, 1_100_000], "uint8 2x1100000");
  // dimensions of 1 dropped, 5-D
  await roundTrip(
    t,
    4,
    smooth((n) => new Uint16Array(n), [1, 30, 1, 20, 7], 3000n, 300, 7),
    [1, 30, 1, 20, 7],
    "uint16 1x30x1x20x7",
  );
  const s = await roundTrip(
    t,
    5,
    smooth((n) => new Int32Array(n), [3, 4, 5, 6, 7, 8], 0n, 1e6, 8),
    [3, 4, 5, 6, 7, 8],
    "int32 6-D",
  );
  t.ok(s.byteLength < 3 * 4 * 5 * 6 * 7 * 8 * 4, "smaller than the data");
});

test("a stream that is not the integer coder's, or not for this dtype and shape, is refused in one sentence", async (t) => {
  const shape = [12, 40, 50];
  const a = smooth((n) => new Int16Array(n), shape, 200n, 300, 9);
  const stream = await native().intEncode(bytesOf(a), 3, shape);
  const refused = async (s: Uint8Array, code: number, sh: number[], re: RegExp, what: string) => {
    try {
      await native().intDecode(s, code, sh);
      t.fail(`${what}: decoded`);
    } catch (e) {
      const err = e as Error & { code?: string };
      t.equal(err.code, "bad_request", `${what}: bad_request`);
      t.match(err.message, re, `${what}: ${err.message}`);
    }
  };
  await refused(stream, 4, shape, /^stream is not a valid integer lossless stream \(another dtype\)\.$/, "another dtype");
  await refused(stream, 3, [12, 40, 51], /\(another shape\)/, "another shape");
  await refused(stream, 3, [12, 2000], /\(another rank\)/, "another rank");
  await refused(stream.subarray(0, 5), 3, shape, /\(bad magic\)/, "five bytes");
  await refused(Buffer.from("not a stream at all"), 3, shape, /\(bad magic\)/, "text");
  await refused(stream.subarray(0, stream.byteLength - 1), 3, shape, /integer lossless stream/, "one byte short");
  await refused(Buffer.concat([stream, Buffer.from([0])]), 3, shape, /integer lossless stream/, "one byte more");
  for (const code of [0, 9, 1.5, -1]) {
    try {
      await native().intDecode(stream, code, shape);
      t.fail(`dtype ${code}: decoded`);
    } catch (e) {
      t.match((e as Error).message, /dtype must be an integer type code from 1 to 8/, `dtype code ${code} refused`);
    }
  }
  // seeded corruptions: each is refused as a bad stream or decodes to an array of the right size
  const r = rng(10);
  let refusedCount = 0,
    decoded = 0;
  for (let i = 0; i < 400; i++) {
    const s = Buffer.from(stream);
    const kind = i % 4;
    let bad: Buffer = s;
    if (kind === 0) bad = s.subarray(0, r() % s.length);
    else if (kind === 1) for (let k = 0; k <= i % 3; k++) s[r() % s.length] ^= 1 << (r() % 8);
    else if (kind === 2)
      s[8 + (r() % 40)] = r() & 255; // the header and the slab table
    else bad = Buffer.concat([s.subarray(0, r() % s.length), Buffer.from([r() & 255, r() & 255]), s.subarray(r() % s.length)]);
    try {
      const out = await native().intDecode(bad, 3, shape);
      if (out.byteLength !== a.byteLength) t.fail(`corruption ${i}: ${out.byteLength} bytes decoded`);
      decoded++;
    } catch (e) {
      const err = e as Error & { code?: string };
      if (err.code !== "bad_request" || !/^stream is not a valid integer lossless stream \(.+\)\.$/.test(err.message))
        t.fail(`corruption ${i}: ${err.code} ${err.message}`);
      refusedCount++;
    }
  }
  t.equal(refusedCount + decoded, 400, `400 corruptions: ${refusedCount} refused, ${decoded} decoded to an array of the right size`);
  t.ok(refusedCount > 200, "most are refused");
});

test("the integer coder refuses data that do not match their shape", async (t) => {
  try {
    await native().intEncode(new Uint8Array(10), 2, [3, 3]);
    t.fail("encoded");
  } catch (e) {
    t.match((e as Error).message, /shape must multiply to the number of elements of the data/, "refused");
  }
});

const suite = storeSuite({ targets: ["memory", "lmdb", "postgres", "http"], namespaces: ["ns"] });

/** The size byte shuffle + deflate gives the same bytes (the store's other lossless coding). */
const deflated = (a: ArrayBufferView & { BYTES_PER_ELEMENT: number }) => deflateRawSync(shuffle(bytesOf(a), a.BYTES_PER_ELEMENT)).byteLength;

suite.test("integer grids and volumes are stored by the integer coder where it beats deflate, and serve bit for bit", async (t, s) => {
  const cases: { key: string; a: IntArray & { BYTES_PER_ELEMENT: number }; shape: number[]; dtype: Dtype }[] = [
    { key: "dem", a: smooth((n) => new Int16Array(n), [200, 240], 600n, 150, 11) as Int16Array, shape: [200, 240], dtype: "int16" },
    { key: "volume", a: smooth((n) => new Uint8Array(n), [20, 256, 256], 90n, 40, 12) as Uint8Array, shape: [20, 256, 256], dtype: "uint8" },
    { key: "counts", a: smooth((n) => new Uint32Array(n), [64, 64], 70000n, 3000, 13) as Uint32Array, shape: [64, 64], dtype: "uint32" },
    { key: "ticks", a: smooth((n) => new BigInt64Array(n), [4096], 2n ** 62n, 1e5, 14) as BigInt64Array, shape: [4096], dtype: "int64" },
  ];
  for (const c of cases) {
    const r = await s.put("ns", c.key, c.a, { shape: c.shape, dtype: c.dtype });
    t.deepEqual([r.verdict, r.fingerprint.codec, r.relative_error, r.max_abs_error], ["lossless", "lossless", 0, 0], `${c.key}: lossless, exact`);
    t.ok(r.bytes_stored < deflated(c.a), `${c.key}: ${r.bytes_stored} bytes stored, fewer than deflate's ${deflated(c.a)}`);
    const served = await s.serve("ns", c.key);
    t.ok(bytesOf(served.data).equals(bytesOf(c.a)), `${c.key}: served bit for bit`);
    t.equal(served.dtype, c.dtype, `${c.key}: served as ${c.dtype}`);
  }
  // a slice across the volume's two slabs (16 planes each at most)
  const sl: [number, number][] = [
    [14, 18],
    [100, 140],
    [3, 250],
  ];
  const part = await s.serve("ns", "volume", { slice: sl });
  t.ok(bytesOf(part.data).equals(bytesOf(extractBlock(cases[1]!.a, [20, 256, 256], sl, "uint8"))), "a slice across slabs equals that block of the data");
  t.deepEqual(part.shape, [4, 40, 247], "its shape");
});

suite.test("queries over integer entries stored by the integer coder agree with the data", async (t, s) => {
  const shape = [60, 70];
  const a = smooth((n) => new Int16Array(n), shape, 300n, 200, 21) as Int16Array;
  const b = smooth((n) => new Int16Array(n), shape, -100n, 250, 22) as Int16Array;
  for (const [k, x] of [
    ["a", a],
    ["b", b],
  ] as const) {
    const r = await s.put("ns", k, x, { shape, dtype: "int16" });
    t.ok(r.bytes_stored < deflated(x), `${k}: stored by the integer coder (${r.bytes_stored} bytes)`);
  }
  let dot = 0,
    na = 0,
    nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  const sim = await s.query.similarity("ns", "a", "b", { metric: "cosine" });
  t.ok(Math.abs(sim.score - dot / Math.sqrt(na * nb)) < 1e-12, `cosine ${sim.score} equals the dense one`);
  const d = await s.query.similarity("ns", "a", "b", { metric: "dot" });
  t.ok(Math.abs(d.score - dot) <= 1e-9 * Math.abs(dot), `dot ${d.score} equals the dense one ${dot}`);
});

suite.test("integer data that deflate codes better (a repeated pattern) stay with deflate", async (t, s) => {
  // 8 KiB (both coded whole) and 2 MiB (deflate's ratio estimated from a sample first)
  for (const n of [8192, 2 << 20]) {
    const x = Uint8Array.from({ length: n }, (_, i) => (i * 37) % 11);
    const r = await s.put("ns", `pattern${n}`, x, { shape: [n], dtype: "uint8" });
    t.equal(r.bytes_stored, deflated(x), `${n} bytes: stored as deflate gives it (${r.bytes_stored} bytes)`);
    t.ok(bytesOf((await s.serve("ns", `pattern${n}`)).data).equals(bytesOf(x)), `${n} bytes: served bit for bit`);
  }
});

suite.test("random integers past the sampling size are stored as they are, and serve bit for bit", async (t, s) => {
  const r = rng(31);
  const x = Uint32Array.from({ length: 300_000 }, () => r());
  const p = await s.put("ns", "random", x, { shape: [300, 1000], dtype: "uint32" });
  t.deepEqual([p.verdict, p.fingerprint.codec, p.bytes_stored], ["passthrough", "raw", x.byteLength], "passthrough, raw");
  t.ok(bytesOf((await s.serve("ns", "random")).data).equals(bytesOf(x)), "served bit for bit");
});

suite.run();
