// How long one large request holds the engine's event loop (the time every other tenant's
// request waits behind it), per kind of request: JSON and octet-stream uploads of raw bytes, an
// octet-stream upload of a float32 field (TT compression), JSON and octet-stream serves. The
// engine's app runs in this process over a real store (LMDB, or PostgreSQL), watched by a 1 ms
// timer: the figure is the longest gap between its ticks while the one request ran. The client
// is a child process (its own work never holds this loop) that sends one request at a time
// when told to. Every answer is checked: uploads took every byte, serves return the stored
// bytes (raw) or the field within its tolerance.
//   npm run bench -- event-loop            (10 and 75 MiB)
//   SVC_BENCH_MIB=25 npm run bench -- event-loop
//   SVC_BENCH_STORE_URL=postgres://postgres@127.0.0.1:5432/bench npm run bench -- event-loop   (PostgreSQL)
import { fork } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { relErr } from "../test/tt/helpers.js";

const KEY = "svc-bench-service-key-" + "0123456789abcdef".repeat(2);
const MiB = 1024 * 1024;
const H = { authorization: `Bearer ${KEY}`, "x-svc-tenant": "bench" };

type ToClient = { go: number } | { end: true };
type FromClient = { cases: string[] } | { done: number; ms: number; check: string } | { failed: string };

// ---- the client (child process) ----

async function post(url: string, path: string, body: Uint8Array | string, headers: Record<string, string>): Promise<{ status: number; bytes: Buffer }> {
  const res = await fetch(url + path, { method: "POST", headers: { ...H, ...headers }, body });
  return { status: res.status, bytes: Buffer.from(await res.arrayBuffer()) };
}

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const must = (ok: boolean, what: string) => {
  if (!ok) throw new Error(`wrong result: ${what}`);
};

function casesFor(url: string, mib: number): [string, () => Promise<string>][] {
  const n = mib * MiB;
  const raw = randomBytes(n);
  // the JSON put stores other bytes than the octet put: a payload stored already is not written again
  const other = randomBytes(n);
  const field = new Float32Array(n / 4);
  for (let i = 0; i < field.length; i++) field[i] = Math.sin(i / 4099) * Math.cos(i / 257);
  const json = Buffer.from(JSON.stringify({ namespace: "ns", key: `j${mib}`, dtype: "bytes", data_b64: other.toString("base64") }));
  const cases: [string, () => Promise<string>][] = [
    [
      `JSON put, ${mib} MiB raw bytes (${(json.byteLength / MiB).toFixed(0)} MiB body)`,
      async () => {
        const r = await post(url, "/v1/put", json, { "content-type": "application/json" });
        must(r.status === 201 && JSON.parse(r.bytes.toString()).bytes_in === n, "JSON put");
        return "201, all bytes taken";
      },
    ],
    [
      `octet put, ${mib} MiB raw bytes`,
      async () => {
        const r = await post(url, `/v1/put?namespace=ns&key=o${mib}&dtype=bytes`, raw, { "content-type": "application/octet-stream" });
        must(r.status === 201 && JSON.parse(r.bytes.toString()).bytes_in === n, "octet put");
        return "201, all bytes taken";
      },
    ],
    [
      `octet put, ${mib} MiB float32 field (TT, 1e-3)`,
      async () => {
        const r = await post(url, `/v1/put?namespace=ns&key=f${mib}&dtype=float32&shape=${field.length}&tolerance=0.001`, new Uint8Array(field.buffer), {
          "content-type": "application/octet-stream",
        });
        const b = JSON.parse(r.bytes.toString());
        must(r.status === 201 && b.relative_error <= 1e-3, "field put");
        return `201, ${b.verdict}, ratio ${b.compression_ratio.toFixed(1)}`;
      },
    ],
    [
      `octet serve, ${mib} MiB raw bytes`,
      async () => {
        const r = await post(url, "/v1/serve", JSON.stringify({ namespace: "ns", key: `o${mib}` }), {
          "content-type": "application/json",
          accept: "application/octet-stream",
        });
        must(r.status === 200 && sha(r.bytes) === sha(raw), "octet serve");
        return "200, same bytes";
      },
    ],
    [
      `octet serve, ${mib} MiB float32 field`,
      async () => {
        const r = await post(url, "/v1/serve", JSON.stringify({ namespace: "ns", key: `f${mib}` }), {
          "content-type": "application/json",
          accept: "application/octet-stream",
        });
        const back = new Float32Array(new Uint8Array(r.bytes).buffer);
        const e = relErr(field, back);
        must(r.status === 200 && back.length === field.length && e <= 1e-3, "field serve");
        return `200, error ${e.toExponential(2)}`;
      },
    ],
  ];
  if (n <= 12 * MiB) {
    cases.push([
      `JSON serve, ${mib} MiB raw bytes`,
      async () => {
        const r = await post(url, "/v1/serve", JSON.stringify({ namespace: "ns", key: `o${mib}` }), { "content-type": "application/json" });
        must(r.status === 200 && sha(Buffer.from(JSON.parse(r.bytes.toString()).data_b64, "base64")) === sha(raw), "JSON serve");
        return "200, same bytes";
      },
    ]);
  }
  return cases;
}

