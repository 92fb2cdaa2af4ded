// The gateway's own Redis connection: RESP2 over one TCP (or TLS) socket, commands written to
// the socket at once, replies matched in order. The gateway sends a handful of plain commands
// and Lua scripts; for those node-redis cost ~150-215 us per round trip and ~75 us of CPU on
// the loaded CI machine against ~60 us and ~30 us here (it defers every write to a
// setImmediate and runs a generic command/reply pipeline). Tests and tools keep node-redis;
// both satisfy RedisLink.
//
// No offline queue: while the connection is down a command fails at once (the request gets an
// error answer) and the connection is re-established in the background (50 ms doubling to 2 s).
// A reply that does not come within commandTimeoutMs (a hung server) ends the connection: its
// commands fail with state_unavailable and the next connection is tried as after a drop.
import { connect as netConnect, isIP, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { StateUnavailableError } from "../../lib/errors.js";

/** What the gateway's Redis stores need: one command, its reply (errors reject). */
export interface RedisLink {
  sendCommand(args: string[]): Promise<unknown>;
  /**
   * The instant by which a command sent now is answered or has failed for its caller, in ms of
   * this process's monotonic clock (performance.timeOrigin + performance.now(), which a step
   * of the system clock does not move); absent or undefined when the link sets no bound.
   */
  answerBy?(): number | undefined;
}

/** An error reply from the server (its text is the message, e.g. `NOSCRIPT No matching script`). */
export class RedisReplyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RedisReplyError";
  }
}

/**
 * The connection is down, or the server did not answer in time (a command sent meanwhile fails
 * at once): answered as 503 state_unavailable with Retry-After wherever it reaches a response.
 */
export class RedisConnectionError extends StateUnavailableError {
  constructor(message: string) {
    super(message);
    this.name = "RedisConnectionError";
  }
}

/** An error reply that says the server cannot serve now (loading, failing over, a cluster slot down, out of memory): state_unavailable too. */
export class RedisUnavailableReplyError extends RedisConnectionError {
  constructor(message: string) {
    super("The gateway's Redis is not serving right now; retry later.");
    this.name = "RedisUnavailableReplyError";
    this.reply = message;
  }
  readonly reply: string;
}

const UNAVAILABLE_REPLY = /^(LOADING|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|BUSY|NOREPLICAS|MISCONF|OOM) /;

const INCOMPLETE = Symbol("incomplete");

/** Incremental RESP2 reader: feed chunks, get whole replies. Bulk strings decode as UTF-8. */
export class RespParser {
  private buf: Buffer | null = null;
  private off = 0;

  /** Calls `emit` for every reply completed by `chunk`, in order. Throws on a protocol error. */
  push(chunk: Buffer, emit: (reply: unknown) => void): void {
    this.buf = this.buf === null ? chunk : Buffer.concat([this.buf.subarray(this.off), chunk]);
    this.off = 0;
    for (;;) {
      const start = this.off;
      const v = this.next();
      if (v === INCOMPLETE) {
        this.off = start;
        break;
      }
      emit(v);
    }
    if (this.off >= this.buf.length) {
      this.buf = null;
      this.off = 0;
    }
  }

  private next(): unknown {
    const b = this.buf!;
    if (this.off >= b.length) return INCOMPLETE;
    const type = b[this.off]!;
    const eol = b.indexOf(13, this.off + 1);
    if (eol < 0 || eol + 1 >= b.length) return INCOMPLETE;
    const line = b.toString("utf8", this.off + 1, eol);
    this.off = eol + 2;
    switch (type) {
      case 0x2b: // +
        return line;
      case 0x2d: // -
        return UNAVAILABLE_REPLY.test(line) ? new RedisUnavailableReplyError(line) : new RedisReplyError(line);
      case 0x3a: // :
        return Number(line);
      case 0x24: {
        // $
        const n = Number(line);
        if (n < 0) return null;
        if (this.off + n + 2 > b.length) return INCOMPLETE;
        const s = b.toString("utf8", this.off, this.off + n);
        this.off += n + 2;
        return s;
      }
      case 0x2a: {
        // *
        const n = Number(line);
        if (n < 0) return null;
        const out: unknown[] = new Array(n);
        for (let i = 0; i < n; i++) {
          const v = this.next();
          if (v === INCOMPLETE) return INCOMPLETE;
          out[i] = v;
        }
        return out;
      }
      default:
        throw new Error("The Redis server sent a reply that is not RESP2.");
    }
  }
}

/** One command in RESP2 (an array of bulk strings). */
export function encodeCommand(args: readonly string[]): string {
  let s = `*${args.length}\r\n`;
  for (const a of args) s += `$${Buffer.byteLength(a, "utf8")}\r\n${a}\r\n`;
  return s;
}

interface Waiter {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  /** When the reply is due (ms, performance.now()). */
  due: number;
}

