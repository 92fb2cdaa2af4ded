// `svc up`'s safe defaults, on a real process: the gateway listens on 127.0.0.1 only unless
// --host says otherwise (and then says it is exposed); per-request log lines go to
// DIR/engine.log, not the terminal; DIR is 0700 and a service key file readable by others is
// warned about; the Ready hint names `npx svc` and the --data DIR it was started with.
import test from "tape";
import { existsSync, readFileSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readyHint } from "../../bin/cli/up.js";
import { startUp, stopUp, type Up, killUp } from "./up-process.js";

/** Local addresses (hex, as in /proc/net/tcp{,6}) of the sockets listening on `port`. */
function listeners(port: number): string[] {
  const out: string[] = [];
  for (const f of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(f)) continue;
    for (const line of readFileSync(f, "utf8").split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 4 || cols[3] !== "0A") continue; // 0A: LISTEN
      const [addr, p] = cols[1]!.split(":");
      if (parseInt(p!, 16) === port) out.push(addr!);
    }
  }
  return out.sort();
}

const portOf = (url: string) => Number(new URL(url).port);

test("svc up: the gateway and the engine listen on 127.0.0.1 only by default; no exposure line", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-host-"));
  let up: Up | null = null;
  try {
    up = await startUp(["--data", join(dir, "d")]);
    if (!existsSync("/proc/net/tcp")) {
      t.skip("no /proc/net/tcp on this system");
      return;
    }
    t.deepEqual(listeners(portOf(up.gateway)), ["0100007F"], "gateway: one listening socket, on 127.0.0.1");
    t.deepEqual(listeners(portOf(up.engine)), ["0100007F"], "engine: one listening socket, on 127.0.0.1");
    t.doesNotMatch(up.out, /exposed/, "no exposure line");
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up --host 0.0.0.0: the gateway listens on every interface and says it is exposed; the engine stays on loopback", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-host-"));
  let up: Up | null = null;
  try {
    up = await startUp(["--data", join(dir, "d"), "--host", "0.0.0.0"]);
    t.match(
      up.out,
      new RegExp(`^The gateway is exposed: it listens on 0\\.0\\.0\\.0:${portOf(up.gateway)}, reachable from other machines`, "m"),
      "start-up line says it is exposed",
    );
    if (existsSync("/proc/net/tcp")) {
      t.deepEqual(listeners(portOf(up.gateway)), ["00000000"], "gateway on 0.0.0.0");
      t.deepEqual(listeners(portOf(up.engine)), ["0100007F"], "engine still on 127.0.0.1");
    }
    const h = await fetch(`${up.gateway}/health`);
    t.equal(h.status, 200, "the gateway answers");
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up: bad --host and --log-level are usage errors (exit 2, one sentence)", async (t) => {
  const { svc } = await import("./helpers.js");
  const a = await svc(["up", "--host", "example.com"]);
  t.equal(a.code, 2, "exit 2");
  t.match(a.err, /^svc: --host must be an IP address such as 127\.0\.0\.1 or 0\.0\.0\.0, not 'example\.com'\.\n/, a.err.trim());
  const b = await svc(["up", "--log-level", "loud"]);
  t.equal(b.code, 2, "exit 2");
  t.match(b.err, /^svc: --log-level must be one of debug, info, warn, error, silent\.\n/, b.err.trim());
});

