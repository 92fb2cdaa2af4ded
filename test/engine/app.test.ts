// The engine over real HTTP on an ephemeral port: every verb on integer and byte data,
// both octet-stream forms, the service key (401), X-SVC-Tenant (400 and scoping), 413
// from Content-Length and while streaming, 415, error bodies, access logs, and TLS.
import test from "tape";
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, fetch as ufetch } from "undici";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine, type RunningEngine } from "../../server/engine/server.js";
import type { Logger } from "../../server/engine/app.js";
import { selfSignedCert } from "../lib/self-signed.js";

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "svc-engine-"));
  dirs.push(d);
  return d;
};
const logs: Record<string, unknown>[] = [];
const logger: Logger = {
  debug: (f) => logs.push({ level: "debug", ...f }),
  info: (f) => logs.push({ level: "info", ...f }),
  warn: (f) => logs.push({ level: "warn", ...f }),
  error: (f) => logs.push({ level: "error", ...f }),
};

async function start(env: Record<string, string> = {}): Promise<RunningEngine> {
  return startEngine(loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: tmp(), SVC_ENGINE_API_KEYS: `other-${KEY},${KEY}`, ...env }), { logger });
}

const H = (tenant = "acme", extra: Record<string, string> = {}) => ({
  authorization: `Bearer ${KEY}`,
  "x-svc-tenant": tenant,
  "content-type": "application/json",
  ...extra,
});

async function call(e: RunningEngine, method: string, path: string, body?: unknown, headers: Record<string, string> = H()) {
  const res = await fetch(e.url + path, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, json, headers: res.headers };
}

const b64 = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("base64");
const isErrorBody = (j: any, code: string) =>
  j && j.code === code && typeof j.detail === "string" && /^[0-9a-f-]{36}$/.test(j.request_id) && Object.keys(j).length === 3;

test("engine: health without authentication", async (t) => {
  const e = await start();
  const r = await call(e, "GET", "/health", undefined, {});
  t.equal(r.status, 200, "200");
  t.equal(r.json.status, "ok", "status ok");
  t.ok(Number.isInteger(r.json.uptime_s), "uptime_s integer");
  t.deepEqual(Object.keys(r.json.gpu).sort(), ["available", "cache_bytes", "device"], "gpu fields");
  t.equal(r.json.storage, "lmdb", "storage backend name");
  await e.close();
});

test("engine: service key and tenant header", async (t) => {
  const e = await start();
  const body = { namespace: "default", key: "k", data_b64: b64(new Uint8Array([1, 2, 3])) };
  const none = await call(e, "POST", "/v1/put", body, { "x-svc-tenant": "acme", "content-type": "application/json" });
  t.equal(none.status, 401, "missing key: 401");
  t.ok(isErrorBody(none.json, "unauthorized"), "error body");
  const wrong = await call(e, "POST", "/v1/put", body, H("acme", { authorization: `Bearer ${KEY}x` }));
  t.equal(wrong.status, 401, "wrong key: 401");
  t.notOk(JSON.stringify(wrong.json).includes(KEY), "the key never appears in an error body");
  const other = await call(e, "POST", "/v1/put", body, H("acme", { authorization: `Bearer other-${KEY}` }));
  t.equal(other.status, 201, "every configured key is accepted");
  const noTenant = await call(e, "POST", "/v1/put", body, { authorization: `Bearer ${KEY}`, "content-type": "application/json" });
  t.equal(noTenant.status, 400, "missing X-SVC-Tenant: 400");
  t.ok(isErrorBody(noTenant.json, "bad_request") && /X-SVC-Tenant/.test(noTenant.json.detail), "detail names the header");
  const badTenant = await call(e, "GET", "/v1/get/default/k", undefined, H("Not Valid"));
  t.equal(badTenant.status, 400, "invalid tenant id: 400");
  // scoping: acme's entry is invisible to bravo
  t.equal((await call(e, "GET", "/v1/get/default/k")).status, 200, "acme sees its entry");
  t.equal((await call(e, "GET", "/v1/get/default/k", undefined, H("bravo"))).status, 404, "bravo does not");
  t.equal((await call(e, "GET", "/v1/list/default", undefined, H("bravo"))).json.total, 0, "nor lists it");
  await e.close();
  const open = await start({ SVC_ENGINE_REQUIRE_AUTH: "false", SVC_ENGINE_API_KEYS: "" });
  const r = await call(open, "GET", "/v1/list/default", undefined, { "x-svc-tenant": "acme" });
  t.equal(r.status, 200, "SVC_ENGINE_REQUIRE_AUTH=false lets requests without a key through");
  await open.close();
});

