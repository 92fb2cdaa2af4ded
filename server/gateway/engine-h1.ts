// The gateway's own HTTP/1.1 connections to a plain-http engine, for requests whose body is
// already in memory (none, or JSON bytes read whole): one write per request (its head and body
// together), the answer's framing read here (Content-Length, chunked, or until the connection
// closes), kept-alive connections reused while the engine's Keep-Alive says they are open. Per
// request it costs a third less of the gateway's CPU than undici's Pool, whose queue, timers and
// parser serve every kind of request; streamed uploads and https engines still go through undici
// (proxy.ts). The answer of a Content-Length of at most `smallBytes` comes whole; a larger,
// chunked or unsized one streams, paced by its reader (the connection is paused while the
// reader is full), and a reader that drops it closes that connection.
import { connect, type Socket } from "node:net";
import { Readable } from "node:stream";
import { socketPathOf } from "../http/unix-socket.js";

/** Where an exchange failed: no connection made, the connection failed after the request may have gone, or no answer in time. */
export type H1Phase = "connect" | "exchange" | "timeout";

export interface H1Response {
  status: number;
  headers: Record<string, string | string[]>;
  body: Readable | null;
  bytes?: Buffer;
}

export interface H1Options {
  /** Most connections open at once; further requests wait for one to be free. */
  connections: number;
  /** The longest wait for a connection, for the answer's headers, and between two parts of its body. */
  timeoutMs: number;
  /** Answers with a Content-Length up to this are read whole before they are returned. */
  smallBytes: number;
  /** The error a failed exchange is rejected with (or its streamed body destroyed with). */
  failure: (phase: H1Phase) => Error;
}

/** The most bytes of an answer's status line and headers. */
const MAX_HEAD_BYTES = 128 * 1024;
/** An idle connection is not reused this long before the engine's keep-alive time ends. */
const KEEP_ALIVE_MARGIN_MS = 1000;
/** The keep-alive time assumed when the engine names none (Node's own server: 5 s). */
const DEFAULT_KEEP_ALIVE_MS = 4000;
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: |$)/;
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const UNSAFE = /[\r\n\0]/;
const DIGITS = /^\d{1,15}$/;

/** One request's part of the exchange, from its write to the end of its answer. */
interface Pending {
  head: string;
  body: Buffer | null;
  method: string;
  replayable: boolean;
  resolve: (r: H1Response) => void;
  reject: (e: Error) => void;
  /** Sent once more on a new connection (a kept-alive one closed under it); at most once. */
  retried: boolean;
}

const enum Framing {
  None,
  Length,
  Chunked,
  UntilClose,
}

const enum Chunk {
  Size,
  Data,
  DataEnd,
  Trailer,
}

/** One connection to the engine and the answer it is reading. */
class Conn {
  pending: Pending | null = null;
  /** Bytes of an answer's head not yet complete. */
  partial: Buffer | null = null;
  /** The answer being read: its status and headers are known. */
  status = 0;
  headers: Record<string, string | string[]> | null = null;
  framing = Framing.None;
  /** Content-Length: bytes still to come; chunked: bytes left of the current chunk. */
  left = 0;
  chunk = Chunk.Size;
  /** A small answer's parts, until it is complete. */
  parts: Buffer[] | null = null;
  got = 0;
  /** A streamed answer, returned with the response. */
  stream: Readable | null = null;
  /** Whether the connection may carry another request after this answer. */
  reusable = true;
  keepAliveMs = DEFAULT_KEEP_ALIVE_MS;
  idleUntil = 0;
  /** Requests this connection has carried (a failure on a reused one may be a keep-alive race). */
  served = 0;
  /** Bytes of the current answer received (none: the request may be sent again). */
  received = 0;
  connected = false;
  dead = false;
  readonly timer: NodeJS.Timeout;

  constructor(
    readonly sock: Socket,
    onTimeout: () => void,
    timeoutMs: number,
  ) {
    this.timer = setTimeout(onTimeout, timeoutMs);
    this.timer.unref();
  }

  reset(): void {
    this.partial = null;
    this.status = 0;
    this.headers = null;
    this.framing = Framing.None;
    this.left = 0;
    this.chunk = Chunk.Size;
    this.parts = null;
    this.got = 0;
    this.stream = null;
    this.received = 0;
  }
}

/** An answer the engine framed wrongly: the connection is closed and the exchange fails. */
class Malformed extends Error {}

// header names as sent, checked and lower-cased once: an engine sends the same few every time
const NAMES = new Map<string, string>();
const MAX_NAMES = 256;

