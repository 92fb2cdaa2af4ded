// Billing when a tenant changes paid plan, over the memory, local-file and Redis registries:
// the checkout that replaces a live subscription cancels the old one at the (fake) Stripe API
// through the SDK exactly once; a failed cancellation (Stripe 500, connection refused) answers
// 500 and the retry of the same event cancels it without applying anything twice; a
// subscription deleted without tenant metadata is matched by its customer.
import test from "tape";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalFileTenantRegistry, MemoryTenantRegistry, RedisTenantRegistry, type TenantRegistry } from "../../server/gateway/tenants.js";
import { admin, createTenant, redisFor, startFakeEngine, uniquePrefix, type FakeEngine } from "./helpers.js";
import { SECRET_KEY, WEBHOOK_SECRET, postWebhook, startBillingGateway, type BillingGateway } from "./billing-env.js";
import {
  checkoutCompleted,
  startFakeStripe,
  stripeEvent,
  subscriptionDeleted,
  subscriptionDeletedNoMeta,
  type FakeStripe,
} from "./fixtures/billing-fake-stripe.js";

interface Env extends BillingGateway {
  /** The fake Stripe API; replaced when a test restarts it on the same port. */
  stripe: FakeStripe;
  responses: string[];
}

async function setup(engine: FakeEngine, stripe: FakeStripe, registry: TenantRegistry): Promise<Env> {
  return { ...(await startBillingGateway(engine, stripe, registry)), stripe, responses: [] };
}

async function webhook(env: Env, body: string) {
  const r = await postWebhook(env, body);
  env.responses.push(JSON.stringify(r.json));
  return r;
}

const sec = (env: Env) => Math.floor(env.clock.now() / 1000);
const tenant = async (env: Env, id: string) => (await env.registry.get(id))!;
const deletes = (s: FakeStripe) => s.requests.filter((q) => q.method === "DELETE").map((q) => q.path);
const logOf = (env: Env, eventId: string) =>
  env.log.records
    .filter((r) => r.event_id === eventId)
    .map((r) => `${r.outcome}${r.reason ? ":" + r.reason : ""} [${r.cancellations.map((c) => `${c.subscription_id}:${c.result}`).join(" ")}]`);
const auditStatuses = (env: Env, tenantId: string) =>
  env.gw.audit.records.filter((a) => a.path === "/webhooks/payment" && a.tenant_id === tenantId).map((a) => a.status);

async function upgradeCancelsOldOnce(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "acme" });
  const now = sec(env);
  t.equal(
    (await webhook(env, stripeEvent("evt_b", "checkout.session.completed", now, checkoutCompleted("acme", "builder", "sub_builder")))).status,
    200,
    `${label}: builder checkout 200`,
  );
  t.deepEqual(deletes(env.stripe), [], `${label}: a first subscription cancels nothing`);

  const pro = stripeEvent("evt_p", "checkout.session.completed", now + 10, checkoutCompleted("acme", "pro", "sub_pro"));
  const r = await webhook(env, pro);
  t.equal(r.status, 200, `${label}: pro checkout 200`);
  let a = await tenant(env, "acme");
  t.deepEqual([a.plan, a.monthly_quota, a.billing?.subscription_id], ["pro", 500_000, "sub_pro"], `${label}: the tenant is on pro with the new subscription`);
  t.deepEqual(deletes(env.stripe), ["/v1/subscriptions/sub_builder"], `${label}: the builder subscription was canceled at Stripe through the SDK`);
  t.equal(env.stripe.requests.find((q) => q.method === "DELETE")?.headers.authorization, `Bearer ${SECRET_KEY}`, `${label}: with the secret key`);
  t.deepEqual(a.billing?.pending_cancellations, [], `${label}: nothing left pending`);

  t.equal((await webhook(env, pro)).status, 200, `${label}: a replay of the pro checkout 200`);
  const del = stripeEvent("evt_del_builder", "customer.subscription.deleted", now + 20, subscriptionDeleted("acme", "sub_builder"));
  t.equal((await webhook(env, del)).status, 200, `${label}: the old subscription's deletion event 200`);
  a = await tenant(env, "acme");
  t.deepEqual([a.plan, a.billing?.subscription_id], ["pro", "sub_pro"], `${label}: the old subscription's deletion changes nothing`);
  t.deepEqual(env.stripe.canceled, ["sub_builder"], `${label}: canceled exactly once`);
  t.deepEqual(
    a.plan_history?.map((h) => h.plan),
    ["starter", "builder", "pro"],
    `${label}: each plan change recorded once`,
  );
  t.deepEqual(
    ["evt_b", "evt_p", "evt_del_builder"].flatMap((id) => logOf(env, id)),
    ["applied []", "applied [sub_builder:canceled]", "skipped:duplicate []", "skipped:not_current_subscription []"],
    `${label}: the billing log records each delivery and the cancellation`,
  );
  t.deepEqual(auditStatuses(env, "acme"), [200, 200, 200, 200], `${label}: each delivery audited`);
}

