// The tier table (docs/api.md, admin routes) and how a tenant's effective limits follow from it.
import { z } from "zod";
import type { RateLimitSpec } from "./config.js";

export const PLANS = ["starter", "builder", "pro", "enterprise"] as const;
export type Plan = (typeof PLANS)[number];
export const planSchema = z.enum(PLANS, { message: "plan must be one of starter, builder, pro, enterprise" });

export interface PlanTerms {
  /** CUs per UTC month; null means no limit. */
  readonly monthly_quota: number | null;
  readonly rate_limit: RateLimitSpec;
  /** Price per CU over the quota, in the provider's currency unit; 0 when none. */
  readonly overage_per_cu: number;
}

export const TIERS: Readonly<Record<Plan, PlanTerms>> = Object.freeze({
  starter: { monthly_quota: 1_000, rate_limit: { requests: 10, window_s: 60 }, overage_per_cu: 0 },
  builder: { monthly_quota: 50_000, rate_limit: { requests: 100, window_s: 60 }, overage_per_cu: 0.05 },
  pro: { monthly_quota: 500_000, rate_limit: { requests: 1_000, window_s: 60 }, overage_per_cu: 0.03 },
  // Enterprise is "custom": without overrides, no quota and the pro rate limit.
  enterprise: { monthly_quota: null, rate_limit: { requests: 1_000, window_s: 60 }, overage_per_cu: 0 },
});

/** The knobs of the configuration that decide which limits apply. */
export interface LimitsPolicy {
  readonly billingEnabled: boolean;
  readonly defaultRateLimit: RateLimitSpec;
}

interface LimitedTenant {
  readonly plan: Plan;
  readonly monthly_quota: number | null;
  readonly rate_limit: RateLimitSpec;
  readonly custom_rate_limit: boolean;
}

/**
 * The rate limit that applies to a tenant (docs/api.md (admin routes)): with billing on, its plan's (or
 * its enterprise override); with billing off, the SVC_GATE_DEFAULT_* pair unless it is an
 * enterprise tenant with its own.
 */
export function effectiveRateLimit(t: LimitedTenant, p: LimitsPolicy): RateLimitSpec {
  if (p.billingEnabled || (t.plan === "enterprise" && t.custom_rate_limit)) return t.rate_limit;
  return p.defaultRateLimit;
}

/** The quota that is enforced: none with billing off; else the tenant's (null = none). */
export function enforcedQuota(t: LimitedTenant, p: LimitsPolicy): number | null {
  return p.billingEnabled ? t.monthly_quota : null;
}
