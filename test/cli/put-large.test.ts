// svc put of a noise-like float32 .npy file of 66 MiB through a gateway whose upload limit is
// 32 MiB: the CLI compresses it here (createClient's path), sends the prediction stream, prints
// the verdict, codec and measured errors, and the entry serves back within the tolerance.
import test from "tape";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeNpy, readNpy } from "../../lib/npy.js";
import { readFileSync } from "node:fs";
import { svc } from "./helpers.js";
import { startStack, type Stack } from "./stack.js";
import { gaussian } from "../tt/helpers.js";

let stack: Stack;
let dir: string;
test.onFinish(async () => {
  await stack?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

test("svc put of 66 MiB of noise-like float32 past a 32 MiB limit: a pred stream, served within the tolerance", async (t) => {
  stack = await startStack(["ns"], { SVC_ENGINE_MAX_UPLOAD_BYTES: String(32 * 1024 * 1024) });
  dir = await mkdtemp(join(tmpdir(), "svc-put-large-"));
  const shape = [264, 256, 256];
  const g = gaussian(3);
  const data = new Float32Array(264 * 256 * 256);
  for (let i = 0; i < data.length; i++) data[i] = Math.cos(i / 3000) + 0.05 * g();
  const file = join(dir, "noise.npy");
  await writeFile(file, writeNpy({ dtype: "float32", shape, data }));
  const env = { SVC_API_KEY: stack.apiKey, SVC_GATE_URL: stack.gateway };
  const r = await svc(["put", "ns", "noise", file, "--tolerance", "1e-3"], env);
  t.equal(r.code, 0, `exit 0 ${r.err}`);
  t.match(r.out, /^ns\/noise version 1: compressed \(pred\), 69\.2 MB -> [\d.]+ MB /, r.out.trim());
  const out = join(dir, "back.npy");
  const s = await svc(["serve", "ns", "noise", "-o", out], env);
  t.equal(s.code, 0, `served to a file ${s.err}`);
  const back = readNpy(readFileSync(out));
  const got = new Float32Array(back.data.buffer, back.data.byteOffset, data.length);
  let num = 0;
  let den = 0;
  for (let i = 0; i < data.length; i++) {
    num += (got[i]! - data[i]!) ** 2;
    den += data[i]! ** 2;
  }
  const rel = Math.sqrt(num / den);
  t.ok(rel <= 1e-3, `served relative error ${rel.toExponential(3)} within 1e-3`);
  const printed = Number(/relative error ([\d.e+-]+)/.exec(r.out)?.[1] ?? NaN);
  t.ok(Math.abs(printed - rel) <= 0.01 * rel, `the printed relative error (${printed}) is the served one`);
});
