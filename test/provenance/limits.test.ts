// Size limits: request bodies (413 with the error body), the budget of bodies in flight (429
// with Retry-After), ZIP bombs against the offline bundle verifier (refused quickly, peak RSS
// bounded), oversized bundle files and receipt files, and the largest receipt the appliance
// can issue fitting every limit.
import test from "tape";
import { request } from "node:http";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import zlib from "node:zlib";
import { BundleError, MAX_MEMBER_BYTES, buildBundleFiles, readJsonDir, readZip, verifyBundle, writeZip } from "../../server/provenance/bundle.js";
import { buildReceipt, MAX_RECEIPT_TEXT_BYTES, verifyReceipt } from "../../server/provenance/receipt.js";
import { cleanup as cleanupFixtures, dir as fixtureDir, run, signer } from "./cli-fixtures.js";
import { loadConfig } from "../../server/provenance/config.js";
import { post, sampleArtifact, startApp, tempDir } from "./helpers.js";

const MIB = 1024 * 1024;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A ZIP written byte by byte, so the declared sizes can be anything. */
function rawZip(entries: Array<{ name: string; data: Buffer; declared: number; method?: number }>): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = Buffer.from(e.name);
    const method = e.method ?? 8;
    const lh = Buffer.alloc(30);
    lh.writeUInt32LE(0x04034b50, 0);
    lh.writeUInt16LE(20, 4);
    lh.writeUInt16LE(method, 8);
    lh.writeUInt32LE(e.data.length, 18);
    lh.writeUInt32LE(e.declared, 22);
    lh.writeUInt16LE(name.length, 26);
    const ch = Buffer.alloc(46);
    ch.writeUInt32LE(0x02014b50, 0);
    ch.writeUInt16LE((3 << 8) | 20, 4);
    ch.writeUInt16LE(20, 6);
    ch.writeUInt16LE(method, 10);
    ch.writeUInt32LE(e.data.length, 20);
    ch.writeUInt32LE(e.declared, 24);
    ch.writeUInt16LE(name.length, 28);
    ch.writeUInt32LE((0o100644 << 16) >>> 0, 38);
    ch.writeUInt32LE(offset, 42);
    locals.push(lh, name, e.data);
    centrals.push(ch, name);
    offset += lh.length + name.length + e.data.length;
  }
  const cd = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}

/**
 * Raw deflate of `mib` MiB of zeros without compressing them: one full-flushed MiB (a
 * self-contained run of blocks, about 1 KiB) repeated, then an empty final block.
 */
function zeros(mib: number): Buffer {
  const seg = zlib.deflateRawSync(Buffer.alloc(MIB), { finishFlush: zlib.constants.Z_FULL_FLUSH });
  return Buffer.concat([...Array.from({ length: mib }, () => seg), zlib.deflateRawSync(Buffer.alloc(0))]);
}

const peakKiB = (stderr: string): number => Number(/MAXRSS_KIB (\d+)/.exec(stderr)?.[1] ?? NaN);

test("the deflate stream of the bombs inflates to what it says", (t) => {
  t.equal(zlib.inflateRawSync(zeros(3)).length, 3 * MIB, "3 MiB of zeros from 3 KiB");
  t.end();
});

