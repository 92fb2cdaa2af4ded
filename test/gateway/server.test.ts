// startGateway with the real dependencies from the configuration: local registry and usage
// under the data directory, the JSONL audit file, CORS, reload, restart persistence.
import test from "tape";
import { mkdir, mkdtemp, readdir, readFile, readlink, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway } from "../../server/gateway/server.js";
import { LocalFileTenantRegistry } from "../../server/gateway/tenants.js";
import { generateApiKey } from "../../server/gateway/auth.js";
import { sha256Hex } from "../../lib/sha256.js";
import { admin, call, SERVICE_KEY, startFakeEngine } from "./helpers.js";

const AUDIT_FIELDS = ["ts", "tenant_id", "method", "path", "namespace", "status", "cus", "latency_ms", "request_id", "key_id"];

/** The configuration of a gateway without Redis in front of `engineUrl`, its files under `dir`. */
const localEnv = (engineUrl: string, dir: string, extra: Record<string, string> = {}) => ({
  SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
  SVC_GATE_HOST: "127.0.0.1",
  SVC_GATE_PORT: "0",
  SVC_GATE_ENGINE_URL: engineUrl,
  SVC_GATE_DATA_DIR: join(dir, "data"),
  SVC_GATE_AUDIT_LOG_PATH: join(dir, "log", "audit.jsonl"),
  ...extra,
});

/** Paths this process holds open under `dir` (Linux: /proc/self/fd). */
async function openUnder(dir: string): Promise<string[]> {
  const held: string[] = [];
  for (const fd of await readdir("/proc/self/fd")) {
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => "");
    if (target.startsWith(dir)) held.push(target);
  }
  return held;
}

test("close() closes every part even where the usage snapshot fails, and rejects with that failure", async (t) => {
  const engine = await startFakeEngine();
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-close-"));
  const gw = await startGateway(loadGatewayConfig(localEnv(engine.url, dir)));
  const key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
  t.equal((await call(gw.url, "/v1/get/default/x", { key })).status, 200, "a charged request");
  t.ok((await openUnder(dir)).length > 0, "the gateway holds its files open");
  // the final snapshot cannot be written: usage.json is a directory (as on a full disk, the rename fails)
  await rm(join(dir, "data", "usage.json"));
  await mkdir(join(dir, "data", "usage.json", "x"), { recursive: true });
  const closed = await gw.close().then(
    () => null,
    (e: Error) => e,
  );
  t.ok(closed instanceof Error, `close() rejects with the snapshot's failure (${closed?.message ?? "none"})`);
  t.deepEqual(await openUnder(dir), [], "and still closed the audit log, the usage journal and every other file");
  await engine.close();
  await rm(dir, { recursive: true, force: true });
});

test("local mode: registry, usage and audit on disk; restart keeps tenants and usage; reload", async (t) => {
  const engine = await startFakeEngine();
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-srv-"));
  const env = localEnv(engine.url, dir);
  const gw = await startGateway(loadGatewayConfig(env));
  const created = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" });
  const key = created.json.api_key as string;
  const rid = "3f1c2a4e-9b7d-4c1e-8a2b-0d9e8f7a6b5c";
  t.equal((await call(gw.url, "/v1/get/default/x", { key, headers: { "x-request-id": rid } })).status, 200, "served through the real deps");
  t.equal((await call(gw.url, "/v1/get/other/x", { key })).status, 403, "403 still audited");
  t.equal((await call(gw.url, "/v1/get/default/x", { key: "svc_live_nope" })).status, 401, "401 audited");
  const all = (await readFile(env.SVC_GATE_AUDIT_LOG_PATH, "utf8"))
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  t.deepEqual(all[0] && [all[0].path, all[0].status, all[0].tenant_id], ["/gate/onboard/create", 201, "acme"], "the admin call first");
  const lines = all.slice(1);
  t.equal(lines.length, 3, "then one JSONL line per data-plane request");
  t.ok(
    all.every((l) => JSON.stringify(Object.keys(l)) === JSON.stringify(AUDIT_FIELDS)),
    "exactly the documented audit fields, in order",
  );
  t.deepEqual(
    lines.map((l) => l.status),
    [200, 403, 401],
  );
  t.equal(lines[0].request_id, rid);
  t.match(lines[0].ts, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, "ISO 8601 UTC with milliseconds");
  t.notOk((await readFile(env.SVC_GATE_AUDIT_LOG_PATH, "utf8")).includes(key), "the key never reaches the audit log");
  const h = await call(gw.url, "/health");
  t.deepEqual([h.json.engine_reachable, h.json.store_connected], [true, true], "health: both true");
  await gw.close();

  const gw2 = await startGateway(loadGatewayConfig(env));
  t.equal((await call(gw2.url, "/v1/get/default/x", { key })).status, 200, "after a restart the tenant and key still work");
  const u = await admin(gw2.url, "/gate/admin/usage/acme", undefined, "GET");
  t.equal(u.json.cus_used, 0.2, "usage survived the restart (0.1 before, 0.1 after)");
  // Another process edits the registry file (as a second local gateway would); reload picks it up.
  const other = await LocalFileTenantRegistry.open(env.SVC_GATE_DATA_DIR);
  const k2 = generateApiKey();
  const now = new Date().toISOString();
  await other.create({
    tenant_id: "beta",
    plan: "starter",
    namespaces: ["default"],
    email: null,
    key_hash: sha256Hex(k2),
    active: true,
    status: "active",
    monthly_quota: 1000,
    rate_limit: { requests: 10, window_s: 60 },
    custom_rate_limit: false,
    created_at: now,
    updated_at: now,
  });
  t.equal((await call(gw2.url, "/v1/get/default/x", { key: k2 })).status, 401, "not known before reload");
  const rl = await admin(gw2.url, "/gate/admin/reload");
  t.deepEqual(rl.json, { status: "ok", tenants_loaded: 2 }, "reload reports 2 tenants");
  t.equal((await call(gw2.url, "/v1/get/default/x", { key: k2 })).status, 200, "known after reload");
  await gw2.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
});

