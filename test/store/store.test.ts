// The store's API on integer, bool and byte data (no TT engine needed): versions and
// if_version, get without payload reads, delete and tombstones, list/search pagination and
// the filter language, metadata round trips, serve and slices, codec choice, tenant
// isolation, and a ValidationError for every bad input. The shared tests run on createStore
// (memory and LMDB) and on createClient over a real gateway and engine, and every call must
// give identical results on all three (test/store/harness.ts); compaction with an injected
// clock, forTenant itself, LMDB internals and the filesystem path of a store are store-only.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { FakeClock } from "../../lib/clock.js";
import { createStore } from "../../lib/store/index.js";
import { LmdbBackend } from "../../lib/store/lmdb.js";
import { NotFoundError, ValidationError, VersionConflictError } from "../../lib/errors.js";
import { rejects, storeSuite } from "./harness.js";

const T0 = Date.parse("2026-01-01T00:00:00Z");
const DAY = 86_400_000;
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

const ints = (n: number, f: (i: number) => number) => Int32Array.from({ length: n }, (_, i) => f(i));
const noise = (n: number, seed: number) => {
  let x = seed >>> 0 || 1;
  return Uint8Array.from({ length: n }, () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0), x >>> 24));
};

const LONG_NS = "n".repeat(255);
const suite = storeSuite({ targets: ["memory", "lmdb", "postgres", "http"], namespaces: ["ns", "other", "default", LONG_NS] });

suite.test("put stores the data as they were when it was called: a change to the caller's buffer while it runs is not stored", async (t, s) => {
  const smooth = () => Float32Array.from({ length: 512 * 512 }, (_, i) => Math.sin(i / 300));
  const cases: [string, () => Float32Array, Record<string, unknown>][] = [
    ["auto", smooth, {}],
    ["tt", smooth, { codec: "tt" }],
    ["lossless", smooth, { codec: "lossless" }],
    ["max_abs_error", smooth, { max_abs_error: 1e-3 }],
    ["raw-sized", () => Float32Array.from({ length: 64 }, (_, i) => i), {}],
  ];
  for (const [what, make, opts] of cases) {
    const d = make();
    const want = d.slice();
    const shape = d.length === 64 ? [64] : [512, 512];
    const p = s.put("ns", `mut-${what}`, d, { shape, ...opts });
    d.fill(1e6);
    const r = await p;
    const back = (await s.serve("ns", `mut-${what}`)).data as Float32Array;
    let worst = 0;
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(back[i]! - want[i]!));
    t.ok(worst <= 1e-2, `${what}: served the values passed, not the later ones (worst difference ${worst})`);
    t.ok(r.max_abs_error <= 1e-2, `${what}: the reported error is measured against them (${r.max_abs_error})`);
  }
  const bytes = Buffer.from([1, 2, 3, 4]);
  const p = s.put("ns", "mut-buffer", bytes);
  bytes.fill(9);
  await p;
  t.deepEqual(Array.from((await s.serve("ns", "mut-buffer")).data as Uint8Array), [1, 2, 3, 4], "a Buffer: the bytes passed");
  const ab = new Float64Array([1, 2, 3, 4]).buffer;
  const q = s.put("ns", "mut-ab", ab, { shape: [4], dtype: "float64" });
  new Float64Array(ab).fill(0);
  await q;
  t.deepEqual(Array.from((await s.serve("ns", "mut-ab")).data as Float64Array), [1, 2, 3, 4], "an ArrayBuffer: the values passed");
});

suite.test("versions increase by one, get reads any kept version", async (t, s) => {
  const r1 = await s.put(
    "ns",
    "k",
    ints(2048, (i) => i % 7),
    { shape: [32, 64], metadata: { n: 1 } },
  );
  const r2 = await s.put(
    "ns",
    "k",
    ints(2048, (i) => i % 5),
    { shape: [2048], metadata: { n: 2 } },
  );
  t.deepEqual([r1.version, r2.version], [1, 2], "versions 1 and 2");
  const g = await s.get("ns", "k");
  t.equal(g.version, 2, "latest by default");
  t.deepEqual(g.versions, [1, 2], "kept versions");
  t.equal(g.latest_version, 2, "latest_version");
  t.deepEqual(g.metadata, { n: 2 }, "latest metadata");
  const g1 = await s.get("ns", "k", { version: 1 });
  t.deepEqual([g1.version, g1.shape, g1.metadata], [1, [32, 64], { n: 1 }], "version 1 by number");
  t.equal(g1.fingerprint.sha256, r1.fingerprint.sha256, "fingerprint as at put");
  t.ok(ISO.test(g1.created_at), "created_at ISO 8601 UTC");
  await rejects(t, s.get("ns", "k", { version: 3 }), NotFoundError, /no version 3/, "unknown version is not_found");
  await rejects(t, s.get("ns", "nope"), NotFoundError, /No entry nope/, "unknown key is not_found");
  const back = await s.serve("ns", "k", { version: 1 });
  t.deepEqual(Array.from(back.data as Int32Array), Array.from(ints(2048, (i) => i % 7)), "serve version 1 bit-exact");
  t.deepEqual([back.namespace, back.key, back.version, back.dtype, back.shape], ["ns", "k", 1, "int32", [32, 64]], "serve echoes the entry");
});

suite.test("if_version gives optimistic concurrency", async (t, s, ctx) => {
  const d = ints(16, (i) => i);
  await rejects(t, s.put("ns", "k", d, { shape: [16], if_version: 1 }), VersionConflictError, /at version 0, not 1/, "absent key with if_version 1");
  t.equal((await s.put("ns", "k", d, { shape: [16], if_version: 0 })).version, 1, "if_version 0 creates");
  await rejects(t, s.put("ns", "k", d, { shape: [16], if_version: 0 }), VersionConflictError, /at version 1, not 0/, "if_version 0 on an existing key");
  t.equal((await s.put("ns", "k", d, { shape: [16], if_version: 1 })).version, 2, "matching if_version");
  await rejects(t, s.put("ns", "k", d, { shape: [16], if_version: 1 }), VersionConflictError, /at version 2, not 1/, "stale if_version");
  const e = await s.put("ns", "k", d, { shape: [16], if_version: 7 }).catch((x: unknown) => x);
  t.equal((e as VersionConflictError).code, "version_conflict", "code word version_conflict");
  t.equal((await s.get("ns", "k")).latest_version, 2, "conflicts stored nothing");
  // many concurrent writers: no lost or duplicate versions (which put gets which version
  // depends on arrival order, so these calls are left out of the call-by-call comparison)
  const rs = await ctx.untraced(() =>
    Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        s.put(
          "ns",
          "c",
          ints(8, () => i),
          { shape: [8] },
        ),
      ),
    ),
  );
  t.deepEqual(
    rs.map((r) => r.version).sort((a, b) => a - b),
    Array.from({ length: 20 }, (_, i) => i + 1),
    "20 concurrent puts get 1..20",
  );
  // the latest version holds whichever put came last: left out too
  t.deepEqual(
    (await ctx.untraced(() => s.get("ns", "c"))).versions,
    Array.from({ length: 20 }, (_, i) => i + 1),
    "all 20 versions kept",
  );
});

