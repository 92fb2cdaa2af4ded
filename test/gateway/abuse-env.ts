// Shared pieces of the abuse tests: a gateway process started from the environment (its pid
// for RSS and kill -9), and a raw TCP client that sends a request's body as slowly as it likes.
import { spawn, type ChildProcess } from "node:child_process";
import { connect, type Socket } from "node:net";
import { createInterface } from "node:readline";

export interface GatewayProc {
  url: string;
  child: ChildProcess;
  output: () => string;
}

/** A real gateway process (test/gateway/fixtures/gateway-proc.ts) configured by `env`. */
export function spawnGateway(env: Record<string, string>): Promise<GatewayProc> {
  const child = spawn(process.execPath, ["--import", "tsx", "test/gateway/fixtures/gateway-proc.ts"], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stderr!.on("data", (d) => (out += d));
  child.stdout!.on("data", (d) => (out += d));
  return new Promise<GatewayProc>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    rl.once("line", (l) => resolve({ url: JSON.parse(l).url as string, child, output: () => out }));
    child.once("exit", (c) => reject(Object.assign(new Error(`gateway exited ${c}: ${out}`), { code: c, output: out })));
  });
}

/** Stops a gateway process (SIGTERM, or `signal`) and waits for its exit. */
export async function stopGateway(p: GatewayProc, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return;
  const done = new Promise<void>((r) => p.child.once("exit", () => r()));
  p.child.kill(signal);
  await done;
}

/** Peak resident memory (VmHWM) of a process, in bytes (Linux). */
export async function peakRss(pid: number): Promise<number> {
  const { readFile } = await import("node:fs/promises");
  const m = /VmHWM:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, "utf8"));
  return Number(m![1]) * 1024;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** ms from the first byte sent to the end of the response (or the close). */
  ms: number;
}

/**
 * Sends `head` (request line and headers, without the blank line), then `chunks` of the body,
 * one every `everyMs`, over a raw TCP connection; resolves with the first response once the
 * server closes or the response is complete. The client never stops sending on its own
 * until the response arrives.
 */
export function rawRequest(url: string, head: string, chunks: Array<string | Buffer>, everyMs: number): Promise<RawResponse> {
  const u = new URL(url);
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const sock: Socket = connect(Number(u.port), u.hostname);
    let got = Buffer.alloc(0);
    let timer: NodeJS.Timeout | null = null;
    let done = false;
    const finish = () => {
      if (done) return;
      const text = got.toString("latin1");
      const end = text.indexOf("\r\n\r\n");
      if (end < 0) return;
      const lines = text.slice(0, end).split("\r\n");
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(":");
        headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      const len = Number(headers["content-length"] ?? NaN);
      const body = text.slice(end + 4);
      if (!Number.isNaN(len) && body.length < len) return;
      done = true;
      if (timer) clearInterval(timer);
      sock.destroy();
      resolve({ status: Number(lines[0]!.split(" ")[1]), headers, body: Number.isNaN(len) ? body : body.slice(0, len), ms: Date.now() - t0 });
    };
    sock.on("data", (d: Buffer) => {
      got = Buffer.concat([got, d]);
      finish();
    });
    sock.on("error", () => undefined);
    sock.on("close", () => {
      if (timer) clearInterval(timer);
      finish();
      if (!done) reject(new Error(`connection closed without a complete response after ${Date.now() - t0} ms`));
    });
    sock.once("connect", () => {
      sock.write(head + "\r\n\r\n");
      let i = 0;
      const next = () => {
        if (i < chunks.length && !sock.destroyed) sock.write(chunks[i++]!);
        else if (timer) clearInterval(timer);
      };
      next();
      if (chunks.length > 1) timer = setInterval(next, everyMs);
    });
  });
}
