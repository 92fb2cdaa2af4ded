// loadEngineConfig: defaults of every SVC_ENGINE_* variable, a one-sentence error naming
// the variable for each bad value, a frozen result, and service keys kept only as digests.
import test from "tape";
import { totalmem } from "node:os";
import { createHash } from "node:crypto";
import { loadEngineConfig } from "../../server/engine/config.js";
import { ValidationError } from "../../lib/errors.js";

const KEY = "k".repeat(40);

test("config: defaults", (t) => {
  const c = loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY });
  t.equal(c.host, "127.0.0.1", "host");
  t.equal(c.port, 8000, "port");
  t.equal(c.data_dir, "./svc-data/engine", "data dir");
  t.equal(c.require_auth, true, "auth required by default");
  t.equal(c.max_upload_bytes, 100 * 1024 * 1024, "100 MB upload limit");
  t.equal(c.min_compression_ratio, 1.2, "min ratio");
  t.equal(c.min_compress_bytes, 4096, "min compress bytes");
  t.equal(c.compression_tol, 1e-3, "tolerance");
  t.equal(c.max_rank, 256, "max rank");
  t.deepEqual([c.tls_cert_path, c.tls_key_path], [null, null], "no TLS");
  t.equal(c.log_level, "info", "log level");
  t.equal(c.device, "auto", "device");
  t.equal(c.gpu_cache_bytes, null, "gpu cache decided from the device");
  t.equal(c.payload_cache_bytes, 64 * 1024 * 1024, "64 MiB payload cache");
  t.equal(c.memory_budget_bytes, Math.max(256 * 1024 * 1024, Math.floor(totalmem() / 4)), "memory budget: a quarter of the machine's memory");
  t.equal(c.max_json_serve_bytes, 16 * 1024 * 1024, "16 MiB JSON serves");
  t.ok(Object.isFrozen(c) && Object.isFrozen(c.api_key_digests), "frozen");
  t.end();
});

test("config: values are parsed; keys are kept as SHA-256 digests only", (t) => {
  const c = loadEngineConfig({
    SVC_ENGINE_HOST: "0.0.0.0",
    SVC_ENGINE_PORT: "0",
    SVC_ENGINE_DATA_DIR: "/tmp/x",
    SVC_ENGINE_API_KEYS: ` ${KEY} , other-key-${"x".repeat(30)} ,`,
    SVC_ENGINE_REQUIRE_AUTH: "false",
    SVC_ENGINE_MAX_UPLOAD_BYTES: "1000",
    SVC_ENGINE_MIN_COMPRESSION_RATIO: "2.5",
    SVC_ENGINE_MIN_COMPRESS_BYTES: "0",
    SVC_ENGINE_COMPRESSION_TOL: "1e-4",
    SVC_ENGINE_MAX_RANK: "32",
    SVC_ENGINE_TLS_CERT_PATH: "/c.pem",
    SVC_ENGINE_TLS_KEY_PATH: "/k.pem",
    SVC_ENGINE_LOG_LEVEL: "DEBUG",
    SVC_ENGINE_DEVICE: "cuda:1",
    SVC_ENGINE_GPU_CACHE_BYTES: "1048576",
    SVC_ENGINE_PAYLOAD_CACHE_BYTES: "0",
    SVC_ENGINE_MEMORY_BUDGET_BYTES: "1073741824",
    SVC_ENGINE_MAX_JSON_SERVE_BYTES: "4096",
  });
  t.deepEqual(
    [
      c.host,
      c.port,
      c.data_dir,
      c.require_auth,
      c.max_upload_bytes,
      c.min_compression_ratio,
      c.min_compress_bytes,
      c.compression_tol,
      c.max_rank,
      c.tls_cert_path,
      c.tls_key_path,
      c.log_level,
      c.device,
      c.gpu_cache_bytes,
      c.payload_cache_bytes,
      c.memory_budget_bytes,
      c.max_json_serve_bytes,
    ],
    ["0.0.0.0", 0, "/tmp/x", false, 1000, 2.5, 0, 1e-4, 32, "/c.pem", "/k.pem", "debug", "cuda:1", 1048576, 0, 1073741824, 4096],
    "every variable read",
  );
  t.equal(c.api_key_digests.length, 2, "two keys, empty entries dropped");
  t.ok(c.api_key_digests[0]!.equals(createHash("sha256").update(KEY).digest()), "first key's digest");
  t.notOk(JSON.stringify(c).includes(KEY), "the key itself is not in the config");
  t.end();
});

