// A PostgreSQL store whose database only reads (a hot standby, or a primary being failed over;
// here every session of the URL runs with default_transaction_read_only): a store at the
// current schema opens and reads, its writes are refused as store_unavailable (503 with
// Retry-After at the engine) with a sentence saying why, and writes go on once the database
// writes again. A database whose tables are not there yet cannot be opened read-only: a
// sentence at once, or store_unavailable until it writes when the open is lazy (the engine's).
import test from "tape";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { createStore, type Store } from "../../lib/store/index.js";
import { createApp } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { freshStoreUrl } from "./pg-db.js";

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);
const READ_ONLY = "The database is read-only (a standby, or a failover under way), so nothing can be written; retry later.";
const f32 = (n: number, v: number) => new Float32Array(n).fill(v);

/** The same database and schema, every session read-only. */
function readOnly(url: string): string {
  const u = new URL(url);
  u.searchParams.set("options", `${u.searchParams.get("options") ?? ""} -c default_transaction_read_only=on`.trim());
  return u.toString();
}

async function refusal(t: test.Test, what: string, p: Promise<unknown>): Promise<void> {
  try {
    await p;
    t.fail(`${what}: refused`);
  } catch (e) {
    const err = e as { code?: string; message?: string; retryAfterS?: number };
    t.deepEqual([err.code, err.message, err.retryAfterS], ["store_unavailable", READ_ONLY, 5], `${what}: store_unavailable, the sentence, retry after 5 s`);
  }
}

test("a read-only database: the store opens and reads, writes are store_unavailable, and go on once it writes", async (t) => {
  const url = await freshStoreUrl();
  const rw = await createStore({ url });
  await rw.put("ns", "a", f32(64, 1), { shape: [64] });
  await rw.put("ns", "b", f32(64, 2), { shape: [64] });
  await rw.close();

  const ro = await createStore({ url: readOnly(url) });
  try {
    t.deepEqual(Array.from((await ro.serve("ns", "a")).data as Float32Array).slice(0, 2), [1, 1], "a serve reads");
    t.equal((await ro.get("ns", "b")).version, 1, "a get reads");
    t.deepEqual(
      (await ro.list("ns")).keys.map((k) => k.key),
      ["a", "b"],
      "a listing reads",
    );
    await refusal(t, "a put", ro.put("ns", "c", f32(64, 3), { shape: [64] }));
    await refusal(t, "a put over a key", ro.put("ns", "a", f32(64, 4), { shape: [64] }));
    await refusal(t, "a delete", ro.delete("ns", "b"));
    t.equal((await ro.get("ns", "a")).version, 1, "nothing was written");
  } finally {
    await ro.close();
  }
  const again = await createStore({ url });
  await again.put("ns", "c", f32(64, 3), { shape: [64] });
  t.equal((await again.get("ns", "c")).version, 1, "the same database, writable again: writes go on");
  await again.close();
});

test("a read-only database without the store's tables: refused at once with a sentence, or store_unavailable while lazy", async (t) => {
  const url = readOnly(await freshStoreUrl());
  try {
    await createStore({ url });
    t.fail("opened");
  } catch (e) {
    t.match(
      (e as Error).message,
      /^The PostgreSQL database at \S+ is read-only \(a standby\?\) and its tables must first be created or migrated: connect to the primary\.$/,
      "one sentence",
    );
  }
  const lazy = await createStore({ url, lazy_connect: true });
  try {
    await refusal(t, "a lazily opened store's read", lazy.get("ns", "a"));
  } finally {
    await lazy.close();
  }
});

test("the engine on a read-only database: GET 200, PUT 503 store_unavailable with Retry-After", async (t) => {
  const url = await freshStoreUrl();
  const rw = await createStore({ url, tenant: "acme" });
  await rw.put("ns", "a", f32(64, 1), { shape: [64] });
  await rw.close();
  const store: Store = await createStore({ url: readOnly(url) });
  const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent" });
  const server = http.createServer(createApp({ store, config, gpu: { unavailable: "no GPU in this test" } }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const headers = { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme" };
  try {
    const got = await fetch(`${base}/v1/get/ns/a`, { headers });
    t.equal(got.status, 200, "GET 200");
    await got.arrayBuffer();
    const put = await fetch(`${base}/v1/put?namespace=ns&key=b&dtype=float32&shape=4`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/octet-stream" },
      body: Buffer.from(f32(4, 1).buffer),
    });
    const body = (await put.json()) as { code: string; detail: string };
    t.deepEqual(
      [put.status, body.code, body.detail, put.headers.get("retry-after")],
      [503, "store_unavailable", READ_ONLY, "5"],
      "PUT 503 store_unavailable, the sentence, Retry-After: 5",
    );
    const health = (await (await fetch(`${base}/health`)).json()) as { store_connected?: boolean };
    t.equal(health.store_connected, true, "/health: the store answers (reads work)");
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await store.close();
  }
});
