// Log lines joined per turn of the event loop: the lines of every request answered in one turn
// go out in one write instead of one write each (on a file or /dev/null a synchronous write(2)
// per line). Flushed at the end of the turn (setImmediate), at 64 KiB, and when the process
// exits, so that no line is dropped by a normal exit or process.exit.

const MAX_PENDING = 64 * 1024;
const live = new Set<() => void>();
let exitHooked = false;

/** A line writer that hands `write` the lines of one turn at once. */
export function batchLines(write: (text: string) => void): (line: string) => void {
  let pending = "";
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (pending === "") return;
    const text = pending;
    pending = "";
    write(text);
  };
  live.add(flush);
  if (!exitHooked) {
    exitHooked = true;
    process.once("exit", () => {
      for (const f of live) f();
    });
  }
  return (line) => {
    pending += line;
    if (pending.length >= MAX_PENDING) flush();
    else if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
    }
  };
}

let stdout: ((line: string) => void) | null = null;

/** One batched writer of standard output for the whole process. */
export function stdoutLines(): (line: string) => void {
  return (stdout ??= batchLines((text) => process.stdout.write(text)));
}
