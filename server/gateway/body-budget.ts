// A process-wide budget for request bodies held in memory (JSON bodies are read whole before
// they are validated and forwarded), with a share per tenant. A request whose body does not fit
// is answered 503 with Retry-After before its body is read (Content-Length known) or as soon as
// it passes the budget (chunked), so concurrent large uploads queue at their clients, not in
// this heap; and one tenant, however it paces its uploads, leaves the rest to the others.
import { OverloadedError } from "../../lib/errors.js";

export class BodyBudget {
  private used = 0;
  private readonly byTenant = new Map<string, number>();
  /** The most bytes one tenant's bodies may hold together (see take for the one exception). */
  readonly perTenant: number;
  constructor(
    readonly maxBytes: number,
    tenantSharePct = 100,
  ) {
    this.perTenant = Math.max(1, Math.floor((maxBytes * tenantSharePct) / 100));
  }

  /** Bytes of bodies held now, in all or by `tenant`. */
  inUse(tenant?: string): number {
    return tenant === undefined ? this.used : (this.byTenant.get(tenant) ?? 0);
  }

  /**
   * Takes `n` bytes for `tenant` or throws the 503 (nothing taken then). A tenant holding
   * nothing may take one body past its share (else a body the upload limit allows but the
   * share does not could never be sent); its next body waits for that one.
   */
  take(n: number, tenant: string): void {
    if (this.used + n > this.maxBytes) {
      throw new OverloadedError(`The gateway is holding its limit of ${this.maxBytes} bytes of request bodies; retry after 1 second.`, 1);
    }
    const mine = this.byTenant.get(tenant) ?? 0;
    if (mine > 0 && mine + n > this.perTenant) {
      throw new OverloadedError(`Tenant ${tenant} holds its share of ${this.perTenant} bytes of request bodies; retry after 1 second.`, 1);
    }
    this.used += n;
    this.byTenant.set(tenant, mine + n);
  }

  give(n: number, tenant: string): void {
    this.used = Math.max(0, this.used - n);
    const left = (this.byTenant.get(tenant) ?? 0) - n;
    if (left > 0) this.byTenant.set(tenant, left);
    else this.byTenant.delete(tenant);
  }
}

/** One request's share: what it took, given back once. */
export class BodyLease {
  private held = 0;
  private tenant = "";
  constructor(private readonly budget: BodyBudget) {}
  take(n: number, tenant: string): void {
    this.budget.take(n, tenant);
    this.tenant = tenant;
    this.held += n;
  }
  release(): void {
    if (this.held > 0) this.budget.give(this.held, this.tenant);
    this.held = 0;
  }
}
