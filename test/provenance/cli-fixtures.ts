// Fixtures of the verifier CLI tests: a home with keys, receipts and bundles (good and
// tampered) on disk, and a helper that runs the CLIs as child processes.
import { spawn } from "node:child_process";
import { mkdir, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import yazl from "yazl";
import { buildBundleFiles, writeZip } from "../../server/provenance/bundle.js";
import { bootstrap, publicKeyDocument } from "../../server/provenance/keys.js";
import { artifactDigest, buildReceipt, verifyReceipt, type Receipt } from "../../server/provenance/receipt.js";
import { createBackend, createSigner, type Signer } from "../../server/provenance/signer.js";
import { distIsCurrent, newestSourceMs } from "../dist.js";
import { configFor, tempDir } from "./helpers.js";

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}
const entries = new Map<string, string[]>();
let sources: number | null = null;

/**
 * What runs `bin`: its compiled form, as `npm install` links it, when dist/ holds one no older
 * than every source (npm ci builds it); else the TypeScript through tsx, so that an edit is
 * tested without a build. The compiled one starts in a third of the time. Decided once per CLI.
 */
function entryOf(bin: string): string[] {
  let entry = entries.get(bin);
  if (entry === undefined) {
    sources ??= newestSourceMs();
    const compiled = `dist/bin/${bin}.js`;
    entry = distIsCurrent(compiled, sources) ? [compiled] : ["--import", "tsx", `bin/${bin}.ts`];
    entries.set(bin, entry);
  }
  return entry;
}

/** Runs the CLI `bin` (entryOf); `preload` files are imported first (e.g. no-network.mjs). */
export function run(bin: string, args: string[], preload: string[] = []): Promise<Run> {
  const entry = entryOf(bin);
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [...preload.flatMap((f) => ["--import", f]), ...entry, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, SVC_ENGINE_LOG_LEVEL: "" },
    });
    let stdout = "";
    let stderr = "";
    c.stdout.on("data", (d) => (stdout += d));
    c.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => c.kill("SIGKILL"), 120_000); // generous: the machine may be shared
    c.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
// at most three children at a time on a shared 2-core machine
export async function runAll(cases: Array<[string, string[]]>): Promise<Run[]> {
  const out: Run[] = new Array(cases.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: 3 }, async () => {
      while (next < cases.length) {
        const i = next++;
        out[i] = await run(cases[i]![0], cases[i]![1]);
      }
    }),
  );
  return out;
}

export const { dir, cleanup } = await tempDir();
const oqs = await createBackend("liboqs");
const boot = await bootstrap(configFor(join(dir, "a")), oqs);
export const signer = createSigner(oqs, boot.keyring.active);
const otherBoot = await bootstrap(configFor(join(dir, "b")), await createBackend("noble"));
export const otherSigner = createSigner(await createBackend("noble"), otherBoot.keyring.active);
const artifactBytes = Buffer.from("the artifact");
const artifact = { name: "a.bin", ...artifactDigest(artifactBytes), media_type: "application/octet-stream" };
export const p = (n: string) => join(dir, n);

function issue(s: Signer, serial = 1): Receipt {
  return buildReceipt({ artifact, claims: { stage: "prod" } }, { serial, previous: null }, s, new Date("2026-11-22T01:00:00.000Z"));
}
async function bundleFiles(s: Signer, r: Receipt): Promise<Array<[string, Buffer]>> {
  const verification = verifyReceipt(r, { backend: oqs, keys: [{ publicKey: s.publicKey, fingerprint: s.fingerprint }], trustedFingerprints: [s.fingerprint] });
  return buildBundleFiles({ receipt: r, verification, signer: s, exportedAt: new Date("2026-11-22T02:00:00.000Z"), applianceVersion: "0.1.0" });
}
async function writeDir(d: string, entries: Array<[string, Buffer]>): Promise<void> {
  await mkdir(d, { recursive: true });
  for (const [n, b] of entries) await writeFile(join(d, n), b);
}

export const receipt = issue(signer);
await writeFile(p("receipt.json"), JSON.stringify(receipt));
await writeFile(p("pub.json"), JSON.stringify(publicKeyDocument(boot.keyring)));
await writeFile(p("pub.b64"), Buffer.from(signer.publicKey).toString("base64") + "\n");
await writeFile(p("other-pub.json"), JSON.stringify(publicKeyDocument(otherBoot.keyring)));
await writeFile(p("artifact.bin"), artifactBytes);
await writeFile(p("other-artifact.bin"), Buffer.from("something else"));
const tampered = JSON.parse(JSON.stringify(receipt));
tampered.claims.stage = "dev";
await writeFile(p("tampered.json"), JSON.stringify(tampered));
await writeFile(p("v2.json"), JSON.stringify({ ...receipt, schema: "svc.provenance.receipt.v2" }));
await writeFile(p("foreign.json"), JSON.stringify(issue(otherSigner)));
await writeFile(p("not-json.json"), "{");
const good = await bundleFiles(signer, receipt);
await writeFile(p("bundle.zip"), await writeZip(good));
await writeDir(p("bundle-dir"), good);
const changed = good.map(([n, b]): [string, Buffer] => [n, n === "verification.json" ? Buffer.from(b.toString().replace("valid", "VALID")) : b]);
await writeFile(p("changed.zip"), await writeZip(changed));
const manifestChanged = good.map(([n, b]): [string, Buffer] => [
  n,
  n === "MANIFEST.sha256" ? Buffer.from(b.toString().replace(/^[0-9a-f]/, (c) => (c === "0" ? "1" : "0"))) : b,
]);
await writeFile(p("manifest.zip"), await writeZip(manifestChanged));
await writeFile(p("missing.zip"), await writeZip(good.filter(([n]) => n !== "signer-public-key.json")));
await writeFile(p("extra.zip"), await writeZip([...good, ["notes.txt", Buffer.from("hi")]]));
const slip = await writeZip([...good, ["xx/evil.json", Buffer.from("{}")]]);
await writeFile(p("slip.zip"), Buffer.from(slip.toString("latin1").split("xx/evil.json").join("../evil.json"), "latin1"));
const meta = JSON.parse(good.find(([n]) => n === "signature-metadata.json")![1].toString());
await writeDir(
  p("ev2-dir"),
  good.map(([n, b]): [string, Buffer] => [n, n === "signature-metadata.json" ? Buffer.from(JSON.stringify({ ...meta, evidence_version: 2 })) : b]),
);
await writeFile(p("foreign.zip"), await writeZip(await bundleFiles(otherSigner, issue(otherSigner))));
await writeDir(p("link-dir"), good);
await symlink(p("receipt.json"), join(p("link-dir"), "extra.json"));
await writeFile(p("garbage.zip"), "not a zip at all");
const linkZip = await new Promise<Buffer>((resolve) => {
  const z = new yazl.ZipFile();
  const chunks: Buffer[] = [];
  z.outputStream.on("data", (c: Buffer) => chunks.push(c));
  z.outputStream.on("end", () => resolve(Buffer.concat(chunks)));
  for (const [n, b] of good) z.addBuffer(n === "receipt.json" ? Buffer.from("/etc/passwd") : b, n, { mode: n === "receipt.json" ? 0o120777 : 0o100644 });
  z.end();
});
await writeFile(p("link.zip"), linkZip);
export const fp = signer.fingerprint;
