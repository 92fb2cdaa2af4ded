// A gateway without Redis whose data directory is on a disk that fills up (a small tmpfs of the
// test's own, test/faults/deps.ts, where root has no reserved blocks either): the usage meter
// keeps at most two journals however long its snapshots fail, charges answered as charged are
// all counted once after a restart, the first snapshot that fits after space returns deletes
// the older journals, and /health says store_connected false while the directory takes no
// write and true again once it does. Skipped with a sentence where a tmpfs cannot be mounted.
import test from "tape";
import { cp, mkdtemp, readdir, readFile, rm, truncate, stat } from "node:fs/promises";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalFileUsageStore } from "../../server/gateway/meter.js";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway } from "../../server/gateway/server.js";
import { mountSmallDisk, waitFor, type SmallDisk } from "../faults/deps.js";
import { admin, call, SERVICE_KEY, startFakeEngine } from "./helpers.js";

const PERIOD = "2026-01";
const journalsIn = async (dir: string) => (await readdir(dir)).filter((f) => /^usage\.journal\.\d+$/.test(f)).sort();

/** Takes every free byte of the file system holding `path` (a tmpfs: whole pages) into that file. */
function fill(path: string): void {
  let size = 64 * 1024 * 1024;
  for (;;) {
    try {
      writeFileSync(path, Buffer.alloc(size, 1), { flag: "a" });
    } catch {
      if (size <= 4096) return;
      size = Math.floor(size / 2);
    }
  }
}

/** Polls `cond` until it holds or `ms` pass; whether it held. */
const eventually = (what: string, cond: () => Promise<boolean>, ms: number) =>
  waitFor(what, cond, ms).then(
    () => true,
    () => false,
  );