suite.test("delete is a soft delete; a put after it continues at last + 1", async (t, s) => {
  const big = ints(4096, (i) => i % 3);
  await s.put("ns", "k", big, { shape: [4096] });
  await s.put("ns", "k", big, { shape: [4096] });
  await s.put(
    "ns",
    "keep",
    ints(4096, (i) => i % 11),
    { shape: [4096] },
  );
  const before = Date.now();
  const del = await s.delete("ns", "k");
  const after = Date.now();
  const { purge_after, ...rest } = del;
  t.deepEqual(rest, { namespace: "ns", key: "k", deleted: true, version: 2 }, "delete response");
  const purge = Date.parse(purge_after);
  t.ok(ISO.test(purge_after) && purge >= before + 30 * DAY - 1 && purge <= after + 30 * DAY + 1, `purge_after is the delete's time + 30 days (${purge_after})`);
  await rejects(t, s.get("ns", "k"), NotFoundError, /No entry k/, "deleted key is not_found");
  await rejects(t, s.delete("ns", "k"), NotFoundError, /No entry k/, "second delete is not_found");
  await rejects(t, s.serve("ns", "k"), NotFoundError, /No entry k/, "serve of deleted key is not_found");
  await rejects(t, s.delete("ns", "never"), NotFoundError, /No entry never/, "delete of a key that never was is not_found");
  t.deepEqual(
    (await s.list("ns")).keys.map((k) => k.key),
    ["keep"],
    "deleted keys are not listed",
  );
  t.deepEqual(
    (await s.search("ns", {})).results.map((k) => k.key),
    ["keep"],
    "nor found by search",
  );
  await rejects(t, s.put("ns", "k", big, { shape: [4096], if_version: 2 }), VersionConflictError, /at version 0/, "a deleted key needs if_version 0 or none");
  const again = await s.put("ns", "k", big, { shape: [4096], if_version: 0 });
  t.equal(again.version, 3, "a put after delete continues at last + 1");
  t.deepEqual((await s.get("ns", "k")).versions, [3], "old versions are no longer kept");
  await rejects(t, s.get("ns", "k", { version: 1 }), NotFoundError, /no version 1/, "tombstoned version is not_found");
  await rejects(t, s.serve("ns", "k", { version: 2 }), NotFoundError, /no version 2/, "tombstoned version does not serve");
  t.deepEqual(Array.from((await s.serve("ns", "k")).data as Int32Array), Array.from(big), "the new version serves");
});

