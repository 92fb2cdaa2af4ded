// test-needs: postgres
// compact on PostgreSQL beside writers. It used to run as one transaction under a lock that every
// write waits for: on a store of a million keys (32 s) every write in that time waited, and was
// refused store_unavailable past the statement timeout. It now goes a page at a time: a write
// waits at most for one page's removals. A payload that compact found unused but that a put names
// again before its removal must stay (puts deduplicate payloads by their hash).
import test from "tape";
import pg from "pg";
import { FakeClock } from "../../lib/clock.js";
import { createStore, type Store } from "../../lib/store/index.js";
import { rulesAt } from "../../lib/store/maintenance.js";
import { PostgresBackend, RANGE_PAGE_ROWS } from "../../lib/store/postgres.js";
import { freshStoreUrl, sql } from "./pg-db.js";
import { copyGone, fillCompactCase, payload, rowCount, rowCounts, payloadNamedAgain, writersBeside } from "./compact-case.js";

const T0 = Date.parse("2026-03-01T00:00:00Z");
const DAY = 86_400_000;
const COPIES = RANGE_PAGE_ROWS * 2 + 100;

const bytesOf = async (s: Store, key: string): Promise<Buffer> => Buffer.from((await s.serve("ns", key)).data as Uint8Array);

/** Waits until a session of the database waits on a lock (compact on the row held), at most 60 s. */
async function untilLockWait(url: string): Promise<boolean> {
  for (let i = 0; i < 600; i++) {
    const n = Number(
      (await sql<{ n: string }>(url, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"))[0]!.n,
    );
    if (n > 0) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

test("postgres compact: a write goes through while compact waits on a row, instead of waiting for the whole run", async (t) => {
  const url = await freshStoreUrl();
  // the writes of an engine (its default statement timeout, 5 s), and compact with room to wait
  const s = await createStore({ url, clock: new FakeClock(T0) });
  const compactor = await createStore({ url, clock: new FakeClock(T0), timeout_ms: 60_000 });
  const holder = new pg.Client({ connectionString: url });
  holder.on("error", () => undefined);
  try {
    await fillCompactCase(s);
    await copyGone(url, COPIES);
    // another session holds one deleted head that compact must remove
    await holder.connect();
    await holder.query("BEGIN");
    await holder.query("SELECT 1 FROM heads WHERE key = 'gone-300' FOR UPDATE");
    const compacting = compactor.compact({ now: T0 + 31 * DAY });
    compacting.catch(() => undefined); // awaited below; a failure is reported there
    t.ok(await untilLockWait(url), "compact waits on the held row");

    const outcome = await s.put("ns", "fresh", payload("E")).then(
      (r) => `written as version ${r.version}`,
      (e: { code?: string }) => `refused: ${e.code}`,
    );
    t.equal(outcome, "written as version 1", "a put of another key is written while compact waits");
    t.ok((await bytesOf(s, "fresh")).equals(payload("E")), "and reads back");
    t.equal((await sql(url, "SELECT 1 FROM heads WHERE key = 'gone-300'")).length, 1, "the held deleted key is not purged yet");

    await holder.query("COMMIT");
    const r = await compacting;
    t.deepEqual(
      r,
      { versions_purged: COPIES + 2, keys_purged: COPIES + 1, payloads_purged: 1 },
      "then compact finishes: every deleted key and its version, twice's first version, payload A",
    );
    t.deepEqual(
      await rowCounts(url, "heads", "versions", "payloads"),
      { heads: 4, versions: 4, payloads: 4 },
      "left: keep, twice, idem and fresh, a version and a payload each",
    );
    for (const [k, b] of [
      ["keep", "B"],
      ["twice", "C"],
      ["idem", "D"],
      ["fresh", "E"],
    ] as const)
      t.ok((await bytesOf(s, k)).equals(payload(b)), `${k} reads back its bytes`);
  } finally {
    await holder.end().catch(() => undefined);
    await compactor.close();
    await s.close();
  }
});

test("postgres compact: a payload found unused but named again by a put before its removal is kept", async (t) => {
  const url = await freshStoreUrl();
  const s = await createStore({ url, clock: new FakeClock(T0) });
  const backend = await PostgresBackend.open(url);
  try {
    await payloadNamedAgain(t, s, backend, T0 + 31 * DAY);
    t.equal(await rowCount(url, "payload_chunks"), 3, "X, Y and Z keep their chunks");

    // once nothing names it, X goes
    await s.delete("ns", "b");
    t.deepEqual(await backend.compact(rulesAt(T0 + 62 * DAY)), { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "X purged once b is gone");
    t.deepEqual(
      { payloads: await rowCount(url, "payloads"), chunks: await rowCount(url, "payload_chunks") },
      { payloads: 2, chunks: 2 },
      "Y and Z are left, with their chunks",
    );
    t.ok((await bytesOf(s, "other")).equals(payload("Y")), "other reads back its bytes");
  } finally {
    await backend.close();
    await s.close();
  }
});

test("postgres compact: writers putting and deleting shared payloads while compact runs again and again lose nothing", async (t) => {
  const url = await freshStoreUrl();
  const s = await createStore({ url, clock: new FakeClock(T0) });
  try {
    const { kept, live } = await writersBeside(
      t,
      s,
      async (writing) => {
        let runs = 0;
        // every tombstone expired at once: each run purges what the writers deleted so far
        for (; writing(); runs++) await s.compact({ now: T0 + 365 * DAY });
        return runs;
      },
      { ops: 40, seed: 12345, now: T0 + 365 * DAY },
    );
    t.ok(kept >= live, "at least the live keys' versions are kept");
  } finally {
    await s.close();
  }
});