async function failedCancelIsRetried(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "beta" });
  const now = sec(env) + 100;
  await webhook(env, stripeEvent("evt_beta_b", "checkout.session.completed", now, checkoutCompleted("beta", "builder", "sub_beta_b")));
  const pro = stripeEvent("evt_beta_p", "checkout.session.completed", now + 10, checkoutCompleted("beta", "pro", "sub_beta_p"));

  env.stripe.fail = { status: 500, type: "api_error", message: `Internal error, key ${SECRET_KEY}` };
  const r = await webhook(env, pro);
  t.equal(r.status, 500, `${label}: Stripe answers 500 to the cancel: the webhook answers 500 (Stripe retries)`);
  t.equal(r.json.code, "internal", `${label}: code internal`);
  t.match(r.json.detail, /sub_beta_b is not canceled yet.*HTTP 500, api_error/, `${label}: detail names the subscription and the provider status`);
  let b = await tenant(env, "beta");
  t.deepEqual(
    [b.plan, b.billing?.subscription_id, b.billing?.pending_cancellations],
    ["pro", "sub_beta_p", ["sub_beta_b"]],
    `${label}: the plan change is applied and the cancellation is recorded as pending`,
  );

  env.stripe.fail = null;
  const again = await webhook(env, pro);
  t.equal(again.status, 200, `${label}: the retry of the same event answers 200`);
  b = await tenant(env, "beta");
  t.deepEqual(b.billing?.pending_cancellations, [], `${label}: the retry canceled it and cleared the pending entry`);
  t.deepEqual(
    env.stripe.canceled.filter((s) => s.startsWith("sub_beta")),
    ["sub_beta_b"],
    `${label}: canceled once at Stripe`,
  );
  t.deepEqual(
    b.plan_history?.map((h) => h.plan),
    ["starter", "builder", "pro"],
    `${label}: the plan change was not applied twice`,
  );
  const n = deletes(env.stripe).length;
  t.equal((await webhook(env, pro)).status, 200, `${label}: a third delivery 200`);
  t.equal(deletes(env.stripe).length, n, `${label}: and asks Stripe nothing`);
  t.deepEqual(
    logOf(env, "evt_beta_p"),
    ["applied [sub_beta_b:failed]", "skipped:duplicate [sub_beta_b:canceled]", "skipped:duplicate []"],
    `${label}: every delivery in the billing log`,
  );
  t.deepEqual(auditStatuses(env, "beta"), [200, 500, 200, 200], `${label}: the failed delivery audited as 500 with its tenant`);
}

