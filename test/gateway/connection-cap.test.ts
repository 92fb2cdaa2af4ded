// SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS: one client address holding its cap of open connections
// (idle ones that never send a request) gets its next connection closed on arrival, counted in
// svc_gate_connections_refused_total, while other addresses are served; a connection it closes
// frees a place; trusted proxies have no cap; 0 turns the cap off. Loopback's 127.0.0.2 and
// 127.0.0.3 stand for other client machines.
import test from "tape";
import type { Socket } from "node:net";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { SERVICE_KEY, startFakeEngine, startTestGateway } from "./helpers.js";
import { healthOn as health, openFrom as open, servedOf } from "../lib/raw-connection.js";

const refusedCount = async (url: string): Promise<number> => {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${SERVICE_KEY}` } })).text();
  return Number(/^svc_gate_connections_refused_total (\d+)$/m.exec(text)?.[1] ?? NaN);
};

test("connection cap: an address at its cap has its next connection closed; others are served", async (t) => {
  const engine = await startFakeEngine();
  const gw = await startTestGateway(engine.url, { limits: { maxConnectionsPerAddress: 4 } });
  const held: Socket[] = [];
  try {
    for (let i = 0; i < 4; i++) {
      const s = await open(gw.url, "127.0.0.2");
      t.equal(await health(s), "HTTP/1.1 200 OK", `connection ${i + 1} of 127.0.0.2 is served (and kept alive)`);
      held.push(s);
    }
    const fifth = await open(gw.url, "127.0.0.2");
    t.equal(await health(fifth), "closed", "the fifth from 127.0.0.2 is closed without an answer");
    const other = await open(gw.url, "127.0.0.3");
    t.equal(await health(other), "HTTP/1.1 200 OK", "127.0.0.3 is served");
    other.destroy();
    t.equal((await fetch(`${gw.url}/health`)).status, 200, "so is 127.0.0.1");
    t.equal(await refusedCount(gw.url), 1, "svc_gate_connections_refused_total counts the one closed");
    // a connection that closes frees its place
    const gone = held.pop()!;
    await new Promise<void>((r) => {
      gone.once("close", () => r());
      gone.destroy();
    });
    let again = "closed";
    // the gateway sees the close after the client does: a few tries, each a new connection
    for (let i = 0; i < 50 && again === "closed"; i++) {
      const s = await open(gw.url, "127.0.0.2");
      again = await health(s);
      if (again === "closed") await new Promise((r) => setTimeout(r, 100));
      else held.push(s);
    }
    t.equal(again, "HTTP/1.1 200 OK", "with one of its connections closed, 127.0.0.2 is served again");
  } finally {
    for (const s of held) s.destroy();
    await gw.close();
    await engine.close();
  }
});

test("connection cap: trusted proxies have none, and 0 turns it off", async (t) => {
  const engine = await startFakeEngine();
  const proxied = await startTestGateway(engine.url, { limits: { maxConnectionsPerAddress: 2, trustedProxies: ["127.0.0.2"] } });
  const off = await startTestGateway(engine.url, { limits: { maxConnectionsPerAddress: 0 } });
  const held: Socket[] = [];
  try {
    t.equal(await servedOf(proxied.url, 6, held, "127.0.0.2"), 6, "a trusted proxy holds 6 connections where the cap is 2");
    t.equal(await servedOf(off.url, 20, held, "127.0.0.3"), 20, "cap 0: 20 connections from one address");
  } finally {
    for (const s of held) s.destroy();
    await proxied.close();
    await off.close();
    await engine.close();
  }
});

test("SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS: default 1024, 0 allowed, bad values named", (t) => {
  const base = { SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY };
  t.equal(loadGatewayConfig(base).limits.maxConnectionsPerAddress, 1024, "default 1024");
  t.equal(loadGatewayConfig({ ...base, SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS: "0" }).limits.maxConnectionsPerAddress, 0, "0: no cap");
  for (const bad of ["-1", "ten", "1.5", "1000001"]) {
    let err: Error | null = null;
    try {
      loadGatewayConfig({ ...base, SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS: bad });
    } catch (e) {
      err = e as Error;
    }
    t.match(err?.message ?? "", /^SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS must be (a whole number|between 0 and 1000000)\.$/, `${bad}: ${err?.message}`);
  }
  t.end();
});
