// A tenant that stops being a paying customer stops being billed, over the memory, local-file
// and Redis registries: deactivation, and an operator's move to starter or to enterprise, cancel
// the recorded subscription at the (fake) Stripe API; a checkout that completes for a deactivated
// tenant cancels its subscription, and so does an older checkout delivered after a newer one;
// a cancellation Stripe refuses or cannot take stays pending, is shown in the admin answer and
// the billing log, and is retried by the gateway's sweep until done; two gateways on one Redis
// cancel once. With billing off nothing changes.
import test from "tape";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalFileTenantRegistry, MemoryTenantRegistry, RedisTenantRegistry, type TenantRegistry } from "../../server/gateway/tenants.js";
import { admin, call, createTenant, redisFor, startFakeEngine, startTestGateway, uniquePrefix, type FakeEngine } from "./helpers.js";
import { postWebhook, SECRET_KEY, startBillingGateway, WEBHOOK_SECRET, type BillingGateway } from "./billing-env.js";
import { checkoutCompleted, startFakeStripe, stripeEvent, subscriptionDeleted, type FakeStripe } from "./fixtures/billing-fake-stripe.js";

interface Env extends BillingGateway {
  stripe: FakeStripe;
  responses: string[];
}

const sec = (env: Env) => Math.floor(env.clock.now() / 1000);
const tenant = async (env: Env, id: string) => (await env.registry.get(id))!;
/** The DELETE calls the fake Stripe API received for subscriptions whose id starts with `prefix`. */
const deletes = (s: FakeStripe, prefix: string) =>
  s.requests.filter((q) => q.method === "DELETE" && q.path.startsWith(`/v1/subscriptions/${prefix}`)).map((q) => q.path);
const logOf = (env: Env, pick: (r: Env["log"]["records"][number]) => boolean) =>
  env.log.records
    .filter(pick)
    .map((r) => `${r.type} ${r.outcome}${r.reason ? ":" + r.reason : ""} [${r.cancellations.map((c) => `${c.subscription_id}:${c.result}`).join(" ")}]`);
const logOfTenant = (env: Env, id: string) => logOf(env, (r) => r.tenant_id === id);

async function webhook(env: Env, body: string) {
  const r = await postWebhook(env, body);
  env.responses.push(JSON.stringify(r.json));
  return r;
}
async function adminCall(env: Env, path: string, body: unknown) {
  const r = await admin(env.gw.url, path, body);
  env.responses.push(JSON.stringify(r.json));
  return r;
}
const buy = (env: Env, evt: string, id: string, plan: string, sub: string, dt = 0) =>
  webhook(env, stripeEvent(evt, "checkout.session.completed", sec(env) + dt, checkoutCompleted(id, plan, sub)));

