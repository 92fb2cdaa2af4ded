// Benchmark of the pred codec (lib/pred.ts) beside zfp 1.0 (fixed accuracy) and the TT codec
// (lib/tt.ts) on real and generated data at relative Frobenius tolerances 1e-2, 1e-3, 1e-4.
// Every pred row decodes its stream and checks the bound (relative error and the stream's
// pointwise bound) in float64; a row that misses is flagged "VIOLATION". zfp is run through
// Debian's python3-zfpy at the accuracy whose achieved relative error is the largest not above
// pred's achieved one (bisection), so the ratios compare at the same achieved error; without
// python3-zfpy (apt-get install python3-zfpy) the zfp columns are skipped with a sentence.
// Photographs come from python3-skimage, the T1 MRI volume from mricron-data and the elevation
// model (USGS DEM of the Jacksboro fault, Tennessee, 3 arc-seconds) from python-matplotlib-data
// (Debian packages, loaded at run time; skipped when absent). Trained weights come from the npm
// package @vladmandic/human (its models/*.bin shards, float32 where the manifest names no
// quantisation): fetched with `npm pack` into a cache under the OS temp directory at run time,
// never a dependency of the product; skipped with a sentence when the registry is unreachable. Each data set also gets a lossless row
// (max_abs_error 0, checked bit-exact) beside zlib's deflate of the raw bytes.
// The data set `topk` times a top-K over a store namespace of pred entries (query.vector and
// query.topk, k = 10) and checks its keys and scores against a reference computed here: every
// entry served and its cosine taken in float64 in plain TypeScript; it prints the agreement
// beside the speed, and the growth of the peak resident memory of a fresh process that opens
// the store and runs only the queries.
// Usage: node --import tsx bench/codecs.ts [dataset ...]
//   (datasets: smooth turbulent shocks camera moon mri dem iris liveness topk; SVC_BENCH_NO_TT=1 leaves TT out;
//   topk runs only when named: SVC_BENCH_TOPK_ENTRIES / SVC_BENCH_TOPK_SIDE size it, default
//   16 entries of 2048 x 2048 float32)
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { deflateSync } from "node:zlib";
import * as pred from "../lib/pred.js";
import { createStore } from "../lib/store/index.js";
import * as tt from "../lib/tt.js";
import { writeNpy } from "../lib/npy.js";
import { loadReal, python, REAL } from "./data/real.js";
import { gaussian, rng } from "../test/tt/helpers.js";

const TOLS = [1e-2, 1e-3, 1e-4];
const MB = 1 << 20;
const want = process.argv.slice(2);
const work = mkdtempSync(join(tmpdir(), "svc-codecs-"));

function out(o: Record<string, unknown>) {
  console.log(JSON.stringify(o));
}

// ---- data sets ----------------------------------------------------------------------------

interface Dataset {
  name: string;
  shape: number[];
  data: Float32Array;
}

function smooth(): Dataset {
  const n = 128;
  const x = new Float32Array(n * n * n);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++)
      for (let k = 0; k < n; k++) {
        const a = i / n,
          b = j / n,
          c = k / n;
        x[(i * n + j) * n + k] = Math.sin(6 * a + 2 * b) * Math.cos(5 * c - b) + Math.exp(-((a - 0.4) ** 2 + (b - 0.6) ** 2 + (c - 0.5) ** 2) * 20);
      }
  return { name: "smooth", shape: [n, n, n], data: x };
}

