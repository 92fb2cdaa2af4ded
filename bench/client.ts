// Client-side figures. Prints the backend/machine line first, then one JSON object per figure:
//   npy        readNpy / writeNpy throughput on a 64 MiB float32 array (MB/s)
//   roundtrip  put + get + serve of the same tensor, embedded (createStore) against hosted
//              (createClient → gateway → engine, all on loopback in this process): p50 ms per
//              call, so the HTTP cost of moving from embedded to hosted is visible
//   import     svc import of N .npy files (int32 64 KiB and float32 256 KiB, mixed) through
//              gateway + engine: files/s and MB/s of input
// Environment: SVC_BENCH_SECONDS per roundtrip variant (default 2), SVC_BENCH_IMPORT_FILES (default 200).
import { mkdtemp, rm, mkdir, writeFile } from "node:fs/promises";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import * as tt from "../lib/tt.js";
import { readNpy, writeNpy } from "../lib/npy.js";
import { createStore } from "../lib/store/index.js";
import { createClient, type SvcClient } from "../lib/client.js";
import { loadEngineConfig } from "../server/engine/config.js";
import { startEngine } from "../server/engine/server.js";
import { loadGatewayConfig } from "../server/gateway/config.js";
import { startGateway } from "../server/gateway/server.js";
import { main } from "../bin/cli/main.js";

const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 2);
const IMPORT_FILES = Number(process.env.SVC_BENCH_IMPORT_FILES ?? 200);

const b = tt.backend();
console.log(
  JSON.stringify({
    bench: "client",
    isa: b.isa,
    threads: b.threads,
    cuda_device: b.cuda_device,
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model ?? "unknown",
    mem_gib: Math.round(totalmem() / 2 ** 30),
    storage: "lmdb",
  }),
);
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
const r1 = (x: number) => Math.round(x * 10) / 10;
const r3 = (x: number) => Math.round(x * 1000) / 1000;
const p50 = (xs: number[]) => [...xs].sort((a, c) => a - c)[Math.floor(xs.length / 2)]!;

function smooth(n: number, p: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.sin((i % 64) / (7 + p)) * Math.cos(Math.floor(i / 64) / (11 + p));
  return out;
}

// ---- npy ----
{
  const n = 16 * 1024 * 1024;
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = i;
  const reps = 5;
  let t0 = performance.now();
  let file: Buffer = Buffer.alloc(0);
  for (let r = 0; r < reps; r++) file = writeNpy({ dtype: "float32", shape: [256, 256, 256], data });
  const w = (performance.now() - t0) / reps;
  t0 = performance.now();
  for (let r = 0; r < reps; r++) readNpy(file);
  const rd = (performance.now() - t0) / reps;
  emit({ figure: "npy", bytes: n * 4, write_mb_s: r1((n * 4) / 1e6 / (w / 1000)), read_mb_s: r1((n * 4) / 1e6 / (rd / 1000)) });
}

const dir = await mkdtemp(join(tmpdir(), "svc-bench-client-"));
const serviceKey = "b".repeat(64);
const engine = await startEngine(
  loadEngineConfig({
    SVC_ENGINE_PORT: "0",
    SVC_ENGINE_DATA_DIR: join(dir, "engine"),
    SVC_ENGINE_API_KEYS: serviceKey,
    SVC_ENGINE_LOG_LEVEL: "silent",
  }),
);
const gateway = await startGateway(
  loadGatewayConfig({
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "0",
    SVC_GATE_ENGINE_URL: engine.url,
    SVC_GATE_ENGINE_SERVICE_KEY: serviceKey,
    SVC_GATE_DATA_DIR: join(dir, "gate"),
    SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "1000000000",
  }),
);
const store = await createStore({ path: join(dir, "embedded") });
let client: SvcClient | null = null;
try {
  const res = await request(`${gateway.url}/gate/onboard/create`, {
    method: "POST",
    headers: { authorization: `Bearer ${serviceKey}`, "content-type": "application/json" },
    body: JSON.stringify({ tenant_id: "bench", namespaces: ["default"] }),
  });
  const { api_key } = (await res.body.json()) as { api_key: string };
  client = createClient({ baseUrl: gateway.url, apiKey: api_key });

  // ---- roundtrip: embedded vs hosted ----
  for (const [label, n] of [
    ["16 KiB", 4096],
    ["1 MiB", 262144],
  ] as const) {
    const data = smooth(n, 1);
    for (const [mode, api] of [
      ["embedded", store],
      ["hosted", client],
    ] as const) {
      const lat = { put: [] as number[], get: [] as number[], serve: [] as number[] };
      const end = performance.now() + SECONDS * 1000;
      let i = 0;
      while (performance.now() < end) {
        const key = `rt/${label.replace(" ", "")}/${i++ % 16}`;
        let t = performance.now();
        await api.put("default", key, data, { shape: [n / 64, 64] });
        lat.put.push(performance.now() - t);
        t = performance.now();
        await api.get("default", key);
        lat.get.push(performance.now() - t);
        t = performance.now();
        await api.serve("default", key);
        lat.serve.push(performance.now() - t);
      }
      emit({
        figure: "roundtrip",
        size: label,
        mode,
        rounds: lat.put.length,
        put_p50_ms: r3(p50(lat.put)),
        get_p50_ms: r3(p50(lat.get)),
        serve_p50_ms: r3(p50(lat.serve)),
      });
    }
  }

  // ---- import ----
  const src = join(dir, "import");
  await mkdir(src);
  let bytes = 0;
  for (let i = 0; i < IMPORT_FILES; i++) {
    const f =
      i % 2 === 0
        ? writeNpy({ dtype: "int32", shape: [128, 128], data: Int32Array.from({ length: 16384 }, (_, j) => (j * (i + 1)) % 97) })
        : writeNpy({ dtype: "float32", shape: [256, 256], data: smooth(65536, i % 7) });
    bytes += f.length;
    await mkdir(join(src, `d${i % 10}`), { recursive: true });
    await writeFile(join(src, `d${i % 10}`, `f${i}.npy`), f);
  }
  let out = "";
  const t0 = performance.now();
  const code = await main(["import", "default", src, "--json"], {
    out: (s) => {
      out += s;
    },
    err: () => {},
    env: { SVC_GATE_URL: gateway.url, SVC_API_KEY: api_key },
    errIsTTY: false,
  });
  const sec = (performance.now() - t0) / 1000;
  const s = JSON.parse(out) as { imported: number; failed: number; bytes_in: number; bytes_stored: number; ratio: number; verdicts: Record<string, number> };
  emit({
    figure: "import",
    exit_code: code,
    files: IMPORT_FILES,
    imported: s.imported,
    failed: s.failed,
    seconds: r3(sec),
    files_per_s: r1(IMPORT_FILES / sec),
    input_mb_s: r1(bytes / 1e6 / sec),
    ratio: r1(s.ratio),
    verdicts: s.verdicts,
  });
} finally {
  await client?.close();
  await store.close();
  await gateway.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
}
