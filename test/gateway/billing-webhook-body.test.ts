// The payment webhook takes no key, so its body is what anyone can send: over real TCP, bodies
// held open by clients that stop sending are cut off after the grace time (400, the connection
// closed) and, while they are held, stay within the webhook's own memory budget (503 with
// Retry-After past it, the body not read), so that no number of such clients can grow the
// gateway's heap; a signed event is applied again once the memory is free.
import test from "tape";
import net from "node:net";
import { MemoryBudget } from "../../server/http/memory-budget.js";
import { MAX_WEBHOOK_BYTES } from "../../server/gateway/billing.js";
import { sendRaw } from "../http/raw-answers.js";
import { createTenant, startFakeEngine } from "./helpers.js";
import { postWebhook, startBillingGateway } from "./billing-env.js";
import { checkoutCompleted, startFakeStripe, stripeEvent } from "./fixtures/billing-fake-stripe.js";

const portOf = (url: string) => Number(new URL(url).port);
const head = (len: number) => `POST /webhooks/payment HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n\r\n`;

/** Waits (polling, up to 20 s) until `ok()` holds; false when it never did. */
async function until(ok: () => boolean): Promise<boolean> {
  for (const end = Date.now() + 20_000; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) if (ok()) return true;
  return ok();
}

test("webhook: a body that stops arriving is cut off after the grace time with a 400 and the connection closed", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await startBillingGateway(engine, stripe, undefined, { bodyRate: { minBytesPerS: 1024, graceMs: 500 } });
  try {
    // 10 of 1,000 bytes, then nothing: unguarded, the request waits for Node's 300 s timeout.
    const r = await sendRaw(portOf(env.gw.url), head(1000) + "{".repeat(10), 1);
    t.equal(r.answers.length, 1, "answered (sendRaw gives up after 30 s)");
    t.equal(r.answers[0]?.status, 400, "400");
    const body = JSON.parse(r.answers[0]?.text ?? "{}") as { detail?: string; code?: string };
    t.equal(body.code, "bad_request");
    t.match(body.detail ?? "", /^The request body arrived slower than the minimum of 1024 bytes per second/, "the slow-body sentence");
    t.match(r.raw, /\r\nconnection: close\r\n/i, "the connection is closed");
    t.equal(env.log.records.length, 0, "no event handled");
  } finally {
    await env.gw.close();
    await engine.close();
    await stripe.close();
  }
});

test("webhook: bodies in flight stay within the webhook's memory budget; past it 503 with Retry-After, then served again", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const budget = new MemoryBudget(2 * MAX_WEBHOOK_BYTES);
  const env = await startBillingGateway(engine, stripe, undefined, { webhookBudget: budget, bodyRate: { minBytesPerS: 1, graceMs: 60_000 } });
  const held: net.Socket[] = [];
  try {
    await createTenant(env.gw.url, { tenant_id: "acme" });
    // Two clients announce the largest body, send a little of it and stop.
    for (let i = 0; i < 2; i++) {
      const s = net.connect(portOf(env.gw.url), "127.0.0.1");
      s.on("error", () => undefined);
      s.write(head(MAX_WEBHOOK_BYTES) + "{".repeat(100));
      held.push(s);
    }
    t.ok(await until(() => budget.used === 2 * MAX_WEBHOOK_BYTES), "both bodies are reserved in the budget");

    const sec = Math.floor(env.clock.now() / 1000);
    const event = stripeEvent("evt_budget", "checkout.session.completed", sec, checkoutCompleted("acme", "builder"));
    const refused = await postWebhook(env, event);
    t.equal(refused.status, 503, "a third body does not fit: 503");
    t.equal(refused.json.code, "overloaded", "code overloaded");
    t.ok(Number(refused.headers.get("retry-after")) >= 1, "with Retry-After, so the provider retries");
    t.equal(env.log.records.length, 0, "the event was not handled");

    for (const s of held) s.destroy();
    t.ok(await until(() => budget.used === 0), "the memory is given back when the clients leave");
    const again = await postWebhook(env, event);
    t.equal(again.status, 200, "the provider's retry is served");
    t.equal((await env.registry.get("acme"))?.plan, "builder", "and applied");
    t.equal(budget.used, 0, "nothing held after the answer");
  } finally {
    for (const s of held) s.destroy();
    await env.gw.close();
    await engine.close();
    await stripe.close();
  }
});
