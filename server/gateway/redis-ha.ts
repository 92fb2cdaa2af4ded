// Redis with high availability for the gateway's own RESP client (resp.ts): a master found
// through Sentinel, or a Redis Cluster. The library clients (node-redis, ioredis) have both;
// they are not used here because a call through node-redis cost more in every measure
// (bench/gateway.ts, figure redis_link, one run on a loaded 2-core machine: p50 at 1 in flight
// 428 vs 131 us on one server, 211 vs 144 us on a cluster; client CPU per call at 50 in flight
// 67 vs 39 us and 80 vs 45 us), and the gateway sends a handful of commands and scripts, each
// naming keys of one tenant only.
//
// Sentinel: before every connection the sentinels are asked, in order, for the master's
// address; the connection accepts the server only while ROLE says master, and a READONLY reply
// (a master demoted under it) drops the connection so that the next one asks again.
//
// Cluster: the slot table comes from CLUSTER SLOTS; each command goes to the master of its
// first key's slot (scripts: their first key; the gateway's keys of one tenant share a slot
// through a {tenant} hash tag). MOVED updates the table and is followed, ASK is followed once
// with ASKING; a failed connection fails the command at once (no offline queue, as with one
// server) and refreshes the table in the background, so the next command finds the replica
// that took over.
import type { RedisTarget } from "./config.js";
import { RedisConnectionError, RedisReplyError, RespConnection, type RedisLink } from "./resp.js";

/** A RedisLink the gateway can close. */
export type { RedisTarget };

export interface RedisHandle extends RedisLink {
  close(): Promise<void>;
}

