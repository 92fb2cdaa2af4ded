// The Dockerfile, .dockerignore and compose.yaml, checked without a Docker daemon: the
// Dockerfile's stages are parsed (non-root final user, the addon built in the build stage
// and copied, production dependencies only, every COPY source present and not ignored);
// compose.yaml is parsed with the yaml package (every variable it sets is one the server
// reads, and with test secrets filled in, the server's own configuration loader accepts it;
// written paths on volumes under a read-only root; ports on loopback only).
import test from "tape";
import { readFileSync, statSync } from "node:fs";
import { dirname, join, posix } from "node:path";
import { parse as parseYaml } from "yaml";
import { exists, loadFor, ROOT, unknownVars, type Role } from "./files.js";

interface Instr {
  op: string;
  args: string;
  line: number;
}
interface Stage {
  name: string | null;
  image: string;
  instrs: Instr[];
}

/** Dockerfile instructions: comments dropped, continuation lines joined, ARG defaults substituted in FROM. */
function parseDockerfile(text: string): { args: Record<string, string>; stages: Stage[] } {
  const instrs: Instr[] = [];
  let buf = "";
  let start = 0;
  text.split("\n").forEach((raw, i) => {
    const line = raw.trimEnd();
    if (buf === "" && (line.trim() === "" || line.trimStart().startsWith("#"))) return;
    if (buf !== "" && line.trimStart().startsWith("#")) return; // comment inside a continuation
    if (buf === "") start = i + 1;
    if (line.endsWith("\\")) {
      buf += line.slice(0, -1) + " ";
      return;
    }
    buf += line;
    const m = /^\s*([A-Za-z]+)\s+([\s\S]*)$/.exec(buf);
    if (!m) throw new Error(`line ${start}: not an instruction: ${buf}`);
    instrs.push({ op: m[1]!.toUpperCase(), args: m[2]!.trim(), line: start });
    buf = "";
  });
  const args: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const ins of instrs) {
    if (ins.op === "FROM") {
      const m = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m) throw new Error(`line ${ins.line}: bad FROM`);
      const image = m[1]!.replace(/\$\{(\w+)\}/g, (_, n: string) => args[n] ?? "");
      stages.push({ name: m[2] ?? null, image, instrs: [] });
    } else if (stages.length === 0) {
      if (ins.op !== "ARG") throw new Error(`line ${ins.line}: ${ins.op} before the first FROM`);
      const [k, v] = ins.args.split("=");
      args[k!] = v ?? "";
    } else stages.at(-1)!.instrs.push(ins);
  }
  return { args, stages };
}

/** .dockerignore patterns (the simple forms it uses: names, `dir`, `*.ext`), as a predicate. */
function dockerIgnore(text: string): (rel: string) => boolean {
  const pats = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"));
  for (const p of pats) if (p.startsWith("!") || p.includes("**")) throw new Error(`pattern ${p} is not handled by this check`);
  const res = pats.map(
    (p) =>
      new RegExp(
        "^" +
          p
            .replace(/[.+^${}()|[\]\\]/g, "\\$&")
            .replace(/\*/g, "[^/]*")
            .replace(/\?/g, "[^/]") +
          "(/.*)?$",
      ),
  );
  return (rel) => res.some((re) => re.test(rel) || re.test(posix.basename(rel)));
}

const dockerfile = parseDockerfile(readFileSync(join(ROOT, "Dockerfile"), "utf8"));
const ignored = dockerIgnore(readFileSync(join(ROOT, ".dockerignore"), "utf8"));
const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { bin: Record<string, string>; scripts: Record<string, string> };

