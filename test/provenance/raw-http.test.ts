// The appliance as it serves (startProvenance) answers what Node would answer bare with the
// JSON error body, over raw sockets: an HTTP/1.1 request without Host, a request line Node
// cannot parse, an Expect other than 100-continue, CONNECT; and pipelined requests are answered
// in the order sent.
import test from "tape";
import { isUtf8 } from "node:buffer";
import net from "node:net";
import { readZip } from "../../server/provenance/bundle.js";
import { startProvenance, type RunningProvenance } from "../../server/provenance/server.js";
import { sendRaw as send, wholeAnswers } from "../http/raw-answers.js";
import { configFor, tempDir } from "./helpers.js";
import { FFFD, FFFD_CLAIMS, INVALID_UTF8, bytesOf, withForm } from "./utf8-forms.js";

/** An appliance of its own (noble backend, `env` added) for `body`, closed and removed after it. */
async function withAppliance(env: Record<string, string>, body: (running: RunningProvenance, adminKey: string) => Promise<void>): Promise<void> {
  const { dir, cleanup } = await tempDir();
  let key = "";
  const running = await startProvenance(configFor(dir, { SVC_PROVENANCE_BACKEND: "noble", ...env }), { log: () => undefined, onAdminKey: (k) => (key = k) });
  try {
    await body(running, key);
  } finally {
    await running.close();
    await cleanup();
  }
}

test("the appliance: Node's bare answers become the JSON error body; pipelined requests in order", async (t) => {
  await withAppliance({}, async (running) => {
    const cases: Array<[string, string, number, string, RegExp]> = [
      ["no Host", "GET /v1/provenance/public-key HTTP/1.1\r\n\r\n", 400, "bad_request", /no Host header/],
      ["a request line Node cannot parse", "GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request", /could not be parsed/],
      [
        "Expect: 200-ok",
        "POST /v1/provenance/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nExpect: 200-ok\r\n\r\n{}",
        400,
        "bad_request",
        /Expect header/,
      ],
      ["CONNECT", "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", 404, "not_found", /No endpoint CONNECT/],
    ];
    for (const [label, text, status, code, detail] of cases) {
      const { answers, raw } = await send(running.port, text, 1);
      t.equal(answers[0]?.status, status, `${label}: ${status}`);
      const body = answers[0] ? (JSON.parse(answers[0].text) as { code: string; detail: string; request_id: string }) : null;
      t.equal(body?.code, code, `${label}: code ${code}`);
      t.match(body?.detail ?? "", detail, `${label}: ${body?.detail}`);
      t.match(raw, /\r\nconnection: close\r\n/i, `${label}: the connection closes`);
    }
    const get = "GET /v1/provenance/public-key HTTP/1.1\r\nHost: x\r\n\r\n";
    const missing = "GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n";
    const { answers } = await send(running.port, get + missing + get, 3);
    t.deepEqual(
      answers.map((a) => a.status),
      [200, 404, 200],
      "three pipelined requests answered in the order sent",
    );
    const health = await fetch(`${running.url}/health`);
    t.equal(health.status, 200, "the appliance still answers");
  });
});

