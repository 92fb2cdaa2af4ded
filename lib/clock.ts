// Time behind an interface so that expiry rules (tombstones, windows, quotas) can be
// tested with an injected clock instead of sleeping.

/** A source of the current time in milliseconds since the Unix epoch. */
export interface Clock {
  now(): number;
}

/** The real clock. */
export const systemClock: Clock = Object.freeze({ now: () => Date.now() });

/**
 * A clock that only moves when told to; for tests.
 * @example const c = new FakeClock(Date.parse("2026-01-01T00:00:00Z")); c.advance(30 * 86400_000);
 */
export class FakeClock implements Clock {
  #t: number;
  constructor(startMs = 0) {
    this.#t = startMs;
  }
  now(): number {
    return this.#t;
  }
  set(ms: number): void {
    this.#t = ms;
  }
  advance(ms: number): void {
    this.#t += ms;
  }
}
