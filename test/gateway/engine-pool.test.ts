// The engine pool (engines.ts) on its own rules, with engines that are down or hang: a
// connection that was never made is retried on the other engine even for a put without a
// key (nothing was sent), a streamed body is never sent twice, a timeout is neither retried
// nor a reason to eject, and /health reports each engine.
import test from "tape";
import { createServer, type Server } from "node:net";
import { EnginePool } from "../../server/gateway/engines.js";
import { startCountingProxy } from "./fixtures/counting-proxy.js";
import { call, createTenant, SERVICE_KEY, startFakeEngine, startTestGateway } from "./helpers.js";

/** A port with nothing listening on it (connections are refused). */
async function deadUrl(): Promise<string> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return `http://127.0.0.1:${port}`;
}

/** A server that accepts connections and never answers. */
async function hangingServer(): Promise<{ url: string; server: Server }> {
  const server = createServer((sock) => sock.on("error", () => {}));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server };
}

test("engine pool: a refused connection is retried on the other engine, even for an unkeyed put; the dead one leaves the rotation", async (t) => {
  const live = await startFakeEngine();
  const pool = new EnginePool([await deadUrl(), live.url], SERVICE_KEY, 2000, { healthIntervalMs: 60_000 });
  const gw = await startTestGateway(live.url, { engine: pool });
  try {
    const key = await createTenant(gw.url, { tenant_id: "acme" });
    const r = await call(gw.url, "/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "AAAA" } });
    t.equal(r.status, 201, "the put went to the live engine");
    t.deepEqual(pool.stats.sent, [1, 1], "tried on the dead engine first (nothing sent there), then on the live one");
    t.equal(pool.stats.retried, 1, "one retry");
    t.equal(live.seen.filter((s) => s.url === "/v1/put").length, 1, "the live engine got it once");
    t.equal(pool.stats.ejections, 1, "the dead engine was taken out");
    for (let i = 0; i < 6; i++) t.equal((await call(gw.url, "/v1/get/default/k", { key })).status, 200);
    t.deepEqual(pool.stats.sent, [1, 7], "no request went to it afterwards");
    const h = await call(gw.url, "/health");
    t.deepEqual(
      h.json.engines.map((e: { reachable: boolean; in_rotation: boolean }) => [e.reachable, e.in_rotation]),
      [
        [false, false],
        [true, true],
      ],
      "/health: the dead engine unreachable and out",
    );
    t.equal(h.json.engine_reachable, true, "engine_reachable: one answers");
  } finally {
    await gw.close();
    await live.close();
  }
});

test("engine pool: a streamed (octet-stream) body is never sent to a second engine", async (t) => {
  const live = await startFakeEngine();
  const pool = new EnginePool([await deadUrl(), live.url], SERVICE_KEY, 2000, { healthIntervalMs: 60_000 });
  const gw = await startTestGateway(live.url, { engine: pool });
  try {
    const key = await createTenant(gw.url, { tenant_id: "acme" });
    const r = await call(gw.url, "/v1/put?namespace=default&key=blob&dtype=uint8&shape=4", {
      key,
      raw: Buffer.from([1, 2, 3, 4]),
      headers: { "content-type": "application/octet-stream", "idempotency-key": "k-1" },
    });
    t.equal(r.status, 502, "502: the body was streamed and is not kept for a second send");
    t.equal(r.json.code, "engine_unreachable");
    t.equal(pool.stats.retried, 0, "no retry");
    t.equal(live.seen.length, 0, "the live engine saw nothing");
    const again = await call(gw.url, "/v1/put?namespace=default&key=blob&dtype=uint8&shape=4", {
      key,
      raw: Buffer.from([1, 2, 3, 4]),
      headers: { "content-type": "application/octet-stream", "idempotency-key": "k-1" },
    });
    t.equal(again.status, 201, "the client's retry (same key) goes to the engine in rotation");
  } finally {
    await gw.close();
    await live.close();
  }
});

test("engine pool: a timeout is a 502, not retried, and does not take the engine out", async (t) => {
  const live = await startFakeEngine();
  const hang = await hangingServer();
  const pool = new EnginePool([hang.url, live.url], SERVICE_KEY, 300, { healthIntervalMs: 60_000 });
  const gw = await startTestGateway(live.url, { engine: pool });
  try {
    const key = await createTenant(gw.url, { tenant_id: "acme" });
    const r = await call(gw.url, "/v1/get/default/k", { key });
    t.equal(r.status, 502, "the hanging engine's timeout: 502");
    t.equal(pool.stats.retried, 0, "a slow request is not sent again");
    t.equal(pool.stats.ejections, 0, "and its engine stays in rotation (the health checks decide)");
    t.equal(live.seen.length, 0, "the other engine saw nothing");
    const next = await call(gw.url, "/v1/get/default/k", { key });
    t.equal(next.status, 200, "the next request goes to the other engine (turns alternate)");
    await pool.checkAll();
    await pool.checkAll();
    t.equal(pool.stats.ejections, 1, "two failed health checks in a row take the hanging engine out");
  } finally {
    await gw.close();
    await live.close();
    hang.server.close();
  }
});

test("engine pool: with every engine out of rotation a request goes to the one that answered last", async (t) => {
  const [e1, e2] = [await startFakeEngine(), await startFakeEngine()];
  const [pa, pb] = [await startCountingProxy(e1.url), await startCountingProxy(e2.url)];
  const pool = new EnginePool([pa.url, pb.url], SERVICE_KEY, 2000, { healthIntervalMs: 60_000 });
  const gw = await startTestGateway(e1.url, { engine: pool });
  try {
    const key = await createTenant(gw.url, { tenant_id: "acme" });
    pa.down = true;
    await pool.checkAll();
    await pool.checkAll();
    pb.down = true;
    await pool.checkAll();
    await pool.checkAll();
    t.deepEqual(
      (await pool.engines()).map((e) => e.in_rotation),
      [false, false],
      "both out of rotation",
    );
    pb.down = false; // back, though not checked yet
    const before = pa.data.length;
    for (let i = 0; i < 4; i++) t.equal((await call(gw.url, "/v1/get/default/k", { key })).status, 200, `get ${i}: answered by the engine that answered last`);
    t.equal(pa.data.length, before, "none went to the one that has been down longer");
  } finally {
    await gw.close();
    await pa.close();
    await pb.close();
    await e1.close();
    await e2.close();
  }
});

test("engine pool: a client that aborts its streamed upload takes no engine out of rotation", async (t) => {
  const [e1, e2] = [await startFakeEngine(), await startFakeEngine()];
  const pool = new EnginePool([e1.url, e2.url], SERVICE_KEY, 2000, { healthIntervalMs: 60_000 });
  const gw = await startTestGateway(e1.url, { engine: pool });
  try {
    const key = await createTenant(gw.url, { tenant_id: "acme" });
    const { request } = await import("node:http");
    for (let i = 0; i < 4; i++) {
      await new Promise<void>((resolve) => {
        const req = request(`${gw.url}/v1/put?namespace=default&key=blob&dtype=uint8&shape=65536`, {
          method: "POST",
          headers: { "x-api-key": key, "content-type": "application/octet-stream", "content-length": "65536" },
        });
        req.on("error", () => resolve());
        req.on("response", (res) => {
          res.resume();
          res.on("end", resolve);
        });
        req.write(Buffer.alloc(8192));
        // The first bytes are on their way to an engine; then the client goes away.
        setTimeout(() => req.destroy(), 200);
      });
    }
    await new Promise((r) => setTimeout(r, 300));
    t.equal(pool.stats.ejections, 0, "four aborted uploads: no engine taken out");
    t.deepEqual(
      (await pool.engines()).map((e) => e.in_rotation),
      [true, true],
      "both still in rotation",
    );
    t.equal(pool.stats.retried, 0, "and nothing sent again");
  } finally {
    await gw.close();
    await e1.close();
    await e2.close();
  }
});
