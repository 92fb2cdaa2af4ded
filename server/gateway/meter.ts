// Metering (step 8 of the order of checks, docs/api.md) and quota (step 6). CUs are counted in integer milli-CUs so that
// sums are exact (ten gets are exactly 1 CU, never 0.9999999). Usage is kept per tenant per
// UTC month with a per-operation breakdown, behind one interface: Redis (HINCRBY, shared by
// several gateways), a local JSON file under the data directory, or memory.
import { closeSync, openSync, writeSync } from "node:fs";
import { mkdir, readdir, readFile, unlink } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../../lib/atomic-file.js";
import { isNoSpace, StateUnavailableError, ValidationError } from "../../lib/errors.js";
import { LuaScript, tenantTag } from "./redis.js";
import type { RedisLink } from "./resp.js";
import { OPERATIONS, type Operation } from "../http/operations.js";

export { OPERATIONS, type Operation };

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

/**
 * The month a usage query asks for: its `period` (YYYY-MM) or the month of `nowMs`; any other
 * query parameter, or a malformed period, is a 400 naming it.
 */
export function periodQuery(query: Record<string, unknown>, nowMs: number): string {
  const unknown = Object.keys(query).find((k) => k !== "period");
  if (unknown !== undefined) throw new ValidationError(`Unknown query parameter ${JSON.stringify(unknown.slice(0, 64))}; only period is accepted.`, unknown);
  const p = query.period;
  if (p === undefined) return periodOf(nowMs);
  if (typeof p !== "string" || !PERIOD_RE.test(p)) throw new ValidationError("period must be a month in the form YYYY-MM.", "period");
  return p;
}

export interface UsageRecord {
  total_milli: number;
  breakdown_milli: Partial<Record<Operation, number>>;
}

export interface UsageStore {
  readonly kind: "redis" | "local" | "memory";
  /**
   * Adds `milli` milli-CUs of `op` to the tenant's usage in `period`. Redis: a charge that
   * reaches the server after `deadlineMs` (ms of Redis's clock; default: when the gateway stops
   * waiting for it, ChargeDeadlines) is not applied and rejects with LateChargeError.
   */
  add(tenant: string, period: string, op: Operation, milli: number, deadlineMs?: number): Promise<void>;
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
    // In this process: a charge is applied at once, no deadline can pass first.
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

/** Told when usage snapshots start failing (with the first error) and when one is written again. */
export type SnapshotListener = (change: { written: true } | { written: false; error: Error }) => void;

/**
 * Usage persisted under DATA_DIR as durably as the audit log. Every charge is appended to a
 * journal (DATA_DIR/usage.journal.<n>, one JSON line per charge) before the request is
 * answered: the charges of one event-loop turn go in one write(2) on a descriptor opened with
 * O_APPEND, so a charge is in the kernel before its response starts and survives a crash of
 * the process (kill -9), like the request's audit record. At most `flushMs` after a change,
 * and on close, the counters are written as a snapshot (DATA_DIR/usage.json: temp file, fsync,
 * rename) that names the journal started at that instant; older journals are then deleted.
 * Start-up loads the snapshot and replays the journals it does not yet contain.
 *
 * A snapshot that cannot be written (a full disk) is kept in memory and written again, unchanged
 * and without starting another journal, until it succeeds; the attempts back off from `flushMs`
 * doubling to `retryMaxMs`, with or without new charges. So a data directory that stays full
 * holds at most two journals (the one the snapshot on disk names and the one the unwritten
 * snapshot names), and the first attempt after space returns writes it, then a current one,
 * and deletes every older journal.
 */
export class LocalFileUsageStore extends MemoryUsageStore {
  override readonly kind = "local" as const;
  private timer: NodeJS.Timeout | null = null;
  private writing: Promise<void> = Promise.resolve();
  private journalId = 0;
  private fd: number | null = null;
  /**
   * The snapshot serialised when the current journal was started, while it is not on disk yet
   * (its write failed): it holds exactly the journals before the current one.
   */
  private unsaved: string | null = null;
  /** Snapshot attempts that failed in a row (the back-off's exponent). */
  private failures = 0;
  private closed = false;
  /** Charges counted in memory whose journal line is not written yet, with their callers. */
  private pending: Array<{ line: string; tenant: string; period: string; op: Operation; milli: number; resolve: () => void; reject: (e: Error) => void }> = [];
  private scheduled = false;
  private constructor(
    readonly dir: string,
    readonly path: string,
    private readonly flushMs: number,
    private readonly retryMaxMs: number,
    private readonly onSnapshot: SnapshotListener,
  ) {
    super();
  }

