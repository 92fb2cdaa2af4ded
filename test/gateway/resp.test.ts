// The gateway's RESP2 connection (resp.ts): the reply reader on every split of the input, and
// a real Redis: ordering under many commands in flight, error replies, script fallback,
// a dropped connection (prompt failures, then a reconnect), and a refused handshake.
import test from "tape";
import { LuaScript } from "../../server/gateway/redis.js";
import { encodeCommand, RedisConnectionError, RedisReplyError, RespConnection, RespParser } from "../../server/gateway/resp.js";
import { REDIS_URL, redisFor, uniquePrefix } from "./helpers.js";

test("resp: the reader gives the same replies however the bytes are split", (t) => {
  const wire = Buffer.from(
    "+OK\r\n-ERR wrong type\r\n:42\r\n:-7\r\n$4\r\nhé!\r\n$0\r\n\r\n$-1\r\n*-1\r\n*0\r\n" + "*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n$3\r\nxyz\r\n",
    "utf8",
  );
  const expected = ["OK", "ERR wrong type", 42, -7, "hé!", "", null, null, [], [1, ["a", null], "xyz"]];
  const read = (chunks: Buffer[]) => {
    const p = new RespParser();
    const out: unknown[] = [];
    for (const c of chunks) p.push(c, (v) => out.push(v instanceof RedisReplyError ? v.message : v));
    return out;
  };
  t.deepEqual(read([wire]), expected, "whole");
  let ok = true;
  for (let i = 1; i < wire.length; i++) {
    if (JSON.stringify(read([wire.subarray(0, i), wire.subarray(i)])) !== JSON.stringify(expected)) ok = false;
  }
  t.ok(ok, "split in two at every byte");
  t.deepEqual(read([...wire].map((b) => Buffer.from([b]))), expected, "one byte at a time");
  t.throws(() => new RespParser().push(Buffer.from("?\r\n"), () => {}), /not RESP2/, "a protocol error throws");
  t.equal(encodeCommand(["GET", "é"]), "*2\r\n$3\r\nGET\r\n$2\r\né\r\n", "lengths in bytes");
  t.end();
});

test("resp: a real Redis, in order, errors, scripts, a dropped connection", async (t) => {
  const prefix = uniquePrefix();
  const { redis: other, cleanup } = await redisFor(prefix);
  const c = await RespConnection.open(REDIS_URL);
  try {
    t.equal(await c.sendCommand(["SET", `${prefix}a`, "v"]), "OK");
    t.equal(await c.sendCommand(["GET", `${prefix}a`]), "v");
    t.equal(await c.sendCommand(["GET", `${prefix}missing`]), null);
    const many = await Promise.all(Array.from({ length: 2000 }, (_, i) => c.sendCommand(["INCR", `${prefix}n`]).then((v) => v === i + 1)));
    t.ok(many.every(Boolean), "2,000 commands in flight: replies matched in order");
    try {
      await c.sendCommand(["HGET", `${prefix}a`, "f"]);
      t.fail("a wrong-type command must reject");
    } catch (e) {
      t.ok(e instanceof RedisReplyError && /^WRONGTYPE/.test(e.message), "an error reply rejects with its text");
    }
    t.equal(await c.sendCommand(["GET", `${prefix}a`]), "v", "and the connection goes on");
    const s = new LuaScript(`return {KEYS[1], ARGV[1], ${Date.now()}, '${prefix}'}`);
    const r = (await s.run(c, ["k"], ["x"])) as unknown[];
    t.deepEqual(r.slice(0, 2), ["k", "x"], "an unknown script runs through the EVAL fallback");
    t.deepEqual(((await s.run(c, ["k2"], ["y"])) as unknown[]).slice(0, 2), ["k2", "y"], "then by SHA");

    // Drop the connection from the server side while a command is in flight.
    const id = String(await c.sendCommand(["CLIENT", "ID"]));
    // The rejection may come before CLIENT KILL's own reply: take it as a value at once, so it
    // is never an unhandled rejection while the test waits for the kill.
    const blocked = c.sendCommand(["BLPOP", `${prefix}never`, "5"]).then(
      () => null,
      (e: unknown) => e,
    );
    await other.sendCommand(["CLIENT", "KILL", "ID", id]);
    const t0 = Date.now();
    const lost = await blocked;
    t.ok(lost instanceof RedisConnectionError, "the command in flight fails when the connection drops");
    t.ok(Date.now() - t0 < 4000, "promptly, not after BLPOP's 5 s");
    try {
      await c.sendCommand(["PING"]);
      t.fail("a command while down must fail");
    } catch (e) {
      t.ok(e instanceof RedisConnectionError, "a command while the connection is down fails at once");
    }
    const until = Date.now() + 30_000;
    while (!c.isReady && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    t.ok(c.isReady, "reconnected in the background");
    t.equal(await c.sendCommand(["GET", `${prefix}a`]), "v", "and serving again");
  } finally {
    await c.close();
    await cleanup();
  }
  try {
    await c.sendCommand(["PING"]);
    t.fail("closed");
  } catch (e) {
    t.ok(e instanceof RedisConnectionError, "a closed connection refuses commands");
  }
});

test("resp: a refused handshake is one sentence without the URL", async (t) => {
  const url = new URL(REDIS_URL);
  url.username = "nobody-such";
  url.password = "s3cret-pass";
  try {
    await RespConnection.open(url.toString());
    t.fail("must not connect");
  } catch (e) {
    const m = (e as Error).message;
    t.match(m, /^Could not connect to the Redis server named by SVC_GATE_REDIS_URL/, m);
    t.notOk(m.includes("s3cret-pass"), "no password in the message");
  }
  try {
    await RespConnection.open("redis://127.0.0.1:1", { connectTimeoutMs: 1000 });
    t.fail("must not connect");
  } catch (e) {
    t.match((e as Error).message, /^Could not connect to the Redis server named by SVC_GATE_REDIS_URL\.$/, "nothing listening");
  }
});
