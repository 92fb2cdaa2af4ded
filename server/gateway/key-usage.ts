// When each scoped key was last used (last_used_at of GET /gate/admin/keys/{tenant_id}), kept
// cheaply: a request only notes the instant in this process's memory, and the notes are written
// to the store in one batch at most once a minute (so each key is written at most once a minute
// per gateway, never once per request). A listing adds the notes not written yet, so this
// gateway's answer is current and another's lags by at most a minute.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { LuaScript, tenantTag } from "./redis.js";
import type { RedisLink } from "./resp.js";
import { writeFileAtomic } from "../../lib/atomic-file.js";

export interface KeyUse {
  tenant_id: string;
  key_id: string;
  at_ms: number;
}

/** Where last-use instants live: memory, a file under the data directory, or Redis. */
export interface KeyUsageStore {
  /** Records each use (a later instant replaces an earlier one, never the reverse). */
  record(uses: readonly KeyUse[]): Promise<void>;
  /** key_id -> last use (ms) of one tenant's keys. */
  lastUsed(tenantId: string): Promise<Map<string, number>>;
}

export class MemoryKeyUsageStore implements KeyUsageStore {
  protected uses = new Map<string, Map<string, number>>();
  /** How many record() calls were made (tests check the batching). */
  writes = 0;
  async record(uses: readonly KeyUse[]): Promise<void> {
    this.writes++;
    for (const u of uses) {
      let m = this.uses.get(u.tenant_id);
      if (!m) this.uses.set(u.tenant_id, (m = new Map()));
      if ((m.get(u.key_id) ?? -Infinity) < u.at_ms) m.set(u.key_id, u.at_ms);
    }
  }
  async lastUsed(tenantId: string): Promise<Map<string, number>> {
    return new Map(this.uses.get(tenantId) ?? []);
  }
}

/** DATA_DIR/key-usage.json (mode 0600), rewritten atomically once per batch. */
export class LocalFileKeyUsageStore extends MemoryKeyUsageStore {
  private constructor(readonly path: string) {
    super();
  }
  static async open(dir: string): Promise<LocalFileKeyUsageStore> {
    const s = new LocalFileKeyUsageStore(join(dir, "key-usage.json"));
    try {
      const parsed = JSON.parse(await readFile(s.path, "utf8")) as unknown;
      if (parsed && typeof parsed === "object") {
        for (const [tenant, keys] of Object.entries(parsed as Record<string, unknown>)) {
          if (!keys || typeof keys !== "object") continue;
          const m = new Map<string, number>();
          for (const [k, v] of Object.entries(keys as Record<string, unknown>)) if (typeof v === "number" && Number.isFinite(v)) m.set(k, v);
          s.uses.set(tenant, m);
        }
      }
    } catch {
      // Missing or unreadable: last-use instants are advisory and start again empty.
    }
    return s;
  }
  override async record(uses: readonly KeyUse[]): Promise<void> {
    await super.record(uses);
    const out: Record<string, Record<string, number>> = {};
    for (const [t, m] of this.uses) out[t] = Object.fromEntries(m);
    await writeFileAtomic(this.path, JSON.stringify(out) + "\n");
  }
}

// Sets a hash field only when the instant is later than the one stored.
const SET_LATER = new LuaScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1`);

/** Redis: `<prefix>keyused:<tenant>` (a hash key_id -> ms), `keyused:{tenant}` with hash tags. */
export class RedisKeyUsageStore implements KeyUsageStore {
  constructor(
    private readonly redis: RedisLink,
    private readonly prefix: string,
    private readonly hashTags = false,
  ) {}
  private hKey = (tenant: string) => `${this.prefix}keyused:${tenantTag(tenant, this.hashTags)}`;
  async record(uses: readonly KeyUse[]): Promise<void> {
    // Sent together (pipelined on one connection).
    await Promise.all(uses.map((u) => SET_LATER.run(this.redis, [this.hKey(u.tenant_id)], [u.key_id, String(Math.round(u.at_ms))])));
  }
  async lastUsed(tenantId: string): Promise<Map<string, number>> {
    const flat = (await this.redis.sendCommand(["HGETALL", this.hKey(tenantId)])) as string[] | Record<string, string> | null;
    const m = new Map<string, number>();
    if (Array.isArray(flat)) for (let i = 0; i + 1 < flat.length; i += 2) m.set(flat[i]!, Number(flat[i + 1]));
    else if (flat) for (const [k, v] of Object.entries(flat)) m.set(k, Number(v));
    return m;
  }
}

/** How often the notes of this process are written (ms). */
export const KEY_USAGE_FLUSH_MS = 60_000;

/** The per-process notes and their batched writes. */
export class KeyUsageTracker {
  private pending = new Map<string, KeyUse>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();
  constructor(
    readonly store: KeyUsageStore,
    private readonly flushMs = KEY_USAGE_FLUSH_MS,
  ) {}

  /** Notes a use (no I/O); the first note after a write starts the timer of the next one. */
  touch(tenantId: string, keyId: string, atMs: number): void {
    const k = `${tenantId}\0${keyId}`;
    const cur = this.pending.get(k);
    if (!cur || cur.at_ms < atMs) this.pending.set(k, { tenant_id: tenantId, key_id: keyId, at_ms: atMs });
    if (this.timer === null) {
      this.timer = setTimeout(() => {
        this.timer = null;
        void this.flush();
      }, this.flushMs);
      this.timer.unref();
    }
  }

  /** Writes the notes taken so far in one batch; a failed write keeps them for the next. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      if (this.pending.size === 0) return;
      const batch = [...this.pending.values()];
      this.pending = new Map();
      try {
        await this.store.record(batch);
      } catch {
        for (const u of batch) {
          const k = `${u.tenant_id}\0${u.key_id}`;
          if (!this.pending.has(k)) this.pending.set(k, u);
        }
      }
    });
    return this.flushing;
  }

  /** key_id -> last use (ms) of a tenant's keys: the store's, with this process's unwritten notes. */
  async lastUsed(tenantId: string): Promise<Map<string, number>> {
    const m = await this.store.lastUsed(tenantId);
    for (const u of this.pending.values()) {
      if (u.tenant_id === tenantId && (m.get(u.key_id) ?? -Infinity) < u.at_ms) m.set(u.key_id, u.at_ms);
    }
    return m;
  }

  /** Stops the timer and writes what is noted (on shutdown). */
  async close(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.flush();
  }
}
