// Evidence bundles: reproducible ZIP bytes, the safe readers, and every tamper case.
import test from "tape";
import { mkdir, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import yazl from "yazl";
import {
  BUNDLE_FILES,
  BundleError,
  buildBundleFiles,
  readJsonDir,
  readZip,
  verifyBundle,
  writeZip,
  type BundleVerifyOptions,
} from "../../server/provenance/bundle.js";
import { artifactDigest, buildReceipt, verifyReceipt } from "../../server/provenance/receipt.js";
import { sha256Hex } from "../../lib/sha256.js";
import { createBackend, createSigner } from "../../server/provenance/signer.js";
import { tempDir } from "./helpers.js";
import { FFFD, FFFD_CLAIMS, INVALID_UTF8, insertAfter, resigned, withForm } from "./utf8-forms.js";

const oqs = await createBackend("liboqs");
const noble = await createBackend("noble");
const signer = createSigner(oqs, oqs.generateKeyPair());
const other = createSigner(noble, noble.generateKeyPair());
const bytes = Buffer.from("artifact bytes");
const artifact = { name: "a.bin", ...artifactDigest(bytes), media_type: "application/octet-stream" };
const receipt = buildReceipt({ artifact, claims: { k: "v" } }, { serial: 7, previous: "b".repeat(64) }, signer, new Date("2026-11-22T01:00:00.000Z"));
const pin = { publicKey: signer.publicKey, fingerprint: signer.fingerprint };
const exportedAt = new Date("2026-11-22T02:00:00.000Z");

function files(s = signer, r = receipt, at = exportedAt): Map<string, Buffer> {
  const verification = verifyReceipt(r, { backend: oqs, keys: [{ publicKey: s.publicKey, fingerprint: s.fingerprint }], trustedFingerprints: [s.fingerprint] });
  return new Map(buildBundleFiles({ receipt: r, verification, signer: s, exportedAt: at, applianceVersion: "0.1.0" }));
}
const pinned = (extra: Partial<BundleVerifyOptions> = {}): BundleVerifyOptions => ({ backend: noble, pinnedKeys: [pin], integrityOnly: false, ...extra });
const failing = (r: { checks: Array<{ name: string; ok: boolean }> }) => r.checks.filter((c) => !c.ok).map((c) => c.name);

test("a bundle holds the seven files; the manifest lists five, sorted, and is signed", (t) => {
  const f = files();
  t.deepEqual([...f.keys()], [...BUNDLE_FILES]);
  const manifest = f.get("MANIFEST.sha256")!.toString();
  const names = manifest
    .trim()
    .split("\n")
    .map((l) => l.split("  ")[1]);
  t.deepEqual(names, ["artifact-manifest.json", "receipt.json", "signature-metadata.json", "signer-public-key.json", "verification.json"]);
  t.equal(manifest.split("\n")[1], `${sha256Hex(f.get("receipt.json")!)}  receipt.json`);
  const meta = JSON.parse(f.get("signature-metadata.json")!.toString());
  t.deepEqual(meta, {
    algorithm: "ML-DSA-65",
    canonicalization: "RFC8785",
    payload_type: "application/vnd.svc.provenance.receipt.v1+json",
    schema: "svc.provenance.receipt.v1",
    evidence_version: 1,
  });
  const v = verifyBundle(f, pinned());
  t.equal(v.verdict, "valid", "verifies (noble) though signed with liboqs");
  t.equal(v.issuer_authenticated, true);
  t.ok(v.checks.length >= 12, "receipt checks and bundle checks");
  t.end();
});

test("ZIP bytes are reproducible for the same inputs and independent of the time zone", async (t) => {
  const z1 = await writeZip([...files()]);
  const z2 = await writeZip([...files()]);
  t.ok(z1.equals(z2), "same inputs, same bytes");
  const later = await readZip(await writeZip([...files(signer, receipt, new Date("2026-12-01T00:00:00.000Z"))]));
  const first = await readZip(z1);
  const differing = [...first.keys()].filter((n) => !first.get(n)!.equals(later.get(n)!));
  t.deepEqual(
    differing,
    ["verification.json", "MANIFEST.sha256", "MANIFEST.sha256.sig"],
    "another export instant changes only verification.json and the manifest covering it",
  );
  const { spawnSync } = await import("node:child_process");
  const { createHash } = await import("node:crypto");
  const fixed: Array<[string, Buffer]> = [
    ["a.json", Buffer.from('{"a":1}\n')],
    ["b.txt", Buffer.from("b")],
  ];
  const code = `const { writeZip } = await import("./server/provenance/bundle.ts");
    const z = await writeZip([["a.json", Buffer.from('{"a":1}\\n')], ["b.txt", Buffer.from("b")]]);
    process.stdout.write((await import("node:crypto")).createHash("sha256").update(z).digest("hex"));`;
  const here = createHash("sha256")
    .update(await writeZip(fixed))
    .digest("hex");
  for (const TZ of ["UTC", "Pacific/Kiritimati", "America/St_Johns"]) {
    const r = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code], { env: { ...process.env, TZ }, encoding: "utf8" });
    t.equal(r.stdout, here, `same ZIP bytes with TZ=${TZ}`);
  }
  // the DOS timestamp fields are 1980-01-01 00:00 whatever TZ the writer ran in
  t.equal(z1.readUInt16LE(10), 0, "local header time 00:00:00");
  t.equal(z1.readUInt16LE(12), (0 << 9) | (1 << 5) | 1, "local header date 1980-01-01");
});

