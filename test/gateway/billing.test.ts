// Billing through real HTTP: the payment webhook (signature checks with the real stripe SDK,
// upgrade, downgrade, replay, out-of-order, unknown types) over the memory, local-file and
// Redis registries, and checkout against an in-process fake Stripe API.
import test from "tape";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalFileTenantRegistry, MemoryTenantRegistry, RedisTenantRegistry, type TenantRegistry } from "../../server/gateway/tenants.js";
import { admin, call, createTenant, redisFor, startFakeEngine, startTestGateway, uniquePrefix, type FakeEngine } from "./helpers.js";
import { PRICES, SECRET_KEY, WEBHOOK_SECRET, postWebhook, sdk, startBillingGateway, type BillingGateway } from "./billing-env.js";
import { checkoutCompleted, startFakeStripe, stripeEvent, subscriptionDeleted, type FakeStripe } from "./fixtures/billing-fake-stripe.js";

interface Env extends BillingGateway {
  close(): Promise<void>;
}

async function setup(engine: FakeEngine, stripe: FakeStripe, registry?: TenantRegistry): Promise<Env> {
  const env = await startBillingGateway(engine, stripe, registry);
  return { ...env, close: () => env.gw.close() };
}

const webhook = postWebhook;

const sec = (env: Env) => Math.floor(env.clock.now() / 1000);
const tenant = async (env: Env, id: string) => (await env.registry.get(id))!;

test("checkout: creates a subscription session through the stripe SDK with the plan's price, tenant and plan", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await setup(engine, stripe);
  try {
    const key = await createTenant(env.gw.url, { tenant_id: "acme", email: "ops@acme.example" });
    const r = await call(env.gw.url, "/gate/checkout", {
      key,
      body: { plan: "builder", success_url: "https://app.example/ok?s={CHECKOUT_SESSION_ID}", cancel_url: "https://app.example/cancel" },
    });
    t.equal(r.status, 200, "200");
    t.match(r.json.session_id, /^cs_test_/, "session_id from the provider");
    t.equal(r.json.checkout_url, `https://checkout.stripe.com/c/pay/${r.json.session_id}`, "checkout_url from the provider");
    t.deepEqual(Object.keys(r.json).sort(), ["checkout_url", "session_id"], "nothing else in the body");
    t.equal(stripe.requests.length, 1, "one request to the provider");
    const q = stripe.requests[0]!;
    t.equal(`${q.method} ${q.path}`, "POST /v1/checkout/sessions", "POST /v1/checkout/sessions");
    t.equal(q.headers.authorization, `Bearer ${SECRET_KEY}`, "the secret key authenticates to the provider");
    t.equal(q.form.get("mode"), "subscription");
    t.equal(q.form.get("line_items[0][price]"), PRICES.builder, "the builder price");
    t.equal(q.form.get("line_items[0][quantity]"), "1");
    t.equal(q.form.get("client_reference_id"), "acme", "client_reference_id is the tenant");
    t.equal(q.form.get("metadata[tenant_id]"), "acme", "metadata carries the tenant");
    t.equal(q.form.get("metadata[plan]"), "builder", "and the plan");
    t.equal(q.form.get("subscription_data[metadata][tenant_id]"), "acme", "the subscription carries the tenant (for its deletion event)");
    t.equal(q.form.get("success_url"), "https://app.example/ok?s={CHECKOUT_SESSION_ID}", "caller's success URL");
    t.equal(q.form.get("cancel_url"), "https://app.example/cancel", "caller's cancel URL");
    t.equal(q.form.get("customer_email"), "ops@acme.example", "the tenant's e-mail prefills checkout");

    const pro = await call(env.gw.url, "/gate/checkout", { key, body: { plan: "pro", success_url: "https://a.example/s", cancel_url: "https://a.example/c" } });
    t.equal(pro.status, 200);
    t.equal(stripe.requests[1]!.form.get("line_items[0][price]"), PRICES.pro, "the pro price for plan pro");
    const rec = env.gw.audit.records.filter((a) => a.path === "/gate/checkout");
    t.deepEqual(
      rec.map((a) => [a.tenant_id, a.status, a.cus]),
      [
        ["acme", 200, 0],
        ["acme", 200, 0],
      ],
      "each checkout audited, 0 CUs",
    );
    t.equal(r.headers.get("x-ratelimit-limit"), "10", "counted in the tenant's (starter) rate window");
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
  }
});