test("ZIP bombs: the offline verifier refuses them quickly with its memory bounded", async (t) => {
  const bomb = zeros(1024); // 1 GiB of zeros in about 1 MiB
  t.ok(bomb.length < 1.1 * MIB, `the bomb is ${bomb.length} bytes`);
  const honest = rawZip([{ name: "receipt.json", data: bomb, declared: 1024 * MIB }]);
  const lying = rawZip([{ name: "receipt.json", data: bomb, declared: 1000 }]);
  const many = rawZip(Array.from({ length: 12 }, (_, i) => ({ name: `f${i}.json`, data: zeros(3), declared: 3 * MIB })));
  const tooMany = rawZip(Array.from({ length: 17 }, (_, i) => ({ name: `f${i}.json`, data: zeros(0), declared: 0 })));
  for (const [name, buf] of [
    ["honest", honest],
    ["lying", lying],
    ["many", many],
    ["too-many", tooMany],
  ] as const) {
    await writeFile(join(fixtureDir, `bomb-${name}.zip`), buf);
  }
  const preload = [new URL("./no-network.mjs", import.meta.url).pathname, new URL("./report-rss.mjs", import.meta.url).pathname];
  const pub = join(fixtureDir, "pub.json");
  const normal = await run("svc-verify-bundle", ["--bundle", join(fixtureDir, "bundle.zip"), "--public-key", pub], preload);
  t.equal(normal.code, 0, "a good bundle verifies (the memory baseline)");
  const base = peakKiB(normal.stderr);
  t.ok(base > 0, `baseline peak RSS ${Math.round(base / 1024)} MiB`);
  const cases: Array<[string, RegExp]> = [
    ["honest", /"receipt\.json" is larger than the 4 MiB limit for one file of a bundle/],
    ["lying", /"receipt\.json" inflates to more than its declared size; inflating stopped there/],
    ["many", /add up to more than the 8 MiB limit for a bundle/],
    ["too-many", /more than 16 entries/],
  ];
  for (const [name, re] of cases) {
    const started = Date.now();
    const r = await run("svc-verify-bundle", ["--bundle", join(fixtureDir, `bomb-${name}.zip`), "--public-key", pub], preload);
    const seconds = (Date.now() - started) / 1000;
    t.equal(r.code, 1, `${name}: refused, exit 1 (${r.stderr.split("\n")[0]})`);
    t.match(r.stdout, re, `${name}: the refusal names the limit`);
    const peak = peakKiB(r.stderr);
    // inflating the 1 GiB took 2 GB of RSS; a refusal costs about what a verification costs
    t.ok(peak < base + 128 * 1024, `${name}: peak RSS ${Math.round(peak / 1024)} MiB, within 128 MiB of a normal verification`);
    t.ok(seconds < 60, `${name}: finished in ${seconds.toFixed(1)} s`);
  }
  const started = Date.now();
  try {
    await readZip(lying);
    t.fail("lying header: accepted");
  } catch (e) {
    t.ok(e instanceof BundleError && e.kind === "refused", "in process: refused");
    t.ok(Date.now() - started < 10_000, "in process: at once, without inflating the gigabyte");
  }
  t.end();
});

test("a json-dir bundle file over the member limit, and a receipt file over its limit, are refused", async (t) => {
  const d = join(fixtureDir, "big-dir");
  await mkdir(d, { recursive: true });
  await writeFile(join(d, "receipt.json"), Buffer.alloc(MAX_MEMBER_BYTES + 1, 0x20));
  try {
    await readJsonDir(d);
    t.fail("accepted");
  } catch (e) {
    t.ok(e instanceof BundleError && e.kind === "refused", "json-dir: refused");
    t.match((e as Error).message, /larger than the 4 MiB limit for one file of a bundle/);
  }
  const big = join(fixtureDir, "big-receipt.json");
  await writeFile(big, Buffer.alloc(MAX_RECEIPT_TEXT_BYTES + 1, 0x20));
  const r = await run("svc-verify-receipt", ["--receipt", big, "--public-key", join(fixtureDir, "pub.json")]);
  t.equal(r.code, 2, "receipt file over 4 MiB: exit 2");
  t.match(r.stderr, /larger than the 4 MiB limit for a receipt/);
  t.end();
});

