// The nginx configuration of docs/operations.md: its limits agree with the servers' own
// (upload limit as JSON, webhook limit, header size, timeouts), and, where nginx and openssl
// are installed, `nginx -t` accepts it and nginx run with it (ports and certificate swapped
// for test ones) proxies TLS requests to a gateway: health, a 60 KiB X-SVC-Metadata header,
// /metrics blocked, http redirected, an oversized webhook body refused.
import test from "tape";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, request } from "undici";
import { MAX_WEBHOOK_BYTES } from "../../server/gateway/billing.js";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { jsonBodyLimit, MAX_HEADER_BYTES } from "../../server/http/limits.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { createTenant, SERVICE_KEY, startTestGateway } from "../gateway/helpers.js";
import { ROOT } from "./files.js";
import { selfSignedCert } from "../lib/self-signed.js";

const doc = readFileSync(join(ROOT, "docs/operations.md"), "utf8");
const block = /```nginx\n([\s\S]*?)```/.exec(doc)?.[1] ?? "";
const sizeOf = (v: string): number => {
  const m = /^(\d+)([kmg]?)$/i.exec(v)!;
  return Number(m[1]) * ({ "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 } as Record<string, number>)[m[2]!.toLowerCase()]!;
};
const directive = (text: string, name: string): string[] => [...text.matchAll(new RegExp(`^\\s*${name}\\s+([^;]+);`, "gm"))].map((m) => m[1]!.trim());
const location = (path: string): string => new RegExp(`location = ${path.replace(/\//g, "\\/")} \\{([^}]*)\\}`).exec(block)?.[1] ?? "";

test("nginx config: its limits agree with the servers'", async (t) => {
  t.ok(block.length > 500, "the guide has an nginx block");
  const defaults = loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY });
  const server = block.slice(block.lastIndexOf("server {"));
  const body = sizeOf(directive(server, "client_max_body_size")[0]!);
  t.ok(
    body >= jsonBodyLimit(defaults.maxUploadBytes),
    `client_max_body_size ${body} admits the largest JSON upload (${jsonBodyLimit(defaults.maxUploadBytes)})`,
  );
  t.ok(body - jsonBodyLimit(defaults.maxUploadBytes) < 2 * 1024 * 1024, "and not much more");
  t.equal(sizeOf(directive(location("/webhooks/payment"), "client_max_body_size")[0]!), MAX_WEBHOOK_BYTES, "the webhook's limit is the gateway's");
  const [count, size] = directive(server, "large_client_header_buffers")[0]!.split(/\s+/);
  t.ok(Number(count) >= 1 && sizeOf(size!) >= MAX_HEADER_BYTES, `header buffers of ${size} hold the ${MAX_HEADER_BYTES}-byte headers the servers accept`);
  const read = Number(directive(server, "proxy_read_timeout")[0]!.replace(/s$/, ""));
  t.ok(read * 1000 > defaults.engineTimeoutMs, `proxy_read_timeout ${read} s is above SVC_GATE_ENGINE_TIMEOUT_MS`);
  const keep = Number(directive(block, "keepalive_timeout")[0]!.replace(/s$/, ""));
  const gatewaySrc = readFileSync(join(ROOT, "server/gateway/server.ts"), "utf8");
  const gatewayKeep = Number(/keepAliveTimeout = ([\d_]+)/.exec(gatewaySrc)![1]!.replace(/_/g, "")) / 1000;
  t.ok(keep < gatewayKeep, `upstream keep-alive ${keep} s is below the gateway's ${gatewayKeep} s`);
  t.deepEqual(
    directive(server, "proxy_set_header").filter((h) => h.startsWith("X-Forwarded-For")),
    ["X-Forwarded-For $remote_addr"],
    "X-Forwarded-For is replaced, not appended to",
  );
  t.match(location("/metrics"), /return 404/, "/metrics is not served on the public name");
});

const has = (cmd: string, args: string[]) => {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  return !r.error && r.status === 0;
};
const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });

