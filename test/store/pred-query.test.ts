// Queries over prediction-codec entries, which the store scores block by block against the
// query (pred.dot) instead of decoding them whole: similarity, top-K and vector scores equal
// float64 dot products on the served values for seeded shapes (one element, dimensions of 1,
// edge blocks, six dimensions) and dtypes (float32, float64, float16, bfloat16), in namespaces
// mixing pred, TT and exact entries, for every metric; a corrupt stored stream gives the
// ValidationError that serving it gives, and never a crash.
import test from "tape";
import { ValidationError } from "../../lib/errors.js";
import { bf16ToFloat, floatToBf16, floatToHalf, halfToFloat } from "../../lib/store/codec.js";
import { createStore, type Store } from "../../lib/store/index.js";
import type { ServeArray } from "../../lib/store/types.js";
import { gaussian, smoothField } from "../tt/helpers.js";
import { close } from "./codec-helpers.js";

type Metric = "cosine" | "dot" | "l2";
const METRICS: Metric[] = ["cosine", "dot", "l2"];
const DTYPES = ["float32", "float64", "float16", "bfloat16"] as const;

const prod = (s: number[]) => s.reduce((a, b) => a * b, 1);

function served(d: ServeArray, dtype: string): Float64Array {
  if (dtype === "float16") return Float64Array.from(d as Uint16Array, halfToFloat);
  if (dtype === "bfloat16") return Float64Array.from(d as Uint16Array, bf16ToFloat);
  return Float64Array.from(d as Float32Array);
}

function oracle(metric: Metric, a: Float64Array, b: Float64Array): number {
  let dot = 0,
    na = 0,
    nb = 0,
    d2 = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
    d2 += (a[i]! - b[i]!) ** 2;
  }
  if (metric === "dot") return dot;
  if (metric === "cosine") return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
  return Math.sqrt(d2);
}

const norm = (a: Float64Array) => Math.sqrt(a.reduce((s, v) => s + v * v, 0));

/**
 * Whether a score agrees with the dense one within `eps` of the scale a floating dot product
 * is accurate to (‖a‖‖b‖ for dot, 1 for cosine, ‖a‖ + ‖b‖ for l2). Pairs without a TT entry
 * are held to 1e-10; TT·dense contractions run in the cores' float32, so pairs with one get 1e-5.
 */
function agrees(metric: Metric, got: number, a: Float64Array, b: Float64Array, tt: boolean): boolean {
  const eps = tt ? 1e-5 : 1e-10;
  const scale = metric === "dot" ? norm(a) * norm(b) : metric === "cosine" ? 1 : norm(a) + norm(b);
  return Math.abs(got - oracle(metric, a, b)) <= eps * scale + 1e-300;
}

/** A field with structure and noise (pred keeps it at the default tolerance), in the dtype's container. */
function entryData(shape: number[], dtype: (typeof DTYPES)[number], seed: number, scale: number) {
  const n = prod(shape);
  const g = gaussian(seed);
  const dense = Float64Array.from({ length: n }, (_, i) => scale * (Math.sin(i / 37 + seed) + 0.3 * g()));
  const data =
    dtype === "float64" ? dense : dtype === "float32" ? Float32Array.from(dense) : Uint16Array.from(dense, dtype === "float16" ? floatToHalf : floatToBf16);
  return data;
}

async function withStore(path: string, body: (s: Store) => Promise<void>): Promise<void> {
  // min_compress_bytes 0: small entries are coded too, so tiny pred streams exist
  const s = await createStore({ path, min_compress_bytes: 0 });
  try {
    await body(s);
  } finally {
    await s.close();
  }
}

const SHAPES: number[][] = [[1], [1, 1, 1], [3, 1, 700], [1, 1, 9], [513, 515], [1, 700, 1, 400], [2, 3, 4, 5, 6, 7]];

