// svc import through a real gateway and engine: a directory with good .npy files of several
// dtypes, a corrupt one, a truncated one, one whose path is not a valid key and a non-.npy
// file; the good ones are stored bit-exact (or within tolerance), the bad ones are listed
// with reasons, the rest go on, and the exit code is 1. Then a clean directory exits 0.
import test from "tape";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { startStack } from "./stack.js";
import { writeNpy } from "../../lib/npy.js";
import { createClient } from "../../lib/client.js";

test("svc import: a corrupt file does not stop the rest; summary, verdicts, failures with reasons, exit 1", async (t) => {
  const stack = await startStack();
  try {
    const src = join(stack.dir, "src");
    await mkdir(join(src, "runs", "r1"), { recursive: true });
    const field = Float32Array.from({ length: 32 * 32 * 32 }, (_, i) => Math.sin((i % 32) / 5) * Math.cos(Math.floor(i / 1024) / 7));
    const i16 = Int16Array.from({ length: 8192 }, (_, i) => (i % 100) - 50);
    const flags = Uint8Array.from({ length: 6000 }, (_, i) => i % 2);
    await writeFile(join(src, "runs", "r1", "field.npy"), writeNpy({ dtype: "float32", shape: [32, 32, 32], data: field }));
    await writeFile(join(src, "runs", "r1", "counts.NPY"), writeNpy({ dtype: "int16", shape: [64, 128], data: i16 }));
    await writeFile(join(src, "flags.npy"), writeNpy({ dtype: "bool", shape: [6000], data: flags }));
    await writeFile(join(src, "tiny.npy"), writeNpy({ dtype: "float64", shape: [], data: new Float64Array([2.5]) }));
    await writeFile(join(src, "corrupt.npy"), Buffer.from("\x93NUMPY\x01\x00\x10\x00{'descr': '<f4',", "latin1"));
    const trunc = writeNpy({ dtype: "int32", shape: [1000], data: new Int32Array(1000) });
    await writeFile(join(src, "runs", "truncated.npy"), trunc.subarray(0, 2000));
    await writeFile(join(src, "bad name.npy"), writeNpy({ dtype: "uint8", shape: [4], data: new Uint8Array(4) }));
    await writeFile(join(src, "notes.txt"), "not an array");

    const env = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey };
    const r = await svc(["import", "ns", src, "--tolerance", "1e-4"], env);
    t.equal(r.code, 1, "exit 1 because some files failed");
    t.match(r.out, /^Imported 4 of 7 files in \d+\.\d s: [\d.]+ kB in, [\d.]+ k?B stored, ratio \d+\.\d\d\.$/m, `summary line: ${r.out.split("\n")[0]}`);
    t.match(
      r.out,
      /^Verdicts: (compressed 1, lossless 2, passthrough 1|compressed 1, lossless 3|compressed 1, lossless 1, passthrough 2)\.$/m,
      `verdict counts: ${r.out.split("\n")[1]}`,
    );
    t.match(r.out, /^3 failed:$/m, "failure count");
    t.match(r.out, /^ {2}\S*bad name\.npy: the key 'bad name' derived from the path is invalid: key may contain only/m, "invalid key reason");
    t.match(r.out, /^ {2}\S*corrupt\.npy: The \.npy (file is truncated inside its header|header is malformed)/m, "corrupt header reason");
    t.match(
      r.out,
      /^ {2}\S*truncated\.npy: The \.npy file is truncated: its header announces 4000 data bytes but only \d+ follow\.$/m,
      "truncated data reason",
    );
    t.notOk(r.out.includes("notes.txt"), "non-.npy files are ignored");
    const lines = r.err.trim().split("\n");
    t.equal(lines.length, 7, "plain progress: one line per file (stderr is not a TTY)");
    t.ok(
      lines.every((l) => /^\[\d\/7\] \S.* (ok|FAILED): /.test(l)),
      "each line: [n/7] key size ok|FAILED: note",
    );

    const ls = await svc(["ls", "ns"], env);
    t.deepEqual(
      ls.out
        .trim()
        .split("\n")
        .map((l) => l.split("\t")[0]),
      ["flags", "runs/r1/counts", "runs/r1/field", "tiny"],
      "keys from relative paths, extension dropped",
    );
    const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey });
    const counts = await c.serve("ns", "runs/r1/counts");
    t.deepEqual([counts.dtype, counts.shape], ["int16", [64, 128]], "dtype and shape from the .npy header");
    t.ok(Buffer.from(counts.data.buffer, counts.data.byteOffset, counts.data.byteLength).equals(Buffer.from(i16.buffer)), "int16 data bit-exact");
    const f = await c.get("ns", "runs/r1/field");
    t.ok(f.relative_error <= 1e-4, `float field within --tolerance 1e-4 (${f.relative_error})`);
    t.deepEqual((await c.get("ns", "tiny")).shape, [1], "a 0-d array is stored with shape [1]");
    await c.close();
  } finally {
    await stack.close();
  }
});

test("svc import: a clean directory exits 0; --json summary; TTY progress redraws one line", async (t) => {
  const stack = await startStack();
  try {
    const src = join(stack.dir, "clean");
    await mkdir(src);
    for (let i = 0; i < 5; i++)
      await writeFile(join(src, `a${i}.npy`), writeNpy({ dtype: "int32", shape: [2048], data: Int32Array.from({ length: 2048 }, (_, j) => j % (i + 2)) }));
    const env = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey };
    const r = await svc(["import", "ns", src, "--json", "--concurrency", "2"], env, { errIsTTY: true });
    t.equal(r.code, 0, "exit 0");
    const s = JSON.parse(r.out);
    t.deepEqual([s.files, s.imported, s.failed, s.verdicts], [5, 5, 0, { lossless: 5 }], "JSON summary counts");
    t.equal(s.bytes_in, 5 * 2048 * 4, "bytes_in is the logical size");
    t.ok(s.ratio > 1, `ratio ${s.ratio}`);
    t.ok(r.err.startsWith("\r") && r.err.endsWith("\n"), "TTY progress: \\r redraws, newline at the end");
    t.match(r.err, /\r5\/5 files {2}41\.6 kB\/41\.6 kB \(100%\) {2}[\d.]+ MB\/s {2}ETA 0s\x1b\[K\n$/, "final redraw shows 5/5, bytes, rate, ETA");
    t.equal(r.err.split("\n").length, 2, "a single line on the terminal");
    const again = await svc(["import", "ns", src], env);
    t.equal(again.code, 0, "importing again adds versions and exits 0");
    t.equal(JSON.parse((await svc(["get", "ns", "a0"], env)).out).version, 2, "second import made version 2");
  } finally {
    await stack.close();
  }
});

test("svc import: a tenant rate limit smaller than the import is waited out (Retry-After), no file fails", async (t) => {
  const stack = await startStack(["ns"], { SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "4", SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S: "1" });
  try {
    const src = join(stack.dir, "many");
    await mkdir(src);
    for (let i = 0; i < 10; i++) await writeFile(join(src, `f${i}.npy`), writeNpy({ dtype: "uint8", shape: [16], data: new Uint8Array(16).fill(i) }));
    const t0 = Date.now();
    const r = await svc(["import", "ns", src, "--json"], { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey });
    const s = JSON.parse(r.out);
    t.equal(r.code, 0, "exit 0");
    t.deepEqual([s.imported, s.failed], [10, 0], "all 10 files imported through a 4-per-second limit");
    t.ok(Date.now() - t0 >= 1000, `it waited for the window (${Date.now() - t0} ms)`);
  } finally {
    await stack.close();
  }
});