test("nginx config: nginx -t accepts it and nginx proxies TLS to a gateway with it", async (t) => {
  if (!has("nginx", ["-v"]) || !has("openssl", ["version"])) {
    t.skip("nginx or openssl is not installed here (apt-get install nginx-light openssl), so the configuration is checked by the previous test only.");
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), "svc-nginx-"));
  const engine = await startEngine(
    loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: join(dir, "engine"), SVC_ENGINE_API_KEYS: SERVICE_KEY, SVC_ENGINE_DEVICE: "cpu" }),
    { logger: { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} } },
  );
  const g = await startTestGateway(engine.url);
  let nginx: ChildProcess | null = null;
  const agent = new Agent({ connect: { rejectUnauthorized: false } });
  try {
    const cert = selfSignedCert(dir);
    t.ok(cert, "a self-signed certificate");
    const [https, http] = [await freePort(), await freePort()];
    const gw = new URL(g.url).host;
    const conf = block
      .replace(/server 10\.0\.0\.\d+:8080/g, `server ${gw}`)
      .replace(/^\s*listen \[::\].*$/gm, "")
      .replace(/listen 443 ssl http2;/, `listen 127.0.0.1:${https} ssl http2;`)
      .replace(/listen 80;/, `listen 127.0.0.1:${http};`)
      .replace(/\/etc\/letsencrypt\/live\/svc\.example\.com\/fullchain\.pem/, cert!.cert)
      .replace(/\/etc\/letsencrypt\/live\/svc\.example\.com\/privkey\.pem/, cert!.key);
    const temp = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map((k) => `${k}_temp_path ${join(dir, k)};`).join("\n");
    writeFileSync(
      join(dir, "nginx.conf"),
      `pid ${join(dir, "nginx.pid")};\nerror_log stderr;\ndaemon off;\nmaster_process off;\nevents {}\nhttp {\naccess_log off;\n${temp}\n${conf}\n}\n`,
    );
    const check = spawnSync("nginx", ["-e", "stderr", "-p", dir, "-c", join(dir, "nginx.conf"), "-t"], { encoding: "utf8" });
    t.equal(check.status, 0, `nginx -t: ${check.stderr.trim().split("\n").at(-1)}`);
    nginx = spawn("nginx", ["-e", "stderr", "-p", dir, "-c", join(dir, "nginx.conf")], { stdio: ["ignore", "ignore", "pipe"] });
    let errText = "";
    nginx.stderr!.on("data", (d) => (errText += d));
    const base = `https://127.0.0.1:${https}`;
    let health = null;
    for (let i = 0; i < 300 && !health; i++) {
      try {
        health = await request(base + "/health", { dispatcher: agent });
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    t.ok(health, `nginx answers on ${base} ${errText}`);
    t.equal(health!.statusCode, 200, "/health through the proxy");
    await health!.body.text();
    const key = await createTenant(g.url, { tenant_id: "acme" });
    const metadata = JSON.stringify({ note: "x".repeat(60 * 1024) });
    const put = await request(`${base}/v1/put?namespace=default&key=k`, {
      method: "POST",
      dispatcher: agent,
      headers: { "x-api-key": key, "content-type": "application/octet-stream", "x-svc-metadata": metadata },
      body: Buffer.alloc(4096, 1),
    });
    t.equal(put.statusCode, 201, "a put with a 60 KiB X-SVC-Metadata header goes through");
    t.equal(put.headers["x-svc-cus"], "1", "the gateway's headers come back");
    await put.body.text();
    const got = await request(`${base}/v1/get/default/k`, { dispatcher: agent, headers: { "x-api-key": key } });
    const entry = (await got.body.json()) as { metadata: { note: string }; bytes_in: number };
    t.equal(entry.metadata.note.length, 60 * 1024, "the metadata reached the engine whole");
    t.equal(entry.bytes_in, 4096, "and the body");
    const m = await request(`${base}/metrics`, { dispatcher: agent, headers: { authorization: `Bearer ${SERVICE_KEY}` } });
    t.equal(m.statusCode, 404, "/metrics is blocked at the proxy, even with the service key");
    await m.body.text();
    const direct = await fetch(`${g.url}/metrics`, { headers: { authorization: `Bearer ${SERVICE_KEY}` } });
    t.equal(direct.status, 200, "and scraped on the gateway's own address");
    await direct.text();
    const redirect = await request(`http://127.0.0.1:${http}/v1/list/default?x=1`);
    t.equal(redirect.statusCode, 308, "plain http is redirected");
    t.equal(redirect.headers.location, `https://127.0.0.1/v1/list/default?x=1`, "to https, path and query kept");
    await redirect.body.text();
    const big = await request(`${base}/webhooks/payment`, {
      method: "POST",
      dispatcher: agent,
      headers: { "content-type": "application/json" },
      body: Buffer.alloc(MAX_WEBHOOK_BYTES + 1024, 32),
    });
    t.equal(big.statusCode, 413, "a webhook body over 1 MiB is refused by the proxy");
    await big.body.text();
  } finally {
    nginx?.kill("SIGTERM");
    if (nginx && nginx.exitCode === null) await new Promise((r) => nginx!.once("exit", r));
    await agent.close();
    await g.close();
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
