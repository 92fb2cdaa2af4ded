// Range reads of the PostgreSQL backend (list, search, top-K, migrate) hold a bounded number of
// rows at once: a range larger than a page is read through a cursor, a page per statement, in one
// snapshot; a caller that stops early gives its connection back. A namespace's heads carry up to
// 64 KiB of metadata each, so reading them in one statement held the whole namespace in memory.
import test from "tape";
import pg from "pg";
import { StoreUnavailableError } from "../../lib/errors.js";
import { createStore } from "../../lib/store/index.js";
import { PostgresBackend } from "../../lib/store/postgres.js";
import type { RecordEntry } from "../../lib/store/backend.js";
import { freshStoreUrl, sql } from "./pg-db.js";

const END = "\uffff";
const PAGE = 8;

/** Sessions of the store's database other than this one that sit in a transaction with a cursor open. */
async function cursorSessions(url: string): Promise<number> {
  const rows = await sql<{ n: string }>(
    url,
    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%' AND query LIKE 'FETCH%'",
  );
  return Number(rows[0]!.n);
}

test("postgres range: a namespace larger than a page is read a page at a time, in one snapshot", async (t) => {
  const url = await freshStoreUrl();
  const store = await createStore({ url, tenant: "t1" });
  const n = PAGE * 5 + 3;
  for (let i = 0; i < n; i++) await store.put("ns", `k${String(i).padStart(3, "0")}`, Buffer.from(`v${i}`), { metadata: { i, quote: 'it\'s \\ "x"' } });
  await store.forTenant("t2").put("ns", "other", Buffer.from("x"));
  const b = await PostgresBackend.open(url, { poolSize: 4, rangePageRows: PAGE });
  const it = b.range(["h", "t1", "ns"], ["h", "t1", "ns", END])[Symbol.asyncIterator]();
  const seen: RecordEntry[] = [];
  const firstItem = await it.next();
  if (!firstItem.done) seen.push(firstItem.value);
  t.equal(await cursorSessions(url), 1, "after the first entry, one session holds the rest behind a cursor (not all rows fetched)");
  // a write committed meanwhile is not seen by the listing under way
  await store.put("ns", "k000a", Buffer.from("late"));
  await store.delete("ns", "k001");
  for (let r = await it.next(); !r.done; r = await it.next()) seen.push(r.value);
  t.equal(seen.length, n, `${n} heads, none added or lost between pages`);
  t.deepEqual(
    seen.map((e) => e.key[3]),
    Array.from({ length: n }, (_, i) => `k${String(i).padStart(3, "0")}`),
    "every key once, in order, as of the snapshot",
  );
  t.equal(await cursorSessions(url), 0, "the cursor's transaction ended with the range");
  // a range read again sees the writes
  let again = 0;
  for await (const _ of b.range(["h", "t1", "ns"], ["h", "t1", "ns", END])) again++;
  t.equal(again, n + 1, "a new range sees the added key (the deleted one keeps its head)");
  await b.close();
  await store.close();
});

test("postgres range: callers that stop early give their connections back; concurrent large ranges wait for a slot", async (t) => {
  const url = await freshStoreUrl();
  const store = await createStore({ url });
  for (let i = 0; i < PAGE * 3; i++) await store.put("ns", `k${String(i).padStart(3, "0")}`, Buffer.from(`v${i}`));
  const b = await PostgresBackend.open(url, { poolSize: 2, rangePageRows: PAGE });
  for (let round = 0; round < 6; round++) {
    let got = 0;
    for await (const _ of b.range(["h"], ["h", END])) if (++got === PAGE + 2) break;
    t.equal(got, PAGE + 2, `round ${round}: stopped after ${PAGE + 2} heads`);
  }
  t.equal(await cursorSessions(url), 0, "no transaction left open by the callers that stopped");
  // eight large ranges at once on a pool of two: each completes, none fails
  const counts = await Promise.all(
    Array.from({ length: 8 }, async () => {
      let c = 0;
      for await (const _ of b.range(["h"], ["h", END])) c++;
      return c;
    }),
  );
  t.deepEqual(counts, Array(8).fill(PAGE * 3), "eight concurrent ranges each read every head");
  t.ok((await b.get(["h", "local", "ns", "k000"])) !== undefined, "the pool still serves single reads");
  await b.close();
  await store.close();
});

test("postgres range: a store of the default page size lists and searches a namespace of several pages", async (t) => {
  const url = await freshStoreUrl();
  const store = await createStore({ url });
  const n = 600;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  // the heads are copied in SQL from one written through the store (600 puts would be slow)
  await store.put("ns", "k0000", Buffer.from("x"), { metadata: { n: 1 } });
  await c.query(
    "INSERT INTO heads (tenant_id, namespace, key, value) SELECT tenant_id, namespace, 'k' || lpad(g::text, 4, '0'), value FROM heads, generate_series(1, $1) g",
    [n - 1],
  );
  await c.query(
    "INSERT INTO versions (tenant_id, namespace, key, version, value) SELECT tenant_id, namespace, 'k' || lpad(g::text, 4, '0'), version, value FROM versions, generate_series(1, $1) g",
    [n - 1],
  );
  await c.end();
  const l = await store.list("ns", { offset: 590, limit: 1000 });
  t.equal(l.total, n, `list total ${n}`);
  t.deepEqual(
    l.keys.map((k) => k.key),
    Array.from({ length: 10 }, (_, i) => `k${String(590 + i).padStart(4, "0")}`),
    "the last page of the listing",
  );
  const s = await store.search("ns", { n: 1 }, { limit: 5, offset: 597 });
  t.equal(s.total, n, "search total");
  t.deepEqual(
    s.results.map((r) => r.key),
    ["k0597", "k0598", "k0599"],
    "the last results of the search",
  );
  await store.close();
});

test("postgres range: a connection lost between pages is store_unavailable, and the pool serves the next read", async (t) => {
  const url = await freshStoreUrl();
  const store = await createStore({ url });
  for (let i = 0; i < PAGE * 3; i++) await store.put("ns", `k${String(i).padStart(3, "0")}`, Buffer.from(`v${i}`));
  const b = await PostgresBackend.open(url, { poolSize: 2, rangePageRows: PAGE });
  const it = b.range(["h"], ["h", END])[Symbol.asyncIterator]();
  await it.next();
  // the database ends the cursor's session (a restart, an administrator) mid-listing
  const ended = await sql<{ ok: boolean }>(
    url,
    "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'FETCH%'",
  );
  t.equal(ended.length, 1, "the cursor's session was ended");
  const err = await (async () => {
    for (;;) if ((await it.next()).done) return null;
  })().catch((e: unknown) => e);
  t.ok(err instanceof StoreUnavailableError, `the listing fails with store_unavailable (${(err as Error)?.message})`);
  let n = 0;
  for await (const _ of b.range(["h"], ["h", END])) n++;
  t.equal(n, PAGE * 3, "a new listing reads every head");
  await b.close();
  await store.close();
});
