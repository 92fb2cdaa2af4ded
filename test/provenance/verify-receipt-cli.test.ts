// svc-verify-receipt as a child process: exit codes 0/1/2/3, --json, --help, pinning by
// key file and by fingerprint, --artifact, --integrity-only.
import test from "tape";
import { readFile, writeFile } from "node:fs/promises";
import { artifactDigest, buildReceipt } from "../../server/provenance/receipt.js";
import { cleanup, fp, otherSigner, p, receipt, runAll, signer } from "./cli-fixtures.js";
import { FFFD, FFFD_CLAIMS, INVALID_UTF8, bytesOf, insertAfter, withForm } from "./utf8-forms.js";

test("svc-verify-receipt: exit codes and output for each case", async (t) => {
  const cases: Array<[string, string[], number]> = [
    ["valid, pinned by key file", ["--receipt", p("receipt.json"), "--public-key", p("pub.json")], 0],
    ["valid, raw base64 key", ["--receipt", p("receipt.json"), "--public-key", p("pub.b64")], 0],
    ["valid, key file and fingerprint", ["--receipt", p("receipt.json"), "--public-key", p("pub.json"), "--expected-fingerprint", fp.toUpperCase()], 0],
    ["valid with the artifact", ["--receipt", p("receipt.json"), "--public-key", p("pub.json"), "--artifact", p("artifact.bin")], 0],
    ["another artifact", ["--receipt", p("receipt.json"), "--public-key", p("pub.json"), "--artifact", p("other-artifact.bin")], 1],
    ["tampered", ["--receipt", p("tampered.json"), "--public-key", p("pub.json")], 1],
    ["another instance's receipt", ["--receipt", p("foreign.json"), "--public-key", p("pub.json")], 1],
    ["wrong expected fingerprint", ["--receipt", p("receipt.json"), "--public-key", p("pub.json"), "--expected-fingerprint", otherSigner.fingerprint], 1],
    ["unsupported schema", ["--receipt", p("v2.json"), "--public-key", p("pub.json")], 3],
    ["no pin", ["--receipt", p("receipt.json")], 2],
    ["fingerprint without a key file", ["--receipt", p("receipt.json"), "--expected-fingerprint", fp], 1],
    ["missing receipt file", ["--receipt", p("nope.json"), "--public-key", p("pub.json")], 2],
    ["receipt not JSON", ["--receipt", p("not-json.json"), "--public-key", p("pub.json")], 2],
    ["key file not a key", ["--receipt", p("receipt.json"), "--public-key", p("artifact.bin")], 2],
    ["unknown option", ["--receipt", p("receipt.json"), "--frob"], 2],
    ["bad fingerprint", ["--receipt", p("receipt.json"), "--public-key", p("pub.json"), "--expected-fingerprint", "xyz"], 2],
    ["missing artifact", ["--receipt", p("receipt.json"), "--public-key", p("pub.json"), "--artifact", p("nope.bin")], 2],
    ["integrity only with a key", ["--receipt", p("receipt.json"), "--public-key", p("other-pub.json"), "--integrity-only"], 1],
    ["integrity only without a key", ["--receipt", p("receipt.json"), "--integrity-only"], 1],
  ];
  const results = await runAll(cases.map(([, args]) => ["svc-verify-receipt", args]));
  cases.forEach(([name, , code], i) => {
    const r = results[i]!;
    t.equal(r.code, code, `${name}: exit ${code}`);
    if (code === 2) {
      t.equal(r.stderr.trim().split("\n").length, 1, `${name}: one line on stderr (${r.stderr.trim()})`);
      t.notOk(/\n\s+at /.test(r.stderr), `${name}: no stack trace`);
    } else {
      t.match(r.stdout, /^verdict: (valid|failed|unsupported_schema)/, `${name}: verdict printed`);
    }
  });
  t.match(results[0]!.stdout, /verdict: valid/);
  t.notOk(results[0]!.stdout.includes("not authenticated"), "a pinned run does not say unauthenticated");
  t.match(results[9]!.stderr, /--public-key or --expected-fingerprint/, "no pin: says what to give");
  // without a key file the signature check cannot be carried out: a failed check, not a usage error
  for (const i of [10, results.length - 1]) {
    t.match(results[i]!.stdout, /signature.*not available to this verifier/, `${cases[i]![0]}: the signature check says why it failed`);
  }
  t.match(results[results.length - 1]!.stdout, /issuer was not authenticated/, "integrity only without a key: says the issuer was not authenticated");
});

