// svc-verify-bundle as a child process: ZIP and json-dir, every tamper and refusal case,
// exit codes 0/1/2/3, --json, pinning, --integrity-only.
import test from "tape";
import { spawnSync } from "node:child_process";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { buildBundleFiles, writeZip } from "../../server/provenance/bundle.js";
import { artifactDigest, buildReceipt, verifyReceipt } from "../../server/provenance/receipt.js";
import { createBackend } from "../../server/provenance/signer.js";
import { cleanup, fp, otherSigner, p, run, runAll, signer } from "./cli-fixtures.js";
import { FFFD, FFFD_CLAIMS, bytesOf, insertAfter, resigned, withForm } from "./utf8-forms.js";

test("svc-verify-bundle: exit codes for valid, tampered, refused and unsupported bundles", async (t) => {
  const pin = ["--public-key", p("pub.json")];
  const cases: Array<[string, string[], number]> = [
    ["valid zip", ["--bundle", p("bundle.zip"), ...pin], 0],
    ["valid zip, fingerprint pin only", ["--bundle", p("bundle.zip"), "--expected-fingerprint", fp], 0],
    ["valid json-dir", ["--bundle", p("bundle-dir"), "--format", "json-dir", ...pin], 0],
    ["valid with the artifact", ["--bundle", p("bundle.zip"), ...pin, "--artifact", p("artifact.bin")], 0],
    ["another artifact", ["--bundle", p("bundle.zip"), ...pin, "--artifact", p("other-artifact.bin")], 1],
    ["changed file", ["--bundle", p("changed.zip"), ...pin], 1],
    ["changed manifest", ["--bundle", p("manifest.zip"), ...pin], 1],
    ["missing file", ["--bundle", p("missing.zip"), ...pin], 1],
    ["extra file", ["--bundle", p("extra.zip"), ...pin], 1],
    ["../ entry", ["--bundle", p("slip.zip"), ...pin], 1],
    ["symlink entry", ["--bundle", p("link.zip"), ...pin], 1],
    ["symlink in json-dir", ["--bundle", p("link-dir"), ...pin], 1],
    ["another instance's bundle", ["--bundle", p("foreign.zip"), ...pin], 1],
    ["wrong fingerprint", ["--bundle", p("bundle.zip"), "--expected-fingerprint", otherSigner.fingerprint], 1],
    ["evidence version 2", ["--bundle", p("ev2-dir"), "--format", "json-dir", ...pin], 3],
    ["no pin", ["--bundle", p("bundle.zip")], 2],
    ["not a zip", ["--bundle", p("garbage.zip"), ...pin], 2],
    ["missing bundle", ["--bundle", p("nope.zip"), ...pin], 2],
    ["bad format", ["--bundle", p("bundle.zip"), "--format", "tar", ...pin], 2],
    ["integrity only", ["--bundle", p("foreign.zip"), "--integrity-only"], 0],
  ];
  const results = await runAll(cases.map(([, args]) => ["svc-verify-bundle", args]));
  cases.forEach(([name, , code], i) => {
    const r = results[i]!;
    t.equal(r.code, code, `${name}: exit ${code}${r.code !== code ? ` (${r.stdout}${r.stderr})` : ""}`);
    if (code === 2) t.equal(r.stderr.trim().split("\n").length, 1, `${name}: one line on stderr`);
  });
  t.match(results[9]!.stdout, /'\.\.' path segment/, "the ../ entry is named as the reason");
  t.match(results[19]!.stdout, /issuer was not authenticated/, "integrity-only says so");
});

test("both verifiers work with the network made unreachable", async (t) => {
  const preload = new URL("./no-network.mjs", import.meta.url).pathname;
  // the preload does trap: a connection or a name lookup under it ends the process with 97
  for (const code of [
    "require('node:net').connect(9, '127.0.0.1').on('error', () => process.exit(0))",
    "require('node:dns').lookup('localhost', () => process.exit(0))",
  ]) {
    const probe = spawnSync(process.execPath, ["--import", preload, "-e", code], { encoding: "utf8", timeout: 30_000 });
    t.equal(probe.status, 97, `under the preload, ${code.split(".")[0]}... exits 97`);
  }
  const pin = ["--public-key", p("pub.json")];
  const [zip, dir, rec] = [
    await run("svc-verify-bundle", ["--bundle", p("bundle.zip"), ...pin, "--artifact", p("artifact.bin")], [preload]),
    await run("svc-verify-bundle", ["--bundle", p("bundle-dir"), "--format", "json-dir", "--expected-fingerprint", fp], [preload]),
    await run("svc-verify-receipt", ["--receipt", p("receipt.json"), ...pin, "--artifact", p("artifact.bin")], [preload]),
  ];
  for (const [name, r] of [
    ["svc-verify-bundle zip", zip],
    ["svc-verify-bundle json-dir", dir],
    ["svc-verify-receipt", rec],
  ] as const) {
    t.equal(r!.code, 0, `${name}: exit 0 without the network`);
    t.notOk(r!.stderr.includes("NETWORK ACCESS"), `${name}: no connection attempted`);
  }
});

