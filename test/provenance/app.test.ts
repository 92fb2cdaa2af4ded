// The appliance's HTTP surface: every endpoint, auth, bad input, the chain through
// HTTP (order, concurrency, restart), rotation, metrics, and no secret in any output.
import test from "tape";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { readZip, verifyBundle } from "../../server/provenance/bundle.js";
import { rotateKey } from "../../server/provenance/keys.js";
import { receiptHash } from "../../server/provenance/receipt.js";
import { createBackend } from "../../server/provenance/signer.js";
import { get, post, sampleArtifact, startApp, tempDir } from "./helpers.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

test("health and public-key need no auth and name the backend and key", async (t) => {
  const { dir, cleanup } = await tempDir();
  for (const backend of ["liboqs", "noble"] as const) {
    const a = await startApp(join(dir, backend), { backend });
    const h = await get(`${a.url}/health`);
    t.equal(h.status, 200, `${backend}: health 200`);
    t.equal(h.json.status, "ok");
    t.equal(h.json.receipt_schema, "svc.provenance.receipt.v1");
    t.equal(h.json.signing_algorithm, "ML-DSA-65");
    t.equal(h.json.backend.name, backend, `${backend}: backend named`);
    t.equal(h.json.backend.status, "ok");
    t.match(h.json.backend.version, /^\d+\.\d+\.\d+/);
    const pk = await get(`${a.url}/v1/provenance/public-key`);
    t.equal(pk.status, 200);
    t.equal(pk.json.algorithm, "ML-DSA-65");
    t.equal(Buffer.from(pk.json.public_key, "base64").length, 1952, "raw 1952-byte key");
    t.equal(pk.json.fingerprint, a.boot.keyring.active.fingerprint);
    t.deepEqual(pk.json.retired, []);
    await a.close();
  }
  await cleanup();
});

test("protected endpoints answer 401 with the error body without the admin key", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  for (const token of [undefined, "wrong", a.adminKey + "x", a.adminKey.slice(0, -1)]) {
    const r1 = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, token);
    t.equal(r1.status, 401, `exact with ${token === undefined ? "no key" : "a wrong key"}: 401`);
    t.equal(r1.json.code, "unauthorized");
    t.match(r1.json.request_id, UUID);
    t.equal(typeof r1.json.detail, "string");
    const r2 = await post(`${a.url}/v1/provenance/evidence-bundle`, { receipt: {} }, token);
    t.equal(r2.status, 401, "evidence-bundle: 401");
    const r3 = await get(`${a.url}/metrics`, token);
    t.equal(r3.status, 401, "metrics: 401");
  }
  const basic = await fetch(`${a.url}/v1/provenance/exact`, {
    method: "POST",
    headers: { authorization: `Basic ${a.adminKey}`, "content-type": "application/json" },
    body: "{}",
  });
  t.equal(basic.status, 401, "a non-Bearer scheme is refused");
  await a.close();
  await cleanup();
});

test("exact issues chained receipts with increasing serials that verify", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  const receipts = [];
  for (let i = 0; i < 3; i++) {
    const r = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact, claims: { step: i } }, a.adminKey);
    t.equal(r.status, 201, `receipt ${i}: 201`);
    receipts.push(r.json);
  }
  t.deepEqual(
    receipts.map((r) => r.serial),
    [1, 2, 3],
    "serials 1, 2, 3",
  );
  t.equal(receipts[0].previous_receipt_sha256, null, "the first has no previous");
  t.equal(receipts[1].previous_receipt_sha256, receiptHash(receipts[0]), "second chains to first");
  t.equal(receipts[2].previous_receipt_sha256, receiptHash(receipts[1]), "third chains to second");
  t.deepEqual(receipts[1].claims, { step: 1 });
  t.match(receipts[0].receipt_id, UUID);
  for (const r of receipts) {
    const v = await post(`${a.url}/v1/provenance/verify`, { receipt: r });
    t.equal(v.status, 200, `serial ${r.serial} verifies`);
    t.equal(v.json.verdict, "valid");
    t.equal(v.json.valid, true);
    t.equal(v.json.checks.length, 6);
    t.equal(v.json.receipt_id, r.receipt_id);
    t.equal(v.json.signer_fingerprint, a.boot.keyring.active.fingerprint);
  }
  const log = (await readFile(join(dir, "home", "chain.log"), "utf8")).trim().split("\n");
  t.deepEqual(
    JSON.parse(log[log.length - 1]!),
    { serial: 3, last_receipt_sha256: receiptHash(receipts[2]) },
    "the last line of the chain log is the last receipt",
  );
  await a.close();
  await cleanup();
});

