// The CUDA kernels against the CPU oracle (lib/tt.ts): load, whole and block reconstruction,
// TT·TT and TT·dense inner products, batched top-K, and the store's serveGpu on the device.
// Every result must equal the CPU's within 1e-5 relative. Skipped where tt.backend() finds no
// CUDA device (the skip message says why).
import test from "tape";
import { GpuUnavailableError, ValidationError } from "../../lib/errors.js";
import { CudaDevice, gpuServingFor } from "../../lib/gpu.js";
import { createStore } from "../../lib/store/index.js";
import { deviceBytesOf, gpuServing, rankScores } from "../../lib/store/gpu-cache.js";
import * as tt from "../../lib/tt.js";
import type { TT } from "../../lib/store/ttapi.js";
import { coresOf, deviceTopkMatchesCpu, randomTT, relDiff, relErr } from "./helpers.js";

const b = tt.backend();
const skip = b.cuda_device === null;

/** A test that runs only with a CUDA device; elsewhere it reports one skipped assertion saying why. */
function cudaTest(name: string, fn: (t: test.Test) => Promise<void>): void {
  if (!skip) return void test(name, fn);
  test(name, (t) => {
    t.skip(`no CUDA device: ${b.reason}`);
    t.end();
  });
}

/**
 * The query and candidates loaded, every candidate scored by one device top-K and by the CPU's
 * dotBatch: the number scored, the CPU's scores, and the worst difference, relative to the score
 * or to 1e-3 of the norms' product where a score is near zero by chance. The caller frees the handles.
 */
async function scoreAll(dev: CudaDevice, q: TT, cands: TT[]): Promise<{ hq: number; hs: number[]; raw: Float64Array; scored: number; worst: number }> {
  const hq = await dev.load(q);
  const hs: number[] = [];
  for (const c of cands) hs.push(await dev.load(c));
  const raw = await tt.dotBatch(q, cands);
  const got = await dev.topk(hq, hs, null, "dot", cands.length);
  const byIndex = new Float64Array(cands.length);
  got.index.forEach((j, i) => (byIndex[j] = got.score[i]!));
  const qn = await tt.norm(q);
  const cn = await Promise.all(cands.map((c) => tt.norm(c)));
  const worst = Math.max(...Array.from(raw, (v, j) => Math.abs(byIndex[j]! - v) / Math.max(Math.abs(v), 1e-3 * qn * cn[j]!)));
  return { hq, hs, raw, scored: got.index.length, worst };
}

const CASES: [number[], number[]][] = [
  [[37], []],
  [[5, 7], [3]],
  [
    [64, 64, 64],
    [16, 16],
  ],
  [
    [33, 65, 17],
    [32, 7],
  ],
  [
    [10, 11, 12, 13],
    [4, 32, 5],
  ],
  [
    [2, 2, 2, 2, 2, 2, 2, 2, 2, 2],
    [2, 4, 8, 16, 32, 16, 8, 4, 2],
  ],
];

cudaTest("cuda: whole reconstruction equals the CPU for every case (1e-5 relative)", async (t) => {
  const dev = new CudaDevice();
  for (const [i, [modes, inner]] of CASES.entries()) {
    const a = randomTT(modes, inner, 100 + i);
    const h = await dev.load(a);
    const gpu = await dev.reconstruct(h, a);
    const cpu = await tt.reconstruct(a);
    t.ok(gpu instanceof Float32Array && gpu.length === cpu.length, `modes [${modes}]: length ${gpu.length}`);
    const e = relDiff(gpu, cpu);
    t.ok(e <= 1e-5, `modes [${modes}] ranks [${a.ranks}]: relative difference ${e.toExponential(2)}`);
    dev.free(h);
  }
});

cudaTest("cuda: float64 cores are loaded as float32 and still match (1e-5)", async (t) => {
  const dev = new CudaDevice();
  const a32 = randomTT([20, 21, 22], [6, 7], 7);
  const a = { ...a32, cores: a32.cores.map((c) => Float64Array.from(c)) };
  const h = await dev.load(a);
  t.ok(relDiff(await dev.reconstruct(h, a), await tt.reconstruct(a)) <= 1e-5, "float64 entry");
  dev.free(h);
});

cudaTest("cuda: blocks equal the CPU's blocks; quantized entries refuse device blocks", async (t) => {
  const dev = new CudaDevice();
  const a = randomTT([33, 65, 17], [32, 7], 8);
  const h = await dev.load(a);
  for (const slice of [
    [
      [0, 33],
      [0, 65],
      [0, 17],
    ],
    [
      [3, 4],
      [10, 60],
      [0, 17],
    ],
    [
      [0, 33],
      [64, 65],
      [5, 9],
    ],
    [
      [32, 33],
      [0, 1],
      [16, 17],
    ],
  ] as [number, number][][]) {
    const gpu = await dev.reconstruct(h, a, slice);
    const cpu = await tt.reconstruct(a, { slice });
    t.ok(relDiff(gpu, cpu) <= 1e-5 && gpu.length === cpu.length, `slice ${JSON.stringify(slice)}`);
  }
  const q = randomTT([16, 16, 4], [5, 6], 9, [256, 4]);
  const hq = await dev.load(q);
  t.ok(relDiff(await dev.reconstruct(hq, q), await tt.reconstruct(q)) <= 1e-5, "quantized whole tensor on the device");
  try {
    await dev.reconstruct(hq, q, [
      [0, 10],
      [0, 4],
    ]);
    t.fail("should refuse");
  } catch (e) {
    t.ok(e instanceof GpuUnavailableError, "quantized block: refused (the store uses the CPU)");
  }
  dev.free(h);
  dev.free(hq);
});