test("pred entries in similarity, top-K and vector queries equal float64 dot products on the served values", async (t) => {
  await withStore(":memory:", async (s) => {
    let seed = 0;
    for (const shape of SHAPES) {
      const ns = `s${shape.join("x")}`;
      const keys: string[] = [];
      const codecs: string[] = [];
      // pred entries of each dtype, a lossless one, and one TT where the shape has room for it
      for (const dtype of DTYPES) {
        for (let j = 0; j < 2; j++) {
          const key = `p-${dtype}-${j}`;
          const r = await s.put(ns, key, entryData(shape, dtype, ++seed, 1 + j), { shape, dtype, codec: "pred", tolerance: 1e-2 });
          keys.push(key);
          codecs.push(r.fingerprint.codec);
        }
      }
      const ll = await s.put(ns, "exact", entryData(shape, "float32", ++seed, 3), { shape, dtype: "float32", codec: "lossless" });
      keys.push("exact");
      codecs.push(ll.fingerprint.codec);
      if (prod(shape) >= 64) {
        // rank 1 over (leading dimensions) x (last dimension): TT keeps it
        const last = shape.at(-1)!;
        const smooth = Float32Array.from({ length: prod(shape) }, (_, i) => Math.sin(Math.floor(i / last) / 9 + 1) * Math.cos((i % last) / 7));
        const r = await s.put(ns, "tt", smooth, { shape, dtype: "float32", codec: "tt", tolerance: 1e-3 });
        keys.push("tt");
        codecs.push(r.fingerprint.codec);
      }
      const preds = codecs.filter((c) => c === "pred").length;
      t.comment(`[${shape.join("x")}]: codecs ${codecs.join(" ")}`);
      if (prod(shape) >= 1000) t.ok(preds >= 6, `[${shape.join("x")}]: ${preds} entries kept as pred streams`);
      const dense = new Map<string, Float64Array>();
      for (const k of keys) {
        const sv = await s.serve(ns, k);
        dense.set(k, served(sv.data, sv.dtype));
      }
      for (const metric of METRICS) {
        for (const q of ["p-float32-0", "p-float16-1", "exact", ...(keys.includes("tt") ? ["tt"] : [])]) {
          const top = await s.query.topk(ns, { key: q, k: keys.length, metric });
          const want = keys
            .filter((k) => k !== q)
            .map((k) => ({ key: k, score: oracle(metric, dense.get(q)!, dense.get(k)!) }))
            .sort((x, y) => (metric === "l2" ? x.score - y.score : y.score - x.score) || (x.key < y.key ? -1 : 1));
          t.equal(top.scanned, keys.length - 1, `[${shape.join("x")}] ${metric} top-K from ${q}: every other entry scanned`);
          const byKey = new Map(top.results.map((r) => [r.key, r.score]));
          const bad = want.filter((w) => !agrees(metric, byKey.get(w.key) ?? NaN, dense.get(q)!, dense.get(w.key)!, q === "tt" || w.key === "tt"));
          t.deepEqual(
            bad.map((b) => `${b.key} ${byKey.get(b.key)} vs ${b.score}`),
            [],
            `[${shape.join("x")}] ${metric} top-K from ${q}: each score is the dense one (${top.results.map((r) => r.key).join(" ")})`,
          );
        }
        const g = gaussian(seed + 1000);
        const v = Float64Array.from({ length: prod(shape) }, () => g());
        const vq = await s.query.vector(ns, { vector: v, shape, k: keys.length, metric });
        t.ok(
          vq.results.length === keys.length && vq.results.every((r) => agrees(metric, r.score, v, dense.get(r.key)!, r.key === "tt")),
          `[${shape.join("x")}] ${metric} vector query: scores of the dense oracle`,
        );
        for (const [a, b] of [
          ["p-float64-0", "p-float32-1"],
          ["p-bfloat16-0", "p-float16-0"],
          ["exact", "p-float64-1"],
          ...(keys.includes("tt") ? [["tt", "p-float32-0"]] : []),
        ] as [string, string][]) {
          const r = await s.query.similarity(ns, a, b, { metric });
          const w = oracle(metric, dense.get(a)!, dense.get(b)!);
          t.ok(agrees(metric, r.score, dense.get(a)!, dense.get(b)!, a === "tt"), `[${shape.join("x")}] ${metric} ${a}·${b}: ${r.score} vs dense ${w}`);
        }
      }
    }
  });
});

