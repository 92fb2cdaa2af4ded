// `svc up --store postgres://...`: the engine keeps its tensors in PostgreSQL (no LMDB files
// under DIR/engine), /health names the backend, the URL's password is never printed; a
// --store that is not a postgres URL is a usage error.
import test from "tape";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "../../lib/client.js";
import { svc } from "./helpers.js";
import { freshStoreUrl, sql } from "../store/pg-db.js";

const root = new URL("../..", import.meta.url).pathname;

test("svc up --store: the engine's store is the PostgreSQL database", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-pg-"));
  const url = await freshStoreUrl();
  // a password in the URL (trust auth ignores it): it must not be printed
  const withPw = url.replace("postgres://postgres@", "postgres://postgres:pw-not-shown@");
  const key = "u".repeat(64);
  const base = { ...process.env };
  delete base.SVC_GATE_ENGINE_SERVICE_KEY;
  const child = spawn(process.execPath, ["--import", "tsx", "bin/svc.ts", "up", "--data", dir, "--port", "0", "--engine-port", "0", "--store", withPw], {
    cwd: root,
    env: { ...base, SVC_GATE_ENGINE_SERVICE_KEY: key, SVC_ENGINE_LOG_LEVEL: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
  child.stdout!.on("data", (d) => (out += d));
  child.stderr!.on("data", (d) => (err += d));
  try {
    const deadline = Date.now() + 120_000;
    while (!/^Ready\./m.test(out)) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`svc up --store did not start: ${out}\n${err}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const gateway = /^gateway: (\S+)$/m.exec(out)![1]!;
    const engine = /^engine:  (\S+)$/m.exec(out)![1]!;
    t.match(out, /^store:   PostgreSQL at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1/m, "the store is named, the password masked");
    t.notOk((out + err).includes("pw-not-shown"), "the password is never printed");
    const health = (await (await fetch(`${engine}/health`)).json()) as { storage: string };
    t.equal(health.storage, "postgres", "/health: storage postgres");
    const created = await svc(["tenant", "create", "pg-tenant"], { SVC_GATE_URL: gateway, SVC_GATE_ENGINE_SERVICE_KEY: key });
    t.equal(created.code, 0, "tenant created");
    const apiKey = /(svc_\S+|[A-Za-z0-9_-]{32,})/.exec(created.out)![1]!;
    const client = createClient({ baseUrl: gateway, apiKey });
    const r = await client.put("default", "k", new Int32Array(1024).fill(7), { shape: [1024] });
    await client.close();
    t.equal(r.version, 1, "a put through the gateway");
    const rows = await sql<{ tenant_id: string; key: string }>(url, "SELECT tenant_id, key FROM heads");
    t.deepEqual(
      rows.map((x) => [x.tenant_id, x.key]),
      [["pg-tenant", "k"]],
      "the head is in PostgreSQL, under the tenant",
    );
    t.notOk(existsSync(join(dir, "engine", "data.mdb")), "no LMDB store under DIR/engine");
    child.kill("SIGINT");
    t.equal(await exited, 0, "SIGINT: exit 0");
  } finally {
    if (child.exitCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up --store: not a postgres URL is a usage error", async (t) => {
  const r = await svc(["up", "--store", "mysql://x"]);
  t.equal(r.code, 2, "exit 2");
  t.match(r.err, /--store must be a postgres:\/\/ or postgresql:\/\/ URL/, r.err.trim());
});