cudaTest("cuda: TT·TT and TT·dense inner products equal the CPU (1e-5)", async (t) => {
  const dev = new CudaDevice();
  for (const [i, [modes, inner]] of CASES.entries()) {
    const a = randomTT(modes, inner, 200 + i);
    const c = randomTT(
      modes,
      inner.map((r) => Math.max(1, r - 1)),
      300 + i,
    );
    const ha = await dev.load(a);
    const hc = await dev.load(c);
    const cpu = await tt.dot(a, c);
    const gpu = await dev.dot(ha, hc);
    t.ok(relErr(gpu, cpu) <= 1e-5, `dot modes [${modes}]: ${gpu} vs ${cpu}`);
    const self = await dev.dot(ha, ha);
    t.ok(relErr(self, await tt.dot(a, a)) <= 1e-5, `self dot modes [${modes}]`);
    const x = await tt.reconstruct(c);
    const dd = await dev.dotDense(ha, x);
    const cd = await tt.dotDense(a, x);
    t.ok(relErr(dd, cd) <= 1e-5, `dotDense modes [${modes}]: ${dd} vs ${cd}`);
    dev.free(ha);
    dev.free(hc);
  }
});

cudaTest("cuda: batched top-K over resident entries equals the CPU ranking for each metric", async (t) => {
  const dev = new CudaDevice();
  const modes = [16, 16, 16];
  const q = randomTT(modes, [8, 8], 400);
  const cands = Array.from({ length: 300 }, (_, i) => randomTT(modes, [1 + (i % 8), 1 + ((i * 3) % 8)], 500 + i));
  const hq = await dev.load(q);
  const hs = [];
  for (const c of cands) hs.push(await dev.load(c));
  const raw = await tt.dotBatch(q, cands);
  const norms = new Float64Array(cands.length + 1);
  for (const [i, x] of [q, ...cands].entries()) norms[i] = await tt.norm(x);
  for (const metric of ["dot", "cosine", "l2"] as const) {
    const gpu = await dev.topk(hq, hs, metric === "dot" ? null : norms, metric, 10);
    const cpu = rankScores(raw, norms, metric, 10);
    t.deepEqual(Array.from(gpu.index), Array.from(cpu.index), `${metric}: same top 10`);
    t.ok(
      Array.from(gpu.score).every((s, i) => relErr(s, cpu.score[i]!) <= 1e-5),
      `${metric}: same scores`,
    );
  }
  const all = await dev.topk(hq, hs, null, "dot", 1000);
  t.equal(all.index.length, 300, "k above the candidates: every candidate");
  for (const h of [hq, ...hs]) dev.free(h);
});

cudaTest("cuda: inner products at ranks of several tiles per lane, and batches that end inside a block", async (t) => {
  const dev = new CudaDevice();
  // rank 70 leaves room for one warp per block; 48 for one or two; odd sizes leave partial tiles
  for (const [modes, inner] of [
    [
      [9, 7, 5],
      [48, 33],
    ],
    [
      [6, 5, 4, 3],
      [70, 61, 12],
    ],
    [[3, 130], [3]],
  ] as [number[], number[]][]) {
    const a = randomTT(modes, inner, 800 + modes.length);
    const c = randomTT(
      modes,
      inner.map((r) => Math.max(1, r - 5)),
      900 + modes.length,
    );
    const [ha, hc] = [await dev.load(a), await dev.load(c)];
    const gpu = await dev.dot(ha, hc);
    const cpu = await tt.dot(a, c);
    t.ok(relErr(gpu, cpu) <= 1e-5, `dot ranks [${a.ranks}] x [${c.ranks}]: ${gpu} vs ${cpu}`);
    dev.free(ha);
    dev.free(hc);
  }
  const modes = [12, 10, 8];
  const q = randomTT(modes, [11, 9], 950);
  const cands = Array.from({ length: 1001 }, (_, i) => randomTT(modes, [1 + (i % 13), 1 + ((i * 7) % 11)], 2000 + i));
  const all = await scoreAll(dev, q, cands);
  t.equal(all.scored, 1001, "every one of 1,001 candidates scored");
  t.ok(all.worst <= 1e-5, `every score equals the CPU's (worst relative difference ${all.worst.toExponential(2)})`);
  for (const h of [all.hq, ...all.hs]) dev.free(h);
});