/** A header's name in lower case; Malformed when it is not an HTTP token. */
function headerName(raw: string): string {
  const known = NAMES.get(raw);
  if (known !== undefined) return known;
  if (!TOKEN.test(raw)) throw new Malformed();
  const name = raw.toLowerCase();
  if (NAMES.size < MAX_NAMES) NAMES.set(raw, name);
  return name;
}

export class H1Client {
  readonly #host: string;
  readonly #port: number;
  /** The engine's Unix socket (a unix: URL), else null (host and port). */
  readonly #path: string | null;
  readonly #idle: Conn[] = [];
  readonly #waiting: Pending[] = [];
  #open = 0;
  #closed = false;
  #drained: (() => void) | null = null;

  constructor(
    url: URL,
    private readonly opts: H1Options,
  ) {
    this.#path = socketPathOf(url.href);
    this.#host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    this.#port = Number(url.port || 80);
  }

  /** Connections open now (in use or idle). */
  get open(): number {
    return this.#open;
  }

  /**
   * Sends a request. `head` is the request's head without its final empty line, as built by
   * requestHead; `body` goes after it in the same write.
   */
  request(method: string, head: string, body: Buffer | null, replayable: boolean): Promise<H1Response> {
    return new Promise((resolve, reject) => {
      this.#dispatch({ head, body, method, replayable, resolve, reject, retried: false });
    });
  }

  #dispatch(p: Pending): void {
    if (this.#closed) return p.reject(this.opts.failure("connect"));
    const now = Date.now();
    for (let c = this.#idle.pop(); c !== undefined; c = this.#idle.pop()) {
      if (!c.dead && now < c.idleUntil) return this.#send(c, p);
      this.#destroy(c);
    }
    if (this.#open < this.opts.connections) return this.#send(this.#connect(), p);
    this.#waiting.push(p);
  }

  #connect(): Conn {
    const sock = this.#path !== null ? connect({ path: this.#path }) : connect({ host: this.#host, port: this.#port, noDelay: true });
    const c: Conn = new Conn(sock, () => this.#timedOut(c), this.opts.timeoutMs);
    this.#open++;
    sock.once("connect", () => (c.connected = true));
    sock.on("data", (d: Buffer) => this.#data(c, d));
    sock.on("end", () => this.#ended(c));
    sock.on("error", () => this.#lost(c));
    sock.on("close", () => this.#lost(c));
    return c;
  }

  #send(c: Conn, p: Pending): void {
    c.pending = p;
    c.reset();
    c.timer.refresh();
    const head = p.head + "\r\n";
    if (p.body === null || p.body.length === 0) c.sock.write(head, "latin1");
    else {
      c.sock.cork();
      c.sock.write(head, "latin1");
      c.sock.write(p.body);
      c.sock.uncork();
    }
  }

  #data(c: Conn, d: Buffer): void {
    if (c.pending === null) {
      // bytes nobody asked for: the connection cannot be trusted with another request
      this.#destroy(c);
      return;
    }
    c.received += d.length;
    c.timer.refresh();
    try {
      this.#feed(c, d);
    } catch {
      this.#fail(c, "exchange");
    }
  }

  /** Reads `d` into the current answer: its head, then its body by its framing. */
  #feed(c: Conn, d: Buffer): void {
    let off = 0;
    while (c.headers === null) {
      const buf = c.partial === null ? d : Buffer.concat([c.partial, d]);
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) {
        if (buf.length > MAX_HEAD_BYTES) throw new Malformed();
        c.partial = buf;
        return;
      }
      c.partial = null;
      off = end + 4;
      if (!this.#head(c, buf.toString("latin1", 0, end))) {
        // an interim answer (1xx): the final one follows
        d = buf.subarray(off);
        off = 0;
        if (d.length === 0) return;
        continue;
      }
      d = buf;
    }
    this.#body(c, off === 0 ? d : d.subarray(off));
  }

  /** Parses an answer's head; false for an interim (1xx) one. Sets up how its body is read. */
  #head(c: Conn, text: string): boolean {
    let eol = text.indexOf("\r\n");
    if (eol < 0) eol = text.length;
    const m = STATUS_LINE.exec(text.slice(0, eol));
    if (!m) throw new Malformed();
    const status = Number(m[2]);
    if (status < 200) {
      if (status === 101) throw new Malformed();
      return false;
    }
    // no prototype: a header named like one of Object's members ("constructor", "__proto__") is a header
    const headers = Object.create(null) as Record<string, string | string[]>;
    for (let at = eol + 2; at < text.length; at = eol + 2) {
      eol = text.indexOf("\r\n", at);
      if (eol < 0) eol = text.length;
      const colon = text.indexOf(":", at);
      if (colon <= at || colon > eol) throw new Malformed();
      const name = headerName(text.slice(at, colon));
      const value = text.slice(colon + 1, eol).trim();
      const was = headers[name];
      if (was === undefined) headers[name] = value;
      else if (typeof was === "string") headers[name] = [was, value];
      else was.push(value);
    }
    c.status = status;
    c.headers = headers;
    c.reusable = m[1] === "1";
    const conn = headers.connection;
    if (conn !== undefined) {
      const v = (typeof conn === "string" ? conn : conn.join(",")).toLowerCase();
      if (v.includes("close")) c.reusable = false;
      else if (v.includes("keep-alive")) c.reusable = true;
    }
    const ka = headers["keep-alive"];
    const t = typeof ka === "string" ? /timeout=(\d+)/i.exec(ka) : null;
    c.keepAliveMs = t ? Number(t[1]) * 1000 - KEEP_ALIVE_MARGIN_MS : DEFAULT_KEEP_ALIVE_MS;
    const te = headers["transfer-encoding"];
    const cl = headers["content-length"];
    if (c.pending!.method === "HEAD" || status === 204 || status === 304) c.framing = Framing.None;
    else if (te !== undefined) {
      const last = (typeof te === "string" ? te : te.join(",")).split(",").pop()!.trim().toLowerCase();
      if (last !== "chunked") throw new Malformed();
      // both framings named: the length is not trusted, nor the connection after it
      if (cl !== undefined) c.reusable = false;
      c.framing = Framing.Chunked;
      c.chunk = Chunk.Size;
    } else if (cl !== undefined) {
      if (typeof cl !== "string" || !DIGITS.test(cl)) throw new Malformed();
      c.framing = Framing.Length;
      c.left = Number(cl);
    } else {
      c.framing = Framing.UntilClose;
      c.reusable = false;
    }
    if (c.framing === Framing.Length && c.left <= this.opts.smallBytes) c.parts = [];
    else if (c.framing !== Framing.None) this.#startStream(c);
    return true;
  }

