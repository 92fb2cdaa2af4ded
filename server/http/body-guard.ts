// Request bodies that arrive too slowly or grow too large end the request. A body must keep
// an average of `minBytesPerS` once `graceMs` has passed since its first expected byte, and
// may never pause longer than `graceMs` (the model of Apache's mod_reqtimeout MinRate): a
// client trickling a byte every few seconds is cut off after the grace time instead of holding
// a connection (and, on the gateway, an engine connection) until Node's 300 s request timeout.
// Time during which the consumer does not read (backpressure from the engine) is not counted
// against the client.
import type { IncomingMessage } from "node:http";
import { Transform, type TransformCallback } from "node:stream";
import { PayloadTooLargeError, ValidationError } from "../../lib/errors.js";
import { joinPaced } from "../../lib/store/pace.js";
import { pacedBody, paceBody, unpaceBody } from "./body-pace.js";

export interface BodyRate {
  /** Average bytes per second a body must keep up once the grace time has passed. */
  readonly minBytesPerS: number;
  /** Milliseconds before the average applies; also the longest pause between two chunks. */
  readonly graceMs: number;
}

/**
 * 16 KiB/s on average once 10 s have passed, and no pause longer than 10 s: the default of the
 * engine's and the gateway's settings (SVC_ENGINE_BODY_MIN_RATE and SVC_ENGINE_BODY_GRACE_S,
 * SVC_GATE_BODY_MIN_RATE and SVC_GATE_BODY_GRACE_S), and the pace of the provenance appliance.
 */
export const DEFAULT_BODY_RATE: BodyRate = Object.freeze({ minBytesPerS: 16 * 1024, graceMs: 10_000 });

/** The answer to a body that fell behind: 400, and the connection is closed. */
export class SlowBodyError extends ValidationError {
  constructor(rate: BodyRate) {
    super(
      `The request body arrived slower than the minimum of ${rate.minBytesPerS} bytes per second (after ${Math.round(rate.graceMs / 1000)} seconds of grace).`,
    );
  }
}

/** The answer to a body whose sender went away. */
export const abortedError = (): ValidationError => new ValidationError("The request was aborted by the client.");

const TICK_MS = 250;

/**
 * A pass-through stream for `req`'s body that fails with 413 past `limit` bytes and with
 * SlowBodyError when the body falls behind `rate`; it also fails when the client aborts.
 * `onChunk` sees each chunk's size first and may throw (for example a memory budget's 503).
 * @example const body = guardBody(req, 100 << 20, { minBytesPerS: 16384, graceMs: 10_000 });
 */
export function guardBody(req: IncomingMessage, limit: number, rate: BodyRate, onChunk?: (n: number) => void): Transform {
  let bytes = 0;
  let stalledMs = 0;
  const t0 = Date.now();
  let last = t0;
  let lastTick = t0;
  const tickMs = Math.min(TICK_MS, rate.graceMs);
  // a large body takes its turns with every other request (body-pace.ts)
  const paced = pacedBody(req);
  const guard = new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      bytes += chunk.length;
      if (paced) paceBody(req, chunk.length);
      last = Date.now();
      if (bytes > limit) return cb(new PayloadTooLargeError(`The request body is larger than the upload limit of ${limit} bytes.`));
      try {
        onChunk?.(chunk.length);
      } catch (e) {
        return cb(e as Error);
      }
      cb(null, chunk);
    },
    flush(cb) {
      stop();
      cb();
    },
    destroy(err, cb) {
      stop();
      cb(err);
    },
  });
  const timer = setInterval(() => {
    const now = Date.now();
    const dt = now - lastTick;
    lastTick = now;
    // The consumer is not reading, or this process's event loop was busy (the tick came late,
    // and the chunks that arrived meanwhile are not counted yet): the pause is ours, not the
    // client's.
    if (dt > 4 * tickMs || guard.writableLength > 0 || guard.readableLength >= guard.readableHighWaterMark || req.isPaused()) {
      stalledMs += dt;
      last = now;
      return;
    }
    const elapsed = now - t0 - stalledMs;
    const behind = elapsed > rate.graceMs && bytes < (rate.minBytesPerS * (elapsed - rate.graceMs)) / 1000;
    if (behind || now - last > rate.graceMs) guard.destroy(new SlowBodyError(rate));
  }, tickMs);
  timer.unref();
  function stop(): void {
    clearInterval(timer);
    unpaceBody(req);
    req.off("aborted", onAbort);
    req.off("error", onAbort);
  }
  const onAbort = () => guard.destroy(abortedError());
  req.once("aborted", onAbort);
  req.once("error", onAbort);
  guard.once("error", () => req.unpipe(guard));
  req.pipe(guard);
  return guard;
}

/**
 * Reads a guarded body into one Buffer. With `size` (the Content-Length) each chunk is copied
 * into place as it arrives; otherwise the chunks are joined at the end in slices of about
 * 10 ms, giving the event loop a turn between them (one copy of 100 MiB at once would hold it
 * for a second on a busy machine).
 */
export function readGuarded(body: Transform, size?: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const whole = size !== undefined && size > 0 ? Buffer.allocUnsafeSlow(size) : null;
    const chunks: Buffer[] = [];
    let n = 0;
    body.on("data", (c: Buffer) => {
      if (whole && n + c.length <= whole.length) c.copy(whole, n);
      else chunks.push(c);
      n += c.length;
    });
    body.once("end", () => {
      if (whole) {
        // Node holds a body to its Content-Length: anything else is a body this code did not expect
        if (n === whole.length && chunks.length === 0) resolve(whole);
        else reject(new ValidationError("The request body does not match its Content-Length."));
        return;
      }
      if (chunks.length <= 1) return resolve(chunks[0] ?? Buffer.alloc(0));
      joinPaced(chunks, n).then(resolve, reject);
    });
    body.once("error", reject);
  });
}