test("tampering: a changed file, a changed manifest, a missing file, an extra file each fail", (t) => {
  const base = files();
  const changed = new Map(base);
  changed.set("artifact-manifest.json", Buffer.from(changed.get("artifact-manifest.json")!.toString().replace("a.bin", "b.bin")));
  t.deepEqual(failing(verifyBundle(changed, pinned())), ["manifest", "artifact_manifest"], "changed file: manifest hash and artifact manifest fail");

  const rehashed = new Map(changed);
  const lines = rehashed.get("MANIFEST.sha256")!.toString().split("\n");
  lines[0] = `${sha256Hex(rehashed.get("artifact-manifest.json")!)}  artifact-manifest.json`;
  rehashed.set("MANIFEST.sha256", Buffer.from(lines.join("\n")));
  t.deepEqual(failing(verifyBundle(rehashed, pinned())), ["manifest_signature", "artifact_manifest"], "manifest rewritten to match: its signature fails");

  const missing = new Map(base);
  missing.delete("verification.json");
  const mv = verifyBundle(missing, pinned());
  t.equal(mv.verdict, "failed");
  t.ok(failing(mv).includes("bundle_files"), "missing file: bundle_files fails");

  const extra = new Map(base);
  extra.set("payload.sh", Buffer.from("#!/bin/sh\n"));
  t.deepEqual(failing(verifyBundle(extra, pinned())), ["bundle_files"], "extra file: bundle_files fails");

  const receiptChanged = new Map(base);
  receiptChanged.set("receipt.json", Buffer.from(JSON.stringify({ ...receipt, serial: 8 })));
  const rc = verifyBundle(receiptChanged, pinned());
  t.ok(failing(rc).includes("signature") && failing(rc).includes("manifest"), "changed receipt: its signature and the manifest fail");

  const sigFlip = new Map(base);
  const sig = Buffer.from(sigFlip.get("MANIFEST.sha256.sig")!.toString().trim(), "base64");
  sig[5]! ^= 1;
  sigFlip.set("MANIFEST.sha256.sig", Buffer.from(sig.toString("base64")));
  t.deepEqual(failing(verifyBundle(sigFlip, pinned())), ["manifest_signature"], "flipped manifest signature bit");
  t.end();
});

test("pinning: another instance's bundle fails; fingerprint pin; integrity-only says so", (t) => {
  const theirs = files(other, buildReceipt({ artifact, claims: {} }, { serial: 1, previous: null }, other, new Date()));
  const v = verifyBundle(theirs, pinned());
  t.equal(v.verdict, "failed", "pinned to our key: another instance's bundle fails");
  t.ok(failing(v).includes("signer_key"));
  t.equal(
    verifyBundle(theirs, { backend: oqs, expectedFingerprint: other.fingerprint, integrityOnly: false }).verdict,
    "valid",
    "fingerprint pin of the right key",
  );
  t.equal(
    verifyBundle(theirs, { backend: oqs, expectedFingerprint: signer.fingerprint, integrityOnly: false }).verdict,
    "failed",
    "fingerprint pin of another key",
  );
  const io = verifyBundle(theirs, { backend: oqs, integrityOnly: true });
  t.equal(io.verdict, "valid", "integrity-only: valid against the bundled key");
  t.equal(io.issuer_authenticated, false, "and not authenticated");
  t.ok(
    io.checks.some((c) => /not authenticated/.test(c.detail)),
    "a check says the issuer was not authenticated",
  );
  // swapping in our key file does not help an attacker: the signatures no longer match
  const swapped = new Map(theirs);
  swapped.set("signer-public-key.json", files().get("signer-public-key.json")!);
  t.equal(verifyBundle(swapped, pinned()).verdict, "failed", "their bundle with our key file fails");
  t.equal(verifyBundle(theirs, { backend: oqs, integrityOnly: false }).verdict, "failed", "no pin and not integrity-only: fails");
  t.end();
});

