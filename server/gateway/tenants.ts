// Tenant registry: the records behind the admin endpoints and authentication. One interface,
// three implementations: Redis (shared by several gateways), a local JSON file under the data
// directory (written atomically: temp file, fsync, rename) and plain memory for tests.
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { probeWritable, writeFileAtomic } from "../../lib/atomic-file.js";
import { ConflictError, isNoSpace, isReadOnlyFs, NotFoundError, StateUnavailableError, StorageFullError } from "../../lib/errors.js";
import { namespaceSchema, tenantIdSchema } from "../../lib/fields.js";
import { planSchema, type Plan } from "./plans.js";
import type { RateLimitSpec } from "./config.js";
import { LuaScript, tenantTag } from "./redis.js";
import type { RedisLink } from "./resp.js";

export interface TenantRecord {
  tenant_id: string;
  plan: Plan;
  namespaces: string[];
  email: string | null;
  /** SHA-256 (hex) of the current API key; "" once deactivated. The key itself is never stored. */
  key_hash: string;
  active: boolean;
  status: "active" | "deactivated";
  /** CUs per UTC month from the plan (or an enterprise override); null = no limit. */
  monthly_quota: number | null;
  rate_limit: RateLimitSpec;
  /** True when an enterprise tenant was given its own rate limit (it then applies even with billing off). */
  custom_rate_limit: boolean;
  created_at: string;
  updated_at: string;
  /** Payment-provider state (billing); absent until a payment event names the tenant. */
  billing?: TenantBilling;
  /** Plan terms in force from each instant on (oldest first), so a closed period's overage uses its own plan. */
  plan_history?: PlanChange[];
  /** Scoped keys (keys.ts), besides the key of creation and rotation; absent when none. */
  keys?: ScopedKey[];
}

export type Scope = "read" | "write";

/** A scoped API key of a tenant; like the tenant's own key, only its SHA-256 is stored. */
export interface ScopedKey {
  key_id: string;
  name: string;
  key_hash: string;
  scopes: Scope[];
  /** The namespaces it may name (a subset of the tenant's); null: every namespace of the tenant. */
  namespaces: string[] | null;
  /** ISO 8601 UTC instant from which the key is refused; null: never. */
  expires_at: string | null;
  created_at: string;
}

/** Every key hash that authenticates as `t` while it is active: its own key, then its scoped keys. */
export function keyHashesOf(t: TenantRecord): string[] {
  const out = t.key_hash ? [t.key_hash] : [];
  for (const k of t.keys ?? []) out.push(k.key_hash);
  return out;
}

/** Whether `h` is one of the key hashes of `t` (active or not). */
export const holdsKeyHash = (t: TenantRecord, h: string): boolean => h !== "" && (t.key_hash === h || (t.keys ?? []).some((k) => k.key_hash === h));

export interface TenantBilling {
  /** The provider subscription that set the current paid plan (null when none). */
  subscription_id: string | null;
  customer_id: string | null;
  /** Provider `created` (Unix s) of the last applied event; older events are not applied. */
  last_event_created: number;
  /** Subscriptions reported deleted before (or without) their checkout: never applied later. */
  ended_subscriptions: string[];
  /**
   * Subscriptions replaced by a later checkout that still have to be canceled at the provider;
   * written with the plan change, each removed once the provider confirmed its cancellation.
   */
  pending_cancellations?: string[];
}

/**
 * `t` with its recorded provider subscription moved to `billing.pending_cancellations`, for a
 * tenant that stops paying through the provider (deactivated, or moved to starter or to
 * enterprise, which is billed by contract); `t` itself when none is recorded. Written in the
 * same registry step as the change, so the cancellation cannot be lost; the billing module
 * cancels it at the provider afterwards.
 */
export function withSubscriptionToCancel(t: TenantRecord): TenantRecord {
  const b = t.billing;
  const sub = b?.subscription_id;
  if (!b || !sub) return t;
  const pending = b.pending_cancellations ?? [];
  return { ...t, billing: { ...b, subscription_id: null, pending_cancellations: pending.includes(sub) ? pending : [...pending, sub] } };
}

