// Per-tenant sliding-window rate limiting (step 5 of the order of checks, docs/api.md). A true sliding log: the limiter
// remembers the instant of every admitted request inside the window, so "at most N requests
// in any window of W seconds" holds exactly, with no two-bucket approximation error. Memory
// cost is O(N) per tenant, which is bounded by the plan's limit (at most a few thousand).
// Rejected requests are not recorded, so a client that keeps retrying is not locked out
// beyond the moment its oldest admitted request leaves the window.
import { randomUUID } from "node:crypto";
import type { Clock } from "./clock.js";
import { LuaScript, tenantTag } from "./redis.js";
import type { RedisLink } from "./resp.js";

export interface WindowSpec {
  readonly requests: number;
  /** Window length in milliseconds (the tenant's window_s × 1000). */
  readonly windowMs: number;
}

export interface RateLimitState {
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  /** Unix seconds (rounded up) at which the oldest request in the window leaves it. */
  readonly resetS: number;
  /** Whole seconds until a request would be admitted (0 when allowed). */
  readonly retryAfterS: number;
}

export interface RateLimiter {
  readonly kind: "memory" | "redis";
  /** Admits and records one request for `tenant`, or refuses it without recording it. */
  hit(tenant: string, spec: WindowSpec): Promise<RateLimitState>;
  /** The current state without recording anything (for the headers of 400/403 answers). */
  peek(tenant: string, spec: WindowSpec): Promise<RateLimitState>;
  close(): Promise<void>;
}

function stateOf(allowed: boolean, spec: WindowSpec, count: number, oldestMs: number | null, nowMs: number): RateLimitState {
  const resetMs = (oldestMs ?? nowMs) + spec.windowMs;
  return {
    allowed,
    limit: spec.requests,
    remaining: Math.max(0, spec.requests - count),
    resetS: Math.ceil(resetMs / 1000),
    retryAfterS: allowed ? 0 : Math.max(1, Math.ceil((resetMs - nowMs) / 1000)),
  };
}

/** Admission instants of one tenant, oldest first; `head` skips entries already expired. */
interface Log {
  ts: number[];
  head: number;
}

/** One instance: a queue of admission instants per tenant (amortised O(1) per request). */
export class MemoryRateLimiter implements RateLimiter {
  readonly kind = "memory" as const;
  private logs = new Map<string, Log>();
  private sweepAt = 0;
  constructor(private readonly clock: Clock) {}

  private prune(tenant: string, now: number, windowMs: number): Log {
    let log = this.logs.get(tenant);
    if (!log) {
      log = { ts: [], head: 0 };
      this.logs.set(tenant, log);
    }
    // The clock stepped back (NTP, a resumed VM): admissions dated after now count as made
    // now, so that they leave one window from now rather than when the clock catches up.
    const last = log.ts.length - 1;
    if (last >= log.head && log.ts[last]! > now) for (let i = log.head; i <= last; i++) log.ts[i] = Math.min(log.ts[i]!, now);
    // Entries are in time order; drop those at or before now - window.
    while (log.head < log.ts.length && log.ts[log.head]! <= now - windowMs) log.head++;
    if (log.head > 1024 && log.head * 2 > log.ts.length) {
      log.ts = log.ts.slice(log.head);
      log.head = 0;
    }
    return log;
  }

  private sweep(now: number): void {
    // Tenants idle for a long time would otherwise keep their (empty) queues forever.
    if (now < this.sweepAt) return;
    this.sweepAt = now + 60_000;
    for (const [t, log] of this.logs) if (log.head >= log.ts.length) this.logs.delete(t);
  }

  async hit(tenant: string, spec: WindowSpec): Promise<RateLimitState> {
    const now = this.clock.now();
    this.sweep(now);
    const log = this.prune(tenant, now, spec.windowMs);
    const count = log.ts.length - log.head;
    if (count >= spec.requests) {
      // The admission that must leave before another fits (the limit may have been lowered).
      return stateOf(false, spec, count, log.ts[log.ts.length - spec.requests]!, now);
    }
    log.ts.push(now);
    return stateOf(true, spec, count + 1, log.ts[log.head]!, now);
  }

