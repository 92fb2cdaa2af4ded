// GPU serving without a GPU: the gpu_unavailable path (library, engine 501, health, backend
// reason), and the whole serving path (store.serveGpu, handles, LRU through the store, the
// engine's 200 answer) on the in-memory device, whose results must equal the CPU's.
import test from "tape";
import { existsSync, readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { GpuUnavailableError, NotFoundError, ValidationError } from "../../lib/errors.js";
import { CudaDevice, gpuServingFor, gpuStatus } from "../../lib/gpu.js";
import { native } from "../../lib/native.js";
import { createStore } from "../../lib/store/index.js";
import { MemoryDeviceAllocator, deviceBytesOf, gpuServing } from "../../lib/store/gpu-cache.js";
import * as tt from "../../lib/tt.js";
import { createApp, type Logger } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { coresOf, deviceTopkMatchesCpu, randomTT, relDiff, relErr } from "./helpers.js";

const hasDevice = tt.backend().cuda_device !== null;
const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {} };

async function rejects(t: test.Test, p: Promise<unknown>, cls: Function, re: RegExp, msg: string) {
  try {
    await p;
    t.fail(`${msg}: resolved`);
  } catch (e) {
    t.ok(e instanceof cls, `${msg}: ${(e as Error).constructor.name}`);
    t.match((e as Error).message, re, `${msg}: message`);
  }
}

test("gpu status: tt.backend() and gpuStatus() agree and say why there is no device", { skip: hasDevice }, async (t) => {
  const b = tt.backend();
  const s = gpuStatus();
  t.equal(s.device, null, "no device here");
  t.equal(b.cuda_device, null, "backend: no device");
  t.equal(s.compiled, b.cuda_compiled, "compiled flag agrees");
  t.ok(typeof b.reason === "string" && b.reason.length > 10, `backend reason: ${b.reason}`);
  t.equal(s.reason, b.reason, "same reason");
});

test("gpu native surface: entry bytes agree with the cache's accounting; calls without a device reject gpu_unavailable", { skip: hasDevice }, async (t) => {
  const a = randomTT([8, 9, 10], [3, 4], 1);
  t.equal(native().gpuBytesFor(a.ranks, a.modes), deviceBytesOf(a), "native bytes_for == deviceBytesOf");
  const dev = new CudaDevice();
  await rejects(
    t,
    dev.load(a),
    GpuUnavailableError,
    tt.backend().cuda_compiled ? /no usable CUDA device|no CUDA device|disabled/i : /CUDA not compiled in/,
    "load",
  );
  t.throws(() => dev.memory(), GpuUnavailableError, "memory() throws GpuUnavailableError");
  t.equal(native().gpuRelease(12345), false, "releasing an unknown handle is false, not a crash");
  await rejects(t, dev.dot(1, 2), Error, /GPU entry|no usable|not compiled/i, "dot of unknown handles");
  await rejects(t, native().gpuDot(-1 as number, 1) as Promise<unknown>, Error, /GPU handle/, "a bad handle is a bad request");
});

test("gpu build: the addon exports every gpu* function and cuda_compiled matches the CMake build's SVC_WITH_CUDA", async (t) => {
  const fns = ["gpuLoad", "gpuRelease", "gpuReconstruct", "gpuReconstructTimed", "gpuDot", "gpuDotDense", "gpuTopk", "gpuMemory", "gpuBytesFor"];
  const addon = native() as unknown as Record<string, unknown>;
  t.deepEqual(
    fns.filter((f) => typeof addon[f] !== "function"),
    [],
    "all gpu* functions exported",
  );
  const cache = new URL("../../build/CMakeCache.txt", import.meta.url);
  if (!existsSync(cache)) {
    t.skip("no build/CMakeCache.txt (node-gyp build): nothing to compare");
    return;
  }
  const m = /^SVC_WITH_CUDA:BOOL=(ON|OFF)$/m.exec(readFileSync(cache, "utf8"));
  t.ok(m, "CMakeCache.txt records SVC_WITH_CUDA");
  t.equal(tt.backend().cuda_compiled, m?.[1] === "ON", `cuda_compiled is ${tt.backend().cuda_compiled} for SVC_WITH_CUDA=${m?.[1]}`);
});