suite.storeOnly(
  "compaction purges tombstones after 30 days and then unreferenced payloads",
  "compact() takes an injected clock and is an operator task on the engine's store, with no HTTP call",
  async (t, { open }) => {
    const clock = new FakeClock(T0);
    const s = await open({ clock });
    const big = ints(4096, (i) => i % 3);
    await s.put("ns", "k", big, { shape: [4096] });
    await s.put("ns", "k", big, { shape: [4096] });
    await s.put(
      "ns",
      "keep",
      ints(4096, (i) => i % 11),
      { shape: [4096] },
    );
    const del = await s.delete("ns", "k");
    t.equal(del.purge_after, new Date(T0 + 30 * DAY).toISOString(), "purge_after on the injected clock");
    clock.advance(DAY);
    t.equal((await s.put("ns", "k", big, { shape: [4096], if_version: 0 })).version, 3, "re-put after delete");
    const early = await s.compact({ now: T0 + 30 * DAY - 1 });
    t.deepEqual(early, { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "nothing purged before purge_after");
    await s.delete("ns", "keep");
    const c = await s.compact({ now: T0 + 30 * DAY });
    t.deepEqual(c, { versions_purged: 2, keys_purged: 0, payloads_purged: 0 }, "versions 1-2 purged at purge_after; their payload still used by v3");
    t.equal((await s.serve("ns", "k")).version, 3, "the live version survives compaction");
    const c2 = await s.compact({ now: T0 + 31 * DAY });
    t.deepEqual(c2, { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "fully expired key and its payload purged");
    const fresh = await s.put(
      "ns",
      "keep",
      ints(4, () => 1),
      { shape: [4] },
    );
    t.equal(fresh.version, 1, "a purged key starts again at version 1");
    clock.set(T0 + 100 * DAY);
    await s.delete("ns", "keep");
    t.deepEqual(await s.compact(), { versions_purged: 0, keys_purged: 0, payloads_purged: 0 }, "compact() reads the store's clock: not yet");
    clock.advance(30 * DAY);
    t.deepEqual(await s.compact(), { versions_purged: 1, keys_purged: 1, payloads_purged: 1 }, "compact() after 30 days on the injected clock");
    await rejects(t, s.compact({ now: Number.NaN }), ValidationError, /now/, "bad now");
    await s.close();
  },
);

suite.test("list and search paginate in byte order", async (t, s) => {
  const keys = ["b", "a/2", "a/10", "a/1", "A", "c:x", "a.b"];
  for (const [i, k] of keys.entries())
    await s.put(
      "ns",
      k,
      ints(4, () => i),
      { shape: [4], metadata: { i, even: i % 2 === 0, name: k } },
    );
  await s.put(
    "other",
    "zzz",
    ints(4, () => 0),
    { shape: [4] },
  );
  const all = await s.list("ns");
  t.deepEqual(
    all.keys.map((k) => k.key),
    ["A", "a.b", "a/1", "a/10", "a/2", "b", "c:x"],
    "ascending byte order",
  );
  t.deepEqual([all.namespace, all.total, all.limit, all.offset, all.next_offset], ["ns", 7, 1000, 0, null], "defaults");
  t.deepEqual(
    Object.keys(all.keys[0]!).sort(),
    ["codec", "dtype", "key", "max_abs_error", "relative_error", "shape", "updated_at", "verdict", "version"],
    "list item fields",
  );
  t.deepEqual([all.keys[0]!.codec, all.keys[0]!.relative_error, all.keys[0]!.max_abs_error], ["raw", 0, 0], "a small integer entry: raw, exact");
  const p1 = await s.list("ns", { prefix: "a/", limit: 2 });
  t.deepEqual([p1.keys.map((k) => k.key), p1.total, p1.next_offset], [["a/1", "a/10"], 3, 2], "prefix, first page");
  const p2 = await s.list("ns", { prefix: "a/", limit: 2, offset: 2 });
  t.deepEqual([p2.keys.map((k) => k.key), p2.next_offset], [["a/2"], null], "last page");
  const past = await s.list("ns", { offset: 100 });
  t.deepEqual([past.keys, past.total, past.next_offset], [[], 7, null], "past the end: empty page, total kept");
  t.deepEqual(
    (await s.list("other")).keys.map((k) => k.key),
    ["zzz"],
    "namespaces are apart",
  );
  t.equal((await s.list("default")).total, 0, "an empty namespace lists nothing");
  const sr = await s.search("ns", { even: true, i: { $gte: 2 } });
  t.deepEqual(
    sr.results.map((r) => r.key),
    ["A", "a.b", "a/10"],
    "search on metadata, in byte order",
  );
  t.deepEqual(sr.results[0]!.metadata, { i: 4, even: true, name: "A" }, "search returns metadata");
  const sp = await s.search("ns", { even: true }, { limit: 1, offset: 1 });
  t.deepEqual([sp.results.length, sp.total, sp.next_offset, sp.limit], [1, 4, 2, 1], "search pagination");
  t.equal((await s.search("ns", {})).limit, 100, "search limit default 100");
  await rejects(t, s.search("ns", { i: { $foo: 1 } }), ValidationError, /unknown operator/, "unknown operator");
  await rejects(t, s.list("ns", { limit: 1001 }), ValidationError, /limit must be at most 1000/, "limit above 1000");
  await rejects(t, s.list("ns", { limit: 0 }), ValidationError, /limit must be at least 1/, "limit 0");
  await rejects(t, s.list("ns", { offset: -1 }), ValidationError, /offset/, "negative offset");
  await rejects(t, s.list("ns", { prefix: "a b" }), ValidationError, /prefix/, "bad prefix");
  await rejects(t, s.search("ns", {}, { limt: 3 } as object), ValidationError, /unknown field 'limt'/, "misspelt search option");
});

suite.test("search: the filter language over stored metadata", async (t, s) => {
  const rows: [string, Record<string, unknown>][] = [
    ["run/1", { kind: "scan", run: { seed: 1, tag: "alpha-1" }, score: 0.5, tags: ["a", "b"], flag: false }],
    ["run/2", { kind: "scan", run: { seed: 2, tag: "beta" }, score: 1.5, flag: true }],
    ["run/3", { kind: "sim", run: { seed: 3, tag: "alpha-2" }, score: "high", none: null }],
    ["other/4", { kind: "scan", run: { seed: 4 } }],
  ];
  for (const [k, m] of rows)
    await s.put(
      "ns",
      k,
      ints(4, () => 1),
      { shape: [4], metadata: m },
    );
  const keys = async (f: Record<string, unknown>, o = {}) => (await s.search("ns", f, o)).results.map((r) => r.key);
  t.deepEqual(await keys({ "run.seed": 3 }), ["run/3"], "equality on a dotted path");
  t.deepEqual(await keys({ "run.seed": "3" }), [], "a number never equals a string");
  t.deepEqual(await keys({ tags: ["a", "b"] }), ["run/1"], "array equality");
  t.deepEqual(await keys({ none: null }), ["run/3"], "null equality");
  t.deepEqual(await keys({ score: { $gt: 1 } }), ["run/2"], "$gt on numbers skips a string value");
  t.deepEqual(await keys({ "run.seed": { $gte: 2, $lt: 4 } }), ["run/2", "run/3"], "two operators on one field");
  t.deepEqual(await keys({ kind: { $in: ["sim", "x"] } }), ["run/3"], "$in");
  t.deepEqual(await keys({ kind: { $nin: ["scan"] } }), ["run/3"], "$nin");
  t.deepEqual(await keys({ kind: { $ne: "scan" } }), ["run/3"], "$ne");
  t.deepEqual(await keys({ flag: { $exists: true } }), ["run/1", "run/2"], "$exists on a false value");
  t.deepEqual(await keys({ "run.tag": { $prefix: "alpha" } }), ["run/1", "run/3"], "$prefix");
  t.deepEqual(await keys({ $or: [{ kind: "sim" }, { "run.seed": { $gte: 4 } }] }), ["other/4", "run/3"], "$or, in byte order");
  t.deepEqual(await keys({ $and: [{ kind: "scan" }, { $not: { flag: true } }] }), ["other/4", "run/1"], "$and with $not");
  t.deepEqual(await keys({ kind: "scan" }, { prefix: "run/", limit: 1, offset: 1 }), ["run/2"], "a filter with a prefix and a page");
  const page = await s.search("ns", { kind: "scan" }, { prefix: "run/", limit: 1 });
  t.deepEqual([page.total, page.next_offset, page.results[0]!.version], [2, 1, 1], "total and next_offset of the filtered prefix");
  await rejects(t, s.search("ns", { kind: { $regex: "x" } }), ValidationError, /filter\.kind\.\$regex: unknown operator/, "unknown operator, named by place");
  await rejects(t, s.search("ns", { $and: [] }), ValidationError, /non-empty list/, "empty $and");
  await rejects(t, s.search("ns", { a: { $eq: 1, b: 2 } }), ValidationError, /mixes operators and plain fields/, "operators mixed with fields");
});

suite.test("metadata: any JSON object round-trips, non-ASCII and up to 64 KiB", async (t, s) => {
  const uni = { city: "Zürich", mark: "✓ 😀", ключ: [1, "é", { deep: [null, true, 2.5] }], 'quote"back\\slash': "\u0001\n" };
  await s.put(
    "ns",
    "unicode",
    ints(8, (i) => i),
    { shape: [8], metadata: uni },
  );
  t.deepEqual((await s.get("ns", "unicode")).metadata, uni, "non-ASCII keys and values, control characters and nesting come back as put");
  t.deepEqual(
    (await s.search("ns", { city: "Zürich" })).results.map((r) => r.key),
    ["unicode"],
    "and are searchable",
  );
  const big = { blob: "é".repeat(30_000) };
  await s.put(
    "ns",
    "bigmeta",
    ints(8, (i) => i),
    { shape: [8], metadata: big },
  );
  t.deepEqual((await s.get("ns", "bigmeta")).metadata, big, "60 KiB of metadata comes back whole");
  const none = await s.put(
    "ns",
    "nometa",
    ints(8, (i) => i),
    { shape: [8] },
  );
  t.deepEqual([none.version, (await s.get("ns", "nometa")).metadata], [1, {}], "no metadata is an empty object");
  const wide = { blob: "é".repeat(5000) }; // 10 KiB as UTF-8, 30 KiB as an escaped header: travels as JSON
  await s.put(
    "ns",
    "wide",
    ints(8, (i) => i),
    { shape: [8], metadata: wide },
  );
  t.deepEqual((await s.get("ns", "wide")).metadata, wide, "5000 non-ASCII characters come back whole");
  const odd = { n: NaN, i: -Infinity, d: new Date(0), u: undefined, arr: [undefined, -0], m: new Map([[1, 2]]) };
  await s.put(
    "ns",
    "odd",
    ints(8, (i) => i),
    { shape: [8], metadata: odd },
  );
  odd.arr.push(1); // the store keeps its own copy
  t.deepEqual(
    (await s.get("ns", "odd")).metadata,
    { n: null, i: null, d: "1970-01-01T00:00:00.000Z", arr: [null, 0], m: {} },
    "values outside JSON are stored as their JSON form",
  );
  await rejects(
    t,
    s.put(
      "ns",
      "toobig",
      ints(8, (i) => i),
      { shape: [8], metadata: { blob: "x".repeat(70_000) } },
    ),
    ValidationError,
    /64 KiB/,
    "over 64 KiB is refused",
  );
  await rejects(
    t,
    s.put(
      "ns",
      "arr",
      ints(8, (i) => i),
      { shape: [8], metadata: [1, 2] as never },
    ),
    ValidationError,
    /metadata/,
    "metadata must be an object",
  );
});

suite.test("codecs: lossless when it pays, raw otherwise; serve is bit-exact", async (t, s) => {
  const smooth = ints(8192, (i) => i >> 4);
  const r = await s.put("ns", "lossless", smooth, { shape: [8192] });
  t.deepEqual([r.verdict, r.compressed, r.fingerprint.codec, r.relative_error], ["lossless", true, "lossless", 0], "compressible ints are lossless");
  t.ok(
    r.compression_ratio > 10 && Math.abs(r.compression_ratio - r.bytes_in / r.bytes_stored) < 1e-12,
    `ratio = bytes_in/bytes_stored (${r.compression_ratio.toFixed(1)})`,
  );
  t.equal(r.tt, null, "tt null for lossless");
  const rnd = noise(65536, 3);
  const p = await s.put("ns", "noise", rnd, { dtype: "uint8", shape: [256, 256] });
  t.deepEqual(
    [p.verdict, p.compressed, p.compression_ratio, p.bytes_stored, p.fingerprint.codec],
    ["passthrough", false, 1, 65536, "raw"],
    "random bytes are passthrough",
  );
  t.equal(p.fingerprint.sha256, createHash("sha256").update(rnd).digest("hex"), "sha256 of the stored (raw) payload");
  const small = await s.put(
    "ns",
    "small",
    ints(100, () => 0),
    { shape: [100] },
  );
  t.deepEqual([small.verdict, small.bytes_stored], ["passthrough", 400], "below min_compress_bytes: passthrough");
  const bytes = await s.put("ns", "blob", Buffer.from("x".repeat(10000)));
  t.deepEqual(
    [bytes.dtype, bytes.shape, bytes.verdict, bytes.fingerprint.norm],
    ["bytes", [10000], "lossless", null],
    "bytes: default dtype, shape, norm null",
  );
  const ab = await s.put("ns", "ab", new TextEncoder().encode("hello, world").buffer);
  t.deepEqual([ab.dtype, ab.shape], ["bytes", [12]], "an ArrayBuffer is bytes too");
  const i64 = BigInt64Array.from({ length: 1024 }, (_, i) => BigInt(i) * 10n ** 12n);
  await s.put("ns", "i64", i64, { shape: [32, 32] });
  const bools = Uint8Array.from({ length: 5000 }, (_, i) => (i % 3 === 0 ? 1 : 0));
  const b = await s.put("ns", "bool", bools, { dtype: "bool", shape: [50, 100] });
  t.equal(b.fingerprint.norm, Math.sqrt(1667), "bool norm");
  const u16 = Uint16Array.from({ length: 3000 }, (_, i) => (i * 7) & 0xffff);
  await s.put("ns", "u16", u16, { shape: [3000] });
  t.deepEqual(Array.from((await s.serve("ns", "lossless")).data as Int32Array), Array.from(smooth), "lossless round trip");
  t.deepEqual(Buffer.from((await s.serve("ns", "noise")).data as Uint8Array), Buffer.from(rnd), "raw round trip");
  t.deepEqual(Array.from((await s.serve("ns", "i64")).data as BigInt64Array), Array.from(i64), "int64 round trip");
  t.equal(Buffer.from((await s.serve("ns", "blob")).data as Uint8Array).toString(), "x".repeat(10000), "bytes round trip");
  t.equal(Buffer.from((await s.serve("ns", "ab")).data as Uint8Array).toString(), "hello, world", "ArrayBuffer round trip");
  const bs = await s.serve("ns", "bool", {
    slice: [
      [0, 1],
      [0, 10],
    ],
  });
  t.deepEqual(
    [bs.dtype, bs.shape, bs.data instanceof Uint8Array, Array.from(bs.data as Uint8Array)],
    ["bool", [1, 10], true, [1, 0, 0, 1, 0, 0, 1, 0, 0, 1]],
    "bool slice as Uint8Array",
  );
  const us = await s.serve("ns", "u16", { slice: [[2995, 3000]] });
  t.ok(us.data instanceof Uint16Array && Array.from(us.data).join() === Array.from(u16.subarray(2995)).join(), "uint16 slice as Uint16Array");
  const blk = await s.serve("ns", "i64", {
    slice: [
      [1, 3],
      [30, 32],
    ],
  });
  t.deepEqual([blk.shape, Array.from(blk.data as BigInt64Array)], [[2, 2], [62n, 63n, 94n, 95n].map((v) => v * 10n ** 12n)], "slice of a lossless entry");
  const nb = await s.serve("ns", "noise", {
    slice: [
      [1, 2],
      [100, 120],
    ],
  });
  t.deepEqual(Buffer.from(nb.data as Uint8Array), Buffer.from(rnd.subarray(356, 376)), "slice of a raw entry");
  await rejects(
    t,
    s.serve("ns", "i64", {
      slice: [
        [0, 33],
        [0, 1],
      ],
    }),
    ValidationError,
    /slice\.0 stops at 33/,
    "slice beyond the shape",
  );
  await rejects(t, s.serve("ns", "i64", { slice: [[0, 1]] }), ValidationError, /slice has 1 pairs/, "slice of the wrong rank");
  await rejects(
    t,
    s.serve("ns", "i64", {
      slice: [
        [2, 1],
        [0, 1],
      ],
    }),
    ValidationError,
    /start < stop/,
    "empty slice",
  );
  await rejects(t, s.serve("ns", "i64", { dtype: "float32" }), ValidationError, /floating data only/, "dtype conversion of ints");
  await rejects(t, s.serve("ns", "nope"), NotFoundError, /No entry nope/, "serve of an unknown key");
});

suite.test("names: every allowed key character, the longest key and the longest namespace", async (t, s) => {
  const keys = ["a:b@c=d/e.f-g_h", "x=1", "@", ":", "=", "a..b/...", "-._", "UPPER/lower/0123456789", "k".repeat(512), `${"s/".repeat(255)}z`];
  for (const [i, k] of keys.entries()) {
    const r = await s.put(
      "ns",
      k,
      ints(4, () => i),
      { shape: [4], metadata: { i } },
    );
    t.deepEqual([r.key, r.version], [k, 1], `put ${k.slice(0, 40)}`);
  }
  for (const [i, k] of keys.entries()) {
    const g = await s.get("ns", k);
    const d = await s.serve("ns", k);
    t.ok(g.key === k && g.metadata.i === i && d.key === k && (d.data as Int32Array)[0] === i, `get and serve ${k.slice(0, 40)}`);
  }
  t.deepEqual(
    (await s.list("ns")).keys.map((x) => x.key),
    [...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))),
    "all listed, in byte order",
  );
  t.deepEqual(
    (await s.list("ns", { prefix: "a:b@c=d/" })).keys.map((x) => x.key),
    ["a:b@c=d/e.f-g_h"],
    "a prefix with reserved URL characters",
  );
  t.equal((await s.delete("ns", "a:b@c=d/e.f-g_h")).deleted, true, "delete of a key with reserved URL characters");
  t.equal((await s.query.similarity("ns", "x=1", "@", { metric: "dot" })).score, 1 * 2 * 4, "similarity between such keys");
  const r = await s.put(
    LONG_NS,
    "k",
    ints(4, () => 1),
    { shape: [4] },
  );
  t.equal(r.namespace, LONG_NS, "a 255-character namespace");
  t.deepEqual(
    (await s.list(LONG_NS)).keys.map((x) => x.key),
    ["k"],
    "and it lists",
  );
  await rejects(
    t,
    s.put(
      "ns",
      "k".repeat(513),
      ints(4, () => 1),
      { shape: [4] },
    ),
    ValidationError,
    /at most 512/,
    "a 513-character key",
  );
  await rejects(
    t,
    s.put(
      "n".repeat(256),
      "k",
      ints(4, () => 1),
      { shape: [4] },
    ),
    ValidationError,
    /at most 255/,
    "a 256-character namespace",
  );
  for (const bad of ["a b", "a%20b", "a?b", "a#b", "a+b", "é", "a\\b", "./a", "a/."]) {
    await rejects(t, s.get("ns", bad), ValidationError, /key/, `key ${JSON.stringify(bad)}`);
  }
});

