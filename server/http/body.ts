// Reading request bodies within a size limit and the memory budget, and the one rule for bodies
// sent where none is taken (GET, HEAD, DELETE), shared by the engine and the gateway.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { PayloadTooLargeError, UnsupportedMediaTypeError, ValidationError, SvcError } from "../../lib/errors.js";
import type { Reservation } from "./memory-budget.js";
import { joinPaced } from "../../lib/store/pace.js";
import { SlowBodyError, type BodyRate } from "./body-guard.js";
import { pacedBody, paceBody, unpaceBody } from "./body-pace.js";
import { continueOwed } from "./expect-continue.js";
import { limitText } from "./limits.js";

/** Bytes of a body sent with a GET, HEAD or DELETE that are read (and dropped) so that the 400 reaches the client. */
export const MAX_IGNORED_BODY_BYTES = 64 * 1024;

/** True when the request announces a body: chunked framing, or a Content-Length above 0. */
export function hasBody(req: IncomingMessage): boolean {
  if (req.headers["transfer-encoding"] !== undefined) return true;
  const len = req.headers["content-length"];
  return len !== undefined && len !== "0";
}

/** The Content-Length as a number, or null when there is none (chunked). Node has checked its syntax. */
function lengthOf(req: IncomingMessage): number | null {
  const len = req.headers["content-length"];
  return len === undefined ? null : Number(len);
}

/**
 * How a connection whose answer refused a body still arriving is closed: the rest is read and
 * dropped until the client closes its side, sends nothing for `idleMs`, has sent `maxBytes`
 * more, or `maxMs` have passed (lingerOnClose).
 */
export const LINGER = { idleMs: 2_000, maxMs: 10_000, maxBytes: 64 * 1024 * 1024 };

/**
 * Closes the connection of `res` gently once its `Connection: close` answer is written. Node
 * closes such a connection as soon as the answer is out; if the client is still sending a body,
 * the bytes left unread make the kernel reset the connection, and the reset can reach a client
 * that is still writing before it has read the answer (it then sees EPIPE or ECONNRESET instead
 * of the refusal). Here our side is ended after the answer and what the client still sends is
 * read and dropped (never held), within LINGER, before the connection is closed.
 */
export function lingerOnClose(res: ServerResponse): void {
  const sock = res.socket;
  const req = res.req as IncomingMessage | undefined;
  if (!sock || !req || sock.destroyed) return;
  // Node's HTTP server calls the socket's destroySoon once a `Connection: close` answer is
  // finished, in its own listener of the answer's finish, which runs before the one below: a
  // connection that stays open after this answer gets Node's destroySoon back for later ones
  let used = false;
  res.once("finish", () => {
    if (!used) Reflect.deleteProperty(sock, "destroySoon");
  });
  sock.destroySoon = function lingeringClose(this: Socket): void {
    used = true;
    if (this.destroyed) return;
    let read = 0;
    const close = () => {
      clearTimeout(cap);
      clearTimeout(idle);
      req.off("data", onData);
      this.destroy();
    };
    const onData = (chunk: Buffer) => {
      read += chunk.byteLength;
      if (read > LINGER.maxBytes) close();
      else idle.refresh();
    };
    const cap = setTimeout(close, LINGER.maxMs).unref();
    const idle = setTimeout(close, LINGER.idleMs).unref();
    this.once("end", close);
    this.once("close", close);
    req.on("data", onData);
    req.resume();
    if (this.writable) this.end();
  };
}

/**
 * Whether a body's reading ended because it fell behind the minimum rate or its client left:
 * such a body is not waited for when its connection closes (no lingerOnClose).
 */
export function bodyStopped(e: unknown): boolean {
  return e instanceof SlowBodyError || (e instanceof SvcError && e.message.startsWith("The request was aborted"));
}

