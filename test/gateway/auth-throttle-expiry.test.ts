// The failed-authentication throttle and authentication decide "this credential verifies" with
// one function (keys.ts confirmKey): from a throttled address, a scoped key past its expiry, a
// revoked key or a deactivated tenant's key is refused 429 with the other failing attempts,
// while an unexpired scoped key and the tenant's own key are served.
import test from "tape";
import { admin, call, createTenant, startFakeEngine, startTestGateway } from "./helpers.js";

test("a throttled address: an expired scoped key is refused like a wrong key, a live one is served", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { limits: { authFailLimit: 3, authFailWindowS: 86_400 } });
  try {
    const own = await createTenant(g.url, { tenant_id: "acme" });
    const made = await admin(g.url, "/gate/admin/keys", { tenant_id: "acme", name: "short", scopes: ["read"], expires_at: "2026-01-15T13:00:00Z" });
    t.equal(made.status, 201, "a scoped key expiring in an hour (gateway clock)");
    const scoped = made.json.api_key as string;
    const gone = await admin(g.url, "/gate/admin/keys", { tenant_id: "acme", name: "gone", scopes: ["read"] });
    t.equal((await admin(g.url, "/gate/admin/keys/revoke", { key_id: gone.json.key_id })).status, 200, "a second scoped key, revoked");
    const wrong = `svc_live_${"z".repeat(43)}`;
    // Failures are counted once each answer is written: poll with the wrong key until refused.
    let status = 0;
    for (let i = 0; i < 200 && status !== 429; i++) status = (await call(g.url, "/v1/get/default/k", { key: wrong })).status;
    t.equal(status, 429, "the address is throttled after its failures");
    t.equal((await call(g.url, "/v1/get/default/k", { key: scoped })).status, 200, "the unexpired scoped key verifies and is served");
    t.equal((await call(g.url, "/v1/get/default/k", { key: gone.json.api_key })).status, 429, "a revoked key does not verify: 429");
    g.clock.advance(2 * 3600_000);
    const late = await call(g.url, "/v1/get/default/k", { key: scoped });
    t.equal(late.status, 429, "the expired scoped key does not get past the throttle (was 401 after passing it)");
    t.equal(late.json.code, "rate_limited");
    t.equal((await call(g.url, "/v1/get/default/k", { key: own })).status, 200, "the tenant's own key, which never expires, is served");
    t.equal((await admin(g.url, "/gate/onboard/deactivate", { tenant_id: "acme" })).status, 200, "the tenant deactivated");
    t.equal((await call(g.url, "/v1/get/default/k", { key: own })).status, 429, "a deactivated tenant's key does not verify: 429");
  } finally {
    await g.close();
    await engine.close();
  }
});