  /** Returns the response with a body that streams, paced by its reader. */
  #startStream(c: Conn): void {
    const p = c.pending!;
    const stream = new Readable({
      read: () => {
        if (c.stream === stream && !c.dead) c.sock.resume();
      },
      // the reader gave up (the client went away): the connection is not kept
      destroy: (err, cb) => {
        if (c.stream === stream && c.pending === p) this.#destroy(c);
        cb(err);
      },
    });
    // a failure before the reader is attached must not go unheard (an unhandled 'error')
    stream.on("error", () => undefined);
    c.stream = stream;
    p.resolve({ status: c.status, headers: c.headers!, body: stream });
  }

  /** Body bytes of the current answer. */
  #body(c: Conn, d: Buffer): void {
    switch (c.framing) {
      case Framing.None:
        if (d.length > 0) c.reusable = false;
        return this.#complete(c);
      case Framing.UntilClose:
        if (d.length > 0) this.#emit(c, d);
        return;
      case Framing.Length: {
        if (d.length > c.left) {
          // more than the answer holds: the rest is not an answer to anything
          c.reusable = false;
          d = d.subarray(0, c.left);
        }
        c.left -= d.length;
        if (d.length > 0) this.#emit(c, d);
        if (c.left === 0) this.#complete(c);
        return;
      }
      case Framing.Chunked:
        return this.#chunked(c, d);
    }
  }

  /** Decodes chunked framing; chunk sizes and trailers are read a line at a time. */
  #chunked(c: Conn, d: Buffer): void {
    let off = 0;
    while (off < d.length || c.chunk === Chunk.Data) {
      if (c.chunk === Chunk.Data) {
        if (c.left === 0) {
          c.chunk = Chunk.DataEnd;
          continue;
        }
        if (off >= d.length) return;
        const n = Math.min(c.left, d.length - off);
        this.#emit(c, d.subarray(off, off + n));
        c.left -= n;
        off += n;
        continue;
      }
      // a line: a chunk's size, the end of its data, or a trailer
      const buf = c.partial === null ? d.subarray(off) : Buffer.concat([c.partial, d.subarray(off)]);
      const eol = buf.indexOf("\r\n");
      if (eol < 0) {
        if (buf.length > MAX_HEAD_BYTES) throw new Malformed();
        c.partial = buf;
        return;
      }
      const line = buf.toString("latin1", 0, eol);
      const used = eol + 2 - (c.partial?.length ?? 0);
      c.partial = null;
      off += used;
      if (c.chunk === Chunk.DataEnd) {
        if (line !== "") throw new Malformed();
        c.chunk = Chunk.Size;
      } else if (c.chunk === Chunk.Size) {
        const size = line.split(";")[0]!.trim();
        if (!/^[0-9a-fA-F]{1,12}$/.test(size)) throw new Malformed();
        c.left = parseInt(size, 16);
        c.chunk = c.left === 0 ? Chunk.Trailer : Chunk.Data;
      } else if (line === "") {
        if (off < d.length) c.reusable = false;
        return this.#complete(c);
      }
    }
  }

  #emit(c: Conn, d: Buffer): void {
    if (c.parts !== null) {
      c.parts.push(d);
      c.got += d.length;
    } else if (c.stream !== null && !c.stream.push(d)) c.sock.pause();
  }

  /** The current answer is complete: returned (small) or ended (streamed); the connection freed. */
  #complete(c: Conn): void {
    const p = c.pending!;
    c.pending = null;
    c.served++;
    const { status, headers, parts, stream } = c;
    if (stream !== null) {
      c.stream = null;
      stream.push(null);
    } else
      p.resolve({
        status,
        headers: headers!,
        body: null,
        bytes: parts === null ? Buffer.alloc(0) : parts.length === 1 ? parts[0]! : Buffer.concat(parts, c.got),
      });
    c.reset();
    this.#release(c);
  }

  #release(c: Conn): void {
    if (!c.reusable || this.#closed || c.dead) return this.#destroy(c);
    c.sock.resume();
    const next = this.#waiting.shift();
    if (next !== undefined) return this.#send(c, next);
    c.idleUntil = Date.now() + c.keepAliveMs;
    this.#idle.push(c);
  }

  /** The engine ended its side: the answer read until then is whole only when unsized. */
  #ended(c: Conn): void {
    if (c.pending !== null && c.headers !== null && c.framing === Framing.UntilClose) {
      c.reusable = false;
      this.#complete(c);
      return;
    }
    this.#lost(c);
  }

  /** The connection failed or closed: a request on it fails (or goes once more on another). */
  #lost(c: Conn): void {
    if (c.pending !== null) {
      const p = c.pending;
      // a kept-alive connection the engine closed just as this request went out: nothing of
      // an answer came, and a request that may be sent again goes on a new connection
      if (c.served > 0 && c.received === 0 && p.replayable && !p.retried) {
        c.pending = null;
        p.retried = true;
        this.#destroy(c);
        this.#dispatch(p);
        return;
      }
      this.#fail(c, c.connected ? "exchange" : "connect");
      return;
    }
    this.#destroy(c);
  }

  #timedOut(c: Conn): void {
    if (c.pending === null || c.dead) return;
    // a streamed answer waiting for its reader is not late
    if (c.stream !== null && c.sock.isPaused()) return void c.timer.refresh();
    this.#fail(c, c.connected ? "timeout" : "connect");
  }

  /** The current request fails with `phase`; the connection is closed. */
  #fail(c: Conn, phase: H1Phase): void {
    const p = c.pending;
    const stream = c.stream;
    c.pending = null;
    c.stream = null;
    this.#destroy(c);
    if (p === null) return;
    if (stream !== null) stream.destroy(this.opts.failure(phase));
    else p.reject(this.opts.failure(phase));
  }

  #destroy(c: Conn): void {
    if (c.dead) return;
    c.dead = true;
    this.#open--;
    clearTimeout(c.timer);
    c.sock.destroy();
    const i = this.#idle.indexOf(c);
    if (i >= 0) this.#idle.splice(i, 1);
    if (c.pending !== null) this.#fail(c, "exchange");
    // a request waiting for a connection gets a new one
    const next = this.#closed ? undefined : this.#waiting.shift();
    if (next !== undefined) this.#send(this.#connect(), next);
    if (this.#open === 0) this.#drained?.();
  }

  /** Closes idle connections and, as their answers end, the others; waiting requests fail. */
  close(): Promise<void> {
    this.#closed = true;
    for (const p of this.#waiting.splice(0)) p.reject(this.opts.failure("connect"));
    for (const c of this.#idle.splice(0)) this.#destroy(c);
    if (this.#open === 0) return Promise.resolve();
    return new Promise((resolve) => (this.#drained = resolve));
  }
}

/**
 * A request's head without its final empty line: the request line, Host, then `headers` (name,
 * value); null when the path or a value holds a line break or NUL (never sent).
 */
export function requestHead(method: string, path: string, host: string, headers: readonly string[]): string | null {
  let head = `${method} ${path} HTTP/1.1\r\nhost: ${host}\r\n`;
  for (let i = 0; i < headers.length; i += 2) head += `${headers[i]}: ${headers[i + 1]}\r\n`;
  return UNSAFE.test(path) || headers.some((v) => UNSAFE.test(v)) || path.includes(" ") ? null : head;
}
