// The store's choice of codec for floating data (docs/store.md "Codec policy"), on every
// backend and over HTTP: `auto` keeps TT for smooth fields, the prediction codec (pred) for
// noisy and photo-like data, deflate for integers; tolerance and max_abs_error hold on the
// served values over seeded cases (both reported as measured); slices of pred entries equal
// the blocks of the full serve; similarity, top-K and vector queries over namespaces mixing
// TT, pred and exact entries agree with dense float64 arithmetic on the served tensors to
// 1e-5; bad options are refused naming the option.
import { ValidationError } from "../../lib/errors.js";
import { extractBlock, floatToHalf, halfToFloat } from "../../lib/store/codec.js";
import type { PutOptions } from "../../lib/schemas.js";
import type { ServeArray } from "../../lib/store/types.js";
import { gaussian, rng, smoothField } from "../tt/helpers.js";
import { rejects, storeSuite, type StoreApi } from "./harness.js";

const suite = storeSuite({ targets: ["memory", "lmdb", "postgres", "http"], namespaces: ["ns", "mix"] });

/** A photograph-like image: flat regions with edges, shading and sensor noise. */
function photo(h: number, w: number, seed: number): Float32Array {
  const g = gaussian(seed);
  const u = rng(seed + 1);
  const cx = w * (0.3 + 0.4 * u()), cy = h * (0.3 + 0.4 * u());
  return Float32Array.from({ length: h * w }, (_, q) => {
    const y = Math.floor(q / w), x = q % w;
    return (Math.hypot(x - cx, y - cy) < h / 4 ? 180 : 60) + 40 * Math.sin(x / 23) * Math.cos(y / 31) + (x > 0.7 * w ? 50 : 0) + 3 * g();
  });
}
const noise = (n: number, seed: number, f64 = false): Float32Array | Float64Array => {
  const g = gaussian(seed);
  return f64 ? Float64Array.from({ length: n }, () => g()) : Float32Array.from({ length: n }, () => g());
};
/** Data spanning six decades: a wave whose scale changes by 1e6 between the halves, plus a small ripple. */
const decades = (n: number, seed: number) =>
  Float64Array.from({ length: n }, (_, i) => (i < n / 2 ? 1e-3 : 1e3) * Math.sin(i / 97 + seed) + 1e-4 * Math.cos(i * 0.37));

const f64 = (a: ArrayLike<number>) => Float64Array.from(a);
/** The measured errors of `served` against `x`: relative Frobenius (float64, scaled) and largest element. */
function errors(x: ArrayLike<number>, served: ArrayLike<number>): { rel: number; abs: number } {
  let s = 0, abs = 0;
  for (let i = 0; i < x.length; i++) {
    s = Math.max(s, Math.abs(x[i]!));
    abs = Math.max(abs, Math.abs(x[i]! - served[i]!));
  }
  let num = 0, den = 0;
  for (let i = 0; i < x.length; i++) {
    num += ((x[i]! - served[i]!) / s) ** 2;
    den += (x[i]! / s) ** 2;
  }
  return { rel: den === 0 ? 0 : Math.sqrt(num / den), abs };
}
const close = (x: number, y: number, rel = 1e-5, abs = 1e-12) => Math.abs(x - y) <= rel * Math.max(Math.abs(x), Math.abs(y)) + abs;
const values = (d: ServeArray, dtype: string): Float64Array => (dtype === "float16" ? Float64Array.from(d as Uint16Array, halfToFloat) : f64(d as Float32Array));

