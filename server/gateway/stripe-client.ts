// The payment provider behind one interface: Stripe through its official SDK. Checkout
// sessions and subscription cancellations go out through the SDK (pointed at SVC_GATE_PAYMENT_API_BASE when set, e.g. a
// local mock); webhook bodies are verified with the SDK's signature check, plus a bound on
// future timestamps that the SDK does not apply. Provider errors never carry their message
// (it may quote part of a key) into ours.
import Stripe from "stripe";

/** Seconds a webhook timestamp may be away from now, in either direction. */
export const WEBHOOK_TOLERANCE_S = 300;

export type PaidPlan = "builder" | "pro";

export interface CheckoutRequest {
  tenantId: string;
  plan: PaidPlan;
  price: string;
  successUrl: string;
  cancelUrl: string;
  email: string | null;
}

export interface CheckoutSession {
  id: string;
  url: string;
}

/** Why a webhook signature was refused; each kind has its own one-sentence message. */
export type SignatureFailure = "missing" | "malformed" | "future" | "stale" | "mismatch" | "not_json";

export class WebhookSignatureError extends Error {
  constructor(readonly kind: SignatureFailure) {
    super(SIGNATURE_MESSAGES[kind]);
    this.name = "WebhookSignatureError";
  }
}

const SIGNATURE_MESSAGES: Record<SignatureFailure, string> = {
  missing: "The Stripe-Signature header is missing.",
  malformed: "The Stripe-Signature header is malformed (it needs one t= timestamp and a v1= signature).",
  future: `The Stripe-Signature timestamp is more than ${WEBHOOK_TOLERANCE_S} seconds in the future.`,
  stale: `The Stripe-Signature timestamp is more than ${WEBHOOK_TOLERANCE_S} seconds old.`,
  mismatch: "The Stripe-Signature header does not match the request body and the webhook secret.",
  not_json: "The signed event body is not valid JSON.",
};

/** The provider could not do what was asked (network, refusal, bad answer); `status` when it answered. */
export class PaymentProviderError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
    this.name = "PaymentProviderError";
  }
}

/** How a cancellation ended: canceled now, or already canceled (or unknown) at the provider. */
export type CancelResult = "canceled" | "already_canceled";

export interface PaymentProvider {
  createCheckoutSession(r: CheckoutRequest): Promise<CheckoutSession>;
  /** Cancels subscription `id` at once; throws PaymentProviderError when that is not known to have happened. */
  cancelSubscription(id: string): Promise<CancelResult>;
  /** Verifies `raw` against the signature header at `nowMs`; returns the parsed event or throws WebhookSignatureError. */
  verifyEvent(raw: Buffer, signatureHeader: string | undefined, nowMs: number): unknown;
}

export interface StripeOptions {
  secretKey: string;
  webhookSecret: string;
  /** Origin of the API (`http://127.0.0.1:12111`); the provider's own when undefined. */
  apiBase?: string;
  timeoutMs?: number;
}

/** The `t=` of a Stripe-Signature header (exactly one, all digits), or a WebhookSignatureError. */
export function signatureTimestamp(header: string): number {
  const ts = header.split(",").filter((p) => p.trim().startsWith("t="));
  const hasV1 = header.split(",").some((p) => p.trim().startsWith("v1="));
  const m = ts.length === 1 ? /^t=(\d{1,12})$/.exec(ts[0]!.trim()) : null;
  if (!m || !hasV1) throw new WebhookSignatureError("malformed");
  return Number(m[1]);
}

export class StripePaymentProvider implements PaymentProvider {
  readonly #stripe: Stripe;
  readonly #webhookSecret: string;

  constructor(o: StripeOptions) {
    const config: Record<string, unknown> = { maxNetworkRetries: 1, timeout: o.timeoutMs ?? 15_000, telemetry: false };
    if (o.apiBase) {
      const u = new URL(o.apiBase);
      const protocol = u.protocol.replace(":", "");
      config.host = u.hostname.replace(/^\[|\]$/g, "");
      config.port = Number(u.port || (protocol === "https" ? 443 : 80));
      config.protocol = protocol;
    }
    this.#stripe = new Stripe(o.secretKey, config as ConstructorParameters<typeof Stripe>[1]);
    this.#webhookSecret = o.webhookSecret;
  }

  async createCheckoutSession(r: CheckoutRequest): Promise<CheckoutSession> {
    const meta = { tenant_id: r.tenantId, plan: r.plan };
    let s: { id?: unknown; url?: unknown };
    try {
      s = await this.#stripe.checkout.sessions.create({
        mode: "subscription",
        line_items: [{ price: r.price, quantity: 1 }],
        client_reference_id: r.tenantId,
        metadata: meta,
        // The subscription carries the tenant too, so its deletion event names it.
        subscription_data: { metadata: meta },
        success_url: r.successUrl,
        cancel_url: r.cancelUrl,
        ...(r.email ? { customer_email: r.email } : {}),
      });
    } catch (e) {
      throw providerError(e, "create a checkout session");
    }
    if (typeof s.id !== "string" || typeof s.url !== "string" || !s.url) {
      throw new PaymentProviderError("The payment provider answered without a checkout session id and URL.", null);
    }
    return { id: s.id, url: s.url };
  }

  async cancelSubscription(id: string): Promise<CancelResult> {
    let s: { status?: unknown };
    try {
      s = await this.#stripe.subscriptions.cancel(id);
    } catch (e) {
      // Stripe answers 404 resource_missing for a subscription that is already canceled (a
      // canceled one can no longer be canceled); either way nothing is left to stop.
      const err = e as { statusCode?: number; code?: string };
      if (err.statusCode === 404 && err.code === "resource_missing") return "already_canceled";
      throw providerError(e, "cancel a subscription");
    }
    if (s.status !== "canceled") throw new PaymentProviderError("The payment provider answered a cancellation without a canceled subscription.", null);
    return "canceled";
  }

  verifyEvent(raw: Buffer, signatureHeader: string | undefined, nowMs: number): unknown {
    if (!signatureHeader) throw new WebhookSignatureError("missing");
    const t = signatureTimestamp(signatureHeader);
    // The SDK only bounds the age of t; a timestamp from the future is refused here.
    if (t > Math.floor(nowMs / 1000) + WEBHOOK_TOLERANCE_S) throw new WebhookSignatureError("future");
    try {
      return this.#stripe.webhooks.constructEvent(raw, signatureHeader, this.#webhookSecret, WEBHOOK_TOLERANCE_S, undefined, nowMs);
    } catch (e) {
      if (e instanceof SyntaxError) throw new WebhookSignatureError("not_json");
      const msg = String((e as Error)?.message ?? "");
      // The SDK checks the signature first, then the age.
      throw new WebhookSignatureError(/tolerance/i.test(msg) ? "stale" : "mismatch");
    }
  }
}

/** A PaymentProviderError naming the provider's status and error type, never its message. */
function providerError(e: unknown, what: string): PaymentProviderError {
  const err = e as { statusCode?: number; type?: string; rawType?: string };
  const status = typeof err.statusCode === "number" ? err.statusCode : null;
  const kind = err.rawType ?? (err.type === "StripeConnectionError" ? "connection_error" : "api_error");
  return new PaymentProviderError(
    status === null ? `The payment provider could not be reached to ${what} (${kind}).` : `The payment provider refused to ${what} (HTTP ${status}, ${kind}).`,
    status,
  );
}