test("Dockerfile: two stages; the final one runs as a non-root user it creates", async (t) => {
  const { stages } = dockerfile;
  t.ok(stages.length >= 2, `${stages.length} stages`);
  const build = stages.find((s) => s.name === "build");
  t.ok(build, "a stage named build");
  const final = stages.at(-1)!;
  t.notEqual(final, build, "the final stage is not the build stage");
  t.ok(final.image.startsWith("node:20"), `final image ${final.image} is Node 20`);
  const users = final.instrs.filter((i) => i.op === "USER");
  t.ok(users.length > 0, "the final stage sets USER");
  const user = users.at(-1)!;
  const name = user.args.split(":")[0]!;
  t.notOk(["root", "0"].includes(name), `USER ${user.args} is not root`);
  const lastRun = Math.max(...final.instrs.filter((i) => i.op === "RUN").map((i) => i.line));
  t.ok(user.line > lastRun, "USER comes after the last RUN, so nothing at run time is root");
  t.ok(
    final.instrs.some((i) => i.op === "RUN" && new RegExp(`useradd\\b.*\\b${name}\\b`).test(i.args)),
    `the stage creates user ${name}`,
  );
  const ep = final.instrs.find((i) => i.op === "ENTRYPOINT");
  t.ok(ep, "an ENTRYPOINT");
  const argv = JSON.parse(ep!.args) as string[];
  t.equal(argv[0], "node", "exec form, node");
  t.equal(argv[1], `/app/${pkg.bin.svc!.replace(/^\.\//, "")}`, "runs the svc program of package.json's bin");
});

test("Dockerfile: the native addon and dist/ are built in the build stage and copied; production dependencies only", async (t) => {
  const { stages } = dockerfile;
  const build = stages.find((s) => s.name === "build")!;
  const final = stages.at(-1)!;
  const buildRun = build.instrs
    .filter((i) => i.op === "RUN")
    .map((i) => i.args)
    .join("\n");
  t.match(buildRun, /npm ci\b(?![^\n]*--ignore-scripts)/, "the build stage's npm ci runs the install scripts");
  t.match(pkg.scripts.install ?? "", /build-native/, "package.json's install script is the addon build");
  t.match(pkg.scripts.prepare ?? "", /tsc\b/, "and prepare compiles dist/");
  t.match(buildRun, /test -f build\/Release\/svc_tensor\.node/, "the build fails when no addon came out");
  t.match(buildRun, /cmake/, "CMake is installed for the addon");
  const native = readFileSync(join(ROOT, "lib/native.ts"), "utf8");
  t.match(native, /"build", "Release", "svc_tensor\.node"/, "lib/native.ts loads build/Release/svc_tensor.node");
  const workdir = final.instrs.filter((i) => i.op === "WORKDIR").at(-1)!.args;
  const copies = final.instrs.filter((i) => i.op === "COPY");
  const fromBuild = copies.filter((c) => c.args.startsWith("--from=build "));
  const dests = fromBuild.map((c) => posix.resolve(workdir, c.args.split(/\s+/).at(-1)!));
  t.ok(dests.includes(posix.join(workdir, "build/Release/svc_tensor.node")), "the addon lands at <app>/build/Release/svc_tensor.node");
  t.ok(dests.includes(posix.join(workdir, "dist")), "dist/ is copied");
  const finalRun = final.instrs
    .filter((i) => i.op === "RUN")
    .map((i) => i.args)
    .join("\n");
  t.match(finalRun, /npm ci --omit=dev --ignore-scripts/, "the final stage installs production dependencies only, without building");
  const fromContext = copies.filter((c) => !c.args.startsWith("--from="));
  t.deepEqual(
    fromContext.flatMap((c) => c.args.split(/\s+/).slice(0, -1)).sort(),
    ["package-lock.json", "package.json"],
    "nothing else from the build context reaches the final stage",
  );
  for (const c of copies.filter((c) => c.args.startsWith("--from="))) {
    const from = /^--from=(\S+)/.exec(c.args)![1]!;
    t.ok(
      stages.slice(0, -1).some((s) => s.name === from),
      `COPY --from=${from} names an earlier stage`,
    );
  }
});

test("Dockerfile: every COPY source exists and is not excluded by .dockerignore; the build copies what it compiles", async (t) => {
  const build = dockerfile.stages.find((s) => s.name === "build")!;
  const sources: string[] = [];
  for (const s of dockerfile.stages) {
    for (const c of s.instrs.filter((i) => i.op === "COPY" && !i.args.startsWith("--from="))) sources.push(...c.args.split(/\s+/).slice(0, -1));
  }
  t.ok(sources.length > 5, `${sources.length} COPY sources`);
  for (const src of sources) {
    t.ok(exists(src), `${src} exists`);
    t.notOk(ignored(src), `${src} is not excluded by .dockerignore`);
  }
  const built = build.instrs.filter((i) => i.op === "COPY").flatMap((c) => c.args.split(/\s+/).slice(0, -1));
  const tsconfig = JSON.parse(readFileSync(join(ROOT, "tsconfig.json"), "utf8")) as { include: string[] };
  for (const inc of tsconfig.include) t.ok(built.includes(inc.split("/")[0]!), `tsconfig's ${inc} is copied into the build stage`);
  const cmake = readFileSync(join(ROOT, "CMakeLists.txt"), "utf8");
  for (const f of new Set(cmake.match(/native\/[\w/]+\.(cc|cu)/g) ?? [])) t.ok(exists(f) && built.includes(f.split("/")[0]!), `${f} is in the build context`);
  for (const script of ["scripts/build-native.mjs", "scripts/chmod-bin.mjs"]) t.ok(built.includes("scripts") && exists(script), `${script} is copied`);
  for (const must of ["node_modules", "build", "dist", "svc-data", ".git", "service.key", "x.pem"]) t.ok(ignored(must), `.dockerignore excludes ${must}`);
});

