// Billing across gateway processes: two real gateway processes (startGateway from the
// environment, billing on) on one Redis prefix receive the same signed event at the same
// time; exactly one applies it. Checkout through a process goes to SVC_GATE_PAYMENT_API_BASE.
// A missing payment secret stops start-up with a sentence naming the variable.
import test from "tape";
import Stripe from "stripe";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadGatewayConfig } from "../../server/gateway/config.js";
import { admin, call, createTenant, REDIS_URL, redisFor, SERVICE_KEY, startFakeEngine, uniquePrefix } from "./helpers.js";
import { checkoutCompleted, startFakeStripe, stripeEvent, subscriptionDeleted } from "./fixtures/billing-fake-stripe.js";

const SECRET_KEY = "sk_test_shared_0123456789abcdefghijklmnop";
const WEBHOOK_SECRET = "whsec_shared_test_0123456789abcdefghij";
const sdk = new Stripe(SECRET_KEY);

/** A billing-enabled gateway process's configuration on one Redis prefix; its files under dir/n. */
const sharedEnv = (engineUrl: string, stripeUrl: string, prefix: string, dir: string, n: string) => ({
  SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
  SVC_GATE_HOST: "127.0.0.1",
  SVC_GATE_PORT: "0",
  SVC_GATE_ENGINE_URL: engineUrl,
  SVC_GATE_REDIS_URL: REDIS_URL,
  SVC_GATE_REDIS_PREFIX: prefix,
  SVC_GATE_BILLING_ENABLED: "true",
  SVC_GATE_PAYMENT_SECRET_KEY: SECRET_KEY,
  SVC_GATE_PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
  SVC_GATE_PAYMENT_PRICE_BUILDER: "price_b",
  SVC_GATE_PAYMENT_PRICE_PRO: "price_p",
  SVC_GATE_PAYMENT_API_BASE: stripeUrl,
  SVC_GATE_DATA_DIR: join(dir, n),
  SVC_GATE_AUDIT_LOG_PATH: join(dir, n, "audit.jsonl"),
  SVC_GATE_BILLING_LOG_PATH: join(dir, n, "billing.jsonl"),
});

interface Proc {
  url: string;
  child: ChildProcess;
  output: () => string;
}

function spawnGateway(env: Record<string, string>): Promise<Proc> {
  const child = spawn(process.execPath, ["--import", "tsx", "test/gateway/fixtures/gateway-proc.ts"], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stderr!.on("data", (d) => (out += d));
  child.stdout!.on("data", (d) => (out += d));
  return new Promise<Proc>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    rl.once("line", (l) => resolve({ url: JSON.parse(l).url as string, child, output: () => out }));
    child.once("exit", (c) => reject(Object.assign(new Error(`gateway exited ${c}`), { code: c, output: out })));
  });
}

async function stop(p: Proc): Promise<number | null> {
  if (p.child.exitCode !== null) return p.child.exitCode;
  const done = new Promise<number | null>((r) => p.child.once("exit", (c) => r(c)));
  p.child.kill("SIGTERM");
  return done;
}

const lines = async (path: string) =>
  (await readFile(path, "utf8"))
    .trim()
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));