test("an unsupported evidence version or schema gives verdict unsupported_schema", (t) => {
  const f = files();
  const meta = JSON.parse(f.get("signature-metadata.json")!.toString());
  const v2 = new Map(f);
  v2.set("signature-metadata.json", Buffer.from(JSON.stringify({ ...meta, evidence_version: 2 })));
  t.equal(verifyBundle(v2, pinned()).verdict, "unsupported_schema", "evidence_version 2");
  const s2 = new Map(f);
  s2.set("receipt.json", Buffer.from(JSON.stringify({ ...receipt, schema: "svc.provenance.receipt.v2" })));
  t.equal(verifyBundle(s2, pinned()).verdict, "unsupported_schema", "receipt schema v2");
  t.end();
});

test("garbage in every file fails, never throws", (t) => {
  for (const name of BUNDLE_FILES) {
    const f = files();
    f.set(name, Buffer.from("\u0000not json{"));
    const v = verifyBundle(f, pinned());
    t.equal(v.verdict, "failed", `${name} garbage: failed`);
  }
  t.end();
});

test("a file that is not UTF-8 fails bundle_files, though read with replacement characters it is a valid bundle's", (t) => {
  // the strings hold U+FFFD; each form below decodes with replacement to the same text
  const r = buildReceipt(
    { artifact: { ...artifact, name: `a${FFFD}.bin` }, claims: FFFD_CLAIMS },
    { serial: 8, previous: "b".repeat(64) },
    signer,
    new Date("2026-11-22T01:00:00.000Z"),
  );
  const base = files(signer, r);
  const premise = verifyBundle(base, pinned());
  if (premise.verdict !== "valid") throw new Error(`the bundle with U+FFFD in its strings does not verify: ${JSON.stringify(premise.checks)}`);
  const detailOf = (v: { checks: Array<{ name: string; detail: string }> }, name: string) => v.checks.find((c) => c.name === name)?.detail;
  const edit = (name: string, to: (b: Buffer) => Buffer) => resigned(new Map(base).set(name, to(base.get(name)!)), signer);
  const cases: Array<[string, string, Map<string, Buffer>, string | null]> = [
    ...INVALID_UTF8.map(([label, bytes, n]): [string, string, Map<string, Buffer>, string | null] => [
      `receipt.json, ${label} in the claims`,
      "receipt.json",
      edit("receipt.json", (b) => withForm(b, bytes, n)),
      null,
    ]),
    ["receipt.json, a truncated sequence at its end", "receipt.json", edit("receipt.json", (b) => Buffer.concat([b, Buffer.from([0xe2, 0x82])])), null],
    [
      "artifact-manifest.json, a lone byte FF in the name",
      "artifact-manifest.json",
      edit("artifact-manifest.json", (b) => withForm(b, Buffer.from([0xff]), 1, "")),
      "artifact_manifest",
    ],
    [
      "verification.json, an encoded surrogate in the appliance version",
      "verification.json",
      edit("verification.json", (b) => insertAfter(b, '"0.1.0', Buffer.from([0xed, 0xa0, 0x80]))),
      null,
    ],
    [
      "signature-metadata.json, an overlong NUL in the schema",
      "signature-metadata.json",
      edit("signature-metadata.json", (b) => insertAfter(b, `"schema": "svc.provenance.receipt.v1`, Buffer.from([0xc0, 0x80]))),
      "evidence_version",
    ],
    [
      "signer-public-key.json, a lone byte FF in the algorithm",
      "signer-public-key.json",
      edit("signer-public-key.json", (b) => insertAfter(b, "ML-DSA-65", Buffer.from([0xff]))),
      "signer_key",
    ],
    ["MANIFEST.sha256, a line of one byte FF", "MANIFEST.sha256", resigned(base, signer, (m) => Buffer.concat([m, Buffer.from([0xff, 0x0a])])), null],
    [
      "MANIFEST.sha256.sig, a byte FF after the base64",
      "MANIFEST.sha256.sig",
      new Map(base).set("MANIFEST.sha256.sig", Buffer.concat([base.get("MANIFEST.sha256.sig")!, Buffer.from([0xff])])),
      null,
    ],
  ];
  for (const [label, file, f, own] of cases) {
    const v = verifyBundle(f, pinned());
    const sentence = `${file} is not valid UTF-8.`;
    t.deepEqual(
      { verdict: v.verdict, bundle_files: detailOf(v, "bundle_files"), ...(own ? { [own]: detailOf(v, own) } : {}) },
      { verdict: "failed", bundle_files: sentence, ...(own ? { [own]: sentence } : {}) },
      `${label}: failed, "${sentence}"`,
    );
  }
  t.end();
});