/** Random Fourier modes with a k^-5/3 amplitude spectrum plus 0.1% white noise. */
function turbulent(): Dataset {
  const n = 128;
  const x = new Float32Array(n * n * n);
  const r = rng(11);
  const g = gaussian(12);
  const modes: { k: number[]; a: number; p: number }[] = [];
  for (let m = 0; m < 64; m++) {
    const k = [1 + Math.floor(r() * 24), 1 + Math.floor(r() * 24), 1 + Math.floor(r() * 24)];
    const kk = Math.hypot(k[0]!, k[1]!, k[2]!);
    modes.push({ k, a: Math.pow(kk, -5 / 6), p: r() * 2 * Math.PI });
  }
  const tab = modes.map((m) => [0, 1, 2].map((d) => Float64Array.from({ length: n }, (_, i) => (2 * Math.PI * m.k[d]! * i) / n)));
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++)
      for (let k = 0; k < n; k++) {
        let v = 0;
        for (let m = 0; m < modes.length; m++) v += modes[m]!.a * Math.sin(tab[m]![0]![i]! + tab[m]![1]![j]! + tab[m]![2]![k]! + modes[m]!.p);
        x[(i * n + j) * n + k] = v + 0.001 * g();
      }
  return { name: "turbulent", shape: [n, n, n], data: x };
}

/** Piecewise-smooth 2-D field with discontinuities along curves (shock fronts). */
function shocks(): Dataset {
  const n = 1024;
  const x = new Float32Array(n * n);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++) {
      const a = i / n,
        b = j / n;
      let v = Math.sin(3 * a) + 0.5 * b;
      if (b > 0.3 + 0.2 * Math.sin(4 * a)) v += 2;
      if ((a - 0.6) ** 2 + (b - 0.4) ** 2 < 0.04) v -= 1.5;
      if (a > 0.8) v *= 0.3;
      x[i * n + j] = v;
    }
  return { name: "shocks", shape: [n, n], data: x };
}

/** A Debian-packaged data set converted to .npy by python3, or null (with a sentence) when absent. */
/** A real data set of bench/data/real.ts, as float32. */
function real(name: string): Dataset | null {
  const a = loadReal(name, work, true);
  if ("skipped" in a) {
    out({ dataset: name, skipped: a.skipped });
    return null;
  }
  if (a.dtype !== "float32") {
    out({ dataset: name, skipped: `python3 wrote ${a.dtype}, not float32` });
    return null;
  }
  const data = new Float32Array(a.data.buffer.slice(a.data.byteOffset, a.data.byteOffset + a.data.byteLength));
  return { name: REAL[name]!.label, shape: a.shape, data };
}

// ---- trained weights from an npm package ------------------------------------------------------

const WEIGHTS_PACKAGE = "@vladmandic/human@3.3.6";

/** The package's folder in the cache (fetched with npm pack on first use), or null with a sentence. */
function weightsPackage(): string | null {
  const dir = join(tmpdir(), "svc-bench-npm", WEIGHTS_PACKAGE.replace(/[@/]/g, "_"));
  const models = join(dir, "package", "models");
  if (existsSync(join(models, "liveness.json"))) return models;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const r = spawnSync("npm", ["pack", WEIGHTS_PACKAGE, "--pack-destination", dir, "--silent"], { encoding: "utf8", timeout: 300_000 });
  const tgz = readdirSync(dir).find((f) => f.endsWith(".tgz"));
  if (r.status !== 0 || !tgz) {
    out({ weights: `skipped: npm pack ${WEIGHTS_PACKAGE} failed (the npm registry is unreachable?): ${(r.stderr || "").trim().split("\n").pop()}` });
    return null;
  }
  const x = spawnSync("tar", ["xzf", join(dir, tgz), "-C", dir], { encoding: "utf8" });
  if (x.status !== 0 || !existsSync(join(models, "liveness.json"))) {
    out({ weights: `skipped: could not unpack ${tgz}: ${(x.stderr || "").trim()}` });
    return null;
  }
  return models;
}

interface ManifestWeight {
  name: string;
  shape: number[];
  dtype: string;
  quantization?: { dtype: string };
}