test("Dockerfile: every SVC_* variable it sets is read by a server, and the paths are the ones it prepares", async (t) => {
  const final = dockerfile.stages.at(-1)!;
  const env: Record<string, string> = {};
  for (const e of final.instrs.filter((i) => i.op === "ENV")) for (const m of e.args.matchAll(/(\w+)=(\S+)/g)) env[m[1]!] = m[2]!;
  t.ok(Object.keys(env).length >= 5, `${Object.keys(env).length} variables`);
  for (const k of Object.keys(env).filter((k) => k.startsWith("SVC_"))) {
    const role: Role = k.startsWith("SVC_ENGINE_") ? "engine" : k.startsWith("SVC_GATE_") ? "gateway" : "provenance";
    t.deepEqual(unknownVars(role, { [k]: env[k]! }), [], `${k} is read by the ${role}`);
  }
  const run = final.instrs
    .filter((i) => i.op === "RUN")
    .map((i) => i.args)
    .join("\n");
  for (const dir of [dirname(env.SVC_ENGINE_DATA_DIR!), dirname(env.SVC_GATE_AUDIT_LOG_PATH!), env.SVC_PROVENANCE_HOME!]) {
    t.ok(run.includes(`mkdir -p`) && run.includes(dir) && /chmod 0700/.test(run), `${dir} is created, owned by the user and 0700`);
  }
});

// ---------------- compose.yaml ----------------

type Service = {
  image?: string;
  build?: unknown;
  command?: string[];
  entrypoint?: string[];
  environment?: Record<string, string | number>;
  ports?: string[];
  volumes?: string[];
  profiles?: string[];
  read_only?: boolean;
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
};
const compose = parseYaml(readFileSync(join(ROOT, "compose.yaml"), "utf8"), { merge: true }) as {
  services: Record<string, Service>;
  volumes: Record<string, unknown>;
};
const SECRETS: Record<string, string> = { SVC_SERVICE_KEY: "k".repeat(40), SVC_METRICS_TOKEN: "m".repeat(24), POSTGRES_PASSWORD: "p".repeat(20) };

/** Compose interpolation of ${VAR}, ${VAR:-default} and ${VAR:?error} with `vars`. */
function interpolate(s: string, vars: Record<string, string>): string {
  return s.replace(/\$\{(\w+)(?::([-?])([^}]*))?\}/g, (_, name: string, kind?: string, rest?: string) => {
    const v = vars[name];
    if (v !== undefined && v !== "") return v;
    if (kind === "?") throw new Error(`${name} is required: ${rest}`);
    return kind === "-" ? (rest ?? "") : "";
  });
}
const envOf = (svc: Service, vars = SECRETS): Record<string, string> =>
  Object.fromEntries(Object.entries(svc.environment ?? {}).map(([k, v]) => [k, interpolate(String(v), vars)]));
const roleOf = (svc: Service): Role | null =>
  svc.image !== "svc-tensor:local" ? null : svc.entrypoint?.join(" ").includes("svc-provenance") ? "provenance" : (svc.command?.[0] as Role);