test("checkout: bad requests get 400/401/409/415 with one sentence, and the provider is not called", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await setup(engine, stripe);
  try {
    const key = await createTenant(env.gw.url, { tenant_id: "acme", plan: "builder" });
    const ok = { plan: "pro", success_url: "https://a.example/s", cancel_url: "https://a.example/c" };
    const cases: [string, Parameters<typeof call>[2], number, RegExp][] = [
      ["no key", { body: ok }, 401, /API key/],
      ["wrong key", { key: "svc_live_" + "x".repeat(43), body: ok }, 401, /Invalid API key/],
      ["plan enterprise", { key, body: { ...ok, plan: "enterprise" } }, 400, /^plan must be builder or pro\.?$/],
      ["plan starter", { key, body: { ...ok, plan: "starter" } }, 400, /plan must be builder or pro/],
      ["missing success_url", { key, body: { plan: "pro", cancel_url: ok.cancel_url } }, 400, /success_url/],
      ["relative cancel_url", { key, body: { ...ok, cancel_url: "/cancel" } }, 400, /cancel_url must be an absolute http\(s\) URL/],
      ["javascript: URL", { key, body: { ...ok, success_url: "javascript:alert(1)" } }, 400, /success_url/],
      // The URL parser drops line breaks, tabs and outer spaces; the provider would get them as sent.
      [
        "line break in success_url",
        { key, body: { ...ok, success_url: "https://a.example/s\r\nX-Injected: 1" } },
        400,
        /^success_url must not contain spaces or control characters\.$/,
      ],
      ["tab in cancel_url", { key, body: { ...ok, cancel_url: "https://a.exa\tmple/c" } }, 400, /^cancel_url must not contain spaces or control characters\.$/],
      [
        "outer space in cancel_url",
        { key, body: { ...ok, cancel_url: " https://a.example/c" } },
        400,
        /^cancel_url must not contain spaces or control characters\.$/,
      ],
      [
        "NUL in success_url",
        { key, body: { ...ok, success_url: "https://a.example/\u0000" } },
        400,
        /^success_url must not contain spaces or control characters\.$/,
      ],
      ["unknown field", { key, body: { ...ok, tenant_id: "other" } }, 400, /tenant_id|unrecognized|unknown/i],
      ["not JSON", { key, raw: "{plan", headers: { "content-type": "application/json" } }, 400, /not valid JSON/],
      ["not an object", { key, body: ["pro"] }, 400, /.+/],
      ["text/plain", { key, raw: JSON.stringify(ok), headers: { "content-type": "text/plain" } }, 415, /application\/json/],
      ["already on the plan", { key, body: { ...ok, plan: "builder" } }, 409, /already on plan builder/],
    ];
    for (const [name, init, status, detail] of cases) {
      const r = await call(env.gw.url, "/gate/checkout", { method: "POST", ...init });
      t.equal(r.status, status, `${name}: ${status}`);
      t.match(String(r.json?.detail), detail, `${name}: detail says why`);
      t.ok(typeof r.json?.detail === "string" && !/\n|at .*\.ts/.test(r.json.detail) && r.json.request_id, `${name}: one sentence, request id, no stack`);
    }
    const big = await call(env.gw.url, "/gate/checkout", { key, body: { ...ok, success_url: "https://a.example/" + "x".repeat(20_000) } });
    t.equal(big.status, 413, "a body over 16 KiB: 413");
    t.equal(stripe.requests.length, 0, "the provider was never called");
    t.ok(env.gw.audit.records.filter((a) => a.path === "/gate/checkout").length >= cases.length, "refusals are audited too");
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
  }
});

