// The store's choice of codec for floating data (docs/store.md "Codec policy"): each data set
// is put with codec auto, tt and pred (an in-memory store, tolerance 1e-3 unless the row says
// otherwise), and every row prints the codec kept, the verdict, the ratio, the time of the put
// and the errors of what serve gives back, measured here in float64 against the input (a row
// whose served errors break the bound or differ from the reported ones says so in `check`).
// `auto_cost` is the auto put's time over the time of the put forced to the codec it chose:
// what deciding costs.
// Data: a smooth field and white noise (64³), a synthetic photograph (512², flat regions,
// edges, shading, sensor noise), 128³ noise (8 MiB: auto estimates the prediction ratio from
// samples there instead of encoding twice) and, when Debian's mricron-data is installed, the
// Colin27 T1 MRI volume (181×217×181).
// Times are medians of SVC_BENCH_REPS puts (default 5; one for data sets over 8 MiB), the
// three codecs taking turns.
// Usage: node --import tsx bench/codec-choice.ts [dataset ...]; SVC_BENCH_FORCED_TT_MAX_MIB
// (default 64) leaves out the forced TT put of larger data sets.
import { existsSync, readFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { gunzipSync } from "node:zlib";
import * as tt from "../lib/tt.js";
import { createStore } from "../lib/store/index.js";
import type { PutOptions } from "../lib/schemas.js";
import { gaussian } from "../test/tt/helpers.js";

const MRI = "/usr/share/mricron/templates/ch2.nii.gz";
const FORCED_TT_MAX = Number(process.env.SVC_BENCH_FORCED_TT_MAX_MIB ?? 64) * 2 ** 20;
const REPS = Number(process.env.SVC_BENCH_REPS ?? 5);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const want = process.argv.slice(2);
const b = tt.backend();
console.log(
  JSON.stringify({
    bench: "codec-choice",
    isa: b.isa,
    threads: b.threads,
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model ?? "unknown",
    mem_gib: Math.round(totalmem() / 2 ** 30),
    load: loadavg().map((x) => Math.round(x * 10) / 10),
  }),
);

interface Dataset {
  name: string;
  shape: number[];
  data: Float32Array;
}

function smooth(n: number): Float32Array {
  const out = new Float32Array(n ** 3);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++)
      for (let k = 0; k < n; k++)
        out[(i * n + j) * n + k] =
          Math.sin((i + 1) / 5) * Math.sin((j + 1) / 6) * Math.sin((k + 1) / 7) + 0.5 * Math.cos(i / 7) * Math.cos(j / 9) * Math.cos(k / 11);
  return out;
}
const noise = (n: number, seed: number) => {
  const g = gaussian(seed);
  return Float32Array.from({ length: n }, () => g());
};
function photo(h: number, w: number): Float32Array {
  const g = gaussian(3);
  return Float32Array.from({ length: h * w }, (_, q) => {
    const y = Math.floor(q / w),
      x = q % w;
    return (Math.hypot(x - 0.4 * w, y - 0.5 * h) < h / 4 ? 180 : 60) + 40 * Math.sin(x / 23) * Math.cos(y / 31) + (x > 0.7 * w ? 50 : 0) + 3 * g();
  });
}
/** The NIfTI-1 volume as float32, in C order over the reversed dimensions. */
function nifti(path: string): Dataset {
  const buf = gunzipSync(readFileSync(path));
  const dims = Array.from({ length: buf.readInt16LE(40) }, (_, i) => buf.readInt16LE(42 + 2 * i));
  const code = buf.readInt16LE(70);
  const off = Math.round(buf.readFloatLE(108));
  const n = dims.reduce((a, c) => a * c, 1);
  const read: Record<number, (i: number) => number> = {
    2: (i) => buf.readUInt8(off + i),
    4: (i) => buf.readInt16LE(off + 2 * i),
    16: (i) => buf.readFloatLE(off + 4 * i),
    512: (i) => buf.readUInt16LE(off + 2 * i),
  };
  const r = read[code];
  if (!r) throw new Error(`NIfTI data type ${code} is not read by this bench.`);
  return { name: "mri", shape: [...dims].reverse(), data: Float32Array.from({ length: n }, (_, i) => r(i)) };
}

