// GET /metrics of the engine over real HTTP on an LMDB store: who may read it (a service key
// or SVC_ENGINE_METRICS_TOKEN, which opens nothing else), and after a few requests every
// metric with the values those requests imply; hostile paths add no route label.
import test from "tape";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine, type RunningEngine } from "../../server/engine/server.js";
import type { Logger } from "../../server/engine/app.js";
import { labelValues, parseProm, valueOf } from "../http/prom.js";

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);
const TOKEN = "metrics-token-" + "fedcba9876543210".repeat(2);
const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };
const dir = mkdtempSync(join(tmpdir(), "svc-engine-metrics-"));
let engine: RunningEngine;

const H = { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/json" };
const post = (path: string, body: unknown, headers: Record<string, string> = H) =>
  fetch(engine.url + path, { method: "POST", headers, body: JSON.stringify(body) });

async function scrape(auth: string | null = TOKEN) {
  const res = await fetch(engine.url + "/metrics", { headers: auth === null ? {} : { authorization: `Bearer ${auth}` } });
  return { status: res.status, type: res.headers.get("content-type"), text: await res.text() };
}

test("setup", async (t) => {
  engine = await startEngine(
    loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: dir, SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_METRICS_TOKEN: TOKEN, SVC_ENGINE_DEVICE: "cpu" }),
    { logger: quiet },
  );
  t.ok(engine.url);
});

test("metrics: readable with a service key or the metrics token only; the token opens nothing else", async (t) => {
  const none = await scrape(null);
  t.equal(none.status, 401);
  t.equal(JSON.parse(none.text).code, "unauthorized");
  t.notOk(none.text.includes("svc_engine_"), "no metrics in the refusal");
  t.equal((await scrape("not-the-token-at-all-0000")).status, 401);
  const byKey = await scrape(KEY);
  t.equal(byKey.status, 200);
  t.match(byKey.type ?? "", /^text\/plain/);
  const byToken = await scrape(TOKEN);
  t.equal(byToken.status, 200);
  const data = await fetch(engine.url + "/v1/list/ns", { headers: { ...H, authorization: `Bearer ${TOKEN}` } });
  t.equal(data.status, 401, "the metrics token is not a service key");
});

