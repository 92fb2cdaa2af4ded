// I-JSON at every entry point. The forgery: a genuine receipt with an extra, earlier
// "claims" member. JSON.parse keeps the last member, so the signature over the genuine claims
// checked out, while a reader that keeps the first member shows the forged claims. It must be
// refused at /verify (both paths), at bundle export, at issuance, and by both offline
// verifiers. Likewise a number whose text was changed to one that parses to the same double.
// Also: "__proto__" kept as data and signed; large numbers within the RFC 8785 rule accepted.
import test from "tape";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { BUNDLE_FILES, MANIFEST_PAYLOAD_TYPE, buildBundleFiles, readZip, verifyBundle, writeZip } from "../../server/provenance/bundle.js";
import { pae, verifyReceipt } from "../../server/provenance/receipt.js";
import { sha256Hex } from "../../lib/sha256.js";
import { createBackend } from "../../server/provenance/signer.js";
import { readJson } from "../../server/http/json.js";
import { cleanup as cleanupFixtures, dir as fixtureDir, run, signer } from "./cli-fixtures.js";
import { sampleArtifact, startApp, tempDir } from "./helpers.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const forge = (genuine: string): string => {
  if (!genuine.startsWith('{"schema"')) throw new Error("unexpected receipt text");
  return genuine.replace('{"schema"', '{"claims":{"approved_by":"attacker"},"schema"');
};
/** A reader that keeps the first of two members (as some JSON libraries do). */
const firstClaims = (text: string): unknown => JSON.parse(text.slice(text.indexOf('"claims":') + 9, text.indexOf(',"schema"')));

async function rawPost(url: string, text: string, token?: string, query = ""): Promise<{ status: number; json: any; text: string }> {
  const res = await fetch(url + query, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: text,
  });
  const body = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(body);
  } catch {
    /* not JSON */
  }
  return { status: res.status, json, text: body };
}