test("l2 between near-equal pred entries is computed exactly", async (t) => {
  await withStore(":memory:", async (s) => {
    const shape = [300, 400];
    const base = entryData(shape, "float32", 7, 1) as Float32Array;
    const near = Float32Array.from(base, (v, i) => v + (i % 97 === 0 ? 1e-3 : 0));
    await s.put("n", "a", base, { shape, codec: "pred", max_abs_error: 0 });
    await s.put("n", "b", near, { shape, codec: "pred", max_abs_error: 0 });
    const da = Float64Array.from(base);
    const db = Float64Array.from(near);
    const want = oracle("l2", da, db);
    const r = await s.query.similarity("n", "a", "b", { metric: "l2" });
    t.ok(close(r.score, want, 1e-9), `similarity l2 ${r.score} vs ${want}`);
    const top = await s.query.topk("n", { key: "a", k: 1, metric: "l2" });
    t.ok(top.results[0]!.key === "b" && close(top.results[0]!.score, want, 1e-9), `top-K l2 ${top.results[0]!.score} vs ${want}`);
    const vq = await s.query.vector("n", { vector: db, shape, k: 2, metric: "l2" });
    t.deepEqual(
      vq.results.map((x) => [x.key, x.key === "b" ? x.score : close(x.score, want, 1e-9)]),
      [
        ["b", 0],
        ["a", true],
      ],
      "vector l2: 0 to itself, the exact distance to the other",
    );
  });
});

async function rejectsStream(t: test.Test, p: () => Promise<unknown>, label: string): Promise<void> {
  try {
    await p();
    t.fail(`${label}: expected a ValidationError`);
  } catch (e) {
    t.ok(e instanceof ValidationError && (e as ValidationError).field === "stream", `${label}: ValidationError naming stream (${(e as Error).message})`);
  }
}

test("a corrupt stored pred stream gives the error serving it gives, not a crash", async (t) => {
  await withStore(":memory:", async (s) => {
    const shape = [513, 515];
    for (let i = 0; i < 3; i++) await s.put("c", `p${i}`, entryData(shape, "float32", 30 + i, 1), { shape, codec: "pred", tolerance: 1e-2 });
    await s.put("c", "tt", smoothField(513, 515, 1, false, 3) as Float32Array, { shape, codec: "tt", tolerance: 1e-3 });
    const info = await s.get("c", "p1");
    t.equal(info.fingerprint.codec, "pred", "p1 is a pred stream");
    const payload = await s.backend.getPayload(s.tenant, info.fingerprint.sha256);
    t.ok(payload && payload.length > 100, "its payload is held by the memory backend");
    const saved = Uint8Array.from(payload!);
    const v = Float32Array.from({ length: prod(shape) }, (_, i) => Math.cos(i / 11));
    for (const [at, what] of [
      [0, "magic"],
      [7, "rank"],
      [17, "shape"],
      [payload!.length - 1, "last payload byte"],
    ] as const) {
      payload!.set(saved);
      payload![at] ^= 0x5a;
      let serveErr: unknown = null;
      try {
        await s.serve("c", "p1");
      } catch (e) {
        serveErr = e;
      }
      if (serveErr) {
        t.ok(serveErr instanceof ValidationError, `${what} damaged: serve refuses it (${(serveErr as Error).message})`);
        await rejectsStream(t, () => s.query.topk("c", { key: "p0", k: 3 }), `${what} damaged: top-K`);
        await rejectsStream(t, () => s.query.vector("c", { vector: v, shape, k: 3 }), `${what} damaged: vector`);
        await rejectsStream(t, () => s.query.similarity("c", "tt", "p1"), `${what} damaged: similarity`);
      } else {
        // damage that leaves a well-formed stream decodes to other values: the query scores those
        const top = await s.query.vector("c", { vector: v, shape, k: 4 });
        t.equal(top.results.length, 4, `${what} damaged into another well-formed stream: the query answers`);
      }
    }
    payload!.set(saved);
    const top = await s.query.topk("c", { key: "p0", k: 3 });
    t.equal(top.results.length, 3, "restored: the query answers again");
  });
});
