// Tombstones of a key put and deleted over and over: those of one hour over adjacent versions
// are kept as one (the head stays small, so reads of the key do not slow down), with the later
// purge time; deletes more than an hour apart keep their own. Compaction purges accordingly.
import test from "tape";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { open } from "lmdb";
import { FakeClock } from "../../lib/clock.js";
import { createStore } from "../../lib/store/index.js";

const T0 = Date.UTC(2026, 0, 1);
const MIN = 60_000;
const DAY = 24 * 60 * MIN;
const data = new Float32Array(16).fill(1);

/** The tombstones of key k as stored in the LMDB database at dir. */
async function storedTombstones(dir: string): Promise<{ from: number; upto: number; purge_after: number }[]> {
  const env = open({ path: dir, maxDbs: 8, readOnly: true });
  try {
    const recs = env.openDB<Record<string, unknown>, (string | number)[]>({ name: "records", sharedStructuresKey: Symbol.for("svc.structures") });
    const { unpackRecord } = await import("../../lib/store/records.js");
    return (unpackRecord(recs.get(["h", "local", "ns", "k"])) as { tombstones: { from: number; upto: number; purge_after: number }[] }).tombstones;
  } finally {
    await env.close();
  }
}

test("tombstones: 300 put/delete cycles within an hour are one tombstone; cycles hours apart keep theirs", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-tomb-"));
  const clock = new FakeClock(T0);
  let s = await createStore({ path: dir, clock });
  for (let i = 0; i < 300; i++) {
    await s.put("ns", "k", data, { shape: [16] });
    await s.delete("ns", "k");
    clock.advance(10_000); // 300 cycles over 50 minutes
  }
  await s.close();
  const one = await storedTombstones(dir);
  t.deepEqual(
    one.map((x) => [x.from, x.upto]),
    [[1, 300]],
    "versions 1-300 under one tombstone",
  );
  t.equal(one[0]!.purge_after, T0 + 299 * 10_000 + 30 * DAY, "with the last delete's purge time");
  s = await createStore({ path: dir, clock });
  clock.advance(2 * 60 * MIN);
  await s.put("ns", "k", data, { shape: [16] });
  await s.delete("ns", "k");
  clock.advance(2 * 60 * MIN);
  await s.put("ns", "k", data, { shape: [16] });
  await s.delete("ns", "k");
  await s.close();
  const three = await storedTombstones(dir);
  t.deepEqual(
    three.map((x) => [x.from, x.upto]),
    [
      [1, 300],
      [301, 301],
      [302, 302],
    ],
    "deletes two hours apart keep a tombstone each",
  );
  s = await createStore({ path: dir, clock });
  const last = T0 + 299 * 10_000 + 30 * DAY;
  t.deepEqual(
    await s.compact({ now: T0 + 30 * DAY }),
    { versions_purged: 0, keys_purged: 0, payloads_purged: 0 },
    "the merged versions wait for the last delete's purge time",
  );
  const c = await s.compact({ now: last });
  t.equal(c.versions_purged, 300, "then all 300 are purged at once");
  const c2 = await s.compact({ now: last + 5 * 60 * MIN });
  t.deepEqual([c2.versions_purged, c2.keys_purged], [2, 1], "the later two at theirs, and the key with them");
  await s.close();
  await rm(dir, { recursive: true, force: true });
});

test("tombstones: a delete, a put and a delete within the hour on the memory store read as before", async (t) => {
  const clock = new FakeClock(T0);
  const s = await createStore({ path: ":memory:", clock });
  await s.put("ns", "k", data, { shape: [16] });
  const d1 = await s.delete("ns", "k");
  t.equal(d1.purge_after, new Date(T0 + 30 * DAY).toISOString(), "the answer's purge_after is the delete's own");
  clock.advance(MIN);
  t.equal((await s.put("ns", "k", data, { shape: [16], if_version: 0 })).version, 2, "the next put continues at version 2");
  const d2 = await s.delete("ns", "k");
  t.equal(d2.purge_after, new Date(T0 + MIN + 30 * DAY).toISOString(), "and its delete answers its own purge time");
  await s.get("ns", "k").then(
    () => t.fail("deleted key read"),
    (e: Error) => t.match(e.message, /No entry k/, "the key is gone"),
  );
  await s.close();
});

test("tombstones: churn that never stops keeps one tombstone per clock hour and does not hold back purging", async (t) => {
  const clock = new FakeClock(T0);
  const s = await createStore({ path: ":memory:", clock });
  // a cycle every 10 minutes for 5 hours: 30 deletes
  for (let i = 0; i < 30; i++) {
    await s.put("ns", "k", data, { shape: [16] });
    await s.delete("ns", "k");
    clock.advance(10 * MIN);
  }
  // the first hour's six deletes (purge times T0+30d .. T0+30d+50min) are purged within that hour
  const firstHour = await s.compact({ now: T0 + 30 * DAY + 59 * MIN });
  t.equal(firstHour.versions_purged, 6, "the first hour's versions are purged by the end of their hour, while the churn went on");
  const rest = await s.compact({ now: T0 + 30 * DAY + 5 * 60 * MIN });
  t.deepEqual([rest.versions_purged, rest.keys_purged], [24, 1], "and the other hours' at theirs");
  await s.close();
});
