// loadGatewayConfig: defaults, every variable parsed, one sentence naming a bad variable.
import test from "tape";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, DEFAULT_LIMITS, loadGatewayConfig } from "../../server/gateway/config.js";
import { selfSignedCert } from "../lib/self-signed.js";

const KEY = "k".repeat(40);

test("the documented defaults", (t) => {
  const c = loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: KEY });
  t.equal(c.host, "0.0.0.0");
  t.equal(c.port, 8080);
  t.equal(c.engineUrl, "http://127.0.0.1:8000");
  t.equal(c.dataDir, "./svc-data/gate");
  t.equal(c.redisUrl, undefined);
  t.equal(c.redisPrefix, "svc:");
  t.equal(c.auditEnabled, true);
  t.equal(c.auditLogPath, "/var/log/svc-gate/audit.jsonl");
  t.deepEqual(c.corsOrigins, [], "CORS off");
  t.equal(c.billingEnabled, false);
  t.deepEqual(c.defaultRateLimit, { requests: 100, window_s: 60 });
  t.equal(c.maxUploadBytes, 100 * 1024 * 1024);
  t.equal(c.payment.secretKey, undefined);
  t.equal(c.engineCa, undefined, "no CA file: the system's CAs");
  t.deepEqual(c.limits, DEFAULT_LIMITS, "the documented abuse limits");
  t.equal(loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: "k".repeat(32) }).engineServiceKey.length, 32, "a 32-character service key is accepted");
  t.ok(Object.isFrozen(c) && Object.isFrozen(c.defaultRateLimit) && Object.isFrozen(c.payment), "frozen");
  t.end();
});

test("every variable is read", (t) => {
  const c = loadGatewayConfig({
    SVC_GATE_ENGINE_SERVICE_KEY: KEY,
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "9090",
    SVC_GATE_ENGINE_URL: "http://10.0.0.2:8000/",
    SVC_GATE_DATA_DIR: "/tmp/g",
    SVC_GATE_REDIS_URL: "redis://127.0.0.1:6379/0",
    SVC_GATE_REDIS_PREFIX: "t1:",
    SVC_GATE_AUDIT_ENABLED: "false",
    SVC_GATE_AUDIT_LOG_PATH: "/tmp/a.jsonl",
    SVC_GATE_CORS_ORIGINS: "https://a.example, http://localhost:3000",
    SVC_GATE_BILLING_ENABLED: "true",
    SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "7",
    SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S: "30",
    SVC_ENGINE_MAX_UPLOAD_BYTES: "1000",
    SVC_GATE_PAYMENT_SECRET_KEY: "sk_test_x",
    SVC_GATE_PAYMENT_PUBLISHABLE_KEY: "pk",
    SVC_GATE_PAYMENT_WEBHOOK_SECRET: "whsec",
    SVC_GATE_PAYMENT_PRICE_BUILDER: "price_b",
    SVC_GATE_PAYMENT_PRICE_PRO: "price_p",
    SVC_GATE_PAYMENT_API_BASE: "http://127.0.0.1:12111",
    SVC_GATE_ENGINE_TIMEOUT_MS: "1500",
  });
  t.deepEqual(
    [c.host, c.port, c.engineUrl, c.dataDir, c.redisUrl, c.redisPrefix, c.auditEnabled, c.auditLogPath, c.billingEnabled, c.maxUploadBytes, c.engineTimeoutMs],
    ["127.0.0.1", 9090, "http://10.0.0.2:8000", "/tmp/g", "redis://127.0.0.1:6379/0", "t1:", false, "/tmp/a.jsonl", true, 1000, 1500],
  );
  t.deepEqual(c.corsOrigins, ["https://a.example", "http://localhost:3000"]);
  t.deepEqual(c.defaultRateLimit, { requests: 7, window_s: 30 });
  t.deepEqual(c.payment, {
    secretKey: "sk_test_x",
    publishableKey: "pk",
    webhookSecret: "whsec",
    priceBuilder: "price_b",
    pricePro: "price_p",
    apiBase: "http://127.0.0.1:12111",
  });
  t.end();
});