async function unreachableCancelIsRetried(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "gamma" });
  const now = sec(env) + 200;
  await webhook(env, stripeEvent("evt_gamma_b", "checkout.session.completed", now, checkoutCompleted("gamma", "builder", "sub_gamma_b")));
  const pro = stripeEvent("evt_gamma_p", "checkout.session.completed", now + 10, checkoutCompleted("gamma", "pro", "sub_gamma_p"));
  const port = Number(new URL(env.stripe.url).port);
  await env.stripe.close();
  const r = await webhook(env, pro);
  t.equal(r.status, 500, `${label}: Stripe unreachable (connection refused): 500`);
  t.match(r.json.detail, /could not be reached to cancel a subscription/, `${label}: detail says the provider could not be reached`);
  t.notOk(r.json.detail.includes("127.0.0.1"), `${label}: no address in the body`);
  t.equal((await tenant(env, "gamma")).plan, "pro", `${label}: the plan change is applied`);

  env.stripe = await startFakeStripe(port);
  const again = await webhook(env, pro);
  t.equal(again.status, 200, `${label}: the retry after Stripe is back answers 200`);
  t.deepEqual(env.stripe.canceled, ["sub_gamma_b"], `${label}: and cancels the old subscription once`);
  const g = await tenant(env, "gamma");
  t.deepEqual([g.plan, g.billing?.pending_cancellations, g.plan_history?.length], ["pro", [], 3], `${label}: pending cleared, nothing applied twice`);
}

async function alreadyCanceledCountsAsDone(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "delta" });
  const now = sec(env) + 300;
  await webhook(env, stripeEvent("evt_delta_b", "checkout.session.completed", now, checkoutCompleted("delta", "builder", "sub_delta_b")));
  // Stripe already canceled it (the Dashboard, or a cancel whose answer was lost): 404 resource_missing.
  env.stripe.canceled.push("sub_delta_b");
  const r = await webhook(env, stripeEvent("evt_delta_p", "checkout.session.completed", now + 10, checkoutCompleted("delta", "pro", "sub_delta_p")));
  t.equal(r.status, 200, `${label}: an already canceled subscription counts as done: 200`);
  t.deepEqual((await tenant(env, "delta")).billing?.pending_cancellations, [], `${label}: nothing pending`);
  t.deepEqual(logOf(env, "evt_delta_p"), ["applied [sub_delta_b:already_canceled]"], `${label}: logged as already canceled`);

  // A pending cancellation whose deletion event arrives first is dropped without asking Stripe.
  await webhook(env, stripeEvent("evt_delta_b2", "checkout.session.completed", now + 20, checkoutCompleted("delta", "builder", "sub_delta_b2")));
  t.deepEqual(env.stripe.canceled.slice(-1), ["sub_delta_p"], `${label}: pro replaced by builder: pro canceled`);
  env.stripe.fail = { status: 500, type: "api_error", message: "down" };
  const up = stripeEvent("evt_delta_p2", "checkout.session.completed", now + 30, checkoutCompleted("delta", "pro", "sub_delta_p2"));
  t.equal((await webhook(env, up)).status, 500, `${label}: cancel fails: 500`);
  env.stripe.fail = null;
  const gone = stripeEvent("evt_delta_gone", "customer.subscription.deleted", now + 40, subscriptionDeleted("delta", "sub_delta_b2"));
  t.equal((await webhook(env, gone)).status, 200, `${label}: the old subscription's deletion arrives: 200`);
  const d = await tenant(env, "delta");
  t.deepEqual([d.plan, d.billing?.pending_cancellations], ["pro", []], `${label}: plan kept, the pending cancellation dropped`);
  const n = deletes(env.stripe).length;
  t.equal((await webhook(env, up)).status, 200, `${label}: the retry answers 200`);
  t.equal(deletes(env.stripe).length, n, `${label}: without asking Stripe again`);
}

