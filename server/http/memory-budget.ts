// One process-wide budget for the memory of requests in flight: request bodies as they are
// read and dense results before they are sent. A request reserves what it will hold before it
// allocates it and gives it back when its response is done; a reservation past the budget is
// refused with 503 and Retry-After (the memory frees as other requests finish) instead of
// growing the process until the kernel kills it.
import type { Response } from "express";
import type { ServerResponse } from "node:http";
import { OverloadedError, ValidationError } from "../../lib/errors.js";

/** Seconds a client is asked to wait before retrying a request refused for memory. */
export const OVERLOADED_RETRY_AFTER_S = 1;

export class MemoryBudget {
  #used = 0;
  readonly #byTenant = new Map<string, number>();
  /** The most bytes one tenant's requests may hold together. */
  readonly perTenantBytes: number;
  /**
   * `tenantSharePct`: the percentage of the budget one tenant's requests may hold together, so
   * that one tenant, however it paces its requests, leaves the rest to the others.
   */
  constructor(
    readonly limitBytes: number,
    tenantSharePct = 100,
  ) {
    this.perTenantBytes = Math.max(1, Math.floor((limitBytes * tenantSharePct) / 100));
  }

  /** Bytes reserved by requests in flight. */
  get used(): number {
    return this.#used;
  }

  /** Bytes reserved by `tenant`'s requests in flight. */
  usedBy(tenant: string): number {
    return this.#byTenant.get(tenant) ?? 0;
  }

  /**
   * Reserves `bytes` or throws: OverloadedError (503) while other requests hold the memory, or
   * while `tenant`'s own requests hold memory and this would take them past its share; a
   * ValidationError (400) naming `what` when `bytes` alone is more than the whole budget
   * (waiting would not help).
   */
  take(bytes: number, what: string, tenant: string | null = null): void {
    if (bytes > this.limitBytes)
      throw new ValidationError(`${what} needs ${bytes} bytes of memory, more than the server's budget of ${this.limitBytes} bytes for requests in flight.`);
    if (this.#used + bytes > this.limitBytes)
      throw new OverloadedError(
        `The server is at its memory budget for requests in flight; retry after ${OVERLOADED_RETRY_AFTER_S} second.`,
        OVERLOADED_RETRY_AFTER_S,
      );
    if (tenant !== null) {
      // A tenant holding nothing may take one request's worth past its share (else a body
      // larger than the share could never be sent); a second one waits for the first.
      const mine = this.#byTenant.get(tenant) ?? 0;
      if (mine > 0 && mine + bytes > this.perTenantBytes)
        throw new OverloadedError(
          `Tenant ${tenant} holds its share of ${this.perTenantBytes} bytes of the memory for requests in flight; retry after ${OVERLOADED_RETRY_AFTER_S} second.`,
          OVERLOADED_RETRY_AFTER_S,
        );
      this.#byTenant.set(tenant, mine + bytes);
    }
    this.#used += bytes;
  }

  give(bytes: number, tenant: string | null = null): void {
    this.#used = Math.max(0, this.#used - bytes);
    if (tenant !== null) {
      const left = (this.#byTenant.get(tenant) ?? 0) - bytes;
      if (left > 0) this.#byTenant.set(tenant, left);
      else this.#byTenant.delete(tenant);
    }
  }
}

/** What one request holds of the budget; released once, when its response is done. */
export class Reservation {
  #bytes = 0;
  #released = false;
  constructor(
    readonly budget: MemoryBudget,
    readonly tenant: string | null = null,
  ) {}

  get bytes(): number {
    return this.#bytes;
  }

  /**
   * Adds `bytes` to this request's share (see MemoryBudget.take). After the release (the
   * response is done or its client left) nothing more is taken: the request is over.
   */
  grow(bytes: number, what: string): void {
    if (this.#released) throw new ValidationError("The request was aborted by the client.");
    if (bytes <= 0) return;
    this.budget.take(bytes, what, this.tenant);
    this.#bytes += bytes;
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.budget.give(this.#bytes, this.tenant);
    this.#bytes = 0;
  }
}

const KEY = Symbol("memory reservation");

/**
 * The reservation of the request answered by `res` (counted against `tenant`'s share when
 * given), created on first use and released when the response is finished or its connection
 * closes, also when that happened before this call.
 */
export function reservationOf(res: ServerResponse | Response, budget: MemoryBudget, tenant: string | null = null): Reservation {
  const holder = res as unknown as { [KEY]?: Reservation };
  let r = holder[KEY];
  if (!r) {
    const created = new Reservation(budget, tenant);
    holder[KEY] = r = created;
    // A client already gone: its close event has fired, so nothing else would release this.
    if (res.destroyed || res.writableFinished) created.release();
    res.once("close", () => created.release());
    res.once("finish", () => created.release());
  }
  return r;
}
