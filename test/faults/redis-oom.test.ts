// The gateway on a redis-server of the test's own (test/faults/deps.ts) that runs out of memory
// (maxmemory reached with the noeviction policy: Redis refuses every command that would add
// data with an OOM error). Requests get 503 state_unavailable with Retry-After, on the data
// plane and the admin routes, never 500; the process stays up; service comes back by itself
// once Redis has room again.
import test from "tape";
import { spawnSync } from "node:child_process";
import { admin, call } from "../gateway/helpers.js";
import { gatewayOnRedis, startRedisProc } from "./deps.js";

const started = await startRedisProc();
if ("skip" in started) {
  test("Redis out of memory", (t) => {
    t.comment(`skipped: ${started.skip}`);
    t.end();
  });
} else {
  const redis = started;
  const cli = (...args: string[]) => spawnSync("redis-cli", ["-p", String(redis.port), ...args], { encoding: "utf8" }).stdout.trim();

  test("Redis out of memory: 503 state_unavailable with Retry-After, never 500, and service back once it has room", async (t) => {
    // the gateway reports unexpected failures as JSON lines on standard error: kept here
    const errors: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
      errors.push(String(chunk));
      return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
    }) as typeof process.stderr.write;
    const { gw, close } = await gatewayOnRedis(redis.url, "svc-oom:");
    try {
      const onboard = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" });
      t.equal(onboard.status, 201, "a tenant while Redis has room");
      const key = onboard.json.api_key as string;
      t.equal((await call(gw.url, "/v1/get/default/a", { key })).status, 200, "served while Redis has room");

      t.equal(cli("CONFIG", "SET", "maxmemory-policy", "noeviction"), "OK");
      t.equal(cli("CONFIG", "SET", "maxmemory", "1"), "OK", "Redis out of memory (maxmemory 1 byte, noeviction)");
      t.match(cli("SET", "probe", "x"), /^OOM /, "Redis refuses writes with OOM");

      for (const [what, r] of [
        ["a GET", await call(gw.url, "/v1/get/default/a", { key })],
        ["a put", await call(gw.url, "/v1/put", { key, body: { namespace: "default", key: "b", data_b64: Buffer.from("abc").toString("base64") } })],
        ["onboarding", await admin(gw.url, "/gate/onboard/create", { tenant_id: "beta" })],
      ] as const) {
        t.deepEqual(
          [r.status, r.json?.code, r.headers.get("retry-after") !== null],
          [503, "state_unavailable", true],
          `${what}: 503 state_unavailable with Retry-After (${r.json?.detail})`,
        );
      }
      t.deepEqual(
        errors.filter((e) => e.includes("internal error")),
        [],
        "no internal error reported",
      );

      t.equal(cli("CONFIG", "SET", "maxmemory", "0"), "OK", "Redis has room again");
      t.equal((await call(gw.url, "/v1/get/default/a", { key })).status, 200, "served again, without a restart");
      t.equal((await admin(gw.url, "/gate/onboard/create", { tenant_id: "beta" })).status, 201, "onboarding again");
    } finally {
      process.stderr.write = write;
      cli("CONFIG", "SET", "maxmemory", "0");
      await close();
      await redis.destroy();
    }
  });
}
