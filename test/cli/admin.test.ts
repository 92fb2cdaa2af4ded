// Admin commands against a real gateway: every tenant subcommand has its effect (rotate-key
// invalidates the old key, add-namespace opens a namespace, set-plan with enterprise terms,
// deactivate locks the key out), --json prints the gateway's JSON, errors are one sentence.
import test from "tape";
import { svc } from "./helpers.js";
import { startStack } from "./stack.js";

test("svc tenant: rotate-key, add-namespace, set-plan, deactivate, list and usage have their effect", async (t) => {
  const stack = await startStack();
  try {
    const admin = { SVC_GATE_URL: stack.gateway, SVC_GATE_ENGINE_SERVICE_KEY: stack.serviceKey };
    const created = await svc(
      ["tenant", "create", "beta", "--plan", "enterprise", "--quota", "none", "--rate-limit", "500/30", "--email", "ops@example.com", "--json"],
      admin,
    );
    t.equal(created.code, 0, `create exits 0 ${created.err}`);
    const c = JSON.parse(created.out);
    t.deepEqual(
      [c.tenant_id, c.plan, c.namespaces, c.monthly_quota, c.rate_limit],
      ["beta", "enterprise", ["default"], null, { requests: 500, window_s: 30 }],
      "--json shows the gateway's record with enterprise terms",
    );
    const key1 = c.api_key as string;
    const data = (key: string) => ({ SVC_GATE_URL: stack.gateway, SVC_API_KEY: key });
    t.equal((await svc(["ls", "default"], data(key1))).code, 0, "the new key works");

    const rot = await svc(["tenant", "rotate-key", "beta"], admin);
    t.equal(rot.code, 0, "rotate-key exits 0");
    const key2 = /^SVC_API_KEY=(\S+)$/m.exec(rot.out)?.[1];
    t.ok(key2 && key2 !== key1, "a new key is printed once");
    const old = await svc(["ls", "default"], data(key1));
    t.equal(old.code, 1, "the old key no longer works");
    t.match(old.err, /^svc: .*(API key|key).*\n$/i, `401 sentence: ${old.err.trim()}`);
    t.equal((await svc(["ls", "default"], data(key2!))).code, 0, "the rotated key works");

    t.equal((await svc(["ls", "extra"], data(key2!))).code, 1, "namespace extra is not in the ACL yet");
    const add = await svc(["tenant", "add-namespace", "beta", "extra"], admin);
    t.equal(add.out, "Tenant beta namespaces: default, extra\n", "add-namespace prints the full list");
    t.equal((await svc(["ls", "extra"], data(key2!))).code, 0, "namespace extra is now allowed");
    const badNs = await svc(["tenant", "add-namespace", "beta", "no spaces"], admin);
    t.equal(badNs.code, 2, "an invalid namespace is a usage error");

    const plan = await svc(["tenant", "set-plan", "beta", "pro"], admin);
    t.match(plan.out, /^Tenant beta is on plan pro \(quota 500000 CUs\/month, rate limit \d+ requests per \d+ s\)\.\n$/, `set-plan: ${plan.out.trim()}`);
    const none = await svc(["tenant", "set-plan", "beta", "enterprise", "--quota", "none"], admin);
    t.match(
      none.out,
      /^Tenant beta is on plan enterprise \(no monthly quota, rate limit \d+ requests per \d+ s\)\.\n$/,
      `no quota in words: ${none.out.trim()}`,
    );
    const ent = await svc(["tenant", "set-plan", "beta", "enterprise", "--quota", "1234", "--json"], admin);
    t.equal(JSON.parse(ent.out).monthly_quota, 1234, "enterprise quota set");

    const list = await svc(["tenant", "list", "--json"], admin);
    const beta = JSON.parse(list.out).tenants.find((x: { tenant_id: string }) => x.tenant_id === "beta");
    t.deepEqual([beta.plan, beta.namespaces, beta.active], ["enterprise", ["default", "extra"], true], "list shows the changes");

    const usage = await svc(["usage", "beta", "--period", "2020-01"], admin);
    t.match(usage.out, /^Tenant beta, period 2020-01: 0 CUs used of (1234|unlimited) \(0\.0%\)\n/, `usage of an empty period: ${usage.out.split("\n")[0]}`);
    const unknown = await svc(["usage", "nobody"], admin);
    t.equal(unknown.code, 1, "usage of an unknown tenant exits 1");
    t.match(unknown.err, /^svc: .*nobody.*\(request [0-9a-f-]{36}\)\n$/, `one sentence: ${unknown.err.trim()}`);

    const deact = await svc(["tenant", "deactivate", "beta"], admin);
    t.equal(deact.out, "Tenant beta is deactivated; its key no longer works.\n", "deactivate");
    t.equal((await svc(["ls", "default"], data(key2!))).code, 1, "a deactivated tenant's key is refused");
    const listed = await svc(["tenant", "list"], admin);
    t.match(listed.out, /^beta\s+enterprise\s+no\s+default,extra$/m, "list shows it inactive");

    const wrong = await svc(["tenant", "list"], { SVC_GATE_URL: stack.gateway, SVC_GATE_ENGINE_SERVICE_KEY: "w".repeat(64) });
    t.equal(wrong.code, 1, "a wrong service key exits 1");
    t.notOk(wrong.err.includes("w".repeat(16)), "the key is not echoed");
    const asTenant = await svc(["tenant", "list"], { SVC_GATE_URL: stack.gateway, SVC_GATE_ENGINE_SERVICE_KEY: stack.apiKey });
    t.equal(asTenant.code, 1, "a tenant key is refused on admin commands");
  } finally {
    await stack.close();
  }
});
