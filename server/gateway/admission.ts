// Steps 2, 5 and step 6's read (docs/api.md (order of checks)) behind one seam, so that a Redis-backed
// gateway needs one round trip per request before forwarding instead of three.
//
// - lookup: the tenant record of a key hash. Redis: from a process-local cache when present
//   (zero round trips), else one script (key index -> record).
// - admit: the sliding-window hit and the month's usage total, and, for a record that came from
//   the cache, the confirmation that it is still the stored one: one Lua script checks the
//   SHA-1 of the stored record's JSON against the cached one's before it touches the window.
//   A changed record (rotated key, deactivation, new namespace, new plan) answers "stale",
//   nothing is recorded, and the caller decides steps 2 and 4 again on the current record.
//   So a key rotated or deactivated through one gateway fails on every other at the next
//   request, exactly as without the cache, and no answer is ever decided on a stale record.
//
// Without Redis (and in the tests' in-memory set-ups) the direct admission below composes the
// registry, limiter and usage store as before; its records are never stale.
//
// Quota (billing enabled): admission reserves the request's CUs in the same atomic step that
// reads the month's total, and the request is admitted only while used + reserved is below the
// quota; settle() turns the reservation into usage (engine 2xx) or drops it. So concurrent
// requests see each other's reservations and the month's total passes the quota by at most one
// request's CUs, however many arrive at once. A reservation whose gateway died expires after
// RESERVATION_TTL_MS.
import { createHash, randomUUID } from "node:crypto";
import { ChargeDeadlines, LateChargeError, type Operation, PAST_DEADLINE_LUA, type UsageStore, usageKey, USAGE_TOTAL_FIELD } from "./meter.js";
import { type RateLimiter, type RateLimitState, rateKey, SLIDE_LUA, stateOfSlide, type WindowSpec } from "./ratelimit.js";
import { LuaScript, tenantTag } from "./redis.js";
import type { RedisLink } from "./resp.js";
import { frozen, holdsKeyHash, type RedisTenantRegistry, tenantKey, type TenantRecord, type TenantRegistry } from "./tenants.js";

export interface Lookup {
  readonly tenant: TenantRecord;
  /** True when the record came from a process-local cache and has not been confirmed since. */
  readonly cached: boolean;
  /** What admit() compares with the stored record (the SHA-1 of its JSON); "" when never stale. */
  readonly version: string;
  /** The key hash it was looked up by (the tenant's own key or one of its scoped keys). */
  readonly keyHash: string;
}

/** The quota side of an admission: the period, the quota and what this request may cost (milli-CUs). */
export interface QuotaAsk {
  readonly period: string;
  readonly quotaMilli: number;
  readonly costMilli: number;
}

/** CUs held for one admitted request until it is settled. */
export interface Reservation {
  readonly tenant: string;
  readonly period: string;
  readonly id: string;
  readonly milli: number;
}

/** How long a reservation holds when its request is never settled (its gateway died). */
export const RESERVATION_TTL_MS = 15 * 60_000;

export interface Admitted {
  readonly rate: RateLimitState;
  /** The tenant's usage in the period asked for plus what is reserved, in milli-CUs (0 when none was asked for). */
  readonly usedMilli: number;
  /** The reservation made (quota asked, rate allowed, below the quota); null otherwise. */
  readonly reservation: Reservation | null;
}

export interface Admission {
  readonly kind: "direct" | "redis";
  /** The active record of key hash `h`, possibly from a cache (then `cached` is true); null when none. */
  lookup(h: string): Promise<Lookup | null>;
  /** As lookup, always from the store (and refreshing the cache). */
  refresh(h: string): Promise<Lookup | null>;
  /**
   * Hits the tenant's window and, with `quota`, reads the month's total and reserves the
   * request's CUs when used + reserved is below the quota, in one atomic step. null ("stale")
   * when `l` is no longer the stored record: then nothing was recorded.
   */
  admit(l: Lookup, spec: WindowSpec, quota: QuotaAsk | null): Promise<Admitted | null>;
  /**
   * Charges `milli` milli-CUs of `op` (0: nothing) and drops the reservation, in one step.
   * Redis: past `deadlineMs` (ms of Redis's clock; default: ChargeDeadlines) the reservation
   * is dropped, nothing is charged, and it rejects with LateChargeError.
   */
  settle(r: Reservation, op: Operation, milli: number, deadlineMs?: number): Promise<void>;
}

