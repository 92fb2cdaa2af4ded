// CU table, UTC month periods and the usage stores (memory, local file, Redis).
import test from "tape";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  LocalFileUsageStore,
  MemoryUsageStore,
  milliCusOf,
  periodEndMs,
  periodOf,
  RedisUsageStore,
  toCus,
  type UsageStore,
} from "../../server/gateway/meter.js";
import { redisFor, uniquePrefix } from "./helpers.js";

test("the documented CU table in milli-CUs; serve by device", (t) => {
  const expect: Array<[Parameters<typeof milliCusOf>[0], string | undefined, number]> = [
    ["put", undefined, 1000],
    ["put_cores", undefined, 1000],
    ["put_cores_batch", undefined, 2000],
    ["get", undefined, 100],
    ["serve", undefined, 500],
    ["serve", "cpu", 500],
    ["serve", "gpu", 2000],
    ["search", undefined, 500],
    ["delete", undefined, 100],
    ["list", undefined, 100],
    ["query_similarity", undefined, 1000],
    ["query_topk", undefined, 1000],
    ["query_vector", undefined, 1000],
  ];
  for (const [op, dev, m] of expect) t.equal(milliCusOf(op, dev), m, `${op}${dev ? ` (${dev})` : ""}: ${m / 1000} CU`);
  t.end();
});

test("periods are UTC months; the period ends on the 1st of the next month 00:00 UTC", (t) => {
  t.equal(periodOf(Date.UTC(2026, 0, 31, 23, 59, 59, 999)), "2026-01");
  t.equal(periodOf(Date.UTC(2026, 1, 1, 0, 0, 0, 0)), "2026-02");
  t.equal(periodOf(Date.UTC(2026, 11, 31, 23, 0)), "2026-12");
  t.equal(new Date(periodEndMs(Date.UTC(2026, 11, 5))).toISOString(), "2027-01-01T00:00:00.000Z", "December rolls into January");
  t.equal(new Date(periodEndMs(Date.UTC(2028, 1, 29, 12))).toISOString(), "2028-03-01T00:00:00.000Z", "leap February");
  t.end();
});

async function exercise(t: test.Test, s: UsageStore, label: string) {
  for (let i = 0; i < 10; i++) await s.add("acme", "2026-01", "get", 100);
  await s.add("acme", "2026-01", "serve", 2000);
  await s.add("acme", "2026-02", "put", 1000);
  await s.add("beta", "2026-01", "put", 1000);
  t.equal(await s.total("acme", "2026-01"), 3000, `${label}: total exact`);
  t.equal(toCus(await s.total("acme", "2026-01")), 3, `${label}: 3 CUs`);
  t.deepEqual(await s.get("acme", "2026-01"), { total_milli: 3000, breakdown_milli: { get: 1000, serve: 2000 } }, `${label}: breakdown`);
  t.deepEqual(await s.get("acme", "2026-02"), { total_milli: 1000, breakdown_milli: { put: 1000 } }, `${label}: months are separate`);
  t.deepEqual(await s.get("nobody", "2026-01"), { total_milli: 0, breakdown_milli: {} }, `${label}: empty usage`);
}

test("memory usage store", async (t) => {
  await exercise(t, new MemoryUsageStore(), "memory");
});

test("local-file usage store persists atomically and survives a reopen", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-usage-"));
  const s = await LocalFileUsageStore.open(dir, 20);
  await exercise(t, s, "local");
  await s.close();
  const onDisk = JSON.parse(await readFile(join(dir, "usage.json"), "utf8"));
  t.equal(onDisk.usage["2026-01"].acme._total, 3000, "the file holds the counters");
  const s2 = await LocalFileUsageStore.open(dir);
  t.equal(await s2.total("acme", "2026-01"), 3000, "reopened store has the same usage");
  await s2.close();
  await rm(dir, { recursive: true, force: true });
});

test("local-file usage store refuses a corrupt file instead of starting from zero", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-usage-"));
  const { writeFile } = await import("node:fs/promises");
  await writeFile(join(dir, "usage.json"), "{ half");
  try {
    await LocalFileUsageStore.open(dir);
    t.fail("opened a corrupt file");
  } catch (e) {
    t.match((e as Error).message, /is not valid/, "a sentence naming the problem");
  }
  t.equal(await readFile(join(dir, "usage.json"), "utf8"), "{ half", "the file was left as it is");
  await rm(dir, { recursive: true, force: true });
});

test("redis usage store (HINCRBY): exact sums across two connections", async (t) => {
  const prefix = uniquePrefix();
  const a = await redisFor(prefix);
  const b = await redisFor(prefix);
  await exercise(t, new RedisUsageStore(a.redis, prefix), "redis");
  const sb = new RedisUsageStore(b.redis, prefix);
  await Promise.all(Array.from({ length: 50 }, () => sb.add("acme", "2026-01", "get", 100)));
  t.equal(await new RedisUsageStore(a.redis, prefix).total("acme", "2026-01"), 8000, "usage from both connections sums exactly");
  await b.redis.quit();
  await a.cleanup();
});
