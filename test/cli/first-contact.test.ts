// What a new user meets first: `svc up` names the console's address (and it answers), a port
// clash names the likely `svc up` and the way out, a directory given as FILE is named, an empty
// namespace says so, a namespace typo gets "did you mean", an unknown key names rotation, and
// `svc usage` with a tenant key shows that tenant's own usage. Real gateway and engine.
import test from "tape";
import { createServer, type Server } from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import { svc } from "./helpers.js";
import { startStack, type Stack } from "./stack.js";
import { distance, nearest } from "../../bin/cli/hints.js";

let stack: Stack;
let dir: string;
test.onFinish(async () => {
  await stack?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

test("setup", async (t) => {
  stack = await startStack(["field", "default"]);
  dir = await mkdtemp(join(tmpdir(), "svc-first-"));
  t.pass(stack.gateway);
});

const env = () => ({ SVC_API_KEY: stack.apiKey, SVC_GATE_URL: stack.gateway });

test("svc up prints the console's address, and the console answers there", async (t) => {
  let stop!: (s: string) => void;
  const stopSignal = new Promise<string>((r) => {
    stop = r;
  });
  let out = "";
  const ready = new Promise<void>((resolve) => {
    const run = svc(
      ["up", "--data", join(dir, "up"), "--port", "0", "--engine-port", "0"],
      { SVC_ENGINE_LOG_LEVEL: "silent" },
      {
        stopSignal,
        out: (s) => {
          out += s;
          if (/^Ready\./m.test(out)) resolve();
        },
      },
    );
    void run.then((r) => {
      if (!/^Ready\./m.test(out)) {
        t.fail(`svc up ended: ${r.code} ${r.err}`);
        resolve();
      }
    });
  });
  await ready;
  const m = /^console: (\S+)$/m.exec(out);
  t.ok(m, `a console line: ${m?.[0]}`);
  t.match(m?.[1] ?? "", /^http:\/\/127\.0\.0\.1:\d+\/console\/$/, "at /console/ of the gateway");
  const res = await request(m![1]!, { headers: { accept: "text/html" } });
  const html = await res.body.text();
  t.deepEqual([res.statusCode, /text\/html/.test(String(res.headers["content-type"]))], [200, true], "the console's page answers 200 text/html");
  t.ok(html.length > 100, `a page (${html.length} characters)`);
  stop("SIGTERM");
});

test("a port clash names a running svc up and the way out", async (t) => {
  const busy: Server = createServer();
  await new Promise<void>((r) => busy.listen(0, "127.0.0.1", r));
  const port = (busy.address() as { port: number }).port;
  try {
    const r = await svc(["up", "--data", join(dir, "clash"), "--port", String(port), "--engine-port", "0"], { SVC_ENGINE_LOG_LEVEL: "silent" });
    t.equal(r.code, 1, "exit 1");
    t.equal(
      r.err,
      `svc: Port ${port} is already in use, perhaps by a 'svc up' still running (stop it with Ctrl-C), or choose another port with --port and --engine-port (0 picks a free one).\n`,
      r.err.trim(),
    );
  } finally {
    await new Promise<void>((r) => busy.close(() => r()));
  }
});

test("a directory given as FILE is named", async (t) => {
  const r = await svc(["put", "field", "k", dir, "--bytes"], env());
  t.equal(r.code, 1, "exit 1");
  t.equal(r.err, `svc: ${dir} is a directory, not a file ('svc import NS DIR' uploads every .npy file under a directory).\n`, r.err.trim());
});

test("an empty namespace says so on stderr; stdout stays an empty list", async (t) => {
  const r = await svc(["ls", "field"], env());
  t.deepEqual([r.code, r.out], [0, ""], "exit 0, nothing on stdout");
  t.equal(r.err, "No entries in namespace field; 'svc put field KEY FILE' stores one.\n", r.err.trim());
  const p = await svc(["ls", "field", "--prefix", "run/"], env());
  t.match(p.err, /^No entries in namespace field whose key starts with 'run\/'/, p.err.trim());
  const j = await svc(["ls", "field", "--json"], env());
  t.deepEqual(JSON.parse(j.out), { namespace: "field", keys: [], total: 0 }, "--json: an empty list, no sentence");
});

test("a namespace typo gets the nearest namespace of the tenant; a far one gets the list", async (t) => {
  const r = await svc(["ls", "feild"], env());
  t.equal(r.code, 1, "exit 1");
  t.match(
    r.err,
    /^svc: Tenant t1 is not allowed to access namespace feild \(its namespaces: field, default\); did you mean field\? \(request [0-9a-f-]+\)\n$/,
    r.err.trim(),
  );
  const far = await svc(["get", "zzzzzzzzzz", "k"], env());
  t.match(far.err, /namespace zzzzzzzzzz \(its namespaces: field, default\); 'svc tenant add-namespace' adds one\./, far.err.trim());
});

test("an unknown key (rotated, deactivated) names the way out", async (t) => {
  const r = await svc(["get", "field", "k"], { ...env(), SVC_API_KEY: `svc_live_${"x".repeat(40)}` });
  t.equal(r.code, 1, "exit 1");
  t.match(
    r.err,
    /^svc: Invalid API key: the gateway does not know the key in SVC_API_KEY \(a key stops working once 'svc tenant rotate-key' replaces it or the tenant is deactivated\); export the tenant's current key\./,
    r.err.trim(),
  );
});

test("svc usage with a tenant key shows the tenant's own usage", async (t) => {
  await svc(["put", "default", "blob", join(new URL("../..", import.meta.url).pathname, "package.json"), "--bytes"], env());
  const noService = { ...env(), SVC_GATE_ENGINE_SERVICE_KEY: "" };
  const auto = await svc(["usage", "--data", join(dir, "none")], noService);
  t.equal(auto.code, 0, auto.err);
  t.match(
    auto.out,
    /^Tenant t1 \(plan \w+\), period \d{4}-\d{2}: [\d.]+ CUs used of \S+ \([^)]*\); rate limit \d+ requests per \d+ s; namespaces field, default\.\n/,
    auto.out.split("\n")[0],
  );
  t.match(auto.out, /^put +[\d.]+$/m, "the breakdown has the put");
  const mine = await svc(["usage", "--mine", "--json"], { ...env(), SVC_GATE_ENGINE_SERVICE_KEY: stack.serviceKey });
  const a = JSON.parse(mine.out) as { tenant_id: string; namespaces: string[]; usage: { breakdown: Record<string, number> } };
  t.deepEqual(
    [a.tenant_id, a.namespaces, a.usage.breakdown.put! > 0],
    ["t1", ["field", "default"], true],
    "--mine uses SVC_API_KEY even with a service key at hand",
  );
  const admin = await svc(["usage"], { ...env(), SVC_GATE_ENGINE_SERVICE_KEY: stack.serviceKey });
  t.match(admin.out, /^Usage for \d{4}-\d{2}\nTENANT/, "with a service key: the admin table, as before");
  const both = await svc(["usage", "t1", "--mine"], env());
  t.deepEqual([both.code, both.err.split("\n")[0]], [2, "svc: --mine shows the usage of SVC_API_KEY's tenant: leave out ID."], "--mine with ID: a usage error");
  const badPeriod = await svc(["usage", "--mine", "--period", "2026-13"], env());
  t.equal(badPeriod.code, 2, "a bad --period: a usage error before any call");
  const noKey = await svc(["usage", "--mine"], { SVC_GATE_URL: stack.gateway });
  t.match(noKey.err, /^svc: SVC_API_KEY is not set/, noKey.err.split("\n")[0]);
  const badKey = await svc(["usage", "--mine"], { SVC_GATE_URL: stack.gateway, SVC_API_KEY: "nope" });
  t.deepEqual([badKey.code, /Invalid API key/.test(badKey.err)], [1, true], badKey.err.trim());
});

test("nearest: typos within a third of the length, nothing for far names", (t) => {
  t.equal(distance("feild", "field"), 1, "a transposition is one edit");
  t.equal(nearest("feild", ["default", "field"]), "field");
  t.equal(nearest("Field", ["default", "field"]), "field", "case ignored");
  t.equal(nearest("runs-2025", ["runs-2024", "other"]), "runs-2024");
  t.equal(nearest("abc", ["xyz"]), null);
  t.equal(nearest("x", []), null, "no namespaces: nothing");
  t.equal(nearest("a".repeat(255), ["b".repeat(255)]), null, "long names, all different");
  t.end();
});
