// readBody (server/http/body.ts) over real sockets: a body that arrived with its headers is taken
// whole from the request's buffer (the stream never flows), one that arrives in pieces is read as
// it comes, and both give the bytes sent; the limits, a short body and pipelined requests behave
// as before. No waits on time: the pieces of a split body are sent once the server has seen the
// first one.
import test from "tape";
import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect, type AddressInfo, type Socket } from "node:net";
import { LINGER, lingerOnClose, readBody } from "../../server/http/body.js";
import { MemoryBudget, reservationOf } from "../../server/http/memory-budget.js";

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

const reply = (res: ServerResponse, status: number, text: string) =>
  res.writeHead(status, { "content-type": "text/plain", "content-length": Buffer.byteLength(text) }).end(text);

interface Seen {
  /** Whether the request's stream was never switched to flowing (the body was taken whole). */
  whole: boolean;
  len: number;
}

/** A server whose handler reads the body at once; answers its SHA-256 or the error's status and message. */
async function serve(limit: number, budgetBytes?: number): Promise<{ port: number; server: Server; seen: Seen[]; arrived: Promise<void> }> {
  const seen: Seen[] = [];
  let arrivedNow: () => void = () => undefined;
  const arrived = new Promise<void>((r) => (arrivedNow = r));
  const budget = budgetBytes === undefined ? undefined : new MemoryBudget(budgetBytes, 100);
  const server = createServer((req: IncomingMessage, res) => {
    arrivedNow();
    void (async () => {
      try {
        const b = await readBody(req, { limit, res, ...(budget ? { reservation: reservationOf(res, budget, "t"), factor: 1 } : {}) });
        seen.push({ whole: req.readableFlowing === null, len: b.byteLength });
        reply(res, 200, sha(b));
      } catch (e) {
        const err = e as Error & { code?: string };
        reply(res, err.code === "payload_too_large" ? 413 : 400, `${err.code ?? "error"}: ${err.message}`);
      }
    })();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { port: (server.address() as AddressInfo).port, server, seen, arrived };
}

const head = (len: number | null, extra = "") =>
  `POST / HTTP/1.1\r\nHost: x\r\n${len === null ? "Transfer-Encoding: chunked" : `Content-Length: ${len}`}\r\n${extra}\r\n`;

/** Reads answers off a socket until `n` have come (or the socket closes), splitting on the Content-Length of each. */
function answers(s: Socket, n: number): Promise<{ status: number; body: string }[]> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const out: { status: number; body: string }[] = [];
    const parse = () => {
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const h = buf.subarray(0, end).toString("latin1");
        const len = Number(/content-length: (\d+)/i.exec(h)?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        out.push({ status: Number(h.split(" ")[1]), body: buf.subarray(end + 4, end + 4 + len).toString("utf8") });
        buf = buf.subarray(end + 4 + len);
        if (out.length === n) return resolve(out);
      }
    };
    s.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      parse();
    });
    s.on("close", () => resolve(out));
  });
}

const open = (port: number, allowHalfOpen = false) =>
  new Promise<Socket>((resolve, reject) => {
    const s = connect({ port, host: "127.0.0.1", allowHalfOpen }, () => resolve(s));
    s.on("error", reject);
  });

/** Sends `parts` in one write on a new connection and reads `n` answers off it. */
async function oneWrite(port: number, n: number, parts: (string | Buffer)[]): Promise<{ status: number; body: string }[]> {
  const s = await open(port);
  const got = answers(s, n);
  s.write(Buffer.concat(parts.map((p) => (typeof p === "string" ? Buffer.from(p) : p))));
  const out = await got;
  s.destroy();
  return out;
}

test("a body sent with its headers is taken whole; two pipelined in one write, each whole", async (t) => {
  const { port, server, seen } = await serve(1 << 20);
  const a = randomBytes(300),
    b = randomBytes(5000);
  const [ra, rb] = await oneWrite(port, 2, [head(a.length), a, head(b.length), b]);
  t.deepEqual([ra?.status, ra?.body], [200, sha(a)], "the first body, byte for byte");
  t.deepEqual([rb?.status, rb?.body], [200, sha(b)], "the second, pipelined behind it in the same write");
  t.deepEqual(
    seen.map((x) => x.whole),
    [true, true],
    "both taken from the buffer without the stream flowing",
  );
  server.close();
});

test("a body that arrives in pieces is read as it comes, and gives the same bytes", async (t) => {
  const { port, server, seen, arrived } = await serve(1 << 20);
  const body = randomBytes(40_000);
  const s = await open(port);
  const got = answers(s, 1);
  s.write(Buffer.concat([Buffer.from(head(body.length)), body.subarray(0, 1000)]));
  await arrived;
  s.write(body.subarray(1000));
  const [r] = await got;
  t.deepEqual([r?.status, r?.body], [200, sha(body)], "the whole body, byte for byte");
  t.deepEqual(seen, [{ whole: false, len: body.length }], "read from the stream: its first piece alone was not the body");
  s.destroy();
  server.close();
});

