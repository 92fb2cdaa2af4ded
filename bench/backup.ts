// Backup of a running engine's LMDB store (svc backup, lib/store/backup.ts). Builds a store of
// SVC_BENCH_BACKUP_MB (default 256) MB of 256 KiB entries (random bytes: stored raw, so the
// store's size is the data's), starts an engine on it, and measures, each in its own line:
//   put_idle    put latency (p50, p99) of 256 KiB puts with no backup running
//   backup      `svc backup` run as its own process while a writer keeps putting: seconds,
//               MB/s, the copy's size, and its check (every entry present before the backup
//               reads back with its SHA-256; the puts acknowledged meanwhile)
//   put_backup  put latency of the same writer while the backup ran
//   compact     the same backup with --compact (no writer)
//   restore     `svc restore` of the first backup
// Temporary files live under os.tmpdir() and are removed.
import { spawnSync, spawn } from "node:child_process";
import { createCipheriv, createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createStore } from "../lib/store/index.js";
import { loadEngineConfig } from "../server/engine/config.js";
import { startEngine } from "../server/engine/server.js";

const MB = Number(process.env.SVC_BENCH_BACKUP_MB ?? 256);
const ENTRY = 256 * 1024;
const N = Math.max(1, Math.round((MB * 1e6) / ENTRY));
const KEY = randomBytes(24).toString("hex");
const ROOT = fileURLToPath(new URL("../", import.meta.url));
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : null;
};
const r3 = (x: number | null) => (x === null ? null : Math.round(x * 1000) / 1000);
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const ZEROS = Buffer.alloc(ENTRY);
/** Deterministic bytes of entry i (AES-CTR keystream: random-looking, cheap; the check needs no table). */
const bytesOf = (i: number): Buffer => {
  const key = createHash("sha256").update(`entry-${i}`).digest().subarray(0, 16);
  return createCipheriv("aes-128-ctr", key, Buffer.alloc(16)).update(ZEROS);
};

emit({
  bench: "backup",
  node: process.version,
  cpus: cpus().length,
  cpu: cpus()[0]?.model ?? "unknown",
  mem_gib: Math.round(totalmem() / 2 ** 30),
  entries: N,
  entry_bytes: ENTRY,
  loadavg: loadavg().map((x) => r3(x)),
});
const dir = mkdtempSync(join(tmpdir(), "svc-bench-backup-"));
const storeDir = join(dir, "engine");
try {
  // the store, written in batches through the library
  const t0 = performance.now();
  const store = await createStore({ path: storeDir, tenant: "acme" });
  // 32 puts in flight: lmdb-js commits concurrent writes together
  for (let i = 0; i < N; i += 32) {
    const batch = [];
    for (let j = i; j < Math.min(N, i + 32); j++) batch.push(store.put("ns", `e${j}`, bytesOf(j)));
    await Promise.all(batch);
  }
  await store.close();
  emit({ figure: "fill", seconds: r3((performance.now() - t0) / 1000), store_bytes: statSync(join(storeDir, "data.mdb")).size });

  const engine = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: storeDir,
      SVC_ENGINE_API_KEYS: KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
      SVC_ENGINE_DEVICE: "cpu",
    }),
  );
  const body = randomBytes(ENTRY);
  let w = 0;
  const put = async (): Promise<number> => {
    const s = performance.now();
    const r = await fetch(`${engine.url}/v1/put?namespace=ns&key=w${w++}`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/octet-stream" },
      body,
    });
    await r.arrayBuffer();
    if (r.status !== 201) throw new Error(`put: ${r.status}`);
    return performance.now() - s;
  };
  const idle: number[] = [];
  const until = performance.now() + 5000;
  while (performance.now() < until) idle.push(await put());
  emit({ figure: "put_idle", puts: idle.length, p50_ms: r3(pct(idle, 50)), p99_ms: r3(pct(idle, 99)) });

  // backup in its own process while the writer goes on
  const during: number[] = [];
  let done = false;
  const writer = (async () => {
    while (!done) during.push(await put());
  })();
  const b1 = join(dir, "b1");
  const tb = performance.now();
  const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc.ts"), "backup", "--store", storeDir, "--to", b1], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const code = await new Promise<number | null>((r) => child.on("close", r));
  const wall = (performance.now() - tb) / 1000;
  done = true;
  await writer;
  await engine.close();
  const inner = Number(/in ([\d.]+) s\./.exec(out)?.[1] ?? NaN);
  // check: every entry written before the backup reads back with its hash
  const copy = await createStore({ path: b1, tenant: "acme" });
  let ok = 0;
  for (let i = 0; i < N; i++) {
    const s = await copy.serve("ns", `e${i}`);
    if (sha(new Uint8Array(s.data.buffer, s.data.byteOffset, s.data.byteLength)) === sha(bytesOf(i))) ok++;
  }
  const { total } = await copy.list("ns", { limit: 1 });
  await copy.close();
  const bytes = statSync(join(b1, "data.mdb")).size;
  emit({
    figure: "backup",
    exit: code,
    seconds_copy: r3(inner),
    seconds_process: r3(wall),
    mb_per_s: r3(bytes / 1e6 / inner),
    backup_bytes: bytes,
    entries_checked: N,
    entries_ok: ok,
    entries_in_copy: total,
    puts_during: during.length,
    correct: code === 0 && ok === N,
  });
  emit({ figure: "put_backup", puts: during.length, p50_ms: r3(pct(during, 50)), p99_ms: r3(pct(during, 99)) });

  const b2 = join(dir, "b2");
  const c = spawnSync(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc.ts"), "backup", "--compact", "--store", storeDir, "--to", b2], {
    encoding: "utf8",
  });
  emit({
    figure: "compact",
    exit: c.status,
    seconds_copy: Number(/in ([\d.]+) s\./.exec(c.stdout)?.[1] ?? NaN),
    backup_bytes: statSync(join(b2, "data.mdb")).size,
  });
  rmSync(b2, { recursive: true, force: true });

  const rs = spawnSync(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc.ts"), "restore", "--from", b1, "--to", join(dir, "restored")], {
    encoding: "utf8",
  });
  emit({ figure: "restore", exit: rs.status, seconds_copy: Number(/in ([\d.]+) s\./.exec(rs.stdout)?.[1] ?? NaN), line: rs.stdout.trim() });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
emit({ loadavg_after: loadavg().map((x) => r3(x)) });
