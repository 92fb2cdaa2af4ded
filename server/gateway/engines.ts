// Several engines behind one gateway: one undici Pool per engine, requests spread by fewest
// requests in flight (round-robin among equals), an engine taken out of rotation when a
// connection to it fails or its /health stops answering or says its store is not connected,
// and put back when /health answers with its store again. A request whose connection failed is sent once more, to another engine, when that
// cannot apply it twice: nothing was sent (the connection was never made), or the request is
// replayable (a read, or a write carrying an Idempotency-Key the engine deduplicates).
//
// undici's BalancedPool was the first candidate; it is not used because it neither tells
// which upstream served a request nor lets a retry exclude the one that just failed, and the
// two are what ejection and "once on another engine" need. The per-engine Pools are undici's.
import type { Readable } from "node:stream";
import { Pool } from "undici";
import {
  EngineFailure,
  enginePool,
  readEngineHealth,
  UndiciEngineClient,
  type EngineClient,
  type EngineHealth,
  type EngineProbe,
  type EngineResponse,
  type EngineTls,
  type ForwardRequest,
} from "./proxy.js";

export interface EnginePoolOptions {
  /** Connections per engine (default 128). */
  connections?: number;
  tls?: EngineTls;
  /** How often each engine's GET /health is asked (default 1000 ms). */
  healthIntervalMs?: number;
  /** How long one health check waits (default 1000 ms; checks of one engine never overlap). */
  healthTimeoutMs?: number;
  /** Consecutive failed health checks that take an engine out (default 2). */
  failuresToEject?: number;
}

interface Member {
  readonly index: number;
  readonly client: UndiciEngineClient;
  /** A one-connection pool for health checks, so a busy request pool never delays them. */
  readonly probe: Pool;
  inRotation: boolean;
  inFlight: number;
  failedChecks: number;
  checking: boolean;
  /** When it last answered (a request or a health check), ms since the epoch. */
  lastOkAt: number;
}

/** Where each forwarded request went; tests and the bench read it. */
export interface EnginePoolStats {
  /** Requests sent, per engine (a retried request counts on both). */
  sent: number[];
  /** Requests sent a second time, to another engine. */
  retried: number;
  /** Times an engine was taken out of rotation. */
  ejections: number;
}

const replayableBody = (b: Buffer | Readable | null): boolean => b === null || Buffer.isBuffer(b);

export class EnginePool implements EngineClient {
  readonly #members: Member[];
  readonly #timer: NodeJS.Timeout;
  readonly #healthTimeoutMs: number;
  readonly #failuresToEject: number;
  #next = 0;
  #closed = false;
  readonly stats: EnginePoolStats;

