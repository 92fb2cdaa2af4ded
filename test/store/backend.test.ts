// The storage interface, checked on both implementations (LMDB and memory): tuple key
// order, ranges, payloads, and transactions that keep nothing when they throw.
// Store-only: the storage interface underneath the store, not a store method.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { StorageBackend } from "../../lib/store/backend.js";
import { LmdbBackend } from "../../lib/store/lmdb.js";
import { MemoryBackend } from "../../lib/store/memory.js";

const dirs: string[] = [];
const makers: [string, () => StorageBackend][] = [
  ["memory", () => new MemoryBackend()],
  ["lmdb", () => {
    const d = mkdtempSync(join(tmpdir(), "svc-backend-"));
    dirs.push(d);
    return new LmdbBackend(d);
  }],
];

for (const [name, make] of makers) {
  test(`${name}: tuple keys sort element by element, ranges are half-open`, async (t) => {
    const b = make();
    await b.transact((tx) => {
      for (const k of ["a", "a/b", "a.b", "b", "A", "a-"]) tx.put(["h", "t1", "ns", k], { k });
      tx.put(["h", "t1", "ns2", "a"], { k: "other ns" });
      tx.put(["h", "t2", "ns", "a"], { k: "other tenant" });
      tx.put(["v", "t1", "ns", "a", 2], 2);
      tx.put(["v", "t1", "ns", "a", 10], 10);
    });
    const keys = [...b.range(["h", "t1", "ns", ""], ["h", "t1", "ns", "\uffff"])].map((e) => e.key[3]);
    t.deepEqual(keys, ["A", "a", "a-", "a.b", "a/b", "b"], "byte order within one (tenant, namespace)");
    const pre = [...b.range(["h", "t1", "ns", "a"], ["h", "t1", "ns", "a\uffff"])].map((e) => e.key[3]);
    t.deepEqual(pre, ["a", "a-", "a.b", "a/b"], "prefix range");
    t.deepEqual(b.get(["v", "t1", "ns", "a", 10]), 10, "numeric element");
    t.equal(b.get(["h", "t1", "ns", "zz"]), undefined, "absent key");
    await b.close();
  });

  test(`${name}: a transaction that throws keeps nothing`, async (t) => {
    const b = make();
    await b.transact((tx) => tx.put(["k"], 1));
    try {
      await b.transact((tx) => {
        tx.put(["k"], 2);
        tx.put(["k2"], 3);
        tx.putPayload("p1", new Uint8Array([1, 2, 3]));
        throw new Error("boom");
      });
      t.fail("transaction should reject");
    } catch (e) {
      t.equal((e as Error).message, "boom", "the callback's error rejects the transaction");
    }
    t.equal(b.get(["k"]), 1, "earlier value kept");
    t.equal(b.get(["k2"]), undefined, "no new record");
    t.equal(b.hasPayload("p1"), false, "no new payload");
    const seen = await b.transact((tx) => {
      tx.put(["k"], 5);
      return tx.get(["k"]);
    });
    t.equal(seen, 5, "a transaction reads its own writes");
    await b.close();
  });

  test(`${name}: payloads are stored apart and listed`, async (t) => {
    const b = make();
    const bytes = new Uint8Array(100_000).map((_, i) => i % 251);
    await b.transact((tx) => {
      tx.putPayload("x", bytes);
      tx.putPayload("y", new Uint8Array([9]));
    });
    t.deepEqual(new Uint8Array(b.getPayload("x")!), bytes, "payload round trip");
    const ids = await b.transact((tx) => {
      tx.removePayload("y");
      return [...tx.payloadIds()].sort();
    });
    t.deepEqual(ids, ["x"], "payloadIds reflects the transaction's removals");
    t.equal(b.getPayload("y"), undefined, "removed payload gone");
    await b.close();
  });
}

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