/** One float32 weight tensor of a TF.js model (model.json + one .bin shard), as stored. */
function weights(name: string, model: string, weight: string): Dataset | null {
  const models = weightsPackage();
  if (!models) return null;
  const manifest = JSON.parse(readFileSync(join(models, `${model}.json`), "utf8")) as { weightsManifest: { paths: string[]; weights: ManifestWeight[] }[] };
  const group = manifest.weightsManifest[0]!;
  const bin = readFileSync(join(models, group.paths[0]!));
  let off = 0;
  for (const w of group.weights) {
    const n = w.shape.reduce((a, b) => a * b, 1);
    const q = w.quantization?.dtype;
    const size = q === "uint8" ? 1 : q === "uint16" || q === "float16" ? 2 : 4;
    if (w.name === weight) {
      if (q || w.dtype !== "float32") {
        out({ dataset: name, skipped: `${weight} is stored as ${q ?? w.dtype}, not plain float32` });
        return null;
      }
      const data = new Float32Array(n);
      Buffer.from(data.buffer).set(bin.subarray(off, off + n * 4));
      return { name, shape: w.shape.filter((d, i) => d !== 1 || i === w.shape.length - 1), data };
    }
    off += n * size;
  }
  out({ dataset: name, skipped: `${weight} is not in ${model}.json` });
  return null;
}

const makers: Record<string, () => Dataset | null> = {
  smooth,
  turbulent,
  shocks,
  camera: () => real("camera"),
  moon: () => real("moon"),
  mri: () => real("mri"),
  dem: () => real("dem"),
  iris: () => weights("weights (human iris, conv kernel)", "iris", "unknown_344"),
  liveness: () => weights("weights (human liveness, dense kernel)", "liveness", "StatefulPartitionedCall/sequential_1/dense_1/MatMul/ReadVariableOp"),
};

// ---- zfp through python3-zfpy ---------------------------------------------------------------

const zfpCode = `import sys, json, time, numpy, zfpy
a = numpy.load(sys.argv[1]).astype(numpy.float64)
x = numpy.load(sys.argv[1])
norm = float(numpy.linalg.norm(a))
peak = float(numpy.abs(a).max())
def run(acc):
    t0 = time.perf_counter(); s = zfpy.compress_numpy(x, tolerance=acc); t1 = time.perf_counter()
    y = zfpy.decompress_numpy(s); t2 = time.perf_counter()
    d = y.astype(numpy.float64) - a
    return dict(acc=acc, ratio=x.nbytes / len(s), rel=float(numpy.linalg.norm(d)) / norm, max_abs=float(numpy.abs(d).max()), enc_s=t1 - t0, dec_s=t2 - t1)
res = []
for target in json.loads(sys.argv[2]):
    lo, hi = peak * 1e-9, peak
    best = run(lo)
    for _ in range(22):
        mid = (lo * hi) ** 0.5
        r = run(mid)
        if r["rel"] <= target: lo, best = mid, r
        else: hi = mid
    for _ in range(2):
        r = run(best["acc"])
        best["enc_s"] = min(best["enc_s"], r["enc_s"]); best["dec_s"] = min(best["dec_s"], r["dec_s"])
    res.append(best)
print(json.dumps(res))`;

const zfpPython = python("zfpy");
if (!zfpPython) out({ zfp: "skipped: python3-zfpy is not installed (Debian: apt-get install python3-zfpy); the zfp columns are left out." });

function zfpAt(d: Dataset, targets: number[]): { ratio: number; rel: number; max_abs: number; enc_s: number; dec_s: number }[] | null {
  if (!zfpPython) return null;
  const file = join(work, `zfp-${d.name.replace(/\W+/g, "_")}.npy`);
  writeFileSync(file, writeNpy({ dtype: "float32", shape: d.shape, data: d.data }));
  const r = spawnSync(zfpPython, ["-c", zfpCode, file, JSON.stringify(targets)], { encoding: "utf8", maxBuffer: 1 << 24 });
  if (r.status !== 0) {
    out({ dataset: d.name, zfp: `failed: ${(r.stderr || "").trim().split("\n").pop()}` });
    return null;
  }
  return JSON.parse(r.stdout);
}

// ---- measurement --------------------------------------------------------------------------

