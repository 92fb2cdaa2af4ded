// SVC_GATE_URL pointing at something that is not an svc gateway: a server that answers 200
// JSON of its own (each data command says the answer is not svc's, naming the URL, instead
// of a TypeError), an https:// URL on a plain http server (no raw OpenSSL text), a
// self-signed https server that is not trusted, and an http:// URL on an https server.
// Every failure is one sentence on stderr with exit 1.
import test from "tape";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createTlsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { mkdtemp, mkdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { writeNpy } from "../../lib/npy.js";
import { selfSignedCert } from "../lib/self-signed.js";

const answer = (req: IncomingMessage, res: ServerResponse) => {
  req.resume();
  req.on("end", () => {
    res.setHeader("content-type", "application/json");
    res.end('{"weird": true}');
  });
};

async function listen(s: ReturnType<typeof createServer>): Promise<number> {
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return (s.address() as AddressInfo).port;
}

const oneLine = (err: string) => err.split("\n").length === 2 && err.endsWith("\n");

test("a server answering 200 JSON that is not svc's: every data command says so in one sentence naming the URL", async (t) => {
  const server = createServer(answer);
  const port = await listen(server);
  const url = `http://127.0.0.1:${port}`;
  const env = { SVC_GATE_URL: url, SVC_API_KEY: "svc_live_x" };
  const dir = await mkdtemp(join(tmpdir(), "svc-foreign-"));
  try {
    const f = join(dir, "a.npy");
    await writeFile(f, writeNpy({ dtype: "uint8", shape: [3], data: new Uint8Array([1, 2, 3]) }));
    const src = join(dir, "src");
    await mkdir(src);
    await writeFile(join(src, "b.npy"), writeNpy({ dtype: "uint8", shape: [3], data: new Uint8Array([1, 2, 3]) }));
    const out = join(dir, "out.npy");
    const sentence = (what: string, field: string) =>
      `svc: The server at ${url} answered ${what} with JSON that is not svc's (no ${field}): check that SVC_GATE_URL is the address of an svc gateway.\n`;
    for (const [argv, what, field] of [
      [["put", "ns", "k", f], "the put", "namespace"],
      [["get", "ns", "k"], "the get", "key"],
      [["ls", "ns"], "the list", "keys"],
      [["rm", "ns", "k"], "the delete", "namespace"],
      [["serve", "ns", "k", "-o", out], "the get", "version"],
      [["search", "ns"], "the search", "results"],
      [["topk", "ns", "k"], "the top-k query", "metric"],
    ] as const) {
      const r = await svc([...argv], env);
      t.equal(r.code, 1, `svc ${argv.join(" ")}: exit 1`);
      t.equal(r.err, sentence(what, field), `one sentence: ${r.err.trim()}`);
      t.equal(r.out, "", "nothing on stdout");
    }
    t.equal(await stat(out).catch(() => null), null, "serve wrote no file");
    const imp = await svc(["import", "ns", src], env);
    t.equal(imp.code, 1, "import: exit 1");
    t.match(imp.out, /^Imported 0 of 1 files/m, "nothing imported");
    t.ok(
      imp.out.includes(
        `b.npy: The server at ${url} answered a put with JSON that is not svc's (no verdict): check that SVC_GATE_URL is the address of an svc gateway.\n`,
      ),
      `the file's reason: ${imp.out.trim().split("\n").pop()}`,
    );
    t.doesNotMatch(imp.out + imp.err, /TypeError|undefined|not iterable/, "no TypeError text");
  } finally {
    server.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("https:// on a plain http server: one sentence with the http:// address, for data and admin commands", async (t) => {
  const server = createServer(answer);
  const port = await listen(server);
  try {
    const https = `https://127.0.0.1:${port}`;
    const want = `svc: The server at ${https} does not answer in TLS (wrong version number): if it serves plain http, set SVC_GATE_URL to http://127.0.0.1:${port}.\n`;
    const get = await svc(["get", "ns", "k"], { SVC_GATE_URL: https, SVC_API_KEY: "svc_live_x" });
    t.equal(get.code, 1, "get: exit 1");
    t.equal(get.err, want, `get: ${get.err.trim()}`);
    const adm = await svc(["tenant", "list"], { SVC_GATE_URL: https, SVC_GATE_ENGINE_SERVICE_KEY: "s".repeat(40) });
    t.equal(adm.code, 1, "tenant list: exit 1");
    t.equal(
      adm.err,
      `svc: The server at ${https} does not answer in TLS: if it serves plain http, set SVC_GATE_URL to http://127.0.0.1:${port}.\n`,
      `tenant list: ${adm.err.trim()}`,
    );
    const mine = await svc(["usage", "--mine"], { SVC_GATE_URL: https, SVC_API_KEY: "svc_live_x" });
    t.equal(mine.code, 1, "usage --mine: exit 1");
    t.match(mine.err, /^svc: The server at \S+ does not answer in TLS: if it serves plain http, set SVC_GATE_URL to http:/, mine.err.trim());
  } finally {
    server.close();
  }
});

test("a self-signed https server: not trusted (the way out names NODE_EXTRA_CA_CERTS); http:// on it: one sentence", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-foreign-tls-"));
  const pem = selfSignedCert(dir);
  if (!pem) {
    t.skip("openssl could not make a certificate: the TLS cases are skipped");
    await rm(dir, { recursive: true, force: true });
    return;
  }
  const server = createTlsServer({ cert: await readFile(pem.cert), key: await readFile(pem.key) }, answer);
  const port = await listen(server as unknown as ReturnType<typeof createServer>);
  try {
    const https = `https://127.0.0.1:${port}`;
    for (const argv of [
      ["ls", "ns"],
      ["put", "ns", "k", pem.cert, "--bytes"],
    ]) {
      const r = await svc(argv, { SVC_GATE_URL: https, SVC_API_KEY: "svc_live_x" });
      t.equal(r.code, 1, `${argv[0]}: exit 1`);
      t.equal(
        r.err,
        `svc: The TLS certificate of ${https} is not trusted (DEPTH_ZERO_SELF_SIGNED_CERT): set NODE_EXTRA_CA_CERTS to the PEM file of the CA that signed it (of the certificate itself when it is self-signed).\n`,
        `${argv[0]}: ${r.err.trim()}`,
      );
    }
    const plain = await svc(["get", "ns", "k"], { SVC_GATE_URL: `http://127.0.0.1:${port}`, SVC_API_KEY: "svc_live_x" });
    t.equal(plain.code, 1, "http:// on an https server: exit 1");
    t.ok(oneLine(plain.err), "one line");
    t.equal(
      plain.err,
      `svc: The server at http://127.0.0.1:${port} closed the connection without an answer (ECONNRESET): if it serves https, set SVC_GATE_URL to https://127.0.0.1:${port}.\n`,
      plain.err.trim(),
    );
  } finally {
    server.close();
    await rm(dir, { recursive: true, force: true });
  }
});