test("checkout: provider errors and an unreachable provider become 502 with a clear detail, never a crash or a leak", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await setup(engine, stripe);
  try {
    const key = await createTenant(env.gw.url, { tenant_id: "acme" });
    const body = { plan: "builder", success_url: "https://a.example/s", cancel_url: "https://a.example/c" };
    stripe.fail = { status: 402, type: "card_error", message: `Invalid API Key provided: ${SECRET_KEY}` };
    const a = await call(env.gw.url, "/gate/checkout", { key, body });
    t.equal(a.status, 502, "402 card_error: 502");
    t.equal(a.json.code, "engine_unreachable", "the one 502 code of the vocabulary");
    t.equal(a.json.detail, "The payment provider refused to create a checkout session (HTTP 402, card_error).", "detail names the provider status and type");
    t.notOk(JSON.stringify(a.json).includes("sk_test"), "the provider's message (which can quote the key) is not passed on");
    stripe.fail = { status: 500, type: "api_error", message: "boom" };
    const b = await call(env.gw.url, "/gate/checkout", { key, body });
    t.equal(b.status, 502, "500: 502");
    t.match(b.json.detail, /HTTP 500, api_error/);
    stripe.fail = null;
    await stripe.close();
    const c = await call(env.gw.url, "/gate/checkout", { key, body });
    t.equal(c.status, 502, "provider unreachable: 502");
    t.match(c.json.detail, /could not be reached/, "detail says it could not be reached");
    t.notOk(JSON.stringify(c.json).includes("127.0.0.1"), "no address in the body");
    t.equal((await call(env.gw.url, "/health")).status, 200, "the gateway is still up");
    t.deepEqual(
      env.gw.audit.records.filter((x) => x.path === "/gate/checkout").map((x) => x.status),
      [502, 502, 502],
      "audited as 502",
    );
  } finally {
    await env.close();
    await engine.close();
  }
});

test("billing disabled: /gate/checkout and /webhooks/payment answer 404", async (t) => {
  const engine = await startFakeEngine();
  const gw = await startTestGateway(engine.url, { billingEnabled: false });
  try {
    const key = await createTenant(gw.url, { tenant_id: "acme" });
    const r = await call(gw.url, "/gate/checkout", { key, body: { plan: "builder", success_url: "https://a.example/s", cancel_url: "https://a.example/c" } });
    t.equal(r.status, 404, "checkout 404");
    t.equal(r.json.code, "not_found");
    const w = await call(gw.url, "/webhooks/payment", { raw: "{}", headers: { "content-type": "application/json", "stripe-signature": "t=1,v1=00" } });
    t.equal(w.status, 404, "webhook 404");
  } finally {
    await gw.close();
    await engine.close();
  }
});