suite.test("data: every typed array class, views at an offset, Buffers and DataViews", async (t, s) => {
  const cases: [string, ArrayBufferView | ArrayBuffer, Record<string, unknown>, string, string][] = [
    ["i8", Int8Array.from([-128, -1, 0, 127]), { shape: [4] }, "int8", "Int8Array"],
    ["u8c", Uint8ClampedArray.from([0, 1, 255, 7]), { shape: [2, 2] }, "uint8", "Uint8Array"],
    ["i16", Int16Array.from([-32768, 32767, 5, -5]), { shape: [4] }, "int16", "Int16Array"],
    ["u16", Uint16Array.from([65535, 0, 1, 2]), { shape: [4] }, "uint16", "Uint16Array"],
    ["u32", Uint32Array.from([4294967295, 0, 1, 2]), { shape: [4] }, "uint32", "Uint32Array"],
    ["u64", BigUint64Array.from([2n ** 64n - 1n, 0n, 1n, 2n]), { shape: [4] }, "uint64", "BigUint64Array"],
    ["f32", Float32Array.from([1.5, -0, 3.4028234663852886e38, 1e-45]), { shape: [4] }, "float32", "Float32Array"],
    ["f64", Float64Array.from([Math.PI, -0, Number.MAX_VALUE, 5e-324]), { shape: [4] }, "float64", "Float64Array"],
    ["f16", Uint16Array.from([0x3c00, 0x8000, 0x7bff, 0x0001]), { shape: [4], dtype: "float16" }, "float16", "Uint16Array"],
    ["bf16", Uint16Array.from([0x3f80, 0xc000, 0x7f7f, 0x0001]), { shape: [4], dtype: "bfloat16" }, "bfloat16", "Uint16Array"],
    ["buf-as-i16", Buffer.from([1, 0, 255, 255]), { shape: [2], dtype: "int16" }, "int16", "Int16Array"],
    ["u8-as-f32", new Uint8Array(new Float32Array([2, 4]).buffer), { shape: [2], dtype: "float32" }, "float32", "Float32Array"],
    ["view-at-offset", new Int32Array(Int32Array.from([9, 8, 7, 6, 5]).buffer, 4, 3), { shape: [3] }, "int32", "Int32Array"],
    ["dataview", new DataView(Uint8Array.from([1, 2, 3, 4, 5]).buffer, 1, 3), {}, "bytes", "Uint8Array"],
    ["arraybuffer-as-u16", Uint16Array.from([7, 8]).buffer, { shape: [2], dtype: "uint16" }, "uint16", "Uint16Array"],
  ];
  for (const [k, data, opts, dtype, cls] of cases) {
    const r = await s.put("ns", k, data as never, opts);
    const back = await s.serve("ns", k);
    const want = Buffer.from(ArrayBuffer.isView(data) ? Buffer.from(data.buffer, data.byteOffset, data.byteLength) : Buffer.from(data));
    const got = Buffer.from(back.data.buffer, back.data.byteOffset, back.data.byteLength);
    t.ok(
      r.dtype === dtype && back.dtype === dtype && back.data.constructor.name === cls && got.equals(want),
      `${k}: ${dtype}, served as ${back.data.constructor.name} with the same bytes`,
    );
  }
  await rejects(
    t,
    s.put("ns", "x", Int16Array.from([1, 2]), { shape: [2], dtype: "float16" }),
    ValidationError,
    /does not match/,
    "an Int16Array is not float16",
  );
  await rejects(t, s.put("ns", "x", Float32Array.from([1, NaN]), { shape: [2] }), ValidationError, /NaN or infinite/, "NaN in a float32 put");
  await rejects(
    t,
    s.put("ns", "x", Uint16Array.from([0x7c00, 0]), { shape: [2], dtype: "float16" }),
    ValidationError,
    /NaN or infinite/,
    "infinity in a float16 put",
  );
  const f = await s.serve("ns", "f32", { dtype: "float64", slice: [[1, 3]] });
  t.deepEqual([f.dtype, Array.from(f.data as Float64Array)], ["float64", [-0, 3.4028234663852886e38]], "float32 served as float64, -0 kept");
});