async function deactivationCancels(t: test.Test, env: Env, label: string) {
  const key = await createTenant(env.gw.url, { tenant_id: "acme" });
  t.equal((await buy(env, "evt_acme_b", "acme", "builder", "sub_acme_b")).status, 200, `${label}: builder checkout 200`);
  const r = await adminCall(env, "/gate/onboard/deactivate", { tenant_id: "acme" });
  t.equal(r.status, 200, `${label}: deactivate 200`);
  t.deepEqual(
    r.json,
    {
      tenant_id: "acme",
      status: "deactivated",
      cancellations: [{ subscription_id: "sub_acme_b", result: "canceled", detail: "" }],
      pending_cancellations: [],
    },
    `${label}: the answer says the subscription was canceled and nothing is pending`,
  );
  t.deepEqual(deletes(env.stripe, "sub_acme"), ["/v1/subscriptions/sub_acme_b"], `${label}: the subscription was canceled at Stripe`);
  t.equal(
    env.stripe.requests.find((q) => q.path === "/v1/subscriptions/sub_acme_b")?.headers.authorization,
    `Bearer ${SECRET_KEY}`,
    `${label}: through the SDK with the secret key`,
  );
  let a = await tenant(env, "acme");
  t.deepEqual(
    [a.active, a.status, a.billing?.subscription_id, a.billing?.pending_cancellations],
    [false, "deactivated", null, []],
    `${label}: the tenant is deactivated and holds no subscription`,
  );
  t.equal((await call(env.gw.url, "/v1/get/default/k", { key })).status, 401, `${label}: its key stops working`);

  const again = await adminCall(env, "/gate/onboard/deactivate", { tenant_id: "acme" });
  t.deepEqual(
    again.json,
    { tenant_id: "acme", status: "deactivated", cancellations: [], pending_cancellations: [] },
    `${label}: deactivating again answers the same and cancels nothing`,
  );
  const del = stripeEvent("evt_acme_del", "customer.subscription.deleted", sec(env) + 5, subscriptionDeleted("acme", "sub_acme_b"));
  t.equal((await webhook(env, del)).status, 200, `${label}: Stripe's deletion event 200`);
  a = await tenant(env, "acme");
  t.deepEqual(
    [a.plan, a.active, a.billing?.ended_subscriptions],
    ["builder", false, ["sub_acme_b"]],
    `${label}: it changes no terms and is remembered as ended`,
  );
  t.deepEqual(deletes(env.stripe, "sub_acme"), ["/v1/subscriptions/sub_acme_b"], `${label}: one cancellation in all`);
  t.deepEqual(
    env.stripe.canceled.filter((s) => s.startsWith("sub_acme")),
    ["sub_acme_b"],
    `${label}: canceled exactly once`,
  );
  t.deepEqual(
    logOfTenant(env, "acme"),
    ["checkout.session.completed applied []", "admin.deactivate applied [sub_acme_b:canceled]", "customer.subscription.deleted skipped:deactivated []"],
    `${label}: the billing log has the cancellation with the admin call`,
  );
  const rec = env.log.records.find((x) => x.type === "admin.deactivate" && x.tenant_id === "acme");
  t.deepEqual(
    [rec?.event_id, rec?.plan_before, rec?.plan_after, typeof rec?.request_id],
    ["", "builder", "builder", "string"],
    `${label}: the record names no event`,
  );
}

async function lateCheckoutCanceled(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "late" });
  const r = await adminCall(env, "/gate/onboard/deactivate", { tenant_id: "late" });
  t.deepEqual(
    r.json,
    { tenant_id: "late", status: "deactivated", cancellations: [], pending_cancellations: [] },
    `${label}: a tenant without subscription: nothing to cancel`,
  );
  env.clock.advance(60_000);
  const late = stripeEvent("evt_late", "checkout.session.completed", sec(env), checkoutCompleted("late", "builder", "sub_late_b"));
  t.equal((await webhook(env, late)).status, 200, `${label}: a checkout completing after deactivation: 200`);
  let l = await tenant(env, "late");
  t.deepEqual(
    [l.active, l.plan, l.billing?.subscription_id ?? null, l.billing?.pending_cancellations ?? []],
    [false, "starter", null, []],
    `${label}: the tenant stays deactivated on starter and holds no subscription`,
  );
  t.deepEqual(deletes(env.stripe, "sub_late"), ["/v1/subscriptions/sub_late_b"], `${label}: the purchased subscription is canceled`);
  t.equal((await webhook(env, late)).status, 200, `${label}: a replay 200`);
  // An older purchase arriving later still: canceled too (nobody can use the tenant).
  const older = stripeEvent("evt_late_old", "checkout.session.completed", sec(env) - 100, checkoutCompleted("late", "pro", "sub_late_old"));
  t.equal((await webhook(env, older)).status, 200, `${label}: an older checkout 200`);
  l = await tenant(env, "late");
  t.deepEqual([l.plan, l.billing?.pending_cancellations ?? []], ["starter", []], `${label}: still starter, nothing pending`);
  t.deepEqual(deletes(env.stripe, "sub_late"), ["/v1/subscriptions/sub_late_b", "/v1/subscriptions/sub_late_old"], `${label}: each purchase canceled once`);
  t.deepEqual(
    logOfTenant(env, "late"),
    [
      "checkout.session.completed skipped:deactivated [sub_late_b:canceled]",
      "checkout.session.completed skipped:duplicate []",
      "checkout.session.completed skipped:deactivated [sub_late_old:canceled]",
    ],
    `${label}: logged as skipped deactivated, with the cancellation`,
  );
}