export interface PlanChange {
  from: string;
  plan: Plan;
  monthly_quota: number | null;
}

/** How many plan changes a record keeps (oldest dropped first). */
export const PLAN_HISTORY_MAX = 120;

/** `next` with a plan_history entry appended when its plan or quota differs from `cur`'s. */
export function withPlanHistory(cur: TenantRecord | null, next: TenantRecord): TenantRecord {
  if (cur && cur.plan === next.plan && cur.monthly_quota === next.monthly_quota && next.plan_history) return next;
  const base = next.plan_history ?? cur?.plan_history ?? [];
  const first = base.length === 0 && cur ? [{ from: cur.created_at, plan: cur.plan, monthly_quota: cur.monthly_quota }] : [];
  const changed = !cur || cur.plan !== next.plan || cur.monthly_quota !== next.monthly_quota;
  const entry = changed ? [{ from: cur ? next.updated_at : next.created_at, plan: next.plan, monthly_quota: next.monthly_quota }] : [];
  return { ...next, plan_history: [...base, ...first, ...entry].slice(-PLAN_HISTORY_MAX) };
}

/**
 * The plan and quota in force at the end of `period` (YYYY-MM): the last plan_history entry
 * from before the period's end (a closed period keeps the terms it closed with), else the
 * oldest known entry, else the record's current terms.
 */
export function termsForPeriod(t: TenantRecord, period: string): { plan: Plan; monthly_quota: number | null } {
  const [y, m] = period.split("-").map(Number) as [number, number];
  const end = Date.UTC(y, m, 1); // m is 1-based: this is the 1st of the next month
  const h = t.plan_history ?? [];
  let pick = h[0];
  for (const e of h) if (Date.parse(e.from) < end) pick = e;
  return pick ? { plan: pick.plan, monthly_quota: pick.monthly_quota } : { plan: t.plan, monthly_quota: t.monthly_quota };
}

/** A payment event recorded as processed (kept `retainMs` after it was processed). */
export interface ProcessedEvent {
  event_id: string;
  tenant_id: string;
  /** What the billing module decided (for example "applied" or "skipped:out_of_order"). */
  note: string;
  at_ms: number;
}

export interface EventOnce {
  eventId: string;
  /** "" when the event names no valid tenant. */
  tenantId: string;
  nowMs: number;
  retainMs: number;
}

/** What an event does to its tenant: `next` (null: no change) and the note recorded with the event id. */
export interface EventChange {
  next: TenantRecord | null;
  note: string;
}

export type EventResult = { duplicate: true; note: string } | { duplicate: false; note: string; before: TenantRecord | null; after: TenantRecord | null };

const eventSchema = z.object({ event_id: z.string(), tenant_id: z.string(), note: z.string(), at_ms: z.number() });

export const tenantRecordSchema = z.object({
  tenant_id: tenantIdSchema,
  plan: planSchema,
  namespaces: z.array(namespaceSchema),
  email: z.string().nullable(),
  key_hash: z.string().regex(/^([0-9a-f]{64})?$/),
  active: z.boolean(),
  status: z.enum(["active", "deactivated"]),
  monthly_quota: z.number().nonnegative().nullable(),
  rate_limit: z.object({ requests: z.number().int().positive(), window_s: z.number().int().positive() }),
  custom_rate_limit: z.boolean(),
  created_at: z.string(),
  updated_at: z.string(),
  billing: z
    .object({
      subscription_id: z.string().nullable(),
      customer_id: z.string().nullable(),
      last_event_created: z.number().int().nonnegative(),
      ended_subscriptions: z.array(z.string()),
      pending_cancellations: z.array(z.string()).optional(),
    })
    .optional(),
  plan_history: z.array(z.object({ from: z.string(), plan: planSchema, monthly_quota: z.number().nonnegative().nullable() })).optional(),
  keys: z
    .array(
      z.object({
        key_id: z.string(),
        name: z.string(),
        key_hash: z.string().regex(/^[0-9a-f]{64}$/),
        scopes: z.array(z.enum(["read", "write"])),
        namespaces: z.array(namespaceSchema).nullable(),
        expires_at: z.string().nullable(),
        created_at: z.string(),
      }),
    )
    .optional(),
});

