// Billing (docs/api.md, billing routes): POST /gate/checkout creates a
// subscription checkout session for plan builder or pro; POST /webhooks/payment takes the
// provider's signed events and moves tenants between plans. Each event id is applied at most
// once, in the same atomic step as the plan change (TenantRegistry.applyEventOnce), so a
// replay, a retry or two gateways receiving the same event change a tenant once. Events older
// than the last one applied to a tenant never overwrite it. A checkout that replaces another
// live subscription records the old one as pending cancellation in that same step; it is
// canceled at the provider afterwards, and a failure answers 500 so that the provider's retry
// (a duplicate by then) cancels it. Every event, applied or skipped, leaves a line in the
// billing log; every request leaves the usual audit record.
import express, { type Request, type Response, type Router } from "express";
import { closeSync, openSync, writeSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { performance } from "node:perf_hooks";
import { z } from "zod";
import { ConflictError, SvcError, STATUS_OF, UnsupportedMediaTypeError, ValidationError } from "../../lib/errors.js";
import { parseOrThrow, tenantIdSchema } from "../../lib/fields.js";
import { sendError, toSvcError } from "../http/errors.js";
import { requestIdOf } from "../http/request-id.js";
import { readJsonBody } from "../http/json-body.js";
import { readBody } from "../http/body.js";
import type { BodyRate } from "../http/body-guard.js";
import { MemoryBudget, reservationOf } from "../http/memory-budget.js";
import { parseStrictJson } from "../http/json.js";
import { termsFor, type AdminBilling, type AdminBillingAction, type AdminBillingResult } from "./admin.js";
import type { AuditSink } from "./audit.js";
import { admitTenantCall } from "./account.js";
import type { Clock } from "./clock.js";
import { DEFAULT_LIMITS } from "./config.js";
import type { LimitsPolicy } from "./plans.js";
import type { RateLimiter } from "./ratelimit.js";
import { PaymentProviderError, WebhookSignatureError, type CancelResult, type PaidPlan, type PaymentProvider } from "./stripe-client.js";
import type { EventChange, TenantBilling, TenantRecord, TenantRegistry } from "./tenants.js";

/** How long a processed event id is remembered (the provider retries for 3 days; resends are manual). */
export const EVENT_RETENTION_MS = 35 * 86_400_000;
/** Largest webhook body accepted (provider events are a few KiB). */
export const MAX_WEBHOOK_BYTES = 1024 * 1024;
/**
 * Bytes of webhook bodies held at once. The route takes no key, so anyone can send it bodies;
 * they are held within this budget of their own (16 bodies of the largest size, thousands of
 * real events) and past it answered 503 with Retry-After, which the provider retries.
 */
export const WEBHOOK_BYTES_IN_FLIGHT = 16 * MAX_WEBHOOK_BYTES;
const ENDED_SUBSCRIPTIONS_MAX = 50;

const httpsUrl = (field: string) =>
  z
    .string({ message: `${field} must be a string` })
    .max(2048, `${field} must be at most 2048 characters`)
    // The URL parser drops tabs, line breaks and outer spaces, but the provider gets the text as sent.
    .regex(/^[^\u0000-\u0020\u007f-\u009f]*$/, `${field} must not contain spaces or control characters`)
    .refine((s) => {
      try {
        const u = new URL(s);
        return u.protocol === "https:" || u.protocol === "http:";
      } catch {
        return false;
      }
    }, `${field} must be an absolute http(s) URL`);

/** Body of POST /gate/checkout (docs/api.md (billing routes)). */
export const checkoutBodySchema = z.strictObject({
  plan: z.enum(["builder", "pro"], { message: "plan must be builder or pro" }),
  success_url: httpsUrl("success_url"),
  cancel_url: httpsUrl("cancel_url"),
});

const metadataOf = z.record(z.string(), z.unknown()).nullish();
/**
 * A provider subscription id as stored in the tenant record: `sub_`, then letters, digits and
 * underscores, 255 characters at most in all (as a customer id is bounded).
 */
export const subscriptionIdSchema = z.string().regex(/^sub_[A-Za-z0-9_]{1,251}$/);
const eventSchema = z.object({
  id: z.string().regex(/^[A-Za-z0-9_]{1,255}$/),
  type: z.string().min(1).max(255),
  created: z.number().int().nonnegative(),
  data: z.object({ object: z.record(z.string(), z.unknown()) }),
});
const sessionSchema = z.object({
  id: z.string().optional(),
  client_reference_id: z.string().nullish(),
  payment_status: z.string().nullish(),
  subscription: z.union([subscriptionIdSchema, z.object({ id: subscriptionIdSchema })]).nullish(),
  customer: z.union([z.string(), z.object({ id: z.string() })]).nullish(),
  metadata: metadataOf,
});
const subscriptionSchema = z.object({
  id: subscriptionIdSchema,
  customer: z.union([z.string(), z.object({ id: z.string() })]).nullish(),
  metadata: metadataOf,
});

/** One line of the billing log per webhook event. */
export interface BillingLogRecord {
  ts: string;
  event_id: string;
  type: string;
  created: number;
  tenant_id: string;
  outcome: "applied" | "skipped";
  /** Why it was skipped (duplicate, out_of_order, not_paid, unknown_tenant, ...); "" when applied. */
  reason: string;
  plan_before: string | null;
  plan_after: string | null;
  /** Replaced subscriptions this delivery tried to cancel at the provider, and how each ended. */
  cancellations: CancellationRecord[];
  request_id: string;
}

export interface CancellationRecord {
  subscription_id: string;
  result: CancelResult | "failed";
  /** Why it failed (one sentence, no provider message); "" otherwise. */
  detail: string;
}

export interface BillingLog {
  write(rec: BillingLogRecord): Promise<void>;
  close(): Promise<void>;
}

/** The billing log as JSONL, one synchronous O_APPEND write per record (as the audit log). */
export class FileBillingLog implements BillingLog {
  private fd: number | null;
  private constructor(
    fd: number,
    private readonly path: string,
  ) {
    this.fd = fd;
  }
  static async open(path: string): Promise<FileBillingLog> {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    return new FileBillingLog(openSync(path, "a", 0o600), path);
  }
  /** Opens the path again after a rotation moved the file (writes are synchronous: none is in flight). */
  async reopen(): Promise<void> {
    if (this.fd === null) throw new Error("The billing log is closed.");
    await mkdir(dirname(this.path), { recursive: true, mode: 0o700 });
    const fd = openSync(this.path, "a", 0o600);
    const old = this.fd;
    this.fd = fd;
    closeSync(old);
  }
  async write(rec: BillingLogRecord): Promise<void> {
    if (this.fd === null) throw new Error("The billing log is closed.");
    const buf = Buffer.from(JSON.stringify(rec) + "\n", "utf8");
    let off = 0;
    while (off < buf.length) off += writeSync(this.fd, buf, off);
  }
  async close(): Promise<void> {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}

/** The billing log in memory (tests). */
export class MemoryBillingLog implements BillingLog {
  readonly records: BillingLogRecord[] = [];
  async write(rec: BillingLogRecord): Promise<void> {
    this.records.push({ ...rec });
  }
  async close(): Promise<void> {}
}

export interface BillingDeps {
  registry: TenantRegistry;
  provider: PaymentProvider;
  clock: Clock;
  audit: AuditSink;
  log: BillingLog;
  prices: Readonly<Record<PaidPlan, string>>;
  /** Checkout requests count in the tenant's rate window like data-plane ones. */
  limiter: RateLimiter;
  policy: LimitsPolicy;
  /** Memory for webhook bodies in flight; default: a budget of WEBHOOK_BYTES_IN_FLIGHT for this router. */
  webhookBudget?: MemoryBudget;
  /** The pace a webhook body must keep (the gateway's SVC_GATE_BODY_MIN_RATE and SVC_GATE_BODY_GRACE_S). */
  bodyRate?: BodyRate;
}

/** What one verified event does; `tenantId` "" when it names no valid tenant. */
interface EventPlan {
  tenantId: string;
  /** A deletion without tenant metadata: the tenant is the one whose customer this is. */
  customerId?: string;
  /** A decision taken from the event alone (nothing to apply), or the change to apply. */
  skip?: string;
  change?: (cur: TenantRecord) => { next: TenantRecord | null; reason: string };
}

const idOf = (v: string | { id: string } | null | undefined): string | null => (v == null ? null : typeof v === "string" ? v : v.id);
const validTenant = (v: unknown): string | null => (typeof v === "string" && tenantIdSchema.safeParse(v).success ? v : null);
const billingOf = (t: TenantRecord): TenantBilling => t.billing ?? { subscription_id: null, customer_id: null, last_event_created: 0, ended_subscriptions: [] };
const pendingOf = (b: TenantBilling): string[] => b.pending_cancellations ?? [];
/** A provider object id (`cus_...`, `sub_...`), or null for anything else. */
const providerId = (v: string | null): string | null => (v !== null && /^[A-Za-z0-9_]{1,255}$/.test(v) ? v : null);

type Decision = { next: TenantRecord | null; reason: string };

/**
 * A purchase the tenant cannot have (deactivated, or enterprise): skipped as `reason`, and its
 * subscription put on the pending cancellations in the same step, unless there is nothing to
 * cancel (none, deleted already, already pending, or the one recorded as the tenant's).
 */
function cancelPurchase(cur: TenantRecord, sub: string | null, reason: string, nowIso: string): Decision {
  const b = billingOf(cur);
  if (!sub || sub === b.subscription_id || b.ended_subscriptions.includes(sub) || pendingOf(b).includes(sub)) return { next: null, reason };
  return { next: { ...cur, billing: { ...b, pending_cancellations: [...pendingOf(b), sub] }, updated_at: nowIso }, reason };
}

/**
 * A deleted subscription that sets no plan: remembered so that a late checkout of it is never
 * applied; one still waiting to be canceled by us is gone at the provider (nothing left to
 * cancel); one still recorded for a deactivated tenant is no longer its subscription.
 */
function forgetEnded(cur: TenantRecord, sub: string, reason: string, nowIso: string): Decision {
  const b = billingOf(cur);
  const ended = b.ended_subscriptions.includes(sub) ? b.ended_subscriptions : [...b.ended_subscriptions, sub].slice(-ENDED_SUBSCRIPTIONS_MAX);
  const pending = pendingOf(b).filter((p) => p !== sub);
  const current = b.subscription_id === sub ? null : b.subscription_id;
  if (ended === b.ended_subscriptions && pending.length === pendingOf(b).length && current === b.subscription_id) return { next: null, reason };
  const billing: TenantBilling = {
    ...b,
    subscription_id: current,
    ended_subscriptions: ended,
    ...(b.pending_cancellations ? { pending_cancellations: pending } : {}),
  };
  return { next: { ...cur, billing, updated_at: nowIso }, reason };
}

/** Decides what a verified event means; pure (the registry applies it atomically). */
export function planEvent(ev: z.infer<typeof eventSchema>, nowIso: string): EventPlan {
  const obj = ev.data.object;
  if (ev.type === "checkout.session.completed") {
    const s = sessionSchema.safeParse(obj);
    if (!s.success) return { tenantId: "", skip: "malformed_session" };
    const ref = s.data.client_reference_id ?? null;
    const metaTenant = s.data.metadata?.tenant_id;
    const tenantId = validTenant(ref ?? metaTenant);
    if (!tenantId) return { tenantId: "", skip: "no_tenant" };
    if (ref !== null && metaTenant !== undefined && metaTenant !== ref) return { tenantId, skip: "tenant_mismatch" };
    const plan = s.data.metadata?.plan;
    if (plan !== "builder" && plan !== "pro") return { tenantId, skip: "unknown_plan" };
    if (s.data.payment_status !== "paid") return { tenantId, skip: "not_paid" };
    const sub = idOf(s.data.subscription);
    const customer = providerId(idOf(s.data.customer));
    return {
      tenantId,
      change: (cur) => {
        const b = billingOf(cur);
        // Nobody can use a deactivated tenant: what it bought is canceled (in whatever order the
        // purchase arrives) so that it does not go on billing.
        if (!cur.active) return cancelPurchase(cur, sub, "deactivated", nowIso);
        // An older purchase arriving after a newer event never sets the plan; its subscription
        // would go on billing for terms the tenant does not have, so it is canceled.
        if (ev.created < b.last_event_created) return cancelPurchase(cur, sub, "out_of_order", nowIso);
        if (sub && b.ended_subscriptions.includes(sub)) return { next: null, reason: "subscription_already_deleted" };
        // Contract billing, as checkout refuses it: a purchase opened before the contract never
        // replaces its terms, and its subscription is canceled.
        if (cur.plan === "enterprise") return cancelPurchase(cur, sub, "enterprise_plan", nowIso);
        // The subscription this one replaces would go on billing: it is canceled after this step.
        const old = b.subscription_id;
        const pending = old && old !== sub && !pendingOf(b).includes(old) ? [...pendingOf(b), old] : pendingOf(b);
        const billing: TenantBilling = {
          ...b,
          subscription_id: sub,
          customer_id: customer ?? b.customer_id,
          last_event_created: ev.created,
          ...(pending.length ? { pending_cancellations: pending } : {}),
        };
        return { next: { ...cur, ...termsFor(plan, {}), billing, updated_at: nowIso }, reason: "" };
      },
    };
  }
  if (ev.type === "customer.subscription.deleted") {
    const s = subscriptionSchema.safeParse(obj);
    if (!s.success) return { tenantId: "", skip: "malformed_subscription" };
    const metaTenant = validTenant(s.data.metadata?.tenant_id);
    // Without tenant metadata (a subscription made in the Dashboard, or before checkout set it)
    // the tenant is the one whose customer this is; applyPaymentEvent looks it up.
    const customer = metaTenant ? null : providerId(idOf(s.data.customer));
    if (!metaTenant && !customer) return { tenantId: "", skip: "no_tenant" };
    const sub = s.data.id;
    return {
      tenantId: metaTenant ?? "",
      ...(customer ? { customerId: customer } : {}),
      change: (cur) => {
        const b = billingOf(cur);
        // The lookup ran before this step; the customer must still be the tenant's.
        if (customer && b.customer_id !== customer) return { next: null, reason: "no_tenant" };
        // A deactivated tenant keeps its terms; the subscription is remembered as ended all the same.
        if (!cur.active) return forgetEnded(cur, sub, "deactivated", nowIso);
        if (ev.created < b.last_event_created) return { next: null, reason: "out_of_order" };
        // Not the subscription that set the plan (an older one, or its checkout has not arrived yet).
        if (b.subscription_id !== sub) return forgetEnded(cur, sub, "not_current_subscription", nowIso);
        if (cur.plan !== "builder" && cur.plan !== "pro") return { next: null, reason: "not_a_paid_plan" };
        const billing: TenantBilling = {
          ...b,
          subscription_id: null,
          last_event_created: ev.created,
          ended_subscriptions: [...b.ended_subscriptions, sub].slice(-ENDED_SUBSCRIPTIONS_MAX),
        };
        return { next: { ...cur, ...termsFor("starter", {}), billing, updated_at: nowIso }, reason: "" };
      },
    };
  }
  return { tenantId: "", skip: "ignored_type" };
}

export interface EventOutcome {
  tenantId: string;
  outcome: "applied" | "skipped";
  reason: string;
  planBefore: string | null;
  planAfter: string | null;
  /** Any entry with result "failed" means the event must be retried (the webhook answers 500). */
  cancellations: CancellationRecord[];
}

/**
 * Cancels at the provider every subscription the tenant's record lists as replaced, removing
 * each from the list once the provider confirmed it. A failure is a "failed" entry and stays
 * listed for the next delivery; it throws only when the record cannot be read.
 */
/**
 * Cancellations in flight in this process, per provider: concurrent deliveries naming one
 * tenant share one provider call per subscription instead of each sending its own.
 */
const cancelling = new WeakMap<PaymentProvider, Map<string, Promise<CancelResult>>>();
function cancelOnce(provider: PaymentProvider, sub: string): Promise<CancelResult> {
  let inFlight = cancelling.get(provider);
  if (!inFlight) cancelling.set(provider, (inFlight = new Map()));
  let p = inFlight.get(sub);
  if (!p) {
    const m = inFlight;
    p = provider.cancelSubscription(sub).finally(() => m.delete(sub));
    m.set(sub, p);
  }
  return p;
}

async function cancelReplaced(deps: Pick<BillingDeps, "registry" | "provider">, tenantId: string, nowIso: string): Promise<CancellationRecord[]> {
  const t = await deps.registry.get(tenantId);
  const pending = t?.billing ? pendingOf(t.billing) : [];
  if (pending.length === 0) return [];
  // All at the provider at once, then one record update for every confirmed one.
  const out: CancellationRecord[] = await Promise.all(
    pending.map(async (sub): Promise<CancellationRecord> => {
      try {
        return { subscription_id: sub, result: await cancelOnce(deps.provider, sub), detail: "" };
      } catch (e) {
        return { subscription_id: sub, result: "failed", detail: e instanceof PaymentProviderError ? e.message : "The payment provider call failed." };
      }
    }),
  );
  const done = new Set(out.filter((c) => c.result !== "failed").map((c) => c.subscription_id));
  if (done.size === 0) return out;
  try {
    await deps.registry.update(tenantId, (cur) => {
      const b = billingOf(cur);
      return { ...cur, billing: { ...b, pending_cancellations: pendingOf(b).filter((p) => !done.has(p)) }, updated_at: nowIso };
    });
  } catch {
    // Canceled, but still listed: the retry asks again and the provider answers already canceled.
    for (const c of out) {
      if (done.has(c.subscription_id))
        Object.assign(c, { result: "failed", detail: "The subscription was canceled but the tenant record could not be updated." });
    }
  }
  return out;
}

/**
 * Applies one verified event at most once (durably, across gateways), then cancels the
 * tenant's replaced subscriptions still pending (this event's, or ones an earlier delivery
 * could not finish), and logs the outcome.
 */
export async function applyPaymentEvent(
  deps: Pick<BillingDeps, "registry" | "clock" | "log" | "provider">,
  raw: unknown,
  requestId: string,
): Promise<EventOutcome> {
  const parsed = eventSchema.safeParse(raw);
  if (!parsed.success) throw new ValidationError("The event lacks a valid id, type, created or data.object.");
  const ev = parsed.data;
  const now = deps.clock.now();
  const nowIso = new Date(now).toISOString();
  const plan = planEvent(ev, nowIso);
  if (plan.customerId) {
    const t = await deps.registry.findByCustomerId(plan.customerId);
    if (t) plan.tenantId = t.tenant_id;
    else plan.skip = "no_tenant";
  }
  let out: EventOutcome;
  if (plan.skip === "ignored_type") {
    // Types other than the two handled answer 200 and change nothing; no id is recorded.
    out = { tenantId: "", outcome: "skipped", reason: "ignored_type", planBefore: null, planAfter: null, cancellations: [] };
  } else {
    const r = await deps.registry.applyEventOnce({ eventId: ev.id, tenantId: plan.tenantId, nowMs: now, retainMs: EVENT_RETENTION_MS }, (cur): EventChange => {
      if (plan.skip) return { next: null, note: `skipped:${plan.skip}` };
      if (!cur) return { next: null, note: "skipped:unknown_tenant" };
      const c = plan.change!(cur);
      return { next: c.next, note: c.reason ? `skipped:${c.reason}` : "applied" };
    });
    if (r.duplicate) {
      out = { tenantId: plan.tenantId, outcome: "skipped", reason: "duplicate", planBefore: null, planAfter: null, cancellations: [] };
      const t = plan.tenantId ? await deps.registry.get(plan.tenantId) : null;
      out.planBefore = out.planAfter = t?.plan ?? null;
    } else {
      const applied = r.note === "applied";
      out = {
        tenantId: plan.tenantId,
        outcome: applied ? "applied" : "skipped",
        reason: applied ? "" : r.note.slice("skipped:".length),
        planBefore: r.before?.plan ?? null,
        planAfter: r.after?.plan ?? null,
        cancellations: [],
      };
    }
  }
  // After the atomic step, never inside it: a provider call cannot be part of a store write.
  let readError: Error | null = null;
  if (out.tenantId) {
    try {
      out.cancellations = await cancelReplaced(deps, out.tenantId, nowIso);
    } catch (e) {
      readError = e instanceof Error ? e : new Error(String(e)); // the event is decided, so it is logged first; the retry reads again
    }
  }
  await deps.log.write({
    ts: nowIso,
    event_id: ev.id,
    type: ev.type,
    created: ev.created,
    tenant_id: out.tenantId,
    outcome: out.outcome,
    reason: out.reason,
    plan_before: out.planBefore,
    plan_after: out.planAfter,
    cancellations: out.cancellations,
    request_id: requestId,
  });
  if (readError) throw readError;
  return out;
}

/** How often a gateway with billing on retries the pending cancellations of every tenant. */
export const CANCELLATION_RETRY_MS = 60_000;

/**
 * Pending cancellations outside webhook deliveries: after an admin call that stops a tenant's
 * paid plan (deactivation, a move to starter or enterprise: the registry step moved the
 * recorded subscription to the pending list), and in a periodic sweep of every tenant, so that
 * one that failed (the provider down, a gateway stopped between the two steps) is retried until
 * the provider confirms it, whether or not another event ever names the tenant.
 */
export class PendingCancellations implements AdminBilling {
  #timer: NodeJS.Timeout | null = null;
  #sweeping: Promise<unknown> | null = null;
  constructor(private readonly deps: Pick<BillingDeps, "registry" | "provider" | "clock" | "log">) {}

  async #cancelAndLog(
    tenantId: string,
    type: string,
    plans: { before: string | null; after: string | null },
    requestId: string,
  ): Promise<CancellationRecord[]> {
    const now = this.deps.clock.now();
    const nowIso = new Date(now).toISOString();
    const cancellations = await cancelReplaced(this.deps, tenantId, nowIso);
    if (cancellations.length > 0) {
      await this.deps.log.write({
        ts: nowIso,
        event_id: "",
        type,
        created: Math.floor(now / 1000),
        tenant_id: tenantId,
        outcome: "applied",
        reason: "",
        plan_before: plans.before,
        plan_after: plans.after,
        cancellations,
        request_id: requestId,
      });
    }
    return cancellations;
  }

  async settle(tenantId: string, a: AdminBillingAction): Promise<AdminBillingResult> {
    const cancellations = await this.#cancelAndLog(tenantId, a.type, { before: a.planBefore, after: a.planAfter }, a.requestId);
    const t = await this.deps.registry.get(tenantId);
    return { cancellations, pending_cancellations: t?.billing ? [...pendingOf(t.billing)] : [] };
  }

  /** One pass over every tenant with pending cancellations; a failure is left for the next pass. */
  sweep(): Promise<CancellationRecord[]> {
    const run = (async () => {
      const out: CancellationRecord[] = [];
      let tenants: TenantRecord[];
      try {
        tenants = await this.deps.registry.list();
      } catch {
        return out;
      }
      for (const t of tenants) {
        if (!t.billing || pendingOf(t.billing).length === 0) continue;
        try {
          out.push(...(await this.#cancelAndLog(t.tenant_id, "retry.pending_cancellations", { before: t.plan, after: t.plan }, "")));
        } catch {
          // The record or the billing log could not be reached: the next pass tries again.
        }
      }
      return out;
    })();
    this.#sweeping = run;
    return run;
  }

  /** Sweeps now and every `everyMs` (one pass at a time); the timer does not keep the process alive. */
  start(everyMs = CANCELLATION_RETRY_MS): void {
    if (this.#timer) return;
    const tick = () => {
      if (!this.#sweeping) void this.sweep().finally(() => (this.#sweeping = null));
    };
    this.#timer = setInterval(tick, everyMs);
    this.#timer.unref();
    tick();
  }

  /** Stops the timer and waits for a pass in progress. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#sweeping?.catch(() => {});
  }
}

/** The billing router: POST /gate/checkout and POST /webhooks/payment. Mount it only when billing is on. */
export function billingRouter(deps: BillingDeps): Router {
  const r = express.Router();
  const webhookBudget = deps.webhookBudget ?? new MemoryBudget(WEBHOOK_BYTES_IN_FLIGHT);
  const bodyRate: BodyRate = deps.bodyRate ?? { minBytesPerS: DEFAULT_LIMITS.bodyMinBytesPerS, graceMs: DEFAULT_LIMITS.bodyGraceS * 1000 };

  // Every request leaves the usual audit record (path without query, no namespace, 0 CUs).
  const audit = (req: Request, res: Response, tenantId: string, status: number, t0: number) =>
    deps.audit.write({
      ts: new Date(deps.clock.now()).toISOString(),
      tenant_id: tenantId,
      method: req.method,
      path: req.originalUrl.split("?")[0]!,
      namespace: "",
      status,
      cus: 0,
      latency_ms: Math.round((performance.now() - t0) * 1000) / 1000,
      request_id: requestIdOf(res),
      key_id: typeof res.locals.key_id === "string" ? res.locals.key_id : "",
    });

  const fail = async (req: Request, res: Response, err: unknown, tenantId: string, t0: number) => {
    const e =
      err instanceof PaymentProviderError
        ? new SvcError("engine_unreachable", err.message)
        : err instanceof WebhookSignatureError
          ? new ValidationError(err.message)
          : toSvcError(err);
    try {
      await audit(req, res, tenantId, STATUS_OF[e.code], t0);
    } catch {
      // An audit log that cannot be written must not leave the caller hanging.
    }
    sendError(res, e, requestIdOf(res));
  };

  r.post("/gate/checkout", async (req, res) => {
    const t0 = performance.now();
    let tenantId = "";
    try {
      const tenant = await admitTenantCall(deps, req, res, "full");
      tenantId = tenant.tenant_id;
      if (!/^application\/json\s*(;|$)/i.test(req.get("content-type") ?? "")) throw new UnsupportedMediaTypeError("The request body must be application/json.");
      const b = parseOrThrow(checkoutBodySchema, (await readJsonBody(req, { limit: 16 * 1024, res, path: req.path })) ?? {});
      if (tenant.plan === b.plan) throw new ConflictError(`Tenant ${tenant.tenant_id} is already on plan ${b.plan}.`);
      if (tenant.plan === "enterprise") throw new ConflictError(`Tenant ${tenant.tenant_id} is on plan enterprise, which is not sold through checkout.`);
      const s = await deps.provider.createCheckoutSession({
        tenantId: tenant.tenant_id,
        plan: b.plan,
        price: deps.prices[b.plan],
        successUrl: b.success_url,
        cancelUrl: b.cancel_url,
        email: tenant.email,
      });
      await audit(req, res, tenantId, 200, t0);
      res.status(200).json({ session_id: s.id, checkout_url: s.url });
    } catch (err) {
      await fail(req, res, err, tenantId, t0);
    }
  });

  r.post("/webhooks/payment", async (req, res) => {
    const t0 = performance.now();
    let tenantId = "";
    try {
      // The raw bytes (the signature covers them exactly): 413 past MAX_WEBHOOK_BYTES, held
      // within the webhook budget (503), cut off when they stop arriving (400).
      const raw = await readBody(req, {
        limit: MAX_WEBHOOK_BYTES,
        res,
        rate: bodyRate,
        reservation: reservationOf(res, webhookBudget),
        path: req.path,
      });
      const event = deps.provider.verifyEvent(raw, req.get("stripe-signature"), deps.clock.now());
      // Signed is not enough: the event is held to the strict JSON of every other body, so that a
      // duplicate member or a "__proto__" member cannot read one way here and another elsewhere.
      parseStrictJson(raw, { what: "The payment event" });
      const out = await applyPaymentEvent(deps, event, requestIdOf(res));
      tenantId = out.tenantId;
      const failed = out.cancellations.find((c) => c.result === "failed");
      // 500 makes the provider retry the event; the retry (a duplicate) cancels what is still pending.
      if (failed)
        throw new SvcError("internal", `The subscription ${failed.subscription_id} is not canceled yet, so the event must be retried. ${failed.detail}`);
      await audit(req, res, tenantId, 200, t0);
      res.status(200).json({ received: true });
    } catch (err) {
      await fail(req, res, err, tenantId, t0);
    }
  });

  return r;
}