test("webhook signature: tampered body, wrong secret, stale and future timestamps, missing or malformed header: 400", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await setup(engine, stripe);
  try {
    await createTenant(env.gw.url, { tenant_id: "acme" });
    const body = stripeEvent("evt_sig_1", "checkout.session.completed", sec(env), checkoutCompleted("acme", "pro"));
    const now = sec(env);
    const good = sdk.webhooks.generateTestHeaderString({ payload: body, secret: WEBHOOK_SECRET, timestamp: now });
    const cases: [string, () => Promise<Awaited<ReturnType<typeof call>>>, RegExp][] = [
      ["tampered body", () => webhook(env, body.replace('"plan": "pro"', '"plan": "builder"'), { header: good }), /does not match/],
      ["one byte appended", () => webhook(env, body + " ", { header: good }), /does not match/],
      ["wrong secret", () => webhook(env, body, { secret: "whsec_someone_else_0123456789" }), /does not match/],
      ["stale (301 s old)", () => webhook(env, body, { ts: now - 301 }), /more than 300 seconds old/],
      ["future (301 s ahead)", () => webhook(env, body, { ts: now + 301 }), /more than 300 seconds in the future/],
      ["far future", () => webhook(env, body, { ts: now + 86_400 * 365 }), /in the future/],
      ["missing header", () => webhook(env, body, { header: null }), /missing/],
      ["no v1", () => webhook(env, body, { header: `t=${now}` }), /malformed/],
      ["two timestamps", () => webhook(env, body, { header: `t=${now},t=${now + 1000},${good.split(",")[1]}` }), /malformed/],
      ["non-numeric t", () => webhook(env, body, { header: `t=abc,${good.split(",")[1]}` }), /malformed/],
      ["garbage", () => webhook(env, body, { header: "nonsense" }), /malformed/],
    ];
    for (const [name, send, detail] of cases) {
      const r = await send();
      t.equal(r.status, 400, `${name}: 400`);
      t.equal(r.json.code, "bad_request", `${name}: bad_request`);
      t.match(r.json.detail, detail, `${name}: ${r.json.detail}`);
      t.notOk(JSON.stringify(r.json).includes("whsec_"), `${name}: no secret in the body`);
    }
    t.equal((await tenant(env, "acme")).plan, "starter", "no refused event changed the tenant");
    t.equal(env.log.records.length, 0, "nothing refused reached event application");
    t.deepEqual(
      env.gw.audit.records.filter((a) => a.path === "/webhooks/payment").map((a) => a.status),
      cases.map(() => 400),
      "each refusal audited as 400",
    );

    const edge = await webhook(env, body, { ts: now + 299 });
    t.equal(edge.status, 200, "a timestamp 299 s ahead (clock skew) is accepted");
    t.deepEqual(edge.json, { received: true }, "body: received true");
    t.equal((await tenant(env, "acme")).plan, "pro", "and applied");
    const old = stripeEvent("evt_sig_2", "checkout.session.completed", now, checkoutCompleted("acme", "builder"));
    t.equal((await webhook(env, old, { ts: now - 299 })).status, 200, "299 s old is accepted");

    const notJson = "not json at all";
    const nj = await webhook(env, notJson);
    t.equal(nj.status, 400, "a signed body that is not JSON: 400");
    t.match(nj.json.detail, /not valid JSON/);
    const noId = JSON.stringify({ type: "checkout.session.completed", created: now, data: { object: {} } });
    const ni = await webhook(env, noId);
    t.equal(ni.status, 400, "a signed event without an id: 400");
    t.match(ni.json.detail, /lacks a valid id/);
    const huge = JSON.stringify({ id: "evt_big", type: "x", created: now, data: { object: { pad: "x".repeat(1024 * 1024) } } });
    t.equal((await webhook(env, huge)).status, 413, "a body over 1 MiB: 413");
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
  }
});

