// svc-verify-bundle as a child process: ZIP and json-dir, every tamper and refusal case,
// exit codes 0/1/2/3, --json, pinning, --integrity-only.
import test from "tape";
import { spawnSync } from "node:child_process";
import { cleanup, fp, otherSigner, p, run, runAll } from "./cli-fixtures.js";

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
