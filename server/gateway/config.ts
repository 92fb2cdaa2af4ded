// Gateway configuration: every SVC_GATE_* variable (docs/gateway.md, docs/api.md) plus
// SVC_ENGINE_MAX_UPLOAD_BYTES, read once, validated with zod and frozen (the CA file named by
// SVC_GATE_ENGINE_CA_PATH is read and parsed here too). A bad value throws a ConfigError whose
// message is one sentence naming the variable.
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { z } from "zod";
import { jsonBodyLimit } from "../http/limits.js";
import { socketPathOf, socketPathProblem, unixUrl } from "../http/unix-socket.js";
import { isAddressOrRange } from "./client-address.js";

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(message);
    this.name = "ConfigError";
  }
}

/** How the gateway reaches Redis: one server, a master behind sentinels, or a cluster. */
export type RedisTarget = (
  | { readonly kind: "single"; readonly url: string }
  | {
      readonly kind: "sentinel";
      readonly sentinels: readonly string[];
      readonly masterName: string;
      readonly username?: string;
      readonly password?: string;
      readonly db?: number;
    }
  | { readonly kind: "cluster"; readonly nodes: readonly string[]; readonly username?: string; readonly password?: string }
) & {
  /** The longest wait for one reply (SVC_GATE_REDIS_TIMEOUT_MS); past it the request gets 503 state_unavailable. */
  readonly timeoutMs?: number;
};

export interface RateLimitSpec {
  readonly requests: number;
  readonly window_s: number;
}

export interface GatewayConfig {
  readonly host: string;
  readonly port: number;
  /** The first engine of SVC_GATE_ENGINE_URL (the only one, unless it lists several). */
  readonly engineUrl: string;
  /** Every engine of SVC_GATE_ENGINE_URL, in order, without a trailing slash, no repeats. */
  readonly engineUrls: readonly string[];
  /** How often each engine's /health is checked when there are several (SVC_GATE_ENGINE_HEALTH_INTERVAL_MS). */
  readonly engineHealthIntervalMs: number;
  /** PEM text of the CA certificates trusted for an https engine (SVC_GATE_ENGINE_CA_PATH); undefined: the system's. */
  readonly engineCa: string | undefined;
  readonly engineServiceKey: string;
  /** How long the gateway waits for the engine's response headers before answering 502. */
  readonly engineTimeoutMs: number;
  readonly dataDir: string;
  readonly redisUrl: string | undefined;
  /** How Redis is reached: SVC_GATE_REDIS_URL, SVC_GATE_REDIS_SENTINELS or SVC_GATE_REDIS_CLUSTER_NODES; undefined: no Redis. */
  readonly redis: RedisTarget | undefined;
  readonly redisPrefix: string;
  readonly auditEnabled: boolean;
  readonly auditLogPath: string;
  /** Allowed CORS origins; empty means CORS is off. "*" allows any origin. */
  readonly corsOrigins: readonly string[];
  readonly billingEnabled: boolean;
  readonly defaultRateLimit: RateLimitSpec;
  readonly maxUploadBytes: number;
  readonly payment: {
    readonly secretKey: string | undefined;
    readonly publishableKey: string | undefined;
    readonly webhookSecret: string | undefined;
    readonly priceBuilder: string | undefined;
    readonly pricePro: string | undefined;
    readonly apiBase: string | undefined;
  };
  /** JSONL record of every payment event applied or skipped (billing). */
  readonly billingLogPath: string;
  /** SVC_GATE_METRICS_TOKEN: reads GET /metrics only; the service key reads it too. */
  readonly metricsToken: string | undefined;
  /** Abuse limits (docs/security.md). */
  readonly limits: GatewayLimits;
}

