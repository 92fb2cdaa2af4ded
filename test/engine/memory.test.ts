// The engine's memory budget (SVC_ENGINE_MEMORY_BUDGET_BYTES) over real HTTP against `svc
// engine` processes: concurrent large serves and uploads past the budget are answered 503 with
// Retry-After and the JSON error body, the rest succeed byte for byte, and the process's RSS
// grows by about the budget, far less than the same load grows an engine with a budget too
// large to matter. JSON serves past SVC_ENGINE_MAX_JSON_SERVE_BYTES are a 400 asking for
// application/octet-stream.
import test from "tape";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = new URL("../..", import.meta.url).pathname;
const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);
const MiB = 1024 * 1024;
const ENTRY = 24 * MiB;

function clean(): NodeJS.ProcessEnv {
  const e = { ...process.env };
  for (const k of Object.keys(e)) if (k.startsWith("SVC_")) delete e[k];
  return e;
}

async function startEngine(env: Record<string, string>): Promise<{ child: ChildProcess; port: number; stop(): Promise<void> }> {
  const child = spawn(process.execPath, ["--import", "tsx", "bin/svc.ts", "engine"], {
    cwd: root,
    env: { ...clean(), SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "warn", SVC_ENGINE_MAX_UPLOAD_BYTES: String(64 * MiB), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<void>((r) => child.on("exit", () => r()));
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  child.stderr!.on("data", (d) => (out += d));
  const deadline = Date.now() + 120_000;
  while (!/^engine: (\S+)$/m.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`svc engine did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const port = Number(new URL(/^engine: (\S+)$/m.exec(out)![1]!).port);
  return {
    child,
    port,
    stop: async () => {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

const rssOf = (pid: number): number => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** One request on its own connection; an answer that arrives before the body is sent in full is still read. */
function send(port: number, method: string, path: string, headers: Record<string, string>, body?: Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = http.request(
      { host: "127.0.0.1", port, method, path, agent: false, headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", ...headers } },
      (res) => {
        answered = true;
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on("error", reject);
      },
    );
    // writing the rest of a refused body may fail after the answer came: the answer counts
    req.on("error", (e) => (answered ? undefined : reject(e)));
    req.end(body);
  });
}

/** Runs `work` while sampling the process's RSS every 5 ms; returns the peak growth over the RSS before. */
async function peakGrowth<T>(pid: number, work: () => Promise<T>): Promise<{ result: T; growth: number }> {
  const before = rssOf(pid);
  let peak = before;
  const timer = setInterval(() => (peak = Math.max(peak, rssOf(pid))), 5);
  try {
    const result = await work();
    peak = Math.max(peak, rssOf(pid));
    return { result, growth: peak - before };
  } finally {
    clearInterval(timer);
  }
}

const serveMany = (port: number, n: number) =>
  Promise.all(
    Array.from({ length: n }, () =>
      send(
        port,
        "POST",
        "/v1/serve",
        { "content-type": "application/json", accept: "application/octet-stream" },
        Buffer.from(JSON.stringify({ namespace: "default", key: "big" })),
      ),
    ),
  );

test("engine: concurrent large serves and uploads are held within the memory budget", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-memory-"));
  const payload = randomBytes(ENTRY);
  const budget = 160 * MiB;
  const bounded = await startEngine({
    SVC_ENGINE_DATA_DIR: join(dir, "bounded"),
    SVC_ENGINE_MEMORY_BUDGET_BYTES: String(budget),
    SVC_ENGINE_MAX_JSON_SERVE_BYTES: String(MiB),
  });
  const unbounded = await startEngine({ SVC_ENGINE_DATA_DIR: join(dir, "unbounded"), SVC_ENGINE_MEMORY_BUDGET_BYTES: String(64 * 1024 * MiB) });
  try {
    for (const e of [bounded, unbounded]) {
      const put = await send(e.port, "POST", "/v1/put?namespace=default&key=big", { "content-type": "application/octet-stream" }, payload);
      t.equal(put.status, 201, `a ${ENTRY / MiB} MiB entry stored`);
      // one serve first: the store's reader thread for large payloads starts with it, and its
      // start-up memory is not what the budget is about
      const first = await send(
        e.port,
        "POST",
        "/v1/serve",
        { "content-type": "application/json", accept: "application/octet-stream" },
        Buffer.from(JSON.stringify({ namespace: "default", key: "big" })),
      );
      t.equal(first.status, 200, "a first serve");
    }
    // each octet serve of the entry reserves 48 MiB (the answer and a decoded copy): three at once fit in 160 MiB
    const N = 24;
    const b = await peakGrowth(bounded.child.pid!, () => serveMany(bounded.port, N));
    const ok = b.result.filter((r) => r.status === 200);
    const busy = b.result.filter((r) => r.status === 503);
    t.equal(ok.length + busy.length, N, `every serve answered 200 or 503 (${ok.length} and ${busy.length})`);
    t.ok(ok.length >= 1 && busy.length >= 1, "some served, some refused for memory");
    t.ok(
      ok.every((r) => r.body.equals(payload)),
      "every 200 is the entry, byte for byte",
    );
    const j = JSON.parse(busy[0]!.body.toString("utf8"));
    t.deepEqual([j.code, typeof j.detail, typeof j.request_id], ["overloaded", "string", "string"], `503 JSON body: ${j.detail}`);
    t.ok(
      busy.every((r) => Number(r.headers["retry-after"]) >= 1),
      "every 503 has Retry-After",
    );
    const u = await peakGrowth(unbounded.child.pid!, () => serveMany(unbounded.port, N));
    t.ok(
      u.result.every((r) => r.status === 200),
      "with a budget too large to matter, every serve is answered 200",
    );
    t.comment(
      `RSS growth under ${N} concurrent ${ENTRY / MiB} MiB serves: ${(b.growth / MiB).toFixed(0)} MiB with a ${budget / MiB} MiB budget, ${(u.growth / MiB).toFixed(0)} MiB without`,
    );
    t.ok(b.growth < budget + 96 * MiB, `budgeted RSS growth ${(b.growth / MiB).toFixed(0)} MiB stays near the budget`);
    t.ok(b.growth < u.growth / 2, "less than half the growth of the unbounded engine");

    // after the load the budget is whole again: a serve succeeds
    const again = await send(
      bounded.port,
      "POST",
      "/v1/serve",
      { "content-type": "application/json", accept: "application/octet-stream" },
      Buffer.from(JSON.stringify({ namespace: "default", key: "big" })),
    );
    t.equal(again.status, 200, "the reservations were given back");

    // uploads: an octet put reserves 3 bytes per body byte before reading it (24 MiB: 72 MiB), so
    // at most two of six at once; the others are refused from Content-Length, unread
    const puts = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        send(bounded.port, "POST", `/v1/put?namespace=default&key=up${i}`, { "content-type": "application/octet-stream" }, payload),
      ),
    );
    const stored = puts.filter((r) => r.status === 201).length;
    const refused = puts.filter((r) => r.status === 503 && Number(r.headers["retry-after"]) >= 1 && JSON.parse(r.body.toString()).code === "overloaded").length;
    t.ok(stored >= 1 && stored <= 2 && stored + refused === 6, `uploads: ${stored} stored, ${refused} refused with 503 and Retry-After`);

    // one request larger than the whole budget: waiting would not help, so 400
    const huge = await send(bounded.port, "POST", "/v1/put?namespace=default&key=huge", {
      "content-type": "application/octet-stream",
      "content-length": String(60 * MiB),
    });
    t.equal(huge.status, 400, "a body that alone exceeds the budget: 400");
    t.match(JSON.parse(huge.body.toString()).detail, /more than the server's budget/, "the detail says so");

    // JSON serves: past SVC_ENGINE_MAX_JSON_SERVE_BYTES a 400 that asks for octet-stream
    const js = await send(
      bounded.port,
      "POST",
      "/v1/serve",
      { "content-type": "application/json", accept: "application/json" },
      Buffer.from(JSON.stringify({ namespace: "default", key: "big" })),
    );
    t.equal(js.status, 400, "a 24 MiB JSON serve over a 1 MiB limit: 400");
    t.match(JSON.parse(js.body.toString()).detail, /application\/octet-stream/, "the detail asks for application/octet-stream");
    const slice = await send(
      bounded.port,
      "POST",
      "/v1/serve",
      { "content-type": "application/json" },
      Buffer.from(JSON.stringify({ namespace: "default", key: "big", slice: [[0, 4096]] })),
    );
    t.equal(slice.status, 200, "a slice under the limit is served as JSON");
    t.ok(Buffer.from(JSON.parse(slice.body.toString()).data_b64, "base64").equals(payload.subarray(0, 4096)), "the slice's bytes");
  } finally {
    await bounded.stop();
    await unbounded.stop();
    await rm(dir, { recursive: true, force: true });
  }
});
