// The receipt chain: durable head, serialised issuance, failures that consume nothing.
import test from "tape";
import { mkdir, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  ChainWriteError,
  chainWriteFailure,
  FileChainStore,
  LogChainStore,
  MemoryChainStore,
  ReceiptChain,
  type BatchBuilder,
  type BatchResult,
  type ChainHead,
  writeGenesis,
  type ChainStore,
} from "../../server/provenance/chain.js";
import { StorageFullError, StoreUnavailableError } from "../../lib/errors.js";
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
  t.deepEqual(
    got,
    [
      [1, null],
      [2, h(1)],
      [3, h(2)],
      [4, h(3)],
      [5, h(4)],
    ],
    "positions in order",
  );
  t.deepEqual(JSON.parse(await readFile(path, "utf8")), { serial: 5, last_receipt_sha256: h(5) }, "head on disk");
  t.equal((await stat(path)).mode & 0o777, 0o600, "mode 0600");
  t.deepEqual(
    (await readdir(dir)).filter((f) => f.endsWith(".tmp")),
    [],
    "no temp files left",
  );
  const c2 = await ReceiptChain.open(new FileChainStore(path));
  t.deepEqual(c2.head, { serial: 5, last_receipt_sha256: h(5) }, "reopened at the head");
  await cleanup();
});

test("concurrent appends get distinct consecutive serials and are committed in batches", async (t) => {
  const store = new MemoryChainStore();
  const chain = await ReceiptChain.open(store);
  const n = 500;
  const serials = await Promise.all(Array.from({ length: n }, () => chain.append((pos) => ({ value: pos.serial, hash: h(pos.serial) }))));
  t.deepEqual(
    [...serials].sort((a, b) => a - b),
    Array.from({ length: n }, (_, i) => i + 1),
    "each serial once",
  );
  t.deepEqual(
    serials,
    Array.from({ length: n }, (_, i) => i + 1),
    "in request order",
  );
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
    await chain.append(() => {
      throw new Error("bad input");
    });
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
        pending.push({ head, go: (ok) => (ok ? void inner.save(head).then(resolve, reject) : reject(new Error("disk full"))) });
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
  t.ok(
    results.slice(1).every((r) => r.status === "rejected" && r.reason instanceof ChainWriteError),
    "the batch built on it is refused too",
  );
  t.deepEqual(chain.head, { serial: 0, last_receipt_sha256: null }, "the durable head did not move");
  const d = chain.append(build);
  await new Promise((r) => setImmediate(r));
  t.equal(pending.length, 1);
  t.equal(pending[0]!.head.serial, 1, "the next receipt gets serial 1 again: nothing was handed out");
  pending.shift()!.go(true);
  t.equal(await d, 1);
  t.deepEqual(chain.head, { serial: 1, last_receipt_sha256: h(1) });
});

test("a batch builder builds whole batches in order; an entry it cannot build takes no serial", async (t) => {
  const calls: Array<{ n: number; start: number }> = [];
  const builder: BatchBuilder = async (inputs, start) => {
    calls.push({ n: inputs.length, start: start.serial });
    const out: BatchResult[] = [];
    let serial = start.serial;
    let previous = start.previous;
    for (const input of inputs) {
      if (input === "bad") {
        out.push({ error: new Error("cannot build") });
        continue;
      }
      out.push({ serial, value: { input, serial, previous }, hash: h(serial) });
      previous = h(serial);
      serial++;
    }
    return out;
  };
  const chain = await ReceiptChain.open(new MemoryChainStore(), builder);
  t.equal(chain.batched, true);
  const all = await Promise.allSettled(
    ["a", "b", "bad", "c", ...Array.from({ length: 40 }, (_, i) => `x${i}`)].map((x) => chain.appendInput<{ serial: number; previous: string | null }>(x)),
  );
  const ok = all.filter((r) => r.status === "fulfilled").map((r) => (r as PromiseFulfilledResult<{ serial: number; previous: string | null }>).value);
  t.equal(all[2]!.status, "rejected", "the bad entry is refused");
  t.deepEqual(
    ok.map((v) => v.serial),
    Array.from({ length: 43 }, (_, i) => i + 1),
    "the others get 1..43 without a gap",
  );
  t.ok(
    ok.every((v, i) => v.previous === (i === 0 ? null : h(i))),
    "each chains to the one before",
  );
  t.ok(calls.length < 44, `built in ${calls.length} batches`);
  t.deepEqual(chain.head, { serial: 43, last_receipt_sha256: h(43) });
  try {
    await chain.append(() => ({ value: 1, hash: h(1) }));
    t.fail("append on a batched chain");
  } catch (e) {
    t.match((e as Error).message, /appendInput/, "append is refused on a batched chain");
  }
  const plain = await ReceiptChain.open(new MemoryChainStore());
  try {
    await plain.appendInput("a");
    t.fail("appendInput on a plain chain");
  } catch (e) {
    t.match((e as Error).message, /no batch builder/, "appendInput is refused without a builder");
  }
});

