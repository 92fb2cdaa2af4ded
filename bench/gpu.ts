// Benchmark of GPU serving (native/cuda/): reconstruction GB/s of dense float32 output on the
// device, top-K latency over 100,000 resident 64^3 entries, host-to-device load GB/s from
// pinned memory. Targets (H100): >= 500 GB/s for ranks <= 32; < 20 ms; >= 20 GB/s.
// Usage: node --import tsx bench/gpu.ts [reconstruct] [topk] [load]   (SVC_BENCH_BUDGET_S bounds it, default 300)
// Prints the backend/device/machine line first, then one JSON object per figure; without a
// CUDA device it prints that line and a sentence saying why, and exits with status 2.
import { cpus, loadavg, totalmem } from "node:os";
import { CudaDevice } from "../lib/gpu.js";
import { rankScores } from "../lib/store/gpu-cache.js";
import * as tt from "../lib/tt.js";
import type { TT } from "../lib/store/ttapi.js";

const want = process.argv.slice(2);
const on = (name: string) => want.length === 0 || want.includes(name);
const deadline = Date.now() + Number(process.env.SVC_BENCH_BUDGET_S ?? 300) * 1000;
const out = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
const GB = 1e9;

function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296 - 0.5;
  };
}
function randomTT(modes: number[], rank: number, seed: number): TT {
  const r = rng(seed);
  const ranks = [1, ...modes.slice(1).map(() => rank), 1];
  return { modes, ranks, cores: modes.map((n, k) => Float32Array.from({ length: ranks[k]! * n * ranks[k + 1]! }, r)) };
}
/** ‖a − b‖ / ‖b‖ in float64: the error of a device result against the CPU engine's. */
function relDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return Infinity;
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num) / Math.max(Math.sqrt(den), Number.MIN_VALUE);
}
const TOL = 1e-5;
let wrong = 0;
/** Records whether a timed result matched the CPU; a figure on a wrong result is reported as such. */
const verdict = (ok: boolean) => {
  if (!ok) wrong++;
  return ok ? "ok" : "WRONG";
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const b = tt.backend();
const dev = new CudaDevice();
let mem: { free: number; total: number } | null = null;
try {
  mem = b.cuda_device ? dev.memory() : null;
} catch {
  mem = null;
}
out({
  backend: b,
  device: b.cuda_device,
  device_memory: mem,
  machine: {
    cpu: cpus()[0]?.model ?? "unknown",
    cores: cpus().length,
    loadavg_1m: +loadavg()[0]!.toFixed(2),
    mem_GiB: +(totalmem() / 2 ** 30).toFixed(1),
    node: process.version,
  },
});
if (b.cuda_device === null) {
  console.error(`bench/gpu: no CUDA device, nothing to measure (${b.reason}).`);
  process.exit(2);
}

if (on("reconstruct")) {
  for (const n of [256, 512]) {
    for (const rank of [8, 16, 32]) {
      if (Date.now() > deadline) break;
      const t = randomTT([n, n, n], rank, n + rank);
      const h = await dev.load(t);
      const repeats = n === 256 ? 50 : 10;
      const s = await dev.reconstructTimed(h, repeats);
      const bytes = 4 * n ** 3;
      const t0 = performance.now();
      const host = await dev.reconstruct(h, t);
      const e2e = (performance.now() - t0) / 1e3;
      const err = relDiff(host, await tt.reconstruct(t));
      out({
        figure: "reconstruct",
        shape: [n, n, n],
        rank,
        rel_err_vs_cpu: +err.toExponential(2),
        check: verdict(err <= TOL),
        dense_bytes: bytes,
        repeats,
        device_s: s,
        device_GBps: +(bytes / s / GB).toFixed(1),
        with_copy_to_host_GBps: +(host.byteLength / e2e / GB).toFixed(2),
        target_GBps: 500,
      });
      dev.free(h);
    }
  }
}

if (on("load")) {
  for (const [n, rank] of [
    [4096, 1024],
    [8192, 1024],
  ] as const) {
    if (Date.now() > deadline) break;
    const t = randomTT([n, n], rank, 7);
    const bytes = dev.bytesFor(t);
    const runs: { h2d: number; wall: number }[] = [];
    let err = 0;
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      const r = await dev.loadTimed(t);
      runs.push({ h2d: r.h2d_s, wall: (performance.now() - t0) / 1e3 });
      // what arrived: a block at each end of the tensor against the CPU's (the last bytes of a chunked copy included)
      for (const slice of [
        [
          [0, 64],
          [0, 64],
        ],
        [
          [n - 64, n],
          [n - 64, n],
        ],
      ] as [number, number][][])
        err = Math.max(err, relDiff(await dev.reconstruct(r.handle, t, slice), await tt.reconstruct(t, { slice })));
      dev.free(r.handle);
    }
    const h2d = median(runs.map((r) => r.h2d));
    const wall = median(runs.map((r) => r.wall));
    out({
      figure: "load",
      bytes,
      runs: runs.length,
      blocks_rel_err_vs_cpu: +err.toExponential(2),
      check: verdict(err <= TOL),
      pinned_h2d_GBps: +(bytes / h2d / GB).toFixed(1),
      end_to_end_GBps: +(bytes / wall / GB).toFixed(2),
      target_GBps: 20,
    });
  }
}

