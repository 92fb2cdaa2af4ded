// Metering (step 8 of the order of checks, docs/api.md) and quota (step 6). CUs are counted in integer milli-CUs so that
// sums are exact (ten gets are exactly 1 CU, never 0.9999999). Usage is kept per tenant per
// UTC month with a per-operation breakdown, behind one interface: Redis (HINCRBY, shared by
// several gateways), a local JSON file under the data directory, or memory.
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "./tenants.js";
import { LuaScript, tenantTag } from "./redis.js";
import type { RedisLink } from "./resp.js";

export const OPERATIONS = [
  "put", "put_cores", "put_cores_batch", "get", "serve", "search", "delete", "list",
  "query_similarity", "query_topk", "query_vector",
] as const;
export type Operation = (typeof OPERATIONS)[number];

/** The CU table of docs/api.md (data plane), in milli-CUs. serve depends on the body's `device`. */
export const MILLI_CUS: Readonly<Record<Exclude<Operation, "serve">, number> & { serve_dense: number; serve_gpu: number }> = Object.freeze({
  put: 1000,
  put_cores: 1000,
  put_cores_batch: 2000,
  get: 100,
  serve_dense: 500,
  serve_gpu: 2000,
  search: 500,
  delete: 100,
  list: 100,
  query_similarity: 1000,
  query_topk: 1000,
  query_vector: 1000,
});

/** Milli-CUs an operation costs; `device` matters for serve only. */
export function milliCusOf(op: Operation, device?: string): number {
  if (op === "serve") return device === "gpu" ? MILLI_CUS.serve_gpu : MILLI_CUS.serve_dense;
  return MILLI_CUS[op];
}

/** milli-CUs → CUs as a JSON number (exact for the values we produce: n/1000). */
export const toCus = (milli: number): number => milli / 1000;

