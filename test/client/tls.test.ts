// createClient over https with a CA of the caller's own (`ca`): a self-signed server that the
// client does not trust is refused with the certificate's code; the same server trusted through
// `ca` (PEM text, bytes, or a list) serves; `ca` that is not PEM, or given for an http baseUrl,
// is refused when the client is made. Skipped with a sentence where openssl is missing.
import test from "tape";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "../../lib/client.js";
import { EngineUnreachableError, ValidationError } from "../../lib/errors.js";
import { selfSignedCert } from "../lib/self-signed.js";

const LIST = { namespace: "ns", keys: [], total: 0, limit: 1000, offset: 0, next_offset: null };

test("createClient over https: untrusted refused, trusted through ca (text, bytes, list), bad ca refused at creation", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-client-tls-"));
  const pem = selfSignedCert(dir);
  if (!pem) {
    t.skip("openssl could not make a certificate: the TLS cases are skipped");
    await rm(dir, { recursive: true, force: true });
    return;
  }
  const cert = await readFile(pem.cert);
  const server = createServer({ cert, key: await readFile(pem.key) }, (req, res) => {
    const body = JSON.stringify(LIST);
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const baseUrl = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const plain = createClient({ baseUrl, apiKey: "svc_live_x", maxRetries: 0 });
    const err = await plain.list("ns").then(
      () => null,
      (e: unknown) => e,
    );
    await plain.close();
    t.ok(err instanceof EngineUnreachableError, "without ca: engine_unreachable");
    t.equal((err as Error).message, `The service at ${baseUrl} could not be reached (DEPTH_ZERO_SELF_SIGNED_CERT).`, "naming the certificate's code");
    const trusted: Array<[string, string | Uint8Array | string[]]> = [
      ["PEM text", cert.toString("utf8")],
      ["PEM bytes", new Uint8Array(cert)],
      ["a list", [cert.toString("utf8")]],
    ];
    for (const [what, ca] of trusted) {
      const c = createClient({ baseUrl, apiKey: "svc_live_x", maxRetries: 0, ca });
      t.same(await c.list("ns"), LIST, `ca as ${what}: served`);
      t.same(await c.list("ns"), LIST, `ca as ${what}: served again on the kept-alive connection`);
      await c.close();
    }
    const bad: Array<[string, Record<string, unknown>, string]> = [
      ["an http baseUrl", { baseUrl: baseUrl.replace("https:", "http:"), ca: cert.toString("utf8") }, "ca applies to an https baseUrl only."],
      ["not PEM", { baseUrl, ca: "not a certificate" }, "ca must hold PEM certificates (-----BEGIN CERTIFICATE-----)."],
      ["a number", { baseUrl, ca: 5 }, "ca must be PEM text or bytes, or a non-empty list of them."],
      ["an empty list", { baseUrl, ca: [] }, "ca must not be empty."],
    ];
    for (const [what, o, sentence] of bad) {
      try {
        createClient({ apiKey: "svc_live_x", ...o } as never);
        t.fail(`${what}: refused`);
      } catch (e) {
        t.ok(e instanceof ValidationError, `${what}: a ValidationError`);
        t.equal((e as Error).message, sentence, `${what}: ${sentence}`);
      }
    }
  } finally {
    server.close();
    await rm(dir, { recursive: true, force: true });
  }
});