export interface TenantRegistry {
  readonly kind: "redis" | "local" | "memory";
  /** Adds a tenant; ConflictError when the id exists (deactivated ones included). */
  create(rec: TenantRecord): Promise<void>;
  get(tenantId: string): Promise<TenantRecord | null>;
  /** The active tenant whose current key or one of whose scoped keys hashes to `keyHash`, or null. */
  findByKeyHash(keyHash: string): Promise<TenantRecord | null>;
  /** The tenant (deactivated ones included) holding the scoped key `keyId`, or null. */
  findByKeyId(keyId: string): Promise<TenantRecord | null>;
  /** The tenant whose `billing.customer_id` is `customerId` (deactivated ones included), or null. */
  findByCustomerId(customerId: string): Promise<TenantRecord | null>;
  /** Replaces a record with `change(current)` atomically; NotFoundError when absent. */
  update(tenantId: string, change: (cur: TenantRecord) => TenantRecord): Promise<TenantRecord>;
  list(): Promise<TenantRecord[]>;
  /**
   * Billing: records `ev.eventId` as processed and writes `change(current).next` in
   * one atomic step, at most once per event id across every gateway sharing the store. A
   * processed id answers `{ duplicate: true }` and changes nothing. The change must not touch
   * the key hash or the active flag.
   */
  applyEventOnce(ev: EventOnce, change: (cur: TenantRecord | null) => EventChange): Promise<EventResult>;
  /** Re-reads the registry from its storage; returns how many tenants it holds. */
  reload(): Promise<number>;
  /** Whether the backing store answers right now. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
}

const notFound = (id: string) => new NotFoundError(`Tenant ${id} does not exist.`);
const clone = (r: TenantRecord): TenantRecord => structuredClone(r);
/** Stored records are frozen, so reads can hand them out without copying. */
export const frozen = (r: TenantRecord): TenantRecord => {
  Object.freeze(r.namespaces);
  Object.freeze(r.rate_limit);
  return Object.freeze(r);
};

/** Registry in process memory only (tests, and the base of the local-file registry). */
export class MemoryTenantRegistry implements TenantRegistry {
  readonly kind: "memory" | "local" = "memory";
  protected tenants = new Map<string, TenantRecord>();
  protected byHash = new Map<string, string>();
  protected byCustomer = new Map<string, string>();
  protected byKeyId = new Map<string, string>();
  protected events = new Map<string, ProcessedEvent>();
  // Mutations run one after another so a persisted snapshot never interleaves two changes.
  private chain: Promise<unknown> = Promise.resolve();

  protected index(): void {
    this.byHash = new Map();
    this.byCustomer = new Map();
    this.byKeyId = new Map();
    for (const t of this.tenants.values()) {
      if (t.active) for (const h of keyHashesOf(t)) this.byHash.set(h, t.tenant_id);
      for (const k of t.keys ?? []) this.byKeyId.set(k.key_id, t.tenant_id);
      if (t.billing?.customer_id) this.byCustomer.set(t.billing.customer_id, t.tenant_id);
    }
  }

  /** Hook for persistence: called with the next state before it becomes current. */
  protected async persist(_next: Map<string, TenantRecord>, _events: Map<string, ProcessedEvent> = this.events): Promise<void> {}

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.chain.then(fn, fn);
    this.chain = p.catch(() => {});
    return p;
  }

  create(rec: TenantRecord): Promise<void> {
    return this.serial(async () => {
      if (this.tenants.has(rec.tenant_id)) throw new ConflictError(`Tenant ${rec.tenant_id} already exists.`);
      const next = new Map(this.tenants).set(rec.tenant_id, frozen(clone(withPlanHistory(null, rec))));
      await this.persist(next);
      this.tenants = next;
      this.index();
    });
  }

  async get(id: string): Promise<TenantRecord | null> {
    return this.tenants.get(id) ?? null;
  }

  async findByKeyHash(h: string): Promise<TenantRecord | null> {
    const id = this.byHash.get(h);
    const t = id === undefined ? undefined : this.tenants.get(id);
    return t && t.active && holdsKeyHash(t, h) ? t : null;
  }

