// One gateway over two real engine processes sharing one LMDB directory, each behind a
// counting proxy: requests spread over both; a read whose connection dies is answered by the
// other engine; a put without Idempotency-Key whose body went out is a 502 and never replayed,
// a keyed one goes to the other engine with its key; kill -9 of one engine during a stream of
// puts loses no acknowledged put, no request reaches it once it is out of rotation, and it
// comes back when restarted. Every wait is a condition with a deadline.
import test from "tape";
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { createInterface } from "node:readline";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway } from "../../server/gateway/server.js";
import { startCountingProxy, type CountingProxy } from "./fixtures/counting-proxy.js";
import { call, createTenant, SERVICE_KEY, startFakeEngine, startTestGateway } from "./helpers.js";

interface EngineProc {
  url: string;
  child: ChildProcess;
  /** Request ids of the data-plane requests in the engine's own request log. */
  served: Set<string>;
}

async function spawnEngine(dataDir: string): Promise<EngineProc> {
  const child = spawn(process.execPath, ["--import", "tsx", "test/gateway/fixtures/engine-proc.ts"], {
    env: {
      PATH: process.env.PATH,
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: dataDir,
      SVC_ENGINE_API_KEYS: SERVICE_KEY,
      SVC_ENGINE_LOG_LEVEL: "info",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const served = new Set<string>();
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on("line", (l) => {
      let o: { msg?: string; url?: string; path?: string; request_id?: string };
      try {
        o = JSON.parse(l);
      } catch {
        return;
      }
      if (o.msg === "engine listening") resolve(o.url!);
      if (o.msg === "request" && o.path?.startsWith("/v1/") && o.request_id) served.add(o.request_id);
    });
    child.once("exit", (c) => reject(new Error(`engine exited ${c}: ${err}`)));
  });
  return { url, child, served };
}

function kill9(p: EngineProc): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return Promise.resolve();
  const gone = new Promise<void>((r) => p.child.once("exit", () => r()));
  p.child.kill("SIGKILL");
  return gone;
}

async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

