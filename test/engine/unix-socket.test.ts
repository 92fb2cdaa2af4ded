// SVC_ENGINE_SOCKET: the engine answers on a Unix socket as well as on its TCP port (the same
// routes, the same service key), the socket file is private (0600), a stale one left by a killed
// process is replaced, a live one and a file of another kind are refused and left alone, and
// close() removes it. The variable's bad values are one sentence naming it.
import test from "tape";
import { spawn } from "node:child_process";
import { lstatSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { createServer } from "node:net";
import { createServer as createHttpServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ValidationError } from "../../lib/errors.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { jsonLogger } from "../../server/engine/app.js";
import { startEngine } from "../../server/engine/server.js";
import { listenUnix, socketPathOf, unixUrl } from "../../server/http/unix-socket.js";

const KEY = "k".repeat(40);
const auth = { authorization: `Bearer ${KEY}`, "x-svc-tenant": "t1" };
const quiet = jsonLogger("silent");

/** One request over the Unix socket at `socketPath`. */
function overSocket(
  socketPath: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: Buffer,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method, path, headers: { ...headers, ...(body ? { "content-length": String(body.length) } : {}) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString() }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const engineOn = (dir: string, socket: string) =>
  startEngine(loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: join(dir, "data"), SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_SOCKET: socket }), {
    logger: quiet,
  });

test("engine socket: the same answers as over TCP, a private socket file, removed on close", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-sock-"));
  const path = join(dir, "engine.sock");
  const e = await engineOn(dir, path);
  try {
    const st = lstatSync(path);
    t.ok(st.isSocket(), "a socket file at SVC_ENGINE_SOCKET");
    t.equal(st.mode & 0o777, 0o600, "mode 0600");
    t.equal(e.socketUrl, `unix:${path}`, "socketUrl is the gateway's address of it");
    const bytes = Buffer.from("hello over a socket");
    const put = await overSocket(path, "POST", "/v1/put?namespace=ns&key=k", { ...auth, "content-type": "application/octet-stream" }, bytes);
    t.equal(put.status, 201, "a put over the socket");
    const viaTcp = await fetch(`${e.url}/v1/get/ns/k`, { headers: auth });
    t.equal(viaTcp.status, 200, "read back over TCP");
    const viaSocket = await overSocket(path, "GET", "/v1/get/ns/k", auth);
    t.deepEqual(JSON.parse(viaSocket.body), await viaTcp.json(), "the same answer over the socket");
    const noKey = await overSocket(path, "GET", "/v1/get/ns/k", { "x-svc-tenant": "t1" });
    t.equal(noKey.status, 401, "the service key is required over the socket too");
    t.equal((await overSocket(path, "GET", "/health", {})).status, 200, "health over the socket");
  } finally {
    await e.close();
  }
  t.equal(lstatSync(path, { throwIfNoEntry: false }), undefined, "close() removed the socket file");
  rmSync(dir, { recursive: true, force: true });
});

