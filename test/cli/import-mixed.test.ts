// svc import of a directory mixing smooth and noise-like .npy files: smooth files go as TT cores
// in one put_cores_batch, noise-like float32/float64 files as prediction streams (a put with
// encoding pred each), other dtypes and tiny files by plain put; under a rate limit smaller than
// the import the 429s are waited out without failing a file, and standard error holds only the
// progress lines and the wait sentence. --codec and --max-abs-error reach the local choice.
import test from "tape";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeNpy } from "../../lib/npy.js";
import { createClient } from "../../lib/client.js";
import { svc } from "./helpers.js";
import { startStack, type Stack } from "./stack.js";
import { gaussian } from "../tt/helpers.js";

let stack: Stack;
let dir: string;
test.onFinish(async () => {
  await stack?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const n = 16;
const smooth = (t: number) => {
  const a = new Float32Array(n ** 3);
  for (let x = 0; x < a.length; x++) a[x] = Math.sin((Math.floor(x / n / n) + t) / 5) * Math.cos((Math.floor(x / n) % n) / 7) + Math.exp(-(x % n) / 9);
  return a;
};
function noisy(len: number, seed: number, Arr: Float32ArrayConstructor | Float64ArrayConstructor = Float32Array): Float32Array | Float64Array {
  const g = gaussian(seed);
  const out = new Arr(len);
  for (let i = 0; i < len; i++) out[i] = Math.sin(i / 500) + 0.05 * g();
  return out;
}
const noise: Record<string, Float32Array | Float64Array> = {};

test("a mixed directory under 3 requests per second: TT in one batch, pred streams one each, no file fails", async (t) => {
  stack = await startStack(["ns", "abs"], { SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "3", SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S: "1" });
  dir = await mkdtemp(join(tmpdir(), "svc-import-mixed-"));
  const src = join(dir, "mixed");
  await mkdir(join(src, "noise"), { recursive: true });
  for (let i = 0; i < 12; i++)
    await writeFile(join(src, `s${String(i).padStart(2, "0")}.npy`), writeNpy({ dtype: "float32", shape: [n, n, n], data: smooth(i) }));
  for (let i = 0; i < 6; i++) {
    noise[`noise/n${i}`] = noisy(64 * 256, 10 + i);
    await writeFile(join(src, "noise", `n${i}.npy`), writeNpy({ dtype: "float32", shape: [64, 256], data: noise[`noise/n${i}`]! }));
  }
  noise["noise/d"] = noisy(8192, 30, Float64Array);
  await writeFile(join(src, "noise", "d.npy"), writeNpy({ dtype: "float64", shape: [8192], data: noise["noise/d"] }));
  await writeFile(join(src, "ints.npy"), writeNpy({ dtype: "int16", shape: [4096], data: Int16Array.from({ length: 4096 }, (_, i) => i % 97) }));
  await writeFile(join(src, "tiny.npy"), writeNpy({ dtype: "float32", shape: [16], data: noisy(16, 40) }));
  const env = { SVC_API_KEY: stack.apiKey, SVC_GATE_URL: stack.gateway };
  const r = await svc(["import", "ns", src, "--tolerance", "1e-3", "--json"], env);
  const s = JSON.parse(r.out) as { files: number; imported: number; failed: number; verdicts: Record<string, number> };
  t.deepEqual([r.code, s.files, s.imported, s.failed], [0, 21, 21, 0], "exit 0: 21 files, all imported");
  t.equal(s.verdicts.compressed, 19, `19 compressed (12 TT, 7 pred): ${JSON.stringify(s.verdicts)}`);
  const audit = readFileSync(join(stack.dir, "audit.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { tenant_id: string; path: string; status: number })
    .filter((l) => l.tenant_id === "t1" && l.path.startsWith("/v1/"));
  const ok = audit.filter((l) => l.status < 400).map((l) => `${l.path} ${l.status}`);
  const counts = ok.reduce<Record<string, number>>((m, k) => ({ ...m, [k]: (m[k] ?? 0) + 1 }), {});
  t.deepEqual(
    counts,
    { "/v1/put 201": 9, "/v1/put_cores_batch 201": 1 },
    "one batch for 12 smooth files, 9 puts (7 pred streams, the int16 and the tiny file)",
  );
  const refused = audit.filter((l) => l.status >= 400);
  t.ok(
    refused.every((l) => l.status === 429),
    `the only refusals were the rate limit's (${refused.length} answers 429), each waited out`,
  );
  const lines = r.err.split("\n").filter((l) => l !== "");
  const stray = lines.filter(
    (l) =>
      !/^\[\d+\/21\] \S+ [\d.]+ [kMG]?B ok: /.test(l) &&
      !/^svc: the tenant's rate limit was reached \(3 requests per window\); waiting \d+ s before going on\.$/.test(l),
  );
  t.deepEqual(stray, [], `standard error: ${lines.length} lines, only progress and the wait sentence`);
});

test("the noise-like entries are pred streams served within the tolerance, with the errors measured by the import", async (t) => {
  const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey, maxRetries: 20 });
  try {
    for (const [key, data] of Object.entries(noise)) {
      const info = await c.get("ns", key);
      const got = await c.serve("ns", key);
      let num = 0;
      let den = 0;
      let max = 0;
      for (let i = 0; i < data.length; i++) {
        const e = (got.data[i] as number) - data[i]!;
        num += e * e;
        den += data[i]! ** 2;
        max = Math.max(max, Math.abs(e));
      }
      const rel = Math.sqrt(num / den);
      t.ok(
        info.fingerprint.codec === "pred" && rel <= 1e-3 && max === info.max_abs_error && Math.abs(rel - info.relative_error!) <= 1e-6 * rel,
        `${key}: ${info.dtype} ${info.fingerprint.codec}, served relative error ${rel.toExponential(3)} (recorded ${info.relative_error!.toExponential(3)}), max ${max}`,
      );
    }
    const s0 = await c.get("ns", "s00");
    t.equal(s0.fingerprint.codec, "tt", "a smooth file: TT cores");
  } finally {
    await c.close();
  }
});

test("--max-abs-error and --codec reach the local choice; bad values are usage errors", async (t) => {
  const env = { SVC_API_KEY: stack.apiKey, SVC_GATE_URL: stack.gateway };
  const r = await svc(["import", "abs", join(dir, "mixed", "noise"), "--max-abs-error", "0.02", "--codec", "pred", "--json"], env);
  t.deepEqual([r.code, JSON.parse(r.out).imported], [0, 7], "7 noise files imported");
  const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey, maxRetries: 20 });
  try {
    const info = await c.get("abs", "n0");
    t.ok(info.fingerprint.codec === "pred" && info.max_abs_error! <= 0.02 && info.max_abs_error! > 0.01, `pred within 0.02: ${info.max_abs_error}`);
  } finally {
    await c.close();
  }
  for (const [args, re] of [
    [["--codec", "zfp"], /--codec must be one of auto, tt, pred, lossless/],
    [["--tolerance", "-1"], /--tolerance: tolerance must be at least 0/],
    [["--max-abs-error", "x"], /--max-abs-error must be a number/],
  ] as const) {
    const b = await svc(["import", "abs", join(dir, "mixed", "noise"), ...args], env);
    t.ok(b.code === 2 && re.test(b.err), `${args.join(" ")}: exit ${b.code}, ${b.err.split("\n")[0]}`);
  }
});