test("two gateway processes on one Redis receive the same event at once: exactly one applies it", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const prefix = uniquePrefix();
  const { cleanup } = await redisFor(prefix);
  const dir = await mkdtemp(join(tmpdir(), "svc-billing-shared-"));
  const envOf = (n: string) => sharedEnv(engine.url, stripe.url, prefix, dir, n);
  const [a, b] = await Promise.all([spawnGateway(envOf("a")), spawnGateway(envOf("b"))]);
  try {
    const key = await createTenant(a.url, { tenant_id: "acme" });

    const co = await call(b.url, "/gate/checkout", { key, body: { plan: "pro", success_url: "https://a.example/s", cancel_url: "https://a.example/c" } });
    t.equal(co.status, 200, "checkout through process B reaches the API at SVC_GATE_PAYMENT_API_BASE");
    t.equal(stripe.requests[0]?.form.get("line_items[0][price]"), "price_p", "with SVC_GATE_PAYMENT_PRICE_PRO");
    t.equal(stripe.requests[0]?.headers.authorization, `Bearer ${SECRET_KEY}`, "and SVC_GATE_PAYMENT_SECRET_KEY");

    const now = Math.floor(Date.now() / 1000);
    for (let round = 0; round < 5; round++) {
      const body = stripeEvent(
        `evt_twice_${round}`,
        "checkout.session.completed",
        now + round,
        checkoutCompleted("acme", round % 2 ? "builder" : "pro", `sub_${round}`),
      );
      const header = sdk.webhooks.generateTestHeaderString({ payload: body, secret: WEBHOOK_SECRET, timestamp: now });
      const send = (url: string) => call(url, "/webhooks/payment", { raw: body, headers: { "content-type": "application/json", "stripe-signature": header } });
      const [ra, rb] = await Promise.all([send(a.url), send(b.url)]);
      t.deepEqual([ra.status, rb.status], [200, 200], `round ${round}: both answer 200`);
    }
    const logA = await lines(join(dir, "a", "billing.jsonl"));
    const logB = await lines(join(dir, "b", "billing.jsonl"));
    for (let round = 0; round < 5; round++) {
      const recs = [...logA, ...logB].filter((r) => r.event_id === `evt_twice_${round}`);
      t.deepEqual(recs.map((r) => r.outcome).sort(), ["applied", "skipped"], `round ${round}: one process applied the event, the other skipped it`);
      t.equal(recs.find((r) => r.outcome === "skipped")?.reason, "duplicate", `round ${round}: as a duplicate`);
    }
    const u = await admin(a.url, "/gate/admin/usage/acme", undefined, "GET");
    t.equal(u.json.monthly_quota, 500_000, "the last event (pro) decided the plan: quota 500,000 on A");
    const list = await admin(b.url, "/gate/admin/tenants", undefined, "GET");
    t.equal(list.json.tenants[0].plan, "pro", "B sees plan pro");

    // Downgrade through B, replay through A.
    const del = stripeEvent("evt_del", "customer.subscription.deleted", now + 10, subscriptionDeleted("acme", "sub_4"));
    const header = sdk.webhooks.generateTestHeaderString({ payload: del, secret: WEBHOOK_SECRET, timestamp: now });
    t.equal((await call(b.url, "/webhooks/payment", { raw: del, headers: { "content-type": "application/json", "stripe-signature": header } })).status, 200);
    t.equal((await call(a.url, "/webhooks/payment", { raw: del, headers: { "content-type": "application/json", "stripe-signature": header } })).status, 200);
    t.equal((await admin(a.url, "/gate/admin/tenants", undefined, "GET")).json.tenants[0].plan, "starter", "back to starter");

    const auditA = await lines(join(dir, "a", "audit.jsonl"));
    t.ok(
      auditA.some((r) => r.path === "/webhooks/payment" && r.status === 200 && r.tenant_id === "acme"),
      "webhook requests are in the audit log",
    );
    t.deepEqual([await stop(a), await stop(b)], [0, 0], "both exit cleanly");
    const everything = [
      a.output(),
      b.output(),
      ...(await Promise.all(["a/audit.jsonl", "a/billing.jsonl", "b/audit.jsonl", "b/billing.jsonl"].map((f) => readFile(join(dir, f), "utf8")))),
    ].join("\n");
    t.notOk(everything.includes(SECRET_KEY) || everything.includes(WEBHOOK_SECRET) || everything.includes(key), "no secret or key in any output or log");
  } finally {
    await stop(a);
    await stop(b);
    await cleanup();
    await stripe.close();
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("gateway processes: a deactivation cancels the subscription at Stripe, and a pending cancellation is swept at start", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  const dir = await mkdtemp(join(tmpdir(), "svc-billing-cancel-"));
  const envOf = (n: string) => sharedEnv(engine.url, stripe.url, prefix, dir, n);
  const procs: Proc[] = [];
  try {
    const a = await spawnGateway(envOf("a"));
    procs.push(a);
    await createTenant(a.url, { tenant_id: "acme" });
    const now = Math.floor(Date.now() / 1000);
    const body = stripeEvent("evt_cancel_b", "checkout.session.completed", now, checkoutCompleted("acme", "builder", "sub_proc_b"));
    const header = sdk.webhooks.generateTestHeaderString({ payload: body, secret: WEBHOOK_SECRET, timestamp: now });
    t.equal((await call(a.url, "/webhooks/payment", { raw: body, headers: { "content-type": "application/json", "stripe-signature": header } })).status, 200);
    const d = await admin(a.url, "/gate/onboard/deactivate", { tenant_id: "acme" });
    t.deepEqual(
      [d.status, d.json.cancellations, d.json.pending_cancellations],
      [200, [{ subscription_id: "sub_proc_b", result: "canceled", detail: "" }], []],
      "the deactivation answers that the subscription was canceled",
    );
    t.deepEqual(stripe.canceled, ["sub_proc_b"], "at Stripe, once");
    t.deepEqual(
      (await lines(join(dir, "a", "billing.jsonl"))).filter((r) => r.type === "admin.deactivate").map((r) => [r.tenant_id, r.cancellations[0]?.result]),
      [["acme", "canceled"]],
      "the billing log file has the cancellation",
    );

    // A cancellation left pending (the provider was down, then the gateways stopped).
    const key = `${prefix}tenant:acme`;
    const rec = JSON.parse((await redis.get(key))!);
    rec.billing.pending_cancellations = ["sub_left_over"];
    await redis.set(key, JSON.stringify(rec));
    const b = await spawnGateway(envOf("b"));
    procs.push(b);
    const deadline = Date.now() + 60_000;
    while (!stripe.canceled.includes("sub_left_over") && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    t.deepEqual(stripe.canceled, ["sub_proc_b", "sub_left_over"], "a gateway that starts cancels what is pending");
    while (JSON.parse((await redis.get(key))!).billing.pending_cancellations.length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    t.deepEqual(JSON.parse((await redis.get(key))!).billing.pending_cancellations, [], "and clears it from the record");
    t.deepEqual([await stop(a), await stop(b)], [0, 0], "both exit cleanly");
  } finally {
    for (const p of procs) await stop(p);
    await cleanup();
    await stripe.close();
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("billing enabled without a payment secret: the gateway does not start, and says which variable", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-billing-cfg-"));
  const base = {
    SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "0",
    SVC_GATE_DATA_DIR: dir,
    SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    SVC_GATE_BILLING_ENABLED: "true",
    SVC_GATE_PAYMENT_SECRET_KEY: SECRET_KEY,
    SVC_GATE_PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
    SVC_GATE_PAYMENT_PRICE_BUILDER: "price_b",
    SVC_GATE_PAYMENT_PRICE_PRO: "price_p",
  };
  const configError = (env: Record<string, string>): ConfigError | null => {
    try {
      loadGatewayConfig(env);
      return null;
    } catch (e) {
      return e instanceof ConfigError ? e : null;
    }
  };
  for (const missing of [
    "SVC_GATE_PAYMENT_WEBHOOK_SECRET",
    "SVC_GATE_PAYMENT_SECRET_KEY",
    "SVC_GATE_PAYMENT_PRICE_BUILDER",
    "SVC_GATE_PAYMENT_PRICE_PRO",
  ] as const) {
    const err = configError({ ...base, [missing]: "  " });
    t.equal(err?.variable, missing, `loadGatewayConfig refuses a blank ${missing}`);
    t.equal(err?.message, `${missing} must be set when SVC_GATE_BILLING_ENABLED is true.`, "in one sentence naming it");
  }
  for (const bad of ["ftp://127.0.0.1:1", "http://127.0.0.1:12111/v1", "not a url"]) {
    t.equal(configError({ ...base, SVC_GATE_PAYMENT_API_BASE: bad })?.variable, "SVC_GATE_PAYMENT_API_BASE", `SVC_GATE_PAYMENT_API_BASE ${bad} is refused`);
  }
  t.equal(
    loadGatewayConfig({ ...base, SVC_GATE_PAYMENT_API_BASE: "http://127.0.0.1:12111/" }).payment.apiBase,
    "http://127.0.0.1:12111",
    "an origin is accepted",
  );
  t.equal(
    loadGatewayConfig({ ...base, SVC_GATE_BILLING_ENABLED: "false", SVC_GATE_PAYMENT_WEBHOOK_SECRET: "" }).billingEnabled,
    false,
    "billing off: the secrets are not needed",
  );
  try {
    // the shipped program: `svc gateway` exits 1 with the sentence (docs/cli.md)
    for (const missing of [
      "SVC_GATE_PAYMENT_WEBHOOK_SECRET",
      "SVC_GATE_PAYMENT_SECRET_KEY",
      "SVC_GATE_PAYMENT_PRICE_BUILDER",
      "SVC_GATE_PAYMENT_PRICE_PRO",
    ] as const) {
      const env: Record<string, string> = { PATH: process.env.PATH ?? "", ...base };
      delete env[missing];
      const r = spawnSync(process.execPath, ["--import", "tsx", "bin/svc.ts", "gateway"], { env, encoding: "utf8", timeout: 60_000 });
      t.equal(r.status, 1, `svc gateway without ${missing}: exit 1`);
      t.equal((r.stderr + r.stdout).trim(), `svc: ${missing} must be set when SVC_GATE_BILLING_ENABLED is true.`, "one line, the sentence naming the variable");
      t.notOk((r.stderr + r.stdout).includes(SECRET_KEY) || (r.stderr + r.stdout).includes(WEBHOOK_SECRET), "no secret is printed");
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