async function stripeDownThenSweep(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "down" });
  await buy(env, "evt_down_b", "down", "builder", "sub_down_b");
  env.stripe.fail = { status: 500, type: "api_error", message: `Internal error, key ${SECRET_KEY}` };
  const r = await adminCall(env, "/gate/onboard/deactivate", { tenant_id: "down" });
  t.equal(r.status, 200, `${label}: Stripe answers 500: the deactivation still answers 200 (it is done)`);
  t.equal(r.json.status, "deactivated", `${label}: status deactivated`);
  t.deepEqual(
    (r.json.cancellations ?? []).map((c: { subscription_id: string; result: string }) => [c.subscription_id, c.result]),
    [["sub_down_b", "failed"]],
    `${label}: the answer says the cancellation failed`,
  );
  t.match(r.json.cancellations?.[0]?.detail ?? "", /HTTP 500, api_error/, `${label}: with the provider's status, not its message`);
  t.deepEqual(r.json.pending_cancellations, ["sub_down_b"], `${label}: and that it is pending`);
  let d = await tenant(env, "down");
  t.deepEqual(
    [d.active, d.billing?.subscription_id, d.billing?.pending_cancellations],
    [false, null, ["sub_down_b"]],
    `${label}: the deactivation is not lost and the cancellation is on the record`,
  );
  t.deepEqual(logOfTenant(env, "down").slice(-1), ["admin.deactivate applied [sub_down_b:failed]"], `${label}: the failure is in the billing log`);

  const stillDown = await env.cancellations.sweep();
  t.deepEqual(
    stillDown.map((c) => [c.subscription_id, c.result]),
    [["sub_down_b", "failed"]],
    `${label}: a sweep while Stripe is down fails again and leaves it pending`,
  );
  env.stripe.fail = null;
  const swept = await env.cancellations.sweep();
  t.deepEqual(
    swept.map((c) => [c.subscription_id, c.result]),
    [["sub_down_b", "canceled"]],
    `${label}: the sweep after Stripe is back cancels it`,
  );
  d = await tenant(env, "down");
  t.deepEqual(d.billing?.pending_cancellations, [], `${label}: nothing pending`);
  t.deepEqual(
    env.stripe.canceled.filter((s) => s.startsWith("sub_down")),
    ["sub_down_b"],
    `${label}: canceled once`,
  );
  t.deepEqual((await env.cancellations.sweep()).length, 0, `${label}: the next sweep has nothing to do`);
  // The SDK sends a request Stripe answered 500 once more (maxNetworkRetries 1): two failed
  // attempts of two requests each, then the one that canceled.
  t.deepEqual(deletes(env.stripe, "sub_down"), Array(5).fill("/v1/subscriptions/sub_down_b"), `${label}: Stripe was asked in three attempts and never after`);
  t.deepEqual(
    logOfTenant(env, "down").slice(1),
    [
      "admin.deactivate applied [sub_down_b:failed]",
      "retry.pending_cancellations applied [sub_down_b:failed]",
      "retry.pending_cancellations applied [sub_down_b:canceled]",
    ],
    `${label}: every attempt is in the billing log`,
  );
}

