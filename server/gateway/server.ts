// Builds the real dependencies from the configuration and listens. With SVC_GATE_REDIS_URL
// the registry, usage and rate-limit counters live in Redis (several gateways act as one);
// without it, a local registry and usage file under SVC_GATE_DATA_DIR and an in-memory limiter.
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Router } from "express";
import { RedisAdmission, type Admission } from "./admission.js";
import { createApp, stderrLog } from "./app.js";
import { DisabledAuditSink, FileAuditSink, type AuditSink } from "./audit.js";
import { fileAuditTail } from "./audit-tail.js";
import { billingRouter, FileBillingLog, PendingCancellations } from "./billing.js";
import { systemClock, type Clock } from "./clock.js";
import type { GatewayConfig } from "./config.js";
import { createGatewayMetrics } from "./metrics.js";
import { ChargeDeadlines, LocalFileUsageStore, RedisUsageStore, type UsageStore } from "./meter.js";
import { EnginePool } from "./engines.js";
import { UndiciEngineClient, type EngineClient } from "./proxy.js";
import { SharedEngineClient } from "./engine-share.js";
import { MemoryAuthThrottle, RedisAuthThrottle, type AuthThrottle } from "./auth-throttle.js";
import { MemoryRateLimiter, RedisRateLimiter, type RateLimiter } from "./ratelimit.js";
import { openRedis, type RedisHandle, type RedisTarget } from "./redis-ha.js";
import { StripePaymentProvider } from "./stripe-client.js";
import { LocalFileTenantRegistry, RedisTenantRegistry, type TenantRegistry } from "./tenants.js";
import { KeyUsageTracker, LocalFileKeyUsageStore, RedisKeyUsageStore, type KeyUsageStore } from "./key-usage.js";
import { warmOffload } from "../http/offload.js";
import { closeAll } from "../../lib/close-all.js";
import { closeGracefully } from "../http/close.js";

export interface RunningGateway {
  url: string;
  port: number;
  close(): Promise<void>;
  /** Reopens the audit and billing logs at their paths (log rotation; `svc gateway` does it on SIGHUP). */
  reopenLogs(): Promise<void>;
}

export interface StartOptions {
  clock?: Clock;
  billing?: Router;
  /** Opens the Redis link (default: the gateway's own client, redis-ha.ts); the bench compares clients through it. */
  openRedis?: (target: RedisTarget) => Promise<RedisHandle>;
  /** How long close() waits for the requests under way before it cuts them (default CLOSE_GRACE_MS, 10 s). */
  closeGraceMs?: number;
}

/** The gateway's shared state: on Redis when SVC_GATE_REDIS_URL is set, else in memory and files under its data directory. */
interface GatewayState {
  redis: RedisHandle | null;
  registry: TenantRegistry;
  usage: UsageStore;
  limiter: RateLimiter;
  admission: Admission | undefined;
  authThrottle: AuthThrottle;
  keyUsageStore: KeyUsageStore;
}

async function openState(config: GatewayConfig, clock: Clock, opts: StartOptions): Promise<GatewayState> {
  const failSpec = { limit: config.limits.authFailLimit, windowMs: config.limits.authFailWindowS * 1000 };
  if (config.redis) {
    // One server, a master behind sentinels, or a cluster (redis-ha.ts); on a cluster each
    // tenant's keys carry a {tenant} hash tag so that its scripts run on one slot.
    // A Redis that does not answer yet is waited for: requests needing it are 503
    // state_unavailable and /gate/health says store_connected false until it does.
    const redis = await (opts.openRedis ?? ((t: RedisTarget) => openRedis(t, { whenUp: true })))(config.redis);
    const tags = config.redis.kind === "cluster";
    const registry = new RedisTenantRegistry(redis, config.redisPrefix, tags);
    // A charge Redis receives after the gateway stopped waiting for it is refused (meter.ts):
    // the usage store and the admission share one estimate of Redis's clock.
    const deadlines = new ChargeDeadlines(redis, config.redis.timeoutMs);
    return {
      redis,
      registry,
      usage: new RedisUsageStore(redis, config.redisPrefix, tags, deadlines),
      limiter: new RedisRateLimiter(redis, config.redisPrefix, tags),
      // One round trip per request before forwarding: cached records confirmed by one script.
      admission: new RedisAdmission(redis, registry, config.redisPrefix, undefined, tags, deadlines),
      authThrottle: new RedisAuthThrottle(redis, config.redisPrefix, failSpec, clock),
      keyUsageStore: new RedisKeyUsageStore(redis, config.redisPrefix, tags),
    };
  }
  const authThrottle = new MemoryAuthThrottle(failSpec, clock);
  const registry = await LocalFileTenantRegistry.open(config.dataDir);
  // an operator sees snapshots start failing (a full disk) and written again, once each
  const usage = await LocalFileUsageStore.open(config.dataDir, undefined, {
    onSnapshot: (c) =>
      stderrLog(
        c.written
          ? { level: "info", msg: "usage snapshot written again" }
          : {
              level: "warn",
              msg: "usage snapshot could not be written; retrying (1 s, then up to every 30 s)",
              error: (c.error as NodeJS.ErrnoException).code ?? c.error.name,
            },
      ),
  });
  const limiter = new MemoryRateLimiter(clock);
  const keyUsageStore = await LocalFileKeyUsageStore.open(config.dataDir);
  return { redis: null, registry, usage, limiter, admission: undefined, authThrottle, keyUsageStore };
}

