// Two engine processes on one PostgreSQL database, with concurrent writers to the same keys
// through both: versions are never equal and never missing; if_version is a compare-and-set
// across engines; a reader never sees half of a put (every version a get names serves the
// bytes its metadata describes); every acknowledged put is readable through the other engine,
// also after the first engine is killed with SIGKILL.
import test from "tape";
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { freshStoreUrl } from "../store/pg-db.js";

const KEY = "svc-service-key-" + "fedcba9876543210".repeat(3);
const SVC = fileURLToPath(new URL("../../bin/svc.ts", import.meta.url));
const children: ChildProcess[] = [];

/** `svc engine` in a process of its own; resolves with its URL once it listens. */
function startEngine(storeUrl: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ["--import", "tsx", SVC, "engine"], {
    env: {
      ...process.env,
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_STORE_URL: storeUrl,
      SVC_ENGINE_API_KEYS: KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
      SVC_ENGINE_DEVICE: "cpu",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    let out = "";
    let err = "";
    child.stdout!.on("data", (d) => {
      out += d;
      const m = /engine: (http:\/\/\S+)/.exec(out);
      if (m) resolve({ url: m[1]!, child });
    });
    child.stderr!.on("data", (d) => (err += d));
    child.on("exit", (code) => reject(new Error(`engine exited ${code}: ${err}`)));
  });
}

async function call(url: string, method: string, path: string, body?: unknown) {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as any };
}

/** The bytes writer w puts as its i-th value: 64 bytes naming both. */
const content = (w: number, i: number) => Buffer.from(Array.from({ length: 64 }, (_, j) => (w * 31 + i * 7 + j) % 256));

test("two engines on one database: concurrent writers, CAS, readers, SIGKILL", async (t) => {
  const storeUrl = await freshStoreUrl();
  const [a, b] = await Promise.all([startEngine(storeUrl), startEngine(storeUrl)]);
  const engines = [a.url, b.url];
  try {
    // 8 writers (4 through each engine), 12 puts each, over 2 keys
    const acked: { key: string; version: number; sha: string; w: number; i: number }[] = [];
    let failures = 0;
    let stop = false;
    const writer = async (w: number) => {
      for (let i = 0; i < 12; i++) {
        const key = `k${(w + i) % 2}`;
        const r = await call(engines[w % 2]!, "POST", "/v1/put", { namespace: "ns", key, data_b64: content(w, i).toString("base64"), metadata: { w, i } });
        if (r.status === 201) acked.push({ key, version: r.json.version, sha: r.json.fingerprint.sha256, w, i });
        else failures++;
      }
    };
    // readers: each version a get names must serve the bytes its metadata describes
    let reads = 0;
    let torn = 0;
    const reader = async (e: string) => {
      while (!stop) {
        for (const key of ["k0", "k1"]) {
          const g = await call(e, "GET", `/v1/get/ns/${key}`);
          if (g.status === 404) continue;
          const s = await call(e, "POST", "/v1/serve", { namespace: "ns", key, version: g.json.version });
          reads++;
          const want = content(g.json.metadata.w, g.json.metadata.i).toString("base64");
          if (s.status !== 200 || s.json.data_b64 !== want) torn++;
        }
      }
    };
    const readers = [reader(a.url), reader(b.url)];
    await Promise.all(Array.from({ length: 8 }, (_, w) => writer(w)));
    stop = true;
    await Promise.all(readers);
    t.equal(failures, 0, "every put answered 201");
    for (const key of ["k0", "k1"]) {
      const vs = acked
        .filter((x) => x.key === key)
        .map((x) => x.version)
        .sort((x, y) => x - y);
      t.deepEqual(
        vs,
        Array.from({ length: vs.length }, (_, i) => i + 1),
        `${key}: versions 1..${vs.length}, none equal, none missing`,
      );
    }
    t.equal(acked.length, 96, "96 acknowledged puts");
    t.ok(reads > 0, `${reads} reads during the writes`);
    t.equal(torn, 0, "no reader saw part of a put");

    // if_version: a compare-and-set across engines, exactly one winner
    const before = (await call(a.url, "GET", "/v1/get/ns/k0")).json.latest_version as number;
    const cas = await Promise.all(
      Array.from({ length: 10 }, (_, j) =>
        call(engines[j % 2]!, "POST", "/v1/put", { namespace: "ns", key: "k0", data_b64: content(99, j).toString("base64"), if_version: before }),
      ),
    );
    t.equal(cas.filter((r) => r.status === 201).length, 1, "one of 10 concurrent if_version puts wins");
    t.equal(cas.filter((r) => r.status === 409 && r.json.code === "version_conflict").length, 9, "the other 9 are version_conflict");
    t.equal((await call(b.url, "GET", "/v1/get/ns/k0")).json.latest_version, before + 1, "exactly one version added");

    // acknowledged means committed: kill engine a, read everything through b
    a.child.kill("SIGKILL");
    await new Promise((r) => a.child.once("exit", r));
    let readable = 0;
    for (const x of acked) {
      const g = await call(b.url, "GET", `/v1/get/ns/${x.key}?version=${x.version}`);
      if (g.status === 200 && g.json.fingerprint.sha256 === x.sha && g.json.metadata.w === x.w && g.json.metadata.i === x.i) readable++;
    }
    t.equal(readable, acked.length, "every acknowledged put reads back through the surviving engine, with its version and fingerprint");
  } finally {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGTERM");
    await Promise.all(children.map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once("exit", r)) : Promise.resolve())));
  }
});
