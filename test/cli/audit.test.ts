// `svc audit` against a real gateway: the newest records first, filtered by tenant and status,
// --json, and usage errors for bad filters (exit 2, one sentence).
import test from "tape";
import { svc } from "./helpers.js";
import { startStack } from "./stack.js";

test("svc audit: filtered tail of the gateway's audit log", async (t) => {
  const stack = await startStack();
  try {
    const admin = { SVC_GATE_URL: stack.gateway, SVC_GATE_ENGINE_SERVICE_KEY: stack.serviceKey };
    const created = JSON.parse((await svc(["tenant", "create", "gamma", "--json"], admin)).out);
    const data = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: created.api_key as string };
    t.equal((await svc(["ls", "default"], data)).code, 0, "a list by gamma");
    t.equal((await svc(["ls", "nowhere"], data)).code, 1, "a list of a namespace gamma may not read (403)");

    const all = await svc(["audit", "--tenant", "gamma"], admin);
    t.equal(all.code, 0, `audit exits 0 ${all.err}`);
    const lines = all.out.trim().split("\n");
    t.match(lines[0]!, /^TIME\s+TENANT\s+METHOD\s+PATH\s+NAMESPACE\s+STATUS\s+CUS\s+MS$/, "a table header");
    t.match(lines[1]!, /gamma\s+GET\s+\/gate\/account\s+-\s+200/, "newest first: the account read behind the 403's hint (the tenant's namespaces)");
    t.match(lines[2]!, /gamma\s+GET\s+\/v1\/list\/nowhere\s+nowhere\s+403/, "then the 403");
    t.match(lines[3]!, /gamma\s+GET\s+\/v1\/list\/default\s+default\s+200/, "then the 200");
    t.match(lines[4]!, /gamma\s+POST\s+\/gate\/onboard\/create\s+-\s+201/, "then the tenant's creation");

    const json = await svc(["audit", "--tenant", "gamma", "--status", "403", "--limit", "5", "--json"], admin);
    const j = JSON.parse(json.out);
    t.equal(j.count, 1, "--status 403: one record");
    t.equal(j.records[0].path, "/v1/list/nowhere", "the refused list");
    t.equal(j.limit, 5, "--limit passed on");

    const none = await svc(["audit", "--tenant", "nobody"], admin);
    t.equal(none.out, "No matching audit records.\n", "no match: one sentence");
    for (const [args, why] of [
      [["--limit", "0"], "limit 0"],
      [["--limit", "1001"], "limit 1001"],
      [["--status", "42"], "status 42"],
      [["--tenant", "Bad Id"], "a bad tenant id"],
      [["extra"], "a positional argument"],
    ] as const) {
      const r = await svc(["audit", ...args], admin);
      t.equal(r.code, 2, `${why}: usage error`);
      t.match(r.err, /^svc: .+\n/, `one sentence: ${r.err.split("\n")[0]}`);
    }
    const help = await svc(["audit", "--help"], admin);
    t.match(help.out, /^Usage: svc audit/, "--help");
    const tenantKey = await svc(["audit"], { SVC_GATE_URL: stack.gateway, SVC_GATE_ENGINE_SERVICE_KEY: created.api_key as string });
    t.equal(tenantKey.code, 1, "a tenant key instead of the service key: exit 1");
  } finally {
    await stack.close();
  }
});