/** "YYYY-MM" of the UTC month containing `ms`. */
export function periodOf(ms: number): string {
  const d = new Date(ms);
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, "0")}`;
}

/** The instant (ms) at which the UTC month containing `ms` ends: the 1st of the next month, 00:00 UTC. */
export function periodEndMs(ms: number): number {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}

export const PERIOD_RE = /^(\d{4})-(0[1-9]|1[0-2])$/;

export interface UsageRecord {
  total_milli: number;
  breakdown_milli: Partial<Record<Operation, number>>;
}

export interface UsageStore {
  readonly kind: "redis" | "local" | "memory";
  /** Adds `milli` milli-CUs of `op` to the tenant's usage in `period`. */
  add(tenant: string, period: string, op: Operation, milli: number): Promise<void>;
  /** Total milli-CUs of the tenant in `period` (0 when none). */
  total(tenant: string, period: string): Promise<number>;
  get(tenant: string, period: string): Promise<UsageRecord>;
  close(): Promise<void>;
}

type Table = Record<string, Record<string, Record<string, number>>>; // period -> tenant -> field -> milli
const TOTAL = "_total";
/** The field of a Redis usage hash that holds the month's total (milli-CUs). */
export const USAGE_TOTAL_FIELD = TOTAL;

/** The Redis key of a tenant's usage hash for `period` (`usage:<period>:{tenant}` with hash tags). */
export const usageKey = (prefix: string, period: string, tenant: string, hashTags = false): string => `${prefix}usage:${period}:${tenantTag(tenant, hashTags)}`;

function recordOf(fields: Record<string, number> | undefined): UsageRecord {
  const breakdown_milli: Partial<Record<Operation, number>> = {};
  let total = 0;
  for (const [k, v] of Object.entries(fields ?? {})) {
    if (k === TOTAL) total = v;
    else if ((OPERATIONS as readonly string[]).includes(k)) breakdown_milli[k as Operation] = v;
  }
  return { total_milli: total, breakdown_milli };
}

/** Usage in memory (tests; base of the local-file store). */
export class MemoryUsageStore implements UsageStore {
  readonly kind: "memory" | "local" = "memory";
  protected table: Table = {};

  async add(tenant: string, period: string, op: Operation, milli: number): Promise<void> {
    const t = ((this.table[period] ??= {})[tenant] ??= {});
    t[op] = (t[op] ?? 0) + milli;
    t[TOTAL] = (t[TOTAL] ?? 0) + milli;
    this.changed();
  }

  protected changed(): void {}

  async total(tenant: string, period: string): Promise<number> {
    return this.table[period]?.[tenant]?.[TOTAL] ?? 0;
  }

  async get(tenant: string, period: string): Promise<UsageRecord> {
    return recordOf(this.table[period]?.[tenant]);
  }

  async close(): Promise<void> {}
}

/**
 * Usage persisted as DATA_DIR/usage.json. Counting happens in memory; a snapshot is written
 * atomically (temp + fsync + rename) at most `flushMs` after a change and on close, so a
 * crash loses at most that much metering and never corrupts the file.
 */
export class LocalFileUsageStore extends MemoryUsageStore {
  override readonly kind = "local" as const;
  private timer: NodeJS.Timeout | null = null;
  private writing: Promise<void> = Promise.resolve();
  private constructor(readonly path: string, private readonly flushMs: number) {
    super();
  }

  static async open(dir: string, flushMs = 1000): Promise<LocalFileUsageStore> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const s = new LocalFileUsageStore(join(dir, "usage.json"), flushMs);
    try {
      const parsed = JSON.parse(await readFile(s.path, "utf8")) as { version: number; usage: Table };
      if (parsed.version !== 1 || typeof parsed.usage !== "object" || parsed.usage === null) throw new Error();
      s.table = parsed.usage;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw new Error(`The usage file ${s.path} is not valid; it was left as it is.`);
    }
    return s;
  }

  protected override changed(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush().catch(() => {});
    }, this.flushMs);
    this.timer.unref();
  }

  /** Writes the current counters now. */
  flush(): Promise<void> {
    const snapshot = JSON.stringify({ version: 1, usage: this.table }) + "\n";
    this.writing = this.writing.then(() => writeFileAtomic(this.path, snapshot), () => writeFileAtomic(this.path, snapshot));
    return this.writing;
  }

  override async close(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.flush();
  }
}

const ADD = new LuaScript(`
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HINCRBY', KEYS[1], '${TOTAL}', ARGV[2])`);

/** Usage in Redis: hash `<prefix>usage:<period>:<tenant>`, fields per operation plus `_total`. */
export class RedisUsageStore implements UsageStore {
  readonly kind = "redis" as const;
  constructor(private readonly redis: RedisLink, private readonly prefix: string, private readonly hashTags = false) {}
  private key = (tenant: string, period: string) => usageKey(this.prefix, period, tenant, this.hashTags);

  async add(tenant: string, period: string, op: Operation, milli: number): Promise<void> {
    // One script: the operation's field and the total move together, in one command (a
    // MULTI/HINCRBY/HINCRBY/EXEC costs the client four).
    await ADD.run(this.redis, [this.key(tenant, period)], [op, String(milli)]);
  }

  async total(tenant: string, period: string): Promise<number> {
    return Number((await this.redis.sendCommand(["HGET", this.key(tenant, period), TOTAL])) ?? 0);
  }

  async get(tenant: string, period: string): Promise<UsageRecord> {
    // RESP2 answers a flat [field, value, ...] array (resp.ts); node-redis hands back an object.
    const h = await this.redis.sendCommand(["HGETALL", this.key(tenant, period)]);
    const fields: Record<string, number> = {};
    if (Array.isArray(h)) for (let i = 0; i + 1 < h.length; i += 2) fields[String(h[i])] = Number(h[i + 1]);
    else if (h instanceof Map) for (const [k, v] of h) fields[String(k)] = Number(v);
    else if (h && typeof h === "object") for (const [k, v] of Object.entries(h)) fields[k] = Number(v);
    return recordOf(fields);
  }

  async close(): Promise<void> {}
}