test("metrics: requests, compression, reconstruction, core cache and store size after a few requests", async (t) => {
  // a smooth 32^3 float32 tensor (compresses as a TT) and 10,000 random-looking bytes (stored raw)
  const n = 32;
  const smooth = new Float32Array(n * n * n);
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) for (let k = 0; k < n; k++) smooth[(i * n + j) * n + k] = Math.sin(i / 5) * Math.cos(j / 7) + k / n;
  const noise = randomBytes(10_000);
  const p1 = await post("/v1/put", {
    namespace: "ns",
    key: "smooth",
    dtype: "float32",
    shape: [n, n, n],
    data_b64: Buffer.from(smooth.buffer).toString("base64"),
  });
  t.equal(p1.status, 201);
  const put1 = (await p1.json()) as { verdict: string; bytes_in: number };
  t.equal(put1.verdict, "compressed");
  const p2 = await post("/v1/put", { namespace: "ns", key: "noise", data_b64: noise.toString("base64") });
  t.equal(p2.status, 201);
  for (let i = 0; i < 2; i++) t.equal((await post("/v1/serve", { namespace: "ns", key: "smooth" })).status, 200);
  t.equal((await post("/v1/serve", { namespace: "ns", key: "noise" })).status, 200);
  t.equal((await fetch(engine.url + "/v1/get/ns/missing", { headers: H })).status, 404);
  t.equal((await fetch(engine.url + "/v1/get/ns/smooth", { headers: H })).status, 200);
  // hostile paths: each distinct, none may become a label of its own
  for (let i = 0; i < 20; i++) await fetch(`${engine.url}/x${i}-${"%41".repeat(i)}/../etc?i=${i}`, { headers: H });
  for (let i = 0; i < 5; i++) await fetch(`${engine.url}/v1/get/ns/${"k".repeat(i + 1)}/deeper/${i}`, { headers: H });
  t.equal((await fetch(engine.url + "/v1/list/ns", { headers: { "x-svc-tenant": "acme" } })).status, 401);

  const m = await scrape();
  t.equal(m.status, 200);
  const s = parseProm(m.text);
  const req = (route: string, status: string, method = "POST") => valueOf(s, "svc_engine_http_requests_total", { method, route, status });
  t.equal(req("/v1/put", "201"), 2, "two puts");
  t.equal(req("/v1/serve", "200"), 3, "three serves");
  t.equal(req("/v1/get/:namespace/:key*", "200", "GET"), 1);
  t.equal(req("/v1/get/:namespace/:key*", "404", "GET"), 6, "one missing key and five deeper ones, all under one template");
  t.equal(req("other", "404", "GET"), 20, "unknown paths share the label other");
  t.equal(req("/v1/list/:namespace", "401", "GET"), 2, "refused before routing (the metrics token, no key), still under its template");
  t.equal(req("/metrics", "200", "GET"), 2, "earlier scrapes (this one is counted once answered)");
  const routes = labelValues(s, "svc_engine_http_requests_total", "route");
  t.deepEqual(routes, ["/metrics", "/v1/get/:namespace/:key*", "/v1/list/:namespace", "/v1/put", "/v1/serve", "other"], "route labels are templates only");
  t.equal(valueOf(s, "svc_engine_http_request_duration_seconds_count", { method: "POST", route: "/v1/put", status: "201" }), 2);
  const putSum = valueOf(s, "svc_engine_http_request_duration_seconds_sum", { method: "POST", route: "/v1/put", status: "201" })!;
  t.ok(putSum > 0 && putSum < 60, `put latency sum ${putSum} s`);
  t.equal(valueOf(s, "svc_engine_http_request_duration_seconds_bucket", { method: "POST", route: "/v1/put", status: "201", le: "+Inf" }), 2);

  t.equal(valueOf(s, "svc_engine_compress_seconds_count", { codec: "tt" }), 1, "one TT compression");
  t.equal(valueOf(s, "svc_engine_compress_seconds_count", { codec: "raw" }), 1, "one raw put");
  t.equal(valueOf(s, "svc_engine_compress_input_bytes_total", { codec: "tt" }), n * n * n * 4);
  t.equal(valueOf(s, "svc_engine_compress_input_bytes_total", { codec: "raw" }), 10_000);
  t.equal(valueOf(s, "svc_engine_compress_stored_bytes_total", { codec: "raw" }), 10_000);
  const ttStored = valueOf(s, "svc_engine_compress_stored_bytes_total", { codec: "tt" })!;
  t.ok(ttStored > 0 && ttStored < (n * n * n * 4) / 5, `TT stored ${ttStored} bytes, well below the input`);
  t.equal(valueOf(s, "svc_engine_reconstruct_seconds_count", { codec: "tt" }), 2);
  t.equal(valueOf(s, "svc_engine_reconstruct_bytes_total", { codec: "tt" }), 2 * n * n * n * 4);
  t.equal(valueOf(s, "svc_engine_reconstruct_bytes_total", { codec: "raw" }), 10_000);
  const hits = valueOf(s, "svc_engine_core_cache_hits_total")!;
  const misses = valueOf(s, "svc_engine_core_cache_misses_total")!;
  t.equal(misses, 1, "the first serve decodes the cores");
  t.equal(hits, 1, "the second finds them cached");
  const file = valueOf(s, "svc_engine_store_file_bytes")!;
  const used = valueOf(s, "svc_engine_store_used_bytes")!;
  t.ok(used >= 10_000 + ttStored && used <= file, `store used ${used} bytes of a ${file}-byte file`);
  t.ok(valueOf(s, "svc_engine_process_resident_memory_bytes")! > 0, "process metrics are there");
});

test("metrics: large bodies worked on in a worker thread are counted", async (t) => {
  const before = parseProm((await scrape()).text);
  const jobs0 = valueOf(before, "svc_engine_offload_jobs_total")!;
  const bytes0 = valueOf(before, "svc_engine_offload_bytes_total")!;
  const body = { namespace: "ns", key: "large", data_b64: randomBytes(400_000).toString("base64") };
  const size = Buffer.byteLength(JSON.stringify(body));
  t.equal((await post("/v1/put", body)).status, 201, "a 533 KB JSON put");
  t.equal((await post("/v1/put", { namespace: "ns", key: "small", data_b64: "AAAA" })).status, 201, "a small one");
  const after = parseProm((await scrape()).text);
  t.equal(valueOf(after, "svc_engine_offload_jobs_total"), jobs0 + 1, "one job: the large body only");
  t.equal(valueOf(after, "svc_engine_offload_bytes_total"), bytes0 + size, "its bytes");
});

test("teardown", async (t) => {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
  t.pass("closed");
});
