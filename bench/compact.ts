// Compaction beside a writer (svc compact, lib/store/maintenance.ts): on an LMDB store of
// SVC_BENCH_COMPACT_LMDB_KEYS (default 50,000) keys deleted 31 days before, and on a PostgreSQL
// store of SVC_BENCH_COMPACT_PG_KEYS (default 100,000) such keys (copied by SQL) when PostgreSQL
// answers at SVC_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/postgres; a database
// of its own is created and dropped). `svc compact --json` runs as its own process while a
// writer here puts a small entry every 20 ms. One line per store: the command's seconds, the
// puts written meanwhile and the slowest of them, the command's peak RSS, and the check: the
// counts purged are those expected, every put of the writer succeeded and reads back.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { FakeClock } from "../lib/clock.js";
import { createStore, type Store } from "../lib/store/index.js";

const LMDB_KEYS = Number(process.env.SVC_BENCH_COMPACT_LMDB_KEYS ?? 50_000);
const PG_KEYS = Number(process.env.SVC_BENCH_COMPACT_PG_KEYS ?? 100_000);
const PG_URL = process.env.SVC_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const SVC = fileURLToPath(new URL("../bin/svc.ts", import.meta.url));
const DAY = 86_400_000;
// deleted 31 days before now: past the 30 days a delete's versions are kept
const T0 = Date.now() - 31 * DAY;
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o));

/** `svc compact --json` on `store` in a process of its own: its summary and peak RSS. */
function compactProcess(env: NodeJS.ProcessEnv): Promise<{ code: number | null; result: Record<string, number> | null; rss_mb: number | null }> {
  return new Promise((resolve) => {
    const c = spawn("/usr/bin/time", ["-f", "rss_kb=%M", process.execPath, "--import", "tsx", SVC, "compact", "--json"], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    c.stdout.on("data", (d: Buffer) => (out += d.toString()));
    c.stderr.on("data", (d: Buffer) => (err += d.toString()));
    c.once("close", (code) => {
      let result: Record<string, number> | null = null;
      try {
        result = JSON.parse(out) as Record<string, number>;
      } catch {
        result = null;
      }
      const rss = /rss_kb=(\d+)/.exec(err);
      resolve({ code, result, rss_mb: rss ? Math.round(Number(rss[1]) / 1024) : null });
    });
  });
}

/** Compaction of the store `writer` also opens, with the writer putting beside it; one line. */
async function measure(backend: string, keys: number, writer: Store, env: NodeJS.ProcessEnv, expected: Record<string, number>): Promise<void> {
  let running = true;
  let slowest = 0;
  let puts = 0;
  const failures: string[] = [];
  const written = new Map<string, string>();
  const writing = (async () => {
    while (running) {
      const key = `w${puts % 50}`;
      const body = `written ${puts}`;
      const t = performance.now();
      try {
        await writer.put("ns", key, Buffer.from(body));
        written.set(key, body);
      } catch (e) {
        failures.push((e as Error).message);
      }
      slowest = Math.max(slowest, performance.now() - t);
      puts++;
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const t0 = performance.now();
  const r = await compactProcess(env);
  const seconds = (performance.now() - t0) / 1000;
  running = false;
  await writing;
  let readBack = 0;
  for (const [key, body] of written) if (Buffer.from((await writer.serve("ns", key)).data as Uint8Array).toString() === body) readBack++;
  const purged = r.result && { versions_purged: r.result.versions_purged, keys_purged: r.result.keys_purged, payloads_purged: r.result.payloads_purged };
  const ok = r.code === 0 && JSON.stringify(purged) === JSON.stringify(expected) && failures.length === 0 && readBack === written.size;
  emit({
    figure: "compact",
    backend,
    deleted_keys: keys,
    seconds: Math.round(seconds * 100) / 100,
    puts_beside: puts,
    slowest_put_ms: Math.round(slowest * 10) / 10,
    peak_rss_mb: r.rss_mb,
    purged,
    expected,
    put_failures: failures.slice(0, 3),
    read_back: `${readBack} of ${written.size}`,
    check: ok ? "ok" : "FAILED",
  });
  if (!ok) process.exitCode = 1;
}

async function lmdb(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "svc-bench-compact-"));
  try {
    const s = await createStore({ path: dir, clock: new FakeClock(T0) });
    for (let i = 0; i < LMDB_KEYS; i += 256)
      await Promise.all(
        Array.from({ length: Math.min(256, LMDB_KEYS - i) }, async (_, j) => {
          await s.put("ns", `k${i + j}`, Buffer.from(`payload ${i + j} `.repeat(4)));
          await s.delete("ns", `k${i + j}`);
        }),
      );
    await s.close();
    const writer = await createStore({ path: dir });
    await measure(
      "lmdb",
      LMDB_KEYS,
      writer,
      { SVC_ENGINE_DATA_DIR: dir, SVC_ENGINE_STORE_URL: "" },
      {
        versions_purged: LMDB_KEYS,
        keys_purged: LMDB_KEYS,
        payloads_purged: LMDB_KEYS,
      },
    );
    await writer.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function postgres(): Promise<void> {
  const admin = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 3000 });
  admin.on("error", () => undefined);
  try {
    await admin.connect();
  } catch {
    emit({ figure: "compact", backend: "postgres", skipped: `nothing answers at ${new URL(PG_URL).host}` });
    return;
  }
  const db = `svc_bench_compact_${randomBytes(4).toString("hex")}`;
  await admin.query(`CREATE DATABASE ${db}`);
  const u = new URL(PG_URL);
  u.pathname = `/${db}`;
  const url = u.toString();
  try {
    const s = await createStore({ url, clock: new FakeClock(T0) });
    await s.put("ns", "gone", Buffer.from("A".repeat(64)));
    await s.delete("ns", "gone");
    await s.close();
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query(`INSERT INTO heads SELECT tenant_id, namespace, key || '-' || g, value FROM heads, generate_series(1, ${PG_KEYS}) g WHERE key = 'gone'`);
    await c.query(
      `INSERT INTO versions SELECT tenant_id, namespace, key || '-' || g, version, value FROM versions, generate_series(1, ${PG_KEYS}) g WHERE key = 'gone'`,
    );
    await c.query("VACUUM ANALYZE");
    await c.end();
    const writer = await createStore({ url, timeout_ms: 600_000 });
    // the copies name gone's payload: one payload for all of them
    await measure(
      "postgres",
      PG_KEYS + 1,
      writer,
      { SVC_ENGINE_STORE_URL: url },
      { versions_purged: PG_KEYS + 1, keys_purged: PG_KEYS + 1, payloads_purged: 1 },
    );
    await writer.close();
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  }
}

emit({ figure: "machine", cores: cpus().length, cpu: cpus()[0]?.model, loadavg_1m: Math.round(loadavg()[0]! * 100) / 100 });
await lmdb();
await postgres();