async function tierMovesCancel(t: test.Test, env: Env, label: string) {
  // To starter, with Stripe unreachable: the move is kept, the cancellation pending; the
  // operator's repeated call cancels it once Stripe is back.
  await createTenant(env.gw.url, { tenant_id: "tier" });
  await buy(env, "evt_tier_p", "tier", "pro", "sub_tier_p");
  const port = Number(new URL(env.stripe.url).port);
  await env.stripe.close();
  const down = await adminCall(env, "/gate/onboard/update-tier", { tenant_id: "tier", plan: "starter" });
  t.equal(down.status, 200, `${label}: move to starter with Stripe unreachable: 200`);
  t.deepEqual([down.json.plan, down.json.monthly_quota], ["starter", 1000], `${label}: the move is done`);
  t.match(down.json.cancellations?.[0]?.detail ?? "", /could not be reached to cancel a subscription/, `${label}: the answer says Stripe could not be reached`);
  t.notOk(JSON.stringify(down.json).includes("127.0.0.1"), `${label}: no address in the answer`);
  t.deepEqual(down.json.pending_cancellations, ["sub_tier_p"], `${label}: the cancellation is pending`);
  env.stripe = await startFakeStripe(port);
  const up = await adminCall(env, "/gate/onboard/update-tier", { tenant_id: "tier", plan: "starter" });
  t.deepEqual(
    [up.status, up.json.cancellations, up.json.pending_cancellations],
    [200, [{ subscription_id: "sub_tier_p", result: "canceled", detail: "" }], []],
    `${label}: the repeated call cancels it`,
  );
  t.deepEqual(deletes(env.stripe, "sub_tier"), ["/v1/subscriptions/sub_tier_p"], `${label}: one call to the restarted Stripe`);
  const del = stripeEvent("evt_tier_del", "customer.subscription.deleted", sec(env) + 5, subscriptionDeleted("tier", "sub_tier_p"));
  t.equal((await webhook(env, del)).status, 200, `${label}: its deletion event 200`);
  const tt = await tenant(env, "tier");
  t.deepEqual([tt.plan, tt.billing?.subscription_id], ["starter", null], `${label}: still starter`);
  t.deepEqual(logOfTenant(env, "tier").slice(-1), ["customer.subscription.deleted skipped:not_current_subscription []"], `${label}: and no plan change`);

  // To enterprise (contract billing): canceled too.
  await createTenant(env.gw.url, { tenant_id: "ent" });
  await buy(env, "evt_ent_b", "ent", "builder", "sub_ent_b");
  const terms = { monthly_quota: null, rate_limit: { requests: 5000, window_s: 60 } };
  const ent = await adminCall(env, "/gate/onboard/update-tier", { tenant_id: "ent", plan: "enterprise", ...terms });
  t.deepEqual(
    ent.json,
    {
      tenant_id: "ent",
      plan: "enterprise",
      ...terms,
      cancellations: [{ subscription_id: "sub_ent_b", result: "canceled", detail: "" }],
      pending_cancellations: [],
    },
    `${label}: a move to enterprise cancels the subscription`,
  );
  t.deepEqual(deletes(env.stripe, "sub_ent"), ["/v1/subscriptions/sub_ent_b"], `${label}: at Stripe, once`);
  t.deepEqual(logOfTenant(env, "ent").slice(-1), ["admin.update_tier applied [sub_ent_b:canceled]"], `${label}: in the billing log`);

  // Between paid plans the subscription stays (the operator's own adjustment).
  await createTenant(env.gw.url, { tenant_id: "paid" });
  await buy(env, "evt_paid_b", "paid", "builder", "sub_paid_b");
  const pro = await adminCall(env, "/gate/onboard/update-tier", { tenant_id: "paid", plan: "pro" });
  t.deepEqual([pro.json.plan, pro.json.cancellations, pro.json.pending_cancellations], ["pro", [], []], `${label}: builder to pro cancels nothing`);
  t.deepEqual(deletes(env.stripe, "sub_paid"), [], `${label}: Stripe not asked`);
  t.equal((await tenant(env, "paid")).billing?.subscription_id, "sub_paid_b", `${label}: the subscription stays recorded`);
}

async function olderCheckoutCanceled(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "twice" });
  env.clock.advance(60_000);
  // two checkouts: pro completes last but its event is delivered first
  t.equal((await buy(env, "evt_twice_pro", "twice", "pro", "sub_twice_pro")).status, 200, `${label}: the newer checkout (pro) 200`);
  t.equal((await buy(env, "evt_twice_b", "twice", "builder", "sub_twice_b", -30)).status, 200, `${label}: the older one (builder), delivered late: 200`);
  const w = await tenant(env, "twice");
  t.deepEqual(
    [w.active, w.plan, w.billing?.subscription_id, w.billing?.pending_cancellations ?? []],
    [true, "pro", "sub_twice_pro", []],
    `${label}: the tenant stays on the newer purchase, nothing pending`,
  );
  t.deepEqual(
    deletes(env.stripe, "sub_twice"),
    ["/v1/subscriptions/sub_twice_b"],
    `${label}: the older purchase's subscription is canceled, the newer one is not`,
  );
  t.deepEqual(
    logOfTenant(env, "twice"),
    ["checkout.session.completed applied []", "checkout.session.completed skipped:out_of_order [sub_twice_b:canceled]"],
    `${label}: logged as skipped out of order, with the cancellation`,
  );
  // Stripe's retry of the older event (the same id), and an older event naming the current subscription, cancel nothing more
  t.equal((await buy(env, "evt_twice_b", "twice", "builder", "sub_twice_b", -30)).status, 200, `${label}: the older event retried: 200`);
  t.equal((await buy(env, "evt_twice_pro2", "twice", "pro", "sub_twice_pro", -20)).status, 200, `${label}: an older event of the current subscription: 200`);
  t.deepEqual(deletes(env.stripe, "sub_twice"), ["/v1/subscriptions/sub_twice_b"], `${label}: each canceled once, the current one never`);
  t.equal((await tenant(env, "twice")).billing?.subscription_id, "sub_twice_pro", `${label}: still on the newer purchase`);
}

