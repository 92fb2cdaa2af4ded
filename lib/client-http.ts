// The HTTP exchange under createClient and the CLI's admin calls, on node:http (node:https for
// an https address, loaded only then). A process that makes one small request (`svc get`)
// pays for node:http alone: undici, which this replaced, took about 120 ms to load.
// Keep-alive sockets are pooled per client; an idle one is closed after 4 s (before Node
// servers' 5 s), and a request whose reused socket was closed under it is sent again once.
import type { Agent, IncomingMessage, ClientRequest } from "node:http";

export interface HttpAnswer {
  status: number;
  /** Lower-cased names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  body: Buffer;
}

export interface HttpExchange {
  method: string;
  headers: Record<string, string>;
  body?: Buffer | string;
  /** Longest silence of the socket (waiting for the answer, or between its chunks), in ms. */
  timeoutMs: number;
  /** The body is written in chunks of this size and `onUpload` called after each (default: one write). */
  uploadChunk?: number;
  onUpload?: (done: number, total: number) => void;
  /** Called as the answer arrives when it announces at least `downloadFrom` bytes. */
  onDownload?: (done: number, total: number) => void;
  downloadFrom?: number;
}

/** A transport failure: `code` is the system's (ECONNREFUSED, EPIPE, ECONNRESET…) or ETIMEDOUT. */
export class HttpTransportError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
    this.name = "HttpTransportError";
  }
}

/** Socket pools of one client: created on first use of each protocol, destroyed by `close`. */
export class HttpPool {
  #agents = new Map<string, Agent>();

  readonly #ca: string | Buffer | Array<string | Buffer> | undefined;

  /** `ca`: the CAs an https agent trusts, in place of Node's roots (node:tls's option). */
  constructor(tls: { ca?: string | Uint8Array | Array<string | Uint8Array> } = {}) {
    const one = (c: string | Uint8Array): string | Buffer => (typeof c === "string" ? c : Buffer.from(c.buffer, c.byteOffset, c.byteLength));
    this.#ca = tls.ca === undefined ? undefined : Array.isArray(tls.ca) ? tls.ca.map(one) : one(tls.ca);
  }

  async agentFor(url: URL): Promise<{ agent: Agent; request: typeof import("node:http").request }> {
    const https = url.protocol === "https:";
    const mod = https ? await import("node:https") : await import("node:http");
    let agent = this.#agents.get(url.protocol);
    if (!agent) {
      agent = new mod.Agent({ keepAlive: true, timeout: 4_000, scheduling: "lifo", ...(https && this.#ca !== undefined ? { ca: this.#ca } : {}) });
      this.#agents.set(url.protocol, agent);
    }
    return { agent, request: mod.request as typeof import("node:http").request };
  }

  close(): void {
    for (const a of this.#agents.values()) a.destroy();
    this.#agents.clear();
  }
}

export function headerMap(h: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : v;
  return out;
}

/** One request and its whole answer; transport failures reject with HttpTransportError. */
export async function exchange(pool: HttpPool, url: URL, x: HttpExchange): Promise<HttpAnswer> {
  try {
    return await exchangeOnce(pool, url, x);
  } catch (e) {
    // a kept-alive socket the server closed as it was reused: nothing reached the server
    if (e instanceof StaleSocket) return exchangeOnce(pool, url, x);
    throw e;
  }
}

class StaleSocket extends Error {}

async function exchangeOnce(pool: HttpPool, url: URL, x: HttpExchange): Promise<HttpAnswer> {
  const { agent, request } = await pool.agentFor(url);
  const body = typeof x.body === "string" ? Buffer.from(x.body) : x.body;
  const headers = { ...x.headers };
  if (body !== undefined) headers["content-length"] = String(body.length);
  return new Promise<HttpAnswer>((resolve, reject) => {
    let settled = false;
    let answered = false;
    const fail = (e: Error) => {
      if (settled) return;
      settled = true;
      req.destroy();
      reject(e);
    };
    const req: ClientRequest = request(url, { method: x.method, headers, agent });
    req.setTimeout(x.timeoutMs, () => fail(new HttpTransportError(`No answer within ${x.timeoutMs} ms.`, "ETIMEDOUT")));
    req.on("error", (e: NodeJS.ErrnoException) => {
      if (answered) return; // the answer is being read; its own stream reports its end
      const code = e.code ?? "ECONNRESET";
      if (req.reusedSocket && code === "ECONNRESET" && !settled) {
        settled = true;
        reject(new StaleSocket());
        return;
      }
      fail(new HttpTransportError(e.message, code));
    });
    req.on("response", (res: IncomingMessage) => {
      answered = true;
      readAnswer(res, x).then((a) => {
        if (settled) return;
        settled = true;
        // answered before the whole body was sent (a refusal by size): this socket is done
        if (body !== undefined && !req.writableFinished) req.destroy();
        resolve(a);
      }, fail);
    });
    if (body === undefined || body.length === 0) {
      req.end(body);
      return;
    }
    const step = x.uploadChunk ?? body.length;
    let at = 0;
    const pump = () => {
      while (at < body.length && !settled && !answered) {
        const end = Math.min(body.length, at + step);
        const more = req.write(body.subarray(at, end));
        at = end;
        x.onUpload?.(at, body.length);
        if (!more && at < body.length) {
          req.once("drain", pump);
          return;
        }
      }
      if (at >= body.length) req.end();
    };
    pump();
  });
}

function readAnswer(res: IncomingMessage, x: HttpExchange): Promise<HttpAnswer> {
  return new Promise<HttpAnswer>((resolve, reject) => {
    const total = Number(res.headers["content-length"] ?? -1);
    const report = x.onDownload && total >= (x.downloadFrom ?? 0) ? x.onDownload : undefined;
    const chunks: Buffer[] = [];
    let n = 0;
    res.on("data", (c: Buffer) => {
      n += c.length;
      if (total >= 0 && n > total) {
        res.destroy(new HttpTransportError("The service answered more bytes than its Content-Length announced.", "EPROTO"));
        return;
      }
      chunks.push(c);
      report?.(n, total);
    });
    res.on("end", () =>
      resolve({ status: res.statusCode ?? 0, headers: headerMap(res.headers), body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, n) }),
    );
    res.on("error", (e: NodeJS.ErrnoException) => reject(e instanceof HttpTransportError ? e : new HttpTransportError(e.message, e.code ?? "ECONNRESET")));
    res.on("aborted", () => reject(new HttpTransportError("The answer was cut off.", "ECONNRESET")));
  });
}