/** The gateway's protective limits, each with its SVC_GATE_* variable and default (docs/security.md). */
export interface GatewayLimits {
  /** SVC_GATE_ENGINE_CONNECTIONS: connections to the engine, shared by all tenants. */
  readonly engineConnections: number;
  /** SVC_GATE_ENGINE_TENANT_SHARE_PCT: the share of them one tenant may hold at once. */
  readonly engineTenantSharePct: number;
  /** SVC_GATE_ENGINE_QUEUE_TIMEOUT_MS: how long a request waits for an engine connection before 503. */
  readonly engineQueueTimeoutMs: number;
  /** SVC_GATE_BODY_MIN_RATE: bytes per second a request body must keep up, on average, after the grace time. */
  readonly bodyMinBytesPerS: number;
  /** SVC_GATE_BODY_GRACE_S: seconds a body may take before the rate applies; also the longest pause between two reads. */
  readonly bodyGraceS: number;
  /** SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT: bytes of request bodies held in memory at once, all requests together. */
  readonly bodyBytesInFlight: number;
  /** SVC_GATE_BODY_TENANT_SHARE_PCT: the share of those bytes one tenant's bodies may hold at once. */
  readonly bodyTenantSharePct: number;
  /** SVC_GATE_AUTH_FAIL_LIMIT: failed authentications per client address per window before 429. */
  readonly authFailLimit: number;
  /** SVC_GATE_AUTH_FAIL_WINDOW_S: that window, in seconds. */
  readonly authFailWindowS: number;
  /**
   * SVC_GATE_TRUSTED_PROXIES: peer addresses and CIDR ranges (a TLS proxy in front) whose
   * X-Forwarded-For names the client address; empty: the peer address is the client's.
   */
  readonly trustedProxies: readonly string[];
  /** SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS: connections one client address may hold open at once (0: no cap; trusted proxies have none). */
  readonly maxConnectionsPerAddress: number;
}

/** The defaults of GatewayLimits (the values documented in docs/security.md). */
export const DEFAULT_LIMITS: GatewayLimits = Object.freeze({
  engineConnections: 128,
  engineTenantSharePct: 25,
  engineQueueTimeoutMs: 5000,
  bodyMinBytesPerS: 16 * 1024,
  bodyGraceS: 10,
  bodyBytesInFlight: 512 * 1024 * 1024,
  bodyTenantSharePct: 50,
  authFailLimit: 100,
  authFailWindowS: 60,
  trustedProxies: Object.freeze([]) as readonly string[],
  maxConnectionsPerAddress: 1024,
});

const bool = z
  .string()
  .trim()
  .toLowerCase()
  .refine((s) => ["true", "false", "1", "0", "yes", "no", "on", "off"].includes(s), "must be true or false")
  .transform((s) => ["true", "1", "yes", "on"].includes(s));

const intIn = (min: number, max: number) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .refine((n) => n >= min && n <= max, `must be between ${min} and ${max}`);

const httpUrl = z
  .string()
  .trim()
  .refine((s) => {
    try {
      const u = new URL(s);
      return (u.protocol === "http:" || u.protocol === "https:") && (u.pathname === "/" || u.pathname === "");
    } catch {
      return false;
    }
  }, "must be an http(s) URL without a path, such as http://127.0.0.1:8000");

// One engine URL or a comma-separated list of them (at most 64, each once).
const engineUrlList = z.string().transform((s, ctx) => {
  const parts = s.split(",").map((p) => p.trim());
  if (parts.length > 64) {
    ctx.addIssue({ code: "custom", message: "must list at most 64 engines" });
    return z.NEVER;
  }
  const out: string[] = [];
  for (const p of parts) {
    // an engine on this machine over its Unix socket (SVC_ENGINE_SOCKET): unix:/path/engine.sock
    const socket = socketPathOf(p);
    if (socket !== null || /^unix:/i.test(p)) {
      const problem = socket === null ? "must be unix: followed by an absolute path" : socketPathProblem(socket);
      if (problem !== null) {
        ctx.addIssue({ code: "custom", message: `entry '${p.slice(0, 200)}' ${problem}` });
        return z.NEVER;
      }
      const u = unixUrl(socket!);
      if (out.includes(u)) {
        ctx.addIssue({ code: "custom", message: `lists ${u} twice` });
        return z.NEVER;
      }
      out.push(u);
      continue;
    }
    const r = httpUrl.safeParse(p);
    if (!r.success) {
      ctx.addIssue({ code: "custom", message: `entry '${p.slice(0, 200)}' ${r.error.issues[0]?.message ?? "is invalid"}` });
      return z.NEVER;
    }
    const u = r.data.replace(/\/$/, "");
    if (out.includes(u)) {
      ctx.addIssue({ code: "custom", message: `lists ${u} twice` });
      return z.NEVER;
    }
    out.push(u);
  }
  return out;
});

