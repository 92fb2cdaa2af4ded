// Forwarding (step 7 of the order of checks, docs/api.md): an undici Pool to the engine. The gateway adds the service key,
// X-SVC-Tenant and X-Request-Id; a client's own X-SVC-Tenant and credentials never pass. JSON
// bodies go as the bytes already read (never re-serialised); octet-stream bodies and all
// responses are streamed.
import { Pool, type Dispatcher } from "undici";
import type { Readable } from "node:stream";
import { EngineUnreachableError, SvcError } from "../../lib/errors.js";

export interface ForwardRequest {
  method: string;
  /** Path and query exactly as the client sent them. */
  path: string;
  headers: Record<string, string>;
  body: Buffer | Readable | null;
  tenantId: string;
  requestId: string;
  /**
   * The request may be sent again, to another engine, after its connection failed even when
   * its body went out: reads, and writes carrying an Idempotency-Key (default false).
   */
  replayable?: boolean;
}

export interface EngineHealth {
  /** Position in SVC_GATE_ENGINE_URL, from 0 (the address itself is not shown). */
  index: number;
  /** Answered GET /health with 200 within a second, just now. */
  reachable: boolean;
  /** Requests are sent to it (it was not taken out, or its health came back). */
  in_rotation: boolean;
  /** Requests in flight on it from this gateway. */
  in_flight: number;
  /** Its /health says its store (PostgreSQL) answers; false when unreachable too. */
  store_connected: boolean;
}

/** What one GET /health of an engine said. */
export interface EngineProbe {
  reachable: boolean;
  /** The engine's store answers (an engine that does not report it is taken as connected). */
  store_connected: boolean;
}

/** Reads an engine's /health answer: 200, and store_connected unless it says false. */
export async function readEngineHealth(res: Dispatcher.ResponseData): Promise<EngineProbe> {
  if (res.statusCode !== 200) {
    await res.body.dump();
    return { reachable: false, store_connected: false };
  }
  const body = (await res.body.json().catch(() => null)) as { store_connected?: unknown } | null;
  return { reachable: true, store_connected: body?.store_connected !== false };
}

export interface EngineResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: Readable;
}

export interface EngineClient {
  /** Sends the request; EngineUnreachableError when the engine cannot be reached or times out. */
  forward(r: ForwardRequest): Promise<EngineResponse>;
  /** Whether the engine (any engine, when there are several) answers GET /health with 200 within a second. */
  ping(): Promise<boolean>;
  /** As ping, with whether the engine's store answers (any engine that answers, when there are several). */
  probe?(): Promise<EngineProbe>;
  /** Several engines: each one's health now, in the order configured (absent for a single engine). */
  engines?(): Promise<EngineHealth[]>;
  close(): Promise<void>;
}

// Client request headers that reach the engine (allow-list).
export const FORWARDED_REQUEST_HEADERS = ["content-type", "content-length", "accept", "x-svc-metadata", "idempotency-key"] as const;

/**
 * The engine could not be used, and when: "connect" (no connection was made, so nothing of
 * the request was sent), "exchange" (the connection failed after the request may have gone
 * out), "timeout" (the engine took longer than the gateway waits).
 */
export class EngineFailure extends EngineUnreachableError {
  constructor(readonly phase: "connect" | "exchange" | "timeout") {
    super("The storage engine is unreachable or did not answer in time.");
  }
}

const CONNECT_CODES = new Set(["ECONNREFUSED", "UND_ERR_CONNECT_TIMEOUT", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN", "EADDRNOTAVAIL"]);
const TIMEOUT_CODES = new Set(["UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);

/** The phase of an undici request error (see EngineFailure). */
export function failurePhase(e: unknown): EngineFailure["phase"] {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === "string" && CONNECT_CODES.has(code)) return "connect";
  if (typeof code === "string" && TIMEOUT_CODES.has(code)) return "timeout";
  return "exchange";
}

// Engine response headers that must not reach the client as they are.
const DROPPED_RESPONSE_HEADERS = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "proxy-authenticate",
  "x-request-id",
  "x-svc-cus",
  "x-ratelimit-limit",
  "x-ratelimit-remaining",
  "x-ratelimit-reset",
  "access-control-allow-origin",
  "access-control-expose-headers",
  "vary",
  "date",
]);

export function responseHeadersToCopy(h: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !DROPPED_RESPONSE_HEADERS.has(k.toLowerCase())) out[k] = v;
  return out;
}

export interface EngineTls {
  /** PEM CA certificates trusted for an https engine (SVC_GATE_ENGINE_CA_PATH), in place of the system's. */
  readonly ca?: string;
}

export class UndiciEngineClient implements EngineClient {
  private readonly pool: Pool;
  constructor(
    private readonly engineUrl: string,
    private readonly serviceKey: string,
    private readonly timeoutMs: number,
    connections = 128,
    tls: EngineTls = {},
  ) {
    this.pool = new Pool(engineUrl, {
      connections,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      connectTimeout: Math.min(timeoutMs, 10_000),
      ...(tls.ca !== undefined ? { connect: { ca: tls.ca } } : {}),
    });
  }

  async forward(r: ForwardRequest): Promise<EngineResponse> {
    const headers: Record<string, string> = {
      ...r.headers,
      authorization: `Bearer ${this.serviceKey}`,
      "x-svc-tenant": r.tenantId,
      "x-request-id": r.requestId,
    };
    if (Buffer.isBuffer(r.body)) headers["content-length"] = String(r.body.length);
    let res: Dispatcher.ResponseData;
    try {
      res = await this.pool.request({ method: r.method as Dispatcher.HttpMethod, path: r.path, headers, body: r.body });
    } catch (e) {
      // The request body's own failure (for example the upload limit while streaming) is the
      // answer, not the engine's reachability.
      if (e instanceof SvcError) throw e;
      throw new EngineFailure(failurePhase(e));
    }
    return { status: res.statusCode, headers: res.headers as Record<string, string | string[]>, body: res.body };
  }

  async ping(): Promise<boolean> {
    return (await this.probe()).reachable;
  }

  async probe(): Promise<EngineProbe> {
    try {
      const res = await this.pool.request({ method: "GET", path: "/health", headersTimeout: 1000, bodyTimeout: 1000, signal: AbortSignal.timeout(1000) });
      return await readEngineHealth(res);
    } catch {
      return { reachable: false, store_connected: false };
    }
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}
