// Idempotency-Key on the engine's writes, over real HTTP, on each backend (memory, LMDB,
// PostgreSQL): a repeat of the same request answers the stored response with
// Idempotent-Replayed: true and writes nothing; the same key on another request is 422
// idempotency_key_reused; concurrent repeats write once; bad keys are 400; keys are per
// tenant and expire after 24 hours; the gateway forwards the header.
import test from "tape";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FakeClock } from "../../lib/clock.js";
import { createStore, type Store } from "../../lib/store/index.js";
import { createApp } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { Stack } from "../store/harness.js";
import { freshStoreUrl } from "../store/pg-db.js";

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);
const dirs: string[] = [];
const T0 = Date.parse("2026-03-01T00:00:00Z");

async function engine(kind: string, clock: FakeClock): Promise<{ url: string; store: Store; close(): Promise<void> }> {
  let store: Store;
  if (kind === "postgres") store = await createStore({ url: await freshStoreUrl(), clock });
  else if (kind === "memory") store = await createStore({ path: ":memory:", clock });
  else {
    const d = mkdtempSync(join(tmpdir(), "svc-idem-"));
    dirs.push(d);
    store = await createStore({ path: d, clock });
  }
  const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent" });
  const server = http.createServer(createApp({ store, config, gpu: { unavailable: "no GPU in this test" } }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    store,
    close: async () => {
      await new Promise<void>((r) => server.close(() => r()));
      await store.close();
    },
  };
}

async function call(url: string, method: string, path: string, body: unknown, extra: Record<string, string> = {}, tenant = "acme") {
  const raw = body instanceof Uint8Array;
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": tenant, "content-type": raw ? "application/octet-stream" : "application/json", ...extra },
    body: body === undefined ? undefined : raw ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text), replayed: res.headers.get("idempotent-replayed") };
}

const b64 = (a: Uint8Array) => Buffer.from(a).toString("base64");
const put = (key: string, bytes: number[]) => ({ namespace: "ns", key, data_b64: b64(new Uint8Array(bytes)) });
const cores = (v: number) => ({ namespace: "ns", key: "c", cores: [{ shape: [1, 2, 1], data_b64: b64(new Uint8Array(new Float32Array([v, 2]).buffer)) }] });