function errs(x: Float32Array, y: ArrayLike<number>): { rel: number; maxAbs: number } {
  let e = 0,
    s = 0,
    m = 0;
  for (let i = 0; i < x.length; i++) {
    const d = x[i]! - y[i]!;
    e += d * d;
    s += x[i]! * x[i]!;
    m = Math.max(m, Math.abs(d));
  }
  return { rel: Math.sqrt(e / s), maxAbs: m };
}

async function best<T>(reps: number, f: () => Promise<T>): Promise<{ s: number; v: T }> {
  let s = Infinity;
  let v!: T;
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    v = await f();
    s = Math.min(s, (performance.now() - t0) / 1000);
  }
  return { s, v };
}

// ---- top-K over pred entries --------------------------------------------------------------

/** Cosine in float64 of two arrays (the reference the store's top-K is checked against). */
function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0,
    na = 0,
    nb = 0;
  for (let i = 0; i < a.length; i++) {
    d += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return na === 0 || nb === 0 ? 0 : d / Math.sqrt(na * nb);
}

const topkKey = (e: number) => `e${String(e).padStart(3, "0")}`;

/**
 * The top-K row: entries are put into an LMDB store here, then a fresh process (this file with
 * SVC_BENCH_TOPK_QUERY set) opens it and runs the queries first, so the growth of its peak
 * resident memory is the queries' own; then it computes the reference.
 */
async function topkBench(): Promise<number> {
  const entries = Number(process.env.SVC_BENCH_TOPK_ENTRIES ?? 16);
  const side = Number(process.env.SVC_BENCH_TOPK_SIDE ?? 2048);
  const shape = [side, side];
  const n = side * side;
  const path = join(work, "topk-store");
  const store = await createStore({ path });
  let stored = 0;
  const t0 = performance.now();
  try {
    // fields of shared smooth structure, a per-entry pattern and a little noise, so cosines
    // spread; at tolerance 1e-2 the streams are small beside the dense data, whose handling the row measures
    const g = gaussian(5);
    const base = Float32Array.from({ length: n }, (_, q) => Math.sin((q % side) / 41) * Math.cos(Math.floor(q / side) / 53));
    for (let e = 0; e < entries; e++) {
      const w = 0.2 + (0.8 * e) / entries;
      const x = Float32Array.from(base, (v, q) => w * v + (1 - w) * Math.sin(((q % side) * (e + 1)) / 97) + 0.002 * g());
      stored += (await store.put("bench", topkKey(e), x, { shape, codec: "pred", tolerance: 1e-2 })).bytes_stored;
    }
  } finally {
    await store.close();
  }
  const putS = (performance.now() - t0) / 1000;
  const r = spawnSync(process.execPath, [...process.execArgv, process.argv[1]!, "topk"], {
    encoding: "utf8",
    env: { ...process.env, SVC_BENCH_TOPK_QUERY: JSON.stringify({ path, entries, side }) },
    maxBuffer: 1 << 20,
  });
  const line = r.stdout.trim().split("\n").pop() ?? "";
  if (r.status !== 0 || !line.startsWith("{")) {
    out({ dataset: "topk over pred entries", error: (r.stderr || "no output").trim().split("\n").pop() });
    return 1;
  }
  const row = JSON.parse(line) as Record<string, unknown>;
  out({ ...row, stored_MB: +(stored / MB).toFixed(1), put_s: +putS.toFixed(2) });
  return row.keys_agree === "ok" ? 0 : 1;
}

