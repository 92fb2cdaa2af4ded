// A gateway started while its Redis does not answer: it starts, answers 503 state_unavailable
// with Retry-After and says store_connected false on /gate/health, then serves once a
// redis-server of the test's own comes up on that port, with no restart. Waits are conditions.
import test from "tape";
import { admin, call } from "../gateway/helpers.js";
import { gatewayOnRedis, startRedisProc, waitFor } from "./deps.js";

const started = await startRedisProc();
if ("skip" in started) {
  test("gateway before its Redis", (t) => {
    t.comment(`skipped: ${started.skip}`);
    t.end();
  });
} else {
  test("gateway started before its Redis: 503 state_unavailable until Redis answers, then served without a restart", async (t) => {
    const redis = started;
    await redis.kill(); // the port is free again: nothing answers there until start()
    const { gw, close } = await gatewayOnRedis(redis.url, "svc-late:", { SVC_GATE_REDIS_TIMEOUT_MS: "1000" });
    try {
      t.pass("the gateway started while nothing answered on the Redis port");
      const health = async () => (await (await fetch(gw.url + "/gate/health")).json()) as { store_connected: boolean };
      t.equal((await health()).store_connected, false, "/gate/health: store_connected false");
      const created = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" });
      t.equal(created.status, 503, "an admin write: 503");
      t.equal(created.json.code, "state_unavailable", "state_unavailable");
      t.ok(Number(created.headers.get("retry-after")) >= 1, "with Retry-After");
      const get = await call(gw.url, "/v1/get/default/k", { key: `svc_live_${"a".repeat(43)}` });
      t.equal(get.status, 503, "a data-plane request: 503");
      t.equal(get.json.code, "state_unavailable");
      t.ok(Number(get.headers.get("retry-after")) >= 1, "with Retry-After");
      t.notOk(JSON.stringify(get.json).includes("127.0.0.1"), "the detail names no address");

      await redis.start();
      await waitFor("the gateway reconnects to Redis", async () => (await health()).store_connected, 60_000);
      t.pass("/gate/health: store_connected true once Redis answers");
      const again = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" });
      t.equal(again.status, 201, "the tenant is created");
      const ok = await call(gw.url, "/v1/get/default/k", { key: again.json.api_key as string });
      t.equal(ok.status, 200, "and served, with no restart");
    } finally {
      await close();
      await redis.destroy();
    }
  });
}
