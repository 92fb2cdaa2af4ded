// A gateway with billing on over the fake Stripe API, shared by the billing tests: the router
// with the real stripe SDK pointed at `stripe.url`, an injected clock, in-memory audit and
// billing log, the admin calls' cancellations at the same fake, and webhooks signed with the
// SDK's test header.
import Stripe from "stripe";
import { MemoryAuditSink } from "../../server/gateway/audit.js";
import { billingRouter, MemoryBillingLog, PendingCancellations, type BillingDeps } from "../../server/gateway/billing.js";
import { FakeClock } from "../../server/gateway/clock.js";
import { MemoryRateLimiter } from "../../server/gateway/ratelimit.js";
import { StripePaymentProvider } from "../../server/gateway/stripe-client.js";
import { MemoryTenantRegistry, type TenantRegistry } from "../../server/gateway/tenants.js";
import type { FakeStripe } from "./fixtures/billing-fake-stripe.js";
import { call, startTestGateway, type FakeEngine, type TestGateway } from "./helpers.js";

export const SECRET_KEY = "sk_test_billing_0123456789abcdefghijklmnop";
export const WEBHOOK_SECRET = "whsec_billing_test_0123456789abcdefghij";
export const PRICES = { builder: "price_builder_test", pro: "price_pro_test" };
export const T0 = Date.UTC(2026, 0, 15, 12, 0, 0);
export const sdk = new Stripe(SECRET_KEY);

export interface BillingGateway {
  gw: TestGateway;
  log: MemoryBillingLog;
  registry: TenantRegistry;
  clock: FakeClock;
  /** The admin calls' cancellations and the sweep that retries pending ones. */
  cancellations: PendingCancellations;
}

export async function startBillingGateway(
  engine: FakeEngine,
  stripe: FakeStripe,
  registry: TenantRegistry = new MemoryTenantRegistry(),
  over: Partial<Pick<BillingDeps, "webhookBudget" | "bodyRate">> = {},
): Promise<BillingGateway> {
  const clock = new FakeClock(T0);
  const audit = new MemoryAuditSink();
  const limiter = new MemoryRateLimiter(clock);
  const log = new MemoryBillingLog();
  const provider = new StripePaymentProvider({ secretKey: SECRET_KEY, webhookSecret: WEBHOOK_SECRET, apiBase: stripe.url, timeoutMs: 3000 });
  // Not started: the tests run its sweep themselves, so that nothing depends on timing.
  const cancellations = new PendingCancellations({ registry, provider, clock, log });
  const billing = billingRouter({
    registry,
    clock,
    audit,
    limiter,
    log,
    provider,
    prices: PRICES,
    policy: { billingEnabled: true, defaultRateLimit: { requests: 100, window_s: 60 } },
    ...over,
  });
  const gw = await startTestGateway(engine.url, { registry, clock, audit, limiter, billingEnabled: true, billing, billingAdmin: cancellations });
  return { gw, log, registry, clock, cancellations };
}

/** Posts `body` to the webhook signed with `secret` at `ts` (Unix s, default the clock's), unless `header` is given (null: none). */
export function postWebhook(env: BillingGateway, body: string, o: { secret?: string; ts?: number; header?: string | null } = {}) {
  const ts = o.ts ?? Math.floor(env.clock.now() / 1000);
  const header =
    o.header !== undefined ? o.header : sdk.webhooks.generateTestHeaderString({ payload: body, secret: o.secret ?? WEBHOOK_SECRET, timestamp: ts });
  return call(env.gw.url, "/webhooks/payment", {
    raw: body,
    headers: { "content-type": "application/json", ...(header === null ? {} : { "stripe-signature": header }) },
  });
}
