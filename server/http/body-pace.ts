// Large request bodies take turns with everything else on the event loop. A socket that has data
// is read up to 32 times 64 KiB in one go (libuv), and each chunk is read, checked, copied or
// forwarded on the loop: a few uploads at loopback speed fill one turn of the loop with hundreds
// of chunks before a small request of another tenant gets its turn, and such a request takes
// several turns (read, forward, answer). So all large bodies together take at most
// BODY_TURN_BYTES per turn: past that a body's request is paused, and resumed in the next turn
// (setImmediate), after the I/O of everyone else. A body is paused for a turn at a time, which
// the minimum-rate guards count as this process's pause, not the client's (body-guard.ts).
import type { IncomingMessage } from "node:http";

/** Bytes of large bodies read in one turn of the event loop, all of them together. */
export const BODY_TURN_BYTES = 1 << 20;
let turnBytes = BODY_TURN_BYTES;

/** The bytes per turn from now on (tests: a budget of one byte pauses a body at every chunk). */
export function setBodyTurnBytes(n: number): void {
  turnBytes = n;
}

/** A body of at least this many bytes (by its Content-Length; chunked bodies always) is paced. */
export const PACED_BODY_MIN_BYTES = 1 << 20;

/** Times a body was paused for a turn since the process started (svc tests and benches). */
export const bodyPaceStats = { pauses: 0 };

let used = 0;
let scheduled = false;
const paused = new Set<IncomingMessage>();

function nextTurn(): void {
  used = 0;
  scheduled = false;
  const reqs = [...paused];
  paused.clear();
  for (const req of reqs) if (!req.destroyed) req.resume();
}

/** Whether `req`'s body is paced: its declared length is large, or it has none (chunked). */
export function pacedBody(req: IncomingMessage): boolean {
  const len = req.headers["content-length"];
  return len === undefined ? req.headers["transfer-encoding"] !== undefined : Number(len) >= PACED_BODY_MIN_BYTES;
}

/**
 * Counts `n` bytes of `req`'s body read in this turn; once this turn's bytes are used up the
 * request is paused until the next turn.
 */
export function paceBody(req: IncomingMessage, n: number): void {
  used += n;
  if (!scheduled) {
    scheduled = true;
    setImmediate(nextTurn);
  }
  if (used > turnBytes && !paused.has(req) && !req.isPaused()) {
    req.pause();
    paused.add(req);
    bodyPaceStats.pauses++;
  }
}

/** Forgets `req` (its body ended or failed): it is not resumed by the pacing, whoever paused it. */
export function unpaceBody(req: IncomingMessage): void {
  paused.delete(req);
}

/** Requests paused by the pacing now (tests). */
export function pacedNow(): number {
  return paused.size;
}
