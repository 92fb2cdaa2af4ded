// svc up's daily compaction: nothing in `svc up` ran compact, so the versions of deletes whose 30
// days had passed, and payloads nothing named, stayed on disk for as long as it ran. It now runs
// `svc compact` in a process of its own once a day at a random time within the hour after
// --compact-at (default 03:00, local time).
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { FakeClock } from "../../lib/clock.js";
import { createStore } from "../../lib/store/index.js";
import { compactDaily, nextRun, parseCompactAt, runCompact, type CompactOutcome } from "../../bin/cli/compact-daily.js";
import { UsageError } from "../../bin/cli/common.js";
import { spawnUp, startUp, stopUp, killUp, type Up } from "./up-process.js";

const DAY = 86_400_000;

test("--compact-at: HH:MM from 00:00 to 23:59, or off; anything else is one sentence", (t) => {
  t.deepEqual(parseCompactAt("03:00"), { hour: 3, minute: 0 }, "03:00");
  t.deepEqual(parseCompactAt("3:05"), { hour: 3, minute: 5 }, "3:05");
  t.deepEqual(parseCompactAt("23:59"), { hour: 23, minute: 59 }, "23:59");
  t.deepEqual(parseCompactAt("00:00"), { hour: 0, minute: 0 }, "00:00");
  t.equal(parseCompactAt("off"), null, "off");
  for (const bad of ["24:00", "12:60", "noon", "", "03:00:00", "-1:00", "03:0", "3", "03-00", " 03:00", "OFF", "１２:００"]) {
    try {
      parseCompactAt(bad);
      t.fail(`'${bad}' accepted`);
    } catch (e) {
      t.ok(e instanceof UsageError, `'${bad}': a usage error`);
      t.equal((e as Error).message, `--compact-at must be a time of day HH:MM (00:00 to 23:59) or off, not '${bad}'.`, `'${bad}': the sentence`);
    }
  }
  t.end();
});

test("the next run: today's time plus part of an hour when it is still ahead, else tomorrow's, in local time", (t) => {
  process.env.TZ = "Europe/Berlin";
  const at = { hour: 3, minute: 0 };
  const local = (y: number, mo: number, d: number, h: number, mi = 0) => new Date(y, mo - 1, d, h, mi);
  t.equal(nextRun(local(2026, 11, 28, 2, 0), at, 0.5).getTime(), local(2026, 11, 28, 3, 30).getTime(), "02:00: today at 03:30");
  t.equal(nextRun(local(2026, 11, 28, 3, 10), at, 0.5).getTime(), local(2026, 11, 28, 3, 30).getTime(), "03:10: today at 03:30 still");
  t.equal(nextRun(local(2026, 11, 28, 3, 45), at, 0.5).getTime(), local(2026, 11, 29, 3, 30).getTime(), "03:45: tomorrow at 03:30");
  t.equal(nextRun(local(2026, 11, 28, 3, 0), at, 0).getTime(), local(2026, 11, 29, 3, 0).getTime(), "exactly at the time: tomorrow, never twice at once");
  t.equal(nextRun(local(2026, 12, 31, 23, 0), at, 0).getTime(), local(2027, 1, 1, 3, 0).getTime(), "across the year's end");
  const j = nextRun(local(2026, 11, 28, 0, 0), at, 0.999999);
  t.ok(j.getTime() < local(2026, 11, 28, 4, 0).getTime() && j.getHours() === 3, "the random part stays within the hour");
  // the night summer time begins (02:00 -> 03:00): the day is 23 hours long, the run still at 03:00 local
  const spring = nextRun(local(2026, 3, 28, 4, 0), at, 0);
  t.deepEqual([spring.getDate(), spring.getHours(), spring.getMinutes()], [29, 3, 0], "after a 23-hour day: 03:00 local");
  t.equal(spring.getTime() - local(2026, 3, 28, 3, 0).getTime(), 23 * 3_600_000, "23 hours after the day before's");
  const autumn = nextRun(local(2026, 10, 24, 4, 0), at, 0);
  t.deepEqual([autumn.getDate(), autumn.getHours()], [25, 3], "after a 25-hour day: 03:00 local");
  t.end();
});

