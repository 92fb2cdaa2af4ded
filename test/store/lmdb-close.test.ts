// Closing an LMDB store under operations in flight. lmdb-js closing its environment under a
// read, a snapshot cursor or a write can end the process in native code (a segmentation
// fault after "No current read transaction available"), so close() refuses new operations,
// waits for those under way, each of which ends at its next step with the store's closed
// error, and only then closes the environment.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StoreUnavailableError } from "../../lib/errors.js";
import { LmdbBackend } from "../../lib/store/lmdb.js";
import { rulesAt } from "../../lib/store/maintenance.js";
import type { RecordKey, TxReads } from "../../lib/store/backend.js";

const BIG = 2 * 1024 * 1024; // written to payload_large, read by the reader's thread
const ID = "a".repeat(64);
const DAY = 86_400_000;

function tempDir(): { dir: string; [Symbol.dispose](): void } {
  const dir = mkdtempSync(join(tmpdir(), "svc-lmdb-close-"));
  return { dir, [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A backend holding one large payload, named by nothing, and `n` plain records (family "x", which compact leaves alone). */
async function filled(dir: string, n: number): Promise<LmdbBackend> {
  const b = new LmdbBackend(dir);
  const big = Buffer.alloc(BIG, 7);
  const reads: TxReads = { keys: [], stage: [{ tenant: "", id: ID, bytes: big }] };
  await b.transact(reads, (tx) => {
    tx.putPayload("", ID, big);
    for (let i = 0; i < n; i++) tx.put(["x", `k${String(i).padStart(5, "0")}`], { n: i });
  });
  return b;
}

const isClosed = (e: unknown): boolean => e instanceof StoreUnavailableError && e.message === "The store is closed.";
const settled = async (p: Promise<unknown>): Promise<boolean> => {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  return done;
};

test("lmdb close: a range paused between entries holds the close, and ends with the closed error when resumed", async (t) => {
  using tmp = tempDir();
  const b = await filled(tmp.dir, 10);
  const it = b.range(["x"], ["x", "\uffff"])[Symbol.asyncIterator]();
  const first = await it.next();
  t.deepEqual(first.value?.key, ["x", "k00000"], "the first entry");
  const closing = b.close();
  t.notOk(await settled(closing), "close() waits while the range's cursor is open");
  try {
    await it.next();
    t.fail("the range went on after close()");
  } catch (e) {
    t.ok(isClosed(e), `resumed, the range ends with the closed error (${(e as Error).message})`);
  }
  await closing;
  t.pass("close() resolves once the range has ended");
});

test("lmdb close: a large read in flight is answered with its bytes; a write in flight is committed", async (t) => {
  using tmp = tempDir();
  const b = await filled(tmp.dir, 1);
  const read = b.getPayloads("", [ID]);
  const write = b.transact({ keys: [] }, (tx) => tx.put(["x", "late"], { n: -1 }));
  const closing = b.close();
  const [r, w] = await Promise.allSettled([read, write]);
  if (r.status === "fulfilled") {
    const got = r.value.get(ID);
    t.ok(got !== undefined && got.byteLength === BIG && got.every((x) => x === 7), "the read answered the payload's bytes");
  } else t.ok(isClosed(r.reason), `the read ended with the closed error (${(r.reason as Error).message})`);
  t.equal(w.status, "fulfilled", "the write begun before close() committed");
  await closing;
  const again = new LmdbBackend(tmp.dir);
  try {
    t.deepEqual(await again.get(["x", "late"]), { n: -1 }, "reopened, the store holds that write");
  } finally {
    await again.close();
  }
});

test("lmdb close: a compaction in flight stops at its next step and leaves no record of itself", async (t) => {
  using tmp = tempDir();
  const b = await filled(tmp.dir, 1);
  let closing: Promise<void> | undefined;
  try {
    await b.compact(rulesAt(Date.now() + 40 * DAY), {
      beforePayloads: async () => {
        closing = b.close();
        t.notOk(await settled(closing), "close() waits for the compaction");
      },
    });
    t.fail("the compaction went on after close()");
  } catch (e) {
    t.ok(isClosed(e), `the compaction ends with the closed error (${(e as Error).message})`);
  }
  await closing;
  const again = new LmdbBackend(tmp.dir);
  try {
    t.equal(await again.get(["gc"]), undefined, "no compaction record is left behind");
    t.equal(await again.hasPayload("", ID), true, "the payload it had not yet removed is there");
    t.deepEqual(await again.compact(rulesAt(Date.now() + 40 * DAY)), { versions_purged: 0, keys_purged: 0, payloads_purged: 1 }, "the next compaction runs");
  } finally {
    await again.close();
  }
});

test("lmdb close: every operation after close() is refused with the closed error", async (t) => {
  using tmp = tempDir();
  const b = await filled(tmp.dir, 1);
  const closing = b.close();
  t.equal(b.close(), closing, "a second close() is the same close");
  const key: RecordKey = ["x", "k00000"];
  const ops: [string, () => unknown][] = [
    ["get", () => b.get(key)],
    ["getEntry", () => b.getEntry("t", "ns", "k00000")],
    ["hasPayload", () => b.hasPayload("", ID)],
    ["getPayload", () => b.getPayload("", ID)],
    ["getPayloads", () => b.getPayloads("", [ID])],
    [
      "range",
      async () => {
        for await (const e of b.range(["x"], ["x", "\uffff"])) return e;
      },
    ],
    ["transact", () => b.transact({ keys: [] }, (tx) => tx.put(key, { n: 9 }))],
    ["compact", () => b.compact(rulesAt(Date.now()))],
    ["backup", () => b.backup(join(tmp.dir, "copy"), false)],
    ["sizeBytes", () => b.sizeBytes()],
    ["stats", () => b.stats()],
  ];
  for (const when of ["while closing", "once closed"]) {
    if (when === "once closed") await closing;
    for (const [name, op] of ops) {
      try {
        await op();
        t.fail(`${name} ${when}: answered`);
      } catch (e) {
        t.ok(isClosed(e), `${name} ${when}: the closed error (${(e as Error).message})`);
      }
    }
  }
});
