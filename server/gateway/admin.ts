// Admin endpoints (docs/api.md, admin routes): tenants, keys, plans, usage, reload; scoped keys in keys.ts.
// Service key only (Authorization: Bearer); a tenant key here is 401. Unknown tenant 404,
// existing tenant 409 `version_conflict`, unknown plan 400. Keys are returned once and stored hashed.
import express, { type Request, type Response, type Router } from "express";
import { strictJsonBody } from "../http/json-body.js";
import { z } from "zod";
import { ConflictError, NotFoundError, ValidationError } from "../../lib/errors.js";
import { pathInSentence } from "../http/errors.js";
import { namespaceSchema, parseOrThrow, tenantIdSchema } from "../../lib/fields.js";
import { sha256Hex } from "../../lib/sha256.js";
import { checkServiceKey, generateApiKey } from "./auth.js";
import type { Clock } from "./clock.js";
import { OPERATIONS, periodQuery, toCus, type UsageStore } from "./meter.js";
import { effectiveRateLimit, planSchema, TIERS, type LimitsPolicy, type Plan } from "./plans.js";
import { termsForPeriod, withSubscriptionToCancel, type TenantRecord, type TenantRegistry } from "./tenants.js";
import { requestIdOf } from "../http/request-id.js";
import { auditTailQuerySchema, type AuditTailReader } from "./audit-tail.js";
import type { KeyUsageTracker } from "./key-usage.js";
import { addKeyRoutes } from "./keys.js";

export interface AdminDeps {
  registry: TenantRegistry;
  usage: UsageStore;
  clock: Clock;
  policy: LimitsPolicy;
  serviceKey: string;
  /** Reads this gateway's audit log back, newest first (GET /gate/admin/audit); absent: 404. */
  auditTail?: AuditTailReader;
  /** Last use of scoped keys (GET /gate/admin/keys/{tenant_id}). */
  keyUsage: KeyUsageTracker;
  /** With billing on: cancels at the provider the subscription of a tenant that stops paying (billing.ts PendingCancellations). */
  billing?: AdminBilling;
}

/** An admin call that stopped (or may have stopped) a tenant's paid plan. */
export interface AdminBillingAction {
  type: "admin.deactivate" | "admin.update_tier";
  planBefore: string | null;
  planAfter: string | null;
  requestId: string;
}

/** What the call asked the provider to cancel, and what is still pending (retried by the gateway). */
export interface AdminBillingResult {
  cancellations: { subscription_id: string; result: "canceled" | "already_canceled" | "failed"; detail: string }[];
  pending_cancellations: string[];
}

export interface AdminBilling {
  /** Cancels the tenant's pending subscriptions at the provider; a provider failure is a "failed" entry, never a throw. */
  settle(tenantId: string, action: AdminBillingAction): Promise<AdminBillingResult>;
}

const rateLimitSchema = z.strictObject({
  requests: z.number().int("rate_limit.requests must be an integer").min(1, "rate_limit.requests must be at least 1").max(1_000_000_000),
  window_s: z
    .number()
    .int("rate_limit.window_s must be an integer")
    .min(1, "rate_limit.window_s must be at least 1")
    .max(86_400 * 31),
});
// Usage is counted in thousandths of a CU, so a quota is one too: 0.0004 would read as written
// but be enforced as 0 (as a JSON number's shortest form, the decimals are exact).
const quotaSchema = z
  .number()
  .min(0, "monthly_quota must be at least 0")
  .max(1e12, "monthly_quota is too large")
  .refine((n) => /^\d+(\.\d{1,3})?$/.test(String(n)), "monthly_quota must be a whole number of thousandths of a CU (at most three decimals)")
  .nullable();
const enterpriseFields = { monthly_quota: quotaSchema.optional(), rate_limit: rateLimitSchema.optional() };

export const createSchema = z.strictObject({
  tenant_id: tenantIdSchema,
  plan: planSchema.default("starter"),
  namespaces: z.array(namespaceSchema).min(1, "namespaces must not be empty").max(1000, "namespaces must have at most 1000 entries").default(["default"]),
  email: z.email("email must be an e-mail address").max(320).optional(),
  ...enterpriseFields,
});
export const idSchema = z.strictObject({ tenant_id: tenantIdSchema });
export const addNamespaceSchema = z.strictObject({ tenant_id: tenantIdSchema, namespace: namespaceSchema });
export const updateTierSchema = z.strictObject({ tenant_id: tenantIdSchema, plan: planSchema, ...enterpriseFields });