test("SVC_GATE_ENGINE_URL: one URL or a comma-separated list of several, in order", (t) => {
  const one = loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: KEY, SVC_GATE_ENGINE_URL: "http://10.0.0.2:8000/" });
  t.deepEqual([one.engineUrl, one.engineUrls], ["http://10.0.0.2:8000", ["http://10.0.0.2:8000"]], "one URL: a list of one");
  const two = loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: KEY, SVC_GATE_ENGINE_URL: " http://10.0.0.2:8000/ , https://10.0.0.3:8443" });
  t.deepEqual(two.engineUrls, ["http://10.0.0.2:8000", "https://10.0.0.3:8443"], "two URLs, trimmed, in order");
  t.equal(two.engineUrl, "http://10.0.0.2:8000", "engineUrl is the first");
  t.equal(two.engineHealthIntervalMs, 1000, "health checks every second by default");
  t.ok(Object.isFrozen(two.engineUrls), "frozen");
  try {
    loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: KEY, SVC_GATE_ENGINE_URL: "http://a:1,http://b:2/x" });
    t.fail("accepted");
  } catch (e) {
    t.equal(
      (e as Error).message,
      "SVC_GATE_ENGINE_URL entry 'http://b:2/x' must be an http(s) URL without a path, such as http://127.0.0.1:8000.",
      "names the bad entry",
    );
  }
  t.end();
});

test("Redis: one server, a master behind sentinels, or a cluster", (t) => {
  const base = { SVC_GATE_ENGINE_SERVICE_KEY: KEY };
  t.equal(loadGatewayConfig(base).redis, undefined, "no Redis by default");
  t.deepEqual(
    loadGatewayConfig({ ...base, SVC_GATE_REDIS_URL: "redis://10.0.0.5:6379/2" }).redis,
    { kind: "single", url: "redis://10.0.0.5:6379/2", timeoutMs: 2000 },
    "one server; replies bounded at 2 s by default",
  );
  t.equal(
    loadGatewayConfig({ ...base, SVC_GATE_REDIS_URL: "redis://10.0.0.5:6379", SVC_GATE_REDIS_TIMEOUT_MS: "750" }).redis?.timeoutMs,
    750,
    "SVC_GATE_REDIS_TIMEOUT_MS",
  );
  t.deepEqual(
    loadGatewayConfig({
      ...base,
      SVC_GATE_REDIS_SENTINELS: "redis://s1:26379, rediss://s2:26379",
      SVC_GATE_REDIS_SENTINEL_MASTER: "mymaster",
      SVC_GATE_REDIS_PASSWORD: "pw",
    }).redis,
    { kind: "sentinel", sentinels: ["redis://s1:26379", "rediss://s2:26379"], masterName: "mymaster", username: undefined, password: "pw", timeoutMs: 2000 },
    "sentinels, the master's name and its password",
  );
  t.deepEqual(
    loadGatewayConfig({ ...base, SVC_GATE_REDIS_CLUSTER_NODES: "redis://n1:7000,redis://n2:7000" }).redis,
    { kind: "cluster", nodes: ["redis://n1:7000", "redis://n2:7000"], username: undefined, password: undefined, timeoutMs: 2000 },
    "cluster seed nodes",
  );
  try {
    loadGatewayConfig({ ...base, SVC_GATE_REDIS_SENTINELS: "redis://:secret@s1:26379,http://:secret2@s2:26379", SVC_GATE_REDIS_SENTINEL_MASTER: "m" });
    t.fail("accepted");
  } catch (e) {
    t.notOk(/secret/.test((e as Error).message), `a bad entry is named by position, never shown: ${(e as Error).message}`);
  }
  t.end();
});