/** A bundle whose receipt.json is `receiptText`, manifest and its signature made with `signer`. */
function bundleWithReceiptText(receiptText: string): Array<[string, Buffer]> {
  const genuine = JSON.parse(receiptText.replace(/^\{"claims":\{"approved_by":"attacker"\},/, "{")) as any;
  const oqsFiles = buildBundleFiles({
    receipt: genuine,
    verification: { verdict: "valid", valid: true, checks: [], receipt_id: genuine.receipt_id, signer_fingerprint: signer.fingerprint },
    signer,
    exportedAt: new Date("2026-11-22T02:00:00.000Z"),
    applianceVersion: "0.1.0",
  });
  const files = new Map(oqsFiles);
  files.set("receipt.json", Buffer.from(receiptText));
  const hashed = BUNDLE_FILES.filter((f) => f !== "MANIFEST.sha256" && f !== "MANIFEST.sha256.sig").sort();
  const manifest = Buffer.from(hashed.map((n) => `${sha256Hex(files.get(n)!)}  ${n}\n`).join(""));
  files.set("MANIFEST.sha256", manifest);
  files.set("MANIFEST.sha256.sig", Buffer.from(Buffer.from(signer.signDeterministic(pae(MANIFEST_PAYLOAD_TYPE, manifest))).toString("base64") + "\n"));
  return BUNDLE_FILES.map((n) => [n, files.get(n)!]);
}

test("the duplicate-claims forgery is refused at /verify (plain and express), at export and at issuance", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  const issued = await rawPost(
    `${a.url}/v1/provenance/exact`,
    JSON.stringify({ artifact: sampleArtifact, claims: { approved_by: "release-board" } }),
    a.adminKey,
  );
  t.equal(issued.status, 201);
  const forged = forge(issued.text);
  t.deepEqual(firstClaims(forged), { approved_by: "attacker" }, "a first-member reader sees the forged claims");
  t.deepEqual(JSON.parse(forged).claims, { approved_by: "release-board" }, "JSON.parse sees the genuine ones, which the signature covers");

  const genuineOk = await rawPost(`${a.url}/v1/provenance/verify`, `{"receipt":${issued.text}}`);
  t.equal(genuineOk.status, 200, "the genuine receipt verifies");
  for (const [path, query] of [
    ["plain", ""],
    ["express", "?via=express"],
  ] as const) {
    const v = await rawPost(`${a.url}/v1/provenance/verify`, `{"receipt":${forged}}`, undefined, query);
    t.equal(v.status, 422, `${path}: the forged receipt is refused (422)`);
    t.equal(v.json.verdict, "failed", `${path}: verdict failed`);
    t.equal(v.json.valid, false);
    const cb = v.json.checks.find((c: any) => c.name === "canonical_body");
    t.equal(cb.ok, false, `${path}: canonical_body fails`);
    t.match(cb.detail, /not I-JSON.*member name "claims" appears twice/, `${path}: ${cb.detail}`);
    t.equal(v.json.checks.find((c: any) => c.name === "signature").ok, false, `${path}: no signature is reported valid`);
    t.equal(v.json.code, "bad_request", `${path}: the error body's code`);
    t.match(v.json.request_id, UUID, `${path}: the error body's request id`);
    t.match(v.json.detail, /^The receipt did not verify: the canonical_body check failed\.$/, `${path}: the error body's detail`);
    t.equal(v.json.receipt_id, issued.json.receipt_id, `${path}: the verdict fields stay`);
  }
  const nested = issued.text.replace('"claims":{"approved_by":"release-board"}', '"claims":{"approved_by":"attacker","approved_by":"release-board"}');
  const vn = await rawPost(`${a.url}/v1/provenance/verify`, `{"receipt":${nested}}`);
  t.equal(vn.status, 422, "a repeated name inside claims: 422");
  t.match(vn.json.checks.find((c: any) => c.name === "canonical_body").detail, /at claims, the member name "approved_by" appears twice/);

  const twoReceipts = await rawPost(
    `${a.url}/v1/provenance/verify`,
    `{"receipt":${forged.replace(/^\{"claims":\{"approved_by":"attacker"\},/, "{")},"receipt":{}}`,
  );
  t.equal(twoReceipts.status, 400, "two receipt members in the request: 400");
  t.match(twoReceipts.json.detail, /The request body is not I-JSON .*"receipt" appears twice/);
  t.equal(twoReceipts.json.code, "bad_request");

  const exp = await rawPost(`${a.url}/v1/provenance/evidence-bundle`, `{"receipt":${forged}}`, a.adminKey);
  t.equal(exp.status, 422, "export of the forged receipt: 422");
  t.equal(exp.json.verdict, "failed");
  t.match(exp.json.detail, /no evidence bundle was exported: the canonical_body check failed/);
  t.equal(exp.json.code, "bad_request");
  t.match(exp.json.request_id, UUID);
  t.equal(exp.json.checks.length, 6, "with the checks");

  for (const [name, body] of [
    ["claims twice", `{"claims":{"approved_by":"attacker"},"artifact":${JSON.stringify(sampleArtifact)},"claims":{}}`],
    ["a name twice inside claims", `{"artifact":${JSON.stringify(sampleArtifact)},"claims":{"a":{"b":1,"b":2}}}`],
    ["a name twice inside artifact", `{"artifact":{"name":"x","name":"y","sha256":"${sampleArtifact.sha256}","size_bytes":4,"media_type":"a/b"}}`],
  ] as const) {
    for (const query of ["", "?via=express"]) {
      const r = await rawPost(`${a.url}/v1/provenance/exact`, body, a.adminKey, query);
      t.equal(r.status, 400, `issuance, ${name}${query ? " (express)" : ""}: 400`);
      t.match(
        r.json?.detail ?? "",
        /^The request body is not I-JSON \(RFC 8785 needs it\): at .*appears twice in one object\.$/,
        `issuance, ${name}: ${r.json?.detail}`,
      );
    }
  }
  const next = await rawPost(`${a.url}/v1/provenance/exact`, JSON.stringify({ artifact: sampleArtifact }), a.adminKey);
  t.equal(next.json.serial, 2, "no refused request took a serial");
  await a.close();
  await cleanup();
});

