// svc up's daily compaction: `svc compact` in a process of its own (so that the engine's event
// loop and memory are not the compaction's), once a day at a random time within the hour after
// --compact-at, as deploy/systemd/svc-compact.timer does for separate engines.
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { UsageError, shown } from "./common.js";
import { isPg } from "./store-location.js";

/** A time of day, local time. */
export interface TimeOfDay {
  hour: number;
  minute: number;
}

/** --compact-at: HH:MM (00:00 to 23:59, local time) or off (null). */
export function parseCompactAt(v: string): TimeOfDay | null {
  if (v === "off") return null;
  const m = /^(\d{1,2}):(\d{2})$/.exec(v);
  if (!m || Number(m[1]) > 23 || Number(m[2]) > 59) throw new UsageError(`--compact-at must be a time of day HH:MM (00:00 to 23:59) or off, not ${shown(v)}.`);
  return { hour: Number(m[1]), minute: Number(m[2]) };
}

const HOUR_MS = 3_600_000;

/** The first run after `now`: today's (or else tomorrow's) `at`, local time, plus `jitter` of an hour (0 <= jitter < 1). */
export function nextRun(now: Date, at: TimeOfDay, jitter: number): Date {
  const day = new Date(now.getFullYear(), now.getMonth(), now.getDate(), at.hour, at.minute);
  for (;;) {
    const t = new Date(day.getTime() + Math.floor(jitter * HOUR_MS));
    if (t.getTime() > now.getTime()) return t;
    day.setDate(day.getDate() + 1); // the calendar's next day, whatever its length (DST)
  }
}

export interface CompactOutcome {
  /** The child's exit code (null: ended by a signal). */
  code: number | null;
  /** svc compact --json's summary, when it printed one. */
  result: Record<string, unknown> | null;
  /** Its standard error, when it failed. */
  error: string;
}

/** A run of svc compact: its process, and its outcome once it ends. */
export interface CompactRun {
  child: ChildProcess;
  done: Promise<CompactOutcome>;
}

/**
 * `svc compact --json` on STORE (an LMDB directory or a PostgreSQL URL) in a child process: the
 * same program, run the way this one runs. The store goes in the child's environment, not its
 * arguments, which every local user can read (a URL may hold a password).
 */
export function runCompact(store: string, env: NodeJS.ProcessEnv): CompactRun {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  const svc = fileURLToPath(new URL(`../svc${ext}`, import.meta.url));
  // the node options this process runs with (tsx from the sources), less a debugger's port
  const flags = process.execArgv.filter((a) => !a.startsWith("--inspect"));
  const where: NodeJS.ProcessEnv = { ...env };
  delete where.SVC_ENGINE_STORE_URL;
  delete where.SVC_ENGINE_DATA_DIR;
  if (isPg(store)) where.SVC_ENGINE_STORE_URL = store;
  else where.SVC_ENGINE_DATA_DIR = store;
  const child = spawn(process.execPath, [...flags, svc, "compact", "--json"], { env: where, stdio: ["ignore", "pipe", "pipe"] });
  const done = new Promise<CompactOutcome>((resolve) => {
    let out = "";
    let err = "";
    child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    child.once("error", (e) => resolve({ code: null, result: null, error: e.message }));
    child.once("close", (code) => {
      let result: Record<string, unknown> | null = null;
      try {
        result = code === 0 ? (JSON.parse(out) as Record<string, unknown>) : null;
      } catch {
        result = null;
      }
      resolve({ code, result, error: err.trim().slice(0, 1000) });
    });
  });
  return { child, done };
}

export interface DailyCompaction {
  /** When the next run starts. */
  readonly next: Date;
  /** Stops the schedule; a run under way is stopped (its work is transactional) and waited for. */
  close(): Promise<void>;
}

export interface DailyOptions {
  at: TimeOfDay;
  store: string;
  env: NodeJS.ProcessEnv;
  log: { info(f: Record<string, unknown>): void; warn(f: Record<string, unknown>): void };
  now?: () => Date;
  random?: () => number;
  run?: typeof runCompact;
}

/** Runs svc compact on `store` every day at `at` plus a random part of an hour; each outcome is logged. */
export function compactDaily(o: DailyOptions): DailyCompaction {
  const now = o.now ?? (() => new Date());
  const random = o.random ?? Math.random;
  const run = o.run ?? runCompact;
  let timer: NodeJS.Timeout | null = null;
  let running: CompactRun | null = null;
  let closed = false;
  let jitter = random();
  let next = nextRun(now(), o.at, jitter);
  const arm = () => {
    // a timer of at most a day (setTimeout's limit is 24.8 days); unref'd: it never keeps the process up
    timer = setTimeout(fire, Math.max(0, next.getTime() - now().getTime()));
    timer.unref();
  };
  const fire = () => {
    timer = null;
    if (closed) return;
    const started = now();
    running = run(o.store, o.env);
    void running.done.then((r) => {
      running = null;
      const duration_ms = now().getTime() - started.getTime();
      if (r.code === 0 && r.result) o.log.info({ msg: "compact", outcome: "done", ...r.result, duration_ms });
      else if (!closed) o.log.warn({ msg: "compact", outcome: "failed", exit_code: r.code, error: r.error, duration_ms });
      if (closed) return;
      // from the end of this run's hour at the earliest: never a second run in the same day's hour
      const hourEnd = next.getTime() - Math.floor(jitter * HOUR_MS) + HOUR_MS;
      jitter = random();
      next = nextRun(new Date(Math.max(now().getTime(), hourEnd)), o.at, jitter);
      arm();
    });
  };
  arm();
  return {
    get next() {
      return next;
    },
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      const r = running as CompactRun | null; // set in the timer's callback, which TypeScript's narrowing does not follow
      if (r) {
        r.child.kill("SIGTERM");
        await r.done;
      }
    },
  };
}
