// The gateway's Lua scripts (LuaScript: run by SHA with a fallback to EVAL when the server's
// script cache is empty, after a restart or SCRIPT FLUSH) and the tenant hash tag of its keys,
// used by the gateway's Redis stores over resp.ts; and node-redis connections, which tests and
// tools use (the gateway itself talks to Redis through resp.ts).
import { createHash } from "node:crypto";
import { createClient } from "redis";
import type { RedisLink } from "./resp.js";

const makeClient = (url: string) =>
  // No offline queue: while the connection is down a command fails at once (the request gets
  // an error answer) instead of waiting, unbounded, for a reconnect.
  createClient({ url, disableOfflineQueue: true, socket: { connectTimeout: 5000, reconnectStrategy: (n: number) => Math.min(50 * 2 ** n, 2000) } });
export type Redis = ReturnType<typeof makeClient>;

/** Connects to `url`; rejects with a sentence (not the URL, which may carry a password). */
export async function connectRedis(url: string): Promise<Redis> {
  const client = makeClient(url);
  // Errors surface on the commands that fail; the event only needs a listener so that a
  // dropped connection does not crash the process.
  client.on("error", () => {});
  try {
    await client.connect();
  } catch {
    client.destroy();
    throw new Error("Could not connect to the Redis server named by SVC_GATE_REDIS_URL.");
  }
  return client;
}

/**
 * A tenant id in a Redis key: `{tenant}` when the keys live in a Redis Cluster, so that every
 * key of one tenant (record, window, usage) hashes to one slot and one script may use them
 * together; the id as it is otherwise.
 */
export const tenantTag = (tenant: string, hashTags: boolean): string => (hashTags ? `{${tenant}}` : tenant);

export class LuaScript {
  readonly sha: string;
  constructor(readonly source: string) {
    this.sha = createHash("sha1").update(source).digest("hex");
  }
  /** EVALSHA, then EVAL when the server does not know the script (it then caches it). */
  async run(client: RedisLink, keys: string[], args: string[]): Promise<unknown> {
    const cmd = ["EVALSHA", this.sha, String(keys.length), ...keys, ...args];
    try {
      return await client.sendCommand(cmd);
    } catch (e) {
      if (!String((e as Error)?.message).startsWith("NOSCRIPT")) throw e;
      cmd[0] = "EVAL";
      cmd[1] = this.source;
      return await client.sendCommand(cmd);
    }
  }
}

/** Deletes every key under `prefix` with SCAN + DEL (never FLUSHDB); returns how many. */
export async function deletePrefix(client: Redis, prefix: string): Promise<number> {
  let n = 0;
  for await (const batch of client.scanIterator({ MATCH: `${prefix.replace(/[*?[\]\\]/g, "\\$&")}*`, COUNT: 500 })) {
    const keys = batch as unknown as string[];
    if (keys.length) n += await client.del(keys);
  }
  return n;
}