  async findByKeyId(keyId: string): Promise<TenantRecord | null> {
    const id = this.byKeyId.get(keyId);
    const t = id === undefined ? undefined : this.tenants.get(id);
    return t && (t.keys ?? []).some((k) => k.key_id === keyId) ? t : null;
  }

  async findByCustomerId(c: string): Promise<TenantRecord | null> {
    const id = this.byCustomer.get(c);
    return (id !== undefined && this.tenants.get(id)) || null;
  }

  update(id: string, change: (cur: TenantRecord) => TenantRecord): Promise<TenantRecord> {
    return this.serial(async () => {
      const cur = this.tenants.get(id);
      if (!cur) throw notFound(id);
      const upd = frozen(clone(withPlanHistory(cur, change(clone(cur)))));
      const next = new Map(this.tenants).set(id, upd);
      await this.persist(next);
      this.tenants = next;
      this.index();
      return upd;
    });
  }

  applyEventOnce(ev: EventOnce, change: (cur: TenantRecord | null) => EventChange): Promise<EventResult> {
    return this.serial(async () => {
      const done = this.events.get(ev.eventId);
      if (done) return { duplicate: true as const, note: done.note };
      const cur = (ev.tenantId && this.tenants.get(ev.tenantId)) || null;
      const { next, note } = change(cur ? clone(cur) : null);
      let tenants = this.tenants;
      let upd: TenantRecord | null = null;
      if (next && cur) {
        checkEventChange(cur, next);
        upd = frozen(clone(withPlanHistory(cur, next)));
        tenants = new Map(this.tenants).set(cur.tenant_id, upd);
      }
      // The processed ids and the tenant change become current (and, locally, reach disk) together.
      const events = new Map([...this.events].filter(([, e]) => e.at_ms >= ev.nowMs - ev.retainMs));
      events.set(ev.eventId, { event_id: ev.eventId, tenant_id: ev.tenantId, note, at_ms: ev.nowMs });
      await this.persist(tenants, events);
      this.tenants = tenants;
      this.events = events;
      if (upd) this.index();
      return { duplicate: false as const, note, before: cur, after: upd ?? cur };
    });
  }

  async list(): Promise<TenantRecord[]> {
    return [...this.tenants.values()].sort((a, b) => (a.tenant_id < b.tenant_id ? -1 : 1));
  }

  async reload(): Promise<number> {
    return this.tenants.size;
  }

  async ping(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {
    await this.chain;
  }
}

const fileSchema = z.object({ version: z.literal(1), tenants: z.array(tenantRecordSchema), events: z.array(eventSchema).default([]) });

function checkEventChange(cur: TenantRecord, next: TenantRecord): void {
  if (
    next.tenant_id !== cur.tenant_id ||
    next.key_hash !== cur.key_hash ||
    next.active !== cur.active ||
    JSON.stringify(next.keys) !== JSON.stringify(cur.keys)
  ) {
    throw new Error("A payment event may not change a tenant's id, keys or active flag.");
  }
}

/** How long the local registry's answer to ping() stands before the data directory is probed again. */
const PROBE_REUSE_MS = 1000;

/** Registry persisted as DATA_DIR/tenants.json; every change is on disk before it is visible. */
export class LocalFileTenantRegistry extends MemoryTenantRegistry {
  override readonly kind = "local" as const;
  readonly path: string;
  private constructor(readonly dir: string) {
    super();
    this.path = join(dir, "tenants.json");
  }

  static async open(dir: string): Promise<LocalFileTenantRegistry> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const r = new LocalFileTenantRegistry(dir);
    await r.reload();
    return r;
  }