async function lifecycle(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "acme" });
  const now = sec(env);
  const up = stripeEvent("evt_up_1", "checkout.session.completed", now, checkoutCompleted("acme", "builder", "sub_A"));
  const r1 = await webhook(env, up);
  t.equal(r1.status, 200, `${label}: upgrade event 200`);
  let a = await tenant(env, "acme");
  t.deepEqual([a.plan, a.monthly_quota, a.rate_limit], ["builder", 50_000, { requests: 100, window_s: 60 }], `${label}: plan, quota and rate limit of builder`);
  const view = await admin(env.gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "builder" });
  t.equal(view.json.rate_limit.requests, 100, `${label}: the admin view shows the plan's rate limit`);

  // Replay: the admin moves the tenant to pro meanwhile; the replayed upgrade must not undo it.
  await admin(env.gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "pro" });
  env.clock.advance(10_000);
  const r2 = await webhook(env, up);
  t.equal(r2.status, 200, `${label}: replay answers 200`);
  t.deepEqual(r2.json, { received: true });
  a = await tenant(env, "acme");
  t.equal(a.plan, "pro", `${label}: the replay changed nothing`);
  await admin(env.gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "builder" });

  // Deletion of another subscription does not downgrade; of the current one it does.
  const other = stripeEvent("evt_del_other", "customer.subscription.deleted", now + 5, subscriptionDeleted("acme", "sub_OLD"));
  t.equal((await webhook(env, other)).status, 200);
  t.equal((await tenant(env, "acme")).plan, "builder", `${label}: deleting a subscription that did not set the plan changes nothing`);
  const del = stripeEvent("evt_del_1", "customer.subscription.deleted", now + 20, subscriptionDeleted("acme", "sub_A"));
  t.equal((await webhook(env, del)).status, 200, `${label}: deletion 200`);
  a = await tenant(env, "acme");
  t.deepEqual([a.plan, a.monthly_quota, a.rate_limit], ["starter", 1_000, { requests: 10, window_s: 60 }], `${label}: back to starter terms`);

  // Out of order: an older checkout (created before the deletion) arrives late.
  const late = stripeEvent("evt_up_late", "checkout.session.completed", now + 15, checkoutCompleted("acme", "pro", "sub_B"));
  t.equal((await webhook(env, late)).status, 200, `${label}: late event 200`);
  t.equal((await tenant(env, "acme")).plan, "starter", `${label}: an event older than the last applied one never changes the tenant`);

  // Deletion before its checkout: the late checkout of a deleted subscription is not applied.
  const delFirst = stripeEvent("evt_del_C", "customer.subscription.deleted", now + 40, subscriptionDeleted("acme", "sub_C"));
  const upC = stripeEvent("evt_up_C", "checkout.session.completed", now + 41, checkoutCompleted("acme", "pro", "sub_C"));
  await webhook(env, delFirst);
  await webhook(env, upC);
  t.equal((await tenant(env, "acme")).plan, "starter", `${label}: a checkout whose subscription was already deleted is not applied`);

  // Unknown types, unpaid sessions and unknown tenants: 200, nothing changes.
  const odd = [
    stripeEvent("evt_inv", "invoice.paid", now + 50, { id: "in_1", object: "invoice" }),
    stripeEvent("evt_unpaid", "checkout.session.completed", now + 51, checkoutCompleted("acme", "pro", "sub_D", { payment_status: "unpaid" })),
    stripeEvent("evt_ghost", "checkout.session.completed", now + 52, checkoutCompleted("ghost", "pro", "sub_G")),
    stripeEvent("evt_badplan", "checkout.session.completed", now + 53, checkoutCompleted("acme", "enterprise", "sub_E")),
    stripeEvent(
      "evt_mismatch",
      "checkout.session.completed",
      now + 54,
      checkoutCompleted("acme", "pro", "sub_F", { metadata: { tenant_id: "other", plan: "pro" } }),
    ),
  ];
  for (const b of odd) t.equal((await webhook(env, b)).status, 200, `${label}: ${JSON.parse(b).id} answers 200`);
  t.equal((await tenant(env, "acme")).plan, "starter", `${label}: none of them changed the tenant`);

  // A fresh upgrade after all this works.
  const up2 = stripeEvent("evt_up_2", "checkout.session.completed", now + 60, checkoutCompleted("acme", "pro", "sub_H"));
  await webhook(env, up2);
  a = await tenant(env, "acme");
  t.equal(a.plan, "pro", `${label}: a newer upgrade applies`);
  t.equal(a.billing?.subscription_id, "sub_H", `${label}: and records its subscription`);

  const log = env.log.records.map((r) => `${r.event_id} ${r.outcome}${r.reason ? ":" + r.reason : ""}`);
  t.deepEqual(
    log,
    [
      "evt_up_1 applied",
      "evt_up_1 skipped:duplicate",
      "evt_del_other skipped:not_current_subscription",
      "evt_del_1 applied",
      "evt_up_late skipped:out_of_order",
      "evt_del_C skipped:not_current_subscription",
      "evt_up_C skipped:subscription_already_deleted",
      "evt_inv skipped:ignored_type",
      "evt_unpaid skipped:not_paid",
      "evt_ghost skipped:unknown_tenant",
      "evt_badplan skipped:unknown_plan",
      "evt_mismatch skipped:tenant_mismatch",
      "evt_up_2 applied",
    ],
    `${label}: every event left one billing-log record with its outcome`,
  );
  const first = env.log.records[0]!;
  t.deepEqual(
    [first.tenant_id, first.type, first.plan_before, first.plan_after, typeof first.request_id],
    ["acme", "checkout.session.completed", "starter", "builder", "string"],
    `${label}: records name tenant, type and the plan change`,
  );
  const audits = env.gw.audit.records.filter((r) => r.path === "/webhooks/payment");
  t.equal(audits.length, env.log.records.length, `${label}: one audit record per webhook request`);
  t.ok(
    audits.every((r) => r.status === 200 && r.cus === 0 && r.method === "POST"),
    `${label}: audited 200, 0 CUs`,
  );
}

