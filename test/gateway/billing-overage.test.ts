// Overage in the usage records (docs/api.md (admin routes)): overage_cus over the quota and
// overage_amount at the plan's rate (builder 0.05, pro 0.03, starter none), computed for any
// period under the plan the period closed with, even after later plan changes.
import test from "tape";
import Stripe from "stripe";
import { billingRouter, MemoryBillingLog } from "../../server/gateway/billing.js";
import { MemoryAuditSink } from "../../server/gateway/audit.js";
import { FakeClock } from "../../server/gateway/clock.js";
import { MemoryUsageStore } from "../../server/gateway/meter.js";
import { MemoryRateLimiter } from "../../server/gateway/ratelimit.js";
import { StripePaymentProvider } from "../../server/gateway/stripe-client.js";
import { MemoryTenantRegistry, termsForPeriod, type TenantRecord } from "../../server/gateway/tenants.js";
import { admin, call, createTenant, startFakeEngine, startTestGateway } from "./helpers.js";
import { checkoutCompleted, stripeEvent, subscriptionDeleted } from "./fixtures/billing-fake-stripe.js";

const WEBHOOK_SECRET = "whsec_overage_test_0123456789abcdef";
const sdk = new Stripe("sk_test_overage_0123456789");

test("overage for closed periods uses the plan each period closed with", async (t) => {
  const engine = await startFakeEngine();
  const clock = new FakeClock(Date.UTC(2025, 11, 10, 9, 0, 0));
  const registry = new MemoryTenantRegistry();
  const usage = new MemoryUsageStore();
  const audit = new MemoryAuditSink();
  const limiter = new MemoryRateLimiter(clock);
  const billing = billingRouter({
    registry,
    clock,
    audit,
    limiter,
    log: new MemoryBillingLog(),
    // No checkout here: the provider's API address is never used.
    provider: new StripePaymentProvider({ secretKey: "sk_test_overage_0123456789", webhookSecret: WEBHOOK_SECRET, apiBase: "http://127.0.0.1:9" }),
    prices: { builder: "price_b", pro: "price_p" },
    policy: { billingEnabled: true, defaultRateLimit: { requests: 100, window_s: 60 } },
  });
  const gw = await startTestGateway(engine.url, { registry, usage, clock, audit, limiter, billingEnabled: true, billing });
  const send = async (body: string) => {
    const header = sdk.webhooks.generateTestHeaderString({ payload: body, secret: WEBHOOK_SECRET, timestamp: Math.floor(clock.now() / 1000) });
    return call(gw.url, "/webhooks/payment", { raw: body, headers: { "content-type": "application/json", "stripe-signature": header } });
  };
  const record = async (period: string) => (await admin(gw.url, `/gate/admin/usage/acme?period=${period}`, undefined, "GET")).json;
  try {
    // December 2025: starter, 1,500 CUs (500 over, no overage rate).
    await createTenant(gw.url, { tenant_id: "acme" });
    await usage.add("acme", "2025-12", "put", 1_500_000);
    // January 2026: upgraded to builder on the 5th by payment; 51,234.5 CUs.
    clock.set(Date.UTC(2026, 0, 5, 12, 0, 0));
    const up = stripeEvent("evt_ov_up", "checkout.session.completed", Math.floor(clock.now() / 1000), checkoutCompleted("acme", "builder", "sub_1"));
    t.equal((await send(up)).status, 200, "upgrade event applied");
    await usage.add("acme", "2026-01", "put", 51_234_000);
    await usage.add("acme", "2026-01", "get", 500);
    // February: the admin moves it to pro; 500,010 CUs.
    clock.set(Date.UTC(2026, 1, 3, 8, 0, 0));
    t.equal((await admin(gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "pro" })).status, 200, "admin upgrade to pro");
    await usage.add("acme", "2026-02", "query_topk", 500_010_000);
    // March: sub_1 (still the recorded subscription after the admin change) is deleted: back to starter.
    clock.set(Date.UTC(2026, 2, 2, 8, 0, 0));
    const del = stripeEvent("evt_ov_del", "customer.subscription.deleted", Math.floor(clock.now() / 1000), subscriptionDeleted("acme", "sub_1"));
    t.equal((await send(del)).status, 200, "deletion event applied");
    t.equal((await registry.get("acme"))!.plan, "starter", "starter now");
    await usage.add("acme", "2026-03", "get", 1_000_100);

    const dec = await record("2025-12");
    t.deepEqual(
      [dec.monthly_quota, dec.cus_used, dec.overage_cus, dec.overage_amount, dec.utilization],
      [1000, 1500, 500, 0, 1.5],
      "2025-12 (starter): 500 CUs over, amount 0",
    );
    const jan = await record("2026-01");
    t.deepEqual(
      [jan.monthly_quota, jan.cus_used, jan.overage_cus, jan.overage_amount],
      [50_000, 51_234.5, 1_234.5, 61.725],
      "2026-01 (builder from the 5th): 1,234.5 over at 0.05 = 61.725",
    );
    t.equal(jan.utilization, 51_234.5 / 50_000, "utilization against the period's quota");
    t.deepEqual(jan.breakdown.put, 51_234, "breakdown kept");
    const feb = await record("2026-02");
    t.deepEqual([feb.monthly_quota, feb.overage_cus, feb.overage_amount], [500_000, 10, 0.3], "2026-02 (pro): 10 over at 0.03 = 0.3");
    const mar = await record("2026-03");
    t.deepEqual([mar.monthly_quota, mar.overage_cus, mar.overage_amount], [1000, 0.1, 0], "2026-03 (starter again, open period): 0.1 over, no amount");
    const nov = await record("2025-11");
    t.deepEqual(
      [nov.monthly_quota, nov.cus_used, nov.overage_cus, nov.overage_amount],
      [1000, 0, 0, 0],
      "a period before the tenant existed: its first plan, nothing used",
    );
    const list = await admin(gw.url, "/gate/admin/usage?period=2026-01", undefined, "GET");
    t.deepEqual(
      list.json.tenants,
      [{ tenant_id: "acme", cus_used: 51_234.5, monthly_quota: 50_000, utilization: 51_234.5 / 50_000 }],
      "the all-tenants view uses the period's quota too",
    );

    // Enterprise with its own quota: overage counted, no tier rate.
    await createTenant(gw.url, { tenant_id: "bigco", plan: "enterprise", monthly_quota: 10 });
    await usage.add("bigco", "2026-03", "put", 12_000);
    const ent = (await admin(gw.url, "/gate/admin/usage/bigco?period=2026-03", undefined, "GET")).json;
    t.deepEqual([ent.monthly_quota, ent.overage_cus, ent.overage_amount], [10, 2, 0], "enterprise: 2 CUs over, amount 0 (custom terms)");
    const none = await createTenant(gw.url, { tenant_id: "nolimit", plan: "enterprise" });
    t.ok(none, "enterprise without a quota");
    await usage.add("nolimit", "2026-03", "put", 5_000_000);
    const nl = (await admin(gw.url, "/gate/admin/usage/nolimit?period=2026-03", undefined, "GET")).json;
    t.deepEqual([nl.monthly_quota, nl.overage_cus, nl.overage_amount, nl.utilization], [null, 0, 0, 0], "no quota: no overage");
    t.equal((await admin(gw.url, "/gate/admin/usage/acme?period=2026-13", undefined, "GET")).status, 400, "a bad period is 400");
  } finally {
    await gw.close();
    await engine.close();
  }
});