/**
 * Marks the response to close its connection: the unread rest of a refused body is not kept.
 * With `linger` (every refusal but one for a body's pace) the rest is read and dropped while
 * the connection closes, so that the client reads the answer rather than a reset (lingerOnClose).
 */
function closeAfter(res: ServerResponse | undefined, linger = true): void {
  if (!res || res.headersSent) return;
  res.setHeader("Connection", "close");
  if (linger) lingerOnClose(res);
}

export interface ReadBodyOptions {
  /** Largest body accepted (413 past it). */
  limit: number;
  /** The request's share of the memory budget, grown by `factor` bytes per body byte before the bytes are held. */
  reservation?: Reservation;
  /** Bytes of memory the request will hold per body byte (the body, its parsed form, its decoded payload); 1 by default. */
  factor?: number;
  /** The response, so that a refusal before the end of the body closes the connection. */
  res?: ServerResponse;
  /** The minimum rate the body must keep up after a grace time (400, SlowBodyError, past it). */
  rate?: BodyRate;
  /** The request's path (no query), so that a refusal by size names the limit that applies. */
  path?: string;
}

/**
 * Reads the whole body into one Buffer. Refused with 413 past `limit` (from Content-Length
 * before anything is read, else while reading), with 503 or 400 when the memory budget cannot
 * hold it (see MemoryBudget.take), 415 for a Content-Encoding other than identity, and 400 when
 * the client aborts.
 * @example const body = await readBody(req, { limit: 1 << 20, reservation, factor: 3, res });
 */
export function readBody(req: IncomingMessage, opts: ReadBodyOptions): Promise<Buffer> {
  const { limit, reservation, res } = opts;
  const factor = opts.factor ?? 1;
  const enc = req.headers["content-encoding"];
  if (enc !== undefined && enc.trim().toLowerCase() !== "identity") {
    closeAfter(res);
    return Promise.reject(new UnsupportedMediaTypeError("Content-Encoding is not supported; send the body uncompressed."));
  }
  const len = lengthOf(req);
  if (len !== null && len > limit) {
    closeAfter(res);
    return Promise.reject(new PayloadTooLargeError(`The request body of ${len} bytes is larger than ${limitText(limit, opts.path)}.`));
  }
  try {
    // a declared length is reserved whole before the first byte is read
    if (len !== null) reservation?.grow(Math.ceil(len * factor), "The request body");
  } catch (e) {
    closeAfter(res);
    return Promise.reject(e);
  }
  if (len === null || len === 0) return streamBody(req, opts, len);
  // A body that has arrived whole is taken as it is, without listeners or a timer. A small one
  // comes in the packet of its headers: one microtask on, the parser's callback for the headers
  // has returned and all of it is buffered (its Content-Length says no more body can follow).
  return Promise.resolve().then(() => {
    if (req.readableLength === len) {
      const b = req.read(len) as Buffer | null;
      if (b !== null && b.byteLength === len) return b;
    }
    return streamBody(req, opts, len);
  });
}

