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
import { createHash, randomUUID } from "node:crypto";
import { type UsageStore, usageKey, USAGE_TOTAL_FIELD } from "./meter.js";
import { type RateLimiter, type RateLimitState, rateKey, SLIDE_LUA, stateOfSlide, type WindowSpec } from "./ratelimit.js";
import { LuaScript } from "./redis.js";
import type { RedisLink } from "./resp.js";
import { frozen, type RedisTenantRegistry, tenantKey, type TenantRecord, type TenantRegistry } from "./tenants.js";

export interface Lookup {
  readonly tenant: TenantRecord;
  /** True when the record came from a process-local cache and has not been confirmed since. */
  readonly cached: boolean;
  /** What admit() compares with the stored record (the SHA-1 of its JSON); "" when never stale. */
  readonly version: string;
}

export interface Admitted {
  readonly rate: RateLimitState;
  /** The tenant's usage in the period asked for, in milli-CUs (0 when none was asked for). */
  readonly usedMilli: number;
}

export interface Admission {
  readonly kind: "direct" | "redis";
  /** The active record of key hash `h`, possibly from a cache (then `cached` is true); null when none. */
  lookup(h: string): Promise<Lookup | null>;
  /** As lookup, always from the store (and refreshing the cache). */
  refresh(h: string): Promise<Lookup | null>;
  /**
   * Hits the tenant's window and reads its usage total of `quotaPeriod` (null: no read), in one
   * step. null ("stale") when `l` is no longer the stored record: then nothing was recorded.
   */
  admit(l: Lookup, spec: WindowSpec, quotaPeriod: string | null): Promise<Admitted | null>;
}

/** Registry, limiter and usage store called one by one (memory, local file, or any mix). */
export function directAdmission(registry: TenantRegistry, limiter: RateLimiter, usage: UsageStore): Admission {
  const find = async (h: string): Promise<Lookup | null> => {
    const tenant = await registry.findByKeyHash(h);
    return tenant ? { tenant, cached: false, version: "" } : null;
  };
  return {
    kind: "direct",
    lookup: find,
    refresh: find,
    async admit(l, spec, quotaPeriod) {
      const [rate, usedMilli] = await Promise.all([
        limiter.hit(l.tenant.tenant_id, spec),
        quotaPeriod === null ? 0 : usage.total(l.tenant.tenant_id, quotaPeriod),
      ]);
      return { rate, usedMilli };
    },
  };
}

// KEYS: the tenant's record, its window, and (when the quota is read) its usage hash.
// ARGV: the SHA-1 of the record as the gateway knows it, the limit, the window (ms), a unique member.
// Returns {-1} when the stored record differs, else slide()'s reply plus the usage total.
const ADMIT = new LuaScript(`${SLIDE_LUA}
local rec = redis.call('GET', KEYS[1])
if not rec or redis.sha1hex(rec) ~= ARGV[1] then return {-1} end
local r = slide(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], false)
if KEYS[3] then r[5] = redis.call('HGET', KEYS[3], '${USAGE_TOTAL_FIELD}') or '0' end
return r`);

const sha1Hex = (s: string): string => createHash("sha1").update(s, "utf8").digest("hex");

/**
 * Redis: tenant records cached per key hash (at most `maxEntries`, oldest dropped first), every
 * use confirmed by the admission script. Keys: those of RedisTenantRegistry, RedisRateLimiter
 * and RedisUsageStore under the same prefix.
 */
export class RedisAdmission implements Admission {
  readonly kind = "redis" as const;
  private readonly cache = new Map<string, Lookup>();
  constructor(
    private readonly redis: RedisLink,
    private readonly registry: RedisTenantRegistry,
    private readonly prefix: string,
    private readonly maxEntries = 10_000,
    private readonly hashTags = false,
  ) {}

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
    if (!text || !t || !t.active || t.key_hash !== h) {
      this.cache.delete(h);
      return null;
    }
    const fresh: Lookup = { tenant: frozen(t), cached: false, version: sha1Hex(text) };
    this.cache.delete(h); // re-inserted last: the newest entry
    if (this.cache.size >= this.maxEntries) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(h, { ...fresh, cached: true });
    return fresh;
  }

  async admit(l: Lookup, spec: WindowSpec, quotaPeriod: string | null): Promise<Admitted | null> {
    const id = l.tenant.tenant_id;
    // One tenant's keys: one slot under a Redis Cluster (hash tags), as the script needs.
    const keys = [tenantKey(this.prefix, id, this.hashTags), rateKey(this.prefix, id, this.hashTags)];
    if (quotaPeriod !== null) keys.push(usageKey(this.prefix, quotaPeriod, id, this.hashTags));
    const r = (await ADMIT.run(this.redis, keys, [l.version, String(spec.requests), String(spec.windowMs), randomUUID()])) as unknown[];
    if (Number(r[0]) === -1) {
      if (this.cache.get(l.tenant.key_hash)?.version === l.version) this.cache.delete(l.tenant.key_hash);
      return null;
    }
    return { rate: stateOfSlide(spec, r), usedMilli: quotaPeriod === null ? 0 : Number(r[4]) };
  }
}