  private journalPath(id: number): string {
    return join(this.dir, `usage.journal.${id}`);
  }

  /**
   * `retryMaxMs`: the longest wait between two attempts at a snapshot that failed (at least
   * `flushMs`); `onSnapshot`: told when snapshots start failing (the first failure of a run) and
   * when one is written again, not at every attempt.
   */
  static async open(
    dir: string,
    flushMs = 1000,
    { retryMaxMs = 30_000, onSnapshot = () => {} }: { retryMaxMs?: number; onSnapshot?: SnapshotListener } = {},
  ): Promise<LocalFileUsageStore> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const s = new LocalFileUsageStore(dir, join(dir, "usage.json"), flushMs, Math.max(flushMs, retryMaxMs), onSnapshot);
    let from = 0;
    try {
      const parsed = JSON.parse(await readFile(s.path, "utf8")) as { version: number; usage: Table; journal?: number };
      if (parsed.version !== 1 || typeof parsed.usage !== "object" || parsed.usage === null) throw new Error();
      s.table = parsed.usage;
      from = Number.isSafeInteger(parsed.journal) ? parsed.journal! : 0;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw new Error(`The usage file ${s.path} is not valid; it was left as it is.`);
    }
    // Replay the journals the snapshot does not contain, oldest first; a torn last line (a
    // write cut short by a full disk) is skipped.
    const ids = (await readdir(dir))
      .map((f) => /^usage\.journal\.(\d+)$/.exec(f)?.[1])
      .filter((x): x is string => x !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
    // The last journal stays the current one. The counters before it are the snapshot that
    // names it (nothing on disk changes until that snapshot is written, so a start that cannot
    // write it, on a full disk, adds no file).
    s.journalId = Math.max(from, ids.at(-1) ?? 0);
    const snapshotNaming = (id: number) => JSON.stringify({ version: 1, journal: id, usage: s.table }) + "\n";
    for (const id of ids) {
      if (id < from) continue;
      if (id === s.journalId) s.unsaved = snapshotNaming(id);
      const text = await readFile(s.journalPath(id), "utf8");
      for (const line of text.split("\n")) {
        if (!line) continue;
        let c: { p?: unknown; t?: unknown; o?: unknown; m?: unknown };
        try {
          c = JSON.parse(line) as typeof c;
        } catch {
          continue;
        }
        if (
          typeof c.p === "string" &&
          PERIOD_RE.test(c.p) &&
          typeof c.t === "string" &&
          typeof c.o === "string" &&
          (OPERATIONS as readonly string[]).includes(c.o) &&
          Number.isSafeInteger(c.m) &&
          (c.m as number) > 0
        ) {
          s.count(c.t, c.p, c.o as Operation, c.m as number);
        }
      }
    }
    s.unsaved ??= snapshotNaming(s.journalId);
    s.fd = openSync(s.journalPath(s.journalId), "a", 0o600);
    // Snapshots now: what was replayed is safe in them, and the old journals go.
    try {
      await s.flush();
    } catch (e) {
      // a full disk: the gateway starts anyway (charges go to the journal while it can take
      // them) and the snapshot is retried, later each time, as after any failed snapshot
      if (isNoSpace(e)) return s;
      s.closed = true;
      if (s.timer) clearTimeout(s.timer);
      closeSync(s.fd);
      throw e;
    }
    return s;
  }

  private count(tenant: string, period: string, op: Operation, milli: number): void {
    const t = ((this.table[period] ??= {})[tenant] ??= {});
    t[op] = (t[op] ?? 0) + milli;
    t[TOTAL] = (t[TOTAL] ?? 0) + milli;
  }