cudaTest("cuda: tensor-core inner products (every rank up to 16) equal the CPU for TTs of 1 to 6 modes", async (t) => {
  const dev = new CudaDevice();
  // ranks up to 8 and up to 16 take the two tensor-core widths; modes not multiples of 4 leave
  // partial k-steps in the first and last modes; 17 takes the shared-memory kernel
  for (const [s, [modes, inner]] of (
    [
      [[7], []],
      [[5, 9], [6]],
      [
        [3, 17, 6],
        [3, 9],
      ],
      [
        [4, 5, 6, 7],
        [8, 16, 5],
      ],
      [
        [3, 4, 5, 3, 2],
        [3, 12, 15, 2],
      ],
      [
        [2, 130, 1, 3, 2, 2],
        [2, 1, 1, 6, 4],
      ],
      [
        [6, 6, 6],
        [16, 17],
      ],
    ] as [number[], number[]][]
  ).entries()) {
    const q = randomTT(modes, inner, 3000 + s);
    // candidates of every smaller rank profile, and one as large as the query
    const cands = Array.from({ length: 9 }, (_, i) =>
      randomTT(
        modes,
        inner.map((r, k) => (i === 8 ? r : Math.max(1, Math.min(r, 1 + ((i * 5 + k * 3) % 16))))),
        3100 + 10 * s + i,
      ),
    );
    const { hq, hs, raw, worst } = await scoreAll(dev, q, cands);
    t.ok(worst <= 1e-5, `modes [${modes}] ranks [${q.ranks}]: every score equals the CPU's (worst ${worst.toExponential(2)})`);
    const one = await dev.dot(hq, hs[8]!);
    t.ok(relErr(one, raw[8]!) <= 1e-5, `modes [${modes}]: dot of one pair ${one} vs ${raw[8]}`);
    for (const h of [hq, ...hs]) dev.free(h);
  }
});

cudaTest("cuda: bad handles, released handles and mismatched modes are clear errors", async (t) => {
  const dev = new CudaDevice();
  const a = randomTT([8, 8], [4], 600);
  const c = randomTT([4, 16], [4], 601);
  const ha = await dev.load(a);
  const hc = await dev.load(c);
  await dev.dot(ha, hc).then(
    () => t.fail("modes differ"),
    (e) => t.ok(e instanceof ValidationError, "other modes: ValidationError"),
  );
  dev.free(hc);
  await dev.dot(ha, hc).then(
    () => t.fail("released"),
    (e) => t.ok(e instanceof ValidationError && /not a resident/.test(e.message), "released handle"),
  );
  await dev.dotDense(ha, new Float32Array(3)).then(
    () => t.fail("size"),
    (e) => t.ok(e instanceof ValidationError, "dense of the wrong size"),
  );
  const m = dev.memory();
  t.ok(m.free > 0 && m.free <= m.total, `memory: ${m.free} free of ${m.total}`);
  t.ok((await dev.reconstructTimed(ha, 3)) > 0, "timed reconstruction reports seconds");
  dev.free(ha);
});

cudaTest("cuda: store.serveGpu on the device equals the CPU serve; cache accounting matches the device bytes", async (t) => {
  const serving = gpuServingFor("cuda", 64 << 20);
  t.ok("cache" in serving, "serving available");
  const s = await createStore({ path: ":memory:", gpu: serving });
  const a = randomTT([40, 30, 20], [12, 9], 700);
  await s.putCores("ns", "a", coresOf(a));
  await s.putCores("ns", "b", coresOf(randomTT([40, 30, 20], [5, 6], 701)));
  const h = await s.serveGpu("ns", "a");
  t.equal(h.device, "cuda:0", "device");
  t.equal(h.bytes_on_device, deviceBytesOf(a), "bytes_on_device");
  t.ok(relDiff((await h.reconstruct()).data as Float32Array, (await s.serve("ns", "a")).data as Float32Array) <= 1e-5, "reconstruct");
  const hb = await s.serveGpu("ns", "b");
  t.ok(relErr(await h.dot(hb), (await s.query.similarity("ns", "a", "b", { metric: "dot" })).score) <= 1e-5, "dot");
  h.release();
  hb.release();
  if ("cache" in serving) {
    t.equal(serving.cache.stats().bytes_on_device, h.bytes_on_device + hb.bytes_on_device, "cache bytes: both entries");
    t.equal(serving.cache.clear(), h.bytes_on_device + hb.bytes_on_device, "clear frees both");
  }
  await s.close();
  t.ok(gpuServing(new CudaDevice(), 1) !== null, "a tiny budget is accepted (entries are then refused)");
});

cudaTest("cuda: query.topk with SVC_ENGINE_DEVICE=cuda equals the CPU ranking; entries whose norms lie far from 1 are scored on the CPU", async (t) => {
  await deviceTopkMatchesCpu(t, gpuServingFor("cuda", 64 << 20));
});