  constructor(urls: readonly string[], serviceKey: string, timeoutMs: number, opts: EnginePoolOptions = {}) {
    if (urls.length === 0) throw new Error("An engine pool needs at least one engine URL.");
    const interval = opts.healthIntervalMs ?? 1000;
    this.#healthTimeoutMs = opts.healthTimeoutMs ?? 1000;
    this.#failuresToEject = opts.failuresToEject ?? 2;
    this.#members = urls.map((url, index) => ({
      index,
      client: new UndiciEngineClient(url, serviceKey, timeoutMs, opts.connections ?? 128, opts.tls ?? {}),
      probe: enginePool(url, opts.tls ?? {}, { connections: 1, keepAliveTimeout: Math.max(1000, interval * 2), connectTimeout: this.#healthTimeoutMs }),
      inRotation: true,
      inFlight: 0,
      failedChecks: 0,
      checking: false,
      lastOkAt: Date.now(),
    }));
    this.stats = { sent: urls.map(() => 0), retried: 0, ejections: 0 };
    this.#timer = setInterval(() => void this.checkAll(), interval);
    this.#timer.unref();
  }

  get size(): number {
    return this.#members.length;
  }

  /** The engine with the fewest requests in flight among those in rotation, skipping `not`. */
  #pick(not: Member | null): Member | null {
    const n = this.#members.length;
    let best: Member | null = null;
    let fallback: Member | null = null;
    const start = this.#next;
    this.#next = (this.#next + 1) % n;
    for (let i = 0; i < n; i++) {
      const m = this.#members[(start + i) % n]!;
      if (m === not) continue;
      if (fallback === null || m.lastOkAt > fallback.lastOkAt) fallback = m;
      if (m.inRotation && (best === null || m.inFlight < best.inFlight)) best = m;
    }
    // With every engine out of rotation the request still goes somewhere, to the one that
    // answered last: it may be back since its last check (a 502 is the answer if it is not).
    return best ?? fallback;
  }

  #eject(m: Member): void {
    if (!m.inRotation) return;
    m.inRotation = false;
    this.stats.ejections++;
  }

  async #send(m: Member, r: ForwardRequest): Promise<EngineResponse> {
    m.inFlight++;
    this.stats.sent[m.index]!++;
    try {
      const res = await m.client.forward(r);
      m.lastOkAt = Date.now();
      // The count covers the headers' wait; the body streams while the next request is picked.
      return res;
    } finally {
      m.inFlight--;
    }
  }

  async forward(r: ForwardRequest): Promise<EngineResponse> {
    const first = this.#pick(null)!;
    try {
      return await this.#send(first, r);
    } catch (e) {
      if (!(e instanceof EngineFailure)) throw e;
      // A streamed body that broke on the client's side (an aborted upload) says nothing
      // about the engine: no ejection, and nothing to send again.
      if (r.body !== null && !Buffer.isBuffer(r.body) && (r.body.destroyed || r.body.errored)) throw e;
      // A connection that failed says the engine is gone; one that timed out may be a slow
      // request on a live engine, left to the health checks.
      if (e.phase !== "timeout") this.#eject(first);
      const safe = e.phase === "connect" || (e.phase === "exchange" && r.replayable === true);
      const other = safe && replayableBody(r.body) ? this.#pick(first) : null;
      if (other === null) throw e;
      this.stats.retried++;
      return await this.#send(other, r);
    }
  }

  async #check(m: Member): Promise<EngineProbe> {
    try {
      const res = await this.#members[m.index]!.probe.request({
        method: "GET",
        path: "/health",
        headersTimeout: this.#healthTimeoutMs,
        bodyTimeout: this.#healthTimeoutMs,
        signal: AbortSignal.timeout(this.#healthTimeoutMs),
      });
      return await readEngineHealth(res);
    } catch {
      return { reachable: false, store_connected: false };
    }
  }

  /** One round of health checks: out after `failuresToEject` failures in a row, back after one success. */
  async checkAll(): Promise<void> {
    await Promise.all(
      this.#members.map(async (m) => {
        if (m.checking || this.#closed) return;
        m.checking = true;
        try {
          const h = await this.#check(m);
          // an engine whose store is down answers only 503s: the others serve meanwhile
          if (h.reachable && h.store_connected) {
            m.failedChecks = 0;
            m.inRotation = true;
            m.lastOkAt = Date.now();
          } else if (++m.failedChecks >= this.#failuresToEject) {
            this.#eject(m);
          }
        } finally {
          m.checking = false;
        }
      }),
    );
  }

  async ping(): Promise<boolean> {
    return (await this.engines()).some((e) => e.reachable);
  }

  async probe(): Promise<EngineProbe> {
    const all = await this.engines();
    return { reachable: all.some((e) => e.reachable), store_connected: all.some((e) => e.reachable && e.store_connected) };
  }

  async engines(): Promise<EngineHealth[]> {
    return Promise.all(
      this.#members.map(async (m) => {
        const h = await this.#check(m);
        return { index: m.index, reachable: h.reachable, in_rotation: m.inRotation, in_flight: m.inFlight, store_connected: h.store_connected };
      }),
    );
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    await Promise.all(this.#members.flatMap((m) => [m.client.close(), m.probe.close()]));
  }
}

/** Operations that change nothing: always safe to send to another engine. */
const READ_OPS = new Set(["get", "list", "search", "serve", "query_similarity", "query_topk", "query_vector"]);

/**
 * Whether a request may go to a second engine after its connection failed mid-exchange: a
 * read, or a write whose Idempotency-Key lets the engine recognise a repeat.
 */
export const replayableOp = (op: string, idempotencyKey: string | undefined): boolean => READ_OPS.has(op) || idempotencyKey !== undefined;

/** Idempotency-Key: 1-255 visible ASCII characters (the engine keys its records by it). */
export const IDEMPOTENCY_KEY_RE = /^[\x21-\x7e]{1,255}$/;