suite.test("auto: TT for a smooth field, pred for noise and a photograph, deflate for integers", async (t, s) => {
  const smooth = smoothField(32, 32, 32, false, 3) as Float32Array;
  const a = await s.put("ns", "smooth", smooth, { shape: [32, 32, 32] });
  t.deepEqual([a.verdict, a.fingerprint.codec], ["compressed", "tt"], `smooth field: TT at ratio ${a.compression_ratio.toFixed(1)}`);
  const nz = noise(32 ** 3, 5) as Float32Array;
  const b = await s.put("ns", "noise", nz, { shape: [32, 32, 32] });
  t.deepEqual([b.verdict, b.fingerprint.codec, b.tt], ["compressed", "pred", null], `noise: pred at ratio ${b.compression_ratio.toFixed(2)}`);
  t.ok(b.compression_ratio > 2 && b.relative_error <= 1e-3, `noise within the default tolerance (${b.relative_error.toExponential(2)})`);
  const ph = photo(256, 256, 2);
  const c = await s.put("ns", "photo", ph, { shape: [256, 256] });
  t.deepEqual([c.verdict, c.fingerprint.codec], ["compressed", "pred"], `photograph: pred at ratio ${c.compression_ratio.toFixed(2)}`);
  const ints = Int32Array.from({ length: 16384 }, (_, i) => (i >> 4) % 50);
  const d = await s.put("ns", "ints", ints, { shape: [16384], codec: "pred", max_abs_error: 3 });
  t.deepEqual([d.verdict, d.fingerprint.codec, d.max_abs_error], ["lossless", "lossless", 0], "integers stay lossless whatever codec and bound are asked");
  t.deepEqual(Buffer.from((await s.serve("ns", "ints")).data.buffer), Buffer.from(ints.buffer), "integers serve bit-exact");
  for (const [k, x, r] of [["smooth", smooth, a], ["noise", nz, b], ["photo", ph, c]] as const) {
    const m = errors(x, values((await s.serve("ns", k)).data, "float32"));
    t.ok(m.rel <= 1e-3 && close(m.rel, r.relative_error, 1e-6) && m.abs === r.max_abs_error,
      `${k}: served errors ${m.rel.toExponential(3)} / ${m.abs.toExponential(3)} are the reported ones`);
    const info = await s.get("ns", k);
    t.deepEqual([info.fingerprint.codec, info.relative_error, info.max_abs_error], [r.fingerprint.codec, r.relative_error, r.max_abs_error], `${k}: get reports codec and errors`);
  }
  const listed = await s.list("ns");
  t.deepEqual(listed.keys.map((k) => [k.key, k.codec]), [["ints", "lossless"], ["noise", "pred"], ["photo", "pred"], ["smooth", "tt"]], "list names each codec");
  t.ok(listed.keys.every((k) => k.relative_error !== null && k.max_abs_error !== null), "and each entry's errors");
  // explicit codecs: each alone, or an exact entry where it cannot meet the bounds
  const tt = await s.put("ns", "noise-tt", nz, { shape: [32, 32, 32], codec: "tt" });
  t.deepEqual([tt.verdict, tt.fingerprint.codec], ["passthrough", "raw"], "noise under codec tt: no TT reaches the ratio, stored raw");
  const pr = await s.put("ns", "smooth-pred", smooth, { shape: [32, 32, 32], codec: "pred" });
  t.deepEqual([pr.verdict, pr.fingerprint.codec], ["compressed", "pred"], `smooth field under codec pred: pred at ratio ${pr.compression_ratio.toFixed(1)}`);
  const ll = await s.put("ns", "photo-exact", ph, { shape: [256, 256], codec: "lossless" });
  t.ok(ll.verdict === "lossless" && ["pred", "lossless"].includes(ll.fingerprint.codec) && ll.relative_error === 0 && ll.max_abs_error === 0,
    `codec lossless: exact, by ${ll.fingerprint.codec} at ratio ${ll.compression_ratio.toFixed(2)}`);
  t.deepEqual(Buffer.from((await s.serve("ns", "photo-exact")).data.buffer), Buffer.from(ph.buffer), "and bit-exact");
});

