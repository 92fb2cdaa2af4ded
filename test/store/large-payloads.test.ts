// LMDB payloads of LARGE_BYTES or more: written whole to payload_large by lmdb-js's write
// thread before the put's transaction and named by the index in it, read back by the store's
// reader thread; deduplicated as before, never left behind by a put that fails or loses a
// race, removed with their payload by compact, and swept by compact when a crash left one
// unnamed for an hour. Backups carry them.
import test from "tape";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { open } from "lmdb";
import { FakeClock } from "../../lib/clock.js";
import { backupStore } from "../../lib/store/backup.js";
import { createStore, TOMBSTONE_RETENTION_MS } from "../../lib/store/index.js";
import { LARGE_BYTES, LARGE_ORPHAN_MS, LmdbBackend } from "../../lib/store/lmdb.js";
import { LargeReader, largeReaderStats } from "../../lib/store/lmdb-reader.js";

const dirs: string[] = [];
const tmp = (name: string) => {
  const d = mkdtempSync(join(tmpdir(), `svc-large-${name}-`));
  dirs.push(d);
  return d;
};

/** Entries of payload_large and payload_index, read through a backend of their own. */
async function counts(path: string): Promise<{ large: number; index: number }> {
  const b = new LmdbBackend(path);
  try {
    const s = b.stats().dbs;
    return { large: s.payload_large?.entries ?? 0, index: s.payload_index?.entries ?? 0 };
  } finally {
    await b.close();
  }
}

test("a large payload goes to payload_large, reads back byte for byte, and is stored once", async (t) => {
  const dir = tmp("put");
  const store = await createStore({ path: dir });
  const s = store.forTenant("acme");
  const data = randomBytes(LARGE_BYTES + 12_345);
  const r = await s.put("ns", "a", data);
  t.equal(r.verdict, "passthrough", "random bytes: stored as they are");
  const small = randomBytes(50_000);
  await s.put("ns", "small", small);
  const answered = largeReaderStats.answered;
  const served = await s.serve("ns", "a");
  t.equal(largeReaderStats.answered, answered + 1, "read by the store's reader thread");
  t.ok(Buffer.from(served.data.buffer, served.data.byteOffset, served.data.byteLength).equals(data), "serve: the same bytes");
  t.ok(Buffer.from((await s.serve("ns", "small")).data as Uint8Array).equals(small), "a small payload alongside: the same bytes");
  await s.put("ns", "b", Buffer.from(data));
  await Promise.all([1, 2, 3, 4].map((i) => s.put("ns", `c${i}`, Buffer.from(data))));
  await store.close();
  t.deepEqual(await counts(dir), { large: 1, index: 2 }, "six puts of the same bytes, concurrent ones too: one value in payload_large, one index entry each");

  // the reopened store reads it again (through a new reader thread)
  const again = await createStore({ path: dir });
  const back = await again.forTenant("acme").serve("ns", "c3");
  t.ok(Buffer.from(back.data.buffer, back.data.byteOffset, back.data.byteLength).equals(data), "after reopening: the same bytes");
  await again.close();
});

test("a put that fails leaves nothing in payload_large", async (t) => {
  const dir = tmp("fail");
  const store = await createStore({ path: dir });
  const s = store.forTenant("acme");
  await s.put("ns", "k", randomBytes(1000));
  const err = await s.put("ns", "k", randomBytes(LARGE_BYTES * 2), { if_version: 0 }).then(
    () => null,
    (e: Error) => e,
  );
  t.equal((err as { code?: string } | null)?.code, "version_conflict", "if_version refused: 409");
  await store.close();
  t.deepEqual(await counts(dir), { large: 0, index: 1 }, "the staged value was removed");
});

test("compact removes a large payload no version keeps, and sweeps an hour-old value no entry names", async (t) => {
  const dir = tmp("compact");
  const clock = new FakeClock(Date.parse("2026-03-01T00:00:00Z"));
  const store = await createStore({ path: dir, clock });
  const s = store.forTenant("acme");
  const kept = randomBytes(LARGE_BYTES + 1);
  await s.put("ns", "kept", kept);
  await s.put("ns", "gone", randomBytes(LARGE_BYTES + 2));
  await s.delete("ns", "gone");
  // values a crash left between the two commits of a put: one two hours old, one just written
  const env = open({ path: dir, maxDbs: 8 });
  const large = env.openDB<Buffer, Buffer>({ name: "payload_large", encoding: "binary", keyEncoding: "binary" });
  const key = (ms: number) => {
    const b = Buffer.alloc(16);
    b.writeBigUInt64BE(BigInt(ms));
    b.write("orphan!!", 8);
    return b;
  };
  const young = key(Date.now() - 1000);
  await large.put(key(Date.now() - 2 * LARGE_ORPHAN_MS), randomBytes(100));
  await large.put(young, randomBytes(100));
  t.deepEqual(await counts(dir), { large: 4, index: 2 }, "before compact: two payloads and two unnamed values");
  clock.advance(TOMBSTONE_RETENTION_MS + 1000);
  const r = await store.compact();
  t.equal(r.payloads_purged, 1, "the deleted entry's payload purged");
  t.deepEqual(await counts(dir), { large: 2, index: 1 }, "after compact: the kept payload and the young unnamed value");
  t.ok(large.get(young) !== undefined, "the young value is still there (its put may be between its commits)");
  await env.close();
  const back = await s.serve("ns", "kept");
  t.ok(Buffer.from(back.data.buffer, back.data.byteOffset, back.data.byteLength).equals(kept), "the kept payload reads back");
  await store.close();
});

test("a backup carries large payloads", async (t) => {
  const dir = tmp("src");
  const to = join(tmp("dst"), "copy");
  const store = await createStore({ path: dir });
  const data = randomBytes(LARGE_BYTES * 3);
  await store.forTenant("acme").put("ns", "big", data);
  const b = await backupStore(dir, to);
  t.equal(b.payloads, 1, "one payload in the copy");
  await store.close();
  const copy = await createStore({ path: to });
  const back = await copy.forTenant("acme").serve("ns", "big");
  t.ok(Buffer.from(back.data.buffer, back.data.byteOffset, back.data.byteLength).equals(data), "served from the copy: the same bytes");
  await copy.close();
});

test("the reader thread: a missing key is undefined, a closed reader answers nothing", async (t) => {
  const dir = tmp("reader");
  const store = await createStore({ path: dir });
  await store.forTenant("acme").put("ns", "x", randomBytes(LARGE_BYTES));
  const reader = new LargeReader(dir);
  t.equal(await reader.read(Buffer.alloc(16, 1)), undefined, "a key that is not there: undefined");
  await reader.close();
  t.equal(await reader.read(Buffer.alloc(16, 1)), undefined, "after close: undefined, no new thread");
  await store.close();
});

test("cleanup", (t) => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  t.end();
});
