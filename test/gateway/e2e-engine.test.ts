// End to end through the real engine (server/engine, embedded LMDB store): the gateway's
// forwarding, tenant scoping by X-SVC-Tenant, streaming both ways and error pass-through; and
// an https engine with a self-signed certificate trusted through SVC_GATE_ENGINE_CA_PATH.
import test from "tape";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway } from "../../server/gateway/server.js";
import { OFFLOAD_MIN_BYTES, offloadStats } from "../../server/http/offload.js";
import { admin, call, SERVICE_KEY, startRealStack } from "./helpers.js";
import { selfSignedCert } from "../lib/self-signed.js";

test("gateway in front of the real engine", async (t) => {
  const stack = await startRealStack("svc-gate-e2e-");
  const gw = stack.gateway;
  try {
    const acme = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
    const beta = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "beta" })).json.api_key as string;
    const data = Buffer.from("hello tensor world");
    const put = await call(gw.url, "/v1/put", {
      key: acme,
      body: { namespace: "default", key: "greeting", data_b64: data.toString("base64"), metadata: { lang: "en" } },
    });
    t.equal(put.status, 201, "put through the gateway: 201");
    t.equal(put.json.version, 1);
    t.equal(put.headers.get("x-svc-cus"), "1", "1 CU charged");
    const get = await call(gw.url, "/v1/get/default/greeting", { key: acme });
    t.equal(get.status, 200, "get: 200");
    t.equal(get.json.bytes_in, data.length, "the engine stored the payload");
    t.deepEqual(get.json.metadata, { lang: "en" });
    const other = await call(gw.url, "/v1/get/default/greeting", { key: beta, headers: { "x-svc-tenant": "acme" } });
    t.equal(other.status, 404, "tenant beta's 'default' is not acme's, even when beta sends X-SVC-Tenant: acme");
    t.equal(other.json.code, "not_found", "the engine's error body passes through");
    t.equal(other.headers.get("x-svc-cus"), "0", "not charged");

    const raw = Buffer.alloc(8192);
    for (let i = 0; i < raw.length; i++) raw[i] = (i * 31) & 0xff;
    const oput = await call(gw.url, "/v1/put?namespace=default&key=blob&dtype=uint8&shape=8192", {
      key: acme,
      raw,
      headers: { "content-type": "application/octet-stream" },
    });
    t.equal(oput.status, 201, "octet-stream put streamed through: 201");
    const serve = await fetch(gw.url + "/v1/serve", {
      method: "POST",
      headers: { "x-api-key": acme, "content-type": "application/json", accept: "application/octet-stream" },
      body: JSON.stringify({ namespace: "default", key: "blob" }),
    });
    t.equal(serve.status, 200, "serve: 200");
    t.ok(Buffer.from(await serve.arrayBuffer()).equals(raw), "the raw bytes stream back intact");
    t.equal(serve.headers.get("x-svc-dtype"), "uint8", "the engine's X-SVC-Dtype reaches the client");
    t.equal(serve.headers.get("x-svc-cus"), "0.5", "dense serve: 0.5 CU");

    // a JSON put above OFFLOAD_MIN_BYTES: read in a worker thread by the gateway (checked,
    // then forwarded as sent) and by the engine (parsed and decoded), and stored byte for byte
    const big = Buffer.alloc(2 * OFFLOAD_MIN_BYTES);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7919) >>> 3;
    const jobs = offloadStats.jobs;
    const bput = await call(gw.url, "/v1/put", { key: acme, body: { namespace: "default", key: "big", data_b64: big.toString("base64") } });
    t.equal(bput.status, 201, "a large JSON put through the gateway: 201");
    t.equal(offloadStats.jobs, jobs + 2, "read in a worker thread by the gateway and by the engine");
    const bserve = await fetch(gw.url + "/v1/serve", {
      method: "POST",
      headers: { "x-api-key": acme, "content-type": "application/json", accept: "application/octet-stream" },
      body: JSON.stringify({ namespace: "default", key: "big" }),
    });
    t.ok(Buffer.from(await bserve.arrayBuffer()).equals(big), "and served back byte for byte");
    const foreign = await call(gw.url, "/v1/put", { key: beta, body: { namespace: "default", key: "big", data_b64: big.toString("base64"), tenant: "acme" } });
    t.equal(foreign.status, 400, "a large body with a field the schema refuses: 400 from the gateway's worker");
    t.equal(foreign.json.detail, "unknown field 'tenant'.", foreign.json.detail);

    const list = await call(gw.url, "/v1/list/default", { key: acme });
    t.deepEqual(
      list.json.keys.map((k: { key: string }) => k.key),
      ["big", "blob", "greeting"],
      "list shows acme's keys",
    );
    t.equal((await call(gw.url, "/v1/list/default", { key: beta })).json.keys.length, 0, "beta's namespace is empty");
    const conflict = await call(gw.url, "/v1/put", { key: acme, body: { namespace: "default", key: "greeting", data_b64: "AAAA", if_version: 0 } });
    t.equal(conflict.status, 409, "if_version mismatch: the engine's 409 passes through");
    t.equal(conflict.json.code, "version_conflict");
    const del = await call(gw.url, "/v1/delete/default/greeting", { key: acme, method: "DELETE" });
    t.equal(del.status, 200, "delete: 200");
    t.equal((await call(gw.url, "/v1/get/default/greeting", { key: acme })).status, 404, "deleted: 404");
    const u = await admin(gw.url, "/gate/admin/usage/acme", undefined, "GET");
    t.deepEqual(
      [u.json.breakdown.put, u.json.breakdown.get, u.json.breakdown.serve, u.json.breakdown.list, u.json.breakdown.delete],
      [3, 0.1, 1, 0.1, 0.1],
      "usage counts only the successful operations",
    );
    const h = await call(gw.url, "/health");
    t.deepEqual([h.json.engine_reachable, h.json.store_connected], [true, true], "health with the real engine");
  } finally {
    await stack.close();
  }
});