test("svc up: request log lines go to DIR/engine.log (0600), not to the terminal; DIR is 0700", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-log-"));
  const data = join(dir, "d");
  let up: Up | null = null;
  try {
    // SVC_ENGINE_DEVICE=cuda without a device: the engine logs a warning at start-up
    const noDevice = (await import("../../lib/tt.js")).backend().cuda_device === null;
    up = await startUp(["--data", data], noDevice ? { SVC_ENGINE_DEVICE: "cuda" } : {});
    if (noDevice) t.match(up.err, /^\{"ts":"[^"]+","level":"warn","msg":"gpu unavailable"/m, "a warning reaches the terminal (standard error)");
    t.equal((await stat(data)).mode & 0o777, 0o700, "the data directory is 0700");
    t.match(up.out, new RegExp(`^log:     ${join(data, "engine.log").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`, "m"), "the log file is named at start-up");
    for (let i = 0; i < 3; i++) t.equal((await fetch(`${up.engine}/health`)).status, 200, "engine request");
    const key = (await readFile(join(data, "service.key"), "utf8")).trim();
    const r = await fetch(`${up.engine}/v1/list/default`, { headers: { authorization: `Bearer ${key}`, "x-svc-tenant": "acme" } });
    t.equal(r.status, 200, "an authenticated engine request");
    const log = join(data, "engine.log");
    const deadline = Date.now() + 60_000;
    let lines: Array<Record<string, unknown>> = [];
    while (Date.now() < deadline) {
      lines = (await readFile(log, "utf8"))
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      if (lines.filter((l) => l.msg === "request").length >= 4) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const reqs = lines.filter((l) => l.msg === "request");
    t.equal(reqs.length, 4, "four request lines in DIR/engine.log");
    t.deepEqual(
      reqs.map((l) => [l.path, l.status]),
      [
        ["/health", 200],
        ["/health", 200],
        ["/health", 200],
        ["/v1/list/default", 200],
      ],
      "paths and statuses",
    );
    t.notOk(readFileSync(log, "utf8").includes(key), "the service key is not in the log");
    t.equal((await stat(log)).mode & 0o777, 0o600, "engine.log is 0600");
    t.doesNotMatch(up.out + up.err, /"msg":"request"/, "no request line on the terminal");
    if (noDevice)
      t.ok(
        lines.some((l) => l.level === "warn" && l.msg === "gpu unavailable"),
        "the warning is in the log file too",
      );
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up: a service key file readable by group or others is warned about at start-up; a 0600 one is not", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-key-"));
  const data = join(dir, "d");
  let up: Up | null = null;
  try {
    await mkdir(data, { mode: 0o700 });
    const file = join(data, "service.key");
    await writeFile(file, "k".repeat(64) + "\n");
    await chmod(file, 0o644);
    up = await startUp(["--data", data]);
    t.match(
      up.err,
      new RegExp(
        `svc up: warning: the service key file ${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} is readable by group or others \\(mode 644\\); run 'chmod 600 `,
      ),
      up.err.trim(),
    );
    t.equal(await stopUp(up), 0, "exit 0");
    await chmod(file, 0o600);
    up = await startUp(["--data", data]);
    t.doesNotMatch(up.err, /warning/, "no warning for 0600");
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up: the Ready hint is a command that works as typed: npx svc, and --data DIR / SVC_GATE_URL when not the defaults", async (t) => {
  t.equal(readyHint("http://127.0.0.1:8080", join(process.cwd(), "svc-data")), "npx svc tenant create NAME", "defaults: nothing extra");
  t.equal(
    readyHint("http://127.0.0.1:9090", "/srv/svc"),
    "SVC_GATE_URL=http://127.0.0.1:9090 npx svc tenant create NAME --data /srv/svc",
    "other port and directory",
  );
  t.equal(readyHint("http://127.0.0.1:8080", "/tmp/my data"), "npx svc tenant create NAME --data '/tmp/my data'", "a directory with a space is quoted");
  const dir = await mkdtemp(join(tmpdir(), "svc-up-hint-"));
  let up: Up | null = null;
  try {
    up = await startUp(["--data", join(dir, "d")]);
    t.match(
      up.out,
      new RegExp(
        `^Ready\\. Create a tenant with: SVC_GATE_URL=${up.gateway.replace(/\./g, "\\.")} npx svc tenant create NAME --data ${join(dir, "d").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`,
        "m",
      ),
      "printed by a real start-up",
    );
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});
