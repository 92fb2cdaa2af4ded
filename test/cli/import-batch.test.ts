// svc import sends smooth float32/float64 files many to a request (put_cores_batch) after
// compressing them here: 40 files under a limit of 5 requests per minute import at once, with
// no wait, each entry served back within the tolerance; a file whose prediction stream is
// smaller than its TT, integer and broken files go one per request and are reported as before;
// --batch 1 puts every file on its own.
import test from "tape";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeNpy } from "../../lib/npy.js";
import { readFileSync } from "node:fs";
import { createClient } from "../../lib/client.js";
import { svc } from "./helpers.js";
import { startStack, type Stack } from "./stack.js";

let stack: Stack;
let dir: string;
test.onFinish(async () => {
  await stack?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const n = 16;
const smooth = (t: number, Arr: Float32ArrayConstructor | Float64ArrayConstructor = Float32Array) => {
  const a = new Arr(n ** 3);
  for (let x = 0; x < a.length; x++) a[x] = Math.sin((Math.floor(x / n / n) + t) / 5) * Math.cos((Math.floor(x / n) % n) / 7) + Math.exp(-(x % n) / 9);
  return a;
};

test("40 smooth files under 5 requests per minute: batched, no wait, served within the tolerance", async (t) => {
  stack = await startStack(["ns", "one"], { SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "5", SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S: "60" });
  dir = await mkdtemp(join(tmpdir(), "svc-import-batch-"));
  const src = join(dir, "runs");
  await mkdir(join(src, "sub"), { recursive: true });
  for (let i = 0; i < 38; i++)
    await writeFile(join(src, `f${String(i).padStart(2, "0")}.npy`), writeNpy({ dtype: "float32", shape: [n, n, n], data: smooth(i) }));
  await writeFile(join(src, "sub", "d.npy"), writeNpy({ dtype: "float64", shape: [n, n, n], data: smooth(3, Float64Array) }));
  await writeFile(join(src, "sub", "ints.npy"), writeNpy({ dtype: "int32", shape: [64], data: Int32Array.from({ length: 64 }, (_, i) => i) }));
  await writeFile(join(src, "broken.npy"), Buffer.from("not numpy"));
  const env = { SVC_API_KEY: stack.apiKey, SVC_GATE_URL: stack.gateway };
  const r = await svc(["import", "ns", src, "--tolerance", "1e-3", "--json"], env);
  const s = JSON.parse(r.out) as {
    files: number;
    imported: number;
    failed: number;
    verdicts: Record<string, number>;
    failures: Array<{ file: string; reason: string }>;
  };
  t.deepEqual([s.files, s.imported, s.failed], [41, 40, 1], `41 files, 40 imported, the broken one failed (exit ${r.code})`);
  t.equal(r.code, 1, "exit 1: one file failed");
  t.match(s.failures[0]?.reason ?? "", /magic bytes/, "the broken file's reason");
  t.equal(s.verdicts.compressed, 39, "39 compressed entries");
  t.doesNotMatch(r.err, /waiting/, "no rate-limit wait: 3 requests for 40 files");
  const audit = readFileSync(join(stack.dir, "audit.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { tenant_id: string; path: string; status: number })
    .filter((l) => l.tenant_id === "t1" && l.path.startsWith("/v1/"));
  t.deepEqual(
    audit.map((l) => `${l.path} ${l.status}`).sort(),
    ["/v1/put 201", "/v1/put 201", "/v1/put_cores_batch 201"],
    "three requests: one batch, one put of the int32 file, one of the float64 file (a pred stream, smaller than its TT)",
  );
});

test("batched entries are served within the tolerance; other dtypes went by put", async (t) => {
  // a tenant of its own, with room to read everything back
  const res = await fetch(`${stack.gateway}/gate/onboard/create`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.serviceKey}`, "content-type": "application/json" },
    body: JSON.stringify({ tenant_id: "t2", namespaces: ["ns"], plan: "enterprise", rate_limit: { requests: 100000, window_s: 60 } }),
  });
  const { api_key } = (await res.json()) as { api_key: string };
  const r = await svc(["import", "ns", join(dir, "runs"), "--concurrency", "3"], { SVC_API_KEY: api_key, SVC_GATE_URL: stack.gateway });
  t.match(r.out, /^Imported 40 of 41 files/, r.out.split("\n")[0]);
  const c = createClient({ baseUrl: stack.gateway, apiKey: api_key });
  try {
    for (const [key, data] of [
      ["f00", smooth(0)],
      ["f37", smooth(37)],
      ["sub/d", smooth(3, Float64Array)],
    ] as const) {
      const got = await c.serve("ns", key);
      let num = 0;
      let den = 0;
      for (let i = 0; i < data.length; i++) {
        num += ((got.data[i] as number) - data[i]!) ** 2;
        den += data[i]! ** 2;
      }
      t.ok(Math.sqrt(num / den) <= 1e-3, `${key}: ${got.dtype}, relative error ${Math.sqrt(num / den).toExponential(2)} within 1e-3`);
    }
    const ints = await c.get("ns", "sub/ints");
    t.deepEqual([ints.dtype, ints.verdict === "compressed"], ["int32", false], `int32 by put: ${ints.verdict}`);
  } finally {
    await c.close();
  }
});

test("--batch 1 puts every file alone; a bad --batch is a usage error", async (t) => {
  const res = await fetch(`${stack.gateway}/gate/onboard/create`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.serviceKey}`, "content-type": "application/json" },
    body: JSON.stringify({ tenant_id: "t3", namespaces: ["one"], plan: "enterprise", rate_limit: { requests: 100000, window_s: 60 } }),
  });
  const { api_key } = (await res.json()) as { api_key: string };
  const env = { SVC_API_KEY: api_key, SVC_GATE_URL: stack.gateway };
  const one = join(dir, "one");
  await mkdir(one);
  for (let i = 0; i < 3; i++) await writeFile(join(one, `g${i}.npy`), writeNpy({ dtype: "float32", shape: [n, n, n], data: smooth(i) }));
  const r = await svc(["import", "one", one, "--batch", "1", "--json"], env);
  t.equal(JSON.parse(r.out).imported, 3, "3 imported");
  const usage = JSON.parse((await svc(["usage", "--mine", "--json"], env)).out) as { usage: { breakdown: Record<string, number> } };
  t.ok(
    usage.usage.breakdown.put! > 0 && !(usage.usage.breakdown.put_cores_batch! > 0),
    `by put, not put_cores_batch: ${JSON.stringify(usage.usage.breakdown)}`,
  );
  for (const bad of ["0", "1001", "x", "-2"]) {
    const b = await svc(["import", "one", one, "--batch", bad], env);
    t.equal(b.code, 2, `--batch ${bad}: usage error (${b.err.split("\n")[0]})`);
  }
});