async function client(url: string, sizes: number[]): Promise<void> {
  const cases = sizes.flatMap((mib) => casesFor(url, mib));
  cases.push([
    "(idle, 0.5 s)",
    async () => {
      await new Promise((r) => setTimeout(r, 500));
      return "-";
    },
  ]);
  const send = (m: FromClient) => process.send!(m);
  process.on("message", (m: ToClient) => {
    if ("end" in m) process.exit(0);
    const t0 = performance.now();
    cases[m.go]![1]().then(
      (check) => send({ done: m.go, ms: performance.now() - t0, check }),
      (e: Error) => send({ failed: e.message }),
    );
  });
  send({ cases: cases.map((c) => c[0]) });
}

// ---- the engine and the watch on its event loop (this process) ----

async function main(): Promise<void> {
  const { createStore } = await import("../lib/store/index.js");
  const { createApp } = await import("../server/engine/app.js");
  const { loadEngineConfig } = await import("../server/engine/config.js");
  const { closeOffload, warmOffload } = await import("../server/http/offload.js");
  const sizes = (process.env.SVC_BENCH_MIB ?? "10,75").split(",").map(Number);
  const storeUrl = process.env.SVC_BENCH_STORE_URL;
  const dir = await mkdtemp(join(tmpdir(), "svc-bench-loop-"));
  const store = await createStore(storeUrl ? { url: storeUrl } : { path: dir });
  const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent", SVC_ENGINE_DEVICE: "cpu" });
  const server = http.createServer(createApp({ store, config }));
  server.requestTimeout = 0;
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  warmOffload();
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  let last = performance.now();
  let longest = 0;
  const tick = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);

  const rows: string[][] = [];
  const child = fork(fileURLToPath(import.meta.url), ["client", url, sizes.join(",")], { execArgv: ["--import", "tsx"] });
  let names: string[] = [];
  const next = async (i: number) => {
    if (i >= names.length) return child.send({ end: true } satisfies ToClient);
    await new Promise((r) => setTimeout(r, 300)); // a quiet loop before each request
    last = performance.now();
    longest = 0;
    child.send({ go: i } satisfies ToClient);
  };
  try {
    await new Promise<void>((resolve, reject) => {
      child.on("message", (m: FromClient) => {
        if ("cases" in m) {
          names = m.cases;
          void next(0);
        } else if ("done" in m) {
          const now = performance.now();
          longest = Math.max(longest, now - last);
          rows.push([names[m.done]!, longest.toFixed(0), m.ms.toFixed(0), m.check]);
          void next(m.done + 1);
        } else reject(new Error(m.failed));
      });
      child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`the client exited with ${code}`))));
    });
    const head = ["request", "longest loop wait ms", "request ms", "check"];
    const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    const line = (r: string[]) => r.map((c, i) => (i === 0 || i === 3 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join("  ");
    console.log(`bench/event-loop: one request at a time to the engine (${storeUrl ? "PostgreSQL" : "LMDB"}), node ${process.version}`);
    console.log(line(head));
    for (const r of rows) console.log(line(r));
  } finally {
    clearInterval(tick);
    child.kill();
    await new Promise<void>((r) => server.close(() => r()));
    await store.close();
    await closeOffload();
    await rm(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === "client") await client(process.argv[3]!, process.argv[4]!.split(",").map(Number));
else await main();
