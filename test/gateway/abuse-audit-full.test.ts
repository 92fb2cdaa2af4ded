// A full audit disk (ENOSPC simulated by the sink's injectable append): a write the engine
// already committed is answered truthfully and the failure logged; after that, requests that
// change data are refused 503 + Retry-After without reaching the engine, reads are served, and
// the first record that can be written again reopens writes. A write cut short leaves a torn
// line that never merges with the next record.
import test from "tape";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FileAuditSink } from "../../server/gateway/audit.js";
import { call, createTenant, startFakeEngine, startTestGateway } from "./helpers.js";

const enospc = () => Object.assign(new Error("no space left on device"), { code: "ENOSPC" });

test("audit disk full: writes refused with 503, reads served, writes back once a record is written", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-audit-full-"));
  let full = false;
  const audit = await FileAuditSink.open(join(dir, "audit.jsonl"), (fd, buf, off) => {
    if (full) throw enospc();
    return writeSync(fd, buf, off);
  });
  const engine = await startFakeEngine();
  const logged: Array<Record<string, unknown>> = [];
  const g = await startTestGateway(engine.url, { audit: audit as never, log: (e) => logged.push(e) });
  const key = await createTenant(g.url, { tenant_id: "acme" });
  const put = () => call(g.url, "/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "AAAA" } });

  full = true;
  const first = await put();
  t.equal(first.status, 201, "the put the engine committed is answered as committed");
  t.equal(logged.at(-1)?.msg, "internal error in the audit log", "the lost record is reported");
  t.equal(audit.writable, false, "the sink knows it cannot write");
  engine.seen.length = 0;
  const refused = await put();
  t.equal(refused.status, 503, "the next write is refused");
  t.equal(refused.json.code, "overloaded");
  t.equal(
    refused.json.detail,
    "The audit log cannot be written (its disk is full), so requests that change data are refused; reads are served; retry after 10 seconds.",
    "the detail says why, from the failed write's code",
  );
  t.equal(refused.headers.get("retry-after"), "10", "Retry-After");
  const del = await call(g.url, "/v1/delete/default/k", { key, method: "DELETE" });
  t.equal(del.status, 503, "a delete too");
  t.equal(engine.seen.length, 0, "neither reached the engine");
  const get = await call(g.url, "/v1/get/default/k", { key });
  t.equal(get.status, 200, "a read is served");
  const search = await call(g.url, "/v1/search", { key, body: { namespace: "default", filter: {} } });
  t.equal(search.status, 200, "a search is served");

  full = false;
  t.equal((await call(g.url, "/v1/get/default/k", { key })).status, 200, "a read whose record is written...");
  t.equal(audit.writable, true, "...reopens the log");
  t.equal((await put()).status, 201, "writes are accepted again");
  await g.close();
  await engine.close();
  const lines = (await readFile(join(dir, "audit.jsonl"), "utf8"))
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  t.deepEqual(
    lines.filter((l) => l.path.startsWith("/v1/")).map((l) => `${l.method} ${l.status}`),
    ["GET 200", "POST 201"],
    "the log holds the records written after the disk had room",
  );
  await audit.close();
  await rm(dir, { recursive: true, force: true });
});

test("a record cut short by a full disk stays apart from the next one", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-audit-torn-"));
  let mode: "ok" | "torn" = "ok";
  const sink = await FileAuditSink.open(join(dir, "a.jsonl"), (fd, buf, off) => {
    if (mode === "torn") {
      mode = "ok";
      writeSync(fd, buf, off, 10);
      throw enospc();
    }
    return writeSync(fd, buf, off);
  });
  const rec = (n: number) => ({
    ts: "2026-01-01T00:00:00.000Z",
    tenant_id: "t",
    method: "GET",
    path: `/v1/get/default/k${n}`,
    namespace: "default",
    status: 200,
    cus: 0.1,
    latency_ms: 1,
    request_id: String(n),
  });
  await sink.write(rec(1));
  mode = "torn";
  await sink.write(rec(2)).then(
    () => t.fail("should fail"),
    (e: Error) => t.match(e.message, /audit log cannot be written \(ENOSPC\)/, "the writer sees the failure"),
  );
  await sink.write(rec(3));
  await sink.close();
  const lines = (await readFile(join(dir, "a.jsonl"), "utf8")).split("\n").filter(Boolean);
  t.equal(lines.length, 3, "three lines: a record, the torn one, a record");
  t.equal(JSON.parse(lines[0]!).request_id, "1");
  t.throws(() => JSON.parse(lines[1]!), "the torn line is not a record");
  t.equal(JSON.parse(lines[2]!).request_id, "3", "the next record is whole, on its own line");
  await rm(dir, { recursive: true, force: true });
});