async function customerFallback(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "eps" });
  await createTenant(env.gw.url, { tenant_id: "zeta" });
  const now = sec(env) + 400;
  await webhook(env, stripeEvent("evt_eps", "checkout.session.completed", now, checkoutCompleted("eps", "builder", "sub_eps", { customer: "cus_eps_1" })));
  await webhook(env, stripeEvent("evt_zeta", "checkout.session.completed", now, checkoutCompleted("zeta", "pro", "sub_zeta", { customer: "cus_zeta_1" })));

  const nobody = stripeEvent("evt_nobody", "customer.subscription.deleted", now + 10, subscriptionDeletedNoMeta("cus_nobody", "sub_eps"));
  t.equal((await webhook(env, nobody)).status, 200, `${label}: a customer nobody has: 200`);
  t.deepEqual(
    env.log.records.filter((r) => r.event_id === "evt_nobody").map((r) => [r.tenant_id, r.outcome, r.reason]),
    [["", "skipped", "no_tenant"]],
    `${label}: skipped as no_tenant`,
  );

  const other = stripeEvent("evt_zeta_old", "customer.subscription.deleted", now + 10, subscriptionDeletedNoMeta("cus_zeta_1", "sub_zeta_dashboard"));
  t.equal((await webhook(env, other)).status, 200);
  t.equal((await tenant(env, "zeta")).plan, "pro", `${label}: another subscription of the customer does not downgrade`);

  const del = stripeEvent("evt_eps_del", "customer.subscription.deleted", now + 20, subscriptionDeletedNoMeta("cus_eps_1", "sub_eps"));
  t.equal((await webhook(env, del)).status, 200, `${label}: deletion without metadata, known customer: 200`);
  t.deepEqual(
    [(await tenant(env, "eps")).plan, (await tenant(env, "zeta")).plan],
    ["starter", "pro"],
    `${label}: the customer's tenant is downgraded, the other not`,
  );
  t.deepEqual(
    ["evt_zeta_old", "evt_eps_del"].map(
      (id) => env.log.records.filter((r) => r.event_id === id).map((r) => [r.tenant_id, r.outcome, r.reason, r.plan_before, r.plan_after])[0],
    ),
    [
      ["zeta", "skipped", "not_current_subscription", "pro", "pro"],
      ["eps", "applied", "", "builder", "starter"],
    ],
    `${label}: the log names the tenant found by customer`,
  );
  t.equal((await webhook(env, del)).status, 200, `${label}: replay 200`);
  t.deepEqual(logOf(env, "evt_eps_del").slice(-1), ["skipped:duplicate []"], `${label}: and is a duplicate`);
}

async function scenarios(t: test.Test, engine: FakeEngine, registry: TenantRegistry, label: string, after?: (env: Env) => Promise<void>) {
  const stripe = await startFakeStripe();
  const env = await setup(engine, stripe, registry);
  try {
    await upgradeCancelsOldOnce(t, env, label);
    await failedCancelIsRetried(t, env, label);
    await unreachableCancelIsRetried(t, env, label);
    await alreadyCanceledCountsAsDone(t, env, label);
    await customerFallback(t, env, label);
    const everything = [...env.responses, ...env.log.records.map((r) => JSON.stringify(r)), ...env.gw.audit.records.map((r) => JSON.stringify(r))].join("\n");
    t.notOk(everything.includes(SECRET_KEY) || everything.includes(WEBHOOK_SECRET), `${label}: no secret in any response, billing-log or audit record`);
    await after?.(env);
  } finally {
    await env.gw.close();
    await env.stripe.close();
  }
}

test("plan change over the memory registry: old subscription canceled once, failures retried, customer fallback", async (t) => {
  const engine = await startFakeEngine();
  try {
    await scenarios(t, engine, new MemoryTenantRegistry(), "memory");
  } finally {
    await engine.close();
  }
});