for (const kind of ["memory", "lmdb", "postgres"]) {
  test(`${kind}: a repeated keyed put answers the stored response and adds no version`, async (t) => {
    const clock = new FakeClock(T0);
    const e = await engine(kind, clock);
    const k = { "idempotency-key": "put-1" };
    const first = await call(e.url, "POST", "/v1/put", put("a", [1, 2, 3]), k);
    t.equal(first.status, 201, "first: 201");
    t.equal(first.replayed, null, "first: not replayed");
    clock.advance(1000);
    const again = await call(e.url, "POST", "/v1/put", put("a", [1, 2, 3]), k);
    t.equal(again.status, 201, "repeat: 201");
    t.equal(again.replayed, "true", "repeat: Idempotent-Replayed: true");
    t.equal(again.text, first.text, "repeat: the stored response, byte for byte");
    t.equal((await e.store.forTenant("acme").get("ns", "a")).latest_version, 1, "no second version");
    const other = await call(e.url, "POST", "/v1/put", put("a", [9, 9]), k);
    t.equal(other.status, 422, "same key, different body: 422");
    t.equal(other.json.code, "idempotency_key_reused", "code idempotency_key_reused");
    t.match(other.json.detail, /different request/, "a sentence saying why");
    const otherPath = await call(e.url, "POST", "/v1/put?x=1", put("a", [1, 2, 3]), k);
    t.equal(otherPath.status, 422, "same key and body, different path: 422");
    const unkeyed = await call(e.url, "POST", "/v1/put", put("a", [1, 2, 3]));
    t.equal(unkeyed.json.version, 2, "without a key a put adds a version as before");
    const tenantB = await call(e.url, "POST", "/v1/put", put("a", [1, 2, 3]), k, "bravo");
    t.deepEqual([tenantB.status, tenantB.replayed, tenantB.json.version], [201, null, 1], "keys are per tenant");
    clock.advance(24 * 3600 * 1000);
    const expired = await call(e.url, "POST", "/v1/put", put("a", [1, 2, 3]), k);
    t.deepEqual([expired.status, expired.replayed, expired.json.version], [201, null, 3], "after 24 hours the key is new again");
    await e.close();
  });

  test(`${kind}: octet-stream put, put_cores, put_cores_batch and delete replay too`, async (t) => {
    const clock = new FakeClock(T0);
    const e = await engine(kind, clock);
    const raw = new Uint8Array([5, 6, 7]);
    const o1 = await call(e.url, "POST", "/v1/put?namespace=ns&key=r", raw, { "idempotency-key": "raw", "x-svc-metadata": '{"m":1}' });
    const o2 = await call(e.url, "POST", "/v1/put?namespace=ns&key=r", raw, { "idempotency-key": "raw", "x-svc-metadata": '{"m":1}' });
    t.deepEqual([o1.status, o2.status, o2.replayed, o2.text === o1.text], [201, 201, "true", true], "octet-stream put replays");
    const o3 = await call(e.url, "POST", "/v1/put?namespace=ns&key=r", raw, { "idempotency-key": "raw", "x-svc-metadata": '{"m":2}' });
    t.equal(o3.status, 422, "other metadata is another request");
    const c1 = await call(e.url, "POST", "/v1/put_cores", cores(1), { "idempotency-key": "c" });
    const c2 = await call(e.url, "POST", "/v1/put_cores", cores(1), { "idempotency-key": "c" });
    t.deepEqual([c1.status, c2.replayed, c2.text === c1.text], [201, "true", true], "put_cores replays");
    const batch = {
      namespace: "ns",
      items: [
        { key: "b1", cores: cores(1).cores },
        { key: "b2", cores: cores(2).cores },
      ],
    };
    const b1 = await call(e.url, "POST", "/v1/put_cores_batch", batch, { "idempotency-key": "b" });
    const b2 = await call(e.url, "POST", "/v1/put_cores_batch", batch, { "idempotency-key": "b" });
    t.deepEqual([b1.status, b2.replayed, b2.text === b1.text], [201, "true", true], "put_cores_batch replays");
    t.equal((await e.store.forTenant("acme").get("ns", "b2")).latest_version, 1, "the batch was stored once");
    const d1 = await call(e.url, "DELETE", "/v1/delete/ns/r", undefined, { "idempotency-key": "d" });
    const d2 = await call(e.url, "DELETE", "/v1/delete/ns/r", undefined, { "idempotency-key": "d" });
    t.deepEqual([d1.status, d2.status, d2.replayed, d2.text === d1.text], [200, 200, "true", true], "delete replays (not a 404)");
    const d3 = await call(e.url, "DELETE", "/v1/delete/ns/r", undefined);
    t.equal(d3.status, 404, "an unkeyed repeat of the delete is 404 as before");
    await e.close();
  });

  test(`${kind}: concurrent repeats of one keyed put write once; bad keys are 400`, async (t) => {
    const clock = new FakeClock(T0);
    const e = await engine(kind, clock);
    const k = { "idempotency-key": "race" };
    const all = await Promise.all(Array.from({ length: 8 }, () => call(e.url, "POST", "/v1/put", put("r", [4, 4]), k)));
    t.ok(
      all.every((r) => r.status === 201),
      "every repeat: 201",
    );
    t.equal(new Set(all.map((r) => r.text)).size, 1, "every repeat got the same response");
    t.equal(all.filter((r) => r.replayed === null).length, 1, "exactly one was executed, the others replayed");
    t.equal((await e.store.forTenant("acme").get("ns", "r")).latest_version, 1, "one version written");
    for (const [bad, why] of [
      ["", "empty"],
      ["x".repeat(256), "256 characters"],
      ["has space", "a space"],
      ["é", "non-ASCII"],
    ] as const) {
      const r = await call(e.url, "POST", "/v1/put", put("z", [1]), { "idempotency-key": bad });
      t.deepEqual([r.status, r.json.code], [400, "bad_request"], `${why}: 400 bad_request`);
    }
    t.equal(
      (await e.store.forTenant("acme").list("ns")).keys.some((x) => x.key === "z"),
      false,
      "a refused key wrote nothing",
    );
    // quotes and backslashes are printable ASCII: stored and matched as they are
    const sly = { "idempotency-key": "x');DROP-TABLE-heads;--\\'" };
    const s1 = await call(e.url, "POST", "/v1/put", put("q", [1]), sly);
    const s2 = await call(e.url, "POST", "/v1/put", put("q", [1]), sly);
    t.deepEqual([s1.status, s2.status, s2.replayed, s2.text === s1.text], [201, 201, "true", true], "a key with quotes and backslashes replays");
    t.equal((await e.store.forTenant("acme").get("ns", "q")).latest_version, 1, "and the store is intact");
    await e.close();
  });

  test(`${kind}: compact purges idempotency records after 24 hours`, async (t) => {
    const clock = new FakeClock(T0);
    const e = await engine(kind, clock);
    await call(e.url, "POST", "/v1/put", put("p", [1]), { "idempotency-key": "gc" });
    await e.store.compact({ now: T0 + 1000 });
    t.equal((await call(e.url, "POST", "/v1/put", put("p", [1]), { "idempotency-key": "gc" })).replayed, "true", "kept within 24 hours");
    await e.store.compact({ now: T0 + 24 * 3600 * 1000 + 1 });
    const key = ["i", "acme", "gc"] as const;
    t.equal(await e.store.backend.get(key), undefined, "gone after 24 hours");
    await e.close();
  });
}

test("gateway: forwards Idempotency-Key and passes Idempotent-Replayed back", async (t) => {
  const stack = new Stack();
  try {
    const url = await stack.url();
    const res = await fetch(`${url}/gate/onboard/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.serviceKey}`, "content-type": "application/json" },
      body: JSON.stringify({ tenant_id: "idem-gw", namespaces: ["ns"] }),
    });
    const { api_key } = (await res.json()) as { api_key: string };
    t.equal(res.status, 201, "a tenant with a key of its own");
    const send = () =>
      fetch(`${url}/v1/put`, {
        method: "POST",
        headers: { authorization: `Bearer ${api_key}`, "content-type": "application/json", "idempotency-key": "gw-1" },
        body: JSON.stringify(put("g", [1, 2])),
      });
    const a = await send();
    const aText = await a.text();
    const b = await send();
    const bText = await b.text();
    t.deepEqual([a.status, b.status], [201, 201], "both 201");
    t.equal(b.headers.get("idempotent-replayed"), "true", "the engine's Idempotent-Replayed reaches the client");
    t.equal(bText, aText, "the same response");
    t.equal(JSON.parse(bText).version, 1, "one version");
  } finally {
    await stack.close();
  }
});

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
