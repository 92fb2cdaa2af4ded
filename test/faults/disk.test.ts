// The engine's LMDB store on a small tmpfs of the test's own (test/faults/deps.ts) that is
// filled and freed: the engine process stays up, a put gets 507 storage_full with Retry-After,
// reads go on, /health says the store is connected (it is: only writes need room), and puts
// succeed again once space is freed, without a restart. Skipped with a sentence where a tmpfs
// cannot be mounted.
import test from "tape";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ENGINE_KEY, mountSmallDisk, startEngineProcess, type SmallDisk } from "./deps.js";

const KEY = ENGINE_KEY;
const startEngine = (where: string) => startEngineProcess({ SVC_ENGINE_DATA_DIR: where });

/** Incompressible bytes (stored as they are), different per seed. */
function noise(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    b[i] = x >>> 24;
  }
  return b;
}

async function put(url: string, key: string, bytes: Buffer) {
  const res = await fetch(`${url}/v1/put?namespace=ns&key=${key}&dtype=bytes`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/octet-stream" },
    body: bytes,
  });
  const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  return { status: res.status, json, retryAfter: res.headers.get("retry-after") };
}

const mounted = await mountSmallDisk(48);
if ("skip" in mounted) {
  test("disk full", (t) => {
    t.comment(`skipped: ${mounted.skip}`);
    t.end();
  });
} else {
  const disk: SmallDisk = mounted;
  test.onFinish(() => void disk.destroy());

  test("a full disk under the LMDB store: 507 storage_full for writes, reads go on, writes resume when space is freed", async (t) => {
    const eng = await startEngine(join(disk.dir, "store"));
    const fill = join(disk.dir, "fill");
    try {
      const kept = noise(200_000, 1);
      t.equal((await put(eng.url, "kept", kept)).status, 201, "a put before the disk fills");
      // everything but a few KiB taken by another file
      let size = 64 * 1024 * 1024;
      for (;;) {
        try {
          writeFileSync(fill, Buffer.alloc(size), { flag: "a" });
        } catch {
          if (size <= 4096) break;
          size = Math.floor(size / 2);
        }
      }
      const statuses: number[] = [];
      let full: Awaited<ReturnType<typeof put>> | null = null;
      for (let i = 0; i < 5 && full === null; i++) {
        const r = await put(eng.url, `new${i}`, noise(2_000_000, 10 + i));
        statuses.push(r.status);
        if (r.status !== 201) full = r;
      }
      t.ok(full !== null, `a put is refused once the disk is full (statuses ${statuses.join(", ")})`);
      t.equal(full?.status, 507, "507");
      t.equal(full?.json.code, "storage_full", "storage_full");
      t.match(full?.retryAfter ?? "", /^\d+$/, "Retry-After in seconds");
      t.doesNotMatch(String(full?.json.detail), /\/tmp|svc-disk|Error:|\bat\b.*:\d+/, "the detail names no path and no stack");
      const g = await fetch(`${eng.url}/v1/get/ns/kept`, { headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme" } });
      t.equal(g.status, 200, "a get of a stored key still works");
      const s = await fetch(`${eng.url}/v1/serve`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/json", accept: "application/octet-stream" },
        body: JSON.stringify({ namespace: "ns", key: "kept" }),
      });
      t.ok(s.status === 200 && Buffer.from(await s.arrayBuffer()).equals(kept), "a serve returns the stored bytes");
      const h = (await (await fetch(`${eng.url}/health`)).json()) as { store_connected: boolean };
      t.equal(h.store_connected, true, "/health: store_connected true (reads need no room)");
      rmSync(fill);
      const again = await put(eng.url, "after", noise(2_000_000, 99));
      t.equal(again.status, 201, "a put succeeds once space is freed, without a restart");
      t.equal(eng.child.exitCode, null, "the engine process stayed up");
    } catch (e) {
      t.comment(eng.stderr().slice(-3000));
      throw e;
    } finally {
      rmSync(fill, { force: true });
      eng.child.kill("SIGKILL");
    }
  });
}