  override add(tenant: string, period: string, op: Operation, milli: number): Promise<void> {
    // counted at once (a quota check sees it), taken back if its journal line cannot be written
    this.count(tenant, period, op, milli);
    this.changed();
    return new Promise((resolve, reject) => {
      this.pending.push({ line: JSON.stringify({ p: period, t: tenant, o: op, m: milli }) + "\n", tenant, period, op, milli, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.append());
      }
    });
  }

  /**
   * Appends the pending charges to the current journal (one write per event-loop turn). When
   * the write fails (a full disk), the charges whose lines were written whole stand; the others
   * are taken back out of memory before anything else can read or snapshot them, and their
   * callers fail: the request is then answered and audited as served free (0 CUs), and usage
   * agrees, now and after a restart.
   */
  private append(): void {
    this.scheduled = false;
    if (this.pending.length === 0) return;
    const charges = this.pending;
    this.pending = [];
    // A line left torn by an earlier failed write is ended first.
    const buf = Buffer.from("\n" + charges.map((c) => c.line).join(""), "utf8");
    let off = 0;
    try {
      if (this.fd === null) throw new Error("The usage journal is closed.");
      while (off < buf.length) off += writeSync(this.fd, buf, off);
    } catch (e) {
      let end = 1; // the leading newline
      for (const c of charges) {
        end += Buffer.byteLength(c.line);
        if (end <= off) c.resolve();
        else {
          this.count(c.tenant, c.period, c.op, -c.milli);
          c.reject(e as Error);
        }
      }
      return;
    }
    for (const c of charges) c.resolve();
  }

  protected override changed(): void {
    if (this.timer || this.closed) return;
    this.schedule(this.flushMs);
  }

  private schedule(ms: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush().catch(() => {});
    }, ms);
    this.timer.unref();
  }

  /**
   * Writes the current counters now. In one synchronous step the pending charges are appended,
   * the next journal is started and the counters are serialised, so the snapshot holds exactly
   * the journals before the one it names. When the last snapshot could not be written, that
   * one is written first, without starting a journal: it still holds exactly the journals
   * before the current one. A failure leaves a next attempt scheduled, later each time.
   */
  flush(): Promise<void> {
    const run = async () => {
      this.append();
      for (;;) {
        const fresh = this.unsaved === null;
        try {
          if (this.unsaved === null) {
            const next = this.journalId + 1;
            const fd = openSync(this.journalPath(next), "a", 0o600);
            if (this.fd !== null) closeSync(this.fd);
            this.fd = fd;
            this.journalId = next;
            this.unsaved = JSON.stringify({ version: 1, journal: next, usage: this.table }) + "\n";
          }
          await writeFileAtomic(this.path, this.unsaved);
        } catch (e) {
          if (this.failures === 0) this.onSnapshot({ written: false, error: e as Error });
          this.failures++;
          if (!this.closed) this.schedule(Math.min(this.retryMaxMs, Math.max(1, this.flushMs) * 2 ** Math.min(this.failures - 1, 30)));
          throw e;
        }
        // the snapshot on disk names the current journal: every other one is in it
        this.unsaved = null;
        if (this.failures > 0) this.onSnapshot({ written: true });
        this.failures = 0;
        await this.deleteJournalsBefore(this.journalId);
        if (fresh) return;
        // the snapshot just written was the one that had failed: now a current one
        this.append();
      }
    };
    this.writing = this.writing.then(run, run);
    return this.writing;
  }

  /** Deletes every journal whose id is below `id` (all of them, even after a gap in the ids). */
  private async deleteJournalsBefore(id: number): Promise<void> {
    for (const f of await readdir(this.dir)) {
      const n = /^usage\.journal\.(\d+)$/.exec(f)?.[1];
      if (n === undefined || Number(n) >= id) continue;
      try {
        await unlink(join(this.dir, f));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
    }
  }

  override async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    try {
      await this.flush();
    } finally {
      if (this.fd !== null) closeSync(this.fd);
      this.fd = null;
    }
  }
}

/**
 * A charge Redis received after its deadline, so did not apply: the gateway had stopped
 * waiting for it (a hung or slow Redis) and answered the request as not charged.
 */
