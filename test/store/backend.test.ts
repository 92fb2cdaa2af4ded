// The storage interface, checked on every implementation (memory, LMDB, PostgreSQL): tuple
// key order, ranges (also long ones), payloads (deduplicated, chunked on
// PostgreSQL), transactions that keep nothing when they throw, declared reads.
// Store-only: the storage interface underneath the store, not a store method.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { StorageBackend } from "../../lib/store/backend.js";
import { LmdbBackend } from "../../lib/store/lmdb.js";
import { MemoryBackend } from "../../lib/store/memory.js";
import { CHUNK_BYTES, PostgresBackend } from "../../lib/store/postgres.js";
import { freshStoreUrl, sql } from "./pg-db.js";

const dirs: string[] = [];
const urls = new Map<StorageBackend, string>();
const makers: [string, () => Promise<StorageBackend>][] = [
  ["memory", async () => new MemoryBackend()],
  [
    "lmdb",
    async () => {
      const d = mkdtempSync(join(tmpdir(), "svc-backend-"));
      dirs.push(d);
      return new LmdbBackend(d);
    },
  ],
  [
    "postgres",
    async () => {
      const url = await freshStoreUrl();
      const b = await PostgresBackend.open(url);
      urls.set(b, url);
      return b;
    },
  ],
];

const collect = async <T>(it: AsyncIterable<T>): Promise<T[]> => {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
};

for (const [name, make] of makers) {
  test(`${name}: tuple keys sort element by element, ranges are half-open`, async (t) => {
    const b = await make();
    await b.transact({}, (tx) => {
      for (const k of ["a", "a/b", "a.b", "b", "A", "a-"]) tx.put(["h", "t1", "ns", k], { k });
      tx.put(["h", "t1", "ns2", "a"], { k: "other ns" });
      tx.put(["h", "t2", "ns", "a"], { k: "other tenant" });
      tx.put(["v", "t1", "ns", "a", 2], 2);
      tx.put(["v", "t1", "ns", "a", 10], 10);
    });
    const keys = (await collect(b.range(["h", "t1", "ns", ""], ["h", "t1", "ns", "\uffff"]))).map((e) => e.key[3]);
    t.deepEqual(keys, ["A", "a", "a-", "a.b", "a/b", "b"], "byte order within one (tenant, namespace)");
    const pre = (await collect(b.range(["h", "t1", "ns", "a"], ["h", "t1", "ns", "a\uffff"]))).map((e) => e.key[3]);
    t.deepEqual(pre, ["a", "a-", "a.b", "a/b"], "prefix range");
    const versions = (await collect(b.range(["v"], ["v", "\uffff"]))).map((e) => e.key[4]);
    t.deepEqual(versions, [2, 10], "numbers sort as numbers");
    const all = (await collect(b.range(["h"], ["h", "\uffff"]))).map((e) => e.key.slice(1).join("/"));
    t.equal(all.length, 8, "a family's whole range");
    t.deepEqual(all.slice(-2), ["t1/ns2/a", "t2/ns/a"], "tenants, then namespaces, in order");
    t.deepEqual(await b.get(["v", "t1", "ns", "a", 10]), 10, "numeric element");
    t.equal(await b.get(["h", "t1", "ns", "zz"]), undefined, "absent key");
    await b.close();
  });

  test(`${name}: a long range comes whole and in order`, async (t) => {
    const b = await make();
    const n = 2500;
    await b.transact({}, (tx) => {
      for (let i = 0; i < n; i++) tx.put(["h", "t", "big", `k${String(i).padStart(5, "0")}`], { i });
    });
    const got = await collect(b.range(["h", "t", "big", ""], ["h", "t", "big", "\uffff"]));
    t.equal(got.length, n, `${n} entries`);
    t.ok(
      got.every((e, i) => (e.value as { i: number }).i === i),
      "in key order, each once",
    );
    await b.close();
  });

  test(`${name}: a transaction that throws keeps nothing`, async (t) => {
    const b = await make();
    const k = ["h", "t", "ns", "k"] as const;
    const k2 = ["h", "t", "ns", "k2"] as const;
    await b.transact({}, (tx) => tx.put(k, 1));
    try {
      await b.transact({ keys: [k] }, (tx) => {
        tx.put(k, 2);
        tx.put(k2, 3);
        tx.putPayload("t", "p1", new Uint8Array([1, 2, 3]));
        throw new Error("boom");
      });
      t.fail("transaction should reject");
    } catch (e) {
      t.equal((e as Error).message, "boom", "the callback's error rejects the transaction");
    }
    t.equal(await b.get(k), 1, "earlier value kept");
    t.equal(await b.get(k2), undefined, "no new record");
    t.equal(await b.hasPayload("t", "p1"), false, "no new payload");
    const seen = await b.transact({ keys: [k] }, (tx) => {
      tx.put(k, 5);
      return tx.get(k);
    });
    t.equal(seen, 5, "a transaction reads its own writes");
    t.equal(await b.get(k), 5, "and they are kept");
    try {
      await b.transact({ keys: [k] }, (tx) => tx.get(k2));
      t.fail("an undeclared read must throw");
    } catch (e) {
      t.match((e as Error).message, /undeclared key/, "reads outside the declared set are refused");
    }
    await b.close();
  });

  test(`${name}: payloads are stored apart, deduplicated and listed`, async (t) => {
    const b = await make();
    const bytes = new Uint8Array(100_000).map((_, i) => i % 251);
    await b.transact({}, (tx) => {
      tx.putPayload("t", "x", bytes);
      tx.putPayload("t", "y", new Uint8Array([9]));
    });
    await b.transact({}, (tx) => tx.putPayload("t", "y", new Uint8Array([7, 7]))); // same id: kept as first stored
    t.equal(Buffer.compare((await b.getPayload("t", "x"))!, Buffer.from(bytes)), 0, "payload round trip");
    t.deepEqual([...(await b.getPayload("t", "y"))!], [9], "a payload of an existing id is not written again");
    const many = await b.getPayloads("t", ["x", "y", "nope"]);
    t.deepEqual([...many.keys()].sort(), ["x", "y"], "getPayloads returns those that exist");
    const ids = await b.transact({ payloads: true }, (tx) => {
      tx.removePayload("t", "y");
      return [...tx.payloadIds()].map((p) => p.id).sort();
    });
    t.deepEqual(ids, ["x"], "payloadIds reflects the transaction's removals");
    t.equal(await b.getPayload("t", "y"), undefined, "removed payload gone");
    await b.close();
  });
}

