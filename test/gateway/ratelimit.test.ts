// Sliding-window rate limiters: the memory one with an injected clock (exact window edges),
// the Redis Lua one against a real server (its own clock; short windows), and one scenario of
// requests staggered across the window, run on both, that only a true sliding window passes.
import test from "tape";
import { FakeClock } from "../../server/gateway/clock.js";
import { MemoryRateLimiter, RedisRateLimiter, rateKey, type RateLimiter } from "../../server/gateway/ratelimit.js";
import { redisFor, uniquePrefix } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("memory: at most N in any window; the oldest admission leaves exactly at +window", async (t) => {
  const clock = new FakeClock(1_000_000);
  const rl = new MemoryRateLimiter(clock);
  const spec = { requests: 3, windowMs: 1000 };
  const s1 = await rl.hit("a", spec);
  t.deepEqual(s1, { allowed: true, limit: 3, remaining: 2, resetS: 1001, retryAfterS: 0 }, "first admission");
  clock.advance(400);
  await rl.hit("a", spec);
  clock.advance(400);
  const s3 = await rl.hit("a", spec);
  t.equal(s3.remaining, 0, "third admission leaves 0");
  clock.advance(100); // t = 900 ms after the first
  const no = await rl.hit("a", spec);
  t.equal(no.allowed, false, "fourth within the window refused");
  t.equal(no.retryAfterS, 1, "retry after ceil(100 ms) = 1 s");
  t.equal(no.resetS, 1001, "reset when the first admission leaves");
  clock.set(1_000_999);
  t.equal((await rl.hit("a", spec)).allowed, false, "1 ms before the edge: refused");
  clock.set(1_001_000);
  t.equal((await rl.hit("a", spec)).allowed, true, "at the edge: the first left, admitted");
  t.equal((await rl.hit("a", spec)).allowed, false, "full again");
  clock.set(1_001_400);
  t.equal((await rl.hit("a", spec)).allowed, true, "the second left at +1400 ms");
  t.equal((await rl.hit("b", spec)).allowed, true, "tenants are independent");
});

test("memory: a true sliding window admits no burst of 2N across a fixed-bucket boundary", async (t) => {
  const clock = new FakeClock(10_000_000);
  const rl = new MemoryRateLimiter(clock);
  const spec = { requests: 5, windowMs: 1000 };
  clock.set(10_000_900);
  for (let i = 0; i < 5; i++) await rl.hit("x", spec);
  clock.set(10_001_100); // a fixed 1-s bucket would have reset at 10_001_000
  const s = await rl.hit("x", spec);
  t.equal(s.allowed, false, "200 ms later (across the bucket boundary) still refused");
  t.equal(s.retryAfterS, 1);
  const p = await rl.peek("x", spec);
  t.equal(p.remaining, 0, "peek reports the state");
  clock.set(10_001_900);
  t.equal((await rl.hit("x", spec)).allowed, true, "a full window after the burst: admitted");
});

test("memory: peek counts nothing; a refused request is not recorded", async (t) => {
  const clock = new FakeClock(0);
  const rl = new MemoryRateLimiter(clock);
  const spec = { requests: 1, windowMs: 1000 };
  const p = await rl.peek("p", spec);
  t.deepEqual([p.allowed, p.remaining], [true, 1], "peek on an empty window");
  t.equal((await rl.peek("p", spec)).remaining, 1, "peek did not record");
  await rl.hit("p", spec);
  for (let i = 0; i < 5; i++) await rl.hit("p", spec);
  clock.set(1000);
  t.equal((await rl.hit("p", spec)).allowed, true, "refusals did not extend the window");
});

async function redisCase(t: test.Test, fn: (rl: RateLimiter) => Promise<void>) {
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  try {
    await fn(new RedisRateLimiter(redis, prefix));
  } finally {
    const keys: string[] = [];
    for await (const b of redis.scanIterator({ MATCH: `${prefix}*` })) keys.push(...(b as unknown as string[]));
    t.ok(
      keys.every((k) => k.startsWith(prefix)),
      "only this run's keys exist under its prefix",
    );
    await cleanup();
  }
}