test("the largest receipt the appliance issues fits every limit, in a bundle and at /verify", async (t) => {
  // claims just under 64 KiB, as deep as allowed, holding zeros: the most 2-space indentation can add
  let inner: unknown = [];
  for (let i = 0; i < 30; i++) inner = [inner];
  const leaf = (v: unknown, n: number): unknown => (Array.isArray(v) && v.length === 1 && Array.isArray(v[0]) ? [leaf(v[0], n)] : Array(n).fill(0));
  let n = 30_000;
  let claims: Record<string, unknown> = { a: leaf(inner, n) };
  while (JSON.stringify(claims).length > 64 * 1024) claims = { a: leaf(inner, (n -= 100)) };
  const receipt = buildReceipt({ artifact: { ...sampleArtifact, name: "\u0001".repeat(1024) }, claims }, { serial: 1, previous: null }, signer, new Date());
  const files = buildBundleFiles({
    receipt,
    verification: verifyReceipt(receipt, {
      backend: await (await import("../../server/provenance/signer.js")).createBackend("liboqs"),
      keys: [signer],
      trustedFingerprints: [signer.fingerprint],
    }),
    signer,
    exportedAt: new Date(),
    applianceVersion: "0.1.0",
  });
  const size = files.find(([f]) => f === "receipt.json")![1].length;
  t.ok(size > 1.5 * MIB && size < MAX_MEMBER_BYTES, `receipt.json is ${(size / MIB).toFixed(2)} MiB, under the 4 MiB limit`);
  const read = await readZip(await writeZip(files));
  const { createBackend } = await import("../../server/provenance/signer.js");
  const v = verifyBundle(read, { backend: await createBackend("liboqs"), pinnedKeys: [signer], integrityOnly: false });
  t.equal(v.verdict, "valid", "its bundle verifies");

  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  const issued = await post(`${a.url}/v1/provenance/exact`, { artifact: { ...sampleArtifact, name: "\u0001".repeat(1024) }, claims }, a.adminKey);
  t.equal(issued.status, 201, "the appliance issues it");
  const pretty = `{"receipt":${JSON.stringify(issued.json, null, 2)}}`;
  t.ok(pretty.length > 1.5 * MIB && pretty.length < MAX_RECEIPT_TEXT_BYTES, `pretty-printed, the /verify body is ${(pretty.length / MIB).toFixed(2)} MiB`);
  const ver = await post(`${a.url}/v1/provenance/verify`, pretty);
  t.equal(ver.status, 200, "and /verify takes it");
  await a.close();
  await cleanup();
});

test("request bodies over their endpoint's limit get 413 with the JSON error body, before being read", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  const big = `{"receipt":{},"artifact_b64":"${"A".repeat(5 * MIB)}"}`;
  const plain = await post(`${a.url}/v1/provenance/verify`, big);
  t.equal(plain.status, 413, "/verify, 5 MiB with Content-Length: 413");
  t.equal(plain.json.code, "payload_too_large");
  t.match(plain.json.request_id, UUID);
  t.equal(plain.json.detail, "The request body is larger than this endpoint's limit of 4 MiB.");
  const chunked = await fetch(`${a.url}/v1/provenance/verify`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: new ReadableStream({
      start(c) {
        for (let i = 0; i < big.length; i += MIB) c.enqueue(new TextEncoder().encode(big.slice(i, i + MIB)));
        c.close();
      },
    }),
    duplex: "half",
  } as RequestInit);
  const cj = (await chunked.json()) as any;
  t.equal(chunked.status, 413, "/verify, 5 MiB chunked: 413");
  t.equal(cj.code, "payload_too_large");
  t.match(cj.request_id, UUID);
  const bundle = await post(`${a.url}/v1/provenance/evidence-bundle`, big, a.adminKey);
  t.equal(bundle.status, 413, "/evidence-bundle, 5 MiB: 413");
  const dense = `{"receipt":{"claims":{"a":[${Array(1_900_000).fill(0).join(",")}]}}}`;
  t.ok(dense.length < 4 * MIB, "two million tiny values fit in 4 MiB");
  const started = Date.now();
  const dv = await post(`${a.url}/v1/provenance/verify`, dense);
  t.equal(dv.status, 400, "a body of two million values: 400, refused after counting 100,000 of them");
  t.equal(dv.json.detail, "The request body holds more than 100,000 JSON values; a receipt holds far fewer.");
  t.ok(Date.now() - started < 30_000, `answered in ${Date.now() - started} ms`);
  const exact = await post(`${a.url}/v1/provenance/exact`, `{"artifact_b64":"${"A".repeat(33 * MIB)}"}`, a.adminKey);
  t.equal(exact.status, 413, "/exact, 33 MiB: 413");
  t.equal(exact.json.detail, "The request body is larger than this endpoint's limit of 32 MiB.");
  await a.close();
  await cleanup();
});