test("compose.yaml: engine, gateway and Redis by default; provenance and PostgreSQL as profiles", async (t) => {
  const s = compose.services;
  for (const name of ["engine", "gateway", "redis"]) t.ok(s[name] && !s[name]!.profiles, `${name} runs by default`);
  t.deepEqual(s.provenance?.profiles, ["provenance"]);
  t.deepEqual(s.postgres?.profiles, ["postgres"]);
  t.equal(s.engine!.build, ".", "the engine service builds the Dockerfile here");
  t.ok(exists("Dockerfile"));
  t.equal(roleOf(s.engine!), "engine");
  t.equal(roleOf(s.gateway!), "gateway");
  t.equal(roleOf(s.provenance!), "provenance");
  t.equal(s.provenance!.entrypoint![1], `/app/${pkg.bin["svc-provenance"]!.replace(/^\.\//, "")}`, "the appliance's program of package.json's bin");
  for (const [name, svc] of Object.entries(s)) {
    for (const [dep, { condition }] of Object.entries(svc.depends_on ?? {})) {
      t.ok(s[dep], `${name} depends on ${dep}, a service`);
      if (condition === "service_healthy") t.ok(s[dep]?.healthcheck, `${dep} has the healthcheck ${name} waits for`);
    }
  }
  t.throws(() => envOf(s.engine!, {}), /SVC_SERVICE_KEY is required/, "no default service key: compose refuses to start without one");
});

test("compose.yaml: every variable is read by its server, and the server's loader accepts the values", async (t) => {
  for (const [name, svc] of Object.entries(compose.services)) {
    const role = roleOf(svc);
    if (!role) continue;
    const env = envOf(svc);
    t.deepEqual(unknownVars(role, env), [], `${name}: every variable is one the ${role} reads`);
    try {
      loadFor(role, env);
      t.pass(`${name}: the ${role}'s configuration loads`);
    } catch (e) {
      t.fail(`${name}: ${(e as Error).message}`);
    }
    // with no metrics token given, the empty value means "unset" to the servers that take one
    loadFor(role, envOf(svc, { SVC_SERVICE_KEY: SECRETS.SVC_SERVICE_KEY! }));
  }
  const engine = envOf(compose.services.engine!);
  const gate = envOf(compose.services.gateway!);
  t.equal(gate.SVC_GATE_ENGINE_URL, `http://engine:${engine.SVC_ENGINE_PORT}`, "the gateway reaches the engine service on its port");
  t.equal(gate.SVC_GATE_ENGINE_SERVICE_KEY, engine.SVC_ENGINE_API_KEYS, "one service key on both sides");
  t.equal(new URL(gate.SVC_GATE_REDIS_URL!).hostname, "redis", "the gateway uses the redis service");
  t.equal(gate.SVC_ENGINE_MAX_UPLOAD_BYTES, engine.SVC_ENGINE_MAX_UPLOAD_BYTES, "one upload limit on both sides");
  t.equal(engine.SVC_ENGINE_HOST, "0.0.0.0", "the engine listens on the compose network");
});

test("compose.yaml: loopback ports only; every path a server writes is on a volume under the read-only root", async (t) => {
  for (const [name, svc] of Object.entries(compose.services)) {
    for (const p of svc.ports ?? []) t.match(p, /^127\.0\.0\.1:\d+:\d+$/, `${name} publishes ${p} on the host's loopback only`);
    for (const v of svc.volumes ?? []) {
      const vol = v.split(":")[0]!;
      t.ok(vol in compose.volumes, `${name}: volume ${vol} is declared`);
    }
    const role = roleOf(svc);
    if (!role) continue;
    t.equal(svc.read_only, true, `${name}: read-only root file system`);
    const env = envOf(svc);
    const written =
      role === "engine"
        ? [env.SVC_ENGINE_DATA_DIR!]
        : role === "gateway"
          ? [env.SVC_GATE_DATA_DIR!, dirname(env.SVC_GATE_AUDIT_LOG_PATH!)]
          : [env.SVC_PROVENANCE_HOME!, dirname(env.SVC_PROVENANCE_CONFIG!)];
    const targets = (svc.volumes ?? []).map((v) => v.split(":")[1]!);
    for (const w of written)
      t.ok(
        targets.some((m) => w === m || w.startsWith(m + "/")),
        `${name}: ${w} is on a volume`,
      );
  }
  t.notOk(compose.services.redis!.ports, "Redis is not published");
  t.notOk(compose.services.engine!.ports, "the engine is reached through the gateway only");
});

test("deploy files are plain files", async (t) => {
  for (const f of ["Dockerfile", ".dockerignore", "compose.yaml"]) t.ok(statSync(join(ROOT, f)).isFile(), f);
});
