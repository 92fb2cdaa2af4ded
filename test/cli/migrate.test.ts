// `svc migrate`: an LMDB store with several tenants, versions, a deleted key (tombstones), TT,
// lossless and raw payloads and a stored idempotent response copied to PostgreSQL and back,
// compared entry by entry (every head, every version record, every payload's bytes); a copy
// killed with SIGKILL half-way and run again completes, skipping what was copied; bad flags.
import test from "tape";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { main } from "../../bin/cli/main.js";
import type { Io } from "../../bin/cli/common.js";
import type { StorageBackend } from "../../lib/store/backend.js";
import { createStore } from "../../lib/store/index.js";
import { LmdbBackend } from "../../lib/store/lmdb.js";
import { PostgresBackend } from "../../lib/store/postgres.js";
import { unpackRecord } from "../../lib/store/records.js";
import type { HeadRecord, VersionRecord } from "../../lib/store/types.js";
import { freshStoreUrl, sql } from "../store/pg-db.js";

const SVC = fileURLToPath(new URL("../../bin/svc.ts", import.meta.url));
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "svc-migrate-"));
  dirs.push(d);
  return d;
};

function io(): Io & { stdout: string; stderr: string } {
  const o = {
    stdout: "",
    stderr: "",
    env: {},
    errIsTTY: false,
    out: (s: string) => void (o.stdout += s),
    err: (s: string) => void (o.stderr += s),
  };
  return o as Io & { stdout: string; stderr: string };
}

/** A store with what a migration must keep: tenants, versions, tombstones, every codec, metadata. */
async function fill(dir: string, keys: number): Promise<void> {
  const s = await createStore({ path: dir });
  for (const tenant of ["local", "beta"]) {
    const v = s.forTenant(tenant);
    for (let i = 0; i < keys; i++) {
      await v.put(
        "ns",
        `k${i}`,
        Int32Array.from({ length: 2048 }, (_, j) => (j * (i + 1)) % 17),
        { shape: [2048], metadata: { i, tenant } },
      );
      if (i % 3 === 0) await v.put("ns", `k${i}`, Buffer.from(`raw bytes ${i} ${tenant}`), { metadata: { second: true } });
    }
    await v.putCores("tt", "c", [
      { shape: [1, 4, 2], data: new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]) },
      { shape: [2, 4, 1], data: new Float32Array([1, 0, 0, 1, 1, 1, 0, 2]) },
    ]);
    await v.put("ns", "gone", new Float32Array(4096).fill(2), { shape: [64, 64] });
    await v.put("ns", "gone", new Float32Array(4096).fill(3), { shape: [64, 64] });
    await v.delete("ns", "gone");
  }
  await s.idempotent("idem-1", "h".repeat(64)).put("ns", "idem", Buffer.from("once"));
  await s.close();
}

const norm = (v: unknown) =>
  JSON.stringify(unpackRecord(structuredClone(v) as HeadRecord), (_k, x) =>
    x && typeof x === "object" && (x instanceof Uint8Array || (x as { type?: string }).type === "Buffer") ? Buffer.from(x as Uint8Array).toString("hex") : x,
  );

/** Every head, version record and payload of `a` equals `b`'s; returns the counts compared. */
async function compare(t: test.Test, a: StorageBackend, b: StorageBackend, what: string): Promise<void> {
  const all = async (s: StorageBackend, family: string) => {
    const out: string[] = [];
    for await (const e of s.range([family], [family, "\uffff"]))
      out.push(`${JSON.stringify(e.key)} ${family === "i" ? JSON.stringify(e.value) : norm(e.value)}`);
    return out;
  };
  const [ha, hb] = [await all(a, "h"), await all(b, "h")];
  t.deepEqual(hb, ha, `${what}: ${ha.length} heads equal (tombstones included)`);
  const [va, vb] = [await all(a, "v"), await all(b, "v")];
  t.deepEqual(vb, va, `${what}: ${va.length} version records equal (fingerprints, instants, metadata)`);
  t.deepEqual(await all(b, "i"), await all(a, "i"), `${what}: idempotency records equal`);
  let same = 0;
  let n = 0;
  for await (const e of a.range(["v"], ["v", "\uffff"])) {
    const sha = unpackRecord<VersionRecord>(structuredClone(e.value) as VersionRecord)!.fingerprint.sha256;
    const [pa, pb] = [await a.getPayload(e.key[1] as string, sha), await b.getPayload(e.key[1] as string, sha)];
    n++;
    if (pa && pb && Buffer.compare(pa, pb) === 0 && createHash("sha256").update(pb).digest("hex") === sha) same++;
  }
  t.equal(same, n, `${what}: the payload of each of ${n} versions is bit-identical and matches its fingerprint`);
}