test("the forgeries are refused by both offline verifiers (no network)", async (t) => {
  const backend = await createBackend("liboqs");
  const genuine = await readJsonText(join(fixtureDir, "receipt.json"));
  const forged = forge(genuine);
  const inexact = genuine.replace('"serial":1', '"serial":1.0000000000000001');
  t.notEqual(inexact, genuine, "the number forgery changes the text");
  t.equal(
    verifyReceipt(JSON.parse(inexact), { backend, keys: [signer], trustedFingerprints: [signer.fingerprint] }).verdict,
    "valid",
    "JSON.parse reads the changed number as the signed one",
  );
  await writeFile(join(fixtureDir, "forged.json"), forged);
  await writeFile(join(fixtureDir, "inexact.json"), inexact);
  await writeFile(join(fixtureDir, "forged.zip"), await writeZip(bundleWithReceiptText(forged)));
  await writeFile(join(fixtureDir, "good-again.zip"), await writeZip(bundleWithReceiptText(genuine)));
  const pubText = await readJsonText(join(fixtureDir, "pub.json"));
  await writeFile(
    join(fixtureDir, "pub-twice.json"),
    pubText.replace('{"algorithm"', `{"public_key":"${Buffer.from(signer.publicKey).toString("base64")}","algorithm"`),
  );
  const preload = [new URL("./no-network.mjs", import.meta.url).pathname];
  const pub = join(fixtureDir, "pub.json");
  const cases: Array<[string, string, string[], number, RegExp]> = [
    [
      "receipt, a claims member twice",
      "svc-verify-receipt",
      ["--receipt", join(fixtureDir, "forged.json"), "--public-key", pub],
      1,
      /FAIL canonical_body: The receipt is not I-JSON .*"claims" appears twice/,
    ],
    [
      "receipt, a number that changed",
      "svc-verify-receipt",
      ["--receipt", join(fixtureDir, "inexact.json"), "--public-key", pub],
      1,
      /FAIL canonical_body: .*at serial, the number "1\.0000000000000001" would be signed as 1;/,
    ],
    [
      "bundle, a claims member twice in receipt.json",
      "svc-verify-bundle",
      ["--bundle", join(fixtureDir, "forged.zip"), "--public-key", pub],
      1,
      /FAIL canonical_body: The receipt is not I-JSON .*"claims" appears twice/,
    ],
    [
      "bundle, the same built from the genuine text",
      "svc-verify-bundle",
      ["--bundle", join(fixtureDir, "good-again.zip"), "--public-key", pub],
      0,
      /verdict: valid/,
    ],
    [
      "a public-key file naming public_key twice",
      "svc-verify-receipt",
      ["--receipt", join(fixtureDir, "receipt.json"), "--public-key", join(fixtureDir, "pub-twice.json")],
      2,
      /^$/,
    ],
  ];
  for (const [name, bin, args, code, re] of cases) {
    const r = await run(bin, args, preload);
    t.equal(r.code, code, `${name}: exit ${code} (${r.stderr.trim()})`);
    t.match(r.stdout, re, `${name}: the check says why`);
  }
  const twice = await run("svc-verify-receipt", ["--receipt", join(fixtureDir, "receipt.json"), "--public-key", join(fixtureDir, "pub-twice.json")]);
  t.match(
    twice.stderr,
    /^The public key file .* is not I-JSON \(RFC 8785 needs it\): at the top level, the member name "public_key" appears twice in one object\.\n$/,
    "the key file's problem in one line",
  );
  const protoTop = readJson(genuine.replace('{"schema"', '{"__proto__":{},"schema"'));
  const pv = verifyReceipt(protoTop.value, { backend, keys: [signer], trustedFingerprints: [signer.fingerprint], textProblem: protoTop.problem });
  t.equal(pv.verdict, "failed", "a receipt with an extra __proto__ member fails");
  t.match(pv.checks.find((c) => c.name === "signed_fields")!.detail, /unknown field '__proto__'|__proto__/, "signed_fields names the member");
  const inProcess = verifyBundle(await readZip(await writeZip(bundleWithReceiptText(forged))), { backend, pinnedKeys: [signer], integrityOnly: false });
  t.equal(inProcess.verdict, "failed", "verifyBundle: failed");
  t.ok(inProcess.checks.find((c) => c.name === "manifest_signature")?.ok, "even with a manifest signed by the right key");
  t.end();
});

async function readJsonText(path: string): Promise<string> {
  const { readFile } = await import("node:fs/promises");
  return readFile(path, "utf8");
}

