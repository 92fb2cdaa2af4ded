// A crash of the serving process (kill -9) in the middle of a stream of issuance requests:
// every receipt a client got back is in the durable chain after a restart, no serial is
// handed out twice, and the chain goes on from the durable head.
import test from "tape";
import { spawn, type ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { receiptHash } from "../../server/provenance/receipt.js";
import { post, sampleArtifact, tempDir } from "./helpers.js";

interface Serving {
  child: ChildProcess;
  url: string;
  stdout: () => string;
}

async function serve(env: NodeJS.ProcessEnv): Promise<Serving> {
  const child = spawn(process.execPath, ["--import", "tsx", "bin/svc-provenance.ts", "serve"], { env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d) => (stdout += d));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no listening line in 30 s")), 30_000);
    child.once("exit", () => reject(new Error(`the appliance exited: ${stderr.slice(-300)}`)));
    child.stderr!.on("data", (d) => {
      stderr += d;
      const m = /"msg":"listening".*"port":(\d+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
  });
  return { child, url: `http://127.0.0.1:${port}`, stdout: () => stdout };
}

/** Issues receipts on `loops` connections until the process dies; returns what was acknowledged. */
async function streamUntilKilled(s: Serving, key: string, loops: number, killAfter: number): Promise<any[]> {
  const acked: any[] = [];
  let dead = false;
  let killed = false;
  const exited = new Promise<void>((r) => s.child.once("exit", () => r()));
  const killer = (async () => {
    while (acked.length < killAfter && !dead) await new Promise((r) => setTimeout(r, 5));
    killed = true;
    s.child.kill("SIGKILL"); // while the other loops still have requests in flight
    await exited;
    dead = true;
  })();
  await Promise.all(
    Array.from({ length: loops }, async (_, l) => {
      for (let i = 0; !dead && i < 10_000; i++) {
        try {
          const r = await post(`${s.url}/v1/provenance/exact`, { artifact: sampleArtifact, claims: { loop: l, i } }, key);
          if (r.status === 201) acked.push(r.json);
          else if (r.status !== 500) throw new Error(`unexpected status ${r.status}`);
        } catch (e) {
          if (!killed) throw e; // only the kill may cut a request off
          await new Promise((r) => setTimeout(r, 5));
        }
      }
    }),
  );
  await killer;
  return acked;
}

async function chainLog(home: string): Promise<Array<{ serial: number; last_receipt_sha256: string }>> {
  const text = await readFile(join(home, "chain.log"), "utf8");
  return text
    .slice(0, text.lastIndexOf("\n") + 1)
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

test("kill -9 during a stream of issuance: every acknowledged receipt is in the chain after a restart", async (t) => {
  const { dir, cleanup } = await tempDir();
  const home = join(dir, "home");
  const env = { ...process.env, SVC_PROVENANCE_HOME: home, SVC_PROVENANCE_CONFIG: join(dir, "etc", "service.env"), SVC_PROVENANCE_PORT: "0" };
  let s = await serve(env);
  // the key line follows the listening line: waited for, not assumed to be there after a pause
  const keyLine = /^SVC_PROVENANCE_ADMIN_KEY=(\S+)$/m;
  for (const end = Date.now() + 30_000; !keyLine.test(s.stdout()) && Date.now() < end;) await new Promise((r) => setTimeout(r, 20));
  const key = keyLine.exec(s.stdout())?.[1];
  t.ok(key, "first boot printed the admin key");
  const all: any[] = [];
  for (const round of [1, 2]) {
    const acked = await streamUntilKilled(s, key!, 16, 150);
    t.ok(acked.length >= 150, `round ${round}: ${acked.length} receipts acknowledged before the kill`);
    all.push(...acked);
    const log = await chainLog(home);
    const maxAcked = Math.max(...acked.map((r) => r.serial));
    const durable = log[log.length - 1]!;
    t.ok(durable.serial >= maxAcked, `round ${round}: the durable head (${durable.serial}) is at or past the last acknowledged serial (${maxAcked})`);
    const bySerial = new Map(all.map((r) => [r.serial, r]));
    t.ok(
      log.every((l) => !bySerial.has(l.serial) || receiptHash(bySerial.get(l.serial)) === l.last_receipt_sha256),
      `round ${round}: each logged head that a client holds is that receipt's hash`,
    );
    s = await serve(env);
    const next = await post(`${s.url}/v1/provenance/exact`, { artifact: sampleArtifact, claims: { after: round } }, key);
    t.equal(next.status, 201, `round ${round}: the restarted appliance issues`);
    t.equal(next.json.serial, durable.serial + 1, `round ${round}: the next serial follows the durable head`);
    t.equal(next.json.previous_receipt_sha256, durable.last_receipt_sha256, `round ${round}: and chains to it`);
    if (durable.serial === maxAcked) {
      t.equal(next.json.previous_receipt_sha256, receiptHash(bySerial.get(maxAcked)), `round ${round}: which is the last acknowledged receipt`);
    }
    all.push(next.json);
  }
  const serials = all.map((r) => r.serial);
  t.equal(new Set(serials).size, serials.length, `${serials.length} acknowledged receipts, no serial twice`);
  const sorted = [...all].sort((a, b) => a.serial - b.serial);
  let linked = 0;
  let broken = 0;
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i].serial !== sorted[i - 1].serial + 1) continue; // a durable batch nobody got back lies between
    if (sorted[i].previous_receipt_sha256 === receiptHash(sorted[i - 1])) linked++;
    else broken++;
  }
  t.equal(broken, 0, `every consecutive pair of acknowledged receipts is linked (${linked} pairs)`);
  for (const r of [sorted[0], sorted[sorted.length - 1]]) {
    const v = await post(`${s.url}/v1/provenance/verify`, { receipt: r });
    t.equal(v.json.verdict, "valid", `serial ${r.serial} verifies`);
  }
  const exit = new Promise((r) => s.child.once("exit", r));
  s.child.kill("SIGTERM");
  await exit;
  await cleanup();
});
