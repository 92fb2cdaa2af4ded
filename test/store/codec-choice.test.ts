// The store's choice of codec for floating data (docs/store.md "Codec policy"), on every
// backend and over HTTP: `auto` keeps TT for smooth fields, the prediction codec (pred) for
// noisy and photo-like data, deflate for integers; `weak` only under the caller's max_rank;
// tolerance and max_abs_error hold on the served values over 24 seeded cases (both reported
// as measured). Serving and querying pred entries: test/store/codec-serve.test.ts.
import { floatToHalf, halfToFloat } from "../../lib/store/codec.js";
import type { PutOptions } from "../../lib/schemas.js";
import { gaussian, rng, smoothField } from "../tt/helpers.js";
import { storeSuite } from "./harness.js";
import { close, errors, f64, noise, values } from "./codec-helpers.js";

const suite = storeSuite({ targets: ["memory", "lmdb", "postgres", "http"], namespaces: ["ns"] });

/** A photograph-like image: flat regions with edges, shading and sensor noise. */
function photo(h: number, w: number, seed: number): Float32Array {
  const g = gaussian(seed);
  const u = rng(seed + 1);
  const cx = w * (0.3 + 0.4 * u()),
    cy = h * (0.3 + 0.4 * u());
  return Float32Array.from({ length: h * w }, (_, q) => {
    const y = Math.floor(q / w),
      x = q % w;
    return (Math.hypot(x - cx, y - cy) < h / 4 ? 180 : 60) + 40 * Math.sin(x / 23) * Math.cos(y / 31) + (x > 0.7 * w ? 50 : 0) + 3 * g();
  });
}
/** Data spanning six decades: a wave whose scale changes by 1e6 between the halves, plus a small ripple. */
const decades = (n: number, seed: number) =>
  Float64Array.from({ length: n }, (_, i) => (i < n / 2 ? 1e-3 : 1e3) * Math.sin(i / 97 + seed) + 1e-4 * Math.cos(i * 0.37));

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
  for (const [k, x, r] of [
    ["smooth", smooth, a],
    ["noise", nz, b],
    ["photo", ph, c],
  ] as const) {
    const m = errors(x, values((await s.serve("ns", k)).data, "float32"));
    t.ok(
      m.rel <= 1e-3 && close(m.rel, r.relative_error, 1e-6) && m.abs === r.max_abs_error,
      `${k}: served errors ${m.rel.toExponential(3)} / ${m.abs.toExponential(3)} are the reported ones`,
    );
    const info = await s.get("ns", k);
    t.deepEqual(
      [info.fingerprint.codec, info.relative_error, info.max_abs_error],
      [r.fingerprint.codec, r.relative_error, r.max_abs_error],
      `${k}: get reports codec and errors`,
    );
  }
  const listed = await s.list("ns");
  t.deepEqual(
    listed.keys.map((k) => [k.key, k.codec]),
    [
      ["ints", "lossless"],
      ["noise", "pred"],
      ["photo", "pred"],
      ["smooth", "tt"],
    ],
    "list names each codec",
  );
  t.ok(
    listed.keys.every((k) => k.relative_error !== null && k.max_abs_error !== null),
    "and each entry's errors",
  );
  // explicit codecs: each alone, or an exact entry where it cannot meet the bounds
  const tt = await s.put("ns", "noise-tt", nz, { shape: [32, 32, 32], codec: "tt" });
  t.deepEqual([tt.verdict, tt.fingerprint.codec], ["passthrough", "raw"], "noise under codec tt: no TT reaches the ratio, stored raw");
  const pr = await s.put("ns", "smooth-pred", smooth, { shape: [32, 32, 32], codec: "pred" });
  t.deepEqual([pr.verdict, pr.fingerprint.codec], ["compressed", "pred"], `smooth field under codec pred: pred at ratio ${pr.compression_ratio.toFixed(1)}`);
  const ll = await s.put("ns", "photo-exact", ph, { shape: [256, 256], codec: "lossless" });
  t.ok(
    ll.verdict === "lossless" && ["pred", "lossless"].includes(ll.fingerprint.codec) && ll.relative_error === 0 && ll.max_abs_error === 0,
    `codec lossless: exact, by ${ll.fingerprint.codec} at ratio ${ll.compression_ratio.toFixed(2)}`,
  );
  t.deepEqual(Buffer.from((await s.serve("ns", "photo-exact")).data.buffer), Buffer.from(ph.buffer), "and bit-exact");
});

suite.test("weak only under the caller's max_rank; otherwise within the tolerance", async (t, s) => {
  const x = smoothField(32, 32, 32, false, 4) as Float32Array;
  const capped = await s.put("ns", "capped", x, { shape: [32, 32, 32], tolerance: 1e-5, max_rank: 1, codec: "tt" });
  t.deepEqual([capped.verdict, capped.fingerprint.codec], ["weak", "tt"], `codec tt with max_rank 1: weak (${capped.relative_error.toExponential(2)})`);
  const auto = await s.put("ns", "auto", x, { shape: [32, 32, 32], tolerance: 1e-5, max_rank: 1 });
  t.ok(
    auto.verdict === "compressed" && auto.relative_error <= 1e-5,
    `auto under the same cap: ${auto.fingerprint.codec} within the tolerance (${auto.relative_error.toExponential(2)})`,
  );
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
    const dense =
      kind === "smooth"
        ? f64(smoothField(24, 20, 28, true, seed))
        : kind === "noise"
          ? f64(noise(n, seed, true))
          : kind === "photo"
            ? f64(photo(96, 128, seed))
            : decades(n, seed);
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
    const ok =
      got.rel <= tol &&
      got.abs <= (opts.max_abs_error ?? Infinity) &&
      close(got.rel, r.relative_error, 1e-6, 1e-15) &&
      close(got.abs, r.max_abs_error, 1e-12, 0);
    if (!ok) {
      bad++;
      t.fail(
        `case ${seed} (${kind}, ${dtype}, ${JSON.stringify(opts)}): ${r.verdict} ${r.fingerprint.codec}, served ${got.rel} / ${got.abs}, reported ${r.relative_error} / ${r.max_abs_error}`,
      );
    }
  }
  t.equal(bad, 0, `every case within its bounds, errors as reported (codecs: ${JSON.stringify(Object.fromEntries(codecs))})`);
  t.ok((codecs.get("pred") ?? 0) > 0 && (codecs.get("tt") ?? 0) > 0, "both lossy codecs were chosen among them");
});

suite.run();