export interface RespOptions {
  connectTimeoutMs?: number;
  /**
   * Where to connect, asked before every connection (Sentinel: the current master); default:
   * the URL's host and port. The URL still gives the scheme, credentials and database.
   */
  resolve?: () => Promise<{ host: string; port: number }>;
  /** Accept the server only while its ROLE is master, and reconnect on a READONLY reply. */
  requireMaster?: boolean;
  /** What the configuration calls this server, for the start-up error (default SVC_GATE_REDIS_URL). */
  configName?: string;
  /**
   * The longest wait for a reply; unbounded when absent (tools sending blocking commands such
   * as WAIT). The gateway always sets it (SVC_GATE_REDIS_TIMEOUT_MS).
   */
  commandTimeoutMs?: number;
}

/** A RESP2 connection to the server named by a redis:// or rediss:// URL (user, password, /db). */
export class RespConnection implements RedisLink {
  private socket: Socket | null = null;
  private ready = false;
  private closing = false;
  private waiters: Waiter[] = [];
  private head = 0;
  private parser = new RespParser();
  private retries = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private drained: (() => void) | null = null;
  /** Armed while replies are awaited: fires when the oldest one is due. */
  private replyTimer: NodeJS.Timeout | null = null;

  private constructor(
    private readonly url: URL,
    private readonly opts: RespOptions,
  ) {}

  /** Connects (and authenticates, selects the database); rejects with a sentence that never contains the URL. */
  static async open(url: string, opts: RespOptions = {}): Promise<RespConnection> {
    const c = new RespConnection(new URL(url), opts);
    try {
      await c.connect();
    } catch (e) {
      c.destroy();
      throw new Error(
        `Could not connect to the Redis server named by ${opts.configName ?? "SVC_GATE_REDIS_URL"}${e instanceof RedisReplyError ? ` (${e.message.split(" ")[0]})` : ""}.`,
      );
    }
    return c;
  }

  /**
   * Like open, but a Redis that does not answer yet (refused, timed out, not a master yet) is
   * not an error: the connection is returned down, commands fail with state_unavailable until
   * it connects, and it keeps trying as after a drop. A refusal by the server (a wrong
   * password, a bad database) still rejects: retrying would not help.
   */
  static async openWhenUp(url: string, opts: RespOptions = {}): Promise<RespConnection> {
    const c = new RespConnection(new URL(url), opts);
    try {
      await c.connect();
    } catch (e) {
      if (e instanceof RedisReplyError || (e instanceof RedisConnectionError && /database that is not a number/.test(e.message))) {
        c.destroy();
        throw new Error(
          `Could not connect to the Redis server named by ${opts.configName ?? "SVC_GATE_REDIS_URL"}${e instanceof RedisReplyError ? ` (${e.message.split(" ")[0]})` : ""}.`,
        );
      }
      // a socket that was opened closes and its onClose schedules the next try; else schedule it here
      if (c.socket === null) c.reconnectLater();
    }
    return c;
  }

  /** Whether commands can be sent now. */
  get isReady(): boolean {
    return this.ready;
  }

  /**
   * A command written now fails at its own timeout, or sooner when an older one still waiting
   * times out first (that ends the connection): the earlier of the two (RedisLink.answerBy).
   */
  answerBy(): number | undefined {
    const limit = this.opts.commandTimeoutMs;
    if (limit === undefined) return undefined;
    const oldest = this.waiters[this.head];
    return performance.timeOrigin + Math.min(performance.now() + limit, oldest ? oldest.due : Infinity);
  }

  sendCommand(args: string[]): Promise<unknown> {
    if (!this.ready || this.socket === null) return Promise.reject(new RedisConnectionError("The Redis connection is down."));
    return this.write(args);
  }