if (on("topk")) {
  const N = 100_000;
  for (const rank of [8, 16]) {
    if (Date.now() > deadline) break;
    // 100 distinct entries, each loaded 1,000 times: 100,000 separate device allocations
    const distinct = Array.from({ length: 100 }, (_, i) => randomTT([64, 64, 64], rank, 1000 + i));
    const q = randomTT([64, 64, 64], rank, 999);
    const hq = await dev.load(q);
    const handles: number[] = [];
    const t0 = performance.now();
    for (let i = 0; i < N && Date.now() < deadline; i++) handles.push(await dev.load(distinct[i % 100]!));
    const loadS = (performance.now() - t0) / 1e3;
    const norms = new Float64Array(handles.length + 1);
    norms[0] = await tt.norm(q);
    const dn = await Promise.all(distinct.map((d) => tt.norm(d)));
    for (let i = 0; i < handles.length; i++) norms[i + 1] = dn[i % 100]!;
    const lat: number[] = [];
    // the CPU's answer over the same candidates: its scores of the 100 distinct entries, repeated
    const raw100 = await tt.dotBatch(q, distinct);
    const cpu = rankScores(
      Float64Array.from(handles, (_, i) => raw100[i % 100]!),
      norms,
      "cosine",
      10,
    );
    const got = await dev.topk(hq, handles, norms, "cosine", 10); // also the warm-up
    const scoreErr = Math.max(...Array.from(got.score, (v, i) => Math.abs(v - cpu.score[i]!) / Math.abs(cpu.score[i]!)));
    const agree = got.index.length === cpu.index.length && got.index.every((v, i) => v === cpu.index[i]);
    for (let i = 0; i < 20 && Date.now() < deadline; i++) {
      const s0 = performance.now();
      await dev.topk(hq, handles, norms, "cosine", 10);
      lat.push(performance.now() - s0);
    }
    out({
      figure: "topk",
      entries: handles.length,
      shape: [64, 64, 64],
      rank,
      k: 10,
      metric: "cosine",
      same_top_k_as_cpu: agree,
      score_rel_err_vs_cpu: +scoreErr.toExponential(2),
      check: verdict(agree && scoreErr <= TOL),
      runs: lat.length,
      p50_ms: +median(lat).toFixed(2),
      min_ms: +Math.min(...lat).toFixed(2),
      max_ms: +Math.max(...lat).toFixed(2),
      resident_bytes: handles.length * dev.bytesFor(distinct[0]!),
      load_all_s: +loadS.toFixed(1),
      target_ms: 20,
    });
    for (const h of [hq, ...handles]) dev.free(h);
  }
}

if (wrong > 0) {
  console.error(`bench/gpu: ${wrong} figure(s) measured on a result that differs from the CPU's; those figures are void.`);
  process.exit(1);
}