test("compressed bodies: inflated within the endpoint's limit (413 past it), an unknown Content-Encoding is a 415", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir, { maxReceiptBodyBytes: 256 * 1024 });
  const send = async (encoding: string, body: Buffer): Promise<{ status: number; json: any }> => {
    const r = await fetch(`${a.url}/v1/provenance/verify`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-encoding": encoding },
      body,
    });
    return { status: r.status, json: await r.json().catch(() => null) };
  };
  const small = '{"receipt":{}}';
  // 1 MiB of spaces inside the JSON: a few KiB on the wire, four times the limit inflated
  const padded = Buffer.from(`{"receipt":{}${" ".repeat(MIB)}}`);
  for (const [encoding, packed] of [
    ["gzip", zlib.gzipSync(padded)],
    ["deflate", zlib.deflateSync(padded)],
    ["br", zlib.brotliCompressSync(padded)],
  ] as const) {
    t.ok(packed.length < 64 * 1024, `${encoding}: ${packed.length} bytes on the wire`);
    const r = await send(encoding, packed);
    t.equal(r.status, 413, `${encoding}, inflating past the limit: 413`);
    t.equal(r.json?.detail, "The request body is larger than this endpoint's limit of 256 KiB.", `${encoding}: ${r.json?.detail}`);
    const fits = await send(
      encoding,
      encoding === "gzip" ? zlib.gzipSync(small) : encoding === "deflate" ? zlib.deflateSync(small) : zlib.brotliCompressSync(small),
    );
    t.equal(fits.status, 422, `${encoding}, a small body: read (422: not a receipt)`);
  }
  const unknown = await send("compress", Buffer.from(small));
  t.equal(unknown.status, 415, "Content-Encoding: compress: 415");
  t.equal(unknown.json?.detail, "The request body's encoding is not supported.");
  const broken = await send("gzip", Buffer.from(small));
  t.equal(broken.status, 400, "gzip that does not inflate: 400");
  t.equal(broken.json?.detail, "The request body could not be decompressed (Content-Encoding: gzip).");
  t.equal((await post(`${a.url}/v1/provenance/verify`, { receipt: {} })).status, 422, "the appliance still reads bodies");
  await a.close();
  await cleanup();
});

/** Starts a POST with Content-Length `length` and sends only `sent` bytes of it; returns its end. */
function holdOpen(url: string, length: number, sent: number): { done: Promise<number>; finish: () => void } {
  const u = new URL(url);
  let finish = (): void => undefined;
  const done = new Promise<number>((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: "POST",
        agent: false,
        headers: { "content-type": "application/json", "content-length": length },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("error", reject);
    const body = Buffer.alloc(length, 0x20);
    body[0] = 0x7b;
    body[length - 1] = 0x7d;
    req.write(body.subarray(0, sent));
    finish = () => req.end(body.subarray(sent));
  });
  return { done, finish };
}

