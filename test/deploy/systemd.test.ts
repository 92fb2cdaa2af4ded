// The systemd units of deploy/systemd: hardening options, a non-root user, every SVC_*
// variable one the server reads (and the values its loader accepts), every path the server
// writes inside the unit's StateDirectory/LogsDirectory (ProtectSystem=strict makes the rest
// read-only), and `systemd-analyze verify` when it is installed.
import test from "tape";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { loadFor, ROOT, unknownVars, type Role } from "./files.js";

type Unit = Record<string, Record<string, string[]>>;

/** A unit file as section -> key -> values (a key may repeat); continuation lines joined. */
function parseUnit(text: string): Unit {
  const out: Unit = {};
  let section = "";
  let pending = "";
  for (const raw of text.split("\n")) {
    const line = pending + raw.trim();
    pending = "";
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    if (line.endsWith("\\")) {
      pending = line.slice(0, -1) + " ";
      continue;
    }
    const sec = /^\[(\w+)\]$/.exec(line);
    if (sec) {
      section = sec[1]!;
      out[section] ??= {};
      continue;
    }
    const eq = line.indexOf("=");
    if (!section || eq < 1) throw new Error(`not a unit line: ${line}`);
    (out[section]![line.slice(0, eq)] ??= []).push(line.slice(eq + 1));
  }
  return out;
}

const UNITS: Record<string, { role: Role; bin: string }> = {
  "svc-engine.service": { role: "engine", bin: "svc" },
  "svc-gateway.service": { role: "gateway", bin: "svc" },
  "svc-provenance.service": { role: "provenance", bin: "svc-provenance" },
};
const DIR = join(ROOT, "deploy/systemd");
const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { bin: Record<string, string> };
const one = (u: Unit, key: string): string | undefined => u.Service?.[key]?.at(-1);

const HARDENING: Record<string, string> = {
  NoNewPrivileges: "yes",
  ProtectSystem: "strict",
  ProtectHome: "yes",
  PrivateTmp: "yes",
  PrivateDevices: "yes",
  ProtectKernelTunables: "yes",
  ProtectKernelModules: "yes",
  ProtectControlGroups: "yes",
  RestrictSUIDSGID: "yes",
  RestrictNamespaces: "yes",
  LockPersonality: "yes",
  UMask: "0077",
  CapabilityBoundingSet: "",
  AmbientCapabilities: "",
  SystemCallArchitectures: "native",
  SystemCallFilter: "@system-service",
};

for (const [file, { role, bin }] of Object.entries(UNITS)) {
  const u = parseUnit(readFileSync(join(DIR, file), "utf8"));

  test(`${file}: a non-root user, the hardening options, the right program`, async (t) => {
    t.ok(u.Unit && u.Service && u.Install, "Unit, Service and Install sections");
    t.equal(one(u, "User"), "svc", "runs as user svc");
    t.notOk(["root", "0"].includes(one(u, "Group") ?? ""), "not group root");
    for (const [k, v] of Object.entries(HARDENING)) t.equal(one(u, k), v, `${k}=${v}`);
    t.notOk(u.Service?.MemoryDenyWriteExecute, "no MemoryDenyWriteExecute (V8 needs writable executable memory)");
    t.ok(one(u, "StateDirectory"), "a StateDirectory");
    t.equal(one(u, "StateDirectoryMode"), "0700");
    t.equal(u.Install?.WantedBy?.[0], "multi-user.target");
    const exec = one(u, "ExecStart")!.split(/\s+/);
    t.equal(exec[0], "/usr/bin/node");
    t.equal(exec[1], `/opt/svc-tensor/${pkg.bin[bin]!.replace(/^\.\//, "")}`, `runs ${bin} of package.json's bin`);
    t.equal(exec[2], role === "provenance" ? "serve" : role, `the ${role} command`);
  });

  test(`${file}: every variable is read by the ${role}; the paths it writes are writable under ProtectSystem=strict`, async (t) => {
    const env: Record<string, string> = {};
    for (const e of u.Service?.Environment ?? []) {
      const m = /^"?(\w+)=(.*?)"?$/.exec(e);
      t.ok(m, `Environment=${e} is NAME=value`);
      env[m![1]!] = m![2]!;
    }
    t.deepEqual(unknownVars(role, env), [], "no variable the server does not read");
    const secrets: Record<Role, Record<string, string>> = {
      engine: { SVC_ENGINE_API_KEYS: "k".repeat(40) },
      gateway: { SVC_GATE_ENGINE_SERVICE_KEY: "k".repeat(40) },
      provenance: {},
    };
    const full = { ...env, ...secrets[role] };
    if (role === "provenance") full.SVC_PROVENANCE_CONFIG = join(tmpdir(), "svc-units-no-such-file.env"); // the loader reads it
    try {
      loadFor(role, full);
      t.pass("with the secrets of its EnvironmentFile, the configuration loads");
    } catch (e) {
      t.fail((e as Error).message);
    }
    if (role !== "provenance") t.ok(u.Service?.EnvironmentFile?.[0]?.startsWith("/etc/svc-tensor/"), "secrets from a file under /etc/svc-tensor");
    const writable = [...(u.Service?.StateDirectory ?? []).map((d) => `/var/lib/${d}`), ...(u.Service?.LogsDirectory ?? []).map((d) => `/var/log/${d}`)];
    const written =
      role === "engine"
        ? [env.SVC_ENGINE_DATA_DIR!]
        : role === "gateway"
          ? [env.SVC_GATE_DATA_DIR!, dirname(env.SVC_GATE_AUDIT_LOG_PATH!)]
          : [env.SVC_PROVENANCE_HOME!, dirname(env.SVC_PROVENANCE_CONFIG!)];
    for (const w of written) t.ok(w && writable.some((d) => w === d || w.startsWith(d + "/")), `${w} is in a directory systemd makes writable`);
    const host = env[role === "engine" ? "SVC_ENGINE_HOST" : role === "gateway" ? "SVC_GATE_HOST" : "SVC_PROVENANCE_HOST"];
    t.equal(host, "127.0.0.1", "listens on loopback (the reverse proxy is in front)");
    if (role === "gateway") t.equal(one(u, "ExecReload"), "/bin/kill -HUP $MAINPID", "reload sends SIGHUP (the gateway reopens its logs)");
  });
}

