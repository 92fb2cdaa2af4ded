// Per-tenant shares of the shared budgets: the gateway's request-body budget and the engine's
// memory budget. One tenant, however it paces its uploads, holds at most its share (or one body
// past it when it holds nothing else); other tenants' bodies are taken meanwhile.
import test from "tape";
import { connect, type Socket } from "node:net";
import { BodyBudget } from "../../server/gateway/body-budget.js";
import { MemoryBudget, Reservation } from "../../server/http/memory-budget.js";
import { call, createTenant, startFakeEngine, startTestGateway } from "./helpers.js";

const MiB = 1024 * 1024;

test("BodyBudget: a tenant is held to its share; one body past it when it holds nothing; others are taken", (t) => {
  const b = new BodyBudget(10 * MiB, 30);
  t.equal(b.perTenant, 3 * MiB, "30% of 10 MiB");
  b.take(2 * MiB, "a");
  t.throws(
    () => b.take(2 * MiB, "a"),
    /Tenant a holds its share of 3145728 bytes of request bodies; retry after 1 second\./,
    "past the share: 503 naming the tenant",
  );
  t.equal(b.inUse("a"), 2 * MiB, "a refused take holds nothing");
  b.take(MiB, "a");
  b.take(5 * MiB, "b");
  t.equal(b.inUse("b"), 5 * MiB, "a tenant holding nothing takes one body past its share");
  t.throws(() => b.take(1, "b"), /Tenant b holds its share/, "and nothing more");
  t.throws(() => b.take(3 * MiB, "c"), /The gateway is holding its limit of 10485760 bytes/, "the whole budget still bounds all");
  b.take(2 * MiB, "c");
  b.give(3 * MiB, "a");
  b.give(5 * MiB, "b");
  b.give(2 * MiB, "c");
  t.deepEqual([b.inUse(), b.inUse("a"), b.inUse("b"), b.inUse("c")], [0, 0, 0, 0], "all given back");
  t.end();
});

test("MemoryBudget: the same rule per tenant; untagged reservations only meet the whole budget", (t) => {
  const m = new MemoryBudget(100, 25);
  const a1 = new Reservation(m, "a");
  a1.grow(20, "The body");
  t.throws(
    () => a1.grow(10, "The body"),
    /Tenant a holds its share of 25 bytes of the memory for requests in flight; retry after 1 second\./,
    "past the share: 503",
  );
  const b1 = new Reservation(m, "b");
  b1.grow(60, "The answer");
  t.equal(m.usedBy("b"), 60, "one request past the share when the tenant holds nothing");
  t.throws(
    () => new Reservation(m, "c").grow(101, "The body"),
    /needs 101 bytes of memory, more than the server's budget of 100 bytes/,
    "more than the whole budget: 400",
  );
  t.throws(() => new Reservation(m, "c").grow(30, "The body"), /at its memory budget/, "the whole budget bounds all tenants");
  const free = new Reservation(m);
  free.grow(20, "The body");
  t.equal(m.used, 100, "untagged: only the whole budget applies");
  for (const r of [a1, b1, free]) r.release();
  t.deepEqual([m.used, m.usedBy("a"), m.usedBy("b")], [0, 0, 0], "all released");
  t.throws(() => a1.grow(1, "The body"), /The request was aborted by the client\./, "a released reservation takes nothing more");
  t.end();
});

test("over HTTP: one tenant's trickled JSON uploads hold at most its share of the body budget; another tenant's puts, small and large, are served", async (t) => {
  const engine = await startFakeEngine();
  const budget = new BodyBudget(4 * MiB, 50);
  const g = await startTestGateway(engine.url, { bodyBudget: budget, maxUploadBytes: MiB, limits: { bodyMinBytesPerS: 1, bodyGraceS: 600 } });
  const abuser = await createTenant(g.url, { tenant_id: "abuser" });
  const victim = await createTenant(g.url, { tenant_id: "victim" });
  const u = new URL(g.url);
  const size = MiB; // a JSON body below the JSON limit of a 1 MiB upload
  const sockets: Socket[] = [];
  const answers: string[] = [];
  for (let i = 0; i < 4; i++) {
    const s = connect(Number(u.port), u.hostname);
    s.on("error", () => undefined);
    let got = "";
    s.on("data", (d) => {
      got += d;
      if (got.includes("\r\n\r\n")) answers.push(got.split("\r\n")[0]!);
    });
    await new Promise<void>((r) => s.once("connect", () => r()));
    s.write(
      `POST /v1/put HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${abuser}\r\nContent-Type: application/json\r\nContent-Length: ${size}\r\n\r\n{"namespace":"default",`,
    );
    sockets.push(s);
  }
  const t0 = Date.now();
  while ((budget.inUse("abuser") < 2 * MiB || answers.length < 2) && Date.now() - t0 < 60_000) await new Promise((r) => setTimeout(r, 10));
  t.equal(budget.inUse("abuser"), 2 * MiB, "the abuser holds its share (2 of 4 MiB) and no more");
  t.deepEqual(answers.sort(), ["HTTP/1.1 503 Service Unavailable", "HTTP/1.1 503 Service Unavailable"], "its uploads past the share get 503");
  const small = await call(g.url, "/v1/put", { key: victim, body: { namespace: "default", key: "s", dtype: "bytes", shape: [3], data_b64: "AAAA" } });
  t.equal(small.status, 201, "the other tenant's 1 KiB put is served");
  const large = await call(g.url, "/v1/put", {
    key: victim,
    body: { namespace: "default", key: "l", dtype: "bytes", shape: [600_000], data_b64: Buffer.alloc(600_000).toString("base64") },
  });
  t.equal(large.status, 201, "and its 800 KB put too");
  for (const s of sockets) s.destroy();
  while (budget.inUse() > 0 && Date.now() - t0 < 60_000) await new Promise((r) => setTimeout(r, 10));
  t.equal(budget.inUse(), 0, "the abandoned uploads give their share back");
  await g.close();
  await engine.close();
});
