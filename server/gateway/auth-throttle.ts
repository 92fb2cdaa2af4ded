// Failed authentication, throttled per client address (the socket's peer address; forwarded
// headers are not trusted). After `limit` failures (401 answers: missing, unknown or wrong
// tenant or service keys) inside a window of `windowMs`, every request from that address is
// answered 429 with Retry-After until the window ends, without checking its credentials, so
// neither key guessing nor an unauthenticated flood gets further (nor into the audit log).
// The check before authentication is local (no I/O on the request path); with Redis the
// failures are counted in one shared counter per address, so a guesser spread over several
// gateways is stopped at each of them one failure after the shared count passes the limit.
import { LuaScript } from "./redis.js";
import type { RedisLink } from "./resp.js";
import type { Clock } from "./clock.js";

export interface AuthThrottleSpec {
  readonly limit: number;
  readonly windowMs: number;
}

export interface AuthThrottle {
  readonly kind: "memory" | "redis";
  /** Whole seconds until `addr` may try again; 0 when it may now. Local, never waits. */
  blockedFor(addr: string): number;
  /** Records one failed authentication from `addr`. */
  fail(addr: string): Promise<void>;
  close(): Promise<void>;
}

// Addresses remembered at most (each entry is a few dozen bytes); the oldest go first.
const MAX_ADDRESSES = 100_000;

/** Bounded map of address -> instant (ms) until which it is blocked. */
class Blocks {
  private readonly until = new Map<string, number>();
  constructor(private readonly clock: Clock) {}
  set(addr: string, untilMs: number): void {
    this.until.delete(addr);
    if (this.until.size >= MAX_ADDRESSES) this.until.delete(this.until.keys().next().value!);
    this.until.set(addr, untilMs);
  }
  secondsLeft(addr: string): number {
    const u = this.until.get(addr);
    if (u === undefined) return 0;
    const left = u - this.clock.now();
    if (left <= 0) {
      this.until.delete(addr);
      return 0;
    }
    return Math.ceil(left / 1000);
  }
}

/** One process: a fixed window per address. */
export class MemoryAuthThrottle implements AuthThrottle {
  readonly kind = "memory" as const;
  private readonly counts = new Map<string, { n: number; resetAt: number }>();
  private readonly blocks: Blocks;
  constructor(
    private readonly spec: AuthThrottleSpec,
    private readonly clock: Clock,
  ) {
    this.blocks = new Blocks(clock);
  }
  blockedFor(addr: string): number {
    return this.blocks.secondsLeft(addr);
  }
  async fail(addr: string): Promise<void> {
    const now = this.clock.now();
    let c = this.counts.get(addr);
    if (!c || c.resetAt <= now) {
      this.counts.delete(addr);
      if (this.counts.size >= MAX_ADDRESSES) this.counts.delete(this.counts.keys().next().value!);
      c = { n: 0, resetAt: now + this.spec.windowMs };
      this.counts.set(addr, c);
    }
    c.n++;
    if (c.n >= this.spec.limit) this.blocks.set(addr, c.resetAt);
  }
  async close(): Promise<void> {
    this.counts.clear();
  }
}

// KEYS[1]: the address's counter. ARGV: window (ms). Returns {count, ms left in the window}.
const FAIL = new LuaScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); left = tonumber(ARGV[1]) end
return {n, left}`);

/** The Redis key of an address's failure counter. */
export const authFailKey = (prefix: string, addr: string): string => `${prefix}authfail:${addr}`;

/** Several gateways: one counter per address in Redis, blocks remembered locally. */
export class RedisAuthThrottle implements AuthThrottle {
  readonly kind = "redis" as const;
  private readonly blocks: Blocks;
  constructor(
    private readonly redis: RedisLink,
    private readonly prefix: string,
    private readonly spec: AuthThrottleSpec,
    private readonly clock: Clock,
  ) {
    this.blocks = new Blocks(clock);
  }
  blockedFor(addr: string): number {
    return this.blocks.secondsLeft(addr);
  }
  async fail(addr: string): Promise<void> {
    const r = (await FAIL.run(this.redis, [authFailKey(this.prefix, addr)], [String(this.spec.windowMs)])) as unknown[];
    const n = Number(r[0]);
    const left = Number(r[1]);
    if (n >= this.spec.limit) this.blocks.set(addr, this.clock.now() + left);
  }
  async close(): Promise<void> {}
}