const redisUrl = z
  .string()
  .trim()
  .refine((s) => {
    try {
      const u = new URL(s);
      return u.protocol === "redis:" || u.protocol === "rediss:";
    } catch {
      return false;
    }
  }, "must be a redis:// or rediss:// URL");

const nonEmpty = z.string().trim().min(1, "must not be empty");

// A comma-separated list of redis:// or rediss:// URLs (at most 64).
const redisUrlList = z.string().transform((s, ctx) => {
  const parts = s.split(",").map((p) => p.trim());
  if (parts.length > 64) {
    ctx.addIssue({ code: "custom", message: "must list at most 64 servers" });
    return z.NEVER;
  }
  for (const p of parts) {
    if (!redisUrl.safeParse(p).success) {
      // The entry is not repeated: it may carry a password.
      ctx.addIssue({ code: "custom", message: `entry ${parts.indexOf(p) + 1} must be a redis:// or rediss:// URL such as redis://10.0.0.5:26379` });
      return z.NEVER;
    }
  }
  return parts;
});

// A PEM file of CA certificates, read and parsed here, once: the value is the certificates' text.
const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;
const caFile = nonEmpty.transform((path, ctx) => {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    ctx.addIssue({ code: "custom", message: `cannot be read (${(e as NodeJS.ErrnoException).code ?? "error"}: ${path})` });
    return z.NEVER;
  }
  const certs = text.match(PEM_CERT) ?? [];
  if (certs.length === 0) {
    ctx.addIssue({ code: "custom", message: `must name a PEM file of CA certificates, and ${path} holds none` });
    return z.NEVER;
  }
  for (const [i, pem] of certs.entries()) {
    try {
      new X509Certificate(pem);
    } catch {
      ctx.addIssue({ code: "custom", message: `names ${path}, whose certificate ${i + 1} cannot be parsed` });
      return z.NEVER;
    }
  }
  return certs.join("\n") + "\n";
});

// A comma-separated list of IP addresses and CIDR ranges (at most 64), checked as net.BlockList takes them.
const addressList = z.string().transform((s, ctx) => {
  const parts = s
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p !== "");
  if (parts.length > 64) {
    ctx.addIssue({ code: "custom", message: "must list at most 64 addresses or ranges" });
    return z.NEVER;
  }
  for (const p of parts) {
    if (!isAddressOrRange(p)) {
      ctx.addIssue({ code: "custom", message: `entry '${p.slice(0, 100)}' must be an IP address or a CIDR range such as 10.0.0.0/8` });
      return z.NEVER;
    }
  }
  return Object.freeze(parts) as readonly string[];
});

