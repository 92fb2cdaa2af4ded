// Large bodies over real HTTP, on LMDB and PostgreSQL: JSON uploads, idempotent octet-stream
// uploads and JSON serves at and above the size where the engine works on them in a worker
// thread (server/http/offload.ts) store and answer exactly what smaller ones do, refusals of
// large bodies are the same 400s, and the work was done off the event loop.
import test from "tape";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore, type Store } from "../../lib/store/index.js";
import { createApp } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { closeOffload, OFFLOAD_MIN_BYTES, offloadStats } from "../../server/http/offload.js";
import { freshStoreUrl } from "../store/pg-db.js";

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);
const dirs: string[] = [];

async function engine(kind: string): Promise<{ url: string; store: Store; close(): Promise<void> }> {
  let store: Store;
  if (kind === "postgres") store = await createStore({ url: await freshStoreUrl() });
  else {
    const d = mkdtempSync(join(tmpdir(), "svc-large-"));
    dirs.push(d);
    store = await createStore({ path: d });
  }
  const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent" });
  const server = http.createServer(createApp({ store, config, gpu: { unavailable: "no GPU in this test" } }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    store,
    close: async () => {
      await new Promise<void>((r) => server.close(() => r()));
      await store.close();
    },
  };
}

async function call(url: string, path: string, body: unknown, extra: Record<string, string> = {}) {
  const raw = body instanceof Uint8Array;
  const res = await fetch(url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": raw ? "application/octet-stream" : "application/json", ...extra },
    body: raw ? body : typeof body === "string" ? body : JSON.stringify(body),
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  return { status: res.status, bytes, text: bytes.toString("latin1"), replayed: res.headers.get("idempotent-replayed") };
}

/** Smooth float32 data of `n` values: compresses as TT, so a serve reconstructs rather than copies. */
const field = (n: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i / 97) + 0.5 * Math.cos(i / 31));
/** Bytes that deflate poorly: stored as they are (passthrough). */
const noise = (n: number) => {
  const b = Buffer.alloc(n);
  let x = 12345;
  for (let i = 0; i < n; i++) b[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
  return b;
};

for (const kind of ["lmdb", "postgres"]) {
  test(`${kind}: large JSON and octet-stream bodies, off the event loop, as small ones`, async (t) => {
    const e = await engine(kind);
    try {
      const raw = noise(3 * OFFLOAD_MIN_BYTES);
      let jobs = offloadStats.jobs;
      const put = await call(e.url, "/v1/put", { namespace: "ns", key: "raw", data_b64: raw.toString("base64"), metadata: { m: 1 } });
      t.equal(put.status, 201, `JSON put of ${raw.byteLength} bytes: 201`);
      t.equal(JSON.parse(put.text).bytes_in, raw.byteLength, "all of the payload was taken");
      t.ok(offloadStats.jobs > jobs, "the JSON body was worked on in a worker");

      // a JSON serve above the threshold: the text res.json would have sent, base64 made in a worker
      jobs = offloadStats.jobs;
      const served = await call(e.url, "/v1/serve", { namespace: "ns", key: "raw" });
      t.equal(served.status, 200, "JSON serve: 200");
      const want = JSON.stringify({ namespace: "ns", key: "raw", version: 1, dtype: "bytes", shape: [raw.byteLength], data_b64: raw.toString("base64") });
      t.ok(served.text === want, "JSON serve: byte for byte the JSON of the entry");
      t.ok(offloadStats.jobs > jobs, "its base64 was made in a worker");
      const octet = await call(e.url, "/v1/serve", { namespace: "ns", key: "raw" }, { accept: "application/octet-stream" });
      t.ok(octet.bytes.equals(raw), "octet-stream serve: the bytes stored");

      // a compressible float field: TT, served by reconstruction within the tolerance
      const f = field(200_000);
      const fput = await call(e.url, "/v1/put", {
        namespace: "ns",
        key: "field",
        dtype: "float32",
        shape: [200_000],
        tolerance: 1e-4,
        data_b64: Buffer.from(f.buffer).toString("base64"),
      });
      t.equal(fput.status, 201, "JSON put of a float32 field: 201");
      const fserve = await call(e.url, "/v1/serve", { namespace: "ns", key: "field" });
      const back = new Float32Array(new Uint8Array(Buffer.from(JSON.parse(fserve.text).data_b64, "base64")).buffer);
      let num = 0;
      let den = 0;
      for (let i = 0; i < f.length; i++) {
        num += (f[i]! - back[i]!) ** 2;
        den += f[i]! ** 2;
      }
      t.ok(
        back.length === f.length && Math.sqrt(num / den) <= 1e-4 * 1.0001,
        `the field comes back within its tolerance (${Math.sqrt(num / den).toExponential(2)})`,
      );

      // idempotent octet-stream put: the request hash is taken in a worker and the body still stored
      const body = noise(2 * OFFLOAD_MIN_BYTES + 7);
      const path = "/v1/put?namespace=ns&key=idem&dtype=bytes";
      jobs = offloadStats.jobs;
      const first = await call(e.url, path, body, { "idempotency-key": "large-1" });
      t.equal(first.status, 201, "idempotent octet put: 201");
      t.ok(offloadStats.jobs > jobs, "its hash was taken in a worker");
      const again = await call(e.url, path, body, { "idempotency-key": "large-1" });
      t.equal(again.status, 201, "the same request again: 201");
      t.equal(again.replayed, "true", "answered from the stored response");
      t.equal(again.text, first.text, "with the same answer");
      const other = Buffer.from(body);
      other[other.length - 1]! ^= 1;
      const changed = await call(e.url, path, other, { "idempotency-key": "large-1" });
      t.equal(changed.status, 422, "the same key with one byte changed at the end: 422");
      t.equal(JSON.parse(changed.text).code, "idempotency_key_reused", "idempotency_key_reused");
      const back2 = await call(e.url, "/v1/serve", { namespace: "ns", key: "idem" }, { accept: "application/octet-stream" });
      t.ok(back2.bytes.equals(body), "the stored body is the first one, byte for byte");

      // idempotent JSON put: same hash rule as a small body
      const jbody = { namespace: "ns", key: "jidem", data_b64: noise(OFFLOAD_MIN_BYTES).toString("base64") };
      const j1 = await call(e.url, "/v1/put", jbody, { "idempotency-key": "large-2" });
      const j2 = await call(e.url, "/v1/put", jbody, { "idempotency-key": "large-2" });
      t.ok(j1.status === 201 && j2.replayed === "true" && j2.text === j1.text, "idempotent JSON put: replayed");
      const j3 = await call(e.url, "/v1/put", { ...jbody, metadata: { x: 1 } }, { "idempotency-key": "large-2" });
      t.equal(j3.status, 422, "a changed large JSON body under the same key: 422");

      // refusals of large bodies: the 400 of a small body with the same fault
      const pad = noise(OFFLOAD_MIN_BYTES).toString("base64");
      for (const [what, text, detail] of [
        [
          "a member named twice after the payload",
          `{"namespace":"ns","key":"a","data_b64":"${pad}","key":"b"}`,
          'The request body names the member "key" twice in one object.',
        ],
        ["bad base64", `{"namespace":"ns","key":"a","data_b64":"${pad}!!!!"}`, "data_b64: must be standard base64 text."],
        ["a foreign field", `{"namespace":"ns","key":"a","data_b64":"${pad}","tenant":"other"}`, "body: unknown field 'tenant'."],
      ] as const) {
        const r = await call(e.url, "/v1/put", text);
        t.equal(r.status, 400, `${what}: 400`);
        t.equal(JSON.parse(r.text).detail, detail, `${what}: ${detail}`);
      }

      // query/vector with a large vector_b64 over the stored field
      const q = await call(e.url, "/v1/query/vector", {
        namespace: "ns",
        vector_b64: Buffer.from(f.buffer).toString("base64"),
        dtype: "float32",
        shape: [200_000],
        k: 1,
      });
      t.equal(q.status, 200, "query/vector with a large vector_b64: 200");
      const top = JSON.parse(q.text).results[0];
      t.ok(top?.key === "field" && top.score > 0.9999, `the field is its own nearest entry (score ${top?.score})`);
    } finally {
      await e.close();
    }
  });
}

test("cleanup", async () => {
  await closeOffload();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