test("termsForPeriod: history picks the last change before the period's end; no history means current terms", (t) => {
  const base: TenantRecord = {
    tenant_id: "x",
    plan: "pro",
    namespaces: ["default"],
    email: null,
    key_hash: "",
    active: true,
    status: "active",
    monthly_quota: 500_000,
    rate_limit: { requests: 1000, window_s: 60 },
    custom_rate_limit: false,
    created_at: "2026-01-01T00:00:00.000Z",
    updated_at: "2026-03-01T00:00:00.000Z",
  };
  t.deepEqual(termsForPeriod(base, "2025-01"), { plan: "pro", monthly_quota: 500_000 }, "a record without history: its current terms");
  const h: TenantRecord = {
    ...base,
    plan_history: [
      { from: "2026-01-01T00:00:00.000Z", plan: "starter", monthly_quota: 1000 },
      { from: "2026-01-31T23:59:59.999Z", plan: "builder", monthly_quota: 50_000 },
      { from: "2026-03-01T00:00:00.000Z", plan: "pro", monthly_quota: 500_000 },
    ],
  };
  t.deepEqual(termsForPeriod(h, "2026-01"), { plan: "builder", monthly_quota: 50_000 }, "a change in the last millisecond of January counts for January");
  t.deepEqual(termsForPeriod(h, "2026-02"), { plan: "builder", monthly_quota: 50_000 }, "February: no change, builder carries on");
  t.deepEqual(termsForPeriod(h, "2026-03"), { plan: "pro", monthly_quota: 500_000 }, "a change at 00:00 on March 1st counts for March, not February");
  t.deepEqual(termsForPeriod(h, "2025-12"), { plan: "starter", monthly_quota: 1000 }, "before the first entry: the first plan");
  t.deepEqual(termsForPeriod(h, "2026-12"), { plan: "pro", monthly_quota: 500_000 }, "December: the latest");
  t.end();
});
