// The store's API on integer, bool and byte data (no TT engine needed), on both LMDB and
// memory: versions and if_version, get without payload reads, delete and tombstones with
// an injected clock, list/search pagination, serve and slices, codec choice, tenant
// isolation, and a ValidationError for every bad input.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { createStore, type Store } from "../../lib/store/index.js";
import { FakeClock } from "../../lib/clock.js";
import { NotFoundError, ValidationError, VersionConflictError } from "../../lib/errors.js";

const dirs: string[] = [];
const T0 = Date.parse("2026-01-01T00:00:00Z");
const DAY = 86_400_000;

async function open(kind: string, clock = new FakeClock(T0)): Promise<Store> {
  if (kind === "memory") return createStore({ path: ":memory:", clock });
  const d = mkdtempSync(join(tmpdir(), "svc-store-"));
  dirs.push(d);
  return createStore({ path: d, clock });
}

const ints = (n: number, f: (i: number) => number) => Int32Array.from({ length: n }, (_, i) => f(i));
const noise = (n: number, seed: number) => {
  let x = seed >>> 0 || 1;
  return Uint8Array.from({ length: n }, () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0), x >>> 24));
};

async function rejects(t: test.Test, p: Promise<unknown>, cls: Function, re: RegExp, msg: string) {
  try {
    await p;
    t.fail(`${msg}: resolved`);
  } catch (e) {
    t.ok(e instanceof cls && re.test((e as Error).message), `${msg}: ${(e as Error).message}`);
  }
}