suite.test("queries on integer entries: similarity, top-K and vector options", async (t, s) => {
  const base = ints(64, (i) => (i % 8) - 3);
  await s.put("ns", "q/a", base, { shape: [8, 8], metadata: { g: { n: 1 } } });
  await s.put(
    "ns",
    "q/b",
    ints(64, (i) => (i % 5) - 2),
    { shape: [8, 8], metadata: { g: { n: 2 } } },
  );
  await s.put(
    "ns",
    "q/b",
    ints(64, (i) => (i % 8) - 3),
    { shape: [8, 8], metadata: { g: { n: 3 } } },
  );
  await s.put(
    "ns",
    "q/c",
    ints(64, (i) => 64 - i),
    { shape: [8, 8] },
  );
  await s.put(
    "ns",
    "q/flat",
    ints(64, (i) => i),
    { shape: [64] },
  );
  const dotAB1 = Array.from(base).reduce((acc, x, i) => acc + x * ((i % 5) - 2), 0);
  t.equal((await s.query.similarity("ns", "q/a", "q/b", { metric: "dot", version_b: 1 })).score, dotAB1, "dot against version 1, exact on integers");
  t.equal((await s.query.similarity("ns", "q/a", "q/b", { metric: "l2" })).score, 0, "l2 against the equal latest version");
  t.equal((await s.query.similarity("ns", "q/a", "q/b", { metric: "cosine", version_a: 1, version_b: 2 })).score, 1, "cosine of equal tensors is 1");
  const all = await s.query.topk("ns", { key: "q/a", k: 100, metric: "l2", include_self: true });
  t.deepEqual(
    [all.results.map((r) => r.key), all.scanned, all.skipped],
    [["q/a", "q/b", "q/c"], 3, 1],
    "k above the candidates: all of them, self first; another shape skipped",
  );
  const nested = await s.query.topk("ns", { key: "q/a", filter: { "g.n": { $gte: 2 } } });
  t.deepEqual(
    nested.results.map((r) => [r.key, r.version]),
    [["q/b", 2]],
    "a filter on a nested field, latest versions only",
  );
  const view = new Float32Array(Float32Array.from([0, ...Array.from(base), 0]).buffer, 4, 64);
  const v = await s.query.vector("ns", { vector: view, shape: [8, 8], k: 1, metric: "l2" });
  t.deepEqual(
    v.results.map((r) => [r.key, r.score]),
    [["q/a", 0]],
    "a Float32Array view at an offset",
  );
  const v64 = await s.query.vector("ns", { vector: Array.from(base), shape: [8, 8], k: 10, dtype: "float64", metric: "dot" });
  t.equal(
    v64.results.find((r) => r.key === "q/a")?.score,
    Array.from(base).reduce((acc, x) => acc + x * x, 0),
    "a list with dtype float64, exact",
  );
  await rejects(t, s.query.vector("ns", { vector: new Float32Array(0) }), ValidationError, /vector must not be empty/, "an empty Float32Array");
  await rejects(t, s.query.vector("ns", { vector: new Float64Array(0), k: 3 }), ValidationError, /vector must not be empty/, "an empty Float64Array");
  await rejects(
    t,
    s.query.vector("ns", { vector: new Float32Array(64), shape: [8, 8], dtype: "float64" }),
    ValidationError,
    /dtype|vector/,
    "a Float32Array declared float64",
  );
  await rejects(t, s.query.vector("ns", { vector: [1, 2], vector_b64: "AAAA" } as never), ValidationError, /unknown field 'vector_b64'/, "a wire-only field");
  await rejects(t, s.query.topk("ns", { key: "q/a", filter: { $where: 1 } }), ValidationError, /unknown operator/, "a bad filter in top-K");
  await rejects(t, s.query.topk("ns", { key: "q/a", k: 1001 }), ValidationError, /k must be at most/, "k above the maximum");
  await rejects(t, s.query.similarity("ns", "q/a", "q/b", { namespace_b: "bad ns" }), ValidationError, /namespace/, "a bad namespace_b");
  await rejects(t, s.query.similarity("ns", "q/a", "q/flat"), ValidationError, /different shapes/, "different shapes");
  await rejects(t, s.query.similarity("ns", "q/a", "q/b", { version_b: 3 }), NotFoundError, /no version 3/, "a missing version_b");
});

