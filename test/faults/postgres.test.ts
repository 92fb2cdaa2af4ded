// The engine on a PostgreSQL cluster of the test's own (test/faults/deps.ts): a restart, a
// kill -9 of the database and a database that is not there when the engine starts. The engine
// process stays up through each; a request in flight gets 503 store_unavailable with
// Retry-After (never a 500), /health says store_connected false while the database is away,
// and service comes back by itself. Every wait is a condition with a deadline.
import test from "tape";
import { ENGINE_KEY, startEngineProcess, startPgCluster, waitFor, type PgCluster } from "./deps.js";

const KEY = ENGINE_KEY;
const startEngine = (where: string) => startEngineProcess({ SVC_ENGINE_STORE_URL: where, SVC_ENGINE_STORE_TIMEOUT_MS: "3000" });

async function call(url: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    /* not JSON */
  }
  return { status: res.status, json, retryAfter: res.headers.get("retry-after") };
}

const healthOf = async (url: string) => (await (await fetch(url + "/health")).json()) as { store_connected: boolean; status: string };
const put = (url: string, key: string, i: number, idem?: string) =>
  call(
    url,
    "POST",
    "/v1/put",
    { namespace: "ns", key, data_b64: Buffer.from(`value ${key} ${i}`).toString("base64") },
    idem ? { "idempotency-key": idem } : {},
  );

const cluster = await startPgCluster();
if ("skip" in cluster) {
  test("PostgreSQL faults", (t) => {
    t.comment(`skipped: ${cluster.skip}`);
    t.end();
  });
} else {
  const pg: PgCluster = cluster;
  test.onFinish(() => void pg.destroy());

  test("a restart and a kill -9 of PostgreSQL under writes: the engine stays up, answers 503 store_unavailable, and serves again", async (t) => {
    const eng = await startEngine(pg.url);
    try {
      t.equal((await put(eng.url, "a", 0)).status, 201, "a put before the fault");
      t.equal((await healthOf(eng.url)).store_connected, true, "/health: store_connected true");
      for (const fault of ["restart", "kill"] as const) {
        // writes keep going while the database goes away and comes back
        const statuses = new Map<number, number>();
        const bad: string[] = [];
        let stop = false;
        let i = 0;
        const acked: { idem: string; i: number }[] = [];
        const load = (async () => {
          while (!stop) {
            const idem = `${fault}-${i}`;
            const r = await put(eng.url, "a", i, idem).catch(() => ({ status: 0, json: {} as Record<string, unknown>, retryAfter: null }));
            statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
            if (r.status === 201) acked.push({ idem, i });
            else if (r.status !== 503 || r.json.code !== "store_unavailable" || !/^\d+$/.test(r.retryAfter ?? ""))
              bad.push(`${r.status} ${String(r.json.code)} ${r.retryAfter}`);
            i++;
            if (r.status !== 201) await new Promise((res) => setTimeout(res, 50));
          }
        })();
        await waitFor("a few puts before the fault", () => acked.length >= 3, 60_000);
        if (fault === "restart") await pg.restart();
        else {
          await pg.kill();
          await waitFor("a put refused while the database is down", () => (statuses.get(503) ?? 0) > 0, 60_000);
          t.equal((await healthOf(eng.url)).store_connected, false, "/health: store_connected false while the database is down");
          await pg.start();
        }
        const before = acked.length;
        await waitFor("puts acknowledged again after the fault", () => acked.length >= before + 3, 60_000);
        stop = true;
        await load;
        t.equal(eng.child.exitCode, null, `${fault}: the engine process is still up`);
        t.deepEqual(bad, [], `${fault}: every refusal is 503 store_unavailable with Retry-After (statuses ${JSON.stringify([...statuses])})`);
        t.ok(!statuses.has(500), `${fault}: no 500`);
        // every acknowledged write is there: its idempotency key answers the stored response
        const last = acked[acked.length - 1]!;
        const again = await put(eng.url, "a", last.i, last.idem);
        t.equal(again.status, 201, `${fault}: the last acknowledged put replays from its record`);
        await waitFor("/health: store_connected true again", async () => (await healthOf(eng.url)).store_connected, 30_000);
      }
      const g = await call(eng.url, "GET", "/v1/get/ns/a");
      t.equal(g.status, 200, "reads work after both faults");
      t.doesNotMatch(eng.stderr(), /Connection terminated|Unhandled|TypeError/, "nothing unhandled on stderr");
    } finally {
      eng.child.kill("SIGKILL");
    }
  });

  test("the database down when the engine starts: it listens, answers 503 store_unavailable, and serves once the database is up", async (t) => {
    await pg.stop();
    const eng = await startEngine(pg.url);
    try {
      const h = await healthOf(eng.url);
      t.equal(h.status, "ok", "/health answers");
      t.equal(h.store_connected, false, "/health: store_connected false");
      const r = await put(eng.url, "b", 1, "start-1");
      t.equal(r.status, 503, "a put: 503");
      t.equal(r.json.code, "store_unavailable", "code store_unavailable");
      t.match(r.retryAfter ?? "", /^\d+$/, "Retry-After in seconds");
      t.doesNotMatch(String(r.json.detail), /postgres:\/\/|127\.0\.0\.1|at /, "the detail names no address or stack");
      await pg.start();
      await waitFor("the put succeeds once the database is up", async () => (await put(eng.url, "b", 1, "start-1")).status === 201, 60_000);
      t.equal((await call(eng.url, "GET", "/v1/get/ns/b")).status, 200, "and reads back");
      t.equal(eng.child.exitCode, null, "the engine process stayed up");
    } finally {
      eng.child.kill("SIGKILL");
    }
  });
}
