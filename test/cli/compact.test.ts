// `svc compact`: on an LMDB store directory served by a running engine (the compaction in a
// process of its own, the engine answering throughout) and on a PostgreSQL store, the versions
// under expired tombstones, the keys deleted for good, the unused payloads and the old
// idempotency records are purged, and everything else reads back; usage errors are one
// sentence with exit 2, and a path with no store in it is refused, not created.
import test from "tape";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { main } from "../../bin/cli/main.js";
import type { Io } from "../../bin/cli/common.js";
import { FakeClock } from "../../lib/clock.js";
import { createStore } from "../../lib/store/index.js";
import { jsonLogger } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { freshStoreUrl, sql } from "../store/pg-db.js";
import { fillCompactCase, payload } from "../store/compact-case.js";

const SVC = fileURLToPath(new URL("../../bin/svc.ts", import.meta.url));
const KEY = "k".repeat(40);
// long enough ago that the deletes' 30 days and the idempotency records' 24 hours have passed
const T0 = Date.parse("2020-01-01T00:00:00Z");
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "svc-compact-"));
  dirs.push(d);
  return d;
};

function io(env: Record<string, string> = {}): Io & { stdout: string; stderr: string } {
  const o = { stdout: "", stderr: "", env, errIsTTY: false, out: (s: string) => void (o.stdout += s), err: (s: string) => void (o.stderr += s) };
  return o as Io & { stdout: string; stderr: string };
}

/** The compact case (compact-case.ts) in tenant t1 of the store `open` makes. */
async function fill(open: () => ReturnType<typeof createStore>): Promise<void> {
  const s = await open();
  await fillCompactCase(s.forTenant("t1"));
  await s.close();
}

/** `svc compact ARGS` in a process of its own. */
function svc(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ["--import", "tsx", SVC, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    c.stdout.on("data", (d: Buffer) => (out += d.toString()));
    c.stderr.on("data", (d: Buffer) => (err += d.toString()));
    c.once("error", reject);
    c.once("exit", (code) => resolve({ code, out, err }));
  });
}

test("svc compact: an LMDB store purged in a process of its own while an engine serves it", async (t) => {
  const dir = join(tmp(), "engine");
  await fill(() => createStore({ path: dir, clock: new FakeClock(T0) }));
  const e = await startEngine(loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: dir, SVC_ENGINE_API_KEYS: KEY }), { logger: jsonLogger("silent") });
  const headers = { authorization: `Bearer ${KEY}`, "x-svc-tenant": "t1" };
  try {
    // reads of the engine go on while the compaction runs
    let reading = true;
    const statuses = new Set<number>();
    const reads = (async () => {
      while (reading) statuses.add((await fetch(`${e.url}/v1/get/ns/keep`, { headers })).status);
    })();
    const r = await svc(["compact", "--store", dir]);
    reading = false;
    await reads;
    t.equal(r.code, 0, `exit 0 ${r.err.trim()}`);
    t.match(r.out, new RegExp(`^Compacted ${dir} in \\d+\\.\\d\\d s: 2 versions, 1 key and 1 payload purged\\.\\n$`), r.out.trim());
    t.deepEqual([...statuses], [200], "every read of the engine meanwhile answered 200");
    t.equal((await fetch(`${e.url}/v1/get/ns/gone`, { headers })).status, 404, "the deleted key is gone");
    const twice = (await (await fetch(`${e.url}/v1/get/ns/twice`, { headers })).json()) as { versions: number[] };
    t.deepEqual(twice.versions, [2], "twice keeps its live version");
    for (const [k, b] of [
      ["keep", "B"],
      ["twice", "C"],
      ["idem", "D"],
    ] as const) {
      const res = await fetch(`${e.url}/v1/serve`, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json", accept: "application/octet-stream" },
        body: JSON.stringify({ namespace: "ns", key: k }),
      });
      t.ok(res.status === 200 && Buffer.from(await res.arrayBuffer()).equals(payload(b)), `${k} serves its bytes through the engine`);
    }
    const put = await fetch(`${e.url}/v1/put?namespace=ns&key=gone`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/octet-stream" },
      body: payload("A"),
    });
    t.equal(put.status, 201, "the engine writes after the compaction");
    t.equal(((await put.json()) as { version: number }).version, 1, "a key purged for good starts again at version 1");
    const again = await svc(["compact", "--store", dir]);
    t.match(again.out, /: 0 versions, 0 keys and 0 payloads purged\.\n$/, "a second run has nothing to purge");
  } finally {
    await e.close();
  }
});

