// Time slicing for loops over many entries on the event loop: a scan checks `due()` per entry
// and, once it has run for a slice, waits for its turn. The waiting scans share one queue and
// one slice per turn of the event loop, in turn order: whatever the number of long scans at
// once, each turn of the loop runs at most about one slice of them, so another tenant's
// request waits about a slice per step it takes, not a whole scan (nor one slice per scan).

/** Longest run of a scan before it gives the event loop a turn, in milliseconds. */
export const SCAN_SLICE_MS = 10;

const waiting: (() => void)[] = [];
let pumping = false;

/** One waiting scan per turn of the loop (an immediate queued from an immediate runs on the next turn). */
function pump(): void {
  waiting.shift()?.();
  if (waiting.length > 0) setImmediate(pump);
  else pumping = false;
}

/**
 * @example const pace = new Pace(); for (const e of entries) { if (pace.due()) await pace.yield(); work(e); }
 */
export class Pace {
  #since = performance.now();
  constructor(readonly sliceMs: number = SCAN_SLICE_MS) {}

  /** True when the current slice is used up. */
  due(): boolean {
    return performance.now() - this.#since >= this.sliceMs;
  }

  /** Waits for this scan's next turn (after I/O and every scan queued before it); the next slice starts then. */
  async yield(): Promise<void> {
    await new Promise<void>((resolve) => {
      waiting.push(resolve);
      if (!pumping) {
        pumping = true;
        setImmediate(pump);
      }
    });
    this.#since = performance.now();
  }
}

/** Elements a paced scan handles between two looks at the clock. */
const SCAN_BLOCK = 1 << 18;

/**
 * Runs `block(from, to)` over [0, n) in blocks, waiting for its turn (Pace) whenever a slice is
 * used up, so that a pass over a large array (a check or a norm of 25 million values) never
 * holds the event loop for more than about a slice. Stops at the first block that returns true
 * and resolves true then; false when every block ran.
 * @example const bad = await pacedScan(x.length, (a, b) => { for (let i = a; i < b; i++) if (!Number.isFinite(x[i])) return true; });
 */
export async function pacedScan(n: number, block: (from: number, to: number) => boolean | void): Promise<boolean> {
  const pace = new Pace();
  for (let from = 0; from < n; from += SCAN_BLOCK) {
    if (pace.due()) await pace.yield();
    if (block(from, Math.min(n, from + SCAN_BLOCK)) === true) return true;
  }
  return false;
}

/** Whether `a` and `b` hold the same bytes, compared in slices of the event loop. */
export async function sameBytesPaced(a: Uint8Array, b: Uint8Array): Promise<boolean> {
  if (a.byteLength !== b.byteLength) return false;
  const x = Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const y = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  return !(await pacedScan(a.byteLength, (from, to) => !x.subarray(from, to).equals(y.subarray(from, to))));
}

/** Joins `chunks` (`n` bytes in all) into one Buffer of its own, in slices of the event loop. */
export async function joinPaced(chunks: readonly Uint8Array[], n: number): Promise<Buffer> {
  const out = Buffer.allocUnsafeSlow(n);
  const pace = new Pace();
  let at = 0;
  for (const c of chunks) {
    if (pace.due()) await pace.yield();
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}