test("gpu serving config: cpu, cuda:N and a machine without a device are unavailable with the reason", async (t) => {
  const cpu = gpuServingFor("cpu", null);
  t.ok("unavailable" in cpu && /SVC_ENGINE_DEVICE=cpu/.test(cpu.unavailable), "device cpu: disabled by SVC_ENGINE_DEVICE=cpu");
  const other = gpuServingFor("cuda:1", null);
  t.ok("unavailable" in other && /Only CUDA device 0/.test(other.unavailable), "cuda:1: only device 0");
  if (!hasDevice) {
    const auto = gpuServingFor("auto", null);
    t.ok(
      "unavailable" in auto && auto.unavailable.startsWith("No usable CUDA device") && auto.unavailable.endsWith("."),
      `auto here: ${"unavailable" in auto ? auto.unavailable : ""}`,
    );
  }
});

test("store.serveGpu without a device: 404 first for a missing entry, then GpuUnavailableError with the reason", async (t) => {
  const s = await createStore({ path: ":memory:", gpu: { unavailable: "GPU serving is disabled by SVC_ENGINE_DEVICE=cpu." } });
  const a = randomTT([6, 7, 8], [2, 3], 2);
  await s.putCores("ns", "a", coresOf(a));
  await rejects(t, s.serveGpu("ns", "missing"), NotFoundError, /./, "missing key");
  await rejects(t, s.serveGpu("ns", "a"), GpuUnavailableError, /disabled by SVC_ENGINE_DEVICE=cpu/, "no device");
  await rejects(t, s.serveGpu("ns", "a", { version: 0 } as never), ValidationError, /version/, "bad version");
  await rejects(t, s.serveGpu("bad ns!", "a"), ValidationError, /namespace/, "bad namespace");
  if (!hasDevice) {
    const auto = await createStore({ path: ":memory:" });
    await auto.putCores("ns", "a", coresOf(a));
    await rejects(t, auto.serveGpu("ns", "a"), GpuUnavailableError, /No usable CUDA device/, "library default (auto) on this machine");
    await auto.close();
  }
  await s.close();
});

test("store.serveGpu on the in-memory device: handle fields, reconstruct and blocks equal the CPU serve", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 24);
  const s = await createStore({ path: ":memory:", gpu: gpuServing(dev, 1 << 20) });
  const a = randomTT([12, 10, 14], [4, 5], 3);
  await s.putCores("ns", "a", coresOf(a));
  const h = await s.serveGpu("ns", "a");
  t.equal(h.device, "memory:0", "device name");
  t.equal(h.resident, true, "resident");
  t.equal(h.version, 1, "version");
  t.equal(h.bytes_on_device, deviceBytesOf(a), "bytes_on_device");
  t.deepEqual(h.tt, { modes: [12, 10, 14], ranks: [1, 4, 5, 1] }, "tt info");
  const cpu = await s.serve("ns", "a");
  const whole = await h.reconstruct();
  t.deepEqual(whole.shape, cpu.shape, "shape");
  t.ok(relDiff(whole.data as Float32Array, cpu.data as Float32Array) <= 1e-5, "whole tensor equals the CPU serve (1e-5 relative)");
  const slice: [number, number][] = [
    [2, 5],
    [0, 10],
    [7, 14],
  ];
  const blk = await h.reconstruct({ slice });
  const cblk = await s.serve("ns", "a", { slice });
  t.deepEqual(blk.shape, [3, 10, 7], "block shape");
  t.ok(relDiff(blk.data as Float32Array, cblk.data as Float32Array) <= 1e-5, "block equals the CPU block");
  const f64 = await h.reconstruct({ dtype: "float64" });
  t.ok(f64.data instanceof Float64Array && f64.dtype === "float64", "dtype conversion");
  await rejects(
    t,
    h.reconstruct({
      slice: [
        [0, 13],
        [0, 10],
        [0, 14],
      ],
    }),
    ValidationError,
    /beyond dimension size/,
    "slice beyond the shape",
  );
  await rejects(t, h.reconstruct({ slice: [[0, 1]] }), ValidationError, /1 pairs but the entry has 3/, "slice of the wrong rank");
  await rejects(t, h.reconstruct({ version: 1 } as never), ValidationError, /fixed by the handle/, "version is the handle's");
  h.release();
  await s.close();
});