test("the appliance: a body that is not UTF-8 is a 415, never signed as replaced characters", async (t) => {
  await withAppliance({}, async (running, key) => {
    const body = Buffer.concat([
      Buffer.from('{"artifact":{"name":"a'),
      Buffer.from([0xff]),
      Buffer.from(`","sha256":"${"ab".repeat(32)}","size_bytes":1,"media_type":"application/octet-stream"}}`),
    ]);
    // the plain path (exactly the path, JSON, a Content-Length) and the express one (a query string)
    for (const path of ["/v1/provenance/exact", "/v1/provenance/exact?x=1", "/v1/provenance/verify"]) {
      const r = await fetch(running.url + path, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });
      const j = (await r.json()) as { code: string; detail: string };
      t.equal(r.status, 415, `${path}: 415`);
      t.equal(j.detail, "The request body is not valid UTF-8.", `${path}: ${j.detail}`);
    }
    // a genuine receipt whose strings hold U+FFFD: sent with bytes that read as them with
    // replacement it is refused at verification and export; sent as it is, its bundle holds it
    // byte for byte, every file valid UTF-8
    const post = (path: string, body: Buffer) =>
      fetch(running.url + path, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });
    const artifact = { name: `a${FFFD}.bin`, sha256: "ab".repeat(32), size_bytes: 1, media_type: "application/octet-stream" };
    const issued = await post("/v1/provenance/exact", Buffer.from(JSON.stringify({ artifact, claims: FFFD_CLAIMS })));
    t.equal(issued.status, 201, "a receipt with U+FFFD in its strings is issued");
    const receipt = Buffer.from(await issued.arrayBuffer());
    for (const [label, bytes, n] of INVALID_UTF8) {
      const body = bytesOf('{"receipt":', [...withForm(receipt, bytes, n)], "}");
      for (const path of ["/v1/provenance/verify", "/v1/provenance/verify?x=1", "/v1/provenance/evidence-bundle"]) {
        const r = await post(path, body);
        const j = (await r.json()) as { detail: string };
        t.deepEqual([r.status, j.detail], [415, "The request body is not valid UTF-8."], `${path}, ${label}: 415`);
      }
    }
    const exported = await post("/v1/provenance/evidence-bundle", bytesOf('{"receipt":', [...receipt], "}"));
    t.equal(exported.status, 200, "the receipt as issued is exported");
    const files = await readZip(Buffer.from(await exported.arrayBuffer()));
    t.deepEqual(
      [...files].filter(([, b]) => !isUtf8(b)).map(([n]) => n),
      [],
      "every file of the bundle is valid UTF-8",
    );
    t.ok(files.get("receipt.json")!.includes(Buffer.from(`"<${FFFD.repeat(6)}>"`)), "receipt.json holds the U+FFFD as sent");
  });
});

// the stalled bodies below are cut after SVC_PROVENANCE_BODY_GRACE_S (10 s by default, 2 s here)
const GRACE_S = 2;

test("the appliance: callers without the admin key hold at most half the body budget, and a stalled body is cut off", async (t) => {
  const budget = String(8 * 1024 * 1024);
  const env = { SVC_PROVENANCE_BODY_BUDGET_BYTES: budget, SVC_PROVENANCE_MAX_BODY_BYTES: budget, SVC_PROVENANCE_BODY_GRACE_S: String(GRACE_S) };
  await withAppliance(env, async (running, key) => {
    // an unauthenticated /verify that declares 4 MiB (half the budget), sends 11 bytes and stalls
    const stalled = net.connect(running.port, "127.0.0.1");
    const closedAt = new Promise<number>((resolve) => stalled.on("close", () => resolve(Date.now())));
    stalled.on("error", () => undefined);
    const sentAt = Date.now();
    stalled.write(`POST /v1/provenance/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${4 * 1024 * 1024}\r\n\r\n{"receipt":`);
    await new Promise((r) => setTimeout(r, 300));
    const open = await fetch(`${running.url}/v1/provenance/verify`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ receipt: { x: "y".repeat(100_000) } }),
    });
    t.equal(open.status, 429, "a second caller without the admin key past half the budget: 429");
    await open.arrayBuffer();
    const issued = await fetch(`${running.url}/v1/provenance/exact`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ artifact: { name: "a", sha256: "ab".repeat(32), size_bytes: 1, media_type: "application/octet-stream" } }),
    });
    t.equal(issued.status, 201, "issuance still reads its body and issues");
    const cut = await Promise.race([closedAt, new Promise<number>((r) => setTimeout(() => r(0), 60_000).unref())]);
    t.ok(cut > 0, "the stalled connection was closed by the appliance");
    t.ok(cut - sentAt >= GRACE_S * 1000 - 500, `after the grace time of ${GRACE_S} s (${((cut - sentAt) / 1000).toFixed(1)} s), not before`);
    // the configured grace, not the default 10 s (7 s of room for a slow machine)
    t.ok(cut - sentAt < 9_000, "before the default grace of 10 s would have ended");
    const again = await fetch(`${running.url}/v1/provenance/verify`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ receipt: { x: "y".repeat(100_000) } }),
    });
    t.equal(again.status, 422, "its share is back: the same caller is read (422: not a receipt)");
  });
});

