// A gateway that reaches its engine over the engine's Unix socket (SVC_GATE_ENGINE_URL
// unix:PATH, the engine's SVC_ENGINE_SOCKET): JSON and streamed octet-stream puts, reads and
// serves byte for byte, health, an engine pool mixing a socket and a TCP engine, and what the
// variable refuses.
import test from "tape";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway } from "../../server/gateway/server.js";
import { jsonLogger } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { admin, call, SERVICE_KEY } from "./helpers.js";

const gatewayEnv = (engineUrl: string, dir: string) => ({
  SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
  SVC_GATE_HOST: "127.0.0.1",
  SVC_GATE_PORT: "0",
  SVC_GATE_ENGINE_URL: engineUrl,
  SVC_GATE_DATA_DIR: join(dir, "gate"),
  SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
});

const engineAt = (dir: string, name: string, socket = "") =>
  startEngine(loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: join(dir, name), SVC_ENGINE_API_KEYS: SERVICE_KEY, SVC_ENGINE_SOCKET: socket }), {
    logger: jsonLogger("silent"),
  });

test("gateway over the engine's Unix socket: puts, reads and serves byte for byte, health", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-unix-"));
  const engine = await engineAt(dir, "engine", join(dir, "engine.sock"));
  const gw = await startGateway(loadGatewayConfig(gatewayEnv(engine.socketUrl!, dir)));
  try {
    const key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
    const health = (await (await fetch(`${gw.url}/health`)).json()) as { engine_reachable: boolean };
    t.equal(health.engine_reachable, true, "health: the engine is reachable over the socket");
    const data = new Float32Array(256).map((_, i) => Math.sin(i));
    const b64 = Buffer.from(data.buffer).toString("base64");
    const put = await call(gw.url, "/v1/put", { key, body: { namespace: "default", key: "a", dtype: "float32", shape: [256], data_b64: b64, tolerance: 0 } });
    t.equal(put.status, 201, "a JSON put (the gateway's own connections)");
    const raw = randomBytes(300 * 1024);
    const octet = await call(gw.url, "/v1/put?namespace=default&key=raw", { key, raw, headers: { "content-type": "application/octet-stream" } });
    t.equal(octet.status, 201, "a 300 KiB octet-stream put (streamed through undici's pool)");
    const got = await call(gw.url, "/v1/get/default/a", { key });
    t.equal(got.status, 200, "a GET");
    t.equal(got.json.fingerprint.sha256, put.json.fingerprint.sha256, "the entry put");
    const served = await fetch(`${gw.url}/v1/serve`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json", accept: "application/octet-stream" },
      body: JSON.stringify({ namespace: "default", key: "raw" }),
    });
    t.equal(served.status, 200, "a serve");
    t.ok(Buffer.from(await served.arrayBuffer()).equals(raw), "byte for byte");
    const direct = await fetch(`${engine.url}/v1/get/default/raw`, { headers: { authorization: `Bearer ${SERVICE_KEY}`, "x-svc-tenant": "acme" } });
    t.equal(direct.status, 200, "the same store behind the engine's TCP port");
  } finally {
    await gw.close();
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("gateway over two engines, one on its socket and one over TCP: both in rotation", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-unix-"));
  const a = await engineAt(dir, "a", join(dir, "a.sock"));
  const b = await engineAt(dir, "b");
  const gw = await startGateway(loadGatewayConfig(gatewayEnv(`${a.socketUrl!},${b.url}`, dir)));
  try {
    const key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
    // a get of a missing key answers 404 from whichever engine: both engines get requests
    let ok = 0;
    for (let i = 0; i < 20; i++) if ((await call(gw.url, "/v1/get/default/none", { key })).status === 404) ok++;
    t.equal(ok, 20, "20 requests answered by the pair");
    const gets = async (e: typeof a) => {
      const text = await (await fetch(`${e.url}/metrics`, { headers: { authorization: `Bearer ${SERVICE_KEY}` } })).text();
      const m = /^svc_engine_http_requests_total\{[^}]*route="\/v1\/get\/:namespace\/:key\*"[^}]*\} (\d+)$/m.exec(text);
      return m ? Number(m[1]) : 0;
    };
    const [onSocket, onTcp] = [await gets(a), await gets(b)];
    t.ok(onSocket > 0 && onSocket + onTcp === 20, `the socket engine answered GETs (${onSocket} over the socket, ${onTcp} over TCP)`);
    const health = (await (await fetch(`${gw.url}/health`)).json()) as { engine_reachable: boolean };
    t.equal(health.engine_reachable, true, "health: reachable");
    await a.close();
    let answered = 0;
    for (let i = 0; i < 10; i++) if ((await call(gw.url, "/v1/get/default/none", { key })).status === 404) answered++;
    t.equal(answered, 10, "with the socket engine gone, the TCP engine answers");
  } finally {
    await gw.close();
    await b.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("SVC_GATE_ENGINE_URL: unix: entries are checked and normalised", (t) => {
  const base = { SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY };
  const urls = (v: string) => loadGatewayConfig({ ...base, SVC_GATE_ENGINE_URL: v }).engineUrls;
  t.deepEqual(urls("unix:/run/svc/engine.sock"), ["unix:/run/svc/engine.sock"], "unix:/path");
  t.deepEqual(urls("unix:///run/svc/engine.sock"), ["unix:/run/svc/engine.sock"], "unix:///path, normalised");
  t.deepEqual(urls("unix:/run/a%20b.sock, http://127.0.0.1:8000"), ["unix:/run/a%20b.sock", "http://127.0.0.1:8000"], "mixed with an http engine");
  const refused: [string, RegExp][] = [
    ["unix:engine.sock", /entry 'unix:engine.sock' must be unix: followed by an absolute path/],
    ["unix:", /must be unix: followed by an absolute path/],
    [`unix:/${"x".repeat(107)}`, /must be at most 107 bytes long \(a Unix socket's limit\), not 108/],
    ["unix:/run/%E9.sock", /must be unix: followed by an absolute path/],
    ["unix:/run/e.sock,unix:///run/e.sock", /lists unix:\/run\/e.sock twice/],
    ["unix:/run/", /must name a file, not a directory/],
  ];
  for (const [value, re] of refused) {
    let err: unknown = null;
    try {
      urls(value);
    } catch (e) {
      err = e;
    }
    t.ok(
      err instanceof ConfigError && err.variable === "SVC_GATE_ENGINE_URL" && re.test(err.message),
      `${value.slice(0, 40)}: ${(err as Error | null)?.message}`,
    );
  }
  t.end();
});