test("store.serveGpu: quantized entries reconstruct blocks on the CPU path with the same result", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 24);
  const s = await createStore({ path: ":memory:", gpu: gpuServing(dev, 1 << 20) });
  const q = randomTT([16, 16, 4], [5, 6], 4);
  await s.putCores("ns", "q", coresOf(q), { shape: [256, 4] });
  const h = await s.serveGpu("ns", "q");
  const slice: [number, number][] = [
    [10, 100],
    [1, 3],
  ];
  const blk = await h.reconstruct({ slice });
  const cpu = await s.serve("ns", "q", { slice });
  t.deepEqual(blk.shape, [90, 2], "block shape");
  t.deepEqual(Array.from(blk.data as Float32Array), Array.from(cpu.data as Float32Array), "same block as the CPU serve");
  const whole = await h.reconstruct();
  t.ok(relDiff(whole.data as Float32Array, (await s.serve("ns", "q")).data as Float32Array) <= 1e-5, "whole quantized tensor equals the CPU");
  h.release();
  await s.close();
});

test("store.serveGpu: dot of two handles and of a handle with a key equal the CPU similarity (dot)", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 24);
  const s = await createStore({ path: ":memory:", gpu: gpuServing(dev, 1 << 20) });
  await s.putCores("ns", "a", coresOf(randomTT([8, 8, 8], [3, 4], 5)));
  await s.putCores("ns", "b", coresOf(randomTT([8, 8, 8], [2, 5], 6)));
  const ha = await s.serveGpu("ns", "a");
  const hb = await s.serveGpu("ns", "b");
  const cpu = (await s.query.similarity("ns", "a", "b", { metric: "dot" })).score;
  t.ok(relErr(await ha.dot(hb), cpu) <= 1e-5, "handle · handle");
  t.ok(relErr(await ha.dot({ key: "b" }), cpu) <= 1e-5, "handle · key");
  hb.release();
  await rejects(t, ha.dot(hb), ValidationError, /released/, "dot with a released handle");
  ha.release();
  ha.release(); // idempotent
  await rejects(t, ha.reconstruct(), ValidationError, /released/, "a released handle refuses work");
  await s.close();
});

test("store.serveGpu: the LRU cache bounds device memory across tenants and versions; raw entries are refused", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 24);
  const a = randomTT([8, 8, 8], [4, 4], 7);
  const size = deviceBytesOf(a);
  const serving = gpuServing(dev, 2 * size);
  const s = await createStore({ path: ":memory:", gpu: serving });
  const t2 = s.forTenant("other");
  await s.putCores("ns", "a", coresOf(a));
  await s.putCores("ns", "a", coresOf(randomTT([8, 8, 8], [4, 4], 8)));
  await t2.putCores("ns", "a", coresOf(a));
  (await s.serveGpu("ns", "a", { version: 1 })).release();
  (await s.serveGpu("ns", "a")).release();
  t.equal(dev.live, 2, "two versions resident");
  (await t2.serveGpu("ns", "a")).release();
  const st = "cache" in serving ? serving.cache.stats() : null;
  t.equal(st?.entries, 2, "bounded to two entries");
  t.equal(st?.evictions, 1, "the least recently used was evicted");
  t.equal(st?.bytes_on_device, dev.usedBytes, "cache and device agree");
  const big = randomTT([8, 8, 8], [8, 8], 9);
  await s.putCores("ns", "big", coresOf(big));
  await rejects(t, s.serveGpu("ns", "big"), GpuUnavailableError, /more than the GPU cache budget/, "an entry above the budget");
  await s.put("ns", "raw", new Float32Array(16).fill(1), { shape: [16] });
  await rejects(t, s.serveGpu("ns", "raw"), ValidationError, /without TT cores/, "raw entry");
  await s.close();
});

