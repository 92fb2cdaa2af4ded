// A data directory whose file system turns read-only under a running service, as ext4 does
// itself after a disk error (errors=remount-ro), on an ext4 image of the test's own
// (test/faults/deps.ts): the embedded store refuses writes with a sentence that says so and
// goes on reading; it cannot open there again and says why; `svc up` keeps serving reads, the
// gateway refuses a tenant change with 503, no stack trace reaches the terminal, and a new
// `svc up` on that directory is refused in one sentence; the provenance appliance refuses
// issuance with 503, goes on verifying, and does not start there again. Skipped with a
// sentence where such a file system cannot be mounted.
import test from "tape";
import { join } from "node:path";
import { createClient } from "../../lib/client.js";
import { createStore } from "../../lib/index.js";
import { SvcError } from "../../lib/errors.js";
import { killUp, spawnUp, startUp, type Up } from "../cli/up-process.js";
import { svc } from "../cli/helpers.js";
import { post, sampleArtifact, startApp, type TestApp } from "../provenance/helpers.js";
import { mountExt4 } from "./deps.js";

const READ_ONLY_WRITE = /^The store's file system is read-only: writes are refused until it is writable again, and reads go on\.$/;
const READ_ONLY_OPEN = (path: string) =>
  `The store at ${path} is on a read-only file system, where LMDB cannot keep its files; it opens once the file system is writable again.`;

/** The error a promise rejects with, or null when it resolves. */
const failure = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => null,
    (e: unknown) => e,
  );

test("embedded store on a file system that turns read-only: writes refused with a sentence, reads go on, no reopening there", async (t) => {
  const disk = await mountExt4(128);
  if ("skip" in disk) {
    t.skip(disk.skip);
    return;
  }
  const path = join(disk.dir, "store");
  try {
    const store = await createStore({ path });
    const field = new Float32Array(4096).map((_, i) => Math.sin(i / 50));
    const noise = new Uint8Array(1 << 20).map((_, i) => (i * 2654435761) >>> 24);
    t.equal((await store.put("ns", "field", field, { shape: [4096] })).version, 1, "a put before");
    t.equal((await store.put("ns", "raw", noise, { shape: [noise.length], dtype: "uint8" })).version, 1, "a 1 MiB raw put before");
    disk.failToReadOnly();
    for (const [what, op] of [
      ["put", () => store.put("ns", "field", field, { shape: [4096] })],
      ["a 1 MiB put", () => store.put("ns", "raw2", noise, { shape: [noise.length], dtype: "uint8" })],
      ["delete", () => store.delete("ns", "field")],
    ] as const) {
      const e = await failure(op());
      t.ok(e instanceof SvcError, `${what}: refused with a store error`);
      t.equal((e as SvcError).code, "store_unavailable", `${what}: store_unavailable`);
      t.match((e as SvcError).message, READ_ONLY_WRITE, `${what}: the sentence says the file system is read-only`);
      t.equal((e as SvcError & { retryAfterS?: number }).retryAfterS, 30, `${what}: retry after 30 s`);
    }
    const got = await store.get("ns", "field");
    t.equal(got.version, 1, "get still answers, at the version before");
    const served = await store.serve("ns", "raw");
    t.equal(Buffer.compare(Buffer.from(served.data as Uint8Array), Buffer.from(noise)), 0, "serve gives the bytes stored before");
    t.equal((await store.list("ns")).keys.length, 2, "list still answers");
    await store.close();
    for (const p of [path, join(disk.dir, "new"), join(disk.dir, "a", "b")]) {
      const e = await failure(createStore({ path: p }));
      t.ok(e instanceof SvcError && e.code === "store_unavailable", `${p}: opening is refused as store_unavailable`);
      t.equal((e as Error).message, READ_ONLY_OPEN(p), `${p}: in one sentence naming the store`);
    }
  } finally {
    await disk.destroy();
  }
});

