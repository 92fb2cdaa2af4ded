// Clock behind an interface so tests can move time (monthly quota reset, window edges).
// lib/clock.ts did not exist when the gateway was written; this is the gateway's own.

/** Milliseconds since the Unix epoch. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = Object.freeze({ now: () => Date.now() });

/** A clock that only moves when told to. */
export class FakeClock implements Clock {
  constructor(private t: number = Date.UTC(2026, 0, 15, 12, 0, 0)) {}
  now(): number { return this.t; }
  set(ms: number): void { this.t = ms; }
  advance(ms: number): void { this.t += ms; }
}
