// compact on LMDB beside writers. It was one write transaction, and LMDB lets one writer at a time
// (in every process): on a store of 200,000 deleted keys a put beside it waited 3.3 s. It now
// goes a page at a time, and a put waits at most for one page. A payload that compact found
// unused but that a put names again before its removal must stay (puts deduplicate payloads by
// their hash): such a put marks it while a compaction is under way.
import test from "tape";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { FakeClock } from "../../lib/clock.js";
import { StoreUnavailableError } from "../../lib/errors.js";
import { createStore, type Store } from "../../lib/store/index.js";
import { LmdbBackend, COMPACT_PAGE } from "../../lib/store/lmdb.js";
import { rulesAt } from "../../lib/store/maintenance.js";
import { fillCompactCase, payload, payloadNamedAgain, writersBeside } from "./compact-case.js";

const T0 = Date.parse("2026-03-01T00:00:00Z");
const DAY = 86_400_000;

const bytesOf = async (s: Store, key: string): Promise<Buffer> => Buffer.from((await s.serve("ns", key)).data as Uint8Array);

function tempDir(): { dir: string; [Symbol.dispose](): void } {
  const dir = mkdtempSync(join(tmpdir(), "svc-lmdb-compact-"));
  return { dir, [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }) };
}

test("lmdb compact: a put goes through between compact's steps; a payload named again before its removal is kept", async (t) => {
  using tmp = tempDir();
  const s = await createStore({ path: tmp.dir, clock: new FakeClock(T0) });
  const backend = new LmdbBackend(tmp.dir);
  try {
    await payloadNamedAgain(t, s, backend, T0 + 31 * DAY);
    const left: unknown[] = [];
    for await (const e of backend.range(["gt"], ["gt", "\uffff"])) left.push(e.key);
    t.deepEqual({ record: await backend.get(["gc"]), marks: left }, { record: undefined, marks: [] }, "no record of the compaction, nor its marks, is left");

    await s.delete("ns", "b");
    t.deepEqual(await backend.compact(rulesAt(T0 + 62 * DAY)), { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "X purged once b is gone");
    t.ok((await bytesOf(s, "other")).equals(payload("Y")), "other reads back its bytes");
  } finally {
    await backend.close();
    await s.close();
  }
});

test("lmdb compact: the marks of more payloads than a transaction removes, put during it, are all gone after it, and those payloads kept", async (t) => {
  using tmp = tempDir();
  const s = await createStore({ path: tmp.dir, clock: new FakeClock(T0) });
  const backend = new LmdbBackend(tmp.dir);
  const n = 1_100; // past the 1,024 marks removed in one transaction
  try {
    await s.put("ns", "gone", payload("A"));
    await s.delete("ns", "gone");
    const r = await backend.compact(rulesAt(T0 + 31 * DAY), {
      beforePayloads: async () => {
        for (let i = 0; i < n; i += 100) await Promise.all(Array.from({ length: 100 }, (_, j) => s.put("ns", `new-${i + j}`, payload(`n${i + j}`))));
      },
    });
    t.deepEqual(r, { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "the deleted key's payload purged, none of the new ones");
    const marks: unknown[] = [];
    for await (const e of backend.range(["gt"], ["gt", "\uffff"])) marks.push(e.key);
    t.deepEqual(
      { record: await backend.get(["gc"]), marks: marks.length },
      { record: undefined, marks: 0 },
      "no record of the compaction, nor any mark, is left",
    );
    const missing: string[] = [];
    for (let i = 0; i < n; i++) if (!(await bytesOf(s, `new-${i}`)).equals(payload(`n${i}`))) missing.push(`new-${i}`);
    t.deepEqual(missing, [], `the ${n} keys put during it read back their bytes`);
  } finally {
    await backend.close();
    await s.close();
  }
});

test("lmdb compact: more than a page of each family, purged as on the other backends", async (t) => {
  using tmp = tempDir();
  const s = await createStore({ path: tmp.dir, clock: new FakeClock(T0) });
  try {
    await fillCompactCase(s);
    const n = COMPACT_PAGE * 2 + 10;
    for (let i = 0; i < n; i++) {
      await s.put("ns", `gone-${i}`, payload(`g${i}`));
      await s.delete("ns", `gone-${i}`);
      await s.idempotent(`once-${i}`, "hash").put("ns", `idem-${i}`, payload("D"));
    }
    t.deepEqual(await s.compact({ now: T0 + 2 * DAY }), { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "two days on: no tombstone has expired");
    const r = await s.compact({ now: T0 + 31 * DAY });
    t.deepEqual(
      r,
      { versions_purged: n + 2, keys_purged: n + 1, payloads_purged: n + 1 },
      "every deleted key on every page, twice's first version, their payloads",
    );
    for (const [k, b] of [
      ["keep", "B"],
      ["twice", "C"],
      ["idem", "D"],
      ["idem-300", "D"],
    ] as const)
      t.ok((await bytesOf(s, k)).equals(payload(b)), `${k} reads back its bytes`);
    // the idempotency records are gone (two days and more): the same key and hash is a new put
    const again = await s.idempotent("once-300", "hash").put("ns", "idem-300", payload("D"));
    t.equal(again.version, 2, "an idempotency record older than 24 hours was purged, on a later page too");
  } finally {
    await s.close();
  }
});

test("lmdb compact: one at a time; the record of one whose process died is taken over", async (t) => {
  using tmp = tempDir();
  const s = await createStore({ path: tmp.dir, clock: new FakeClock(T0) });
  const backend = new LmdbBackend(tmp.dir);
  try {
    await s.put("ns", "a", payload("X"));
    await s.delete("ns", "a");
    let second: unknown = null;
    const first = await backend.compact(rulesAt(T0 + 31 * DAY), {
      beforePayloads: async () => {
        second = await s.compact({ now: T0 + 31 * DAY }).catch((e: unknown) => e);
      },
    });
    t.ok(second instanceof StoreUnavailableError, "a second compaction while one runs: store_unavailable");
    t.match(
      (second as Error).message,
      new RegExp(`^Another compaction of this store is under way \\(process ${process.pid}\\); run it again once that one ends\\.$`),
      "one sentence",
    );
    t.deepEqual(first, { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "the first one finishes");

    // a compaction whose process died left its record
    const dead = spawn(process.execPath, ["-e", ""]);
    const pid = dead.pid!;
    await new Promise((r) => dead.once("exit", r));
    await backend.transact({ keys: [["gc"]] }, (tx) => tx.put(["gc"], { at: Date.now(), pid, token: "left" }));
    await s.put("ns", "c", payload("Z"));
    await s.delete("ns", "c");
    t.deepEqual(
      await s.compact({ now: T0 + 62 * DAY }),
      { versions_purged: 1, keys_purged: 1, payloads_purged: 1 },
      "a record whose process is gone is taken over",
    );
    t.equal(await backend.get(["gc"]), undefined, "and removed at the end");

    // one this process ran that could not remove its record (a full disk, say)
    await backend.transact({ keys: [["gc"]] }, (tx) => tx.put(["gc"], { at: Date.now(), pid: process.pid, token: "ended" }));
    await s.put("ns", "d", payload("W"));
    await s.delete("ns", "d");
    t.deepEqual(
      await s.compact({ now: T0 + 93 * DAY }),
      { versions_purged: 1, keys_purged: 1, payloads_purged: 1 },
      "a record of this process that no running compaction holds is taken over",
    );
  } finally {
    await backend.close();
    await s.close();
  }
});

test("lmdb compact: writers putting and deleting shared payloads while compact runs again and again lose nothing", async (t) => {
  using tmp = tempDir();
  const s = await createStore({ path: tmp.dir, clock: new FakeClock(T0) });
  try {
    await writersBeside(
      t,
      s,
      async (writing) => {
        let runs = 0;
        // every tombstone expired at once: each run purges what the writers deleted so far
        for (; writing(); runs++) await s.compact({ now: T0 + 365 * DAY });
        return runs;
      },
      { ops: 60, seed: 4242, now: T0 + 365 * DAY },
    );
  } finally {
    await s.close();
  }
});

test("lmdb compact: the same with compact in processes of their own (svc compact beside an engine)", async (t) => {
  using tmp = tempDir();
  const s = await createStore({ path: tmp.dir, clock: new FakeClock(T0) });
  const compactor = fileURLToPath(new URL("./fixtures/compactor.ts", import.meta.url));
  try {
    await writersBeside(
      t,
      s,
      async (writing) => {
        let runs = 0;
        for (; writing(); runs++) {
          const code = await new Promise<number | null>((resolve) => {
            const c = spawn(process.execPath, ["--import", "tsx", compactor, tmp.dir, String(T0 + 365 * DAY)], { stdio: "ignore" });
            c.once("exit", resolve);
          });
          if (code !== 0) throw new Error(`the compacting process exited ${code}`);
        }
        return runs;
      },
      { ops: 150, seed: 4242, now: T0 + 365 * DAY },
    );
  } finally {
    await s.close();
  }
});