test("artifact_b64: the appliance hashes the bytes; a claimed digest must agree", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  const bytes = Buffer.from("hello artifact");
  const r = await post(`${a.url}/v1/provenance/exact`, { artifact_b64: bytes.toString("base64"), artifact: { name: "x.bin" } }, a.adminKey);
  t.equal(r.status, 201);
  t.equal(r.json.artifact.size_bytes, bytes.length, "size from the bytes");
  t.match(r.json.artifact.sha256, /^[0-9a-f]{64}$/);
  t.equal(r.json.artifact.name, "x.bin");
  t.equal(r.json.artifact.media_type, "application/octet-stream", "default media type");
  const ok = await post(`${a.url}/v1/provenance/verify`, { receipt: r.json, artifact_b64: bytes.toString("base64") });
  t.equal(ok.status, 200, "verify with the same bytes: valid");
  const bad = await post(`${a.url}/v1/provenance/verify`, { receipt: r.json, artifact_b64: Buffer.from("other").toString("base64") });
  t.equal(bad.status, 422, "verify with other bytes: 422");
  t.equal(bad.json.checks.find((c: any) => c.name === "artifact_commitment").ok, false);
  const mismatch = await post(`${a.url}/v1/provenance/exact`, { artifact_b64: bytes.toString("base64"), artifact: { sha256: "0".repeat(64) } }, a.adminKey);
  t.equal(mismatch.status, 400, "a claimed sha256 that disagrees: 400");
  t.match(mismatch.json.detail, /sha256/);
  await a.close();
  await cleanup();
});

