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
  constructor(readonly limitBytes: number) {}

  /** Bytes reserved by requests in flight. */
  get used(): number {
    return this.#used;
  }

  /**
   * Reserves `bytes` or throws: OverloadedError (503) while other requests hold the memory, a
   * ValidationError (400) naming `what` when `bytes` alone is more than the whole budget (waiting
   * would not help).
   */
  take(bytes: number, what: string): void {
    if (bytes > this.limitBytes)
      throw new ValidationError(`${what} needs ${bytes} bytes of memory, more than the server's budget of ${this.limitBytes} bytes for requests in flight.`);
    if (this.#used + bytes > this.limitBytes)
      throw new OverloadedError(`The server is at its memory budget for requests in flight; retry after ${OVERLOADED_RETRY_AFTER_S} second.`, OVERLOADED_RETRY_AFTER_S);
    this.#used += bytes;
  }

  give(bytes: number): void {
    this.#used = Math.max(0, this.#used - bytes);
  }
}

/** What one request holds of the budget; released once, when its response is done. */
export class Reservation {
  #bytes = 0;
  #released = false;
  constructor(readonly budget: MemoryBudget) {}

  get bytes(): number {
    return this.#bytes;
  }

  /** Adds `bytes` to this request's share (see MemoryBudget.take). */
  grow(bytes: number, what: string): void {
    if (this.#released) throw new Error("The reservation was released.");
    if (bytes <= 0) return;
    this.budget.take(bytes, what);
    this.#bytes += bytes;
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.budget.give(this.#bytes);
    this.#bytes = 0;
  }
}

const KEY = Symbol("memory reservation");

/**
 * The reservation of the request answered by `res`, created on first use and released when the
 * response is finished or its connection closes.
 */
export function reservationOf(res: ServerResponse | Response, budget: MemoryBudget): Reservation {
  const holder = res as unknown as { [KEY]?: Reservation };
  let r = holder[KEY];
  if (!r) {
    const created = new Reservation(budget);
    holder[KEY] = r = created;
    res.once("close", () => created.release());
    res.once("finish", () => created.release());
  }
  return r;
}