test("svc-compact.service and .timer: the engine's user, directory and settings, its hardening, once a day", async (t) => {
  const service = parseUnit(readFileSync(join(DIR, "svc-compact.service"), "utf8"));
  const timer = parseUnit(readFileSync(join(DIR, "svc-compact.timer"), "utf8"));
  const engine = parseUnit(readFileSync(join(DIR, "svc-engine.service"), "utf8"));
  t.equal(one(service, "Type"), "oneshot", "a oneshot service");
  t.equal(one(service, "User"), "svc", "runs as user svc, as the engine");
  for (const [k, v] of Object.entries(HARDENING)) t.equal(one(service, k), v, `${k}=${v}`);
  t.notOk(service.Service?.RemoveIPC, "no RemoveIPC: its end would remove the engine's IPC objects (the same user)");
  t.equal(one(service, "StateDirectory"), one(engine, "StateDirectory"), "the engine's StateDirectory");
  t.deepEqual(service.Service?.EnvironmentFile, engine.Service?.EnvironmentFile, "the engine's EnvironmentFile (SVC_ENGINE_STORE_URL for PostgreSQL)");
  const env: Record<string, string> = {};
  for (const e of service.Service?.Environment ?? []) {
    const [name, ...rest] = e.split("=");
    env[name!] = rest.join("=");
  }
  t.deepEqual(unknownVars("engine", env), [], "no variable the engine does not read");
  const engineDir = (engine.Service?.Environment ?? []).find((e) => e.startsWith("SVC_ENGINE_DATA_DIR="));
  t.equal(`SVC_ENGINE_DATA_DIR=${env.SVC_ENGINE_DATA_DIR}`, engineDir, "the engine's data directory");
  t.deepEqual(
    one(service, "ExecStart")!.split(/\s+/),
    ["/usr/bin/node", `/opt/svc-tensor/${pkg.bin.svc!.replace(/^\.\//, "")}`, "compact"],
    "runs svc compact",
  );
  t.equal(timer.Timer?.Unit?.[0], "svc-compact.service", "the timer starts it");
  t.equal(timer.Timer?.OnCalendar?.[0], "*-*-* 03:00:00", "every day");
  t.equal(timer.Timer?.Persistent?.[0], "true", "a run missed while the machine was off is made at boot");
  t.equal(timer.Install?.WantedBy?.[0], "timers.target", "enabled with the timers");
});

test("systemd-analyze verify on every unit", async (t) => {
  const probe = spawnSync("systemd-analyze", ["--version"], { encoding: "utf8" });
  if (probe.error || probe.status !== 0) {
    t.skip("systemd-analyze is not installed here (apt-get install systemd provides it), so the units are not verified by systemd.");
    return;
  }
  // copies whose program paths exist on this machine: this node and this checkout
  const tmp = mkdtempSync(join(tmpdir(), "svc-units-"));
  try {
    const files = [...Object.keys(UNITS), "svc-compact.service", "svc-compact.timer"].map((f) => {
      const text = readFileSync(join(DIR, f), "utf8").replaceAll("/usr/bin/node", process.execPath).replaceAll("/opt/svc-tensor/", ROOT);
      writeFileSync(join(tmp, f), text);
      return join(tmp, f);
    });
    const r = spawnSync("systemd-analyze", ["verify", ...files], { encoding: "utf8" });
    t.equal(r.status, 0, "exit 0");
    const complaints = `${r.stdout}${r.stderr}`.split("\n").filter((l) => l.includes("svc-"));
    t.deepEqual(complaints, [], "no warning about any unit");
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