test("bad input gets 400/413/415 with one sentence, and consumes no serial", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir, { maxBodyBytes: 256 * 1024 });
  const cases: Array<[string, unknown, number]> = [
    ["empty body", {}, 400],
    ["artifact not an object", { artifact: "x" }, 400],
    ["missing sha256", { artifact: { ...sampleArtifact, sha256: undefined } }, 400],
    ["upper-case sha256", { artifact: { ...sampleArtifact, sha256: sampleArtifact.sha256.toUpperCase() } }, 400],
    ["negative size", { artifact: { ...sampleArtifact, size_bytes: -1 } }, 400],
    ["fractional size", { artifact: { ...sampleArtifact, size_bytes: 1.5 } }, 400],
    ["bad media type", { artifact: { ...sampleArtifact, media_type: "not a type" } }, 400],
    ["empty name", { artifact: { ...sampleArtifact, name: "" } }, 400],
    ["extra artifact field", { artifact: { ...sampleArtifact, extra: 1 } }, 400],
    ["extra body field", { artifact: sampleArtifact, tenant: "x" }, 400],
    ["claims not an object", { artifact: sampleArtifact, claims: [1] }, 400],
    ["claims over 64 KiB", { artifact: sampleArtifact, claims: { x: "a".repeat(70 * 1024) } }, 400],
    ["artifact_b64 not base64", { artifact_b64: "@@@" }, 400],
    ["a JSON array", [1, 2], 400],
  ];
  for (const [name, body, status] of cases) {
    const r = await post(`${a.url}/v1/provenance/exact`, body, a.adminKey);
    t.equal(r.status, status, `${name}: ${status}`);
    t.equal(r.json?.code, "bad_request", `${name}: code`);
    t.ok(typeof r.json?.detail === "string" && r.json.detail.length < 300 && !r.json.detail.includes("\n"), `${name}: one-sentence detail (${r.json?.detail})`);
  }
  const notJson = await post(`${a.url}/v1/provenance/exact`, "{not json", a.adminKey);
  t.equal(notJson.status, 400, "malformed JSON: 400");
  t.equal(notJson.json.code, "bad_request");
  const wrongType = await post(`${a.url}/v1/provenance/exact`, "x", a.adminKey, { "content-type": "text/plain" });
  t.equal(wrongType.status, 415, "text/plain: 415");
  const big = await post(`${a.url}/v1/provenance/exact`, { artifact_b64: Buffer.alloc(300 * 1024).toString("base64") }, a.adminKey);
  t.equal(big.status, 413, "body over the limit: 413");
  t.equal(big.json.code, "payload_too_large");
  const deep = "[".repeat(100_000) + "]".repeat(100_000);
  const deepExact = await post(`${a.url}/v1/provenance/exact`, `{"artifact":${JSON.stringify(sampleArtifact)},"claims":{"x":${deep}}}`, a.adminKey);
  t.equal(deepExact.status, 400, "claims nested 100,000 deep: 400, not a crash");
  const deepVerify = await post(`${a.url}/v1/provenance/verify`, `{"receipt":{"schema":"svc.provenance.receipt.v1","claims":{"x":${deep}}}}`);
  t.equal(deepVerify.status, 400, "a receipt nested 100,000 deep: 400 (more JSON values than any receipt), not a crash");
  t.match(deepVerify.json.detail, /holds more than 100,000 JSON values/);
  const deep2 = "[".repeat(50_000) + "]".repeat(50_000);
  const deepVerify2 = await post(`${a.url}/v1/provenance/verify`, `{"receipt":{"schema":"svc.provenance.receipt.v1","claims":{"x":${deep2}}}}`);
  t.equal(deepVerify2.status, 422, "a receipt nested 50,000 deep: 422 failed");
  t.equal(deepVerify2.json.verdict, "failed");
  const vmissing = await post(`${a.url}/v1/provenance/verify`, {});
  t.equal(vmissing.status, 400, "verify without receipt: 400");
  for (const [name, body, status] of [
    ["verify with an extra field", { receipt: {}, tenant: "x" }, 400],
    ["verify with artifact_b64 not base64", { receipt: {}, artifact_b64: "%%" }, 400],
    ["verify, malformed JSON", '{"receipt":', 400],
  ] as const) {
    const r = await post(`${a.url}/v1/provenance/verify`, body);
    t.equal(r.status, status, `${name}: ${status}`);
    t.equal(r.json?.code, "bad_request");
  }
  t.equal((await post(`${a.url}/v1/provenance/verify`, "x", undefined, { "content-type": "text/plain" })).status, 415, "verify, text/plain: 415");
  const empty = await post(`${a.url}/v1/provenance/verify`, "");
  t.equal(empty.status, 400, "verify with an empty body: 400");
  t.equal(empty.json.code, "bad_request");
  for (const [name, body, status] of [
    ["bundle without receipt", {}, 400],
    ["bundle with an extra field", { receipt: {}, x: 1 }, 400],
    ["bundle, malformed JSON", "[", 400],
    ["bundle of a non-receipt", { receipt: 5 }, 422],
  ] as const) {
    const r = await post(`${a.url}/v1/provenance/evidence-bundle`, body, a.adminKey);
    t.equal(r.status, status, `${name}: ${status}`);
  }
  t.equal((await post(`${a.url}/v1/provenance/evidence-bundle`, "x", a.adminKey, { "content-type": "text/plain" })).status, 415, "bundle, text/plain: 415");
  const nf = await get(`${a.url}/v1/nothing`);
  t.equal(nf.status, 404);
  t.equal(nf.json.code, "not_found");
  const ok = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey);
  t.equal(ok.json.serial, 1, "no bad request consumed a serial");
  await a.close();
  await cleanup();
});