test("svc compact: a PostgreSQL store, the URL from SVC_ENGINE_STORE_URL, --json", async (t) => {
  const url = await freshStoreUrl();
  await fill(() => createStore({ url, clock: new FakeClock(T0) }));
  const o = io({ SVC_ENGINE_STORE_URL: url });
  t.equal(await main(["compact", "--json"], o), 0, `exit 0 ${o.stderr.trim()}`);
  const r = JSON.parse(o.stdout) as Record<string, number>;
  t.deepEqual({ ...r, seconds: typeof r.seconds }, { versions_purged: 2, keys_purged: 1, payloads_purged: 1, seconds: "number" }, "the JSON summary");
  const s = await createStore({ url, tenant: "t1" });
  try {
    t.deepEqual(
      (await s.list("ns")).keys.map((i) => i.key),
      ["idem", "keep", "twice"],
      "the three live keys are left",
    );
    t.ok(Buffer.from((await s.serve("ns", "keep")).data as Uint8Array).equals(payload("B")), "keep reads back");
    const idem = s.idempotent("once", "hash");
    await idem.put("ns", "idem", payload("E"));
    t.equal(idem.replayed, false, "the old idempotency record is gone: the same key writes again");
  } finally {
    await s.close();
  }
});

test("svc compact: usage errors, and no store made where there is none", async (t) => {
  const file = join(tmp(), "a-file");
  writeFileSync(file, "x");
  const missing = join(tmp(), "nothing-here");
  const cases: [string[], Record<string, string>, RegExp][] = [
    [["compact", "--store", missing], {}, /^svc: .*nothing-here is not a store directory \(no data\.mdb in it\)\.\nRun 'svc compact --help' for usage\.\n$/],
    [["compact"], { SVC_ENGINE_DATA_DIR: missing }, /nothing-here is not a store directory/],
    [["compact", "--store", file], {}, /a-file is not a store directory/],
    [["compact", "extra"], {}, /Unexpected argument 'extra'/],
    [["compact", "--store"], {}, /--store/],
  ];
  for (const [argv, env, re] of cases) {
    const o = io(env);
    t.equal(await main(argv, o), 2, `${argv.join(" ")}: exit 2`);
    t.match(o.stderr, re, o.stderr.trim());
  }
  t.notOk(existsSync(missing), "the missing directory was not created");
  // a database (schema) with no store in it is refused, and no table is made there
  const empty = await freshStoreUrl();
  const o = io();
  t.equal(await main(["compact", "--store", empty], o), 2, "a PostgreSQL URL with no store: exit 2");
  t.match(o.stderr, /^svc: postgres:\/\/127\.0\.0\.1:5432\/\w+ holds no store \(no svc_schema table where it points\)\.\n/, o.stderr.trim());
  t.deepEqual(await sql(empty, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"), [], "no table was created");
  const refused = io();
  t.equal(await main(["compact", "--store", "postgres://postgres@127.0.0.1:1/nothing"], refused), 1, "no PostgreSQL there: exit 1");
  t.match(refused.stderr, /^svc: Cannot connect to PostgreSQL at postgres:\/\/127\.0\.0\.1:1\/nothing: .+\.\n$/, refused.stderr.trim());
  const h = io();
  t.equal(await main(["compact", "--help"], h), 0, "--help");
  t.match(h.stdout, /^Usage: svc compact \[--store PATH\|URL\] \[--json\]/, "usage text");
});

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
