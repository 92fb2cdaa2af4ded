// Capacity is given back on every way a request ends: answered, refused, timed out, the client
// gone before the engine's answer, gone mid-answer, gone mid-upload (JSON and octet-stream).
// Thousands of clients leave at those points over real TCP; then the engine connection share,
// the body budget and the rate-limit and quota reservations are back to zero and the tenant is
// served at once. Every wait is on a signal (a request seen, a socket closed, a counter), with
// generous ceilings, never a fixed sleep.
import test from "tape";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect, type AddressInfo, type Socket } from "node:net";
import { createApp, type GatewayDeps } from "../../server/gateway/app.js";
import { directAdmission, type Admission } from "../../server/gateway/admission.js";
import { MemoryAuditSink } from "../../server/gateway/audit.js";
import { BodyBudget } from "../../server/gateway/body-budget.js";
import { FakeClock } from "../../server/gateway/clock.js";
import { SharedEngineClient } from "../../server/gateway/engine-share.js";
import { MemoryUsageStore, milliCusOf } from "../../server/gateway/meter.js";
import { UndiciEngineClient } from "../../server/gateway/proxy.js";
import { MemoryRateLimiter } from "../../server/gateway/ratelimit.js";
import { MemoryTenantRegistry } from "../../server/gateway/tenants.js";
import { MemoryBudget, reservationOf } from "../../server/http/memory-budget.js";
import { closeServer, createTenant, listen, SERVICE_KEY } from "./helpers.js";

const CEILING_MS = 60_000;

/** Resolves when `check` holds, looked at every few milliseconds; fails after the ceiling. */
async function until(what: string, check: () => boolean): Promise<void> {
  const t0 = Date.now();
  while (!check()) {
    if (Date.now() - t0 > CEILING_MS) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * An engine whose answers the test paces: /v1/get/ns/hold waits for `release(url)`, then answers
 * 200 with a body of 256 KiB; /v1/get/ns/stream sends its headers and 64 KiB, then keeps
 * sending until the connection closes; /v1/get/ns/never never answers; puts wait for their
 * whole body.
 */
function pacedEngine() {
  const held = new Map<string, ServerResponse>();
  const seen = new Set<string>();
  let seenCount = 0;
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const rid = String(req.headers["x-request-id"]);
    seen.add(rid);
    seenCount++;
    const path = (req.url ?? "").split("?")[0]!;
    if (path === "/v1/get/ns/hold") return void held.set(rid, res);
    if (path === "/v1/get/ns/never") return;
    if (path === "/v1/get/ns/stream") {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      const chunk = Buffer.alloc(64 * 1024, 7);
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once("drain", pump);
      };
      pump();
      return;
    }
    req.resume();
    req.on("end", () => {
      if (!res.destroyed) res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ ok: true, path }));
    });
  });
  return {
    server,
    seen: (rid: string) => seen.has(rid),
    get count() {
      return seenCount;
    },
    release(rid: string) {
      const res = held.get(rid);
      held.delete(rid);
      if (res && !res.destroyed) res.writeHead(200, { "content-type": "application/octet-stream" }).end(Buffer.alloc(256 * 1024, 1));
    },
  };
}