test("webhook over the memory registry: upgrade, replay, downgrade, out-of-order, unknown types", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await setup(engine, stripe);
  try {
    await lifecycle(t, env, "memory");
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
  }
});

test("webhook over the local-file registry: the processed event and the plan change reach disk together", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const dir = await mkdtemp(join(tmpdir(), "svc-billing-local-"));
  const registry = await LocalFileTenantRegistry.open(dir);
  const env = await setup(engine, stripe, registry);
  try {
    await lifecycle(t, env, "local");
    const file = JSON.parse(await readFile(join(dir, "tenants.json"), "utf8"));
    t.ok(
      file.events.some((e: { event_id: string; note: string }) => e.event_id === "evt_up_1" && e.note === "applied"),
      "tenants.json holds the processed event",
    );
    t.equal(file.tenants[0].plan, "pro", "and the plan it led to, in the same file");
    // A restarted gateway (a fresh registry over the same directory) still knows the event.
    const again = await LocalFileTenantRegistry.open(dir);
    const r = await again.applyEventOnce({ eventId: "evt_up_1", tenantId: "acme", nowMs: env.clock.now(), retainMs: 1e9 }, () => {
      throw new Error("must not run");
    });
    t.deepEqual(r, { duplicate: true, note: "applied" }, "after a restart the event is still a duplicate");
    t.equal((await again.get("acme"))!.billing?.subscription_id, "sub_H", "billing state survives the restart");
    await again.close();
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("webhook over the Redis registry: lifecycle, and 20 concurrent deliveries of one event apply it once", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  const env = await setup(engine, stripe, new RedisTenantRegistry(redis, prefix));
  try {
    await lifecycle(t, env, "redis");
    const ttl = await redis.pTTL(`${prefix}billing:event:evt_up_1`);
    t.ok(ttl > 34 * 86_400_000 && ttl <= 35 * 86_400_000, "processed event ids are kept 35 days");

    await createTenant(env.gw.url, { tenant_id: "burst" });
    const body = stripeEvent("evt_burst", "checkout.session.completed", sec(env) + 100, checkoutCompleted("burst", "builder"));
    const rs = await Promise.all(Array.from({ length: 20 }, () => webhook(env, body)));
    t.ok(
      rs.every((r) => r.status === 200),
      "all 20 answered 200",
    );
    const recs = env.log.records.filter((r) => r.event_id === "evt_burst");
    t.equal(recs.filter((r) => r.outcome === "applied").length, 1, "exactly one applied");
    t.equal(recs.filter((r) => r.reason === "duplicate").length, 19, "19 skipped as duplicates");
    const b = await tenant(env, "burst");
    t.equal(b.plan, "builder", "plan builder");
    t.equal(b.plan_history?.length, 2, "one plan change recorded in the history");
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
    await cleanup();
  }
});

test("webhook: a store failure answers 500 without recording the event, so the provider's retry applies it", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const registry = new MemoryTenantRegistry();
  const env = await setup(engine, stripe, registry);
  try {
    await createTenant(env.gw.url, { tenant_id: "acme" });
    const body = stripeEvent("evt_retry", "checkout.session.completed", sec(env), checkoutCompleted("acme", "pro"));
    const real = registry.applyEventOnce.bind(registry);
    registry.applyEventOnce = async () => {
      throw new Error("store down at /var/lib/secret/path");
    };
    const r = await webhook(env, body);
    t.equal(r.status, 500, "500");
    t.equal(r.json.detail, "Internal error.", "no internal message or path in the body");
    registry.applyEventOnce = real;
    t.equal((await webhook(env, body)).status, 200, "the retry succeeds");
    t.equal((await tenant(env, "acme")).plan, "pro", "and applies the event");
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
  }
});

