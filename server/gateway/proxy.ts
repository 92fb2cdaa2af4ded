// Forwarding (step 7 of the order of checks, docs/api.md): an undici Pool to the engine. The gateway adds the service key,
// X-SVC-Tenant and X-Request-Id; a client's own X-SVC-Tenant and credentials never pass. JSON
// bodies go as the bytes already read (never re-serialised); octet-stream bodies are streamed,
// and so are answers larger than SMALL_BODY_BYTES (smaller ones are read whole: Exchange).
import { Pool, util as undiciUtil, type Dispatcher } from "undici";
import { Readable } from "node:stream";
import { EngineUnreachableError, SvcError } from "../../lib/errors.js";
import { H1Client, requestHead } from "./engine-h1.js";
import { socketPathOf } from "../http/unix-socket.js";

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
  /** The body, streaming; null when `bytes` holds it whole. */
  body: Readable | null;
  /** A body of a Content-Length of at most SMALL_BODY_BYTES, always read whole before the response is returned. */
  bytes?: Buffer;
}

/** Engine bodies up to this size (a Content-Length) are read whole before the response is returned. */
export const SMALL_BODY_BYTES = 64 * 1024;

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

/** The engine's response headers that reach the client, as name, value pairs appended to `out`. */
export function responseHeadersToCopy(h: Record<string, string | string[] | undefined>, out: (string | string[])[] = []): (string | string[])[] {
  for (const k in h) {
    const v = h[k];
    if (v !== undefined && Object.hasOwn(h, k) && !DROPPED_RESPONSE_HEADERS.has(k.toLowerCase())) out.push(k, v);
  }
  return out;
}

/**
 * One request's exchange with the engine, on undici's dispatch interface (no per-request stream,
 * async resource or header copy that its request() makes): a small body is gathered into one
 * Buffer and the response returned once it is complete, which frees the engine connection
 * before the answer is written; a larger one streams, paced by its reader.
 */
class Exchange implements Dispatcher.DispatchHandler {
  #abort: ((err?: Error) => void) | null = null;
  #status = 0;
  #headers: Record<string, string | string[]> = {};
  /** A small answer's chunks, until it is complete. */
  #parts: Buffer[] | null = null;
  /** A larger answer, streaming: the response has been returned with it. */
  #body: Readable | null = null;

  constructor(
    private readonly resolve: (r: EngineResponse) => void,
    private readonly reject: (e: unknown) => void,
  ) {}

  onConnect(abort: (err?: Error) => void): void {
    this.#abort = abort;
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (status < 200) return true;
    this.#status = status;
    this.#headers = undiciUtil.parseHeaders(rawHeaders) as Record<string, string | string[]>;
    const len = this.#headers["content-length"];
    if (typeof len === "string" && Number(len) <= SMALL_BODY_BYTES) {
      this.#parts = [];
      return true;
    }
    const abort = this.#abort;
    this.#body = new Readable({
      read: () => resume(),
      // the reader gave up (the client went away): the engine's connection is not kept
      destroy: (err, cb) => {
        abort?.(err ?? new Error("The engine's answer was dropped."));
        cb(err);
      },
    });
    // a failure before the reader is attached must not go unheard (an unhandled 'error')
    this.#body.on("error", () => undefined);
    this.resolve({ status, headers: this.#headers, body: this.#body });
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.#parts === null) return this.#body!.push(chunk);
    this.#parts.push(chunk);
    return true;
  }

  onComplete(): void {
    if (this.#parts === null) return void this.#body?.push(null);
    // undici has held the body to its Content-Length: a shorter one is an error (onError)
    const parts = this.#parts;
    this.resolve({ status: this.#status, headers: this.#headers, body: null, bytes: parts.length === 1 ? parts[0]! : Buffer.concat(parts) });
  }

  onError(err: Error): void {
    if (this.#body !== null) return void this.#body.destroy(err);
    // The request body's own failure (for example the upload limit while streaming) is the
    // answer, not the engine's reachability.
    this.reject(err instanceof SvcError ? err : new EngineFailure(failurePhase(err)));
  }
}

export interface EngineTls {
  /** PEM CA certificates trusted for an https engine (SVC_GATE_ENGINE_CA_PATH), in place of the system's. */
  readonly ca?: string;
}

/**
 * An undici Pool to the engine at `url`: an http(s) origin (https trusting `tls.ca` when given),
 * or unix:PATH for an engine on this machine's Unix socket (the same requests, Host: localhost).
 */
export function enginePool(url: string, tls: EngineTls, opts: Pool.Options): Pool {
  const socketPath = socketPathOf(url);
  const connect = socketPath !== null ? { socketPath } : tls.ca !== undefined ? { ca: tls.ca } : undefined;
  return new Pool(socketPath === null ? url : "http://localhost", { ...opts, ...(connect ? { connect } : {}) });
}

/**
 * The client of one engine. A request whose body is in memory (none, or JSON bytes) to a
 * plain-http engine goes on the gateway's own connections (engine-h1.ts), whose per-request
 * cost is a third below undici's; a streamed upload, and every request to an https engine, goes
 * through an undici Pool. Each keeps up to `connections` connections to the engine.
 */
export class UndiciEngineClient implements EngineClient {
  private readonly pool: Pool;
  private readonly authorization: string;
  private readonly h1: H1Client | null;
  private readonly host: string;
  constructor(
    private readonly engineUrl: string,
    private readonly serviceKey: string,
    private readonly timeoutMs: number,
    connections = 128,
    tls: EngineTls = {},
  ) {
    this.authorization = `Bearer ${serviceKey}`;
    this.pool = enginePool(engineUrl, tls, {
      connections,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      connectTimeout: Math.min(timeoutMs, 10_000),
    });
    const socketPath = socketPathOf(engineUrl);
    const url = new URL(engineUrl);
    this.host = socketPath === null ? url.host : "localhost";
    this.h1 =
      url.protocol === "http:" || socketPath !== null
        ? new H1Client(url, { connections, timeoutMs, smallBytes: SMALL_BODY_BYTES, failure: (phase) => new EngineFailure(phase) })
        : null;
  }

  forward(r: ForwardRequest): Promise<EngineResponse> {
    if (this.h1 !== null && (r.body === null || Buffer.isBuffer(r.body))) {
      const head = requestHead(r.method, r.path, this.host, this.#headerList(r));
      if (head !== null) return this.h1.request(r.method, head, r.body, r.replayable === true);
    }
    const headers: Record<string, string> = {
      ...r.headers,
      authorization: this.authorization,
      "x-svc-tenant": r.tenantId,
      "x-request-id": r.requestId,
    };
    if (Buffer.isBuffer(r.body)) headers["content-length"] = String(r.body.length);
    return new Promise((resolve, reject) => {
      this.pool.dispatch({ method: r.method as Dispatcher.HttpMethod, path: r.path, headers, body: r.body }, new Exchange(resolve, reject));
    });
  }

  /** The request's headers for the engine as name, value pairs: the client's (no framing ones), ours, the body's length. */
  #headerList(r: ForwardRequest): string[] {
    const list = ["authorization", this.authorization, "x-svc-tenant", r.tenantId, "x-request-id", r.requestId];
    for (const name in r.headers) if (name !== "content-length" && name !== "transfer-encoding" && name !== "host") list.push(name, r.headers[name]!);
    if (r.body !== null) list.push("content-length", String((r.body as Buffer).length));
    return list;
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
    await Promise.all([this.pool.close(), this.h1?.close()]);
  }
}