// One entry per variable: its schema and default (undefined = optional, no default).
const VARS = {
  SVC_GATE_HOST: [nonEmpty, "0.0.0.0"],
  SVC_GATE_PORT: [intIn(0, 65535), "8080"],
  SVC_GATE_ENGINE_URL: [engineUrlList, "http://127.0.0.1:8000"],
  SVC_GATE_ENGINE_HEALTH_INTERVAL_MS: [intIn(100, 60_000), "1000"],
  SVC_GATE_ENGINE_CA_PATH: [caFile, undefined],
  SVC_GATE_ENGINE_SERVICE_KEY: [z.string().min(32, "must be at least 32 characters (use 32 or more random characters)"), undefined],
  SVC_GATE_ENGINE_TIMEOUT_MS: [intIn(1, 3_600_000), "30000"],
  SVC_GATE_DATA_DIR: [nonEmpty, "./svc-data/gate"],
  SVC_GATE_REDIS_URL: [redisUrl, undefined],
  SVC_GATE_REDIS_SENTINELS: [redisUrlList, undefined],
  SVC_GATE_REDIS_SENTINEL_MASTER: [
    z
      .string()
      .trim()
      .regex(/^[A-Za-z0-9._-]{1,255}$/, "must be the master's name as the sentinels know it (letters, digits, dots, underscores, hyphens)"),
    undefined,
  ],
  SVC_GATE_REDIS_CLUSTER_NODES: [redisUrlList, undefined],
  SVC_GATE_REDIS_USERNAME: [z.string().min(1), undefined],
  SVC_GATE_REDIS_PASSWORD: [z.string().min(1), undefined],
  SVC_GATE_REDIS_TIMEOUT_MS: [intIn(50, 600_000), "2000"],
  SVC_GATE_REDIS_PREFIX: [z.string().regex(/^[A-Za-z0-9_:.-]{1,64}$/, "must be 1-64 letters, digits, underscores, colons, dots or hyphens"), "svc:"],
  SVC_GATE_AUDIT_ENABLED: [bool, "true"],
  SVC_GATE_AUDIT_LOG_PATH: [nonEmpty, "/var/log/svc-gate/audit.jsonl"],
  SVC_GATE_CORS_ORIGINS: [z.string(), undefined],
  SVC_GATE_BILLING_ENABLED: [bool, "false"],
  SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: [intIn(1, 1_000_000_000), "100"],
  SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S: [intIn(1, 86_400 * 31), "60"],
  SVC_ENGINE_MAX_UPLOAD_BYTES: [intIn(1, Number.MAX_SAFE_INTEGER), String(100 * 1024 * 1024)],
  SVC_GATE_PAYMENT_SECRET_KEY: [z.string(), undefined],
  SVC_GATE_PAYMENT_PUBLISHABLE_KEY: [z.string(), undefined],
  SVC_GATE_PAYMENT_WEBHOOK_SECRET: [z.string(), undefined],
  SVC_GATE_PAYMENT_PRICE_BUILDER: [z.string(), undefined],
  SVC_GATE_PAYMENT_PRICE_PRO: [z.string(), undefined],
  SVC_GATE_PAYMENT_API_BASE: [httpUrl, undefined],
  SVC_GATE_BILLING_LOG_PATH: [nonEmpty, undefined],
  SVC_GATE_METRICS_TOKEN: [z.string().trim().min(16, "must be at least 16 characters").max(512, "must be at most 512 characters"), undefined],
  SVC_GATE_ENGINE_CONNECTIONS: [intIn(1, 4096), String(DEFAULT_LIMITS.engineConnections)],
  SVC_GATE_ENGINE_TENANT_SHARE_PCT: [intIn(1, 100), String(DEFAULT_LIMITS.engineTenantSharePct)],
  SVC_GATE_ENGINE_QUEUE_TIMEOUT_MS: [intIn(1, 600_000), String(DEFAULT_LIMITS.engineQueueTimeoutMs)],
  SVC_GATE_BODY_MIN_RATE: [intIn(1, 1024 * 1024 * 1024), String(DEFAULT_LIMITS.bodyMinBytesPerS)],
  SVC_GATE_BODY_GRACE_S: [intIn(1, 3600), String(DEFAULT_LIMITS.bodyGraceS)],
  SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT: [intIn(1, Number.MAX_SAFE_INTEGER), String(DEFAULT_LIMITS.bodyBytesInFlight)],
  SVC_GATE_AUTH_FAIL_LIMIT: [intIn(1, 1_000_000), String(DEFAULT_LIMITS.authFailLimit)],
  SVC_GATE_AUTH_FAIL_WINDOW_S: [intIn(1, 86_400), String(DEFAULT_LIMITS.authFailWindowS)],
  SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS: [intIn(0, 1_000_000), String(DEFAULT_LIMITS.maxConnectionsPerAddress)],
  SVC_GATE_BODY_TENANT_SHARE_PCT: [intIn(1, 100), String(DEFAULT_LIMITS.bodyTenantSharePct)],
  SVC_GATE_TRUSTED_PROXIES: [addressList, ""],
} as const satisfies Record<string, readonly [z.ZodType, string | undefined]>;

type VarName = keyof typeof VARS;

/** Every variable the gateway reads (deployment files are checked against this list). */
export const GATEWAY_ENV_VARS: readonly string[] = Object.freeze(Object.keys(VARS));

function read<N extends VarName>(env: NodeJS.ProcessEnv, name: N): z.output<(typeof VARS)[N][0]> | undefined {
  const [schema, dflt] = VARS[name];
  const raw = env[name] === undefined || env[name] === "" ? dflt : env[name];
  if (raw === undefined) return undefined;
  const r = (schema as z.ZodType).safeParse(raw);
  if (!r.success) {
    const msg = r.error.issues[0]?.message ?? "is invalid";
    throw new ConfigError(name, `${name} ${msg.replace(/\.$/, "")}.`);
  }
  return r.data as z.output<(typeof VARS)[N][0]>;
}

