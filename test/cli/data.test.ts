// Data commands against a real gateway and engine: raw-bytes puts described by flags,
// --if-version conflicts, get --version, ls across pages, serve of float, bfloat16 and
// bytes entries to .npy, rm, and the one-sentence failures.
import test from "tape";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { startStack } from "./stack.js";
import { readNpy, npyTypedArray } from "../../lib/npy.js";
import { createClient } from "../../lib/client.js";

test("svc put/get/ls/rm/serve: raw files, versions, pages, conversions", async (t) => {
  const stack = await startStack();
  const env = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey };
  try {
    const raw = join(stack.dir, "raw.bin");
    const f32 = Float32Array.from({ length: 4096 }, (_, i) => Math.sin(i / 40) * Math.cos(i / 300));
    await writeFile(raw, Buffer.from(f32.buffer));
    const put = await svc(["put", "ns", "raw/f", raw, "--dtype", "float32", "--shape", "64,64", "--tolerance", "1e-5", "--json"], env);
    t.equal(put.code, 0, `raw float32 put exits 0 ${put.err}`);
    const p = JSON.parse(put.out);
    t.deepEqual([p.dtype, p.shape, p.version], ["float32", [64, 64], 1], "dtype and shape from the flags");
    t.ok(p.relative_error <= 1e-5, `--tolerance honoured (${p.relative_error})`);

    const g = Float32Array.from({ length: 4096 }, (_, i) => (Math.sin(i * 12.9898) * 43758.5453) % 1);
    await writeFile(join(stack.dir, "noisy.bin"), Buffer.from(g.buffer));
    const pp = await svc(
      ["put", "ns", "raw/noisy", join(stack.dir, "noisy.bin"), "--dtype", "float32", "--shape", "4096", "--codec", "pred", "--max-abs-error", "0.001"],
      env,
    );
    t.match(
      pp.out,
      /^ns\/raw\/noisy version 1: compressed \(pred\), \S+ \S+ -> .* max abs error (\d\.\d\de-[34]|0)\), /,
      `--codec pred --max-abs-error: ${pp.out.trim()}`,
    );
    const badCodec = await svc(["put", "ns", "raw/noisy", join(stack.dir, "noisy.bin"), "--dtype", "float32", "--shape", "4096", "--codec", "zfp"], env);
    t.ok(badCodec.code === 2 && /codec must be one of auto, tt, pred, lossless/.test(badCodec.err), `--codec zfp, a usage error: ${badCodec.err.trim()}`);

    const blob = join(stack.dir, "notes.txt");
    await writeFile(blob, "plain text is stored as bytes");
    const b = await svc(["put", "ns", "notes", blob, "--bytes"], env);
    t.match(b.out, /^ns\/notes version 1: passthrough \(raw\), 29 B -> 29 B/, `--bytes: ${b.out.trim()}`);

    const conflict = await svc(["put", "ns", "notes", blob, "--bytes", "--if-version", "0"], env);
    t.equal(conflict.code, 1, "--if-version 0 on an existing key exits 1");
    t.match(conflict.err, /^svc: .*version.*\(request [0-9a-f-]{36}\)\n$/i, `conflict sentence: ${conflict.err.trim()}`);
    t.equal((await svc(["put", "ns", "notes", blob, "--bytes", "--if-version", "1", "--meta", '{"lang":"en"}'], env)).code, 0, "--if-version 1 succeeds");
    const v1 = JSON.parse((await svc(["get", "ns", "notes", "--version", "1"], env)).out);
    const v2 = JSON.parse((await svc(["get", "ns", "notes"], env)).out);
    t.deepEqual([v1.version, v1.metadata, v2.version, v2.metadata, v2.versions], [1, {}, 2, { lang: "en" }, [1, 2]], "get --version reads the older version");

    // bfloat16 from raw bits: served as float32
    const bf = Uint16Array.from(f32, (x) => new Uint32Array(new Float32Array([x]).buffer)[0]! >>> 16);
    await writeFile(join(stack.dir, "bf.bin"), Buffer.from(bf.buffer));
    t.equal((await svc(["put", "ns", "raw/bf", join(stack.dir, "bf.bin"), "--dtype", "bfloat16", "--shape", "4096"], env)).code, 0, "bfloat16 put");
    const outBf = join(stack.dir, "bf.npy");
    const sbf = await svc(["serve", "ns", "raw/bf", "-o", outBf, "--slice", "10:20"], env);
    t.equal(sbf.code, 0, `serve bfloat16 exits 0 ${sbf.err}`);
    const abf = readNpy(await readFile(outBf));
    t.deepEqual([abf.dtype, abf.shape], ["float32", [10]], "bfloat16 written as float32");
    const vals = Array.from(npyTypedArray(abf.dtype, abf.data) as Float32Array);
    t.ok(
      vals.every((v, i) => Math.abs(v - f32[10 + i]!) <= 0.01 * Math.max(1e-3, Math.abs(f32[10 + i]!)) + 0.01),
      "values close to the originals",
    );

    const out64 = join(stack.dir, "f64.npy");
    t.equal((await svc(["serve", "ns", "raw/f", "-o", out64, "--dtype", "float64", "--slice", ":2,:"], env)).code, 0, "serve --dtype float64");
    const a64 = readNpy(await readFile(out64));
    t.deepEqual([a64.dtype, a64.shape], ["float64", [2, 64]], "float64 output, sliced");
    const outBytes = join(stack.dir, "notes.npy");
    t.equal((await svc(["serve", "ns", "notes", "-o", outBytes, "--version", "1"], env)).code, 0, "serve a bytes entry");
    const ab = readNpy(await readFile(outBytes));
    t.deepEqual([ab.dtype, ab.shape, ab.data.toString()], ["uint8", [29], "plain text is stored as bytes"], "bytes written as a uint8 vector");
    const badSlice = await svc(["serve", "ns", "raw/f", "-o", join(stack.dir, "x.npy"), "--slice", "0:2,0:2,0:2"], env);
    t.equal(badSlice.code, 2, "a slice with too many dimensions is a usage error");

    // more than one page
    const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey });
    const item = (k: string) => ({ key: k, cores: [{ shape: [1, 2, 1] as [number, number, number], data: new Float32Array([1, 2]) }] });
    await c.putCoresBatch(
      "ns",
      Array.from({ length: 1000 }, (_, i) => item(`page/${String(i).padStart(4, "0")}`)),
    );
    await c.putCoresBatch(
      "ns",
      Array.from({ length: 3 }, (_, i) => item(`page/${1000 + i}`)),
    );
    await c.close();
    const ls = await svc(["ls", "ns", "--prefix", "page/"], env);
    const lines = ls.out.trim().split("\n");
    t.equal(lines.length, 1003, "ls follows next_offset across pages");
    t.equal(lines[1002]!.split("\t")[0], "page/1002", "last key of the second page");
    const noisy = (await svc(["ls", "ns", "--prefix", "raw/noisy"], env)).out.trim().split("\t");
    t.deepEqual([noisy[0], noisy[4], noisy[5]], ["raw/noisy", "compressed", "pred"], `ls names the codec: ${noisy.join(" ")}`);
    t.ok(Number(noisy[7]) <= 1e-3 && Number(noisy[6]) > 0, `and the measured errors (relative ${noisy[6]}, max abs ${noisy[7]})`);

    const rm = await svc(["rm", "ns", "notes"], env);
    t.equal(rm.code, 0, "rm exits 0");
    const again = await svc(["rm", "ns", "notes"], env);
    t.equal(again.code, 1, "rm of a deleted key exits 1");
    t.match(again.err, /^svc: .*notes.*\n$/, `one sentence: ${again.err.trim()}`);
    const get = await svc(["get", "ns", "notes"], env);
    t.equal(get.code, 1, "get of a deleted key exits 1");
  } finally {
    await stack.close();
  }
});
