// The appliance as it serves (startProvenance) answers what Node would answer bare with the
// JSON error body, over raw sockets: an HTTP/1.1 request without Host, a request line Node
// cannot parse, an Expect other than 100-continue, CONNECT; and pipelined requests are answered
// in the order sent.
import test from "tape";
import net from "node:net";
import { startProvenance } from "../../server/provenance/server.js";
import { wholeAnswers, type RawAnswer } from "../http/raw-answers.js";
import { configFor, tempDir } from "./helpers.js";

function send(port: number, text: string, count: number): Promise<{ answers: RawAnswer[]; raw: string }> {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    let raw = "";
    const done = () => {
      clearTimeout(ceiling);
      s.destroy();
      resolve({ answers: wholeAnswers(raw), raw });
    };
    const ceiling = setTimeout(done, 30_000);
    s.on("data", (d: Buffer) => {
      raw += d.toString("latin1");
      if (wholeAnswers(raw).length >= count) done();
    });
    s.on("error", () => undefined);
    s.on("close", done);
    s.write(text);
  });
}

test("the appliance: Node's bare answers become the JSON error body; pipelined requests in order", async (t) => {
  const { dir, cleanup } = await tempDir();
  const running = await startProvenance(configFor(dir, { SVC_PROVENANCE_BACKEND: "noble" }), { log: () => undefined });
  try {
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
  } finally {
    await running.close();
    await cleanup();
  }
});