function parseOrigins(raw: string | undefined): string[] {
  if (raw === undefined) return [];
  const list = raw
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  for (const o of list) {
    if (o === "*") continue;
    let ok = false;
    try {
      const u = new URL(o);
      ok = (u.protocol === "http:" || u.protocol === "https:") && u.origin === o.replace(/\/$/, "");
    } catch {
      ok = false;
    }
    if (!ok) throw new ConfigError("SVC_GATE_CORS_ORIGINS", `SVC_GATE_CORS_ORIGINS entry '${o}' is not an origin such as https://app.example.com or *.`);
  }
  return list.map((o) => o.replace(/\/$/, ""));
}

/** One of SVC_GATE_REDIS_URL, SVC_GATE_REDIS_SENTINELS (with the master's name) or SVC_GATE_REDIS_CLUSTER_NODES. */
function redisTarget(env: NodeJS.ProcessEnv): RedisTarget | undefined {
  const url = read(env, "SVC_GATE_REDIS_URL");
  const sentinels = read(env, "SVC_GATE_REDIS_SENTINELS");
  const master = read(env, "SVC_GATE_REDIS_SENTINEL_MASTER");
  const nodes = read(env, "SVC_GATE_REDIS_CLUSTER_NODES");
  const username = read(env, "SVC_GATE_REDIS_USERNAME");
  const password = read(env, "SVC_GATE_REDIS_PASSWORD");
  const timeoutMs = read(env, "SVC_GATE_REDIS_TIMEOUT_MS")!;
  const given = [url && "SVC_GATE_REDIS_URL", sentinels && "SVC_GATE_REDIS_SENTINELS", nodes && "SVC_GATE_REDIS_CLUSTER_NODES"].filter(Boolean) as string[];
  if (given.length > 1) throw new ConfigError(given[1]!, `${given[1]} and ${given[0]} name Redis two ways; set only one of them.`);
  if (master !== undefined && !sentinels)
    throw new ConfigError("SVC_GATE_REDIS_SENTINEL_MASTER", "SVC_GATE_REDIS_SENTINEL_MASTER is set without SVC_GATE_REDIS_SENTINELS.");
  if (sentinels) {
    if (master === undefined)
      throw new ConfigError(
        "SVC_GATE_REDIS_SENTINEL_MASTER",
        "SVC_GATE_REDIS_SENTINEL_MASTER must be set with SVC_GATE_REDIS_SENTINELS (the master's name, such as mymaster).",
      );
    return Object.freeze({ kind: "sentinel", sentinels: Object.freeze(sentinels), masterName: master, username, password, timeoutMs });
  }
  if (nodes) return Object.freeze({ kind: "cluster", nodes: Object.freeze(nodes), username, password, timeoutMs });
  if ((username !== undefined || password !== undefined) && url === undefined) {
    throw new ConfigError(
      username !== undefined ? "SVC_GATE_REDIS_USERNAME" : "SVC_GATE_REDIS_PASSWORD",
      "SVC_GATE_REDIS_USERNAME and SVC_GATE_REDIS_PASSWORD apply to SVC_GATE_REDIS_SENTINELS or SVC_GATE_REDIS_CLUSTER_NODES, and neither is set.",
    );
  }
  if (url) {
    if (username !== undefined || password !== undefined) {
      const name = password !== undefined ? "SVC_GATE_REDIS_PASSWORD" : "SVC_GATE_REDIS_USERNAME";
      throw new ConfigError(name, `${name} does not apply to SVC_GATE_REDIS_URL, whose URL carries its credentials.`);
    }
    return Object.freeze({ kind: "single", url, timeoutMs });
  }
  return undefined;
}