test("svc-verify-receipt: --json prints the verify structure; --integrity-only says the issuer was not authenticated", async (t) => {
  const [json, io, help] = await runAll([
    ["svc-verify-receipt", ["--receipt", p("tampered.json"), "--public-key", p("pub.json"), "--json"]],
    ["svc-verify-receipt", ["--receipt", p("foreign.json"), "--public-key", p("other-pub.json"), "--integrity-only"]],
    ["svc-verify-receipt", ["--help"]],
  ]);
  t.equal(json!.code, 1);
  const out = JSON.parse(json!.stdout);
  t.equal(out.verdict, "failed");
  t.equal(out.valid, false);
  t.deepEqual(
    out.checks.map((c: any) => c.name),
    ["schema", "canonical_body", "signed_fields", "signature", "signer", "artifact_commitment"],
  );
  t.equal(out.receipt_id, receipt.receipt_id);
  t.equal(out.signer_fingerprint, fp);
  t.equal(io!.code, 0, "integrity-only with the receipt's own key: exit 0");
  t.match(io!.stdout, /issuer was not authenticated/);
  t.equal(help!.code, 0);
  t.match(help!.stdout, /Exit codes/);
});

test("svc-verify-receipt: a receipt or key file that is not UTF-8 is refused (exit 2), though read with replacement characters it verifies", async (t) => {
  // a genuine receipt whose strings hold U+FFFD: each form decodes with replacement to its text
  const artifact = { name: `a${FFFD}.bin`, ...artifactDigest(Buffer.from("bytes")), media_type: "application/octet-stream" };
  const genuine = Buffer.from(
    JSON.stringify(buildReceipt({ artifact, claims: FFFD_CLAIMS }, { serial: 2, previous: null }, signer, new Date("2026-11-22T01:00:00.000Z"))),
  );
  const key = await readFile(p("pub.json"));
  const receipts: Array<[string, Buffer]> = [
    ...INVALID_UTF8.map(([label, bytes, n]): [string, Buffer] => [label, withForm(genuine, bytes, n)]),
    ["a truncated sequence at the end of the file", Buffer.concat([genuine, Buffer.from([0xe2, 0x82])])],
    ["a BOM, then a lone byte FF", Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), withForm(genuine, Buffer.from([0xff]), 1)])],
    ["a UTF-16 BOM (FF FE) before the text", Buffer.concat([Buffer.from([0xff, 0xfe]), genuine])],
  ];
  const keys: Array<[string, Buffer]> = [
    ["key file with a member holding a lone byte FF", insertAfter(key, "{", bytesOf('"n":"', [0xff], '",'))],
    ["key file with an encoded surrogate in a member name", insertAfter(key, "{", bytesOf('"', [0xed, 0xa0, 0x80], '":1,'))],
    ["raw base64 key followed by a byte FF", Buffer.concat([await readFile(p("pub.b64")), Buffer.from([0xff])])],
  ];
  const cases: Array<[string, string[], string]> = [];
  for (const [i, [label, bytes]] of receipts.entries()) {
    await writeFile(p(`not-utf8-${i}.json`), bytes);
    cases.push([
      `receipt: ${label}`,
      ["--receipt", p(`not-utf8-${i}.json`), "--public-key", p("pub.json")],
      `The receipt ${p(`not-utf8-${i}.json`)} is not valid UTF-8.`,
    ]);
  }
  await writeFile(p("fffd.json"), genuine);
  for (const [i, [label, bytes]] of keys.entries()) {
    await writeFile(p(`not-utf8-key-${i}`), bytes);
    cases.push([
      label,
      ["--receipt", p("fffd.json"), "--public-key", p(`not-utf8-key-${i}`)],
      `The public key file ${p(`not-utf8-key-${i}`)} is not valid UTF-8.`,
    ]);
  }
  const results = await runAll(cases.map(([, args]) => ["svc-verify-receipt", args]));
  cases.forEach(([label, , sentence], i) => {
    const r = results[i]!;
    t.deepEqual({ code: r.code, stderr: r.stderr, stdout: r.stdout }, { code: 2, stderr: sentence + "\n", stdout: "" }, `${label}: exit 2, ${sentence}`);
  });
});

test("cleanup", async (t) => {
  await cleanup();
  t.pass("temporary files removed");
});