test("engine: put, get, list, search, serve, delete over JSON", async (t) => {
  const e = await start();
  const data = Int32Array.from({ length: 4096 }, (_, i) => i >> 3);
  const put = await call(e, "POST", "/v1/put", {
    namespace: "default",
    key: "run/a",
    data_b64: b64(data),
    dtype: "int32",
    shape: [64, 64],
    metadata: { seed: 3, kind: "x" },
  });
  t.equal(put.status, 201, "put 201");
  t.deepEqual(
    Object.keys(put.json).sort(),
    [
      "bytes_in",
      "bytes_stored",
      "compressed",
      "compression_ratio",
      "dtype",
      "fingerprint",
      "key",
      "max_abs_error",
      "namespace",
      "relative_error",
      "shape",
      "tt",
      "verdict",
      "version",
    ],
    "put response fields",
  );
  t.deepEqual([put.json.version, put.json.verdict, put.json.fingerprint.codec], [1, "lossless", "lossless"], "lossless int32");
  const blob = await call(e, "POST", "/v1/put", { namespace: "default", key: "blob", data_b64: Buffer.from("hello").toString("base64") });
  t.deepEqual([blob.status, blob.json.dtype, blob.json.shape, blob.json.verdict], [201, "bytes", [5], "passthrough"], "dtype defaults to bytes");
  const conflict = await call(e, "POST", "/v1/put", { namespace: "default", key: "run/a", data_b64: b64(data), dtype: "int32", shape: [4096], if_version: 0 });
  t.equal(conflict.status, 409, "if_version mismatch: 409");
  t.ok(isErrorBody(conflict.json, "version_conflict"), "version_conflict body");
  const get = await call(e, "GET", "/v1/get/default/run/a");
  t.deepEqual(
    [get.status, get.json.key, get.json.version, get.json.versions, get.json.metadata],
    [200, "run/a", 1, [1], { seed: 3, kind: "x" }],
    "get by path with a slash in the key",
  );
  t.equal((await call(e, "GET", "/v1/get/default/run%2Fa?version=1")).json.key, "run/a", "percent-decoded key, version query");
  t.equal((await call(e, "GET", "/v1/get/default/run/a?version=2")).status, 404, "unknown version 404");
  t.equal((await call(e, "GET", "/v1/get/default/run/a?version=x")).status, 400, "bad version 400");
  t.equal((await call(e, "GET", "/v1/get/default/run/a?verison=1")).status, 400, "unknown query parameter 400");
  const list = await call(e, "GET", "/v1/list/default?prefix=run/&limit=5");
  t.deepEqual([list.status, list.json.keys.map((k: any) => k.key), list.json.limit, list.json.next_offset], [200, ["run/a"], 5, null], "list with prefix");
  t.equal((await call(e, "GET", "/v1/list/default?limit=5000")).status, 400, "limit above 1000: 400");
  const search = await call(e, "POST", "/v1/search", { namespace: "default", filter: { seed: { $gte: 3 } } });
  t.deepEqual([search.status, search.json.results.map((r: any) => r.key)], [200, ["run/a"]], "search");
  t.equal((await call(e, "POST", "/v1/search", { namespace: "default", filter: { seed: { $like: 1 } } })).status, 400, "unknown filter operator 400");
  const serve = await call(e, "POST", "/v1/serve", {
    namespace: "default",
    key: "run/a",
    slice: [
      [1, 2],
      [0, 8],
    ],
  });
  t.deepEqual([serve.status, serve.json.shape, serve.json.dtype], [200, [1, 8], "int32"], "serve slice as JSON");
  t.deepEqual(Array.from(new Int32Array(new Uint8Array(Buffer.from(serve.json.data_b64, "base64")).buffer)), [8, 8, 8, 8, 8, 8, 8, 8], "sliced values");
  const gpu = await call(e, "POST", "/v1/serve", { namespace: "default", key: "run/a", device: "gpu" });
  t.equal(gpu.status, 501, "gpu serving without a usable device: 501");
  t.ok(isErrorBody(gpu.json, "gpu_unavailable"), "gpu_unavailable body");
  const del = await call(e, "DELETE", "/v1/delete/default/run/a");
  t.deepEqual([del.status, del.json.deleted, del.json.version, typeof del.json.purge_after], [200, true, 1, "string"], "delete");
  t.equal((await call(e, "DELETE", "/v1/delete/default/run/a")).status, 404, "second delete 404");
  t.equal((await call(e, "GET", "/v1/get/default/run/a")).status, 404, "deleted key 404");
  await e.close();
});

