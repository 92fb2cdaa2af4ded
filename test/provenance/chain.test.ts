// The receipt chain: durable head, serialised issuance, failures that consume nothing.
import test from "tape";
import { readFile, writeFile, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { ChainWriteError, FileChainStore, MemoryChainStore, ReceiptChain, type ChainHead, type ChainStore } from "../../server/provenance/chain.js";
import { tempDir } from "./helpers.js";

const h = (n: number): string => n.toString(16).padStart(64, "0");

test("a file chain persists the head atomically and reopens where it stopped", async (t) => {
  const { dir, cleanup } = await tempDir();
  const path = join(dir, "chain.json");
  const c1 = await ReceiptChain.open(new FileChainStore(path));
  t.deepEqual(c1.head, { serial: 0, last_receipt_sha256: null }, "a fresh chain");
  const got: Array<[number, string | null]> = [];
  for (let i = 0; i < 5; i++) {
    await c1.append((pos) => {
      got.push([pos.serial, pos.previous]);
      return { value: pos.serial, hash: h(pos.serial) };
    });
  }
  t.deepEqual(got, [[1, null], [2, h(1)], [3, h(2)], [4, h(3)], [5, h(4)]], "positions in order");
  t.deepEqual(JSON.parse(await readFile(path, "utf8")), { serial: 5, last_receipt_sha256: h(5) }, "head on disk");
  t.equal((await stat(path)).mode & 0o777, 0o600, "mode 0600");
  t.deepEqual((await readdir(dir)).filter((f) => f.endsWith(".tmp")), [], "no temp files left");
  const c2 = await ReceiptChain.open(new FileChainStore(path));
  t.deepEqual(c2.head, { serial: 5, last_receipt_sha256: h(5) }, "reopened at the head");
  await cleanup();
});

test("concurrent appends get distinct consecutive serials and are committed in batches", async (t) => {
  const store = new MemoryChainStore();
  const chain = await ReceiptChain.open(store);
  const n = 500;
  const serials = await Promise.all(Array.from({ length: n }, () => chain.append((pos) => ({ value: pos.serial, hash: h(pos.serial) }))));
  t.deepEqual([...serials].sort((a, b) => a - b), Array.from({ length: n }, (_, i) => i + 1), "each serial once");
  t.deepEqual(serials, Array.from({ length: n }, (_, i) => i + 1), "in request order");
  t.ok(store.saves < n, `group commit: ${store.saves} saves for ${n} appends`);
  t.deepEqual(chain.head, { serial: n, last_receipt_sha256: h(n) });
});

test("a build that throws consumes no serial; a failed save hands nothing out and keeps the head", async (t) => {
  let fail = false;
  const inner = new MemoryChainStore();
  const store: ChainStore = {
    load: () => inner.load(),
    save: async (head: ChainHead) => {
      if (fail) throw new Error("disk full");
      await inner.save(head);
    },
  };
  const chain = await ReceiptChain.open(store);
  await chain.append((pos) => ({ value: pos.serial, hash: h(pos.serial) }));
  try {
    await chain.append(() => { throw new Error("bad input"); });
    t.fail("should reject");
  } catch (e) {
    t.equal((e as Error).message, "bad input", "the build error is returned");
  }
  fail = true;
  try {
    await chain.append((pos) => ({ value: pos.serial, hash: h(pos.serial) }));
    t.fail("should reject");
  } catch (e) {
    t.equal((e as Error).message, "disk full", "the save error is returned");
  }
  t.deepEqual(chain.head, { serial: 1, last_receipt_sha256: h(1) }, "head unchanged");
  fail = false;
  const s = await chain.append((pos) => ({ value: pos.serial, hash: h(pos.serial) }));
  t.equal(s, 2, "the next serial is 2: nothing was lost or skipped");
});

test("a corrupt or inconsistent chain file stops the start instead of restarting at 1", async (t) => {
  const { dir, cleanup } = await tempDir();
  const path = join(dir, "chain.json");
  for (const [content, why] of [
    ["{not json", /not valid JSON/],
    [JSON.stringify({ serial: -1, last_receipt_sha256: null }), /malformed/],
    [JSON.stringify({ serial: 3, last_receipt_sha256: null }), /inconsistent/],
    [JSON.stringify({ serial: 3 }), /malformed/],
  ] as const) {
    await writeFile(path, content);
    try {
      await ReceiptChain.open(new FileChainStore(path));
      t.fail(`accepted ${content}`);
    } catch (e) {
      t.match((e as Error).message, why, `${content}: refused`);
    }
  }
  await cleanup();
});

test("a failed write refuses the batch built on top of it; the next receipt starts from the durable head", async (t) => {
  const inner = new MemoryChainStore();
  const pending: Array<{ head: ChainHead; go: (ok: boolean) => void }> = [];
  const store: ChainStore = {
    load: () => inner.load(),
    save: (head: ChainHead) =>
      new Promise<void>((resolve, reject) => {
        pending.push({ head, go: (ok) => (ok ? inner.save(head).then(resolve) : reject(new Error("disk full"))) });
      }),
  };
  const chain = await ReceiptChain.open(store);
  const build = (pos: { serial: number }) => ({ value: pos.serial, hash: h(pos.serial) });
  const a = chain.append(build);
  await new Promise((r) => setImmediate(r));
  t.equal(pending.length, 1, "the first batch is being written");
  const b = chain.append(build);
  const c = chain.append(build);
  await new Promise((r) => setImmediate(r));
  t.equal(pending.length, 1, "the second batch waits for the first write");
  pending.shift()!.go(false);
  const results = await Promise.allSettled([a, b, c]);
  t.equal((results[0] as PromiseRejectedResult).reason.message, "disk full", "the failed batch is refused");
  t.ok(results.slice(1).every((r) => r.status === "rejected" && r.reason instanceof ChainWriteError), "the batch built on it is refused too");
  t.deepEqual(chain.head, { serial: 0, last_receipt_sha256: null }, "the durable head did not move");
  const d = chain.append(build);
  await new Promise((r) => setImmediate(r));
  t.equal(pending.length, 1);
  t.equal(pending[0]!.head.serial, 1, "the next receipt gets serial 1 again: nothing was handed out");
  pending.shift()!.go(true);
  t.equal(await d, 1);
  t.deepEqual(chain.head, { serial: 1, last_receipt_sha256: h(1) });
});
