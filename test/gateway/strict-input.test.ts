// Admin routes and payment webhooks (after their signature check) follow the strict JSON of the
// data plane: a duplicate member, a "__proto__" member, a lone surrogate or a number a float64
// cannot hold is a 400 naming the member; nothing is rewritten, dropped or applied.
import test from "tape";
import { call, createTenant, SERVICE_KEY, startFakeEngine } from "./helpers.js";
import { postWebhook, startBillingGateway } from "./billing-env.js";
import { checkoutCompleted, startFakeStripe, stripeEvent } from "./fixtures/billing-fake-stripe.js";

const adminRaw = (url: string, path: string, raw: string | Buffer) =>
  call(url, path, { raw, headers: { authorization: `Bearer ${SERVICE_KEY}`, "content-type": "application/json" } });

test("admin routes: hostile JSON bodies are 400 with a sentence naming the member, and change nothing", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await startBillingGateway(engine, stripe);
  const url = env.gw.url;
  const cases: Array<[string, string | Buffer, RegExp]> = [
    ["tenant_id twice", '{"tenant_id":"acme","tenant_id":"evil"}', /names the member "tenant_id" twice/],
    ["__proto__", '{"tenant_id":"proto1","__proto__":{"plan":"enterprise"}}', /member named "__proto__"/],
    ["a lone surrogate", '{"tenant_id":"sur1","email":"a\\ud800@example.com"}', /lone surrogate in the member "email"/],
    ["1e400", '{"tenant_id":"num1","rate_limit":{"requests":1e400,"window_s":60}}', /number 1e400 in the member "requests"/],
    ["1e-400", '{"tenant_id":"num2","monthly_quota":1e-400}', /number 1e-400 in the member "monthly_quota"/],
    ["deep nesting", '{"tenant_id":"deep","x":' + "[".repeat(200) + "]".repeat(200) + "}", /nested more than/],
    ["not UTF-8", Buffer.concat([Buffer.from('{"tenant_id":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]), /^The request body is not valid UTF-8\.$/],
  ];
  for (const [what, raw, re] of cases) {
    const r = await adminRaw(url, "/gate/onboard/create", raw);
    t.equal(r.status, 400, `${what}: 400`);
    t.match(String(r.json?.detail), re, `${what}: the detail says why`);
    t.equal(r.json?.code, "bad_request", `${what}: bad_request`);
  }
  for (const id of ["acme", "evil", "proto1", "sur1", "num1", "num2", "deep"]) t.equal(await env.registry.get(id), null, `no tenant ${id} was created`);
  await createTenant(url, { tenant_id: "acme" });
  const plan = (await env.registry.get("acme"))!.plan;
  const up = await adminRaw(url, "/gate/onboard/update-tier", '{"tenant_id":"acme","plan":"pro","plan":"enterprise"}');
  t.equal(up.status, 400, "update-tier with plan twice: 400");
  t.equal((await env.registry.get("acme"))!.plan, plan, "the plan is unchanged");
  await env.gw.close();
  await stripe.close();
  await engine.close();
});

test("payment webhook: a correctly signed event with a duplicate id or a __proto__ member is 400 and changes no plan", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await startBillingGateway(engine, stripe);
  await createTenant(env.gw.url, { tenant_id: "acme" });
  const plan = (await env.registry.get("acme"))!.plan;
  const now = Math.floor(env.clock.now() / 1000);
  const good = stripeEvent("evt_strict_1", "checkout.session.completed", now, checkoutCompleted("acme", "pro"));
  const dupId = good.replace('"id": "evt_strict_1",', '"id": "evt_strict_1",\n  "id": "evt_other",');
  t.notEqual(dupId, good, "the duplicate-id text differs");
  let r = await postWebhook(env, dupId);
  t.equal(r.status, 400, "signed, id twice: 400");
  t.match(r.json.detail, /^The payment event names the member "id" twice in one object\.$/, "the sentence names the member");
  const proto = good.replace('"metadata": {', '"metadata": {\n "__proto__": {"plan": "enterprise"},');
  t.notEqual(proto, good, "the __proto__ text differs");
  r = await postWebhook(env, proto);
  t.equal(r.status, 400, "signed, with a __proto__ member: 400");
  t.match(r.json.detail, /__proto__/, "the sentence names __proto__");
  const big = good.replace(`"created": ${now}`, '"created": 1e400');
  r = await postWebhook(env, big);
  t.equal(r.status, 400, "signed, a number beyond float64: 400");
  t.equal((await env.registry.get("acme"))!.plan, plan, `no plan changed (still ${plan})`);
  r = await postWebhook(env, good);
  t.equal(r.status, 200, "the same event, strict, is applied");
  t.equal((await env.registry.get("acme"))!.plan, "pro", "and changes the plan");
  r = await postWebhook(env, dupId, { secret: "whsec_wrong_0123456789" });
  t.equal(r.status, 400, "a bad signature is refused first, as before");
  await env.gw.close();
  await stripe.close();
  await engine.close();
});
