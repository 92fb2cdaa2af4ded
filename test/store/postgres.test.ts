// What only the PostgreSQL backend has: the schema created on first connect (also by several
// stores connecting at once), a newer schema refused with a sentence, connection errors that
// name the server but never the password, and the core cache of a store that shares its
// database: heads and versions always read from the database, payloads fetched only when the
// engine does not hold their decoded cores.
import test from "tape";
import { ValidationError } from "../../lib/errors.js";
import { createStore } from "../../lib/store/index.js";
import { SCHEMA_VERSION } from "../../lib/store/postgres.js";
import pg from "pg";
import { freshStoreUrl, sql } from "./pg-db.js";

test("postgres: the schema is created once, also when several stores connect at once", async (t) => {
  const url = await freshStoreUrl();
  const stores = await Promise.all(Array.from({ length: 5 }, () => createStore({ url })));
  t.equal(stores.length, 5, "five stores connected");
  const rows = await sql<{ version: number }>(url, "SELECT version FROM svc_schema");
  t.deepEqual(
    rows.map((r) => r.version),
    [SCHEMA_VERSION],
    `one schema row, version ${SCHEMA_VERSION}`,
  );
  const tables = await sql<{ table_name: string }>(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1");
  t.deepEqual(
    tables.map((r) => r.table_name),
    ["heads", "idempotency", "payload_chunks", "payloads", "svc_schema", "versions"],
    "the store's tables",
  );
  const keys = await sql<{ table_name: string; first: string }>(
    url,
    `SELECT tc.table_name, kcu.column_name AS first FROM information_schema.table_constraints tc
       JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name AND kcu.table_schema = tc.table_schema
      WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = current_schema() AND kcu.ordinal_position = 1 AND tc.table_name <> 'svc_schema'`,
  );
  t.ok(keys.length === 5 && keys.every((k) => k.first === "tenant_id"), "every data table's primary key starts with tenant_id");
  const fks = await sql(url, "SELECT 1 FROM information_schema.table_constraints WHERE constraint_type = 'FOREIGN KEY' AND table_schema = current_schema()");
  t.equal(fks.length, 0, "no foreign keys (nothing refers across tenants or tables)");
  await stores[0]!.put("ns", "k", new Int32Array([1, 2, 3]), { shape: [3] });
  t.equal((await stores[4]!.get("ns", "k")).version, 1, "the stores share the data");
  for (const s of stores) await s.close();
  const again = await createStore({ url });
  t.equal((await again.get("ns", "k")).version, 1, "reopening keeps the data and the schema");
  await again.close();
});

test("postgres: a database of a newer schema version is refused with a sentence", async (t) => {
  const url = await freshStoreUrl();
  await (await createStore({ url })).close();
  await sql(url, "UPDATE svc_schema SET version = $1", [SCHEMA_VERSION + 1]);
  const e = await createStore({ url }).catch((x: unknown) => x);
  t.ok(e instanceof ValidationError, "ValidationError");
  t.match(
    (e as Error).message,
    new RegExp(`schema version ${SCHEMA_VERSION + 1}, newer than version ${SCHEMA_VERSION}.*upgrade svc-tensor`),
    (e as Error).message,
  );
  const tables = await sql(url, "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema()");
  t.equal(tables.length, 6, "nothing was changed or dropped");
});

test("postgres: connection errors name the server, never the password; bad options are refused", async (t) => {
  const e = await createStore({ url: "postgres://svc:s3cret-pw@127.0.0.1:1/svc" }).catch((x: unknown) => x);
  t.ok(e instanceof ValidationError, "ValidationError");
  t.match((e as Error).message, /^Cannot connect to PostgreSQL at 127\.0\.0\.1:1\/svc: /, (e as Error).message);
  t.notOk((e as Error).message.includes("s3cret"), "no password in the message");
  for (const [o, re] of [
    [{ url: "mysql://x" }, /url must be a postgres/],
    [{ url: "postgres://x", path: "/tmp/x" }, /exactly one of path and url/],
    [{}, /exactly one of path and url/],
    [{ url: "postgres://x", pool_size: 0 }, /pool_size/],
  ] as const) {
    const r = await createStore(o as never).catch((x: unknown) => x);
    t.ok(r instanceof ValidationError && re.test((r as Error).message), `${JSON.stringify(o)}: ${(r as Error).message}`);
  }
});

test("postgres: heads come from the database; top-K fetches only the payloads whose cores the store lacks", async (t) => {
  const url = await freshStoreUrl();
  const a = await createStore({ url });
  const b = await createStore({ url }); // another engine on the same database
  const core = (n: number, v: number) => ({ shape: [1, n, 1] as [number, number, number], data: Float32Array.from({ length: n }, (_, i) => Math.sin(i + v)) });
  const items = Array.from({ length: 300 }, (_, i) => ({ key: `e${String(i).padStart(3, "0")}`, cores: [core(8, i), core(8, 2 * i)] }));
  await b.putCoresBatch("ns", items);
  await b.put("ns", "bytes", Buffer.from([1, 2, 3]));
  let fetched = 0;
  let calls = 0;
  const backend = a.backend;
  const orig = backend.getPayloads.bind(backend);
  backend.getPayloads = async (tenant, ids) => {
    calls++;
    fetched += ids.length;
    return orig(tenant, ids);
  };
  const cold = await a.query.topk("ns", { key: "e000", k: 5 });
  t.deepEqual([cold.scanned, cold.skipped], [299, 1], "scanned 299, skipped the bytes entry");
  t.equal(fetched, 300, "cold: the query's payload and every candidate's, each once");
  t.equal(calls, 3, "the query, then the candidates in batches of 256");
  fetched = 0;
  const warm = await a.query.topk("ns", { key: "e000", k: 5 });
  t.equal(fetched, 0, "warm: no payload fetched");
  t.deepEqual(warm, cold, "the same answer");
  // a new version through the other engine: the head is read from the database at once
  await b.putCores("ns", "e007", [{ ...core(8, 0), data: core(8, 0).data.map((x) => 2 * x) }, core(8, 0)]);
  t.equal((await a.get("ns", "e007")).version, 2, "get sees the other engine's new version");
  fetched = 0;
  const after = await a.query.topk("ns", { key: "e000", k: 3 });
  t.equal(fetched, 1, "top-K fetched only the new payload");
  t.deepEqual(after.results[0], { key: "e007", version: 2, score: after.results[0]!.score }, "and ranks the new version (identical to the query)");
  t.ok(Math.abs(after.results[0]!.score - 1) < 1e-6, "cosine 1 with the query");
  await a.close();
  await b.close();
});

test("postgres: six concurrent cold top-Ks on one store with a pool of 2 connections all finish (no connection held across a scan)", async (t) => {
  const url = await freshStoreUrl();
  const w = await createStore({ url });
  const core = (v: number) => ({ shape: [1, 6, 1] as [number, number, number], data: Float32Array.from({ length: 6 }, (_, i) => Math.cos(i * v + 1)) });
  await w.putCoresBatch(
    "ns",
    Array.from({ length: 600 }, (_, i) => ({ key: `k${i}`, cores: [core(i), core(i + 1)] })),
  );
  await w.close();
  const s = await createStore({ url, pool_size: 2 });
  let timer: NodeJS.Timeout | undefined;
  const all = Promise.all(Array.from({ length: 6 }, () => s.query.topk("ns", { key: "k1", k: 3 })));
  const outcome = await Promise.race([all, new Promise<"stuck">((r) => (timer = setTimeout(() => r("stuck"), 60_000)))]);
  clearTimeout(timer);
  t.notEqual(outcome, "stuck", "six concurrent cold top-Ks finished");
  if (outcome !== "stuck")
    t.ok(
      outcome.every((r) => r.scanned === 599 && JSON.stringify(r.results) === JSON.stringify(outcome[0]!.results)),
      "each scanned 599 entries with the same answer",
    );
  await s.close();
});

test("postgres: reads that arrive together go in one statement, each answered with its own entry", async (t) => {
  const url = await freshStoreUrl();
  // a pool of 2: one read statement in flight, the reads arriving meanwhile wait and go together
  const s = await createStore({ url, pool_size: 2 });
  const a = s.forTenant("ta");
  const b = s.forTenant("tb");
  // keys an array literal must quote: the word NULL, every punctuation a key may hold, the longest key
  const keys = ["NULL", "null", "a/b:c@d=e.f", "-_", "k".repeat(512), "plain"];
  for (const [i, k] of keys.entries()) {
    await a.put("ns", k, new Int32Array([i]), { shape: [1] });
    await a.put("ns", k, new Int32Array([i, i]), { shape: [2] });
    await b.put("ns", k, new Float64Array([i / 2]), { shape: [1] });
  }
  type Ask = { view: typeof a; key: string; version?: number };
  const asks: Ask[] = [];
  for (const k of keys)
    asks.push({ view: a, key: k }, { view: a, key: k, version: 1 }, { view: b, key: k }, { view: a, key: k, version: 3 }, { view: b, key: `${k}x` });
  const one = (q: Ask) =>
    q.view.get("ns", q.key, q.version === undefined ? {} : { version: q.version }).then(
      (e) => ({ version: e.version, shape: e.shape, dtype: e.dtype }),
      (e: Error) => e.name,
    );
  const alone: unknown[] = [];
  for (const q of asks) alone.push(await one(q));
  let statements = 0;
  const proto = pg.Pool.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const query = proto.query;
  proto.query = function (this: unknown, ...args: unknown[]) {
    const name = (args[0] as { name?: string } | null)?.name;
    if (name === "svc_get_entry" || name === "svc_get_entries") statements++;
    return query.apply(this, args);
  };
  let together: unknown[];
  try {
    together = await Promise.all(asks.map(one));
  } finally {
    proto.query = query;
  }
  t.deepEqual(together, alone, `${asks.length} reads at once: each the same answer as alone (entries of two tenants, versions, missing keys and versions)`);
  t.ok(statements >= 1 && statements <= 2, `${asks.length} reads at once in ${statements} statement${statements === 1 ? "" : "s"}`);
  t.deepEqual(
    alone.slice(0, 5),
    [
      { version: 2, shape: [2], dtype: "int32" },
      { version: 1, shape: [1], dtype: "int32" },
      { version: 1, shape: [1], dtype: "float64" },
      "NotFoundError",
      "NotFoundError",
    ],
    "one key's five reads: the latest, version 1, the other tenant's, a version never written, a key never written",
  );
  // a head that cannot be decoded fails its own read, not the others of its statement
  await sql(url, "UPDATE heads SET value = $1 WHERE tenant_id = 'tb' AND key = 'plain'", [Buffer.from([0x92, 0x01])]); // msgpack cut short
  const mixed = await Promise.all(
    [a.get("ns", "plain"), b.get("ns", "plain"), b.get("ns", "NULL")].map((p) =>
      p.then(
        () => "ok",
        () => "failed",
      ),
    ),
  );
  t.deepEqual(mixed, ["ok", "failed", "ok"], "a corrupt head among reads at once: only its read fails");
  // a write, then reads at once: every one of them sees it
  await a.put("ns", "plain", new Int32Array([7, 7, 7]), { shape: [3] });
  const after = await Promise.all(Array.from({ length: 20 }, () => a.get("ns", "plain")));
  t.ok(
    after.every((e) => e.version === 3 && e.shape[0] === 3),
    "20 reads at once after a write all see its version 3",
  );
  await s.close();
});