  /**
   * Writes the whole registry; nothing changes in memory unless it is on disk. A disk without
   * room answers 507 storage_full with Retry-After (the change was not made), a read-only one
   * 503 state_unavailable.
   */
  protected override async persist(next: Map<string, TenantRecord>, events: Map<string, ProcessedEvent> = this.events): Promise<void> {
    try {
      await writeFileAtomic(this.path, JSON.stringify({ version: 1, tenants: [...next.values()], events: [...events.values()] }) + "\n");
    } catch (e) {
      if (isNoSpace(e)) {
        throw new StorageFullError("The gateway's data directory has no space left, so the change was not made; retry after space is freed.");
      }
      if (isReadOnlyFs(e)) {
        throw new StateUnavailableError(
          "The gateway's data directory is on a read-only file system, so the change was not made; retry once it is writable again.",
          30,
        );
      }
      throw e;
    }
  }

  override async reload(): Promise<number> {
    let text: string;
    try {
      text = await readFile(this.path, "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") {
        this.tenants = new Map();
        this.events = new Map();
        this.index();
        return 0;
      }
      throw e;
    }
    let parsed: z.infer<typeof fileSchema>;
    try {
      parsed = fileSchema.parse(JSON.parse(text));
    } catch {
      throw new Error(`The tenant registry file ${this.path} is not a valid registry; it was left as it is.`);
    }
    this.tenants = new Map(parsed.tenants.map((t) => [t.tenant_id, frozen(t as TenantRecord)]));
    this.events = new Map(parsed.events.map((e) => [e.event_id, e]));
    this.index();
    return this.tenants.size;
  }

  private probing: Promise<boolean> | null = null;
  private probed: { atMs: number; ok: boolean } | null = null;

  /**
   * Whether the data directory takes writes: a 4 KiB probe file created, written, fsynced and
   * removed (probeWritable), so a full disk answers false (a permission check would not) and
   * true again once a block is free. At most one probe a second: calls within a second of the
   * last probe get its answer, and calls while one runs share it.
   */
  override ping(): Promise<boolean> {
    const now = performance.now();
    if (this.probed && now - this.probed.atMs < PROBE_REUSE_MS) return Promise.resolve(this.probed.ok);
    return (this.probing ??= probeWritable(this.dir).then((ok) => {
      this.probed = { atMs: performance.now(), ok };
      this.probing = null;
      return ok;
    }));
  }
}

// Every script below names keys of one tenant only, so that it runs on a Redis Cluster too
// (where a tenant's keys share a slot). The indexes across tenants (key hash -> id, customer
// -> id, the id set) are written around the record, never inside its script: each is checked
// against the record it points to on every read, so one left behind by a failure between
// two steps grants nothing (a key hash works only while the record it names still holds it).

// A compare-and-set of a record.
const CAS = new LuaScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return -1 end
if cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1`);

// Deletes an index key while it still names ARGV[1].
const DEL_IF = new LuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`);

// A payment event at most once: the processed-event record KEYS[1] (kept ARGV[4] ms) and the
// tenant's new record KEYS[2] (absent when the event names no tenant) are written together,
// and only if the record is still the one the change was computed from (compare-and-set);
// {0, note} when the event was processed before, {2} to retry.
const EVENT_ONCE = new LuaScript(`
local done = redis.call('GET', KEYS[1])
if done then return {0, done} end
local cur = ''
if KEYS[2] then cur = redis.call('GET', KEYS[2]) or '' end
if cur ~= ARGV[1] then return {2, ''} end
if KEYS[2] and ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2]) end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return {1, ''}`);

// Key hash -> record in one round trip (one server only: the record's key is not declared).
const BY_HASH = new LuaScript(`
local id = redis.call('GET', KEYS[1])
if not id then return false end
return redis.call('GET', ARGV[1] .. id)`);

/** The Redis key of a tenant's record (JSON): `<prefix>tenant:<id>`, `tenant:{id}` with hash tags. */
export const tenantKey = (prefix: string, id: string, hashTags = false): string => `${prefix}tenant:${tenantTag(id, hashTags)}`;

/**
 * Registry in Redis: `<prefix>tenant:<id>` (JSON), `<prefix>key:<sha256>` (id, for the tenant's
 * key and each scoped key), `<prefix>keyid:<key id>` (id), `<prefix>tenants` (set),
 * `<prefix>customer:<provider customer id>` (id; written with the billing record). With
 * hash tags (a Redis Cluster) the record is `tenant:{id}` and a payment event's record
 * `billing:event:{id}:<event>`, in the tenant's slot.
 */