test("gateway in front of a TLS engine with a self-signed certificate, trusted through SVC_GATE_ENGINE_CA_PATH", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-tls-"));
  const made = selfSignedCert(dir);
  if (!made) {
    t.skip("openssl is not available to make a test certificate");
    await rm(dir, { recursive: true, force: true });
    return;
  }
  const { cert, key } = made;
  const engine = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: SERVICE_KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
      SVC_ENGINE_TLS_CERT_PATH: cert,
      SVC_ENGINE_TLS_KEY_PATH: key,
    }),
  );
  const gateEnv = {
    SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "0",
    SVC_GATE_ENGINE_URL: engine.url,
    SVC_GATE_DATA_DIR: join(dir, "gate"),
    SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    SVC_GATE_ENGINE_TIMEOUT_MS: "3000",
  };
  const gw = await startGateway(loadGatewayConfig({ ...gateEnv, SVC_GATE_ENGINE_CA_PATH: cert }));
  try {
    t.match(engine.url, /^https:\/\/127\.0\.0\.1:\d+$/, `the engine serves https (${engine.url})`);
    const h = await call(gw.url, "/health");
    t.equal(h.status, 200);
    t.equal(h.json.engine_reachable, true, "health: the engine is reachable over TLS");
    const acme = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
    const put = await call(gw.url, "/v1/put", { key: acme, body: { namespace: "default", key: "k", data_b64: Buffer.from("over tls").toString("base64") } });
    t.equal(put.status, 201, "put forwarded over TLS: 201");
    const get = await call(gw.url, "/v1/get/default/k", { key: acme });
    t.equal(get.status, 200, "get forwarded over TLS: 200");
    t.equal(get.json.bytes_in, 8, "the engine stored the payload");
    t.equal(get.headers.get("x-svc-cus"), "0.1", "metered as usual");
  } finally {
    await gw.close();
  }
  // Without the CA the self-signed certificate is refused: unreachable, never served in clear.
  const untrusted = await startGateway(loadGatewayConfig({ ...gateEnv, SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit2.jsonl") }));
  try {
    const h = await call(untrusted.url, "/health");
    t.equal(h.json.engine_reachable, false, "without SVC_GATE_ENGINE_CA_PATH: the engine is not reachable");
    const acme = (await admin(untrusted.url, "/gate/onboard/create", { tenant_id: "beta" })).json.api_key as string;
    const r = await call(untrusted.url, "/v1/get/default/k", { key: acme });
    t.equal(r.status, 502, "a data call is 502");
    t.equal(r.json.code, "engine_unreachable");
  } finally {
    await untrusted.close();
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});