async function setup() {
  const eng = pacedEngine();
  await new Promise<void>((r) => eng.server.listen(0, "127.0.0.1", () => r()));
  const engineUrl = `http://127.0.0.1:${(eng.server.address() as AddressInfo).port}`;
  const shared = new SharedEngineClient(new UndiciEngineClient(engineUrl, SERVICE_KEY, 1500, 16), {
    connections: 16,
    tenantSharePct: 50,
    queueTimeoutMs: 2000,
  });
  const budget = new BodyBudget(64 * 1024 * 1024, 50);
  const clock = new FakeClock(Date.UTC(2026, 0, 15, 12, 0, 0));
  const registry = new MemoryTenantRegistry();
  const limiter = new MemoryRateLimiter(clock);
  const usage = new MemoryUsageStore();
  // The quota's reservations, counted: taken at admission, given back when settled.
  const inner = directAdmission(registry, limiter, usage, () => clock.now());
  const reservations = { open: 0 };
  const admission: Admission = {
    kind: inner.kind,
    lookup: (h) => inner.lookup(h),
    refresh: (h) => inner.refresh(h),
    admit: async (l, spec, quota) => {
      const a = await inner.admit(l, spec, quota);
      if (a?.reservation) reservations.open++;
      return a;
    },
    settle: async (r, op, milli) => {
      reservations.open--;
      await inner.settle(r, op, milli);
    },
  };
  const deps: GatewayDeps = {
    registry,
    limiter,
    usage,
    admission,
    audit: new MemoryAuditSink(),
    engine: shared,
    clock,
    serviceKey: SERVICE_KEY,
    billingEnabled: true,
    defaultRateLimit: { requests: 1_000_000, window_s: 60 },
    maxUploadBytes: 8 * 1024 * 1024,
    bodyBudget: budget,
    limits: { bodyMinBytesPerS: 1, bodyGraceS: 600 },
  };
  const l = await listen(createApp(deps));
  // Sockets of the gateway's side, by the client's local port: closed once the gateway saw the client leave.
  const gatewaySide = new Map<number, Socket>();
  l.server.on("connection", (s: Socket) => gatewaySide.set(s.remotePort!, s));
  const key = await createTenant(l.url, {
    tenant_id: "acme",
    plan: "enterprise",
    namespaces: ["ns"],
    monthly_quota: 1_000_000,
    rate_limit: { requests: 1_000_000, window_s: 60 },
  });
  return {
    eng,
    shared,
    budget,
    deps,
    reservations,
    url: l.url,
    port: l.port,
    key,
    /** The gateway's socket for a client socket. */
    peerOf: (c: Socket) => gatewaySide.get(c.localPort!),
    close: async () => {
      await closeServer(l.server);
      await shared.close();
      eng.server.closeAllConnections();
      await new Promise<void>((r) => eng.server.close(() => r()));
    },
  };
}

type Env = Awaited<ReturnType<typeof setup>>;

/** A raw client: connects, sends `head` (+ body bytes), resolves with the socket once connected. */
function open(env: Env, text: string | Buffer): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(env.port, "127.0.0.1");
    s.on("error", () => undefined);
    s.once("connect", () => {
      s.write(text);
      resolve(s);
    });
    s.once("error", reject);
  });
}

const rid = (i: number, tag: number) => `00000000-0000-4000-8000-${String(tag).padStart(4, "0")}${String(i).padStart(8, "0")}`;
const get = (env: Env, path: string, id: string) => `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${env.key}\r\nX-Request-Id: ${id}\r\n\r\n`;

/** Runs `one(i)` for i < n with `width` at a time. */
async function pool(n: number, width: number, one: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) await one(next++);
    }),
  );
}

async function leaveBeforeAnswer(env: Env, i: number): Promise<void> {
  const id = rid(i, 1);
  const s = await open(env, get(env, "/v1/get/ns/hold", id));
  await until("the engine to see the request", () => env.eng.seen(id));
  const peer = env.peerOf(s);
  s.destroy();
  // The engine answers only once the gateway has seen its client leave.
  await until("the gateway to see the client leave", () => peer === undefined || peer.destroyed);
  env.eng.release(id);
}

async function leaveMidAnswer(env: Env, i: number): Promise<void> {
  const s = await open(env, get(env, "/v1/get/ns/stream", rid(i, 2)));
  await new Promise<void>((r) => s.once("data", () => r()));
  s.destroy();
}

