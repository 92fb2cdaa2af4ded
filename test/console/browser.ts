// Shared set-up of the console's browser checks and bench: a real engine (LMDB) and gateway
// (file audit log) on ephemeral ports, smooth float32 fields put through the gateway, and
// Debian's Chromium driven by playwright-core (no browser download).
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { startRealStack } from "../gateway/helpers.js";

export const CHROMIUM = process.env.SVC_TEST_CHROMIUM ?? "/usr/bin/chromium";
export const SERVICE_KEY = "console-test-service-key-0123456789abcdef0123456789";

/** Flags for a headless Chromium that makes no connection of its own. */
const FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--disable-dev-shm-usage",
];

export function chromiumMissing(): string | null {
  return existsSync(CHROMIUM) ? null : `Chromium is not installed at ${CHROMIUM} (apt-get install chromium).`;
}

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: FLAGS, headless: true });
}

export interface Stack {
  url: string;
  dir: string;
  close(): Promise<void>;
}

export async function startStack(env: Record<string, string> = {}): Promise<Stack> {
  const stack = await startRealStack("svc-console-", {
    serviceKey: SERVICE_KEY,
    gatewayEnv: { SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "100000", SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S: "60", ...env },
  });
  return { url: stack.gateway.url, dir: stack.dir, close: () => stack.close() };
}

export async function adminCall(url: string, path: string, body?: unknown): Promise<any> {
  const r = await fetch(url + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${SERVICE_KEY}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const j = await r.json();
  if (!r.ok) throw new Error(`${path}: ${r.status} ${JSON.stringify(j)}`);
  return j;
}

/** A smooth field: a few separable waves whose phases depend on `seed`. */
export function smoothField(shape: readonly number[], seed: number): Float32Array {
  const [nx, ny, nz] = shape as [number, number, number];
  const out = new Float32Array(nx * ny * nz);
  let i = 0;
  for (let x = 0; x < nx; x++) {
    for (let y = 0; y < ny; y++) {
      for (let z = 0; z < nz; z++) {
        // The phase along x moves with z, so every plane across z looks different.
        out[i++] =
          Math.sin((x / nx) * 3 + (z / nz) * 2.5 + seed) * Math.cos((y / ny) * 2 + seed * 0.7) + 0.5 * Math.sin((z / nz) * 4 + seed * 1.3) + 0.1 * seed;
      }
    }
  }
  return out;
}

/** Puts a float32 tensor through the gateway as an octet-stream put. */
export async function putField(
  url: string,
  key: string,
  ns: string,
  name: string,
  shape: readonly number[],
  data: Float32Array,
  metadata: unknown,
): Promise<any> {
  const q = new URLSearchParams({ namespace: ns, key: name, dtype: "float32", shape: shape.join(",") });
  const r = await fetch(`${url}/v1/put?${q}`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/octet-stream", "x-svc-metadata": JSON.stringify(metadata) },
    body: Buffer.from(data.buffer, data.byteOffset, data.byteLength),
  });
  const j = await r.json();
  if (r.status !== 201) throw new Error(`put ${name}: ${r.status} ${JSON.stringify(j)}`);
  return j;
}

/** The served plane of a view as float32 (what the console fetches), straight from the API. */
export async function servedSlice(url: string, key: string, body: Record<string, unknown>): Promise<Float32Array> {
  const r = await fetch(`${url}/v1/serve`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json", accept: "application/octet-stream" },
    body: JSON.stringify({ ...body, dtype: "float32" }),
  });
  if (r.status !== 200) throw new Error(`serve: ${r.status} ${await r.text()}`);
  const b = Buffer.from(await r.arrayBuffer());
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
}