async function scenarios(t: test.Test, engine: FakeEngine, registry: TenantRegistry, label: string) {
  const stripe = await startFakeStripe();
  const env: Env = { ...(await startBillingGateway(engine, stripe, registry)), stripe, responses: [] };
  try {
    await deactivationCancels(t, env, label);
    await lateCheckoutCanceled(t, env, label);
    await olderCheckoutCanceled(t, env, label);
    await stripeDownThenSweep(t, env, label);
    await tierMovesCancel(t, env, label);
    const everything = [...env.responses, ...env.log.records.map((r) => JSON.stringify(r)), ...env.gw.audit.records.map((r) => JSON.stringify(r))].join("\n");
    t.notOk(everything.includes(SECRET_KEY) || everything.includes(WEBHOOK_SECRET), `${label}: no secret in any answer, billing-log or audit record`);
  } finally {
    await env.gw.close();
    await env.stripe.close();
  }
}

test("deactivation and moves to starter or enterprise cancel the subscription, over the memory registry", async (t) => {
  const engine = await startFakeEngine();
  try {
    await scenarios(t, engine, new MemoryTenantRegistry(), "memory");
  } finally {
    await engine.close();
  }
});

test("deactivation and moves to starter or enterprise cancel the subscription, over the local-file registry (pending survives a restart)", async (t) => {
  const engine = await startFakeEngine();
  const dir = await mkdtemp(join(tmpdir(), "svc-billing-deactivate-"));
  try {
    const registry = await LocalFileTenantRegistry.open(dir);
    await scenarios(t, engine, registry, "local");
    // A cancellation pending when the gateway stops is read back and swept after a restart.
    const stripe = await startFakeStripe();
    stripe.fail = { status: 503, type: "api_error", message: "down" };
    const env: Env = { ...(await startBillingGateway(engine, stripe, await LocalFileTenantRegistry.open(dir))), stripe, responses: [] };
    try {
      await createTenant(env.gw.url, { tenant_id: "restart" });
      await buy(env, "evt_restart_b", "restart", "builder", "sub_restart_b");
      const r = await adminCall(env, "/gate/onboard/deactivate", { tenant_id: "restart" });
      t.deepEqual(r.json.pending_cancellations, ["sub_restart_b"], "local: pending while Stripe answers 503");
    } finally {
      await env.gw.close();
    }
    stripe.fail = null;
    const again: Env = { ...(await startBillingGateway(engine, stripe, await LocalFileTenantRegistry.open(dir))), stripe, responses: [] };
    try {
      t.deepEqual((await tenant(again, "restart")).billing?.pending_cancellations, ["sub_restart_b"], "local: read back from tenants.json");
      t.deepEqual(
        (await again.cancellations.sweep()).map((c) => [c.subscription_id, c.result]),
        [["sub_restart_b", "canceled"]],
        "local: the restarted gateway's sweep cancels it",
      );
      t.deepEqual(stripe.canceled, ["sub_restart_b"], "local: once");
    } finally {
      await again.gw.close();
      await stripe.close();
    }
  } finally {
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("deactivation and moves to starter or enterprise cancel the subscription, over the Redis registry; two gateways cancel once", async (t) => {
  const engine = await startFakeEngine();
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  try {
    await scenarios(t, engine, new RedisTenantRegistry(redis, prefix), "redis");

    const stripe = await startFakeStripe();
    const a: Env = { ...(await startBillingGateway(engine, stripe, new RedisTenantRegistry(redis, prefix))), stripe, responses: [] };
    const b: Env = { ...(await startBillingGateway(engine, stripe, new RedisTenantRegistry(redis, prefix))), stripe, responses: [] };
    try {
      // The same tenant deactivated on both gateways at once.
      await createTenant(a.gw.url, { tenant_id: "both" });
      await buy(a, "evt_both_b", "both", "builder", "sub_both_b");
      const rs = await Promise.all([a, b].map((env) => adminCall(env, "/gate/onboard/deactivate", { tenant_id: "both" })));
      t.deepEqual(
        rs.map((r) => [r.status, r.json.status, r.json.pending_cancellations]),
        [
          [200, "deactivated", []],
          [200, "deactivated", []],
        ],
        "redis: both gateways answer deactivated, nothing pending",
      );
      t.deepEqual(stripe.canceled, ["sub_both_b"], "redis: Stripe canceled the subscription once");
      const asked = deletes(stripe, "sub_both").length;
      t.ok(asked >= 1 && asked <= 2, "redis: asked by one gateway, or by both at the same instant (the second then already canceled)");
      t.deepEqual(
        rs.flatMap((r) => (r.json.cancellations ?? []).map((c: { result: string }) => c.result)).sort(),
        asked === 1 ? ["canceled"] : ["already_canceled", "canceled"],
        "redis: one answer canceled, any other already canceled",
      );

      // Pending after a failure on one gateway: both gateways' sweeps at once cancel it once.
      await createTenant(a.gw.url, { tenant_id: "swept" });
      await buy(a, "evt_swept_b", "swept", "pro", "sub_swept_p");
      stripe.fail = { status: 500, type: "api_error", message: "down" };
      t.deepEqual((await adminCall(a, "/gate/onboard/deactivate", { tenant_id: "swept" })).json.pending_cancellations, ["sub_swept_p"], "redis: pending on A");
      stripe.fail = null;
      const swept = (await Promise.all([a.cancellations.sweep(), b.cancellations.sweep()])).flat().filter((c) => c.subscription_id === "sub_swept_p");
      t.ok(swept.length >= 1 && swept.every((c) => c.result !== "failed"), "redis: the sweeps of both gateways finish it");
      t.deepEqual(stripe.canceled, ["sub_both_b", "sub_swept_p"], "redis: canceled once at Stripe");
      t.deepEqual((await a.registry.get("swept"))!.billing?.pending_cancellations, [], "redis: nothing pending");
    } finally {
      await a.gw.close();
      await b.gw.close();
      await stripe.close();
    }
  } finally {
    await cleanup();
    await engine.close();
  }
});

test("billing off: deactivation and update-tier answer as before and leave the billing record alone", async (t) => {
  const engine = await startFakeEngine();
  const registry = new MemoryTenantRegistry();
  const gw = await startTestGateway(engine.url, { registry });
  try {
    for (const id of ["off1", "off2"]) {
      await createTenant(gw.url, { tenant_id: id, plan: "builder" });
      await registry.update(id, (cur) => ({
        ...cur,
        billing: { subscription_id: `sub_${id}`, customer_id: null, last_event_created: 0, ended_subscriptions: [] },
      }));
    }
    const d = await admin(gw.url, "/gate/onboard/deactivate", { tenant_id: "off1" });
    t.deepEqual([d.status, d.json], [200, { tenant_id: "off1", status: "deactivated" }], "deactivate answers tenant_id and status only");
    const u = await admin(gw.url, "/gate/onboard/update-tier", { tenant_id: "off2", plan: "starter" });
    t.deepEqual(
      [u.status, u.json],
      [200, { tenant_id: "off2", plan: "starter", monthly_quota: 1000, rate_limit: { requests: 100, window_s: 60 } }],
      "update-tier answers as before",
    );
    for (const id of ["off1", "off2"]) {
      const b = (await registry.get(id))!.billing;
      t.deepEqual([b?.subscription_id, b?.pending_cancellations], [`sub_${id}`, undefined], `${id}: the billing record is untouched`);
    }
  } finally {
    await gw.close();
    await engine.close();
  }
});