test("engine: the octet-stream forms of put and serve", async (t) => {
  const e = await start();
  const data = Uint16Array.from({ length: 3000 }, (_, i) => (i * 7919) & 0xffff);
  const raw = Buffer.from(data.buffer);
  const put = await call(
    e,
    "POST",
    "/v1/put?namespace=default&key=raw/1&dtype=uint16&shape=30,100&if_version=0",
    raw,
    H("acme", { "content-type": "application/octet-stream", "x-svc-metadata": JSON.stringify({ src: "octet" }) }),
  );
  t.deepEqual([put.status, put.json.shape, put.json.dtype, put.json.version], [201, [30, 100], "uint16", 1], "octet-stream put with query fields");
  t.deepEqual((await call(e, "GET", "/v1/get/default/raw/1")).json.metadata, { src: "octet" }, "metadata from X-SVC-Metadata");
  const bigMeta = { note: "m".repeat(60 * 1024) };
  const big = await call(
    e,
    "POST",
    "/v1/put?namespace=default&key=raw/big&dtype=uint16&shape=3000",
    raw,
    H("acme", { "content-type": "application/octet-stream", "x-svc-metadata": JSON.stringify(bigMeta) }),
  );
  t.equal(big.status, 201, "60 KiB of metadata fits in X-SVC-Metadata");
  const tooBig = await call(
    e,
    "POST",
    "/v1/put?namespace=default&key=raw/big2&dtype=uint16&shape=3000",
    raw,
    H("acme", { "content-type": "application/octet-stream", "x-svc-metadata": JSON.stringify({ note: "m".repeat(66 * 1024) }) }),
  );
  t.ok(tooBig.status === 400 && /64 KiB/.test(tooBig.json.detail), `metadata above 64 KiB: 400 (${tooBig.json?.detail})`);
  const badMeta = await call(
    e,
    "POST",
    "/v1/put?namespace=default&key=raw/2&dtype=uint16&shape=3000",
    raw,
    H("acme", { "content-type": "application/octet-stream", "x-svc-metadata": "{not json" }),
  );
  t.equal(badMeta.status, 400, "bad X-SVC-Metadata 400");
  const badShape = await call(
    e,
    "POST",
    "/v1/put?namespace=default&key=raw/2&dtype=uint16&shape=3001",
    raw,
    H("acme", { "content-type": "application/octet-stream" }),
  );
  t.equal(badShape.status, 400, "shape/size mismatch 400");
  t.ok(/needs 6002/.test(badShape.json.detail), "detail says what the shape needs");
  const badShape2 = await call(e, "POST", "/v1/put?namespace=default&key=raw/2&shape=a,b", raw, H("acme", { "content-type": "application/octet-stream" }));
  t.equal(badShape2.status, 400, "unparsable shape 400");
  const res = await fetch(`${e.url}/v1/serve`, {
    method: "POST",
    headers: H("acme", { accept: "application/octet-stream" }),
    body: JSON.stringify({ namespace: "default", key: "raw/1" }),
  });
  t.equal(res.status, 200, "serve 200");
  t.equal(res.headers.get("content-type"), "application/octet-stream", "raw bytes");
  t.deepEqual(
    [res.headers.get("x-svc-dtype"), res.headers.get("x-svc-shape"), res.headers.get("x-svc-version")],
    ["uint16", "30,100", "1"],
    "X-SVC-Dtype, X-SVC-Shape, X-SVC-Version",
  );
  t.ok(Buffer.from(await res.arrayBuffer()).equals(raw), "bit-exact bytes");
  await e.close();
});

