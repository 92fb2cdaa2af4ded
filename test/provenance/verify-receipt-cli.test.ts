// svc-verify-receipt as a child process: exit codes 0/1/2/3, --json, --help, pinning by
// key file and by fingerprint, --artifact, --integrity-only.
import test from "tape";
import { cleanup, fp, otherSigner, p, receipt, runAll } from "./cli-fixtures.js";

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

test("cleanup", async (t) => {
  await cleanup();
  t.pass("temporary files removed");
});