test("issuance in its plain form (served without express) and in other forms (through express) answers alike", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir, { maxBodyBytes: 256 * 1024 });
  const auth = { authorization: `Bearer ${a.adminKey}` };
  const body = JSON.stringify({ artifact: sampleArtifact, claims: { k: "v" } });
  let issued = 0;
  const given = "0B7E4F5C-8D1A-4C39-9F6E-2A5B7C8D9E0F";
  const plain = await post(`${a.url}/v1/provenance/exact`, body, a.adminKey, { "x-request-id": given });
  t.equal(plain.status, 201, "plain: 201");
  issued++;
  t.equal(plain.headers.get("content-type"), "application/json; charset=utf-8", "plain: JSON content type");
  t.equal(plain.headers.get("x-request-id"), given.toLowerCase(), "plain: a given request id is echoed");
  t.deepEqual(
    Object.keys(plain.json),
    ["schema", "receipt_id", "serial", "issued_at", "artifact", "claims", "previous_receipt_sha256", "signer", "signature"],
    "members in the schema's order",
  );
  const log = a.logs.map((l) => JSON.parse(l)).find((l) => l.request_id === given.toLowerCase());
  t.deepEqual(
    log && { method: log.method, route: log.route, status: log.status },
    { method: "POST", route: "/v1/provenance/exact", status: 201 },
    "plain: one log line with route and status",
  );
  t.match(
    (await post(`${a.url}/v1/provenance/exact`, body, a.adminKey, { "x-request-id": "not-a-uuid" })).headers.get("x-request-id") ?? "",
    UUID,
    "plain: another id is replaced",
  );
  issued++;
  const viaExpress: Array<[string, () => Promise<Response>]> = [
    ["a query string", () => fetch(`${a.url}/v1/provenance/exact?x=1`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body })],
    ["a trailing slash", () => fetch(`${a.url}/v1/provenance/exact/`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body })],
    [
      "a gzip body",
      async () => {
        const { gzipSync } = await import("node:zlib");
        return fetch(`${a.url}/v1/provenance/exact`, {
          method: "POST",
          headers: { ...auth, "content-type": "application/json", "content-encoding": "gzip" },
          body: gzipSync(body),
        });
      },
    ],
    [
      "a chunked body",
      () =>
        fetch(`${a.url}/v1/provenance/exact`, {
          method: "POST",
          headers: { ...auth, "content-type": "application/json" },
          body: new ReadableStream({
            start(c) {
              c.enqueue(new TextEncoder().encode(body.slice(0, 10)));
              c.enqueue(new TextEncoder().encode(body.slice(10)));
              c.close();
            },
          }),
          duplex: "half",
        } as RequestInit),
    ],
    [
      "Content-Type with a parameter",
      () => fetch(`${a.url}/v1/provenance/exact`, { method: "POST", headers: { ...auth, "content-type": "application/json; foo=bar" }, body }),
    ],
  ];
  for (const [name, send] of viaExpress) {
    const r = await send();
    const j = (await r.json()) as any;
    t.equal(r.status, 201, `${name}: 201`);
    issued++;
    t.equal(r.headers.get("content-type"), "application/json; charset=utf-8", `${name}: JSON content type`);
    t.deepEqual(j.claims, { k: "v" }, `${name}: the receipt carries the claims`);
  }
  const bom = await post(`${a.url}/v1/provenance/exact`, "\ufeff" + body, a.adminKey);
  t.equal(bom.status, 201, "plain: a body with a byte order mark is read as express.json reads it");
  issued++;
  for (const [name, raw] of [
    ["an empty body", ""],
    ["whitespace only", "  \n"],
    ["a JSON string (strict: object or array)", '"x"'],
    ["a JSON number", "1"],
    ["truncated JSON", body.slice(0, -1)],
    ["a lone surrogate in the artifact name", JSON.stringify({ artifact: { ...sampleArtifact, name: "a\ud800b" } })],
  ] as const) {
    const r = await post(`${a.url}/v1/provenance/exact`, raw, a.adminKey);
    t.equal(r.status, 400, `plain, ${name}: 400`);
    t.equal(r.json?.code, "bad_request", `plain, ${name}: bad_request (${r.json?.detail})`);
    t.match(r.json?.request_id ?? "", UUID, `plain, ${name}: request id in the body`);
  }
  const last = await post(`${a.url}/v1/provenance/exact`, body, a.adminKey);
  t.equal(last.json.serial, issued + 1, "every receipt took one serial, no refused request took any");
  await a.close();
  await cleanup();
});

