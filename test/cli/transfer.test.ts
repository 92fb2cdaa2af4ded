// The bar of one long put or serve (bin/cli/transfer.ts): on a terminal, the bytes sent and
// received are drawn in place up to 100% and the result line starts on a fresh line; off a
// terminal nothing but the result is printed. Real gateway and engine; the compress phase from
// the client's events.
import test from "tape";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { startStack, type Stack } from "./stack.js";
import { transferBar } from "../../bin/cli/transfer.js";

let stack: Stack;
let dir: string;
test.onFinish(async () => {
  await stack?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

test("svc put and serve of 3 MiB on a terminal draw the transfer to 100%", async (t) => {
  stack = await startStack(["ns"]);
  dir = await mkdtemp(join(tmpdir(), "svc-transfer-"));
  const env = { SVC_API_KEY: stack.apiKey, SVC_GATE_URL: stack.gateway };
  const file = join(dir, "blob.bin");
  await writeFile(file, Buffer.alloc(3 * 1024 * 1024, 7));
  const put = await svc(["put", "ns", "blob", file, "--bytes"], env, { errIsTTY: true });
  t.equal(put.code, 0, put.err);
  t.match(put.err, /\rsent {2}3\.15 MB\/3\.15 MB \(100%\)/, "the upload reaches 100%");
  t.ok(put.err.endsWith("\n"), "the bar ends with a newline");
  t.match(put.out, /^ns\/blob version 1: /, put.out.trim());
  const out = join(dir, "blob.npy");
  const serve = await svc(["serve", "ns", "blob", "-o", out], env, { errIsTTY: true });
  t.equal(serve.code, 0, serve.err);
  t.match(serve.err, /\rreceived {2}3\.15 MB\/3\.15 MB \(100%\)/, "the download reaches 100%");
  t.match(serve.out, /^Wrote .*blob\.npy: uint8 \[3145728\]/, serve.out.trim());
  const plain = await svc(["put", "ns", "blob", file, "--bytes"], env, { errIsTTY: false });
  t.deepEqual([plain.code, plain.err], [0, ""], "off a terminal: no bar");
});

test("the compress phase says what happens before the upload starts", (t) => {
  let err = "";
  const bar = transferBar(
    {
      out: () => undefined,
      err: (s) => {
        err += s;
      },
      env: {},
      errIsTTY: true,
    },
    100,
  )!;
  bar.onProgress({ phase: "compress", done: 0, total: 268_435_456 });
  bar.onProgress({ phase: "upload", done: 1_048_576, total: 2_097_152 });
  bar.onProgress({ phase: "upload", done: 2_097_152, total: 2_097_152 });
  bar.finish();
  t.match(err, /^Compressing 268 MB here with the engine's codecs before sending it…\n/, "one line for the compression");
  t.match(err, /\rsent {2}2\.10 MB\/2\.10 MB \(100%\).*\n$/, "then the upload bar, ended by a newline");
  t.equal(transferBar({ out: () => undefined, err: () => undefined, env: {}, errIsTTY: false }), undefined, "no bar off a terminal");
  t.end();
});