export class RedisTenantRegistry implements TenantRegistry {
  readonly kind = "redis" as const;
  // Records whose customer was recorded before the customer index existed are indexed by one
  // scan, the first time a lookup misses in this process.
  #customersIndexed = false;
  constructor(
    private readonly redis: RedisLink,
    private readonly prefix: string,
    private readonly hashTags = false,
  ) {}

  private getText = async (key: string): Promise<string | null> => (await this.redis.sendCommand(["GET", key])) as string | null;

  private tKey = (id: string) => tenantKey(this.prefix, id, this.hashTags);
  private get hashPrefix() {
    return `${this.prefix}key:`;
  }
  private cKey = (customerId: string) => `${this.prefix}customer:${customerId}`;
  private dropIndex = (key: string, id: string) => DEL_IF.run(this.redis, [key], [id]);
  private idKey = (keyId: string) => `${this.prefix}keyid:${keyId}`;
  /** The index keys naming a record: its key hashes while active, its scoped keys' ids always. */
  private indexesOf = (t: TenantRecord): string[] => [
    ...(t.active ? keyHashesOf(t).map((h) => this.hashPrefix + h) : []),
    ...(t.keys ?? []).map((k) => this.idKey(k.key_id)),
  ];

  async create(rec: TenantRecord): Promise<void> {
    // The index and the id set first, the record last and only if absent: the record's SET NX
    // decides, and a tenant is listed and found by its key from the moment it exists.
    const indexed = this.indexesOf(rec);
    for (const k of indexed) await this.redis.sendCommand(["SET", k, rec.tenant_id]);
    await this.redis.sendCommand(["SADD", `${this.prefix}tenants`, rec.tenant_id]);
    const ok = await this.redis.sendCommand(["SET", this.tKey(rec.tenant_id), JSON.stringify(withPlanHistory(null, rec)), "NX"]);
    if (ok !== "OK") {
      for (const k of indexed) await this.dropIndex(k, rec.tenant_id);
      throw new ConflictError(`Tenant ${rec.tenant_id} already exists.`);
    }
  }

  async get(id: string): Promise<TenantRecord | null> {
    const s = await this.getText(this.tKey(id));
    return s ? (JSON.parse(s) as TenantRecord) : null;
  }

  /** The stored JSON text of the record the key hash `h` points to (null when none); one round trip on one server, two on a cluster. */
  async recordTextByKeyHash(h: string): Promise<string | null> {
    if (!this.hashTags) return (await BY_HASH.run(this.redis, [this.hashPrefix + h], [`${this.prefix}tenant:`])) as string | null;
    const id = await this.getText(this.hashPrefix + h);
    return id === null ? null : await this.getText(this.tKey(id));
  }

  async findByKeyHash(h: string): Promise<TenantRecord | null> {
    const s = await this.recordTextByKeyHash(h);
    if (!s) return null;
    const t = JSON.parse(s) as TenantRecord;
    return t.active && holdsKeyHash(t, h) ? t : null;
  }

  async findByKeyId(keyId: string): Promise<TenantRecord | null> {
    const id = await this.getText(this.idKey(keyId));
    const t = id ? await this.get(id) : null;
    return t && (t.keys ?? []).some((k) => k.key_id === keyId) ? t : null;
  }