const hostPort = (host: string, port: number) => (host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`);

function withAuth(base: URL, host: string, port: number, username?: string, password?: string, db?: number): string {
  const u = new URL(base.href);
  u.hostname = host.includes(":") ? `[${host}]` : host;
  u.port = String(port);
  if (username !== undefined) u.username = encodeURIComponent(username);
  if (password !== undefined) u.password = encodeURIComponent(password);
  u.pathname = db ? `/${db}` : "";
  return u.href;
}

/** Asks each sentinel in turn for the master's address; the first answer wins. */
export function sentinelResolver(sentinels: readonly string[], masterName: string, timeoutMs = 1000): () => Promise<{ host: string; port: number }> {
  return async () => {
    for (const s of sentinels) {
      let c: RespConnection | null = null;
      try {
        c = await RespConnection.open(s, { connectTimeoutMs: timeoutMs, configName: "SVC_GATE_REDIS_SENTINELS" });
        const r = (await Promise.race([
          c.sendCommand(["SENTINEL", "get-master-addr-by-name", masterName]),
          new Promise((_, rej) => setTimeout(() => rej(new RedisConnectionError("The sentinel did not answer.")), timeoutMs).unref()),
        ])) as [string, string] | null;
        if (Array.isArray(r) && r.length === 2) return { host: String(r[0]), port: Number(r[1]) };
      } catch {
        // the next sentinel
      } finally {
        c?.destroy();
      }
    }
    throw new RedisConnectionError(`No sentinel named a master for ${masterName}.`);
  };
}

// ---- cluster ----

const SLOTS = 16384;

// CRC16/XMODEM, the cluster's key hash.
const CRC_TABLE = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[i] = c;
  }
  return t;
})();

/** The cluster slot of a key (its {hash tag} when it has a non-empty one). */
export function keySlot(key: string): number {
  let k = key;
  const open = key.indexOf("{");
  if (open >= 0) {
    const close = key.indexOf("}", open + 1);
    if (close > open + 1) k = key.slice(open + 1, close);
  }
  const b = Buffer.from(k, "utf8");
  let crc = 0;
  for (const byte of b) crc = ((crc << 8) & 0xffff) ^ CRC_TABLE[((crc >> 8) ^ byte) & 0xff]!;
  return crc % SLOTS;
}

const KEYLESS = new Set(["PING", "SCRIPT", "INFO", "CLUSTER", "TIME", "CLIENT", "ROLE"]);

/** The key a command is routed by; null for commands that name none. */
export function routingKey(args: readonly string[]): string | null {
  const cmd = args[0]!.toUpperCase();
  if (cmd === "EVAL" || cmd === "EVALSHA") return Number(args[2]) > 0 ? args[3]! : null;
  if (KEYLESS.has(cmd)) return null;
  return args[1] ?? null;
}

export class RespCluster implements RedisHandle {
  readonly #slots: Array<string | undefined> = new Array(SLOTS);
  readonly #conns = new Map<string, Promise<RespConnection>>();
  readonly #base: URL;
  #known: string[];
  #refreshing: Promise<void> | null = null;
  #lastRefresh = 0;
  #closed = false;

  private constructor(
    nodes: readonly string[],
    private readonly auth: { username?: string; password?: string; commandTimeoutMs?: number },
  ) {
    this.#base = new URL(nodes[0]!);
    this.#known = nodes.map((n) => {
      const u = new URL(n);
      return hostPort(u.hostname.replace(/^\[|\]$/g, ""), Number(u.port || 6379));
    });
  }

  /** Connects to the cluster through any of `nodes` (redis:// or rediss:// URLs) and reads its slot table. */
  static async open(nodes: readonly string[], auth: { username?: string; password?: string; commandTimeoutMs?: number } = {}): Promise<RespCluster> {
    const c = new RespCluster(nodes, auth);
    try {
      await c.refresh();
    } catch {
      await c.close();
      throw new Error("Could not read the slot table from any node named by SVC_GATE_REDIS_CLUSTER_NODES.");
    }
    return c;
  }

  #urlOf(addr: string): string {
    const i = addr.lastIndexOf(":");
    const host = addr.slice(0, i).replace(/^\[|\]$/g, "");
    const u = this.#base;
    return withAuth(
      u,
      host,
      Number(addr.slice(i + 1)),
      this.auth.username ?? (u.username ? decodeURIComponent(u.username) : undefined),
      this.auth.password ?? (u.password ? decodeURIComponent(u.password) : undefined),
    );
  }

  #conn(addr: string): Promise<RespConnection> {
    let p = this.#conns.get(addr);
    if (!p) {
      p = RespConnection.open(this.#urlOf(addr), {
        connectTimeoutMs: 1000,
        configName: "SVC_GATE_REDIS_CLUSTER_NODES",
        commandTimeoutMs: this.auth.commandTimeoutMs,
      });
      this.#conns.set(addr, p);
      p.catch(() => {
        if (this.#conns.get(addr) === p) this.#conns.delete(addr);
      });
    }
    return p;
  }

  /** Reads the slot table from the first node that answers (known masters first, then the seeds). */
  refresh(): Promise<void> {
    this.#refreshing ??= (async () => {
      try {
        const order = [...new Set([...this.#slots.filter((a): a is string => a !== undefined), ...this.#known])];
        for (const addr of order) {
          if (this.#closed) return;
          try {
            const c = await this.#conn(addr);
            const table = (await c.sendCommand(["CLUSTER", "SLOTS"])) as Array<[number, number, [string, number, ...unknown[]], ...unknown[]]>;
            if (!Array.isArray(table) || table.length === 0) continue;
            const masters = new Set<string>();
            for (const [from, to, master] of table) {
              const a = hostPort(String(master[0]) || addr.slice(0, addr.lastIndexOf(":")), Number(master[1]));
              masters.add(a);
              for (let s = Number(from); s <= Number(to); s++) this.#slots[s] = a;
            }
            this.#known = [...new Set([...masters, ...this.#known])];
            // Connections to nodes that no longer own a slot stop retrying.
            for (const [a, p] of this.#conns) {
              if (!masters.has(a)) {
                this.#conns.delete(a);
                p.then(
                  (x) => x.destroy(),
                  () => {},
                );
              }
            }
            return;
          } catch {
            // the next node
          }
        }
        throw new RedisConnectionError("No Redis Cluster node answered CLUSTER SLOTS.");
      } finally {
        this.#lastRefresh = Date.now();
        this.#refreshing = null;
      }
    })();
    return this.#refreshing;
  }

  /** A refresh in the background, at most every 100 ms. */
  #refreshSoon(): void {
    if (this.#refreshing || this.#closed || Date.now() - this.#lastRefresh < 100) return;
    this.refresh().catch(() => {});
  }

  async sendCommand(args: string[]): Promise<unknown> {
    if (this.#closed) throw new RedisConnectionError("The Redis connection is closed.");
    const key = routingKey(args);
    let addr = key === null ? (this.#slots[0] ?? this.#known[0]) : this.#slots[keySlot(key)];
    let asking = false;
    for (let hop = 0; hop < 5; hop++) {
      if (addr === undefined) {
        await this.refresh();
        addr = key === null ? this.#slots[0] : this.#slots[keySlot(key)];
        if (addr === undefined) throw new RedisConnectionError("The Redis Cluster has no node for this key.");
      }
      let c: RespConnection;
      try {
        c = await this.#conn(addr);
      } catch {
        this.#refreshSoon();
        throw new RedisConnectionError("A Redis Cluster node is unreachable.");
      }
      try {
        if (asking) {
          asking = false;
          const a = c.sendCommand(["ASKING"]);
          const r = c.sendCommand(args);
          await a;
          return await r;
        }
        return await c.sendCommand(args);
      } catch (e) {
        if (!(e instanceof RedisReplyError)) {
          this.#refreshSoon();
          throw e;
        }
        const m = /^(MOVED|ASK) (\d+) (\S+)$/.exec(e.message);
        if (!m) throw e;
        addr = m[3]!;
        if (m[1] === "MOVED") {
          this.#slots[Number(m[2])] = addr;
          this.#refreshSoon();
        } else {
          asking = true;
        }
      }
    }
    throw new RedisConnectionError("The Redis Cluster kept redirecting the command.");
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#refreshing?.catch(() => {});
    const conns = [...this.#conns.values()];
    this.#conns.clear();
    await Promise.all(
      conns.map((p) =>
        p.then(
          (c) => c.close(),
          () => {},
        ),
      ),
    );
  }
}

/** Opens the gateway's Redis link for `target`. Rejects with a sentence that never contains a password. */
export async function openRedis(target: RedisTarget, how: { whenUp?: boolean } = {}): Promise<RedisHandle> {
  // whenUp: a server (or sentinel) that does not answer yet is waited for in the background
  // (RespConnection.openWhenUp) rather than an error; a cluster still needs its nodes at start.
  const open = how.whenUp ? RespConnection.openWhenUp : RespConnection.open;
  switch (target.kind) {
    case "single":
      return open(target.url, { commandTimeoutMs: target.timeoutMs });
    case "sentinel": {
      const base = new URL(target.sentinels[0]!);
      // The master's URL: the sentinels' scheme (TLS or not), the master's own credentials and database.
      const url = withAuth(base, "127.0.0.1", 6379, target.username ?? "", target.password ?? "", target.db);
      return open(url, {
        resolve: sentinelResolver(target.sentinels, target.masterName),
        requireMaster: true,
        configName: "SVC_GATE_REDIS_SENTINELS",
        commandTimeoutMs: target.timeoutMs,
      });
    }
    case "cluster":
      return RespCluster.open(target.nodes, { username: target.username, password: target.password, commandTimeoutMs: target.timeoutMs });
  }
}
