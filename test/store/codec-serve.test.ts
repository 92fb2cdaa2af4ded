// Entries of the prediction codec (pred) on every backend and over HTTP: a slice decodes to
// the block of the full serve (dimensions of 1 included); similarity, top-K and vector queries
// over a namespace mixing TT, pred and exact entries agree with dense float64 arithmetic on
// the served tensors to 1e-5; bad put options are refused naming the option, and edge data
// (all-constant, one element, 1e-30 beside 1e30) keep their bounds; a pred stream over 1 MiB
// goes through each backend's large-payload layout. The choice of codec itself:
// test/store/codec-choice.test.ts.
import { ValidationError } from "../../lib/errors.js";
import { extractBlock } from "../../lib/store/codec.js";
import type { PutOptions } from "../../lib/schemas.js";
import { gaussian, smoothField } from "../tt/helpers.js";
import { rejects, storeSuite, type StoreApi } from "./harness.js";
import { close, errors, f64, noise, values } from "./codec-helpers.js";

const suite = storeSuite({ targets: ["memory", "lmdb", "postgres", "http"], namespaces: ["ns", "mix"] });

suite.test("a slice of a pred entry equals that block of the full serve", async (t, s) => {
  const shape = [40, 36, 21];
  const x = noise(40 * 36 * 21, 11) as Float32Array;
  const r = await s.put("ns", "p", x, { shape, codec: "pred", tolerance: 1e-3 });
  t.equal(r.fingerprint.codec, "pred", "stored by pred");
  const full = (await s.serve("ns", "p")).data;
  const slices: [number, number][][] = [
    [
      [0, 40],
      [0, 36],
      [0, 21],
    ],
    [
      [3, 4],
      [5, 6],
      [7, 8],
    ],
    [
      [0, 1],
      [0, 36],
      [20, 21],
    ],
    [
      [17, 40],
      [30, 36],
      [0, 9],
    ],
    [
      [39, 40],
      [35, 36],
      [20, 21],
    ],
  ];
  for (const sl of slices) {
    const got = await s.serve("ns", "p", { slice: sl });
    t.deepEqual(
      got.shape,
      sl.map(([a, b]) => b - a),
      `slice ${JSON.stringify(sl)}: shape`,
    );
    t.deepEqual(
      Buffer.from(got.data.buffer, got.data.byteOffset, got.data.byteLength),
      Buffer.from(extractBlock(full, shape, sl, "float32").buffer),
      `slice ${JSON.stringify(sl)}: the block's values`,
    );
  }
  const wide = await s.serve("ns", "p", {
    slice: [
      [1, 3],
      [2, 4],
      [0, 21],
    ],
    dtype: "float64",
  });
  t.ok(
    wide.data instanceof Float64Array &&
      wide.data.every(
        (v, i) =>
          v ===
          (
            extractBlock(
              full,
              shape,
              [
                [1, 3],
                [2, 4],
                [0, 21],
              ],
              "float32",
            ) as Float32Array
          )[i],
      ),
    "a slice in float64",
  );
  await rejects(
    t,
    s.serve("ns", "p", {
      slice: [
        [0, 41],
        [0, 36],
        [0, 21],
      ],
    }),
    ValidationError,
    /slice\.0 stops at 41/,
    "a slice beyond the shape",
  );
  // a dimension of 1
  const y = noise(64 * 48, 12) as Float32Array;
  const one = await s.put("ns", "one", y, { shape: [1, 64, 1, 48], codec: "pred" });
  const blk = await s.serve("ns", "one", {
    slice: [
      [0, 1],
      [3, 9],
      [0, 1],
      [40, 48],
    ],
  });
  const ref = extractBlock(
    (await s.serve("ns", "one")).data,
    [1, 64, 1, 48],
    [
      [0, 1],
      [3, 9],
      [0, 1],
      [40, 48],
    ],
    "float32",
  );
  t.ok(
    one.fingerprint.codec === "pred" && Buffer.from(blk.data.buffer, blk.data.byteOffset, blk.data.byteLength).equals(Buffer.from(ref.buffer)),
    "dimensions of 1: the slice equals the block",
  );
});