test("billing on: an exhausted starter quota blocks data (503) but not checkout; the paid upgrade lifts the block at once", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await setup(engine, stripe);
  try {
    const key = await createTenant(env.gw.url, { tenant_id: "acme" });
    await env.gw.deps.usage.add("acme", "2026-01", "put", 1_000_000);
    const blocked = await call(env.gw.url, "/v1/get/default/k", { key });
    t.equal(blocked.status, 503, "quota of 1,000 CUs reached: 503");
    t.equal(blocked.headers.get("x-ratelimit-limit"), "10", "starter rate limit (billing on)");
    const co = await call(env.gw.url, "/gate/checkout", {
      key,
      body: { plan: "builder", success_url: "https://a.example/s", cancel_url: "https://a.example/c" },
    });
    t.equal(co.status, 200, "checkout still works with the quota exhausted");
    const up = stripeEvent("evt_unblock", "checkout.session.completed", sec(env), checkoutCompleted("acme", "builder"));
    t.equal((await webhook(env, up)).status, 200, "payment event");
    const open = await call(env.gw.url, "/v1/get/default/k", { key });
    t.equal(open.status, 200, "the next request passes");
    t.equal(open.headers.get("x-ratelimit-limit"), "100", "under builder's rate limit");
    t.equal(engine.seen.length, 1, "only the allowed request reached the engine");
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
  }
});

test("webhook over the local-file registry: a failed write leaves the file and the registry as they were", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const root = await mkdtemp(join(tmpdir(), "svc-billing-fail-"));
  const dir = join(root, "gate");
  const registry = await LocalFileTenantRegistry.open(dir);
  const env = await setup(engine, stripe, registry);
  try {
    await createTenant(env.gw.url, { tenant_id: "acme" });
    const before = await readFile(join(dir, "tenants.json"), "utf8");
    const body = stripeEvent("evt_disk", "checkout.session.completed", sec(env), checkoutCompleted("acme", "pro"));
    // The data directory disappears (unmounted volume): the temp file cannot be created.
    const { rename } = await import("node:fs/promises");
    await rename(dir, `${dir}.away`);
    const r = await webhook(env, body);
    t.equal(r.status, 500, "the write fails: 500 (the provider will retry)");
    await rename(`${dir}.away`, dir);
    t.equal(await readFile(join(dir, "tenants.json"), "utf8"), before, "tenants.json is byte for byte what it was");
    t.equal((await tenant(env, "acme")).plan, "starter", "the registry did not change in memory either");
    t.equal(env.log.records.length, 0, "no billing-log record for an event that was not decided");
    const again = await webhook(env, body);
    t.equal(again.status, 200, "the retry succeeds");
    t.equal((await tenant(env, "acme")).plan, "pro", "and applies the event once");
    t.deepEqual(
      env.log.records.map((x) => x.outcome),
      ["applied"],
      "one applied record",
    );
  } finally {
    await env.close();
    await stripe.close();
    await engine.close();
    await rm(root, { recursive: true, force: true });
  }
});

