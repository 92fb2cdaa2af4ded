// Shared pieces of the gateway tests: a recording fake engine that answers like the engine
// contract, a gateway app over memory dependencies on an ephemeral port, and Redis cleanup.
import express from "express";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { randomUUID } from "node:crypto";
import { createApp, type GatewayDeps } from "../../server/gateway/app.js";
import { MemoryAuditSink } from "../../server/gateway/audit.js";
import { FakeClock } from "../../server/gateway/clock.js";
import { MemoryUsageStore } from "../../server/gateway/meter.js";
import { UndiciEngineClient } from "../../server/gateway/proxy.js";
import { MemoryRateLimiter } from "../../server/gateway/ratelimit.js";
import { MemoryTenantRegistry } from "../../server/gateway/tenants.js";
import { connectRedis, deletePrefix, type Redis } from "../../server/gateway/redis.js";

export const SERVICE_KEY = "test-service-key-0123456789abcdef0123456789abcdef";
export const REDIS_URL = process.env.SVC_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

export interface Seen {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

export interface FakeEngine {
  url: string;
  seen: Seen[];
  /** Overrides the answer for the next requests (null restores the default). */
  respond: ((s: Seen) => { status: number; body: unknown; headers?: Record<string, string> }) | null;
  close(): Promise<void>;
}

export async function listen(app: express.Express): Promise<{ server: Server; url: string; port: number }> {
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, "127.0.0.1", () => resolve(s));
  });
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}`, port };
}

export async function closeServer(server: Server): Promise<void> {
  await new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
  });
}

/** An engine stand-in that records every request that reaches it and answers per docs/api.md (data plane). */
export async function startFakeEngine(port = 0): Promise<FakeEngine> {
  const app = express();
  const fe: FakeEngine = { url: "", seen: [], respond: null, close: async () => {} };
  app.use((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const s: Seen = { method: req.method, url: req.originalUrl, headers: { ...req.headers }, body: Buffer.concat(chunks) };
      if (req.path !== "/health") fe.seen.push(s);
      if (req.path === "/health")
        return void res.json({ status: "ok", uptime_s: 1, gpu: { available: false, device: null, cache_bytes: 0 }, storage: "memory" });
      if (fe.respond) {
        const r = fe.respond(s);
        if (r.headers) for (const [k, v] of Object.entries(r.headers)) res.setHeader(k, v);
        if (Buffer.isBuffer(r.body)) return void res.status(r.status).end(r.body);
        return void res.status(r.status).json(r.body);
      }
      res.setHeader("X-Request-Id", "00000000-0000-4000-8000-000000000000"); // must not leak through
      res.setHeader("X-SVC-CUs", "999");
      if (req.method === "POST" && req.path === "/v1/put") {
        const q = new URL(req.originalUrl, "http://x").searchParams;
        let ns = q.get("namespace"),
          key = q.get("key");
        if (!ns) ({ namespace: ns, key } = JSON.parse(s.body.toString()));
        return void res.status(201).json({
          namespace: ns,
          key,
          version: 1,
          verdict: "passthrough",
          compressed: false,
          compression_ratio: 1,
          relative_error: 0,
          bytes_in: s.body.length,
        });
      }
      if (req.method === "GET" && req.path.startsWith("/v1/get/")) {
        if (req.path.endsWith("/missing"))
          return void res.status(404).json({ detail: "Key missing not found.", code: "not_found", request_id: req.get("x-request-id") });
        return void res.status(200).json({ path: req.path, version: 1 });
      }
      res.status(200).json({ ok: true, path: req.path });
    });
  });
  const l = await listen(app);
  if (port !== 0) throw new Error("fixed ports are not used");
  fe.url = l.url;
  fe.close = () => closeServer(l.server);
  return fe;
}

export interface TestGateway {
  url: string;
  deps: GatewayDeps;
  clock: FakeClock;
  audit: MemoryAuditSink;
  close(): Promise<void>;
}

/** A gateway app over memory dependencies (or the given ones), listening on an ephemeral port. */
export async function startTestGateway(engineUrl: string, over: Partial<GatewayDeps> = {}): Promise<TestGateway> {
  const clock = (over.clock as FakeClock | undefined) ?? new FakeClock(Date.UTC(2026, 0, 15, 12, 0, 0));
  const audit = (over.audit as MemoryAuditSink | undefined) ?? new MemoryAuditSink();
  const deps: GatewayDeps = {
    registry: new MemoryTenantRegistry(),
    limiter: new MemoryRateLimiter(clock),
    usage: new MemoryUsageStore(),
    engine: new UndiciEngineClient(engineUrl, SERVICE_KEY, 2000, 16),
    serviceKey: SERVICE_KEY,
    billingEnabled: false,
    defaultRateLimit: { requests: 100, window_s: 60 },
    maxUploadBytes: 1024 * 1024,
    ...over,
    clock,
    audit,
  };
  const l = await listen(createApp(deps));
  return {
    url: l.url,
    deps,
    clock,
    audit,
    close: async () => {
      await closeServer(l.server);
      await deps.engine.close();
    },
  };
}

export async function admin(url: string, path: string, body?: unknown, method = "POST"): Promise<{ status: number; json: any; headers: Headers }> {
  const r = await fetch(url + path, {
    method: body === undefined && method === "POST" ? "POST" : method,
    headers: { authorization: `Bearer ${SERVICE_KEY}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null, headers: r.headers };
}