suite.test("weak only under the caller's max_rank; otherwise within the tolerance", async (t, s) => {
  const x = smoothField(32, 32, 32, false, 4) as Float32Array;
  const capped = await s.put("ns", "capped", x, { shape: [32, 32, 32], tolerance: 1e-5, max_rank: 1, codec: "tt" });
  t.deepEqual([capped.verdict, capped.fingerprint.codec], ["weak", "tt"], `codec tt with max_rank 1: weak (${capped.relative_error.toExponential(2)})`);
  const auto = await s.put("ns", "auto", x, { shape: [32, 32, 32], tolerance: 1e-5, max_rank: 1 });
  t.ok(auto.verdict === "compressed" && auto.relative_error <= 1e-5, `auto under the same cap: ${auto.fingerprint.codec} within the tolerance (${auto.relative_error.toExponential(2)})`);
  const tight = await s.put("ns", "tight", x, { shape: [32, 32, 32], tolerance: 1e-5, codec: "tt" });
  t.ok(tight.verdict !== "weak" && tight.relative_error <= 1e-5, `codec tt without a cap: ${tight.verdict} (${tight.fingerprint.codec}), never weak`);
});

// 24 seeded cases: four kinds of data, three dtypes, a relative bound, an element bound or both
const KINDS = ["smooth", "noise", "photo", "decades"] as const;
const BOUNDS: ((scale: number) => PutOptions)[] = [
  () => ({ tolerance: 1e-2 }),
  () => ({ tolerance: 1e-4 }),
  (m) => ({ max_abs_error: 1e-3 * m }),
  (m) => ({ tolerance: 1e-3, max_abs_error: 1e-4 * m }),
  () => ({ tolerance: 1e-3, codec: "pred" }),
  (m) => ({ max_abs_error: 1e-2 * m, codec: "tt" }),
];

suite.test("tolerance and max_abs_error hold on the served values over 24 seeded cases", async (t, s) => {
  let bad = 0;
  const codecs = new Map<string, number>();
  for (let seed = 0; seed < 24; seed++) {
    const kind = KINDS[seed % 4]!;
    const dtype = (["float32", "float64", "float16"] as const)[Math.floor(seed / 4) % 3]!;
    const shape = kind === "photo" ? [96, 128] : [24, 20, 28];
    const n = shape.reduce((a, b) => a * b, 1);
    const dense = kind === "smooth" ? f64(smoothField(24, 20, 28, true, seed)) : kind === "noise" ? f64(noise(n, seed, true)) : kind === "photo" ? f64(photo(96, 128, seed)) : decades(n, seed);
    const data = dtype === "float64" ? dense : dtype === "float32" ? Float32Array.from(dense) : Uint16Array.from(dense, floatToHalf);
    // the values as stored: float16 entries start from their rounded values
    const x = dtype === "float16" ? Float64Array.from(data as Uint16Array, halfToFloat) : f64(data as Float32Array);
    let m = 0;
    for (const v of x) m = Math.max(m, Math.abs(v));
    const opts = BOUNDS[seed % BOUNDS.length]!(m);
    const r = await s.put("ns", `case-${seed}`, data, { shape, dtype, ...opts });
    codecs.set(r.fingerprint.codec, (codecs.get(r.fingerprint.codec) ?? 0) + 1);
    const got = errors(x, values((await s.serve("ns", `case-${seed}`)).data, dtype));
    const tol = opts.tolerance ?? (opts.max_abs_error === undefined ? 1e-3 : Infinity);
    const ok = got.rel <= tol && got.abs <= (opts.max_abs_error ?? Infinity) && close(got.rel, r.relative_error, 1e-6, 1e-15) && close(got.abs, r.max_abs_error, 1e-12, 0);
    if (!ok) {
      bad++;
      t.fail(`case ${seed} (${kind}, ${dtype}, ${JSON.stringify(opts)}): ${r.verdict} ${r.fingerprint.codec}, served ${got.rel} / ${got.abs}, reported ${r.relative_error} / ${r.max_abs_error}`);
    }
  }
  t.equal(bad, 0, `every case within its bounds, errors as reported (codecs: ${JSON.stringify(Object.fromEntries(codecs))})`);
  t.ok((codecs.get("pred") ?? 0) > 0 && (codecs.get("tt") ?? 0) > 0, "both lossy codecs were chosen among them");
});