test("verification in its plain form (served without express) and through express answers alike", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir, { maxBodyBytes: 256 * 1024, maxReceiptBodyBytes: 256 * 1024 });
  const issued = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact, claims: { k: "v" } }, a.adminKey);
  const good = JSON.stringify({ receipt: issued.json });
  const bad = JSON.stringify({ receipt: { ...issued.json, claims: { k: "w" } } });
  const viaExpress = (body: string) => fetch(`${a.url}/v1/provenance/verify?x=1`, { method: "POST", headers: { "content-type": "application/json" }, body });
  for (const [name, body, status] of [
    ["valid", good, 200],
    ["tampered", bad, 422],
  ] as const) {
    const given = randomUUID();
    const plain = await post(`${a.url}/v1/provenance/verify`, body, undefined, { "x-request-id": given });
    const other = await viaExpress(body);
    const otherJson = (await other.json()) as any;
    t.equal(plain.status, status, `plain, ${name}: ${status}`);
    t.equal(other.status, status, `express, ${name}: ${status}`);
    t.equal(plain.headers.get("content-type"), other.headers.get("content-type"), `${name}: the same content type`);
    t.equal(plain.headers.get("x-request-id"), given, `plain, ${name}: the request id is echoed`);
    t.deepEqual({ ...plain.json, request_id: null }, { ...otherJson, request_id: null }, `${name}: the same verification result`);
    const log = a.logs.map((l) => JSON.parse(l)).find((l) => l.request_id === given);
    t.deepEqual(log && { route: log.route, status: log.status }, { route: "/v1/provenance/verify", status }, `plain, ${name}: one log line`);
  }
  for (const [name, raw, code, status] of [
    ["an empty body", "", "bad_request", 400],
    ["not JSON", "{", "bad_request", 400],
    ["no receipt", "{}", "bad_request", 400],
    ["an unknown field", JSON.stringify({ receipt: issued.json, extra: 1 }), "bad_request", 400],
    ["a bad artifact_b64", JSON.stringify({ receipt: issued.json, artifact_b64: "***" }), "bad_request", 400],
    ["a receipt that is not an object", JSON.stringify({ receipt: 5 }), undefined, 422],
  ] as const) {
    const r = await post(`${a.url}/v1/provenance/verify`, raw);
    const e = await viaExpress(raw);
    t.equal(r.status, status, `plain, ${name}: ${status}`);
    t.equal(e.status, status, `express, ${name}: ${status}`);
    if (code) t.equal(r.json?.code, code, `plain, ${name}: ${code} (${r.json?.detail})`);
    const ej = (await e.json()) as any;
    t.equal(r.json?.detail ?? r.json?.verdict, ej.detail ?? ej.verdict, `${name}: the same detail or verdict`);
  }
  const big = await post(`${a.url}/v1/provenance/verify`, JSON.stringify({ receipt: issued.json, pad: "x".repeat(300 * 1024) }));
  t.equal(big.status, 413, "plain: a body over the limit is 413");
  await a.close();
  await cleanup();
});