/**
 * Requests staggered across the window, with outcomes that only a true sliding window gives.
 * A fixed window of any alignment that refuses at +1700 ms holds all three first admissions in
 * one bucket, which has ended by +2300 ms, so it admits more than one there. A two-bucket
 * estimate (previous bucket weighted by its overlap, rounded or not) fails at least one check
 * for every alignment (simulated over alignments 1 ms apart). `at(ms)` moves time to t0 + ms:
 * the fake clock for the memory limiter, a real wait for Redis (whose script reads the server's
 * own clock); every instant is at least 300 ms from the moment an admission leaves the window.
 */
async function staggered(t: test.Test, rl: RateLimiter, at: (ms: number) => Promise<void>) {
  const spec = { requests: 3, windowMs: 2000 };
  // admissions at 0, 700 and 1400 ms: they leave the window at 2000, 2700 and 3400 ms
  for (const ms of [0, 700, 1400]) {
    await at(ms);
    t.equal((await rl.hit("s", spec)).allowed, true, `+${ms} ms: admitted`);
  }
  await at(1700);
  const full = await rl.hit("s", spec);
  t.deepEqual([full.allowed, full.remaining], [false, 0], "+1700 ms: three in the window, refused");
  t.equal(full.retryAfterS, 1, "Retry-After: the admission at 0 ms leaves 300 ms later, rounded up to 1 s");
  await at(2300);
  const one = await rl.hit("s", spec);
  t.deepEqual([one.allowed, one.remaining], [true, 0], "+2300 ms: the admission at 0 ms has left, exactly one place is free");
  t.equal((await rl.hit("s", spec)).allowed, false, "+2300 ms: the admissions at 700 and 1400 ms still count; a second is refused");
  t.equal((await rl.peek("s", spec)).remaining, 0, "peek: full");
  await at(3000);
  t.equal((await rl.hit("s", spec)).allowed, true, "+3000 ms: the admission at 700 ms has left, one more is admitted");
  t.equal((await rl.hit("s", spec)).allowed, false, "+3000 ms: and only one");
  await at(3700);
  const after = await rl.hit("s", spec);
  t.deepEqual([after.allowed, after.remaining], [true, 0], "+3700 ms: the one at 1400 ms has left; those at 2300 and 3000 ms remain");
  await at(3800);
  t.equal((await rl.hit("s", spec)).allowed, false, "+3800 ms: admissions at 2300, 3000 and 3700 ms fill the window");
  await at(4700);
  t.equal((await rl.hit("s", spec)).allowed, true, "+4700 ms: the one at 2300 ms has left, one is admitted");
  t.equal((await rl.hit("s", spec)).allowed, false, "+4700 ms: and only one");
}

test("memory: requests staggered across the window leave it one by one (only a sliding window passes)", async (t) => {
  const clock = new FakeClock(50_000_000);
  const t0 = clock.now();
  await staggered(t, new MemoryRateLimiter(clock), async (ms) => clock.set(t0 + ms));
});

test("redis: requests staggered across the window leave it one by one, timed by the server's clock", async (t) => {
  await redisCase(t, async (rl) => {
    const t0 = Date.now();
    await staggered(t, rl, async (ms) => {
      const wait = t0 + ms - Date.now();
      if (wait > 0) await sleep(wait);
      if (Date.now() - (t0 + ms) > 250) throw new Error(`the machine stalled: +${ms} ms was reached ${Date.now() - t0 - ms} ms late`);
    });
  });
});

test("redis: a refused request reports the window's state; Reset is a Unix time", async (t) => {
  await redisCase(t, async (rl) => {
    const spec = { requests: 3, windowMs: 30_000 };
    const first = await rl.hit("a", spec);
    t.deepEqual([first.allowed, first.remaining, first.limit], [true, 2, 3], "first admission");
    await rl.hit("a", spec);
    await rl.hit("a", spec);
    const no = await rl.hit("a", spec);
    t.equal(no.allowed, false, "fourth within the window refused");
    t.equal(no.remaining, 0);
    t.ok(no.retryAfterS >= 29 && no.retryAfterS <= 30, `Retry-After until the first leaves (${no.retryAfterS} s)`);
    const nowS = Date.now() / 1000;
    t.ok(no.resetS >= Math.floor(nowS) + 29 && no.resetS <= Math.ceil(nowS) + 31, "Reset is the Unix time when the first admission leaves");
    t.equal((await rl.peek("a", spec)).remaining, 0, "peek sees the full window");
  });
});

