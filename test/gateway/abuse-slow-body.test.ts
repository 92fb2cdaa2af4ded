// Slow uploads and the engine connection share, over real TCP: a tenant trickling bodies a
// byte a second (which would hold its connections for ~1,000 s unguarded) is cut off after the
// grace time with the JSON 400, holds at most its share of the engine connections meanwhile
// (a request past the share gets 503 + Retry-After after the bounded wait), and another
// tenant's GETs are answered promptly the whole time.
import test from "tape";
import { SharedEngineClient } from "../../server/gateway/engine-share.js";
import { UndiciEngineClient } from "../../server/gateway/proxy.js";
import { createTenant, SERVICE_KEY, startFakeEngine, startTestGateway } from "./helpers.js";
import { rawRequest } from "./abuse-env.js";

async function setup() {
  const engine = await startFakeEngine();
  const shared = new SharedEngineClient(new UndiciEngineClient(engine.url, SERVICE_KEY, 30_000, 4), {
    connections: 4,
    tenantSharePct: 50,
    queueTimeoutMs: 1000,
  });
  const g = await startTestGateway(engine.url, { engine: shared, limits: { bodyMinBytesPerS: 1024, bodyGraceS: 2 } });
  const abuser = await createTenant(g.url, { tenant_id: "abuser" });
  const victim = await createTenant(g.url, { tenant_id: "victim" });
  return {
    engine,
    shared,
    g,
    abuser,
    victim,
    close: async () => {
      await g.close();
      await engine.close();
    },
  };
}

const trickle = (url: string, key: string, path: string, ct: string, total: number, extra = "") =>
  rawRequest(
    url,
    `POST ${path} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Type: ${ct}\r\nContent-Length: ${total}${extra}`,
    Array.from({ length: total }, () => "A"),
    1000,
  );

async function victimGets(url: string, key: string, n: number): Promise<{ statuses: number[]; maxMs: number }> {
  const statuses: number[] = [];
  let maxMs = 0;
  for (let i = 0; i < n; i++) {
    const t0 = Date.now();
    const r = await fetch(`${url}/v1/get/default/k${i}`, { headers: { "x-api-key": key } });
    await r.text();
    statuses.push(r.status);
    maxMs = Math.max(maxMs, Date.now() - t0);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { statuses, maxMs };
}

test("trickled octet-stream puts: cut off after the grace time, held to their share; the other tenant is served promptly", async (t) => {
  const s = await setup();
  const path = "/v1/put?namespace=default&key=slow&dtype=float32&shape=250";
  // Five trickles against a pool of four: without the share they would hold every connection.
  const puts = [0, 1, 2, 3, 4].map(() => trickle(s.g.url, s.abuser, path, "application/octet-stream", 1000));
  // Waits for the signal (the share taken), not a fixed time: on a loaded machine the trickles
  // reach the engine late.
  for (const t0 = Date.now(); s.shared.held("abuser") < 2 && Date.now() - t0 < 60_000;) await new Promise((r) => setTimeout(r, 10));
  t.equal(s.shared.held("abuser"), 2, "the abuser holds its share (2 of 4) and no more");
  const v = await victimGets(s.g.url, s.victim, 15);
  t.deepEqual(v.statuses, Array(15).fill(200), "every GET of the other tenant succeeds while the trickles run");
  t.ok(v.maxMs < 3000, `the slowest of them took ${v.maxMs} ms (< 3000; the trickles would hold the pool for ~1000 s)`);
  const answers = await Promise.all(puts);
  const byStatus = answers.map((a) => a.status).sort();
  t.deepEqual(byStatus, [400, 400, 503, 503, 503], "two cut off (400), the three past the share refused (503)");
  for (const a of answers) {
    t.ok(a.ms < 8000, `answered after ${a.ms} ms, not after the ~1000 s the trickle would take`);
    const b = JSON.parse(a.body);
    t.deepEqual(Object.keys(b).sort(), ["code", "detail", "request_id"], "the JSON error body");
    if (a.status === 400) {
      t.match(b.detail, /slower than the minimum of 1024 bytes per second/, "the detail names the minimum rate");
      t.equal(a.headers["connection"], "close", "the connection is closed");
    } else {
      t.equal(b.code, "overloaded");
      t.equal(a.headers["retry-after"], "1", "Retry-After on the 503");
      t.match(b.detail, /abuser holds its share of 2 engine connections/);
    }
  }
  t.equal(s.shared.held(), 0, "every engine connection is given back");
  const recs = s.g.audit.records.filter((r) => r.tenant_id === "abuser" && r.path.startsWith("/v1/"));
  t.deepEqual(recs.map((r) => r.status).sort(), [400, 400, 503, 503, 503], "each refusal is audited");
  t.ok(
    recs.every((r) => r.cus === 0),
    "nothing charged",
  );
  t.equal(await s.g.deps.usage.total("abuser", "2026-01"), 0, "no usage");
  await s.close();
});

test("a trickled JSON body and a trickled chunked body are cut off too; a body at a healthy rate passes", async (t) => {
  const s = await setup();
  const json = trickle(s.g.url, s.abuser, "/v1/search", "application/json", 600);
  const chunked = rawRequest(
    s.g.url,
    `POST /v1/search HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${s.abuser}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked`,
    Array.from({ length: 600 }, () => "1\r\n{\r\n"),
    1000,
  );
  const v = await victimGets(s.g.url, s.victim, 10);
  t.deepEqual(v.statuses, Array(10).fill(200), "the other tenant is served");
  for (const a of await Promise.all([json, chunked])) {
    t.equal(a.status, 400, "400");
    t.ok(a.ms < 8000, `after ${a.ms} ms`);
    t.match(JSON.parse(a.body).detail, /slower than the minimum/);
  }
  // 256 KiB in 16 KiB pieces every 10 ms: far above the minimum rate.
  const piece = Buffer.alloc(16 * 1024, 1);
  const ok = await rawRequest(
    s.g.url,
    `POST /v1/put?namespace=default&key=fast&dtype=uint8&shape=${16 * piece.length} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${s.victim}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${16 * piece.length}`,
    Array(16).fill(piece),
    10,
  );
  t.equal(ok.status, 201, "a body at a healthy rate is stored");
  t.equal(s.engine.seen.at(-1)!.body.length, 16 * piece.length, "the engine got all of it");
  await s.close();
});
