// The engine ends a request whose body falls behind the minimum rate (SVC_ENGINE_BODY_MIN_RATE
// after SVC_ENGINE_BODY_GRACE_S, or a pause longer than the grace): 400 with the sentence and
// the connection closed, over a real TCP connection that trickles its body; other requests are
// served meanwhile, and a body sent at speed is unaffected.
import test from "tape";
import { connect } from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";

const KEY = "slow-body-test-key-0123456789abcdef0123456789";

test("engine: a trickled body is cut off after the grace time; others are served", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-slow-body-"));
  const engine = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
      SVC_ENGINE_BODY_GRACE_S: "1",
      SVC_ENGINE_BODY_MIN_RATE: "1000",
    }),
  );
  const u = new URL(engine.url);
  const headers = { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme" };
  try {
    const t0 = Date.now();
    const answer = new Promise<string>((resolve) => {
      const sock = connect(Number(u.port), u.hostname);
      let got = "";
      let timer: NodeJS.Timeout | undefined;
      sock.on("connect", () => {
        sock.write(
          "POST /v1/put?namespace=ns&key=slow&dtype=bytes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
            KEY +
            "\r\nX-SVC-Tenant: acme\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n",
        );
        timer = setInterval(() => {
          if (!sock.destroyed) sock.write("x");
        }, 300);
      });
      sock.on("data", (d) => (got += d.toString("latin1")));
      // a bound on the test itself, never reached when the limit works
      const bound = setTimeout(() => sock.destroy(), 60_000);
      const done = () => {
        clearInterval(timer);
        clearTimeout(bound);
        resolve(got);
      };
      sock.on("close", done);
      sock.on("error", done);
    });
    // while the trickle runs, the engine serves another request
    const other = await fetch(`${engine.url}/v1/put?namespace=ns&key=fast&dtype=bytes`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/octet-stream" },
      body: Buffer.alloc(200_000, 7),
    });
    t.equal(other.status, 201, "a body sent at speed is stored meanwhile");
    const raw = await answer;
    const took = Date.now() - t0;
    t.match(raw, /^HTTP\/1\.1 400 /, "the trickled put is answered 400");
    t.match(raw, /slower than the minimum of 1000 bytes per second \(after 1 seconds of grace\)/, "with the sentence naming the rate");
    t.match(raw, /"code":"bad_request"/, "in the JSON error body");
    t.match(raw.toLowerCase(), /connection: close/, "and the connection is closed");
    t.ok(took < 55_000, `cut off after ${took} ms, not held open`);
    const get = await fetch(`${engine.url}/v1/get/ns/slow`, { headers });
    t.equal(get.status, 404, "nothing of the trickled put was stored");
  } finally {
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("engine: the body-rate variables are validated", (t) => {
  for (const [name, value] of [
    ["SVC_ENGINE_BODY_MIN_RATE", "0"],
    ["SVC_ENGINE_BODY_GRACE_S", "-1"],
    ["SVC_ENGINE_BODY_GRACE_S", "abc"],
  ] as const) {
    t.throws(() => loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY, [name]: value }), new RegExp(name), `${name}=${value} is refused, naming the variable`);
  }
  const c = loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY });
  t.deepEqual([c.body_min_bytes_per_s, c.body_grace_s], [16384, 10], "defaults: 16 KiB/s after 10 s");
  t.end();
});