suite.test("a slice of a pred entry equals that block of the full serve", async (t, s) => {
  const shape = [40, 36, 21];
  const x = noise(40 * 36 * 21, 11) as Float32Array;
  const r = await s.put("ns", "p", x, { shape, codec: "pred", tolerance: 1e-3 });
  t.equal(r.fingerprint.codec, "pred", "stored by pred");
  const full = (await s.serve("ns", "p")).data;
  const slices: [number, number][][] = [
    [[0, 40], [0, 36], [0, 21]], [[3, 4], [5, 6], [7, 8]], [[0, 1], [0, 36], [20, 21]], [[17, 40], [30, 36], [0, 9]], [[39, 40], [35, 36], [20, 21]],
  ];
  for (const sl of slices) {
    const got = await s.serve("ns", "p", { slice: sl });
    t.deepEqual(got.shape, sl.map(([a, b]) => b - a), `slice ${JSON.stringify(sl)}: shape`);
    t.deepEqual(Buffer.from(got.data.buffer, got.data.byteOffset, got.data.byteLength), Buffer.from(extractBlock(full, shape, sl, "float32").buffer), `slice ${JSON.stringify(sl)}: the block's values`);
  }
  const wide = await s.serve("ns", "p", { slice: [[1, 3], [2, 4], [0, 21]], dtype: "float64" });
  t.ok(wide.data instanceof Float64Array && wide.data.every((v, i) => v === (extractBlock(full, shape, [[1, 3], [2, 4], [0, 21]], "float32") as Float32Array)[i]), "a slice in float64");
  await rejects(t, s.serve("ns", "p", { slice: [[0, 41], [0, 36], [0, 21]] }), ValidationError, /slice\.0 stops at 41/, "a slice beyond the shape");
  // a dimension of 1
  const y = noise(64 * 48, 12) as Float32Array;
  const one = await s.put("ns", "one", y, { shape: [1, 64, 1, 48], codec: "pred" });
  const blk = await s.serve("ns", "one", { slice: [[0, 1], [3, 9], [0, 1], [40, 48]] });
  const ref = extractBlock((await s.serve("ns", "one")).data, [1, 64, 1, 48], [[0, 1], [3, 9], [0, 1], [40, 48]], "float32");
  t.ok(one.fingerprint.codec === "pred" && Buffer.from(blk.data.buffer, blk.data.byteOffset, blk.data.byteLength).equals(Buffer.from(ref.buffer)), "dimensions of 1: the slice equals the block");
});

/** Dense oracle of a metric on served float64 values. */
function oracle(metric: string, a: Float64Array, b: Float64Array): number {
  let d = 0, na = 0, nb = 0, l2 = 0;
  for (let i = 0; i < a.length; i++) {
    d += a[i]! * b[i]!;
    na += a[i]! ** 2;
    nb += b[i]! ** 2;
    l2 += (a[i]! - b[i]!) ** 2;
  }
  return metric === "dot" ? d : metric === "cosine" ? d / Math.sqrt(na * nb) : Math.sqrt(l2);
}

async function served(s: StoreApi, ns: string, key: string): Promise<Float64Array> {
  return f64((await s.serve(ns, key)).data as Float32Array);
}

