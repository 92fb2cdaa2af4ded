// Forwarding (api.md step 7): an undici Pool to the engine. The gateway adds the service key,
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
}

export interface EngineResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: Readable;
}

export interface EngineClient {
  /** Sends the request; EngineUnreachableError when the engine cannot be reached or times out. */
  forward(r: ForwardRequest): Promise<EngineResponse>;
  /** Whether the engine answers GET /health with 200 within a second. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
}

// Client request headers that reach the engine (allow-list).
// Idempotency-Key: the engine stores a keyed write's answer and replays it for a repeat.
export const FORWARDED_REQUEST_HEADERS = ["content-type", "content-length", "accept", "x-svc-metadata", "idempotency-key"] as const;

// Engine response headers that must not reach the client as they are.
const DROPPED_RESPONSE_HEADERS = new Set([
  "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authenticate",
  "x-request-id", "x-svc-cus", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
  "access-control-allow-origin", "access-control-expose-headers", "vary", "date",
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
      throw new EngineUnreachableError("The storage engine is unreachable or did not answer in time.");
    }
    return { status: res.statusCode, headers: res.headers as Record<string, string | string[]>, body: res.body };
  }

  async ping(): Promise<boolean> {
    try {
      const res = await this.pool.request({ method: "GET", path: "/health", headersTimeout: 1000, bodyTimeout: 1000, signal: AbortSignal.timeout(1000) });
      await res.body.dump();
      return res.statusCode === 200;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}