test("a batch builder that skips a serial has its entries refused; nothing is committed past it", async (t) => {
  let skip = true;
  const builder: BatchBuilder = async (inputs, start) =>
    inputs.map((input, i) => ({ serial: start.serial + i + (skip ? 1 : 0), value: input, hash: h(start.serial + i) }));
  const store = new MemoryChainStore();
  const chain = await ReceiptChain.open(store, builder);
  const rs = await Promise.allSettled([chain.appendInput("a"), chain.appendInput("b")]);
  t.ok(
    rs.every((r) => r.status === "rejected" && /broke the chain/.test(String((r as PromiseRejectedResult).reason))),
    "both refused",
  );
  t.deepEqual(chain.head, { serial: 0, last_receipt_sha256: null }, "nothing committed");
  t.equal(store.saves, 0, "nothing written");
  skip = false;
  t.equal(await chain.appendInput("c"), "c", "a correct builder works again");
  t.equal(chain.head.serial, 1, "from serial 1");
});

test("the log store: one line per batch, reopened at its last line, a torn last line dropped, compaction", async (t) => {
  const { dir, cleanup } = await tempDir();
  const path = join(dir, "chain.log");
  const s1 = new LogChainStore(path);
  const c1 = await ReceiptChain.open(s1);
  for (let i = 0; i < 3; i++) await c1.append((pos) => ({ value: pos.serial, hash: h(pos.serial) }));
  s1.close();
  const lines = (await readFile(path, "utf8")).split("\n");
  t.equal(lines.length, 4, "three lines and a final newline");
  t.deepEqual(JSON.parse(lines[2]!), { serial: 3, last_receipt_sha256: h(3) });
  t.equal((await stat(path)).mode & 0o777, 0o600, "mode 0600");
  await writeFile(path, (await readFile(path, "utf8")) + '{"serial":4,"last_rec', { flag: "w" });
  const s2 = new LogChainStore(path);
  const c2 = await ReceiptChain.open(s2);
  t.deepEqual(c2.head, { serial: 3, last_receipt_sha256: h(3) }, "a torn last line is dropped");
  t.equal(await c2.append((pos) => ({ value: pos.serial, hash: h(pos.serial) })), 4, "serial 4 is issued again: it was never answered");
  s2.close();
  const after = (await readFile(path, "utf8")).split("\n");
  t.deepEqual(JSON.parse(after[3]!), { serial: 4, last_receipt_sha256: h(4) }, "the torn fragment was cut off before appending");
  t.equal(after.length, 5);

  const small = join(dir, "small.log");
  const s3 = new LogChainStore(small, { compactBytes: 300 });
  const c3 = await ReceiptChain.open(s3);
  for (let i = 0; i < 20; i++) await c3.append((pos) => ({ value: pos.serial, hash: h(pos.serial) }));
  s3.close();
  t.ok((await stat(small)).size <= 300, "compacted below the threshold");
  const c4 = await ReceiptChain.open(new LogChainStore(small));
  t.deepEqual(c4.head, { serial: 20, last_receipt_sha256: h(20) }, "the head survives compaction");
  t.deepEqual(
    (await readdir(dir)).filter((f) => f.endsWith(".tmp")),
    [],
    "no temp files left",
  );
  await cleanup();
});