suite.test("odd arguments: null options, filters and metadata outside JSON", async (t, s) => {
  await s.put(
    "ns",
    "k",
    ints(16, (i) => i),
    { shape: [16], metadata: { a: 1, d: "1970-01-02T00:00:00.000Z" } },
  );
  const nul = null as never;
  const calls: [() => Promise<unknown>, RegExp, string][] = [
    [
      () =>
        s.put(
          "ns",
          "k",
          ints(16, (i) => i),
          nul,
        ),
      /^options must be an object, not null\.$/,
      "put",
    ],
    [() => s.get("ns", "k", nul), /^options must be an object, not null\.$/, "get"],
    [() => s.list("ns", nul), /^options must be an object, not null\.$/, "list"],
    [() => s.search("ns", {}, nul), /^options must be an object, not null\.$/, "search options"],
    [() => s.search("ns", nul), /filter must be a JSON object/, "search filter"],
    [() => s.search("ns", [1] as never), /filter must be a JSON object/, "a list as a filter"],
    [() => s.serve("ns", "k", nul), /^options must be an object, not null\.$/, "serve"],
    [() => s.query.similarity("ns", "k", "k", nul), /^options must be an object, not null\.$/, "similarity"],
    [() => s.query.topk("ns", nul), /^options must be an object, not null\.$/, "topk"],
    [() => s.query.topk("ns", undefined as never), /^options is required\.$/, "topk without options"],
    [() => s.query.vector("ns", nul), /^options must be an object, not null\.$/, "vector"],
    [() => s.putCores("ns", "c", [{ shape: [1, 2, 1], data: new Float32Array(2) }], nul), /^options must be an object, not null\.$/, "putCores"],
    [() => s.query.similarity("ns", undefined as never, "k"), /^key is required\.$/, "similarity without a"],
    [
      () =>
        s.put(
          "ns",
          "k",
          ints(16, (i) => i),
          { shape: [16], metadata: { a: 1n } },
        ),
      /no cycles, no BigInt/,
      "BigInt metadata",
    ],
    [() => s.search("ns", { a: 1n }), /no cycles, no BigInt/, "a BigInt filter"],
    [() => s.search("ns", { a: { $gt: NaN } }), /\$gt takes a number or a string/, "NaN compares as null"],
  ];
  for (const [f, re, msg] of calls) await rejects(t, f(), ValidationError, re, `${msg}: ValidationError`);
  const cyclic: Record<string, unknown> = { a: 1 };
  cyclic.self = cyclic;
  await rejects(t, s.search("ns", cyclic), ValidationError, /no cycles/, "a cyclic filter");
  await rejects(t, s.query.topk("ns", { key: "k", filter: cyclic }), ValidationError, /no cycles/, "a cyclic top-K filter");
  await rejects(
    t,
    s.put(
      "ns",
      "k",
      ints(16, (i) => i),
      { shape: [16], metadata: cyclic },
    ),
    ValidationError,
    /no cycles/,
    "cyclic metadata",
  );
  const keys = async (f: Record<string, unknown>) => (await s.search("ns", f)).results.map((r) => r.key);
  t.deepEqual(await keys({ a: undefined, b: undefined }), ["k"], "undefined conditions are dropped, as in JSON");
  t.deepEqual(await keys({ d: { $gt: new Date(0) } }), ["k"], "a Date compares as its ISO string");
  t.deepEqual(await keys({ a: { $in: [1, undefined] } }), ["k"], "undefined in a list is null");
  t.equal((await s.list("ns")).total, 1, "nothing else was stored");
});

