// Every SVC_ENGINE_* variable, parsed once with zod and frozen. A bad value throws an
// error whose message is one sentence naming the variable. API keys are kept only as
// SHA-256 digests.
import { createHash } from "node:crypto";
import { totalmem } from "node:os";
import { z } from "zod";
import { ValidationError } from "../../lib/errors.js";
import { maxRankSchema, toleranceSchema } from "../../lib/schemas.js";
import { socketPathProblem } from "../http/unix-socket.js";

export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

export interface EngineConfig {
  readonly host: string;
  readonly port: number;
  /** A Unix socket the engine listens on as well (SVC_ENGINE_SOCKET), for a gateway on the same machine; null: none. */
  readonly socket_path: string | null;
  readonly data_dir: string;
  /** A PostgreSQL URL (SVC_ENGINE_STORE_URL): the store lives there instead of under data_dir. */
  readonly store_url: string | null;
  /** SHA-256 digests of the accepted service keys (the keys themselves are not kept). */
  readonly api_key_digests: readonly Buffer[];
  readonly require_auth: boolean;
  readonly max_upload_bytes: number;
  readonly min_compression_ratio: number;
  readonly min_compress_bytes: number;
  readonly compression_tol: number;
  readonly max_rank: number;
  readonly tls_cert_path: string | null;
  readonly tls_key_path: string | null;
  readonly log_level: LogLevel;
  readonly device: string;
  /** null: decided from the device (half its free memory). */
  readonly gpu_cache_bytes: number | null;
  /** Bytes of recently read payloads the store keeps in memory (lib/store/context.ts PayloadCache); 0 keeps none. */
  readonly payload_cache_bytes: number;
  /** SHA-256 of SVC_ENGINE_METRICS_TOKEN (a bearer token that reads /metrics only), or null. */
  readonly metrics_token_digest: Buffer | null;
  /** Memory that request bodies and dense serve answers in flight may hold together (503 past it). */
  readonly memory_budget_bytes: number;
  /** Percentage of that memory one tenant's requests may hold together (one request may take more when the tenant holds nothing). */
  readonly memory_tenant_share_pct: number;
  /** Largest dense answer of a JSON serve; larger ones are asked for as application/octet-stream. */
  readonly max_json_serve_bytes: number;
  /** Bytes per second a request body must keep up on average after the grace time (400 and the connection closed past it). */
  readonly body_min_bytes_per_s: number;
  /** Seconds a request body may take before the rate applies; also the longest pause between two chunks. */
  readonly body_grace_s: number;
  /** PostgreSQL: the longest wait for a connection and for one statement (503 store_unavailable past it). */
  readonly store_timeout_ms: number;
  /** Connections one client address may hold open at once over TCP (0: no cap); the Unix socket has none. */
  readonly max_connections_per_address: number;
}

/** A quarter of the machine's memory (6 GiB on 24 GiB), at least 256 MiB. */
export const defaultMemoryBudgetBytes = (): number => Math.max(256 * 1024 * 1024, Math.floor(totalmem() / 4));

/** 16 MiB of dense data: about 22 MiB of base64 text, serialised in a few tens of milliseconds. */
export const DEFAULT_MAX_JSON_SERVE_BYTES = 16 * 1024 * 1024;

const bool = z
  .string()
  .transform((s) => s.trim().toLowerCase())
  .pipe(z.enum(["true", "false", "1", "0", "yes", "no", "on", "off"], "must be true or false"))
  .transform((s) => s === "true" || s === "1" || s === "yes" || s === "on");
const int = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));
const num = (schema: z.ZodType<number, number>) =>
  z
    .string()
    .trim()
    .regex(/^[0-9.eE+-]+$/, "must be a number")
    .transform(Number)
    .pipe(schema);

const VARS = {
  SVC_ENGINE_HOST: z.string().trim().min(1, "must not be empty").default("127.0.0.1"),
  SVC_ENGINE_PORT: int(0, 65535).default(8000),
  SVC_ENGINE_SOCKET: z
    .string()
    .superRefine((p, ctx) => {
      const problem = socketPathProblem(p);
      if (problem !== null) ctx.addIssue({ code: "custom", message: problem });
    })
    .optional(),
  SVC_ENGINE_DATA_DIR: z.string().trim().min(1, "must not be empty").default("./svc-data/engine"),
  SVC_ENGINE_STORE_URL: z
    .string()
    .trim()
    .regex(/^postgres(ql)?:\/\/[^\s]+$/, "must be a postgres:// or postgresql:// URL")
    .optional(),
  SVC_ENGINE_API_KEYS: z.string().default(""),
  SVC_ENGINE_REQUIRE_AUTH: bool.default(true),
  SVC_ENGINE_MAX_UPLOAD_BYTES: int(1).default(100 * 1024 * 1024),
  SVC_ENGINE_MIN_COMPRESSION_RATIO: num(z.number().min(1, "must be at least 1").max(1e6)).default(1.2),
  SVC_ENGINE_MIN_COMPRESS_BYTES: int(0).default(4096),
  SVC_ENGINE_COMPRESSION_TOL: num(toleranceSchema).default(1e-3),
  SVC_ENGINE_MAX_RANK: int(1).pipe(maxRankSchema).default(256),
  SVC_ENGINE_TLS_CERT_PATH: z.string().trim().min(1, "must not be empty").optional(),
  SVC_ENGINE_TLS_KEY_PATH: z.string().trim().min(1, "must not be empty").optional(),
  SVC_ENGINE_LOG_LEVEL: z
    .string()
    .trim()
    .transform((s) => s.toLowerCase())
    .pipe(z.enum(["debug", "info", "warn", "error", "silent"], "must be one of debug, info, warn, error, silent"))
    .default("info"),
  SVC_ENGINE_DEVICE: z
    .string()
    .trim()
    .transform((s) => s.toLowerCase())
    .pipe(z.string().regex(/^(auto|cpu|cuda(:\d+)?)$/, "must be auto, cpu, cuda or cuda:N"))
    .default("auto"),
  SVC_ENGINE_GPU_CACHE_BYTES: int(0).optional(),
  SVC_ENGINE_PAYLOAD_CACHE_BYTES: int(0).default(64 * 1024 * 1024),
  SVC_ENGINE_METRICS_TOKEN: z.string().trim().min(16, "must be at least 16 characters").max(512, "must be at most 512 characters").optional(),
  SVC_ENGINE_MEMORY_BUDGET_BYTES: int(16 * 1024 * 1024).optional(),
  SVC_ENGINE_MEMORY_TENANT_SHARE_PCT: int(1, 100).default(50),
  SVC_ENGINE_MAX_JSON_SERVE_BYTES: int(0).default(DEFAULT_MAX_JSON_SERVE_BYTES),
  SVC_ENGINE_BODY_MIN_RATE: int(1, 1024 * 1024 * 1024).default(16 * 1024),
  SVC_ENGINE_BODY_GRACE_S: int(1, 3600).default(10),
  SVC_ENGINE_STORE_TIMEOUT_MS: int(100, 600_000).default(5000),
  SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS: int(0, 1_000_000).default(1024),
} as const;