test("concurrent requests get distinct consecutive serials, an unbroken chain, and survive a restart", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  const n = 60;
  const rs = await Promise.all(
    Array.from({ length: n }, (_, i) => post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact, claims: { i } }, a.adminKey)),
  );
  t.ok(
    rs.every((r) => r.status === 201),
    "all 201",
  );
  const sorted = rs.map((r) => r.json).sort((x, y) => x.serial - y.serial);
  t.deepEqual(
    sorted.map((r) => r.serial),
    Array.from({ length: n }, (_, i) => i + 1),
    "serials 1..60, each once",
  );
  let linked = true;
  for (let i = 1; i < n; i++) if (sorted[i].previous_receipt_sha256 !== receiptHash(sorted[i - 1])) linked = false;
  t.ok(linked, "each receipt chains to the one before");
  await a.close();
  const b = await startApp(dir, { adminKey: a.adminKey });
  t.equal(b.boot.adminKey, null, "a restart prints no admin key");
  t.equal(b.boot.createdKeypair, false, "a restart keeps the keypair");
  const next = await post(`${b.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey);
  t.equal(next.status, 201, "the old admin key still works");
  t.equal(next.json.serial, n + 1, "the serial continues after a restart");
  t.equal(next.json.previous_receipt_sha256, receiptHash(sorted[n - 1]), "the chain continues after a restart");
  const old = await post(`${b.url}/v1/provenance/verify`, { receipt: sorted[0] });
  t.equal(old.status, 200, "receipts of before the restart verify");
  await b.close();
  await cleanup();
});

test("receipts built in the worker thread, a batch at a time (both backends), verify and chain under concurrency", async (t) => {
  const { dir, cleanup } = await tempDir();
  for (const backend of ["liboqs", "noble"] as const) {
    const a = await startApp(join(dir, backend), { backend, worker: true });
    const rs = await Promise.all(
      Array.from({ length: 12 }, (_, i) => post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact, claims: { i } }, a.adminKey)),
    );
    t.ok(
      rs.every((r) => r.status === 201),
      `${backend}: all 201`,
    );
    const sorted = rs.map((r) => r.json).sort((x, y) => x.serial - y.serial);
    t.deepEqual(
      sorted.map((r) => r.serial),
      Array.from({ length: 12 }, (_, i) => i + 1),
      `${backend}: serials 1..12`,
    );
    t.ok(
      sorted.every((r, i) => i === 0 || r.previous_receipt_sha256 === receiptHash(sorted[i - 1])),
      `${backend}: chained`,
    );
    for (const r of sorted.slice(0, 3)) {
      const v = await post(`${a.url}/v1/provenance/verify`, { receipt: r });
      t.equal(v.json.verdict, "valid", `${backend}: serial ${r.serial} valid`);
    }
    await a.close();
  }
  await cleanup();
});

test("a receipt worker that has died: /health says failing (503) and issuance answers 500 without details", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir, { worker: true });
  t.equal((await get(`${a.url}/health`)).status, 200, "healthy at first");
  await a.worker!.close();
  const h = await get(`${a.url}/health`);
  t.equal(h.status, 503, "503 once the worker is gone");
  t.equal(h.json.status, "degraded");
  t.equal(h.json.backend.status, "failing");
  const r = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey);
  t.equal(r.status, 500, "issuance fails");
  t.equal(r.json.code, "internal");
  t.equal(r.json.detail, "Internal error.", "no internals in the body");
  t.equal((await post(`${a.url}/v1/provenance/verify`, { receipt: {} })).status, 422, "verification still answers");
  await a.close();
  await cleanup();
});

test("verify: tampered 422 failed, other instance 422 failed, unsupported schema 422, non-object 422", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(join(dir, "a"));
  const b = await startApp(join(dir, "b"), { backend: "noble" });
  const r = (await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey)).json;
  const tampered = clone(r);
  tampered.artifact.size_bytes = 5;
  const v1 = await post(`${a.url}/v1/provenance/verify`, { receipt: tampered });
  t.equal(v1.status, 422);
  t.equal(v1.json.verdict, "failed");
  t.equal(v1.json.valid, false);
  const foreign = (await post(`${b.url}/v1/provenance/exact`, { artifact: sampleArtifact }, b.adminKey)).json;
  const v2 = await post(`${a.url}/v1/provenance/verify`, { receipt: foreign });
  t.equal(v2.status, 422, "another instance's receipt: 422");
  t.equal(v2.json.verdict, "failed");
  const own = await post(`${b.url}/v1/provenance/verify`, { receipt: foreign });
  t.equal(own.status, 200, "valid at its own instance (noble backend)");
  const cross = await post(`${b.url}/v1/provenance/verify`, { receipt: r });
  t.equal(cross.status, 422, "and a's receipt fails at b");
  const v3 = await post(`${a.url}/v1/provenance/verify`, { receipt: { ...r, schema: "svc.provenance.receipt.v9" } });
  t.equal(v3.status, 422);
  t.equal(v3.json.verdict, "unsupported_schema");
  const v4 = await post(`${a.url}/v1/provenance/verify`, { receipt: "not a receipt" });
  t.equal(v4.status, 422);
  t.equal(v4.json.verdict, "failed");
  const again = await post(`${a.url}/v1/provenance/verify`, { receipt: tampered });
  t.deepEqual({ ...again.json, request_id: null }, { ...v1.json, request_id: null }, "the same receipt gets the same answer (but for the request id)");
  await a.close();
  await b.close();
  await cleanup();
});

test("evidence-bundle: a valid receipt gives a ZIP that verifies, reproducible bytes; a tampered one 422", async (t) => {
  const { dir, cleanup } = await tempDir();
  const fixed = new Date("2026-11-22T04:00:00.000Z");
  const a = await startApp(dir, { clock: () => fixed });
  const r = (await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey)).json;
  const z1 = await post(`${a.url}/v1/provenance/evidence-bundle`, { receipt: r }, a.adminKey);
  t.equal(z1.status, 200);
  t.equal(z1.headers.get("content-type"), "application/zip");
  t.match(z1.headers.get("content-disposition") ?? "", /evidence-.*\.zip/);
  const z2 = await post(`${a.url}/v1/provenance/evidence-bundle`, { receipt: r }, a.adminKey);
  t.ok(z1.buf.equals(z2.buf), "two exports at the same instant are byte-identical");
  const files = await readZip(z1.buf);
  t.deepEqual(
    [...files.keys()],
    [
      "receipt.json",
      "artifact-manifest.json",
      "verification.json",
      "signer-public-key.json",
      "signature-metadata.json",
      "MANIFEST.sha256",
      "MANIFEST.sha256.sig",
    ],
  );
  const backend = await createBackend("noble");
  const v = verifyBundle(files, {
    backend,
    pinnedKeys: [{ publicKey: a.boot.keyring.active.publicKey, fingerprint: a.boot.keyring.active.fingerprint }],
    integrityOnly: false,
  });
  t.equal(v.verdict, "valid", "the bundle verifies under the pinned key");
  const ver = JSON.parse(files.get("verification.json")!.toString());
  t.equal(ver.exported_at, fixed.toISOString());
  t.equal(ver.verdict, "valid");
  const tampered = clone(r);
  tampered.claims = { x: 1 };
  const bad = await post(`${a.url}/v1/provenance/evidence-bundle`, { receipt: tampered }, a.adminKey);
  t.equal(bad.status, 422, "a tampered receipt is refused before export");
  t.equal(bad.json.verdict, "failed");
  t.ok(Array.isArray(bad.json.checks) && bad.json.checks.length === 6, "with the checks");
  t.equal(typeof bad.json.detail, "string");
  await a.close();
  await cleanup();
});

test("rotation: old receipts still verify, public-key lists the retired key, new receipts use the new key", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  const before = (await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey)).json;
  await a.close();
  const oldFp = a.boot.keyring.active.fingerprint;
  await rotateKey(join(dir, "home"), await createBackend("liboqs"));
  const b = await startApp(dir, { adminKey: a.adminKey });
  t.notEqual(b.boot.keyring.active.fingerprint, oldFp, "a new active key");
  const pk = await get(`${b.url}/v1/provenance/public-key`);
  t.equal(pk.json.retired.length, 1);
  t.equal(pk.json.retired[0].fingerprint, oldFp, "the retired key is listed");
  t.match(pk.json.retired[0].retired_at, /^\d{4}-/);
  const v = await post(`${b.url}/v1/provenance/verify`, { receipt: before });
  t.equal(v.status, 200, "a receipt of the retired key still verifies");
  const after = (await post(`${b.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey)).json;
  t.equal(after.signer.public_key_sha256, b.boot.keyring.active.fingerprint, "signed by the new key");
  t.equal(after.serial, 2, "the chain continues across rotation");
  t.equal(after.previous_receipt_sha256, receiptHash(before));
  const z = await post(`${b.url}/v1/provenance/evidence-bundle`, { receipt: before }, a.adminKey);
  t.equal(z.status, 409, "a retired key's receipt cannot get a bundle signed by its own key");
  t.equal(z.json.code, "version_conflict");
  await b.close();
  await cleanup();
});

