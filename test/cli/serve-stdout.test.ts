// `svc serve -o -` writes the .npy file to standard output (nothing else there, no file named
// '-'), and a reader that closes the pipe early (`| head -c 10`) ends the command quietly; a
// terminal as standard output gets a usage error instead of binary.
import test from "tape";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readNpy, writeNpy } from "../../lib/npy.js";
import { svc } from "./helpers.js";
import { startStack } from "./stack.js";

const root = new URL("../..", import.meta.url).pathname;

function run(args: string[], env: NodeJS.ProcessEnv, cwd: string, readAtMost?: number): Promise<{ code: number | null; out: Buffer; err: string }> {
  const child = spawn(process.execPath, ["--import", join(root, "node_modules/tsx/dist/loader.mjs"), join(root, "bin/svc.ts"), ...args], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const chunks: Buffer[] = [];
  let got = 0;
  let err = "";
  child.stdout.on("data", (d: Buffer) => {
    chunks.push(d);
    got += d.length;
    // a reader that wants only the first bytes, as `head -c N`: it closes the pipe
    if (readAtMost !== undefined && got >= readAtMost) child.stdout.destroy();
  });
  child.stderr.on("data", (d) => {
    err += d;
  });
  return new Promise((r) => child.on("close", (code) => r({ code, out: Buffer.concat(chunks), err })));
}

test("svc serve -o -: the .npy to standard output; a pipe closed early is no error", async (t) => {
  const stack = await startStack();
  const cwd = await mkdtemp(join(tmpdir(), "svc-serve-stdout-"));
  try {
    const env = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey };
    const data = Float32Array.from({ length: 256 * 256 * 4 }, (_, i) => (i % 977) / 977);
    await writeFile(join(cwd, "a.npy"), writeNpy({ dtype: "float32", shape: [256, 256, 4], data }));
    const put = await svc(["put", "default", "a", join(cwd, "a.npy"), "--codec", "lossless"], env);
    t.equal(put.code, 0, put.err || "put");

    const full = await run(["serve", "default", "a", "-o", "-"], env, cwd);
    t.equal(full.code, 0, "exit 0");
    t.equal(full.err, "", "nothing on standard error");
    t.notOk(existsSync(join(cwd, "-")), "no file named '-'");
    const arr = readNpy(full.out);
    t.deepEqual([arr.dtype, arr.shape], ["float32", [256, 256, 4]], "standard output is the .npy file");
    const bytes = arr.data as Uint8Array;
    t.ok(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).equals(Buffer.from(data.buffer)), "its values");

    const cut = await run(["serve", "default", "a", "-o", "-"], env, cwd, 10);
    t.equal(cut.code, 0, "exit 0 when the reader closes the pipe");
    t.doesNotMatch(cut.err, /\n\s+at |EPIPE|Error/, `no stack or transport error: ${JSON.stringify(cut.err)}`);
    t.notOk(existsSync(join(cwd, "-")), "still no file named '-'");
  } finally {
    await rm(cwd, { recursive: true, force: true });
    await stack.close();
  }
});

test("svc serve -o - with a terminal as standard output: a usage error before any request, nothing written", async (t) => {
  const cwd = await mkdtemp(join(tmpdir(), "svc-serve-tty-"));
  try {
    // the command in a pseudo-terminal (python's pty module, as `script` would): standard output is a terminal
    // (pty.spawn copies what the command writes to the terminal to its own standard output)
    const py = ["import os, pty, sys", "sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))"].join("\n");
    const args = [process.execPath, "--import", join(root, "node_modules/tsx/dist/loader.mjs"), join(root, "bin/svc.ts"), "serve", "default", "a/b", "-o", "-"];
    // an address nothing listens on: a request would fail differently
    const child = spawn("python3", ["-c", py, ...args], {
      cwd,
      env: { ...process.env, SVC_GATE_URL: "http://127.0.0.1:9", SVC_API_KEY: "svc_live_x" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    const code = await new Promise<number | null>((r) => child.on("close", r));
    t.equal(code, 2, "exit 2");
    t.equal(
      out.replace(/\r\n/g, "\n"),
      "svc: -o - writes the .npy file's binary bytes to standard output, which is a terminal here; redirect it (svc serve default a/b -o - > b.npy) or pipe it to a program.\nRun 'svc serve --help' for usage.\n",
      "one sentence saying how to redirect, and where the usage is",
    );
    t.notOk(existsSync(join(cwd, "-")), "no file named '-'");
  } finally {
    await rm(cwd, { recursive: true, force: true });
  }
});