suite.test("tenants never see each other's entries", async (t, s, ctx) => {
  const a = await ctx.tenant("acme");
  const b = await ctx.tenant("bravo");
  await a.put(
    "default",
    "k",
    ints(4, () => 1),
    { shape: [4], metadata: { who: "a" } },
  );
  await b.put(
    "default",
    "k",
    ints(4, () => 2),
    { shape: [4], metadata: { who: "b" } },
  );
  t.deepEqual((await a.get("default", "k")).metadata, { who: "a" }, "acme sees its own");
  t.deepEqual((await b.get("default", "k")).metadata, { who: "b" }, "bravo sees its own");
  t.equal((await b.get("default", "k")).version, 1, "versions are per tenant");
  await rejects(t, s.get("default", "k"), NotFoundError, /No entry/, "a third tenant sees neither");
  t.equal((await s.list("default")).total, 0, "nor lists them");
  t.equal((await s.search("default", {})).total, 0, "nor finds them");
  await a.delete("default", "k");
  t.deepEqual((await b.serve("default", "k")).data, Int32Array.from([2, 2, 2, 2]), "a delete in one tenant leaves the other");
  await rejects(t, a.get("default", "k"), NotFoundError, /No entry/, "and is seen by its own tenant");
});

suite.storeOnly(
  "forTenant: the default tenant is local; tenant ids are validated",
  "forTenant exists only in-process: over HTTP the gateway takes the tenant from the API key",
  async (t, { open }) => {
    const s = await open();
    t.equal(s.tenant, "local", "default tenant is local");
    t.equal(s.forTenant("acme").tenant, "acme", "a view of another tenant");
    t.throws(() => s.forTenant("Bad Tenant"), /tenant/, "tenant ids are validated");
    await s.close();
  },
);