async function leaveMidJsonUpload(env: Env, i: number): Promise<void> {
  const body = JSON.stringify({ namespace: "ns", key: `k${i}`, dtype: "float32", shape: [4], data_b64: "A".repeat(200_000) });
  const head = `POST /v1/put HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${env.key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
  const s = await open(env, head + body.slice(0, 1000));
  // The body's bytes are held in the budget from its Content-Length, before it is read.
  await until("the body budget to hold the upload", () => env.budget.inUse("acme") > 0);
  s.destroy();
  await until("the upload's share to be given back", () => env.budget.inUse() === 0);
}

async function leaveMidOctetUpload(env: Env, i: number): Promise<void> {
  const id = rid(i, 4);
  const head = `POST /v1/put?namespace=ns&key=o${i}&dtype=float32&shape=65536 HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${env.key}\r\nX-Request-Id: ${id}\r\nContent-Type: application/octet-stream\r\nContent-Length: 262144\r\n\r\n`;
  const s = await open(env, Buffer.concat([Buffer.from(head), Buffer.alloc(4096)]));
  await until("the engine to see the upload", () => env.eng.seen(id));
  s.destroy();
}

async function answered(env: Env, path: string, init: RequestInit = {}): Promise<number> {
  const r = await fetch(env.url + path, { ...init, headers: { "x-api-key": env.key, ...(init.headers ?? {}) } });
  await r.arrayBuffer();
  return r.status;
}

test("thousands of clients leaving at every point of a request leave no capacity held; the tenant is served at once", async (t) => {
  const env = await setup();
  const N = 400;
  const t0 = Date.now();
  await pool(N, 16, (i) => leaveBeforeAnswer(env, i));
  await until("connections given back after clients left before the answer", () => env.shared.held() === 0);
  t.pass(`${N} clients left before the engine answered`);
  await pool(N, 16, (i) => leaveMidAnswer(env, i));
  await until("connections given back after clients left mid-answer", () => env.shared.held() === 0);
  t.pass(`${N} clients left in the middle of the answer`);
  await pool(N, 16, (i) => leaveMidJsonUpload(env, i));
  t.pass(`${N} clients left in the middle of a JSON upload`);
  await pool(N, 16, (i) => leaveMidOctetUpload(env, i));
  await until("connections given back after clients left mid-upload", () => env.shared.held() === 0);
  t.pass(`${N} clients left in the middle of an octet-stream upload`);
  const refused: number[] = [];
  await pool(200, 8, async () => void refused.push(await answered(env, "/v1/nope")));
  t.deepEqual(refused, Array(200).fill(404), "200 requests refused by the gateway itself (404)");
  // At most 8 at once: the tenant's share of engine connections, so that none is refused for it.
  const ok: number[] = [];
  await pool(
    200,
    8,
    async (i) =>
      void ok.push(
        await answered(env, "/v1/put", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ namespace: "ns", key: `a${i}`, dtype: "float32", shape: [1], data_b64: "AAAAAA==" }),
        }),
      ),
  );
  t.deepEqual(ok, Array(200).fill(200), "200 requests answered by the engine");
  const timedOut = await Promise.all(Array.from({ length: 8 }, () => answered(env, "/v1/get/ns/never")));
  t.deepEqual(timedOut, Array(8).fill(502), "8 requests timed out at the engine (502)");
  t.comment(`${4 * N + 408} requests in ${Date.now() - t0} ms`);

  t.equal(env.shared.held(), 0, "no engine connection is held");
  t.equal(env.shared.held("acme"), 0, "none by the tenant");
  t.equal(env.budget.inUse(), 0, "no request body bytes are held");
  t.equal(env.reservations.open, 0, "every quota reservation was settled or dropped");
  // Charged: the gets the engine answered 2xx (also those whose client had left) and the puts.
  const charged = 2 * N * milliCusOf("get") + 200 * milliCusOf("put");
  t.equal(
    await env.deps.usage.total("acme", "2026-01"),
    charged,
    "usage is what the engine answered 2xx, nothing for the refused, timed-out or aborted requests",
  );
  const statuses = await Promise.all(Array.from({ length: 8 }, () => answered(env, "/v1/get/ns/stream-free")));
  t.deepEqual(statuses, Array(8).fill(200), "the tenant's next requests are served, none waits for a share (503)");
  await env.close();
});

test("engine memory: a reservation taken after the client left is released at once, and takes nothing more", async (t) => {
  const budget = new MemoryBudget(1024 * 1024, 50);
  const grown: Array<string> = [];
  let handled = 0;
  const server = createServer((req, res) => {
    req.socket.once("close", () => {
      // The client is gone: the response's close event has fired before the reservation exists.
      setImmediate(() => {
        const r = reservationOf(res, budget, "acme");
        try {
          r.grow(1000, "The body");
          grown.push("grew");
        } catch (e) {
          grown.push((e as Error).message);
        }
        handled++;
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as AddressInfo).port;
  for (let i = 0; i < 200; i++) {
    const s = connect(port, "127.0.0.1");
    s.on("error", () => undefined);
    await new Promise<void>((r) => s.once("connect", () => r()));
    s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    await until("the request to arrive", () => server.listening);
    s.destroySoon();
    s.end();
  }
  await until("every request handled", () => handled === 200);
  t.equal(budget.used, 0, "nothing is held");
  t.equal(budget.usedBy("acme"), 0, "nothing by the tenant");
  t.ok(
    grown.every((g) => g === "The request was aborted by the client."),
    "no reservation grows after its client left",
  );
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});
