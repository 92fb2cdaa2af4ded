// A process-wide budget for request bodies held in memory (JSON bodies are read whole before
// they are validated and forwarded). A request whose body does not fit is answered 503 with
// Retry-After before its body is read (Content-Length known) or as soon as it passes the
// budget (chunked), so concurrent large uploads queue at their clients, not in this heap.
import { OverloadedError } from "../../lib/errors.js";

export class BodyBudget {
  private used = 0;
  constructor(readonly maxBytes: number) {}

  /** Bytes of bodies held now. */
  get inUse(): number {
    return this.used;
  }

  /** Takes `n` bytes or throws the 503 (nothing taken then). */
  take(n: number): void {
    if (this.used + n > this.maxBytes) {
      throw new OverloadedError(
        `The gateway is holding its limit of ${this.maxBytes} bytes of request bodies; retry after 1 second.`,
        1,
      );
    }
    this.used += n;
  }

  give(n: number): void {
    this.used = Math.max(0, this.used - n);
  }
}

/** One request's share: what it took, given back once. */
export class BodyLease {
  private held = 0;
  constructor(private readonly budget: BodyBudget) {}
  take(n: number): void {
    this.budget.take(n);
    this.held += n;
  }
  release(): void {
    this.budget.give(this.held);
    this.held = 0;
  }
}