test("engine: floating data, cores and the three queries", async (t) => {
  const e = await start();
  const n = 16;
  const fld = (ph: number) => Float32Array.from({ length: n ** 3 }, (_, i) => Math.sin((Math.floor(i / 256) + ph) / 5) * Math.cos((i % 16) / 4 - ph));
  for (let i = 0; i < 4; i++) {
    const r = await call(e, "POST", "/v1/put", {
      namespace: "f",
      key: `x${i}`,
      data_b64: b64(fld(i * 0.2)),
      dtype: "float32",
      shape: [n, n, n],
      tolerance: 1e-4,
      metadata: { i },
    });
    t.ok(
      r.status === 201 && r.json.verdict === "compressed" && r.json.tt.ranks[0] === 1,
      `float put x${i}: ${r.json.verdict}, ratio ${r.json.compression_ratio?.toFixed(1)}`,
    );
  }
  const core = (r0: number, m: number, r1: number, v: number) => ({
    shape: [r0, m, r1],
    data_b64: b64(new Float32Array(r0 * m * r1).fill(v)),
    dtype: "float32",
  });
  const pc = await call(e, "POST", "/v1/put_cores", {
    namespace: "f",
    key: "c",
    cores: [core(1, n, 2, 0.5), core(2, n, 2, 0.25), core(2, n, 1, 1)],
    metadata: { src: "cores" },
  });
  t.deepEqual([pc.status, pc.json.verdict, pc.json.relative_error, pc.json.shape], [201, "compressed", 0, [n, n, n]], "put_cores 201");
  const bad = await call(e, "POST", "/v1/put_cores", { namespace: "f", key: "c2", cores: [core(1, n, 2, 1), core(3, n, 1, 1)] });
  t.equal(bad.status, 400, "ranks that do not chain: 400");
  const batch = await call(e, "POST", "/v1/put_cores_batch", {
    namespace: "f",
    items: [
      { key: "b1", cores: [core(1, 4, 1, 1)] },
      { key: "b2", cores: [core(1, 4, 1, 2)], metadata: { k: 1 } },
    ],
  });
  t.deepEqual(
    [batch.status, batch.json.results.map((r: any) => [r.key, r.version])],
    [
      201,
      [
        ["b1", 1],
        ["b2", 1],
      ],
    ],
    "put_cores_batch 201 with results in order",
  );
  const sim = await call(e, "POST", "/v1/query/similarity", { namespace: "f", a: "x0", b: "x1", metric: "cosine" });
  t.ok(sim.status === 200 && sim.json.score > 0.5 && sim.json.score <= 1 + 1e-9 && sim.json.a.key === "x0", `similarity ${sim.json.score}`);
  const topk = await call(e, "POST", "/v1/query/topk", { namespace: "f", key: "x0", k: 2, metric: "l2" });
  t.deepEqual(
    [topk.status, topk.json.results.length, topk.json.results[0].key, topk.json.scanned, topk.json.skipped],
    [200, 2, "x1", 4, 2],
    "topk: nearest neighbour, 4 scanned (3 fields + cores), 2 skipped",
  );
  const vb = await call(e, "POST", "/v1/query/vector", { namespace: "f", vector_b64: b64(fld(0.6)), dtype: "float32", shape: [n, n, n], k: 1 });
  t.deepEqual([vb.status, vb.json.results[0].key], [200, "x3"], "vector query with vector_b64");
  const vl = await call(e, "POST", "/v1/query/vector", { namespace: "f", vector: Array.from(fld(0)), shape: [n, n, n], k: 1, filter: { i: { $gte: 1 } } });
  t.deepEqual([vl.status, vl.json.results[0].key], [200, "x1"], "vector query with a JSON list and a filter");
  const res = await fetch(`${e.url}/v1/serve`, {
    method: "POST",
    headers: H("acme", { accept: "application/octet-stream" }),
    body: JSON.stringify({
      namespace: "f",
      key: "x2",
      dtype: "float64",
      slice: [
        [0, 2],
        [0, n],
        [0, n],
      ],
    }),
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  t.deepEqual(
    [res.status, res.headers.get("x-svc-dtype"), res.headers.get("x-svc-shape"), bytes.byteLength],
    [200, "float64", `2,${n},${n}`, 2 * n * n * 8],
    "octet-stream serve of a TT slice as float64",
  );
  const gpu = await call(e, "POST", "/v1/serve", { namespace: "f", key: "x0", device: "gpu" });
  t.ok(gpu.status === 501 && isErrorBody(gpu.json, "gpu_unavailable"), `gpu serving: 501 (${gpu.json.detail})`);
  await e.close();
});

test("engine: bad requests get the documented status and a one-sentence detail", async (t) => {
  const e = await start();
  const cases: [string, string, unknown, Record<string, string>, number, string][] = [
    ["POST", "/v1/put", "{bad json", H(), 400, "bad_request"],
    ["POST", "/v1/put", { namespace: "bad ns", key: "k", data_b64: "AAAA" }, H(), 400, "bad_request"],
    ["POST", "/v1/put", { namespace: "ns", key: "k" }, H(), 400, "bad_request"],
    ["POST", "/v1/put", { namespace: "ns", key: "k", data_b64: "not base64!" }, H(), 400, "bad_request"],
    ["POST", "/v1/put", { namespace: "ns", key: "k", data_b64: "AAAA", extra: 1 }, H(), 400, "bad_request"],
    ["POST", "/v1/put", "hello", H("acme", { "content-type": "text/plain" }), 415, "unsupported_media_type"],
    ["POST", "/v1/search", "x", H("acme", { "content-type": "text/plain" }), 415, "unsupported_media_type"],
    ["POST", "/v1/serve", { namespace: "ns", key: "nope" }, H(), 404, "not_found"],
    ["POST", "/v1/query/topk", { namespace: "ns", key: "nope" }, H(), 404, "not_found"],
    ["POST", "/v1/query/vector", { namespace: "ns", vector: [] }, H(), 400, "bad_request"],
    ["POST", "/v1/query/vector", { namespace: "ns", vector_b64: "AAAA" }, H(), 400, "bad_request"],
    ["POST", "/v1/query/similarity", { namespace: "ns", a: "x" }, H(), 400, "bad_request"],
    ["POST", "/v1/put_cores", { namespace: "ns", key: "k", cores: [] }, H(), 400, "bad_request"],
    ["POST", "/v1/put_cores_batch", { namespace: "ns", items: [{ key: "k", cores: "x" }] }, H(), 400, "bad_request"],
    ["GET", "/v1/get/ns/a//b", undefined, H(), 400, "bad_request"],
    ["GET", "/v1/get/ns/%E0%A4%A", undefined, H(), 400, "bad_request"],
    ["GET", "/v1/nothing", undefined, H(), 404, "not_found"],
  ];
  for (const [method, path, body, headers, status, code] of cases) {
    const r = await call(e, method, path, body, headers);
    t.ok(
      r.status === status && isErrorBody(r.json, code) && !/\n|\bat \w+ \(|\/work\//.test(r.json.detail) && r.json.detail.endsWith("."),
      `${method} ${path} ${typeof body === "string" ? body : JSON.stringify(body ?? "")} -> ${r.status} ${r.json?.detail}`,
    );
  }
  const batch = await call(e, "POST", "/v1/put_cores_batch", {
    namespace: "ns",
    items: [
      { key: "ok", cores: [{ shape: [1, 2, 1], data_b64: b64(new Float32Array([1, 2])) }] },
      { key: "bad//key", cores: [] },
    ],
  });
  t.ok(batch.status === 400 && /items\.1/.test(batch.json.detail), `a bad item names its index: ${batch.json.detail}`);
  t.equal((await call(e, "GET", "/v1/get/ns/ok")).status, 404, "nothing of the batch was stored");
  await e.close();
});

test("engine: 413 from Content-Length before reading, and while streaming", async (t) => {
  const e = await start({ SVC_ENGINE_MAX_UPLOAD_BYTES: "1000" });
  const big = Buffer.alloc(5000, 7);
  const r = await call(e, "POST", "/v1/put?namespace=ns&key=k", big, H("acme", { "content-type": "application/octet-stream" }));
  t.equal(r.status, 413, "Content-Length above the limit: 413");
  t.ok(isErrorBody(r.json, "payload_too_large"), "payload_too_large body");
  const json = await call(e, "POST", "/v1/put", { namespace: "ns", key: "k", data_b64: Buffer.alloc(1500).toString("base64") });
  t.equal(json.status, 413, "decoded JSON payload above the limit: 413");
  // chunked upload, no Content-Length: the limit is enforced while streaming
  const port = e.port;
  const streamed = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request(
      {
        port,
        host: "127.0.0.1",
        method: "POST",
        path: "/v1/put?namespace=ns&key=k",
        headers: { ...H("acme", { "content-type": "application/octet-stream" }), "transfer-encoding": "chunked" },
      },
      (res) => {
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode!, body }));
      },
    );
    req.on("error", reject);
    let sent = 0;
    const pump = () => {
      while (sent < 20) {
        sent++;
        if (!req.write(Buffer.alloc(500, 1))) return void req.once("drain", pump);
      }
      req.end();
    };
    pump();
  });
  t.equal(streamed.status, 413, "chunked body above the limit: 413");
  t.equal(JSON.parse(streamed.body).code, "payload_too_large", "payload_too_large code");
  t.equal((await call(e, "GET", "/v1/get/ns/k")).status, 404, "nothing stored");
  await e.close();
});