export class LateChargeError extends StateUnavailableError {
  constructor() {
    super("The charge reached Redis after its deadline and was not applied; retry later.");
    this.name = "LateChargeError";
  }
}

/**
 * Lua: true when the server's clock (TIME, ms) is past the deadline `arg` ("" for none). Since
 * Redis 5 a script replicates its effects, so TIME may come before the writes.
 */
export const PAST_DEADLINE_LUA = `
local function past(arg)
  if arg == '' then return false end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(arg)
end
`;

/** This process's monotonic clock in ms since the epoch (RedisLink.answerBy's clock). */
export const monotonicMs = (): number => performance.timeOrigin + performance.now();

/**
 * The deadlines of charges sent to Redis. A charge carries the instant past which Redis must
 * refuse it, on Redis's clock: a little before the gateway stops waiting for its reply (the
 * link's answerBy, less a margin of a quarter of the wait, at most 500 ms, for the reply to be
 * read), so a charge is either applied and reported, or refused, and never applied after the
 * gateway answered the request as not charged. The offset between Redis's clock and this
 * process's monotonic one is learnt from Redis's TIME in the admission script's replies
 * (observe): each sample is Redis's time when it ran the script less this process's time when
 * the reply was read, never more than the true offset, and the largest sample of the last
 * minute is used, so a deadline errs early (a charge refused that could have been applied, and
 * answered as such), never late; a step of this machine's clock changes nothing.
 */
export class ChargeDeadlines {
  private offsetMs = 0;
  private sampledAt = -Infinity;
  constructor(
    private readonly link: RedisLink,
    private readonly fallbackWaitMs?: number,
  ) {}

  /** A reading of Redis's clock (ms) that reached this process just now. */
  observe(redisNowMs: number): void {
    if (!Number.isFinite(redisNowMs)) return;
    const now = monotonicMs();
    const sample = redisNowMs - now;
    if (sample >= this.offsetMs || now - this.sampledAt > 60_000) {
      this.offsetMs = sample;
      this.sampledAt = now;
    }
  }

  /** The offset used now: Redis's clock less this process's monotonic one (ms). */
  get offset(): number {
    return this.offsetMs;
  }

  /** The deadline of a charge sent now (ms of Redis's clock), or "" when the gateway waits without a bound. */
  next(): string {
    const now = monotonicMs();
    const by = this.link.answerBy?.() ?? (this.fallbackWaitMs !== undefined ? now + this.fallbackWaitMs : undefined);
    if (by === undefined) return "";
    const wait = Math.max(0, by - now);
    return String(Math.floor(now + this.offsetMs + wait - Math.min(wait / 4, 500)));
  }
}

// KEYS: the usage hash. ARGV: the operation, the milli-CUs, the deadline ("" for none).
// Returns the new total, or -1 when the deadline had passed (nothing applied).
const ADD = new LuaScript(`${PAST_DEADLINE_LUA}
if past(ARGV[3]) then return -1 end
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HINCRBY', KEYS[1], '${TOTAL}', ARGV[2])`);

/** Usage in Redis: hash `<prefix>usage:<period>:<tenant>`, fields per operation plus `_total`. */
export class RedisUsageStore implements UsageStore {
  readonly kind = "redis" as const;
  private readonly deadlines: ChargeDeadlines;
  constructor(
    private readonly redis: RedisLink,
    private readonly prefix: string,
    private readonly hashTags = false,
    deadlines?: ChargeDeadlines,
  ) {
    this.deadlines = deadlines ?? new ChargeDeadlines(redis);
  }
  private key = (tenant: string, period: string) => usageKey(this.prefix, period, tenant, this.hashTags);

  async add(tenant: string, period: string, op: Operation, milli: number, deadlineMs?: number): Promise<void> {
    // One script: the operation's field and the total move together, in one command (a
    // MULTI/HINCRBY/HINCRBY/EXEC costs the client four), or not at all once past the deadline.
    const deadline = deadlineMs === undefined ? this.deadlines.next() : String(Math.floor(deadlineMs));
    if (Number(await ADD.run(this.redis, [this.key(tenant, period)], [op, String(milli), deadline])) === -1) throw new LateChargeError();
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
