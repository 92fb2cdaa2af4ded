// Every place the programs write data or secrets by default is ignored by git, so that a
// user running the README in a checkout cannot commit a key, a store or a log by accident.
import test from "tape";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));

const PATHS = [
  "svc-data/service.key", // svc up's service key
  "svc-data/engine/data.mdb", // svc up's and the engine's default store
  "svc-data/gate/tenants.json", // the gateway's default data directory
  "svc-data/engine.log", // svc up's request log
  "svc-data/audit.jsonl", // svc up's audit log
  "svc-data/provenance/signing.key", // the README's provenance home
  "svc-data/provenance.env", // the README's provenance configuration
  "prov-data/keys/current.key",
  "prov-data.env",
  ".env",
  "server.pem",
  "some/dir/tls.key",
  "audit.jsonl", // an audit log written beside a checkout
];

test(".gitignore covers every default data and key location", (t) => {
  if (!existsSync(`${root}/.git`)) {
    t.skip("not a git checkout");
    t.end();
    return;
  }
  const r = spawnSync("git", ["check-ignore", "--no-index", "--stdin"], { cwd: root, input: PATHS.join("\n") + "\n", encoding: "utf8" });
  t.equal(r.status, 0, "git check-ignore ran");
  const ignored = new Set(r.stdout.split("\n").filter(Boolean));
  for (const p of PATHS) t.ok(ignored.has(p), `${p} is ignored`);
  for (const p of ["lib/store/index.ts", "test/fixtures/mldsa65/SHA256SUMS", "docs/api.md", "bench/results/gpu-h100.jsonl"]) {
    const c = spawnSync("git", ["check-ignore", "--no-index", "-q", p], { cwd: root });
    t.equal(c.status, 1, `${p} is not ignored`);
  }
  t.match(readFileSync(`${root}/LICENSE`, "utf8"), /^\s+Apache License\n\s+Version 2\.0, January 2004/, "LICENSE is the Apache 2.0 text");
  t.equal((JSON.parse(readFileSync(`${root}/package.json`, "utf8")) as { license: string }).license, "Apache-2.0", "matching package.json");
  t.end();
});