async function engine(gpuOpt: Parameters<typeof createApp>[0]["gpu"], env: Record<string, string> = {}, logger: Logger = quiet) {
  const store = await createStore({ path: ":memory:" });
  const config = loadEngineConfig({ SVC_ENGINE_REQUIRE_AUTH: "false", SVC_ENGINE_LOG_LEVEL: "silent", ...env });
  const app = createApp({ store, config, logger, gpu: gpuOpt });
  const server = app.listen(0);
  await new Promise((r) => server.once("listening", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(url + path, {
      method,
      headers: { "content-type": "application/json", "x-svc-tenant": "acme" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, json: (await r.json()) as any };
  };
  const close = async () => {
    await new Promise((r) => server.close(r));
    await store.close();
  };
  return { store, call, close };
}

test("engine: SVC_ENGINE_DEVICE=cpu answers 501 gpu_unavailable naming the reason; health says unavailable", async (t) => {
  const e = await engine(undefined, { SVC_ENGINE_DEVICE: "cpu" });
  await e.store.forTenant("acme").putCores("ns", "a", coresOf(randomTT([6, 6, 6], [2, 2], 10)));
  const r = await e.call("POST", "/v1/serve", { namespace: "ns", key: "a", device: "gpu" });
  t.equal(r.status, 501, "501");
  t.equal(r.json.code, "gpu_unavailable", "code");
  t.match(r.json.detail, /disabled by SVC_ENGINE_DEVICE=cpu/, "detail names the reason");
  const cpu = await e.call("POST", "/v1/serve", { namespace: "ns", key: "a" });
  t.equal(cpu.status, 200, "device cpu still serves");
  const h = await e.call("GET", "/health");
  t.deepEqual(h.json.gpu, { available: false, device: gpuStatus().device, cache_bytes: 0 }, "health gpu");
  await e.close();
});

test("engine: with a device, serve gpu answers 200 with the residency fields and health counts the bytes", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 24);
  const e = await engine(gpuServing(dev, 1 << 20));
  const a = randomTT([6, 7, 8], [2, 3], 11);
  await e.store.forTenant("acme").putCores("ns", "a", coresOf(a));
  const r = await e.call("POST", "/v1/serve", { namespace: "ns", key: "a", device: "gpu" });
  t.equal(r.status, 200, "200");
  t.deepEqual(
    r.json,
    {
      namespace: "ns",
      key: "a",
      version: 1,
      device: "memory:0",
      resident: true,
      bytes_on_device: deviceBytesOf(a),
      tt: { modes: [6, 7, 8], ranks: [1, 2, 3, 1] },
    },
    "body",
  );
  const again = await e.call("POST", "/v1/serve", { namespace: "ns", key: "a", device: "gpu" });
  t.equal(again.status, 200, "second serve: resident");
  t.equal(dev.live, 1, "loaded once");
  const h = await e.call("GET", "/health");
  t.deepEqual(h.json.gpu, { available: true, device: gpuStatus().device, cache_bytes: deviceBytesOf(a) }, "health gpu");
  const sl = await e.call("POST", "/v1/serve", {
    namespace: "ns",
    key: "a",
    device: "gpu",
    slice: [
      [0, 1],
      [0, 1],
      [0, 1],
    ],
  });
  t.equal(sl.status, 400, "slice with device gpu: 400");
  const missing = await e.call("POST", "/v1/serve", { namespace: "ns", key: "nope", device: "gpu" });
  t.equal(missing.status, 404, "missing entry: 404");
  const other = await e.call("POST", "/v1/serve", { namespace: "ns", key: "a", device: "tpu" });
  t.equal(other.status, 400, "unknown device: 400");
  await e.close();
});

test("query.topk with queries on the device equals the CPU ranking; falls back to the CPU when entries do not fit or are not all TT", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 26);
  const serving = gpuServing(dev, 1 << 22, true);
  const g = await createStore({ path: ":memory:", gpu: serving });
  const c = await createStore({ path: ":memory:", gpu: { unavailable: "cpu only" } });
  const q = randomTT([8, 8, 8], [3, 3], 20);
  for (const s of [g, c]) {
    await s.putCores("ns", "q", coresOf(q));
    for (let i = 0; i < 30; i++) await s.putCores("ns", `c${i}`, coresOf(randomTT([8, 8, 8], [1 + (i % 4), 2], 30 + i)));
    await s.putCores("ns", "same", coresOf(q)); // l2 of near-equal tensors takes the exact path
  }
  for (const metric of ["cosine", "dot", "l2"] as const) {
    const a = await g.query.topk("ns", { key: "q", k: 7, metric });
    const b = await c.query.topk("ns", { key: "q", k: 7, metric });
    t.deepEqual(
      a.results.map((r) => r.key),
      b.results.map((r) => r.key),
      `${metric}: same keys in the same order`,
    );
    t.ok(
      a.results.every((r, i) => relErr(r.score, b.results[i]!.score) <= 1e-5 || Math.abs(r.score - b.results[i]!.score) <= 1e-9),
      `${metric}: same scores`,
    );
    t.equal(a.scanned, b.scanned, `${metric}: scanned`);
  }
  const st = "cache" in serving ? serving.cache.stats() : null;
  t.equal(st?.entries, 32, "the query and every candidate became resident");
  t.equal(st?.pinned, 0, "no pins left after the queries");
  t.ok((st?.hits ?? 0) >= 64, "later queries found the entries resident");
  // a cache too small for the candidates: the CPU answers the same
  const small = await createStore({ path: ":memory:", gpu: gpuServing(new MemoryDeviceAllocator(1 << 26), 3000, true) });
  await small.putCores("ns", "q", coresOf(q));
  for (let i = 0; i < 30; i++) await small.putCores("ns", `c${i}`, coresOf(randomTT([8, 8, 8], [1 + (i % 4), 2], 30 + i)));
  await small.putCores("ns", "same", coresOf(q));
  const sm = await small.query.topk("ns", { key: "q", k: 7 });
  t.deepEqual(
    sm.results.map((r) => r.key),
    (await c.query.topk("ns", { key: "q", k: 7 })).results.map((r) => r.key),
    "over the budget: CPU ranking",
  );
  // a raw candidate of the same shape: CPU path for the query, same answer
  const raw = await tt.reconstruct(q);
  for (const s of [g, c]) await s.put("ns", "raw", raw as Float32Array, { shape: [8, 8, 8] });
  const ga = await g.query.topk("ns", { key: "q", k: 3 });
  const ca = await c.query.topk("ns", { key: "q", k: 3 });
  t.deepEqual(
    ga.results.map((r) => r.key),
    ca.results.map((r) => r.key),
    "mixed candidates: same answer",
  );
  for (const s of [g, c, small]) await s.close();
});

