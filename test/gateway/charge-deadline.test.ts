// Charges carry a deadline on Redis's clock and Redis refuses one that arrives past it (meter.ts
// ChargeDeadlines, the ADD and SETTLE scripts): against the real Redis (SVC_TEST_REDIS_URL),
// a charge whose deadline has passed applies nothing and rejects with LateChargeError, one
// within it is applied, and the deadline a gateway computes follows the link's bound and the
// offset of Redis's clock learnt from the admission script.
import test from "tape";
import { RedisAdmission } from "../../server/gateway/admission.js";
import { ChargeDeadlines, LateChargeError, monotonicMs, RedisUsageStore, usageKey } from "../../server/gateway/meter.js";
import { RespConnection, type RedisLink } from "../../server/gateway/resp.js";
import { RedisTenantRegistry } from "../../server/gateway/tenants.js";
import { redisFor, REDIS_URL, uniquePrefix } from "./helpers.js";

/** Redis's clock, in ms. */
async function redisNowMs(link: RedisLink): Promise<number> {
  const [s, us] = (await link.sendCommand(["TIME"])) as [string, string];
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

test("RedisUsageStore: a charge past its deadline is not applied; one within it is", async (t) => {
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  const link = await RespConnection.open(REDIS_URL, { commandTimeoutMs: 2000 });
  try {
    const usage = new RedisUsageStore(link, prefix);
    const now = await redisNowMs(link);
    try {
      await usage.add("acme", "2026-11", "get", 100, now - 1);
      t.fail("a charge past its deadline resolved");
    } catch (e) {
      t.ok(e instanceof LateChargeError, "a charge past its deadline rejects with LateChargeError");
      t.equal((e as LateChargeError).code, "state_unavailable", "answered as state_unavailable");
    }
    t.equal(await usage.total("acme", "2026-11"), 0, "and nothing was counted");
    t.equal(await redis.exists(usageKey(prefix, "2026-11", "acme")), 0, "the usage hash was not even created");
    await usage.add("acme", "2026-11", "get", 100, now + 60_000);
    t.equal(await usage.total("acme", "2026-11"), 100, "a charge within its deadline is counted");
    await usage.add("acme", "2026-11", "put", 1000);
    t.deepEqual(
      await usage.get("acme", "2026-11"),
      { total_milli: 1100, breakdown_milli: { get: 100, put: 1000 } },
      "with the link's own deadline (its timeout) too",
    );
  } finally {
    await link.close();
    await cleanup();
  }
});

test("RedisAdmission.settle: past its deadline the reservation is dropped and nothing is charged", async (t) => {
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  const link = await RespConnection.open(REDIS_URL, { commandTimeoutMs: 2000 });
  try {
    const registry = new RedisTenantRegistry(link, prefix);
    const admission = new RedisAdmission(link, registry, prefix);
    const usage = new RedisUsageStore(link, prefix);
    const at = new Date().toISOString();
    await registry.create({
      tenant_id: "acme",
      plan: "starter",
      namespaces: ["default"],
      email: null,
      key_hash: "h".repeat(64),
      active: true,
      status: "active",
      monthly_quota: null,
      rate_limit: { requests: 1000, window_s: 60 },
      custom_rate_limit: false,
      created_at: at,
      updated_at: at,
    });
    const l = await admission.lookup("h".repeat(64));
    t.ok(l, "the tenant is found");
    const spec = { requests: 1000, windowMs: 60_000 };
    const quota = { period: "2026-11", quotaMilli: 1_000_000, costMilli: 1000 };
    const a = await admission.admit(l!, spec, quota);
    t.ok(a?.reservation, "a reservation is made");
    const resv = `${prefix}resv:2026-11:acme`;
    t.equal(await redis.zCard(resv), 1, "the reservation is held");
    try {
      await admission.settle(a!.reservation!, "put", 1000, (await redisNowMs(link)) - 1);
      t.fail("a settlement past its deadline resolved");
    } catch (e) {
      t.ok(e instanceof LateChargeError, "a settlement past its deadline rejects with LateChargeError");
    }
    t.equal(await redis.zCard(resv), 0, "the reservation is dropped all the same");
    t.equal(await usage.total("acme", "2026-11"), 0, "nothing was charged");
    const b = await admission.admit(l!, spec, quota);
    await admission.settle(b!.reservation!, "put", 1000, (await redisNowMs(link)) + 60_000);
    t.equal(await usage.total("acme", "2026-11"), 1000, "a settlement within its deadline is charged");
    const c = await admission.admit(l!, spec, quota);
    await admission.settle(c!.reservation!, "put", 0, (await redisNowMs(link)) - 1);
    t.equal(await redis.zCard(resv), 0, "a request charged nothing settles past its deadline without an error");
    const d = await admission.admit(l!, spec, quota);
    await admission.settle(d!.reservation!, "get", 100);
    t.equal(await usage.total("acme", "2026-11"), 1100, "with the link's own deadline (its timeout) too");
  } finally {
    await link.close();
    await cleanup();
  }
});

test("ChargeDeadlines: the link's bound less a margin, on Redis's clock as learnt", (t) => {
  let by: number | undefined = 0;
  const link: RedisLink = { sendCommand: () => Promise.resolve(null), answerBy: () => by };
  const d = new ChargeDeadlines(link);
  // Bounds, not tolerances: `before` and `after` are read around the call, so a pause of this
  // process between them (a loaded machine) widens the interval instead of failing the test.
  const within = (what: string, f: () => string, lo: (before: number, after: number) => number, hi: (before: number, after: number) => number) => {
    const before = monotonicMs();
    const got = Number(f());
    const after = monotonicMs();
    t.ok(got >= Math.floor(lo(before, after)) - 1 && got <= hi(before, after) + 1, `${what} (${got - before} ms from now)`);
  };
  within(
    "2 s left: the deadline is 1.5 s away (a quarter of the wait kept for the reply)",
    () => {
      by = monotonicMs() + 2000;
      return d.next();
    },
    (b0) => b0 + 1500,
    (b0, a0) => a0 + 1500,
  );
  within(
    "10 s left: 9.5 s away (the margin is at most 500 ms)",
    () => {
      by = monotonicMs() + 10_000;
      return d.next();
    },
    (b0) => b0 + 9500,
    (b0, a0) => a0 + 9500,
  );
  within(
    "a link already past its bound: now",
    () => {
      by = monotonicMs() - 100;
      return d.next();
    },
    (b0) => b0,
    (b0, a0) => a0,
  );
  d.observe(monotonicMs() + 60_000);
  const learnt = d.offset;
  t.ok(learnt <= 60_000 && learnt > 50_000, `Redis's clock one minute ahead: the offset learnt (${Math.round(learnt)} ms) is at most the true one`);
  within(
    "and the deadline moves with it",
    () => {
      by = monotonicMs() + 10_000;
      return d.next();
    },
    (b0) => b0 + learnt + 9500,
    (b0, a0) => a0 + learnt + 9500,
  );
  d.observe(monotonicMs() + 30_000);
  t.equal(d.offset, learnt, "a smaller sample (a reply read late) does not lower the offset");
  d.observe(Number.NaN);
  t.equal(d.offset, learnt, "a reading that is not a number is ignored");
  by = undefined;
  t.equal(d.next(), "", "a link without a bound: no deadline");
  t.equal(new ChargeDeadlines({ sendCommand: () => Promise.resolve(null) }).next(), "", "a link that cannot say: no deadline");
  const fallback = new ChargeDeadlines({ sendCommand: () => Promise.resolve(null) }, 2000);
  within(
    "unless a wait is given",
    () => fallback.next(),
    (b0) => b0 + 1500,
    (b0, a0) => a0 + 1500,
  );
  t.end();
});

test("RespConnection.answerBy: its timeout, or sooner when an older command waits", async (t) => {
  const link = await RespConnection.open(REDIS_URL, { commandTimeoutMs: 3000 });
  const bare = await RespConnection.open(REDIS_URL);
  try {
    const before = monotonicMs();
    const idle = link.answerBy()!;
    const after = monotonicMs();
    t.ok(idle >= before + 3000 - 1 && idle <= after + 3000 + 1, "idle: now plus the timeout");
    // BLPOP keeps a command waiting until the key is written
    const list = `${uniquePrefix()}list`;
    const blocked = link.sendCommand(["BLPOP", list, "0"]);
    await new Promise((r) => setTimeout(r, 200));
    const by = link.answerBy()!;
    // the BLPOP was sent at least 200 ms ago: its due is at least 200 ms sooner than a fresh timeout
    t.ok(by <= monotonicMs() + 3000 - 199, "with an older command waiting: that command's due, sooner than a fresh timeout");
    await bare.sendCommand(["LPUSH", list, "x"]);
    t.deepEqual(await blocked, [list, "x"], "the waiting command is answered");
    t.equal(bare.answerBy(), undefined, "a connection without a timeout: no bound");
  } finally {
    await link.close();
    await bare.close();
  }
});