/** Plan terms for a tenant record (tier table, or enterprise overrides). */
export function termsFor(plan: Plan, over: { monthly_quota?: number | null; rate_limit?: { requests: number; window_s: number } }) {
  if (plan !== "enterprise" && (over.monthly_quota !== undefined || over.rate_limit !== undefined)) {
    throw new ValidationError(
      "monthly_quota and rate_limit may only be set for plan enterprise.",
      over.monthly_quota !== undefined ? "monthly_quota" : "rate_limit",
    );
  }
  const tier = TIERS[plan];
  return {
    plan,
    monthly_quota: over.monthly_quota !== undefined ? over.monthly_quota : tier.monthly_quota,
    rate_limit: over.rate_limit ?? { ...tier.rate_limit },
    custom_rate_limit: over.rate_limit !== undefined,
  };
}

function requireActive(t: TenantRecord): void {
  if (!t.active) throw new ConflictError(`Tenant ${t.tenant_id} is deactivated.`);
}

/** The usage record of one tenant for a period, with breakdown and overage under the terms the period closed with. */
export async function usageRecord(usage: UsageStore, t: TenantRecord, period: string) {
  const u = await usage.get(t.tenant_id, period);
  const terms = termsForPeriod(t, period);
  const breakdown: Record<string, number> = {};
  for (const op of OPERATIONS) breakdown[op] = toCus(u.breakdown_milli[op] ?? 0);
  const quotaMilli = terms.monthly_quota === null ? null : Math.round(terms.monthly_quota * 1000);
  const overMilli = quotaMilli === null ? 0 : Math.max(0, u.total_milli - quotaMilli);
  // Rate per CU in millionths, so the amount is an exact integer count of millionths.
  const rateMicro = Math.round(TIERS[terms.plan].overage_per_cu * 1e6);
  return {
    tenant_id: t.tenant_id,
    period,
    cus_used: toCus(u.total_milli),
    monthly_quota: terms.monthly_quota,
    utilization: quotaMilli ? u.total_milli / quotaMilli : 0,
    breakdown,
    overage_cus: toCus(overMilli),
    overage_amount: (overMilli * rateMicro) / 1000 / 1e6,
  };
}