test("the appliance: a stalled chunked body and a stalled gzip body (the express route) are cut off too", async (t) => {
  const budget = String(16 * 1024 * 1024);
  const env = { SVC_PROVENANCE_BODY_BUDGET_BYTES: budget, SVC_PROVENANCE_MAX_BODY_BYTES: budget, SVC_PROVENANCE_BODY_GRACE_S: String(GRACE_S) };
  await withAppliance(env, async (running) => {
    const { gzipSync } = await import("node:zlib");
    const gz = gzipSync(`{"receipt":{"x":"${"y".repeat(100_000)}"}}`);
    const heads = [
      // each holds the route's limit of 4 MiB: together the unauthenticated share of 8 MiB
      `POST /v1/provenance/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n{"receipt":\r\n`,
      `POST /v1/provenance/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: ${gz.length}\r\n\r\n`,
    ];
    const closed = heads.map((head, i) => {
      const s = net.connect(running.port, "127.0.0.1");
      s.on("error", () => undefined);
      s.write(head);
      if (i === 1) s.write(gz.subarray(0, 10));
      return new Promise<boolean>((resolve) => {
        s.on("close", () => resolve(true));
        setTimeout(() => resolve(false), 60_000).unref();
      });
    });
    const body = JSON.stringify({ receipt: { x: "y".repeat(100_000) } });
    const verify = () => fetch(`${running.url}/v1/provenance/verify`, { method: "POST", headers: { "content-type": "application/json" }, body });
    let held = await verify();
    // the two stalled requests take their shares once their headers have arrived
    for (let i = 0; i < 50 && held.status !== 429; i++) {
      await held.arrayBuffer();
      await new Promise((r) => setTimeout(r, 100));
      held = await verify();
    }
    t.equal(held.status, 429, "while they are held, another caller without the admin key: 429");
    await held.arrayBuffer();
    t.deepEqual(await Promise.all(closed), [true, true], "both stalled connections were closed by the appliance");
    const again = await verify();
    t.equal(again.status, 422, "their shares are back (422: not a receipt)");
  });
});

test("the appliance: requests in flight when it is closed (SIGTERM) are answered before it stops", async (t) => {
  const { dir, cleanup } = await tempDir();
  let key = "";
  const running = await startProvenance(configFor(dir, { SVC_PROVENANCE_BACKEND: "noble" }), { log: () => undefined, onAdminKey: (k) => (key = k) });
  const body = JSON.stringify({ artifact: { name: "a", sha256: "ab".repeat(32), size_bytes: 1, media_type: "application/octet-stream" } });
  const request = `POST /v1/provenance/exact HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  // 16 connections accepted by the appliance first (one still in the kernel's backlog when the
  // listening socket closes is reset by the kernel, as with any server), then every request
  // written and the appliance closed at once
  let accepted = 0;
  const allAccepted = new Promise<void>((resolve) =>
    running.server.on("connection", () => {
      if (++accepted === 16) resolve();
    }),
  );
  const sockets = await Promise.all(
    Array.from(
      { length: 16 },
      () =>
        new Promise<net.Socket>((resolve) => {
          const s = net.connect(running.port, "127.0.0.1", () => resolve(s));
          s.on("error", () => undefined);
        }),
    ),
  );
  const answers = sockets.map(
    (s) =>
      new Promise<number>((resolve) => {
        let raw = "";
        s.on("data", (d: Buffer) => {
          raw += d.toString("latin1");
          const a = wholeAnswers(raw)[0];
          if (a) resolve(a.status);
        });
        s.on("close", () => resolve(wholeAnswers(raw)[0]?.status ?? 0));
      }),
  );
  await allAccepted;
  for (const s of sockets) s.write(request);
  await running.close();
  const statuses = await Promise.all(answers);
  t.deepEqual(statuses, Array(16).fill(201), "all 16 answered 201, none cut off");
  for (const s of sockets) s.destroy();
  await cleanup();
});