test("svc-verify-bundle: a bundle file or key file that is not UTF-8 is refused, though read with replacement characters it verifies", async (t) => {
  // a genuine bundle whose strings hold U+FFFD, its manifest signed again over each change
  const artifact = { name: `a${FFFD}.bin`, ...artifactDigest(Buffer.from("bytes")), media_type: "application/octet-stream" };
  const r = buildReceipt({ artifact, claims: FFFD_CLAIMS }, { serial: 2, previous: null }, signer, new Date("2026-11-22T01:00:00.000Z"));
  const known = [{ publicKey: signer.publicKey, fingerprint: signer.fingerprint }];
  const verification = verifyReceipt(r, { backend: await createBackend("noble"), keys: known, trustedFingerprints: [signer.fingerprint] });
  const base = new Map(buildBundleFiles({ receipt: r, verification, signer, exportedAt: new Date("2026-11-22T02:00:00.000Z"), applianceVersion: "0.1.0" }));
  const edit = (name: string, to: (b: Buffer) => Buffer) => resigned(new Map(base).set(name, to(base.get(name)!)), signer);
  const bundles: Array<[string, string, Map<string, Buffer>]> = [
    ["receipt.json, a lone byte FF in the claims", "receipt.json", edit("receipt.json", (b) => withForm(b, Buffer.from([0xff]), 1))],
    ["receipt.json, an encoded surrogate in the claims", "receipt.json", edit("receipt.json", (b) => withForm(b, Buffer.from([0xed, 0xa0, 0x80]), 3))],
    [
      "artifact-manifest.json, a lone byte 80 in the name",
      "artifact-manifest.json",
      edit("artifact-manifest.json", (b) => withForm(b, Buffer.from([0x80]), 1, "")),
    ],
    [
      "verification.json, a code point above U+10FFFF",
      "verification.json",
      edit("verification.json", (b) => insertAfter(b, '"0.1.0', Buffer.from([0xf4, 0x90, 0x80, 0x80]))),
    ],
  ];
  const pin = ["--public-key", p("pub.json")];
  const cases: Array<[string, string[], number, string]> = [];
  for (const [i, [label, file, files]] of bundles.entries()) {
    const entries = [...files];
    await writeFile(p(`not-utf8-${i}.zip`), await writeZip(entries));
    await mkdir(p(`not-utf8-dir-${i}`));
    for (const [n, b] of entries) await writeFile(join(p(`not-utf8-dir-${i}`), n), b);
    cases.push([`zip: ${label}`, ["--bundle", p(`not-utf8-${i}.zip`), ...pin, "--json"], 1, `${file} is not valid UTF-8.`]);
    cases.push([`json-dir: ${label}`, ["--bundle", p(`not-utf8-dir-${i}`), ...pin, "--json"], 1, `${file} is not valid UTF-8.`]);
  }
  await writeFile(p("fffd.zip"), await writeZip([...base]));
  await writeFile(p("not-utf8-key.json"), insertAfter(await readFile(p("pub.json")), "{", bytesOf('"n":"', [0xe0, 0x80, 0x80], '",')));
  cases.push([
    "key file with an overlong form in a member",
    ["--bundle", p("fffd.zip"), "--public-key", p("not-utf8-key.json")],
    2,
    `The public key file ${p("not-utf8-key.json")} is not valid UTF-8.`,
  ]);
  const results = await runAll(cases.map(([, args]) => ["svc-verify-bundle", args]));
  cases.forEach(([label, , code, sentence], i) => {
    const r = results[i]!;
    if (code === 2) {
      t.deepEqual({ code: r.code, stderr: r.stderr }, { code, stderr: sentence + "\n" }, `${label}: exit 2, ${sentence}`);
      return;
    }
    let check: unknown = r.stdout;
    try {
      check = (JSON.parse(r.stdout) as { checks: Array<{ name: string }> }).checks.find((c) => c.name === "bundle_files");
    } catch {
      /* not JSON: compared as it is */
    }
    t.deepEqual({ code: r.code, check }, { code, check: { name: "bundle_files", ok: false, detail: sentence } }, `${label}: exit 1, bundle_files: ${sentence}`);
  });
});

test("svc-verify-bundle --json prints the verify structure with the bundle checks", async (t) => {
  const [r] = await runAll([["svc-verify-bundle", ["--bundle", p("bundle.zip"), "--public-key", p("pub.json"), "--json"]]]);
  t.equal(r!.code, 0);
  const out = JSON.parse(r!.stdout);
  t.equal(out.verdict, "valid");
  t.equal(out.valid, true);
  t.equal(out.issuer_authenticated, true);
  for (const name of ["schema", "signature", "signer", "bundle_files", "manifest", "manifest_signature", "signer_key", "evidence_version"]) {
    t.ok(
      out.checks.some((c: any) => c.name === name && c.ok),
      `${name} passes`,
    );
  }
  await cleanup();
});