/**
 * Registry, limiter and usage store called one by one (memory, local file, or any mix), with
 * reservations in this process's memory: the check and the reservation run in one turn of the
 * event loop, so they are atomic for every request this process admits.
 */
export function directAdmission(registry: TenantRegistry, limiter: RateLimiter, usage: UsageStore, now: () => number = Date.now): Admission {
  const find = async (h: string): Promise<Lookup | null> => {
    const tenant = await registry.findByKeyHash(h);
    return tenant ? { tenant, cached: false, version: "", keyHash: h } : null;
  };
  const held = new Map<string, Map<string, { milli: number; expires: number }>>();
  const heldKey = (tenant: string, period: string) => `${period}\0${tenant}`;
  const reserved = (tenant: string, period: string): number => {
    const m = held.get(heldKey(tenant, period));
    if (!m) return 0;
    let sum = 0;
    const t = now();
    for (const [id, r] of m) {
      if (r.expires <= t) m.delete(id);
      else sum += r.milli;
    }
    if (m.size === 0) held.delete(heldKey(tenant, period));
    return sum;
  };
  return {
    kind: "direct",
    lookup: find,
    refresh: find,
    async admit(l, spec, quota) {
      const id = l.tenant.tenant_id;
      const [rate, total] = await Promise.all([limiter.hit(id, spec), quota === null ? 0 : usage.total(id, quota.period)]);
      if (quota === null) return { rate, usedMilli: 0, reservation: null };
      // From here to the return nothing awaits: the check and the reservation are one step.
      const usedMilli = total + reserved(id, quota.period);
      if (!rate.allowed || usedMilli >= quota.quotaMilli) return { rate, usedMilli, reservation: null };
      const r: Reservation = { tenant: id, period: quota.period, id: randomUUID(), milli: quota.costMilli };
      const k = heldKey(id, quota.period);
      if (!held.has(k)) held.set(k, new Map());
      held.get(k)!.set(r.id, { milli: r.milli, expires: now() + RESERVATION_TTL_MS });
      return { rate, usedMilli, reservation: r };
    },
    async settle(r, op, milli, deadlineMs) {
      try {
        if (milli > 0) await usage.add(r.tenant, r.period, op, milli, deadlineMs);
      } finally {
        // Dropped only once the charge is counted: in between it is counted twice, never zero times.
        const k = heldKey(r.tenant, r.period);
        held.get(k)?.delete(r.id);
        if (held.get(k)?.size === 0) held.delete(k);
      }
    },
  };
}

// KEYS: the tenant's record, its window, and (quota) its usage hash and its reservations (a
// sorted set of "<id>:<milli>" members scored by their expiry, ms of the server's clock).
// ARGV: the SHA-1 of the record as the gateway knows it, the limit, the window (ms), a unique
// member (also the reservation's id), and (quota) the quota, the cost (milli-CUs), the TTL (ms).
// Returns {-1} when the stored record differs, else slide()'s reply plus used + reserved and
// 1 when the reservation was made.
const ADMIT = new LuaScript(`${SLIDE_LUA}
local rec = redis.call('GET', KEYS[1])
if not rec or redis.sha1hex(rec) ~= ARGV[1] then return {-1} end
local r = slide(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], false)
if KEYS[3] then
  local used = tonumber(redis.call('HGET', KEYS[3], '${USAGE_TOTAL_FIELD}') or '0')
  local nowMs = math.floor(tonumber(r[4]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', nowMs)
  for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    used = used + tonumber(string.match(m, ':(%d+)$'))
  end
  r[5] = tostring(used)
  r[6] = 0
  if r[1] == 1 and used < tonumber(ARGV[5]) then
    redis.call('ZADD', KEYS[4], nowMs + tonumber(ARGV[7]), ARGV[4] .. ':' .. ARGV[6])
    redis.call('PEXPIRE', KEYS[4], ARGV[7])
    r[6] = 1
  end
end
return r`);