/** Creates a tenant through the admin API; returns its key. */
export async function createTenant(url: string, body: Record<string, unknown>): Promise<string> {
  const r = await admin(url, "/gate/onboard/create", body);
  if (r.status !== 201) throw new Error(`create failed: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json.api_key as string;
}

export async function call(
  url: string,
  path: string,
  init: { method?: string; key?: string; body?: unknown; headers?: Record<string, string>; raw?: Buffer | string } = {},
) {
  const headers: Record<string, string> = { ...(init.key ? { "x-api-key": init.key } : {}), ...(init.headers ?? {}) };
  let body: string | Buffer | undefined;
  if (init.raw !== undefined) body = init.raw;
  else if (init.body !== undefined) {
    body = JSON.stringify(init.body);
    headers["content-type"] ??= "application/json";
  }
  const r = await fetch(url + path, { method: init.method ?? (body !== undefined ? "POST" : "GET"), headers, body });
  const text = await r.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = text;
  }
  return { status: r.status, json, headers: r.headers };
}

export function uniquePrefix(): string {
  return `svc-test:${randomUUID()}:`;
}

export async function redisFor(prefix: string): Promise<{ redis: Redis; cleanup(): Promise<void> }> {
  const redis = await connectRedis(REDIS_URL);
  return {
    redis,
    cleanup: async () => {
      await deletePrefix(redis, prefix);
      await redis.quit();
    },
  };
}

export interface RealStack {
  /** The temporary directory holding the engine's LMDB store, the gateway's state and its audit log. */
  dir: string;
  engine: import("../../server/engine/server.js").RunningEngine;
  gateway: import("../../server/gateway/server.js").RunningGateway;
  /** Stops both servers and removes the directory. */
  close(): Promise<void>;
}

/**
 * The real engine (LMDB in a temporary directory, `prefix` naming it) and the real gateway in
 * front of it, both in this process on ephemeral loopback ports; `gatewayEnv` adds or overrides
 * SVC_GATE_* settings. The servers are loaded on first use, so tests of the fake engine do not
 * load the store.
 */
export async function startRealStack(prefix: string, opts: { serviceKey?: string; gatewayEnv?: Record<string, string> } = {}): Promise<RealStack> {
  const [{ loadEngineConfig }, { startEngine }, { loadGatewayConfig }, { startGateway }] = await Promise.all([
    import("../../server/engine/config.js"),
    import("../../server/engine/server.js"),
    import("../../server/gateway/config.js"),
    import("../../server/gateway/server.js"),
  ]);
  const key = opts.serviceKey ?? SERVICE_KEY;
  const { mkdtemp, rm } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const engine = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: key,
      SVC_ENGINE_LOG_LEVEL: "silent",
    }),
  );
  const gateway = await startGateway(
    loadGatewayConfig({
      SVC_GATE_ENGINE_SERVICE_KEY: key,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      ...opts.gatewayEnv,
    }),
  );
  return {
    dir,
    engine,
    gateway,
    close: async () => {
      await gateway.close();
      await engine.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