export function adminRouter(d: AdminDeps): Router {
  const r = express.Router();
  r.use((req, _res, next) => {
    checkServiceKey(req, d.serviceKey);
    next();
  });
  // Strict JSON as on the data plane: a duplicate member, "__proto__", a lone surrogate or a
  // number a float64 cannot hold is a 400 naming the member, never rewritten or dropped.
  r.use(strictJsonBody({ limit: 64 * 1024 }));
  const body = (req: Request): unknown => (req.body === undefined ? {} : req.body);
  const period = (req: Request): string => periodQuery(req.query, d.clock.now());
  const now = () => new Date(d.clock.now()).toISOString();
  const limitsView = (t: TenantRecord) => ({ monthly_quota: t.monthly_quota, rate_limit: effectiveRateLimit(t, d.policy) });

  r.post("/gate/onboard/create", async (req: Request, res: Response) => {
    const b = parseOrThrow(createSchema, body(req));
    const apiKey = generateApiKey();
    const ts = now();
    const rec: TenantRecord = {
      tenant_id: b.tenant_id,
      namespaces: [...new Set(b.namespaces)],
      email: b.email ?? null,
      key_hash: sha256Hex(apiKey),
      active: true,
      status: "active",
      ...termsFor(b.plan, b),
      created_at: ts,
      updated_at: ts,
    };
    await d.registry.create(rec);
    res.status(201).json({ tenant_id: rec.tenant_id, api_key: apiKey, plan: rec.plan, namespaces: rec.namespaces, ...limitsView(rec) });
  });

  r.post("/gate/onboard/rotate-key", async (req, res) => {
    const b = parseOrThrow(idSchema, body(req));
    const apiKey = generateApiKey();
    await d.registry.update(b.tenant_id, (t) => {
      requireActive(t);
      return { ...t, key_hash: sha256Hex(apiKey), updated_at: now() };
    });
    res.status(200).json({ tenant_id: b.tenant_id, api_key: apiKey });
  });

  r.post("/gate/onboard/add-namespace", async (req, res) => {
    const b = parseOrThrow(addNamespaceSchema, body(req));
    const t = await d.registry.update(b.tenant_id, (t) => {
      requireActive(t);
      return t.namespaces.includes(b.namespace) ? t : { ...t, namespaces: [...t.namespaces, b.namespace], updated_at: now() };
    });
    res.status(200).json({ tenant_id: t.tenant_id, namespaces: t.namespaces });
  });

  // With billing on, a tenant that stops paying through the provider has its recorded
  // subscription moved to the pending cancellations in the same registry step as the change,
  // then canceled at the provider; one that cannot be canceled now stays pending and is
  // retried by the gateway (the answer lists both).
  const billing = d.billing && d.policy.billingEnabled ? d.billing : undefined;
  const settle = async (res: Response, t: TenantRecord, planBefore: string | null, type: AdminBillingAction["type"]) =>
    billing ? await billing.settle(t.tenant_id, { type, planBefore, planAfter: t.plan, requestId: requestIdOf(res) }) : {};

  r.post("/gate/onboard/update-tier", async (req, res) => {
    const b = parseOrThrow(updateTierSchema, body(req));
    const terms = termsFor(b.plan, b);
    // Starter is free and enterprise is billed by contract: neither keeps a provider subscription.
    const stopsPaying = b.plan === "starter" || b.plan === "enterprise";
    let before: string | null = null;
    const t = await d.registry.update(b.tenant_id, (t) => {
      requireActive(t);
      before = t.plan;
      const next = { ...t, ...terms, updated_at: now() };
      return billing && stopsPaying ? withSubscriptionToCancel(next) : next;
    });
    const view = { tenant_id: t.tenant_id, plan: t.plan, ...limitsView(t) };
    res.status(200).json({ ...view, ...(await settle(res, t, before, "admin.update_tier")) });
  });

  r.post("/gate/onboard/deactivate", async (req, res) => {
    const b = parseOrThrow(idSchema, body(req));
    // Idempotent: deactivating twice answers the same (and retries a cancellation still pending).
    let before: string | null = null;
    const t = await d.registry.update(b.tenant_id, (t) => {
      before = t.plan;
      const next: TenantRecord = t.active ? { ...t, active: false, status: "deactivated", key_hash: "", updated_at: now() } : t;
      return billing ? withSubscriptionToCancel(next) : next;
    });
    res.status(200).json({ tenant_id: t.tenant_id, status: t.status, ...(await settle(res, t, before, "admin.deactivate")) });
  });

  r.get("/gate/admin/tenants", async (_req, res) => {
    const list = await d.registry.list();
    res.status(200).json({ tenants: list.map((t) => ({ tenant_id: t.tenant_id, plan: t.plan, namespaces: t.namespaces, active: t.active })) });
  });

  r.get("/gate/admin/usage", async (req, res) => {
    const p = period(req);
    const list = await d.registry.list();
    const tenants = await Promise.all(
      list.map(async (t) => {
        const u = await usageRecord(d.usage, t, p);
        return { tenant_id: t.tenant_id, cus_used: u.cus_used, monthly_quota: u.monthly_quota, utilization: u.utilization };
      }),
    );
    res.status(200).json({ period: p, tenants });
  });

  r.get("/gate/admin/usage/:tenant_id", async (req, res) => {
    const id = parseOrThrow(tenantIdSchema, req.params.tenant_id, "tenant_id");
    const p = period(req);
    const t = await d.registry.get(id);
    if (!t) throw new NotFoundError(`Tenant ${id} does not exist.`);
    res.status(200).json(await usageRecord(d.usage, t, p));
  });

  r.get("/gate/admin/audit", async (req, res) => {
    const q = parseOrThrow(auditTailQuerySchema, req.query);
    const tail = d.auditTail ? await d.auditTail(q) : null;
    if (!tail) throw new NotFoundError("The audit log is disabled on this gateway (SVC_GATE_AUDIT_ENABLED=false).");
    res.status(200).json({ records: tail.records, count: tail.records.length, limit: q.limit, complete: tail.complete, scanned_bytes: tail.scanned_bytes });
  });

  r.post("/gate/admin/reload", async (_req, res) => {
    const n = await d.registry.reload();
    res.status(200).json({ status: "ok", tenants_loaded: n });
  });

  addKeyRoutes(r, { registry: d.registry, clock: d.clock, keyUsage: d.keyUsage });

  r.use((req, _res, next) => next(new NotFoundError(`No admin endpoint ${req.method} ${pathInSentence(req.path)}.`)));
  return r;
}