/** readBody's reading of a body as it arrives (`len`: its Content-Length, null when chunked), its checks made. */
function streamBody(req: IncomingMessage, opts: ReadBodyOptions, len: number | null): Promise<Buffer> {
  const { limit, reservation, res } = opts;
  const factor = opts.factor ?? 1;
  return new Promise<Buffer>((resolve, reject) => {
    // a declared length is read into one buffer; chunked bodies are gathered, then joined
    const whole = len !== null ? Buffer.allocUnsafe(len) : null;
    const parts: Buffer[] = [];
    let got = 0;
    let done = false;
    // A body that falls behind the minimum rate after the grace time, or pauses longer than the
    // grace time, ends the request: it would otherwise hold a connection and its memory.
    const t0 = Date.now();
    let last = t0;
    const rate = opts.rate;
    // a large body takes its turns with every other request (body-pace.ts)
    const paced = pacedBody(req);
    const ticker = rate
      ? setInterval(
          () => {
            const now = Date.now();
            if (now - last > rate.graceMs || (now - t0 > rate.graceMs && got < (rate.minBytesPerS * (now - t0)) / 1000)) finish(new SlowBodyError(rate));
          },
          Math.min(250, rate.graceMs),
        )
      : null;
    ticker?.unref();
    const finish = (err: unknown, body?: Buffer) => {
      if (done) return;
      done = true;
      if (ticker) clearInterval(ticker);
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("aborted", onAborted);
      req.off("error", onError);
      req.off("close", onClose);
      unpaceBody(req);
      if (err) {
        closeAfter(res, !bodyStopped(err));
        req.pause();
        reject(err instanceof Error ? err : new Error(String(err)));
      } else resolve(body!);
    };
    const onData = (chunk: Buffer) => {
      if (done) return;
      last = Date.now();
      const next = got + chunk.byteLength;
      if (next > limit || (whole && next > whole.byteLength))
        return finish(new PayloadTooLargeError(`The request body is larger than ${limitText(whole ? whole.byteLength : limit, opts.path)}.`));
      if (paced) paceBody(req, chunk.byteLength);
      if (whole) chunk.copy(whole, got);
      else {
        try {
          reservation?.grow(Math.ceil(chunk.byteLength * factor), "The request body");
        } catch (e) {
          return finish(e);
        }
        parts.push(chunk);
      }
      got = next;
    };
    const onEnd = () => {
      if (whole && got !== whole.byteLength) return finish(new ValidationError("The request body is shorter than its Content-Length."));
      if (whole || parts.length <= 1) return finish(null, whole ?? parts[0] ?? Buffer.alloc(0));
      // a chunked body: joined in slices, the event loop getting turns between them (the body
      // has ended: a close of the request meanwhile is not an abort)
      if (ticker) clearInterval(ticker);
      req.off("aborted", onAborted);
      req.off("error", onError);
      req.off("close", onClose);
      joinPaced(parts, got).then(
        (b) => finish(null, b),
        (e) => finish(e),
      );
    };
    const onAborted = () => finish(new SvcError("bad_request", "The request was aborted by the client."));
    const onError = () => finish(new SvcError("bad_request", "The request body could not be read."));
    const onClose = () => finish(new SvcError("bad_request", "The request was aborted by the client."));
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("aborted", onAborted);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

/**
 * The rule for a body sent with a method that takes none (GET, HEAD, DELETE): it is read and
 * dropped up to MAX_IGNORED_BODY_BYTES, then the request is refused with 400, so that the client
 * gets the answer rather than a reset; past that size the connection is closed after the 400.
 * Resolves when there is no body; rejects with the 400 otherwise.
 * @example await refuseBodyOfBodilessMethod(req, res);
 */
export async function refuseBodyOfBodilessMethod(req: IncomingMessage, res?: ServerResponse): Promise<void> {
  const m = req.method ?? "GET";
  if ((m !== "GET" && m !== "HEAD" && m !== "DELETE") || !hasBody(req)) return;
  const refusal = new ValidationError(`A ${m} request takes no body.`, "body");
  const len = lengthOf(req);
  // a client waiting for 100 Continue has sent no body: it is refused unread, as one too large is
  if ((res !== undefined && continueOwed(res)) || (len !== null && len > MAX_IGNORED_BODY_BYTES)) {
    closeAfter(res);
    throw refusal;
  }
  await new Promise<void>((resolve) => {
    let got = 0;
    const stop = () => {
      req.off("data", onData);
      req.off("end", stop);
      req.off("close", stop);
      req.off("error", stop);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      got += chunk.byteLength;
      if (got > MAX_IGNORED_BODY_BYTES) {
        closeAfter(res);
        req.pause();
        stop();
      }
    };
    req.on("data", onData);
    req.on("end", stop);
    req.on("close", stop);
    req.on("error", stop);
  });
  throw refusal;
}
