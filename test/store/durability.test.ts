// Concurrency across processes and crash safety: two processes writing the same key never
// lose or duplicate a version; a process killed with SIGKILL in the middle of a stream of
// puts leaves every acknowledged put readable and intact, nothing partial, no repair step.
// Store-only (not run through createClient, see harness.ts): a SIGKILLed writer and two
// processes sharing one LMDB directory are properties of the embedded store's process.
import test from "tape";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore } from "../../lib/store/index.js";
import { content } from "./fixtures/streamer.js";

const fixtures = new URL("./fixtures/", import.meta.url).pathname;
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "svc-dur-"));
  dirs.push(d);
  return d;
};

function run(script: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ["--import", "tsx", join(fixtures, script), ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    c.stdout.on("data", (d) => (out += d));
    c.stderr.on("data", (d) => (err += d));
    c.on("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`${script} exited ${code}: ${err}`))));
  });
}

test("two processes putting the same key: versions 1..2N, each exactly once", async (t) => {
  const dir = tmp();
  const N = 40;
  const [a, b] = await Promise.all([run("writer.ts", [dir, "shared", String(N), "a"]), run("writer.ts", [dir, "shared", String(N), "b"])]);
  const acks = [...a.trim().split("\n"), ...b.trim().split("\n")].map((l) => JSON.parse(l) as { version: number; tag: string; i: number });
  t.equal(acks.length, 2 * N, "every put acknowledged");
  const versions = acks.map((x) => x.version).sort((x, y) => x - y);
  t.deepEqual(
    versions,
    Array.from({ length: 2 * N }, (_, i) => i + 1),
    "versions 1..2N, no duplicates, no gaps",
  );
  const store = await createStore({ path: dir });
  const info = await store.get("ns", "shared");
  t.equal(info.latest_version, 2 * N, "latest version is 2N");
  t.equal(info.versions.length, 2 * N, "all versions kept");
  let ok = 0;
  for (const ack of acks) {
    const g = await store.get("ns", "shared", { version: ack.version });
    const d = await store.serve("ns", "shared", { version: ack.version });
    const want = Int32Array.from({ length: 256 }, (_, j) => j * 31 + ack.i);
    if (
      g.metadata.tag === ack.tag &&
      g.metadata.i === ack.i &&
      (g.metadata[`f${ack.tag}${ack.i % 7}`] as { n: number })?.n === ack.i &&
      Buffer.compare(Buffer.from(d.data.buffer, d.data.byteOffset, d.data.byteLength), Buffer.from(want.buffer)) === 0
    )
      ok++;
  }
  t.equal(ok, 2 * N, "each version holds the data and metadata its writer acknowledged");
  await store.close();
});

test("SIGKILL in the middle of a stream of puts: every acknowledged put survives intact", async (t) => {
  const dir = tmp();
  const child = spawn(process.execPath, ["--import", "tsx", join(fixtures, "streamer.ts"), dir], { stdio: ["ignore", "pipe", "pipe"] });
  const acks: { key: string; version: number; sha: string }[] = [];
  let buf = "";
  await new Promise<void>((resolve) => {
    child.stdout.on("data", (d: Buffer) => {
      buf += d;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const [, key, v, sha] = buf.slice(0, nl).split(" ") as [string, string, string, string];
        buf = buf.slice(nl + 1);
        acks.push({ key, version: Number(v), sha });
        if (acks.length === 60) child.kill("SIGKILL");
      }
    });
    child.on("close", () => resolve());
  });
  t.equal(child.signalCode, "SIGKILL", "the writer was killed, not finished");
  t.ok(acks.length >= 60, `${acks.length} puts acknowledged before the kill`);
  // reopen: no repair step
  const store = await createStore({ path: dir });
  let intact = 0;
  for (const a of acks) {
    const d = await store.serve("ns", a.key, { version: a.version });
    if (
      createHash("sha256")
        .update(Buffer.from(d.data.buffer, d.data.byteOffset, d.data.byteLength))
        .digest("hex") === a.sha
    )
      intact++;
  }
  t.equal(intact, acks.length, "every acknowledged version reads back with its sha256");
  // every version present at all (acknowledged or committed just before the kill) is whole
  let whole = 0;
  let total = 0;
  for (const item of (await store.list("ns")).keys) {
    for (const v of (await store.get("ns", item.key)).versions) {
      total++;
      const d = await store.serve("ns", item.key, { version: v });
      const want = content(item.key, v);
      if (Buffer.compare(Buffer.from(d.data.buffer, d.data.byteOffset, d.data.byteLength), Buffer.from(want.buffer)) === 0) whole++;
    }
  }
  t.ok(total >= acks.length, `${total} versions present`);
  t.equal(whole, total, "no partial or corrupted version");
  const next = await store.put("ns", "k0", Int32Array.from([1, 2]), { shape: [2] });
  t.ok(next.version > 0, "the reopened store accepts writes");
  await store.close();
});

test.onFinish(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