test("plan change over the local-file registry: pending cancellations and the customer lookup survive a restart", async (t) => {
  const engine = await startFakeEngine();
  const dir = await mkdtemp(join(tmpdir(), "svc-billing-upgrade-"));
  try {
    await scenarios(t, engine, await LocalFileTenantRegistry.open(dir), "local", async (env) => {
      await env.registry.update("eps", (cur) => ({ ...cur, billing: { ...cur.billing!, pending_cancellations: ["sub_left_over"] } }));
      const again = await LocalFileTenantRegistry.open(dir);
      t.deepEqual((await again.get("eps"))!.billing?.pending_cancellations, ["sub_left_over"], "local: a pending cancellation is read back from tenants.json");
      t.equal((await again.findByCustomerId("cus_zeta_1"))?.tenant_id, "zeta", "local: the customer lookup works after a restart");
      t.equal(await again.findByCustomerId("cus_nobody"), null, "local: an unknown customer finds nothing");
      await again.close();
    });
  } finally {
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("plan change over the Redis registry: the customer index is written with the record and backfilled for older records", async (t) => {
  const engine = await startFakeEngine();
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  try {
    await scenarios(t, engine, new RedisTenantRegistry(redis, prefix), "redis", async () => {
      t.equal(await redis.get(`${prefix}customer:cus_zeta_1`), "zeta", "redis: <prefix>customer:<id> names the tenant");
      // A record whose customer was recorded before the index existed.
      await redis.del(`${prefix}customer:cus_zeta_1`);
      const fresh = new RedisTenantRegistry(redis, prefix);
      t.equal((await fresh.findByCustomerId("cus_zeta_1"))?.tenant_id, "zeta", "redis: found by the one-time scan");
      t.equal(await redis.get(`${prefix}customer:cus_zeta_1`), "zeta", "redis: which wrote the index key back");
      t.equal(await fresh.findByCustomerId("cus_nobody"), null, "redis: an unknown customer finds nothing");
    });
  } finally {
    await cleanup();
    await engine.close();
  }
});

test("a checkout completed after the tenant moved to enterprise keeps the contract's terms and cancels the purchase", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await setup(engine, stripe, new MemoryTenantRegistry());
  try {
    await createTenant(env.gw.url, { tenant_id: "acme" });
    // The contract is signed while a builder checkout the tenant opened earlier is still open.
    const terms = { monthly_quota: null, rate_limit: { requests: 5000, window_s: 60 } };
    const up = await admin(env.gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "enterprise", ...terms });
    t.equal(up.status, 200, "moved to enterprise");
    env.clock.advance(60_000);
    const late = stripeEvent("evt_late_builder", "checkout.session.completed", sec(env), checkoutCompleted("acme", "builder", "sub_late"));
    const r = await webhook(env, late);
    t.equal(r.status, 200, "200: the event is decided");
    const a = await tenant(env, "acme");
    t.deepEqual([a.plan, a.monthly_quota, a.rate_limit], ["enterprise", null, terms.rate_limit], "the enterprise terms are kept");
    t.deepEqual(deletes(env.stripe), ["/v1/subscriptions/sub_late"], "the purchased subscription is canceled, so it does not go on billing");
    t.deepEqual(logOf(env, "evt_late_builder"), ["skipped:enterprise_plan [sub_late:canceled]"], "logged as skipped, with the cancellation");
    t.deepEqual(a.billing?.pending_cancellations ?? [], [], "nothing left pending");
    t.equal(a.billing?.subscription_id ?? null, null, "the subscription is not recorded as the tenant's");

    // Its deletion event, and a replay of the checkout, change nothing and cancel nothing more.
    await webhook(env, stripeEvent("evt_late_deleted", "customer.subscription.deleted", sec(env) + 1, subscriptionDeleted("acme", "sub_late")));
    await webhook(env, late);
    t.equal((await tenant(env, "acme")).plan, "enterprise", "still enterprise");
    t.deepEqual(deletes(env.stripe), ["/v1/subscriptions/sub_late"], "one cancellation in all");
  } finally {
    await env.gw.close();
    await stripe.close();
    await engine.close();
  }
});
