// How the project starts its worker threads: the code of a Worker (with `eval: true`) that
// imports the module next to the caller, whether the caller runs from its TypeScript sources
// (tsx: the worker registers tsx itself first) or from the compiled JavaScript in dist/.
import { readlinkSync } from "node:fs";
import { getPriority, setPriority } from "node:os";

/**
 * @example new Worker(workerCode(import.meta.url, "offload-worker"), { eval: true })
 */
export function workerCode(callerUrl: string, name: string): string {
  const fromSource = callerUrl.endsWith(".ts");
  const url = new URL(`./${name}${fromSource ? ".ts" : ".js"}`, callerUrl).href;
  return fromSource ? `import("tsx/esm/api").then((m) => { m.register(); return import(${JSON.stringify(url)}); })` : `import(${JSON.stringify(url)})`;
}

/**
 * Lowers the calling thread's priority to nice 10 (Linux, where a thread's id names it to
 * setpriority): a worker doing one request's heavy work must not take the CPU from the event
 * loop that answers everyone else. Elsewhere, or when not allowed, nothing changes.
 */
export function lowerThreadPriority(): void {
  try {
    const tid = Number(readlinkSync("/proc/thread-self").split("/").pop());
    if (Number.isInteger(tid) && tid > 0 && getPriority(tid) < 10) setPriority(tid, 10);
  } catch {
    // another system, or not allowed: the default priority
  }
}