// Subscription ids come from signed events but are stored in the tenant record: a malformed one
// (no sub_ prefix, a character outside [A-Za-z0-9_], more than 255 characters) is skipped.
async function malformedSubscriptionIds(t: test.Test, env: Env, label: string) {
  await createTenant(env.gw.url, { tenant_id: "acme" });
  const now = sec(env);
  const long = "sub_" + "x".repeat(100_000);
  const bad: [string, unknown][] = [
    ["100,000 characters", long],
    ["256 characters", "sub_" + "a".repeat(252)],
    ["no sub_ prefix", "in_1234567890"],
    ["a space", "sub_a b"],
    ["a line break", "sub_a\nb"],
    ["empty after the prefix", "sub_"],
    ["an object with a 100,000-character id", { id: long, object: "subscription" }],
    ["an object with an id without prefix", { id: "cus_123", object: "subscription" }],
  ];
  let n = 0;
  for (const [what, sub] of bad) {
    const id = `evt_badsub_${++n}`;
    const r = await webhook(
      env,
      stripeEvent(id, "checkout.session.completed", now + n, checkoutCompleted("acme", "builder", undefined, { subscription: sub })),
    );
    t.equal(r.status, 200, `${label}: checkout whose subscription has ${what}: 200`);
    t.deepEqual(
      env.log.records.filter((x) => x.event_id === id).map((x) => `${x.outcome}:${x.reason}`),
      ["skipped:malformed_session"],
      `${label}: checkout whose subscription has ${what}: skipped as malformed_session`,
    );
  }
  let a = await tenant(env, "acme");
  t.deepEqual([a.plan, a.billing?.subscription_id ?? null], ["starter", null], `${label}: none of them changed the tenant or was stored`);

  const max = "sub_" + "a".repeat(251);
  t.equal(
    (await webhook(env, stripeEvent("evt_sub_255", "checkout.session.completed", now + 20, checkoutCompleted("acme", "builder", max)))).status,
    200,
    `${label}: a checkout whose subscription id has 255 characters: 200`,
  );
  a = await tenant(env, "acme");
  t.deepEqual([a.plan, a.billing?.subscription_id], ["builder", max], `${label}: a 255-character sub_ id is applied and stored`);

  const badDeletes: [string, string][] = [
    ["100,000 characters", long],
    ["no sub_ prefix", "si_123"],
    ["a control character", "sub_a\u0000"],
  ];
  for (const [what, sub] of badDeletes) {
    const id = `evt_baddel_${++n}`;
    const r = await webhook(env, stripeEvent(id, "customer.subscription.deleted", now + 30 + n, subscriptionDeleted("acme", sub)));
    t.equal(r.status, 200, `${label}: deletion whose id has ${what}: 200`);
    t.deepEqual(
      env.log.records.filter((x) => x.event_id === id).map((x) => `${x.outcome}:${x.reason}`),
      ["skipped:malformed_subscription"],
      `${label}: deletion whose id has ${what}: skipped as malformed_subscription`,
    );
  }
  a = await tenant(env, "acme");
  t.deepEqual([a.plan, a.billing?.ended_subscriptions], ["builder", []], `${label}: no malformed id was remembered as ended`);
  t.ok(JSON.stringify(a).length < 4096, `${label}: the record stays small`);
}

test("webhook: malformed subscription ids are skipped (malformed_session, malformed_subscription) and never stored", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const dir = await mkdtemp(join(tmpdir(), "svc-billing-subid-"));
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  try {
    const registries: [string, TenantRegistry][] = [
      ["memory", new MemoryTenantRegistry()],
      ["local", await LocalFileTenantRegistry.open(dir)],
      ["redis", new RedisTenantRegistry(redis, prefix)],
    ];
    for (const [label, registry] of registries) {
      const env = await setup(engine, stripe, registry);
      try {
        await malformedSubscriptionIds(t, env, label);
      } finally {
        await env.close();
      }
    }
    t.ok((await readFile(join(dir, "tenants.json"), "utf8")).length < 8192, "local: tenants.json holds no long id");
  } finally {
    await stripe.close();
    await engine.close();
    await cleanup();
    await rm(dir, { recursive: true, force: true });
  }
});