test("redis: concurrent hits never admit more than the limit", async (t) => {
  await redisCase(t, async (rl) => {
    const spec = { requests: 25, windowMs: 30_000 };
    const results = await Promise.all(Array.from({ length: 100 }, () => rl.hit("c", spec)));
    t.equal(results.filter((r) => r.allowed).length, 25, "exactly 25 of 100 concurrent requests admitted");
  });
});

test("redis: two limiters on two connections share one window (several gateways)", async (t) => {
  const prefix = uniquePrefix();
  const a = await redisFor(prefix);
  const b = await redisFor(prefix);
  const la = new RedisRateLimiter(a.redis, prefix);
  const lb = new RedisRateLimiter(b.redis, prefix);
  const spec = { requests: 4, windowMs: 30_000 };
  await la.hit("s", spec);
  await lb.hit("s", spec);
  await la.hit("s", spec);
  t.equal((await lb.hit("s", spec)).remaining, 0, "the fourth admission on the other connection leaves 0");
  t.equal((await la.hit("s", spec)).allowed, false, "the fifth is refused wherever it arrives");
  await b.redis.quit();
  await a.cleanup();
});

test("memory: large windows stay exact across queue compaction", async (t) => {
  const clock = new FakeClock(0);
  const rl = new MemoryRateLimiter(clock);
  const spec = { requests: 5000, windowMs: 1000 };
  for (let i = 0; i < 4000; i++) {
    clock.set(i / 8); // 4000 admissions over 500 ms
    await rl.hit("big", spec);
  }
  clock.set(1100); // the first 800 (t < 100 ms) have left
  const s = await rl.hit("big", spec);
  t.equal(s.remaining, 5000 - (4000 - 801) - 1, "count after expiry is exact");
  clock.set(2099); // every original admission has left; the one at 1100 ms has not
  const p = await rl.peek("big", spec);
  t.equal(p.remaining, 5000 - 1, "only the admission at 1100 ms remains");
});

test("memory: a clock stepped back an hour holds a full window for one window, not for the hour", async (t) => {
  const clock = new FakeClock(5_000_000_000);
  const rl = new MemoryRateLimiter(clock);
  const spec = { requests: 3, windowMs: 60_000 };
  for (let i = 0; i < 3; i++) await rl.hit("s", spec);
  clock.advance(-3_600_000);
  const no = await rl.hit("s", spec);
  t.deepEqual([no.allowed, no.retryAfterS], [false, 60], "full: refused, retry after one window (not an hour)");
  clock.advance(59_999);
  t.equal((await rl.hit("s", spec)).allowed, false, "1 ms before the window ends: refused");
  clock.advance(1);
  t.equal((await rl.hit("s", spec)).allowed, true, "one window after the step: admitted");
});

test("redis: admissions dated after the server's clock (a clock stepped back) leave one window from now", async (t) => {
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  const rl = new RedisRateLimiter(redis, prefix);
  const spec = { requests: 3, windowMs: 30_000 };
  // three admissions dated an hour ahead, as a server whose clock then stepped back an hour holds them
  const ahead = (Date.now() + 3_600_000) * 1000;
  for (let i = 0; i < 3; i++) await redis.sendCommand(["ZADD", rateKey(prefix, "s"), String(ahead + i), `future-${i}`]);
  const no = await rl.hit("s", spec);
  t.equal(no.allowed, false, "the window is full");
  t.ok(no.retryAfterS >= 29 && no.retryAfterS <= 31, `retry after one window (${no.retryAfterS} s), not an hour`);
  t.ok((await rl.peek("s", spec)).remaining === 0, "peek agrees");
  await cleanup();
});