test("a bad value stops start-up with one sentence naming the variable", (t) => {
  const bad: Array<[Record<string, string>, string]> = [
    [{ SVC_GATE_ENGINE_SERVICE_KEY: "" }, "SVC_GATE_ENGINE_SERVICE_KEY"],
    [{ SVC_GATE_ENGINE_SERVICE_KEY: "short" }, "SVC_GATE_ENGINE_SERVICE_KEY"],
    [{ SVC_GATE_ENGINE_SERVICE_KEY: "k".repeat(31) }, "SVC_GATE_ENGINE_SERVICE_KEY"],
    [{ SVC_GATE_ENGINE_CONNECTIONS: "0" }, "SVC_GATE_ENGINE_CONNECTIONS"],
    [{ SVC_GATE_ENGINE_TENANT_SHARE_PCT: "101" }, "SVC_GATE_ENGINE_TENANT_SHARE_PCT"],
    [{ SVC_GATE_ENGINE_QUEUE_TIMEOUT_MS: "0" }, "SVC_GATE_ENGINE_QUEUE_TIMEOUT_MS"],
    [{ SVC_GATE_BODY_MIN_RATE: "fast" }, "SVC_GATE_BODY_MIN_RATE"],
    [{ SVC_GATE_BODY_GRACE_S: "0" }, "SVC_GATE_BODY_GRACE_S"],
    [{ SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT: String(100 * 1024 * 1024) }, "SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT"],
    [{ SVC_GATE_AUTH_FAIL_LIMIT: "0" }, "SVC_GATE_AUTH_FAIL_LIMIT"],
    [{ SVC_GATE_AUTH_FAIL_WINDOW_S: "1.5" }, "SVC_GATE_AUTH_FAIL_WINDOW_S"],
    [{ SVC_GATE_BODY_TENANT_SHARE_PCT: "0" }, "SVC_GATE_BODY_TENANT_SHARE_PCT"],
    [{ SVC_GATE_TRUSTED_PROXIES: "10.0.0.1,proxy.example" }, "SVC_GATE_TRUSTED_PROXIES"],
    [{ SVC_GATE_TRUSTED_PROXIES: "10.0.0.0/40" }, "SVC_GATE_TRUSTED_PROXIES"],
    [{ SVC_GATE_PORT: "80a" }, "SVC_GATE_PORT"],
    [{ SVC_GATE_PORT: "70000" }, "SVC_GATE_PORT"],
    [{ SVC_GATE_ENGINE_URL: "ftp://x" }, "SVC_GATE_ENGINE_URL"],
    [{ SVC_GATE_ENGINE_URL: "http://x:8000/api" }, "SVC_GATE_ENGINE_URL"],
    [{ SVC_GATE_ENGINE_URL: "http://a:8000,,http://b:8000" }, "SVC_GATE_ENGINE_URL"],
    [{ SVC_GATE_ENGINE_URL: "http://a:8000,http://a:8000/" }, "SVC_GATE_ENGINE_URL"],
    [{ SVC_GATE_ENGINE_URL: "http://a:8000,redis://b:6379" }, "SVC_GATE_ENGINE_URL"],
    [{ SVC_GATE_ENGINE_URL: Array.from({ length: 65 }, (_, i) => `http://e${i}:8000`).join(",") }, "SVC_GATE_ENGINE_URL"],
    [{ SVC_GATE_ENGINE_HEALTH_INTERVAL_MS: "50" }, "SVC_GATE_ENGINE_HEALTH_INTERVAL_MS"],
    [{ SVC_GATE_REDIS_TIMEOUT_MS: "0" }, "SVC_GATE_REDIS_TIMEOUT_MS"],
    [{ SVC_GATE_REDIS_TIMEOUT_MS: "2s" }, "SVC_GATE_REDIS_TIMEOUT_MS"],
    [{ SVC_GATE_ENGINE_HEALTH_INTERVAL_MS: "soon" }, "SVC_GATE_ENGINE_HEALTH_INTERVAL_MS"],
    [{ SVC_GATE_REDIS_URL: "http://127.0.0.1:6379" }, "SVC_GATE_REDIS_URL"],
    [{ SVC_GATE_REDIS_SENTINELS: "redis://10.0.0.5:26379,http://x:1" }, "SVC_GATE_REDIS_SENTINELS"],
    [{ SVC_GATE_REDIS_SENTINELS: "redis://10.0.0.5:26379" }, "SVC_GATE_REDIS_SENTINEL_MASTER"],
    [{ SVC_GATE_REDIS_SENTINEL_MASTER: "mymaster" }, "SVC_GATE_REDIS_SENTINEL_MASTER"],
    [{ SVC_GATE_REDIS_SENTINELS: "redis://10.0.0.5:26379", SVC_GATE_REDIS_SENTINEL_MASTER: "my master" }, "SVC_GATE_REDIS_SENTINEL_MASTER"],
    [{ SVC_GATE_REDIS_CLUSTER_NODES: "redis://a:7000,,redis://b:7000" }, "SVC_GATE_REDIS_CLUSTER_NODES"],
    [{ SVC_GATE_REDIS_URL: "redis://a:6379", SVC_GATE_REDIS_CLUSTER_NODES: "redis://b:7000" }, "SVC_GATE_REDIS_CLUSTER_NODES"],
    [{ SVC_GATE_REDIS_URL: "redis://a:6379", SVC_GATE_REDIS_PASSWORD: "pw" }, "SVC_GATE_REDIS_PASSWORD"],
    [{ SVC_GATE_REDIS_USERNAME: "u" }, "SVC_GATE_REDIS_USERNAME"],
    [{ SVC_GATE_AUDIT_ENABLED: "maybe" }, "SVC_GATE_AUDIT_ENABLED"],
    [{ SVC_GATE_BILLING_ENABLED: "2" }, "SVC_GATE_BILLING_ENABLED"],
    [{ SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "0" }, "SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS"],
    [{ SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S: "-5" }, "SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S"],
    [{ SVC_ENGINE_MAX_UPLOAD_BYTES: "1e6" }, "SVC_ENGINE_MAX_UPLOAD_BYTES"],
    [{ SVC_GATE_CORS_ORIGINS: "https://a.example/path" }, "SVC_GATE_CORS_ORIGINS"],
    [{ SVC_GATE_REDIS_PREFIX: "has space" }, "SVC_GATE_REDIS_PREFIX"],
  ];
  for (const [env, name] of bad) {
    try {
      loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: KEY, ...env } as NodeJS.ProcessEnv);
      t.fail(`${name}=${JSON.stringify(env)} accepted`);
    } catch (e) {
      t.ok(e instanceof ConfigError, `${name}: ConfigError`);
      t.equal((e as ConfigError).variable, name, `${name}: names the variable`);
      t.ok(
        (e as Error).message.startsWith(name) && (e as Error).message.endsWith(".") && !(e as Error).message.slice(0, -1).includes(". "),
        `${name}: one sentence (${(e as Error).message})`,
      );
    }
  }
  t.end();
});

