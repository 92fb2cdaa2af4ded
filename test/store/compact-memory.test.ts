// What compact holds in memory. On PostgreSQL it reads each table a page at a time (by key, or
// through a cursor) and removes a page at a time: a store of hundreds of thousands of keys was
// read whole into memory (1.3 GiB for 100,000 keys) and its removals sent as one batch past the
// statement timeout. Here every table holds more rows than a page (copies made with SQL), and the
// result must be the one the other backends give: expired idempotency records, the versions
// under expired tombstones, keys deleted for good and the payloads no kept version names go;
// everything else stays readable. On LMDB the heads are read lazily and only those that change
// are kept: each head (with up to 64 KiB of metadata) was held until the end.
import test from "tape";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { FakeClock } from "../../lib/clock.js";
import { createStore } from "../../lib/store/index.js";
import { RANGE_PAGE_ROWS } from "../../lib/store/postgres.js";
import { freshStoreUrl, sql } from "./pg-db.js";
import { copyGone, fillCompactCase, payload, rowCount, rowCounts } from "./compact-case.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";

const T0 = Date.parse("2026-03-01T00:00:00Z");
const DAY = 86_400_000;
const COPIES = RANGE_PAGE_ROWS * 2 + 100;

/** Runs test/store/fixtures/compactor.ts on `where` with a V8 heap of `heapMiB`: its exit code and output. */
function compactIn(heapMiB: number, where: string, now: number): Promise<{ code: number | null; out: string }> {
  const script = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "compactor.ts");
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, [`--max-old-space-size=${heapMiB}`, "--import", "tsx", script, where, String(now)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    c.stdout.on("data", (d: Buffer) => (out += d.toString()));
    c.stderr.resume();
    c.once("error", reject);
    c.once("exit", (code) => resolve({ code, out }));
  });
}

test("postgres compact: tables larger than a page, purged as on the other backends, the rest kept", async (t) => {
  const url = await freshStoreUrl();
  const clock = new FakeClock(T0);
  const s = await createStore({ url, clock });
  try {
    await fillCompactCase(s);
    // copies of the deleted key (head and version, naming payload A) and of the idempotency record
    await copyGone(url, COPIES);
    await sql(url, `INSERT INTO idempotency SELECT tenant_id, key || '-' || g, value FROM idempotency, generate_series(1, ${COPIES}) g`);
    const before = await rowCounts(url, "heads", "versions", "idempotency");
    t.deepEqual(before, { heads: COPIES + 4, versions: COPIES + 5, idempotency: COPIES + 1 }, `${COPIES} copies: more than two pages of ${RANGE_PAGE_ROWS}`);

    t.deepEqual(await s.compact({ now: T0 + DAY - 1 }), { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "before any expiry: nothing purged");
    t.equal(await rowCount(url, "idempotency"), COPIES + 1, "idempotency records younger than 24 hours are kept");
    t.deepEqual(await s.compact({ now: T0 + 2 * DAY }), { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "two days on: no tombstone has expired");
    t.equal(await rowCount(url, "idempotency"), 0, "every idempotency record older than 24 hours is gone, on every page");

    // a put of payload A's bytes while compact removes A: before compact it keeps A, after it
    // stores A again; either way its data is read back
    const [r, again] = await Promise.all([s.compact({ now: T0 + 31 * DAY }), s.put("ns", "again", payload("A"))]);
    t.equal(r.versions_purged, COPIES + 2, "the versions under expired tombstones, on every page");
    t.equal(r.keys_purged, COPIES + 1, "the keys deleted for good");
    t.ok(r.payloads_purged <= 1, `payload A at most (${r.payloads_purged}): a concurrent put may name it first`);
    t.deepEqual(await rowCounts(url, "heads", "versions"), { heads: 4, versions: 4 }, "left: keep, twice, idem and again, a version each");
    t.equal((await s.get("ns", "twice")).latest_version, 2, "the key with a live version keeps it");
    for (const [k, b] of [
      ["keep", "B"],
      ["twice", "C"],
      ["idem", "D"],
      ["again", "A"],
    ] as const)
      t.ok(Buffer.from((await s.serve("ns", k)).data as Uint8Array).equals(payload(b)), `${k} reads back its bytes`);
    t.equal(again.version, 1, "the concurrent put is version 1 of its key");
    await s.delete("ns", "again");
    t.deepEqual(await s.compact({ now: T0 + 62 * DAY }), { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "and A goes once nothing names it");
    t.equal(await rowCount(url, "payloads"), 3, "B, C and D are kept");
  } finally {
    await s.close();
  }
});

test("postgres compact: 40,000 deleted keys purged in a process whose heap is limited to 96 MiB", async (t) => {
  const url = await freshStoreUrl();
  const clock = new FakeClock(T0);
  const s = await createStore({ url, clock });
  const N = 40_000;
  try {
    await s.put("ns", "gone", payload("A"));
    await s.delete("ns", "gone");
    await s.put("ns", "keep", payload("B"));
    await copyGone(url, N);
  } finally {
    await s.close();
  }
  // read whole, these rows took several hundred MiB of heap: the process ran out of memory
  const r = await compactIn(96, url, T0 + 31 * DAY);
  t.equal(r.code, 0, "the compacting process exits 0");
  t.deepEqual(
    r.out.trim() ? JSON.parse(r.out) : null,
    { versions_purged: N + 1, keys_purged: N + 1, payloads_purged: 1 },
    "every deleted key, its version and payload A purged",
  );
  t.deepEqual(await rowCounts(url, "heads", "versions", "payloads"), { heads: 1, versions: 1, payloads: 1 }, "keep is left");
});

test("lmdb compact: 2,000 heads of 40 KiB of metadata each, compacted in a process whose heap is limited to 96 MiB", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-compact-memory-"));
  const clock = new FakeClock(T0);
  const s = await createStore({ path: dir, clock });
  const metadata = Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`field_${i}`, `value ${i} `.repeat(10)]));
  try {
    for (let i = 0; i < 2000; i++) await s.put("ns", `k${i}`, Buffer.from(`payload ${i}`), { metadata: { ...metadata, i } });
    await s.delete("ns", "k0");
  } finally {
    await s.close();
  }
  try {
    // held until the end, these heads took several hundred MiB of heap: out of memory
    const r = await compactIn(96, dir, T0 + 31 * DAY);
    t.equal(r.code, 0, "the compacting process exits 0");
    t.deepEqual(r.out.trim() ? JSON.parse(r.out) : null, { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "the deleted key purged");
    const after = await createStore({ path: dir });
    try {
      t.equal((await after.list("ns", { limit: 1000 })).total, 1999, "the other 1,999 keys are kept");
      t.equal((await after.get("ns", "k1999")).metadata.i, 1999, "with their metadata");
    } finally {
      await after.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