const sets: Record<string, () => Dataset | null> = {
  smooth: () => ({ name: "smooth", shape: [64, 64, 64], data: smooth(64) }),
  noise: () => ({ name: "noise", shape: [64, 64, 64], data: noise(64 ** 3, 1) }),
  photo: () => ({ name: "photo", shape: [512, 512], data: photo(512, 512) }),
  noise128: () => ({ name: "noise128", shape: [128, 128, 128], data: noise(128 ** 3, 2) }),
  mri: () => {
    if (existsSync(MRI)) return nifti(MRI);
    console.log(JSON.stringify({ dataset: "mri", skipped: `${MRI} is absent (Debian: apt-get install mricron-data).` }));
    return null;
  },
};

/** Relative Frobenius and largest element error of `y` against `x`, in float64. */
function errs(x: Float32Array, y: ArrayLike<number>): { rel: number; abs: number } {
  let num = 0,
    den = 0,
    abs = 0;
  for (let i = 0; i < x.length; i++) {
    const d = x[i]! - y[i]!;
    num += d * d;
    den += x[i]! * x[i]!;
    abs = Math.max(abs, Math.abs(d));
  }
  return { rel: Math.sqrt(num / den), abs };
}

const store = await createStore({ path: ":memory:" });
// the first put of each codec loads the addon's code paths: not timed
for (const codec of ["tt", "pred", "auto"] as const) await store.put("warm", codec, smooth(16), { shape: [16, 16, 16], codec });
for (const name of want.length ? want : Object.keys(sets)) {
  const make = sets[name];
  if (!make) {
    console.error(`Unknown data set ${name}; available: ${Object.keys(sets).join(", ")}.`);
    process.exit(2);
  }
  const d = make();
  if (!d) continue;
  let max = 0;
  for (const v of d.data) max = Math.max(max, Math.abs(v));
  for (const bound of [{ tolerance: 1e-3 }, { max_abs_error: 1e-3 * max }] as PutOptions[]) {
    const codecs = (["auto", "tt", "pred"] as const).filter((codec) => {
      if (codec !== "tt" || d.data.byteLength <= FORCED_TT_MAX) return true;
      console.log(JSON.stringify({ dataset: d.name, codec, skipped: "larger than SVC_BENCH_FORCED_TT_MAX_MIB" }));
      return false;
    });
    // the codecs take turns within each repetition, so that a change in the machine's load
    // falls on all of them alike
    const secs = new Map<string, number[]>(codecs.map((c) => [c, []]));
    const last = new Map<string, Awaited<ReturnType<typeof store.put>>>();
    for (let rep = 0; rep < (d.data.byteLength > 8 * 2 ** 20 ? 1 : REPS); rep++) {
      for (const codec of codecs) {
        const t0 = performance.now();
        last.set(codec, await store.put("b", `${d.name}-${codec}`, d.data, { shape: d.shape, codec, ...bound }));
        secs.get(codec)!.push((performance.now() - t0) / 1000);
      }
    }
    for (const codec of codecs) {
      const key = `${d.name}-${codec}`;
      const r = last.get(codec)!;
      const e = errs(d.data, (await store.serve("b", key)).data as Float32Array);
      const within = (bound.tolerance === undefined || e.rel <= bound.tolerance) && (bound.max_abs_error === undefined || e.abs <= bound.max_abs_error);
      const reported = Math.abs(e.rel - r.relative_error) <= 1e-6 * e.rel + 1e-15 && e.abs === r.max_abs_error;
      console.log(
        JSON.stringify({
          dataset: d.name,
          shape: d.shape,
          mib: Math.round((d.data.byteLength / 2 ** 20) * 100) / 100,
          bound,
          codec,
          kept: r.fingerprint.codec,
          verdict: r.verdict,
          ratio: Math.round(r.compression_ratio * 100) / 100,
          put_s: Math.round(median(secs.get(codec)!) * 1000) / 1000,
          reps: secs.get(codec)!.length,
          relative_error: Number(e.rel.toPrecision(3)),
          max_abs_error: Number(e.abs.toPrecision(3)),
          check: within && reported ? "ok" : within ? "errors differ from the reported ones" : "BOUND VIOLATED",
        }),
      );
      await store.delete("b", key);
    }
    const chosen = last.get("auto")!.fingerprint.codec;
    if (chosen === "tt" || chosen === "pred") {
      const ratio = median(secs.get("auto")!) / median(secs.get(chosen)!);
      console.log(JSON.stringify({ dataset: d.name, bound, auto_kept: chosen, auto_cost: Math.round(ratio * 100) / 100 }));
    }
  }
}
await store.close();
