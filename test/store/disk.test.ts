// The on-disk payload layout of the LMDB backend (lib/store/lmdb.ts, docs/store.md "Storage
// layout"): page-exact bodies plus a packed stream of tails, reclaimed by compact; stores
// written with the older whole-payload layout still read; kill -9 during puts and
// compactions leaves every acknowledged put intact; concurrent writers from two processes
// share the stream without losing or mixing bytes.
import test from "tape";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { open } from "lmdb";
import { PAGE_HEADER, RELOCATE_BELOW, LmdbBackend } from "../../lib/store/lmdb.js";
import { createStore } from "../../lib/store/index.js";

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const bytesOf = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** Deterministic incompressible bytes (stored raw: passthrough). */
function noise(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    b[i] = x >>> 24;
  }
  return b;
}

/** Content of (key, version) in the child processes: sizes from 1 byte to 70 KB. */
const SIZES = [1, 300, 3000, 4072, 7000, 9000, 70_000];
function content(key: string, version: number): Buffer {
  const k = Number(key.replace(/\D/g, "")) || 0;
  return noise(SIZES[(version + k) % SIZES.length]!, version * 131 + k * 7 + 1);
}

// ---------------- child processes ----------------

if (process.env.SVC_DISK_CHILD === "crash") {
  // puts forever to ns/k0..k4 (never deleted) and scratch keys that are deleted and compacted
  // away, so compactions relocate the tails of live payloads; "ack KEY VERSION SHA" per put
  const store = await createStore({ path: process.env.SVC_DISK_DIR! });
  const latest = new Map<string, number>();
  for (let i = 0; ; i++) {
    const key = `k${i % 5}`;
    const v = (latest.get(key) ?? 0) + 1;
    const data = content(key, v);
    const r = await store.put("ns", key, data, { if_version: v - 1 });
    latest.set(key, r.version);
    process.stdout.write(`ack ${key} ${r.version} ${sha(data)}\n`);
    await store.put("scratch", `s${i}`, noise(2000 + (i % 7) * 1500, 1000 + i));
    if (i % 3 === 2) {
      for (let j = i - 2; j <= i; j++) await store.delete("scratch", `s${j}`);
      await store.compact({ now: Date.now() + 365 * 24 * 3600 * 1000 });
    }
  }
} else if (process.env.SVC_DISK_CHILD === "writer") {
  // puts N distinct keys of varied sizes; one JSON line per acknowledged put
  const store = await createStore({ path: process.env.SVC_DISK_DIR! });
  const tag = process.env.SVC_DISK_TAG!;
  for (let i = 0; i < 30; i++) {
    const data = noise(SIZES[i % SIZES.length]! + i, tag.charCodeAt(0) * 1000 + i);
    const r = await store.put("ns", `${tag}${i}`, data);
    process.stdout.write(JSON.stringify({ key: `${tag}${i}`, version: r.version, sha: sha(data) }) + "\n");
  }
  await store.close();
} else {
  const self = fileURLToPath(import.meta.url);
  const dirs: string[] = [];
  const tmp = () => {
    const d = mkdtempSync(join(tmpdir(), "svc-disk-"));
    dirs.push(d);
    return d;
  };
  const child = (mode: string, dir: string, extra: Record<string, string> = {}) =>
    spawn(process.execPath, ["--import", "tsx", self], {
      env: { ...process.env, SVC_DISK_CHILD: mode, SVC_DISK_DIR: dir, ...extra },
      stdio: ["ignore", "pipe", "pipe"],
    });

  test("payloads of every size round-trip; bodies fill whole overflow pages, tails pack the stream", async (t) => {
    const b = new LmdbBackend(tmp());
    const P = b.pageSize;
    const seg = b.segmentBytes;
    t.equal(seg, P - PAGE_HEADER, "a stream segment is one overflow page of bytes");
    const sizes = [1, 2, 100, 2000, seg - 1, seg, seg + 1, P - 1, P, P + 1, 7520, 2 * P - PAGE_HEADER, 2 * P, 65_536, 100_000, 1 << 20, (1 << 20) + 7];
    const payloads = sizes.map((n, i) => noise(n, i + 1));
    // one transaction per payload (as puts), then the same sizes again all in one transaction
    for (let i = 0; i < sizes.length; i++) await b.transact({}, (tx) => tx.putPayload("", `a${i}`, payloads[i]!));
    await b.transact({}, (tx) => payloads.forEach((p, i) => tx.putPayload("", `b${i}`, p)));
    let ok = 0;
    for (let i = 0; i < sizes.length; i++) for (const id of [`a${i}`, `b${i}`]) if (Buffer.compare((await b.getPayload("", id))!, payloads[i]!) === 0) ok++;
    t.equal(ok, 2 * sizes.length, "every payload reads back byte for byte");
    const bodyPages = sizes.reduce((s, n) => s + Math.floor((n + PAGE_HEADER) / P), 0);
    const tails = sizes.reduce((s, n) => s + (n - Math.max(0, Math.floor((n + PAGE_HEADER) / P) * P - PAGE_HEADER)), 0);
    const st = b.stats().dbs;
    t.equal(st.payload_bodies!.overflow_pages, 2 * bodyPages, "bodies occupy exactly floor((n + header) / page) pages each");
    t.equal(st.payload_stream!.entries, Math.ceil((2 * tails) / seg), "the tails fill consecutive segments");
    t.ok(st.payload_stream!.overflow_pages <= st.payload_stream!.entries, "each segment is at most one page");
    t.equal(st.payload_index!.entries, 2 * sizes.length, "one index entry per payload");
    t.equal(st.payloads!.entries, 0, "nothing is written in the old layout");
    await b.close();
  });

  test("7 KB payloads: payload pages within 1% of the payload bytes, index and B-tree pages included within 5%", async (t) => {
    const b = new LmdbBackend(tmp());
    let bytes = 0;
    let n = 0;
    for (let batch = 0; batch < 12; batch++) {
      await b.transact({}, (tx) => {
        for (let i = 0; i < 50; i++, n++) {
          const p = noise(6000 + ((n * 397) % 2000), n + 1);
          bytes += p.byteLength;
          tx.putPayload("", sha(p), p);
        }
      });
    }
    const st = b.stats();
    const data = st.dbs.payload_bodies!.overflow_pages + st.dbs.payload_stream!.overflow_pages;
    const all = ["payload_index", "payload_bodies", "payload_stream"].reduce((s, k) => s + st.dbs[k]!.pages, 0);
    t.ok(data * st.page_size <= bytes * 1.01, `overflow pages ${data} for ${bytes} bytes: ${((data * st.page_size) / bytes).toFixed(4)}x`);
    t.ok(all * st.page_size <= bytes * 1.05, `all pages of the payload databases ${all}: ${((all * st.page_size) / bytes).toFixed(4)}x`);
    await b.close();
  });

  test("compact drops dead stream segments, relocates sparse ones, and every kept payload stays intact", async (t) => {
    const dir = tmp();
    const s = await createStore({ path: dir });
    const kept = new Map<string, string>();
    for (let i = 0; i < 300; i++) {
      const data = noise(100 + ((i * 1237) % 9000), i + 7);
      await s.put("ns", `k${i}`, data);
      if (i % 4 === 0) kept.set(`k${i}`, sha(data));
      else await s.delete("ns", `k${i}`);
    }
    await s.close();
    const before = statSync(join(dir, "data.mdb")).size;
    let b = new LmdbBackend(dir);
    const segBefore = b.stats().dbs.payload_stream!.entries;
    await b.close();

    const s2 = await createStore({ path: dir });
    const c = await s2.compact({ now: Date.now() + 31 * 24 * 3600 * 1000 });
    t.equal(c.payloads_purged, 225, "the deleted keys' payloads are purged");
    let intact = 0;
    for (const [key, want] of kept) if (sha(bytesOf((await s2.serve("ns", key)).data)) === want) intact++;
    t.equal(intact, kept.size, "every kept payload reads back with its sha256 after the relocation");
    await s2.close();

    b = new LmdbBackend(dir);
    const seg = b.segmentBytes;
    // the live tail bytes per segment, from the index: every segment but the last is at least RELOCATE_BELOW full
    const live = new Map<number, number>();
    let tailBytes = 0;
    const env = open({ path: dir, maxDbs: 8, readOnly: true });
    for (const { value } of env.openDB<Buffer, Buffer>({ name: "payload_index", encoding: "binary", keyEncoding: "binary" }).getRange({})) {
      let sg = value.readUIntBE(13, 6);
      let off = value.readUInt16BE(19);
      let left = value.readUInt32BE(21);
      tailBytes += left;
      while (left > 0) {
        const n = Math.min(left, seg - off);
        live.set(sg, (live.get(sg) ?? 0) + n);
        left -= n;
        sg++;
        off = 0;
      }
    }
    const segs = [...env.openDB<Buffer, Buffer>({ name: "payload_stream", encoding: "binary", keyEncoding: "binary" }).getKeys({})].map((k) =>
      k.readUIntBE(0, 6),
    );
    await env.close();
    const sparse = segs.slice(0, -1).filter((x) => (live.get(x) ?? 0) < seg * RELOCATE_BELOW);
    t.deepEqual(sparse, [], "no segment but the last is below the relocation threshold");
    t.ok(
      segs.length < segBefore && segs.length <= Math.ceil(tailBytes / (seg * RELOCATE_BELOW)) + 1,
      `stream segments ${segBefore} -> ${segs.length} for ${tailBytes} live tail bytes`,
    );
    await b.close();

    // the freed pages are reused: putting the same amount again hardly grows the file (the
    // compaction itself may: pages it frees are reusable only after it commits)
    const compacted = statSync(join(dir, "data.mdb")).size;
    t.ok(compacted <= before * 1.25, `data file ${before} -> ${compacted} bytes through the compaction`);
    const s3 = await createStore({ path: dir });
    for (let i = 0; i < 300; i++) if (i % 4 !== 0) await s3.put("ns", `k${i}`, noise(100 + ((i * 1237) % 9000), i + 7));
    for (let i = 0; i < 300; i += 4) if (sha(bytesOf((await s3.serve("ns", `k${i}`)).data)) !== kept.get(`k${i}`)) t.fail(`k${i} changed`);
    await s3.close();
    const after = statSync(join(dir, "data.mdb")).size;
    t.ok(after <= compacted * 1.03, `data file ${compacted} -> ${after} bytes after refilling the purged space`);
  });

  test("a store written with the whole-payload layout (format 1) reads, dedups and compacts", async (t) => {
    const dir = tmp();
    const s = await createStore({ path: dir });
    const a = noise(10_000, 1);
    const f = Float32Array.from({ length: 64 * 64 }, (_, i) => Math.sin(i / 50) + Math.cos(i / 7));
    const ra = await s.put("ns", "a", a, { metadata: { m: 1 } });
    const rf = await s.put("ns", "f", f, { shape: [64, 64], tolerance: 1e-5 });
    const fServed = bytesOf((await s.serve("ns", "f")).data);
    await s.close();
    // rewrite the payloads as format 1 had them: whole, in `payloads`, keyed by the hex hash
    const b = new LmdbBackend(dir);
    const old = new Map(await Promise.all([ra.fingerprint.sha256, rf.fingerprint.sha256].map(async (id) => [id, (await b.getPayload("", id))!] as const)));
    await b.close();
    const env = open({ path: dir, maxDbs: 8 });
    const legacy = env.openDB<Buffer, string>({ name: "payloads", encoding: "binary" });
    await env.transaction(() => {
      for (const name of ["payload_index", "payload_bodies", "payload_stream"]) env.openDB({ name, encoding: "binary", keyEncoding: "binary" }).clearSync();
      for (const [id, p] of old) legacy.putSync(id, p);
    });
    await env.close();

    const s2 = await createStore({ path: dir });
    t.deepEqual((await s2.get("ns", "a")).metadata, { m: 1 }, "get reads the records");
    t.equal(Buffer.compare(bytesOf((await s2.serve("ns", "a")).data), a), 0, "a raw payload of the old layout serves");
    t.equal(Buffer.compare(bytesOf((await s2.serve("ns", "f")).data), fServed), 0, "a TT payload of the old layout serves");
    await s2.put("ns", "a2", a); // same content: deduplicated against the old payload
    const n = noise(5000, 2);
    await s2.put("ns", "new", n);
    await s2.close();
    let b2 = new LmdbBackend(dir);
    t.deepEqual(
      [b2.stats().dbs.payloads!.entries, b2.stats().dbs.payload_index!.entries],
      [2, 1],
      "the duplicate is not stored again; the new payload goes to the new layout",
    );
    await b2.close();

    const s3 = await createStore({ path: dir });
    await s3.delete("ns", "a");
    await s3.delete("ns", "a2");
    const c = await s3.compact({ now: Date.now() + 31 * 24 * 3600 * 1000 });
    t.equal(c.payloads_purged, 1, "compact purges an unreferenced old-layout payload");
    t.equal(Buffer.compare(bytesOf((await s3.serve("ns", "f")).data), fServed), 0, "the other old payload still serves");
    t.equal(Buffer.compare(bytesOf((await s3.serve("ns", "new")).data), n), 0, "the new payload serves");
    await s3.close();
    b2 = new LmdbBackend(dir);
    t.deepEqual([b2.stats().dbs.payloads!.entries, b2.stats().dbs.payload_index!.entries], [1, 1], "one payload left in each layout");
    await b2.close();
  });

  test("records: compact stored form (32-byte hash, TT layout without modes and ranks, no ratio); the older full form reads the same", async (t) => {
    const dir = tmp();
    const s = await createStore({ path: dir });
    const f = Float32Array.from({ length: 64 * 64 }, (_, i) => Math.sin(i / 50) + Math.cos(i / 7));
    await s.put("ns", "f", f, { shape: [64, 64], tolerance: 1e-5, metadata: { kind: "tt", n: 1 } });
    await s.put(
      "ns",
      "f",
      f.map((x) => x * 2),
      { shape: [64, 64], tolerance: 1e-5, metadata: { kind: "tt", n: 2 } },
    );
    await s.put("ns", "r", noise(5000, 9), { metadata: { kind: "raw" } });
    await s.put(
      "ns",
      "i",
      Int32Array.from({ length: 4096 }, (_, i) => i >> 4),
      { shape: [4096], metadata: { kind: "lossless" } },
    );
    await s.delete("ns", "r");
    await s.put("ns", "r", noise(5000, 10), { metadata: { kind: "raw", again: true } });
    const observe = async (st: typeof s) => ({
      gets: await Promise.all(["f", "r", "i"].map((k) => st.get("ns", k))),
      f1: await st.get("ns", "f", { version: 1 }),
      list: await st.list("ns"),
      search: await st.search("ns", { kind: { $in: ["tt", "raw"] } }),
      topk: await st.query.topk("ns", { key: "f", version: 1, k: 3, include_self: true }),
      served: await Promise.all(["f", "r", "i"].map(async (k) => sha(bytesOf((await st.serve("ns", k)).data)))),
    });
    const want = await observe(s);
    await s.close();

    // the stored form
    const env = open({ path: dir, maxDbs: 8 });
    const recs = env.openDB<Record<string, any>, (string | number)[]>({ name: "records", sharedStructuresKey: Symbol.for("svc.structures") });
    const head = recs.get(["h", "local", "ns", "f"])!;
    const ver = recs.get(["v", "local", "ns", "f", 2])!;
    t.ok(head.fingerprint.sha256 instanceof Uint8Array && head.fingerprint.sha256.length === 32, "the hash is stored as 32 bytes");
    t.deepEqual(Object.keys(ver.layout).sort(), ["codec", "core_dtype"], "a TT layout is stored without modes and ranks");
    t.notOk("compression_ratio" in ver, "a version record is stored without compression_ratio");
    // rewrite every record in the full form that earlier versions wrote
    const { unpackRecord } = await import("../../lib/store/records.js");
    await env.transaction(() => {
      for (const { key, value } of recs.getRange({})) {
        if (key[0] !== "h" && key[0] !== "v") continue;
        const full = unpackRecord(value)!;
        recs.putSync(key, { ...full, fingerprint: { ...full.fingerprint }, layout: { ...full.layout } });
      }
    });
    const head2 = recs.get(["h", "local", "ns", "f"])!;
    t.equal(typeof head2.fingerprint.sha256, "string", "the rewritten records hold hex hashes");
    await env.close();

    const s2 = await createStore({ path: dir });
    t.deepEqual(await observe(s2), want, "get, versions, list, search, top-K and serve answer the same from full-form records");
    // and writes over full-form records (a new version, a delete, compact) work
    const p3 = await s2.put("ns", "f", f, { shape: [64, 64], tolerance: 1e-5, if_version: 2 });
    t.equal(p3.version, 3, "a put continues the version sequence");
    await s2.delete("ns", "i");
    const c = await s2.compact({ now: Date.now() + 31 * 24 * 3600 * 1000 });
    t.deepEqual([c.versions_purged, c.keys_purged], [2, 1], "compact purges r's first life and i");
    t.equal((await s2.get("ns", "f", { version: 1 })).compression_ratio, want.f1.compression_ratio, "compression_ratio is bytes_in / bytes_stored either way");
    await s2.close();
  });

  test("an index entry of an unknown format is a clear error, not a wrong read", async (t) => {
    const dir = tmp();
    const b = new LmdbBackend(dir);
    await b.transact({}, (tx) => tx.putPayload("", "x", noise(100, 3)));
    await b.close();
    const env = open({ path: dir, maxDbs: 8 });
    const idx = env.openDB<Buffer, Buffer>({ name: "payload_index", encoding: "binary", keyEncoding: "binary" });
    await idx.put(Buffer.concat([Buffer.from([1]), Buffer.from("x")]), Buffer.from([9, 0, 0]));
    await env.close();
    const b2 = new LmdbBackend(dir);
    try {
      await b2.getPayload("", "x");
      t.fail("an unknown index entry must not read");
    } catch (e) {
      t.match((e as Error).message, /Unknown payload index entry \(format 9.*newer version/, "names the format");
    }
    await b2.close();
  });

  test("SIGKILL during puts and compactions that relocate tails: every acknowledged put intact, no repair step", async (t) => {
    const dir = tmp();
    const c = child("crash", dir);
    const acks: { key: string; version: number; sha: string }[] = [];
    let buf = "";
    let err = "";
    c.stderr.on("data", (d) => (err += d));
    await new Promise<void>((resolve) => {
      c.stdout.on("data", (d: Buffer) => {
        buf += d;
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const [, key, v, h] = buf.slice(0, nl).split(" ") as [string, string, string, string];
          buf = buf.slice(nl + 1);
          acks.push({ key, version: Number(v), sha: h });
          if (acks.length === 90) c.kill("SIGKILL");
        }
      });
      c.on("close", () => resolve());
    });
    t.equal(c.signalCode, "SIGKILL", `the writer was killed, not finished${err ? `: ${err}` : ""}`);
    const check = async (when: string) => {
      const s = await createStore({ path: dir });
      let intact = 0;
      for (const a of acks) if (sha(bytesOf((await s.serve("ns", a.key, { version: a.version })).data)) === a.sha) intact++;
      t.equal(intact, acks.length, `${when}: all ${acks.length} acknowledged versions read back with their sha256`);
      let whole = 0;
      let total = 0;
      for (const item of (await s.list("ns")).keys) {
        for (const v of (await s.get("ns", item.key)).versions) {
          total++;
          if (Buffer.compare(bytesOf((await s.serve("ns", item.key, { version: v })).data), content(item.key, v)) === 0) whole++;
        }
      }
      t.equal(whole, total, `${when}: all ${total} versions present are whole`);
      return s;
    };
    const s = await check("after the kill");
    const r = await s.compact({ now: Date.now() + 365 * 24 * 3600 * 1000 });
    t.ok(r.payloads_purged >= 0, "the reopened store compacts");
    await s.close();
    await (await check("after a compaction of the reopened store")).close();
  });

  test("two processes writing payloads of varied sizes at once: every payload intact", async (t) => {
    const dir = tmp();
    const run = (tag: string) =>
      new Promise<string>((resolve, reject) => {
        const c = child("writer", dir, { SVC_DISK_TAG: tag });
        let out = "";
        let err = "";
        c.stdout.on("data", (d) => (out += d));
        c.stderr.on("data", (d) => (err += d));
        c.on("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`writer ${tag} exited ${code}: ${err}`))));
      });
    const outs = await Promise.all([run("a"), run("b")]);
    const acks = outs.flatMap((o) =>
      o
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { key: string; version: number; sha: string }),
    );
    t.equal(acks.length, 60, "every put acknowledged");
    const s = await createStore({ path: dir });
    let ok = 0;
    for (const a of acks) if (sha(bytesOf((await s.serve("ns", a.key)).data)) === a.sha) ok++;
    t.equal(ok, 60, "each key holds the bytes its writer put");
    await s.close();
  });

  test.onFinish(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
}