test("svc up on a data directory that turns read-only: reads served, writes and tenant changes 503, no stack trace; a new svc up there is refused", async (t) => {
  const disk = await mountExt4(128);
  if ("skip" in disk) {
    t.skip(disk.skip);
    return;
  }
  const data = join(disk.dir, "d");
  let up: Up | null = null;
  try {
    up = await startUp(["--data", data]);
    const created = await svc(["tenant", "create", "acme", "--data", data], { SVC_GATE_URL: up.gateway });
    t.equal(created.code, 0, "a tenant created");
    const apiKey = /^SVC_API_KEY=(\S+)$/m.exec(created.out)![1]!;
    const client = createClient({ baseUrl: up.gateway, apiKey, maxRetries: 0 });
    const values = new Float32Array(2048).map((_, i) => Math.cos(i / 30));
    t.equal((await client.put("default", "a", values, { shape: [2048] })).version, 1, "a put before");
    disk.failToReadOnly();
    const e = await failure(client.put("default", "b", values, { shape: [2048] }));
    t.equal((e as SvcError & { status?: number }).status, 503, "a put: 503");
    t.equal((e as SvcError).code, "store_unavailable", "store_unavailable");
    t.match((e as SvcError).message, READ_ONLY_WRITE, "the sentence says the file system is read-only");
    const got = await client.get("default", "a");
    t.equal(got.version, 1, "a get is served");
    const served = await client.serve("default", "a");
    t.equal(served.data.byteLength, values.byteLength, "a serve is served");
    await client.close();
    const onboard = await fetch(`${up.gateway}/gate/onboard/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${up.key}`, "content-type": "application/json" },
      body: JSON.stringify({ tenant_id: "beta" }),
    });
    const body = (await onboard.json()) as { code: string; detail: string };
    t.equal(onboard.status, 503, "a tenant change: 503, not 500");
    t.equal(body.code, "state_unavailable", "state_unavailable");
    t.equal(
      body.detail,
      "The gateway's data directory is on a read-only file system, so the change was not made; retry once it is writable again.",
      "in one sentence",
    );
    t.equal(onboard.headers.get("retry-after"), "30", "Retry-After: 30");
    t.match(up.err, /"msg":"internal error in the audit log".*"code":"EROFS"/, "the audit log's failure is logged with its code");
    const later = await fetch(`${up.gateway}/v1/put?namespace=default&key=c&dtype=float32&shape=4`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "content-type": "application/octet-stream" },
      body: Buffer.alloc(16),
    });
    t.equal(later.status, 503, "a write once the audit log has failed: 503");
    const refusal = (await later.json()) as { code: string; detail: string };
    t.equal(refusal.code, "overloaded", "overloaded (the gateway refuses it)");
    t.match(
      refusal.detail,
      /^The audit log cannot be written \(its file system is read-only\), so requests that change data are refused/,
      "the detail says why",
    );
    const engineHealth = (await (await fetch(`${up.engine}/health`)).json()) as { store_connected: boolean };
    t.equal(engineHealth.store_connected, true, "the engine's /health: store_connected true (reads work)");
    const gatewayHealth = (await (await fetch(`${up.gateway}/health`)).json()) as { store_connected: boolean };
    t.equal(gatewayHealth.store_connected, false, "the gateway's /health: store_connected false (its directory takes no write)");
    t.doesNotMatch(up.err, /\n\s+at /, "no stack trace on the terminal");
    t.doesNotMatch(up.err, /Rejection/, "no promise warning");
    up.child.kill("SIGINT");
    const code = await up.exited;
    t.ok(code === 0 || code === 1, `svc up stops (exit ${code})`);
    t.doesNotMatch(up.err, /\n\s+at /, "still no stack trace");
    up = null;
    const again = spawnUp(["--data", data]);
    t.equal(await again.exited, 1, "a new svc up there: exit 1");
    t.equal(
      again.err,
      `svc: Read-only file system: ${join(data, "svc-up.pid")} cannot be written; remount it read-write, or use a directory on another file system.\n`,
      "in one sentence naming the file",
    );
    const fresh = spawnUp(["--data", join(disk.dir, "other")]);
    t.equal(await fresh.exited, 2, "svc up with a new --data there: exit 2");
    t.match(fresh.err, /^svc: --data \S+ cannot be created: its file system is read-only\.\n/, "in one sentence");
  } finally {
    await killUp(up);
    await disk.destroy();
  }
});

test("the provenance appliance whose home turns read-only: issuance 503 with a sentence, verification goes on; a restart there exits 1 in one sentence", async (t) => {
  const disk = await mountExt4(64);
  if ("skip" in disk) {
    t.skip(disk.skip);
    return;
  }
  const dir = join(disk.dir, "prov");
  let app: TestApp | null = null;
  try {
    app = await startApp(dir);
    const issue = (claims: Record<string, unknown>) => post(`${app!.url}/v1/provenance/exact`, { artifact: sampleArtifact, claims }, app!.adminKey);
    const first = await issue({ i: 0 });
    t.equal(first.status, 201, "issued before");
    disk.failToReadOnly();
    const refused = await issue({ i: 1 });
    t.equal(refused.status, 503, "issuance: 503");
    t.equal(refused.json.code, "store_unavailable", "store_unavailable");
    t.equal(refused.json.detail, "The receipt chain's file system is read-only, so no receipt was issued; retry once it is writable again.", "one sentence");
    t.equal(refused.headers.get("retry-after"), "30", "Retry-After: 30");
    const verify = await post(`${app.url}/v1/provenance/verify`, { receipt: first.json });
    t.equal(verify.status, 200, "verification goes on");
    t.equal(verify.json.valid, true, "the receipt issued before verifies");
    await app.close();
    app = null;
    const { spawn } = await import("node:child_process");
    const child = spawn(process.execPath, ["--import", "tsx", "bin/svc-provenance.ts", "serve"], {
      cwd: new URL("../..", import.meta.url).pathname,
      env: { ...process.env, SVC_PROVENANCE_HOME: join(dir, "home"), SVC_PROVENANCE_CONFIG: join(dir, "etc", "service.env"), SVC_PROVENANCE_PORT: "0" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let err = "";
    child.stderr!.on("data", (d) => (err += d));
    const code = await new Promise<number | null>((r) => child.on("exit", r));
    t.equal(code, 1, "a restart on the read-only home: exit 1");
    t.match(err, /^\/\S+ is on a file system that is read-only; remount it read-write and run the command again\.\n$/, "in one sentence naming the path");
  } finally {
    await app?.close();
    await disk.destroy();
  }
});
