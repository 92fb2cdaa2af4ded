// A Unix domain socket for an engine on the same machine as its gateway (SVC_ENGINE_SOCKET on
// the engine, a unix: entry in SVC_GATE_ENGINE_URL on the gateway; svc up uses one). A request
// over it skips the loopback TCP path (segments, acknowledgements, the receiving side's TCP work
// done in the writer's system call), which is most of the kernel's share of a proxied request.
// The socket file is made private (0600) as soon as it exists; a stale one left by a process
// that died is replaced, a live one or any other file at the path is refused.
import { chmodSync, lstatSync, rmSync, statSync } from "node:fs";
import { connect } from "node:net";
import { dirname, isAbsolute } from "node:path";
import type { Server } from "node:http";
import { closeGracefully } from "./close.js";

/** sun_path holds 108 bytes on Linux, the last a NUL. */
export const MAX_SOCKET_PATH_BYTES = 107;

/** Why `path` cannot name a Unix socket (a sentence fragment after the variable's name), or null. */
export function socketPathProblem(path: string): string | null {
  if (!isAbsolute(path)) return "must be an absolute path";
  if (path.includes("\0")) return "must not contain a NUL character";
  if (path.endsWith("/")) return "must name a file, not a directory";
  const bytes = Buffer.byteLength(path);
  if (bytes > MAX_SOCKET_PATH_BYTES) return `must be at most ${MAX_SOCKET_PATH_BYTES} bytes long (a Unix socket's limit), not ${bytes}`;
  return null;
}

/** The unix: address of a socket path, as SVC_GATE_ENGINE_URL takes it (characters outside the path alphabet escaped). */
export function unixUrl(path: string): string {
  return `unix:${path.split("/").map(encodeURIComponent).join("/")}`;
}

/** The socket path of a unix: address (unix:/path or unix:///path), or null when `url` is not one. */
export function socketPathOf(url: string): string | null {
  const m = /^unix:(?:\/\/)?(\/.*)$/i.exec(url);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    return null;
  }
}

/** Whether something accepts connections on the socket at `path` (answers within 1 s). */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ path });
    const done = (live: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve(live);
    };
    const timer = setTimeout(() => done(true), 1000);
    s.once("connect", () => done(true));
    s.once("error", () => done(false));
  });
}

/**
 * Listens on the Unix socket `path` with `server`, made 0600. A socket file nobody answers on
 * (left by a process that was killed) is removed first; a live socket, or a file of another
 * kind, is refused with a sentence (`what` names the setting). Returns a function that closes
 * the server as closeGracefully does (server/http/close.ts), which removes the socket file.
 */
export async function listenUnix(server: Server, path: string, what: string, graceMs?: number): Promise<() => Promise<void>> {
  const existing = lstatSync(path, { throwIfNoEntry: false });
  if (existing !== undefined) {
    if (!existing.isSocket()) throw new Error(`${what} names ${path}, which exists and is not a socket; it is left as it is.`);
    if (await answers(path)) throw new Error(`${what} names ${path}, where another process is listening.`);
    rmSync(path, { force: true });
  }
  // libuv reports a missing directory as EACCES: the directory is looked at first
  const dir = dirname(path);
  const ds = statSync(dir, { throwIfNoEntry: false });
  if (ds === undefined || !ds.isDirectory()) throw new Error(`${what} names ${path}, whose directory ${dir} does not exist; create it first.`);
  await new Promise<void>((resolve, reject) => {
    const failed = (e: NodeJS.ErrnoException) => {
      reject(
        new Error(
          e.code === "EADDRINUSE"
            ? `${what} names ${path}, where another process is listening.`
            : e.code === "EACCES" || e.code === "EPERM"
              ? `${what} names ${path}, where this process may not create a socket (permission denied).`
              : `${what} names ${path}, where the engine cannot listen (${e.code ?? "error"}).`,
        ),
      );
    };
    server.once("error", failed);
    server.listen({ path, readableAll: false, writableAll: false }, () => {
      server.off("error", failed);
      resolve();
    });
  });
  chmodSync(path, 0o600);
  // net.Server removes its socket file when it closes
  return () => closeGracefully(server, graceMs);
}