/** A run whose outcome the test gives; its child only records a stop. */
function fakeRun(outcomes: CompactOutcome[]) {
  const calls: { store: string; killed: string[] }[] = [];
  const run = (store: string) => {
    const call = { store, killed: [] as string[] };
    calls.push(call);
    const outcome = outcomes.shift();
    let finish!: (o: CompactOutcome) => void;
    const done = new Promise<CompactOutcome>((r) => (finish = r));
    if (outcome) setTimeout(() => finish(outcome), 5);
    const child = {
      kill: (sig: string) => {
        call.killed.push(sig);
        finish({ code: null, result: null, error: "" });
        return true;
      },
    } as unknown as ChildProcess;
    return { child, done };
  };
  return { run, calls };
}

async function until(f: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 600 && !f(); i++) await new Promise((r) => setTimeout(r, 50));
  if (!f()) throw new Error(`not reached within 30 s: ${what}`);
}

/** A schedule for 03:00 whose clock reads `now` (20 ms before 03:00, say) and whose part of an hour is 0. */
function schedule(now: Date, run: ReturnType<typeof fakeRun>["run"], log: { infos: Record<string, unknown>[]; warns: Record<string, unknown>[] }) {
  return compactDaily({
    at: { hour: 3, minute: 0 },
    store: "/srv/store",
    env: {},
    log: { info: (f) => log.infos.push(f), warn: (f) => log.warns.push(f) },
    now: () => now,
    random: () => 0,
    run,
  });
}

test("daily compaction: runs at its time, logs its outcome with the counts, and arms the next day's run", async (t) => {
  const log = { infos: [] as Record<string, unknown>[], warns: [] as Record<string, unknown>[] };
  const { run, calls } = fakeRun([{ code: 0, result: { versions_purged: 2, keys_purged: 1, payloads_purged: 1, seconds: 0.01 }, error: "" }]);
  const daily = schedule(new Date(2026, 10, 28, 2, 59, 59, 980), run, log);
  try {
    t.equal(daily.next.getTime(), new Date(2026, 10, 28, 3, 0).getTime(), "the first run is today's 03:00");
    await until(() => log.infos.length === 1, "the run's line");
    t.equal(calls[0]?.store, "/srv/store", "svc compact ran on the store");
    t.deepEqual(
      { ...log.infos[0], duration_ms: 0 },
      { msg: "compact", outcome: "done", versions_purged: 2, keys_purged: 1, payloads_purged: 1, seconds: 0.01, duration_ms: 0 },
      "its outcome is one info line with the counts",
    );
    t.deepEqual(log.warns, [], "no warning");
    t.equal(daily.next.getTime(), new Date(2026, 10, 29, 3, 0).getTime(), "the next run is tomorrow's");
    t.equal(calls.length, 1, "one run");
  } finally {
    await daily.close();
  }
});

test("daily compaction: a run early in its hour is not followed by another later in the same hour", async (t) => {
  const infos: Record<string, unknown>[] = [];
  const { run, calls } = fakeRun([{ code: 0, result: { versions_purged: 0, keys_purged: 0, payloads_purged: 0, seconds: 0 }, error: "" }]);
  const parts = [5 / 60, 0.5]; // today's run at 03:05; the next draw would be 03:30
  const daily = compactDaily({
    at: { hour: 3, minute: 0 },
    store: "s",
    env: {},
    log: { info: (f) => infos.push(f), warn: () => undefined },
    now: () => new Date(2026, 10, 28, 3, 4, 59, 980),
    random: () => parts.shift()!,
    run,
  });
  try {
    t.equal(daily.next.getTime(), new Date(2026, 10, 28, 3, 5).getTime(), "today at 03:05");
    await until(() => infos.length === 1, "the run's line");
    t.equal(daily.next.getTime(), new Date(2026, 10, 29, 3, 30).getTime(), "then tomorrow at 03:30, not today at 03:30");
    t.equal(calls.length, 1, "one run today");
  } finally {
    await daily.close();
  }
});

test("daily compaction: a failed run is a warning with its sentence, and the next day's run is armed all the same", async (t) => {
  const log = { infos: [] as Record<string, unknown>[], warns: [] as Record<string, unknown>[] };
  const { run } = fakeRun([{ code: 1, result: null, error: "svc: The database is unreachable; retry later." }]);
  const daily = schedule(new Date(2026, 10, 29, 2, 59, 59, 980), run, log);
  try {
    await until(() => log.warns.length === 1, "the failed run's warning");
    t.deepEqual(
      { ...log.warns[0], duration_ms: 0 },
      { msg: "compact", outcome: "failed", exit_code: 1, error: "svc: The database is unreachable; retry later.", duration_ms: 0 },
      "a warning with the exit code and the sentence",
    );
    t.equal(daily.next.getTime(), new Date(2026, 10, 30, 3, 0).getTime(), "the next day's run is armed");
  } finally {
    await daily.close();
  }
});