  private write(args: readonly string[]): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject, due: performance.now() + (this.opts.commandTimeoutMs ?? Infinity) });
      this.socket!.write(encodeCommand(args));
      this.armReplyTimer();
    });
  }

  // One timer for all commands in flight, set for the oldest (replies come in order); a late
  // reply cannot be skipped, so the connection is ended and every waiter fails.
  private armReplyTimer(): void {
    if (this.replyTimer || this.head >= this.waiters.length || this.opts.commandTimeoutMs === undefined) return;
    const wait = Math.max(0, this.waiters[this.head]!.due - performance.now());
    this.replyTimer = setTimeout(() => {
      this.replyTimer = null;
      const w = this.waiters[this.head];
      if (!w) return;
      if (performance.now() < w.due) return this.armReplyTimer();
      // A reply already in the socket's buffer (this process was busy) is read first: the poll
      // phase runs between this timer and the check phase.
      setImmediate(() => {
        if (this.waiters[this.head] === w)
          this.socket?.destroy(new RedisConnectionError("Redis did not answer in time (SVC_GATE_REDIS_TIMEOUT_MS); retry later."));
        else this.armReplyTimer();
      });
    }, wait + 1);
    this.replyTimer.unref();
  }

  private async connect(): Promise<void> {
    const u = this.url;
    let port = Number(u.port || 6379);
    let host = u.hostname.replace(/^\[|\]$/g, "") || "127.0.0.1";
    if (this.opts.resolve) ({ host, port } = await this.opts.resolve());
    if (this.closing) throw new RedisConnectionError("The Redis connection is closed.");
    return new Promise<void>((resolve, reject) => {
      const s = u.protocol === "rediss:" ? tlsConnect({ host, port, ...(isIP(host) ? {} : { servername: host }) }) : netConnect({ host, port });
      this.socket = s;
      this.parser = new RespParser();
      s.setNoDelay(true);
      s.setKeepAlive(true, 10_000);
      const timer = setTimeout(() => s.destroy(new RedisConnectionError("Timed out connecting to Redis.")), this.opts.connectTimeoutMs ?? 5000);
      let settled = false;
      const fail = (e: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(e);
      };
      s.once(u.protocol === "rediss:" ? "secureConnect" : "connect", () => {
        void this.handshake().then(
          () => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            this.ready = true;
            this.retries = 0;
            resolve();
          },
          (e: Error) => {
            fail(e);
            s.destroy();
          },
        );
      });
      s.on("data", (chunk: Buffer) => this.onData(chunk));
      s.on("error", (e) => fail(e)); // 'close' follows
      s.once("close", () => {
        fail(new RedisConnectionError("The Redis connection closed."));
        this.onClose(s);
      });
    });
  }

  private async handshake(): Promise<void> {
    const u = this.url;
    const pass = decodeURIComponent(u.password);
    const user = decodeURIComponent(u.username);
    if (pass) await this.write(user ? ["AUTH", user, pass] : ["AUTH", pass]);
    else if (user) await this.write(["AUTH", user]);
    const db = u.pathname.replace(/^\//, "");
    if (db && db !== "0") {
      if (!/^\d+$/.test(db)) throw new RedisConnectionError("The Redis URL names a database that is not a number.");
      await this.write(["SELECT", db]);
    }
    if (this.opts.requireMaster) {
      // A Sentinel may name a master that has just been demoted: only a master is used.
      const role = (await this.write(["ROLE"])) as unknown[];
      if (!Array.isArray(role) || role[0] !== "master") throw new RedisConnectionError("The Redis server is not a master.");
    }
  }

  private onData(chunk: Buffer): void {
    try {
      this.parser.push(chunk, (reply) => {
        const w = this.waiters[this.head];
        if (!w) throw new Error("The Redis server sent a reply nobody asked for.");
        this.waiters[this.head++] = undefined as unknown as Waiter;
        if (this.head > 1024 && this.head * 2 > this.waiters.length) {
          this.waiters = this.waiters.slice(this.head);
          this.head = 0;
        }
        if (reply instanceof RedisReplyError || reply instanceof RedisUnavailableReplyError) {
          w.reject(reply);
          // A master demoted under this connection: reconnect, asking where the master is now.
          if (this.opts.requireMaster && reply instanceof RedisUnavailableReplyError && reply.reply.startsWith("READONLY")) this.socket?.destroy();
        } else w.resolve(reply);
      });
    } catch (e) {
      this.socket?.destroy(e as Error);
      return;
    }
    if (this.head >= this.waiters.length) {
      this.waiters = [];
      this.head = 0;
      if (this.replyTimer) clearTimeout(this.replyTimer);
      this.replyTimer = null;
      this.drained?.();
    }
  }

  private onClose(s: Socket): void {
    if (this.socket !== s) return;
    this.ready = false;
    this.socket = null;
    if (this.replyTimer) clearTimeout(this.replyTimer);
    this.replyTimer = null;
    const lost = this.waiters.slice(this.head);
    this.waiters = [];
    this.head = 0;
    for (const w of lost) w.reject(new RedisConnectionError("The Redis connection was lost before the reply."));
    this.drained?.();
    if (this.closing) return;
    this.reconnectLater();
  }

  private reconnectLater(): void {
    if (this.closing || this.retryTimer) return;
    const delay = Math.min(50 * 2 ** this.retries++, 2000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (this.closing) return;
      // A failed attempt with a socket closes it, and onClose schedules the next; one that
      // failed before any socket (the address could not be resolved) schedules it here.
      const before = this.socket;
      this.connect().catch(() => {
        if (this.socket === before || this.socket === null) this.reconnectLater();
      });
    }, delay);
    this.retryTimer.unref();
  }

  /** Waits for the replies of the commands sent so far, then closes; later commands fail. */
  async close(): Promise<void> {
    this.closing = true;
    this.ready = false;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.head < this.waiters.length && this.socket) await new Promise<void>((r) => (this.drained = r));
    const s = this.socket;
    this.socket = null;
    if (s) await new Promise<void>((r) => s.end(r));
  }

  /** Closes at once; commands in flight are rejected. */
  destroy(): void {
    this.closing = true;
    this.ready = false;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.socket?.destroy();
  }
}