test("audit disabled writes nothing; CORS exposes the headers to allowed origins only", async (t) => {
  const engine = await startFakeEngine();
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-srv-"));
  const gw = await startGateway(
    loadGatewayConfig({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_DATA_DIR: dir,
      SVC_GATE_AUDIT_ENABLED: "false",
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      SVC_GATE_CORS_ORIGINS: "https://app.example",
    }),
  );
  const key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key;
  const r = await fetch(gw.url + "/v1/get/default/x", { headers: { "x-api-key": key, origin: "https://app.example" } });
  t.equal(r.status, 200);
  t.equal(r.headers.get("access-control-allow-origin"), "https://app.example", "allowed origin echoed");
  const exposed = r.headers.get("access-control-expose-headers") ?? "";
  for (const h of ["X-SVC-CUs", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-Request-Id", "Idempotent-Replayed"])
    t.ok(exposed.includes(h), `exposes ${h}`);
  const pre = await fetch(gw.url + "/v1/put", {
    method: "OPTIONS",
    headers: { origin: "https://app.example", "access-control-request-method": "POST", "access-control-request-headers": "x-api-key,content-type" },
  });
  t.equal(pre.status, 204, "preflight answered without a key");
  t.match(pre.headers.get("access-control-allow-headers") ?? "", /X-Api-Key/, "X-Api-Key allowed");
  t.match(pre.headers.get("access-control-allow-headers") ?? "", /Idempotency-Key/, "Idempotency-Key allowed");
  const bad = await fetch(gw.url + "/v1/get/default/x", { headers: { "x-api-key": key, origin: "https://evil.example" } });
  t.equal(bad.headers.get("access-control-allow-origin"), null, "other origins get no CORS headers");
  await gw.close();
  const { existsSync } = await import("node:fs");
  t.notOk(existsSync(join(dir, "audit.jsonl")), "no audit file with SVC_GATE_AUDIT_ENABLED=false");
  await engine.close();
  await rm(dir, { recursive: true, force: true });
});

test("CORS is off when SVC_GATE_CORS_ORIGINS is unset", async (t) => {
  const engine = await startFakeEngine();
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-srv-"));
  const gw = await startGateway(
    loadGatewayConfig({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_DATA_DIR: dir,
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    }),
  );
  const r = await fetch(gw.url + "/health", { headers: { origin: "https://app.example" } });
  t.equal(r.headers.get("access-control-allow-origin"), null, "no CORS headers");
  await gw.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
});

test("a bad configuration stops the process with one sentence naming the variable", async (t) => {
  const child = spawn(process.execPath, ["--import", "tsx", "test/gateway/fixtures/gateway-proc.ts"], {
    env: { PATH: process.env.PATH, SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY, SVC_GATE_PORT: "eighty" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  const code = await new Promise<number | null>((r) => child.on("close", r));
  t.equal(code, 2, "exit status 2");
  t.equal(err.trim(), "SVC_GATE_PORT must be a whole number.", "the sentence names the variable, no stack trace");
});

test("audit group commit: concurrent requests each get one whole line, written before their responses", async (t) => {
  const { FileAuditSink } = await import("../../server/gateway/audit.js");
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-audit-"));
  const path = join(dir, "audit.jsonl");
  const sink = await FileAuditSink.open(path);
  const rec = (i: number) => ({
    ts: new Date(0).toISOString(),
    tenant_id: "t",
    method: "GET",
    path: `/v1/get/ns/k${i}`,
    namespace: "ns",
    status: 200,
    cus: 0.1,
    latency_ms: 1,
    request_id: `id-${i}`,
  });
  await Promise.all(
    Array.from({ length: 200 }, async (_, i) => {
      await sink.write(rec(i));
      const text = await readFile(path, "utf8");
      if (!text.includes(`"id-${i}"`)) throw new Error(`record ${i} not on disk when its write resolved`);
    }),
  );
  const lines = (await readFile(path, "utf8")).trim().split("\n");
  t.equal(lines.length, 200, "200 lines");
  t.deepEqual(
    lines.map((l) => JSON.parse(l).request_id).sort(),
    Array.from({ length: 200 }, (_, i) => `id-${i}`).sort(),
    "every record once, each line valid JSON",
  );
  await sink.close();
  try {
    await sink.write(rec(999));
    t.fail("write after close resolved");
  } catch (e) {
    t.match((e as Error).message, /closed/, "a write after close is refused, not lost silently");
  }
  await rm(dir, { recursive: true, force: true });
});