/** Dense oracle of a metric on served float64 values. */
function oracle(metric: string, a: Float64Array, b: Float64Array): number {
  let d = 0,
    na = 0,
    nb = 0,
    l2 = 0;
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
  t.ok(
    codecs.slice(0, 3).every((c) => c === "tt") && codecs.slice(3, 6).every((c) => c === "pred") && codecs.slice(6).every((c) => c !== "tt"),
    `codecs ${codecs.join(", ")}`,
  );
  const dense = new Map<string, Float64Array>();
  for (const k of keys) dense.set(k, await served(s, "mix", k));
  for (const metric of ["cosine", "dot", "l2"] as const) {
    for (const [a, b] of [
      ["e3", "e4"],
      ["e0", "e5"],
      ["e7", "e1"],
    ] as const) {
      const r = await s.query.similarity("mix", a, b, { metric });
      const want = oracle(metric, dense.get(a)!, dense.get(b)!);
      t.ok(close(r.score, want), `${metric} ${a}·${b}: ${r.score} vs dense ${want}`);
    }
    for (const q of ["e4", "e1"]) {
      const top = await s.query.topk("mix", { key: q, k: 8, metric });
      const want = keys
        .filter((k) => k !== q)
        .map((k) => ({ key: k, score: oracle(metric, dense.get(q)!, dense.get(k)!) }))
        .sort((x, y) => (metric === "l2" ? x.score - y.score : y.score - x.score));
      t.equal(top.scanned, 8, `${metric} top-K from ${q}: every other entry scanned`);
      t.ok(
        top.results.every((r, i) => close(r.score, want[i]!.score)),
        `${metric} top-K from ${q}: scores of the dense oracle (${top.results.map((r) => r.key).join(" ")})`,
      );
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
    await rejects(
      t,
      s.put("ns", "bad", x, { ...opts, ...bad } as PutOptions),
      ValidationError,
      re,
      `${JSON.stringify(bad, (_, v) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v))} refused`,
    );
  }
  for (const exact of [{ max_abs_error: 0 }, { tolerance: 0 }, { tolerance: 1e-2, max_abs_error: 0 }] as PutOptions[]) {
    const r = await s.put("ns", "exact", x, { ...opts, ...exact });
    const back = (await s.serve("ns", "exact")).data;
    t.ok(
      ["lossless", "passthrough"].includes(r.verdict) &&
        r.relative_error === 0 &&
        r.max_abs_error === 0 &&
        Buffer.from(back.buffer, back.byteOffset, back.byteLength).equals(Buffer.from(x.buffer)),
      `${JSON.stringify(exact)}: ${r.verdict} (${r.fingerprint.codec}), bit-exact`,
    );
  }
  const both = await s.put("ns", "both", x, { ...opts, tolerance: 1e-2, max_abs_error: 1e-3 });
  const e = errors(x, values((await s.serve("ns", "both")).data, "float32"));
  t.ok(
    e.rel <= 1e-2 && e.abs <= 1e-3 && both.max_abs_error <= 1e-3,
    `tolerance 1e-2 with max_abs_error 1e-3: both hold (${e.rel.toExponential(2)}, ${e.abs.toExponential(2)})`,
  );
  const constant = await s.put("ns", "constant", new Float32Array(8192).fill(3.25), { shape: [8192], max_abs_error: 1e-6 });
  const c = errors(new Float32Array(8192).fill(3.25), values((await s.serve("ns", "constant")).data, "float32"));
  t.ok(
    c.abs <= 1e-6 && constant.compression_ratio > 10,
    `all-constant: ${constant.fingerprint.codec} at ratio ${constant.compression_ratio.toFixed(0)}, error ${c.abs}`,
  );
  const single = await s.put("ns", "single", Float32Array.of(5), { shape: [1], codec: "pred", max_abs_error: 0.5 });
  t.deepEqual([single.verdict, (await s.serve("ns", "single")).data[0]], ["passthrough", 5], "one element: below the compression size, raw");
  // 1e-30 beside 1e30: a relative bound lets the small half go, an element bound keeps it
  const wide = Float32Array.from({ length: 4096 }, (_, i) => (i % 2 ? 1e30 : 1e-30) * (1 + (i % 7) / 10));
  const rw = await s.put("ns", "wide", wide, { shape: [64, 64], tolerance: 1e-3 });
  const w = errors(wide, values((await s.serve("ns", "wide")).data, "float32"));
  t.ok(
    w.rel <= 1e-3 && Number.isFinite(rw.fingerprint.norm!) && close(w.rel, rw.relative_error, 1e-6, 1e-15),
    `1e-30 with 1e30 under tolerance 1e-3: ${rw.fingerprint.codec}, ${w.rel.toExponential(2)}`,
  );
  const ra = await s.put("ns", "wide-abs", wide, { shape: [64, 64], max_abs_error: 1e-31 });
  const wa = errors(wide, values((await s.serve("ns", "wide-abs")).data, "float32"));
  t.ok(wa.abs <= 1e-31, `and under max_abs_error 1e-31: ${ra.verdict} (${ra.fingerprint.codec}), largest error ${wa.abs}`);
});

suite.storeOnly(
  "a pred stream of more than 1 MiB: stored, sliced, compacted and served again",
  "payload layout of each backend (LMDB payload_large, PostgreSQL chunks)",
  async (t, ctx) => {
    const store = await ctx.open();
    try {
      const shape = [96, 96, 80];
      const x = noise(96 * 96 * 80, 21) as Float32Array;
      const r = await store.put("ns", "big", x, { shape, codec: "pred", tolerance: 1e-4 });
      t.ok(r.fingerprint.codec === "pred" && r.bytes_stored > 1 << 20, `pred stream of ${r.bytes_stored} bytes (ratio ${r.compression_ratio.toFixed(2)})`);
      const full = (await store.serve("ns", "big")).data as Float32Array;
      const e = errors(x, full);
      t.ok(
        e.rel <= 1e-4 && close(e.rel, r.relative_error, 1e-6) && e.abs === r.max_abs_error,
        `served within the tolerance (${e.rel.toExponential(2)}), as reported`,
      );
      const sl: [number, number][] = [
        [90, 96],
        [0, 96],
        [64, 65],
      ];
      const blk = await store.serve("ns", "big", { slice: sl });
      t.ok(
        Buffer.from(blk.data.buffer, blk.data.byteOffset, blk.data.byteLength).equals(Buffer.from(extractBlock(full, shape, sl, "float32").buffer)),
        "a slice of the last blocks equals the full serve's",
      );
      await store.put("ns", "big", new Int32Array(4), { shape: [4] });
      t.deepEqual(await store.compact(), { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "compact keeps the payload of version 1");
      const again = (await store.serve("ns", "big", { version: 1 })).data;
      t.ok(
        Buffer.from(again.buffer, again.byteOffset, again.byteLength).equals(Buffer.from(full.buffer, full.byteOffset, full.byteLength)),
        "version 1 serves the same values afterwards",
      );
    } finally {
      await store.close();
    }
  },
);

suite.run();
