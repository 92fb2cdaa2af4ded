// Runs the Node verifiers' command-line functions on many cases in one process, for the
// comparison with the Python verifiers (verifiers.test.ts): standard input holds one JSON
// line per case, {"bin": "svc-verify-receipt" | "svc-verify-bundle", "args": [...]}, and
// standard output gets one JSON line per case, {"code", "stdout", "stderr"}, as a process of
// its own would have given them (bin/svc-*.ts run the same functions through runCli).
// test/provenance/verify-*-cli.test.ts run the commands as processes.
import { runCli } from "../../server/provenance/cli.js";
import { verifyBundleCli } from "../../bin/cli/verify-bundle.js";
import { verifyReceiptCli } from "../../bin/cli/verify-receipt.js";

const MAINS = { "svc-verify-receipt": verifyReceiptCli, "svc-verify-bundle": verifyBundleCli } as const;
type Write = typeof process.stdout.write;

/** Replaces `stream.write` with one that keeps the bytes; returns them, and puts it back. */
function capture(stream: NodeJS.WriteStream): () => string {
  const original = stream.write;
  const chunks: Buffer[] = [];
  stream.write = ((chunk: string | Uint8Array, encoding?: BufferEncoding | ((e?: Error) => void), cb?: (e?: Error) => void): boolean => {
    // a string is written as UTF-8 (a lone surrogate as U+FFFD), as the stream would write it
    chunks.push(typeof chunk === "string" ? Buffer.from(chunk, typeof encoding === "string" ? encoding : "utf8") : Buffer.from(chunk));
    const done = typeof encoding === "function" ? encoding : cb;
    if (done) queueMicrotask(() => done());
    return true;
  }) as Write;
  return () => {
    stream.write = original;
    return Buffer.concat(chunks).toString("utf8");
  };
}

let input = "";
for await (const chunk of process.stdin) input += chunk;
const emit = process.stdout.write.bind(process.stdout);
for (const line of input.split("\n")) {
  if (line === "") continue;
  const { bin, args } = JSON.parse(line) as { bin: keyof typeof MAINS; args: string[] };
  const stdout = capture(process.stdout);
  const stderr = capture(process.stderr);
  process.exitCode = 0;
  await runCli(() => MAINS[bin](args));
  const code = Number(process.exitCode);
  emit(JSON.stringify({ code, stdout: stdout(), stderr: stderr() }) + "\n");
}
process.exitCode = 0;