test("__proto__ in claims is kept as data, signed, verified and exported", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir, { clock: () => new Date("2026-11-22T04:00:00.000Z") });
  const body = `{"artifact":${JSON.stringify(sampleArtifact)},"claims":{"__proto__":{"admin":true},"nested":{"__proto__":[1]}}}`;
  for (const query of ["", "?via=express"]) {
    const r = await rawPost(`${a.url}/v1/provenance/exact`, body, a.adminKey, query);
    t.equal(r.status, 201, `issued${query ? " (express)" : ""}`);
    const claims = (readJson(r.text).value as any).claims;
    t.deepEqual(Object.keys(claims), ["__proto__", "nested"], "the member is in the receipt");
    t.ok(r.text.includes('"claims":{"__proto__":{"admin":true},"nested":{"__proto__":[1]}}'), "as sent, in the receipt's text");
    const v = await rawPost(`${a.url}/v1/provenance/verify`, `{"receipt":${r.text}}`);
    t.equal(v.status, 200, "it verifies: the member was signed");
    const dropped = r.text.replace('"__proto__":{"admin":true},', "");
    t.equal((await rawPost(`${a.url}/v1/provenance/verify`, `{"receipt":${dropped}}`)).status, 422, "and removing it breaks the signature");
    const z = await fetch(`${a.url}/v1/provenance/evidence-bundle`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${a.adminKey}` },
      body: `{"receipt":${r.text}}`,
    });
    t.equal(z.status, 200, "exported");
    const files = await readZip(Buffer.from(await z.arrayBuffer()));
    t.ok(files.get("receipt.json")!.toString().includes('"__proto__"'), "receipt.json keeps the member");
    const vb = verifyBundle(files, { backend: a.backend, pinnedKeys: [a.boot.keyring.active], integrityOnly: false });
    t.equal(vb.verdict, "valid", "the bundle verifies");
  }
  t.equal(({} as any).admin, undefined, "no prototype was polluted");
  for (const [name, b] of [
    ["__proto__ in artifact", `{"artifact":{"__proto__":{},"name":"x","sha256":"${sampleArtifact.sha256}","size_bytes":4,"media_type":"a/b"}}`],
    ["__proto__ at the top", `{"__proto__":{},"artifact":${JSON.stringify(sampleArtifact)}}`],
  ] as const) {
    const r = await rawPost(`${a.url}/v1/provenance/exact`, b, a.adminKey);
    t.equal(r.status, 400, `${name}: 400 (an unknown field, not silently dropped)`);
    t.match(r.json.detail, /unknown field '__proto__'/, `${name}: ${r.json.detail}`);
  }
  await a.close();
  await cleanup();
});

test("numbers: what RFC 8785 writes exactly is accepted and signed; others get one sentence at issuance and verification", async (t) => {
  const { dir, cleanup } = await tempDir();
  const a = await startApp(dir);
  const ok = await rawPost(
    `${a.url}/v1/provenance/exact`,
    `{"artifact":${JSON.stringify(sampleArtifact)},"claims":{"e21":1e21,"p53":9007199254740992,"p64":18446744073709552000,"tenth":0.1,"neg":-1.5e-300}}`,
    a.adminKey,
  );
  t.equal(ok.status, 201, "1e21, 2^53, 2^64 as ECMAScript writes it, 0.1: accepted");
  t.ok(ok.text.includes('"claims":{"e21":1e+21,"neg":-1.5e-300,"p53":9007199254740992,"p64":18446744073709552000,"tenth":0.1}'), "written in RFC 8785 form");
  const v = await rawPost(`${a.url}/v1/provenance/verify`, `{"receipt":${ok.text}}`);
  t.equal(v.status, 200, "and verified");
  const alt = ok.text.replace("1e+21", "1000000000000000000000");
  t.equal(
    (await rawPost(`${a.url}/v1/provenance/verify`, `{"receipt":${alt}}`)).status,
    200,
    "another spelling of the same number verifies (one canonical form)",
  );

  const sentences: string[] = [];
  for (const [text, signedAs] of [
    ["9007199254740993", "9007199254740992"],
    ["18446744073709551615", "18446744073709552000"],
  ]) {
    const r = await rawPost(`${a.url}/v1/provenance/exact`, `{"artifact":${JSON.stringify(sampleArtifact)},"claims":{"n":${text}}}`, a.adminKey);
    t.equal(r.status, 400, `issuance of ${text}: 400`);
    t.match(
      r.json.detail,
      new RegExp(
        `^The request body is not I-JSON \\(RFC 8785 needs it\\): at claims\\.n, the number "${text}" would be signed as ${signedAs}; a number must keep its exact decimal value`,
      ),
    );
    sentences.push(r.json.detail.replace("The request body", "").replace("at claims.n", ""));
    // the same number put into a receipt that had a representable one
    const base = await rawPost(`${a.url}/v1/provenance/exact`, `{"artifact":${JSON.stringify(sampleArtifact)},"claims":{"n":${signedAs}}}`, a.adminKey);
    const changed = base.text.replace(`"n":${signedAs}`, `"n":${text}`);
    const vr = await rawPost(`${a.url}/v1/provenance/verify`, `{"receipt":${changed}}`);
    t.equal(vr.status, 422, `verification of ${text}: 422 (JSON.parse would read it as the signed ${signedAs})`);
    const detail = vr.json.checks.find((c: any) => c.name === "canonical_body").detail as string;
    t.equal(detail.replace("The receipt", "").replace("at claims.n", ""), sentences[sentences.length - 1], "the same sentence at verification");
  }
  const inf = await rawPost(`${a.url}/v1/provenance/exact`, `{"artifact":${JSON.stringify(sampleArtifact)},"claims":{"n":1e400}}`, a.adminKey);
  t.equal(inf.status, 400, "1e400: 400");
  t.match(inf.json.detail, /beyond the range of a double/);
  const size = await rawPost(`${a.url}/v1/provenance/exact`, `{"artifact":${JSON.stringify({ ...sampleArtifact, size_bytes: 2 ** 53 })}}`, a.adminKey);
  t.equal(size.status, 400, "artifact.size_bytes stays at most 2^53 - 1");
  await a.close();
  await cleanup();
});

test("cleanup", async (t) => {
  await cleanupFixtures();
  t.end();
});