test("engine socket: a stale socket is replaced; a live one and another kind of file are refused and left alone", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-sock-"));
  const path = join(dir, "engine.sock");
  try {
    // a socket left by a process killed while it listened
    const child = spawn(process.execPath, ["-e", `require("net").createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, "SIGKILL"))`]);
    await new Promise((r) => child.once("exit", r));
    t.ok(lstatSync(path).isSocket(), "a stale socket file is there");
    const e = await engineOn(dir, path);
    t.equal((await overSocket(path, "GET", "/health", {})).status, 200, "the engine took the path over and answers on it");
    await e.close();

    // a live socket of another process
    const other = createServer((s) => s.end());
    await new Promise<void>((r) => other.listen(path, r));
    const live = await engineOn(dir, path).then(
      (x) => x,
      (err: unknown) => err,
    );
    t.ok(live instanceof Error, "refused");
    t.equal((live as Error).message, `SVC_ENGINE_SOCKET names ${path}, where another process is listening.`, "one sentence naming the variable");
    t.ok(lstatSync(path).isSocket(), "the other process's socket is still there");
    await new Promise<void>((r) => other.close(() => r()));

    // a regular file
    writeFileSync(path, "not a socket");
    const file = await engineOn(dir, path).then(
      (x) => x,
      (err: unknown) => err,
    );
    t.equal((file as Error).message, `SVC_ENGINE_SOCKET names ${path}, which exists and is not a socket; it is left as it is.`, "a regular file: refused");
    t.equal(readFileSync(path, "utf8"), "not a socket", "and left as it was");

    // a directory that does not exist, and one this process may not write (as another user)
    const missing = join(dir, "no", "such", "e.sock");
    const nodir = await engineOn(dir, missing).then(
      (x) => x,
      (err: unknown) => err,
    );
    t.equal(
      (nodir as Error).message,
      `SVC_ENGINE_SOCKET names ${missing}, whose directory ${join(dir, "no", "such")} does not exist; create it first.`,
      "a missing directory: named",
    );

    // the engine's TCP port is free again after each refusal: a later start on another path works
    const ok = await engineOn(dir, join(dir, "other.sock"));
    await ok.close();
    t.pass("an engine starts after the refusals");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("engine socket: SVC_ENGINE_SOCKET values refused with one sentence naming it", (t) => {
  const cases: [string, RegExp][] = [
    ["engine.sock", /^SVC_ENGINE_SOCKET must be an absolute path\.$/],
    ["./engine.sock", /^SVC_ENGINE_SOCKET must be an absolute path\.$/],
    ["/tmp/x/", /^SVC_ENGINE_SOCKET must name a file, not a directory\.$/],
    ["/tmp/" + "x".repeat(103), /^SVC_ENGINE_SOCKET must be at most 107 bytes long \(a Unix socket's limit\), not 108\.$/],
    ["/tmp/é" + "x".repeat(101), /^SVC_ENGINE_SOCKET must be at most 107 bytes long \(a Unix socket's limit\), not 108\.$/],
    ["/tmp/a\0b", /^SVC_ENGINE_SOCKET must not contain a NUL character\.$/],
  ];
  for (const [value, re] of cases) {
    let err: unknown = null;
    try {
      loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_SOCKET: value });
    } catch (e) {
      err = e;
    }
    t.ok(
      err instanceof ValidationError && re.test(err.message),
      `${JSON.stringify(value.length > 40 ? value.slice(0, 20) + "..." : value)}: ${(err as Error | null)?.message}`,
    );
  }
  t.equal(
    loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_SOCKET: "/tmp/" + "x".repeat(102) }).socket_path,
    "/tmp/" + "x".repeat(102),
    "107 bytes: taken",
  );
  t.equal(loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_SOCKET: "" }).socket_path, null, "empty: no socket");
  t.equal(loadEngineConfig({ SVC_ENGINE_API_KEYS: KEY }).socket_path, null, "unset: no socket");
  t.end();
});

test("engine socket: unix: addresses round-trip through unixUrl and socketPathOf", (t) => {
  for (const p of ["/tmp/engine.sock", "/var/run/svc tensor/e.sock", "/tmp/%41/é.sock", "/a/b:c/d?e#f"]) t.equal(socketPathOf(unixUrl(p)), p, p);
  t.equal(socketPathOf("unix:///tmp/e.sock"), "/tmp/e.sock", "unix:///path");
  t.equal(socketPathOf("unix:/tmp/%E9.sock"), null, "an escape that is not UTF-8: not an address");
  t.equal(socketPathOf("unix:tmp/e.sock"), null, "a relative path: not an address");
  t.equal(socketPathOf("http://127.0.0.1:8000"), null, "an http URL: not a socket");
  t.end();
});

test("engine socket: a listen the system refuses is one sentence naming the path", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-sock-"));
  const path = join(dir, "e.sock");
  try {
    for (const [code, sentence] of [
      ["EACCES", `SVC_ENGINE_SOCKET names ${path}, where this process may not create a socket (permission denied).`],
      ["EADDRINUSE", `SVC_ENGINE_SOCKET names ${path}, where another process is listening.`],
      ["ENAMETOOLONG", `SVC_ENGINE_SOCKET names ${path}, where the engine cannot listen (ENAMETOOLONG).`],
    ]) {
      // the system's answer to bind(2), as Node reports it
      const server = createHttpServer();
      server.listen = (() => {
        setImmediate(() => server.emit("error", Object.assign(new Error(`listen ${code}`), { code })));
        return server;
      }) as typeof server.listen;
      const err = await listenUnix(server, path, "SVC_ENGINE_SOCKET").then(
        () => null,
        (e: unknown) => e,
      );
      t.equal((err as Error | null)?.message, sentence, code!);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