const mounted = await mountSmallDisk(8);
if ("skip" in mounted) {
  test("gateway data directory on a full disk", (t) => {
    t.comment(`skipped: ${mounted.skip}`);
    t.end();
  });
} else {
  const disk: SmallDisk = mounted;
  test.onFinish(() => void disk.destroy());

  test("usage meter on a full disk: charges go on while snapshots fail, at most two journals, nothing lost or counted twice", async (t) => {
    const dir = join(disk.dir, "meter");
    const spill = join(disk.dir, "fill");
    const s = await LocalFileUsageStore.open(dir, 20, { retryMaxMs: 200 });
    const expected = new Map<string, number>();
    let answered = 0;
    let refused = 0;
    const charge = (tenant: string, milli: number) =>
      s.add(tenant, PERIOD, "get", milli).then(
        () => {
          expected.set(tenant, (expected.get(tenant) ?? 0) + milli);
          answered++;
        },
        () => void refused++,
      );
    // 400 tenants: a snapshot of about 16 KiB, four pages where the journal's next lines need one
    await Promise.all(Array.from({ length: 400 }, (_, i) => charge(`t${i}`, 100)));
    await s.flush();
    const before = answered;
    // the disk full but for two pages, which the journal's next lines take
    fill(spill);
    await truncate(spill, (await stat(spill)).size - 2 * 4096);
    const outcomes = new Set<string>();
    for (let i = 0; i < 20; i++) {
      await Promise.all(Array.from({ length: 20 }, (_, j) => charge(j % 2 ? "acme" : "beta", 100)));
      outcomes.add(
        await s.flush().then(
          () => "written",
          (e: NodeJS.ErrnoException) => String(e.code),
        ),
      );
    }
    t.deepEqual([...outcomes], ["ENOSPC"], "20 snapshots in a row fail with ENOSPC");
    // charges go on with the store's own timer (20 ms) for at least 50 of its intervals
    const until = Date.now() + 1000;
    while (Date.now() < until) {
      await Promise.all(Array.from({ length: 5 }, (_, j) => charge(j % 2 ? "acme" : "beta", 100)));
      await new Promise((r) => setTimeout(r, 5));
    }
    t.ok(answered > before, `charges answered as charged while snapshots fail (${answered - before})`);
    t.ok(refused > 0, `and charges refused once the journal's pages are used (${refused})`);
    const during = await journalsIn(dir);
    t.ok(during.length <= 2, `at most two journals while the disk is full (${during.join(", ")})`);
    // (an attempt in progress has one for a moment)
    const noTemp = await eventually("no temp file", async () => !(await readdir(dir)).some((f) => f.endsWith(".tmp")), 30_000);
    t.ok(noTemp, "no temp file left by the failed snapshots");
    // a crash now: the files as they are give every charge answered as charged, once
    const copy = await mkdtemp(join(tmpdir(), "svc-full-copy-"));
    await cp(dir, copy, { recursive: true, filter: (src) => !src.endsWith(".tmp") });
    const crashed = await LocalFileUsageStore.open(copy, 3_600_000);
    t.deepEqual(
      [await crashed.total("acme", PERIOD), await crashed.total("beta", PERIOD), await crashed.total("t7", PERIOD)],
      [expected.get("acme") ?? 0, expected.get("beta") ?? 0, 100],
      `the files on the full disk hold every answered charge once (acme ${expected.get("acme")}, beta ${expected.get("beta")})`,
    );
    await crashed.close();
    await rm(copy, { recursive: true, force: true });
    // a start on the full disk goes on (its snapshot is retried later) and adds no file
    const started = await LocalFileUsageStore.open(dir, 3_600_000);
    t.equal(await started.total("acme", PERIOD), expected.get("acme"), "a store opened on the full disk starts, with the counters its files hold");
    t.deepEqual(await journalsIn(dir), during, "and leaves the journals as they were");
    const closing = await started.close().then(
      () => "closed",
      (e: NodeJS.ErrnoException) => String(e.code),
    );
    t.equal(closing, "ENOSPC", "its close cannot write the snapshot either (ENOSPC)");
    t.deepEqual(await journalsIn(dir), during, "still no new journal");

    // space again: the store's next attempt, with no new charge, writes a current snapshot
    await rm(spill);
    let seen = "";
    const settled = await eventually(
      "a current snapshot names the only journal left",
      async () => {
        const files = await journalsIn(dir);
        const snap = JSON.parse(await readFile(join(dir, "usage.json"), "utf8"));
        seen = `${files.join(", ")}; the snapshot names ${snap.journal}`;
        return files.length === 1 && files[0] === `usage.journal.${snap.journal}` && snap.usage[PERIOD]?.acme?._total === expected.get("acme");
      },
      60_000,
    );
    t.ok(settled, `once space is freed: a current snapshot and only the journal it names (${seen})`);
    const again = await LocalFileUsageStore.open(dir, 3_600_000);
    const totals = async (u: LocalFileUsageStore) => {
      let sum = 0;
      for (const tenant of expected.keys()) sum += await u.total(tenant, PERIOD);
      return sum;
    };
    const charged = [...expected.values()].reduce((a, b) => a + b, 0);
    t.equal(await totals(again), charged, `after a restart: the ${answered} charges answered as charged, ${charged} milli-CUs, each once`);
    t.equal(await again.total("acme", PERIOD), expected.get("acme"), "acme's total");
    await again.close();
    t.equal((await journalsIn(dir)).length, 1, "one journal after a clean close");
    void s;
  });

  test("/health: store_connected false while the gateway's data directory is full, true once space is freed", async (t) => {
    const engine = await startFakeEngine();
    const logs = await mkdtemp(join(tmpdir(), "svc-full-logs-"));
    const data = join(disk.dir, "gate");
    const spill = join(disk.dir, "fill");
    const config = loadGatewayConfig({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_DATA_DIR: data,
      SVC_GATE_AUDIT_LOG_PATH: join(logs, "audit.jsonl"),
    });
    let gw = await startGateway(config);
    const key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
    const health = async () => (await call(gw.url, "/health")).json as { store_connected: boolean; engine_reachable: boolean };
    try {
      t.equal((await health()).store_connected, true, "true while the disk has room");
      fill(spill);
      const full = await eventually("store_connected is false", async () => (await health()).store_connected === false, 30_000);
      t.ok(full, "false while the data directory is full");
      const h = await health();
      t.deepEqual([h.engine_reachable, h.store_connected], [true, false], "the engine is still reachable");
      // a tenant change cannot be written: 507 storage_full with Retry-After, nothing changed
      const refused = await admin(gw.url, "/gate/onboard/create", { tenant_id: "beta" });
      t.deepEqual(
        [refused.status, refused.json?.code, refused.json?.detail, refused.headers.get("retry-after")],
        [507, "storage_full", "The gateway's data directory has no space left, so the change was not made; retry after space is freed.", "30"],
        "a tenant created on the full disk: 507 storage_full, Retry-After: 30",
      );
      const listed = (await admin(gw.url, "/gate/admin/tenants", undefined, "GET")).json as { tenants: Array<{ tenant_id: string }> };
      t.deepEqual(
        listed.tenants.map((x) => x.tenant_id),
        ["acme"],
        "and the tenant does not exist",
      );
      // a restart on the full disk: the gateway starts and serves reads, and says it is not healthy
      await gw.close().catch(() => {}); // its last usage snapshot cannot be written
      gw = await startGateway(config);
      t.pass("a gateway starts on the full data directory");
      t.equal((await call(gw.url, "/v1/get/default/x", { key })).status, 200, "and serves a read");
      t.equal((await health()).store_connected, false, "with store_connected false");
      t.deepEqual(
        (await readdir(data)).filter((f) => f.endsWith(".tmp")),
        [],
        "the checks leave no file behind",
      );
      await rm(spill);
      const back = await eventually("store_connected is true", async () => (await health()).store_connected === true, 30_000);
      t.ok(back, "true again once space is freed");
      t.equal((await admin(gw.url, "/gate/onboard/create", { tenant_id: "beta" })).status, 201, "and the tenant is created");
    } finally {
      await rm(spill, { force: true });
      await gw.close();
      await engine.close();
      await rm(logs, { recursive: true, force: true });
    }
  });
}