test("metrics: admin key or metrics token; counts receipts, verifications by verdict, bundles, durations", async (t) => {
  const { dir, cleanup } = await tempDir();
  const token = "metrics-token-0123456789";
  const a = await startApp(dir, { metricsToken: token });
  const r = (await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey)).json;
  await post(`${a.url}/v1/provenance/verify`, { receipt: r });
  await post(`${a.url}/v1/provenance/verify`, { receipt: { ...r, serial: 9 } });
  await post(`${a.url}/v1/provenance/evidence-bundle`, { receipt: r }, a.adminKey);
  const m1 = await get(`${a.url}/metrics`, token);
  t.equal(m1.status, 200, "the metrics token reads metrics");
  const m2 = await get(`${a.url}/metrics`, a.adminKey);
  t.equal(m2.status, 200, "the admin key reads metrics");
  t.match(m1.text, /svc_provenance_receipts_issued_total 1\b/);
  t.match(m1.text, /svc_provenance_verifications_total\{verdict="valid"\} 2\b/, "verify + export");
  t.match(m1.text, /svc_provenance_verifications_total\{verdict="failed"\} 1\b/);
  t.match(m1.text, /svc_provenance_bundles_exported_total 1\b/);
  t.match(m1.text, /svc_provenance_http_request_duration_seconds_count\{method="POST",route="\/v1\/provenance\/exact",status="201"\} 1\b/);
  t.match(
    m1.text,
    /svc_provenance_http_requests_total\{method="POST",route="\/v1\/provenance\/exact",status="201"\} 1\b/,
    "requests counted by route and status",
  );
  const exact = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, token);
  t.equal(exact.status, 401, "the metrics token cannot issue receipts");
  await a.close();
  await cleanup();
});