test("limits and short bodies: 413 past the limit, a body cut short is an abort, the memory budget refuses before reading", async (t) => {
  const { port, server } = await serve(1000);
  const s1 = await open(port);
  const over = answers(s1, 1);
  s1.write(Buffer.concat([Buffer.from(head(1001)), randomBytes(1001)]));
  const [r1] = await over;
  t.equal(r1?.status, 413, "a whole body one byte past the limit: 413 from its Content-Length");
  s1.destroy();

  const s2 = await open(port);
  const short = answers(s2, 1);
  s2.end(Buffer.concat([Buffer.from(head(500)), randomBytes(200)]));
  const [r2] = await short;
  t.ok(r2 === undefined || r2.status === 400, "200 of 500 bytes, then the client's end: no 200 (the request is aborted)");
  server.close();

  const tight = await serve(1 << 20, 100);
  const s3 = await open(tight.port);
  const budget = answers(s3, 1);
  s3.write(Buffer.concat([Buffer.from(head(400)), randomBytes(400)]));
  const [r3] = await budget;
  t.notEqual(r3?.status, 200, `a body larger than the memory budget, arrived whole: refused (${r3?.status})`);
  t.equal(tight.seen.length, 0, "and never read");
  s3.destroy();
  tight.server.close();
});

test("framing: a chunked body is read from the stream; bytes past a Content-Length are the next request", async (t) => {
  const { port, server, seen } = await serve(1 << 20);
  const body = randomBytes(700),
    next = randomBytes(90);
  const chunked = [head(null), `${body.length.toString(16)}\r\n`, body, "\r\n0\r\n\r\n"];
  const [r1, r2, r3] = await oneWrite(port, 3, [...chunked, head(body.length), body, head(next.length), next]);
  t.deepEqual([r1?.status, r1?.body], [200, sha(body)], "chunked: the body, byte for byte");
  t.deepEqual([r2?.status, r2?.body], [200, sha(body)], "sized: exactly its Content-Length");
  t.deepEqual([r3?.status, r3?.body], [200, sha(next)], "the bytes after it: the next request, with its own body");
  t.equal(seen[0]?.whole, false, "the chunked body through the stream");
  server.close();
});

test("a body refused from its headers: the client reads the answer, sends the rest of its body, and the connection closes without a reset", async (t) => {
  const sized = await serve(1000);
  const tight = await serve(8 << 20, 100);
  for (const [what, port, status, len] of [
    ["413 from the Content-Length", sized.port, 413, 4 << 20],
    ["the memory budget's refusal", tight.port, 400, 4 << 20],
  ] as const) {
    // a client that keeps sending after the answer (as curl does): our side stays open for it
    const s = await open(port, true);
    const errors: string[] = [];
    s.on("error", (e: NodeJS.ErrnoException) => errors.push(e.code ?? e.message));
    const got = answers(s, 1);
    s.write(head(len));
    const [r] = await got;
    t.equal(r?.status, status, `${what}: answered before the body was sent`);
    const closed = new Promise<boolean>((resolve) => s.once("close", resolve));
    // the body after the answer: read and dropped by the server, so no reset comes back
    await new Promise<void>((resolve) => s.end(randomBytes(len), () => resolve()));
    t.equal(await closed, false, `${what}: ${len} bytes sent after it, then the connection closed cleanly`);
    t.deepEqual(errors, [], `${what}: no EPIPE or ECONNRESET`);
  }
  t.equal(tight.seen.length + sized.seen.length, 0, "no body was read into memory");
  sized.server.close();
  tight.server.close();
});

test("a lingering connection whose client sends nothing more is closed by the server after LINGER.idleMs", async (t) => {
  const idle = LINGER.idleMs;
  LINGER.idleMs = 100;
  try {
    const { port, server } = await serve(1000);
    const serverSide = new Promise<Socket>((resolve) => server.once("connection", resolve));
    const s = await open(port, true);
    const got = answers(s, 1);
    s.write(head(1 << 20));
    const [r] = await got;
    t.equal(r?.status, 413, "413 from the Content-Length");
    // neither the body nor an end from the client: the server closes its socket on its own
    const sock = await serverSide;
    if (!sock.destroyed) await new Promise((resolve) => sock.once("close", resolve));
    t.ok(sock.destroyed, "the server's socket is closed");
    s.destroy();
    server.close();
  } finally {
    LINGER.idleMs = idle;
  }
});

test("lingerOnClose on an answer that keeps its connection: Node's own close is back for the next answer", async (t) => {
  const own: boolean[] = [];
  const server = createServer((req, res) => {
    lingerOnClose(res);
    res.once("finish", () => own.push(Object.hasOwn(req.socket, "destroySoon")));
    req.resume();
    req.once("end", () => reply(res, 200, "ok"));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const [a, b] = await oneWrite(port, 2, [head(3), "abc", head(3), "def"]);
  t.deepEqual([a?.status, b?.status], [200, 200], "two answers on one kept-alive connection");
  t.deepEqual(own, [false, false], "after each, the socket has no lingering close of its own");
  server.close();
});
