// Log rotation under a running gateway: the audit log (and the billing log) are moved away and
// reopened; every record lands in exactly one of the two files, records queued before the
// reopen in the old one; the new file is 0600. Then the real `svc gateway` process on SIGHUP.
import test from "tape";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { FileAuditSink, type AuditRecord } from "../../server/gateway/audit.js";
import { FileBillingLog, type BillingLogRecord } from "../../server/gateway/billing.js";
import { SERVICE_KEY, startFakeEngine } from "./helpers.js";

const ROOT = new URL("../../", import.meta.url).pathname;
const rec = (i: number): AuditRecord => ({
  ts: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
  tenant_id: "acme",
  method: "GET",
  path: `/v1/get/ns/k${i}`,
  namespace: "ns",
  status: 200,
  cus: 0.1,
  latency_ms: 1,
  request_id: `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`,
});
async function rejects(t: test.Test, p: Promise<unknown>, re: RegExp, msg: string): Promise<void> {
  try {
    await p;
    t.fail(`${msg}: resolved`);
  } catch (e) {
    t.match(String((e as Error).message), re, msg);
  }
}
const lines = (p: string): string[] => (existsSync(p) ? readFileSync(p, "utf8").split("\n").filter(Boolean) : []);
const ids = (p: string): number[] => lines(p).map((l) => Number((JSON.parse(l) as AuditRecord).path.slice("/v1/get/ns/k".length)));

test("audit log: reopen after a move; queued records go to the old file, later ones to the new, none lost", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-rotate-"));
  const path = join(dir, "logs", "audit.jsonl");
  const sink = await FileAuditSink.open(path);
  for (let i = 0; i < 5; i++) await sink.write(rec(i));
  renameSync(path, path + ".1");
  // records written after the move but before the reopen still reach the moved file
  await sink.write(rec(5));
  // three queued in this turn, not yet written, when reopen runs
  const queued = [6, 7, 8].map((i) => sink.write(rec(i)));
  await sink.reopen();
  await Promise.all(queued);
  t.equal(statSync(path).mode & 0o777, 0o600, "the new file is 0600");
  const more = [];
  for (let i = 9; i < 40; i++) more.push(sink.write(rec(i)));
  await Promise.all(more);
  await sink.close();
  t.deepEqual(ids(path + ".1"), [0, 1, 2, 3, 4, 5, 6, 7, 8], "the old file: everything up to the reopen, in order");
  t.deepEqual(
    ids(path),
    Array.from({ length: 31 }, (_, i) => i + 9),
    "the new file: everything after it, in order",
  );
  await rejects(t, sink.reopen(), /closed/, "a closed log is not reopened");
  rmSync(dir, { recursive: true, force: true });
});

test("audit log: a path that cannot be opened keeps the old file in use", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-rotate-"));
  const path = join(dir, "audit.jsonl");
  const sink = await FileAuditSink.open(path);
  await sink.write(rec(1));
  renameSync(path, path + ".1");
  // a directory where the log should be: open(2) fails with EISDIR
  const { mkdirSync } = await import("node:fs");
  mkdirSync(path);
  await rejects(t, sink.reopen(), /EISDIR/, "the reopen fails");
  await sink.write(rec(2));
  t.deepEqual(ids(path + ".1"), [1, 2], "records still go to the file open before");
  await sink.close();
  rmSync(dir, { recursive: true, force: true });
});

test("billing log: reopen after a move", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-rotate-"));
  const path = join(dir, "billing.jsonl");
  const log = await FileBillingLog.open(path);
  const brec = (id: string): BillingLogRecord => ({
    ts: "2026-01-01T00:00:00.000Z",
    event_id: id,
    type: "checkout.session.completed",
    created: 1,
    tenant_id: "acme",
    outcome: "applied",
    reason: "",
    plan_before: "starter",
    plan_after: "builder",
    cancellations: [],
    request_id: "r",
  });
  await log.write(brec("evt_1"));
  renameSync(path, path + ".1");
  await log.reopen();
  await log.write(brec("evt_2"));
  await log.close();
  t.deepEqual(
    lines(path + ".1").map((l) => JSON.parse(l).event_id),
    ["evt_1"],
  );
  t.deepEqual(
    lines(path).map((l) => JSON.parse(l).event_id),
    ["evt_2"],
  );
  t.equal(statSync(path).mode & 0o777, 0o600);
  rmSync(dir, { recursive: true, force: true });
});

test("svc gateway: SIGHUP reopens the audit log; the process keeps serving; SIGTERM stops it", async (t) => {
  const engine = await startFakeEngine();
  const dir = mkdtempSync(join(tmpdir(), "svc-rotate-"));
  const audit = join(dir, "audit.jsonl");
  const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc.ts"), "gateway"], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: audit,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const errLines: string[] = [];
  const waiters: Array<{ re: RegExp; resolve: (l: string) => void }> = [];
  const feed = (l: string) => {
    errLines.push(l);
    for (const w of waiters.splice(0))
      if (w.re.test(l)) w.resolve(l);
      else waiters.push(w);
  };
  createInterface({ input: child.stderr! }).on("line", feed);
  const stderrLine = (re: RegExp) =>
    new Promise<string>((resolve, reject) => {
      const hit = errLines.find((l) => re.test(l));
      if (hit) return resolve(hit);
      waiters.push({ re, resolve });
      setTimeout(() => reject(new Error(`no line ${re} on stderr in 60 s: ${errLines.join(" | ")}`)), 60_000).unref();
    });
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on("line", (l) => {
        const m = /^gateway: (http:\/\/\S+)$/.exec(l);
        if (m) resolve(m[1]!);
      });
      child.once("exit", (c) => reject(new Error(`svc gateway exited (${c}): ${errLines.join(" | ")}`)));
    });
    const adminCall = (path: string) => fetch(url + path, { headers: { authorization: `Bearer ${SERVICE_KEY}` } });
    t.equal((await adminCall("/gate/admin/usage/one")).status, 404, "a first admin call (audited)");
    renameSync(audit, audit + ".1");
    child.kill("SIGHUP");
    await stderrLine(/logs reopened/);
    t.pass("the gateway says it reopened its logs");
    t.equal((await adminCall("/gate/admin/usage/two")).status, 404, "served after SIGHUP");
    const paths = (p: string) => lines(p).map((l) => (JSON.parse(l) as AuditRecord).path);
    t.deepEqual(paths(audit + ".1"), ["/gate/admin/usage/one"], "the moved file holds the record from before");
    t.deepEqual(paths(audit), ["/gate/admin/usage/two"], "the new file the one from after");
    t.equal(statSync(audit).mode & 0o777, 0o600);
    child.kill("SIGTERM");
    t.equal(await exited, 0, "SIGTERM stops it with exit 0");
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
