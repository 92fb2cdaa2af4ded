// Billing: what a payment event and a checkout cost. Figures: webhook signature check alone
// (the stripe SDK's HMAC over a ~1 KiB event), webhook requests end to end (verify, apply once,
// billing log, audit) over the memory, local-file (one fsync'd file write per event) and Redis
// registries, sequential and 16 in flight, and a checkout round trip through the stripe SDK
// to an in-process fake API. Loopback, one process; each figure runs SVC_BENCH_SECONDS
// (default 2) after a short warm-up, so the program is bounded (about 20 s).
//   node --import tsx bench/billing.ts            (or: npm run bench -- billing)
import Stripe from "stripe";
import { mkdtemp, rm } from "node:fs/promises";
import { arch, cpus, loadavg, platform, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { MemoryAuditSink } from "../server/gateway/audit.js";
import { billingRouter, MemoryBillingLog } from "../server/gateway/billing.js";
import { systemClock } from "../server/gateway/clock.js";
import { MemoryRateLimiter } from "../server/gateway/ratelimit.js";
import { connectRedis, deletePrefix } from "../server/gateway/redis.js";
import { StripePaymentProvider } from "../server/gateway/stripe-client.js";
import { LocalFileTenantRegistry, MemoryTenantRegistry, RedisTenantRegistry, type TenantRegistry } from "../server/gateway/tenants.js";
import { admin, createTenant, startFakeEngine, startTestGateway } from "../test/gateway/helpers.js";
import { checkoutCompleted, startFakeStripe, stripeEvent } from "../test/gateway/fixtures/billing-fake-stripe.js";

const SECONDS = Number(process.env.SVC_BENCH_SECONDS) || 2;
const REDIS_URL = process.env.SVC_BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";
const SECRET_KEY = "sk_test_bench_0123456789abcdefghijklmn";
const WEBHOOK_SECRET = "whsec_bench_0123456789abcdefghijklmn";
const sdk = new Stripe(SECRET_KEY);

const cpu = cpus()[0];
console.log(
  JSON.stringify({
    bench: "billing",
    node: process.version,
    platform: `${platform()}-${arch()}`,
    cpu: cpu?.model ?? "unknown",
    cores: cpus().length,
    mem_gib: Math.round(totalmem() / 2 ** 30),
    loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
    seconds_per_figure: SECONDS,
  }),
);

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! * 1000) / 1000;
};

/** Runs `op` with `conc` in flight for SECONDS after 0.3 s of warm-up; ops/s and latency percentiles. */
async function measure(op: (i: number) => Promise<void>, conc: number) {
  let i = 0;
  const warm = performance.now() + 300;
  while (performance.now() < warm) await op(i++);
  const lat: number[] = [];
  const t0 = performance.now();
  const end = t0 + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (performance.now() < end) {
        const s = performance.now();
        await op(i++);
        lat.push(performance.now() - s);
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  return { ops_per_s: Math.round(lat.length / secs), p50_ms: pct(lat, 50), p99_ms: pct(lat, 99), n: lat.length };
}

// Signature check alone.
{
  const provider = new StripePaymentProvider({ secretKey: SECRET_KEY, webhookSecret: WEBHOOK_SECRET });
  const body = Buffer.from(stripeEvent("evt_sig", "checkout.session.completed", Math.floor(Date.now() / 1000), checkoutCompleted("acme", "pro")));
  const header = sdk.webhooks.generateTestHeaderString({ payload: body.toString(), secret: WEBHOOK_SECRET });
  const r = await measure(async () => void provider.verifyEvent(body, header, Date.now()), 1);
  console.log(JSON.stringify({ figure: "webhook_verify", body_bytes: body.length, ...r }));
}

const engine = await startFakeEngine();
const stripe = await startFakeStripe();
const dir = await mkdtemp(join(tmpdir(), "svc-bench-billing-"));
const prefix = `svc-bench:billing:${process.pid}:`;
const redis = await connectRedis(REDIS_URL).catch(() => null);

async function gatewayOver(registry: TenantRegistry) {
  const audit = new MemoryAuditSink();
  const billing = billingRouter({
    registry,
    clock: systemClock,
    audit,
    limiter: new MemoryRateLimiter(systemClock),
    log: new MemoryBillingLog(),
    provider: new StripePaymentProvider({ secretKey: SECRET_KEY, webhookSecret: WEBHOOK_SECRET, apiBase: stripe.url }),
    prices: { builder: "price_b", pro: "price_p" },
    // Limits as with billing off (the default rate limit, set high) so the plan's 10-100 requests
    // per minute do not cut the checkout figure short; the limiter still runs on every checkout.
    policy: { billingEnabled: false, defaultRateLimit: { requests: 1_000_000, window_s: 60 } },
  });
  return startTestGateway(engine.url, { registry, clock: systemClock as never, audit, billingEnabled: true, billing });
}

try {
  const stores: [string, () => Promise<TenantRegistry>][] = [
    ["memory", async () => new MemoryTenantRegistry()],
    ["local", async () => LocalFileTenantRegistry.open(join(dir, "local"))],
  ];
  if (redis) stores.push(["redis", async () => new RedisTenantRegistry(redis, prefix)]);
  else console.log(JSON.stringify({ figure: "webhook_apply", registry: "redis", skipped: "no Redis at SVC_BENCH_REDIS_URL" }));
  let n = 0;
  for (const [name, make] of stores) {
    const gw = await gatewayOver(await make());
    await createTenant(gw.url, { tenant_id: "acme" });
    const now = Math.floor(Date.now() / 1000);
    for (const conc of [1, 16]) {
      let resent = 0;
      const r = await measure(async (i) => {
        // A new event each time, alternating plans, so every request applies a change.
        const body = stripeEvent(`evt_b${++n}`, "checkout.session.completed", now + n, checkoutCompleted("acme", i % 2 ? "builder" : "pro", `sub_${n}`));
        const header = sdk.webhooks.generateTestHeaderString({ payload: body, secret: WEBHOOK_SECRET, timestamp: now });
        // 409 (the tenant's record kept changing under 16 events at once: optimistic updates on
        // Redis) and 500 (a replaced subscription not canceled yet): the provider delivers the
        // event again, and so does this loop
        for (let attempt = 0; ; attempt++) {
          const res = await fetch(`${gw.url}/webhooks/payment`, {
            method: "POST",
            body,
            headers: { "content-type": "application/json", "stripe-signature": header },
          });
          await res.arrayBuffer();
          if (res.status === 200) break;
          if ((res.status !== 409 && res.status !== 500) || attempt >= 20) throw new Error(`webhook answered ${res.status}`);
          resent++;
        }
      }, conc);
      console.log(JSON.stringify({ figure: "webhook_apply", registry: name, in_flight: conc, ...r, resent_after_409_or_500: resent }));
    }
    if (name === "memory") {
      const u = await admin(gw.url, "/gate/onboard/create", { tenant_id: "buyer" });
      const key = u.json.api_key as string;
      const r = await measure(async () => {
        const res = await fetch(`${gw.url}/gate/checkout`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": key },
          body: JSON.stringify({ plan: "pro", success_url: "https://a.example/s", cancel_url: "https://a.example/c" }),
        });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`checkout answered ${res.status}`);
      }, 1);
      console.log(JSON.stringify({ figure: "checkout_round_trip", provider: "in-process fake API over loopback", ...r }));
    }
    await gw.close();
  }
} finally {
  if (redis) {
    await deletePrefix(redis, prefix);
    await redis.quit();
  }
  await stripe.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
}