test("daily compaction: closing stops a run under way and waits for it; nothing is logged for it", async (t) => {
  const now = new Date(2026, 10, 28, 2, 59, 59, 990);
  const warns: Record<string, unknown>[] = [];
  const { run, calls } = fakeRun([]); // a run that does not end by itself
  const daily = compactDaily({
    at: { hour: 3, minute: 0 },
    store: "s",
    env: {},
    log: { info: () => undefined, warn: (f) => warns.push(f) },
    now: () => now,
    random: () => 0,
    run,
  });
  await until(() => calls.length === 1, "the run's start");
  await daily.close();
  t.deepEqual(calls[0]!.killed, ["SIGTERM"], "the run was stopped with SIGTERM");
  t.deepEqual(warns, [], "a run stopped by the close is not reported as failed");
  await new Promise((r) => setTimeout(r, 50));
  t.equal(calls.length, 1, "and no run follows");
});

test("daily compaction's run: svc compact in a process of its own purges what an LMDB store's deletes left", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-compact-daily-"));
  try {
    // deleted 31 days ago: past the 30 days a delete's versions are kept
    const s = await createStore({ path: dir, clock: new FakeClock(Date.now() - 31 * DAY) });
    await s.put("ns", "gone", Buffer.from("gone".repeat(16)));
    await s.delete("ns", "gone");
    await s.put("ns", "kept", Buffer.from("kept".repeat(16)));
    await s.close();
    // the environment's store variables name another store: the one given wins
    const run = runCompact(dir, { ...process.env, SVC_ENGINE_DATA_DIR: join(dir, "elsewhere"), SVC_ENGINE_STORE_URL: "postgres://u:pw@127.0.0.1:1/x" });
    t.notOk(
      run.child.spawnargs.some((a) => a.includes(dir)),
      "the store is not in the child's arguments (they are readable by every local user)",
    );
    const r = await run.done;
    t.equal(r.code, 0, "it exits 0");
    t.deepEqual(
      r.result && { versions_purged: r.result.versions_purged, keys_purged: r.result.keys_purged, payloads_purged: r.result.payloads_purged },
      { versions_purged: 1, keys_purged: 1, payloads_purged: 1 },
      "the deleted key, its version and its payload purged",
    );
    const after = await createStore({ path: dir });
    t.ok(Buffer.from((await after.serve("ns", "kept")).data as Uint8Array).equals(Buffer.from("kept".repeat(16))), "the other key reads back");
    await after.close();
    // a PostgreSQL URL with a password: neither the arguments nor the error sentence show it
    const pg = runCompact("postgres://svc:s3cret-pw@127.0.0.1:1/svc", { ...process.env });
    t.notOk(
      pg.child.spawnargs.some((a) => a.includes("s3cret-pw")),
      "the URL's password is not in the child's arguments",
    );
    const refused = await pg.done;
    t.notEqual(refused.code, 0, `nothing listens there: exit ${refused.code}`);
    t.ok(refused.error.length > 0 && !refused.error.includes("s3cret-pw"), `the sentence names no password: ${refused.error}`);
    const missing = await runCompact(join(dir, "nothing-here"), { ...process.env }).done;
    t.equal(missing.code, 2, "a store that is not there: exit 2");
    t.match(missing.error, /nothing-here/, `with its sentence: ${missing.error}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("svc up: a compact line at start-up, --compact-at off, and a bad --compact-at is a usage error", async (t) => {
  const dirs = [mkdtempSync(join(tmpdir(), "svc-up-compact-")), mkdtempSync(join(tmpdir(), "svc-up-compact-"))];
  let up: Up | null = null;
  try {
    up = await startUp(["--data", dirs[0]!]);
    t.match(up.out, /^compact: daily, within the hour after 03:00$/m, "default: daily after 03:00");
    t.equal(await stopUp(up), 0, "stops cleanly");
    up = await startUp(["--data", dirs[1]!, "--compact-at", "off"]);
    t.match(up.out, /^compact: off$/m, "--compact-at off: none");
    t.equal(await stopUp(up), 0, "stops cleanly");
    const bad = spawnUp(["--data", dirs[1]!, "--compact-at", "25:00"]);
    t.equal(await bad.exited, 2, "--compact-at 25:00: exit 2");
    t.match(bad.err, /--compact-at must be a time of day HH:MM \(00:00 to 23:59\) or off, not '25:00'\./, "one sentence");
  } finally {
    await killUp(up);
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
});