// KEYS: the usage hash, the reservations. ARGV: the member, the operation, the milli-CUs
// charged, the deadline ("" for none). Returns -1 when a charge came past its deadline: the
// reservation is dropped all the same, nothing is charged.
const SETTLE = new LuaScript(`${PAST_DEADLINE_LUA}
redis.call('ZREM', KEYS[2], ARGV[1])
if tonumber(ARGV[3]) > 0 and past(ARGV[4]) then return -1 end
if tonumber(ARGV[3]) > 0 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], ARGV[3])
  redis.call('HINCRBY', KEYS[1], '${USAGE_TOTAL_FIELD}', ARGV[3])
end
return 1`);

/** The Redis key of a tenant's reservations for `period`. */
export const reservationKey = (prefix: string, period: string, tenant: string, hashTags = false): string =>
  `${prefix}resv:${period}:${tenantTag(tenant, hashTags)}`;

const sha1Hex = (s: string): string => createHash("sha1").update(s, "utf8").digest("hex");

/**
 * Redis: tenant records cached per key hash (at most `maxEntries`, oldest dropped first), every
 * use confirmed by the admission script. Keys: those of RedisTenantRegistry, RedisRateLimiter
 * and RedisUsageStore under the same prefix.
 */
export class RedisAdmission implements Admission {
  readonly kind = "redis" as const;
  private readonly cache = new Map<string, Lookup>();
  private readonly deadlines: ChargeDeadlines;
  constructor(
    private readonly redis: RedisLink,
    private readonly registry: RedisTenantRegistry,
    private readonly prefix: string,
    private readonly maxEntries = 10_000,
    private readonly hashTags = false,
    deadlines?: ChargeDeadlines,
  ) {
    this.deadlines = deadlines ?? new ChargeDeadlines(redis);
  }

  /** How many key hashes are cached (tests). */
  get cachedEntries(): number {
    return this.cache.size;
  }

  async lookup(h: string): Promise<Lookup | null> {
    return this.cache.get(h) ?? (await this.refresh(h));
  }

  async refresh(h: string): Promise<Lookup | null> {
    const text = await this.registry.recordTextByKeyHash(h);
    const t = text ? (JSON.parse(text) as TenantRecord) : null;
    if (!text || !t || !t.active || !holdsKeyHash(t, h)) {
      this.cache.delete(h);
      return null;
    }
    const fresh: Lookup = { tenant: frozen(t), cached: false, version: sha1Hex(text), keyHash: h };
    this.cache.delete(h); // re-inserted last: the newest entry
    if (this.cache.size >= this.maxEntries) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(h, { ...fresh, cached: true });
    return fresh;
  }

  async admit(l: Lookup, spec: WindowSpec, quota: QuotaAsk | null): Promise<Admitted | null> {
    const id = l.tenant.tenant_id;
    const member = randomUUID();
    // One tenant's keys: one slot under a Redis Cluster (hash tags), as the script needs.
    const keys = [tenantKey(this.prefix, id, this.hashTags), rateKey(this.prefix, id, this.hashTags)];
    const args = [l.version, String(spec.requests), String(spec.windowMs), member];
    if (quota !== null) {
      keys.push(usageKey(this.prefix, quota.period, id, this.hashTags), reservationKey(this.prefix, quota.period, id, this.hashTags));
      args.push(String(quota.quotaMilli), String(quota.costMilli), String(RESERVATION_TTL_MS));
    }
    const r = (await ADMIT.run(this.redis, keys, args)) as unknown[];
    if (Number(r[0]) === -1) {
      if (this.cache.get(l.keyHash)?.version === l.version) this.cache.delete(l.keyHash);
      return null;
    }
    this.deadlines.observe(Number(r[3]) / 1000); // Redis's TIME (us) when it ran the script
    const reservation = quota !== null && Number(r[5]) === 1 ? { tenant: id, period: quota.period, id: member, milli: quota.costMilli } : null;
    return { rate: stateOfSlide(spec, r), usedMilli: quota === null ? 0 : Number(r[4]), reservation };
  }

  async settle(r: Reservation, op: Operation, milli: number, deadlineMs?: number): Promise<void> {
    const deadline = deadlineMs === undefined ? this.deadlines.next() : String(Math.floor(deadlineMs));
    const keys = [usageKey(this.prefix, r.period, r.tenant, this.hashTags), reservationKey(this.prefix, r.period, r.tenant, this.hashTags)];
    if (Number(await SETTLE.run(this.redis, keys, [`${r.id}:${r.milli}`, op, String(milli), deadline])) === -1) throw new LateChargeError();
  }
}