test("postgres: payloads larger than a chunk are split over rows of at most CHUNK_BYTES, per tenant", async (t) => {
  const b = (await makers[2]![1]()) as PostgresBackend;
  const big = new Uint8Array(CHUNK_BYTES * 2 + 12345).map((_, i) => (i * 7) % 256);
  await b.transact({}, (tx) => {
    tx.putPayload("t1", "big", big);
    tx.putPayload("t2", "big", big);
  });
  const rows = await sql<{ tenant_id: string; n: string; max: number }>(
    urls.get(b)!,
    "SELECT tenant_id, count(*) AS n, max(octet_length(data)) AS max FROM payload_chunks GROUP BY tenant_id ORDER BY tenant_id",
  );
  t.deepEqual(
    rows.map((r) => [r.tenant_id, Number(r.n)]),
    [
      ["t1", 3],
      ["t2", 3],
    ],
    "three chunks for each tenant (no row refers across tenants)",
  );
  t.ok(
    rows.every((r) => r.max <= CHUNK_BYTES),
    `no chunk above ${CHUNK_BYTES} bytes`,
  );
  t.equal(Buffer.compare((await b.getPayload("t1", "big"))!, Buffer.from(big)), 0, "reassembled bit-exact");
  t.equal(await b.getPayload("t3", "big"), undefined, "another tenant does not see it");
  await sql(urls.get(b)!, "DELETE FROM payload_chunks WHERE tenant_id = 't1' AND seq = 1");
  t.equal(await b.getPayload("t1", "big"), undefined, "a payload missing a chunk reads as missing, never short");
  await b.close();
});

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