test("one gateway over two engines: spread, retries, no replayed put, kill -9 and restart", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-engines-"));
  const lmdb = join(dir, "engine");
  const engines: EngineProc[] = [];
  const proxies: CountingProxy[] = [];
  let gw: Awaited<ReturnType<typeof startGateway>> | null = null;
  try {
    engines.push(await spawnEngine(lmdb));
    engines.push(await spawnEngine(lmdb)); // the same LMDB directory: both see every write
    proxies.push(await startCountingProxy(engines[0]!.url), await startCountingProxy(engines[1]!.url));
    const [pa, pb] = proxies as [CountingProxy, CountingProxy];
    gw = await startGateway(
      loadGatewayConfig({
        SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
        SVC_GATE_HOST: "127.0.0.1",
        SVC_GATE_PORT: "0",
        SVC_GATE_ENGINE_URL: `${pa.url}, ${pb.url}`,
        SVC_GATE_ENGINE_HEALTH_INTERVAL_MS: "250",
        SVC_GATE_DATA_DIR: join(dir, "gate"),
        SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
        SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "1000000",
      }),
    );
    const url = gw.url;
    const key = await createTenant(url, { tenant_id: "acme" });
    const health = async () =>
      (await call(url, "/health")).json as { engine_reachable: boolean; engines: Array<{ index: number; reachable: boolean; in_rotation: boolean }> };
    const inRotation = async (i: number) => (await health()).engines[i]!.in_rotation;
    const put = (k: string, headers: Record<string, string> = {}) =>
      call(url, "/v1/put", { key, body: { namespace: "default", key: k, data_b64: Buffer.from(`value of ${k}`).toString("base64") }, headers });
    const get = (k: string, rid = randomUUID()) => call(url, `/v1/get/default/${k}`, { key, headers: { "x-request-id": rid } });

    // /health lists both engines.
    const h0 = await health();
    t.deepEqual(
      h0.engines.map((e) => [e.index, e.reachable, e.in_rotation]),
      [
        [0, true, true],
        [1, true, true],
      ],
      "/health reports both engines, reachable and in rotation",
    );
    t.equal(h0.engine_reachable, true);

    // 1. Load spreads over both engines (counted in each engine's own request log).
    t.equal((await put("seed")).status, 201, "seed put");
    const rids: string[] = [];
    for (let i = 0; i < 40; i++) {
      const rid = randomUUID();
      rids.push(rid);
      t.equal((await get("seed", rid)).status, 200, `get ${i}: 200`);
    }
    await waitFor("both engines logged the 40 gets", () => rids.every((r) => engines[0]!.served.has(r) || engines[1]!.served.has(r)));
    const onA = rids.filter((r) => engines[0]!.served.has(r)).length;
    const onB = rids.filter((r) => engines[1]!.served.has(r)).length;
    t.ok(onA >= 5 && onB >= 5, `40 sequential gets spread over both engines (${onA} on one, ${onB} on the other)`);
    t.equal(onA + onB, 40, "each get served once");

    // 2. A GET whose connection dies on engine A is retried once, on engine B.
    pa.dropData = true;
    let retriedGet: string | null = null;
    for (let i = 0; i < 20 && retriedGet === null; i++) {
      const rid = randomUUID();
      const r = await get("seed", rid);
      t.equal(r.status, 200, "every get answers 200 while A drops connections");
      if (pa.data.some((p) => p.requestId === rid && p.dropped)) retriedGet = rid;
    }
    t.ok(retriedGet, "a get reached A and lost its connection there");
    await waitFor("B logged the retried get", () => engines[1]!.served.has(retriedGet!));
    t.ok(engines[1]!.served.has(retriedGet!), "the same request (same X-Request-Id) was answered by B");
    t.notOk(engines[0]!.served.has(retriedGet!), "A never served it");

    // 3. A put without Idempotency-Key whose body reached A's side and then lost its
    //    connection is a 502, and no engine stores it. A keyed put is sent on to B with its key.
    const reachA = async (send: (k: string) => Promise<{ status: number; json: any }>): Promise<{ k: string; status: number; json: any; rid: string }> => {
      for (let i = 0; i < 20; i++) {
        await waitFor("A is back in rotation", () => inRotation(0));
        const k = `probe-${randomUUID()}`;
        const before = pa.data.length;
        const r = await send(k);
        const hit = pa.data.slice(before).find((p) => p.dropped && p.path === "/v1/put");
        if (hit) return { k, status: r.status, json: r.json, rid: hit.requestId! };
      }
      throw new Error("no put reached A in 20 tries");
    };
    const unkeyed = await reachA((k) => put(k));
    t.equal(unkeyed.status, 502, "unkeyed put whose body was sent to a dying engine: 502");
    t.equal(unkeyed.json.code, "engine_unreachable");
    t.notOk(
      pb.data.some((p) => p.requestId === unkeyed.rid),
      "it was not replayed on B",
    );
    t.equal((await get(unkeyed.k)).status, 404, "and nothing was stored");

    const idem = `idem-${randomUUID()}`;
    const keyed = await reachA((k) => put(k, { "idempotency-key": `${idem}-${k}` }));
    t.equal(keyed.status, 201, "a put with Idempotency-Key whose connection died on A is answered by B");
    const onBKeyed = pb.data.find((p) => p.requestId === keyed.rid);
    t.ok(onBKeyed, "the same request reached B");
    t.equal(onBKeyed?.idempotencyKey, `${idem}-${keyed.k}`, "with its Idempotency-Key forwarded");
    t.equal((await get(keyed.k)).json.version, 1, "stored once");
    pa.dropData = false;
    await waitFor("A is back in rotation", () => inRotation(0));

    const bad = await put("x", { "idempotency-key": "has space" });
    t.equal(bad.status, 400, "an Idempotency-Key with a space: 400");
    t.equal(bad.json.detail, "The Idempotency-Key header must be 1 to 255 visible ASCII characters.");
    t.equal((await put("x", { "idempotency-key": "k".repeat(256) })).status, 400, "one of 256 characters: 400");

    // 4. kill -9 engine A during a stream of puts from four writers.
    const acked = new Map<string, { version: number; sha256: string }>();
    const statuses = new Map<number, number>();
    let stop = false;
    let ackedAtKill = -1;
    const writer = async (w: number) => {
      for (let i = 0; !stop; i++) {
        const k = `stream-${w}-${i}`;
        const r = await put(k);
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status === 201) acked.set(k, { version: r.json.version, sha256: r.json.fingerprint.sha256 });
      }
    };
    const writers = [0, 1, 2, 3].map(writer);
    await waitFor("20 puts acknowledged", () => acked.size >= 20, 60_000);
    ackedAtKill = acked.size;
    await kill9(engines[0]!);
    await waitFor("30 more puts acknowledged after the kill", () => acked.size >= ackedAtKill + 30, 60_000);
    stop = true;
    await Promise.all(writers);
    t.deepEqual(
      [...statuses.keys()].filter((s) => s !== 201 && s !== 502),
      [],
      `every put answered 201 or 502 (${JSON.stringify([...statuses])})`,
    );

    await waitFor("A is out of rotation", async () => !(await inRotation(0)));
    const hk = await health();
    t.deepEqual(
      hk.engines.map((e) => [e.reachable, e.in_rotation]),
      [
        [false, false],
        [true, true],
      ],
      "/health: A unreachable and out, B in",
    );
    const sentToA = pa.data.length;
    for (let i = 0; i < 20; i++) t.equal((await get("seed")).status, 200, `get ${i} after the ejection: 200`);
    for (let i = 0; i < 10; i++) t.equal((await put(`after-${i}`)).status, 201, `put ${i} after the ejection: 201`);
    t.equal(pa.data.length, sentToA, "no request reached the dead engine after it was taken out");

    let readable = 0;
    for (const [k, want] of acked) {
      const r = await get(k);
      if (r.status === 200 && r.json.version === want.version && r.json.fingerprint.sha256 === want.sha256) readable++;
    }
    t.equal(readable, acked.size, `every acknowledged put (${acked.size}) is readable through the survivor, same version and fingerprint`);

    // 5. Restarted (on the same directory), A is back in rotation and gets requests again.
    engines[0] = await spawnEngine(lmdb);
    pa.target = engines[0].url;
    await waitFor("A is back in rotation after the restart", () => inRotation(0));
    const back: string[] = [];
    for (let i = 0; i < 20; i++) {
      const rid = randomUUID();
      back.push(rid);
      t.equal((await get("after-3", rid)).status, 200);
    }
    await waitFor("the restarted engine logged some of the 20 gets", () => back.some((r) => engines[0]!.served.has(r)));
    t.ok(pa.data.length > sentToA, `requests reach the restarted engine (${back.filter((r) => engines[0]!.served.has(r)).length} of 20)`);
  } finally {
    await gw?.close();
    for (const p of proxies) await p.close();
    for (const e of engines) await kill9(e);
    await rm(dir, { recursive: true, force: true });
  }
});

