// Closing the engine and the gateway (SIGTERM, svc up stopping, a rolling restart) with
// requests under way: the listener stops accepting at once, a request under way is answered in
// full before the store (or the gateway's parts) close, and what is still open after the grace
// time is cut. The engine used to cut every connection at once, a put whose body was arriving
// included. A request is known to be under way once its "100 Continue" has arrived: the server
// has parsed it and handed it over.
import test from "tape";
import net from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { wholeAnswers } from "./raw-answers.js";
import { createStore } from "../../lib/store/index.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine, type RunningEngine } from "../../server/engine/server.js";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway } from "../../server/gateway/server.js";

const KEY = "graceful-close-key-0123456789abcdef0123456789ab";
const BODY = Buffer.alloc(100_000, 7);

/** A request sent on a connection of its own up to its body, which waits for send(). */
function underWay(to: net.NetConnectOpts, head: string) {
  const s = net.connect(to);
  let raw = "";
  let continued!: () => void;
  const ready = new Promise<void>((resolve) => (continued = resolve));
  const closed = new Promise<string>((resolve) => {
    const ceiling = setTimeout(() => s.destroy(), 30_000); // a bound on the test, never reached when close works
    s.on("close", () => {
      clearTimeout(ceiling);
      continued(); // refused before its body was asked for: what it got is in `closed`
      resolve(raw);
    });
  });
  s.on("error", () => undefined);
  s.on("data", (d: Buffer) => {
    raw += d.toString("latin1");
    if (raw.startsWith("HTTP/1.1 100 Continue\r\n\r\n")) continued();
  });
  s.write(head);
  return { ready, send: (b: Buffer) => s.write(b), closed };
}

const putHead = (path: string, auth: string) =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/octet-stream\r\nContent-Length: ${BODY.length}\r\nExpect: 100-continue\r\n\r\n`;
const engineAuth = `Authorization: Bearer ${KEY}\r\nX-SVC-Tenant: acme\r\n`;

const refused = (to: net.NetConnectOpts): Promise<string> =>
  new Promise((resolve) => {
    const s = net.connect(to);
    s.on("connect", () => {
      s.destroy();
      resolve("connected");
    });
    s.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
  });

async function engineIn(dir: string, closeGraceMs?: number, socket?: string): Promise<RunningEngine> {
  return startEngine(
    loadEngineConfig({
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
      ...(socket ? { SVC_ENGINE_SOCKET: socket } : {}),
    }),
    closeGraceMs === undefined ? {} : { closeGraceMs },
  );
}

async function readBack(dir: string, ns: string, key: string): Promise<boolean> {
  const s = await createStore({ path: join(dir, "engine") });
  try {
    const e = await s.forTenant("acme").serve(ns, key);
    return Buffer.from(e.data as Uint8Array).equals(BODY);
  } finally {
    await s.close();
  }
}

for (const over of ["tcp", "unix"] as const) {
  test(`engine over ${over}: a put under way when close() is called is answered and stored; new connections are refused`, async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "svc-close-"));
    try {
      const socket = join(dir, "engine.sock");
      const engine = await engineIn(dir, undefined, over === "unix" ? socket : undefined);
      const to: net.NetConnectOpts = over === "unix" ? { path: socket } : { port: engine.port, host: "127.0.0.1" };
      const put = underWay(to, putHead(`/v1/put?namespace=ns&key=late-${over}&dtype=bytes`, engineAuth));
      await put.ready;
      const closing = engine.close();
      t.equal(await refused(to), over === "unix" ? "ENOENT" : "ECONNREFUSED", "a new connection is refused at once");
      put.send(BODY);
      const answers = wholeAnswers(await put.closed);
      t.equal(answers[0]?.status, 201, `the put under way is answered 201 (${answers[0]?.text.slice(0, 100) ?? "no answer"})`);
      await closing;
      t.pass("close() resolves once it is answered");
      t.ok(await readBack(dir, "ns", `late-${over}`), "the store holds its bytes");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
}

test("engine: a request still under way after the grace time is cut, and close() resolves", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-close-"));
  try {
    const engine = await engineIn(dir, 300);
    const put = underWay({ port: engine.port, host: "127.0.0.1" }, putHead("/v1/put?namespace=ns&key=never&dtype=bytes", engineAuth));
    await put.ready;
    const closing = engine.close();
    put.send(BODY.subarray(0, 1000)); // and never the rest
    const raw = await put.closed;
    t.equal(wholeAnswers(raw.replace("HTTP/1.1 100 Continue\r\n\r\n", "")).length, 0, "its connection is closed without an answer");
    await closing;
    t.pass("close() resolves");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("gateway: a put under way when close() is called is answered through the engine before the gateway's parts close", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-close-"));
  const engine = await engineIn(dir);
  try {
    const gateway = await startGateway(
      loadGatewayConfig({
        SVC_GATE_ENGINE_SERVICE_KEY: KEY,
        SVC_GATE_HOST: "127.0.0.1",
        SVC_GATE_PORT: "0",
        SVC_GATE_ENGINE_URL: engine.url,
        SVC_GATE_DATA_DIR: join(dir, "gate"),
        SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      }),
    );
    const made = await fetch(`${gateway.url}/gate/onboard/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ tenant_id: "acme", plan: "enterprise" }),
    });
    const apiKey = ((await made.json()) as { api_key: string }).api_key;
    const to = { port: gateway.port, host: "127.0.0.1" };
    const put = underWay(to, putHead("/v1/put?namespace=default&key=via-gateway&dtype=bytes", `X-Api-Key: ${apiKey}\r\n`));
    await put.ready;
    const closing = gateway.close();
    t.equal(await refused(to), "ECONNREFUSED", "a new connection is refused at once");
    put.send(BODY);
    const answers = wholeAnswers(await put.closed);
    t.equal(answers[0]?.status, 201, `the put under way is answered 201 (${answers[0]?.text.slice(0, 100) ?? "no answer"})`);
    await closing;
    t.pass("close() resolves once it is answered");
  } finally {
    await engine.close();
  }
  t.ok(await readBack(dir, "default", "via-gateway"), "the engine's store holds its bytes");
  await rm(dir, { recursive: true, force: true });
});