test("SVC_GATE_ENGINE_CA_PATH: read and parsed once; an unreadable file or one without a certificate stops start-up naming the variable", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-gate-ca-"));
  try {
    const cert = selfSignedCert(dir, "ca.pem")?.cert;
    if (cert) {
      const c = loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: KEY, SVC_GATE_ENGINE_URL: "https://127.0.0.1:8000", SVC_GATE_ENGINE_CA_PATH: cert });
      t.match(c.engineCa ?? "", /^-----BEGIN CERTIFICATE-----\n[\s\S]+-----END CERTIFICATE-----\n$/, "the certificates' PEM text is kept");
      t.equal(c.engineUrl, "https://127.0.0.1:8000");
    } else {
      t.skip("openssl is not available to make a test certificate");
    }
    writeFileSync(join(dir, "empty.pem"), "no certificate here\n");
    writeFileSync(join(dir, "broken.pem"), "-----BEGIN CERTIFICATE-----\nnot base64 der\n-----END CERTIFICATE-----\n");
    const bad: Array<[string, RegExp]> = [
      [join(dir, "missing.pem"), /^SVC_GATE_ENGINE_CA_PATH cannot be read \(ENOENT: .*missing\.pem\)\.$/],
      [dir, /^SVC_GATE_ENGINE_CA_PATH cannot be read \(EISDIR: /],
      [join(dir, "empty.pem"), /^SVC_GATE_ENGINE_CA_PATH must name a PEM file of CA certificates, and .*empty\.pem holds none\.$/],
      [join(dir, "broken.pem"), /^SVC_GATE_ENGINE_CA_PATH names .*broken\.pem, whose certificate 1 cannot be parsed\.$/],
      ["   ", /^SVC_GATE_ENGINE_CA_PATH must not be empty\.$/],
    ];
    for (const [path, re] of bad) {
      try {
        loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: KEY, SVC_GATE_ENGINE_CA_PATH: path });
        t.fail(`${path} accepted`);
      } catch (e) {
        t.ok(e instanceof ConfigError && e.variable === "SVC_GATE_ENGINE_CA_PATH", `${path.trim() || "blank"}: ConfigError naming the variable`);
        t.match((e as Error).message, re, `one sentence: ${(e as Error).message}`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  t.end();
});