test("bodies in flight have a budget: past it 429 with Retry-After and the error body, freed when a request ends", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir, { maxReceiptBodyBytes: 80_000, bodyBudgetBytes: 100_000 });
  const held = holdOpen(`${a.url}/v1/provenance/verify`, 80_000, 1000);
  await new Promise((r) => setTimeout(r, 300)); // the server has taken the request's headers
  const body = JSON.stringify({ receipt: { pad: "x".repeat(30_000) } });
  let over = await post(`${a.url}/v1/provenance/verify`, body);
  for (let i = 0; i < 20 && over.status !== 429; i++) {
    await new Promise((r) => setTimeout(r, 200));
    over = await post(`${a.url}/v1/provenance/verify`, body);
  }
  t.equal(over.status, 429, "a second body that would pass the budget: 429");
  t.equal(over.headers.get("retry-after"), "1", "with Retry-After");
  t.equal(over.json.code, "rate_limited");
  t.match(over.json.request_id, UUID);
  t.match(over.json.detail, /already reading its limit of 97\.65625 KiB|already reading its limit of 100000 bytes/, over.json.detail);
  const express = await fetch(`${a.url}/v1/provenance/verify?via=express`, { method: "POST", headers: { "content-type": "application/json" }, body });
  t.equal(express.status, 429, "through express too");
  // the held body is an unauthenticated caller's: the rest of the budget is kept for the admin key
  const open = await post(`${a.url}/v1/provenance/verify`, JSON.stringify({ receipt: {} }));
  t.equal(open.status, 429, "another caller without the admin key: 429, their share is held");
  t.match(open.json.detail, /from callers without the admin key/, open.json.detail);
  const small = await post(`${a.url}/v1/provenance/verify`, JSON.stringify({ receipt: {} }), a.adminKey);
  t.equal(small.status, 422, "a body of the admin key's that fits the rest of the budget is served");
  held.finish();
  t.equal(await held.done, 400, "the held request ends (400: an empty object has no receipt)");
  const after = await post(`${a.url}/v1/provenance/verify`, body);
  t.equal(after.status, 422, "after it ended, its share is free again");
  for (let i = 0; i < 30; i++) await post(`${a.url}/v1/provenance/verify`, body);
  t.equal((await post(`${a.url}/v1/provenance/verify`, body)).status, 422, "30 requests later nothing has leaked");
  await a.close();
  await cleanup();
});

test("the limits are configurable; a bad value or a budget below a body limit stops the start", (t) => {
  const base = { SVC_PROVENANCE_CONFIG: "/nonexistent/svc-provenance/service.env", SVC_PROVENANCE_HOME: "/nonexistent/home" };
  const d = loadConfig(base);
  t.deepEqual([d.maxBodyBytes, d.maxReceiptBodyBytes, d.bodyBudgetBytes], [32 * MIB, 4 * MIB, 64 * MIB], "defaults: 32 MiB, 4 MiB, 64 MiB");
  const c = loadConfig({
    ...base,
    SVC_PROVENANCE_MAX_BODY_BYTES: "1048576",
    SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES: "524288",
    SVC_PROVENANCE_BODY_BUDGET_BYTES: "2097152",
  });
  t.deepEqual([c.maxBodyBytes, c.maxReceiptBodyBytes, c.bodyBudgetBytes], [MIB, MIB / 2, 2 * MIB]);
  t.deepEqual([d.bodyMinBytesPerS, d.bodyGraceS], [16384, 10], "the body's pace by default: 16 KiB/s after 10 s");
  const r = loadConfig({ ...base, SVC_PROVENANCE_BODY_MIN_RATE: "1024", SVC_PROVENANCE_BODY_GRACE_S: "2" });
  t.deepEqual([r.bodyMinBytesPerS, r.bodyGraceS], [1024, 2], "and as configured");
  for (const [name, value, re] of [
    ["SVC_PROVENANCE_MAX_BODY_BYTES", "1e6", /SVC_PROVENANCE_MAX_BODY_BYTES must be a whole number of bytes/],
    ["SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES", "100", /SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES must be between 65536/],
    ["SVC_PROVENANCE_BODY_BUDGET_BYTES", "4194304", /SVC_PROVENANCE_BODY_BUDGET_BYTES must be at least/],
    ["SVC_PROVENANCE_BODY_MIN_RATE", "0", /SVC_PROVENANCE_BODY_MIN_RATE must be between 1 and 1073741824 bytes per second/],
    ["SVC_PROVENANCE_BODY_MIN_RATE", "16k", /SVC_PROVENANCE_BODY_MIN_RATE must be a whole number of bytes per second/],
    ["SVC_PROVENANCE_BODY_GRACE_S", "3601", /SVC_PROVENANCE_BODY_GRACE_S must be between 1 and 3600 seconds/],
    ["SVC_PROVENANCE_BODY_GRACE_S", "-1", /SVC_PROVENANCE_BODY_GRACE_S must be a whole number of seconds/],
  ] as const) {
    t.throws(() => loadConfig({ ...base, [name]: value }), re, `${name}=${value}: refused`);
  }
  t.end();
});

test("cleanup", async (t) => {
  await cleanupFixtures();
  t.end();
});
