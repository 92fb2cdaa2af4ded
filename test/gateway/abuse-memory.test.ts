// Memory: a real gateway process with a 100 MiB budget for request bodies receives eight
// concurrent ~42 MiB JSON puts; those past the budget get 503 + Retry-After and the process's
// peak RSS (VmHWM) stays bounded. Refusals that can be decided before the body (a tenant over
// its rate limit, a foreign namespace in an octet-stream put's query, a body larger than the
// budget left) are answered after the headers, without waiting for the body (whose rest is then
// read and discarded, never held).
import test from "tape";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { admin, SERVICE_KEY, startFakeEngine } from "./helpers.js";
import { peakRss, rawRequest, spawnGateway, stopGateway } from "./abuse-env.js";

const MiB = 1024 * 1024;

test("concurrent large JSON bodies: held to the budget (503 + Retry-After past it), peak RSS bounded", async (t) => {
  const engine = await startFakeEngine();
  const dir = await mkdtemp(join(tmpdir(), "svc-mem-"));
  const gw = await spawnGateway({
    SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
    SVC_GATE_ENGINE_URL: engine.url,
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "0",
    SVC_GATE_DATA_DIR: join(dir, "gate"),
    SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    SVC_ENGINE_MAX_UPLOAD_BYTES: String(32 * MiB),
    SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT: String(100 * MiB),
  });
  const key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
  const base = await peakRss(gw.child.pid!);
  const body = Buffer.from(JSON.stringify({ namespace: "default", key: "big", data_b64: Buffer.alloc(30 * MiB, 7).toString("base64") }));
  // Raw TCP clients: a refused body is answered while it is still being sent, which fetch
  // reports as a failure rather than as the answer.
  const head = `POST /v1/put HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}`;
  const rs = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const r = await rawRequest(gw.url, head, [body], 0);
      return { status: r.status, retry: r.headers["retry-after"] ?? null, code: r.status >= 400 ? (JSON.parse(r.body) as { code: string }).code : "" };
    }),
  );
  const peak = await peakRss(gw.child.pid!);
  const stored = rs.filter((r) => r.status === 201).length;
  const refused = rs.filter((r) => r.status === 503 && r.code === "overloaded" && r.retry === "1").length;
  t.ok(stored >= 1, `${stored} of 8 stored`);
  t.equal(stored + refused, 8, `the other ${refused} refused with 503 overloaded and Retry-After: 1`);
  t.ok(refused >= 1, "the budget refused some");
  // Each body held costs about four times its size while it is parsed and validated; eight
  // at once would be ~1.4 GB above the base, the budget keeps it to two.
  t.ok(
    peak - base < 700 * MiB,
    `peak RSS ${Math.round(peak / MiB)} MiB, ${Math.round((peak - base) / MiB)} MiB above the ${Math.round(base / MiB)} MiB before`,
  );
  await stopGateway(gw);
  await rm(dir, { recursive: true, force: true });
  await engine.close();
});

test("refusals decided before the body are answered without reading it", async (t) => {
  const engine = await startFakeEngine();
  const dir = await mkdtemp(join(tmpdir(), "svc-mem-"));
  const gw = await spawnGateway({
    SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
    SVC_GATE_ENGINE_URL: engine.url,
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "0",
    SVC_GATE_DATA_DIR: join(dir, "gate"),
    SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    SVC_ENGINE_MAX_UPLOAD_BYTES: String(64 * MiB),
    SVC_GATE_MAX_BODY_BYTES_IN_FLIGHT: String(90 * MiB),
  });
  const limited = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "slow", plan: "enterprise", rate_limit: { requests: 1, window_s: 600 } })).json
    .api_key as string;
  const other = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "other" })).json.api_key as string;
  await fetch(gw.url + "/v1/list/default", { headers: { "x-api-key": limited } }).then((r) => r.text());
  // Headers announce 80 MiB; 1 KiB of it is sent and the client then waits.
  const head = (k: string, path: string, ct: string, len: number) =>
    `POST ${path} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${k}\r\nContent-Type: ${ct}\r\nContent-Length: ${len}`;
  const part = ["{" + " ".repeat(99)];
  const cases: Array<[string, string, number, string]> = [
    ["a tenant over its rate limit", head(limited, "/v1/put", "application/json", 80 * MiB), 429, "rate_limited"],
    [
      "an octet-stream put into a foreign namespace",
      head(other, "/v1/put?namespace=secret&key=k&dtype=uint8&shape=100000", "application/octet-stream", 100_000),
      403,
      "forbidden",
    ],
    ["a body larger than the budget left", head(other, "/v1/put", "application/json", 85 * MiB + 1), 503, "overloaded"],
  ];
  // Hold 10 MiB of the budget with a body that is still arriving, for the last case.
  const holder = rawRequest(
    gw.url,
    head(other, "/v1/put", "application/json", 10 * MiB),
    Array.from({ length: 40 }, () => " ".repeat(256 * 1024)),
    250,
  );
  await new Promise((r) => setTimeout(r, 500));
  for (const [name, h, status, code] of cases) {
    const r = await rawRequest(gw.url, h, part, 0);
    t.equal(r.status, status, `${name}: ${status}`);
    t.ok(r.ms < 5000, `answered after ${r.ms} ms, while the body was still owed (it is then discarded, never held)`);
    t.equal(JSON.parse(r.body).code, code);
  }
  const held = await holder;
  t.equal(held.status, 400, "the slow holder's own body (spaces) is not JSON: 400 once it is complete");
  await stopGateway(gw);
  await rm(dir, { recursive: true, force: true });
  await engine.close();
});