test("the log store refuses a corrupt or out-of-order line instead of restarting at 1", async (t) => {
  const { dir, cleanup } = await tempDir();
  const path = join(dir, "chain.log");
  const good = (n: number) => JSON.stringify({ serial: n, last_receipt_sha256: h(n) });
  for (const [content, why] of [
    [`${good(1)}\n{oops}\n${good(3)}\n`, /line 2 .* not valid JSON/],
    [`${good(1)}\n${good(3)}\n${good(2)}\n`, /line 3 .* serials must increase/],
    [`${JSON.stringify({ serial: 1, last_receipt_sha256: null })}\n`, /line 1 .* malformed/],
    // the genesis line (the head at serial 0) is taken as the first line only
    [`${GENESIS}${good(1)}\n${GENESIS}`, /line 3 .* malformed/],
    [`${good(1)}\n${GENESIS}`, /line 2 .* malformed/],
    [`${GENESIS}${GENESIS}`, /line 2 .* malformed/],
  ] as const) {
    await writeFile(path, content);
    try {
      await ReceiptChain.open(new LogChainStore(path));
      t.fail("accepted");
    } catch (e) {
      t.match((e as Error).message, why, (e as Error).message);
    }
  }
  await cleanup();
});

const GENESIS = '{"serial":0,"last_receipt_sha256":null}\n';

test("chain files whose bytes are not UTF-8 stop the start; a torn last line is dropped whatever its bytes", async (t) => {
  const { dir, cleanup } = await tempDir();
  const good = (n: number) => Buffer.from(JSON.stringify({ serial: n, last_receipt_sha256: h(n) }) + "\n");
  const bad = Buffer.from([0x7b, 0xff, 0xfe, 0x7d, 0x0a]); // {, two bytes no UTF-8 text has, }, newline
  const file = join(dir, "chain.json");
  await writeFile(file, Buffer.concat([Buffer.from('{"serial":0,"last_receipt_sha256":null'), Buffer.from([0xc3]), Buffer.from("}")]));
  try {
    await ReceiptChain.open(new FileChainStore(file));
    t.fail("the file store accepted bytes that are not UTF-8");
  } catch (e) {
    t.equal((e as Error).message, "the receipt chain file chain.json is not valid UTF-8", (e as Error).message);
  }
  const log = join(dir, "chain.log");
  await writeFile(log, Buffer.concat([good(1), bad, good(2)]));
  try {
    await ReceiptChain.open(new LogChainStore(log));
    t.fail("the log store accepted bytes that are not UTF-8");
  } catch (e) {
    t.equal((e as Error).message, "the receipt chain log chain.log is not valid UTF-8", (e as Error).message);
  }
  // a crash inside the last write leaves a fragment: dropped and cut off, as any torn line
  await writeFile(log, Buffer.concat([good(1), good(2), Buffer.from([0x7b, 0xff])]));
  const s = new LogChainStore(log);
  const c = await ReceiptChain.open(s);
  t.deepEqual(c.head, { serial: 2, last_receipt_sha256: h(2) }, "the torn fragment is dropped");
  s.close();
  t.deepEqual(await readFile(log), Buffer.concat([good(1), good(2)]), "and cut off the file");
  await cleanup();
});

test("the log store's genesis line: written only where the log is missing or empty, read as serial 0, counted as a line", async (t) => {
  const { dir, cleanup } = await tempDir();
  const path = join(dir, "sub", "chain.log");
  const empty = new LogChainStore(path);
  t.deepEqual(await empty.load(), { serial: 0, last_receipt_sha256: null }, "a missing log reads as serial 0");
  t.equal(empty.lines, 0, "and holds no line");
  await writeGenesis(path);
  t.equal(await readFile(path, "utf8"), GENESIS, "genesis written (directory made)");
  t.equal((await stat(path)).mode & 0o777, 0o600, "mode 0600");
  const s = new LogChainStore(path);
  const c = await ReceiptChain.open(s);
  t.equal(s.lines, 1, "one line: the genesis");
  t.deepEqual(c.head, { serial: 0, last_receipt_sha256: null }, "head at serial 0");
  t.equal(await c.append((pos) => ({ value: pos.serial, hash: h(pos.serial) })), 1, "the first receipt is serial 1");
  s.close();
  await writeGenesis(path);
  t.equal(await readFile(path, "utf8"), `${GENESIS}${JSON.stringify({ serial: 1, last_receipt_sha256: h(1) })}\n`, "a log that holds lines is left as it is");
  const again = new LogChainStore(path);
  t.deepEqual(await again.load(), { serial: 1, last_receipt_sha256: h(1) }, "reopened at serial 1");
  t.equal(again.lines, 2, "two lines");
  await writeFile(path, "");
  await writeGenesis(path);
  t.equal(await readFile(path, "utf8"), GENESIS, "an empty log gets the genesis line");
  await cleanup();
});