suite.test("similarity, top-K and vector over a namespace mixing TT, pred and exact entries", async (t, s) => {
  const shape = [32, 24, 16];
  const n = 32 * 24 * 16;
  const codecs: string[] = [];
  const keys: string[] = [];
  for (let i = 0; i < 9; i++) {
    const base = smoothField(32, 24, 16, false, 20 + (i % 3)) as Float32Array;
    const g = gaussian(i);
    // smooth fields (TT), the same with noise (pred), and exact copies (codec lossless)
    const x = i < 3 ? base : Float32Array.from(base, (v) => v + 0.05 * g());
    const key = `e${i}`;
    const r = await s.put("mix", key, x, { shape, ...(i >= 6 ? { codec: "lossless" as const } : {}) });
    codecs.push(r.fingerprint.codec);
    keys.push(key);
  }
  t.ok(codecs.slice(0, 3).every((c) => c === "tt") && codecs.slice(3, 6).every((c) => c === "pred") && codecs.slice(6).every((c) => c !== "tt"), `codecs ${codecs.join(", ")}`);
  const dense = new Map<string, Float64Array>();
  for (const k of keys) dense.set(k, await served(s, "mix", k));
  for (const metric of ["cosine", "dot", "l2"] as const) {
    for (const [a, b] of [["e3", "e4"], ["e0", "e5"], ["e7", "e1"]] as const) {
      const r = await s.query.similarity("mix", a, b, { metric });
      const want = oracle(metric, dense.get(a)!, dense.get(b)!);
      t.ok(close(r.score, want), `${metric} ${a}·${b}: ${r.score} vs dense ${want}`);
    }
    for (const q of ["e4", "e1"]) {
      const top = await s.query.topk("mix", { key: q, k: 8, metric });
      const want = keys.filter((k) => k !== q).map((k) => ({ key: k, score: oracle(metric, dense.get(q)!, dense.get(k)!) }))
        .sort((x, y) => (metric === "l2" ? x.score - y.score : y.score - x.score));
      t.equal(top.scanned, 8, `${metric} top-K from ${q}: every other entry scanned`);
      t.ok(top.results.every((r, i) => close(r.score, want[i]!.score)), `${metric} top-K from ${q}: scores of the dense oracle (${top.results.map((r) => r.key).join(" ")})`);
    }
    const v = Float64Array.from(noise(n, 99, true));
    const vq = await s.query.vector("mix", { vector: v, shape, k: 9, metric });
    const want = keys.map((k) => oracle(metric, v, dense.get(k)!)).sort((x, y) => (metric === "l2" ? x - y : y - x));
    t.ok(vq.results.length === 9 && vq.results.every((r, i) => close(r.score, want[i]!)), `${metric} vector query: scores of the dense oracle`);
  }
});