test("config: a bad value is one sentence naming the variable", (t) => {
  const bad: [Record<string, string>, string][] = [
    [{ SVC_ENGINE_PORT: "80a" }, "SVC_ENGINE_PORT"],
    [{ SVC_ENGINE_PORT: "70000" }, "SVC_ENGINE_PORT"],
    [{ SVC_ENGINE_REQUIRE_AUTH: "maybe" }, "SVC_ENGINE_REQUIRE_AUTH"],
    [{ SVC_ENGINE_MAX_UPLOAD_BYTES: "0" }, "SVC_ENGINE_MAX_UPLOAD_BYTES"],
    [{ SVC_ENGINE_MIN_COMPRESSION_RATIO: "0.5" }, "SVC_ENGINE_MIN_COMPRESSION_RATIO"],
    [{ SVC_ENGINE_MIN_COMPRESS_BYTES: "-1" }, "SVC_ENGINE_MIN_COMPRESS_BYTES"],
    [{ SVC_ENGINE_COMPRESSION_TOL: "2" }, "SVC_ENGINE_COMPRESSION_TOL"],
    [{ SVC_ENGINE_COMPRESSION_TOL: "abc" }, "SVC_ENGINE_COMPRESSION_TOL"],
    [{ SVC_ENGINE_MAX_RANK: "0" }, "SVC_ENGINE_MAX_RANK"],
    [{ SVC_ENGINE_STORE_TIMEOUT_MS: "50" }, "SVC_ENGINE_STORE_TIMEOUT_MS"],
    [{ SVC_ENGINE_STORE_TIMEOUT_MS: "5s" }, "SVC_ENGINE_STORE_TIMEOUT_MS"],
    [{ SVC_ENGINE_LOG_LEVEL: "loud" }, "SVC_ENGINE_LOG_LEVEL"],
    [{ SVC_ENGINE_DEVICE: "tpu" }, "SVC_ENGINE_DEVICE"],
    [{ SVC_ENGINE_GPU_CACHE_BYTES: "lots" }, "SVC_ENGINE_GPU_CACHE_BYTES"],
    [{ SVC_ENGINE_PAYLOAD_CACHE_BYTES: "-1" }, "SVC_ENGINE_PAYLOAD_CACHE_BYTES"],
    [{ SVC_ENGINE_PAYLOAD_CACHE_BYTES: "64M" }, "SVC_ENGINE_PAYLOAD_CACHE_BYTES"],
    [{ SVC_ENGINE_MEMORY_BUDGET_BYTES: "1000" }, "SVC_ENGINE_MEMORY_BUDGET_BYTES"],
    [{ SVC_ENGINE_MEMORY_BUDGET_BYTES: "6G" }, "SVC_ENGINE_MEMORY_BUDGET_BYTES"],
    [{ SVC_ENGINE_MAX_JSON_SERVE_BYTES: "-1" }, "SVC_ENGINE_MAX_JSON_SERVE_BYTES"],
    [{ SVC_ENGINE_TLS_CERT_PATH: "/c.pem" }, "SVC_ENGINE_TLS_KEY_PATH"],
    [{ SVC_ENGINE_API_KEYS: " , " }, "SVC_ENGINE_API_KEYS"],
    [{ SVC_ENGINE_STORE_URL: "mysql://db/svc" }, "SVC_ENGINE_STORE_URL"],
    [{ SVC_ENGINE_STORE_URL: "postgres://db host/svc" }, "SVC_ENGINE_STORE_URL"],
  ];
  for (const [env, name] of bad) {
    try {
      loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY, ...env });
      t.fail(`accepted ${JSON.stringify(env)}`);
    } catch (e) {
      const m = (e as Error).message;
      t.ok(
        e instanceof ValidationError && m.startsWith("SVC_ENGINE_") && m.includes(name) && m.endsWith(".") && m.split(". ").length === 1,
        `${JSON.stringify(env)} -> ${m}`,
      );
    }
  }
  t.end();
});

test("config: SVC_ENGINE_STORE_URL puts the store in PostgreSQL; unset, the store is LMDB under the data dir", (t) => {
  const pg = loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_STORE_URL: " postgres://svc@db:5432/svc " });
  t.equal(pg.store_url, "postgres://svc@db:5432/svc", "the URL, trimmed");
  t.equal(loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_STORE_URL: "postgresql://db/svc" }).store_url, "postgresql://db/svc", "postgresql:// too");
  t.equal(loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY }).store_url, null, "unset: null");
  t.equal(loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_STORE_URL: "" }).store_url, null, "empty: unset");
  t.end();
});
