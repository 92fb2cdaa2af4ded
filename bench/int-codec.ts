// Benchmark of the store's lossless coding of integer data (native/pred_int.cc: prediction and
// rANS, or byte shuffle + deflate, whichever is smaller) on real data in their own dtypes: the
// camera and moon photographs (uint8), the Colin27 T1 MRI volume (uint8) and the Jacksboro
// fault elevation model (int16), loaded as bench/data/real.ts says. Each row puts the array in an
// in-memory store, serves it back and checks it bit for bit ("exact"; a row that is not exact is
// flagged WRONG and fails the run), and prints the stored ratio beside byte shuffle + deflate
// alone (what the store kept before the integer coder) and zfp 1.0's reversible mode on the
// same values as int32 (python3-zfpy; its ratio is taken against the array's own bytes; skipped
// with a sentence without it), with the integer coder's encode and decode speed (best of 3).
//   node --import tsx bench/int-codec.ts [camera moon mri dem]
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { deflateRawSync } from "node:zlib";
import { intCoded, intPredDecode, intPredEncode, shuffle } from "../lib/store/codec.js";
import { createStore } from "../lib/store/index.js";
import { writeNpy } from "../lib/npy.js";
import { loadReal, python } from "./data/real.js";

const names = process.argv.slice(2).length ? process.argv.slice(2) : ["camera", "moon", "mri", "dem"];
const work = mkdtempSync(join(tmpdir(), "svc-int-codec-"));
const zfpPython = python("zfpy");
const out = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
if (!zfpPython) out({ zfp: "skipped: python3-zfpy is not installed (Debian: apt-get install python3-zfpy); the zfp column is left out." });

async function bestOf3<T>(f: () => Promise<T>): Promise<{ s: number; v: T }> {
  let s = Infinity;
  let v!: T;
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    v = await f();
    s = Math.min(s, (performance.now() - t) / 1000);
  }
  return { s, v };
}

/** zfp's reversible (lossless) mode on the values as int32: its stream's size in bytes. */
function zfpReversible(file: string): number | null {
  if (!zfpPython) return null;
  const code = `import sys, numpy, zfpy\na = numpy.load(sys.argv[1]).astype(numpy.int32)\nc = zfpy.compress_numpy(a)\nassert (zfpy.decompress_numpy(c) == a).all()\nprint(len(c))`;
  const r = spawnSync(zfpPython, ["-c", code, file], { encoding: "utf8" });
  return r.status === 0 ? Number(r.stdout.trim()) : null;
}

const store = await createStore({ path: ":memory:" });
let wrong = 0;
const r2 = (x: number) => Math.round(x * 100) / 100;
try {
  for (const name of names) {
    const a = loadReal(name, work, false);
    if ("skipped" in a) {
      out({ dataset: name, skipped: a.skipped });
      continue;
    }
    if (!intCoded(a.dtype)) {
      out({ dataset: name, skipped: `its dtype is ${a.dtype}, not an integer one` });
      continue;
    }
    const bytes = new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength);
    const put = await store.put("b", name, bytes, { dtype: a.dtype, shape: a.shape });
    const served = await store.serve("b", name);
    const exact = Buffer.from(served.data.buffer, served.data.byteOffset, served.data.byteLength).equals(bytes);
    if (!exact) wrong++;
    const deflate = deflateRawSync(shuffle(bytes, a.data.BYTES_PER_ELEMENT)).byteLength;
    const enc = await bestOf3(() => intPredEncode(bytes, a.dtype, a.shape));
    const dec = await bestOf3(() => intPredDecode(enc.v, a.dtype, a.shape));
    const file = join(work, `${name}-own.npy`);
    writeFileSync(file, writeNpy(a));
    const zfp = zfpReversible(file);
    out({
      dataset: name,
      dtype: a.dtype,
      shape: a.shape,
      exact: exact ? "exact" : "WRONG",
      verdict: put.verdict,
      ratio: r2(put.compression_ratio),
      deflate_ratio: r2(bytes.byteLength / deflate),
      ...(zfp !== null ? { zfp_reversible_ratio: r2(bytes.byteLength / zfp) } : {}),
      intcoder_ratio: r2(bytes.byteLength / enc.v.byteLength),
      enc_mb_s: r2(bytes.byteLength / 1e6 / enc.s),
      dec_mb_s: r2(bytes.byteLength / 1e6 / dec.s),
    });
  }
} finally {
  await store.close();
  rmSync(work, { recursive: true, force: true });
}
const cpu = cpus();
console.log(
  `# int-codec bench: node ${process.version}, ${cpu[0]?.model ?? "cpu"} x ${cpu.length}, load average ${loadavg()
    .map((x) => x.toFixed(2))
    .join(" ")}`,
);
if (wrong) {
  console.log(`# ${wrong} data set(s) did not serve back bit for bit`);
  process.exit(1);
}