for (const kind of ["memory", "lmdb"]) {
  test(`${kind}: versions increase by one, get reads any kept version`, async (t) => {
    const s = await open(kind);
    const r1 = await s.put("ns", "k", ints(2048, (i) => i % 7), { shape: [32, 64], metadata: { n: 1 } });
    const r2 = await s.put("ns", "k", ints(2048, (i) => i % 5), { shape: [2048], metadata: { n: 2 } });
    t.deepEqual([r1.version, r2.version], [1, 2], "versions 1 and 2");
    const g = await s.get("ns", "k");
    t.equal(g.version, 2, "latest by default");
    t.deepEqual(g.versions, [1, 2], "kept versions");
    t.equal(g.latest_version, 2, "latest_version");
    t.deepEqual(g.metadata, { n: 2 }, "latest metadata");
    const g1 = await s.get("ns", "k", { version: 1 });
    t.deepEqual([g1.version, g1.shape, g1.metadata], [1, [32, 64], { n: 1 }], "version 1 by number");
    t.equal(g1.fingerprint.sha256, r1.fingerprint.sha256, "fingerprint as at put");
    t.ok(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(g1.created_at), "created_at ISO 8601 UTC");
    await rejects(t, s.get("ns", "k", { version: 3 }), NotFoundError, /no version 3/, "unknown version is not_found");
    await rejects(t, s.get("ns", "nope"), NotFoundError, /No entry nope/, "unknown key is not_found");
    const back = await s.serve("ns", "k", { version: 1 });
    t.deepEqual(Array.from(back.data as Int32Array), Array.from(ints(2048, (i) => i % 7)), "serve version 1 bit-exact");
    await s.close();
  });

  test(`${kind}: if_version gives optimistic concurrency`, async (t) => {
    const s = await open(kind);
    const d = ints(16, (i) => i);
    await rejects(t, s.put("ns", "k", d, { shape: [16], if_version: 1 }), VersionConflictError, /at version 0, not 1/, "absent key with if_version 1");
    t.equal((await s.put("ns", "k", d, { shape: [16], if_version: 0 })).version, 1, "if_version 0 creates");
    await rejects(t, s.put("ns", "k", d, { shape: [16], if_version: 0 }), VersionConflictError, /at version 1, not 0/, "if_version 0 on an existing key");
    t.equal((await s.put("ns", "k", d, { shape: [16], if_version: 1 })).version, 2, "matching if_version");
    await rejects(t, s.put("ns", "k", d, { shape: [16], if_version: 1 }), VersionConflictError, /at version 2, not 1/, "stale if_version");
    try {
      await s.put("ns", "k", d, { shape: [16], if_version: 7 });
    } catch (e) {
      t.equal((e as VersionConflictError).code, "version_conflict", "code word version_conflict");
    }
    t.equal((await s.get("ns", "k")).latest_version, 2, "conflicts stored nothing");
    // many concurrent writers in one process: no lost or duplicate versions
    const rs = await Promise.all(Array.from({ length: 20 }, (_, i) => s.put("ns", "c", ints(8, () => i), { shape: [8] })));
    t.deepEqual(rs.map((r) => r.version).sort((a, b) => a - b), Array.from({ length: 20 }, (_, i) => i + 1), "20 concurrent puts get 1..20");
    await s.close();
  });

  test(`${kind}: delete is a soft delete; compaction purges after 30 days`, async (t) => {
    const clock = new FakeClock(T0);
    const s = await open(kind, clock);
    const big = ints(4096, (i) => i % 3);
    await s.put("ns", "k", big, { shape: [4096] });
    await s.put("ns", "k", big, { shape: [4096] });
    await s.put("ns", "keep", ints(4096, (i) => i % 11), { shape: [4096] });
    const del = await s.delete("ns", "k");
    t.deepEqual(del, { namespace: "ns", key: "k", deleted: true, version: 2, purge_after: new Date(T0 + 30 * DAY).toISOString() }, "delete response");
    await rejects(t, s.get("ns", "k"), NotFoundError, /No entry k/, "deleted key is not_found");
    await rejects(t, s.delete("ns", "k"), NotFoundError, /No entry k/, "second delete is not_found");
    await rejects(t, s.serve("ns", "k"), NotFoundError, /No entry k/, "serve of deleted key is not_found");
    t.deepEqual((await s.list("ns")).keys.map((k) => k.key), ["keep"], "deleted keys are not listed");
    await rejects(t, s.put("ns", "k", big, { shape: [4096], if_version: 2 }), VersionConflictError, /at version 0/, "a deleted key needs if_version 0 or none");
    clock.advance(DAY);
    const again = await s.put("ns", "k", big, { shape: [4096], if_version: 0 });
    t.equal(again.version, 3, "a put after delete continues at last + 1");
    t.deepEqual((await s.get("ns", "k")).versions, [3], "old versions are no longer kept");
    await rejects(t, s.get("ns", "k", { version: 1 }), NotFoundError, /no version 1/, "tombstoned version is not_found");
    const early = await s.compact({ now: T0 + 30 * DAY - 1 });
    t.deepEqual(early, { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "nothing purged before purge_after");
    await s.delete("ns", "keep");
    const c = await s.compact({ now: T0 + 30 * DAY });
    t.deepEqual(c, { versions_purged: 2, keys_purged: 0, payloads_purged: 0 }, "versions 1-2 purged at purge_after; their payload still used by v3");
    t.equal((await s.serve("ns", "k")).version, 3, "the live version survives compaction");
    const c2 = await s.compact({ now: T0 + 31 * DAY });
    t.deepEqual(c2, { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "fully expired key and its payload purged");
    const fresh = await s.put("ns", "keep", ints(4, () => 1), { shape: [4] });
    t.equal(fresh.version, 1, "a purged key starts again at version 1");
    clock.set(T0 + 100 * DAY);
    await s.delete("ns", "keep");
    t.deepEqual(await s.compact(), { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "compact() reads the store's clock: not yet");
    clock.advance(30 * DAY);
    t.deepEqual(await s.compact(), { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "compact() after 30 days on the injected clock");
    await s.close();
  });

  test(`${kind}: list and search paginate in byte order`, async (t) => {
    const s = await open(kind);
    const keys = ["b", "a/2", "a/10", "a/1", "A", "c:x", "a.b"];
    for (const [i, k] of keys.entries()) await s.put("ns", k, ints(4, () => i), { shape: [4], metadata: { i, even: i % 2 === 0, name: k } });
    await s.put("other", "zzz", ints(4, () => 0), { shape: [4] });
    const all = await s.list("ns");
    t.deepEqual(all.keys.map((k) => k.key), ["A", "a.b", "a/1", "a/10", "a/2", "b", "c:x"], "ascending byte order");
    t.deepEqual([all.total, all.limit, all.offset, all.next_offset], [7, 1000, 0, null], "defaults");
    t.deepEqual(Object.keys(all.keys[0]!).sort(), ["dtype", "key", "shape", "updated_at", "verdict", "version"], "list item fields");
    const p1 = await s.list("ns", { prefix: "a/", limit: 2 });
    t.deepEqual([p1.keys.map((k) => k.key), p1.total, p1.next_offset], [["a/1", "a/10"], 3, 2], "prefix, first page");
    const p2 = await s.list("ns", { prefix: "a/", limit: 2, offset: 2 });
    t.deepEqual([p2.keys.map((k) => k.key), p2.next_offset], [["a/2"], null], "last page");
    const sr = await s.search("ns", { even: true, i: { $gte: 2 } });
    t.deepEqual(sr.results.map((r) => r.key), ["A", "a.b", "a/10"], "search on metadata, in byte order");
    t.deepEqual(sr.results[0]!.metadata, { i: 4, even: true, name: "A" }, "search returns metadata");
    const sp = await s.search("ns", { even: true }, { limit: 1, offset: 1 });
    t.deepEqual([sp.results.length, sp.total, sp.next_offset, sp.limit], [1, 4, 2, 1], "search pagination");
    t.equal((await s.search("ns", {})).limit, 100, "search limit default 100");
    await rejects(t, s.search("ns", { i: { $foo: 1 } }), ValidationError, /unknown operator/, "unknown operator");
    await rejects(t, s.list("ns", { limit: 1001 }), ValidationError, /limit must be at most 1000/, "limit above 1000");
    await rejects(t, s.list("ns", { limit: 0 }), ValidationError, /limit must be at least 1/, "limit 0");
    await rejects(t, s.list("ns", { offset: -1 }), ValidationError, /offset/, "negative offset");
    await rejects(t, s.list("ns", { prefix: "a b" }), ValidationError, /prefix/, "bad prefix");
    await s.close();
  });

  test(`${kind}: codecs: lossless when it pays, raw otherwise; serve is bit-exact`, async (t) => {
    const s = await open(kind);
    const smooth = ints(8192, (i) => i >> 4);
    const r = await s.put("ns", "lossless", smooth, { shape: [8192] });
    t.deepEqual([r.verdict, r.compressed, r.fingerprint.codec, r.relative_error], ["lossless", true, "lossless", 0], "compressible ints are lossless");
    t.ok(r.compression_ratio > 10 && Math.abs(r.compression_ratio - r.bytes_in / r.bytes_stored) < 1e-12, `ratio = bytes_in/bytes_stored (${r.compression_ratio.toFixed(1)})`);
    t.equal(r.tt, null, "tt null for lossless");
    const rnd = noise(65536, 3);
    const p = await s.put("ns", "noise", rnd, { dtype: "uint8", shape: [256, 256] });
    t.deepEqual([p.verdict, p.compressed, p.compression_ratio, p.bytes_stored, p.fingerprint.codec], ["passthrough", false, 1, 65536, "raw"], "random bytes are passthrough");
    t.equal(p.fingerprint.sha256, createHash("sha256").update(rnd).digest("hex"), "sha256 of the stored (raw) payload");
    const small = await s.put("ns", "small", ints(100, () => 0), { shape: [100] });
    t.deepEqual([small.verdict, small.bytes_stored], ["passthrough", 400], "below min_compress_bytes: passthrough");
    const bytes = await s.put("ns", "blob", Buffer.from("x".repeat(10000)));
    t.deepEqual([bytes.dtype, bytes.shape, bytes.verdict, bytes.fingerprint.norm], ["bytes", [10000], "lossless", null], "bytes: default dtype, shape, norm null");
    const i64 = BigInt64Array.from({ length: 1024 }, (_, i) => BigInt(i) * 10n ** 12n);
    await s.put("ns", "i64", i64, { shape: [32, 32] });
    const bools = Uint8Array.from({ length: 5000 }, (_, i) => (i % 3 === 0 ? 1 : 0));
    const b = await s.put("ns", "bool", bools, { dtype: "bool", shape: [5000] });
    t.equal(b.fingerprint.norm, Math.sqrt(1667), "bool norm");
    t.deepEqual(Array.from((await s.serve("ns", "lossless")).data as Int32Array), Array.from(smooth), "lossless round trip");
    t.deepEqual(Buffer.from((await s.serve("ns", "noise")).data as Uint8Array), Buffer.from(rnd), "raw round trip");
    t.deepEqual(Array.from((await s.serve("ns", "i64")).data as BigInt64Array), Array.from(i64), "int64 round trip");
    t.equal(Buffer.from((await s.serve("ns", "blob")).data as Uint8Array).toString(), "x".repeat(10000), "bytes round trip");
    const blk = await s.serve("ns", "i64", { slice: [[1, 3], [30, 32]] });
    t.deepEqual([blk.shape, Array.from(blk.data as BigInt64Array)], [[2, 2], [62n, 63n, 94n, 95n].map((v) => v * 10n ** 12n)], "slice of a lossless entry");
    await rejects(t, s.serve("ns", "i64", { slice: [[0, 33], [0, 1]] }), ValidationError, /slice\.0 stops at 33/, "slice beyond the shape");
    await rejects(t, s.serve("ns", "i64", { slice: [[0, 1]] }), ValidationError, /slice has 1 pairs/, "slice of the wrong rank");
    await rejects(t, s.serve("ns", "i64", { slice: [[2, 1], [0, 1]] }), ValidationError, /start < stop/, "empty slice");
    await rejects(t, s.serve("ns", "i64", { dtype: "float32" }), ValidationError, /floating data only/, "dtype conversion of ints");
    await s.close();
  });

  test(`${kind}: tenants never see each other's entries`, async (t) => {
    const s = await open(kind);
    const a = s.forTenant("acme");
    const b = s.forTenant("bravo");
    t.equal(s.tenant, "local", "default tenant is local");
    await a.put("default", "k", ints(4, () => 1), { shape: [4], metadata: { who: "a" } });
    await b.put("default", "k", ints(4, () => 2), { shape: [4], metadata: { who: "b" } });
    t.deepEqual((await a.get("default", "k")).metadata, { who: "a" }, "acme sees its own");
    t.deepEqual((await b.get("default", "k")).metadata, { who: "b" }, "bravo sees its own");
    t.equal((await b.get("default", "k")).version, 1, "versions are per tenant");
    await rejects(t, s.get("default", "k"), NotFoundError, /No entry/, "the local tenant sees neither");
    t.equal((await s.list("default")).total, 0, "nor lists them");
    await a.delete("default", "k");
    t.deepEqual((await b.serve("default", "k")).data, Int32Array.from([2, 2, 2, 2]), "a delete in one tenant leaves the other");
    t.throws(() => s.forTenant("Bad Tenant"), /tenant/, "tenant ids are validated");
    await s.close();
  });

  test(`${kind}: every bad input is a ValidationError and stores nothing`, async (t) => {
    const s = await open(kind);
    const d = ints(16, (i) => i);
    const cases: [() => Promise<unknown>, RegExp, string][] = [
      [() => s.put("bad ns", "k", d, { shape: [16] }), /namespace/, "namespace"],
      [() => s.put("ns", "a//b", d, { shape: [16] }), /segment/, "empty key segment"],
      [() => s.put("ns", "../x", d, { shape: [16] }), /segment/, "dot-dot key segment"],
      [() => s.put("ns", "", d, { shape: [16] }), /key/, "empty key"],
      [() => s.put("ns", "k", d), /shape is required/, "missing shape"],
      [() => s.put("ns", "k", d, { shape: [15] }), /data has 64 bytes but shape \[15\] of int32 needs 60/, "shape/size mismatch"],
      [() => s.put("ns", "k", d, { shape: [16], dtype: "float64" }), /does not match/, "dtype vs typed array"],
      [() => s.put("ns", "k", d, { shape: [16], dtype: "nope" as "int8" }), /dtype/, "unknown dtype"],
      [() => s.put("ns", "k", d, { shape: [16], tolerance: 0 }), /tolerance/, "tolerance 0"],
      [() => s.put("ns", "k", d, { shape: [16], max_rank: 0 }), /max_rank/, "max_rank 0"],
      [() => s.put("ns", "k", d, { shape: [16], if_version: -1 }), /if_version/, "negative if_version"],
      [() => s.put("ns", "k", d, { shape: [16], metadata: { x: "y".repeat(70000) } }), /64 KiB/, "metadata too large"],
      [() => s.put("ns", "k", d, { shape: [16], shap: [1] } as object), /unknown field 'shap'/, "misspelt option"],
      [() => s.put("ns", "k", "text" as unknown as Buffer), /typed array/, "data of the wrong kind"],
      [() => s.put("ns", "k", Buffer.alloc(0)), /empty/, "empty data"],
      [() => s.put("ns", "k", d, { shape: [0] }), /shape/, "zero dimension"],
      [() => s.get("ns", "k", { version: 0 }), /version/, "version 0"],
      [() => s.serve("ns", "k", { slice: "x" as unknown as [number, number][] }), /slice/, "slice not a list"],
      [() => s.query.topk("ns", { key: "k", k: 0 }), /k must be at least 1/, "k 0"],
      [() => s.query.topk("ns", { key: "k", metric: "manhattan" as "l2" }), /metric/, "unknown metric"],
      [() => s.putCoresBatch("ns", []), /items/, "empty batch"],
      [() => s.compact({ now: Number.NaN }), /now/, "bad now"],
    ];
    for (const [f, re, msg] of cases) await rejects(t, f(), ValidationError, re, msg);
    t.equal((await s.list("ns")).total, 0, "nothing was stored");
    await s.close();
  });
}

test("lmdb: get never reads the payload (it works with the payload gone; serve does not)", async (t) => {
  const d = mkdtempSync(join(tmpdir(), "svc-store-"));
  dirs.push(d);
  const s = await createStore({ path: d });
  const r = await s.put("ns", "k", ints(4096, (i) => i % 9), { shape: [4096], metadata: { m: 1 } });
  await s.close();
  const { LmdbBackend } = await import("../../lib/store/lmdb.js");
  const raw = new LmdbBackend(d);
  await raw.transact((tx) => tx.removePayload(r.fingerprint.sha256));
  await raw.close();
  const s2 = await createStore({ path: d });
  const g = await s2.get("ns", "k");
  t.deepEqual([g.version, g.metadata, g.fingerprint.sha256], [1, { m: 1 }, r.fingerprint.sha256], "get answers from the records alone");
  await rejects(t, s2.serve("ns", "k"), NotFoundError, /payload is missing/, "serve needs the payload");
  await s2.close();
});

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
