// Large request bodies take at most BODY_TURN_BYTES per turn of the event loop, all together
// (server/http/body-pace.ts): over real HTTP requests, a body past the turn's bytes is paused and
// resumed in the next turn, a request forgotten by the pacing (its body failed) stays paused,
// and bodies read through the engine's reader and the gateway's guard arrive whole while
// several run at once, with a small request answered meanwhile. No waits on time.
import test from "tape";
import { createHash, randomBytes } from "node:crypto";
import { createServer, request, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import {
  BODY_TURN_BYTES,
  bodyPaceStats,
  PACED_BODY_MIN_BYTES,
  pacedBody,
  paceBody,
  pacedNow,
  setBodyTurnBytes,
  unpaceBody,
} from "../../server/http/body-pace.js";
import { readBody } from "../../server/http/body.js";
import { guardBody, readGuarded } from "../../server/http/body-guard.js";

const nextTurn = () => new Promise<void>((r) => setImmediate(r));

/** A server that hands each request to `handle`; resolves its port. */
async function serve(handle: (req: IncomingMessage, end: (status: number, text: string) => void) => void): Promise<{ port: number; server: Server }> {
  const server = createServer((req, res) =>
    handle(req, (status, text) => {
      res.writeHead(status, { "content-type": "text/plain" });
      res.end(text);
    }),
  );
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { port: (server.address() as AddressInfo).port, server };
}

/** Sends `body` (with its Content-Length, or chunked) and resolves the answer's status and text. */
function send(port: number, body: Buffer | null, chunked = false, path = "/"): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = chunked ? { "transfer-encoding": "chunked" } : { "content-length": String(body?.length ?? 0) };
    const req = request({ host: "127.0.0.1", port, method: body === null ? "GET" : "POST", path, headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode!, text }));
    });
    req.on("error", reject);
    if (body !== null && chunked) for (let at = 0; at < body.length; at += 1 << 20) req.write(body.subarray(at, at + (1 << 20)));
    else if (body !== null) req.write(body);
    req.end();
  });
}

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

test("pacedBody: large declared lengths and chunked bodies are paced, small ones are not", async (t) => {
  const seen: boolean[] = [];
  const { port, server } = await serve((req, end) => {
    seen.push(pacedBody(req));
    req.resume();
    req.on("end", () => end(200, "ok"));
  });
  try {
    await send(port, Buffer.alloc(PACED_BODY_MIN_BYTES));
    await send(port, Buffer.alloc(1000));
    await send(port, Buffer.alloc(1000), true);
    await send(port, null);
    t.deepEqual(seen, [true, false, true, false], "1 MiB declared: paced; 1,000 bytes: not; chunked: paced; no body: not");
  } finally {
    server.close();
  }
});

test("paceBody: past the turn's bytes the request is paused, and resumed in the next turn; one forgotten stays paused", async (t) => {
  const reqs: IncomingMessage[] = [];
  const { port, server } = await serve((req, end) => {
    reqs.push(req);
    req.on("end", () => end(200, "ok"));
  });
  try {
    const answers = [send(port, Buffer.alloc(2 * PACED_BODY_MIN_BYTES)), send(port, Buffer.alloc(2 * PACED_BODY_MIN_BYTES))];
    while (reqs.length < 2) await nextTurn();
    const [a, b] = reqs as [IncomingMessage, IncomingMessage];
    await nextTurn(); // a fresh turn: nothing counted yet
    const before = bodyPaceStats.pauses;
    paceBody(a, BODY_TURN_BYTES / 2);
    t.notOk(a.isPaused(), "within the turn's bytes: read on");
    paceBody(a, BODY_TURN_BYTES);
    t.ok(a.isPaused(), "past them: paused");
    paceBody(b, 1);
    t.ok(b.isPaused(), "another body in the same turn: paused at once");
    t.equal(pacedNow(), 2, "two requests wait for the next turn");
    t.equal(bodyPaceStats.pauses - before, 2, "two pauses counted");
    unpaceBody(b);
    await nextTurn();
    t.notOk(a.isPaused(), "the next turn resumes the paced request");
    t.ok(b.isPaused(), "one forgotten by the pacing (its reader paused it for good) stays paused");
    t.equal(pacedNow(), 0, "none waits any more");
    b.resume();
    const done = await Promise.all(answers);
    t.deepEqual(
      done.map((d) => d.status),
      [200, 200],
      "both bodies are read to their end",
    );
  } finally {
    server.close();
  }
});

async function readersServer() {
  const rate = { minBytesPerS: 1024, graceMs: 60_000 };
  return serve((req, end) => {
    if (req.method === "GET") return end(200, "small");
    const reading =
      req.url === "/guard"
        ? readGuarded(guardBody(req, 64 << 20, rate), req.headers["content-length"] ? Number(req.headers["content-length"]) : undefined)
        : readBody(req, { limit: 64 << 20, rate });
    reading.then(
      (b) => end(200, sha(b)),
      (e: Error) => end(500, e.message),
    );
  });
}

test("bodies read by readBody and by guardBody arrive whole while several run at once, and a small request is answered meanwhile", async (t) => {
  const { port, server } = await readersServer();
  try {
    const bodies = Array.from({ length: 4 }, () => randomBytes(12 << 20));
    const before = bodyPaceStats.pauses;
    const puts = [
      send(port, bodies[0]!, false, "/engine"),
      send(port, bodies[1]!, true, "/engine"),
      send(port, bodies[2]!, false, "/guard"),
      send(port, bodies[3]!, true, "/guard"),
    ];
    const small = await send(port, null);
    t.deepEqual(small, { status: 200, text: "small" }, "a small request is answered while the bodies are read");
    const got = await Promise.all(puts);
    t.deepEqual(
      got.map((g) => g.status),
      [200, 200, 200, 200],
      "every body read",
    );
    t.deepEqual(
      got.map((g) => g.text),
      bodies.map(sha),
      "each with its bytes (declared length and chunked, engine reader and gateway guard)",
    );
    t.comment(`the bodies were paused ${bodyPaceStats.pauses - before} times`);
    t.equal(pacedNow(), 0, "nothing is left paused");
  } finally {
    server.close();
  }
});

test("with a budget of one byte per turn, every body through either reader is paused and still arrives whole", async (t) => {
  const { port, server } = await readersServer();
  setBodyTurnBytes(1);
  try {
    const bodies = Array.from({ length: 4 }, () => randomBytes(2 << 20));
    const before = bodyPaceStats.pauses;
    const got = await Promise.all([
      send(port, bodies[0]!, false, "/engine"),
      send(port, bodies[1]!, true, "/engine"),
      send(port, bodies[2]!, false, "/guard"),
      send(port, bodies[3]!, true, "/guard"),
    ]);
    t.deepEqual(
      got.map((g) => g.text),
      bodies.map(sha),
      "each body whole",
    );
    // every chunk after a turn's first one pauses its body: at least one pause per body
    t.ok(bodyPaceStats.pauses - before >= 4, `the readers paced them (${bodyPaceStats.pauses - before} pauses)`);
    t.equal(pacedNow(), 0, "nothing is left paused");
  } finally {
    setBodyTurnBytes(BODY_TURN_BYTES);
    server.close();
  }
});