/** Every variable the engine reads (deployment files are checked against this list). */
export const ENGINE_ENV_VARS: readonly string[] = Object.freeze(Object.keys(VARS));

const digest = (k: string): Buffer => createHash("sha256").update(k, "utf8").digest();

/**
 * Reads the engine's configuration from `env`.
 * @example const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: key });
 */
export function loadEngineConfig(env: NodeJS.ProcessEnv = process.env): EngineConfig {
  const v: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(VARS)) {
    const raw = env[name];
    const r = (schema as z.ZodType).safeParse(raw === "" && name !== "SVC_ENGINE_API_KEYS" ? undefined : raw);
    if (!r.success) {
      const msg = r.error.issues[0]!.message;
      throw new ValidationError(`${name} ${/^(must|is)\b/.test(msg) ? msg : `is invalid: ${msg}`}.`, name);
    }
    v[name] = r.data;
  }
  const keys = (v.SVC_ENGINE_API_KEYS as string)
    .split(",")
    .map((k) => k.trim())
    .filter((k) => k.length > 0);
  if (v.SVC_ENGINE_REQUIRE_AUTH && keys.length === 0)
    throw new ValidationError("SVC_ENGINE_API_KEYS must list at least one service key when SVC_ENGINE_REQUIRE_AUTH is true.", "SVC_ENGINE_API_KEYS");
  const cert = (v.SVC_ENGINE_TLS_CERT_PATH as string | undefined) ?? null;
  const key = (v.SVC_ENGINE_TLS_KEY_PATH as string | undefined) ?? null;
  if ((cert === null) !== (key === null))
    throw new ValidationError(
      "SVC_ENGINE_TLS_CERT_PATH and SVC_ENGINE_TLS_KEY_PATH must be set together.",
      cert === null ? "SVC_ENGINE_TLS_CERT_PATH" : "SVC_ENGINE_TLS_KEY_PATH",
    );
  return Object.freeze({
    host: v.SVC_ENGINE_HOST as string,
    port: v.SVC_ENGINE_PORT as number,
    socket_path: (v.SVC_ENGINE_SOCKET as string | undefined) ?? null,
    data_dir: v.SVC_ENGINE_DATA_DIR as string,
    store_url: (v.SVC_ENGINE_STORE_URL as string | undefined) ?? null,
    api_key_digests: Object.freeze(keys.map(digest)),
    require_auth: v.SVC_ENGINE_REQUIRE_AUTH as boolean,
    max_upload_bytes: v.SVC_ENGINE_MAX_UPLOAD_BYTES as number,
    min_compression_ratio: v.SVC_ENGINE_MIN_COMPRESSION_RATIO as number,
    min_compress_bytes: v.SVC_ENGINE_MIN_COMPRESS_BYTES as number,
    compression_tol: v.SVC_ENGINE_COMPRESSION_TOL as number,
    max_rank: v.SVC_ENGINE_MAX_RANK as number,
    tls_cert_path: cert,
    tls_key_path: key,
    log_level: v.SVC_ENGINE_LOG_LEVEL as LogLevel,
    device: v.SVC_ENGINE_DEVICE as string,
    gpu_cache_bytes: (v.SVC_ENGINE_GPU_CACHE_BYTES as number | undefined) ?? null,
    payload_cache_bytes: v.SVC_ENGINE_PAYLOAD_CACHE_BYTES as number,
    metrics_token_digest: v.SVC_ENGINE_METRICS_TOKEN === undefined ? null : digest(v.SVC_ENGINE_METRICS_TOKEN as string),
    memory_budget_bytes: (v.SVC_ENGINE_MEMORY_BUDGET_BYTES as number | undefined) ?? defaultMemoryBudgetBytes(),
    memory_tenant_share_pct: v.SVC_ENGINE_MEMORY_TENANT_SHARE_PCT as number,
    max_json_serve_bytes: v.SVC_ENGINE_MAX_JSON_SERVE_BYTES as number,
    body_min_bytes_per_s: v.SVC_ENGINE_BODY_MIN_RATE as number,
    body_grace_s: v.SVC_ENGINE_BODY_GRACE_S as number,
    store_timeout_ms: v.SVC_ENGINE_STORE_TIMEOUT_MS as number,
    max_connections_per_address: v.SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS as number,
  });
}
