// Ctrl-C (or SIGTERM) during a command: it used to end without a word (exit 130), leaving the
// user to guess whether a put had been stored. Now one line says what the command leaves, and
// the exit code is 130 (SIGINT) or 143 (SIGTERM). The servers keep their own clean stop.
import test from "tape";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { interruptedLine } from "../../bin/cli/main.js";

const SVC = fileURLToPath(new URL("../../bin/svc.ts", import.meta.url));

/** A gateway that reads requests and never answers: how many requests have begun arriving. */
async function silentServer(): Promise<{ url: string; seen: () => number; close: () => Promise<void> }> {
  let seen = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.once("data", () => seen++);
    s.on("error", () => undefined);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen: () => seen,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/** `svc ARGS` against `url`, signalled with `sig` once its request has reached the server. */
async function interrupted(args: string[], url: string, seen: () => number, sig: NodeJS.Signals): Promise<{ code: number | null; err: string }> {
  const before = seen();
  const child = spawn(process.execPath, ["--import", "tsx", SVC, ...args], {
    env: { ...process.env, SVC_GATE_URL: url, SVC_API_KEY: "sk_test_interrupt_0123456789abcdef" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  child.stdout.resume();
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  for (let i = 0; i < 1200 && seen() === before && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
  child.kill(sig);
  return { code: await exited, err };
}

test("svc get interrupted with Ctrl-C while it waits for the gateway: one line, exit 130", async (t) => {
  const server = await silentServer();
  try {
    const r = await interrupted(["get", "ns", "key"], server.url, server.seen, "SIGINT");
    t.equal(r.code, 130, "exit 130");
    t.equal(r.err.trim(), "svc get: interrupted.", `standard error: ${JSON.stringify(r.err)}`);
  } finally {
    await server.close();
  }
});

test("svc put interrupted (SIGTERM) during its upload: says the write may or may not be stored, exit 143", async (t) => {
  const server = await silentServer();
  const dir = mkdtempSync(join(tmpdir(), "svc-interrupt-"));
  try {
    const file = join(dir, "blob.bin");
    writeFileSync(file, Buffer.alloc(4096, 7));
    const r = await interrupted(["put", "ns", "key", file, "--bytes"], server.url, server.seen, "SIGTERM");
    t.equal(r.code, 143, "exit 143");
    t.equal(r.err.trim(), "svc put: interrupted; the write under way may or may not have been stored.", `standard error: ${JSON.stringify(r.err)}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.close();
  }
});

test("the interrupted line of each command; none for the servers, which stop cleanly themselves", (t) => {
  for (const cmd of ["up", "engine", "gateway"]) t.equal(interruptedLine(cmd), null, `${cmd}: its own stop`);
  t.equal(interruptedLine(undefined), null, "no command");
  t.equal(interruptedLine("nope"), null, "an unknown command (a usage error, at once)");
  t.equal(interruptedLine("ls"), "svc ls: interrupted.", "a read: interrupted");
  t.equal(interruptedLine("rm"), "svc rm: interrupted; the delete under way may or may not have been done.", "rm");
  t.equal(interruptedLine("migrate"), "svc migrate: interrupted; the keys copied so far stay copied; run it again to go on.", "migrate resumes");
  t.equal(interruptedLine("compact"), "svc compact: interrupted; what it purged so far stays purged; the next run does the rest.", "compact");
  t.end();
});