/** A GET with `headers` through node:http: status, headers and body as text. */
function rawGet(e: RunningEngine, path: string, headers: Record<string, string>): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ port: e.port, host: "127.0.0.1", method: "GET", path, headers }, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

test("engine: 60 KiB of X-SVC-Metadata is accepted; 120 KiB of headers is a JSON 400 with Connection: close, not a bare 431", async (t) => {
  const e = await start();
  const metadata = { note: "n".repeat(60 * 1024) };
  const put = await call(
    e,
    "POST",
    "/v1/put?namespace=ns&key=meta",
    new Uint8Array([1, 2, 3]),
    H("acme", { "content-type": "application/octet-stream", "x-svc-metadata": JSON.stringify(metadata) }),
  );
  t.equal(put.status, 201, "a 60 KiB metadata header: 201");
  const big = await rawGet(e, "/v1/get/ns/meta", { ...H(), "x-filler": "f".repeat(120 * 1024) });
  t.equal(big.status, 400, "400");
  t.equal(big.headers.connection, "close", "Connection: close");
  const body = JSON.parse(big.body);
  t.ok(isErrorBody(body, "bad_request"), "the error body of docs/api.md (errors)");
  t.equal(body.detail, "The request headers are larger than the limit of 98304 bytes.", "the detail names the limit");
  t.equal(big.headers["x-request-id"], body.request_id, "X-Request-Id matches the body");
  t.equal((await call(e, "GET", "/v1/get/ns/meta")).status, 200, "the engine still serves");
  await e.close();
});