/** The query side of the top-K row (a fresh process): queries, then the reference; one JSON line. */
async function topkQueries(spec: { path: string; entries: number; side: number }): Promise<void> {
  const { path, entries, side } = spec;
  const shape = [side, side];
  const n = side * side;
  const g = gaussian(6);
  const q = Float32Array.from({ length: n }, (_, i) => Math.sin((i % side) / 41) * Math.cos(Math.floor(i / side) / 53) + 0.1 * g());
  const store = await createStore({ path });
  try {
    const rss0 = process.resourceUsage().maxRSS;
    const vq = await best(3, () => store.query.vector("bench", { vector: q, shape, k: 10 }));
    const tq = await best(3, () => store.query.topk("bench", { key: topkKey(0), k: 10 }));
    const rssGrowth = (process.resourceUsage().maxRSS - rss0) / 1024;
    // the reference: every entry served (decoded whole) and its cosine taken in TypeScript
    const r0 = performance.now();
    const ref: { key: string; score: number }[] = [];
    for (let e = 0; e < entries; e++) ref.push({ key: topkKey(e), score: cosine((await store.serve("bench", topkKey(e))).data as Float32Array, q) });
    const refS = (performance.now() - r0) / 1000;
    ref.sort((a, b) => b.score - a.score || (a.key < b.key ? -1 : 1));
    const keysAgree =
      vq.v.results.map((r) => r.key).join() ===
      ref
        .slice(0, 10)
        .map((r) => r.key)
        .join();
    const scoreDiff = Math.max(...vq.v.results.map((r, i) => Math.abs(r.score - ref[i]!.score)));
    const mbDense = (entries * n * 4) / MB;
    out({
      dataset: "topk over pred entries",
      entries,
      shape,
      dense_MB: +mbDense.toFixed(0),
      vector_topk_s: +vq.s.toFixed(3),
      vector_topk_dense_MBs: +(mbDense / vq.s).toFixed(0),
      key_topk_s: +tq.s.toFixed(3),
      reference_serve_and_dot_s: +refS.toFixed(3),
      keys_agree: keysAgree && scoreDiff <= 1e-9 ? "ok" : "DISAGREE",
      max_score_diff: +scoreDiff.toExponential(2),
      query_peak_rss_growth_MB: +rssGrowth.toFixed(1),
      load: loadavg().map((l) => +l.toFixed(2)),
    });
  } finally {
    await store.close();
  }
}

if (process.env.SVC_BENCH_TOPK_QUERY) {
  await topkQueries(JSON.parse(process.env.SVC_BENCH_TOPK_QUERY) as { path: string; entries: number; side: number });
  rmSync(work, { recursive: true, force: true });
  process.exit(0);
}