export async function startGateway(config: GatewayConfig, opts: StartOptions = {}): Promise<RunningGateway> {
  const clock = opts.clock ?? systemClock;
  const { redis, registry, usage, limiter, admission, authThrottle, keyUsageStore } = await openState(config, clock, opts);
  const keyUsage = new KeyUsageTracker(keyUsageStore);
  let audit: AuditSink;
  try {
    audit = config.auditEnabled ? await FileAuditSink.open(config.auditLogPath) : new DisabledAuditSink();
  } catch {
    await redis?.close().catch(() => {});
    throw new Error(`The audit log SVC_GATE_AUDIT_LOG_PATH (${config.auditLogPath}) cannot be opened for appending.`);
  }
  // Several engines: spread, health-checked, retried (engines.ts); one: a plain pool to it. Either
  // way at most SVC_GATE_ENGINE_CONNECTIONS requests in flight per engine, a bounded share per
  // tenant (engine-share.ts).
  const connections = config.limits.engineConnections;
  const inner: EngineClient =
    config.engineUrls.length > 1
      ? new EnginePool(config.engineUrls, config.engineServiceKey, config.engineTimeoutMs, {
          tls: { ca: config.engineCa },
          healthIntervalMs: config.engineHealthIntervalMs,
          connections,
        })
      : new UndiciEngineClient(config.engineUrl, config.engineServiceKey, config.engineTimeoutMs, connections, { ca: config.engineCa });
  const engine = new SharedEngineClient(inner, {
    connections: connections * config.engineUrls.length,
    tenantSharePct: config.limits.engineTenantSharePct,
    queueTimeoutMs: config.limits.engineQueueTimeoutMs,
  });
  // Billing: with SVC_GATE_BILLING_ENABLED the checkout and webhook routes are mounted.
  let billingLog: FileBillingLog | null = null;
  let billing = opts.billing;
  let pendingCancellations: PendingCancellations | null = null;
  if (!billing && config.billingEnabled) {
    const p = config.payment;
    try {
      billingLog = await FileBillingLog.open(config.billingLogPath);
    } catch {
      await audit.close();
      await redis?.close().catch(() => {});
      throw new Error(`The billing log SVC_GATE_BILLING_LOG_PATH (${config.billingLogPath}) cannot be opened for appending.`);
    }
    const provider = new StripePaymentProvider({ secretKey: p.secretKey!, webhookSecret: p.webhookSecret!, apiBase: p.apiBase });
    // Deactivations and moves to starter or enterprise cancel the tenant's subscription; what
    // could not be canceled is retried by a sweep now and every CANCELLATION_RETRY_MS.
    pendingCancellations = new PendingCancellations({ registry, provider, clock, log: billingLog });
    billing = billingRouter({
      registry,
      clock,
      audit,
      limiter,
      log: billingLog,
      provider,
      prices: { builder: p.priceBuilder!, pro: p.pricePro! },
      policy: { billingEnabled: config.billingEnabled, defaultRateLimit: config.defaultRateLimit },
      bodyRate: { minBytesPerS: config.limits.bodyMinBytesPerS, graceMs: config.limits.bodyGraceS * 1000 },
    });
  }
  const app = createApp({
    registry,
    limiter,
    usage,
    audit,
    engine,
    clock,
    admission,
    serviceKey: config.engineServiceKey,
    billingEnabled: config.billingEnabled,
    defaultRateLimit: config.defaultRateLimit,
    maxUploadBytes: config.maxUploadBytes,
    corsOrigins: config.corsOrigins,
    billing,
    billingAdmin: pendingCancellations ?? undefined,
    auditTail: config.auditEnabled ? fileAuditTail(config.auditLogPath) : undefined,
    metrics: createGatewayMetrics({ defaultMetrics: true }),
    metricsToken: config.metricsToken,
    limits: config.limits,
    authThrottle,
    keyUsage,
  });

  const server: Server = await new Promise((resolve, reject) => {
    const s = app.listen(config.port, config.host);
    s.once("listening", () => resolve(s));
    s.once("error", reject);
  });
  server.keepAliveTimeout = 65_000;
  warmOffload(); // the worker thread for large JSON bodies, ready before the first one
  pendingCancellations?.start();
  const { port } = server.address() as AddressInfo;
  const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host;
  let closing: Promise<void> | null = null;
  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    port,
    async reopenLogs() {
      await audit.reopen?.();
      await billingLog?.reopen();
    },
    close() {
      closing ??= (async () => {
        // the requests under way are answered before the parts they use close
        await closeGracefully(server, opts.closeGraceMs);
        // every part is closed even where one fails (a usage snapshot on a full disk): the
        // first failure is what close() rejects with
        await closeAll(
          () => pendingCancellations?.stop(),
          () => engine.close(),
          () => keyUsage.close().catch(() => {}),
          () => limiter.close(),
          () => usage.close(),
          () => registry.close(),
          () => audit.close(),
          () => billingLog?.close(),
          () => redis?.close().catch(() => {}),
        );
      })();
      return closing;
    },
  };
}