suite.test("every bad input is a ValidationError and stores nothing", async (t, s) => {
  const d = ints(16, (i) => i);
  const cases: [() => Promise<unknown>, RegExp, string][] = [
    [() => s.put("bad ns", "k", d, { shape: [16] }), /namespace/, "namespace"],
    [() => s.put("ns", "a//b", d, { shape: [16] }), /segment/, "empty key segment"],
    [() => s.put("ns", "../x", d, { shape: [16] }), /segment/, "dot-dot key segment"],
    [() => s.put("ns", "a/../b", d, { shape: [16] }), /segment/, "inner dot-dot key segment"],
    [() => s.put("ns", "", d, { shape: [16] }), /key/, "empty key"],
    [() => s.put("ns", "k", d), /shape is required/, "missing shape"],
    [() => s.put("ns", "k", d, { shape: [15] }), /data has 64 bytes but shape \[15\] of int32 needs 60/, "shape/size mismatch"],
    [() => s.put("ns", "k", d, { shape: [16], dtype: "float64" }), /does not match/, "dtype vs typed array"],
    [() => s.put("ns", "k", d, { shape: [16], dtype: "nope" as "int8" }), /dtype/, "unknown dtype"],
    [() => s.put("ns", "k", d, { shape: [16], tolerance: -0.001 }), /tolerance must be at least 0/, "negative tolerance (0 asks for an exact entry)"],
    [() => s.put("ns", "k", d, { shape: [16], max_abs_error: -1 }), /max_abs_error must be at least 0/, "negative max_abs_error"],
    [() => s.put("ns", "k", d, { shape: [16], codec: "zfp" as "tt" }), /codec must be one of/, "unknown codec"],
    [() => s.put("ns", "k", d, { shape: [16], tolerance: 2 }), /tolerance/, "tolerance 2"],
    [() => s.put("ns", "k", d, { shape: [16], max_rank: 0 }), /max_rank/, "max_rank 0"],
    [() => s.put("ns", "k", d, { shape: [16], if_version: -1 }), /if_version/, "negative if_version"],
    [() => s.put("ns", "k", d, { shape: [16], metadata: { x: "y".repeat(70000) } }), /64 KiB/, "metadata too large"],
    [() => s.put("ns", "k", d, { shape: [16], shap: [1] } as object), /unknown field 'shap'/, "misspelt option"],
    [() => s.put("ns", "k", "text" as unknown as Buffer), /typed array/, "data of the wrong kind"],
    [() => s.put("ns", "k", Buffer.alloc(0)), /empty/, "empty data"],
    [() => s.put("ns", "k", d, { shape: [0] }), /shape/, "zero dimension"],
    [() => s.get("ns", "k", { version: 0 }), /version/, "version 0"],
    [() => s.get("bad ns", "k"), /namespace/, "get: namespace"],
    [() => s.delete("ns", "a//b"), /segment/, "delete: key"],
    [() => s.list("bad ns"), /namespace/, "list: namespace"],
    [() => s.serve("ns", "k", { slice: "x" as unknown as [number, number][] }), /slice/, "slice not a list"],
    [() => s.serve("ns", "k", { dtype: "float128" as "float32" }), /dtype/, "serve: unknown dtype"],
    [() => s.query.topk("ns", { key: "k", k: 0 }), /k must be at least 1/, "k 0"],
    [() => s.query.topk("ns", { key: "k", metric: "manhattan" as "l2" }), /metric/, "unknown metric"],
    [() => s.query.similarity("ns", "a", "b", { metric: "hamming" as "l2" }), /metric/, "similarity: unknown metric"],
    [() => s.query.vector("ns", { vector: [] }), /vector/, "empty vector"],
    [() => s.putCoresBatch("ns", []), /items/, "empty batch"],
  ];
  for (const [f, re, msg] of cases) await rejects(t, f(), ValidationError, re, msg);
  t.equal((await s.list("ns")).total, 0, "nothing was stored");
});

suite.storeOnly(
  "get never reads the payload (it works with the payload gone; serve does not)",
  "removes a payload through the LMDB backend underneath the store",
  async (t, { dir }) => {
    const d = dir();
    const s = await createStore({ path: d });
    const r = await s.put(
      "ns",
      "k",
      ints(4096, (i) => i % 9),
      { shape: [4096], metadata: { m: 1 } },
    );
    await s.close();
    const raw = new LmdbBackend(d);
    await raw.transact({}, (tx) => tx.removePayload("", r.fingerprint.sha256));
    await raw.close();
    const s2 = await createStore({ path: d });
    const g = await s2.get("ns", "k");
    t.deepEqual([g.version, g.metadata, g.fingerprint.sha256], [1, { m: 1 }, r.fingerprint.sha256], "get answers from the records alone");
    await rejects(t, s2.serve("ns", "k"), NotFoundError, /payload is missing/, "serve needs the payload");
    await s2.close();
  },
  ["lmdb"],
);

suite.storeOnly(
  "a directory whose name has a dot holds a store; a file in the way is a ValidationError",
  "createStore's path is a directory on this machine's filesystem",
  async (t, { dir }) => {
    const d = dir();
    const dotted = join(d, "store.v2");
    const data = ints(4096, (i) => i % 9);
    const s = await createStore({ path: dotted });
    const r = await s.put("ns", "k", data, { shape: [4096] });
    await s.close();
    t.ok(
      statSync(dotted).isDirectory() && existsSync(join(dotted, "data.mdb")) && existsSync(join(dotted, "lock.mdb")),
      "store.v2 is a directory holding data.mdb and lock.mdb (lmdb-js would take it for the data file)",
    );
    t.notOk(existsSync(`${dotted}-lock`), "no single-file lock beside it");
    const again = await createStore({ path: dotted });
    const back = await again.serve("ns", "k");
    t.deepEqual(
      [back.version, Buffer.from(back.data.buffer, back.data.byteOffset, back.data.byteLength).equals(Buffer.from(data.buffer))],
      [r.version, true],
      "reopened, the entry reads back bit-exact",
    );
    await again.close();

    // a store written under a plain name, then renamed to a dotted one, opens as it is
    const plain = join(d, "plain");
    const p = await createStore({ path: plain });
    await p.put("ns", "k", data, { shape: [4096], metadata: { m: 1 } });
    await p.close();
    renameSync(plain, join(d, "plain.old"));
    const moved = await createStore({ path: join(d, "plain.old") });
    t.deepEqual((await moved.get("ns", "k")).metadata, { m: 1 }, "an existing store moved to a dotted name opens and reads");
    await moved.close();

    const file = join(d, "file.bin");
    writeFileSync(file, "not a store");
    const e = await createStore({ path: file }).catch((x: unknown) => x);
    t.ok(e instanceof ValidationError, `a regular file at path is a ValidationError: ${(e as Error).message}`);
    t.equal(
      (e as ValidationError).message,
      `path ${file} is a file, not a directory: a store needs a directory (created if absent).`,
      "one sentence naming the path",
    );
    t.deepEqual([(e as ValidationError).code, (e as ValidationError).field], ["bad_request", "path"], "code bad_request, field path");
    t.equal(readFileSync(file, "utf8"), "not a store", "the file is left as it was");
    await rejects(
      t,
      createStore({ path: join(file, "sub") }),
      ValidationError,
      /^path .*file\.bin\/sub lies under a file, not a directory: a store needs a directory \(created if absent\)\.$/,
      "a path under a regular file",
    );
  },
  ["lmdb"],
);

suite.run();