/** Reads and validates the gateway's environment once; the result is deeply frozen. */
export function loadGatewayConfig(env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const serviceKey = read(env, "SVC_GATE_ENGINE_SERVICE_KEY");
  if (serviceKey === undefined) {
    throw new ConfigError("SVC_GATE_ENGINE_SERVICE_KEY", "SVC_GATE_ENGINE_SERVICE_KEY must be set (the service key for admin calls and for the engine).");
  }
  const engineUrls = Object.freeze(read(env, "SVC_GATE_ENGINE_URL")!);
  const redis = redisTarget(env);
  const cfg: GatewayConfig = {
    host: read(env, "SVC_GATE_HOST")!,
    port: read(env, "SVC_GATE_PORT")!,
    engineUrl: engineUrls[0]!,
    engineUrls,
    engineHealthIntervalMs: read(env, "SVC_GATE_ENGINE_HEALTH_INTERVAL_MS")!,
    engineCa: read(env, "SVC_GATE_ENGINE_CA_PATH"),
    engineServiceKey: serviceKey,
    engineTimeoutMs: read(env, "SVC_GATE_ENGINE_TIMEOUT_MS")!,
    dataDir: read(env, "SVC_GATE_DATA_DIR")!,
    redisUrl: read(env, "SVC_GATE_REDIS_URL"),
    redis,
    redisPrefix: read(env, "SVC_GATE_REDIS_PREFIX")!,
    auditEnabled: read(env, "SVC_GATE_AUDIT_ENABLED")!,
    auditLogPath: read(env, "SVC_GATE_AUDIT_LOG_PATH")!,
    corsOrigins: Object.freeze(parseOrigins(read(env, "SVC_GATE_CORS_ORIGINS"))),
    billingEnabled: read(env, "SVC_GATE_BILLING_ENABLED")!,
    defaultRateLimit: Object.freeze({
      requests: read(env, "SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS")!,
      window_s: read(env, "SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S")!,
    }),
    maxUploadBytes: read(env, "SVC_ENGINE_MAX_UPLOAD_BYTES")!,
    payment: Object.freeze({
      secretKey: read(env, "SVC_GATE_PAYMENT_SECRET_KEY"),
      publishableKey: read(env, "SVC_GATE_PAYMENT_PUBLISHABLE_KEY"),
      webhookSecret: read(env, "SVC_GATE_PAYMENT_WEBHOOK_SECRET"),
      priceBuilder: read(env, "SVC_GATE_PAYMENT_PRICE_BUILDER"),
      pricePro: read(env, "SVC_GATE_PAYMENT_PRICE_PRO"),
      apiBase: read(env, "SVC_GATE_PAYMENT_API_BASE")?.replace(/\/$/, ""),
    }),
    metricsToken: read(env, "SVC_GATE_METRICS_TOKEN"),
    billingLogPath: read(env, "SVC_GATE_BILLING_LOG_PATH") ?? join(dirname(read(env, "SVC_GATE_AUDIT_LOG_PATH")!), "billing.jsonl"),
    limits: Object.freeze({
      engineConnections: read(env, "SVC_GATE_ENGINE_CONNECTIONS")!,
      engineTenantSharePct: read(env, "SVC_GATE_ENGINE_TENANT_SHARE_PCT")!,
      engineQueueTimeoutMs: read(env, "SVC_GATE_ENGINE_QUEUE_TIMEOUT_MS")!,
      bodyMinBytesPerS: read(env, "SVC_GATE_BODY_MIN_RATE")!,
      bodyGraceS: read(env, "SVC_GATE_BODY_GRACE_S")!,
      bodyBytesInFlight: read(env, "SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT")!,
      authFailLimit: read(env, "SVC_GATE_AUTH_FAIL_LIMIT")!,
      authFailWindowS: read(env, "SVC_GATE_AUTH_FAIL_WINDOW_S")!,
      bodyTenantSharePct: read(env, "SVC_GATE_BODY_TENANT_SHARE_PCT")!,
      trustedProxies: read(env, "SVC_GATE_TRUSTED_PROXIES")!,
      maxConnectionsPerAddress: read(env, "SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS")!,
    }),
  };
  // A body the upload limit allows must fit the in-flight budget, or it could never be served.
  const largest = jsonBodyLimit(cfg.maxUploadBytes);
  if (cfg.limits.bodyBytesInFlight < largest) {
    throw new ConfigError(
      "SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT",
      `SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT must be at least ${largest} bytes, the largest JSON body SVC_ENGINE_MAX_UPLOAD_BYTES allows.`,
    );
  }
  if (cfg.billingEnabled) {
    // Billing on without its credentials would accept no webhook and create no checkout: refuse to start.
    for (const name of [
      "SVC_GATE_PAYMENT_SECRET_KEY",
      "SVC_GATE_PAYMENT_WEBHOOK_SECRET",
      "SVC_GATE_PAYMENT_PRICE_BUILDER",
      "SVC_GATE_PAYMENT_PRICE_PRO",
    ] as const) {
      if (!read(env, name)?.trim()) throw new ConfigError(name, `${name} must be set when SVC_GATE_BILLING_ENABLED is true.`);
    }
  }
  return Object.freeze(cfg);
}