test("a compaction that fails leaves the log appended to as before, and is tried again after the next save", async (t) => {
  const { dir, cleanup } = await tempDir();
  const path = join(dir, "chain.log");
  // a directory where the compaction's new file would go: opening it for writing fails (EISDIR)
  await mkdir(`${path}.compact.tmp`);
  const store = new LogChainStore(path, { compactBytes: 300 });
  const chain = await ReceiptChain.open(store);
  const build = (pos: { serial: number }) => ({ value: pos.serial, hash: h(pos.serial) });
  const issued: number[] = [];
  for (let i = 0; i < 10; i++) issued.push(await chain.append(build));
  t.deepEqual(issued, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "every receipt is issued: its head was durable before the compaction");
  const lines = (await readFile(path, "utf8")).split("\n").filter(Boolean);
  t.equal(lines.length, 10, "the log keeps every line while compaction fails");
  t.deepEqual(JSON.parse(lines.at(-1)!), { serial: 10, last_receipt_sha256: h(10) }, "the last line is the head");
  t.ok((await stat(`${path}.compact.tmp`)).isDirectory(), "what stood in the way was left alone");
  await rm(`${path}.compact.tmp`, { recursive: true });
  t.equal(await chain.append(build), 11, "the next save");
  t.equal((await readFile(path, "utf8")).split("\n").filter(Boolean).length, 1, "compacted to its last line once it can be");
  t.equal(await chain.append(build), 12, "and appended to after it");
  store.close();
  const again = await ReceiptChain.open(new LogChainStore(path));
  t.deepEqual(again.head, { serial: 12, last_receipt_sha256: h(12) }, "reopened at the last head");
  t.deepEqual(
    (await readdir(dir)).filter((f) => f.endsWith(".tmp")),
    [],
    "no temp files left",
  );
  await cleanup();
});

test("a failed write of the head is answered as a full disk (507) or an unavailable store (503), with Retry-After", async (t) => {
  const errno = (code: string) => Object.assign(new Error(`${code}: write failed`), { code });
  const full = chainWriteFailure(errno("ENOSPC"));
  t.ok(full instanceof StorageFullError, "ENOSPC: storage_full");
  t.equal((full as StorageFullError).retryAfterS, 30, "retry after 30 s");
  t.ok(chainWriteFailure(errno("EDQUOT")) instanceof StorageFullError, "EDQUOT: storage_full");
  for (const code of ["EIO", "EROFS", "EBADF"]) {
    const e = chainWriteFailure(errno(code));
    t.ok(e instanceof StoreUnavailableError && !(e instanceof StorageFullError), `${code}: store_unavailable`);
  }
  const plain = new Error("not the file system's");
  t.equal(chainWriteFailure(plain), plain, "an error without an errno code is left as it is");
  t.ok(new ChainWriteError() instanceof StoreUnavailableError, "a batch built on a failed write: store_unavailable");
  t.equal(new ChainWriteError().retryAfterS, 1, "retry after 1 s");

  // through the chain: the batch whose write failed, and the one built on it
  const inner = new MemoryChainStore();
  let fail = true;
  const store: ChainStore = { load: () => inner.load(), save: (head) => (fail ? Promise.reject(errno("ENOSPC")) : inner.save(head)) };
  const chain = await ReceiptChain.open(store);
  const build = (pos: { serial: number }) => ({ value: pos.serial, hash: h(pos.serial) });
  const refused = await Promise.allSettled([chain.append(build), chain.append(build)]);
  t.ok(refused[0]!.status === "rejected" && refused[0].reason instanceof StorageFullError, "the failed batch: storage_full");
  t.equal(
    refused[0]!.status === "rejected" && refused[0].reason.message,
    "The receipt chain has no disk space left, so no receipt was issued; retry after space is freed.",
  );
  t.ok(refused[1]!.status === "rejected" && refused[1].reason instanceof StoreUnavailableError, "the batch built on it: a 503 to retry");
  fail = false;
  t.equal(await chain.append(build), 1, "once the store writes again, serial 1: nothing was handed out");
});