test("svc migrate: LMDB to PostgreSQL and back, entry by entry", async (t) => {
  const dir = tmp();
  await fill(dir, 12);
  const url = await freshStoreUrl();
  const o = io();
  t.equal(await main(["migrate", "--from", dir, "--to", url], o), 0, "exit 0");
  t.match(o.stdout, /^Copied 29 of 29 keys \(0 already there\) .* 3[0-9] versions, .* 1 idempotency records\.\n$/, o.stdout.trim());
  t.notOk(o.stdout.includes("options="), "the URL is shown without its options");
  const lmdb = new LmdbBackend(dir);
  const pg = await PostgresBackend.open(url);
  await compare(t, lmdb, pg, "LMDB -> PostgreSQL");
  // the store API on the copy: deleted stays deleted, versions and serve as before
  const s = await createStore({ url });
  t.deepEqual((await s.forTenant("beta").get("ns", "k3")).versions, [1, 2], "versions kept");
  t.equal(
    (await s.list("ns")).keys.some((k) => k.key === "gone"),
    false,
    "a deleted key stays deleted",
  );
  const idem = s.idempotent("idem-1", "h".repeat(64));
  await idem.put("ns", "idem", Buffer.from("once"));
  t.equal(idem.replayed, true, "a stored idempotent response still replays");
  await s.close();
  const again = io();
  t.equal(await main(["migrate", "--from", dir, "--to", url], again), 0, "a second run: exit 0");
  t.match(again.stdout, /^Copied 0 of 29 keys \(29 already there\)/, "a second run copies nothing");
  const back = join(tmp(), "back");
  const o2 = io();
  t.equal(await main(["migrate", "--from", url, "--to", back], o2), 0, "PostgreSQL -> LMDB: exit 0");
  const lmdb2 = new LmdbBackend(back);
  await compare(t, lmdb, lmdb2, "PostgreSQL -> LMDB");
  await lmdb.close();
  await lmdb2.close();
  await pg.close();
});

test("svc migrate: killed half-way, run again, complete", async (t) => {
  const dir = tmp();
  await fill(dir, 150);
  const url = await freshStoreUrl();
  const child = spawn(process.execPath, ["--import", "tsx", SVC, "migrate", "--from", dir, "--to", url], { stdio: ["ignore", "pipe", "pipe"] });
  let lines = 0;
  await new Promise<void>((resolve) => {
    child.stderr.on("data", (d: Buffer) => {
      lines += (d.toString().match(/\n/g) ?? []).length;
      if (lines >= 40 && child.exitCode === null) child.kill("SIGKILL");
    });
    child.on("exit", () => resolve());
  });
  t.equal(child.signalCode, "SIGKILL", `killed after ${lines} progress lines`);
  const pg = await PostgresBackend.open(url);
  const partial = (await pg.stats()).heads;
  t.ok(partial >= 40 && partial < 305, `${partial} of 305 keys copied before the kill`);
  await pg.close();
  const o = io();
  t.equal(await main(["migrate", "--from", dir, "--to", url], o), 0, "the second run: exit 0");
  const m = /^Copied (\d+) of 305 keys \((\d+) already there\)/.exec(o.stdout);
  t.ok(m && Number(m[2]) === partial && Number(m[1]) === 305 - partial, `resumed: ${o.stdout.trim()}`);
  const lmdb = new LmdbBackend(dir);
  const pg2 = await PostgresBackend.open(url);
  await compare(t, lmdb, pg2, "after resuming");
  await lmdb.close();
  await pg2.close();
});

test("svc migrate: usage errors", async (t) => {
  const cases: [string[], RegExp][] = [
    [["migrate"], /--from and --to are both required/],
    [["migrate", "--from", "/nonexistent/x", "--to", "postgres://127.0.0.1/x"], /is not a store directory/],
    [["migrate", "--from", "a", "--to", "a"], /same store/],
  ];
  for (const [argv, re] of cases) {
    const o = io();
    t.equal(await main(argv, o), 2, `${argv.join(" ")}: exit 2`);
    t.match(o.stderr, re, o.stderr.trim());
  }
  // a source database with no store in it is refused, and no table is made there
  const empty = await freshStoreUrl();
  const o = io();
  t.equal(await main(["migrate", "--from", empty, "--to", join(tmp(), "copy")], o), 2, "--from a PostgreSQL URL with no store: exit 2");
  t.match(o.stderr, /holds no store \(no svc_schema table where it points\)\./, o.stderr.trim());
  t.deepEqual(await sql(empty, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"), [], "no table was created there");
  const h = io();
  t.equal(await main(["migrate", "--help"], h), 0, "--help");
  t.match(h.stdout, /Usage: svc migrate --from SRC --to DST/, "usage text");
});

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