test("no response or log line contains the secret key or the admin key", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  // sk begins with rho, which the public key shares: take the secret vectors (byte 129 on)
  const secretB64 = Buffer.from(a.boot.keyring.active.secretKey.subarray(129, 177)).toString("base64");
  const secretHex = Buffer.from(a.boot.keyring.active.secretKey.subarray(128, 160)).toString("hex");
  const outputs: string[] = [];
  const r = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.adminKey);
  outputs.push(r.buf.toString());
  outputs.push((await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, "wrong")).buf.toString());
  outputs.push((await post(`${a.url}/v1/provenance/verify`, { receipt: r.json })).buf.toString());
  const z = await post(`${a.url}/v1/provenance/evidence-bundle`, { receipt: r.json }, a.adminKey);
  for (const [, data] of await readZip(z.buf)) outputs.push(data.toString());
  outputs.push((await get(`${a.url}/v1/provenance/public-key`)).text);
  outputs.push((await get(`${a.url}/health`)).text);
  outputs.push((await get(`${a.url}/metrics`, a.adminKey)).text);
  outputs.push(...a.logs);
  t.ok(a.logs.length >= 7, "requests were logged");
  const all = outputs.join("\n");
  t.ok(Buffer.from(a.boot.keyring.active.secretKey).toString("base64").includes(secretB64), "the probe is a substring of the key's base64");
  t.notOk(all.includes(secretB64), "no base64 secret key");
  t.notOk(all.includes(secretHex), "no hex secret key");
  t.notOk(all.includes(a.adminKey), "no admin key");
  t.notOk(all.includes(a.boot.adminKeySha256), "not even the admin key hash");
  t.ok(
    a.logs.every((l) => !l.includes("artifact")),
    "no request body in logs",
  );
  await a.close();
  await cleanup();
});
