// GET /gate/account (tenant key): what a tenant may know about itself — plan, namespaces, limits
// and the month's usage with its breakdown — so a tenant (the console's tenant view, the CLI)
// needs no service key to see them. It counts against the tenant's rate limit like any call,
// carries the rate-limit headers, is charged 0 CUs and leaves the usual audit record.
import express, { type Request, type Response, type Router } from "express";
import { performance } from "node:perf_hooks";
import { ForbiddenError, RateLimitedError, STATUS_OF } from "../../lib/errors.js";
import { sendError, toSvcError } from "../http/errors.js";
import { requestIdOf } from "../http/request-id.js";
import { usageRecord } from "./admin.js";
import type { AuditSink } from "./audit.js";
import { tenantKeyHashOf } from "./auth.js";
import { confirmKey, isFullGrant } from "./keys.js";
import type { Clock } from "./clock.js";
import { periodQuery, type UsageStore } from "./meter.js";
import { effectiveRateLimit, type LimitsPolicy } from "./plans.js";
import type { RateLimiter } from "./ratelimit.js";
import type { TenantRecord, TenantRegistry } from "./tenants.js";

export interface AccountDeps {
  registry: TenantRegistry;
  limiter: RateLimiter;
  usage: UsageStore;
  audit: AuditSink;
  clock: Clock;
  policy: LimitsPolicy;
}

/**
 * The preamble of a tenant-key call outside the data plane (this view, billing's checkout): the
 * tenant authenticated (401), the call counted against its sliding window with the rate-limit
 * headers set, and 429 with the API's sentence past it.
 */
export async function admitTenantCall(
  d: { registry: TenantRegistry; limiter: RateLimiter; policy: LimitsPolicy; clock?: Clock },
  req: Request,
  res: Response,
  need: "any" | "full" = "any",
): Promise<TenantRecord> {
  const h = tenantKeyHashOf(req);
  const { tenant, grant } = confirmKey(h === null ? null : await d.registry.findByKeyHash(h), h, d.clock?.now() ?? Date.now());
  res.locals.key_id = grant.key_id; // for the call's audit record
  // Actions on the account itself (a plan purchase) need a key with every scope on every namespace.
  if (need === "full" && !isFullGrant(grant))
    throw new ForbiddenError(`API key ${grant.key_id} is a scoped key; this call needs the tenant's own key or a key with scope write on every namespace.`);
  const rl = effectiveRateLimit(tenant, d.policy);
  const rate = await d.limiter.hit(tenant.tenant_id, { requests: rl.requests, windowMs: rl.window_s * 1000 });
  res.setHeader("X-RateLimit-Limit", String(rate.limit));
  res.setHeader("X-RateLimit-Remaining", String(rate.remaining));
  res.setHeader("X-RateLimit-Reset", String(rate.resetS));
  if (!rate.allowed)
    throw new RateLimitedError(`Rate limit exceeded for tenant ${tenant.tenant_id}; retry after ${rate.retryAfterS} seconds.`, rate.retryAfterS);
  return tenant;
}

export function accountRouter(d: AccountDeps): Router {
  const r = express.Router();
  r.get("/gate/account", async (req: Request, res: Response) => {
    const t0 = performance.now();
    let tenantId = "";
    let answer: { status: number; body: unknown } | null = null;
    let failure: ReturnType<typeof toSvcError> | null = null;
    try {
      const tenant = await admitTenantCall(d, req, res);
      tenantId = tenant.tenant_id;
      const rl = effectiveRateLimit(tenant, d.policy);
      const period = periodQuery(req.query, d.clock.now());
      const u = await usageRecord(d.usage, tenant, period);
      answer = {
        status: 200,
        body: {
          tenant_id: tenant.tenant_id,
          plan: tenant.plan,
          namespaces: tenant.namespaces,
          monthly_quota: tenant.monthly_quota,
          rate_limit: rl,
          usage: { period: u.period, cus_used: u.cus_used, monthly_quota: u.monthly_quota, utilization: u.utilization, breakdown: u.breakdown },
        },
      };
    } catch (err) {
      failure = toSvcError(err);
    }
    // The audit record is written before the answer goes out, as on every other route.
    try {
      await d.audit.write({
        ts: new Date(d.clock.now()).toISOString(),
        tenant_id: tenantId,
        method: req.method,
        path: req.originalUrl.split("?")[0]!,
        namespace: "",
        status: failure ? STATUS_OF[failure.code] : answer!.status,
        cus: 0,
        latency_ms: Math.round((performance.now() - t0) * 1000) / 1000,
        request_id: requestIdOf(res),
        key_id: typeof res.locals.key_id === "string" ? res.locals.key_id : "",
      });
    } catch {
      // An audit log that cannot be written must not leave the caller hanging.
    }
    if (failure) sendError(res, failure, requestIdOf(res));
    else res.status(answer!.status).json(answer!.body);
  });
  return r;
}