out({ bench: "codecs", cpus: cpus().length, cpu: cpus()[0]?.model, load: loadavg().map((l) => +l.toFixed(2)) });
const names = want.length ? want : Object.keys(makers);
const ratios: number[] = [];
const encTimes: number[] = [];
const decTimes: number[] = [];
let violations = 0;
for (const name of names) {
  if (name === "topk") {
    violations += await topkBench();
    continue;
  }
  const make = makers[name];
  if (!make) {
    out({ dataset: name, skipped: `unknown data set; known: ${Object.keys(makers).join(", ")}, topk` });
    continue;
  }
  const d = make();
  if (!d) continue;
  const mb = d.data.byteLength / MB;
  const rows: Record<string, unknown>[] = [];
  const achieved: number[] = [];
  for (const tol of TOLS) {
    const enc = await best(3, () => pred.compress(d.data, { shape: d.shape, tolerance: tol }));
    const dec = await best(3, () => pred.decompress(enc.v.stream));
    const e = errs(d.data, dec.v);
    const bound = pred.info(enc.v.stream).max_abs_error;
    const ok = e.rel <= tol && e.maxAbs <= bound && e.maxAbs === enc.v.max_abs_error;
    if (!ok) violations++;
    achieved.push(e.rel);
    rows.push({
      dataset: d.name,
      shape: d.shape,
      tolerance: tol,
      pred_ratio: +enc.v.compression_ratio.toFixed(2),
      pred_rel: +e.rel.toExponential(3),
      pred_max_abs: +e.maxAbs.toExponential(3),
      pred_enc_MBs: +(mb / enc.s).toFixed(1),
      pred_dec_MBs: +(mb / dec.s).toFixed(1),
      bound: ok ? "ok" : "VIOLATION",
    });
  }
  {
    // Lossless (max_abs_error 0) beside zlib's deflate of the raw bytes, both checked exact.
    const enc = await best(2, () => pred.compress(d.data, { shape: d.shape, max_abs_error: 0 }));
    const dec = await best(2, () => pred.decompress(enc.v.stream));
    const exact =
      Buffer.compare(Buffer.from(dec.v.buffer, dec.v.byteOffset, dec.v.byteLength), Buffer.from(d.data.buffer, d.data.byteOffset, d.data.byteLength)) === 0;
    if (!exact) violations++;
    const t0 = performance.now();
    const z = deflateSync(d.data, { level: 6 });
    const zs = (performance.now() - t0) / 1000;
    out({
      dataset: d.name,
      lossless: true,
      pred_ratio: +enc.v.compression_ratio.toFixed(3),
      pred_enc_MBs: +(mb / enc.s).toFixed(1),
      pred_dec_MBs: +(mb / dec.s).toFixed(1),
      deflate_ratio: +(d.data.byteLength / z.byteLength).toFixed(3),
      deflate_enc_MBs: +(mb / zs).toFixed(1),
      bit_exact: exact ? "ok" : "VIOLATION",
    });
  }
  const z = zfpAt(d, achieved);
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!;
    const zi = z?.[i];
    if (zi) {
      const speedup = (row.pred_ratio as number) / zi.ratio;
      ratios.push(speedup);
      // Time per byte over zfp's, from the MB/s of the same run (the goals: encode within 4x, decode within 3x).
      const encOver = mb / zi.enc_s / (row.pred_enc_MBs as number);
      const decOver = mb / zi.dec_s / (row.pred_dec_MBs as number);
      encTimes.push(encOver);
      decTimes.push(decOver);
      Object.assign(row, {
        zfp_ratio: +zi.ratio.toFixed(2),
        zfp_rel: +zi.rel.toExponential(3),
        zfp_enc_MBs: +(mb / zi.enc_s).toFixed(1),
        zfp_dec_MBs: +(mb / zi.dec_s).toFixed(1),
        pred_over_zfp: +speedup.toFixed(2),
        enc_time_over_zfp: +encOver.toFixed(2),
        dec_time_over_zfp: +decOver.toFixed(2),
      });
    }
    if (!process.env.SVC_BENCH_NO_TT) {
      const tol = row.tolerance as number;
      const t0 = performance.now();
      const t = await tt.compress(d.data, d.shape, { tolerance: tol, min_ratio: 1 });
      const s = (performance.now() - t0) / 1000;
      const stored = t ? t.cores.reduce((a, c) => a + c.byteLength, 0) : d.data.byteLength;
      Object.assign(row, { tt_ratio: +(d.data.byteLength / stored).toFixed(2), tt_rel: t ? +t.relative_error.toExponential(3) : null, tt_s: +s.toFixed(2) });
    }
    out(row);
  }
}
if (ratios.length) {
  const sorted = [...ratios].sort((a, b) => a - b);
  const median = sorted[Math.floor((sorted.length - 1) / 2)]!;
  out({
    summary: "pred ratio / zfp ratio at the same achieved relative error",
    rows: ratios.length,
    median: +median.toFixed(2),
    min: +sorted[0]!.toFixed(2),
    max: +sorted[sorted.length - 1]!.toFixed(2),
  });
  for (const [what, xs] of [
    ["encode", encTimes],
    ["decode", decTimes],
  ] as const) {
    const t = [...xs].sort((a, b) => a - b);
    out({
      summary: `pred ${what} time / zfp ${what} time (same run, wall clock)`,
      rows: t.length,
      median: +t[Math.floor((t.length - 1) / 2)]!.toFixed(2),
      min: +t[0]!.toFixed(2),
      max: +t[t.length - 1]!.toFixed(2),
    });
  }
}
out({ violations, load: loadavg().map((l) => +l.toFixed(2)) });
rmSync(work, { recursive: true, force: true });
process.exit(violations ? 1 : 0);