  async findByCustomerId(c: string): Promise<TenantRecord | null> {
    const id = await this.getText(this.cKey(c));
    const t = id ? await this.get(id) : null;
    if (t?.billing?.customer_id === c) return t;
    if (this.#customersIndexed) return null;
    let found: TenantRecord | null = null;
    for (const r of await this.list()) {
      const cus = r.billing?.customer_id;
      if (!cus) continue;
      // A plain SET also repairs a key left naming a tenant that no longer has the customer.
      await this.redis.sendCommand(["SET", this.cKey(cus), r.tenant_id]);
      if (cus === c) found = r;
    }
    this.#customersIndexed = true;
    return found;
  }

  async update(id: string, change: (cur: TenantRecord) => TenantRecord): Promise<TenantRecord> {
    for (let attempt = 0; attempt < 50; attempt++) {
      const curText = await this.getText(this.tKey(id));
      if (!curText) throw notFound(id);
      const cur = JSON.parse(curText) as TenantRecord;
      const next = withPlanHistory(cur, change(structuredClone(cur)));
      const nextText = JSON.stringify(next);
      const before = this.indexesOf(cur);
      const after = this.indexesOf(next);
      // New keys' indexes before the record names them; old keys' after the record no longer
      // does (from that instant an old key fails everywhere: lookups check the record).
      const added = after.filter((k) => !before.includes(k));
      for (const k of added) await this.redis.sendCommand(["SET", k, id]);
      const r = Number(await CAS.run(this.redis, [this.tKey(id)], [curText, nextText]));
      if (r === 1) {
        for (const k of before) if (!after.includes(k)) await this.dropIndex(k, id);
        return next;
      }
      for (const k of added) await this.dropIndex(k, id);
      if (r === -1) throw notFound(id);
    }
    throw new ConflictError(`Tenant ${id} is being changed concurrently; try again.`);
  }

  async applyEventOnce(ev: EventOnce, change: (cur: TenantRecord | null) => EventChange): Promise<EventResult> {
    const eKey =
      this.hashTags && ev.tenantId ? `${this.prefix}billing:event:${tenantTag(ev.tenantId, true)}:${ev.eventId}` : `${this.prefix}billing:event:${ev.eventId}`;
    for (let attempt = 0; attempt < 50; attempt++) {
      const curText = ev.tenantId ? await this.getText(this.tKey(ev.tenantId)) : null;
      const cur = curText ? (JSON.parse(curText) as TenantRecord) : null;
      const { next, note } = change(cur ? structuredClone(cur) : null);
      let upd: TenantRecord | null = null;
      if (next && cur) {
        checkEventChange(cur, next);
        upd = withPlanHistory(cur, next);
      }
      const value = JSON.stringify({ event_id: ev.eventId, tenant_id: ev.tenantId, note, at_ms: ev.nowMs });
      const r = (await EVENT_ONCE.run(this.redis, ev.tenantId ? [eKey, this.tKey(ev.tenantId)] : [eKey], [
        curText ?? "",
        upd ? JSON.stringify(upd) : "",
        value,
        String(Math.max(1, Math.round(ev.retainMs))),
      ])) as [number, string];
      if (Number(r[0]) === 0) return { duplicate: true, note: (JSON.parse(r[1]) as ProcessedEvent).note };
      if (Number(r[0]) === 1) {
        // The customer index follows the record (checked against it on every read).
        const oldCus = cur?.billing?.customer_id ?? null;
        const newCus = upd?.billing?.customer_id ?? null;
        if (upd && newCus) await this.redis.sendCommand(["SET", this.cKey(newCus), ev.tenantId]);
        if (upd && oldCus && oldCus !== newCus) await this.dropIndex(this.cKey(oldCus), ev.tenantId);
        return { duplicate: false, note, before: cur, after: upd ?? cur };
      }
    }
    throw new ConflictError(`Tenant ${ev.tenantId} is being changed concurrently; try again.`);
  }

  async list(): Promise<TenantRecord[]> {
    const ids = ((await this.redis.sendCommand(["SMEMBERS", `${this.prefix}tenants`])) as string[]).sort();
    if (ids.length === 0) return [];
    // One GET per record, sent together (pipelined on one connection): a cluster spreads them over slots.
    const vals = await Promise.all(ids.map((id) => this.getText(this.tKey(id))));
    return vals.filter((v): v is string => typeof v === "string").map((v) => JSON.parse(v) as TenantRecord);
  }

  async reload(): Promise<number> {
    // The registry caches nothing; the data plane's cache (admission.ts) confirms every record
    // it uses against Redis. Reload reports the count.
    return Number(await this.redis.sendCommand(["SCARD", `${this.prefix}tenants`]));
  }

  async ping(): Promise<boolean> {
    try {
      return (await this.redis.sendCommand(["PING"])) === "PONG";
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {}
}
