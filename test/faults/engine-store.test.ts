// An engine pool (server/gateway/engines.ts) and an engine whose /health says its store is
// down: the pool takes it out of rotation (its requests would only get 503 store_unavailable)
// and sends everything to the other engine, then puts it back once its store is connected
// again. A 200 whose body does not say store_connected false (an older engine) keeps it in. Engines are two small
// HTTP servers; every wait is a condition with a deadline.
import test from "tape";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { EnginePool } from "../../server/gateway/engines.js";
import { waitFor } from "./deps.js";

interface Stub {
  url: string;
  served: number;
  health: () => string;
  close: () => Promise<void>;
}

async function stub(health: () => string): Promise<Stub> {
  const s: Stub = { url: "", served: 0, health, close: async () => {} };
  const srv: Server = createServer((req, res) => {
    req.resume();
    if (req.url === "/health") {
      res.writeHead(200, { "content-type": "application/json" });
      return void res.end(s.health());
    }
    s.served++;
    res.writeHead(200, { "content-type": "application/json" });
    res.end("{}");
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  s.url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  s.close = () =>
    new Promise<void>((r) => {
      srv.closeAllConnections();
      srv.close(() => r());
    });
  return s;
}

test("an engine whose store is down leaves the rotation and comes back when it reconnects", async (t) => {
  let storeUp = true;
  const a = await stub(() => JSON.stringify({ status: "ok", store_connected: storeUp }));
  const b = await stub(() => JSON.stringify({ status: "ok", store_connected: true }));
  const pool = new EnginePool([a.url, b.url], "k".repeat(32), 5000, { healthIntervalMs: 100, failuresToEject: 2 });
  const send = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const r = await pool.forward({
        method: "GET",
        path: "/v1/get/default/k",
        headers: {},
        body: null,
        tenantId: "acme",
        requestId: `r${i}`,
        replayable: true,
      });
      if (r.body !== null) for await (const chunk of r.body) void chunk; // read a streamed answer to its end
    }
  };
  try {
    await send(10);
    t.ok(a.served > 0 && b.served > 0, `both engines serve while both stores are up (${a.served}, ${b.served})`);
    storeUp = false;
    await waitFor("the engine with its store down is out of rotation", async () => !(await pool.engines())[0]!.in_rotation, 30_000);
    const h = await pool.engines();
    t.deepEqual([h[0]!.reachable, h[0]!.store_connected], [true, false], "reported reachable, store not connected");
    t.deepEqual(await pool.probe(), { reachable: true, store_connected: true }, "the pool as a whole: another engine's store serves");
    const before = a.served;
    await send(10);
    t.equal(a.served, before, "nothing more is sent to it");
    storeUp = true;
    await waitFor("back in rotation once its store is connected", async () => (await pool.engines())[0]!.in_rotation, 30_000);
    await send(10);
    t.ok(a.served > before, "it serves again");
  } finally {
    await pool.close();
    await a.close();
    await b.close();
  }
});

test("a /health 200 whose body is not JSON, or has no store_connected (older engines), leaves the engine in rotation", async (t) => {
  const bad = await stub(() => "not json");
  const old = await stub(() => JSON.stringify({ status: "ok" }));
  const pool = new EnginePool([bad.url, old.url], "k".repeat(32), 5000, { healthIntervalMs: 60_000 });
  try {
    const h = await pool.engines();
    t.deepEqual(
      h.map((e) => e.store_connected),
      [true, true],
      "both taken as connected",
    );
  } finally {
    await pool.close();
    await bad.close();
    await old.close();
  }
});