  async peek(tenant: string, spec: WindowSpec): Promise<RateLimitState> {
    const now = this.clock.now();
    const log = this.prune(tenant, now, spec.windowMs);
    const count = log.ts.length - log.head;
    return stateOf(count < spec.requests, spec, count, count > 0 ? log.ts[log.head]! : null, now);
  }

  async close(): Promise<void> {
    this.logs.clear();
  }
}

// Sorted set of admission instants (microseconds, from the Redis server's own clock so that
// gateways with skewed clocks agree). `slide` prunes, counts, admits and expires in one atomic
// step and returns {allowed, count, oldest_us (of the entry that must leave before the next
// admission), now_us}. Shared by HIT below and by the one-script admission (admission.ts).
// The request's entry is added first and taken out again when the window was full: Redis out
// of memory (maxmemory with noeviction) refuses a script's ZADD only while the script has
// written nothing yet, so this order makes such a Redis refuse the admission (OOM, answered
// 503 state_unavailable) rather than admit requests whose charges it then refuses. Entries
// dated after the server's now (its clock stepped back) are first moved to now.
export const SLIDE_LUA = `
local function slide(key, limit, winMs, member, peek)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local win = winMs * 1000
  -- the server's clock stepped back: admissions dated after now count as made now
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > now then
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf')) do redis.call('ZADD', key, now, m) end
  end
  if peek then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - win)
    local count = redis.call('ZCARD', key)
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return {count < limit and 1 or 0, count, first[2] or '', tostring(now)}
  end
  redis.call('ZADD', key, now, member)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - win)
  local count = redis.call('ZCARD', key) - 1
  if count >= limit then
    redis.call('ZREM', key, member)
    local e = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
    return {0, count, e[2], tostring(now)}
  end
  redis.call('PEXPIRE', key, winMs + 1000)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {1, count + 1, first[2], tostring(now)}
end
`;

const HIT = new LuaScript(`${SLIDE_LUA}
return slide(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1')`);

/** The Redis key of a tenant's window. */
export const rateKey = (prefix: string, tenant: string, hashTags = false): string => `${prefix}rl:${tenantTag(tenant, hashTags)}`;

/** The state of a `slide` reply: [allowed, count, oldest_us | "", now_us]. */
export function stateOfSlide(spec: WindowSpec, r: readonly unknown[]): RateLimitState {
  const oldest = r[2];
  return stateOf(
    Number(r[0]) === 1,
    spec,
    Number(r[1]),
    oldest === "" || oldest === undefined || oldest === null ? null : Number(oldest) / 1000,
    Number(r[3]) / 1000,
  );
}

/** Several instances: one sorted set per tenant under `<prefix>rl:<tenant>` (`rl:{tenant}` with hash tags). */
export class RedisRateLimiter implements RateLimiter {
  readonly kind = "redis" as const;
  constructor(
    private readonly redis: RedisLink,
    private readonly prefix: string,
    private readonly hashTags = false,
  ) {}

  private async run(tenant: string, spec: WindowSpec, peek: boolean): Promise<RateLimitState> {
    const r = (await HIT.run(
      this.redis,
      [rateKey(this.prefix, tenant, this.hashTags)],
      [String(spec.requests), String(spec.windowMs), peek ? "" : randomUUID(), peek ? "1" : "0"],
    )) as unknown[];
    return stateOfSlide(spec, r);
  }

  hit(tenant: string, spec: WindowSpec): Promise<RateLimitState> {
    return this.run(tenant, spec, false);
  }

  peek(tenant: string, spec: WindowSpec): Promise<RateLimitState> {
    return this.run(tenant, spec, true);
  }

  async close(): Promise<void> {}
}
