// svc backup / svc restore on a real engine: the backup is taken by another process while the
// engine keeps acknowledging puts; every put acknowledged before the backup started is in it
// with the same bytes, every entry in it reads back whole; the restore is a new store that an
// engine opens. Refusals: no --to, a target that exists, a path that is not a store.
import test from "tape";
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore } from "../../lib/store/index.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import type { Logger } from "../../server/engine/app.js";
import { svc } from "./helpers.js";

const ROOT = new URL("../../", import.meta.url).pathname;
const KEY = "svc-backup-test-key-" + "0123456789abcdef".repeat(2);
const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

function run(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc.ts"), ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let out = "",
      err = "";
    c.stdout.on("data", (d) => (out += d));
    c.stderr.on("data", (d) => (err += d));
    c.on("close", (code) => resolve({ code, out, err }));
  });
}

test("svc backup while the engine writes; svc restore as a new store", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-backup-"));
  const storeDir = join(dir, "engine");
  const engine = await startEngine(
    loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: storeDir, SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_DEVICE: "cpu" }),
    { logger: quiet },
  );
  const put = async (key: string, bytes: Buffer) => {
    const r = await fetch(`${engine.url}/v1/put?namespace=ns&key=${key}`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/octet-stream" },
      body: bytes,
    });
    if (r.status !== 201) throw new Error(`put ${key}: ${r.status}`);
  };
  const written = new Map<string, string>();
  try {
    // 200 entries of 16-64 KiB before the backup
    for (let i = 0; i < 200; i++) {
      const b = randomBytes(16_384 + ((i * 7919) % 49_152));
      await put(`before/${i}`, b);
      written.set(`before/${i}`, sha(b));
    }
    // a writer that keeps going during the backup
    let stop = false;
    let during = 0;
    const writer = (async () => {
      while (!stop) {
        const b = randomBytes(32_768);
        await put(`during/${during}`, b);
        written.set(`during/${during++}`, sha(b));
      }
    })();
    const backupDir = join(dir, "backups", "b1");
    const r = await run(["backup", "--store", storeDir, "--to", backupDir]);
    stop = true;
    await writer;
    t.equal(r.code, 0, `svc backup exit 0 (${r.err.trim()})`);
    t.match(r.out, /^Backed up to \S+b1: [\d.]+ [kMG]B, \d+ records, \d+ payloads, in [\d.]+ s\.\n$/, "one line: size, records, payloads, time");
    t.ok(during > 0, `${during} puts were acknowledged while the backup ran or around it`);
    t.deepEqual(readdirSync(backupDir), ["data.mdb"], "the backup directory holds data.mdb only");
    t.equal(statSync(backupDir).mode & 0o777, 0o700, "backup directory 0700");
    t.equal(statSync(join(backupDir, "data.mdb")).mode & 0o777, 0o600, "data.mdb 0600");
    t.deepEqual(readdirSync(join(dir, "backups")), ["b1"], "no partial directory left");

    // restore as a new store and read it
    const restored = join(dir, "restored");
    const rr = await run(["restore", "--from", backupDir, "--to", restored]);
    t.equal(rr.code, 0, `svc restore exit 0 (${rr.err.trim()})`);
    t.match(rr.out, /^Restored to \S+restored: /);
    const store = await createStore({ path: restored, tenant: "acme" });
    try {
      let before = 0,
        duringIn = 0,
        bad = 0;
      const keys: string[] = [];
      for (let off: number | null = 0; off !== null;) {
        const page = await store.list("ns", { limit: 1000, offset: off });
        keys.push(...page.keys.map((k) => k.key));
        off = page.next_offset;
      }
      for (const key of keys) {
        const s = await store.serve("ns", key);
        const got = sha(new Uint8Array(s.data.buffer, s.data.byteOffset, s.data.byteLength));
        if (got !== written.get(key)) bad++;
        if (key.startsWith("before/")) before++;
        else duringIn++;
      }
      t.equal(before, 200, "every put acknowledged before the backup started is in it");
      t.equal(bad, 0, "every entry in the backup reads back with the bytes that were put");
      t.ok(duringIn <= during, `${duringIn} of the ${during} concurrent puts are in it, each whole`);
    } finally {
      await store.close();
    }
    // the engine kept running and still serves
    const after = await fetch(`${engine.url}/v1/list/ns?limit=1`, { headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme" } });
    t.equal(after.status, 200, "the engine serves after the backup");
    // and an engine opens the restored store
    const e2 = await startEngine(
      loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: restored, SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_DEVICE: "cpu" }),
      { logger: quiet },
    );
    const g = await fetch(`${e2.url}/v1/get/ns/before/7`, { headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme" } });
    t.equal(g.status, 200, "an engine serves the restored store");
    await e2.close();
  } finally {
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("svc backup / restore: refusals, nothing overwritten or created by mistake", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-backup-"));
  try {
    const store = await createStore({ path: join(dir, "s") });
    await store.put("ns", "k", new Float32Array(4096).fill(2), { shape: [4096] });
    await store.close();
    let r = await svc(["backup"], {});
    t.equal(r.code, 2, "no --to: usage error");
    t.match(r.err, /--to DIR is required/);
    r = await svc(["backup", "--to", join(dir, "b"), "--store", join(dir, "nothing-here")], {});
    t.equal(r.code, 1);
    t.match(r.err, /is not a store: it holds no data\.mdb\./, "a path that is not a store");
    t.notOk(existsSync(join(dir, "nothing-here")), "and no store is created there");
    t.notOk(existsSync(join(dir, "b")), "nor a backup directory");
    mkdirSync(join(dir, "full"));
    writeFileSync(join(dir, "full", "x"), "keep");
    r = await svc(["backup", "--to", join(dir, "full"), "--store", join(dir, "s")], {});
    t.equal(r.code, 1);
    t.match(r.err, /already exists and is not an empty directory; nothing is overwritten\./);
    r = await svc(["backup", "--to", join(dir, "b")], { SVC_ENGINE_DATA_DIR: join(dir, "s") });
    t.equal(r.code, 0, "the store from SVC_ENGINE_DATA_DIR");
    t.match(r.out, /1 payloads/);
    r = await svc(["restore", "--from", join(dir, "b"), "--to", join(dir, "s")], {});
    t.equal(r.code, 1, "restore over an existing store is refused");
    t.match(r.err, /already exists/);
    r = await svc(["restore", "--from", join(dir, "b")], {});
    t.equal(r.code, 2);
    t.match(r.err, /--to PATH is required/);
    r = await svc(["backup", "--help"], {});
    t.equal(r.code, 0);
    t.match(r.out, /^Usage: svc backup --to DIR/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("svc backup / restore to a disk with no room: one sentence, exit 1, nothing kept", async (t) => {
  const { mountSmallDisk } = await import("../faults/deps.js");
  const disk = await mountSmallDisk(1);
  if ("skip" in disk) {
    t.skip(disk.skip);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), "svc-backup-"));
  try {
    // a store of about 3 MiB of incompressible payloads: more than the 1 MiB disk holds
    const store = await createStore({ path: join(dir, "s") });
    for (let i = 0; i < 6; i++) await store.put("ns", `k${i}`, randomBytes(512 * 1024), { dtype: "uint8", shape: [512 * 1024] });
    await store.close();
    const mib = (statSync(join(dir, "s", "data.mdb")).size / (1024 * 1024)).toFixed(1);
    const to = join(disk.dir, "b");
    let r = await svc(["backup", "--to", to, "--store", join(dir, "s")], {});
    t.equal(r.code, 1, "backup: exit 1");
    t.equal(
      r.err,
      `svc: The backup to ${to} failed: the file system of ${disk.dir} has no space left for a copy of a data.mdb of ${mib} MiB; nothing was kept.\n`,
      "backup: one sentence naming the target and the size",
    );
    t.deepEqual(
      readdirSync(disk.dir).filter((n) => n !== "store"),
      [],
      "backup: nothing left on the disk",
    );
    r = await svc(["backup", "--to", join(dir, "b"), "--store", join(dir, "s")], {});
    t.equal(r.code, 0, "a backup where there is room");
    const restored = join(disk.dir, "r");
    r = await svc(["restore", "--from", join(dir, "b"), "--to", restored], {});
    t.equal(r.code, 1, "restore: exit 1");
    t.match(
      r.err,
      /^svc: The restore to \S+ failed: the file system of \S+ has no space left for a copy of a data\.mdb of [\d.]+ MiB; nothing was kept\.\n$/,
      "restore: the same sentence",
    );
    t.deepEqual(
      readdirSync(disk.dir).filter((n) => n !== "store"),
      [],
      "restore: nothing left on the disk",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await disk.destroy();
  }
});
