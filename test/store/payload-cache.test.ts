// The store's payload cache (lib/store/context.ts PayloadCache): a serve of an entry read
// recently takes its bytes from memory (on LMDB, no second trip to the reader thread), the
// answer is the caller's to write into without changing what later serves return, tenants
// never share an entry, serveReadOnly answers with the cached bytes themselves, the bound and the per-item cap hold, least recently used goes first,
// and `payload_cache_bytes: 0` keeps nothing.
import test from "tape";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PayloadCache } from "../../lib/store/context.js";
import { createStore } from "../../lib/store/index.js";
import { LARGE_BYTES } from "../../lib/store/lmdb.js";
import { largeReaderStats } from "../../lib/store/lmdb-reader.js";
import { NotFoundError } from "../../lib/errors.js";

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "svc-payload-cache-"));
  dirs.push(d);
  return d;
};
const bytesOf = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

test("PayloadCache: LRU order, the byte bound and the per-item cap", (t) => {
  const c = new PayloadCache(8 * 1024);
  t.equal(c.maxItem, 1024, "an item is at most an eighth of the bound");
  c.set("a", Buffer.alloc(1000, 1));
  c.set("b", Buffer.alloc(1000, 2));
  c.set("big", Buffer.alloc(1025));
  t.notOk(c.has("big"), "an item over the cap is not kept");
  t.equal(c.bytes, 2000, "bytes held");
  t.equal(c.get("a")?.[0], 1, "a hit");
  for (let i = 0; i < 7; i++) c.set(`x${i}`, Buffer.alloc(1000));
  t.ok(c.bytes <= 8 * 1024, "never over the bound");
  t.ok(c.has("a"), "the entry read most recently stays");
  t.notOk(c.has("b"), "the least recently used went first");
  const none = new PayloadCache(0);
  none.set("a", Buffer.alloc(1));
  t.equal([none.has("a"), none.bytes].join(), "false,0", "a bound of 0 keeps nothing");
  t.end();
});

test("LMDB: a second serve of a large payload is answered from memory; the answer is the caller's", async (t) => {
  const store = await createStore({ path: tmp() });
  const s = store.forTenant("acme");
  const data = randomBytes(LARGE_BYTES + 777);
  await s.put("ns", "a", data);
  const before = largeReaderStats.answered;
  const first = await s.serve("ns", "a");
  t.equal(largeReaderStats.answered, before + 1, "the first serve reads through the reader thread");
  t.ok(bytesOf(first.data).equals(data), "the first serve: the same bytes");
  bytesOf(first.data).fill(0);
  const second = await s.serve("ns", "a");
  t.equal(largeReaderStats.answered, before + 1, "the second serve does not read the store's payload again");
  t.ok(bytesOf(second.data).equals(data), "writing into the first answer changed nothing the cache holds");
  t.notEqual(second.data.buffer, first.data.buffer, "each answer has memory of its own");
  const r1 = await s.serveReadOnly("ns", "a");
  const r2 = await s.serveReadOnly("ns", "a");
  t.ok(bytesOf(r1.data).equals(data), "serveReadOnly: the same bytes");
  t.equal(r1.data.buffer, r2.data.buffer, "serveReadOnly: answers share the cached memory (no copy)");
  t.notEqual((await s.serve("ns", "a")).data.buffer, r1.data.buffer, "serve after serveReadOnly: memory of its own");
  const sliced = await s.serve("ns", "a", { slice: [[10, 20]] });
  t.ok(bytesOf(sliced.data).equals(data.subarray(10, 20)), "a slice from the cached bytes");

  // a deleted entry is not served from the cache: the version record is read first
  await s.delete("ns", "a");
  try {
    await s.serve("ns", "a");
    t.fail("served after delete");
  } catch (e) {
    t.ok(e instanceof NotFoundError, "404 after delete");
  }
  await store.close();
});

test("tenants: the same bytes under two tenants are two cache entries, each tenant reads its own", async (t) => {
  const store = await createStore({ path: tmp() });
  const a = store.forTenant("a");
  const b = store.forTenant("b");
  const data = randomBytes(64 * 1024);
  await a.put("ns", "k", data);
  await b.put("ns", "k", data);
  t.ok(bytesOf((await a.serve("ns", "k")).data).equals(data), "tenant a");
  await b.delete("ns", "k");
  try {
    await b.serve("ns", "k");
    t.fail("tenant b served a deleted entry");
  } catch (e) {
    t.ok(e instanceof NotFoundError, "tenant b deleted its entry: 404 although tenant a's copy is cached");
  }
  t.ok(bytesOf((await a.serve("ns", "k")).data).equals(data), "tenant a still reads its entry");
  await store.close();
});

test("payload_cache_bytes: 0 keeps nothing and every serve reads the store", async (t) => {
  const store = await createStore({ path: tmp(), payload_cache_bytes: 0 });
  const s = store.forTenant("acme");
  const data = randomBytes(LARGE_BYTES);
  await s.put("ns", "a", data);
  const before = largeReaderStats.answered;
  for (let i = 0; i < 3; i++) t.ok(bytesOf((await s.serve("ns", "a")).data).equals(data), `serve ${i + 1}: the same bytes`);
  t.equal(largeReaderStats.answered, before + 3, "three reads through the reader thread");
  await store.close();
});

test("bad option values are refused", async (t) => {
  for (const v of [-1, 1.5, "64M", Number.NaN])
    try {
      await createStore({ path: ":memory:", payload_cache_bytes: v as number });
      t.fail(`accepted ${String(v)}`);
    } catch (e) {
      t.match((e as Error).message, /payload_cache_bytes/, `${String(v)} refused naming the option`);
    }
});

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