test("Idempotency-Key reaches the engine; Idempotent-Replayed comes back and the replay is charged as a get", async (t) => {
  const engine = await startFakeEngine();
  const gw = await startTestGateway(engine.url);
  try {
    const key = await createTenant(gw.url, { tenant_id: "acme" });
    const body = { namespace: "default", key: "k", data_b64: "AAAA" };
    const first = await call(gw.url, "/v1/put", { key, body, headers: { "idempotency-key": "order-1" } });
    t.equal(first.status, 201, "first put: 201");
    t.equal(first.headers.get("x-svc-cus"), "1", "charged as a put: 1 CU");
    t.equal(engine.seen.at(-1)!.headers["idempotency-key"], "order-1", "the key reached the engine");
    engine.respond = () => ({ status: 201, body: { namespace: "default", key: "k", version: 1 }, headers: { "idempotent-replayed": "true" } });
    const again = await call(gw.url, "/v1/put", { key, body, headers: { "idempotency-key": "order-1" } });
    t.equal(again.status, 201, "repeat: the engine's stored answer");
    t.equal(again.headers.get("idempotent-replayed"), "true", "Idempotent-Replayed reaches the client");
    t.equal(again.headers.get("x-svc-cus"), "0.1", "a replay is charged as a get: 0.1 CU");
    const usage = await gw.deps.usage.get("acme", "2026-01");
    t.deepEqual(usage, { total_milli: 1100, breakdown_milli: { put: 1000, get: 100 } }, "usage: one put and one get");
    engine.respond = () => ({ status: 422, body: { detail: "The Idempotency-Key was used with another request.", code: "bad_request", request_id: "x" } });
    const other = await call(gw.url, "/v1/put", { key, body: { ...body, key: "other" }, headers: { "idempotency-key": "order-1" } });
    t.equal(other.status, 422, "the engine's 422 for a reused key passes through");
    t.equal(other.headers.get("x-svc-cus"), "0", "not charged");
    const n = engine.seen.length;
    t.equal((await call(gw.url, "/v1/put", { key, body, headers: { "idempotency-key": "" } })).status, 400, "an empty key: 400");
    const ctl = await call(gw.url, "/v1/put", { key, body, headers: { "idempotency-key": "a\tb" } });
    t.equal(ctl.status, 400, "a control character: 400");
    t.equal(ctl.json.code, "bad_request");
    t.equal(engine.seen.length, n, "both refused before the engine");
  } finally {
    await gw.close();
    await engine.close();
  }
});