function zipOf(entries: Array<[string, Buffer, number?]>): Promise<Buffer> {
  return new Promise((resolve) => {
    const z = new yazl.ZipFile();
    const chunks: Buffer[] = [];
    z.outputStream.on("data", (c: Buffer) => chunks.push(c));
    z.outputStream.on("end", () => resolve(Buffer.concat(chunks)));
    for (const [n, d, mode] of entries) z.addBuffer(d, n, { mode: mode ?? 0o100644 });
    z.end();
  });
}

async function refused(t: test.Test, buf: Buffer, re: RegExp, what: string, max?: number): Promise<void> {
  try {
    await readZip(buf, max);
    t.fail(`${what}: accepted`);
  } catch (e) {
    t.ok(e instanceof BundleError && e.kind === "refused", `${what}: refused`);
    t.match((e as Error).message, re, `${what}: ${(e as Error).message}`);
  }
}

test("the ZIP reader refuses ../ entries, absolute paths, links, duplicates and oversized content", async (t) => {
  const good = [...files()];
  // yazl will not write a ../ name: write a same-length name and patch the bytes
  const slip = await zipOf([...good, ["xx/evil.json", Buffer.from("{}")]]);
  const patched = Buffer.from(slip.toString("latin1").split("xx/evil.json").join("../evil.json"), "latin1");
  await refused(t, patched, /'\.\.' path segment/, "../ entry");
  const abs = Buffer.from(slip.toString("latin1").split("xx/evil.json").join("/x/evil.json"), "latin1");
  await refused(t, abs, /absolute path/, "absolute path");
  await refused(t, await zipOf([...good, ["link.json", Buffer.from("/etc/passwd"), 0o120777]]), /symbolic link/, "symlink entry");
  await refused(t, await zipOf([...good, ["receipt.json", Buffer.from("{}")]]), /twice/, "duplicate name");
  await refused(t, await zipOf(good), /MiB limit for a bundle/, "over the size limit (limit lowered for the test)", 1000);
  try {
    await readZip(Buffer.from("this is not a zip"));
    t.fail("accepted");
  } catch (e) {
    t.ok(e instanceof BundleError && e.kind === "unreadable", "not a ZIP: unreadable");
  }
  const truncated = (await zipOf(good)).subarray(0, 500);
  try {
    await readZip(truncated);
    t.fail("accepted");
  } catch (e) {
    t.ok(e instanceof BundleError && e.kind === "unreadable", "a truncated ZIP: unreadable");
  }
  const ok = await readZip(await writeZip(good));
  t.equal(verifyBundle(ok, pinned()).verdict, "valid", "the untouched ZIP reads and verifies");
});

async function rejects(t: test.Test, p: Promise<unknown>, re: RegExp, what: string): Promise<void> {
  try {
    await p;
    t.fail(`${what}: accepted`);
  } catch (e) {
    t.match((e as Error).message, re, what);
  }
}

test("the json-dir reader takes plain files and refuses links and subdirectories", async (t) => {
  const { dir, cleanup } = await tempDir();
  const write = async (d: string): Promise<void> => {
    await mkdir(d, { recursive: true });
    for (const [n, b] of files()) await writeFile(join(d, n), b);
  };
  await write(join(dir, "ok"));
  t.equal(verifyBundle(await readJsonDir(join(dir, "ok")), pinned()).verdict, "valid", "json-dir verifies");
  await write(join(dir, "link"));
  await symlink("/etc/hostname", join(dir, "link", "extra.json"));
  await rejects(t, readJsonDir(join(dir, "link")), /symbolic link/, "a symlink is refused");
  await write(join(dir, "sub"));
  await mkdir(join(dir, "sub", "nested"));
  await rejects(t, readJsonDir(join(dir, "sub")), /not a regular file/, "a subdirectory is refused");
  await rejects(t, readJsonDir(join(dir, "nope")), /cannot be read/, "a missing directory is unreadable");
  await cleanup();
});