test("query.topk on the in-memory device: entries whose norms lie far from 1 are scored on the CPU, with the CPU's answer", async (t) => {
  await deviceTopkMatchesCpu(t, gpuServing(new MemoryDeviceAllocator(1 << 26), 1 << 22, true));
});

test("engine: SVC_ENGINE_DEVICE=cuda without a device and cuda:1 answer 501 with the reason; cuda logs it once at warn", { skip: hasDevice }, async (t) => {
  const warns: Record<string, unknown>[] = [];
  const logger: Logger = { ...quiet, warn: (f) => warns.push(f) };
  const e = await engine(undefined, { SVC_ENGINE_DEVICE: "cuda" }, logger);
  await e.store.forTenant("acme").putCores("ns", "a", coresOf(randomTT([6, 6, 6], [2, 2], 12)));
  const r = await e.call("POST", "/v1/serve", { namespace: "ns", key: "a", device: "gpu" });
  t.equal(r.status, 501, "cuda without a device: 501");
  t.match(r.json.detail, /^No usable CUDA device: .+\.$/, `detail: ${r.json.detail}`);
  t.equal(warns.length, 1, "one warning at start-up");
  t.equal(warns[0]?.msg, "gpu unavailable", "warning names the condition");
  const topk = await e.call("POST", "/v1/query/topk", { namespace: "ns", key: "a", include_self: true });
  t.equal(topk.status, 200, "query.topk still answers on the CPU");
  t.equal(topk.json.results[0]?.key, "a", "and finds the entry");
  await e.close();
  const e1 = await engine(undefined, { SVC_ENGINE_DEVICE: "cuda:1" });
  await e1.store.forTenant("acme").putCores("ns", "a", coresOf(randomTT([6, 6, 6], [2, 2], 12)));
  const r1 = await e1.call("POST", "/v1/serve", { namespace: "ns", key: "a", device: "gpu" });
  t.ok(r1.status === 501 && /Only CUDA device 0/.test(r1.json.detail), "cuda:1: 501, only device 0");
  await e1.close();
});