suite.test("bad and edge inputs: bounds, codec names, constant, tiny and extreme data", async (t, s) => {
  const x = noise(4096, 3) as Float32Array;
  const opts = { shape: [4096] };
  for (const [bad, re] of [
    [{ max_abs_error: -1 }, /max_abs_error must be at least 0/],
    [{ max_abs_error: Number.NaN }, /max_abs_error/],
    [{ max_abs_error: "x" }, /max_abs_error/],
    [{ max_abs_error: 1e400 }, /max_abs_error/],
    [{ tolerance: -1e-3 }, /tolerance must be at least 0/],
    [{ codec: "zfp" }, /codec must be one of auto, tt, pred, lossless/],
  ] as [Record<string, unknown>, RegExp][]) {
    await rejects(t, s.put("ns", "bad", x, { ...opts, ...bad } as PutOptions), ValidationError, re, `${JSON.stringify(bad, (_, v) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v))} refused`);
  }
  for (const exact of [{ max_abs_error: 0 }, { tolerance: 0 }, { tolerance: 1e-2, max_abs_error: 0 }] as PutOptions[]) {
    const r = await s.put("ns", "exact", x, { ...opts, ...exact });
    const back = (await s.serve("ns", "exact")).data;
    t.ok(["lossless", "passthrough"].includes(r.verdict) && r.relative_error === 0 && r.max_abs_error === 0 &&
      Buffer.from(back.buffer, back.byteOffset, back.byteLength).equals(Buffer.from(x.buffer)), `${JSON.stringify(exact)}: ${r.verdict} (${r.fingerprint.codec}), bit-exact`);
  }
  const both = await s.put("ns", "both", x, { ...opts, tolerance: 1e-2, max_abs_error: 1e-3 });
  const e = errors(x, values((await s.serve("ns", "both")).data, "float32"));
  t.ok(e.rel <= 1e-2 && e.abs <= 1e-3 && both.max_abs_error <= 1e-3, `tolerance 1e-2 with max_abs_error 1e-3: both hold (${e.rel.toExponential(2)}, ${e.abs.toExponential(2)})`);
  const constant = await s.put("ns", "constant", new Float32Array(8192).fill(3.25), { shape: [8192], max_abs_error: 1e-6 });
  const c = errors(new Float32Array(8192).fill(3.25), values((await s.serve("ns", "constant")).data, "float32"));
  t.ok(c.abs <= 1e-6 && constant.compression_ratio > 10, `all-constant: ${constant.fingerprint.codec} at ratio ${constant.compression_ratio.toFixed(0)}, error ${c.abs}`);
  const single = await s.put("ns", "single", Float32Array.of(5), { shape: [1], codec: "pred", max_abs_error: 0.5 });
  t.deepEqual([single.verdict, (await s.serve("ns", "single")).data[0]], ["passthrough", 5], "one element: below the compression size, raw");
  // 1e-30 beside 1e30: a relative bound lets the small half go, an element bound keeps it
  const wide = Float32Array.from({ length: 4096 }, (_, i) => (i % 2 ? 1e30 : 1e-30) * (1 + (i % 7) / 10));
  const rw = await s.put("ns", "wide", wide, { shape: [64, 64], tolerance: 1e-3 });
  const w = errors(wide, values((await s.serve("ns", "wide")).data, "float32"));
  t.ok(w.rel <= 1e-3 && Number.isFinite(rw.fingerprint.norm!) && close(w.rel, rw.relative_error, 1e-6, 1e-15), `1e-30 with 1e30 under tolerance 1e-3: ${rw.fingerprint.codec}, ${w.rel.toExponential(2)}`);
  const ra = await s.put("ns", "wide-abs", wide, { shape: [64, 64], max_abs_error: 1e-31 });
  const wa = errors(wide, values((await s.serve("ns", "wide-abs")).data, "float32"));
  t.ok(wa.abs <= 1e-31, `and under max_abs_error 1e-31: ${ra.verdict} (${ra.fingerprint.codec}), largest error ${wa.abs}`);
});

suite.storeOnly("a pred stream of more than 1 MiB: stored, sliced, compacted and served again", "payload layout of each backend (LMDB payload_large, PostgreSQL chunks)", async (t, ctx) => {
  const store = await ctx.open();
  try {
    const shape = [160, 128, 128];
    const x = noise(160 * 128 * 128, 21) as Float32Array;
    const r = await store.put("ns", "big", x, { shape, codec: "pred", tolerance: 1e-4 });
    t.ok(r.fingerprint.codec === "pred" && r.bytes_stored > 1 << 20, `pred stream of ${r.bytes_stored} bytes (ratio ${r.compression_ratio.toFixed(2)})`);
    const full = (await store.serve("ns", "big")).data as Float32Array;
    const e = errors(x, full);
    t.ok(e.rel <= 1e-4 && close(e.rel, r.relative_error, 1e-6) && e.abs === r.max_abs_error, `served within the tolerance (${e.rel.toExponential(2)}), as reported`);
    const sl: [number, number][] = [[150, 160], [0, 128], [64, 65]];
    const blk = await store.serve("ns", "big", { slice: sl });
    t.ok(Buffer.from(blk.data.buffer, blk.data.byteOffset, blk.data.byteLength).equals(Buffer.from(extractBlock(full, shape, sl, "float32").buffer)), "a slice of the last blocks equals the full serve's");
    await store.put("ns", "big", new Int32Array(4), { shape: [4] });
    t.deepEqual(await store.compact(), { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "compact keeps the payload of version 1");
    const again = (await store.serve("ns", "big", { version: 1 })).data;
    t.ok(Buffer.from(again.buffer, again.byteOffset, again.byteLength).equals(Buffer.from(full.buffer, full.byteOffset, full.byteLength)), "version 1 serves the same values afterwards");
  } finally {
    await store.close();
  }
});

suite.run();