test("engine: one access-log line per request, without keys or payloads", async (t) => {
  logs.length = 0;
  const e = await start();
  const secret = "UNIQUEPAYLOADMARKER";
  await call(e, "POST", "/v1/put", { namespace: "ns", key: "logged", data_b64: Buffer.from(secret).toString("base64") });
  await call(e, "GET", "/v1/get/ns/logged", undefined, H("acme", { authorization: `Bearer wrong-${KEY}` }));
  await e.close();
  const lines = logs.filter((l) => l.msg === "request");
  t.equal(lines.length, 2, "two requests, two lines");
  t.deepEqual(Object.keys(lines[0]!).sort(), ["latency_ms", "level", "method", "msg", "path", "request_id", "status", "tenant"], "fields");
  t.deepEqual([lines[0]!.status, lines[0]!.tenant, lines[1]!.status, lines[1]!.tenant], [201, "acme", 401, null], "status and tenant");
  const all = JSON.stringify(logs);
  t.notOk(all.includes(KEY) || all.includes(secret) || all.includes(Buffer.from(secret).toString("base64")), "no key and no payload in the logs");
});

test("engine: TLS with a self-signed certificate", async (t) => {
  const dir = tmp();
  const made = selfSignedCert(dir);
  if (!made) {
    t.skip("openssl is not available to make a test certificate");
    return;
  }
  const { cert, key } = made;
  const e = await start({ SVC_ENGINE_TLS_CERT_PATH: cert, SVC_ENGINE_TLS_KEY_PATH: key });
  t.ok(e.url.startsWith("https://"), `https url ${e.url}`);
  const { readFileSync } = await import("node:fs");
  const agent = new Agent({ connect: { ca: readFileSync(cert) } });
  const r = await ufetch(`${e.url}/v1/list/default`, { headers: H(), dispatcher: agent });
  t.equal(r.status, 200, "a request over TLS is served");
  t.equal(((await r.json()) as any).namespace, "default", "JSON body over TLS");
  const big = await ufetch(`${e.url}/v1/list/default`, { headers: { ...H(), "x-filler": "f".repeat(120 * 1024) }, dispatcher: agent });
  t.equal(big.status, 400, "120 KiB of headers over TLS: 400");
  t.ok(isErrorBody(await big.json(), "bad_request"), "with the JSON error body");
  await agent.close();
  await e.close();
  try {
    await start({ SVC_ENGINE_TLS_CERT_PATH: join(dir, "missing.pem"), SVC_ENGINE_TLS_KEY_PATH: key });
    t.fail("started with a missing certificate");
  } catch (err) {
    t.ok(/SVC_ENGINE_TLS_CERT_PATH/.test((err as Error).message), "an unreadable certificate names the variable");
  }
});

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
